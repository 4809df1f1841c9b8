//! The receive side: which sequenced frames are plausible, where a
//! fragment's bytes go, in-order delivery of whole messages, and what we
//! tell the peer back (cumulative ACK, credit, SACK blocks).
//!
//! [`Reassembly`] owns the receive side's state and [`PendingAck`] the
//! acknowledgement we owe; other files reach them through their methods.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::timers::Timer;
use super::{wire_ts, Connection, Event, State};
use crate::proto::buf_pool::BufPool;
use crate::proto::conn_table::ConnHandle;
use crate::proto::error::ConnectionError;
use crate::proto::placement::{Placement, Sink};
use crate::proto::seq::Seq;
use crate::time::Instant;
use crate::wire::transport::{flags, MAX_SACK_BLOCKS};
use crate::wire::{FrameType, SackBlock, TransportFrame, TransportHeader};

/// A late duplicate can only be behind the receive window by about one
/// window (the sender never has more than a window in flight, and links
/// keep frames nearly in order); frames further behind than this many
/// windows, or [`MIN_DUPLICATE_HORIZON`] frames, are forged or replayed.
const DUPLICATE_HORIZON_WINDOWS: u32 = 4;

/// Floor of the duplicate horizon in frames.
const MIN_DUPLICATE_HORIZON: u32 = 1 << 16;

const _: () = assert!(MIN_DUPLICATE_HORIZON < 1 << 30);

/// What the receiver remembers of a sequenced frame until it is in order.
#[derive(Copy, Clone, Debug)]
pub(super) struct RecvMeta {
    msg_id: u32,
    last: bool,
    close: bool,
}

/// A message being reassembled: its first `keep` bytes in `data`, the rest
/// (if a [`Placement`] took it) written straight to `sink`.
pub(super) struct Assembly {
    data: Vec<u8>,
    len: usize,
    keep: usize,
    sink: Option<Arc<dyn Sink>>,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("len", &self.len)
            .field("keep", &self.keep)
            .field("placed", &self.sink.is_some())
            .finish()
    }
}

impl Assembly {
    fn put(&mut self, off: usize, bytes: &[u8]) {
        let end = off + bytes.len();
        if off < self.keep {
            let n = end.min(self.keep) - off;
            self.data[off..off + n].copy_from_slice(&bytes[..n]);
        }
        if end > self.keep {
            if let Some(sink) = &self.sink {
                let start = off.max(self.keep);
                sink.write(start - self.keep, &bytes[start - off..]);
            }
        }
    }
}

/// Our receive side: the credit we grant, the frames held out of order
/// and the messages being put together. Only this file's code reads its
/// fields; the rest of the connection starts it, shares out the credit
/// and gives back what the application took, through its methods.
#[derive(Debug)]
pub(super) struct Reassembly {
    /// The next sequence number expected in order.
    nxt: Seq,
    /// The credit granted so far: frames below this may come.
    window_end: Seq,
    /// The credit window in frames (our share of the endpoint's budget).
    window_frames: u32,
    /// The window this connection's configuration gives, before the
    /// endpoint's sharing of the receive budget.
    full_window_frames: u32,
    /// What is held of each frame from `nxt` on (`None`: not received).
    meta: VecDeque<Option<RecvMeta>>,
    /// Frames held beyond a hole.
    n_out_of_order: usize,
    /// The out-of-order frame that arrived last: its SACK block goes first
    /// (RFC 2018), so a sender that lost an ACK still hears of it.
    last_out_of_order: Seq,
    /// Messages whose fragments are arriving, by the sender's id.
    assemblies: HashMap<u32, Assembly>,
    /// Bytes delivered that the application has not taken yet.
    undelivered_bytes: usize,
    /// The window stops while this many bytes are undelivered
    /// ([`Config::undelivered_limit_bytes`](crate::proto::config::Config)).
    undelivered_limit: usize,
    /// The window stopped for undelivered bytes: announce it when it opens.
    window_was_closed: bool,
    /// The peer's CLOSE is in order: nothing more will come.
    peer_closed: bool,
}

impl Reassembly {
    /// Nothing received yet; the credit is `window_frames`, stopped while
    /// `undelivered_limit` bytes wait for the application.
    pub(super) fn new(window_frames: u32, isn: Seq, undelivered_limit: usize) -> Self {
        Reassembly {
            nxt: Seq(0),
            window_end: Seq(0),
            window_frames,
            full_window_frames: window_frames,
            meta: VecDeque::new(),
            n_out_of_order: 0,
            last_out_of_order: isn,
            assemblies: HashMap::new(),
            undelivered_bytes: 0,
            undelivered_limit,
            window_was_closed: false,
            peer_closed: false,
        }
    }

