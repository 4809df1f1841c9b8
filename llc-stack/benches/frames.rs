//! Cost of building and of parsing one transport frame, by payload size: the
//! per-frame work of the sending and of the receiving side, kernel excluded.
//! Building copies the payload into the frame, then computes the CRC over
//! the frame; parsing checks the CRC.
//!
//! ```text
//! cargo bench -p llc-stack --bench frames
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llc_stack::wire::{self, llc, Addresses, MacAddr, TransportHeader};

fn addr() -> Addresses {
    Addresses {
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        src: MacAddr([2, 0, 0, 0, 0, 1]),
        dsap: llc::DEFAULT_SAP,
        ssap: llc::DEFAULT_SAP,
    }
}

fn frames(c: &mut Criterion) {
    // Payloads are taken from across 8 MiB, as from a sender's queued
    // messages (mostly outside the core's own caches); small ones from one
    // place, as a request's.
    let source: Vec<u8> = (0..8u32 << 20).map(|i| (i * 31 + i / 4093) as u8).collect();
    let header = TransportHeader {
        version: wire::transport::VERSION,
        kind: wire::FrameType::Data.into(),
        ..TransportHeader::default()
    };
    let mut group = c.benchmark_group("frame");
    for size in [64usize, 1400, 8900, 64_000] {
        group.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0u8; size + 200];
        let mut at = 0;
        let stride = if size >= 8900 { 65_536 } else { 0 };
        group.bench_with_input(BenchmarkId::new("emit", size), &size, |b, &size| {
            b.iter(|| {
                at = (at + stride) % (source.len() - size);
                wire::emit_transport(&mut buf, &addr(), &header, &[], &source[at..at + size])
                    .unwrap()
            })
        });
        let n = wire::emit_transport(&mut buf, &addr(), &header, &[], &source[..size]).unwrap();
        group.bench_with_input(BenchmarkId::new("parse", size), &size, |b, _| {
            b.iter(|| wire::parse(&buf[..n], None).is_ok())
        });
    }
    group.finish();
}

criterion_group!(benches, frames);
criterion_main!(benches);
