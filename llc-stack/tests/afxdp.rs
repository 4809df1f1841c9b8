//! The AF_XDP backend on a real veth pair between two network namespaces:
//! ordinary traffic keeps working beside it, only our LLC frames are
//! redirected, and every way of failing to open it says why.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::afxdp::{AfXdp, AfXdpConfig, AttachMode, XdpMode};
use llc_stack::link::{RxToken, TxToken};
use llc_stack::wire::{self, Addresses, Command, MacAddr};
use llc_stack::{Device, Instant, LinkError};
use testbed::TwoHosts;

const SAP: u8 = 0x7C;
const OTHER_SAP: u8 = 0x42;
const SMALL: usize = 500;
const LARGE: usize = 300;
const FOREIGN: usize = 200;

/// Drain `dev`, counting frames, until `stop` says so.
fn drain<D: Device>(dev: &mut D) -> usize {
    let mut n = 0;
    while let Some(tok) = dev.receive(Instant::now()) {
        tok.consume(|_| ());
        n += 1;
    }
    n
}

/// Send `count` TEST frames of `info` bytes from `dev` with this SAP.
fn send_tests<D: Device>(
    dev: &mut D,
    src: [u8; 6],
    dst: [u8; 6],
    sap: u8,
    info: usize,
    count: usize,
) {
    let addr = Addresses {
        dst: MacAddr(dst),
        src: MacAddr(src),
        dsap: sap,
        ssap: sap,
    };
    let payload = vec![0xA5u8; info];
    for _ in 0..count {
        let deadline = Instant::now() + Duration::from_secs(5);
        let tok = loop {
            if let Some(t) = dev.transmit(Instant::now()) {
                break t;
            }
            assert!(Instant::now() < deadline, "no TX buffer for 5 s");
            dev.flush(Instant::now()).unwrap();
        };
        let n = tok.consume(|buf| {
            wire::emit_llc_control(buf, &addr, false, Command::Test { pf: false }, &payload)
                .unwrap()
        });
        assert!(n > 0);
        // Pace a little so the receiver's rings never overflow.
        dev.flush(Instant::now()).unwrap();
    }
}

/// `auto` attaches generic XDP on veth and says so; asking for native still
/// gets native.
#[test]
fn auto_takes_generic_xdp_on_veth() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let ifname = hosts.a.ifname.clone();
    let (backend, notes) = hosts.a.ns.run(|| {
        let dev = AfXdp::open(&ifname, AfXdpConfig::default()).expect("AF_XDP auto");
        (dev.capabilities().backend.clone(), dev.fallbacks().to_vec())
    });
    assert!(backend.ends_with("/generic"), "{backend}");
    assert!(notes.iter().any(|n| n.contains("veth")), "{notes:?}");
    let native = AfXdpConfig {
        attach: AttachMode::Native,
        ..Default::default()
    };
    let backend = hosts.a.ns.run(|| {
        let dev = AfXdp::open(&ifname, native).expect("AF_XDP native");
        dev.capabilities().backend.clone()
    });
    assert!(backend.ends_with("/native"), "{backend}");
}

