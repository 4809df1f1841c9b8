//! Streaming goodput of the message layer against the reliable transport
//! below it, in the same run, on the same veth pair, MTU and backend (needs
//! root; creates and removes its own hosts).
//!
//! ```text
//! cargo run --release -p bench --example msg_stream_goodput -- [--mib N] [--mtu 1500,9000,65000] [--backend packet,xdp,xdp-generic] [--rounds R] [--layers transport,message]
//! ```
//!
//! Both layers move `--mib` MiB (default 512) as 1 MiB messages from A to B,
//! one after the other, `--rounds` times (default 2), alternating:
//! - `transport`: the LLC stack alone, as `llc-stack`'s `stream_goodput`
//!   example measures it (8 MiB kept queued, B gives each reassembly buffer
//!   back for the next message); the rate runs from `connect` to the last
//!   message's acknowledgement.
//! - `message`: an `Endpoint` over the same kind of link with default
//!   settings (1 MiB is a rendezvous message): A keeps 8 `isend`s of one
//!   shared buffer outstanding, B keeps 8 `irecv`s posted, reusing its
//!   buffers as MPI benchmarks do; the rate runs from the first `isend` to
//!   the last send's completion (which needs the receiver's `Done`, so every
//!   byte is in place). Connection set-up happens before the clock starts.
//!
//! Printed: each run's Gbit/s, the medians, and message / transport.

use bench::{transport_stream, veth_link};
use std::collections::VecDeque;
use std::time::{Duration, Instant as StdInstant};

use bytes::Bytes;
use llc_stack::link::any::AnyLink;
use llc_stack::proto::Config as StackConfig;
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::Stack;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::transport::spec::{AttachMode, Backend};
use msg_layer::{Config, Endpoint, Source, Tag};
use testbed::TwoHosts;

use transport_stream::{MSG, PORT};

const QUEUED: usize = 8;
const LIMIT: Duration = Duration::from_secs(120);
const WAIT: Option<Duration> = Some(LIMIT);

fn transport_run(hosts: &TwoHosts, backend: &str, total: usize) -> f64 {
    let (bif, aif) = (hosts.b.ifname.clone(), hosts.a.ifname.clone());
    let rx_backend = backend.to_string();
    let receiver = hosts.b.ns.spawn(move || {
        let dev = veth_link::open(&bif, &rx_backend);
        let mac = dev.mac();
        transport_stream::receive(
            Stack::new(dev, StackConfig::default(), mac, Rng::new(2)),
            total,
        )
    });
    let peer = MacAddr(hosts.b.mac);
    let secs = hosts.a.ns.run(|| {
        let dev = veth_link::open(&aif, backend);
        let mac = dev.mac();
        transport_stream::send(
            Stack::new(dev, StackConfig::default(), mac, Rng::new(1)),
            peer,
            total,
        )
        .0
    });
    assert_eq!(receiver.join().unwrap(), total);
    secs
}

fn open_endpoint(ifname: &str, backend: &str) -> Endpoint<LlcTransport<AnyLink>> {
    let (kind, attach) = match backend {
        "packet" => (Backend::Packet, AttachMode::Auto),
        "xdp" => (Backend::Xdp, AttachMode::Auto),
        "xdp-generic" => (Backend::Xdp, AttachMode::Generic),
        other => panic!("unknown backend {other} ({})", veth_link::BACKENDS),
    };
    let t = LlcTransport::open_with_attach(ifname, kind, attach, PORT, LlcConfig::default())
        .unwrap_or_else(|e| panic!("opening {backend} on {ifname}: {e}"));
    Endpoint::new(t, Config::default()).expect("endpoint")
}

fn message_run(hosts: &TwoHosts, backend: &str, total: usize) -> f64 {
    let n = total / MSG;
    let a = hosts.a.ns.run(|| open_endpoint(&hosts.a.ifname, backend));
    let b = hosts.b.ns.run(|| open_endpoint(&hosts.b.ifname, backend));
    let pb = a.add_peer(&b.local_addr()).unwrap();
    let pa = b.add_peer(&a.local_addr()).unwrap();
    std::thread::scope(|s| {
        let b = &b;
        let receiver = s.spawn(move || {
            let from = Source::Peer(pa);
            // One small message first: connection set-up is not timed.
            b.recv(from, Tag::Is(1), 0, vec![0; 1], WAIT).unwrap();
            let mut posted: VecDeque<_> = (0..QUEUED.min(n))
                .map(|_| b.irecv(from, Tag::Is(2), 0, vec![0; MSG]))
                .collect();
            let mut got = 0usize;
            for i in 0..n {
                let r = posted.pop_front().expect("posted");
                let buf = b.wait_timeout(r, WAIT).unwrap().data.unwrap();
                got += buf.len();
                if i + QUEUED < n {
                    posted.push_back(b.irecv(from, Tag::Is(2), 0, buf));
                }
            }
            got
        });
        a.send(pb, 1, 0, vec![1u8], WAIT).unwrap();
        let msg = Bytes::from(vec![0x5Au8; MSG]);
        let start = StdInstant::now();
        let mut inflight = VecDeque::new();
        for _ in 0..n {
            if inflight.len() == QUEUED {
                a.wait_timeout(inflight.pop_front().unwrap(), WAIT).unwrap();
            }
            inflight.push_back(a.isend(pb, 2, 0, msg.clone()));
        }
        for r in inflight {
            a.wait_timeout(r, WAIT).unwrap();
        }
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(receiver.join().unwrap(), total);
        secs
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    if let Err(why) = testbed::check_privileges() {
        eprintln!("msg_stream_goodput needs root (namespaces, raw sockets, XDP): {why}");
        std::process::exit(2);
    }
    let mut rounds = 2usize;
    let (mut transport, mut message) = (true, true);
    let args =
        veth_link::Sweep::from_args(512, &["packet", "xdp-generic"], |name, val| match name {
            "--rounds" => rounds = val.parse().expect("--rounds R"),
            "--layers" => {
                let layers = veth_link::list(val, |l| l.to_string());
                transport = layers.iter().any(|l| l == "transport");
                message = layers.iter().any(|l| l == "message");
            }
            other => panic!("unknown argument {other}"),
        });
    let total = args.mib * MSG;
    let gbps = |secs: f64| total as f64 * 8.0 / secs / 1e9;
    println!(
        "streaming goodput, {} MiB in 1 MiB messages, {QUEUED} outstanding, veth between namespaces; \
         transport and message layer alternating, {rounds} rounds",
        args.mib
    );
    println!("| backend | MTU | transport Gbit/s | message layer Gbit/s | message / transport |");
    println!("|---|---:|---:|---:|---:|");
    for &mtu in &args.mtus {
        for b in &args.backends {
            let hosts = TwoHosts::new(mtu).unwrap();
            let (mut tr, mut ml) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                if transport {
                    tr.push(gbps(transport_run(&hosts, b, total)));
                }
                if message {
                    ml.push(gbps(message_run(&hosts, b, total)));
                }
            }
            let show = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            let (t, m) = (median(tr.clone()), median(ml.clone()));
            println!(
                "| {b} | {mtu} | {} (median {t:.2}) | {} (median {m:.2}) | {:.2} |",
                show(&tr),
                show(&ml),
                m / t
            );
        }
    }
}
