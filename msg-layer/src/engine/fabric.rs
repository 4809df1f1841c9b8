//! What libfabric's messaging needs beyond MPI's: receives into the
//! caller's memory that keep a truncated message's first bytes (the
//! caller reports the truncation, the sender completes as usual), peeking
//! at and claiming unexpected messages (FI_PEEK, FI_CLAIM, FI_DISCARD), and
//! sends nobody takes a completion of (inject).

use std::sync::Arc;

use bytes::Bytes;

use super::p2p::MsgHead;
use super::{Completion, Engine, GetDst, Out, Outlet, ReqState, Status, Unexpected};
use crate::error::Error;
use crate::matching::{Envelope, Matched, PeerId, Posting, Rule, Source};
use crate::placement::RecvBuffer;
use crate::rma::MemoryRegion;
use crate::wire::{flags, Header, Kind, HEADER_LEN};

/// A message taken out of matching by `Endpoint::claim`: no receive
/// matches it any more; `Endpoint::irecv_claimed` receives it,
/// `Endpoint::discard` drops it. Its sender's eager credit comes back
/// only then, so a claimed message still counts against the sender.
#[derive(Debug)]
pub struct Claimed {
    env: Envelope,
    len: usize,
    msg: Unexpected,
}

impl Engine {
    /// Post a receive into `dst` (its length is the most accepted; a longer
    /// message fills it and is cut, see [`Engine::matched_into`]).
    pub fn irecv_into(&mut self, rule: Rule, dst: Arc<dyn MemoryRegion>) -> u64 {
        if let Source::Peer(p) = rule.source {
            // A peer that ended may have left messages it sent before.
            if let Some(e) = self.peer_error(p) {
                if self.matcher.probe(rule).is_none() {
                    return self.failed_req(e);
                }
            }
        }
        let r = self.reqs.alloc(ReqState::PostedInto {
            dst: GetDst(dst),
            post: self.matcher.next_post_id(),
        });
        if let Posting::Matched(m) = self.matcher.post(rule, r) {
            self.unexpected_taken(m.env.source, m.len, &m.msg);
            self.matched(m);
        }
        r
    }

    /// A receive into the caller's memory met its message. An eager
    /// payload is copied in and the receive completes; a rendezvous is
    /// asked for its first `dst.len()` bytes at most (the `Cts` says how
    /// many), which the transport places as for any receive. Either way a
    /// message longer than `dst` completes the receive with `len` =
    /// `dst.len()` and `msg_len` = the message's length, not an error.
    pub(super) fn matched_into(&mut self, recv: u64, mut status: Status, msg: Unexpected) {
        if let Some(ReqState::Multi(_)) = self.reqs.get(&recv) {
            return self.matched_multi(recv, status, msg);
        }
        let Some(ReqState::PostedInto { dst, .. }) = self.reqs.remove(&recv) else {
            return;
        };
        let dst = dst.0;
        let (source, len) = (status.source, status.msg_len);
        let n = len.min(dst.len());
        status.len = n;
        self.stats.received += 1;
        let sreq = match msg {
            Unexpected::Eager(packet) => {
                dst.write(0, &packet[HEADER_LEN..HEADER_LEN + n]);
                self.return_credit(source, (HEADER_LEN + len) as u64);
                self.spent.push(packet);
                let done = Completion { status, data: None };
                return self.reqs.insert(recv, ReqState::Done(Ok(done)));
            }
            Unexpected::Rts { sreq, .. } => sreq,
        };
        self.return_credit(source, HEADER_LEN as u64);
        let mut cts = Header::new(Kind::Cts);
        cts.id = sreq;
        cts.aux = recv;
        cts.len = n as u64;
        if n == 0 {
            // Nothing wanted (an empty buffer): the sender completes at once.
            cts.flags |= flags::REFUSED;
            let done = Completion { status, data: None };
            self.reqs.insert(recv, ReqState::Done(Ok(done)));
        } else {
            let buf = Arc::new(RecvBuffer::region(dst, n));
            self.placements
                .lock()
                .expect("placement registry")
                .insert(recv, buf.clone());
            self.reqs
                .insert(recv, ReqState::Receiving { buf, status, sreq });
        }
        self.push(source, Out::control(cts));
    }

