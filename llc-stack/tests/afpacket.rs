//! The AF_PACKET device over a real veth pair between two network namespaces.
//!
//! Devices are opened inside their namespace (a socket belongs to the namespace
//! of the thread that created it) and then used from ordinary threads. Every
//! wait is bounded by a deadline; nothing synchronises by sleeping.
//! Needs root; prints SKIPPED otherwise.

use std::thread;
use std::time::{Duration, Instant as StdInstant};

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig, MIN_RX_RING_FRAMES};
use llc_stack::link::{Device, LinkError, RxToken, TxToken};
use llc_stack::Instant;
use testbed::{require_root, run_checked, Host, TwoHosts};

const SAP: u8 = 0x7C;
const TIMEOUT: Duration = Duration::from_secs(10);

fn open(host: &Host, config: AfPacketConfig) -> AfPacket {
    let name = host.ifname.clone();
    host.ns
        .run(move || AfPacket::open(&name, config))
        .unwrap_or_else(|e| panic!("opening {}: {e}", host.ifname))
}

/// An LLC frame (UI, DSAP = SSAP = `sap`) whose payload after the 3-byte LLC
/// header is `payload`: the 802.3 length form up to 1500 bytes after the
/// Ethernet header, the jumbo form (EtherType 0x8870) beyond.
fn llc_frame(dst: [u8; 6], src: [u8; 6], sap: u8, payload: &[u8]) -> Vec<u8> {
    let after_eth = 3 + payload.len();
    let length_type = if after_eth <= 1500 {
        after_eth as u16
    } else {
        0x8870
    };
    let mut f = Vec::with_capacity(14 + after_eth);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&length_type.to_be_bytes());
    f.extend_from_slice(&[sap, sap, 0x03]);
    f.extend_from_slice(payload);
    f
}

/// A recognisable payload: `seed` followed by a byte pattern.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed) as u8)
        .collect();
    let n = p.len().min(4);
    p[..n].copy_from_slice(&seed.to_be_bytes()[..n]);
    p
}

/// Queue `frame` (waiting for ring room until the deadline); no flush.
fn queue(dev: &mut AfPacket, frame: &[u8]) {
    let deadline = StdInstant::now() + TIMEOUT;
    loop {
        if let Some(token) = dev.transmit(Instant::now()) {
            let n = token.consume(|buf| {
                buf[..frame.len()].copy_from_slice(frame);
                frame.len()
            });
            assert_eq!(n, frame.len());
            return;
        }
        assert!(
            StdInstant::now() < deadline,
            "no TX room within the timeout"
        );
        dev.flush(Instant::now()).expect("flush");
    }
}

fn send(dev: &mut AfPacket, frame: &[u8]) {
    queue(dev, frame);
    dev.flush(Instant::now()).expect("flush");
}

/// The next received frame, or None once `timeout` has passed.
fn recv_within(dev: &mut AfPacket, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = StdInstant::now() + timeout;
    loop {
        if let Some(token) = dev.receive(Instant::now()) {
            return Some(token.consume(|f| f.to_vec()));
        }
        let left = deadline.checked_duration_since(StdInstant::now())?;
        dev.wait(Some(left)).expect("wait");
    }
}

fn recv(dev: &mut AfPacket) -> Vec<u8> {
    recv_within(dev, TIMEOUT).expect("no frame arrived within the timeout")
}

#[test]
fn frames_of_all_forms_arrive_byte_identical() {
    require_root!();
    let hosts = TwoHosts::new(9000).expect("test hosts");
    let mut a = open(&hosts.a, AfPacketConfig::default());
    let mut b = open(&hosts.b, AfPacketConfig::default());
    assert_eq!(a.mac(), hosts.a.mac);
    assert_eq!(b.mtu(), 9000);
    assert_eq!(b.capabilities().mtu, 9000);
    assert_eq!(b.capabilities().max_frame_len(), 9014);

    let frames = [
        // A 60-byte frame (minimum Ethernet size without FCS).
        llc_frame(b.mac(), a.mac(), SAP, &pattern(60 - 17, 1)),
        // 1500-byte payload: length field 1500, the largest length form.
        llc_frame(b.mac(), a.mac(), SAP, &pattern(1500 - 3, 2)),
        // Jumbo form, filling the MTU.
        llc_frame(b.mac(), a.mac(), SAP, &pattern(9000 - 3, 3)),
        // Jumbo form just above the length-form limit.
        llc_frame(b.mac(), a.mac(), SAP, &pattern(1501 - 3, 4)),
    ];
    assert_eq!(frames[0].len(), 60);
    assert_eq!(&frames[1][12..14], &1500u16.to_be_bytes());
    assert_eq!(&frames[2][12..14], &0x8870u16.to_be_bytes());
    for f in &frames {
        send(&mut a, f);
    }
    for f in &frames {
        assert_eq!(&recv(&mut b), f);
    }
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.tx_frames, frames.len() as u64);
    assert_eq!(sb.rx_frames, frames.len() as u64);
    assert_eq!(
        sb.rx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
    assert_eq!(
        (sb.rx_kernel_drops, sb.rx_truncated, sa.tx_errors),
        (0, 0, 0)
    );
    // Our own transmissions are not looped back to us.
    assert!(a.receive(Instant::now()).is_none());
}

