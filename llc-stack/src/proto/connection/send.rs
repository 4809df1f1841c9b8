//! The send side: messages cut into fragments, frames written in place
//! (first transmissions, repairs, control frames), and the acknowledgements
//! and SACK blocks that come back for them.
//!
//! [`SendQueue`] owns our sequence space; the code here works on its
//! fields, every other file through its methods.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use super::timers::Timer;
use super::{wire_ts, Connection, Event, State};
use crate::proto::seq::Seq;
use crate::time::Instant;
use crate::wire::transport::{flags, MAX_SACK_BLOCKS};
use crate::wire::{self, FrameType, SackBlock, Tail, TransportHeader};

/// Acknowledged messages up to this size keep their buffers until the
/// driver's next idle moment ([`Connection::release_acked`]); larger ones
/// are freed at once (their free is small beside their transfer).
const RETIRE_MAX_BYTES: usize = 16 << 10;

/// Most acknowledged buffers held for release; past it they are freed at
/// once, so a driver that is never idle holds at most this many.
pub(crate) const RETIRE_LIMIT: usize = 64;

/// One of our messages, kept from `send` until the peer acknowledged its
/// last fragment. Frames in flight refer to it by id and offset, so cutting
/// and retransmitting fragments costs no reference counting or allocation.
/// The message is `head ++ body`: layers above put their own header in front
/// of a payload they lend; the header is kept in the message (inline when
/// short) and the payload is not copied before the frame is written.
#[derive(Debug)]
pub(super) struct OutMsg {
    pub(super) msg_id: u32,
    /// `head`'s length, kept beside it: every fragment's bounds depend on
    /// it, and most messages have no head to look into.
    head_len: u32,
    /// Offset of the next fragment to cut.
    next_off: u32,
    /// The sender waits for the acknowledgement (see
    /// [`Connection::send_parts_awaited`]).
    awaited: bool,
    head: MsgHead,
    body: Bytes,
}

impl OutMsg {
    /// A slot of an [`OutQueue`] that holds no message.
    fn vacant() -> Self {
        OutMsg {
            msg_id: 0,
            head_len: 0,
            next_off: 0,
            awaited: false,
            head: MsgHead::Inline([0; INLINE_HEAD]),
            body: Bytes::new(),
        }
    }

    /// Make this slot the message `head ++ body`, field by field where it
    /// lies.
    #[inline(always)]
    fn fill(&mut self, msg_id: u32, head: &[u8], body: Bytes, awaited: bool) {
        self.msg_id = msg_id;
        self.head_len = head.len() as u32;
        self.next_off = 0;
        self.awaited = awaited;
        // A free slot's body is empty and static (`Bytes::new`): nothing
        // to drop, and the call through its vtable is saved.
        let free = std::mem::replace(&mut self.body, body);
        debug_assert!(free.is_empty());
        std::mem::forget(free);
        match &mut self.head {
            MsgHead::Inline(bytes) if head.len() <= INLINE_HEAD => {
                bytes[..head.len()].copy_from_slice(head);
            }
            slot => *slot = MsgHead::new(head),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.head_len as usize + self.body.len()
    }

    fn head(&self) -> &[u8] {
        match &self.head {
            MsgHead::Inline(bytes) => &bytes[..self.head_len as usize],
            MsgHead::Shared(b) => b,
        }
    }

    /// Bytes `off..off + len` of `head ++ body`: the part in the head (a
    /// slice, possibly empty) and the part in the body (shared, not copied).
    fn range_shared(&self, off: usize, len: usize) -> (&[u8], Bytes) {
        let h = self.head_len as usize;
        let end = off + len;
        if off >= h {
            (&[], self.body.slice(off - h..end - h))
        } else if end <= h {
            (&self.head()[off..end], Bytes::new())
        } else {
            (&self.head()[off..], self.body.slice(..end - h))
        }
    }

    /// Bytes `off..off + len` of `head ++ body`, as at most two slices.
    /// Always inlined: every frame's payload is found through it.
    #[inline(always)]
    fn range(&self, off: usize, len: usize) -> [&[u8]; 2] {
        let h = self.head_len as usize;
        let end = off + len;
        if off >= h {
            [&self.body[off - h..end - h], &[]]
        } else if end <= h {
            [&self.head()[off..end], &[]]
        } else {
            [&self.head()[off..], &self.body[..end - h]]
        }
    }
}

/// Payload parts of a message body at least this long may be sent from the
/// message itself (scatter-gather) rather than copied into the frame: below
/// it the copy costs less than the device's extra I/O vector and the shared
/// reference.
const GATHER_FROM: usize = 1024;

/// [`GATHER_FROM`] for frames with a tag. The tag is computed over the
/// payload where it lies, but the 1 KiB NH chunk that straddles the frame's
/// start and the message is copied together, and the tag needs a third I/O
/// vector: at MTU 1500 copying the payload was 5% faster end to end, at
/// 9000 the two were even, at 65000 gathering was 20% faster
/// (docs/BENCHMARKS.md, issue 43).
const GATHER_KEYED_FROM: usize = 4096;

/// Heads up to this long are kept inside the message: the message
/// layer's 48-byte header and a prefix of up to 64 bytes (an MPI match
/// header and a small payload, which btl/llc's inline send copies in)
/// queue without an allocation.
const INLINE_HEAD: usize = 112;

/// The layer above's header of one message (its length is the message's
/// `head_len`). Short ones (all of the message layer's) are kept inline, so
/// queueing a message allocates nothing for its header; longer ones are
/// copied once into shared memory.
#[derive(Debug)]
enum MsgHead {
    Inline([u8; INLINE_HEAD]),
    Shared(Bytes),
}

impl MsgHead {
    fn new(head: &[u8]) -> Self {
        if head.len() > INLINE_HEAD {
            return MsgHead::Shared(Bytes::copy_from_slice(head));
        }
        let mut bytes = [0; INLINE_HEAD];
        bytes[..head.len()].copy_from_slice(head);
        MsgHead::Inline(bytes)
    }
}

/// The messages of a connection not yet acknowledged, oldest first: a ring
/// of [`OutMsg`] slots that a new message is written into where it lies
/// (built apart and moved in, its 170 bytes would be copied on the way, a
/// visible part of a short message's send). Slots left by acknowledged
/// messages stay for the next ones; the ring grows by doubling.
#[derive(Debug, Default)]
pub(super) struct OutQueue {
    slots: Vec<OutMsg>,
    /// Slot of the oldest message. Both counts are 32-bit: the queue
    /// takes no more room in a connection than a `VecDeque`.
    first: u32,
    len: u32,
}

/// What the acknowledgement of a whole message leaves of it.
pub(super) struct AckedMsg {
    pub(super) msg_id: u32,
    len: usize,
    pub(super) body: Bytes,
}

impl AckedMsg {
    pub(super) fn len(&self) -> usize {
        self.len
    }
}

impl OutQueue {
    pub(super) fn len(&self) -> usize {
        self.len as usize
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of the `i`th message (`i < slots.len()`). The ring's size
    /// is a power of two ([`OutQueue::grow`] doubles it from four), so the
    /// wrap is a mask rather than a comparison and a subtraction.
    #[inline(always)]
    fn slot(&self, i: usize) -> usize {
        debug_assert!(self.slots.len().is_power_of_two());
        (self.first as usize + i) & (self.slots.len() - 1)
    }

    /// Where the `i`th message lies (`None`: past the last), for
    /// [`OutQueue::at`] and [`OutQueue::at_mut`]: a frame's path finds its
    /// message once and reads it twice.
    #[inline(always)]
    pub(super) fn slot_of(&self, i: usize) -> Option<usize> {
        (i < self.len as usize).then(|| self.slot(i))
    }

    /// The message in slot `at`, as [`OutQueue::slot_of`] found it.
    #[inline(always)]
    fn at(&self, at: usize) -> &OutMsg {
        &self.slots[at]
    }

    /// [`OutQueue::at`], mutably.
    #[inline(always)]
    fn at_mut(&mut self, at: usize) -> &mut OutMsg {
        &mut self.slots[at]
    }

    pub(super) fn front(&self) -> Option<&OutMsg> {
        (self.len > 0).then(|| &self.slots[self.first as usize])
    }

    /// Queue the message `head ++ body` (at most `u32::MAX` bytes, as
    /// `send` checks) at the back.
    #[inline(always)]
    pub(super) fn push(&mut self, msg_id: u32, head: &[u8], body: Bytes, awaited: bool) {
        if self.len as usize == self.slots.len() {
            self.grow();
        }
        let at = self.slot(self.len as usize);
        self.len += 1;
        self.slots[at].fill(msg_id, head, body, awaited);
    }

    /// Double the ring (at least four slots: its size stays a power of
    /// two), its messages moved to the front in order.
    #[cold]
    fn grow(&mut self) {
        self.slots.rotate_left(self.first as usize);
        self.first = 0;
        let n = (2 * self.slots.len()).max(4);
        self.slots.resize_with(n, OutMsg::vacant);
    }

    /// Take the oldest message off; its slot keeps no buffer.
    pub(super) fn pop_front(&mut self) -> Option<AckedMsg> {
        if self.len == 0 {
            return None;
        }
        let m = &mut self.slots[self.first as usize];
        let acked = AckedMsg {
            msg_id: m.msg_id,
            len: m.len(),
            body: std::mem::take(&mut m.body),
        };
        if let MsgHead::Shared(_) = m.head {
            m.head = MsgHead::Inline([0; INLINE_HEAD]);
        }
        self.first = self.slot(1) as u32;
        self.len -= 1;
        Some(acked)
    }
}

impl std::ops::Index<usize> for OutQueue {
    type Output = OutMsg;

