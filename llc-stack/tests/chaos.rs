//! Chaos suite: the reliable transport over real veth links between network
//! namespaces (two hosts on a Linux bridge), with faults injected
//! (a) by the stack's own `FaultInjector` on both hosts' receive paths and
//! (b) independently of the stack by `testbed::LinkChaos`, a tc BPF program
//! on the bridge ports' egress (the kernel here has no netem):
//! loss 1%, 5% and 20%, duplication, reordering, corrupted bytes, a host's
//! link taken down for 2 s, MTUs that differ between the ends, and the peer
//! process killed (SIGKILL) and started again. Every case runs over AF_PACKET
//! and over AF_XDP (copy mode, native XDP on veth, as the other tests).
//!
//! For every case: each message arrives exactly once, in order and intact
//! (message `i` is compared byte for byte with what the sender generated, its
//! id must be `i`, and the byte and message counts must match the stream), or
//! the connection fails with the error the configuration implies; every wait
//! is bounded. The payload is cut from a seeded pattern, so that generating
//! and checking it cost a copy and a compare: the goodput figures measure the
//! transport, not the test's checking.
//!
//! Goodput under loss (`goodput_under_loss`) prints the median rate of three
//! rounds at 0%, 1% and 5%
//! loss; docs/BENCHMARKS.md records a release run:
//! `cargo test --release -p llc-stack --test chaos goodput -- --nocapture --test-threads 1`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::afxdp::{AfXdp, AfXdpConfig};
use llc_stack::link::fault::{FaultConfig, FaultInjector, FaultStats};
use llc_stack::link::TxToken;
use llc_stack::proto::{Config, ConnHandle, ConnStats, ConnectionError, EndpointStats, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, FrameType, MacAddr, TransportHeader};
use llc_stack::{Device, Instant, Stack};
use testbed::{Bridged, ChaosSettings, LinkChaos};

const PORT: u16 = 9;
/// Upper bound of any single transfer in this suite.
const LIMIT: Duration = Duration::from_secs(90);
/// Local port of the restartable sender, fixed so that its second incarnation
/// reuses the connection key of the first.
const RESTART_PORT: u16 = 4242;
/// Environment variable that turns `peer_process` into a sender child.
const CHILD_ENV: &str = "LLC_CHAOS_PEER";
/// Pause after a link error (e.g. ENETDOWN while the interface is down).
const LINK_ERROR_PAUSE: Duration = Duration::from_millis(1);

// ----- payload -----------------------------------------------------------------

/// Bytes messages are cut from. Its length is a prime, so no fragment size
/// lines two different fragments of a message up on the same pattern bytes:
/// a fragment placed at the wrong offset fails the comparison.
const PATTERN_LEN: usize = 65_521;

/// The payload of stream `seed`: message `i` is the pattern read cyclically
/// from an offset that depends on `i`.
struct Pattern(Vec<u8>);

impl Pattern {
    fn new(seed: u64) -> Self {
        let mut r = Rng::new(seed.wrapping_mul(1_000_003));
        let mut v = vec![0u8; PATTERN_LEN];
        for chunk in v.chunks_mut(8) {
            let x = r.next_u64().to_le_bytes();
            chunk.copy_from_slice(&x[..chunk.len()]);
        }
        Pattern(v)
    }

    /// The pattern's pieces that make up message `i` of `len` bytes, in order.
    fn pieces(&self, i: usize, len: usize) -> impl Iterator<Item = &[u8]> {
        let mut at = i.wrapping_mul(7_919) % PATTERN_LEN;
        let mut left = len;
        std::iter::from_fn(move || {
            (left > 0).then(|| {
                let n = left.min(PATTERN_LEN - at);
                let piece = &self.0[at..at + n];
                (at, left) = ((at + n) % PATTERN_LEN, left - n);
                piece
            })
        })
    }

    /// Message `i` of `len` bytes.
    fn message(&self, i: usize, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        self.pieces(i, len).for_each(|p| v.extend_from_slice(p));
        v
    }

    /// Whether `data` is message `i`, byte for byte.
    fn matches(&self, i: usize, data: &[u8]) -> bool {
        let mut rest = data;
        self.pieces(i, data.len()).all(|p| {
            let (head, tail) = rest.split_at(p.len());
            rest = tail;
            head == p
        })
    }
}

/// Length of message `i` of a `total`-byte stream cut into `msg`-byte messages.
fn message_len(total: usize, msg: usize, i: usize) -> usize {
    msg.min(total - i * msg)
}

