//! Several endpoints on one interface (AF_PACKET): each claims a port, the
//! kernel hands each only its own frames, exactly one answers link-level
//! commands, and frames to our own MAC take the same-host path.
//!
//! Host A sends hand-made frames over a real veth pair to host B, where the
//! endpoints share `llc0`. Every wait is bounded; the checks that something
//! did NOT arrive wait a short fixed time, which can only make them pass
//! wrongly if the kernel took longer than that to deliver a frame that
//! should not have been delivered at all. Needs root; prints SKIPPED
//! otherwise.

use std::time::{Duration, Instant as StdInstant};

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::{Device, LinkError, RxToken, TxToken};
use llc_stack::Instant;
use vm_tests::{require_root, Host, TwoHosts};

const SAP: u8 = 0x7C;
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a frame that must not arrive is given to show up anyway.
const QUIET: Duration = Duration::from_millis(300);

fn open(host: &Host, port: Option<u16>) -> Result<AfPacket, LinkError> {
    let name = host.ifname.clone();
    host.ns.run(move || {
        AfPacket::open(
            &name,
            AfPacketConfig {
                port,
                ..AfPacketConfig::default()
            },
        )
    })
}

/// A UI frame carrying a (fake) transport header whose `dst_port` is
/// `port`, tagged with `tag` so the receiver can tell frames apart.
fn ui_frame(dst: [u8; 6], src: [u8; 6], port: u16, tag: u8) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&(3u16 + 56).to_be_bytes());
    f.extend_from_slice(&[SAP, SAP, 0x03]);
    let mut header = [0u8; 56];
    header[0] = 1;
    header[4..6].copy_from_slice(&9u16.to_be_bytes());
    header[6..8].copy_from_slice(&port.to_be_bytes());
    header[55] = tag;
    f.extend_from_slice(&header);
    f
}

/// A TEST command (P set) to `dst`.
fn test_frame(dst: [u8; 6], src: [u8; 6], tag: u8) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&(3u16 + 8).to_be_bytes());
    f.extend_from_slice(&[SAP, SAP, 0xF3]);
    f.extend_from_slice(b"LLCP\0\0\0");
    f.push(tag);
    f
}

fn send(dev: &mut AfPacket, frame: &[u8]) {
    let deadline = StdInstant::now() + TIMEOUT;
    loop {
        if let Some(token) = dev.transmit(Instant::now()) {
            token.consume(|buf| {
                buf[..frame.len()].copy_from_slice(frame);
                frame.len()
            });
            dev.flush(Instant::now()).expect("flush");
            return;
        }
        assert!(StdInstant::now() < deadline, "no TX room");
        dev.flush(Instant::now()).expect("flush");
    }
}

fn recv_within(dev: &mut AfPacket, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = StdInstant::now() + timeout;
    loop {
        if let Some(token) = dev.receive(Instant::now()) {
            return Some(token.consume(|f| f.to_vec()));
        }
        let left = deadline.checked_duration_since(StdInstant::now())?;
        dev.wait(Some(left.min(Duration::from_millis(20))))
            .expect("wait");
    }
}

/// Every frame that arrives within `QUIET`, by its last byte (the tag).
fn drain(dev: &mut AfPacket) -> Vec<u8> {
    let mut tags = Vec::new();
    while let Some(f) = recv_within(dev, QUIET) {
        tags.push(*f.last().expect("a frame"));
    }
    tags
}

#[test]
fn each_endpoint_receives_only_its_own_port() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let mut a = open(&hosts.a, None).expect("sender");
    let mut b7 = open(&hosts.b, Some(7)).expect("endpoint on port 7");
    let mut b8 = open(&hosts.b, Some(8)).expect("endpoint on port 8");
    assert_eq!((b7.port(), b8.port()), (Some(7), Some(8)));
    assert!(
        b7.link_role() && !b8.link_role(),
        "the first endpoint answers TEST/XID"
    );
    let (ma, mb) = (hosts.a.mac, hosts.b.mac);
    for tag in 0..20u8 {
        send(
            &mut a,
            &ui_frame(mb, ma, if tag % 2 == 0 { 7 } else { 8 }, tag),
        );
    }
    // A port nobody holds, another SAP's frames: nobody sees them.
    send(&mut a, &ui_frame(mb, ma, 9, 100));
    send(&mut a, &test_frame(mb, ma, 101));
    let (got7, got8) = (drain(&mut b7), drain(&mut b8));
    let even: Vec<u8> = (0..20).filter(|t| t % 2 == 0).collect();
    let odd: Vec<u8> = (0..20).filter(|t| t % 2 == 1).collect();
    assert_eq!(
        got7,
        [even, vec![101]].concat(),
        "port 7 sees its frames and the TEST"
    );
    assert_eq!(got8, odd, "port 8 sees only its frames");
}