#[test]
fn only_our_frames_are_delivered_and_ip_still_works() {
    require_root!();
    let hosts = TwoHosts::new(9000).expect("test hosts");
    let mut a = open(&hosts.a, AfPacketConfig::default());
    let mut b = open(&hosts.b, AfPacketConfig::default());

    // IP traffic (ARP and ICMP) between the hosts while both sockets are open.
    let mut ping = hosts.a.ns.command("ping");
    ping.args(["-c", "3", "-i", "0.2", "-W", "2"])
        .arg(hosts.b.ipv4.to_string());
    let out = run_checked(&mut ping, TIMEOUT).expect("ping between the hosts must work");
    assert!(out.contains("3 received"), "{out}");

    let (am, bm) = (a.mac(), b.mac());
    let mut junk = vec![
        // Another SAP, both forms.
        llc_frame(bm, am, 0x42, &pattern(40, 10)),
        llc_frame(bm, am, SAP + 1, &pattern(3000, 11)),
        // For another host on the segment (the interface is not promiscuous,
        // but the kernel still shows such frames to packet sockets).
        llc_frame([0x02, 9, 9, 9, 9, 9], am, SAP, &pattern(40, 12)),
    ];
    // Other EtherTypes whose first payload byte equals our SAP.
    for ethertype in [0x0800u16, 0x86DD, 0x0806, 0x8871] {
        let mut f = llc_frame(bm, am, SAP, &pattern(40, 13));
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        junk.push(f);
    }
    for f in &junk {
        queue(&mut a, f);
    }
    // Then two frames that are ours: a broadcast and a unicast marker. The
    // link keeps order, so they must be the first two frames b sees.
    let broadcast = llc_frame([0xff; 6], am, SAP, &pattern(40, 20));
    let marker = llc_frame(bm, am, SAP, &pattern(40, 21));
    queue(&mut a, &broadcast);
    queue(&mut a, &marker);
    a.flush(Instant::now()).expect("flush");

    assert_eq!(recv(&mut b), broadcast);
    assert_eq!(recv(&mut b), marker);
    assert!(b.receive(Instant::now()).is_none());
    assert_eq!(a.stats().tx_frames, junk.len() as u64 + 2);
    assert_eq!(b.stats().rx_frames, 2);
}

