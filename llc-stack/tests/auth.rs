//! Frame authentication over a real veth pair between two namespaces: with
//! the same key on both ends 16 MiB arrive intact (SHA-256 compared) over
//! AF_PACKET at MTU 1500, 9000 and 65000 (the payload gathered from the
//! message, the tag last) and AF_XDP at 1500 and 9000 (multi-buffer); with
//! different keys, or a key on one end only, the connection cannot open,
//! the initiator says why and the acceptor counts every frame it refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::afxdp::{AfXdp, AfXdpConfig};
use llc_stack::proto::{Config, ConnectionError, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{AuthKey, MacAddr};
use llc_stack::{Device, Instant, Stack};
use sha2::{Digest, Sha256};
use testbed::TwoHosts;

const TOTAL: usize = 16 << 20;
const MSG: usize = 256 << 10;
const PORT: u16 = 9;
const LIMIT: Duration = Duration::from_secs(60);

type Opener<D> = fn(&str) -> (D, MacAddr);

fn af_packet(ifname: &str) -> (AfPacket, MacAddr) {
    let dev = AfPacket::open(ifname, AfPacketConfig::default()).expect("open AF_PACKET");
    let mac = MacAddr(dev.mac());
    (dev, mac)
}

fn af_xdp(ifname: &str) -> (AfXdp, MacAddr) {
    let dev = AfXdp::open(ifname, AfXdpConfig::default()).expect("open AF_XDP");
    let mac = MacAddr(dev.mac());
    (dev, mac)
}

fn config(key: Option<&[u8]>) -> Config {
    Config {
        auth_key: key.map(AuthKey::derive),
        max_syn_retries: 4,
        ..Config::default()
    }
}

fn payload(i: usize) -> Vec<u8> {
    let mut r = Rng::new(i as u64 + 7);
    (0..MSG).map(|_| r.next_u32() as u8).collect()
}

fn transfer<D: Device + 'static>(opener: Opener<D>, mtu: u32) {
    let hosts = TwoHosts::new(mtu).unwrap();
    let (aif, bif) = (hosts.a.ifname.clone(), hosts.b.ifname.clone());
    let key = b"per-job key 0123456789abcdef";
    let receiver = hosts.b.ns.spawn(move || {
        let (dev, mac) = opener(&bif);
        let mut stack = Stack::new(dev, config(Some(key)), mac, Rng::from_entropy());
        stack.endpoint_mut().listen(PORT);
        let (mut hasher, mut got) = (Sha256::new(), 0usize);
        let done = stack
            .run_until(Instant::now() + LIMIT, |ep| {
                while let Some((_, ev)) = ep.poll_event() {
                    match ev {
                        Event::Message { data, .. } => {
                            hasher.update(&data);
                            got += data.len();
                        }
                        Event::Closed(e) => panic!("receiver connection ended: {e:?}"),
                        _ => {}
                    }
                }
                (got >= TOTAL).then_some(())
            })
            .unwrap();
        assert!(
            done.is_some(),
            "receiver got {got} of {TOTAL} bytes in time"
        );
        // Until the sender's last acknowledgement left: the sender closes.
        let _ = stack.run_until(Instant::now() + Duration::from_secs(5), |ep| {
            let mut closed = false;
            while let Some((_, ev)) = ep.poll_event() {
                closed |= matches!(ev, Event::Closed(_));
            }
            closed.then_some(())
        });
        let d = &stack.endpoint().stats().dropped;
        assert_eq!(
            (d.auth_missing, d.auth_failed, d.auth_unexpected),
            (0, 0, 0)
        );
        hasher.finalize().to_vec()
    });
    let sent = hosts.a.ns.run(|| {
        let (dev, mac) = opener(&aif);
        let mut stack = Stack::new(dev, config(Some(key)), mac, Rng::from_entropy());
        let c = stack
            .endpoint_mut()
            .connect(Instant::now(), MacAddr(hosts.b.mac), PORT, None)
            .unwrap();
        let mut hasher = Sha256::new();
        for i in 0..TOTAL / MSG {
            let m = payload(i);
            hasher.update(&m);
            stack.endpoint_mut().send(c, m).unwrap();
        }
        let mut acked = 0;
        let done = stack
            .run_until(Instant::now() + LIMIT, |ep| {
                while let Some((_, ev)) = ep.poll_event() {
                    match ev {
                        Event::Acked { .. } => acked += 1,
                        Event::Closed(e) => panic!("sender connection ended: {e:?}"),
                        _ => {}
                    }
                }
                (acked == TOTAL / MSG).then_some(())
            })
            .unwrap();
        assert!(done.is_some(), "{acked} messages acknowledged in time");
        let frag = stack.endpoint().connection(c).unwrap().fragment_len();
        assert_eq!(frag, mtu as usize - 3 - 56 - 16, "room left for the tag");
        eprintln!("sender: {:?}", stack.endpoint().connection_stats(c));
        stack.endpoint_mut().close(c);
        let _ = stack.run_until(Instant::now() + Duration::from_secs(5), |ep| {
            ep.connection(c).is_none().then_some(())
        });
        hasher.finalize().to_vec()
    });
    assert_eq!(receiver.join().expect("receiver"), sent, "SHA-256 differs");
}