#[test]
fn ip_traffic_passes_and_only_our_frames_are_redirected() {
    testbed::require_root!();
    let hosts = TwoHosts::new(9000).unwrap();
    let (bif, aif) = (hosts.b.ifname.clone(), hosts.a.ifname.clone());
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let receiver = hosts.b.ns.spawn(move || {
        let mut xdp = AfXdp::open(&bif, AfXdpConfig::default()).expect("AF_XDP on b");
        // Taps on the same interface: AF_PACKET sees only what XDP passed.
        let tap_cfg = |sap| AfPacketConfig {
            sap,
            ..Default::default()
        };
        let mut ours = AfPacket::open(&bif, tap_cfg(SAP)).unwrap();
        let mut other = AfPacket::open(&bif, tap_cfg(OTHER_SAP)).unwrap();
        ready_tx.send(()).unwrap();
        let (mut n_xdp, mut n_ours, mut n_other) = (0, 0, 0);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            n_xdp += drain(&mut xdp);
            n_ours += drain(&mut ours);
            n_other += drain(&mut other);
            if done_rx.try_recv().is_ok() || Instant::now() > deadline {
                // Whatever is still in flight.
                std::thread::sleep(Duration::from_millis(200));
                n_xdp += drain(&mut xdp);
                n_ours += drain(&mut ours);
                n_other += drain(&mut other);
                break;
            }
            xdp.wait(Some(Duration::from_millis(1))).unwrap();
        }
        let backend = xdp.capabilities().backend;
        let counters = xdp.program().unwrap().counters();
        let stats = xdp.stats();
        (n_xdp, n_ours, n_other, backend, counters, stats)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("receiver ready");

    // IPv4 ping between the namespaces while AF_XDP holds b's interface.
    let out = hosts
        .a
        .ns
        .command("ping")
        .args(["-c", "3", "-i", "0.2", "-W", "2"])
        .arg(hosts.b.ipv4.to_string())
        .output()
        .unwrap();
    assert!(out.status.success(), "IPv4 ping failed: {out:?}");

    let (amac, bmac) = (hosts.a.mac, hosts.b.mac);
    hosts.a.ns.run(move || {
        let mut tx = AfPacket::open(&aif, AfPacketConfig::default()).unwrap();
        // Length form (802.3), jumbo form (EtherType 0x8870), another SAP.
        send_tests(&mut tx, amac, bmac, SAP, 100, SMALL);
        send_tests(&mut tx, amac, bmac, SAP, 8000, LARGE);
        send_tests(&mut tx, amac, bmac, OTHER_SAP, 100, FOREIGN);
    });
    done_tx.send(()).unwrap();
    let (n_xdp, n_ours, n_other, backend, counters, stats) = receiver.join().unwrap();
    eprintln!("{backend}: {counters:?} {stats:?}");
    assert_eq!(n_xdp, SMALL + LARGE, "AF_XDP got all our frames");
    assert_eq!(stats.rx_multi_buffer, LARGE as u64);
    assert_eq!(
        n_ours, 0,
        "our frames were redirected, never passed to the stack"
    );
    assert_eq!(n_other, FOREIGN, "frames of another SAP were passed");
    assert_eq!(counters.redirected, (SMALL + LARGE) as u64);
    assert_eq!(counters.no_socket, 0);
    // Other SAP, ICMP echo requests, ARP, IPv6 ND...
    assert!(counters.passed >= (FOREIGN + 3) as u64, "{counters:?}");
}

#[test]
fn queue_already_bound_is_reported() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let ifname = hosts.a.ifname.clone();
    hosts.a.ns.run(|| {
        let first = AfXdp::open(&ifname, AfXdpConfig::default()).unwrap();
        let cfg = AfXdpConfig {
            queue: Some(0),
            bind_retry: Duration::ZERO,
            ..Default::default()
        };
        let err = AfXdp::open_with_program(&ifname, cfg, Arc::clone(first.program().unwrap()))
            .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, LinkError::Busy { .. }), "{err:?}");
        assert!(
            msg.contains("queue 0") && msg.contains("already bound"),
            "{msg}"
        );
        // A queue that does not exist.
        let cfg = AfXdpConfig {
            queue: Some(7),
            ..Default::default()
        };
        let err = AfXdp::open_with_program(&ifname, cfg, Arc::clone(first.program().unwrap()))
            .unwrap_err();
        assert!(err.to_string().contains("queue 7"), "{err}");
    });
}

#[test]
fn foreign_xdp_program_makes_the_interface_busy() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    // Attach a program through netlink, as `ip` does: our own object will do.
    let obj = std::env::temp_dir().join(format!("llc-foreign-{}.o", std::process::id()));
    std::fs::write(&obj, xdp_prog::OBJECT).unwrap();
    let attached = hosts.a.ns.ip(&[
        "link",
        "set",
        "dev",
        &hosts.a.ifname,
        "xdpgeneric",
        "obj",
        obj.to_str().unwrap(),
        "sec",
        "xdp",
    ]);
    let _ = std::fs::remove_file(&obj);
    attached.expect("ip attaches a foreign XDP program");
    let ifname = hosts.a.ifname.clone();
    for attach in [AttachMode::Auto, AttachMode::Generic, AttachMode::Native] {
        let cfg = AfXdpConfig {
            attach,
            ..Default::default()
        };
        let err = hosts.a.ns.run(|| AfXdp::open(&ifname, cfg).unwrap_err());
        let msg = err.to_string();
        assert!(matches!(err, LinkError::Busy { .. }), "{attach:?}: {err:?}");
        assert!(msg.contains("another XDP program"), "{msg}");
    }
    // Once it is removed, we can attach.
    hosts
        .a
        .ns
        .ip(&["link", "set", "dev", &hosts.a.ifname, "xdpgeneric", "off"])
        .unwrap();
    hosts
        .a
        .ns
        .run(|| AfXdp::open(&ifname, AfXdpConfig::default()).unwrap());
}

