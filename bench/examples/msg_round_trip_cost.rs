//! The message layer's CPU cost per 8-byte round trip, with no kernel in the
//! way: two endpoints over the LLC stack on the in-memory `Sim` wire, driven
//! by one thread. Under callgrind the instruction counts are repeatable
//! whatever else the machine does, so a change to the engine or the reliable
//! path can be judged on a loaded machine:
//!
//! ```sh
//! cargo build --release -p bench --example msg_round_trip_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out --toggle-collect='*round_trips*' \
//!     target/release/examples/msg_round_trip_cost [am] 100000 [IDLE_PEERS [CONNECTED_PEERS]]
//! ```
//!
//! By default the round trip is a tagged `isend`/`irecv` of 8 bytes each
//! way. With `am` first it is what the Open MPI BTL (`btl/llc`), DECK and
//! BMI do instead: an 8-byte active message behind a 16-byte prefix (an
//! ob1 match header) with [`Endpoint::am_post_parts`], taken pull-style
//! ([`Endpoint::poll_event`], then [`Endpoint::recycle`]) after a round of
//! [`Endpoint::progress`], and answered the same way. With `am-post`
//! first, prefix and payload are both copied with
//! [`Endpoint::am_post_copy`], as the BTL's inline send (`btl_sendi`) does.
//!
//! With `idle` first, the cost of one idle round of a waiter (a `test` of a
//! receive nothing matches): a frame that arrives is seen, on average, half
//! a round late. A fourth number, `POLLUTE_KIB`, writes that much other
//! memory between the two halves of every tagged round trip (as the
//! kernel's path of a real link runs on the same cores between messages);
//! under callgrind's cache simulation the round trip's first-level misses
//! are then the cache lines it touches:
//!
//! ```sh
//! valgrind --tool=callgrind --cache-sim=yes --D1=49152,12,64 --LL=1048576,16,64 \
//!     --toggle-collect='*round_trips*' target/release/examples/msg_round_trip_cost 4000 0 0 64
//! ```
//!
//! `IDLE_PEERS` (default 0) more peers are known to both ends and stay
//! silent, as the other ranks of a large job do: the round trip should not
//! cost more for them. `CONNECTED_PEERS` (default 0) more endpoints, on a
//! switched segment, each connect to both ends and exchange a message with
//! them before the measurement, then fall silent: the connections of a job
//! whose ranks all talked once. Keepalives are pushed out of the
//! measurement (a minute), so the count is the round trip's own.

use std::time::{Duration, Instant};

