//! Resource bounds under a flood, over real veth links (three hosts on a
//! bridge, AF_PACKET): a victim endpoint serves an established client while a
//! third host floods it from a raw socket with SYNs from random source MACs
//! and ports, and with DATA frames for connections and ports that do not
//! exist. Asserted: the victim's memory stays under the configured caps (its
//! connection count never exceeds the half-open limit plus the client; the
//! process's resident memory grows by less than `RSS_CAP_KIB`), the counters
//! show the flood was refused (`syn_limit`, `no_connection`, RESETs sent or
//! `control_queue_full`), and the established connection keeps working, every
//! echo intact. Its round-trip time and streaming rate before and during the
//! flood are printed, not asserted (docs/BENCHMARKS.md records a run):
//! `cargo test -p llc-stack --test flood -- --nocapture`.
//!
//! This file holds one test, so that the process's RSS is the victim's alone
//! (cargo runs test binaries one after the other).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::TxToken;
use llc_stack::proto::{Config, EndpointStats, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, FrameType, MacAddr, TransportHeader};
use llc_stack::{Device, Instant, Stack};
use testbed::Bridged;

const PORT: u16 = 9;
const LIMIT: Duration = Duration::from_secs(60);
/// Resident memory the victim process may gain during the flood.
const RSS_CAP_KIB: u64 = 32 << 10;
const ECHO_LEN: usize = 1024;
const ROUND_TRIPS: usize = 2000;
const STREAM: usize = 8 << 20;
const STREAM_MSG: usize = 256 << 10;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .expect("VmRSS in /proc/self/status")
}

fn open(ifname: &str) -> (AfPacket, MacAddr) {
    let dev = AfPacket::open(ifname, AfPacketConfig::default()).expect("open AF_PACKET");
    let mac = MacAddr(dev.mac());
    (dev, mac)
}

/// What the client measured in one phase.
#[derive(Debug, Clone, Copy)]
struct Measure {
    rtt_median: Duration,
    rtt_p99: Duration,
    stream_gbps: f64,
}

/// Echo round trips of `ECHO_LEN` bytes, then `STREAM` bytes acknowledged.
fn measure(stack: &mut Stack<AfPacket>, conn: llc_stack::proto::ConnHandle) -> Measure {
    let mut rtts = Vec::with_capacity(ROUND_TRIPS);
    let deadline = Instant::now() + LIMIT;
    for i in 0..ROUND_TRIPS {
        let payload: Vec<u8> = (0..ECHO_LEN).map(|k| (k ^ i) as u8).collect();
        let start = Instant::now();
        stack
            .endpoint_mut()
            .send(conn, payload.clone())
            .expect("send");
        let reply = stack
            .run_until(deadline, |ep| {
                while let Some((_, ev)) = ep.poll_event() {
                    match ev {
                        Event::Message { data, .. } => return Some(data),
                        Event::Closed(e) => panic!("client connection ended: {e:?}"),
                        _ => {}
                    }
                }
                None
            })
            .expect("link")
            .expect("echo within the limit");
        assert_eq!(reply, payload, "echo {i} intact");
        rtts.push(Instant::now().saturating_duration_since(start));
    }
    rtts.sort();
    let start = Instant::now();
    let n = STREAM / STREAM_MSG;
    let mut sent = 0;
    let done = stack
        .run_until(deadline, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                if let Event::Closed(e) = ev {
                    panic!("client connection ended: {e:?}");
                }
            }
            while sent < n && ep.connection(conn).map_or(0, |c| c.send_buffered()) < 4 << 20 {
                ep.send(conn, vec![sent as u8; STREAM_MSG]).expect("send");
                sent += 1;
            }
            // Done when every message was acknowledged.
            (sent == n && ep.connection(conn).is_some_and(|c| c.is_send_idle())).then_some(())
        })
        .expect("link");
    assert!(done.is_some(), "stream within the limit");
    let secs = Instant::now()
        .saturating_duration_since(start)
        .as_secs_f64();
    Measure {
        rtt_median: rtts[rtts.len() / 2],
        rtt_p99: rtts[rtts.len() * 99 / 100],
        stream_gbps: STREAM as f64 * 8.0 / secs / 1e9,
    }
}

/// One flood frame: a SYN from a random MAC and port, or a DATA frame for a
/// connection that does not exist (random ports and cookies).
fn flood_frame(r: &mut Rng, victim: MacAddr, buf: &mut [u8]) -> usize {
    let mut src = [0u8; 6];
    src.copy_from_slice(&r.next_u64().to_le_bytes()[..6]);
    src[0] = (src[0] & 0xfc) | 0x02; // locally administered unicast
    let syn = r.chance(0.5);
    let header = TransportHeader {
        kind: if syn { FrameType::Syn } else { FrameType::Data }.into(),
        flags: wire::transport::flags::LAST_FRAGMENT,
        src_port: (r.next_u32() as u16).into(),
        dst_port: if syn { PORT } else { r.next_u32() as u16 }.into(),
        src_cookie: r.nonzero_u32().into(),
        dst_cookie: if syn { 0 } else { r.nonzero_u32() }.into(),
        seq: r.next_u32().into(),
        msg_len: if syn { 1500 } else { 64 }.into(),
        ts_val: 1.into(),
        ..Default::default()
    };
    let addr = Addresses {
        dst: victim,
        src: MacAddr(src),
        dsap: wire::llc::DEFAULT_SAP,
        ssap: wire::llc::DEFAULT_SAP,
    };
    let payload = [0u8; 64];
    let body: &[u8] = if syn { &[] } else { &payload };
    wire::emit_transport(buf, &addr, &header, &[], body).expect("fits")
}

