//! Latency and throughput of the AF_PACKET device over a veth pair between
//! two network namespaces (needs root; creates and removes its own hosts).
//!
//! ```text
//! cargo run --release -p bench --example afpacket_pingpong -- [MTU] [--rounds N] [--secs S] [--no-copy] [--ring-mib M]
//! ```
//!
//! 1. Ping-pong: 64-byte frames, both sides busy-polling; prints the one-way
//!    latency (RTT/2) median and 99th percentile over `--rounds` round trips
//!    (default 100,000, after 10,000 warm-up rounds).
//! 2. Streaming: full-MTU frames from A to B for `--secs` seconds (default 2)
//!    with credit-based flow control (B acknowledges every quarter window, A
//!    keeps at most half of B's RX ring in flight); prints the payload rate
//!    B received in Gbit/s and the frames the kernel dropped. By default the
//!    sender copies each payload into the TX buffer and the receiver copies it
//!    out of the RX ring, as an application would; `--no-copy` writes and
//!    reads only the headers, which measures the device and kernel alone.
//!    B's RX ring takes about `--ring-mib` MiB (default 32).

use bench::pin;
use std::thread;
use std::time::{Duration, Instant as StdInstant};

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig, AfPacketStats};
use llc_stack::link::{Device, RxToken, TxToken};
use llc_stack::Instant;
use testbed::{Host, TwoHosts};

const SAP: u8 = 0x7C;
const PINGPONG_LEN: usize = 64;
const WARMUP: usize = 10_000;
/// Give up when the peer has been silent this long.
const STALL: Duration = Duration::from_secs(10);
/// First payload byte of streaming frames: data, or the end of the stream.
const KIND_DATA: u8 = 0;
const KIND_END: u8 = 1;

struct Args {
    mtu: u32,
    rounds: usize,
    secs: f64,
    copy: bool,
    ring_mib: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        mtu: 1500,
        rounds: 100_000,
        secs: 2.0,
        copy: true,
        ring_mib: 32,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| panic!("{name} needs a value"));
        match arg.as_str() {
            "--rounds" => args.rounds = value("--rounds").parse().expect("--rounds N"),
            "--secs" => args.secs = value("--secs").parse().expect("--secs S"),
            "--no-copy" => args.copy = false,
            "--ring-mib" => args.ring_mib = value("--ring-mib").parse().expect("--ring-mib M"),
            "-h" | "--help" => {
                println!("usage: afpacket_pingpong [MTU] [--rounds N] [--secs S] [--no-copy] [--ring-mib M]");
                std::process::exit(0);
            }
            mtu => args.mtu = mtu.parse().expect("MTU must be a number"),
        }
    }
    args
}

/// Ethernet + LLC header for a frame whose part after the Ethernet header is
/// `after_eth` bytes long (length form up to 1500, jumbo form beyond).
fn write_header(buf: &mut [u8], dst: [u8; 6], src: [u8; 6], after_eth: usize) {
    let length_type = if after_eth <= 1500 {
        after_eth as u16
    } else {
        0x8870
    };
    buf[..6].copy_from_slice(&dst);
    buf[6..12].copy_from_slice(&src);
    buf[12..14].copy_from_slice(&length_type.to_be_bytes());
    buf[14..17].copy_from_slice(&[SAP, SAP, 0x03]);
}

fn open(host: &Host, config: AfPacketConfig) -> AfPacket {
    let name = host.ifname.clone();
    host.ns
        .run(move || AfPacket::open(&name, config))
        .unwrap_or_else(|e| panic!("opening {}: {e}", host.ifname))
}

/// Spin until a frame arrives; returns the value of `f` over it.
fn spin_recv<R>(dev: &mut AfPacket, f: impl FnOnce(&[u8]) -> R) -> R {
    let start = StdInstant::now();
    let mut spins = 0u32;
    loop {
        if let Some(token) = dev.receive(Instant::ZERO) {
            return token.consume(f);
        }
        spins = spins.wrapping_add(1);
        if spins & 0xFFFF == 0 && start.elapsed() > STALL {
            panic!("no frame for {STALL:?}");
        }
        std::hint::spin_loop();
    }
}

