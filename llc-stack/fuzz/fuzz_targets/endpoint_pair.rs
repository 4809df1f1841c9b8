//! The protocol state machine under arbitrary events: two endpoints (A
//! connects to B's port 7) joined by two frame queues, driven by the fuzz
//! input, which picks one step at a time: either end sends a message, a
//! queued frame is delivered, dropped, duplicated, moved back or corrupted,
//! time passes (by an amount or to the next timer), either end closes, or a
//! forged frame is injected into either end. Forged frames are built from
//! header fields in the input and emitted with `wire::emit_transport`, so
//! their CRC is valid and they reach the state machine; their cookies are
//! drawn from the input or copied from the live connections.
//!
//! Invariants, checked after every step:
//! - nothing panics;
//! - memory stays bounded: connection count within the configured limit,
//!   send buffers within theirs;
//! - unless a forged frame carried the true peer's MAC and a live
//!   connection's real cookie (an on-path attacker, which the protocol does
//!   not claim to stop), every message delivered on the real connection is
//!   the next one the real peer sent (exactly once, in order, intact), and a
//!   sender never sees more messages acknowledged than the receiver delivered.
#![no_main]

use std::collections::VecDeque;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use llc_stack::proto::{ConnHandle, Config, Endpoint, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, MacAddr, SackBlock, TransportHeader};
use llc_stack::Instant;

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
const MAC_X: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xe]);
const PORT: u16 = 7;
/// Frames a queue holds; more are dropped (a full link).
const QUEUE_LIMIT: usize = 4096;
const MAX_MSG: usize = 20_000;

/// Reads the fuzz input; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Message `i` of one direction: length and bytes follow from `i` and `len`.
fn message(dir: u8, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u8) ^ (i as u8).wrapping_mul(31) ^ dir)
        .collect()
}

struct Side {
    ep: Endpoint,
    /// Frames on their way to this side.
    inbox: VecDeque<Vec<u8>>,
    /// The real connection at this side, once known.
    conn: Option<ConnHandle>,
    /// Messages this side sent on the real connection (lengths).
    sent: Vec<usize>,
    /// Messages this side received on the real connection.
    delivered: usize,
    /// Acked events on the real connection.
    acked: usize,
    mtu: usize,
}

fn config() -> Config {
    Config {
        recv_buffer_bytes: 64 << 10,
        min_window_frames: 4,
        max_window_frames: 64,
        undelivered_limit_bytes: 128 << 10,
        max_message_len: 64 << 10,
        send_buffer_bytes: 256 << 10,
        max_half_open: 8,
        max_connections: 16,
        // Cover the optional and shared-budget paths too.
        delay_control: true,
        rx_budget_frames: Some(48),
        ..Config::default()
    }
}

fn pump(from: &mut Side, to: &mut Side, now: Instant) {
    let mut buf = vec![0u8; from.mtu + 14];
    for _ in 0..10_000 {
        let Some(n) = from.ep.poll_transmit(now, &mut buf) else {
            return;
        };
        assert!(n <= from.mtu + 14, "frame of {n} bytes on MTU {}", from.mtu);
        if to.inbox.len() < QUEUE_LIMIT {
            to.inbox.push_back(buf[..n].to_vec());
        }
    }
    panic!("poll_transmit never stops producing frames");
}

/// Take events; check delivered messages against what the peer sent.
fn events(me: &mut Side, peer: &Side, peer_mac: MacAddr, dir: u8, forged: bool) {
    while let Some((h, ev)) = me.ep.poll_event() {
        match ev {
            Event::Connected if me.conn.is_none() => {
                if me.ep.peer(h).map(|p| p.0) == Some(peer_mac) {
                    me.conn = Some(h);
                }
            }
            Event::Message { msg_id, data } if Some(h) == me.conn => {
                if !forged {
                    let i = me.delivered;
                    assert!(i < peer.sent.len(), "message {msg_id} never sent");
                    assert_eq!(msg_id as usize, i, "out of order");
                    assert_eq!(data, message(dir, i, peer.sent[i]), "corrupted");
                }
                me.delivered += 1;
            }
            Event::Acked { .. } if Some(h) == me.conn => me.acked += 1,
            _ => {}
        }
    }
}

