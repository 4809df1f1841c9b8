//! What the reliable transport's own work allows per core, with the kernel
//! taken out: the measured half of the model of what this code would do on
//! a NIC with zero-copy AF_XDP (docs/BENCHMARKS.md, "What the same code
//! would do on a NIC").
//!
//! ```text
//! cargo run --release -p bench --example nic_model -- [--mib N] [--mtu 1500,9000] [--nic-gbit 10,25,100] [--driver-ns 0,100,200]
//! ```
//!
//! On a NIC with zero-copy AF_XDP the kernel no longer copies frames: the
//! NIC reads and writes the UMEM, and per frame the kernel only moves a
//! descriptor (the driver's share, `--driver-ns`, which this machine has no
//! such NIC to measure). What is left on each core is the stack's own work,
//! including the copy of a payload into or out of its UMEM chunk. Here that
//! work runs over the in-memory `Sim` link, whose transmit and receive
//! stand in for the UMEM rings (the frame is written into a reused buffer
//! and handed over, as into a UMEM chunk): a stream of 1 MiB messages from
//! A to B in one thread, the time of A's calls (send, transmit, take
//! acknowledgements) and of B's (receive, reassemble, acknowledge) summed
//! apart, each per data frame. A core then runs at
//! `payload / (ns per frame + driver ns)`, and the link at the NIC's line
//! rate less Ethernet's framing; the slower of the two is the model's
//! goodput.
//!
//! Also measured: the same frames through the `Sim` link with no protocol
//! (headers written, payload copied in, frame taken out: the ring's share
//! of the figures above), and 8-byte messages streamed (the message rate a
//! core allows).

use std::time::{Duration, Instant as StdInstant};

use bytes::Bytes;
use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::link::{RxToken, TxToken};
use llc_stack::proto::{Config, ConnHandle, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, MacAddr};
use llc_stack::{Device, Instant, Stack};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const PORT: u16 = 9;
/// Ethernet's per-frame bytes on the wire besides the MTU: header 14, FCS
/// 4, preamble and start delimiter 8, inter-frame gap 12.
const WIRE_OVERHEAD: usize = 38;

struct Args {
    mib: usize,
    mtus: Vec<usize>,
    nic_gbit: Vec<f64>,
    driver_ns: Vec<f64>,
}

fn list<T: std::str::FromStr>(s: &str, what: &str) -> Vec<T> {
    s.split(',')
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{what}: not a number: {v}"))
        })
        .collect()
}

fn parse_args() -> Args {
    let mut a = Args {
        mib: 1024,
        mtus: vec![1500, 9000],
        nic_gbit: vec![10.0, 25.0, 100.0],
        driver_ns: vec![0.0, 100.0, 200.0],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--mib" => a.mib = val.parse().expect("--mib N"),
            "--mtu" => a.mtus = list(&val, "--mtu"),
            "--nic-gbit" => a.nic_gbit = list(&val, "--nic-gbit"),
            "--driver-ns" => a.driver_ns = list(&val, "--driver-ns"),
            other => panic!("unknown argument {other} (--mib, --mtu, --nic-gbit, --driver-ns)"),
        }
    }
    a
}

fn wire_pair(mtu: usize) -> (SimPort, SimPort) {
    let sim = Sim::new(SimConfig {
        mtu,
        latency: Duration::ZERO,
        rate_bps: 0,
        ..Default::default()
    });
    (sim.port(), sim.port())
}

/// Two connected stacks on a `Sim` segment of `mtu`.
fn connected(mtu: usize) -> (Stack<SimPort>, Stack<SimPort>, ConnHandle) {
    let (pa, pb) = wire_pair(mtu);
    let cfg = Config::default();
    let mut a = Stack::new(pa, cfg.clone(), A, Rng::new(1));
    let mut b = Stack::new(pb, cfg, B, Rng::new(2));
    b.endpoint_mut().listen(PORT);
    let now = Instant::now();
    let conn = a.endpoint_mut().connect(now, B, PORT, None).unwrap();
    for _ in 0..8 {
        let now = Instant::now();
        a.poll(now).unwrap();
        b.poll(now).unwrap();
    }
    while a.endpoint_mut().poll_event().is_some() {}
    while b.endpoint_mut().poll_event().is_some() {}
    (a, b, conn)
}

/// Per data frame: the sender's and the receiver's nanoseconds, the payload
/// bytes, and the retransmissions of the run (0 expected: the segment
/// loses nothing).
struct Split {
    tx_ns: f64,
    rx_ns: f64,
    payload: f64,
    frames: u64,
    /// Data frames per message.
    frames_per_msg: f64,
    retransmits: u64,
    /// Of them: tail-loss probes, and retransmission timeouts.
    probes: u64,
    timeouts: u64,
}

