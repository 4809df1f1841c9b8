//! The link floor of an LLC transport's pair: 802.2 TEST round trips
//! between the two hosts on the same device code (backend, XDP attach mode,
//! SAP) with no protocol above, measured just before the endpoints open,
//! so that the message layer's latency can be stated as what it adds to
//! the link itself (issue 23's "above the link floor").
//!
//! With [`FloorWork`] each end also does some work per message it sends:
//! what the floor gains then, beside what the same work costs in a warm
//! loop ([`FloorWork::warm_micros`]), is what this platform charges that
//! work between its frames (the kernel's per-frame path runs on the same
//! cores, between one message and the next).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::link::test_ping::{LineToucher, MAX_INFO};
use llc_stack::rng::Rng;
use msg_layer::addr::MacAddr;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::transport::spec::{AttachMode, LlcSpec};
use msg_layer::transport::TransportSpec;
use msg_layer::{Endpoint, PeerId, Request, Source, Tag};

use crate::affinity;
use crate::transports::{self, Kind, Open, SERVER_PORT};

/// A response not back within this long means the link lost it.
const STALL: Duration = Duration::from_secs(10);

/// `k`'s link spec on `ifname` (as its server endpoint would open it).
fn link_spec(k: Kind, ifname: &str, attach: AttachMode) -> Result<LlcSpec> {
    let open = Open {
        ifname,
        ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
        server: true,
        port: SERVER_PORT,
        uring_coop: true,
        xdp_attach: attach,
        pair: 0,
    };
    match transports::spec(k, &open) {
        TransportSpec::Llc(s) => Ok(s),
        _ => bail!("{k} is not an LLC transport"),
    }
}

/// Work each end of the floor does per message it sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloorWork {
    /// Nothing: the bare floor.
    None,
    /// Read and write this many scattered cache lines, each read depending
    /// on the last ([`LineToucher`]).
    Lines(usize),
    /// One 8-byte tagged round trip of the message layer between two
    /// endpoints of this thread on the in-memory wire: the message layer's
    /// own code and state, both ends' share of two messages.
    MessageLayer,
    /// One round trip of an 8-byte active message behind a 16-byte prefix
    /// (an ob1 match header), both copied in as btl/llc's inline send does
    /// (`am_post_copy`) and taken pull-style, as btl/llc takes them.
    ActiveMessages,
    /// No work, but TEST frames of this many bytes (at most 273) instead
    /// of the shortest: the link's cost of a longer frame (the message
    /// layer's 8-byte message is a 129-byte frame).
    FrameBytes(usize),
}

/// Bytes of a TEST frame before its information field (Ethernet, LLC).
const TEST_HEAD: usize = 17;

impl std::str::FromStr for FloorWork {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "msg" => Ok(FloorWork::MessageLayer),
            "am" => Ok(FloorWork::ActiveMessages),
            "0" => Ok(FloorWork::None),
            _ if s.starts_with("frame=") => match s["frame=".len()..].parse() {
                Ok(n) if (TEST_HEAD + 8..=TEST_HEAD + MAX_INFO).contains(&n) => {
                    Ok(FloorWork::FrameBytes(n))
                }
                _ => Err(format!(
                    "{s:?}: frame=N with N from {} to {} bytes",
                    TEST_HEAD + 8,
                    TEST_HEAD + MAX_INFO
                )),
            },
            n => n
                .parse()
                .map(FloorWork::Lines)
                .map_err(|_| format!("{s:?}: a number of cache lines, msg, am, or frame=BYTES")),
        }
    }
}

impl std::fmt::Display for FloorWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FloorWork::None => write!(f, "no work"),
            FloorWork::Lines(n) => write!(f, "{n} cache lines touched"),
            FloorWork::MessageLayer => write!(f, "an in-memory message-layer round trip"),
            FloorWork::ActiveMessages => write!(f, "an in-memory active-message round trip"),
            FloorWork::FrameBytes(n) => write!(f, "{n}-byte frames"),
        }
    }
}

impl FloorWork {
    /// The work, ready to run on this thread.
    fn make(self) -> Box<dyn FnMut()> {
        match self {
            FloorWork::None | FloorWork::FrameBytes(_) => Box::new(|| {}),
            FloorWork::Lines(n) => {
                let mut t = LineToucher::new(n);
                Box::new(move || t.touch())
            }
            FloorWork::MessageLayer => {
                let mut p = InMemoryPair::new();
                Box::new(move || p.round_trip())
            }
            FloorWork::ActiveMessages => {
                let p = InMemoryPair::new();
                p.a.set_pull_delivery(true);
                p.b.set_pull_delivery(true);
                Box::new(move || p.am_round_trip())
            }
        }
    }

    /// Bytes of information in each TEST command.
    fn info_len(self) -> usize {
        match self {
            FloorWork::FrameBytes(n) => n - TEST_HEAD,
            _ => 8,
        }
    }

    /// Microseconds the work costs run back to back on this thread, its
    /// memory in the caches: the median of 21 batches of `calls`.
    pub fn warm_micros(self, calls: usize) -> f64 {
        let mut work = self.make();
        let calls = calls.max(1);
        let mut batches: Vec<f64> = (0..21)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..calls {
                    work();
                }
                t.elapsed().as_secs_f64() * 1e6 / calls as f64
            })
            .collect();
        batches.sort_by(f64::total_cmp);
        batches[batches.len() / 2]
    }
}

type SimEndpoint = Endpoint<LlcTransport<SimPort>>;