fn message_count(total: usize, msg: usize) -> usize {
    total.div_ceil(msg)
}

// ----- shared state between threads ---------------------------------------------

/// A value several threads watch; waits are bounded.
struct Watch<T> {
    value: Mutex<T>,
    changed: Condvar,
}

impl<T: Clone> Watch<T> {
    fn new(v: T) -> Arc<Self> {
        Arc::new(Watch {
            value: Mutex::new(v),
            changed: Condvar::new(),
        })
    }

    fn update(&self, f: impl FnOnce(&mut T)) {
        f(&mut self.value.lock().unwrap_or_else(|p| p.into_inner()));
        self.changed.notify_all();
    }

    fn get(&self) -> T {
        self.value.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Wait until `pred` holds, at most `timeout`; the value at that point.
    fn wait_for(&self, timeout: Duration, pred: impl Fn(&T) -> bool) -> Result<T, T> {
        let guard = self.value.lock().unwrap_or_else(|p| p.into_inner());
        let (guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |v| !pred(v))
            .unwrap_or_else(|p| p.into_inner());
        if pred(&guard) {
            Ok(guard.clone())
        } else {
            Err(guard.clone())
        }
    }
}

// ----- devices ----------------------------------------------------------------

/// Opens a link device on an interface; returns it with the interface's MAC.
type Opener<D> = fn(&str) -> (D, MacAddr);

fn af_packet(ifname: &str) -> (AfPacket, MacAddr) {
    let dev = AfPacket::open(ifname, AfPacketConfig::default()).expect("open AF_PACKET");
    let mac = MacAddr(dev.mac());
    (dev, mac)
}

fn af_xdp(ifname: &str) -> (AfXdp, MacAddr) {
    let dev = AfXdp::open(ifname, AfXdpConfig::default()).expect("open AF_XDP");
    eprintln!("{ifname}: {}", dev.capabilities().backend);
    let mac = MacAddr(dev.mac());
    (dev, mac)
}

fn open<D: Device>(
    opener: Opener<D>,
    ifname: &str,
    faults: &FaultConfig,
    seed: u64,
) -> (FaultInjector<D>, MacAddr) {
    let (dev, mac) = opener(ifname);
    (FaultInjector::new(dev, faults.clone(), seed), mac)
}

// ----- the two ends -------------------------------------------------------------

/// What a sender should do.
#[derive(Clone, Debug)]
struct SendPlan {
    peer: MacAddr,
    local_port: Option<u16>,
    total: usize,
    msg: usize,
    seed: u64,
    /// Queue only this many messages until the flag is set (a fault is in
    /// place), so that the rest of the stream meets the fault.
    hold: Option<(usize, Arc<AtomicBool>)>,
}

/// How a sender ended.
#[derive(Debug)]
struct SendReport {
    /// The connection's end: `Ok` when every message was acknowledged.
    result: Result<(), ConnectionError>,
    acked: usize,
    elapsed: Duration,
    conn: Option<ConnStats>,
    fragment_len: usize,
    io_errors: u64,
}

/// Connect, keep up to 8 messages queued, wait for every `Acked` (or the
/// connection's failure); gives up after `LIMIT` (a failed test: nothing may
/// hang). Link errors (an interface going down) are counted and ridden out,
/// as an application would: the transport's retry bound decides.
fn run_sender<D: Device>(
    stack: &mut Stack<D>,
    plan: &SendPlan,
    mut progress: impl FnMut(usize),
) -> SendReport {
    let start = Instant::now();
    let conn = stack
        .endpoint_mut()
        .connect(start, plan.peer, PORT, plan.local_port)
        .expect("connect");
    let n = message_count(plan.total, plan.msg);
    let pattern = Pattern::new(plan.seed);
    let (mut next, mut acked) = (0usize, 0usize);
    let mut failed = None;
    let mut fragment_len = 0;
    let mut io_errors = 0u64;
    let deadline = start + LIMIT;
    loop {
        let r = stack.run_until(deadline, |ep| {
            while let Some((h, ev)) = ep.poll_event() {
                if h != conn {
                    continue;
                }
                match ev {
                    Event::Acked { .. } => {
                        acked += 1;
                        progress(acked);
                    }
                    Event::Closed(e) => {
                        failed = Some(e.unwrap_or(ConnectionError::Aborted));
                        return Some(());
                    }
                    _ => {}
                }
            }
            if let Some(c) = ep.connection(conn) {
                fragment_len = c.fragment_len();
            }
            let held = |next: usize| {
                plan.hold
                    .as_ref()
                    .is_some_and(|(k, go)| next >= *k && !go.load(Ordering::Relaxed))
            };
            while next < n
                && !held(next)
                && ep.connection(conn).map_or(0, |c| c.send_buffered()) < 8 * plan.msg
            {
                let m = pattern.message(next, message_len(plan.total, plan.msg, next));
                ep.send(conn, m).expect("send");
                next += 1;
            }
            (acked == n).then_some(())
        });
        match r {
            Ok(Some(())) => break,
            Ok(None) => panic!("sender timed out after {LIMIT:?}: {acked} of {n} acknowledged"),
            Err(e) => {
                io_errors += 1;
                tracing::debug!("sender: link error {e}");
                if Instant::now() >= deadline {
                    panic!("sender timed out after {LIMIT:?} (last link error {e})");
                }
                // Back off instead of spinning on a link that reports itself
                // down; the protocol's timers keep running in between.
                std::thread::sleep(LINK_ERROR_PAUSE);
            }
        }
    }
    let elapsed = Instant::now().saturating_duration_since(start);
    SendReport {
        result: failed.map_or(Ok(()), Err),
        acked,
        elapsed,
        conn: stack.endpoint().connection_stats(conn).cloned(),
        fragment_len,
        io_errors,
    }
}

/// What the receiver saw of one connection.
#[derive(Clone, Debug, Default)]
struct ConnRx {
    /// Peer port and both cookies (local, peer) of this incarnation.
    peer_port: u16,
    cookies: (u32, u32),
    messages: usize,
    bytes: usize,
    /// `Some` once the connection ended: `None` inside for a clean close.
    ended: Option<Option<ConnectionError>>,
}

/// The receiver's progress, visible to the test's main thread.
#[derive(Clone, Debug, Default)]
struct RxState {
    /// Connections in the order they were accepted.
    conns: Vec<ConnRx>,
    /// Endpoint counters, refreshed as frames arrive.
    stats: EndpointStats,
    /// A message broke "exactly once, in order, intact".
    violation: Option<String>,
}

struct RxConn {
    index: usize,
}

/// Accept connections on `PORT` and check every message of each against the
/// stream (`total`, `msg`, `seed`): message `i` must have id `i` and the
/// generated bytes. Runs until `stop` is set or `LIMIT` passes.
fn run_receiver<D: Device>(
    mut stack: Stack<FaultInjector<D>>,
    total: usize,
    msg: usize,
    seed: u64,
    state: Arc<Watch<RxState>>,
    stop: Arc<AtomicBool>,
) -> FaultStats {
    stack.endpoint_mut().listen(PORT);
    let mut conns: HashMap<ConnHandle, RxConn> = HashMap::new();
    let pattern = Pattern::new(seed);
    let mut dropped = 0;
    let deadline = Instant::now() + LIMIT;
    loop {
        let r = stack.run_until(deadline, |ep| {
            let mut changed = false;
            while let Some((h, ev)) = ep.poll_event() {
                changed = true;
                match ev {
                    Event::Connected => {
                        let c = ep.connection(h).expect("just connected");
                        let rx = ConnRx {
                            peer_port: c.peer_port(),
                            cookies: (c.local_cookie(), c.peer_cookie()),
                            ..Default::default()
                        };
                        let mut index = 0;
                        state.update(|s| {
                            index = s.conns.len();
                            s.conns.push(rx);
                        });
                        conns.insert(h, RxConn { index });
                    }
                    Event::Message { msg_id, data } => {
                        let Some(c) = conns.get_mut(&h) else { continue };
                        let i = state.get().conns[c.index].messages;
                        let problem = if i >= message_count(total, msg) {
                            Some(format!("message {msg_id} beyond the stream's {i} messages"))
                        } else if msg_id as usize != i {
                            Some(format!("message id {msg_id} where {i} was due"))
                        } else if data.len() != message_len(total, msg, i)
                            || !pattern.matches(i, &data)
                        {
                            Some(format!("message {i} ({} bytes) corrupted", data.len()))
                        } else {
                            None
                        };
                        let index = c.index;
                        state.update(|s| {
                            if problem.is_some() && s.violation.is_none() {
                                s.violation = problem;
                            }
                            let rx = &mut s.conns[index];
                            rx.messages += 1;
                            rx.bytes += data.len();
                        });
                    }
                    Event::Closed(e) => {
                        if let Some(c) = conns.get(&h) {
                            let index = c.index;
                            state.update(|s| s.conns[index].ended = Some(e));
                        }
                    }
                    Event::Acked { .. } => {}
                }
            }
            if changed || ep.stats().dropped.total() != dropped {
                dropped = ep.stats().dropped.total();
                let stats = ep.stats().clone();
                state.update(|s| s.stats = stats);
            }
            stop.load(Ordering::Relaxed).then_some(())
        });
        match r {
            Ok(Some(())) => break,
            Ok(None) => panic!("receiver ran for {LIMIT:?} without being stopped"),
            Err(e) => {
                tracing::debug!("receiver: link error {e}");
                assert!(Instant::now() < deadline, "receiver timed out ({e})");
                std::thread::sleep(LINK_ERROR_PAUSE);
            }
        }
    }
    let stats = stack.endpoint().stats().clone();
    state.update(|s| s.stats = stats);
    stack.device().stats().clone()
}

// ----- scenarios ----------------------------------------------------------------

/// A fault applied while a transfer runs.
#[derive(Clone, Debug)]
enum Fault {
    /// Take host A's interface down after `after_bytes` arrived, for `down`.
    LinkDown { after_bytes: usize, down: Duration },
}

#[derive(Clone, Debug)]
struct Scenario {
    name: &'static str,
    total: usize,
    msg: usize,
    /// Injected by the stack on both hosts' receive paths.
    faults: FaultConfig,
    /// Injected by the tc program on the bridge ports (both directions).
    tc: Option<ChaosSettings>,
    /// Bridge and host A MTU; host B's MTU.
    mtu_a: u32,
    mtu_b: u32,
    cfg: Config,
    during: Option<Fault>,
}

impl Scenario {
    fn new(name: &'static str) -> Self {
        Scenario {
            name,
            total: 8 << 20,
            msg: 256 << 10,
            faults: FaultConfig::default(),
            tc: None,
            mtu_a: 1500,
            mtu_b: 1500,
            cfg: Config::default(),
            during: None,
        }
    }
}

/// The outcome of one scenario.
#[derive(Debug)]
struct Outcome {
    sent: SendReport,
    rx: RxState,
    faults_a: FaultStats,
    faults_b: FaultStats,
    tc: Option<testbed::ChaosCounters>,
}

impl Outcome {
    /// Every message arrived exactly once, in order, intact, and the hashes agree.
    fn assert_intact(&self, total: usize) {
        assert_eq!(self.sent.result, Ok(()), "sender failed: {self:#?}");
        assert_eq!(self.rx.violation, None, "{self:#?}");
        assert_eq!(self.rx.conns.len(), 1, "one connection: {:#?}", self.rx);
        let c = &self.rx.conns[0];
        assert_eq!(c.bytes, total, "bytes received: {self:#?}");
        assert_eq!(c.messages, self.sent.acked, "messages received: {self:#?}");
    }