    fn index(&self, i: usize) -> &OutMsg {
        debug_assert!(i < self.len as usize, "message {i} of {}", self.len);
        &self.slots[self.slot(i)]
    }
}

/// What a sequenced frame in flight carries.
#[derive(Clone, Copy, Debug)]
enum Cargo {
    Data {
        msg_id: u32,
        off: u32,
        len: u32,
        last: bool,
    },
    Close,
}

#[derive(Debug)]
pub(super) struct InFlight {
    cargo: Cargo,
    pub(super) sent_at: Instant,
    pub(super) sacked: bool,
    pub(super) lost: bool,
    retransmitted: bool,
}

/// RACK: remember in `rack` the most recently sent frame an ACK delivers.
/// A retransmitted frame may have been delivered by its original
/// transmission, so it counts only when the ACK echoes the retransmission's
/// timestamp (`echoed`; never for SACKed frames).
#[inline]
fn note_delivered(rack: &mut Option<(Instant, Seq)>, f: &InFlight, seq: Seq, echoed: bool) {
    if f.retransmitted && !echoed {
        return;
    }
    if rack.is_none_or(|(t, _)| f.sent_at >= t) {
        *rack = Some((f.sent_at, seq));
    }
}

/// Our half of the sequence space and what is in it: the messages queued
/// and not yet acknowledged, the frames in flight with their SACK and loss
/// marks, the repairs due, RACK's most recent delivery, and the peer's
/// credit. The send path in this file writes frames from it; the rest of
/// the connection (timers, congestion, the receive side) goes through its
/// methods.
#[derive(Debug)]
pub(super) struct SendQueue {
    /// Our initial sequence number (the SYN's).
    isn: Seq,
    /// The oldest frame not acknowledged cumulatively.
    una: Seq,
    /// The next sequence number to send.
    nxt: Seq,
    /// The peer's credit: frames below this sequence number may be sent.
    peer_window_end: Seq,
    next_msg_id: u32,
    /// Messages not yet fully acknowledged, in id order.
    msgs: OutQueue,
    /// Buffers of small acknowledged messages, freed by `release_acked`:
    /// freeing them in the ACK's path would delay the reply to it. Only the
    /// bodies: a head is inline (a long one, rare, is freed at once).
    retired: Vec<Bytes>,
    /// Index in `msgs` of the first message with fragments still unsent.
    next_unsent: usize,
    /// Bytes of messages queued or unacknowledged.
    bytes: usize,
    /// Frames from `una` to `nxt`, oldest first.
    inflight: VecDeque<InFlight>,
    /// Frames declared lost, to be resent (stale entries are skipped).
    lost_queue: VecDeque<Seq>,
    /// Frames in flight the peer reported held (SACK), and those lost.
    n_sacked: usize,
    n_lost: usize,
    /// RACK (RFC 8985): send time and sequence number of the most recently
    /// sent frame that was delivered, and its round trip.
    rack_time: Instant,
    rack_seq: Seq,
    /// In nanoseconds: set on every acknowledgement, read only when
    /// looking for losses (a `Duration` costs a division to make).
    rack_rtt_ns: u64,
    /// Our CLOSE has its sequence number (it goes after the data).
    close_queued: bool,
}

impl SendQueue {
    /// Nothing sent yet; the first frame (the SYN) takes `isn`.
    pub(super) fn new(isn: Seq) -> Self {
        SendQueue {
            isn,
            una: isn,
            nxt: isn,
            peer_window_end: isn,
            next_msg_id: 0,
            msgs: OutQueue::default(),
            retired: Vec::new(),
            next_unsent: 0,
            bytes: 0,
            inflight: VecDeque::new(),
            lost_queue: VecDeque::new(),
            n_sacked: 0,
            n_lost: 0,
            rack_time: Instant::ZERO,
            rack_seq: isn,
            rack_rtt_ns: 0,
            close_queued: false,
        }
    }

