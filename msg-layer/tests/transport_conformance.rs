//! The `Transport` contract, checked for every implementation over a real veth
//! pair between two network namespaces: LLC over AF_PACKET and over AF_XDP,
//! TCP over io_uring and over sockets with epoll.
//!
//! Each transport gets the same tests (a module per transport):
//! - `messages_mtu1500` / `messages_mtu9000`: connect and accept; sizes 0, 1,
//!   odd sizes around 1500 and 9000, 1 MiB (and 64 MiB at MTU 9000) arrive
//!   whole, in order and intact in both directions at once, with `head ++ body`
//!   split anywhere;
//! - `many_small_sends`: 10,000 back-to-back small sends;
//! - `back_pressure`: with a 1 MiB send cap and an idle peer, `send` returns
//!   `WouldBlock` (and keeps doing so), then everything arrives once the peer
//!   runs;
//! - `peer_dropped`: dropping one end gives `Closed` at the other within a
//!   bounded time, after which `send` returns `SendError::Closed`;
//! - `connect_to_nobody`: a connect to an address where nobody listens ends in
//!   `Closed(_, Some(_))` within a bounded time;
//! - `driven_from_exiting_threads`: a transport driven for a while by threads
//!   that then exit (io_uring cancels a thread's operations when it exits)
//!   keeps working on another thread;
//! - `prepare_wait_wakes`: an end sleeping in `poll(2)` on what `prepare_wait`
//!   returned wakes when a message arrives.
//!
//! They need root (namespaces, raw sockets) and print SKIPPED otherwise.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{connected_pair, drive_alone, make_in, pattern, poll_fds, Maker, Msg, Pair};
use llc_stack::link::any::AnyLink;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::transport::spec::Backend;
use msg_layer::transport::tcp::{TcpConfig, TcpSocketTransport, TcpUringTransport};
use msg_layer::transport::{SendError, Transport, TransportEvent};
use testbed::{require_root, Host};

/// Settings that differ per test.
#[derive(Clone, Copy, Default)]
struct Knobs {
    /// Send buffer cap (default: the transport's).
    send_buffer: Option<usize>,
}

fn llc_config(k: Knobs) -> LlcConfig {
    let mut c = LlcConfig {
        // A dropped peer is noticed within about a second...
        idle_timeout: Duration::from_secs(1),
        keepalive_interval: Duration::from_millis(200),
        // ...and an unanswered connect fails after a few quick SYNs.
        max_syn_retries: 3,
        ..LlcConfig::default()
    };
    if let Some(b) = k.send_buffer {
        c.send_buffer_bytes = b;
    }
    c
}

fn tcp_config(k: Knobs) -> TcpConfig {
    let mut c = TcpConfig {
        connect_timeout: Duration::from_secs(5),
        ..TcpConfig::default()
    };
    if let Some(b) = k.send_buffer {
        c.send_buffer_bytes = b;
    }
    c
}

fn llc_packet(k: Knobs) -> impl Maker<LlcTransport<AnyLink>> {
    move |h: &Host| LlcTransport::open(&h.ifname, Backend::Packet, 7, llc_config(k))
}

fn llc_xdp(k: Knobs) -> impl Maker<LlcTransport<AnyLink>> {
    move |h: &Host| LlcTransport::open(&h.ifname, Backend::Xdp, 7, llc_config(k))
}

fn tcp_bind_addr(h: &Host) -> SocketAddr {
    SocketAddr::new(h.ipv4.into(), 0)
}

fn tcp_uring(k: Knobs) -> impl Maker<TcpUringTransport> {
    move |h: &Host| TcpUringTransport::bind(tcp_bind_addr(h), tcp_config(k))
}

fn tcp_socket(k: Knobs) -> impl Maker<TcpSocketTransport> {
    move |h: &Host| TcpSocketTransport::bind(tcp_bind_addr(h), tcp_config(k))
}

