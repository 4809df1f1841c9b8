//! Harness for tests that run transports (and later the message layer) over a
//! real veth pair between two network namespaces.
//!
//! - [`connected_pair`] builds a [`TwoHosts`] testbed, creates one transport in
//!   each namespace and connects A to B.
//! - [`Pair`] drives both from one thread: `progress` on each, and when
//!   neither moved, `prepare_wait` on both and `poll(2)` on the union of
//!   their descriptors (so every test also exercises `prepare_wait`).
//! - [`Pair::exchange`] sends lists of messages both ways at once, retrying on
//!   `WouldBlock`, and checks that each arrives whole, once, in order, intact.
//!
//! Every wait has a deadline and fails with what it was waiting for.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::addr::Addr;
use msg_layer::transport::{
    ConnId, FailureCause, SendError, Transport, TransportError, TransportEvent,
};
use testbed::{Host, TwoHosts};

/// Longest single sleep of the driver: a bound against lost wake-ups that
/// keeps a bug from hanging a test (the tests that check wake-ups do not
/// use it).
pub const MAX_SLEEP: Duration = Duration::from_millis(50);

/// Creates a transport on `host` (called on a thread inside its namespace).
pub trait Maker<T>: Fn(&Host) -> Result<T, TransportError> + Sync {}
impl<T, F: Fn(&Host) -> Result<T, TransportError> + Sync> Maker<T> for F {}

/// Creates a transport inside `host`'s namespace.
pub fn make_in<T: Transport>(host: &Host, mk: &impl Maker<T>) -> T {
    host.ns
        .run(|| mk(host))
        .unwrap_or_else(|e| panic!("creating a transport in {}: {e}", host.ns.name()))
}

/// Calls `connect` on a thread inside `host`'s namespace (TCP creates the
/// socket there).
pub fn connect_in<T: Transport>(host: &Host, t: &mut T, to: &Addr) -> ConnId {
    host.ns
        .run(|| t.connect(to))
        .unwrap_or_else(|e| panic!("connect to {to}: {e}"))
}

/// `poll(2)` for readability on `fds`; true when one is readable.
pub fn poll_fds(fds: &[RawFd], timeout: Duration) -> bool {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfds for the
    // duration of the call.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.kind(), std::io::ErrorKind::Interrupted, "poll: {e}");
    }
    n > 0
}

/// Deterministic bytes for message `seed` (xorshift64*), cheap enough for
/// 64 MiB.
pub fn pattern(seed: u64, len: usize) -> Bytes {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// A message to send: `data[..split]` goes as the head, the rest as the body.
#[derive(Clone, Debug)]
pub struct Msg {
    pub data: Bytes,
    pub split: usize,
}

impl Msg {
    pub fn new(data: Bytes, split: usize) -> Self {
        assert!(split <= data.len());
        Msg { data, split }
    }
}

/// Which end of a [`Pair`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    A,
    B,
}

/// Two connected transports on a testbed, driven from one thread.
pub struct Pair<T: Transport> {
    pub a: T,
    pub b: T,
    /// A's connection to B.
    pub a_conn: ConnId,
    /// B's connection from A.
    pub b_conn: ConnId,
    /// Events not yet looked at, per end.
    pub inbox_a: VecDeque<TransportEvent>,
    pub inbox_b: VecDeque<TransportEvent>,
    /// Sleeps that ran into [`MAX_SLEEP`] although the transports allowed
    /// longer, after which there was work: wake-ups `prepare_wait` missed.
    pub missed_wakeups: u32,
    /// Declared last: the namespaces go after the transports.
    pub hosts: TwoHosts,
}

/// A testbed with MTU `mtu`, a transport from `mk` in each namespace, and A
/// connected to B (`Connected` at A, `Accepted` at B), within 10 s.
pub fn connected_pair<T: Transport>(mtu: u32, mk: impl Maker<T>) -> Pair<T> {
    let hosts = TwoHosts::new(mtu).expect("creating the two-namespace testbed");
    let mut a = make_in(&hosts.a, &mk);
    let b = make_in(&hosts.b, &mk);
    let to = b.local_addr();
    let a_conn = connect_in(&hosts.a, &mut a, &to);
    let mut pair = Pair {
        a,
        b,
        a_conn,
        b_conn: ConnId::MAX,
        inbox_a: VecDeque::new(),
        inbox_b: VecDeque::new(),
        missed_wakeups: 0,
        hosts,
    };
    let (mut connected, mut accepted) = (false, None);
    pair.until(
        Duration::from_secs(10),
        "Connected at A and Accepted at B",
        |p| {
            while let Some(ev) = p.inbox_a.pop_front() {
                match ev {
                    TransportEvent::Connected(c) if c == a_conn => connected = true,
                    other => panic!("A: unexpected event while connecting: {other:?}"),
                }
            }
            while let Some(ev) = p.inbox_b.pop_front() {
                match ev {
                    TransportEvent::Accepted(c) if accepted.is_none() => accepted = Some(c),
                    other => panic!("B: unexpected event while connecting: {other:?}"),
                }
            }
            (connected && accepted.is_some()).then_some(())
        },
    );
    pair.b_conn = accepted.expect("accepted");
    pair
}

impl<T: Transport> Pair<T> {
    /// The transport, its connection and its inbox at `end`.
    pub fn end(&mut self, end: End) -> (&mut T, ConnId, &mut VecDeque<TransportEvent>) {
        match end {
            End::A => (&mut self.a, self.a_conn, &mut self.inbox_a),
            End::B => (&mut self.b, self.b_conn, &mut self.inbox_b),
        }
    }

