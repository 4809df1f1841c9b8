//! An endpoint's state under the runtime's lock: what it is bound to, the
//! peers it made of address-vector entries, and its pending operations;
//! and the routing of the message layer's completions into completion
//! queues and counters.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use app_runtime::{Api, Cx};
use msg_layer::{Completion, Error, Event, PeerEnd, PeerId, Request, Status};

use crate::abi::*;
use crate::addr::Name;
use crate::av::AvState;
use crate::cntr::CntrState;
use crate::cq::{CqState, Entry, ErrEntry};

/// A completion queue an endpoint is bound to, and how.
#[derive(Clone)]
pub struct CqBinding {
    pub cq: Arc<CqState>,
    /// FI_SELECTIVE_COMPLETION: only operations with FI_COMPLETION report
    /// success.
    pub selective: bool,
}

/// A pending operation.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    pub context: *mut c_void,
    /// FI_SEND or FI_RECV, with FI_MSG or FI_TAGGED.
    pub flags: u64,
    pub buf: *mut c_void,
    /// Report success in the CQ (errors are always reported).
    pub report: bool,
    /// A send whose body the transport holds in the application's buffer:
    /// the token of its release notice. The send completes for the
    /// application once both the request completed and the transport let
    /// go of the buffer (libfabric's rule: a completed send's buffer is
    /// the application's again).
    pub lent: Option<u64>,
}

/// A lent send: its request's result once known, and whether the buffer
/// is released.
#[derive(Default)]
pub struct Lending {
    pub request: Option<Request>,
    pub result: Option<Result<Completion, Error>>,
    pub released: bool,
}

/// A posted FI_MULTI_RECV buffer.
pub struct Multi {
    pub m: msg_layer::MultiRecv,
    pub context: *mut c_void,
    pub buf: *mut c_void,
}

/// What the runtime's lock guards.
#[derive(Default)]
pub struct EpApi {
    pub av: Option<Arc<AvState>>,
    pub tx_cq: Option<CqBinding>,
    pub rx_cq: Option<CqBinding>,
    pub tx_cntr: Option<Arc<CntrState>>,
    pub rx_cntr: Option<Arc<CntrState>>,
    pub read_cntr: Option<Arc<CntrState>>,
    pub write_cntr: Option<Arc<CntrState>>,
    /// AV entries made peers, and back.
    pub peers: HashMap<u64, PeerId>,
    pub fi_addr_of: HashMap<PeerId, u64>,
    pub ops: HashMap<Request, Op>,
    /// Multi-receive buffers, polled after a pump when the message
    /// layer's multi stamp changed.
    pub multis: Vec<Multi>,
    /// The multi stamp the buffers were last polled at.
    pub multi_seen: Option<u64>,
    /// Lent sends by release token.
    pub lendings: HashMap<u64, Lending>,
    pub next_token: u64,
    /// Messages taken with FI_PEEK|FI_CLAIM, by the context they were
    /// claimed with.
    pub claimed: HashMap<usize, msg_layer::Claimed>,
}

// SAFETY: the raw pointers in `ops` are application contexts and buffers
// that the provider hands back or writes through the message layer, from
// whichever thread holds the runtime's lock.
unsafe impl Send for EpApi {}

impl EpApi {
    /// The `fi_addr_t` of a message-layer peer: the index of its name in
    /// the bound vector, FI_ADDR_NOTAVAIL when it is not there.
    pub fn fi_addr(&mut self, ep: Option<&app_runtime::Ep>, peer: PeerId) -> u64 {
        if let Some(&a) = self.fi_addr_of.get(&peer) {
            return a;
        }
        let (Some(av), Some(ep)) = (&self.av, ep) else {
            return FI_ADDR_NOTAVAIL;
        };
        let a = ep
            .peer_addr(peer)
            .and_then(|addr| Name::of(&addr))
            .map(|n| av.index(&n))
            .unwrap_or(FI_ADDR_NOTAVAIL);
        if a != FI_ADDR_NOTAVAIL {
            self.fi_addr_of.insert(peer, a);
        }
        a
    }

