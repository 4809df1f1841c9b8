//! Two connected [`Connection`]s over a virtual wire, with virtual time: the
//! harness the tests beside each part of the connection share. Frames are
//! real encoded frames (written by `poll_transmit`, parsed by
//! [`wire::parse`]); a test loses, reorders or delays one by holding the
//! bytes instead of delivering them. Nothing reads a clock.

use std::time::Duration;

use super::timers::Timer;
use super::{Config, Connection, Event};
use crate::time::Instant;
use crate::wire::{self, llc, Addresses, Body, MacAddr, TransportHeader};

const A_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const B_MAC: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
/// The link MTU of both ends.
pub(super) const MTU: usize = 1500;

/// A (port 1) connected to B (port 7).
pub(super) struct Pair {
    pub a: Connection,
    pub b: Connection,
    /// The virtual clock.
    pub now: Instant,
}

impl Pair {
    /// Both ends with the default configuration.
    pub fn new() -> Pair {
        Pair::with(Config::default(), Config::default())
    }

    /// A and B with their own configurations, the handshake done and both
    /// `Connected` events taken.
    pub fn with(cfg_a: Config, cfg_b: Config) -> Pair {
        Pair::with_mtu(cfg_a, cfg_b, MTU)
    }

    /// [`Pair::with`] on a link of `mtu`.
    pub fn with_mtu(cfg_a: Config, cfg_b: Config, mtu: usize) -> Pair {
        // Not zero: a wire timestamp of zero means "none".
        let now = Instant::from_millis(1);
        let addr = |src, dst| Addresses {
            dst,
            src,
            dsap: llc::DEFAULT_SAP,
            ssap: llc::DEFAULT_SAP,
        };
        let mut a = Connection::connect(cfg_a, now, addr(A_MAC, B_MAC), 1, 7, 0xa, 1000, mtu);
        let syn = transmit(&mut a, now).expect("a SYN");
        let b = with_header(&syn, |h| {
            Connection::accept(cfg_b, now, addr(B_MAC, A_MAC), 7, h, 0xb, 5000, mtu)
        });
        let mut p = Pair { a, b, now };
        p.drive();
        assert_eq!(p.a.poll_event(), Some(Event::Connected));
        assert_eq!(p.b.poll_event(), Some(Event::Connected));
        p
    }

    /// Exchange frames at `now` until neither end has one to send.
    pub fn drive(&mut self) {
        for _ in 0..100_000 {
            let from_a = transmit_all(&mut self.a, self.now);
            let from_b = transmit_all(&mut self.b, self.now);
            if from_a.is_empty() && from_b.is_empty() {
                return;
            }
            for f in &from_a {
                deliver(&mut self.b, self.now, f);
            }
            for f in &from_b {
                deliver(&mut self.a, self.now, f);
            }
        }
        panic!("the ends never went quiet");
    }

    /// [`Pair::drive`], then let time pass until neither end owes a
    /// delayed acknowledgement.
    pub fn settle(&mut self) {
        self.drive();
        while let Some(t) = [&self.a, &self.b]
            .iter()
            .filter_map(|c| c.timers.get(Timer::Ack))
            .min()
        {
            self.advance_to(t);
            self.drive();
        }
    }

    /// Move the clock to `t` and run every timer of either end due by then.
    pub fn advance_to(&mut self, t: Instant) {
        assert!(t >= self.now);
        self.now = t;
        for c in [&mut self.a, &mut self.b] {
            if c.poll_timeout().is_some_and(|d| d <= t) {
                c.handle_timeout(t);
            }
        }
    }

    /// A's frames reach B at once and B acknowledges them at once; the
    /// acknowledgement reaches A `rtt` later (no timer runs on the way).
    /// Returns A's frames.
    pub fn round_trip(&mut self, rtt: Duration) -> Vec<Vec<u8>> {
        let frames = transmit_all(&mut self.a, self.now);
        for f in &frames {
            deliver(&mut self.b, self.now, f);
        }
        self.b.ack.request_now();
        let acks = transmit_all(&mut self.b, self.now);
        self.now += rtt;
        for f in &acks {
            deliver(&mut self.a, self.now, f);
        }
        frames
    }

    /// Let `d` pass in steps of `step`, firing timers and exchanging
    /// frames after each.
    pub fn run_for(&mut self, d: Duration, step: Duration) {
        let end = self.now + d;
        while self.now < end {
            let t = self.now + step;
            self.advance_to(t);
            self.drive();
        }
    }
}

/// The next frame `c` sends at `now` (a buffer for the largest frame: a
/// pair may have another MTU than [`MTU`]).
pub(super) fn transmit(c: &mut Connection, now: Instant) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; wire::ethernet::HEADER_LEN + u16::MAX as usize];
    let n = c.poll_transmit(now, &mut buf)?;
    buf.truncate(n);
    Some(buf)
}

/// Every frame `c` sends at `now`.
pub(super) fn transmit_all(c: &mut Connection, now: Instant) -> Vec<Vec<u8>> {
    std::iter::from_fn(|| transmit(c, now)).collect()
}

/// Hand a frame (as sent by the other end) to `c`.
pub(super) fn deliver(c: &mut Connection, now: Instant, frame: &[u8]) {
    match wire::parse(frame, None).expect("a well-formed frame").body {
        Body::Transport(tf) => c.handle_frame(now, &tf),
        other => panic!("not a transport frame: {other:?}"),
    }
}

/// `f` applied to the transport header of `frame`.
pub(super) fn with_header<R>(frame: &[u8], f: impl FnOnce(&TransportHeader) -> R) -> R {
    match wire::parse(frame, None).expect("a well-formed frame").body {
        Body::Transport(tf) => f(tf.header),
        other => panic!("not a transport frame: {other:?}"),
    }
}

/// The transport header of `frame`, copied.
pub(super) fn header(frame: &[u8]) -> TransportHeader {
    with_header(frame, |h| *h)
}

/// The SACK blocks of `frame`, as `(start, end)` pairs.
pub(super) fn sacks(frame: &[u8]) -> Vec<(u32, u32)> {
    match wire::parse(frame, None).expect("a well-formed frame").body {
        Body::Transport(tf) => tf
            .sacks
            .iter()
            .map(|b| (b.start.get(), b.end.get()))
            .collect(),
        other => panic!("not a transport frame: {other:?}"),
    }
}

/// The payload length of `frame`.
pub(super) fn payload_len(frame: &[u8]) -> usize {
    header(frame).payload_len.get() as usize
}

/// Every event `c` has, taken.
pub(super) fn events(c: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// The messages among `c`'s events, in order (other events dropped).
pub(super) fn messages(c: &mut Connection) -> Vec<Vec<u8>> {
    events(c)
        .into_iter()
        .filter_map(|e| match e {
            Event::Message { data, .. } => Some(data),
            _ => None,
        })
        .collect()
}

/// `n` bytes of a pattern that tells offsets apart.
pub(super) fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}
