//! Cost of building and of parsing one transport frame, by payload size: the
//! per-frame work of the sending and of the receiving side, kernel excluded.
//! Building copies the payload into the frame, then computes the CRC over
//! the frame; parsing checks the CRC.
//!
//! The `mac` group prices frame authentication alone (docs/BENCHMARKS.md,
//! issue 43): the tag of version 4 (NH on long frames, POLYVAL, then
//! AES-128, which also replaces the CRC) against version 1's BLAKE3 keyed
//! hash over the same bytes, and the CRC32C the tag saves; a frame's whole
//! emit and parse (with the verification) with the key off and on; and the
//! sender's work when the payload is sent from where it lies (`gather_off`,
//! `gather_on`); and what a short frame adds to one-way latency
//! (`one_way_off`, `one_way_on`: each frame waits for the previous one's
//! check). By payload: an 8-byte and a 64-byte message's, and full
//! frames at MTU 1500, 9000 and 65000. It counts the measuring thread's CPU
//! time, not wall time: on the shared 2-core build machine the thread is
//! often descheduled, which wall time would charge to the MAC.
//!
//! ```text
//! cargo bench -p llc-stack --bench frames
//! cargo bench -p llc-stack --bench frames -- mac
//! ```

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llc_stack::wire::{self, auth::TAG_LEN, llc, Addresses, AuthKey, MacAddr, TransportHeader};

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

/// Payload bytes of a full keyed frame on a link of `mtu`.
fn full(mtu: usize) -> usize {
    mtu - llc::HEADER_LEN - wire::transport::HEADER_LEN - TAG_LEN
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant
    // Linux always has.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Criterion measurement by the thread's CPU time, in nanoseconds.
struct ThreadCpu;

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;
    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu() - start
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuNanos
    }
}

/// Prints CPU nanoseconds as "ns (CPU)" and throughput in bytes per second.
struct CpuNanos;

impl ValueFormatter for CpuNanos {
    fn scale_values(&self, _typical: f64, _values: &mut [f64]) -> &'static str {
        "ns (CPU)"
    }
    fn scale_throughputs(
        &self,
        _typical: f64,
        throughput: &Throughput,
        values: &mut [f64],
    ) -> &'static str {
        if let Throughput::Bytes(b) = throughput {
            for v in values.iter_mut() {
                *v = *b as f64 / *v;
            }
        }
        "GB/s (CPU)"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn mac(c: &mut Criterion<ThreadCpu>) {
    let key = AuthKey::derive(b"bench");
    let blake3_key = [7u8; 32];
    let header = TransportHeader {
        kind: wire::FrameType::Data.into(),
        ..TransportHeader::default()
    };
    let mut group = c.benchmark_group("mac");
    for payload in [8, 64, full(1500), full(9000), full(65_000)] {
        let data: Vec<u8> = (0..payload).map(|i| (i * 13) as u8).collect();
        let mut buf = vec![0u8; payload + 200];
        let n = wire::emit_transport_with(
            &mut buf,
            &addr(),
            &header,
            &[],
            &data,
            wire::Trailer::Key(&key),
        )
        .unwrap();
        let frame = &buf[..n];
        let span = n - 14 - TAG_LEN;
        group.throughput(Throughput::Bytes(payload as u64));
        group.bench_with_input(BenchmarkId::new("nh_polyval_aes", payload), &n, |b, _| {
            b.iter(|| key.verify(std::hint::black_box(frame), span))
        });
        group.bench_with_input(BenchmarkId::new("blake3", payload), &n, |b, _| {
            b.iter(|| {
                let f = std::hint::black_box(frame);
                let mut h = blake3::Hasher::new_keyed(&blake3_key);
                h.update(&f[..12]);
                h.update(&f[14..14 + 55]);
                h.update(&[0; 4]);
                h.update(&f[14 + 59..14 + span]);
                h.finalize()
            })
        });
        // A frame's whole send and receive work on and off: the payload
        // copied in, then the CRC (off) or the tag (on), then the parse and,
        // on, the verification.
        let mut out = vec![0u8; payload + 200];
        for keyed in [false, true] {
            let name = if keyed { "frame_on" } else { "frame_off" };
            group.bench_with_input(BenchmarkId::new(name, payload), &n, |b, _| {
                b.iter(|| {
                    let trailer = if keyed {
                        wire::Trailer::Key(&key)
                    } else {
                        wire::Trailer::None
                    };
                    let m = wire::emit_transport_with(
                        &mut out,
                        &addr(),
                        &header,
                        &[],
                        std::hint::black_box(&data),
                        trailer,
                    )
                    .unwrap();
                    let Ok(wire::Frame {
                        body: wire::Body::Transport(t),
                        ..
                    }) = wire::parse(&out[..m], None)
                    else {
                        panic!("not a transport frame")
                    };
                    !keyed || key.verify(&out[..m], t.signed_len())
                })
            });
        }
        // What one message's frame adds to one-way latency, on and off:
        // each frame's emit, parse and check wait for the previous one's
        // result (its header's sequence number comes from it), so the
        // figure is the chain's latency, not the throughput of overlapping
        // iterations.
        if payload <= 64 {
            for keyed in [false, true] {
                let name = if keyed { "one_way_on" } else { "one_way_off" };
                let mut h = header;
                group.bench_with_input(BenchmarkId::new(name, payload), &n, |b, _| {
                    b.iter(|| {
                        let trailer = if keyed {
                            wire::Trailer::Key(&key)
                        } else {
                            wire::Trailer::None
                        };
                        let m =
                            wire::emit_transport_with(&mut out, &addr(), &h, &[], &data, trailer)
                                .unwrap();
                        let Ok(wire::Frame {
                            body: wire::Body::Transport(t),
                            ..
                        }) = wire::parse(&out[..m], None)
                        else {
                            panic!("not a transport frame")
                        };
                        let ok = !keyed || key.verify(&out[..m], t.signed_len());
                        h.seq = (h.seq.get().wrapping_add(1 + u32::from(!ok))).into();
                    })
                });
            }
        }
        // The sender's work when the payload stays in the message
        // (scatter-gather, payloads of 1 KiB and more): the frame's start
        // written, then the CRC (off) or the tag (on) over both pieces.
        if payload >= 1024 {
            let body = bytes::Bytes::from(data.clone());
            let prefix = wire::FramePrefix::new(&addr(), &header);
            for keyed in [false, true] {
                let name = if keyed { "gather_on" } else { "gather_off" };
                group.bench_with_input(BenchmarkId::new(name, payload), &n, |b, _| {
                    b.iter(|| {
                        let trailer = if keyed {
                            wire::Trailer::Key(&key)
                        } else {
                            wire::Trailer::None
                        };
                        wire::emit_transport_head_prefixed(
                            &mut out,
                            &prefix,
                            &header,
                            &[],
                            [&[], std::hint::black_box(&body)],
                            trailer,
                        )
                        .unwrap()
                    })
                });
            }
        }
        group.bench_with_input(BenchmarkId::new("crc32c", payload), &n, |b, _| {
            b.iter(|| {
                crc_fast::checksum(
                    crc_fast::CrcAlgorithm::Crc32Iscsi,
                    &std::hint::black_box(frame)[14..14 + span],
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, frames);
criterion_group! {
    name = macs;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = mac
}
criterion_main!(benches, macs);
