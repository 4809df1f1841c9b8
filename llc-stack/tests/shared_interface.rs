//! Several endpoints on one interface (AF_PACKET, and AF_XDP sharing one RX
//! queue's buffer pool): each claims a port, the kernel hands each only its
//! own frames, exactly one answers link-level commands, and frames to our
//! own MAC take the same-host path. A member killed with SIGKILL costs the
//! others nothing, and the pool stays joinable after its creator died.
//!
//! Host A sends hand-made frames over a real veth pair to host B, where the
//! endpoints share `llc0`. Every wait is bounded; the checks that something
//! did NOT arrive wait a short fixed time, which can only make them pass
//! wrongly if the kernel took longer than that to deliver a frame that
//! should not have been delivered at all. Needs root; prints SKIPPED
//! otherwise.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant};

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::afxdp::{AfXdp, AfXdpConfig};
use llc_stack::link::any::{self, Backend};
use llc_stack::link::{Device, LinkError, RxToken, TxToken};
use llc_stack::proto::{Config, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::{Instant, Stack};
use testbed::{require_root, Background, Host, TwoHosts};

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
                // Host A takes bursts of 300 jumbo frames with no flow
                // control: 1024 slots at any MTU, not the default 2 MiB.
                rx_ring_bytes: 1024 * (64 << 10),
                ..AfPacketConfig::default()
            },
        )
    })
}