    /// True when a message of `len` bytes does not fit a buffer of
    /// `limit` bytes (a message larger than the buffer goes alone into an
    /// empty one).
    #[inline(always)]
    pub(super) fn is_full_for(&self, len: usize, limit: usize) -> bool {
        self.bytes > 0 && self.bytes + len > limit
    }

    /// Queue the message `head ++ body` of `len` bytes and return its id.
    /// Inlined into every send (a result returned through memory cost
    /// more than the queueing).
    #[inline(always)]
    pub(super) fn push(&mut self, len: usize, head: &[u8], body: Bytes, awaited: bool) -> u32 {
        let msg_id = self.next_msg_id;
        self.next_msg_id = self.next_msg_id.wrapping_add(1);
        self.bytes += len;
        self.msgs.push(msg_id, head, body, awaited);
        msg_id
    }

    /// The next sequence number to send.
    #[inline(always)]
    pub(super) fn nxt(&self) -> Seq {
        self.nxt
    }

    /// The peer granted credit up to `end` (the handshake's).
    pub(super) fn set_peer_window_end(&mut self, end: Seq) {
        self.peer_window_end = end;
    }

    /// Frames the peer's credit still lets us send.
    pub(super) fn credit(&self) -> u32 {
        self.peer_window_end.diff(self.nxt).max(0) as u32
    }

    /// Frames sent and not yet acknowledged cumulatively.
    #[inline(always)]
    pub(super) fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Frames in flight that are neither acknowledged nor known lost.
    #[inline(always)]
    pub(super) fn flight(&self) -> u32 {
        (self.inflight.len() - self.n_sacked - self.n_lost) as u32
    }

    /// Bytes of messages queued or unacknowledged.
    pub(super) fn buffered(&self) -> usize {
        self.bytes
    }

    /// Messages not yet fully acknowledged.
    pub(super) fn unacked_messages(&self) -> usize {
        self.msgs.len()
    }

    /// True when every message was acknowledged.
    #[inline]
    pub(super) fn is_idle(&self) -> bool {
        self.msgs.is_empty()
    }

    /// True when nothing at all waits: no message and no frame (a CLOSE
    /// may be in flight without a message).
    pub(super) fn is_drained(&self) -> bool {
        self.msgs.is_empty() && self.inflight.is_empty()
    }

    /// Free the acknowledged buffers held back from the ACK's path.
    pub(super) fn release_acked(&mut self) {
        self.retired.clear();
    }

    /// Acknowledged buffers waiting for [`SendQueue::release_acked`].
    pub(super) fn acked_held(&self) -> usize {
        self.retired.len()
    }

    /// Our CLOSE went into the sequence space.
    pub(super) fn close_queued(&self) -> bool {
        self.close_queued
    }

    /// A message has fragments not yet sent.
    #[inline(always)]
    pub(super) fn has_unsent(&self) -> bool {
        self.next_unsent < self.msgs.len()
    }

    /// Data waits while the peer's credit is used up and nothing is in
    /// flight to bring more: only a window probe can.
    pub(super) fn blocked_by_credit(&self) -> bool {
        self.has_unsent() && !self.nxt.lt(self.peer_window_end) && self.inflight.is_empty()
    }

    /// A retransmission timeout: every frame in flight the peer did not
    /// report held is lost, and the repairs go out oldest first.
    pub(super) fn mark_all_lost(&mut self) {
        self.lost_queue.clear();
        self.n_lost = 0;
        for (i, f) in self.inflight.iter_mut().enumerate() {
            f.lost = !f.sacked;
            if f.lost {
                self.n_lost += 1;
                self.lost_queue.push_back(self.una.add(i as u32));
            }
        }
    }

    /// The timeout that declared frames lost was spurious: none is.
    pub(super) fn forget_losses(&mut self) {
        for f in self.inflight.iter_mut() {
            f.lost = false;
        }
        self.n_lost = 0;
        self.lost_queue.clear();
    }

    /// A tail-loss probe needs a frame to resend: the first repair already
    /// due, else the newest frame not acknowledged, marked lost. False
    /// when there is none.
    pub(super) fn mark_probe_frame(&mut self) -> bool {
        if self.n_lost > 0 {
            return true;
        }
        let Some(i) = self.inflight.iter().rposition(|f| !f.sacked && !f.lost) else {
            return false;
        };
        self.inflight[i].lost = true;
        self.n_lost += 1;
        self.lost_queue.push_back(self.una.add(i as u32));
        true
    }