    fn complete(&mut self, cx: &mut Cx<'_>, op: Op, result: Result<Completion, Error>) {
        let recv = op.flags & FI_RECV != 0;
        let (cq, cntr) = if recv {
            (self.rx_cq.clone(), self.rx_cntr.clone())
        } else if op.flags & FI_READ != 0 {
            (self.tx_cq.clone(), self.read_cntr.clone())
        } else if op.flags & FI_WRITE != 0 {
            (self.tx_cq.clone(), self.write_cntr.clone())
        } else {
            (self.tx_cq.clone(), self.tx_cntr.clone())
        };
        // An inject completes silently (counters only); its failure is
        // still an error entry.
        let op = Op {
            report: op.report && op.flags & FI_INJECT == 0,
            ..op
        };
        let quiet = op.flags & FI_INJECT != 0;
        let base = Entry {
            context: op.context,
            flags: op.flags,
            len: 0,
            buf: std::ptr::null_mut(),
            data: 0,
            tag: 0,
            src: FI_ADDR_NOTAVAIL,
        };
        let failure = match result {
            Ok(c) if recv => {
                let st = c.status;
                let mut e = self.received(cx, op, &st, base);
                if st.msg_len > st.len {
                    e.flags &= !FI_REMOTE_CQ_DATA;
                    Some(ErrEntry {
                        entry: e,
                        olen: st.msg_len - st.len,
                        err: errno::FI_ETRUNC,
                        prov_errno: errno::FI_ETRUNC,
                        why: format!(
                            "message of {} bytes truncated to the {}-byte buffer",
                            st.msg_len, st.len
                        ),
                    })
                } else {
                    if let Some(c) = &cntr {
                        c.value.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    }
                    if let Some(b) = cq.as_ref().filter(|b| op.report || !b.selective) {
                        b.cq.push(e);
                    }
                    None
                }
            }
            Ok(_) => {
                if let Some(c) = &cntr {
                    c.value.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                }
                if let Some(b) = cq
                    .as_ref()
                    .filter(|b| !quiet && (op.report || !b.selective))
                {
                    b.cq.push(Entry {
                        flags: op.flags & !FI_INJECT,
                        ..base
                    });
                }
                None
            }
            Err(e) => Some(ErrEntry {
                entry: Entry {
                    buf: if recv { op.buf } else { std::ptr::null_mut() },
                    ..base
                },
                olen: 0,
                err: code(&e),
                prov_errno: code(&e),
                why: e.to_string(),
            }),
        };
        if let Some(f) = failure {
            if let Some(c) = &cntr {
                c.errors.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
            if let Some(b) = &cq {
                b.cq.push_err(f);
            }
        }
    }

    /// The entry of a completed receive.
    fn received(&mut self, cx: &mut Cx<'_>, op: Op, st: &Status, base: Entry) -> Entry {
        let src = self.fi_addr(cx.ep(), st.source);
        let mut flags = op.flags;
        if st.data.is_some() {
            flags |= FI_REMOTE_CQ_DATA;
        }
        Entry {
            flags,
            len: st.len,
            buf: op.buf,
            data: st.data.unwrap_or(0),
            tag: if op.flags & FI_TAGGED != 0 {
                (u64::from(st.context) << 32) | u64::from(st.tag)
            } else {
                0
            },
            src,
            ..base
        }
    }
}

impl EpApi {
    /// Completions of the multi-receive buffers: one entry per message
    /// (at its place in the buffer), FI_MULTI_RECV on the one that
    /// releases the buffer. True when there was any.
    fn poll_multis(&mut self, cx: &mut Cx<'_>) -> bool {
        let Some(ep) = cx.ep() else {
            return false;
        };
        let Some(cq) = self.rx_cq.clone() else {
            return false;
        };
        // Nothing new since the last look: no lock taken, no buffer walked
        // (MPICH keeps eight buffers posted; each look locks the engine).
        let stamp = ep.multi_stamp();
        if stamp.is_some() && stamp == self.multi_seen {
            return false;
        }
        self.multi_seen = stamp;
        let mut any = false;
        let mut i = 0;
        while i < self.multis.len() {
            let Some(pieces) = ep.poll_multi(self.multis[i].m) else {
                self.multis.swap_remove(i);
                continue;
            };
            let (context, buf) = (self.multis[i].context, self.multis[i].buf);
            for p in pieces {
                any = true;
                let last = if p.last { FI_MULTI_RECV } else { 0 };
                let at = buf.cast::<u8>().wrapping_add(p.offset).cast::<c_void>();
                match p.result {
                    Ok(st) => {
                        let e = Entry {
                            context,
                            flags: FI_RECV
                                | FI_MSG
                                | last
                                | if st.data.is_some() {
                                    FI_REMOTE_CQ_DATA
                                } else {
                                    0
                                },
                            len: st.len,
                            buf: at,
                            data: st.data.unwrap_or(0),
                            tag: 0,
                            src: self.fi_addr(Some(ep), st.source),
                        };
                        if let Some(c) = &self.rx_cntr {
                            c.value.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                        }
                        if st.msg_len > st.len {
                            cq.cq.push_err(ErrEntry {
                                entry: e,
                                olen: st.msg_len - st.len,
                                err: errno::FI_ETRUNC,
                                prov_errno: errno::FI_ETRUNC,
                                why: format!(
                                    "message of {} bytes cut to the {} left in the buffer",
                                    st.msg_len, st.len
                                ),
                            });
                        } else {
                            cq.cq.push(e);
                        }
                    }
                    Err(err) => cq.cq.push_err(ErrEntry {
                        entry: Entry {
                            context,
                            flags: FI_RECV | FI_MSG | last,
                            len: 0,
                            buf: at,
                            data: 0,
                            tag: 0,
                            src: FI_ADDR_NOTAVAIL,
                        },
                        olen: 0,
                        err: code(&err),
                        prov_errno: code(&err),
                        why: err.to_string(),
                    }),
                }
            }
            i += 1;
        }
        any
    }
}

impl Api for EpApi {
    fn after_pump(&mut self, cx: &mut Cx<'_>) -> bool {
        !self.multis.is_empty() && self.poll_multis(cx)
    }

