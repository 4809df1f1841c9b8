//! Work a link floor's ends do per message (`llc-perf demo --floor-work`,
//! and the MPI benchmark's floors): the floor measured again with it, beside
//! what the same work costs in a warm loop, says what the platform charges
//! that work between its frames (on veth the kernel's per-frame path runs
//! on the same cores, between one message and the next).

use std::time::Duration;

use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::link::test_ping::{LineToucher, MAX_INFO};
use llc_stack::rng::Rng;

use crate::transport::llc::{LlcConfig, LlcTransport};
use crate::{Endpoint, Event, PeerId, Request, Source, Tag};

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
    pub fn make(self) -> Box<dyn FnMut()> {
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
    pub fn info_len(self) -> usize {
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

/// Rounds of polling after which an in-memory round trip has failed (it
/// takes a few on the delay-free wire).
const MAX_POLLS: u64 = 1_000_000;

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
            Endpoint::new(t, crate::Config::default()).expect("an in-memory endpoint")
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
        let mut polls = 0u64;
        self.abuf = loop {
            polls += 1;
            assert!(
                polls < MAX_POLLS,
                "the in-memory round trip did not complete"
            );
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
                Some(Event::Message(m)) => {
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
        for polls in 0.. {
            assert!(
                polls < MAX_POLLS,
                "the in-memory round trip did not complete"
            );
            if arrived(&self.b) {
                send(&self.b, self.pa);
            }
            if arrived(&self.a) {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_the_in_memory_round_trips_run() {
        let parsed: Vec<FloorWork> = ["0", "192", "msg", "am", "frame=145"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            parsed,
            [
                FloorWork::None,
                FloorWork::Lines(192),
                FloorWork::MessageLayer,
                FloorWork::ActiveMessages,
                FloorWork::FrameBytes(145)
            ]
        );
        assert_eq!(parsed[4].info_len(), 128);
        for bad in ["lots", "frame=10", "frame=9000"] {
            assert!(bad.parse::<FloorWork>().is_err(), "{bad}");
        }
        // Each in-memory pair completes its round trips (a lost message
        // would hang here, not pass).
        for w in [FloorWork::MessageLayer, FloorWork::ActiveMessages] {
            let mut run = w.make();
            for _ in 0..100 {
                run();
            }
            assert!(w.warm_micros(10) > 0.0, "{w}");
        }
    }
}