use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint, Event, PeerId, Request, Source, Tag};

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let idle = args.next_if(|a| a == "idle").is_some();
    let am = args.next_if(|a| a == "am" || a == "am-post");
    let am_post = am.as_deref() == Some("am-post");
    let am = am.is_some();
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let idle_peers: u16 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let connected_peers: u16 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    // KiB of other memory written between the two halves of every round
    // trip, as the kernel's path of a real link runs on the same cores
    // between messages: the round trip then finds its own state evicted
    // from the first-level cache, as on veth.
    let pollute_kib: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    // A wire with no delay and no line rate: what is left is CPU time.
    let sim = Sim::new(SimConfig {
        latency: Duration::ZERO,
        rate_bps: 0,
        switched: true,
        ..SimConfig::default()
    });
    let open = |mac: [u8; 6], seed: u64| {
        let cfg = LlcConfig {
            keepalive_interval: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(600),
            ..LlcConfig::default()
        };
        let t = LlcTransport::new(sim.port(), MacAddr(mac), 7, cfg, Rng::new(seed));
        Endpoint::new(t, Config::default()).expect("endpoint")
    };
    let (a, b) = (open([2, 0, 0, 0, 0, 1], 1), open([2, 0, 0, 0, 0, 2], 2));
    let others: Vec<Endpoint<_>> = (0..connected_peers)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            open([2, 0, 0, 1, hi, lo], 100 + u64::from(i))
        })
        .collect();
    for o in &others {
        for end in [&a, &b] {
            let p = o.add_peer(&end.local_addr()).expect("add peer");
            let q = end.add_peer(&o.local_addr()).expect("add peer");
            let r = end.irecv(Source::Peer(q), Tag::Is(2), 0, vec![0; 8]);
            let s = o.isend(p, 2, 0, bytes::Bytes::from_static(&[1; 8]));
            let (mut sent, mut got) = (false, false);
            // A request's result is taken once: each is tested until it is
            // in, and an end whose request is in still makes progress (the
            // other may wait for its half of the connection).
            while !(sent && got) {
                if sent {
                    o.progress().expect("a connected peer's progress");
                } else if let Some(done) = o.test(&s) {
                    done.expect("a connected peer's send");
                    sent = true;
                }
                if got {
                    end.progress().expect("progress");
                } else if let Some(done) = end.test(&r) {
                    done.expect("a connected peer's message");
                    got = true;
                }
            }
        }
    }
    // MPI style: of the pair, one end connects and the other waits, so
    // both directions share one connection and acknowledgements can ride
    // on replies.
    let pb = a.add_peer(&b.local_addr()).expect("add peer");
    let pa = b.add_peer(&a.local_addr()).expect("add peer");
    for i in 0..idle_peers {
        // Addresses below a's and b's: of each pair the smaller connects,
        // so these peers wait, silent, for connections that never come.
        let [hi, lo] = i.to_be_bytes();
        let addr: msg_layer::Addr = format!("[00:00:00:00:{hi:02x}:{lo:02x}]:7")
            .parse()
            .expect("address");
        a.add_peer(&addr).expect("add peer");
        b.add_peer(&addr).expect("add peer");
    }
    let mut pollution = Pollution::new(pollute_kib);
    if pollute_kib > 0 {
        let t = Instant::now();
        for _ in 0..n {
            pollution.touch();
            pollution.touch();
        }
        println!(
            "pollution alone: {:.1} ns per round trip (2 x {pollute_kib} KiB)",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
    let t = Instant::now();
    if idle {
        let r = a.irecv(Source::Peer(pb), Tag::Is(9), 0, vec![0; 8]);
        idle_rounds(&a, &r, n);
        println!(
            "message layer over LLC (Sim): {:.1} ns per idle test round",
            t.elapsed().as_nanos() as f64 / n as f64
        );
        return;
    }
    if am {
        a.set_pull_delivery(true);
        b.set_pull_delivery(true);
        am_round_trips(&a, &b, pb, pa, n, am_post);
    } else {
        let served = b.irecv(Source::Peer(pa), Tag::Is(1), 0, vec![0; 8]);
        round_trips(&a, &b, pb, pa, served, n, &mut pollution);
    }
    for (name, ep) in [("a", &a), ("b", &b)] {
        let c: Vec<String> = ep
            .counters()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={:.2}", v as f64 / n as f64))
            .collect();
        println!("{name} per round trip: {}", c.join(" "));
    }
    println!(
        "message layer over LLC (Sim): {:.1} ns per 8-byte {} round trip",
        t.elapsed().as_nanos() as f64 / n as f64,
        if am { "active-message" } else { "tagged" }
    );
}

type SimEndpoint = Endpoint<LlcTransport<SimPort>>;

/// `n` round trips from `a` to `b` and back, `served` being `b`'s posted
/// receive. Its own function, so that callgrind can count it alone
/// (`--toggle-collect`), without the set-up.
#[inline(never)]
fn round_trips(
    a: &SimEndpoint,
    b: &SimEndpoint,
    pb: PeerId,
    pa: PeerId,
    served: Request,
    n: u64,
    pollution: &mut Pollution,
) {
    let msg = bytes::Bytes::from_static(&[0xa5; 8]);
    let mut served = served;
    let mut abuf = vec![0u8; 8];
    for _ in 0..n {
        let r = a.irecv(Source::Peer(pb), Tag::Is(1), 0, abuf);
        let s = a.isend(pb, 1, 0, msg.clone());
        pollution.touch();
        abuf = loop {
            if let Some(done) = b.test(&served) {
                pollution.touch();
                let c = done.expect("b's receive");
                let echo = b.isend(pa, 1, 0, msg.clone());
                b.wait(echo).expect("b's send");
                served = b.irecv(Source::Peer(pa), Tag::Is(1), 0, c.data.expect("buffer"));
            }
            if let Some(done) = a.test(&r) {
                break done.expect("a's receive").data.expect("buffer");
            }
        };
        a.wait(s).expect("a's send");
    }
}

/// Memory written between the halves of a round trip (none when empty).
struct Pollution(Vec<u64>);

impl Pollution {
    fn new(kib: usize) -> Self {
        Pollution(vec![0; kib * 1024 / 8])
    }

    /// One write per cache line, each a new value (not optimised away).
    #[inline(never)]
    fn touch(&mut self) {
        for w in self.0.iter_mut().step_by(8) {
            *w = std::hint::black_box(w.wrapping_add(1));
        }
    }
}

/// `n` rounds of a waiter polling for a receive nothing will match: what
/// one idle round of progress costs (a frame that arrives is seen, on
/// average, half a round late).
#[inline(never)]
fn idle_rounds(a: &SimEndpoint, r: &Request, n: u64) {
    for _ in 0..n {
        assert!(a.test(r).is_none());
    }
}

/// The next active message `ep` has after a round of progress, as the BTL
/// shim takes them: its payload checked and its buffer given back.
#[inline(always)]
fn am_arrived(ep: &SimEndpoint, payload: &[u8]) -> bool {
    ep.progress().expect("progress");
    match ep.poll_event() {
        Some(Event::Message(m)) => {
            assert_eq!(m.data(), payload, "active message payload");
            ep.recycle(m);
            true
        }
        Some(other) => panic!("unexpected event {other:?}"),
        None => false,
    }
}

/// The prefix of every active message: the size of Open MPI ob1's match
/// header, which `btl/llc` sends in front of each fragment.
const AM_PREFIX: [u8; 16] = [0x5a; 16];

/// The 8 bytes of every active message.
const AM_BODY: [u8; 8] = [0xa5; 8];

/// Prefix and body in one, as `am-post` sends them.
const AM_WHOLE: [u8; 24] = {
    let mut w = [0u8; 24];
    let mut i = 0;
    while i < 24 {
        w[i] = if i < 16 {
            AM_PREFIX[i]
        } else {
            AM_BODY[i - 16]
        };
        i += 1;
    }
    w
};

/// Send the active message of the round trip from `ep` to `p`.
#[inline(always)]
fn am_send(ep: &SimEndpoint, p: PeerId, whole: bool) {
    if whole {
        ep.am_post_copy(p, 1, &AM_PREFIX, &AM_BODY)
    } else {
        ep.am_post_parts(p, 1, &AM_PREFIX, bytes::Bytes::from_static(&AM_BODY))
    }
    .expect("active message");
}

/// `n` active-message round trips from `a` to `b` and back (see the
/// module's doc; `whole`: `am-post`, both parts copied), counted alone like [`round_trips`].
#[inline(never)]
fn am_round_trips(a: &SimEndpoint, b: &SimEndpoint, pb: PeerId, pa: PeerId, n: u64, whole: bool) {
    for _ in 0..n {
        am_send(a, pb, whole);
        loop {
            if am_arrived(b, &AM_WHOLE) {
                am_send(b, pa, whole);
            }
            if am_arrived(a, &AM_WHOLE) {
                break;
            }
        }
    }
}