#[test]
fn flood_of_syns_and_unknown_connections_is_bounded() {
    testbed::require_root!();
    let net = Bridged::new(3, 1500).expect("three hosts on a bridge");
    let (victim, client, attacker) = (&net.hosts[0], &net.hosts[1], &net.hosts[2]);
    let cfg = Config::default();
    let stop = Arc::new(AtomicBool::new(false));
    let max_conns = Arc::new(AtomicU64::new(0));
    let victim_stats = Arc::new(Mutex::new(EndpointStats::default()));

    let victim_thread = {
        let (ifname, cfg) = (victim.ifname.clone(), cfg.clone());
        let (stop, max_conns, victim_stats) =
            (stop.clone(), max_conns.clone(), victim_stats.clone());
        victim.ns.spawn(move || {
            let (dev, mac) = open(&ifname);
            let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
            stack.endpoint_mut().listen(PORT);
            let deadline = Instant::now() + LIMIT * 3;
            let r = stack.run_until(deadline, |ep| {
                while let Some((h, ev)) = ep.poll_event() {
                    if let Event::Message { data, .. } = ev {
                        if data.len() <= ECHO_LEN {
                            ep.send(h, data).expect("echo");
                        }
                    }
                }
                max_conns.fetch_max(ep.connection_count() as u64, Ordering::Relaxed);
                stop.load(Ordering::Relaxed).then_some(())
            });
            *victim_stats.lock().unwrap() = stack.endpoint().stats().clone();
            assert!(
                r.expect("victim link").is_some(),
                "victim was never stopped"
            );
        })
    };

    let victim_mac = MacAddr(victim.mac);
    let (measured, phases) = mpsc::channel::<Measure>();
    let flood_on = Arc::new(AtomicBool::new(false));
    let (cif, fl) = (client.ifname.clone(), flood_on.clone());
    let client_thread = client.ns.spawn(move || {
        let (dev, mac) = open(&cif);
        let mut stack = Stack::new(dev, Config::default(), mac, Rng::from_entropy());
        let now = Instant::now();
        let conn = stack
            .endpoint_mut()
            .connect(now, victim_mac, PORT, None)
            .unwrap();
        let up = stack
            .run_until(now + LIMIT, |ep| {
                while let Some((_, ev)) = ep.poll_event() {
                    if ev == Event::Connected {
                        return Some(());
                    }
                }
                None
            })
            .expect("link");
        assert!(up.is_some(), "client connected");
        let before = measure(&mut stack, conn);
        measured.send(before).expect("main thread waits");
        // Wait for the flood, while keeping the connection serviced.
        let flooding = stack
            .run_until(Instant::now() + LIMIT, |_| {
                fl.load(Ordering::Relaxed).then_some(())
            })
            .expect("link");
        assert!(flooding.is_some(), "the flood never started");
        let during = measure(&mut stack, conn);
        measured.send(during).expect("main thread waits");
    });

    let before = phases.recv_timeout(LIMIT).expect("baseline measured");
    let rss_before = rss_kib();
    let sent = Arc::new(AtomicU64::new(0));
    let attacker_thread = {
        let (ifname, stop, sent, fl) = (
            attacker.ifname.clone(),
            stop.clone(),
            sent.clone(),
            flood_on.clone(),
        );
        attacker.ns.spawn(move || {
            let (mut dev, _) = open(&ifname);
            let mut r = Rng::new(99);
            fl.store(true, Ordering::Relaxed);
            let deadline = Instant::now() + LIMIT;
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let now = Instant::now();
                for _ in 0..64 {
                    let Some(tok) = dev.transmit(now) else { break };
                    tok.consume(|buf| flood_frame(&mut r, victim_mac, buf));
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                let _ = dev.flush(now);
            }
        })
    };
    let during = phases.recv_timeout(LIMIT * 2);
    let rss_during = rss_kib();
    stop.store(true, Ordering::Relaxed);
    client_thread.join().expect("client thread");
    let during = during.expect("measured during the flood");
    stop.store(true, Ordering::Relaxed);
    attacker_thread.join().expect("attacker thread");
    victim_thread.join().expect("victim thread");
    let stats = victim_stats.lock().unwrap().clone();
    let d = &stats.dropped;
    println!(
        "flood: {} frames sent; victim rx {} frames, syn_limit {}, no_connection {}, resets sent {}, \
         control_queue_full {}, accepted {}, max connections {}; RSS {} -> {} KiB",
        sent.load(Ordering::Relaxed),
        stats.rx_frames,
        d.syn_limit,
        d.no_connection,
        stats.resets_sent,
        d.control_queue_full,
        stats.accepted,
        max_conns.load(Ordering::Relaxed),
        rss_before,
        rss_during
    );
    println!(
        "established connection before flood: RTT median {:?} p99 {:?}, stream {:.2} Gbit/s",
        before.rtt_median, before.rtt_p99, before.stream_gbps
    );
    println!(
        "established connection during flood: RTT median {:?} p99 {:?}, stream {:.2} Gbit/s",
        during.rtt_median, during.rtt_p99, during.stream_gbps
    );
    assert!(d.syn_limit > 0, "SYNs beyond the half-open limit refused");
    assert!(
        d.no_connection > 0,
        "frames for unknown connections counted"
    );
    assert!(stats.resets_sent + d.control_queue_full >= d.no_connection);
    assert!(
        max_conns.load(Ordering::Relaxed) <= cfg.max_half_open as u64 + 1,
        "connections held: half-open limit plus the client"
    );
    assert!(
        rss_during.saturating_sub(rss_before) < RSS_CAP_KIB,
        "victim RSS grew from {rss_before} to {rss_during} KiB"
    );
}