#[test]
fn unsupported_modes_are_reported() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let ifname = hosts.a.ifname.clone();
    hosts.a.ns.ip(&["link", "set", "lo", "up"]).unwrap();
    hosts.a.ns.run(|| {
        // veth has no zero-copy AF_XDP.
        let cfg = AfXdpConfig {
            mode: XdpMode::ZeroCopy,
            ..Default::default()
        };
        let err = AfXdp::open(&ifname, cfg).unwrap_err();
        assert!(matches!(err, LinkError::Unsupported(_)), "{err:?}");
        assert!(err.to_string().contains("zero-copy"), "{err}");
        // Loopback has no native XDP...
        let cfg = AfXdpConfig {
            attach: AttachMode::Native,
            ..Default::default()
        };
        let err = AfXdp::open("lo", cfg).unwrap_err();
        assert!(matches!(err, LinkError::Unsupported(_)), "{err:?}");
        assert!(err.to_string().contains("native"), "{err}");
        // ...so auto falls back to generic.
        let dev = AfXdp::open("lo", AfXdpConfig::default()).unwrap();
        assert_eq!(dev.capabilities().backend, "af_xdp/copy/generic");
        // Down interfaces are refused before anything is attached.
        drop(dev);
    });
    hosts
        .a
        .ns
        .ip(&["link", "set", &hosts.a.ifname, "down"])
        .unwrap();
    let err = hosts
        .a
        .ns
        .run(|| AfXdp::open(&ifname, AfXdpConfig::default()).unwrap_err());
    assert!(matches!(err, LinkError::InterfaceDown(_)), "{err:?}");
}