/// Spin until the device has TX room, write one frame with `f`, flush.
fn spin_send(dev: &mut AfPacket, f: impl FnOnce(&mut [u8]) -> usize) {
    let start = StdInstant::now();
    let token = loop {
        if let Some(token) = dev.transmit(Instant::ZERO) {
            break token;
        }
        dev.flush(Instant::ZERO).expect("flush");
        if start.elapsed() > STALL {
            panic!("no TX room for {STALL:?}");
        }
    };
    token.consume(f);
    dev.flush(Instant::ZERO).expect("flush");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn pingpong(hosts: &TwoHosts, rounds: usize) {
    let config = AfPacketConfig {
        tx_batch: 1,
        ..AfPacketConfig::default()
    };
    let mut a = open(&hosts.a, config.clone());
    let mut b = open(&hosts.b, config);
    let (am, bm) = (a.mac(), b.mac());
    let total = WARMUP + rounds;

    let rtts = thread::scope(|s| {
        s.spawn(move || {
            pin::pin_to_cpu(1);
            for _ in 0..total {
                let mut frame = [0u8; PINGPONG_LEN];
                spin_recv(&mut b, |f| frame.copy_from_slice(&f[..PINGPONG_LEN]));
                spin_send(&mut b, |buf| {
                    buf[..PINGPONG_LEN].copy_from_slice(&frame);
                    buf[..6].copy_from_slice(&am);
                    buf[6..12].copy_from_slice(&bm);
                    PINGPONG_LEN
                });
            }
        });
        pin::pin_to_cpu(0);
        let mut rtts = Vec::with_capacity(rounds);
        for i in 0..total {
            let start = StdInstant::now();
            spin_send(&mut a, |buf| {
                write_header(buf, bm, am, PINGPONG_LEN - 14);
                buf[17..25].copy_from_slice(&(i as u64).to_be_bytes());
                PINGPONG_LEN
            });
            let echoed = spin_recv(&mut a, |f| {
                u64::from_be_bytes(f[17..25].try_into().unwrap())
            });
            let rtt = start.elapsed();
            assert_eq!(echoed, i as u64, "reply out of order");
            if i >= WARMUP {
                rtts.push(rtt);
            }
        }
        rtts
    });

    let mut one_way: Vec<Duration> = rtts.iter().map(|r| *r / 2).collect();
    one_way.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "pingpong {PINGPONG_LEN} B x {rounds}: one-way median {:.2} us, p99 {:.2} us, p99.9 {:.2} us (RTT median {:.2} us)",
        us(percentile(&one_way, 0.5)),
        us(percentile(&one_way, 0.99)),
        us(percentile(&one_way, 0.999)),
        us(percentile(&one_way, 0.5) * 2),
    );
}