    /// RACK (RFC 8985): mark lost every frame sent before the most recently
    /// delivered one that has been out for `wait` (that frame's round trip
    /// plus the reordering allowance). Returns whether any was, and when
    /// the earliest of those not yet overdue will be.
    pub(super) fn detect_losses(
        &mut self,
        now: Instant,
        wait: Duration,
    ) -> (bool, Option<Instant>) {
        let (rack_time, rack_seq) = (self.rack_time, self.rack_seq);
        let mut found = false;
        let mut next: Option<Instant> = None;
        for (i, f) in self.inflight.iter_mut().enumerate() {
            if f.sacked || f.lost {
                continue;
            }
            let seq = self.una.add(i as u32);
            let sent_before = f.sent_at < rack_time || (f.sent_at == rack_time && seq.lt(rack_seq));
            if !sent_before {
                continue;
            }
            let due = f.sent_at + wait;
            if due <= now {
                f.lost = true;
                self.n_lost += 1;
                self.lost_queue.push_back(seq);
                found = true;
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        (found, next)
    }

    /// RACK's round trip of the most recently sent frame delivered.
    pub(super) fn rack_rtt(&self) -> Duration {
        Duration::from_nanos(self.rack_rtt_ns)
    }

    /// RACK: the frame `seq` sent at `t` was delivered; remember it when
    /// it is the most recently sent one so far.
    #[inline(always)]
    fn note_rack(&mut self, now: Instant, t: Instant, seq: Seq) {
        if t > self.rack_time || (t == self.rack_time && self.rack_seq.lt(seq)) {
            self.rack_time = t;
            self.rack_seq = seq;
            self.rack_rtt_ns = now.as_nanos().saturating_sub(t.as_nanos());
        }
    }

    /// Mark the frames `sacks` report as held by the peer; returns how many
    /// were new. Out of line: loss-free exchanges carry no blocks.
    #[inline(never)]
    fn apply_sacks(&mut self, sacks: &[SackBlock], rack: &mut Option<(Instant, Seq)>) -> u32 {
        let mut newly = 0;
        for b in sacks.iter().take(MAX_SACK_BLOCKS) {
            let (start, end) = (Seq(b.start.get()), Seq(b.end.get()));
            let start = start.max(self.una);
            if !start.lt(end) || self.nxt.lt(end) {
                continue;
            }
            let (i0, i1) = (start.diff(self.una) as usize, end.diff(self.una) as usize);
            let i1 = i1.min(self.inflight.len());
            if i0 >= i1 {
                continue;
            }
            for (i, f) in self.inflight.range_mut(i0..i1).enumerate() {
                if !f.sacked {
                    f.sacked = true;
                    self.n_sacked += 1;
                    if f.lost {
                        f.lost = false;
                        self.n_lost -= 1;
                    }
                    newly += 1;
                    note_delivered(rack, f, self.una.add((i0 + i) as u32), false);
                }
            }
        }
        newly
    }

    /// Frames in flight now marked lost.
    #[cfg(test)]
    pub(super) fn lost_count(&self) -> usize {
        self.n_lost
    }

    /// Frames in flight the peer reported held.
    #[cfg(test)]
    pub(super) fn sacked_count(&self) -> usize {
        self.n_sacked
    }
}

impl Connection {
    /// The next frame into `buf`. With `tail`, a long payload may stay out
    /// of `buf` (see [`wire::emit_transport_head_prefixed`]): it is put
    /// there, and the frame is `buf[..n]` followed by it ([`Tail`]).
    pub(super) fn next_transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        mut tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        match self.state {
            State::Closed => {
                // A final acknowledgement (of the peer's CLOSE) may remain.
                return if self.ack.is_due_now() {
                    self.emit_control(now, buf, FrameType::Ack, 0)
                } else {
                    None
                };
            }
            State::SynSent => {
                if !self.handshake.take() {
                    return None;
                }
                self.handshake.count_attempt();
                self.timers
                    .set(Timer::Rto, Some(now + self.timing.rto_backed_off()));
                return self.emit_control(now, buf, FrameType::Syn, 0);
            }
            State::SynReceived => {
                if self.handshake.take() {
                    return self.emit_control(now, buf, FrameType::SynAck, 0);
                }
                return None;
            }
            State::Established | State::Closing => {}
        }
        // Repairs first; none is due in a loss-free exchange.
        if !self.snd.lost_queue.is_empty() {
            if let Some(n) = self.poll_retransmit(now, buf, tail.as_deref_mut()) {
                return Some(n);
            }
        }
        if let Some(n) = self.poll_new_frame(now, buf, tail) {
            return Some(n);
        }
        if self.alive.take_ping() {
            return self.emit_control(now, buf, FrameType::Ping, flags::ACK_NOW);
        }
        if self.ack.is_due_now() {
            self.stats.acks_sent += 1;
            return self.emit_control(now, buf, FrameType::Ack, 0);
        }
        None
    }

    /// True when `poll_transmit` may produce a frame now (cheap; drivers use
    /// it to skip asking the device for a transmit buffer).
    pub fn wants_transmit(&self) -> bool {
        match self.state {
            State::Closed => self.ack.is_due_now(),
            State::SynSent | State::SynReceived => self.handshake.is_due(),
            State::Established | State::Closing => {
                self.ack.is_due_now()
                    || self.alive.ping_due()
                    || (!self.snd.lost_queue.is_empty()
                        && (self.can_send() || self.timing.has_probe_credit()))
                    || ((self.snd.has_unsent() || (self.close_requested && !self.snd.close_queued))
                        && self.snd.nxt.lt(self.snd.peer_window_end)
                        && self.can_send())
            }
        }
    }

    fn can_send(&self) -> bool {
        self.cc.allows(self.snd.flight())
    }

    /// Out of line: called only with frames marked lost.
    #[inline(never)]
    fn poll_retransmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        while let Some(&seq) = self.snd.lost_queue.front() {
            let idx = seq.diff(self.snd.una);
            let live = idx >= 0
                && (idx as usize) < self.snd.inflight.len()
                && self.snd.inflight[idx as usize].lost;
            if !live {
                self.snd.lost_queue.pop_front();
                continue;
            }
            if !self.can_send() && !self.timing.has_probe_credit() {
                return None;
            }
            self.timing.use_probe_credit();
            self.snd.lost_queue.pop_front();
            self.timers.set(Timer::Tail, self.timing.next_probe(now));
            let f = &mut self.snd.inflight[idx as usize];
            f.lost = false;
            f.retransmitted = true;
            f.sent_at = now;
            self.snd.n_lost -= 1;
            self.stats.retransmits += 1;
            let ack = if self.snd.lost_queue.is_empty() {
                flags::ACK_NOW
            } else {
                0
            };
            return self.emit_retransmission(now, buf, seq, idx as usize, ack, tail);
        }
        None
    }