    fn goodput_gbps(&self, total: usize) -> f64 {
        total as f64 * 8.0 / self.sent.elapsed.as_secs_f64() / 1e9
    }
}

fn run<D: Device + 'static>(opener: Opener<D>, sc: Scenario) -> Outcome {
    let net = Bridged::new(2, sc.mtu_a).expect("bridge with two hosts");
    let (a, b) = (&net.hosts[0], &net.hosts[1]);
    if sc.mtu_b != sc.mtu_a {
        b.ns.ip(&[
            "link",
            "set",
            "dev",
            &b.ifname,
            "mtu",
            &sc.mtu_b.to_string(),
        ])
        .expect("set host B's MTU");
    }
    let tc = sc.tc.map(|s| {
        LinkChaos::attach(&net.hub, &["p0", "p1"], &s).expect("attach the tc chaos program")
    });
    let state = Watch::new(RxState::default());
    let stop = Arc::new(AtomicBool::new(false));
    let fault_in_place = Arc::new(AtomicBool::new(false));
    let (total, msg) = (sc.total, sc.msg);
    let receiver = {
        let (bif, faults, cfg) = (b.ifname.clone(), sc.faults.clone(), sc.cfg.clone());
        let (state, stop) = (state.clone(), stop.clone());
        b.ns.spawn(move || {
            let (dev, mac) = open(opener, &bif, &faults, 11);
            let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
            stack.endpoint_mut().listen(PORT);
            run_receiver(stack, total, msg, 7, state, stop)
        })
    };
    let sender = {
        let (aif, faults, cfg) = (a.ifname.clone(), sc.faults.clone(), sc.cfg.clone());
        let plan = SendPlan {
            peer: MacAddr(b.mac),
            local_port: None,
            total,
            msg,
            seed: 7,
            hold: sc
                .during
                .as_ref()
                .map(|Fault::LinkDown { after_bytes, .. }| {
                    (after_bytes / msg, fault_in_place.clone())
                }),
        };
        a.ns.spawn(move || {
            let (dev, mac) = open(opener, &aif, &faults, 12);
            let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
            let report = run_sender(&mut stack, &plan, |_| {});
            (report, stack.device().stats().clone())
        })
    };
    if let Some(Fault::LinkDown { after_bytes, down }) = &sc.during {
        let started = state.wait_for(LIMIT, |s| {
            s.conns.first().is_some_and(|c| c.bytes >= *after_bytes) || s.violation.is_some()
        });
        assert!(started.is_ok(), "transfer never started: {:?}", started);
        a.ns.ip(&["link", "set", "dev", &a.ifname, "down"])
            .expect("link down");
        fault_in_place.store(true, Ordering::Relaxed);
        // The fault itself lasts this long; nothing to await.
        std::thread::sleep(*down);
        a.ns.ip(&["link", "set", "dev", &a.ifname, "up"])
            .expect("link up");
    }
    let sent = sender.join();
    stop.store(true, Ordering::Relaxed);
    let faults_b = receiver.join();
    let (sent, faults_a) = sent.expect("sender thread");
    let faults_b = faults_b.expect("receiver thread");
    let out = Outcome {
        sent,
        rx: state.get(),
        faults_a,
        faults_b,
        tc: tc.as_ref().map(|t| t.counters()),
    };
    eprintln!(
        "{}: {} bytes in {:.2?} ({:.2} Gbit/s), {} acked, {} link errors, retransmits {:?} (tail probes {:?}, timeouts {:?}, loss episodes and delay cuts {:?}, srtt {:?} µs, min rtt {:?} µs), faults a {:?} b {:?}, tc {:?}, drops at B {:?}",
        sc.name,
        out.rx.conns.first().map_or(0, |c| c.bytes),
        out.sent.elapsed,
        out.goodput_gbps(total),
        out.sent.acked,
        out.sent.io_errors,
        out.sent.conn.as_ref().map(|c| c.retransmits),
        out.sent.conn.as_ref().map(|c| c.tail_probes),
        out.sent.conn.as_ref().map(|c| c.timeouts),
        out.sent.conn.as_ref().map(|c| (c.loss_episodes, c.delay_cuts)),
        out.sent.conn.as_ref().map(|c| c.srtt_ns / 1000),
        out.sent.conn.as_ref().map(|c| c.min_rtt_ns / 1000),
        out.faults_a,
        out.faults_b,
        out.tc,
        out.rx.stats.dropped,
    );
    out
}

