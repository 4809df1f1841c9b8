//! CPU cost of one 64-byte round trip through the protocol, kernel excluded:
//! link level (802.2 TEST) against an echo through a reliable connection. The
//! difference is what the reliable transport costs per round trip, both ends
//! included. For load-independent figures use the instruction counts of
//! `examples/round_trip_cost.rs` under callgrind.

use criterion::{criterion_group, criterion_main, Criterion};

mod support {
    pub mod round_trip;
}
use support::round_trip::{LinkLevel, Reliable};

fn round_trips(c: &mut Criterion) {
    let mut l = LinkLevel::new();
    c.bench_function("round_trip/link_level_test", |b| b.iter(|| l.round_trip()));
    let mut r = Reliable::new();
    c.bench_function("round_trip/reliable_echo", |b| b.iter(|| r.round_trip()));
}

criterion_group!(benches, round_trips);
criterion_main!(benches);