/// The tests, once per transport.
macro_rules! conformance {
    ($maker:ident) => {
        mod $maker {
            use super::*;

            #[test]
            fn messages_mtu1500() {
                require_root!();
                messages(1500, super::$maker(Knobs::default()));
            }

            #[test]
            fn messages_mtu9000() {
                require_root!();
                messages(9000, super::$maker(Knobs::default()));
            }

            #[test]
            fn many_small_sends() {
                require_root!();
                super::many_small_sends(super::$maker(Knobs::default()));
            }

            #[test]
            fn back_pressure() {
                require_root!();
                super::back_pressure(super::$maker(Knobs {
                    send_buffer: Some(1 << 20),
                }));
            }

            #[test]
            fn peer_dropped() {
                require_root!();
                super::peer_dropped(super::$maker(Knobs::default()));
            }

            #[test]
            fn connect_to_nobody() {
                require_root!();
                super::connect_to_nobody(super::$maker(Knobs::default()));
            }

            #[test]
            fn driven_from_exiting_threads() {
                require_root!();
                super::driven_from_exiting_threads(super::$maker(Knobs::default()));
            }

            #[test]
            fn prepare_wait_wakes() {
                require_root!();
                super::prepare_wait_wakes(super::$maker(Knobs::default()));
            }
        }
    };
}

conformance!(llc_packet);
conformance!(llc_xdp);
conformance!(tcp_uring);
conformance!(tcp_socket);

// ---------------------------------------------------------------- properties

/// Sizes around the interesting boundaries for `mtu`.
fn sizes(mtu: usize, huge: bool) -> Vec<usize> {
    let mut v = vec![
        0, 1, 2, 3, 7, 255, 256, 257, 1399, 1441, 1499, 1500, 1501, 2999, 3001,
    ];
    v.extend([mtu - 59, mtu - 58, mtu - 1, mtu, mtu + 1, 2 * mtu + 1]);
    v.extend([
        8191,
        8999,
        9000,
        9001,
        65_535,
        65_537,
        1 << 20,
        (1 << 20) + 3,
    ]);
    if huge {
        v.push(64 << 20);
    }
    v
}

fn messages<T: Transport>(mtu: u32, mk: impl Maker<T>) {
    let huge = mtu >= 9000;
    let mut p = connected_pair(mtu, mk);
    let list = |seed: u64| -> Vec<Msg> {
        let mut out = Vec::new();
        for (i, &n) in sizes(mtu as usize, huge).iter().enumerate() {
            let data = pattern(seed + i as u64, n);
            // Heads of 0, 1, a few bytes, half, all but one, all.
            let split = match i % 6 {
                0 => 0,
                1 => 1.min(n),
                2 => 13.min(n),
                3 => n / 2,
                4 => n.saturating_sub(1),
                _ => n,
            };
            out.push(Msg::new(data, split.min(4096.max(n / 2))));
        }
        // One message split at every interesting point.
        let data = pattern(seed + 1000, 3001);
        for split in [0, 1, 2, 3, 4, 5, 8, 1000, 1499, 1500, 1501, 3000, 3001] {
            out.push(Msg::new(data.clone(), split));
        }
        out
    };
    let (ab, ba) = (list(1), list(1 << 32));
    let t0 = Instant::now();
    p.exchange(&ab, &ba, Duration::from_secs(40));
    eprintln!(
        "{}: MTU {mtu}: {} messages each way in {:?} ({} missed wake-ups)",
        p.a.name(),
        ab.len(),
        t0.elapsed(),
        p.missed_wakeups
    );
}

fn many_small_sends<T: Transport>(mk: impl Maker<T>) {
    let mut p = connected_pair(1500, mk);
    let msgs: Vec<Msg> = (0..10_000u64)
        .map(|i| {
            let n = 8 + (i % 57) as usize;
            Msg::new(pattern(i, n), (i % 9) as usize)
        })
        .collect();
    let t0 = Instant::now();
    p.exchange(&msgs, &[], Duration::from_secs(30));
    eprintln!(
        "{}: 10,000 small messages in {:?} ({} missed wake-ups)",
        p.a.name(),
        t0.elapsed(),
        p.missed_wakeups
    );
}