fn open_xdp(host: &Host, port: u16) -> Result<AfXdp, LinkError> {
    let name = host.ifname.clone();
    host.ns.run(move || {
        AfXdp::open(
            &name,
            AfXdpConfig {
                sap: SAP,
                port: Some(port),
                ..AfXdpConfig::default()
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

fn send<D: Device>(dev: &mut D, frame: &[u8]) {
    let deadline = StdInstant::now() + TIMEOUT;
    loop {
        let sent = match dev.transmit(Instant::now()) {
            Some(token) => {
                token.consume(|buf| {
                    buf[..frame.len()].copy_from_slice(frame);
                    frame.len()
                });
                true
            }
            None => false,
        };
        if sent {
            dev.flush(Instant::now()).expect("flush");
            return;
        }
        assert!(StdInstant::now() < deadline, "no TX room");
        dev.flush(Instant::now()).expect("flush");
    }
}

fn recv_within<D: Device>(dev: &mut D, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = StdInstant::now() + timeout;
    loop {
        if let Some(f) = dev
            .receive(Instant::now())
            .map(|t| t.consume(|f| f.to_vec()))
        {
            return Some(f);
        }
        let left = deadline.checked_duration_since(StdInstant::now())?;
        dev.wait(Some(left.min(Duration::from_millis(20))))
            .expect("wait");
    }
}

/// Every frame that arrives within `QUIET`, by its last byte (the tag).
fn drain<D: Device>(dev: &mut D) -> Vec<u8> {
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

/// A UI frame to `port` carrying sequence number `seq` (bytes 49..51 of the
/// fake transport header) and tag 0xAA.
fn seq_frame(dst: [u8; 6], src: [u8; 6], port: u16, seq: u16) -> Vec<u8> {
    let mut f = ui_frame(dst, src, port, 0xAA);
    let at = 14 + 3 + 49;
    f[at..at + 2].copy_from_slice(&seq.to_be_bytes());
    f
}

fn seq_of(f: &[u8]) -> u16 {
    let at = 14 + 3 + 49;
    u16::from_be_bytes([f[at], f[at + 1]])
}

/// Every frame arriving at `dev` within `QUIET` of the last, counted.
fn count_arrivals<D: Device>(dev: &mut D) -> usize {
    let mut n = 0;
    while recv_within(dev, QUIET).is_some() {
        n += 1;
    }
    n
}

/// `ui_frame`, made `len` bytes long (the jumbo form, EtherType 0x8870,
/// above 1514) with the tag still last.
fn sized(mut f: Vec<u8>, len: usize) -> Vec<u8> {
    let tag = f.pop().expect("a frame");
    f.resize(len - 1, 0x5A);
    f.push(tag);
    if len > 1514 {
        f[12..14].copy_from_slice(&0x8870u16.to_be_bytes());
    } else {
        let llc_len = (len - 14) as u16;
        f[12..14].copy_from_slice(&llc_len.to_be_bytes());
    }
    f
}

#[test]
fn af_xdp_endpoints_share_one_rx_queue() {
    share_one_rx_queue(1500, 100);
}

/// Frames of 8000 bytes: two RX buffers each (reassembled), three TX
/// descriptors per slot, each completion counted per descriptor.
#[test]
fn af_xdp_endpoints_share_one_rx_queue_with_jumbo_frames() {
    share_one_rx_queue(9000, 8000);
}

fn share_one_rx_queue(mtu: u32, len: usize) {
    require_root!();
    let hosts = TwoHosts::new(mtu).expect("test hosts");
    let mut a = open(&hosts.a, None).expect("sender");
    let mut eps: Vec<AfXdp> = [7, 8, 9]
        .iter()
        .map(|&p| open_xdp(&hosts.b, p).unwrap_or_else(|e| panic!("endpoint on port {p}: {e}")))
        .collect();
    for e in &eps {
        let caps = e.capabilities();
        assert!(caps.backend.starts_with("af_xdp"), "{}", caps.backend);
        assert_eq!(e.queues(), [0], "the veth has one RX queue");
        let pools = e.shared_pools();
        assert_eq!(pools.len(), 1, "{pools:?}");
        // 4096 chunks / 16 members, less a refill batch.
        assert_eq!(pools[0].share_chunks, 4096 / 16 - 32);
        let chunks_per_frame = (mtu as usize + 14).div_ceil(4096);
        assert_eq!(
            caps.rx_queue_frames,
            Some((4096 / 16 - 32) / chunks_per_frame)
        );
    }
    let created: Vec<bool> = eps.iter().map(|e| e.shared_pools()[0].created).collect();
    assert_eq!(
        created,
        [true, false, false],
        "the first creates the pool, the others join"
    );
    let mut members: Vec<u32> = eps.iter().map(|e| e.shared_pools()[0].member).collect();
    members.sort_unstable();
    members.dedup();
    assert_eq!(members.len(), 3, "each has its own TX region");
    assert!(eps[0].link_role() && !eps[1].link_role() && !eps[2].link_role());

    let (ma, mb) = (hosts.a.mac, hosts.b.mac);
    for tag in 0..30u8 {
        send(
            &mut a,
            &sized(ui_frame(mb, ma, 7 + u16::from(tag % 3), tag), len),
        );
    }
    send(&mut a, &ui_frame(mb, ma, 10, 100));
    send(&mut a, &test_frame(mb, ma, 101));
    for (i, e) in eps.iter_mut().enumerate() {
        let mut want: Vec<u8> = (0..30).filter(|t| usize::from(t % 3) == i).collect();
        if i == 0 {
            want.push(101);
        }
        assert_eq!(drain(e), want, "endpoint {i} sees only its frames");
        let s = e.stats();
        if len + 256 > 4096 {
            assert_eq!(s.rx_multi_buffer, 10, "reassembled from several buffers");
        }
    }

    // Each transmits more frames than it has TX slots (256), so its slots
    // come back only through completions that any member may have drained.
    const EACH: usize = 600;
    for round in 0..EACH / 100 {
        for (i, e) in eps.iter_mut().enumerate() {
            for k in 0..100 {
                let tag = (round * 100 + k) as u8;
                send(e, &sized(ui_frame(ma, mb, 30 + i as u16, tag), len));
            }
        }
        let got = count_arrivals(&mut a);
        assert_eq!(got, 300, "round {round}: every frame reached host A");
    }
    for e in &eps {
        let s = e.stats();
        assert_eq!(s.tx_frames, EACH as u64);
        assert_eq!((s.rx_kernel_drops, s.tx_errors), (0, 0), "{s:?}");
    }
}

const HELPER_PORT: &str = "LLC_SHARED_HELPER_PORT";

/// Not a test: an endpoint process the kill test starts in host B. Opens
/// AF_XDP on `LLC_SHARED_HELPER_IFACE` for port `LLC_SHARED_HELPER_PORT`,
/// prints `READY`, then echoes every frame it receives back to its sender
/// until it is killed (at most two minutes).
#[test]
#[ignore = "a helper process that the kill test starts"]
fn helper_endpoint() {
    let Ok(port) = std::env::var(HELPER_PORT) else {
        return;
    };
    let iface = std::env::var("LLC_SHARED_HELPER_IFACE").expect("interface");
    let mut dev = AfXdp::open(
        &iface,
        AfXdpConfig {
            sap: SAP,
            port: Some(port.parse().expect("port")),
            ..AfXdpConfig::default()
        },
    )
    .expect("helper endpoint");
    let pool = dev.shared_pools()[0];
    println!(
        "READY backend={} created={} member={}",
        dev.capabilities().backend,
        pool.created,
        pool.member
    );
    let until = StdInstant::now() + Duration::from_secs(120);
    while StdInstant::now() < until {
        let Some(mut f) = recv_within(&mut dev, Duration::from_millis(100)) else {
            continue;
        };
        let (dst, src) = (f[6..12].to_vec(), f[0..6].to_vec());
        f[0..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        send(&mut dev, &f);
    }
}

/// Start a helper endpoint process for `port` in `host` and wait until it
/// has opened its device.
fn start_helper(host: &Host, port: u16) -> Background {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = host.ns.command(exe);
    cmd.args([
        "--exact",
        "helper_endpoint",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(HELPER_PORT, port.to_string())
    .env("LLC_SHARED_HELPER_IFACE", &host.ifname);
    Background::spawn(&mut cmd, "READY", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("helper endpoint: {e}"))
}

/// The creator of the pool is a separate process, busy receiving and
/// echoing, and is killed with SIGKILL in the middle of a numbered stream to
/// another member: that member receives every frame, in order, and keeps
/// transmitting; then a new member joins the pool (from the survivor: the
/// creator is gone) and works too.
#[test]
fn a_killed_member_costs_the_others_nothing_and_the_pool_stays_joinable() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let helper = start_helper(&hosts.b, 20);
    assert!(
        helper.output().contains("created=true") && helper.output().contains("af_xdp"),
        "{}",
        helper.output()
    );
    let mut a = open(&hosts.a, None).expect("sender");
    let mut survivor = open_xdp(&hosts.b, 21).expect("survivor");
    assert!(
        !survivor.shared_pools()[0].created,
        "joined the helper's pool"
    );
    let (ma, mb) = (hosts.a.mac, hosts.b.mac);

    const FRAMES: u16 = 3000;
    const KILL_AT: u16 = 1200;
    let mut helper = Some(helper);
    let mut echoes = 0usize;
    for seq in 0..FRAMES {
        if seq == KILL_AT {
            let h = helper.take().expect("helper");
            assert!(h.output().contains("READY"));
            // Drop kills with SIGKILL and reaps.
            drop(h);
        }
        // Keep the helper busy with the pool (RX refills, TX, completions).
        send(&mut a, &seq_frame(mb, ma, 20, seq));
        send(&mut a, &seq_frame(mb, ma, 21, seq));
        let f = recv_within(&mut survivor, TIMEOUT)
            .unwrap_or_else(|| panic!("frame {seq} never reached the survivor"));
        assert_eq!(seq_of(&f), seq, "frames arrive in order, none lost");
        if seq % 10 == 0 {
            send(&mut survivor, &seq_frame(ma, mb, 40, seq));
        }
        while let Some(token) = a.receive(Instant::now()) {
            token.consume(|_| ());
            echoes += 1;
        }
    }
    assert!(echoes > 0, "the helper echoed frames before it was killed");
    let s = survivor.stats();
    assert_eq!(s.rx_frames, u64::from(FRAMES));
    assert_eq!(s.tx_frames, u64::from(FRAMES / 10));
    assert_eq!((s.rx_kernel_drops, s.tx_errors), (0, 0), "{s:?}");

    // The creator is gone; the pool is joinable from the survivor.
    let mut late = open_xdp(&hosts.b, 22).expect("a member joining after the creator died");
    assert!(late.capabilities().backend.starts_with("af_xdp"));
    assert!(!late.shared_pools()[0].created);
    for seq in 0..100 {
        send(&mut a, &seq_frame(mb, ma, 22, seq));
        let f = recv_within(&mut late, TIMEOUT).expect("frame to the late member");
        assert_eq!(seq_of(&f), seq);
        send(&mut late, &seq_frame(ma, mb, 41, seq));
        send(&mut survivor, &seq_frame(ma, mb, 42, seq));
    }
    let mut from_late = 0;
    while let Some(f) = recv_within(&mut a, QUIET) {
        if u16::from_be_bytes([f[14 + 3 + 6], f[14 + 3 + 7]]) == 41 {
            from_late += 1;
        }
    }
    assert_eq!(from_late, 100, "the late member transmits");
}

/// The reliable transport into a member of a shared pool while the other
/// members are killed with SIGKILL: first the pool's creator, then a member
/// that joined later. Both are busy (each echoes a stream of frames host A
/// sprays at it). The transfer completes intact, and the survivor's queue
/// never lacked a buffer (no fill-ring-empty drops).
#[test]
fn a_reliable_transfer_survives_members_killed_around_it() {
    require_root!();
    const TOTAL: usize = 32 << 20;
    const MSG: usize = 1 << 20;
    const PORT: u16 = 21;
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let first = start_helper(&hosts.b, 20);
    assert!(
        first.output().contains("created=true"),
        "{}",
        first.output()
    );

    // Host A: one thread sprays frames at the helpers' port, one sends.
    let stop = Arc::new(AtomicBool::new(false));
    let (ma, mb) = (hosts.a.mac, hosts.b.mac);
    let spray = {
        let stop = stop.clone();
        let ifname = hosts.a.ifname.clone();
        hosts.a.ns.spawn(move || {
            let mut dev = AfPacket::open(&ifname, AfPacketConfig::default()).expect("sprayer");
            let mut seq = 0u16;
            while !stop.load(Ordering::Relaxed) {
                send(&mut dev, &seq_frame(mb, ma, 20, seq));
                seq = seq.wrapping_add(1);
                // About 20k frames a second; echoes are dropped unread.
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    };
    let sender = {
        let ifname = hosts.a.ifname.clone();
        hosts.a.ns.spawn(move || {
            let dev = AfPacket::open(&ifname, AfPacketConfig::default()).expect("sender");
            let mut stack = Stack::new(dev, Config::default(), MacAddr(ma), Rng::new(1));
            let now = Instant::now();
            let conn = stack
                .endpoint_mut()
                .connect(now, MacAddr(mb), PORT, None)
                .expect("connect");
            let (mut next, mut acked) = (0usize, 0usize);
            let n = TOTAL / MSG;
            let done = stack
                .run_until(now + Duration::from_secs(120), |ep| {
                    while let Some((_, ev)) = ep.poll_event() {
                        match ev {
                            Event::Acked { .. } => acked += 1,
                            Event::Closed(Some(e)) => panic!("sender connection failed: {e}"),
                            _ => {}
                        }
                    }
                    while next < n && ep.connection(conn).map_or(0, |c| c.send_buffered()) < 4 * MSG
                    {
                        ep.send(conn, vec![next as u8; MSG]).expect("send");
                        next += 1;
                    }
                    (acked == n).then_some(())
                })
                .expect("sender");
            assert!(
                done.is_some(),
                "sender timed out: {acked} of {n} acknowledged"
            );
        })
    };

    let b = &hosts.b;
    let dev = open_xdp(&hosts.b, PORT).expect("receiving member");
    assert!(!dev.shared_pools()[0].created);
    let mut stack = Stack::new(dev, Config::default(), MacAddr(mb), Rng::new(2));
    stack.endpoint_mut().listen(PORT);
    let mut helpers = vec![first];
    let mut kills = 0;
    let (mut got, mut bad) = (0usize, 0usize);
    let done = stack
        .run_until(Instant::now() + Duration::from_secs(120), |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                match ev {
                    Event::Message { data, .. } => {
                        let want = (got / MSG) as u8;
                        bad += usize::from(data.len() != MSG || data.iter().any(|&x| x != want));
                        got += data.len();
                    }
                    Event::Closed(Some(e)) => panic!("receiver connection failed: {e}"),
                    _ => {}
                }
            }
            // Kill the creator at a third, a later member at two thirds.
            if kills < 2 && got >= (kills + 1) * TOTAL / 3 {
                drop(helpers.pop());
                kills += 1;
                if kills == 1 {
                    let h = start_helper(b, 20);
                    assert!(h.output().contains("created=false"), "{}", h.output());
                    helpers.push(h);
                }
            }
            (got >= TOTAL).then_some(())
        })
        .expect("receiver");
    stop.store(true, Ordering::Relaxed);
    assert!(
        done.is_some(),
        "receiver timed out with {got} of {TOTAL} bytes"
    );
    let _ = stack.run_until(Instant::now() + Duration::from_millis(300), |_| None::<()>);
    sender.join().expect("sender thread");
    spray.join().expect("sprayer thread");
    assert_eq!((got, bad, kills), (TOTAL, 0, 2));
    let s = stack.device().stats();
    let pool = stack.device().shared_pools()[0];
    eprintln!("survivor: {s:?}; pool: {pool:?}");
    assert_eq!(s.rx_fill_ring_empty, 0, "{s:?}");
    assert_eq!(pool.lock_timeouts, 0, "{pool:?}");
}

/// A pool made for two members refuses a third as busy, and `auto` opens
/// that endpoint on AF_PACKET, which still gets its frames (the shared
/// program passes frames of ports without a socket to the kernel).
#[test]
fn a_full_pool_is_busy_and_auto_falls_back_to_af_packet() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let config = |port: u16| AfXdpConfig {
        sap: SAP,
        port: Some(port),
        pool_members: 2,
        ..AfXdpConfig::default()
    };
    let ifname = hosts.b.ifname.clone();
    let (_b7, _b8, third, mut auto) = hosts.b.ns.run(move || {
        let b7 = AfXdp::open(&ifname, config(7)).expect("first member");
        let b8 = AfXdp::open(&ifname, config(8)).expect("second member");
        let third = AfXdp::open(&ifname, config(9)).map(drop);
        let packet = AfPacketConfig {
            sap: SAP,
            port: Some(10),
            ..AfPacketConfig::default()
        };
        let auto = any::open(&ifname, Backend::Auto, packet, config(10)).expect("auto");
        (b7, b8, third, auto)
    });
    match third {
        Err(e @ LinkError::Busy { .. }) => {
            assert!(e.to_string().contains("all 2 members"), "{e}")
        }
        other => panic!("a third member of a two-member pool must be busy: {other:?}"),
    }
    let (link, notes) = &mut auto;
    assert!(
        link.capabilities().backend.starts_with("af_packet"),
        "{} {notes:?}",
        link.capabilities().backend
    );
    let mut a = open(&hosts.a, None).expect("sender");
    send(&mut a, &ui_frame(hosts.b.mac, hosts.a.mac, 10, 1));
    assert_eq!(drain(link), [1]);
}

/// Four endpoint processes starting at the same moment (at MTU 9000, where
/// a pool pins 64 MiB): one creates the queue's pool, the three others wait
/// for its offer and join; all are on AF_XDP, each with its own TX region.
#[test]
fn simultaneous_starts_create_one_pool() {
    require_root!();
    let hosts = TwoHosts::new(9000).expect("test hosts");
    let helpers: Vec<Background> = std::thread::scope(|s| {
        let started: Vec<_> = (0..4)
            .map(|i| {
                let b = &hosts.b;
                s.spawn(move || start_helper(b, 20 + i))
            })
            .collect();
        started
            .into_iter()
            .map(|t| t.join().expect("starter"))
            .collect()
    });
    let outputs: Vec<String> = helpers.iter().map(Background::output).collect();
    let created = outputs
        .iter()
        .filter(|o| o.contains("created=true"))
        .count();
    assert_eq!(created, 1, "{outputs:#?}");
    assert!(
        outputs.iter().all(|o| o.contains("backend=af_xdp")),
        "{outputs:#?}"
    );
    let mut members: Vec<&str> = outputs
        .iter()
        .filter_map(|o| o.split("member=").nth(1)?.split_whitespace().next())
        .collect();
    members.sort_unstable();
    members.dedup();
    assert_eq!(members.len(), 4, "{outputs:#?}");
}
