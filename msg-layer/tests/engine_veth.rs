//! The conformance suite over real links: veth pairs and a bridge between
//! network namespaces, on every transport: the LLC stack over AF_PACKET and
//! over AF_XDP, and TCP over io_uring and over plain sockets. Needs root
//! (skipped with a printed reason otherwise).

mod suite;

use std::net::SocketAddr;
use std::time::Duration;

use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::transport::spec::Backend;
use msg_layer::transport::tcp::{TcpConfig, TcpSocketTransport, TcpUringTransport};
use msg_layer::transport::{Transport, TransportError};
use msg_layer::{Config, Endpoint};
use testbed::netns::{Bridged, Host, TwoHosts};
use testbed::require_root;

/// How long a silent peer takes to be declared failed in the vanishing-peer
/// test (the transports' defaults are much longer).
const QUICK_FAILURE: Duration = Duration::from_secs(2);

/// Makes a transport on a host (called inside the host's namespace);
/// `quick` asks for quick failure detection.
trait Maker<T>: Fn(&Host, bool) -> Result<T, TransportError> + Sync {}
impl<T, F: Fn(&Host, bool) -> Result<T, TransportError> + Sync> Maker<T> for F {}

fn llc(backend: Backend) -> impl Maker<LlcTransport<llc_stack::link::any::AnyLink>> {
    move |h: &Host, quick: bool| {
        let mut c = LlcConfig::default();
        if quick {
            c.keepalive_interval = Duration::from_millis(300);
            c.idle_timeout = QUICK_FAILURE;
        }
        LlcTransport::open(&h.ifname, backend, 7, c)
    }
}

fn tcp_config(quick: bool) -> TcpConfig {
    TcpConfig {
        idle_timeout: quick.then_some(QUICK_FAILURE),
        ..TcpConfig::default()
    }
}

fn tcp_uring(h: &Host, quick: bool) -> Result<TcpUringTransport, TransportError> {
    TcpUringTransport::bind(SocketAddr::new(h.ipv4.into(), 0), tcp_config(quick))
}

fn tcp_socket(h: &Host, quick: bool) -> Result<TcpSocketTransport, TransportError> {
    TcpSocketTransport::bind(SocketAddr::new(h.ipv4.into(), 0), tcp_config(quick))
}

/// Endpoints on `hosts`, every pair introduced to each other. Introductions
/// run inside the namespaces: a TCP endpoint creates its connecting socket
/// in the namespace of the thread that connects.
fn endpoints<T: Transport>(
    hosts: &[&Host],
    cfg: &Config,
    quick: bool,
    mk: &impl Maker<T>,
) -> Vec<Endpoint<T>> {
    let eps: Vec<Endpoint<T>> = hosts
        .iter()
        .map(|h| {
            let t =
                h.ns.run(|| mk(h, quick))
                    .unwrap_or_else(|e| panic!("opening a transport in {}: {e}", h.ns.name()));
            Endpoint::new(t, cfg.clone()).unwrap()
        })
        .collect();
    for (i, h) in hosts.iter().enumerate() {
        for (j, other) in eps.iter().enumerate() {
            if i != j {
                let addr = other.local_addr();
                h.ns.run(|| eps[i].add_peer(&addr)).unwrap();
            }
        }
    }
    eps
}

fn two<T: Transport>(
    bed: &TwoHosts,
    cfg: &Config,
    mk: &impl Maker<T>,
) -> (Endpoint<T>, Endpoint<T>) {
    let mut v = endpoints(&[&bed.a, &bed.b], cfg, false, mk);
    let b = v.pop().unwrap();
    (v.pop().unwrap(), b)
}

fn sizes<T: Transport>(mk: impl Maker<T>) {
    require_root!();
    let cfg = Config::default();
    let bed = TwoHosts::new(9000).expect("testbed");
    let (a, b) = two(&bed, &cfg, &mk);
    suite::sizes_both_ways(&a, &b, &suite::sizes(cfg.eager_limit, 64 << 20));
    if b.transport_name().starts_with("llc/") {
        // The LLC stack places rendezvous data straight into the buffers.
        let s = b.stats();
        assert!(
            s.rndv_bytes_placed > s.rndv_bytes_copied,
            "placed {} copied {}",
            s.rndv_bytes_placed,
            s.rndv_bytes_copied
        );
    }
    let bed = TwoHosts::new(1500).expect("testbed");
    let (a, b) = two(&bed, &cfg, &mk);
    suite::sizes_both_ways(&a, &b, &suite::sizes(cfg.eager_limit, 4 << 20));
}

fn matching_and_ordering<T: Transport>(mk: impl Maker<T>) {
    require_root!();
    let cfg = Config::default();
    let bed = TwoHosts::new(1500).expect("testbed");
    let (a, b) = two(&bed, &cfg, &mk);
    suite::matching(&a, &b, cfg.eager_limit);
    suite::back_to_back(&a, &b, 10_000, 64);
    suite::crossing_rendezvous(&a, &b, 4 << 20);
    suite::active_messages_and_rma(&a, &b);
    drop((a, b)); // their ports are taken again below
    let (a, b) = two(&bed, &cfg, &mk);
    suite::pull_delivery_in_order(&a, &b);
}