/// Two message-layer endpoints over the LLC stack on a delay-free
/// in-memory wire, one connection between them: the message layer's own
/// cost with no kernel in the way (as `msg_round_trip_cost` counts it).
struct InMemoryPair {
    a: SimEndpoint,
    b: SimEndpoint,
    pb: PeerId,
    pa: PeerId,
    /// `b`'s posted receive.
    served: Option<Request>,
    abuf: Vec<u8>,
}

impl InMemoryPair {
    fn new() -> Self {
        let sim = Sim::new(SimConfig {
            latency: Duration::ZERO,
            rate_bps: 0,
            ..SimConfig::default()
        });
        let open = |mac: [u8; 6], seed: u64| {
            let t = LlcTransport::new(
                sim.port(),
                llc_stack::wire::MacAddr(mac),
                7,
                LlcConfig::default(),
                Rng::new(seed),
            );
            Endpoint::new(t, msg_layer::Config::default()).expect("an in-memory endpoint")
        };
        let (a, b) = (open([2, 0, 0, 0, 0, 1], 1), open([2, 0, 0, 0, 0, 2], 2));
        let pb = a.add_peer(&b.local_addr()).expect("add peer");
        let pa = b.add_peer(&a.local_addr()).expect("add peer");
        let served = Some(b.irecv(Source::Peer(pa), Tag::Is(1), 0, vec![0; 8]));
        let mut p = InMemoryPair {
            a,
            b,
            pb,
            pa,
            served,
            abuf: vec![0; 8],
        };
        // The connection's handshake, out of the measurement.
        p.round_trip();
        p
    }

    /// 8 bytes from `a` to `b` and back.
    fn round_trip(&mut self) {
        let msg = bytes::Bytes::from_static(&[0xa5; 8]);
        let (a, b) = (&self.a, &self.b);
        let r = a.irecv(
            Source::Peer(self.pb),
            Tag::Is(1),
            0,
            std::mem::take(&mut self.abuf),
        );
        let s = a.isend(self.pb, 1, 0, msg.clone());
        self.abuf = loop {
            let served = self.served.as_ref().expect("b's receive is posted");
            if let Some(done) = b.test(served) {
                let c = done.expect("b's receive");
                let echo = b.isend(self.pa, 1, 0, msg.clone());
                b.wait(echo).expect("b's send");
                let buf = c.data.expect("b's buffer");
                self.served = Some(b.irecv(Source::Peer(self.pa), Tag::Is(1), 0, buf));
            }
            if let Some(done) = a.test(&r) {
                break done.expect("a's receive").data.expect("a's buffer");
            }
        };
        a.wait(s).expect("a's send");
    }

    /// An active message from `a` to `b` and one back.
    fn am_round_trip(&self) {
        /// Prefix and payload of every active message.
        const PREFIX: [u8; 16] = [0x5a; 16];
        const BODY: [u8; 8] = [0xa5; 8];
        let arrived = |ep: &SimEndpoint| {
            ep.progress().expect("progress");
            match ep.poll_event() {
                Some(msg_layer::Event::Message(m)) => {
                    ep.recycle(m);
                    true
                }
                Some(other) => panic!("unexpected event {other:?}"),
                None => false,
            }
        };
        let send = |ep: &SimEndpoint, p| {
            ep.am_post_copy(p, 1, &PREFIX, &BODY)
                .expect("an active message")
        };
        send(&self.a, self.pb);
        loop {
            if arrived(&self.b) {
                send(&self.b, self.pa);
            }
            if arrived(&self.a) {
                break;
            }
        }
    }
}

/// Median one-way time (half the round trip) in µs of `rounds` TEST round
/// trips from host A to host B of `bed` over `k`'s device code; the two
/// ends on `cpus` (A's, B's) when given. Each end does `work` once per
/// message it sends.
pub fn link_floor(
    k: Kind,
    bed: &testbed::TwoHosts,
    attach: AttachMode,
    rounds: usize,
    cpus: Option<(usize, usize)>,
    work: FloorWork,
) -> Result<f64> {
    let (a_spec, b_spec) = (
        link_spec(k, &bed.a.ifname, attach)?,
        link_spec(k, &bed.b.ifname, attach)?,
    );
    let (a, b) = (MacAddr(bed.a.mac), MacAddr(bed.b.mac));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let b_stop = stop.clone();
    let responder = bed.b.ns.spawn(move || -> Result<()> {
        if let Some((_, cpu)) = cpus {
            affinity::pin_current(&[cpu])?;
        }
        let mut work = work.make();
        b_spec
            .answer_link_tests(
                a,
                || {
                    let _ = ready_tx.send(());
                },
                &b_stop,
                &mut work,
            )
            .with_context(|| format!("answering TEST on {}", b_spec.ifname))
    });
    let pinged = match ready_rx.recv_timeout(STALL) {
        Ok(()) => bed.a.ns.run(|| -> Result<Vec<Duration>> {
            if let Some((cpu, _)) = cpus {
                affinity::pin_current(&[cpu])?;
            }
            let work_kind = work;
            let mut work = work.make();
            let r = a_spec
                .link_round_trips(
                    b,
                    rounds / 10,
                    rounds,
                    STALL,
                    work_kind.info_len(),
                    &mut work,
                )
                .with_context(|| format!("TEST round trips from {}", a_spec.ifname));
            if cpus.is_some() {
                let _ = affinity::pin_current(&[]);
            }
            r
        }),
        Err(_) => Err(anyhow!("the TEST responder did not start")),
    };
    stop.store(true, Ordering::Relaxed);
    let answered = responder
        .join()
        .map_err(|_| anyhow!("the TEST responder panicked"))?;
    let mut rtts = pinged?;
    answered?;
    rtts.sort();
    let median = rtts.get(rtts.len() / 2).context("no round trip measured")?;
    Ok(median.as_secs_f64() * 1e6 / 2.0)
}
