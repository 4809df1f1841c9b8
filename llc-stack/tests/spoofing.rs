//! Spoofing and replay from a third host on the same L2 segment.
//!
//! Three namespaces on a Linux bridge whose ports do not learn addresses, so
//! it floods every frame to every port like a hub (or a mirror port): rank 0
//! (A) sends messages to rank 1 (B) over AF_PACKET; rank 2, the attacker,
//! reads all their frames with its own AF_PACKET socket, then injects, with
//! A's source MAC: frames with guessed ports, guessed and brute-forced
//! cookies, the sniffed cookies with sequence numbers far outside the window
//! and, last, replays of every frame it captured. Then A sends more.
//!
//! Checked: B delivers exactly the messages A sent, each once and in order
//! (contents compared); the connection survives and keeps transferring; and
//! every injected frame shows up in B's counters under its reason. With a
//! shared authentication key the same attack runs and every forged frame is
//! refused for its missing or wrong tag, including in-window frames with the
//! right cookies, which without a key an on-path attacker could get accepted
//! (docs/SECURITY.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::proto::{Config, ConnStats, EndpointStats, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, AuthKey, FrameType, MacAddr, Trailer, TransportHeader};
use llc_stack::{Instant, Stack};
use testbed::Bridged;

const PORT: u16 = 9;
const PHASE1: u64 = 150;
const PHASE2: u64 = 150;
const LIMIT: Duration = Duration::from_secs(60);

/// Message `i`: its index, then seeded bytes; 2000 to 4000 bytes, so most
/// take 2 or 3 frames at MTU 1500.
fn message(i: u64) -> Vec<u8> {
    let len = 2000 + (i as usize % 3) * 1000;
    let mut r = Rng::new(i + 1000);
    let mut v: Vec<u8> = (0..len).map(|_| r.next_u32() as u8).collect();
    v[..8].copy_from_slice(&i.to_be_bytes());
    v
}

/// The latest counters of one end, published by its thread on every pass.
#[derive(Default, Clone, Debug)]
struct Snapshot {
    ep: EndpointStats,
    conn: ConnStats,
}

type Shared = Arc<Mutex<Snapshot>>;

fn publish(
    to: &Shared,
    ep: &llc_stack::proto::Endpoint,
    conn: Option<llc_stack::proto::ConnHandle>,
) {
    let mut s = to.lock().unwrap();
    s.ep = ep.stats().clone();
    if let Some(c) = conn.and_then(|c| ep.connection_stats(c)) {
        s.conn = c.clone();
    }
}

fn read(s: &Shared) -> Snapshot {
    s.lock().unwrap().clone()
}

/// Wait, bounded, until `cond` holds for the published counters.
fn await_counts(what: &str, s: &Shared, cond: impl Fn(&Snapshot) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snap = read(s);
        if cond(&snap) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: counters never got there: {snap:#?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A bare AF_PACKET socket that sees every frame on the attacker's port
/// (also those for other hosts, which the stack's own device filters out)
/// and sends frames exactly as given.
mod raw {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    pub struct RawSocket {
        fd: OwnedFd,
    }

    fn check(r: libc::c_int) -> io::Result<libc::c_int> {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }

    impl RawSocket {
        pub fn open(ifname: &str) -> io::Result<RawSocket> {
            let name = std::ffi::CString::new(ifname).expect("no NUL in an interface name");
            // SAFETY: `name` is a valid NUL-terminated string for the call's duration.
            let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
            if ifindex == 0 {
                return Err(io::Error::last_os_error());
            }
            let proto = (libc::ETH_P_ALL as u16).to_be();
            // SAFETY: socket(2) with constant arguments; the result is checked.
            let fd = check(unsafe {
                libc::socket(
                    libc::AF_PACKET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    proto as libc::c_int,
                )
            })?;
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: sockaddr_ll is plain data for which all-zero is valid.
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            sll.sll_family = libc::AF_PACKET as u16;
            sll.sll_protocol = proto;
            sll.sll_ifindex = ifindex as i32;
            // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
            check(unsafe {
                libc::bind(
                    fd.as_raw_fd(),
                    &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
                )
            })?;
            let one: libc::c_int = 1;
            // SAFETY: the option value is a c_int of the size passed.
            check(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    libc::PACKET_IGNORE_OUTGOING,
                    &one as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            })?;
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 20_000,
            };
            // SAFETY: the option value is a timeval of the size passed.
            check(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    &tv as *const libc::timeval as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            })?;
            Ok(RawSocket { fd })
        }

        /// One frame, or `None` after the 20 ms receive timeout.
        pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
                _ => Err(e),
            }
        }

        pub fn send(&self, frame: &[u8]) -> io::Result<()> {
            // SAFETY: `frame` is readable for its whole length.
            let n = unsafe {
                libc::send(
                    self.fd.as_raw_fd(),
                    frame.as_ptr() as *const libc::c_void,
                    frame.len(),
                    0,
                )
            };
            check(n as libc::c_int).map(drop)
        }
    }
}