fn loss(p: f64) -> FaultConfig {
    FaultConfig {
        loss: p,
        ..Default::default()
    }
}

// ----- scenario bodies, shared by both backends ------------------------------------

fn stack_loss<D: Device + 'static>(opener: Opener<D>, p: f64, name: &'static str) {
    let sc = Scenario {
        faults: loss(p),
        ..Scenario::new(name)
    };
    let total = sc.total;
    let out = run(opener, sc);
    out.assert_intact(total);
    assert!(
        out.faults_a.lost + out.faults_b.lost > 0,
        "loss was injected"
    );
    assert!(
        out.sent.conn.as_ref().unwrap().retransmits > 0,
        "lost frames were retransmitted"
    );
}

fn stack_duplicate_reorder<D: Device + 'static>(opener: Opener<D>, what: &str) {
    let faults = match what {
        "duplicate" => FaultConfig {
            duplicate: 0.05,
            ..Default::default()
        },
        "reorder" => FaultConfig {
            reorder: 0.05,
            reorder_delay: Duration::from_micros(300),
            ..Default::default()
        },
        _ => FaultConfig {
            corrupt: 0.02,
            ..Default::default()
        },
    };
    let sc = Scenario {
        faults,
        ..Scenario::new("stack faults")
    };
    let total = sc.total;
    let out = run(opener, sc);
    out.assert_intact(total);
    let (fa, fb) = (&out.faults_a, &out.faults_b);
    match what {
        "duplicate" => {
            assert!(fa.duplicated + fb.duplicated > 0);
        }
        "reorder" => assert!(fa.reordered + fb.reordered > 0),
        _ => {
            assert!(fa.corrupted + fb.corrupted > 0);
            assert!(
                out.rx.stats.dropped.bad_checksum > 0,
                "corrupted frames at B dropped by CRC: {:?}",
                out.rx.stats.dropped
            );
        }
    }
}