    /// The peer's first sequence number is `seq` (its SYN's or SYN-ACK's):
    /// the credit starts from it.
    pub(super) fn start(&mut self, seq: Seq) {
        self.nxt = seq;
        self.grant_window();
    }

    /// Grant the whole window from `nxt` (before anything was advertised).
    fn grant_window(&mut self) {
        self.window_end = self.nxt.add(self.window_frames);
    }

    /// Limit the credit window to `share` frames (`None`: the configured
    /// window); `advertise` when nothing was advertised yet, so that the
    /// smaller window holds from the first frame.
    pub(super) fn set_share(&mut self, share: Option<u32>, advertise: bool) {
        self.window_frames = share.map_or(self.full_window_frames, |s| {
            self.full_window_frames.min(s.max(1))
        });
        if advertise {
            self.grant_window();
        }
    }

    /// The credit window in frames.
    pub(super) fn window_frames(&self) -> u32 {
        self.window_frames
    }

    /// The application took `len` delivered bytes. When that reopens a
    /// window that had stopped for undelivered bytes, the peer must hear:
    /// `ack` goes now. Only the flag is tested inline (it is almost always
    /// clear; with both tests inline the compiler put the byte count's
    /// first, two instructions more per message).
    #[inline]
    pub(super) fn consumed(&mut self, len: usize, ack: &mut PendingAck) {
        self.undelivered_bytes = self.undelivered_bytes.saturating_sub(len);
        if self.window_was_closed {
            self.reopen(ack);
        }
    }

    /// The window had stopped: it opens once the undelivered bytes are
    /// below the limit, and `ack` announces it.
    #[cold]
    #[inline(never)]
    fn reopen(&mut self, ack: &mut PendingAck) {
        if self.undelivered_bytes < self.undelivered_limit {
            self.window_was_closed = false;
            ack.request_now();
        }
    }

    /// The messages being put together (tests that print them in key
    /// order).
    #[cfg(test)]
    pub(super) fn assemblies_mut(&mut self) -> &mut HashMap<u32, Assembly> {
        &mut self.assemblies
    }

    /// Frames are held out of order: there are SACK blocks to send.
    #[inline(always)]
    pub(super) fn holds_out_of_order(&self) -> bool {
        self.n_out_of_order != 0
    }

    /// The SACK blocks to send (at most `room`), and how many there are.
    /// Inlined for the common case of nothing held out of order, so that a
    /// frame's sender pays no call and no array copy for it.
    #[inline]
    pub(super) fn sack_blocks(&self, room: usize) -> ([SackBlock; MAX_SACK_BLOCKS], usize) {
        if self.n_out_of_order == 0 || room == 0 {
            return ([SackBlock::default(); MAX_SACK_BLOCKS], 0);
        }
        self.held_sack_blocks(room.min(MAX_SACK_BLOCKS))
    }

    /// [`Reassembly::sack_blocks`] when frames are held out of order and
    /// `max` (1..=4) blocks fit.
    #[inline(never)]
    fn held_sack_blocks(&self, max: usize) -> ([SackBlock; MAX_SACK_BLOCKS], usize) {
        let mut out = [SackBlock::default(); MAX_SACK_BLOCKS];
        // Runs of frames held beyond `rcv_nxt`, as index ranges: the run
        // holding the frame that arrived last, and the highest runs.
        let recent = usize::try_from(self.last_out_of_order.diff(self.nxt)).ok();
        let mut highest = [(0usize, 0usize); MAX_SACK_BLOCKS];
        let (mut runs, mut recent_run, mut start) = (0usize, None, None);
        let len = self.meta.len();
        for i in 0..=len {
            let held = i < len && self.meta[i].is_some();
            match (held, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    highest[runs % MAX_SACK_BLOCKS] = (s, i);
                    runs += 1;
                    if recent.is_some_and(|r| s <= r && r < i) {
                        recent_run = Some((s, i));
                    }
                    start = None;
                }
                _ => {}
            }
        }
        let block = |(s, e): (usize, usize)| {
            SackBlock::new(self.nxt.add(s as u32).0, self.nxt.add(e as u32).0)
        };
        let mut n = 0;
        if let Some(r) = recent_run {
            out[0] = block(r);
            n = 1;
        }
        for k in 1..=runs.min(MAX_SACK_BLOCKS) {
            let r = highest[(runs - k) % MAX_SACK_BLOCKS];
            if n == max {
                break;
            }
            if Some(r) != recent_run {
                out[n] = block(r);
                n += 1;
            }
        }
        (out, n)
    }
}

