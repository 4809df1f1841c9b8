//! Streaming goodput of the reliable transport over a veth pair between two
//! network namespaces, for each link backend and MTU (needs root; creates and
//! removes its own hosts).
//!
//! ```text
//! cargo run --release -p bench --example stream_goodput -- [--mib N] [--mtu 1500,9000,65000] [--backend packet,xdp,xdp-generic] [--auth off,on]
//! ```
//!
//! `--auth on` gives both ends the same frame authentication key (every
//! frame then carries a tag, docs/PROTOCOL.md 3.12); `off,on` measures
//! both, one after the other, for each backend and MTU.
//!
//! A sends `--mib` MiB (default 512) as 1 MiB messages, keeping 8 MiB
//! queued, over one connection; B hashes nothing, it only counts (and gives
//! each buffer back for the next message). The rate is
//! the payload bytes divided by the time from `connect` to the last
//! message's acknowledgement. Both hosts busy-poll (one core each).

use bench::{transport_stream, veth_link};
use llc_stack::proto::Config;
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::{Device, Stack};
use testbed::TwoHosts;

use transport_stream::MSG;

/// The sweep, and whether to run it without and/or with authentication.
fn parse_args() -> (veth_link::Sweep, Vec<bool>) {
    let mut auth = vec![false];
    let sweep = veth_link::Sweep::from_args(512, &["packet", "xdp"], |name, val| match name {
        "--auth" => {
            auth = veth_link::list(val, |v| match v {
                "on" => true,
                "off" => false,
                _ => panic!("--auth off,on"),
            })
        }
        other => panic!("unknown argument {other}"),
    });
    (sweep, auth)
}

fn run(backend: &str, mtu: u32, total: usize, auth: bool) -> (String, f64, u64) {
    let cfg = Config {
        auth_key: auth.then(|| llc_stack::wire::AuthKey::derive(b"stream_goodput job key")),
        ..Config::default()
    };
    let rcfg = cfg.clone();
    let hosts = TwoHosts::new(mtu).unwrap();
    let (bif, aif) = (hosts.b.ifname.clone(), hosts.a.ifname.clone());
    let rx_backend = backend.to_string();
    let receiver = hosts.b.ns.spawn(move || {
        let dev = veth_link::open(&bif, &rx_backend);
        let mac = dev.mac();
        transport_stream::receive(Stack::new(dev, rcfg, mac, Rng::new(2)), total)
    });
    let peer = MacAddr(hosts.b.mac);
    let (backend, secs, retrans) = hosts.a.ns.run(|| {
        let dev = veth_link::open(&aif, backend);
        let (name, mac) = (dev.capabilities().backend, dev.mac());
        let (secs, retrans) =
            transport_stream::send(Stack::new(dev, cfg, mac, Rng::new(1)), peer, total);
        (name, secs, retrans)
    });
    assert_eq!(receiver.join().unwrap(), total);
    (backend, total as f64 * 8.0 / secs / 1e9, retrans)
}

fn main() {
    if let Err(why) = testbed::check_privileges() {
        eprintln!("stream_goodput needs root (namespaces, raw sockets, XDP): {why}");
        std::process::exit(2);
    }
    let (args, auths) = parse_args();
    let total = args.mib * MSG;
    println!("reliable transport goodput, {} MiB in 1 MiB messages, one connection, veth between namespaces", args.mib);
    println!("| backend | MTU | auth | Gbit/s | retransmits |");
    println!("|---|---:|---|---:|---:|");
    for &mtu in &args.mtus {
        for b in &args.backends {
            for &auth in &auths {
                let (name, gbps, retrans) = run(b, mtu, total, auth);
                let auth = if auth { "on" } else { "off" };
                println!("| {name} | {mtu} | {auth} | {gbps:.2} | {retrans} |");
            }
        }
    }
}