#[test]
fn burst_of_10000_with_credit_windows_has_no_drops() {
    require_root!();
    const FRAMES: u32 = 10_000;
    const WINDOW: u32 = 256;
    const LEN: usize = 1000;
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let config = AfPacketConfig {
        tx_batch: 32,
        ..AfPacketConfig::default()
    };
    // The receiver's ring must hold a whole window.
    assert!(config.rx_ring_frames >= WINDOW as usize);
    let mut a = open(&hosts.a, config.clone());
    let mut b = open(&hosts.b, config);
    let (am, bm) = (a.mac(), b.mac());

    thread::scope(|s| {
        let receiver = s.spawn(move || {
            let ack = |n: u32| llc_frame(am, bm, SAP, &n.to_be_bytes());
            for seq in 0..FRAMES {
                let f = recv(&mut b);
                let want = llc_frame(bm, am, SAP, &pattern(LEN, seq));
                assert!(f == want, "frame {seq} differs (len {})", f.len());
                if (seq + 1) % WINDOW == 0 || seq + 1 == FRAMES {
                    send(&mut b, &ack(seq + 1));
                }
            }
            b.stats()
        });
        let sender = s.spawn(move || {
            let mut acked = 0;
            let mut seq = 0;
            while seq < FRAMES {
                let end = (seq + WINDOW).min(FRAMES);
                while seq < end {
                    queue(&mut a, &llc_frame(bm, am, SAP, &pattern(LEN, seq)));
                    seq += 1;
                }
                a.flush(Instant::now()).expect("flush");
                while acked < end {
                    let f = recv(&mut a);
                    acked = u32::from_be_bytes(f[17..21].try_into().unwrap());
                }
            }
            a.stats()
        });
        let sa = sender.join().expect("sender");
        let sb = receiver.join().expect("receiver");
        println!("sender {sa:?}\nreceiver {sb:?}");
        assert_eq!(sa.tx_frames, FRAMES as u64);
        assert_eq!(sa.tx_errors, 0);
        assert!(sa.tx_kicks < FRAMES as u64 / 8, "{} kicks", sa.tx_kicks);
        assert_eq!(sb.rx_frames, FRAMES as u64);
        assert_eq!(sb.rx_kernel_drops, 0);
        assert_eq!(sb.rx_truncated, 0);
    });
}

#[test]
fn missing_interface_is_reported_plainly() {
    // Needs no privileges: the name is looked up before any socket is made.
    match AfPacket::open("llc-no-such0", AfPacketConfig::default()) {
        Err(LinkError::NoSuchInterface(name)) => assert_eq!(name, "llc-no-such0"),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a missing interface"),
    }
    match AfPacket::open("a-name-longer-than-ifnamsiz", AfPacketConfig::default()) {
        Err(LinkError::NoSuchInterface(_)) => {}
        other => panic!("wrong result: {:?}", other.err()),
    }
}

#[test]
fn down_interface_is_reported_plainly() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    hosts
        .a
        .ns
        .ip(&["link", "set", "dev", &hosts.a.ifname, "down"])
        .expect("ip link set down");
    let name = hosts.a.ifname.clone();
    match hosts
        .a
        .ns
        .run(move || AfPacket::open(&name, AfPacketConfig::default()))
    {
        Err(LinkError::InterfaceDown(name)) => assert_eq!(name, hosts.a.ifname),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a down interface"),
    }
}

#[test]
fn flush_reports_an_interface_taken_down_and_recovers() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let mut a = open(&hosts.a, AfPacketConfig::default());
    let mut b = open(&hosts.b, AfPacketConfig::default());
    let frame = llc_frame(b.mac(), a.mac(), SAP, &pattern(100, 1));
    let link = |state: &str| {
        hosts
            .a
            .ns
            .ip(&["link", "set", "dev", &hosts.a.ifname, state])
            .expect("ip link set")
    };

    link("down");
    queue(&mut a, &frame);
    let err = a.flush(Instant::now()).expect_err("sending on a down link");
    assert_eq!(err.raw_os_error(), Some(libc::ENETDOWN), "{err}");
    assert_eq!(a.stats().tx_errors, 1);

    // The frame stayed queued and goes out once the link is back.
    link("up");
    a.flush(Instant::now()).expect("flush after link up");
    assert_eq!(recv(&mut b), frame);

    // A flap while nobody sends leaves a socket error behind: wait() reports
    // it once and then blocks again instead of returning at once forever.
    link("down");
    link("up");
    let err = a.wait(Some(TIMEOUT)).expect_err("the flap is reported");
    assert_eq!(err.raw_os_error(), Some(libc::ENETDOWN), "{err}");
    let begin = StdInstant::now();
    a.wait(Some(Duration::from_millis(100))).expect("wait");
    assert!(
        begin.elapsed() >= Duration::from_millis(90),
        "wait did not block"
    );
    send(&mut a, &frame);
    assert_eq!(recv(&mut b), frame);
}

