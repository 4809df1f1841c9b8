//! Point-to-point: MPI matching, the eager protocol (the payload rides with
//! the envelope and waits, bounded by credit, when unexpected) and the
//! rendezvous protocol (RTS, CTS from the matched receive, data placed into
//! the receive buffer, DONE back to the sender).

use std::sync::Arc;

use bytes::Bytes;

use super::{Completion, Engine, Out, Outlet, ReqState, Status, Unexpected};
use crate::error::Error;
use crate::matching::{Matched, PeerId, Posting, Rule, Source, Space};
use crate::placement::RecvBuffer;
use crate::wire::{flags, Header, Kind, HEADER_LEN};

/// What a message's `Eager` or `Rts` header says besides its kind and
/// lengths: where it goes in the receiver's matching (an MPI tag and
/// context, or libfabric's 64-bit tag or untagged space) and the remote
/// data it carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct MsgHead {
    pub tag: u32,
    pub context: u32,
    pub untagged: bool,
    pub remote_data: Option<u64>,
}

impl MsgHead {
    /// An MPI message: tag and context, no remote data.
    #[inline(always)]
    pub fn mpi(tag: u32, context: u32) -> MsgHead {
        MsgHead {
            tag,
            context,
            untagged: false,
            remote_data: None,
        }
    }

    /// A libfabric message in `space`.
    pub fn fabric(space: Space, remote_data: Option<u64>) -> MsgHead {
        let (tag, context, untagged) = space.envelope_fields();
        MsgHead {
            tag,
            context,
            untagged,
            remote_data,
        }
    }

    /// The header of a `kind` packet carrying this message.
    #[inline(always)]
    pub(super) fn header(&self, kind: Kind) -> Header {
        let mut h = Header::tagged(kind, self.tag, self.context);
        if self.untagged {
            h.flags |= flags::UNTAGGED;
        }
        if let Some(d) = self.remote_data {
            h.flags |= flags::REMOTE_DATA;
            h.aux = d;
        }
        h
    }

    /// The sender's status of a message of `len` bytes to `p`.
    fn send_status(&self, p: PeerId, len: usize) -> Status {
        Status {
            source: p,
            tag: self.tag,
            context: self.context,
            len,
            data: None,
            msg_len: len,
        }
    }
}

/// The remote data an `Eager` or `Rts` header carries.
#[inline(always)]
pub(super) fn remote_data(hdr: &Header) -> Option<u64> {
    (hdr.flags & flags::REMOTE_DATA != 0).then_some(hdr.aux)
}

impl Engine {
    #[cfg(test)]
    pub fn isend(&mut self, p: PeerId, tag: u32, context: u32, data: Bytes) -> u64 {
        self.isend_with(p, tag, context, data, false)
    }

    /// [`Engine::isend`], handing an eager message to `o` at once when
    /// going through the peer's queue would do just that (see
    /// [`Engine::eager_now`]): no queue, no attention list, no second
    /// state for the request.
    pub fn isend_via<O: Outlet + ?Sized>(
        &mut self,
        o: Option<&mut O>,
        p: PeerId,
        tag: u32,
        context: u32,
        data: Bytes,
    ) -> u64 {
        self.send_msg_via(o, p, MsgHead::mpi(tag, context), data)
    }

    /// [`Engine::isend_via`] of a message with any [`MsgHead`].
    pub fn send_msg_via<O: Outlet + ?Sized>(
        &mut self,
        o: Option<&mut O>,
        p: PeerId,
        head: MsgHead,
        data: Bytes,
    ) -> u64 {
        if let Some(r) = o.and_then(|o| self.eager_now(o, p, &head, &data)) {
            return r;
        }
        self.send_msg(p, head, data, false)
    }

    /// Hand an eager message to `o` now, as [`Engine::transmit`] would hand
    /// it from the peer's queue: only when nothing waits to be sent to any
    /// peer (the transport then sees the packets in the same order), the
    /// peer is connected and ready, and its credit covers the message.
    /// `None` otherwise, or when `o` refuses it: the caller then queues it
    /// as usual, and the next transmit meets the refusal and handles it.
    fn eager_now<O: Outlet + ?Sized>(
        &mut self,
        o: &mut O,
        p: PeerId,
        head: &MsgHead,
        data: &Bytes,
    ) -> Option<u64> {
        if data.len() > self.cfg.eager_limit {
            return None;
        }
        let mut hdr = head.header(Kind::Eager);
        hdr.len = data.len() as u64;
        let cost = (HEADER_LEN + data.len()) as u64;
        if !self.send_now(o, p, hdr, &[], data, false, cost) {
            return None;
        }
        self.stats.eager_sent += 1;
        let status = head.send_status(p, data.len());
        Some(self.new_req(ReqState::Done(Ok(Completion { status, data: None }))))
    }