/// The acknowledgement we owe the peer: how many frames it covers, whether
/// it must go now, and the timestamp it echoes with when that frame came.
#[derive(Debug, Default)]
pub(super) struct PendingAck {
    /// Sequenced frames received since our last acknowledgement.
    frames: u32,
    /// Send one at the next chance, not after the delayed-ACK timer.
    now: bool,
    /// The peer's timestamp to echo (RFC 7323's TS.Recent).
    ts_recent: u32,
    /// Our wire clock when the frame whose timestamp is `ts_recent` arrived
    /// (the start of the ACK delay we report).
    ts_recent_rx: u32,
}

impl PendingAck {
    /// Acknowledge at the next chance.
    #[inline(always)]
    pub(super) fn request_now(&mut self) {
        self.now = true;
    }

    /// An acknowledgement is to go at the next chance.
    #[inline(always)]
    pub(super) fn is_due_now(&self) -> bool {
        self.now
    }

    /// The delayed-ACK timer fired: send it if any frame waits for one.
    pub(super) fn on_timer(&mut self) {
        if self.frames > 0 {
            self.now = true;
        }
    }
}

impl Connection {
    /// A sequenced frame is only looked at when its sequence number is below
    /// the credit we granted and at most a duplicate horizon behind
    /// `rcv_nxt`: neither bound is ever crossed by the true peer, so frames
    /// outside are forged (or replayed from long ago). They are counted and
    /// dropped whole (their acknowledgement fields are not trusted either)
    /// and not answered, so that forged frames cannot make us send.
    pub(super) fn seq_plausible(&mut self, seq: Seq) -> bool {
        if !seq.lt(self.rcv.window_end) {
            self.stats.beyond_window += 1;
            return false;
        }
        // The frame expected next (the common case) is within any horizon.
        if seq == self.rcv.nxt {
            return true;
        }
        let horizon = self
            .rcv
            .window_frames
            .saturating_mul(DUPLICATE_HORIZON_WINDOWS)
            .max(MIN_DUPLICATE_HORIZON);
        if self.rcv.nxt.diff(seq) > horizon as i32 {
            self.stats.out_of_window += 1;
            return false;
        }
        true
    }

    /// Header prediction (as Van Jacobson's TCP receive path): true when
    /// `frame` is the common case of an established exchange, the DATA
    /// frame expected next (so within the credit and no duplicate),
    /// carrying a whole message, with nothing held out of order. What the
    /// general dispatch does for it is then known: deliver the message,
    /// then take the acknowledgement (which predicts its own common case).
    #[inline(always)]
    pub(super) fn predicted(&self, frame: &TransportFrame<'_>) -> bool {
        let h = frame.header;
        let seq = Seq(h.seq.get());
        let msg_len = h.msg_len.get() as usize;
        super::prediction_on()
            && self.state == State::Established
            && h.frame_type() == FrameType::Data
            && seq == self.rcv.nxt
            && seq.lt(self.rcv.window_end)
            && h.frag_off.get() == 0
            && h.has(flags::LAST_FRAGMENT)
            && frame.payload.len() == msg_len
            && msg_len <= self.cfg.max_message_len
            && self.rcv.meta.is_empty()
    }

    /// Sequenced frames that header prediction did not take: out of line,
    /// so that the predicted path's copy of the delivery stays the only
    /// one in the frame's path.
    #[inline(never)]
    pub(super) fn receive_sequenced(
        &mut self,
        now: Instant,
        frame: &TransportFrame<'_>,
        placement: Option<&mut dyn Placement>,
        pool: &mut BufPool,
        events: Option<&mut VecDeque<(ConnHandle, Event)>>,
    ) {
        let h = frame.header;
        // A whole message in one frame, in order: deliver it without the
        // reassembly map (the common small-message case, whose code stays
        // small; everything else takes the general path).
        if Seq(h.seq.get()) == self.rcv.nxt && h.frame_type() == FrameType::Data {
            let msg_len = h.msg_len.get() as usize;
            if h.frag_off.get() == 0
                && frame.payload.len() == msg_len
                && h.has(flags::LAST_FRAGMENT)
                && msg_len <= self.cfg.max_message_len
            {
                self.deliver_in_order_single(now, wire_ts(now), h, frame.payload, pool, events);
                return;
            }
        }
        self.receive_sequenced_general(now, frame, placement, pool);
    }