#[test]
fn mtu_65000_carries_a_65000_byte_payload() {
    require_root!();
    let hosts = TwoHosts::new(65000).expect("test hosts");
    let config = AfPacketConfig {
        rx_ring_frames: 64,
        tx_batch: 8,
        ..AfPacketConfig::default()
    };
    let mut a = open(&hosts.a, config.clone());
    let mut b = open(&hosts.b, config);
    assert_eq!(b.capabilities().max_frame_len(), 65014);
    // 65000 bytes after the Ethernet header: LLC header plus 64997 of data.
    let big = llc_frame(b.mac(), a.mac(), SAP, &pattern(65000 - 3, 7));
    assert_eq!(big.len(), 65014);
    // More frames than the RX ring holds, to go round it.
    for i in 0..80u32 {
        let mut f = big.clone();
        f[17..21].copy_from_slice(&i.to_be_bytes());
        send(&mut a, &f);
        assert!(recv(&mut b) == f, "frame {i} differs");
    }
    let sb = b.stats();
    assert_eq!(
        (sb.rx_frames, sb.rx_kernel_drops, sb.rx_truncated),
        (80, 0, 0)
    );
}

/// Frames that arrive while the RX ring is full are the kernel's drops:
/// counted by `stats()` and by `Device::kernel_drops`, and every frame sent
/// is either read or counted.
#[test]
fn a_full_rx_ring_counts_the_kernels_drops() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let config = AfPacketConfig {
        rx_ring_frames: MIN_RX_RING_FRAMES,
        ..AfPacketConfig::default()
    };
    let mut a = open(&hosts.a, AfPacketConfig::default());
    let mut b = open(&hosts.b, config);
    const SENT: usize = 16 * MIN_RX_RING_FRAMES;
    for i in 0..SENT as u32 {
        let mut f = llc_frame(b.mac(), a.mac(), SAP, &pattern(100, 9));
        f[17..21].copy_from_slice(&i.to_be_bytes());
        send(&mut a, &f);
    }
    // veth delivers in the sender's system call: all of them are in b's
    // ring or dropped now. Read what the ring kept.
    let mut read = 0;
    while recv_within(&mut b, Duration::from_millis(100)).is_some() {
        read += 1;
    }
    let drops = b.kernel_drops();
    assert!(read >= MIN_RX_RING_FRAMES, "read {read}");
    assert!(drops > 0, "no drop counted with {read} of {SENT} read");
    assert_eq!(
        read as u64 + drops,
        SENT as u64,
        "read {read}, dropped {drops}"
    );
    assert_eq!(b.stats().rx_kernel_drops, drops);
}

/// Environment variable that arms [`permission_probe`].
const PROBE_ENV: &str = "LLC_AFPACKET_PERMISSION_PROBE";

#[test]
fn permission_denied_without_cap_net_raw() {
    require_root!();
    if !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("SKIPPED permission_denied_without_cap_net_raw: /usr/bin/setpriv (util-linux) not found");
        return;
    }
    // Run `permission_probe` in a child that is root but has CAP_NET_RAW
    // removed from its bounding set (so from its effective set too), in a
    // network namespace of its own where no endpoint service (llcd) runs.
    let ns = testbed::Netns::new("perm").expect("namespace");
    ns.ip(&["link", "set", "lo", "up"]).expect("lo up");
    let exe = std::env::current_exe().expect("test binary path");
    let mut child = ns.command("/usr/bin/setpriv");
    child
        .args(["--bounding-set", "-net_raw", "--inh-caps", "-net_raw"])
        .arg(exe)
        .args(["--ignored", "--exact", "permission_probe", "--nocapture"])
        .env(PROBE_ENV, "1");
    let out = run_checked(&mut child, TIMEOUT).expect("probe child");
    assert!(out.contains("probe: NoService"), "{out}");
}

/// Run only by `permission_denied_without_cap_net_raw`, in a child without
/// CAP_NET_RAW and without an endpoint service: opening a real interface
/// must say what is missing and what to do, in one line.
#[test]
#[ignore = "run by permission_denied_without_cap_net_raw"]
fn permission_probe() {
    if std::env::var_os(PROBE_ENV).is_none() {
        return;
    }
    match AfPacket::open("lo", AfPacketConfig::default()) {
        Err(e @ LinkError::NoService { .. }) => {
            let text = e.to_string();
            for says in [
                "not permitted to open a raw packet socket on lo (needs CAP_NET_RAW)",
                "no llcd service runs in this network namespace",
                "scripts/install.sh",
                "or run as root",
            ] {
                assert!(text.contains(says), "{says:?} missing in: {text}");
            }
            assert!(!text.contains('\n'), "one line: {text}");
            println!("probe: NoService: {e}");
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("opened a packet socket without CAP_NET_RAW"),
    }
}