fn tc_faults<D: Device + 'static>(opener: Opener<D>, settings: ChaosSettings) {
    let sc = Scenario {
        tc: Some(settings),
        ..Scenario::new("tc faults")
    };
    let total = sc.total;
    let out = run(opener, sc);
    out.assert_intact(total);
    let c = out.tc.expect("tc counters");
    assert!(c.matched > 0, "the tc program saw our frames: {c:?}");
    if settings.drop > 0.0 {
        assert!(c.dropped > 0, "{c:?}");
    }
    if settings.duplicate > 0.0 {
        assert!(c.duplicated > 0, "{c:?}");
    }
    if settings.corrupt > 0.0 {
        assert!(c.corrupted > 0, "{c:?}");
        assert!(out.rx.stats.dropped.bad_checksum > 0 || c.corrupted < 5);
    }
}

/// Host A's interface goes down for 2 s mid-transfer. With the default
/// configuration the retry bound (12 back-offs from an RTO of at least
/// 2 ms, capped at 500 ms: at least 2+4+...+256+5*500 ms = 3.0 s) exceeds the
/// outage, so the connection survives and every message arrives; with a
/// tighter bound (max_rto 100 ms, 8 retransmissions: at most 0.9 s) the
/// sender fails with "peer does not answer" and what arrived is a correct
/// prefix.
fn link_down<D: Device + 'static>(opener: Opener<D>, tight: bool) {
    let mut sc = Scenario {
        total: 4 << 20,
        during: Some(Fault::LinkDown {
            after_bytes: 1 << 20,
            down: Duration::from_secs(2),
        }),
        ..Scenario::new("link down 2 s")
    };
    if tight {
        sc.cfg.max_rto = Duration::from_millis(100);
        sc.cfg.max_retransmits = 8;
    }
    let total = sc.total;
    let out = run(opener, sc);
    if tight {
        assert_eq!(
            out.sent.result,
            Err(ConnectionError::RetransmitLimit(8)),
            "{out:#?}"
        );
        assert_eq!(out.rx.violation, None);
        assert!(out.rx.conns[0].bytes < total);
    } else {
        out.assert_intact(total);
        assert!(
            out.sent.elapsed >= Duration::from_secs(2),
            "the outage held the transfer up: {out:#?}"
        );
    }
}