    /// [`Self::receive_sequenced`] for duplicates, frames out of order,
    /// fragments and CLOSE.
    #[inline(never)]
    fn receive_sequenced_general(
        &mut self,
        now: Instant,
        frame: &TransportFrame<'_>,
        placement: Option<&mut dyn Placement>,
        pool: &mut BufPool,
    ) {
        let h = frame.header;
        let seq = Seq(h.seq.get());
        if seq.lt(self.rcv.nxt) {
            self.stats.duplicates += 1;
            self.ack.now = true;
            // A retransmission of what we have (our ACK was lost): echo its
            // timestamp, so that the ACK it provokes measures this round
            // trip and not the time since the original was sent (RFC 7323
            // 4.3 updates TS.Recent for such segments too). Not while an
            // ACK of new frames is still to go: that ACK echoes the frame
            // that advanced the left edge, so that a sender whose timeout
            // fired while we were busy (original and retransmission read
            // in one pass) sees the original's timestamp and undoes the
            // timeout as spurious (Eifel, RFC 3522).
            let ts = h.ts_val.get();
            if self.ack.frames == 0 && (ts.wrapping_sub(self.ack.ts_recent) as i32) > 0 {
                self.ack.ts_recent = ts;
                self.ack.ts_recent_rx = wire_ts(now);
            }
            return;
        }
        let idx = seq.diff(self.rcv.nxt) as usize;
        if idx < self.rcv.meta.len() && self.rcv.meta[idx].is_some() {
            self.stats.duplicates += 1;
            self.ack.now = true;
            return;
        }
        let meta = if h.frame_type() == FrameType::Close {
            RecvMeta {
                msg_id: 0,
                last: false,
                close: true,
            }
        } else {
            let msg_len = h.msg_len.get() as usize;
            let off = h.frag_off.get() as usize;
            let len = frame.payload.len();
            if msg_len > self.cfg.max_message_len
                || off + len > msg_len
                || (len == 0 && msg_len != 0)
            {
                self.stats.violations += 1;
                return;
            }
            let msg_id = h.msg_id.get();
            let asm = self.rcv.assemblies.entry(msg_id).or_insert_with(|| {
                let placed = match placement {
                    Some(p) if off == 0 => p.place(msg_len, frame.payload),
                    _ => None,
                };
                match placed {
                    Some((keep, sink)) if keep <= msg_len => Assembly {
                        data: vec![0u8; keep],
                        len: msg_len,
                        keep,
                        sink: Some(sink),
                    },
                    _ => Assembly {
                        data: pool.zeroed(msg_len),
                        len: msg_len,
                        keep: msg_len,
                        sink: None,
                    },
                }
            });
            if asm.len != msg_len {
                self.stats.violations += 1;
                return;
            }
            asm.put(off, frame.payload);
            self.stats.payload_bytes_received += len as u64;
            RecvMeta {
                msg_id,
                last: h.has(flags::LAST_FRAGMENT),
                close: false,
            }
        };
        if self.rcv.meta.len() <= idx {
            self.rcv.meta.resize(idx + 1, None);
        }
        self.rcv.meta[idx] = Some(meta);
        if idx == 0 {
            self.ack.ts_recent = h.ts_val.get();
            self.ack.ts_recent_rx = wire_ts(now);
        } else {
            self.rcv.n_out_of_order += 1;
            self.rcv.last_out_of_order = seq;
            self.ack.now = true;
        }
        self.advance_in_order(Some(seq));
        self.after_sequenced(now, h);
    }

    /// Move `rcv_nxt` over every frame now in order and deliver the messages
    /// they complete. `fresh` is the frame just received, which was never
    /// counted as out of order.
    fn advance_in_order(&mut self, fresh: Option<Seq>) {
        while let Some(Some(meta)) = self.rcv.meta.front().copied() {
            self.rcv.meta.pop_front();
            if Some(self.rcv.nxt) != fresh {
                self.rcv.n_out_of_order -= 1;
            }
            self.rcv.nxt = self.rcv.nxt.add(1);
            if meta.close {
                self.rcv.peer_closed = true;
            } else if meta.last {
                if let Some(asm) = self.rcv.assemblies.remove(&meta.msg_id) {
                    self.rcv.undelivered_bytes += asm.data.len();
                    self.stats.messages_received += 1;
                    self.events.push_back(Event::Message {
                        msg_id: meta.msg_id,
                        data: asm.data,
                    });
                }
            }
        }
    }

