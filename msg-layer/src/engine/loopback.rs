//! Messages an endpoint sends to itself (Open MPI's pml cm and libfabric
//! applications address their own rank through the provider): its own
//! address is a peer like any other, whose queue is not handed to the
//! transport but taken in by this engine at the next transmit, packet by
//! packet as they would have arrived. Matching, credit, rendezvous
//! (copied), active messages and RMA all run their usual course, and a
//! message to self keeps its place in order behind the ones posted before.

use super::peers::PeerState;
use super::{Completion, Engine, ReqState};
use crate::matching::PeerId;

impl Engine {
    /// This endpoint as its own peer: ready at once, granted the window it
    /// grants every peer.
    pub fn own_peer(&mut self) -> PeerId {
        if let Some(p) = self.own {
            return p;
        }
        let p = self.new_peer(Some(self.local), PeerState::Ready);
        self.peers[p as usize].credit = self.cfg.eager_window as u64;
        self.own = Some(p);
        p
    }

    /// Take in what waits in our own peer's queue, in order, within its
    /// credit (given back at once: what we owe ourselves we may use).
    pub(super) fn deliver_own(&mut self, p: PeerId) {
        loop {
            let peer = &mut self.peers[p as usize];
            peer.credit += std::mem::take(&mut peer.owed);
            peer.stalled = false;
            let Some(out) = peer.queue.front() else {
                return;
            };
            if out.cost as u64 > peer.credit {
                // Waits for receives to take the messages buffered before.
                self.stats.credit_stalls += 1;
                peer.stalled = true;
                return;
            }
            let out = peer.queue.pop_front().expect("front exists");
            peer.credit -= out.cost as u64;
            let hdr = out.hdr;
            let mut packet = Vec::with_capacity(out.packet_len());
            packet.extend_from_slice(&hdr.encode());
            packet.extend_from_slice(&out.prefix);
            packet.extend_from_slice(&out.body);
            if let Some(r) = out.completes {
                if let Some(ReqState::Send { status, .. }) = self.reqs.remove(&r) {
                    let done = Completion { status, data: None };
                    self.reqs.insert(r, ReqState::Done(Ok(done)));
                }
            }
            self.handle_from(p, &hdr, packet);
        }
    }
}