    fn poll_new_frame(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        if !self.snd.nxt.lt(self.snd.peer_window_end) || !self.can_send() {
            return None;
        }
        let mut awaited = self.cfg.acked_events || !self.timing.peer_delays_acks();
        let mut slot = 0;
        let cargo = if let Some(at) = self.snd.msgs.slot_of(self.snd.next_unsent) {
            slot = at;
            let m = self.snd.msgs.at_mut(at);
            awaited |= m.awaited;
            let off = m.next_off as usize;
            let len = (m.len() - off).min(self.ends.frag_len());
            m.next_off += len as u32;
            let last = m.next_off as usize == m.len();
            let cargo = Cargo::Data {
                msg_id: m.msg_id,
                off: off as u32,
                len: len as u32,
                last,
            };
            if last {
                self.snd.next_unsent += 1;
            }
            cargo
        } else if self.close_requested && !self.snd.close_queued && self.state == State::Closing {
            self.snd.close_queued = true;
            Cargo::Close
        } else {
            return None;
        };
        let seq = self.snd.nxt;
        self.snd.nxt = self.snd.nxt.add(1);
        self.snd.inflight.push_back(InFlight {
            cargo,
            sent_at: now,
            sacked: false,
            lost: false,
            retransmitted: false,
        });
        self.stats.data_frames_sent += 1;
        self.timers.set(
            Timer::Tail,
            Some(now.add_nanos(self.timing.probe_timeout_nanos())),
        );
        if self.timers.get(Timer::Rto).is_none() {
            self.timers.set(
                Timer::Rto,
                Some(now.add_nanos(self.timing.rto_backed_off_nanos())),
            );
        }
        // Ask for an immediate ACK when this is the last frame we may send
        // for now although more is queued: we would otherwise wait for the
        // delayed-ACK timer. When we have sent all we have and wait for the
        // acknowledgement (a lent body, `Acked` events, or a peer that
        // announced no delay), a prompt ACK is enough (ACK_SOON): it lets a
        // reply from the peer's application carry it. When nothing waits
        // for it, the peer may hold it up to its `max_ack_delay`, so that a
        // reply sent late (its process waited for a core) still carries it:
        // a request and its response cost one frame each, not two.
        let ack = if !self.snd.has_unsent() {
            if awaited {
                flags::ACK_SOON
            } else {
                0
            }
        } else if self.snd.nxt.lt(self.snd.peer_window_end) && self.cc.allows(self.snd.flight()) {
            0
        } else {
            flags::ACK_NOW
        };
        self.emit_sequenced(now, buf, seq, cargo, slot, ack, tail)
    }

    fn base_header(&self, now: Instant, kind: FrameType, flag_bits: u8) -> TransportHeader {
        TransportHeader {
            kind: kind.into(),
            flags: flag_bits,
            src_port: self.ends.local_port().into(),
            dst_port: self.ends.peer_port().into(),
            src_cookie: self.ends.local_cookie().into(),
            dst_cookie: self.ends.peer_cookie().into(),
            seq: self.snd.nxt.0.into(),
            ts_val: wire_ts(now).into(),
            ..Default::default()
        }
    }

    fn emit_control(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        kind: FrameType,
        flag_bits: u8,
    ) -> Option<usize> {
        let mut h = self.base_header(now, kind, flag_bits);
        match kind {
            FrameType::Syn => {
                h.seq = self.snd.isn.0.into();
                h.msg_len = (self.ends.local_mtu() as u32).into();
                h.frag_off = self.max_ack_delay_micros().into();
            }
            FrameType::SynAck => {
                h.seq = self.snd.isn.0.into();
                h.msg_len = (self.ends.local_mtu() as u32).into();
                h.frag_off = self.max_ack_delay_micros().into();
                self.ack_fields(&mut h);
            }
            _ => self.ack_fields(&mut h),
        }
        let blocks;
        let sacks: &[SackBlock] = match kind {
            FrameType::Ack | FrameType::Ping => match self.rcv.sack_blocks(MAX_SACK_BLOCKS) {
                (_, 0) => &[],
                (b, n) => {
                    blocks = b;
                    &blocks[..n]
                }
            },
            _ => &[],
        };
        wire::emit_transport_with(buf, self.ends.addr(), &h, sacks, &[], self.cfg.trailer()).ok()
    }

    /// [`Connection::emit_sequenced`] out of line: retransmissions are rare,
    /// and the new frames' path keeps its own copy.
    #[inline(never)]
    fn emit_retransmission(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        seq: Seq,
        idx: usize,
        ack_request: u8,
        tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        let cargo = self.snd.inflight[idx].cargo;
        let at = match cargo {
            Cargo::Data { msg_id, .. } => {
                let first = self.snd.msgs.front().expect("a message in flight").msg_id;
                let mi = msg_id.wrapping_sub(first) as usize;
                self.snd.msgs.slot_of(mi).expect("a message in flight")
            }
            Cargo::Close => 0,
        };
        self.emit_sequenced(now, buf, seq, cargo, at, ack_request, tail)
    }

