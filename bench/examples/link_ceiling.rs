//! What the link itself delivers when nothing but the unavoidable per-frame
//! work of a transport is done: the ceiling that `stream_goodput` (the
//! reliable transport) is measured against, on the same kind of veth pair and
//! through the same device code (needs root; creates and removes its hosts).
//!
//! ```text
//! cargo run --release -p bench --example link_ceiling -- [--mib N] [--mtu 1500,9000,65000] [--backend packet,xdp-generic] [--work none,copy,crc]
//! ```
//!
//! A streams `--mib` MiB of payload in frames as long as the transport's
//! data frames (LLC UI, a 56-byte transport header, `max_payload(mtu)` bytes
//! of payload), with no protocol: no acknowledgements, no windows, no
//! retransmission. B counts what arrives; the rate is B's payload bytes over
//! the time from its first frame to its last. Frames the kernel drops (no
//! flow control) are reported, not resent. Both hosts busy-poll.
//!
//! `--work` sets what each frame costs besides the kernel's path:
//! - `none`: headers only; the payload bytes are whatever the buffer held,
//!   and B only counts (the raw figures of PLATFORM-NOTES).
//! - `copy`: A copies each payload out of a 1 MiB message, B copies it into
//!   an 8 MiB reassembly area: the copies any message transport makes.
//! - `crc`: with the transport's own frame writer and parser, so that
//!   CRC32C is computed by A and checked by B: the work of a transport that
//!   checks integrity, minus the protocol. A sends each payload as the
//!   transport does: from the message where the device gathers (AF_PACKET's
//!   kernel copies it into the skb), copied into the frame where it does
//!   not (AF_XDP); B copies it into the reassembly area.

use bench::veth_link;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;

use llc_stack::link::{RxToken, TxToken};
use llc_stack::wire::transport::{self, TransportHeader};
use llc_stack::wire::{self, ethernet, llc, Addresses, Body, MacAddr, Trailer};
use llc_stack::{Device, Instant};
use testbed::TwoHosts;

const MSG: usize = 1 << 20;
/// Payloads from this size on are sent from the message itself where the
/// device gathers, as the transport sends them (its `GATHER_FROM`).
const GATHER_FROM: usize = 1024;
const REASSEMBLY: usize = 8 << 20;
/// B gives up this long after the last frame (the rest were dropped).
const QUIET: Duration = Duration::from_millis(300);
const LIMIT: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq)]
enum Work {
    None,
    Copy,
    Crc,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::None => "none",
            Work::Copy => "copy",
            Work::Crc => "copy+crc",
        }
    }
}

/// The sweep, and the levels of per-frame work to measure.
fn parse_args() -> (veth_link::Sweep, Vec<Work>) {
    let mut work = vec![Work::None, Work::Copy, Work::Crc];
    let sweep =
        veth_link::Sweep::from_args(1024, &["packet", "xdp-generic"], |name, val| match name {
            "--work" => {
                work = veth_link::list(val, |w| match w {
                    "none" => Work::None,
                    "copy" => Work::Copy,
                    "crc" => Work::Crc,
                    _ => panic!("--work none,copy,crc"),
                })
            }
            other => panic!("unknown argument {other}"),
        });
    (sweep, work)
}

/// Header bytes in front of the payload: Ethernet, LLC, transport header.
const HEAD: usize = ethernet::HEADER_LEN + llc::HEADER_LEN + transport::HEADER_LEN;

/// Send `frames` frames of `payload` bytes each; returns the frames written.
fn send<D: Device>(mut dev: D, addr: Addresses, payload: usize, frames: u64, work: Work) -> u64 {
    let burst = dev.capabilities().max_burst.max(1) as u64;
    let msg = Bytes::from(vec![0x5Au8; MSG]);
    let header = TransportHeader::default();
    let mut off = 0usize;
    let mut sent = 0u64;
    let deadline = Instant::now() + LIMIT;
    while sent < frames {
        let now = Instant::now();
        assert!(now < deadline, "sender stuck after {sent} frames");
        let Some(tok) = dev.transmit(now) else {
            dev.flush(now).expect("flush");
            continue;
        };
        if off + payload > MSG {
            off = 0;
        }
        let at = off;
        off += payload;
        if work == Work::Crc && payload >= GATHER_FROM && <D::TxToken<'_> as TxToken>::GATHERS {
            let data = msg.slice(at..at + payload);
            tok.consume_gather(|buf| {
                let head = wire::emit_transport_head(buf, &addr, &header, &[], [&[], &data])
                    .expect("frame fits");
                (
                    head,
                    Some(wire::Tail {
                        body: data,
                        trailer: 0,
                    }),
                )
            });
        } else {
            send_whole(tok, &addr, &header, &msg[at..at + payload], work);
        }
        sent += 1;
        if sent.is_multiple_of(burst) {
            dev.flush(now).expect("flush");
        }
    }
    dev.flush(Instant::now()).expect("flush");
    sent
}

