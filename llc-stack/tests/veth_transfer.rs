//! 64 MiB through the reliable transport over a real veth pair between two
//! network namespaces, compared by SHA-256: at MTU 1500, 9000 and 65000, and
//! with 5% of received frames dropped by the FaultInjector on both ends. Every
//! case runs over both link backends: AF_PACKET and AF_XDP (copy mode on veth;
//! multi-buffer frames at MTU 9000 and 65000).

use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::afxdp::{AfXdp, AfXdpConfig};
use llc_stack::link::fault::{FaultConfig, FaultInjector};
use llc_stack::proto::{Config, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::{Device, Instant, Stack};
use sha2::{Digest, Sha256};
use testbed::TwoHosts;

const TOTAL: usize = 64 << 20;
const MSG: usize = 1 << 20;
const PORT: u16 = 9;
const LIMIT: Duration = Duration::from_secs(180);

fn payload(i: usize) -> Vec<u8> {
    let mut r = Rng::new(i as u64 + 1);
    let mut v = vec![0u8; MSG];
    for chunk in v.chunks_mut(8) {
        let x = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
    v
}

/// Opens a link device on an interface; returns it with the interface's MAC.
type Opener<D> = fn(&str) -> (D, [u8; 6]);

fn af_packet(ifname: &str) -> (AfPacket, [u8; 6]) {
    let dev = AfPacket::open(ifname, AfPacketConfig::default()).expect("open AF_PACKET");
    let mac = dev.mac();
    (dev, mac)
}

fn af_xdp(ifname: &str) -> (AfXdp, [u8; 6]) {
    let dev = AfXdp::open(ifname, AfXdpConfig::default()).expect("open AF_XDP");
    eprintln!(
        "{ifname}: {} (fallbacks: {:?})",
        dev.capabilities().backend,
        dev.fallbacks()
    );
    let mac = dev.mac();
    (dev, mac)
}

fn open<D: Device>(
    opener: Opener<D>,
    ifname: &str,
    loss: f64,
    seed: u64,
) -> (FaultInjector<D>, MacAddr) {
    let (dev, mac) = opener(ifname);
    let mac = MacAddr(mac);
    let faults = FaultConfig {
        loss,
        ..Default::default()
    };
    (FaultInjector::new(dev, faults, seed), mac)
}

/// Receiver: accept one connection, hash every message until TOTAL bytes.
fn receive<D: Device>(mut stack: Stack<D>) -> (Vec<u8>, usize) {
    stack.endpoint_mut().listen(PORT);
    let mut hasher = Sha256::new();
    let mut got = 0usize;
    let deadline = Instant::now() + LIMIT;
    let done = stack
        .run_until(deadline, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                match ev {
                    Event::Message { data, .. } => {
                        hasher.update(&data);
                        got += data.len();
                    }
                    Event::Closed(Some(e)) => panic!("receiver connection failed: {e}"),
                    _ => {}
                }
            }
            (got >= TOTAL).then_some(())
        })
        .unwrap();
    assert!(
        done.is_some(),
        "receiver timed out with {got} of {TOTAL} bytes"
    );
    // Let the final acknowledgements out.
    let _ = stack.run_until(Instant::now() + Duration::from_millis(300), |_| None::<()>);
    (hasher.finalize().to_vec(), got)
}

/// Sender: connect, keep the send buffer topped up, wait for every Acked.
fn send<D: Device>(mut stack: Stack<D>, peer: MacAddr) -> Vec<u8> {
    let now = Instant::now();
    let conn = stack.endpoint_mut().connect(now, peer, PORT, None).unwrap();
    let mut hasher = Sha256::new();
    let (mut next, mut acked) = (0usize, 0usize);
    let n = TOTAL / MSG;
    let deadline = now + LIMIT;
    let mut pending = None;
    let done = stack
        .run_until(deadline, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                match ev {
                    Event::Acked { .. } => acked += 1,
                    Event::Closed(Some(e)) => panic!("sender connection failed: {e}"),
                    _ => {}
                }
            }
            while next < n {
                let m = pending.take().unwrap_or_else(|| payload(next));
                let buffered = ep.connection(conn).map_or(0, |c| c.send_buffered());
                if buffered >= 8 * MSG {
                    pending = Some(m);
                    break;
                }
                hasher.update(&m);
                ep.send(conn, m).expect("send");
                next += 1;
            }
            (acked == n).then_some(())
        })
        .unwrap();
    assert!(
        done.is_some(),
        "sender timed out: {acked} of {n} messages acknowledged"
    );
    let stats = stack.endpoint().connection_stats(conn).cloned();
    eprintln!("sender: {stats:?}");
    hasher.finalize().to_vec()
}

fn transfer<D: Device + 'static>(opener: Opener<D>, mtu: u32, loss: f64) {
    let hosts = TwoHosts::new(mtu).unwrap();
    let (bif, aif) = (hosts.b.ifname.clone(), hosts.a.ifname.clone());
    let cfg = Config::default();
    let rcfg = cfg.clone();
    let receiver = hosts.b.ns.spawn(move || {
        let (dev, mac) = open(opener, &bif, loss, 11);
        receive(Stack::new(dev, rcfg, mac, Rng::new(2)))
    });
    let sent = hosts.a.ns.run(|| {
        let (dev, mac) = open(opener, &aif, loss, 12);
        assert_eq!(dev.capabilities().mtu, mtu as usize);
        send(Stack::new(dev, cfg, mac, Rng::new(1)), MacAddr(hosts.b.mac))
    });
    let (got, bytes) = receiver.join().expect("receiver thread");
    assert_eq!(bytes, TOTAL);
    assert_eq!(
        got, sent,
        "SHA-256 of received data differs from what was sent"
    );
}

/// The same transfers over each backend.
macro_rules! transfers {
    ($backend:ident, $opener:expr) => {
        mod $backend {
            use super::*;

            #[test]
            fn transfer_64mib_mtu_1500() {
                testbed::require_root!();
                transfer($opener, 1500, 0.0);
            }

            #[test]
            fn transfer_64mib_mtu_9000() {
                testbed::require_root!();
                transfer($opener, 9000, 0.0);
            }

            #[test]
            fn transfer_64mib_mtu_65000() {
                testbed::require_root!();
                transfer($opener, 65000, 0.0);
            }

            #[test]
            fn transfer_64mib_with_5pct_loss() {
                testbed::require_root!();
                transfer($opener, 1500, 0.05);
            }
        }
    };
}

transfers!(af_packet, af_packet);
transfers!(af_xdp, af_xdp);