    /// Take the earliest unexpected message `rule` accepts out of matching.
    pub fn claim(&mut self, rule: Rule) -> Option<(Status, Claimed)> {
        let (env, len, msg) = self.matcher.claim(rule)?;
        self.unexpected_taken(env.source, len, &msg);
        let status = Status::received(&env, len, msg.remote_data());
        Some((status, Claimed { env, len, msg }))
    }

    /// Receive a claimed message into `dst`, as [`Engine::irecv_into`]
    /// would have.
    pub fn irecv_claimed(&mut self, c: Claimed, dst: Arc<dyn MemoryRegion>) -> u64 {
        if matches!(c.msg, Unexpected::Rts { .. }) {
            // A rendezvous needs its sender; eager data is here already.
            if let Some(e) = self.peer_error(c.env.source) {
                return self.failed_req(e);
            }
        }
        let r = self.reqs.alloc(ReqState::PostedInto {
            dst: GetDst(dst),
            post: self.matcher.next_post_id(),
        });
        self.matched(Matched {
            recv: r,
            env: c.env,
            len: c.len,
            msg: c.msg,
        });
        r
    }

    /// Drop a claimed message: its credit goes back, and a rendezvous
    /// sender is told (a refusing `Cts`) so that its send completes.
    pub fn discard(&mut self, c: Claimed) {
        let source = c.env.source;
        match c.msg {
            Unexpected::Eager(packet) => {
                self.return_credit(source, (HEADER_LEN + c.len) as u64);
                self.spent.push(packet);
            }
            Unexpected::Rts { sreq, .. } => {
                if self.peer_error(source).is_some() {
                    return;
                }
                self.return_credit(source, HEADER_LEN as u64);
                let mut cts = Header::new(Kind::Cts);
                cts.id = sreq;
                cts.flags |= flags::REFUSED;
                self.push(source, Out::control(cts));
            }
        }
    }

    /// Send a message nobody takes the completion of (libfabric's inject),
    /// `data` copied: an eager one is handed to `o` at once when the peer's
    /// queue would do just that, its bytes copied into the packet head
    /// (no allocation up to [`super::SHORT_PREFIX`] bytes), and otherwise
    /// queued with no request; a rendezvous one has a request that is
    /// forgotten once done ([`Engine::reap_detached`]). A failure of the
    /// peer reaches the caller as the peer's end only. Fails at once for
    /// an unknown or failed peer.
    pub fn inject_via<O: Outlet + ?Sized>(
        &mut self,
        o: Option<&mut O>,
        p: PeerId,
        head: MsgHead,
        data: &[u8],
    ) -> Result<(), Error> {
        if let Some(e) = self.peer_error(p) {
            return Err(e);
        }
        if data.len() > self.cfg.eager_limit {
            let r = self.send_msg(p, head, Bytes::copy_from_slice(data), false);
            self.detached.push(r);
            return Ok(());
        }
        let mut hdr = head.header(Kind::Eager);
        hdr.len = data.len() as u64;
        let cost = HEADER_LEN + data.len();
        self.stats.eager_sent += 1;
        let empty = Bytes::new();
        if o.is_some_and(|o| self.send_now(o, p, hdr, data, &empty, false, cost as u64)) {
            return Ok(());
        }
        let mut out = Out::with_body(hdr, Bytes::copy_from_slice(data));
        out.cost = cost as u32;
        self.push(p, out);
        Ok(())
    }

    /// Forget the detached requests that completed, and hand the
    /// rendezvous messages that completed in multi-receive buffers to them.
    pub fn reap_detached(&mut self) {
        self.settle_multi_subs();
        if self.detached.is_empty() {
            return;
        }
        let mut detached = std::mem::take(&mut self.detached);
        detached.retain(|&r| !self.is_done(r) || self.take(r).is_none());
        self.detached = detached;
    }

    /// Detached requests not yet complete.
    #[cfg(test)]
    pub fn detached_len(&self) -> usize {
        self.detached.len()
    }
}