#[test]
fn af_packet_transfer_with_key() {
    testbed::require_root!();
    transfer(af_packet, 1500);
}

/// At jumbo MTUs the keyed sender sends long payloads from the message
/// and the tag as a third I/O vector of `sendmmsg`.
#[test]
fn af_packet_transfer_with_key_mtu_9000() {
    testbed::require_root!();
    transfer(af_packet, 9000);
}

#[test]
fn af_packet_transfer_with_key_mtu_65000() {
    testbed::require_root!();
    transfer(af_packet, 65000);
}

#[test]
fn af_xdp_transfer_with_key() {
    testbed::require_root!();
    transfer(af_xdp, 1500);
}

#[test]
fn af_xdp_transfer_with_key_mtu_9000() {
    testbed::require_root!();
    transfer(af_xdp, 9000);
}

/// Initiator key, acceptor key: the connection never opens.
fn mismatch(ka: Option<&'static [u8]>, kb: Option<&'static [u8]>) {
    let hosts = TwoHosts::new(1500).unwrap();
    let (aif, bif) = (hosts.a.ifname.clone(), hosts.b.ifname.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let acceptor = {
        let (stop, ready) = (stop.clone(), ready.clone());
        hosts.b.ns.spawn(move || {
            let (dev, mac) = af_packet(&bif);
            let mut stack = Stack::new(dev, config(kb), mac, Rng::from_entropy());
            stack.endpoint_mut().listen(PORT);
            ready.store(true, Ordering::SeqCst);
            let deadline = Instant::now() + LIMIT;
            // Short rounds: an idle stack sleeps until its deadline.
            while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                let _ = stack.run_until(Instant::now() + Duration::from_millis(20), |ep| {
                    if let Some((_, ev)) = ep.poll_event() {
                        panic!("the acceptor saw {ev:?}");
                    }
                    None::<()>
                });
            }
            stack.endpoint().stats().clone()
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ready.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline && !acceptor.is_finished(),
            "acceptor not ready"
        );
        std::thread::yield_now();
    }
    let (err, syns) = hosts.a.ns.run(|| {
        let (dev, mac) = af_packet(&aif);
        let mut stack = Stack::new(dev, config(ka), mac, Rng::from_entropy());
        let c = stack
            .endpoint_mut()
            .connect(Instant::now(), MacAddr(hosts.b.mac), PORT, None)
            .unwrap();
        let r = stack
            .run_until(Instant::now() + LIMIT, |ep| {
                while let Some((h, ev)) = ep.poll_event() {
                    if let (true, Event::Closed(e)) = (h == c, ev) {
                        return Some(e);
                    }
                }
                None
            })
            .unwrap();
        (
            r.expect("the connection attempt ended"),
            stack.endpoint().stats().tx_frames,
        )
    });
    stop.store(true, Ordering::SeqCst);
    let b = acceptor.join().expect("acceptor");
    let err = err.expect("a failure, not a clean close");
    eprintln!("initiator: {err}\nacceptor: {:?}", b.dropped);
    if ka.is_some() {
        assert_eq!(err, ConnectionError::AuthConnectTimeout(5));
        assert!(err.to_string().contains("authentication key"), "{err}");
    } else {
        assert_eq!(err, ConnectionError::ConnectTimeout(5));
    }
    let d = &b.dropped;
    let refused = match (ka, kb) {
        (Some(_), Some(_)) => d.auth_failed,
        (Some(_), None) => d.auth_unexpected,
        _ => d.auth_missing,
    };
    assert_eq!(refused, syns, "every SYN counted: {d:?}");
    assert_eq!((b.accepted, b.resets_sent, b.tx_frames), (0, 0, 0));
}

#[test]
fn mismatched_keys_cannot_connect() {
    testbed::require_root!();
    mismatch(Some(b"key one"), Some(b"key two"));
}

#[test]
fn a_key_on_one_end_only_cannot_connect() {
    testbed::require_root!();
    mismatch(Some(b"key one"), None);
    mismatch(None, Some(b"key one"));
}