/// Host A at MTU 9000 (and the bridge), host B at 1500: the handshake
/// settles on B's MTU, so every DATA frame fits both links.
fn mtu_mismatch<D: Device + 'static>(opener: Opener<D>) {
    let sc = Scenario {
        mtu_a: 9000,
        mtu_b: 1500,
        ..Scenario::new("MTU 9000 vs 1500")
    };
    let total = sc.total;
    let out = run(opener, sc);
    out.assert_intact(total);
    assert_eq!(
        out.sent.fragment_len,
        1500 - 3 - 56,
        "fragment size from B's MTU"
    );
}

fn goodput<D: Device + 'static>(opener: Opener<D>, backend: &str) {
    // Three rounds, the loss rates interleaved within each, and the median
    // of each rate: one transfer takes tens of milliseconds, and a 2-core
    // VM's scheduling moves single transfers by a third.
    const LOSS: [f64; 3] = [0.0, 0.01, 0.05];
    let mut rates = [[0.0f64; 3]; 3];
    for round in rates.iter_mut() {
        for (rate, p) in round.iter_mut().zip(LOSS) {
            let sc = Scenario {
                total: 32 << 20,
                msg: 1 << 20,
                faults: loss(p),
                ..Scenario::new("goodput")
            };
            let total = sc.total;
            let out = run(opener, sc);
            out.assert_intact(total);
            *rate = out.goodput_gbps(total);
        }
    }
    let median = |i: usize| {
        let mut r: Vec<f64> = rates.iter().map(|round| round[i]).collect();
        r.sort_by(f64::total_cmp);
        r[1]
    };
    let m = [median(0), median(1), median(2)];
    println!(
        "goodput {backend} (median of 3): no loss {:.2} Gbit/s, 1% loss {:.2} ({:.0}%), 5% loss {:.2} ({:.0}%)",
        m[0],
        m[1],
        100.0 * m[1] / m[0],
        m[2],
        100.0 * m[2] / m[0]
    );
}

