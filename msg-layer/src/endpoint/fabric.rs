//! The endpoint's calls for the libfabric provider: sends in a tagged or
//! untagged space with remote data, inject, receives into the caller's
//! memory that report truncation instead of failing, and peek, claim and
//! discard of unexpected messages. They share the engine, its matching
//! queues and its progress with the MPI-style calls.

use std::sync::Arc;

use bytes::Bytes;

use super::{Core, Endpoint};
use crate::engine::{Claimed, MsgHead, MultiPiece, MultiRecv};
use crate::error::Error;
use crate::matching::{PeerId, Rule, Select, Source, Space};
use crate::rma::MemoryRegion;
use crate::transport::Transport;
use crate::{Request, Status};

impl<T: Transport> Endpoint<T> {
    /// Send `data` in `space` with optional remote data. `lent` as in
    /// isend_lent.
    pub fn isend_to(
        &self,
        peer: PeerId,
        space: Space,
        remote_data: Option<u64>,
        data: Bytes,
        lent: bool,
    ) -> Request {
        let head = MsgHead::fabric(space, remote_data);
        if lent {
            return self.post(|e| e.send_msg(peer, head, data, true));
        }
        Request(
            self.core()
                .post_to(peer, data.len(), |e, t| e.send_msg_via(t, peer, head, data)),
        )
    }

    /// The same, with no completion to take (libfabric's inject): the body
    /// is copied or owned, the request is forgotten by the engine when
    /// done; a failure of the peer shows as Event::PeerEnded /
    /// on_peer_failure only. Fails at once for an unknown or failed peer.
    pub fn inject_to(
        &self,
        peer: PeerId,
        space: Space,
        remote_data: Option<u64>,
        data: &[u8],
    ) -> Result<(), Error> {
        let head = MsgHead::fabric(space, remote_data);
        self.core()
            .post_to(peer, data.len(), |e, t| e.inject_via(t, peer, head, data))
    }

    /// Receive into caller memory `dst` (its len is the most accepted).
    /// Eager payloads are copied in; rendezvous data is placed by the
    /// transport as `get_into` does. On truncation the buffer holds the
    /// message's first `dst.len()` bytes and the request completes Ok with
    /// `status.len = dst.len()` and `status.msg_len` = the full length (the
    /// caller reports truncation); the sender completes normally. The
    /// completion carries no data. `dst` must not be accessed until then.
    pub fn irecv_into(&self, source: Source, sel: Select, dst: Arc<dyn MemoryRegion>) -> Request {
        let rule = Rule {
            source,
            select: sel,
        };
        self.recv_post(|e| e.irecv_into(rule, dst))
    }

    /// What a receive with (source, sel) would get now (FI_PEEK). Makes one
    /// round of progress like iprobe.
    pub fn iprobe_sel(&self, source: Source, sel: Select) -> Option<Status> {
        let rule = Rule {
            source,
            select: sel,
        };
        self.after_progress(|_| true, |c| c.engine.iprobe(rule))
    }

    /// Take the earliest unexpected message matching (source, sel) out of
    /// matching (FI_PEEK|FI_CLAIM): no later receive can match it. Makes
    /// one round of progress like iprobe.
    pub fn claim(&self, source: Source, sel: Select) -> Option<(Status, Claimed)> {
        let rule = Rule {
            source,
            select: sel,
        };
        self.after_progress(|_| true, |c| c.engine.claim(rule))
    }

    /// Receive a claimed message into dst (FI_CLAIM), same completion rules
    /// as irecv_into.
    pub fn irecv_claimed(&self, claimed: Claimed, dst: Arc<dyn MemoryRegion>) -> Request {
        self.recv_post(|e| e.irecv_claimed(claimed, dst))
    }

    /// Drop a claimed message (FI_DISCARD); a rendezvous sender still
    /// completes.
    pub fn discard(&self, claimed: Claimed) {
        let mut c = self.core();
        let Core { engine, t, .. } = &mut *c;
        engine.discard(claimed);
        engine.transmit(t);
    }

    /// Post a multi-receive buffer (FI_MULTI_RECV): untagged messages
    /// from `source` go into `dst` one after another, each reported as a
    /// [`MultiPiece`] with its offset and length, until less than
    /// `min_free` bytes are left; the piece that says `last` releases the
    /// buffer. A message longer than the space left is cut to it (its
    /// `msg_len` says so). Messages waiting already go in first.
    pub fn irecv_multi(
        &self,
        source: Source,
        dst: Arc<dyn MemoryRegion>,
        min_free: usize,
    ) -> MultiRecv {
        let mut c = self.core();
        let Core { engine, t, .. } = &mut *c;
        let m = engine.irecv_multi(source, dst, min_free);
        engine.transmit(t);
        m
    }

    /// The pieces of `m` completed since the last call, in order, after a
    /// round of progress; `None` once its last piece was taken.
    pub fn test_multi(&self, m: MultiRecv) -> Option<Vec<MultiPiece>> {
        self.after_progress(|_| true, |c| c.engine.take_multi(m))
    }

    /// [`Endpoint::test_multi`] without the round of progress: what the
    /// rounds made so far (a caller that drives progress itself, e.g. from
    /// its pump, looks at every buffer after each round).
    pub fn poll_multi(&self, m: MultiRecv) -> Option<Vec<MultiPiece>> {
        self.core().engine.take_multi(m)
    }

    /// Changes whenever a multi-receive buffer of this endpoint may have
    /// new pieces (`None`: it always may, for now), read without the lock:
    /// a pump that polls its buffers after every round skips them while
    /// the stamp is the one it last saw (read the stamp before polling).
    pub fn multi_stamp(&self) -> Option<u64> {
        self.shared.multi_activity.stamp()
    }

    /// Release a multi-receive buffer now (FI_CANCEL): it takes no more
    /// messages, and a last piece comes once those it took are in (an
    /// `Err(Cancelled)` one if none is left to carry the flag).
    pub fn cancel_multi(&self, m: MultiRecv) -> bool {
        self.core().engine.cancel_multi(m)
    }

    /// Post a receive and hand over what it sends (the `Cts` of an
    /// announced rendezvous it matched), without a round of progress: the
    /// wait or test that follows makes it.
    fn recv_post(&self, start: impl FnOnce(&mut crate::engine::Engine) -> u64) -> Request {
        let mut c = self.core();
        let Core { engine, t, .. } = &mut *c;
        let r = start(engine);
        engine.transmit(t);
        Request(r)
    }
}