/// One frame written whole into the device's buffer.
fn send_whole(
    tok: impl TxToken,
    addr: &Addresses,
    header: &TransportHeader,
    data: &[u8],
    work: Work,
) {
    let (addr, payload) = (*addr, data.len());
    tok.consume(|buf| match work {
        Work::None | Work::Copy => {
            let llc_len = llc::HEADER_LEN + transport::HEADER_LEN + payload;
            ethernet::emit_header(buf, addr.dst, addr.src, llc_len);
            let at = ethernet::HEADER_LEN;
            buf[at..at + 3].copy_from_slice(&[addr.dsap, addr.ssap, llc::CONTROL_UI]);
            if work == Work::Copy {
                buf[HEAD..HEAD + payload].copy_from_slice(data);
            }
            HEAD + payload
        }
        Work::Crc => {
            wire::emit_transport_gather(buf, &addr, header, &[], [data, &[]], Trailer::None)
                .expect("frame fits")
        }
    });
}

/// Receive until `frames` arrived or the link stayed quiet for [`QUIET`];
/// returns (payload bytes, frames, seconds from the first frame to the last).
fn receive<D: Device>(
    mut dev: D,
    sap: u8,
    payload: usize,
    frames: u64,
    work: Work,
    ready: mpsc::Sender<()>,
) -> (u64, u64, f64) {
    let mut area = vec![0u8; REASSEMBLY];
    let (mut got, mut bytes, mut at) = (0u64, 0u64, 0usize);
    let (mut first, mut last) = (None, Instant::now());
    ready.send(()).unwrap();
    let deadline = Instant::now() + LIMIT;
    let mut idle = 0u32;
    while got < frames {
        let now = Instant::now();
        let Some(tok) = dev.receive(now) else {
            idle += 1;
            if idle.is_multiple_of(1024) {
                let quiet = first.is_some() && now - last > QUIET;
                if quiet || now > deadline {
                    break;
                }
            }
            continue;
        };
        idle = 0;
        if at + payload > REASSEMBLY {
            at = 0;
        }
        let dst = &mut area[at..at + payload];
        let n = tok.consume(|f| match work {
            Work::None => f.len().saturating_sub(HEAD),
            Work::Copy => {
                let p = f.get(HEAD..).unwrap_or(&[]);
                let n = p.len().min(dst.len());
                dst[..n].copy_from_slice(&p[..n]);
                n
            }
            Work::Crc => match wire::parse(f, Some(sap)) {
                Ok(wire::Frame {
                    body: Body::Transport(t),
                    ..
                }) => {
                    let n = t.payload.len().min(dst.len());
                    dst[..n].copy_from_slice(&t.payload[..n]);
                    n
                }
                _ => 0,
            },
        });
        if n == 0 {
            continue;
        }
        at += payload;
        got += 1;
        bytes += n as u64;
        first.get_or_insert(now);
        last = now;
    }
    std::hint::black_box(&area);
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    (bytes, got, secs)
}

fn run(backend: &str, mtu: u32, total: usize, work: Work) -> (String, f64, f64) {
    let hosts = TwoHosts::new(mtu).unwrap();
    let (bif, aif) = (hosts.b.ifname.clone(), hosts.a.ifname.clone());
    let payload = transport::max_payload(mtu as usize, 0);
    let frames = total.div_ceil(payload) as u64;
    let sap = llc::DEFAULT_SAP;
    let addr = Addresses {
        dst: MacAddr(hosts.b.mac),
        src: MacAddr(hosts.a.mac),
        dsap: sap,
        ssap: sap,
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    let rx_backend = backend.to_string();
    let receiver = hosts.b.ns.spawn(move || {
        let dev = veth_link::open(&bif, &rx_backend);
        receive(dev, sap, payload, frames, work, ready_tx)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("receiver ready");
    let name = hosts.a.ns.run(|| {
        let dev = veth_link::open(&aif, backend);
        let name = dev.capabilities().backend;
        send(dev, addr, payload, frames, work);
        name
    });
    let (bytes, got, secs) = receiver.join().unwrap();
    let lost = 100.0 * (frames - got) as f64 / frames as f64;
    (name, bytes as f64 * 8.0 / secs.max(1e-9) / 1e9, lost)
}

fn main() {
    if let Err(why) = testbed::check_privileges() {
        eprintln!("link_ceiling needs root (namespaces, raw sockets, XDP): {why}");
        std::process::exit(2);
    }
    let (args, works) = parse_args();
    let total = args.mib * MSG;
    println!(
        "link ceiling: {} MiB streamed in transport-sized frames, no protocol, veth between namespaces",
        args.mib
    );
    println!("| backend | MTU | per-frame work | Gbit/s | dropped |");
    println!("|---|---:|---|---:|---:|");
    for &mtu in &args.mtus {
        for b in &args.backends {
            for &work in &works {
                let (name, gbps, lost) = run(b, mtu, total, work);
                println!(
                    "| {name} | {mtu} | {} | {gbps:.2} | {lost:.1}% |",
                    work.name()
                );
            }
        }
    }
}