// ----- peer restart: a real process, killed with SIGKILL ----------------------------

/// Run this test binary as a sender child in namespace `ns`.
fn spawn_child(
    ns: &testbed::Netns,
    spec: &str,
    ready: &str,
) -> Result<testbed::Background, String> {
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = ns.command(exe);
    cmd.args([
        "--exact",
        "peer_process",
        "--ignored",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(CHILD_ENV, spec);
    testbed::Background::spawn(&mut cmd, ready, Duration::from_secs(30))
}

/// The child: `backend,ifname,peer-mac,total,msg,seed,linger-ms`. Sends the
/// stream from `RESTART_PORT`, printing progress, then lingers (keeping the
/// connection) and exits.
#[test]
#[ignore = "helper: runs only as the child process of the peer restart tests"]
fn peer_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        eprintln!("SKIPPED peer_process: a helper; it runs as a child of the restart tests");
        return;
    };
    let f: Vec<&str> = spec.split(',').collect();
    let plan = SendPlan {
        peer: f[2].parse().expect("peer MAC"),
        local_port: Some(RESTART_PORT),
        total: f[3].parse().unwrap(),
        msg: f[4].parse().unwrap(),
        seed: f[5].parse().unwrap(),
        hold: None,
    };
    let linger = Duration::from_millis(f[6].parse().unwrap());
    fn go<D: Device>(dev: D, mac: MacAddr, plan: &SendPlan, linger: Duration) {
        let mut stack = Stack::new(dev, Config::default(), mac, Rng::from_entropy());
        println!("llc-chaos-peer: started");
        let mut said = false;
        let report = run_sender(&mut stack, plan, |acked| {
            if !said {
                said = true;
                println!("llc-chaos-peer: first message acknowledged");
            }
            let _ = acked;
        });
        println!("llc-chaos-peer: finished {:?}", report.result);
        let until = Instant::now() + linger;
        let _ = stack.run_until(until, |_| None::<()>);
    }
    match f[0] {
        "packet" => {
            let (dev, mac) = af_packet(f[1]);
            go(dev, mac, &plan, linger)
        }
        _ => {
            let (dev, mac) = af_xdp(f[1]);
            go(dev, mac, &plan, linger)
        }
    }
}

/// The sender process is killed mid-transfer and started again with the same
/// port: the receiver's old connection fails with "peer restarted" when the
/// new incarnation's SYN arrives, the new connection delivers its whole
/// stream intact, and a frame of the old incarnation arriving afterwards
/// (injected from host A with the old cookies) is dropped as stale.
fn peer_restart<D: Device + 'static>(opener: Opener<D>, backend: &str) {
    let net = Bridged::new(2, 1500).expect("bridge with two hosts");
    let (a, b) = (&net.hosts[0], &net.hosts[1]);
    let (total, msg, seed) = (4 << 20, 256 << 10, 5u64);
    let state = Watch::new(RxState::default());
    let stop = Arc::new(AtomicBool::new(false));
    let receiver = {
        let bif = b.ifname.clone();
        let (state, stop) = (state.clone(), stop.clone());
        b.ns.spawn(move || {
            let (dev, mac) = open(opener, &bif, &FaultConfig::default(), 1);
            let stack = Stack::new(dev, Config::default(), mac, Rng::from_entropy());
            run_receiver(stack, total, msg, seed, state, stop)
        })
    };
    let peer = testbed::format_mac(&b.mac);
    // First incarnation: far more data than it will get to send.
    let spec = format!(
        "{backend},{},{peer},{},{msg},{seed},0",
        a.ifname,
        1usize << 30
    );
    let first = spawn_child(&a.ns, &spec, "first message acknowledged").expect("first sender");
    let got = state.wait_for(LIMIT, |s| {
        s.conns.first().is_some_and(|c| c.bytes >= 1 << 20)
    });
    assert!(got.is_ok(), "first incarnation delivered nothing: {got:?}");
    drop(first); // SIGKILL, and reaped
    let old = state.get().conns[0].clone();
    assert_eq!(old.ended, None, "the receiver cannot know yet");

    let spec = format!("{backend},{},{peer},{total},{msg},{seed},1500", a.ifname);
    let mut second = spawn_child(&a.ns, &spec, "started").expect("second sender");
    let s = state.wait_for(LIMIT, |s| s.conns.len() >= 2);
    let s = s.unwrap_or_else(|s| panic!("no second connection: {s:#?}"));
    assert_eq!(
        s.conns[0].ended,
        Some(Some(ConnectionError::PeerRestarted)),
        "old connection fails cleanly"
    );
    assert_eq!(s.conns[1].peer_port, RESTART_PORT);
    assert_ne!(s.conns[1].cookies, old.cookies);

    // A frame of the old incarnation, still in flight: the old cookies.
    let stale_before = s.stats.dropped.stale_cookie;
    let (a_mac, b_mac) = (MacAddr(a.mac), MacAddr(b.mac));
    let aif = a.ifname.clone();
    a.ns.run(move || {
        let (mut dev, _) = af_packet(&aif);
        let header = TransportHeader {
            kind: FrameType::Data.into(),
            flags: wire::transport::flags::LAST_FRAGMENT,
            src_port: RESTART_PORT.into(),
            dst_port: PORT.into(),
            src_cookie: old.cookies.1.into(),
            dst_cookie: old.cookies.0.into(),
            msg_len: 5.into(),
            ts_val: 1.into(),
            ..Default::default()
        };
        let addr = Addresses {
            dst: b_mac,
            src: a_mac,
            dsap: wire::llc::DEFAULT_SAP,
            ssap: wire::llc::DEFAULT_SAP,
        };
        let now = Instant::now();
        let tok = dev.transmit(now).expect("a TX slot");
        tok.consume(|buf| wire::emit_transport(buf, &addr, &header, &[], b"stale").unwrap());
        dev.flush(now).expect("send the stale frame");
    });
    let s = state.wait_for(LIMIT, |s| {
        s.conns[1].bytes >= total && s.stats.dropped.stale_cookie > stale_before
    });
    let s = s.unwrap_or_else(|s| panic!("second transfer or stale count missing: {s:#?}"));
    stop.store(true, Ordering::Relaxed);
    receiver.join().expect("receiver thread");
    assert_eq!(s.violation, None);
    assert_eq!(s.conns.len(), 2, "no other connection appeared");
    assert_eq!(s.conns[1].messages, message_count(total, msg));
    assert!(second.is_running() || second.output().contains("finished Ok"));
    let out = second.output();
    assert!(!out.contains("finished Err"), "second sender: {out}");
}