fn check_bounds(s: &Side, cfg: &Config) {
    assert!(s.ep.connection_count() <= cfg.max_connections);
    if let Some(c) = s.conn.and_then(|h| s.ep.connection(h)) {
        assert!(c.send_buffered() <= cfg.send_buffer_bytes + MAX_MSG);
    }
}

/// A forged frame for `target`, built from the input.
fn forge(inp: &mut Input, target: &Side, target_mac: MacAddr, peer: &Side) -> (Vec<u8>, bool) {
    let src = if inp.u8() & 1 == 0 { MAC_X } else if target_mac == MAC_B { MAC_A } else { MAC_B };
    let real = target.conn.and_then(|h| target.ep.connection(h));
    let peer_real = peer.conn.and_then(|h| peer.ep.connection(h));
    let sel = inp.u8();
    let (src_port, dst_port) = match (sel & 3, real) {
        (0, Some(c)) => (c.peer_port(), c.local_port()),
        _ => (inp.u16(), if sel & 4 == 0 { PORT } else { inp.u16() }),
    };
    let mut real_cookie = false;
    let dst_cookie = match ((sel >> 3) & 3, real) {
        (0, Some(c)) => {
            real_cookie = true;
            c.local_cookie()
        }
        (1, _) => 0,
        _ => inp.u32(),
    };
    let src_cookie = match ((sel >> 5) & 3, real, peer_real) {
        (0, Some(c), _) => c.peer_cookie(),
        (1, _, Some(p)) => p.local_cookie(),
        _ => inp.u32(),
    };
    let kind = inp.u8() % 9;
    let h = TransportHeader {
        kind,
        flags: inp.u8(),
        src_port: src_port.into(),
        dst_port: dst_port.into(),
        src_cookie: src_cookie.into(),
        dst_cookie: dst_cookie.into(),
        seq: inp.u32().into(),
        ack: inp.u32().into(),
        window_end: inp.u32().into(),
        msg_id: (inp.u8() as u32).into(),
        msg_len: (inp.u16() as u32).into(),
        frag_off: (inp.u16() as u32).into(),
        ts_val: inp.u32().into(),
        ts_ecr: inp.u32().into(),
        ..Default::default()
    };
    let nsacks = (inp.u8() % 5) as usize;
    let sacks: Vec<SackBlock> = (0..nsacks)
        .map(|_| SackBlock::new(inp.u32(), inp.u32()))
        .collect();
    let payload = vec![inp.u8(); (inp.u16() as usize) % 1500];
    let addr = Addresses {
        dst: target_mac,
        src,
        dsap: wire::llc::DEFAULT_SAP,
        ssap: wire::llc::DEFAULT_SAP,
    };
    let mut buf = vec![0u8; 14 + 3 + 56 + 8 * 4 + 1500];
    let n = wire::emit_transport(&mut buf, &addr, &h, &sacks, &payload).expect("fits");
    buf.truncate(n);
    // An on-path attacker: the true peer's address and a live real cookie.
    let forged = src != MAC_X && real_cookie;
    (buf, forged)
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let cfg = config();
    let mtus = [600usize, 1500, 9000];
    let mtu_a = mtus[(inp.u8() % 3) as usize];
    let mtu_b = mtus[(inp.u8() % 3) as usize];
    let mut now = Instant::from_millis(1);
    let mut a = Side {
        ep: Endpoint::new(cfg.clone(), MAC_A, mtu_a, Rng::new(1)),
        inbox: VecDeque::new(),
        conn: None,
        sent: Vec::new(),
        delivered: 0,
        acked: 0,
        mtu: mtu_a,
    };
    let mut b = Side {
        ep: Endpoint::new(cfg.clone(), MAC_B, mtu_b, Rng::new(2)),
        inbox: VecDeque::new(),
        conn: None,
        sent: Vec::new(),
        delivered: 0,
        acked: 0,
        mtu: mtu_b,
    };
    b.ep.listen(PORT);
    a.conn = Some(a.ep.connect(now, MAC_B, PORT, None).expect("connect"));
    let mut forged = false;
    let mut steps = 0;
    while !inp.is_empty() && steps < 5000 {
        steps += 1;
        let op = inp.u8();
        let (me, other, me_mac) = if op & 0x80 == 0 {
            (&mut a, &mut b, MAC_A)
        } else {
            (&mut b, &mut a, MAC_B)
        };
        match op & 0x7f {
            // Send a message on the real connection.
            0..=15 => {
                if let Some(h) = me.conn {
                    let len = inp.u16() as usize % MAX_MSG;
                    let dir = if me_mac == MAC_A { 0xa } else { 0xb };
                    let i = me.sent.len();
                    if me.ep.send(h, message(dir, i, len)).is_ok() {
                        me.sent.push(len);
                    }
                }
            }
            // Deliver the next frame to this side.
            16..=63 => {
                if let Some(f) = me.inbox.pop_front() {
                    me.ep.handle_frame(now, &f);
                }
            }
            64..=71 => {
                me.inbox.pop_front();
            }
            72..=75 => {
                if let Some(f) = me.inbox.front().cloned() {
                    if me.inbox.len() < QUEUE_LIMIT {
                        me.inbox.push_back(f);
                    }
                }
            }
            76..=79 => {
                let k = inp.u8() as usize;
                if me.inbox.len() > 1 {
                    let f = me.inbox.pop_front().expect("len > 1");
                    let at = k % me.inbox.len();
                    me.inbox.insert(at + 1, f);
                }
            }
            80..=83 => {
                let at = inp.u16() as usize;
                let bit = inp.u8() & 7;
                if let Some(f) = me.inbox.front_mut() {
                    let i = at % f.len();
                    f[i] ^= 1 << bit;
                }
            }
            // Time passes.
            84..=95 => {
                now += Duration::from_micros(inp.u16() as u64 * 16);
            }
            96..=107 => {
                let next = [a.ep.poll_timeout(), b.ep.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                if let Some(t) = next {
                    now = now.max(t);
                }
            }
            108..=111 => {
                if let Some(h) = me.conn {
                    me.ep.close(h);
                }
            }
            112..=113 => {
                if let Some(h) = me.conn {
                    me.ep.abort(h);
                }
            }
            _ => {
                let (target, peer, mac) = if op & 1 == 0 {
                    (&*me, &*other, me_mac)
                } else {
                    (&*other, &*me, if me_mac == MAC_A { MAC_B } else { MAC_A })
                };
                let (frame, f) = forge(&mut inp, target, mac, peer);
                forged |= f;
                if mac == MAC_A {
                    a.ep.handle_frame(now, &frame);
                } else {
                    b.ep.handle_frame(now, &frame);
                }
            }
        }
        now += Duration::from_micros(1);
        for s in [&mut a, &mut b] {
            if s.ep.poll_timeout().is_some_and(|t| t <= now) {
                s.ep.handle_timeout(now);
            }
        }
        events(&mut a, &b, MAC_B, 0xb, forged);
        events(&mut b, &a, MAC_A, 0xa, forged);
        pump(&mut a, &mut b, now);
        pump(&mut b, &mut a, now);
        if !forged {
            assert!(a.acked <= b.delivered, "A saw more acknowledged than B delivered");
            assert!(b.acked <= a.delivered, "B saw more acknowledged than A delivered");
        }
        check_bounds(&a, &cfg);
        check_bounds(&b, &cfg);
    }
});
