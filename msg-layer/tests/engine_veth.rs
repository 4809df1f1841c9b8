//! The conformance suite over real links: veth pairs and a bridge between
//! network namespaces, with the LLC stack over AF_PACKET and over AF_XDP.
//! Needs root (skipped with a printed reason otherwise).

mod suite;

use std::time::Duration;

use llc_stack::link::any::{AnyLink, Backend};
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint};
use vm_tests::netns::{Bridged, Host, TwoHosts};
use vm_tests::require_root;

type LlcEndpoint = Endpoint<LlcTransport<AnyLink>>;

/// An endpoint on `host`'s port, opened inside its namespace.
fn open(host: &Host, backend: Backend, cfg: &Config, llc: &LlcConfig) -> LlcEndpoint {
    let ifname = host.ifname.clone();
    let llc = llc.clone();
    let t = host
        .ns
        .run(move || LlcTransport::open(&ifname, backend, 7, llc))
        .unwrap_or_else(|e| panic!("opening {backend} in {}: {e}", host.ns.name()));
    Endpoint::new(t, cfg.clone()).unwrap()
}

fn pair(mtu: u32, backend: Backend, cfg: &Config) -> (TwoHosts, LlcEndpoint, LlcEndpoint) {
    let hosts = TwoHosts::new(mtu).expect("testbed");
    let llc = LlcConfig::default();
    let a = open(&hosts.a, backend, cfg, &llc);
    let b = open(&hosts.b, backend, cfg, &llc);
    (hosts, a, b)
}

fn sizes(backend: Backend) {
    require_root!();
    let cfg = Config::default();
    let (_bed, a, b) = pair(9000, backend, &cfg);
    suite::sizes_both_ways(&a, &b, &suite::sizes(cfg.eager_limit, 64 << 20));
    let (_bed, a, b) = pair(1500, backend, &cfg);
    suite::sizes_both_ways(&a, &b, &suite::sizes(cfg.eager_limit, 4 << 20));
}

fn matching_and_ordering(backend: Backend) {
    require_root!();
    let cfg = Config::default();
    let (_bed, a, b) = pair(1500, backend, &cfg);
    suite::matching(&a, &b, cfg.eager_limit);
    suite::back_to_back(&a, &b, 10_000, 64);
    suite::crossing_rendezvous(&a, &b, 4 << 20);
    suite::active_messages_and_rma(&a, &b);
}

fn incast(backend: Backend) {
    require_root!();
    let cfg = Config {
        eager_window: 256 << 10,
        ..Config::default()
    };
    let bed = Bridged::new(5, 1500).expect("testbed");
    let llc = LlcConfig::default();
    let mut eps: Vec<LlcEndpoint> = bed
        .hosts
        .iter()
        .map(|h| open(h, backend, &cfg, &llc))
        .collect();
    let rx = eps.remove(0);
    suite::incast_bounded(&rx, &eps, 300, 8000, cfg.eager_window as usize);
}

fn vanishing_peer(backend: Backend) {
    require_root!();
    let cfg = Config::default();
    let bed = Bridged::new(3, 1500).expect("testbed");
    let llc = LlcConfig {
        keepalive_interval: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(2),
        ..LlcConfig::default()
    };
    let mut eps: Vec<LlcEndpoint> = bed
        .hosts
        .iter()
        .map(|h| open(h, backend, &cfg, &llc))
        .collect();
    let other = eps.pop().unwrap();
    let gone = eps.pop().unwrap();
    let a = eps.pop().unwrap();
    suite::vanishing_peer(&a, gone, &other, cfg.eager_limit, Duration::from_secs(10));
}

#[test]
fn packet_sizes() {
    sizes(Backend::Packet);
}

#[test]
fn xdp_sizes() {
    sizes(Backend::Xdp);
}

#[test]
fn packet_matching_and_ordering() {
    matching_and_ordering(Backend::Packet);
}

#[test]
fn xdp_matching_and_ordering() {
    matching_and_ordering(Backend::Xdp);
}

#[test]
fn packet_incast() {
    incast(Backend::Packet);
}

#[test]
fn xdp_incast() {
    incast(Backend::Xdp);
}

#[test]
fn packet_vanishing_peer() {
    vanishing_peer(Backend::Packet);
}

#[test]
fn xdp_vanishing_peer() {
    vanishing_peer(Backend::Xdp);
}