    /// The frame `seq` carrying `cargo`, whose message (for data) lies in
    /// the send queue's slot `at`: the new frames' path has both at hand. Inlined
    /// into it: a frame's fields go from the connection to the frame
    /// without a call between.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn emit_sequenced(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        seq: Seq,
        cargo: Cargo,
        at: usize,
        ack_request: u8,
        tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        let mut h = self.base_header(now, FrameType::Data, ack_request);
        h.seq = seq.0.into();
        self.ack_fields(&mut h);
        let (m, off, len) = match cargo {
            Cargo::Data {
                msg_id,
                off,
                len,
                last,
            } => {
                let m = self.snd.msgs.at(at);
                debug_assert_eq!(m.msg_id, msg_id);
                h.msg_id = msg_id.into();
                h.msg_len = (m.len() as u32).into();
                h.frag_off = off.into();
                if last {
                    h.flags |= flags::LAST_FRAGMENT;
                }
                (Some(m), off as usize, len as usize)
            }
            Cargo::Close => {
                h.kind = FrameType::Close.into();
                (None, 0, 0)
            }
        };
        // Carry SACK blocks when they fit beside the payload within the
        // fragment size both ends accept. No block (the usual case: nothing
        // held out of order) is an empty slice, not an array of zeroed
        // blocks copied on the way, and the room for them is not worked out.
        let blocks;
        let sacks: &[SackBlock] = if !self.rcv.holds_out_of_order() {
            &[]
        } else {
            let room =
                self.ends.frag_len().saturating_sub(len) / crate::wire::transport::SACK_BLOCK_LEN;
            match self.rcv.sack_blocks(room) {
                (_, 0) => &[],
                (b, n) => {
                    blocks = b;
                    &blocks[..n]
                }
            }
        };
        let trailer = self.cfg.trailer();
        if let (Some(m), Some(slot)) = (m, tail) {
            // Only a long body part is worth a shared reference. With a
            // key, the tag goes after it (written after the frame's start).
            let in_body = (off + len).saturating_sub(off.max(m.head_len as usize));
            let from = if trailer.is_empty() {
                GATHER_FROM
            } else {
                GATHER_KEYED_FROM
            };
            if in_body >= from {
                let (inline, body) = m.range_shared(off, len);
                let n = wire::emit_transport_head_prefixed(
                    buf,
                    self.ends.prefix(),
                    &h,
                    sacks,
                    [inline, &body],
                    trailer,
                )
                .ok()?;
                *slot = Some(Tail {
                    body,
                    trailer: trailer.len(),
                });
                return Some(n);
            }
        }
        let payload = match m {
            Some(m) => m.range(off, len),
            None => [&[][..], &[][..]],
        };
        wire::emit_transport_prefixed(buf, self.ends.prefix(), &h, sacks, payload, trailer).ok()
    }

    /// `wts` is our wire clock now, `wire_ts(now)`.
    pub(super) fn process_ack(
        &mut self,
        now: Instant,
        wts: u32,
        h: &TransportHeader,
        sacks: &[SackBlock],
    ) {
        let ack = Seq(h.ack.get());
        if self.snd.nxt.lt(ack) || ack.lt(self.snd.una) {
            // Acknowledges something never sent, or is older than what we know.
            if self.snd.nxt.lt(ack) {
                self.stats.violations += 1;
            }
            return;
        }
        let window_end = Seq(h.window_end.get());
        if self.snd.peer_window_end.lt(window_end)
            && window_end.diff(ack) as u32 <= self.cfg.max_window_frames.max(1 << 16)
        {
            self.snd.peer_window_end = window_end;
        }
        if sacks.is_empty() && self.acks_one_frame(ack) {
            self.ack_one_frame(now, wts, h);
            return;
        }
        let mut newly_acked = 0u32;
        let mut cumulative = 0u32;
        // The most recently sent frame this ACK delivers (RACK).
        let mut rack: Option<(Instant, Seq)> = None;
        let ecr = h.ts_ecr.get();
        // A retransmitted frame may have been delivered by its original
        // transmission (a spurious repair): taking its new send time would
        // declare everything sent before it lost, a cascade of spurious
        // repairs behind a deep queue. It counts only when the ACK echoes
        // the retransmission's timestamp (the receiver echoes the frame that
        // moved its cumulative point), so SACKed retransmissions never do.
        let echoes = |f: &InFlight| ecr != 0 && ecr.wrapping_sub(wire_ts(f.sent_at)) as i32 >= 0;
        while self.snd.una.lt(ack) {
            let Some(f) = self.snd.inflight.pop_front() else {
                break;
            };
            let seq = self.snd.una;
            self.snd.una = self.snd.una.add(1);
            newly_acked += 1;
            cumulative += 1;
            if f.sacked {
                self.snd.n_sacked -= 1;
            } else {
                // Only a retransmission needs the echo (a division).
                note_delivered(&mut rack, &f, seq, f.retransmitted && echoes(&f));
            }
            if f.lost {
                self.snd.n_lost -= 1;
            }
            if !self.retire_cargo(f.cargo) {
                return;
            }
        }
        if !sacks.is_empty() {
            newly_acked += self.snd.apply_sacks(sacks, &mut rack);
        }
        if let Some((t, seq)) = rack {
            self.snd.note_rack(now, t, seq);
        }
        if newly_acked > 0 {
            self.timing.on_delivery();
            // Only an ACK that moves the cumulative point echoes the
            // timestamp of the frame that moved it. One that only SACKs
            // frames beyond a hole echoes the last in-order frame, sent
            // before the hole: that sample would count the whole time the
            // hole stayed open and inflate the RTO under loss.
            if self.cc.judges_timeout() && cumulative > 0 {
                self.check_rto(ecr);
            }
            if ecr != 0 && cumulative > 0 {
                self.timing.sample(wts, ecr, h, &mut self.stats);
            }
            self.restart_ack_timers(now);
        }
        self.cc.on_cumulative_ack(self.snd.una);
        if self.snd.n_sacked > 0 {
            self.detect_losses(now);
        }
        if newly_acked > 0 && !self.cc.in_recovery() {
            self.grow_or_cut(now, newly_acked);
        }
        if self.snd.blocked_by_credit() {
            self.timers
                .set(Timer::Probe, Some(now + self.probe_interval()));
        }
    }

    /// Header prediction for acknowledgements (as Van Jacobson's TCP
    /// receive path): true when `ack` (already checked against `snd_una`
    /// and `snd_nxt`) acknowledges exactly the oldest frame in flight and
    /// there is no loss, recovery or timeout state to update (no frame
    /// SACKed or lost). Then, without SACK blocks,
    /// [`Self::ack_one_frame`] does what the general path would, without
    /// its loop and the branches it never takes.
    #[inline(always)]
    fn acks_one_frame(&self, ack: Seq) -> bool {
        super::prediction_on()
            && ack == self.snd.una.add(1)
            && (self.snd.n_sacked | self.snd.n_lost) == 0
            && self.cc.is_steady()
    }

