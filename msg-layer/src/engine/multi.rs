//! Multi-receive buffers (libfabric's FI_MULTI_RECV, which MPICH posts for
//! its active messages): one posted buffer takes untagged messages one
//! after another, each placed at the next free offset and reported as a
//! piece of its own, and is released (taken out of matching) once less
//! than `min_free` bytes, or none, are left. The buffer stays at its place among
//! the posted receives while it takes messages, so ordering against other
//! receives is the usual. An eager message is copied in at once; a
//! rendezvous one is received, as `irecv_into` would, into its share of
//! the buffer (reserved when it matches), and its piece comes when its
//! data is in.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Completion, Engine, GetDst, ReqState, Status, Unexpected};
use crate::error::Error;
use crate::matching::{PostId, Rule, Select, Source};
use crate::rma::MemoryRegion;
use crate::wire::HEADER_LEN;

/// Names a multi-receive buffer ([`crate::Endpoint::irecv_multi`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MultiRecv(pub(crate) u64);

/// One message received into a multi-receive buffer, or the buffer's end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MultiPiece {
    /// The message's status (`len` bytes at `offset`; `msg_len` the
    /// sender's length, more when it was cut to the space left), or why
    /// the buffer ended without one (cancelled, its peer failed).
    pub result: Result<Status, Error>,
    /// Where in the buffer the message starts.
    pub offset: usize,
    /// The buffer is released: no later piece comes, and the caller may
    /// reuse it (libfabric's FI_MULTI_RECV flag on a completion).
    pub last: bool,
}

#[derive(Debug)]
pub(crate) struct MultiState {
    dst: GetDst,
    min_free: usize,
    /// Bytes taken (placed or reserved) from the start.
    used: usize,
    /// Rendezvous messages still arriving into it.
    pending: usize,
    /// Out of matching: takes no more messages.
    released: bool,
    /// The last piece has been made.
    ended: bool,
    post: PostId,
    pieces: VecDeque<MultiPiece>,
}

/// A share of a multi-receive buffer, where one rendezvous message lands.
struct Window {
    inner: Arc<dyn MemoryRegion>,
    base: usize,
    len: usize,
}

impl MemoryRegion for Window {
    fn len(&self) -> usize {
        self.len
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.inner.write(self.base + offset, src);
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        self.inner.read(self.base + offset, dst);
    }
}

impl Engine {
    /// Post a multi-receive buffer for untagged messages from `source`.
    /// Messages waiting already go in first, in arrival order.
    pub fn irecv_multi(
        &mut self,
        source: Source,
        dst: Arc<dyn MemoryRegion>,
        min_free: usize,
    ) -> MultiRecv {
        let rule = Rule {
            source,
            select: Select::Untagged,
        };
        let r = self.reqs.alloc(ReqState::Multi(Box::new(MultiState {
            dst: GetDst(dst),
            min_free,
            used: 0,
            pending: 0,
            released: false,
            ended: false,
            post: self.matcher.next_post_id(),
            pieces: VecDeque::new(),
        })));
        let post = self.matcher.post_kept(rule, r);
        debug_assert!(matches!(self.reqs.get(&r), Some(ReqState::Multi(m)) if m.post == post));
        while self.multi_open(r) {
            let Some((env, len, msg)) = self.matcher.claim(rule) else {
                break;
            };
            self.unexpected_taken(env.source, len, &msg);
            let status = Status::received(&env, len, msg.remote_data());
            self.matched_multi(r, status, msg);
        }
        MultiRecv(r)
    }

    fn multi_open(&self, r: u64) -> bool {
        matches!(self.reqs.get(&r), Some(ReqState::Multi(m)) if !m.released)
    }

