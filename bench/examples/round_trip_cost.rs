//! Runs N 64-byte round trips of each kind over the simulated wire and
//! prints the time per round trip. Under callgrind the instruction counts are
//! repeatable whatever else the machine does:
//!
//! ```sh
//! cargo build --release -p bench --example round_trip_cost
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/round_trip_cost reliable 100000
//! ```

use bench::round_trip;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_else(|| "both".into());
    let n: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    if kind == "link" || kind == "both" {
        let mut l = round_trip::LinkLevel::new();
        let t = Instant::now();
        for _ in 0..n {
            l.round_trip();
        }
        println!(
            "link level: {:.1} ns per round trip",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
    if kind == "reliable" || kind == "both" {
        let mut r = round_trip::Reliable::new();
        let t = Instant::now();
        for _ in 0..n {
            r.round_trip();
        }
        println!(
            "reliable: {:.1} ns per round trip",
            t.elapsed().as_nanos() as f64 / n as f64
        );
    }
}