    /// [`Self::process_ack`]'s work, after the window update, for an ACK
    /// that [`Self::acks_one_frame`] predicted.
    #[inline(always)]
    fn ack_one_frame(&mut self, now: Instant, wts: u32, h: &TransportHeader) {
        let Some(f) = self.snd.inflight.pop_front() else {
            // Not reached (a frame is in flight below `snd_nxt`); as the
            // general path would.
            if self.snd.blocked_by_credit() {
                self.timers
                    .set(Timer::Probe, Some(now + self.probe_interval()));
            }
            return;
        };
        debug_assert!(!f.sacked && !f.lost);
        let seq = self.snd.una;
        self.snd.una = seq.add(1);
        if !self.retire_cargo(f.cargo) {
            return;
        }
        let ecr = h.ts_ecr.get();
        // A retransmission counts for RACK only when the ACK echoes it
        // (see `process_ack`).
        if !f.retransmitted || (ecr != 0 && ecr.wrapping_sub(wire_ts(f.sent_at)) as i32 >= 0) {
            self.snd.note_rack(now, f.sent_at, seq);
        }
        self.timing.on_delivery();
        if ecr != 0 {
            self.timing.sample(wts, ecr, h, &mut self.stats);
        }
        self.restart_ack_timers(now);
        self.grow_or_cut(now, 1);
        if self.snd.blocked_by_credit() {
            self.timers
                .set(Timer::Probe, Some(now + self.probe_interval()));
        }
    }

    /// Retire what an acknowledged frame carried: the message it ended, or
    /// the connection with its CLOSE. False when the connection finished.
    #[inline(always)]
    fn retire_cargo(&mut self, cargo: Cargo) -> bool {
        match cargo {
            Cargo::Data { msg_id, last, .. } => {
                if last {
                    self.retire_oldest_message(msg_id);
                }
                true
            }
            Cargo::Close => {
                self.finish();
                false
            }
        }
    }

    /// The peer acknowledged the last fragment of our oldest message,
    /// `msg_id`: it leaves the send queue. Out of line: inlined into the
    /// frame's path (measured), its buffer push became a call there anyway,
    /// and the path cost more.
    #[inline(never)]
    fn retire_oldest_message(&mut self, msg_id: u32) {
        // Frames are acknowledged in order, so this is the oldest message.
        let m = self
            .snd
            .msgs
            .pop_front()
            .expect("an unacknowledged message");
        debug_assert_eq!(m.msg_id, msg_id);
        self.snd.next_unsent = self.snd.next_unsent.saturating_sub(1);
        let len = m.len();
        self.snd.bytes -= len;
        self.stats.messages_acked += 1;
        if self.cfg.acked_events {
            self.events.push_back(Event::Acked { msg_id });
        }
        if len <= RETIRE_MAX_BYTES && self.snd.retired.len() < RETIRE_LIMIT {
            // The body alone: moving the whole message
            // here cost more than the rest of retiring it.
            self.snd.retired.push(m.body);
        }
    }

    /// New data was acknowledged: the back-off ends, and the timeout and
    /// the tail-loss probe restart from now (or stop, nothing in flight).
    #[inline(always)]
    fn restart_ack_timers(&mut self, now: Instant) {
        self.timing.reset_backoff();
        let (rto, tail) = if self.snd.inflight.is_empty() {
            (None, None)
        } else {
            (
                Some(now.add_nanos(self.timing.rto_nanos())),
                Some(now.add_nanos(self.timing.probe_timeout_nanos())),
            )
        };
        self.timers.set(Timer::Rto, rto);
        self.timers.set(Timer::Tail, tail);
    }
}

#[cfg(test)]
mod tests {
    use super::super::harness::{
        deliver, header, messages, pattern, payload_len, transmit_all, Pair,
    };
    use super::*;
    use crate::proto::config::Config;
    use crate::proto::connection::SendError;

    /// DATA frames A sends at once for a message of `frames` fragments,
    /// with nothing acknowledged in between.
    fn burst(p: &mut Pair, frames: usize) -> Vec<Vec<u8>> {
        let frag = p.a.fragment_len();
        p.a.send(pattern(frames * frag, 1).into()).unwrap();
        transmit_all(&mut p.a, p.now)
    }

    /// The ring keeps what a `VecDeque` of whole messages would, through
    /// growth, wrapping and heads of every kind (none, inline, shared).
    #[test]
    fn out_queue_matches_a_deque() {
        let mut q = OutQueue::default();
        let mut model: std::collections::VecDeque<(u32, Vec<u8>, Bytes, bool)> = Default::default();
        let mut rng = crate::rng::Rng::new(9);
        let mut id = 0u32;
        for step in 0..5000 {
            if rng.next_u32() % 5 < 3 && model.len() < 40 {
                let head_len =
                    [0, 1, 48, INLINE_HEAD, INLINE_HEAD + 1, 300][rng.next_u32() as usize % 6];
                let head = pattern(head_len, step as u8);
                let body = Bytes::from(pattern(rng.next_u32() as usize % 100, 3));
                let awaited = rng.next_u32() & 1 == 0;
                q.push(id, &head, body.clone(), awaited);
                model.push_back((id, head, body, awaited));
                id += 1;
            } else if let Some((mid, head, body, _)) = model.pop_front() {
                let m = q.pop_front().expect("a message");
                assert_eq!(
                    (m.msg_id, m.len(), &m.body),
                    (mid, head.len() + body.len(), &body)
                );
            } else {
                assert!(q.pop_front().is_none());
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.front().map(|m| m.msg_id), model.front().map(|m| m.0));
            for (i, (mid, head, body, awaited)) in model.iter().enumerate() {
                let m = &q[i];
                assert_eq!((m.msg_id, m.awaited, m.next_off), (*mid, *awaited, 0));
                assert_eq!((m.head(), &m.body), (&head[..], body));
                assert_eq!(q.slot_of(i).map(|at| q.at_mut(at).msg_id), Some(*mid));
            }
            assert!(q.slot_of(model.len()).is_none());
        }
    }

