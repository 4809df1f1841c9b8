//! The message layer's CPU cost per 8-byte round trip, with no kernel in the
//! way: two endpoints over the LLC stack on the in-memory `Sim` wire, driven
//! by one thread. Under callgrind the instruction counts are repeatable
//! whatever else the machine does, so a change to the engine or the reliable
//! path can be judged on a loaded machine:
//!
//! ```sh
//! cargo build --release -p msg-layer --example msg_round_trip_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/msg_round_trip_cost 100000 [IDLE_PEERS]
//! ```
//!
//! `IDLE_PEERS` (default 0) more peers are known to both ends and stay
//! silent, as the other ranks of a large job do: the round trip should not
//! cost more for them.

use std::time::{Duration, Instant};

use llc_stack::link::sim::{Sim, SimConfig};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint, Source, Tag};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let idle_peers: u16 = args.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    // A wire with no delay and no line rate: what is left is CPU time.
    let sim = Sim::new(SimConfig {
        latency: Duration::ZERO,
        rate_bps: 0,
        ..SimConfig::default()
    });
    let open = |i: u8| {
        let t = LlcTransport::new(
            sim.port(),
            MacAddr([2, 0, 0, 0, 0, i]),
            7,
            LlcConfig::default(),
            Rng::new(u64::from(i)),
        );
        Endpoint::new(t, Config::default()).expect("endpoint")
    };
    let (a, b) = (open(1), open(2));
    // MPI style: of the pair, one end connects and the other waits, so
    // both directions share one connection and acknowledgements can ride
    // on replies.
    let pb = a.add_peer(&b.local_addr()).expect("add peer");
    let pa = b.add_peer(&a.local_addr()).expect("add peer");
    for i in 0..idle_peers {
        // Addresses below a's and b's: of each pair the smaller connects,
        // so these peers wait, silent, for connections that never come.
        let [hi, lo] = i.to_be_bytes();
        let addr: msg_layer::Addr = format!("llc://00:00:00:00:{hi:02x}:{lo:02x}/7")
            .parse()
            .expect("address");
        a.add_peer(&addr).expect("add peer");
        b.add_peer(&addr).expect("add peer");
    }
    let msg = bytes::Bytes::from_static(&[0xa5; 8]);
    let mut served = b.irecv(Source::Peer(pa), Tag::Is(1), 0, vec![0; 8]);
    let mut abuf = vec![0u8; 8];
    let t = Instant::now();
    for _ in 0..n {
        let r = a.irecv(Source::Peer(pb), Tag::Is(1), 0, abuf);
        let s = a.isend(pb, 1, 0, msg.clone());
        abuf = loop {
            if let Some(done) = b.test(&served) {
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
        "message layer over LLC (Sim): {:.1} ns per 8-byte round trip",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}