#[test]
fn one_socket_per_rx_queue() {
    testbed::require_root!();
    // A 4-queue veth pair with both ends in one namespace.
    let ns = testbed::Netns::new("xq").unwrap();
    testbed::netns::add_veth_loop(&ns, "q0", "q1", 4).unwrap();
    const PER_QUEUE: usize = 200;
    ns.run(|| {
        // Native XDP: veth's per-queue delivery is what is tested (in
        // generic mode the frames' receive queue is not the sender's).
        let native = AfXdpConfig {
            attach: AttachMode::Native,
            ..Default::default()
        };
        let mut rx = AfXdp::open("q0", native.clone()).unwrap();
        assert_eq!(rx.queues(), vec![0, 1, 2, 3]);
        // Senders on q1's queues 1..=3: copy-mode AF_XDP transmits on its
        // own queue, and veth delivers on the peer's queue of the same index.
        let first = AfXdp::open(
            "q1",
            AfXdpConfig {
                queue: Some(1),
                ..native.clone()
            },
        )
        .unwrap();
        let program = Arc::clone(first.program().unwrap());
        let mut senders = vec![first];
        for q in 2..=3 {
            let cfg = AfXdpConfig {
                queue: Some(q),
                ..native.clone()
            };
            senders.push(AfXdp::open_with_program("q1", cfg, Arc::clone(&program)).unwrap());
        }
        let (src, dst) = (senders[0].mac(), rx.mac());
        for s in &mut senders {
            send_tests(s, src, dst, SAP, 100, PER_QUEUE);
        }
        let want = 3 * PER_QUEUE;
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        while got < want && Instant::now() < deadline {
            got += drain(&mut rx);
            rx.wait(Some(Duration::from_millis(10))).unwrap();
        }
        assert_eq!(got, want, "{:?}", rx.stats());
        assert_eq!(rx.program().unwrap().counters().redirected, want as u64);

        // The frames really came in on queues 1..=3: a device serving only
        // queue 0 gets none of them (they find no socket and are passed).
        drop(rx);
        let cfg = AfXdpConfig {
            queue: Some(0),
            ..native.clone()
        };
        let mut rx0 = AfXdp::open("q0", cfg).unwrap();
        for s in &mut senders {
            send_tests(s, src, dst, SAP, 100, PER_QUEUE);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while rx0.program().unwrap().counters().no_socket < want as u64 && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(drain(&mut rx0), 0);
        assert_eq!(rx0.program().unwrap().counters().no_socket, want as u64);
    });
}

/// `auto` takes AF_PACKET where a frame would span more than
/// `AUTO_GENERIC_MAX_CHUNKS` UMEM chunks in generic XDP (MTU 65000 on veth),
/// and says why; at MTU 9000 it still takes AF_XDP, and asking for AF_XDP
/// still gets it at 65000.
#[test]
fn auto_takes_af_packet_for_jumbo_frames_in_generic_mode() {
    use llc_stack::link::any::{self, Backend, AUTO_GENERIC_MAX_CHUNKS};
    testbed::require_root!();
    assert!(llc_stack::link::afxdp::chunks_per_frame(9000) <= AUTO_GENERIC_MAX_CHUNKS);
    assert!(llc_stack::link::afxdp::chunks_per_frame(65000) > AUTO_GENERIC_MAX_CHUNKS);
    let open = |hosts: &TwoHosts, backend: Backend| {
        let ifname = hosts.a.ifname.clone();
        hosts.a.ns.run(move || {
            let (dev, notes) = any::open(
                &ifname,
                backend,
                AfPacketConfig::default(),
                AfXdpConfig::default(),
            )
            .expect("open");
            (dev.capabilities().backend.clone(), notes)
        })
    };
    let jumbo = TwoHosts::new(65000).unwrap();
    let (backend, notes) = open(&jumbo, Backend::Auto);
    assert!(backend.starts_with("af_packet"), "{backend}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("65000") && n.contains("chunks")),
        "{notes:?}"
    );
    let (backend, _) = open(&jumbo, Backend::Xdp);
    assert!(backend.starts_with("af_xdp"), "{backend}");
    let (backend, notes) = open(&TwoHosts::new(9000).unwrap(), Backend::Auto);
    assert!(backend.starts_with("af_xdp"), "{backend} {notes:?}");
}

/// An endpoint its caller knows to be alone on the interface
/// (`Sharing::Alone`, one MPI rank per host) gets AF_PACKET from `auto`
/// wherever a frame spans more than one UMEM chunk in generic XDP (MTU 9000
/// on veth), with the reason; at MTU 1500 (one chunk) it keeps AF_XDP, and
/// without the hint MTU 9000 keeps AF_XDP for the steering many endpoints
/// need.
#[test]
fn auto_takes_af_packet_for_an_endpoint_alone_with_multi_chunk_frames() {
    use llc_stack::link::any::{self, Backend, Sharing};
    testbed::require_root!();
    assert_eq!(llc_stack::link::afxdp::chunks_per_frame(1500), 1);
    assert!(llc_stack::link::afxdp::chunks_per_frame(9000) > 1);
    let open = |hosts: &TwoHosts, sharing: Sharing| {
        let ifname = hosts.a.ifname.clone();
        hosts.a.ns.run(move || {
            let (dev, notes) = any::open_shared(
                &ifname,
                Backend::Auto,
                sharing,
                AfPacketConfig::default(),
                AfXdpConfig::default(),
            )
            .expect("open");
            (dev.capabilities().backend.clone(), notes)
        })
    };
    let jumbo = TwoHosts::new(9000).unwrap();
    let (backend, notes) = open(&jumbo, Sharing::Alone);
    assert!(backend.starts_with("af_packet"), "{backend}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("only endpoint") && n.contains("9000")),
        "{notes:?}"
    );
    let (backend, notes) = open(&jumbo, Sharing::Unknown);
    assert!(backend.starts_with("af_xdp"), "{backend} {notes:?}");
    let (backend, notes) = open(&TwoHosts::new(1500).unwrap(), Sharing::Alone);
    assert!(backend.starts_with("af_xdp"), "{backend} {notes:?}");
}