    /// A frame written whole (`poll_transmit`, what a device that does
    /// not gather is handed) is the frame written with its payload's end
    /// left in the message (`poll_transmit_gather`) once the two are
    /// joined, for messages with and without a head, short and long, and
    /// their retransmissions; with a key, the tag computed over the pieces
    /// where they lie goes last (on a link of MTU 9000: keyed frames gather
    /// from 4 KiB of payload on).
    #[test]
    fn frames_written_whole_are_the_gathered_frames_joined() {
        for key in [None, Some(wire::AuthKey::derive(b"gather"))] {
            let keyed = key.is_some();
            let cfg = Config {
                auth_key: key,
                ..Config::default()
            };
            let mtu = if keyed { 9000 } else { 1500 };
            let pair = || Pair::with_mtu(cfg.clone(), cfg.clone(), mtu);
            let (mut whole, mut gathered) = (pair(), pair());
            let frag = whole.a.fragment_len();
            for (head_len, body_len) in [(0, 64), (48, 8), (48, 3 * frag + 100), (0, 2 * frag)] {
                for p in [&mut whole, &mut gathered] {
                    p.a.send_parts(&pattern(head_len, 5), pattern(body_len, 9).into())
                        .unwrap();
                }
            }
            let mut buf = vec![0u8; mtu + wire::ethernet::HEADER_LEN];
            let (mut frames, mut tails) = (0, 0);
            for round in 0..2 {
                if round == 1 {
                    // Everything in flight is lost: the repairs are written again.
                    for p in [&mut whole, &mut gathered] {
                        p.now += std::time::Duration::from_secs(2);
                        p.a.handle_timeout(p.now);
                    }
                }
                loop {
                    let a = whole
                        .a
                        .poll_transmit(whole.now, &mut buf)
                        .map(|n| buf[..n].to_vec());
                    let b =
                        gathered
                            .a
                            .poll_transmit_gather(gathered.now, &mut buf)
                            .map(|(n, tail)| match tail {
                                None => buf[..n].to_vec(),
                                Some(t) => {
                                    tails += 1;
                                    assert_eq!(t.trailer, cfg.trailer_len());
                                    let len = t.join(&mut buf, n).expect("fits");
                                    buf[..len].to_vec()
                                }
                            });
                    assert_eq!(a, b, "keyed {keyed}");
                    if a.is_none() {
                        break;
                    }
                    frames += 1;
                }
            }
            assert!(frames > 10 && tails > 4, "{frames} frames, {tails} tails");
            assert!(gathered.a.stats().retransmits > 0);
        }
    }

    #[test]
    fn new_frames_stop_at_the_peers_credit() {
        let b = Config {
            min_window_frames: 10,
            max_window_frames: 10,
            ..Config::default()
        };
        let mut p = Pair::with(Config::default(), b);
        assert_eq!(p.b.window_frames(), 10);
        assert!(p.a.cwnd() > 10);
        let frames = burst(&mut p, 40);
        assert_eq!(frames.len(), 10);
        // The last frame the credit allows asks for an acknowledgement at once.
        assert!(header(&frames[9]).has(flags::ACK_NOW));
        assert!(!header(&frames[8]).has(flags::ACK_NOW));
        assert!(!p.a.wants_transmit());
        // Credit returns with the acknowledgement, and the rest follows.
        for f in &frames {
            deliver(&mut p.b, p.now, f);
        }
        p.settle();
        assert_eq!(p.a.stats().data_frames_sent, 40);
        assert_eq!(p.a.stats().retransmits, 0);
    }

    #[test]
    fn new_frames_stop_at_the_congestion_window() {
        let a = Config {
            initial_cwnd: 5,
            ..Config::default()
        };
        let mut p = Pair::with(a, Config::default());
        assert!(p.b.window_frames() > 5);
        assert_eq!(burst(&mut p, 40).len(), 5);
        assert_eq!(p.a.stats().data_frames_sent, 5);
    }

    #[test]
    fn a_message_is_cut_into_fragments_in_order() {
        let mut p = Pair::new();
        let frag = p.a.fragment_len();
        assert_eq!(frag, 1500 - 3 - 56);
        let data = pattern(2 * frag + 100, 7);
        let id = p.a.send(data.clone().into()).unwrap();
        let frames = transmit_all(&mut p.a, p.now);
        assert_eq!(frames.len(), 3);
        let seq0 = header(&frames[0]).seq.get();
        for (i, f) in frames.iter().enumerate() {
            let h = header(f);
            assert_eq!(h.frame_type(), FrameType::Data);
            assert_eq!(h.seq.get(), seq0.wrapping_add(i as u32));
            assert_eq!(h.msg_id.get(), id);
            assert_eq!(h.msg_len.get() as usize, data.len());
            assert_eq!(h.frag_off.get() as usize, i * frag);
            assert_eq!(h.has(flags::LAST_FRAGMENT), i == 2);
        }
        assert_eq!(payload_len(&frames[2]), 100);
        for f in &frames {
            deliver(&mut p.b, p.now, f);
        }
        assert_eq!(messages(&mut p.b), [data]);
        assert_eq!(p.a.send_buffered(), 2 * frag + 100);
        p.settle();
        assert_eq!(p.a.send_buffered(), 0);
        assert!(p.a.is_send_idle());
    }

    #[test]
    fn send_refuses_what_the_buffer_cannot_hold() {
        let a = Config {
            send_buffer_bytes: 1000,
            ..Config::default()
        };
        let mut p = Pair::with(a, Config::default());
        // A message larger than the buffer goes alone into an empty one.
        p.a.send(pattern(1500, 0).into()).unwrap();
        assert_eq!(
            p.a.send(pattern(10, 0).into()),
            Err(SendError::BufferFull { queued: 1500 })
        );
        p.settle();
        assert_eq!(p.a.send(pattern(10, 0).into()), Ok(1));
        p.a.close();
        assert_eq!(p.a.send(pattern(10, 0).into()), Err(SendError::Closed));
    }
}