    /// Acknowledgement bookkeeping after a new sequenced frame, and the end
    /// of the connection once the peer's CLOSE is in order. Always inlined:
    /// small, and on every in-order frame's path.
    #[inline(always)]
    fn after_sequenced(&mut self, now: Instant, h: &TransportHeader) {
        self.ack.frames += 1;
        if self.ack.frames >= self.cfg.ack_every || h.has(flags::ACK_NOW) || self.rcv.peer_closed {
            self.ack.now = true;
        } else {
            let delay = if h.has(flags::ACK_SOON) {
                self.cfg.ack_soon_delay
            } else {
                self.cfg.ack_delay
            };
            let due = now + delay;
            let t = self.timers.get(Timer::Ack);
            self.timers
                .set(Timer::Ack, Some(t.map_or(due, |d| d.min(due))));
        }
        if self.rcv.peer_closed {
            // Everything before the CLOSE is delivered; acknowledge it, then end.
            self.ack.now = true;
            if self.snd.is_drained() {
                self.finish();
            } else {
                self.fail(ConnectionError::PeerClosed(self.snd.unacked_messages()));
            }
        }
    }

    #[inline(always)]
    pub(super) fn deliver_in_order_single(
        &mut self,
        now: Instant,
        wts: u32,
        h: &TransportHeader,
        payload: &[u8],
        pool: &mut BufPool,
        events: Option<&mut VecDeque<(ConnHandle, Event)>>,
    ) {
        let msg_id = h.msg_id.get();
        self.ack.ts_recent = h.ts_val.get();
        self.ack.ts_recent_rx = wts;
        self.rcv.nxt = self.rcv.nxt.add(1);
        self.rcv.meta.pop_front();
        self.rcv.undelivered_bytes += payload.len();
        self.stats.payload_bytes_received += payload.len() as u64;
        self.stats.messages_received += 1;
        let ev = Event::Message {
            msg_id,
            data: pool.copy_of(payload),
        };
        match events {
            Some(q) if self.events.is_empty() => q.push_back((self.handle, ev)),
            _ => self.events.push_back(ev),
        }
        // Frames that arrived early may now be in order.
        if !self.rcv.meta.is_empty() {
            self.advance_in_order(None);
        }
        self.after_sequenced(now, h);
    }

    pub(super) fn ack_fields(&mut self, h: &mut TransportHeader) {
        if self.rcv.undelivered_bytes < self.rcv.undelivered_limit {
            self.rcv.window_end = self
                .rcv
                .window_end
                .max(self.rcv.nxt.add(self.rcv.window_frames));
        } else {
            self.rcv.window_was_closed = true;
        }
        h.ack = self.rcv.nxt.0.into();
        h.window_end = self.rcv.window_end.0.into();
        h.ts_ecr = self.ack.ts_recent.into();
        // How long we held what this acknowledges (`ts_val` is our clock
        // now); the peer takes it out of its RTT sample.
        if self.ack.ts_recent_rx != 0 {
            let held = h.ts_val.get().wrapping_sub(self.ack.ts_recent_rx);
            h.ack_delay = (held.min(u32::from(u16::MAX)) as u16).into();
        }
        self.ack.frames = 0;
        self.ack.now = false;
        self.timers.set(Timer::Ack, None);
    }

    /// The `max_ack_delay` we announce in the handshake: the longest we
    /// hold the acknowledgement of a frame that did not ask for one soon
    /// (`ack_delay`), in microseconds, at least 1 (0 would mean none).
    pub(super) fn max_ack_delay_micros(&self) -> u32 {
        (self.cfg.ack_delay.as_micros().min(u128::from(u32::MAX)) as u32).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::harness::{
        deliver, header, messages, pattern, sacks, transmit, transmit_all, Pair,
    };

    /// A sends `n` one-frame messages; their frames, not delivered.
    fn one_frame_messages(p: &mut Pair, n: u8) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let msgs: Vec<Vec<u8>> = (0..n).map(|i| pattern(100 + i as usize, i)).collect();
        for m in &msgs {
            p.a.send(m.clone().into()).unwrap();
        }
        let frames = transmit_all(&mut p.a, p.now);
        assert_eq!(frames.len(), n as usize);
        (msgs, frames)
    }

