//! Streaming goodput of the reliable transport over a veth pair between two
//! network namespaces, for each link backend and MTU (needs root; creates and
//! removes its own hosts).
//!
//! ```text
//! cargo run --release -p llc-stack --example stream_goodput -- [--mib N] [--mtu 1500,9000,65000] [--backend packet,xdp,xdp-generic] [--auth off,on]
//! ```
//!
//! `--auth on` gives both ends the same frame authentication key (every
//! frame then carries a BLAKE3 MAC); `off,on` measures both, one after the
//! other, for each backend and MTU.
//!
//! A sends `--mib` MiB (default 512) as 1 MiB messages, keeping 8 MiB
//! queued, over one connection; B hashes nothing, it only counts. The rate is
//! the payload bytes divided by the time from `connect` to the last
//! message's acknowledgement. Both hosts busy-poll (one core each).

use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::afxdp::{AfXdp, AfXdpConfig, AttachMode};
use llc_stack::proto::{Config, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::{Device, Instant, Stack};
use vm_tests::TwoHosts;

const MSG: usize = 1 << 20;
const PORT: u16 = 9;
const LIMIT: Duration = Duration::from_secs(120);

struct Args {
    mib: usize,
    mtus: Vec<u32>,
    backends: Vec<String>,
    auth: Vec<bool>,
}

fn parse_args() -> Args {
    let mut a = Args {
        mib: 512,
        mtus: vec![1500, 9000, 65000],
        backends: vec!["packet".into(), "xdp".into()],
        auth: vec![false],
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--mib" => a.mib = val().parse().expect("--mib N"),
            "--mtu" => {
                a.mtus = val()
                    .split(',')
                    .map(|m| m.parse().expect("--mtu 1500,9000"))
                    .collect()
            }
            "--backend" => a.backends = val().split(',').map(String::from).collect(),
            "--auth" => {
                a.auth = val()
                    .split(',')
                    .map(|v| match v {
                        "on" => true,
                        "off" => false,
                        _ => panic!("--auth off,on"),
                    })
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn receive<D: Device>(mut stack: Stack<D>, total: usize) -> usize {
    stack.set_spin(LIMIT);
    stack.endpoint_mut().listen(PORT);
    let mut got = 0usize;
    let _ = stack
        .run_until(Instant::now() + LIMIT, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                if let Event::Message { data, .. } = ev {
                    got += data.len();
                }
            }
            (got >= total).then_some(())
        })
        .unwrap();
    let _ = stack.run_until(Instant::now() + Duration::from_millis(300), |_| None::<()>);
    got
}

/// Returns (seconds, retransmits).
fn send<D: Device>(mut stack: Stack<D>, peer: MacAddr, total: usize) -> (f64, u64) {
    stack.set_spin(LIMIT);
    // One buffer shared by every send: the transport's cost is measured,
    // not the application's allocation and copy of each message.
    let msg = bytes::Bytes::from(vec![0x5Au8; MSG]);
    let start = Instant::now();
    let conn = stack
        .endpoint_mut()
        .connect(start, peer, PORT, None)
        .unwrap();
    let n = total / MSG;
    let (mut next, mut acked) = (0usize, 0usize);
    let done = stack
        .run_until(start + LIMIT, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                if let Event::Acked { .. } = ev {
                    acked += 1;
                }
            }
            while next < n && ep.connection(conn).map_or(0, |c| c.send_buffered()) < 8 * MSG {
                ep.send(conn, msg.clone()).expect("send");
                next += 1;
            }
            (acked == n).then_some(())
        })
        .unwrap();
    assert!(done.is_some(), "timed out: {acked} of {n} acknowledged");
    let secs = (Instant::now() - start).as_secs_f64();
    let retrans = stack
        .endpoint()
        .connection_stats(conn)
        .map_or(0, |s| s.retransmits);
    (secs, retrans)
}

fn run<D: Device + 'static>(
    open: fn(&str) -> (D, [u8; 6]),
    mtu: u32,
    total: usize,
    auth: bool,
) -> (String, f64, u64) {
    let cfg = Config {
        auth_key: auth.then(|| llc_stack::wire::AuthKey::derive(b"stream_goodput job key")),
        ..Config::default()
    };
    let rcfg = cfg.clone();
    let hosts = TwoHosts::new(mtu).unwrap();
    let (bif, aif) = (hosts.b.ifname.clone(), hosts.a.ifname.clone());
    let receiver = hosts.b.ns.spawn(move || {
        let (dev, mac) = open(&bif);
        receive(Stack::new(dev, rcfg, MacAddr(mac), Rng::new(2)), total)
    });
    let peer = MacAddr(hosts.b.mac);
    let (backend, secs, retrans) = hosts.a.ns.run(|| {
        let (dev, mac) = open(&aif);
        let backend = dev.capabilities().backend;
        let (secs, retrans) = send(Stack::new(dev, cfg, MacAddr(mac), Rng::new(1)), peer, total);
        (backend, secs, retrans)
    });
    assert_eq!(receiver.join().unwrap(), total);
    (backend, total as f64 * 8.0 / secs / 1e9, retrans)
}

fn main() {
    if let Err(why) = vm_tests::check_privileges() {
        eprintln!("stream_goodput needs root (namespaces, raw sockets, XDP): {why}");
        std::process::exit(2);
    }
    let args = parse_args();
    let total = args.mib * MSG;
    println!("reliable transport goodput, {} MiB in 1 MiB messages, one connection, veth between namespaces", args.mib);
    println!("| backend | MTU | auth | Gbit/s | retransmits |");
    println!("|---|---:|---|---:|---:|");
    for &mtu in &args.mtus {
        for b in &args.backends {
            for &auth in &args.auth {
                let (name, gbps, retrans) = match b.as_str() {
                    "packet" => run(
                        |i| {
                            let d = AfPacket::open(i, AfPacketConfig::default()).unwrap();
                            let m = d.mac();
                            (d, m)
                        },
                        mtu,
                        total,
                        auth,
                    ),
                    "xdp" => run(
                        |i| {
                            let d = AfXdp::open(i, AfXdpConfig::default()).unwrap();
                            let m = d.mac();
                            (d, m)
                        },
                        mtu,
                        total,
                        auth,
                    ),
                    "xdp-generic" => run(
                        |i| {
                            let cfg = AfXdpConfig {
                                attach: AttachMode::Generic,
                                ..Default::default()
                            };
                            let d = AfXdp::open(i, cfg).unwrap();
                            let m = d.mac();
                            (d, m)
                        },
                        mtu,
                        total,
                        auth,
                    ),
                    other => panic!("unknown backend {other} (packet, xdp, xdp-generic)"),
                };
                let auth = if auth { "on" } else { "off" };
                println!("| {name} | {mtu} | {auth} | {gbps:.2} | {retrans} |");
            }
        }
    }
}
