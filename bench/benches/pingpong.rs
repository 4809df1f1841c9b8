//! CPU cost of one 64-byte round trip through the protocol, kernel excluded:
//! link level (802.2 TEST) against an echo through a reliable connection. The
//! difference is what the reliable transport costs per round trip, both ends
//! included. For load-independent figures use the instruction counts of
//! `examples/round_trip_cost.rs` under callgrind.

use criterion::{criterion_group, criterion_main, Criterion};

use bench::round_trip::{LinkLevel, Reliable};

fn round_trips(c: &mut Criterion) {
    let mut l = LinkLevel::new();
    c.bench_function("round_trip/link_level_test", |b| b.iter(|| l.round_trip()));
    let mut r = Reliable::new();
    c.bench_function("round_trip/reliable_echo", |b| b.iter(|| r.round_trip()));
    // The cost of llc-stat's pages: per pass (both ends publishing) and per
    // publication. Pages go to a scratch directory unless LLC_STAT_DIR is set.
    let dir = std::env::temp_dir().join(format!("llc-bench-stat-{}", std::process::id()));
    if std::env::var_os("LLC_STAT_DIR").is_none() {
        std::env::set_var("LLC_STAT_DIR", &dir);
    }
    let mut p = Reliable::publishing();
    c.bench_function("round_trip/reliable_echo_publishing", |b| {
        b.iter(|| p.round_trip())
    });
    let mut page = llc_stack::statpage::Publisher::create_in(
        &dir,
        &llc_stack::statpage::PageInfo::default(),
        llc_stack::statpage::DEFAULT_INTERVAL,
    )
    .unwrap();
    c.bench_function("statpage/publish_one_connection", |b| {
        b.iter(|| page.publish(p.endpoint(), llc_stack::Instant::ZERO))
    });
    drop((p, page));
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, round_trips);
criterion_main!(benches);