/// Stream `total` bytes in messages of `msg_len` (`queued` bytes kept
/// queued), taken in turn from `spread` bytes of memory (one message's
/// length: always the same, cache-warm), and time each end's calls apart.
fn stream(mtu: usize, msg_len: usize, total: usize, queued: usize, spread: usize) -> Split {
    let (mut a, mut b, conn) = connected(mtu);
    let spread = spread.max(msg_len) / msg_len * msg_len;
    let memory = Bytes::from(vec![0x5Au8; spread]);
    let mut at = 0;
    let n = total / msg_len;
    let (mut next, mut got) = (0usize, 0usize);
    let (mut tx, mut rx) = (Duration::ZERO, Duration::ZERO);
    let deadline = StdInstant::now() + Duration::from_secs(120);
    while got < total {
        assert!(
            StdInstant::now() < deadline,
            "stream stalled at {got} bytes"
        );
        let now = Instant::now();
        let t0 = StdInstant::now();
        let ep = a.endpoint_mut();
        while next < n && ep.connection(conn).map_or(0, |c| c.send_buffered()) < queued {
            ep.send(conn, memory.slice(at..at + msg_len)).expect("send");
            at = (at + msg_len) % spread;
            next += 1;
        }
        a.poll_tx(now).unwrap();
        a.poll_rx(now);
        while a.endpoint_mut().poll_event().is_some() {}
        let t1 = StdInstant::now();
        b.poll_rx(now);
        while let Some((_, ev)) = b.endpoint_mut().poll_event() {
            if let Event::Message { data, .. } = ev {
                got += data.len();
                b.endpoint_mut().recycle(data);
            }
        }
        b.poll_tx(now).unwrap();
        let t2 = StdInstant::now();
        tx += t1 - t0;
        rx += t2 - t1;
    }
    let s = a.endpoint().connection_stats(conn).expect("connection");
    let frames = s.data_frames_sent;
    Split {
        tx_ns: tx.as_nanos() as f64 / frames as f64,
        rx_ns: rx.as_nanos() as f64 / frames as f64,
        payload: s.payload_bytes_sent as f64 / frames as f64,
        frames,
        frames_per_msg: frames as f64 / s.messages_sent as f64,
        retransmits: s.retransmits,
        probes: s.tail_probes,
        timeouts: s.timeouts,
    }
}

/// Nanoseconds per frame of the `Sim` link alone: a frame of `len` bytes
/// (headers written, `payload` bytes copied in) transmitted and taken out.
fn link_only(mtu: usize, frames: usize) -> f64 {
    let (mut pa, mut pb) = wire_pair(mtu);
    let addr = Addresses {
        dst: B,
        src: A,
        dsap: 0x7c,
        ssap: 0x7c,
    };
    let payload = vec![0x5Au8; wire::transport::max_payload(mtu, 0)];
    let now = Instant::now();
    let t = StdInstant::now();
    let mut seen = 0usize;
    for _ in 0..frames {
        pa.transmit(now).expect("room").consume(|buf| {
            let head = 14 + 3;
            buf[..6].copy_from_slice(&addr.dst.0);
            buf[6..12].copy_from_slice(&addr.src.0);
            let end = head + payload.len();
            buf[head..end].copy_from_slice(&payload);
            end
        });
        let tok = pb.receive(now).expect("frame");
        seen += tok.consume(|f| f.len());
    }
    assert!(seen > 0);
    t.elapsed().as_nanos() as f64 / frames as f64
}

fn gbit(payload: f64, ns: f64) -> f64 {
    payload * 8.0 / ns
}

fn main() {
    let args = parse_args();
    let total = args.mib << 20;
    println!(
        "reliable transport over the in-memory link (no kernel), {} MiB of 1 MiB messages per MTU",
        args.mib
    );
    println!();
    println!("The sender's messages come from one cache-warm 1 MiB buffer (\"warm\") or in turn from across 256 MiB (\"cold\": every payload read from memory, as a streaming application's are).");
    println!();
    println!("| MTU | sender's data | payload / frame | sender ns / frame | receiver ns / frame | link alone ns / frame | sender core Gbit/s | receiver core Gbit/s | retransmits (probes, timeouts) |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for &mtu in &args.mtus {
        // A warm-up run, then the measured ones.
        let _ = stream(mtu, 1 << 20, 64 << 20, 8 << 20, 0);
        for (data, spread) in [("warm", 0), ("cold", 256 << 20)] {
            let s = stream(mtu, 1 << 20, total, 8 << 20, spread);
            let link = link_only(mtu, s.frames.min(1 << 20) as usize);
            println!(
                "| {mtu} | {data} | {:.0} | {:.0} | {:.0} | {link:.0} | {:.1} | {:.1} | {} ({}, {}) |",
                s.payload,
                s.tx_ns,
                s.rx_ns,
                gbit(s.payload, s.tx_ns),
                gbit(s.payload, s.rx_ns),
                s.retransmits,
                s.probes,
                s.timeouts
            );
            rows.push((mtu, data, s));
        }
    }
    println!();
    let small = stream(1500, 8, 8 << 20, 64 << 10, 0);
    let (tx, rx) = (
        small.tx_ns * small.frames_per_msg,
        small.rx_ns * small.frames_per_msg,
    );
    println!(
        "8-byte messages streamed ({:.2} frames each): sender {tx:.0} ns, receiver {rx:.0} ns per message ({:.2} and {:.2} M messages/s per core)",
        small.frames_per_msg,
        1e3 / tx,
        1e3 / rx
    );
    println!();
    println!("model: goodput = min(NIC line rate less framing, payload / (slower core's ns per frame + driver ns))");
    println!();
    let mut head = String::from("| MTU | sender's data | driver ns / frame | per-core Gbit/s |");
    let mut rule = String::from("|---:|---|---:|---:|");
    for g in &args.nic_gbit {
        head.push_str(&format!(" {g} GbE |"));
        rule.push_str("---:|");
    }
    println!("{head}");
    println!("{rule}");
    for (mtu, data, s) in &rows {
        for &k in &args.driver_ns {
            let core = gbit(s.payload, s.tx_ns.max(s.rx_ns) + k);
            let mut line = format!("| {mtu} | {data} | {k:.0} | {core:.1} |");
            for g in &args.nic_gbit {
                let wire = g * s.payload / (*mtu + WIRE_OVERHEAD) as f64;
                let (v, by) = if core < wire {
                    (core, "core")
                } else {
                    (wire, "line")
                };
                line.push_str(&format!(" {v:.1} ({by}) |"));
            }
            println!("{line}");
        }
    }
}