fn stream(hosts: &TwoHosts, mtu: usize, secs: f64, copy: bool, ring_mib: usize) {
    // About `ring_mib` MiB of RX ring, at least 16 and at most 4096 frames.
    let rx_frames = (ring_mib << 20) / (mtu + 100);
    let rx_frames = rx_frames.clamp(16, 4096);
    let window = rx_frames / 2;
    let ack_every = (window / 4).max(1) as u64;
    let config = AfPacketConfig {
        rx_ring_frames: rx_frames,
        tx_batch: 32.min(window),
        ..AfPacketConfig::default()
    };
    let mut a = open(&hosts.a, config.clone());
    let mut b = open(&hosts.b, config);
    let (am, bm) = (a.mac(), b.mac());
    let frame_len = mtu + 14;
    let payload: Vec<u8> = (0..frame_len).map(|i| (i * 7) as u8).collect();
    let duration = Duration::from_secs_f64(secs);

    let (received, elapsed, sa, sb): (u64, Duration, AfPacketStats, AfPacketStats) =
        thread::scope(|s| {
            let receiver = s.spawn(move || {
                pin::pin_to_cpu(1);
                let mut sink = vec![0u8; frame_len];
                let mut frames = 0u64;
                let mut bytes = 0u64;
                let mut until_ack = ack_every;
                let mut start = None;
                let mut last = StdInstant::now();
                loop {
                    let Some(token) = b.receive(Instant::ZERO) else {
                        if last.elapsed() > STALL {
                            panic!("stream stalled after {frames} frames");
                        }
                        std::hint::spin_loop();
                        continue;
                    };
                    last = StdInstant::now();
                    start.get_or_insert(last);
                    let (kind, len) = token.consume(|f| {
                        if copy {
                            // The application's copy out of the ring.
                            sink[..f.len()].copy_from_slice(f);
                        }
                        (f[17], f.len())
                    });
                    if kind == KIND_END {
                        break;
                    }
                    frames += 1;
                    bytes += (len - 14) as u64;
                    until_ack -= 1;
                    if until_ack == 0 {
                        until_ack = ack_every;
                        spin_send(&mut b, |buf| {
                            write_header(buf, am, bm, 3 + 8);
                            buf[17..25].copy_from_slice(&frames.to_be_bytes());
                            25
                        });
                    }
                }
                let elapsed = start.map(|s| s.elapsed()).unwrap_or_default();
                (bytes, elapsed, b.stats())
            });

            pin::pin_to_cpu(0);
            let mut sent = 0u64;
            let mut acked = 0u64;
            let begin = StdInstant::now();
            while begin.elapsed() < duration {
                while sent - acked < window as u64 {
                    let Some(token) = a.transmit(Instant::ZERO) else {
                        break;
                    };
                    token.consume(|buf| {
                        if copy {
                            // The application's copy into the TX buffer.
                            buf[..frame_len].copy_from_slice(&payload);
                        }
                        write_header(buf, bm, am, mtu);
                        buf[17] = KIND_DATA;
                        frame_len
                    });
                    sent += 1;
                }
                a.flush(Instant::ZERO).expect("flush");
                while let Some(token) = a.receive(Instant::ZERO) {
                    acked = acked
                        .max(token.consume(|f| u64::from_be_bytes(f[17..25].try_into().unwrap())));
                }
            }
            spin_send(&mut a, |buf| {
                write_header(buf, bm, am, 3 + 1);
                buf[17] = KIND_END;
                18
            });
            let (bytes, elapsed, sb) = receiver.join().expect("receiver");
            (bytes, elapsed, a.stats(), sb)
        });

    let gbits = received as f64 * 8.0 / elapsed.as_secs_f64() / 1e9;
    let frames = sb.rx_frames.saturating_sub(1);
    println!(
        "stream MTU {mtu}{}: {gbits:.2} Gbit/s of payload ({:.0} kframes/s, {frames} frames in {:.2} s); \
         rx ring {rx_frames}, window {window}; kernel drops {}, truncated {}, tx kicks {} (retries {}), tx errors {}",
        if copy { "" } else { " (no copy)" },
        frames as f64 / elapsed.as_secs_f64() / 1e3,
        elapsed.as_secs_f64(),
        sb.rx_kernel_drops,
        sb.rx_truncated,
        sa.tx_kicks,
        sa.tx_kick_retries,
        sa.tx_errors,
    );
}

fn main() {
    let args = parse_args();
    if let Err(reason) = testbed::check_privileges() {
        eprintln!("afpacket_pingpong needs root: {reason}");
        std::process::exit(2);
    }
    let hosts = TwoHosts::new(args.mtu).expect("creating the test hosts");
    println!(
        "veth pair {} <-> {} between namespaces, MTU {}",
        hosts.a.ns.name(),
        hosts.b.ns.name(),
        args.mtu
    );
    pingpong(&hosts, args.rounds);
    stream(
        &hosts,
        args.mtu as usize,
        args.secs,
        args.copy,
        args.ring_mib,
    );
}