    fn route(&mut self, cx: &mut Cx<'_>, ev: Event) {
        match ev {
            Event::Completed { request, result } => {
                let Some(op) = self.ops.get(&request).copied() else {
                    return;
                };
                if let Some(token) = op.lent {
                    let l = self.lendings.entry(token).or_default();
                    if !l.released {
                        l.request = Some(request);
                        l.result = Some(result);
                        return;
                    }
                    self.lendings.remove(&token);
                }
                self.ops.remove(&request);
                self.complete(cx, op, result);
            }
            Event::Released(token) => {
                let l = self.lendings.entry(token).or_default();
                l.released = true;
                if let (Some(request), Some(_)) = (l.request, &l.result) {
                    let result = l.result.take().expect("checked");
                    self.lendings.remove(&token);
                    if let Some(op) = self.ops.remove(&request) {
                        self.complete(cx, op, result);
                    }
                }
            }
            Event::Message(msg) => cx.recycle(msg),
            Event::PeerEnded { .. } => {}
        }
    }
}

/// The fi_errno code of a message-layer error.
pub fn code(e: &Error) -> i32 {
    match e {
        Error::Truncated { .. } => errno::FI_ETRUNC,
        Error::Cancelled => errno::FI_ECANCELED,
        Error::PeerFailed {
            end: PeerEnd::Closed,
            ..
        } => errno::FI_ENOTCONN,
        Error::PeerFailed {
            end: PeerEnd::Failed(cause),
            ..
        } => {
            let text = cause.to_string();
            if text.contains("reset") {
                errno::FI_ECONNRESET
            } else if text.contains("refused") {
                errno::FI_ECONNREFUSED
            } else {
                errno::FI_ETIMEDOUT
            }
        }
        Error::UnknownPeer(_) => errno::FI_EINVAL,
        Error::UnknownRequest(_) => errno::FI_EINVAL,
        Error::Timeout => errno::FI_ETIMEDOUT,
        Error::RmaRefused(_) => errno::FI_EACCES,
        Error::TooLong { .. } => errno::FI_EMSGSIZE,
        Error::Transport(_) => errno::FI_EIO,
        Error::Config(_) => errno::FI_EINVAL,
    }
}