fn back_pressure<T: Transport>(mk: impl Maker<T>) {
    let mut p = connected_pair(1500, mk);
    let chunk = 64 << 10;
    let cap_total = 256usize << 20;
    let mut sent: Vec<Msg> = Vec::new();
    let next = |i: usize| Msg::new(pattern(7_000 + i as u64, chunk), 100);
    // B does not run: A must hit WouldBlock with a bounded amount accepted.
    let (a, a_conn) = (&mut p.a, p.a_conn);
    let mut pending = Some(next(0));
    drive_alone(
        a,
        &mut p.inbox_a,
        Duration::from_secs(10),
        "WouldBlock",
        |t, _| {
            let m = pending.take().expect("a message to send");
            match t.send(a_conn, &m.data[..m.split], m.data.slice(m.split..)) {
                Ok(()) => {
                    sent.push(m);
                    assert!(
                        sent.len() * chunk <= cap_total,
                        "{} accepted {} MiB with the peer idle and a 1 MiB cap",
                        t.name(),
                        (sent.len() * chunk) >> 20
                    );
                    pending = Some(next(sent.len()));
                    None
                }
                Err(SendError::WouldBlock) => {
                    pending = Some(m);
                    Some(())
                }
                Err(e) => panic!("send: {e}"),
            }
        },
    );
    let accepted_at_block = sent.len();
    // Still blocked after A ran alone for a while: the cap holds.
    let t0 = Instant::now();
    let m = pending.take().expect("the refused message");
    let mut later = 0;
    let blocked = drive_alone(
        &mut p.a,
        &mut p.inbox_a,
        Duration::from_secs(5),
        "the idle period",
        |t, _| {
            if t0.elapsed() < Duration::from_millis(200) {
                return None;
            }
            // A few more may fit as the kernel drains into its buffers, but
            // the cap keeps refusing.
            loop {
                match t.send(a_conn, &m.data[..m.split], m.data.slice(m.split..)) {
                    Ok(()) => {
                        later += 1;
                        assert!(later < 64, "the cap no longer holds with the peer idle");
                    }
                    Err(SendError::WouldBlock) => return Some(true),
                    Err(e) => panic!("send: {e}"),
                }
                sent.push(m.clone());
            }
        },
    );
    assert!(blocked);
    eprintln!(
        "{}: WouldBlock after {} messages of {} KiB with the peer idle",
        p.a.name(),
        accepted_at_block,
        chunk >> 10
    );
    // Everything accepted arrives once B runs, and A can send again.
    let expect = sent.clone();
    let mut want = expect.iter();
    let mut got = 0;
    p.until(Duration::from_secs(20), "the queued messages at B", |p| {
        while let Some(ev) = p.inbox_b.pop_front() {
            match ev {
                TransportEvent::Message(_, data) => {
                    let m = want.next().expect("no more messages than were sent");
                    assert!(data == m.data[..], "message {got} differs");
                    got += 1;
                }
                other => panic!("B: unexpected {other:?}"),
            }
        }
        (got == expect.len()).then_some(())
    });
    p.exchange(
        &[Msg::new(Bytes::from_static(b"after"), 2)],
        &[],
        Duration::from_secs(5),
    );
}

fn peer_dropped<T: Transport>(mk: impl Maker<T>) {
    let mut p = connected_pair(1500, mk);
    p.exchange(
        &[Msg::new(pattern(1, 100), 10)],
        &[Msg::new(pattern(2, 100), 10)],
        Duration::from_secs(5),
    );
    let Pair {
        mut a,
        b,
        a_conn,
        mut inbox_a,
        hosts,
        ..
    } = p;
    drop(b);
    let t0 = Instant::now();
    let reason = drive_alone(
        &mut a,
        &mut inbox_a,
        Duration::from_secs(10),
        "Closed at A",
        |_, inbox| {
            if let Some(ev) = inbox.pop_front() {
                match ev {
                    TransportEvent::Closed(c, reason) if c == a_conn => return Some(reason),
                    other => panic!("A: unexpected {other:?}"),
                }
            }
            None
        },
    );
    eprintln!(
        "{}: dropped peer noticed after {:?}: {reason:?}",
        a.name(),
        t0.elapsed()
    );
    assert_eq!(
        a.send(a_conn, b"x", Bytes::new()),
        Err(SendError::Closed),
        "send after Closed"
    );
    drop(a);
    drop(hosts);
}