    #[test]
    fn frames_out_of_order_are_held_and_delivered_in_order() {
        let mut p = Pair::new();
        let (msgs, frames) = one_frame_messages(&mut p, 4);
        for i in [3, 1, 2] {
            deliver(&mut p.b, p.now, &frames[i]);
        }
        assert!(messages(&mut p.b).is_empty(), "delivered past a hole");
        assert_eq!(p.b.rcv.n_out_of_order, 3);
        deliver(&mut p.b, p.now, &frames[0]);
        assert_eq!(messages(&mut p.b), msgs);
        assert_eq!(p.b.rcv.n_out_of_order, 0);
        assert_eq!(p.b.stats().messages_received, 4);
        assert_eq!(p.b.stats().duplicates, 0);
    }

    #[test]
    fn fragments_out_of_order_reassemble_one_message() {
        let mut p = Pair::new();
        let data = pattern(3 * p.a.fragment_len(), 9);
        p.a.send(data.clone().into()).unwrap();
        let frames = transmit_all(&mut p.a, p.now);
        assert_eq!(frames.len(), 3);
        for i in [2, 0] {
            deliver(&mut p.b, p.now, &frames[i]);
        }
        assert!(messages(&mut p.b).is_empty());
        deliver(&mut p.b, p.now, &frames[1]);
        assert_eq!(messages(&mut p.b), [data]);
    }

    #[test]
    fn duplicates_are_dropped_counted_and_acknowledged_at_once() {
        let mut p = Pair::new();
        let (msgs, frames) = one_frame_messages(&mut p, 3);
        // In order, then again (its ACK was lost); out of order, then again.
        deliver(&mut p.b, p.now, &frames[0]);
        let _ = transmit_all(&mut p.b, p.now);
        deliver(&mut p.b, p.now, &frames[0]);
        assert!(p.b.ack.is_due_now(), "a duplicate is answered at once");
        deliver(&mut p.b, p.now, &frames[2]);
        deliver(&mut p.b, p.now, &frames[2]);
        deliver(&mut p.b, p.now, &frames[1]);
        assert_eq!(p.b.stats().duplicates, 2);
        assert_eq!(messages(&mut p.b), msgs);
        assert_eq!(
            p.b.stats().payload_bytes_received,
            msgs.iter().map(|m| m.len() as u64).sum::<u64>()
        );
    }

    #[test]
    fn acknowledgements_carry_sack_blocks_for_what_is_held() {
        let mut p = Pair::new();
        let (_, frames) = one_frame_messages(&mut p, 6);
        let seq = |i: usize| header(&frames[i]).seq.get();
        // Held: 1, then 4 and 5; missing: 0, 2, 3.
        for i in [1, 4, 5] {
            deliver(&mut p.b, p.now, &frames[i]);
        }
        let ack = transmit(&mut p.b, p.now).expect("an ACK for frames out of order");
        assert_eq!(header(&ack).ack.get(), seq(0));
        // The run holding the frame that arrived last goes first.
        assert_eq!(sacks(&ack), [(seq(4), seq(5) + 1), (seq(1), seq(2))]);
        // Once the holes are filled there is nothing left to report.
        for i in [0, 2, 3] {
            deliver(&mut p.b, p.now, &frames[i]);
        }
        p.b.ack.request_now();
        let ack = transmit(&mut p.b, p.now).unwrap();
        assert_eq!(header(&ack).ack.get(), seq(5) + 1);
        assert!(sacks(&ack).is_empty());
    }

    #[test]
    fn frames_beyond_the_credit_are_dropped_and_counted() {
        let mut p = Pair::new();
        let (_, frames) = one_frame_messages(&mut p, 1);
        // The same frame one window further on (the CRC made anew).
        let mut h = header(&frames[0]);
        h.seq = h.seq.get().wrapping_add(p.b.window_frames()).into();
        let mut forged = vec![0u8; 1514];
        let addr = *p.a.addresses();
        let n = crate::wire::emit_transport(&mut forged, &addr, &h, &[], &[0u8; 100]).unwrap();
        forged.truncate(n);
        let received = p.b.stats().frames_received;
        deliver(&mut p.b, p.now, &forged);
        assert_eq!(p.b.stats().beyond_window, 1);
        assert_eq!(p.b.stats().frames_received, received);
        assert!(
            transmit(&mut p.b, p.now).is_none(),
            "a forged frame was answered"
        );
    }
}
