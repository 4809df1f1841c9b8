//! The opener: transports opened from their string specs
//! ([`TransportSpec`]) over a real veth pair between two network namespaces
//! connect and exchange messages (small and multi-frame, both ways), and
//! report what they are.
//!
//! They need root (namespaces, raw sockets) and print SKIPPED otherwise.

mod common;

use std::time::Duration;

use common::{connected_pair, pattern, Maker, Msg};
use msg_layer::transport::{AnyTransport, Transport, TransportSpec};
use testbed::{require_root, Host};

/// Opens `spec(host)` inside the host's namespace.
fn opener(spec: fn(&Host) -> String) -> impl Maker<AnyTransport> {
    move |h: &Host| {
        let s = spec(h);
        let parsed: TransportSpec = s.parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.to_string(), s, "the spec prints as it parsed");
        parsed.open()
    }
}

fn exchange(spec: fn(&Host) -> String, name_starts: &str) {
    let mut pair = connected_pair(1500, opener(spec));
    for end in [&pair.a, &pair.b] {
        assert!(
            end.name().starts_with(name_starts),
            "{} is not {name_starts}",
            end.name()
        );
    }
    let msgs = |seed: u64| -> Vec<Msg> {
        [0usize, 1, 1499, 100_000]
            .iter()
            .enumerate()
            .map(|(i, &len)| Msg::new(pattern(seed + i as u64, len), len / 3))
            .collect()
    };
    pair.exchange(&msgs(1), &msgs(100), Duration::from_secs(20));
}

#[test]
fn llc_over_af_packet() {
    require_root!();
    exchange(
        |h| format!("llc://{}?backend=packet&port=0", h.ifname),
        "llc/af_packet",
    );
}

/// No interface named: each end opens the interface btl/llc would pick,
/// its namespace's only Ethernet interface.
#[test]
fn llc_with_no_interface_named_opens_the_one_btl_llc_would() {
    require_root!();
    exchange(|_| "llc://?backend=packet&port=0".into(), "llc/af_packet");
}

#[test]
fn llc_over_af_xdp_generic() {
    require_root!();
    exchange(
        |h| format!("llc://{}?backend=xdp&attach=generic&sap=0x78", h.ifname),
        "llc/af_xdp",
    );
}

#[test]
fn llc_exclusive() {
    require_root!();
    exchange(
        |h| format!("llc://{}?backend=packet&exclusive=true", h.ifname),
        "llc/af_packet",
    );
}

#[test]
fn tcp_over_sockets() {
    require_root!();
    exchange(|h| format!("tcp://{}:0", h.ipv4), "tcp/socket");
}

#[test]
fn tcp_over_io_uring() {
    require_root!();
    exchange(
        |h| format!("tcp-uring://{}:0?coop_taskrun=true", h.ipv4),
        "tcp/io_uring",
    );
}

/// Opening names what is wrong in the user's words.
#[test]
fn opening_a_missing_interface_says_so() {
    let spec: TransportSpec = "llc://no-such-if0?backend=packet".parse().unwrap();
    let e = spec.open().unwrap_err().to_string();
    assert!(e.contains("no-such-if0"), "{e}");
}

/// `auth=later`: the endpoint opens and has its address, but connects
/// nowhere and has no key until it is given one; then it does.
#[test]
fn llc_keyed_later_waits_for_its_key() {
    require_root!();
    use msg_layer::transport::llc::AuthKey;
    let spec = |h: &Host| format!("llc://{}?backend=packet&port=0&auth=later", h.ifname);
    let keyed = |key: &[u8]| {
        let key = AuthKey::derive(key);
        move |h: &Host| -> Result<AnyTransport, _> {
            let s: TransportSpec = spec(h).parse().unwrap();
            let mut t = s.open()?;
            assert_eq!(t.auth_fingerprint(), None, "no key before it is given");
            let e = t.connect(&t.local_addr()).unwrap_err().to_string();
            assert!(e.contains("waits for its job's authentication key"), "{e}");
            t.set_auth_key(key.clone())?;
            assert_eq!(t.auth_fingerprint(), Some(key.fingerprint()));
            Ok(t)
        }
    };
    let mut pair = connected_pair(1500, keyed(b"job"));
    let msgs = vec![Msg::new(pattern(1, 3000), 1000)];
    pair.exchange(&msgs, &msgs, Duration::from_secs(20));
}