fn connect_to_nobody<T: Transport>(mk: impl Maker<T>) {
    let hosts = testbed::TwoHosts::new(1500).expect("testbed");
    let mut a = make_in(&hosts.a, &mk);
    // An endpoint that existed and is gone: nobody listens at its address.
    let gone = make_in(&hosts.b, &mk).local_addr();
    let conn = common::connect_in(&hosts.a, &mut a, &gone);
    let mut inbox = std::collections::VecDeque::new();
    let t0 = Instant::now();
    let reason = drive_alone(
        &mut a,
        &mut inbox,
        Duration::from_secs(10),
        "Closed",
        |_, inbox| {
            if let Some(ev) = inbox.pop_front() {
                match ev {
                    TransportEvent::Closed(c, reason) if c == conn => return Some(reason),
                    other => panic!("unexpected {other:?}"),
                }
            }
            None
        },
    );
    let reason = reason.expect("a failed connect carries a reason");
    eprintln!(
        "{}: connect to {gone} failed after {:?}: {reason}",
        a.name(),
        t0.elapsed()
    );
    assert_eq!(a.send(conn, b"x", Bytes::new()), Err(SendError::Closed));
}

fn prepare_wait_wakes<T: Transport>(mk: impl Maker<T>) {
    let mut p = connected_pair(1500, mk);
    p.exchange(
        &[Msg::new(pattern(1, 10), 0)],
        &[Msg::new(pattern(2, 10), 0)],
        Duration::from_secs(5),
    );
    p.settle();
    let (b, b_conn) = (&mut p.b, p.b_conn);
    let (a, a_conn, inbox) = (&mut p.a, p.a_conn, &mut p.inbox_a);
    let delay = Duration::from_millis(100);
    let (sent_at, woke) = std::thread::scope(|s| {
        let sender = s.spawn(move || {
            // Let A fall asleep first (a pause, not synchronisation).
            std::thread::sleep(delay);
            let at = Instant::now();
            b.send(b_conn, b"wake", Bytes::from_static(b" up"))
                .expect("send");
            let mut evs = Vec::new();
            b.progress(&mut evs).expect("progress");
            assert!(evs.is_empty(), "B: unexpected {evs:?}");
            at
        });
        // A sleeps only as long as its own prepare_wait allows.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut sleeps = 0;
        let woke = loop {
            let mut evs = Vec::new();
            a.progress(&mut evs).expect("progress");
            if let Some(ev) = evs.into_iter().next() {
                match ev {
                    TransportEvent::Message(c, m) if c == a_conn && m == b"wake up" => {
                        break Instant::now()
                    }
                    other => panic!("A: unexpected {other:?}"),
                }
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "A never woke for the message ({sleeps} sleeps)"
            );
            let mut fds = Vec::new();
            let t = a
                .prepare_wait(&mut fds)
                .unwrap_or(deadline - now)
                .min(deadline - now);
            if !t.is_zero() {
                sleeps += 1;
                poll_fds(&fds, t);
            }
        };
        (sender.join().expect("sender thread"), woke)
    });
    let _ = inbox;
    let late = woke.saturating_duration_since(sent_at);
    eprintln!("{}: woke {late:?} after the send", p.a.name());
    assert!(
        late < Duration::from_millis(500),
        "woke {late:?} after the message was sent"
    );
    // Both still work afterwards.
    p.exchange(
        &[Msg::new(pattern(3, 1000), 5)],
        &[Msg::new(pattern(4, 1000), 5)],
        Duration::from_secs(5),
    );
}

fn driven_from_exiting_threads<T: Transport>(mk: impl Maker<T>) {
    let mut p = connected_pair(1500, mk);
    for round in 0..3u64 {
        let big = Msg::new(pattern(round, 3 << 20), 17);
        std::thread::scope(|s| {
            s.spawn(|| {
                // Queue a large message each way and make some progress
                // here, so that operations are in flight when this thread
                // exits.
                for (end, conn) in [(&mut p.a, p.a_conn), (&mut p.b, p.b_conn)] {
                    end.send(conn, &big.data[..big.split], big.data.slice(big.split..))
                        .expect("send");
                }
                for _ in 0..3 {
                    p.pump();
                }
            });
        });
        // The rest is driven from this thread.
        let mut got = [false, false];
        p.until(Duration::from_secs(10), "the large messages", |p| {
            for (i, inbox) in [&mut p.inbox_a, &mut p.inbox_b].into_iter().enumerate() {
                while let Some(ev) = inbox.pop_front() {
                    match ev {
                        TransportEvent::Message(_, m) => {
                            assert!(m == big.data[..], "round {round}: message differs");
                            got[i] = true;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            (got == [true, true]).then_some(())
        });
        p.exchange(
            &[Msg::new(pattern(round + 10, 100), 3)],
            &[Msg::new(pattern(round + 20, 100), 3)],
            Duration::from_secs(5),
        );
    }
}