/// What the attacker did, per kind of frame.
#[derive(Debug, Default)]
struct Attack {
    random_ports: u64,
    guessed_cookies: u64,
    brute_forced_cookies: u64,
    far_sequence: u64,
    forged_in_window: u64,
    replayed_to_b: u64,
    replayed_data_to_b: u64,
    replayed_to_a: u64,
}

fn header_of(frame: &[u8]) -> Option<TransportHeader> {
    match wire::parse(frame, Some(wire::llc::DEFAULT_SAP)).ok()?.body {
        wire::Body::Transport(t) => Some(*t.header),
        _ => None,
    }
}

/// The attacker: capture until phase 1 is over, then inject, batch by batch,
/// each batch waiting (bounded) until B has counted it.
fn attack(
    ifname: &str,
    a: MacAddr,
    b: MacAddr,
    keyed: bool,
    ready: &AtomicBool,
    phase1_done: &AtomicBool,
    b_stats: &Shared,
) -> Attack {
    let sock = raw::RawSocket::open(ifname).expect("attacker's raw socket");
    ready.store(true, Ordering::SeqCst);
    let mut buf = vec![0u8; 2048];
    let (mut to_b, mut to_a) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + LIMIT;
    // Capture the whole of phase 1, then whatever is still in the socket.
    loop {
        let done = phase1_done.load(Ordering::SeqCst);
        match sock.recv(&mut buf).expect("capture") {
            Some(n) => {
                let f = buf[..n].to_vec();
                if header_of(&f).is_none() {
                    continue;
                }
                match (&f[6..12], &f[0..6]) {
                    (s, d) if s == a.0 && d == b.0 => to_b.push(f),
                    (s, d) if s == b.0 && d == a.0 => to_a.push(f),
                    _ => {}
                }
            }
            None if done => break,
            None => assert!(Instant::now() < deadline, "phase 1 never ended"),
        }
    }
    let data: Vec<&Vec<u8>> = to_b
        .iter()
        .filter(|f| header_of(f).is_some_and(|h| h.frame_type() == FrameType::Data))
        .collect();
    // Each message takes 2 or 3 frames; the capture socket misses part of a
    // burst on a loaded machine (its buffer overflows while the attacker
    // thread waits for a core). The replays need a fair sample, not all:
    // the counts checked later are those of the frames actually captured.
    assert!(
        data.len() as u64 >= PHASE1 / 5,
        "the attacker saw only {} DATA frames of A ({} frames A to B, {} B to A)",
        data.len(),
        to_b.len(),
        to_a.len()
    );
    // What an on-path observer learns from one frame: ports and both cookies.
    let sniffed = header_of(data.last().unwrap()).unwrap();
    let addr = Addresses {
        dst: b,
        src: a,
        dsap: wire::llc::DEFAULT_SAP,
        ssap: wire::llc::DEFAULT_SAP,
    };
    let mut rng = Rng::new(0x5eed);
    let mut out = Attack::default();
    let mut frame = vec![0u8; 2048];
    let mut forge = |h: &TransportHeader, trailer: Trailer<'_>| -> Vec<u8> {
        let n = wire::emit_transport_with(&mut frame, &addr, h, &[], b"FORGED PAYLOAD", trailer)
            .unwrap();
        frame[..n].to_vec()
    };
    // Send a batch, then wait until B counted it as `dropped` says.
    let send_batch = |frames: Vec<Vec<u8>>, what: &str, counted: &dyn Fn(&Snapshot) -> u64| {
        for chunk in frames.chunks(64) {
            let before = counted(&read(b_stats));
            for f in chunk {
                sock.send(f).expect("inject");
            }
            let n = chunk.len() as u64;
            await_counts(what, b_stats, |s| counted(s) >= before + n);
        }
    };
    let auth_or = |f: fn(&Snapshot) -> u64| -> Box<dyn Fn(&Snapshot) -> u64> {
        if keyed {
            Box::new(|s: &Snapshot| s.ep.dropped.auth_missing)
        } else {
            Box::new(f)
        }
    };
    let data_header = |rng: &mut Rng| TransportHeader {
        kind: FrameType::Data.into(),
        flags: wire::transport::flags::LAST_FRAGMENT,
        msg_id: rng.next_u32().into(),
        msg_len: 14.into(),
        seq: rng.next_u32().into(),
        ack: rng.next_u32().into(),
        window_end: rng.next_u32().into(),
        ..Default::default()
    };

    // 1. Blind: guessed ports and cookies.
    let frames: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            let mut h = data_header(&mut rng);
            h.src_port = (1 + rng.below(40_000) as u16).into();
            h.dst_port = (10 + rng.below(40_000) as u16).into();
            h.src_cookie = rng.nonzero_u32().into();
            h.dst_cookie = rng.nonzero_u32().into();
            forge(&h, Trailer::None)
        })
        .collect();
    out.random_ports = frames.len() as u64;
    send_batch(
        frames,
        "random ports",
        &*auth_or(|s| s.ep.dropped.no_connection),
    );

    // 2. The right ports (they are no secret), guessed cookies.
    let frames: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            let mut h = data_header(&mut rng);
            (h.src_port, h.dst_port) = (sniffed.src_port, sniffed.dst_port);
            h.src_cookie = rng.nonzero_u32().into();
            h.dst_cookie = rng.nonzero_u32().into();
            forge(&h, Trailer::None)
        })
        .collect();
    out.guessed_cookies = frames.len() as u64;
    send_batch(
        frames,
        "guessed cookies",
        &*auth_or(|s| s.ep.dropped.stale_cookie),
    );

    // 3. Brute force of B's cookie: 1000 consecutive values (the true one
    //    skipped: a blind attacker hits it with probability 2^-32 per try).
    let frames: Vec<Vec<u8>> = (1..=1001u32)
        .filter(|&c| c != sniffed.dst_cookie.get())
        .take(1000)
        .map(|c| {
            let mut h = data_header(&mut rng);
            (h.src_port, h.dst_port) = (sniffed.src_port, sniffed.dst_port);
            h.src_cookie = sniffed.src_cookie;
            h.dst_cookie = c.into();
            forge(&h, Trailer::None)
        })
        .collect();
    out.brute_forced_cookies = frames.len() as u64;
    send_batch(
        frames,
        "brute-forced cookies",
        &*auth_or(|s| s.ep.dropped.stale_cookie),
    );

    // 4. On-path: the sniffed cookies, sequence numbers far outside the window.
    let frames: Vec<Vec<u8>> = (0..200u32)
        .map(|i| {
            let mut h = sniffed;
            let off = (1u32 << 20) + rng.below(1 << 30) as u32;
            h.seq = if i % 2 == 0 {
                h.seq.get().wrapping_add(off)
            } else {
                h.seq.get().wrapping_sub(off)
            }
            .into();
            h.msg_id = rng.next_u32().into();
            h.msg_len = 14.into();
            h.frag_off = 0.into();
            forge(&h, Trailer::None)
        })
        .collect();
    out.far_sequence = frames.len() as u64;
    send_batch(
        frames,
        "far sequence numbers",
        &*auth_or(|s| s.ep.dropped.beyond_window + s.ep.dropped.out_of_window),
    );

    // 5. With a key only: in-window frames with the sniffed cookies, with a
    //    random tag or a tag under another key. (Without a key such frames
    //    are accepted: that is the on-path attack only the key stops.)
    if keyed {
        let other = AuthKey::derive(b"not the job's key");
        let frames: Vec<Vec<u8>> = (0..200u32)
            .map(|i| {
                let mut h = sniffed;
                h.seq = h.seq.get().wrapping_add(1 + i % 16).into();
                h.msg_id = h.msg_id.get().wrapping_add(1).into();
                h.msg_len = 14.into();
                h.frag_off = 0.into();
                let mut tag = [0u8; wire::auth::TAG_LEN];
                tag.iter_mut().for_each(|b| *b = rng.next_u32() as u8);
                if i % 2 == 0 {
                    forge(&h, Trailer::Raw(&tag))
                } else {
                    forge(&h, Trailer::Key(&other))
                }
            })
            .collect();
        out.forged_in_window = frames.len() as u64;
        send_batch(frames, "forged tags", &|s: &Snapshot| {
            s.ep.dropped.auth_failed
        });
    }

    // 6. Replays of everything captured: A's frames to B, B's frames to A.
    out.replayed_data_to_b = data.len() as u64;
    out.replayed_to_b = to_b.len() as u64;
    out.replayed_to_a = to_a.len() as u64;
    let data_frames: Vec<Vec<u8>> = data.into_iter().cloned().collect();
    send_batch(data_frames, "replayed DATA", &|s: &Snapshot| {
        s.conn.duplicates
    });
    for f in to_b.iter().chain(&to_a) {
        let h = header_of(f).unwrap();
        if h.frame_type() != FrameType::Data {
            sock.send(f).expect("replay");
        }
    }
    out
}