#[test]
fn a_held_port_is_refused_and_port_zero_takes_a_free_one() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let _b7 = open(&hosts.b, Some(7)).expect("endpoint on port 7");
    match open(&hosts.b, Some(7)) {
        Err(e @ LinkError::Busy { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("port 7") && msg.contains("port 0"), "{msg}");
        }
        Err(e) => panic!("a second claim of port 7 must be refused as busy, got {e}"),
        Ok(_) => panic!("a second claim of port 7 must be refused"),
    }
    let any1 = open(&hosts.b, Some(0)).expect("any port");
    let any2 = open(&hosts.b, Some(0)).expect("another port");
    let (p1, p2) = (any1.port().unwrap(), any2.port().unwrap());
    assert!(p1 >= 49152 && p2 >= 49152 && p1 != p2, "{p1} {p2}");
    // The same port on another host (namespace) is a different claim.
    let _a7 = open(&hosts.a, Some(7)).expect("port 7 on host A");
    // A claim ends with its device.
    drop(any1);
    let again = open(&hosts.b, Some(p1)).expect("a released port can be claimed");
    assert_eq!(again.port(), Some(p1));
}

#[test]
fn frames_to_our_own_mac_take_the_same_host_path() {
    require_root!();
    let hosts = TwoHosts::new(9000).expect("test hosts");
    let mut a = open(&hosts.a, None).expect("wire watcher");
    let mut b7 = open(&hosts.b, Some(7)).expect("endpoint on port 7");
    let mut b8 = open(&hosts.b, Some(8)).expect("endpoint on port 8");
    let mb = hosts.b.mac;
    for tag in 0..10u8 {
        send(&mut b7, &ui_frame(mb, mb, 8, tag));
    }
    // To a port nobody holds: dropped and counted, nothing else.
    send(&mut b7, &ui_frame(mb, mb, 9, 50));
    // A TEST to our own MAC reaches the endpoint with the link role.
    send(&mut b8, &test_frame(mb, mb, 60));
    assert_eq!(drain(&mut b8), (0..10).collect::<Vec<u8>>());
    assert_eq!(drain(&mut b7), [60]);
    assert!(
        drain(&mut a).is_empty(),
        "same-host frames never reach the wire"
    );
    let (s7, s8) = (b7.local_stats(), b8.local_stats());
    assert_eq!((s7.tx_frames, s7.tx_dropped, s7.rx_frames), (10, 1, 1));
    assert_eq!((s8.tx_frames, s8.rx_frames), (1, 10));
}

#[test]
fn the_link_role_moves_on_when_its_holder_leaves() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let mut a = open(&hosts.a, None).expect("sender");
    let b7 = open(&hosts.b, Some(7)).expect("first endpoint");
    let mut b8 = open(&hosts.b, Some(8)).expect("second endpoint");
    assert!(b7.link_role() && !b8.link_role());
    drop(b7);
    let (ma, mb) = (hosts.a.mac, hosts.b.mac);
    // Within a few seconds the remaining endpoint answers TEST commands.
    let deadline = StdInstant::now() + TIMEOUT;
    let mut tag = 0u8;
    loop {
        send(&mut a, &test_frame(mb, ma, tag));
        if let Some(f) = recv_within(&mut b8, Duration::from_millis(200)) {
            assert_eq!(f[16], 0xF3, "a TEST command");
            break;
        }
        assert!(
            StdInstant::now() < deadline,
            "the link role was never taken over"
        );
        tag = tag.wrapping_add(1);
    }
    assert!(b8.link_role());
}