fn with_progress_thread<T: Transport>(mk: impl Maker<T>) {
    require_root!();
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    let bed = TwoHosts::new(9000).expect("testbed");
    let (a, b) = two(&bed, &cfg, &mk);
    suite::crossing_rendezvous(&a, &b, 4 << 20);
    suite::matching(&a, &b, cfg.eager_limit);
}

fn incast<T: Transport>(mk: impl Maker<T>) {
    require_root!();
    let cfg = Config {
        eager_window: 256 << 10,
        ..Config::default()
    };
    let bed = Bridged::new(5, 1500).expect("testbed");
    let hosts: Vec<&Host> = bed.hosts.iter().collect();
    let mut eps = endpoints(&hosts, &cfg, false, &mk);
    let rx = eps.remove(0);
    suite::incast_bounded(&rx, &eps, 300, 8000, cfg.eager_window as usize);
}

fn vanishing_peer<T: Transport>(mk: impl Maker<T>) {
    require_root!();
    let cfg = Config::default();
    let bed = Bridged::new(3, 1500).expect("testbed");
    let hosts: Vec<&Host> = bed.hosts.iter().collect();
    let mut eps = endpoints(&hosts, &cfg, true, &mk);
    let other = eps.pop().unwrap();
    let gone = eps.pop().unwrap();
    let a = eps.pop().unwrap();
    suite::vanishing_peer(&a, gone, &other, cfg.eager_limit, Duration::from_secs(10));
}

/// Several endpoints of one host on one interface, as MPI ranks of a
/// cluster node: each opens with port 0 (any free port), messages flow
/// between every pair (also between the two of the same host, through the
/// same-host path), and no endpoint sees, let alone drops or resets,
/// another's frames.
fn shared_interface(backend: Backend) -> Vec<String> {
    require_root!(Vec::new());
    // Endpoints not in the pair under test still answer connection
    // requests, as MPI ranks do (btl/llc's background thread).
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    let bed = TwoHosts::new(1500).expect("testbed");
    let any_port = move |h: &Host, _quick: bool| {
        LlcTransport::open(&h.ifname, backend, 0, LlcConfig::default())
    };
    let eps = endpoints(&[&bed.a, &bed.b, &bed.b, &bed.b], &cfg, false, &any_port);
    let addrs: Vec<String> = eps.iter().map(|e| e.local_addr().to_string()).collect();
    for i in 1..addrs.len() {
        assert_ne!(addrs[i], addrs[i - 1], "every endpoint has its own address");
    }
    let sizes = [0, 1, 1000, 1441, 1442, 100_000, 1 << 20];
    for (i, j) in [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3), (1, 3)] {
        suite::sizes_both_ways(&eps[i], &eps[j], &sizes);
    }
    for e in &eps {
        let counters = e.counters();
        let get = |name: &str| {
            counters
                .iter()
                .find(|(k, _)| k == name)
                .unwrap_or_else(|| panic!("no counter {name} in {counters:?}"))
                .1
        };
        let dropped: u64 = counters
            .iter()
            .filter(|(k, _)| k.starts_with("link.dropped."))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(dropped, 0, "{}: {counters:?}", e.local_addr());
        assert_eq!(
            get("link.resets_sent"),
            0,
            "{}: {counters:?}",
            e.local_addr()
        );
        assert!(
            get("link.rx_frames") > 0,
            "{}: {counters:?}",
            e.local_addr()
        );
        // The device's own counters come with the transport's: what the
        // kernel dropped before the stack saw a frame, and the kicks.
        get("link.device.rx_kernel_drops");
        assert!(
            get("link.device.tx_kicks") > 0,
            "{}: {counters:?}",
            e.local_addr()
        );
    }
    eps.iter().map(|e| e.transport_name()).collect()
}

#[test]
fn shared_interface_packet() {
    shared_interface(Backend::Packet);
}

/// With `auto`, every endpoint takes AF_XDP: the veth has one RX queue,
/// the first endpoint of a host creates that queue's buffer pool and the
/// others join it (`XDP_SHARED_UMEM`), and the interface's XDP program hands
/// each endpoint's socket only its own port's frames.
#[test]
fn shared_interface_auto_puts_every_endpoint_on_af_xdp() {
    require_root!();
    let names = shared_interface(Backend::Auto);
    assert!(names.iter().all(|n| n.contains("af_xdp")), "{names:?}");
}

/// The same with AF_XDP required: no endpoint may fall back.
#[test]
fn shared_interface_xdp() {
    require_root!();
    let names = shared_interface(Backend::Xdp);
    assert!(names.iter().all(|n| n.contains("af_xdp")), "{names:?}");
}

/// The suite, once per transport.
macro_rules! suite_on {
    ($name:ident, $maker:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn sizes() {
                super::sizes($maker);
            }

            #[test]
            fn matching_and_ordering() {
                super::matching_and_ordering($maker);
            }

            #[test]
            fn with_progress_thread() {
                super::with_progress_thread($maker);
            }

            #[test]
            fn incast() {
                super::incast($maker);
            }

            #[test]
            fn vanishing_peer() {
                super::vanishing_peer($maker);
            }
        }
    };
}

suite_on!(llc_packet, llc(Backend::Packet));
suite_on!(llc_xdp, llc(Backend::Xdp));
suite_on!(tcp_uring, tcp_uring);
suite_on!(tcp_socket, tcp_socket);