    /// `progress` on both ends; true when either moved.
    pub fn pump(&mut self) -> bool {
        pump_one(&mut self.a, &mut self.inbox_a, "A")
            | pump_one(&mut self.b, &mut self.inbox_b, "B")
    }

    /// Sleep until either end has work, a timer is due, or `cap` passes.
    /// Returns true when the sleep ended by `cap` alone.
    pub fn wait(&mut self, cap: Duration) -> bool {
        let mut fds = Vec::new();
        let ta = self.a.prepare_wait(&mut fds);
        let tb = self.b.prepare_wait(&mut fds);
        let allowed = [ta, tb].into_iter().flatten().min();
        let t = allowed.unwrap_or(cap).min(cap);
        if t.is_zero() {
            return false;
        }
        !poll_fds(&fds, t) && allowed.is_none_or(|a| a > cap)
    }

    /// One round: progress, and sleep when nothing moved.
    pub fn step(&mut self) {
        if !self.pump() && self.wait(MAX_SLEEP) && self.pump() {
            self.missed_wakeups += 1;
        }
    }

    /// Drive both ends until `f` returns `Some`, failing after `within`.
    pub fn until<R>(
        &mut self,
        within: Duration,
        what: &str,
        mut f: impl FnMut(&mut Self) -> Option<R>,
    ) -> R {
        let deadline = Instant::now() + within;
        loop {
            if let Some(r) = f(self) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?} waiting for {what}"
            );
            self.step();
        }
    }

    /// Drive both ends until neither moves any more (bounded).
    pub fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.pump() && Instant::now() < deadline {}
    }

    /// Send `a_to_b` from A and `b_to_a` from B at the same time, retrying on
    /// `WouldBlock` after progress, and check that each end receives the
    /// other's messages whole, in order and intact, within `within`.
    pub fn exchange(&mut self, a_to_b: &[Msg], b_to_a: &[Msg], within: Duration) {
        let mut out = [a_to_b.iter().peekable(), b_to_a.iter().peekable()];
        let mut want: [VecDeque<&Msg>; 2] = [b_to_a.iter().collect(), a_to_b.iter().collect()];
        let total = a_to_b.len() + b_to_a.len();
        let mut got = 0;
        let deadline = Instant::now() + within;
        while got < total {
            for (i, end) in [End::A, End::B].into_iter().enumerate() {
                let (t, conn, inbox) = self.end(end);
                while let Some(m) = out[i].peek() {
                    match t.send(conn, &m.data[..m.split], m.data.slice(m.split..)) {
                        Ok(()) => {
                            out[i].next();
                        }
                        Err(SendError::WouldBlock) => break,
                        Err(e) => panic!("{end:?}: send of {} bytes: {e}", m.data.len()),
                    }
                }
                while let Some(ev) = inbox.pop_front() {
                    match ev {
                        TransportEvent::Message(c, data) if c == conn => {
                            let m = want[i].pop_front().unwrap_or_else(|| {
                                panic!("{end:?}: unexpected extra message of {} bytes", data.len())
                            });
                            check_same(end, got, &data, &m.data);
                            got += 1;
                        }
                        other => panic!("{end:?}: unexpected event during exchange: {other:?}"),
                    }
                }
            }
            if got == total {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {within:?}: {got} of {total} messages arrived ({} and {} still to send, {} and {} still to come at A and B)",
                out[0].len(),
                out[1].len(),
                want[0].len(),
                want[1].len()
            );
            self.step();
        }
    }

    /// Wait for `Closed` on `end`'s connection; returns the reason.
    pub fn closed(&mut self, end: End, within: Duration) -> Option<FailureCause> {
        self.until(within, &format!("Closed at {end:?}"), |p| {
            let (_, conn, inbox) = p.end(end);
            while let Some(ev) = inbox.pop_front() {
                match ev {
                    TransportEvent::Closed(c, reason) if c == conn => return Some(reason),
                    TransportEvent::Message(..) => {}
                    other => panic!("{end:?}: unexpected event: {other:?}"),
                }
            }
            None
        })
    }
}

fn pump_one<T: Transport>(t: &mut T, inbox: &mut VecDeque<TransportEvent>, who: &str) -> bool {
    let mut evs = Vec::new();
    let moved = t
        .progress(&mut evs)
        .unwrap_or_else(|e| panic!("{who}: progress failed: {e}"));
    inbox.extend(evs);
    moved
}

fn check_same(end: End, index: usize, got: &[u8], want: &[u8]) {
    if got.len() != want.len() {
        panic!(
            "{end:?}: message {index}: {} bytes arrived, {} were sent",
            got.len(),
            want.len()
        );
    }
    if let Some(at) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{end:?}: message {index} ({} bytes) differs from byte {at} on",
            want.len()
        );
    }
}

/// Progress `t` alone (the other end stays idle) until `f` returns `Some`,
/// failing after `within`.
pub fn drive_alone<T: Transport, R>(
    t: &mut T,
    inbox: &mut VecDeque<TransportEvent>,
    within: Duration,
    what: &str,
    mut f: impl FnMut(&mut T, &mut VecDeque<TransportEvent>) -> Option<R>,
) -> R {
    let deadline = Instant::now() + within;
    loop {
        if let Some(r) = f(t, inbox) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        if !pump_one(t, inbox, "driven end") {
            let mut fds = Vec::new();
            let d = t.prepare_wait(&mut fds).unwrap_or(MAX_SLEEP).min(MAX_SLEEP);
            if !d.is_zero() {
                poll_fds(&fds, d);
            }
        }
    }
}