    /// A message matched the multi-receive buffer `r`: it takes the next
    /// free bytes (cut to what is left).
    pub(super) fn matched_multi(&mut self, r: u64, mut status: Status, msg: Unexpected) {
        let Some(ReqState::Multi(m)) = self.reqs.get_mut(&r) else {
            return;
        };
        let offset = m.used;
        let n = status.msg_len.min(m.dst.0.len() - offset);
        m.used += n;
        let dst = m.dst.0.clone();
        let free = m.dst.0.len() - m.used;
        let release = free < m.min_free || free == 0;
        let post = m.post;
        if release {
            m.released = true;
        }
        status.len = n;
        match msg {
            Unexpected::Eager(packet) => {
                dst.write(offset, &packet[HEADER_LEN..HEADER_LEN + n]);
                let credit = (HEADER_LEN + status.msg_len) as u64;
                let source = status.source;
                self.multi_activity.pieces.fetch_add(1, Ordering::Release);
                m.pieces.push_back(MultiPiece {
                    result: Ok(status),
                    offset,
                    last: false,
                });
                self.stats.received += 1;
                self.return_credit(source, credit);
                self.spent.push(packet);
            }
            rts @ Unexpected::Rts { .. } => {
                m.pending += 1;
                let window = Window {
                    inner: dst,
                    base: offset,
                    len: n,
                };
                let sub = self.reqs.alloc(ReqState::PostedInto {
                    dst: GetDst(Arc::new(window)),
                    post: PostId(0),
                });
                self.multi_subs.push((sub, r, offset));
                self.multi_activity.subs.store(true, Ordering::Release);
                self.matched_into(sub, status, rts);
            }
        }
        if release {
            self.matcher.cancel(post);
        }
        self.multi_settle(r);
    }

    /// Mark the last piece of a released buffer once nothing more arrives
    /// into it.
    fn multi_settle(&mut self, r: u64) {
        let Some(ReqState::Multi(m)) = self.reqs.get_mut(&r) else {
            return;
        };
        if m.released && m.pending == 0 && !m.ended {
            m.ended = true;
            self.multi_activity.pieces.fetch_add(1, Ordering::Release);
            match m.pieces.back_mut() {
                Some(last) => last.last = true,
                None => m.pieces.push_back(MultiPiece {
                    result: Err(Error::Cancelled),
                    offset: m.used,
                    last: true,
                }),
            }
        }
    }

    /// Rendezvous messages that completed into multi-receive buffers
    /// become their pieces.
    pub(super) fn settle_multi_subs(&mut self) {
        if self.multi_subs.is_empty() {
            return;
        }
        let mut subs = std::mem::take(&mut self.multi_subs);
        subs.retain(|&(sub, r, offset)| {
            if !self.is_done(sub) {
                return true;
            }
            let result = match self.take(sub) {
                Some(res) => res.map(|c: Completion| c.status),
                None => return true,
            };
            if let Some(ReqState::Multi(m)) = self.reqs.get_mut(&r) {
                m.pending -= 1;
                self.multi_activity.pieces.fetch_add(1, Ordering::Release);
                m.pieces.push_back(MultiPiece {
                    result,
                    offset,
                    last: false,
                });
                self.multi_settle(r);
            }
            false
        });
        subs.append(&mut self.multi_subs);
        self.multi_activity
            .subs
            .store(!subs.is_empty(), Ordering::Release);
        self.multi_subs = subs;
    }

    /// The pieces of `m` completed since the last call, in order; `None`
    /// once the buffer has ended and its last piece was taken (or for a
    /// name that was never a buffer).
    pub fn take_multi(&mut self, m: MultiRecv) -> Option<Vec<MultiPiece>> {
        self.settle_multi_subs();
        let Some(ReqState::Multi(st)) = self.reqs.get_mut(&m.0) else {
            return None;
        };
        let out: Vec<MultiPiece> = st.pieces.drain(..).collect();
        if st.ended {
            self.finish(m.0, Err(Error::Cancelled));
            let _ = self.take(m.0);
        }
        Some(out)
    }

    /// Release a multi-receive buffer now: it takes no more messages, and
    /// its last piece comes once those it took are in. False when it was
    /// released already.
    pub fn cancel_multi(&mut self, m: MultiRecv) -> bool {
        let Some(ReqState::Multi(st)) = self.reqs.get_mut(&m.0) else {
            return false;
        };
        if st.released {
            return false;
        }
        st.released = true;
        let post = st.post;
        self.matcher.cancel(post);
        self.multi_settle(m.0);
        true
    }

    /// A multi-receive buffer's peer failed: it ends, with the failure as
    /// its last piece. False when `r` is no such buffer.
    pub(super) fn multi_failed(&mut self, r: u64, err: &Error) -> bool {
        let Some(ReqState::Multi(m)) = self.reqs.get_mut(&r) else {
            return false;
        };
        m.released = true;
        if !m.ended {
            self.multi_activity.pieces.fetch_add(1, Ordering::Release);
            m.pieces.push_back(MultiPiece {
                result: Err(err.clone()),
                offset: m.used,
                last: false,
            });
        }
        self.multi_settle(r);
        true
    }
}
