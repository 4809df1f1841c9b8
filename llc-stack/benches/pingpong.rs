//! CPU cost of one 64-byte round trip through the protocol, with the kernel
//! taken out: two stacks on a zero-latency simulated wire. `link_level` is an
//! 802.2 TEST command answered by the endpoint; `reliable` is a message
//! echoed through a connection. The difference is what the reliable
//! transport costs per round trip, both ends included.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::link::{RxToken, TxToken};
use llc_stack::proto::{Config, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, Body, Command, MacAddr};
use llc_stack::{Device, Instant, Stack};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

fn wire_pair() -> (SimPort, SimPort) {
    let sim = Sim::new(SimConfig {
        latency: Duration::ZERO,
        rate_bps: 0,
        ..Default::default()
    });
    (sim.port(), sim.port())
}

fn link_level(c: &mut Criterion) {
    let (mut a, b) = wire_pair();
    let mut sb = Stack::new(b, Config::default(), B, Rng::new(2));
    let addr = Addresses {
        dst: B,
        src: A,
        dsap: 0x7c,
        ssap: 0x7c,
    };
    let info = [7u8; 64];
    let now = Instant::ZERO;
    c.bench_function("round_trip/link_level_test", |bench| {
        bench.iter(|| {
            a.transmit(now).unwrap().consume(|buf| {
                wire::emit_llc_control(buf, &addr, false, Command::Test { pf: true }, &info)
                    .unwrap()
            });
            sb.poll_rx(now);
            sb.poll_tx(now).unwrap();
            let tok = a.receive(now).expect("TEST response");
            let ok = tok.consume(|f| {
                matches!(
                    wire::parse(f, Some(0x7c)).map(|f| f.body),
                    Ok(Body::Test { response: true, .. })
                )
            });
            assert!(ok);
        })
    });
}

fn reliable(c: &mut Criterion) {
    let (a, b) = wire_pair();
    let mut sa = Stack::new(a, Config::default(), A, Rng::new(1));
    let mut sb = Stack::new(b, Config::default(), B, Rng::new(2));
    sb.endpoint_mut().listen(7);
    let now = Instant::ZERO;
    let conn = sa.endpoint_mut().connect(now, B, 7, None).unwrap();
    for _ in 0..4 {
        sa.poll(now).unwrap();
        sb.poll(now).unwrap();
    }
    while sa.endpoint_mut().poll_event().is_some() {}
    while sb.endpoint_mut().poll_event().is_some() {}
    let msg = vec![7u8; 64];
    c.bench_function("round_trip/reliable_echo", |bench| {
        bench.iter(|| {
            sa.endpoint_mut().send(conn, msg.clone()).unwrap();
            sa.poll_tx(now).unwrap();
            sb.poll_rx(now);
            while let Some((h, ev)) = sb.endpoint_mut().poll_event() {
                if let Event::Message { data, .. } = ev {
                    sb.endpoint_mut().send(h, data).unwrap();
                }
            }
            sb.poll_tx(now).unwrap();
            sa.poll_rx(now);
            let mut got = false;
            while let Some((_, ev)) = sa.endpoint_mut().poll_event() {
                got |= matches!(ev, Event::Message { .. });
            }
            assert!(got);
        })
    });
}

criterion_group!(benches, link_level, reliable);
criterion_main!(benches);