    /// [`Engine::isend`]; `lent`: the caller waits for the transport to
    /// release `data`. An eager packet then asks for a prompt
    /// acknowledgement; rendezvous data needs none (the receiver's DONE
    /// carries it).
    pub fn isend_with(
        &mut self,
        p: PeerId,
        tag: u32,
        context: u32,
        data: Bytes,
        lent: bool,
    ) -> u64 {
        self.send_msg(p, MsgHead::mpi(tag, context), data, lent)
    }

    /// [`Engine::isend_with`] of a message with any [`MsgHead`].
    pub fn send_msg(&mut self, p: PeerId, head: MsgHead, data: Bytes, lent: bool) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = head.send_status(p, data.len());
        if data.len() <= self.cfg.eager_limit {
            let r = self.new_req(ReqState::Send {
                peer: p,
                rndv: None,
                status,
            });
            let mut hdr = head.header(Kind::Eager);
            hdr.len = data.len() as u64;
            let cost = (HEADER_LEN + data.len()) as u32;
            self.stats.eager_sent += 1;
            self.push(
                p,
                Out {
                    hdr,
                    body: data,
                    prefix: Bytes::new(),
                    cost,
                    completes: Some(r),
                    awaited: lent,
                },
            );
            r
        } else {
            let len = data.len() as u64;
            let r = self.new_req(ReqState::Send {
                peer: p,
                rndv: Some(data),
                status,
            });
            let mut hdr = head.header(Kind::Rts);
            hdr.id = r;
            hdr.len = len;
            self.stats.rndv_sent += 1;
            self.push(
                p,
                Out {
                    hdr,
                    body: Bytes::new(),
                    prefix: Bytes::new(),
                    cost: HEADER_LEN as u32,
                    completes: None,
                    awaited: false,
                },
            );
            r
        }
    }

    /// Post a receive into `buf`. Always inlined into the endpoint's
    /// post, its one caller: the pattern and buffer are then not passed
    /// along by value through a second call.
    #[inline(always)]
    pub fn irecv(&mut self, rule: impl Into<Rule>, buf: Vec<u8>) -> u64 {
        let rule = rule.into();
        if let Source::Peer(p) = rule.source {
            // A peer that ended may have left messages it sent before.
            if let Some(e) = self.peer_error(p) {
                if self.matcher.probe(rule).is_none() {
                    return self.failed_req(e);
                }
            }
        }
        // Under the id the matcher gives it if it queues (if it matches at
        // once, the state is replaced before anyone reads the id).
        let r = self.reqs.alloc(ReqState::Posted {
            buf,
            post: self.matcher.next_post_id(),
        });
        match self.matcher.post(rule, r) {
            Posting::Queued(post) => debug_assert!(matches!(
                self.reqs.get(&r),
                Some(ReqState::Posted { post: p, .. }) if *p == post
            )),
            Posting::Matched(m) => {
                self.unexpected_taken(m.env.source, m.len, &m.msg);
                self.matched(m);
            }
        }
        r
    }

    /// A message left the unexpected queue: it no longer counts as buffered
    /// (its credit goes back when it is received or discarded).
    pub(super) fn unexpected_taken(&mut self, source: PeerId, len: usize, msg: &Unexpected) {
        let cost = match msg {
            Unexpected::Eager(_) => HEADER_LEN + len,
            Unexpected::Rts { .. } => HEADER_LEN,
        };
        self.peers[source as usize].unexpected -= cost;
        self.unexpected_bytes -= cost;
    }

    /// Cancel a posted receive that has not matched. True when cancelled.
    pub fn cancel(&mut self, r: u64) -> bool {
        let post = match self.reqs.get(&r) {
            Some(ReqState::Posted { post, .. } | ReqState::PostedInto { post, .. }) => post,
            _ => return false,
        };
        if self.matcher.cancel(*post).is_some() {
            self.finish(r, Err(Error::Cancelled));
            true
        } else {
            false
        }
    }

    pub fn iprobe(&self, rule: impl Into<Rule>) -> Option<Status> {
        self.matcher
            .probe(rule)
            .map(|(env, len, msg)| Status::received(&env, len, msg.remote_data()))
    }

    /// A receive met its message.
    pub(super) fn matched(&mut self, m: Matched<u64, Unexpected>) {
        let Matched {
            recv,
            env,
            len,
            msg,
        } = m;
        let status = Status::received(&env, len, msg.remote_data());
        if let Some(ReqState::PostedInto { .. } | ReqState::Multi(_)) = self.reqs.get(&recv) {
            return self.matched_into(recv, status, msg);
        }
        let sreq = match msg {
            Unexpected::Eager(packet) => return self.matched_eager(recv, status, packet),
            Unexpected::Rts { sreq, .. } => sreq,
        };
        let Some(ReqState::Posted { buf, .. }) = self.reqs.remove(&recv) else {
            return;
        };
        self.stats.received += 1;
        self.return_credit(env.source, HEADER_LEN as u64);
        let mut hdr = Header::new(Kind::Cts);
        hdr.id = sreq;
        hdr.aux = recv;
        hdr.len = len as u64;
        if len > buf.len() {
            hdr.flags |= flags::REFUSED;
            self.reqs.insert(
                recv,
                ReqState::Done(Err(Error::Truncated {
                    message_len: len,
                    buffer_len: buf.len(),
                })),
            );
        } else {
            let mut buf = buf;
            buf.truncate(len);
            let buf = Arc::new(RecvBuffer::new(buf));
            self.placements
                .lock()
                .expect("placement registry")
                .insert(recv, buf.clone());
            self.reqs
                .insert(recv, ReqState::Receiving { buf, status, sreq });
        }
        self.push(env.source, Out::control(hdr));
    }

    /// A receive met an eager message: its payload is copied in and the
    /// receive completes, its state changed in place (one lookup). Always
    /// inlined: an arrival matching a posted receive, the common case, then
    /// makes no second call with the packet and status passed along.
    #[inline(always)]
    fn matched_eager(&mut self, recv: u64, status: Status, packet: Vec<u8>) {
        let Some(st) = self.reqs.get_mut(&recv) else {
            return;
        };
        let ReqState::Posted { buf, .. } = st else {
            return self.matched_into(recv, status, Unexpected::Eager(packet));
        };
        let len = status.len;
        let source = status.source;
        let res = if len <= buf.len() {
            let mut buf = std::mem::take(buf);
            buf.truncate(len);
            copy_small(&mut buf, &packet[HEADER_LEN..]);
            Ok(Completion {
                status,
                data: Some(buf),
            })
        } else {
            let buffer_len = std::mem::take(buf).len();
            Err(Error::Truncated {
                message_len: len,
                buffer_len,
            })
        };
        // The posted state owns nothing now (its buffer taken above): it
        // is replaced without its drop, which cost a call per message.
        std::mem::forget(std::mem::replace(st, ReqState::Done(res)));
        self.stats.received += 1;
        self.return_credit(source, (HEADER_LEN + len) as u64);
        self.spent.push(packet);
    }

    /// An eager message arrived (`packet` holds it whole).
    pub(super) fn arrive_eager(&mut self, p: PeerId, hdr: &Header, packet: Vec<u8>) {
        let body_len = packet.len() - HEADER_LEN;
        if hdr.len != body_len as u64 {
            return self.bad_packet(&"eager length mismatch");
        }
        let env = hdr.envelope(p);
        match self.matcher.take_receive(&env) {
            Some(recv) => {
                let status = Status::received(&env, body_len, remote_data(hdr));
                self.matched_eager(recv, status, packet);
            }
            None => {
                self.matcher
                    .wait_unexpected(env, body_len, Unexpected::Eager(packet));
                self.stats.unexpected += 1;
                self.unexpected_bytes += HEADER_LEN + body_len;
                self.peers[p as usize].unexpected += HEADER_LEN + body_len;
            }
        }
    }

    /// A rendezvous announcement arrived.
    pub(super) fn arrive_rts(&mut self, p: PeerId, hdr: &Header) {
        let env = hdr.envelope(p);
        let len = usize::try_from(hdr.len).unwrap_or(usize::MAX);
        match self.matcher.arrive(
            env,
            len,
            Unexpected::Rts {
                sreq: hdr.id,
                remote_data: remote_data(hdr),
            },
        ) {
            Some(m) => self.matched(m),
            None => {
                self.stats.unexpected += 1;
                self.unexpected_bytes += HEADER_LEN;
                self.peers[p as usize].unexpected += HEADER_LEN;
            }
        }
    }

    /// The receiver is ready for a rendezvous send (or refused it).
    pub(super) fn handle_cts(&mut self, p: PeerId, hdr: &Header) {
        let Some(ReqState::Send {
            peer,
            rndv: Some(_),
            ..
        }) = self.reqs.get(&hdr.id)
        else {
            return self.bad_packet(&"CTS for no rendezvous send");
        };
        if *peer != p {
            return self.bad_packet(&"CTS from another peer");
        }
        let Some(ReqState::Send {
            rndv: Some(data),
            status,
            ..
        }) = self.reqs.remove(&hdr.id)
        else {
            unreachable!("checked above")
        };
        if hdr.flags & flags::REFUSED != 0 || data.is_empty() {
            // The receiver's buffer was too short: it reports the truncation;
            // the send is complete (MPI semantics).
            self.reqs.insert(
                hdr.id,
                ReqState::Done(Ok(Completion { status, data: None })),
            );
            return;
        }
        self.reqs.insert(
            hdr.id,
            ReqState::Send {
                peer: p,
                rndv: None,
                status,
            },
        );
        // `data` is not empty here: empty messages go eagerly. A receiver
        // that truncates wants the first `len` bytes only.
        let want = usize::try_from(hdr.len).unwrap_or(usize::MAX);
        let data = if want < data.len() {
            data.slice(..want)
        } else {
            data
        };
        let rreq = hdr.aux;
        self.push_pieces(p, &data, |off, n, _| {
            let mut h = Header::new(Kind::Data);
            h.id = rreq;
            h.offset = off;
            h.len = n as u64;
            h
        });
    }

    /// A piece of rendezvous data: placed by the transport already (empty
    /// body) or to be copied in.
    pub(super) fn handle_data(&mut self, p: PeerId, hdr: &Header, packet: &[u8]) {
        let body_len = packet.len() - HEADER_LEN;
        let Some(ReqState::Receiving { buf, status, .. }) = self.reqs.get(&hdr.id) else {
            return self.bad_packet(&"data for no receive");
        };
        if status.source != p {
            return self.bad_packet(&"data from another peer");
        }
        let off = usize::try_from(hdr.offset).unwrap_or(usize::MAX);
        let mut body = &packet[HEADER_LEN..];
        if status.len < status.msg_len {
            // A truncating receive keeps the message's first bytes: a
            // sender that sends it all (an older one) has the rest dropped.
            body = &body[..body_len.min(buf.len().saturating_sub(off))];
        }
        if body_len > 0 && !buf.write(off, body) {
            return self.bad_packet(&"data outside the receive");
        }
        if body_len > 0 {
            self.stats.rndv_bytes_copied += body_len as u64;
        } else {
            self.stats.rndv_bytes_placed += hdr.len;
        }
        if buf.is_full() {
            let Some(ReqState::Receiving { buf, status, sreq }) = self.reqs.remove(&hdr.id) else {
                unreachable!("matched above")
            };
            self.placements
                .lock()
                .expect("placement registry")
                .remove(&hdr.id);
            let data = buf.into_vec();
            let mut done = Header::new(Kind::Done);
            done.id = sreq;
            self.push(p, Out::control(done));
            self.reqs
                .insert(hdr.id, ReqState::Done(Ok(Completion { status, data })));
        }
    }

    /// The receiver has all of a rendezvous send.
    pub(super) fn handle_done(&mut self, p: PeerId, hdr: &Header) {
        match self.reqs.get(&hdr.id) {
            Some(ReqState::Send {
                peer, rndv: None, ..
            }) if *peer == p => {
                let Some(ReqState::Send { status, .. }) = self.reqs.remove(&hdr.id) else {
                    unreachable!("matched above")
                };
                self.reqs.insert(
                    hdr.id,
                    ReqState::Done(Ok(Completion { status, data: None })),
                );
            }
            _ => self.bad_packet(&"Done for no rendezvous send"),
        }
    }
}

/// `dst.copy_from_slice(src)`, a message of 8 to 16 bytes as two
/// overlapping 8-byte words: a call into libc's memcpy costs more than
/// the copy of a small message it makes.
#[inline(always)]
pub(super) fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if (8..=16).contains(&n) && dst.len() == n {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else {
        dst.copy_from_slice(src);
    }
}