fn spoof(key: Option<&[u8]>) {
    let net = Bridged::new(3, 1500).unwrap();
    // The attacker's port is a mirror (SPAN) port: it gets a copy of every
    // frame A and B send. A's and B's addresses are pinned to their ports
    // (static, sticky), so spoofed source MACs cannot redirect traffic: that
    // would be a denial of service, which nothing here prevents.
    for i in 0..2 {
        net.pin_mac(i).unwrap_or_else(|e| panic!("{e}"));
        net.mirror(i, 2).unwrap_or_else(|e| panic!("{e}"));
    }
    let cfg = Config {
        auth_key: key.map(AuthKey::derive),
        ..Config::default()
    };
    let (a_mac, b_mac) = (MacAddr(net.hosts[0].mac), MacAddr(net.hosts[1].mac));
    let a_stats: Shared = Arc::default();
    let b_stats: Shared = Arc::default();
    let ready = Arc::new(AtomicBool::new(false));
    let phase1_done = Arc::new(AtomicBool::new(false));
    let attack_done = Arc::new(AtomicBool::new(false));
    let sender_done = Arc::new(AtomicBool::new(false));

    let attacker = {
        let (ifname, b_stats) = (net.hosts[2].ifname.clone(), b_stats.clone());
        let (ready, phase1_done, attack_done) =
            (ready.clone(), phase1_done.clone(), attack_done.clone());
        let keyed = key.is_some();
        net.hosts[2].ns.spawn(move || {
            // Let A go on (and the test end) even when the attacker fails.
            struct Done(Arc<AtomicBool>);
            impl Drop for Done {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let _done = Done(attack_done);
            attack(&ifname, a_mac, b_mac, keyed, &ready, &phase1_done, &b_stats)
        })
    };
    let deadline = Instant::now() + LIMIT;
    while !ready.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "attacker never got ready");
        assert!(!attacker.is_finished(), "attacker failed to start");
        std::thread::yield_now();
    }

    let receiver = {
        let (ifname, cfg, stats, sender_done) = (
            net.hosts[1].ifname.clone(),
            cfg.clone(),
            b_stats.clone(),
            sender_done.clone(),
        );
        net.hosts[1].ns.spawn(move || {
            let dev = AfPacket::open(&ifname, AfPacketConfig::default()).unwrap();
            let mut stack = Stack::new(dev, cfg, b_mac, Rng::from_entropy());
            stack.endpoint_mut().listen(PORT);
            let mut next = 0u64;
            let mut conn = None;
            let done = stack
                .run_until(Instant::now() + LIMIT, |ep| {
                    while let Some((h, ev)) = ep.poll_event() {
                        match ev {
                            Event::Connected => {
                                assert!(conn.is_none(), "a second connection was accepted");
                                conn = Some(h);
                            }
                            Event::Message { data, .. } => {
                                assert_eq!(Some(h), conn);
                                assert!(next < PHASE1 + PHASE2, "more messages than A sent");
                                assert!(
                                    data == message(next),
                                    "message {next}: not what A sent ({} bytes, starts {:02x?})",
                                    data.len(),
                                    &data[..data.len().min(16)]
                                );
                                next += 1;
                            }
                            Event::Closed(e) => panic!("B's connection ended: {e:?}"),
                            Event::Acked { .. } => {}
                        }
                    }
                    publish(&stats, ep, conn);
                    (next == PHASE1 + PHASE2 && sender_done.load(Ordering::SeqCst)).then_some(())
                })
                .unwrap();
            assert!(done.is_some(), "B got {next} messages in time");
            next
        })
    };

    let sender = {
        let (ifname, cfg, stats) = (net.hosts[0].ifname.clone(), cfg.clone(), a_stats.clone());
        let (phase1_done, attack_done) = (phase1_done.clone(), attack_done.clone());
        net.hosts[0].ns.spawn(move || {
            let dev = AfPacket::open(&ifname, AfPacketConfig::default()).unwrap();
            let mut stack = Stack::new(dev, cfg, a_mac, Rng::from_entropy());
            let c = stack
                .endpoint_mut()
                .connect(Instant::now(), b_mac, PORT, None)
                .unwrap();
            let mut acked = 0u64;
            let mut run = |stack: &mut Stack<AfPacket>, until: &dyn Fn(u64) -> bool| {
                let r = stack
                    .run_until(Instant::now() + LIMIT, |ep| {
                        while let Some((h, ev)) = ep.poll_event() {
                            match ev {
                                Event::Acked { .. } => acked += 1,
                                Event::Closed(e) if h == c => panic!("A's connection ended: {e:?}"),
                                _ => {}
                            }
                        }
                        publish(&stats, ep, Some(c));
                        until(acked).then_some(())
                    })
                    .unwrap();
                assert!(r.is_some(), "A: {acked} messages acknowledged in time");
            };
            for i in 0..PHASE1 {
                stack.endpoint_mut().send(c, message(i)).unwrap();
            }
            run(&mut stack, &|acked| acked == PHASE1);
            phase1_done.store(true, Ordering::SeqCst);
            run(&mut stack, &|_| attack_done.load(Ordering::SeqCst));
            for i in PHASE1..PHASE1 + PHASE2 {
                stack.endpoint_mut().send(c, message(i)).unwrap();
            }
            run(&mut stack, &|acked| acked == PHASE1 + PHASE2);
        })
    };

    let sent = sender.join();
    sender_done.store(true, Ordering::SeqCst);
    let got = receiver.join();
    let report = attacker.join().expect("attacker");
    sent.expect("sender");
    assert_eq!(got.expect("receiver"), PHASE1 + PHASE2);

    let (a, b) = (read(&a_stats), read(&b_stats));
    eprintln!(
        "attack: {report:?}\nB endpoint: {:?}\nB connection: {:?}\nA endpoint: {:?}",
        b.ep, b.conn, a.ep
    );
    let d = &b.ep.dropped;
    let forged = report.random_ports
        + report.guessed_cookies
        + report.brute_forced_cookies
        + report.far_sequence;
    if key.is_some() {
        assert_eq!(d.auth_missing, forged, "{d:?}");
        assert_eq!(d.auth_failed, report.forged_in_window, "{d:?}");
        assert_eq!(
            (
                d.no_connection,
                d.stale_cookie,
                d.beyond_window,
                d.out_of_window
            ),
            (0, 0, 0, 0),
            "no forged frame got past authentication: {d:?}"
        );
        assert_eq!(
            b.ep.resets_sent, 0,
            "unauthenticated frames are never answered"
        );
    } else {
        assert_eq!(d.no_connection, report.random_ports, "{d:?}");
        assert_eq!(
            d.stale_cookie,
            report.guessed_cookies + report.brute_forced_cookies,
            "{d:?}"
        );
        assert_eq!(
            d.beyond_window + d.out_of_window,
            report.far_sequence,
            "{d:?}"
        );
        assert!(d.beyond_window > 0 && d.out_of_window > 0, "{d:?}");
        assert_eq!(
            b.conn.beyond_window + b.conn.out_of_window,
            report.far_sequence
        );
        // Each frame with unknown ports got a RESET (or hit the queue bound),
        // which A, knowing no such connection, drops without answering.
        assert_eq!(b.ep.resets_sent + d.control_queue_full, report.random_ports);
        assert_eq!(a.ep.dropped.no_connection, b.ep.resets_sent, "{:?}", a.ep);
    }
    // Replayed DATA frames were all duplicates, and nothing else was dropped.
    assert!(
        b.conn.duplicates >= report.replayed_data_to_b,
        "{:?}",
        b.conn
    );
    assert_eq!(
        d.total(),
        forged + report.forged_in_window + d.control_queue_full
    );
    assert_eq!(b.conn.messages_received, PHASE1 + PHASE2);
    assert!(report.replayed_to_a > 0 && report.replayed_to_b > report.replayed_data_to_b);
}

#[test]
fn forged_and_replayed_frames_are_dropped_and_counted() {
    testbed::require_root!();
    spoof(None);
}

#[test]
fn with_a_key_forged_frames_fail_authentication() {
    testbed::require_root!();
    spoof(Some(b"spoofing test job key"));
}