// ----- the tests, per backend ---------------------------------------------------------

macro_rules! chaos {
    ($backend:ident, $opener:expr, $name:expr) => {
        mod $backend {
            use super::*;

            #[test]
            fn loss_1pct() {
                testbed::require_root!();
                stack_loss($opener, 0.01, "loss 1%");
            }

            #[test]
            fn loss_5pct() {
                testbed::require_root!();
                stack_loss($opener, 0.05, "loss 5%");
            }

            #[test]
            fn loss_20pct() {
                testbed::require_root!();
                stack_loss($opener, 0.20, "loss 20%");
            }

            #[test]
            fn duplication() {
                testbed::require_root!();
                stack_duplicate_reorder($opener, "duplicate");
            }

            #[test]
            fn reordering() {
                testbed::require_root!();
                stack_duplicate_reorder($opener, "reorder");
            }

            #[test]
            fn corruption() {
                testbed::require_root!();
                stack_duplicate_reorder($opener, "corrupt");
            }

            #[test]
            fn tc_loss_5pct() {
                testbed::require_root!();
                tc_faults(
                    $opener,
                    ChaosSettings {
                        drop: 0.05,
                        seed: 1,
                        sap: Some(wire::llc::DEFAULT_SAP),
                        ..Default::default()
                    },
                );
            }

            #[test]
            fn tc_duplicate_and_corrupt() {
                testbed::require_root!();
                tc_faults(
                    $opener,
                    ChaosSettings {
                        duplicate: 0.05,
                        corrupt: 0.02,
                        seed: 2,
                        sap: None,
                        ..Default::default()
                    },
                );
            }

            #[test]
            fn link_down_2s_survived() {
                testbed::require_root!();
                link_down($opener, false);
            }

            #[test]
            fn link_down_2s_beyond_a_tight_retry_bound() {
                testbed::require_root!();
                link_down($opener, true);
            }

            #[test]
            fn mtu_9000_vs_1500() {
                testbed::require_root!();
                mtu_mismatch($opener);
            }

            #[test]
            fn peer_killed_and_restarted() {
                testbed::require_root!();
                peer_restart($opener, $name);
            }

            #[test]
            fn goodput_under_loss() {
                testbed::require_root!();
                goodput($opener, $name);
            }
        }
    };
}

chaos!(af_packet, af_packet, "packet");
chaos!(af_xdp, af_xdp, "xdp");
