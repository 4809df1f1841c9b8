//! The conformance suite over the simulated link (no privileges needed),
//! also with loss, duplication and reordering injected below the LLC stack.

mod suite;

use std::time::Duration;

use llc_stack::link::fault::{FaultConfig, FaultInjector};
use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint};

type SimEndpoint = Endpoint<LlcTransport<FaultInjector<SimPort>>>;

/// Link settings: the stack's defaults, with failure detection quick enough
/// for the vanishing-peer test.
fn llc_config(quick_failure: bool) -> LlcConfig {
    let mut c = LlcConfig::default();
    if quick_failure {
        c.keepalive_interval = Duration::from_millis(300);
        c.idle_timeout = Duration::from_secs(2);
    }
    c
}

fn endpoints(n: usize, cfg: &Config, faults: FaultConfig, seed: u64) -> Vec<SimEndpoint> {
    endpoints_with(n, cfg, faults, seed, false)
}

fn endpoints_with(
    n: usize,
    cfg: &Config,
    faults: FaultConfig,
    seed: u64,
    quick_failure: bool,
) -> Vec<SimEndpoint> {
    let sim = Sim::new(SimConfig {
        mtu: 9000,
        ..SimConfig::default()
    });
    (0..n)
        .map(|i| {
            let dev = FaultInjector::new(sim.port(), faults.clone(), seed + i as u64);
            let mac = MacAddr([2, 0, 0, 0, 0, i as u8 + 1]);
            let t = LlcTransport::new(
                dev,
                mac,
                7,
                llc_config(quick_failure),
                Rng::new(seed ^ i as u64),
            );
            Endpoint::new(t, cfg.clone()).unwrap()
        })
        .collect()
}

/// `a` connects to `b`, and both make progress until `b` knows `a` and
/// nothing `a` sent waits for an acknowledgement: `a`'s id for `b`.
fn connect_settled(a: &SimEndpoint, b: &SimEndpoint) -> msg_layer::PeerId {
    let pb = a.connect(&b.local_addr()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while b.peer_count() == 0 || a.flush(Some(Duration::ZERO)).is_err() {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(std::time::Instant::now() < deadline, "connecting timed out");
    }
    pb
}

fn two(cfg: &Config) -> (SimEndpoint, SimEndpoint) {
    let mut v = endpoints(2, cfg, FaultConfig::default(), 1);
    let b = v.pop().unwrap();
    (v.pop().unwrap(), b)
}

#[test]
fn sizes_both_ways() {
    let cfg = Config::default();
    let (a, b) = two(&cfg);
    suite::sizes_both_ways(&a, &b, &suite::sizes(cfg.eager_limit, 4 << 20));
    // The LLC stack placed rendezvous data straight into the buffers.
    let s = b.stats();
    assert!(
        s.rndv_bytes_placed > s.rndv_bytes_copied,
        "placed {} copied {}",
        s.rndv_bytes_placed,
        s.rndv_bytes_copied
    );
}

/// Two endpoints on a link that loses, duplicates and reorders frames.
/// With loss, the last acknowledgement of a final barrier may be lost after
/// its sender stopped making progress; progress threads keep both ends
/// answering until the endpoints are dropped.
fn lossy_pair(seed: u64) -> (SimEndpoint, SimEndpoint, Config) {
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    let faults = FaultConfig {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        ..FaultConfig::default()
    };
    let mut v = endpoints(2, &cfg, faults, seed);
    let b = v.pop().unwrap();
    let a = v.pop().unwrap();
    (a, b, cfg)
}

#[test]
fn sizes_over_a_lossy_link() {
    let (a, b, cfg) = lossy_pair(7);
    suite::sizes_both_ways(&a, &b, &suite::sizes(cfg.eager_limit, 1 << 20));
}

#[test]
fn matching() {
    let cfg = Config::default();
    let (a, b) = two(&cfg);
    suite::matching(&a, &b, cfg.eager_limit);
}

#[test]
fn ten_thousand_back_to_back_sends() {
    let (a, b) = two(&Config::default());
    suite::back_to_back(&a, &b, 10_000, 100);
}

#[test]
fn crossing_rendezvous_does_not_deadlock() {
    let (a, b) = two(&Config::default());
    suite::crossing_rendezvous(&a, &b, 1 << 20);
}

#[test]
fn active_messages_and_rma() {
    let (a, b) = two(&Config::default());
    suite::active_messages_and_rma(&a, &b);
    // The LLC transport placed the put's pieces straight into the region,
    // and the get's reply straight into the reader's memory.
    let s = b.stats();
    assert!(s.put_pieces_placed > 0, "{s:?}");
    let s = a.stats();
    assert!(s.get_pieces_placed > 0, "{s:?}");
}

#[test]
fn rma_over_a_lossy_link() {
    // Lost, duplicated and reordered frames under placed puts: a piece whose
    // first fragment is overtaken is copied in by the engine instead, a
    // retransmitted fragment lands at its offset again; the region must
    // hold exactly the put's bytes either way.
    let (a, b, _) = lossy_pair(11);
    suite::active_messages_and_rma(&a, &b);
    let s = b.stats();
    assert!(s.put_pieces_placed > 0, "{s:?}");
    // The faults were there: the origin repaired lost frames.
    let repaired = a
        .counters()
        .into_iter()
        .find(|(k, _)| k == "link.conn.retransmits")
        .map_or(0, |(_, v)| v);
    assert!(repaired > 0, "no frame was lost and repaired");
}

#[test]
fn incast_keeps_unexpected_memory_bounded() {
    let cfg = Config {
        eager_window: 256 << 10,
        ..Config::default()
    };
    let mut v = endpoints(5, &cfg, FaultConfig::default(), 3);
    let rx = v.remove(0);
    suite::incast_bounded(&rx, &v, 200, 4000, cfg.eager_window as usize);
}

#[test]
fn vanishing_peer_fails_its_requests_only() {
    let cfg = Config::default();
    let mut v = endpoints_with(3, &cfg, FaultConfig::default(), 5, true);
    let other = v.pop().unwrap();
    let gone = v.pop().unwrap();
    let a = v.pop().unwrap();
    suite::vanishing_peer(&a, gone, &other, cfg.eager_limit, Duration::from_secs(10));
}

#[test]
fn pull_delivery_keeps_order() {
    let (a, b) = two(&Config::default());
    suite::pull_delivery_in_order(&a, &b);
    // And with the progress thread receiving for the puller.
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    let (a, b) = two(&cfg);
    suite::pull_delivery_in_order(&a, &b);
}

#[test]
fn progress_thread_runs_the_suite_too() {
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    let (a, b) = two(&cfg);
    suite::crossing_rendezvous(&a, &b, 1 << 20);
    let (a, b) = two(&cfg);
    suite::matching(&a, &b, cfg.eager_limit);
}

/// `can_post` (what MPI's inline send asks) is false exactly while a message
/// would wait in the peer's queue: here, while the transport pushes back
/// because the receiver does not make progress and the sender's LLC send
/// buffer is full; true again once the receiver catches up.
#[test]
fn can_post_is_false_while_sends_would_wait() {
    let sim = Sim::new(SimConfig::default());
    let open = |i: u8| {
        let cfg = LlcConfig {
            send_buffer_bytes: 256 << 10,
            ..LlcConfig::default()
        };
        let mac = MacAddr([2, 0, 0, 0, 0, i]);
        let dev = FaultInjector::new(sim.port(), FaultConfig::default(), u64::from(i));
        let t = LlcTransport::new(dev, mac, 7, cfg, Rng::new(u64::from(i)));
        Endpoint::new(t, Config::default()).unwrap()
    };
    let (a, b) = (open(1), open(2));
    let pb = connect_settled(&a, &b);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let both = || {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(std::time::Instant::now() < deadline, "timed out");
    };
    assert!(a.can_post(pb));
    // b stops making progress: a's frames are not acknowledged.
    let mut posted = 0;
    while a.can_post(pb) {
        a.am_post(pb, 9, vec![0u8; 32 << 10]).unwrap();
        posted += 1;
        assert!(posted < 1000, "the transport never pushed back");
    }
    assert!(posted >= 4, "refused after {posted} messages");
    // b catches up: everything is delivered and a may post again.
    while b.unhandled_am() < posted {
        both();
    }
    assert_eq!(b.unhandled_am(), posted);
    assert!(a.can_post(pb));
}

/// Memory lent to `am_post_parts` (`Bytes::from_owner`): arrives behind its
/// prefix, and is let go of (its owner dropped) only once the peer has
/// acknowledged it, also when frames are lost on the way. The MPI shim
/// completes a send from the application's buffer at that drop. The
/// receiver's buffer goes back to its transport after the handler ran.
#[test]
fn a_lent_body_arrives_behind_its_prefix_and_is_released_after_the_ack() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    struct Owner(Vec<u8>, Arc<AtomicBool>);
    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }
    impl Drop for Owner {
        fn drop(&mut self) {
            self.1.store(true, Ordering::SeqCst);
        }
    }

    for seed in 1..=8 {
        let faults = FaultConfig {
            loss: 0.05,
            ..FaultConfig::default()
        };
        let mut v = endpoints(2, &Config::default(), faults, seed);
        let (b, a) = (v.pop().unwrap(), v.pop().unwrap());
        let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let sink = got.clone();
        b.set_am_handler(
            5,
            Box::new(move |_, data| sink.lock().unwrap().push(data.to_vec())),
        );
        let pb = a.connect(&b.local_addr()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let both = || {
            a.progress().unwrap();
            b.progress().unwrap();
            assert!(
                std::time::Instant::now() < deadline,
                "seed {seed}: timed out"
            );
        };
        while b.peer_count() == 0 || a.flush(Some(Duration::ZERO)).is_err() {
            both();
        }

        let body: Vec<u8> = (0..300_000u32)
            .map(|i| (i * 31 + seed as u32) as u8)
            .collect();
        let released = Arc::new(AtomicBool::new(false));
        let lent = bytes::Bytes::from_owner(Owner(body.clone(), released.clone()));
        a.am_post_parts(pb, 5, b"ob1 header", lent).unwrap();
        // Sent, but b has not acknowledged anything: a still holds it.
        for _ in 0..100 {
            a.progress().unwrap();
        }
        assert!(
            !released.load(Ordering::SeqCst),
            "seed {seed}: released before the ack"
        );

        while !released.load(Ordering::SeqCst) {
            both();
        }
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 1, "seed {seed}");
        assert_eq!(&got[0][..10], b"ob1 header", "seed {seed}");
        assert!(got[0][10..] == body[..], "seed {seed}: body differs");
        // The delivered packet's buffer went back to b's transport.
        let kept = b.with_transport(|t| t.stack().endpoint().buf_pool().len());
        assert_eq!(kept, 1, "seed {seed}: the buffer was not recycled");
    }
}

/// An MPI rank adds a peer when it first sends to it: the end with the
/// higher address may have to send first, to a peer that never heard of it
/// and so will not connect. It opens the connection itself, and the
/// message arrives; the answer comes back on the same connection.
#[test]
fn the_higher_address_sends_first_to_a_peer_that_never_added_it() {
    use msg_layer::{Source, Tag};
    let v = endpoints(2, &Config::default(), FaultConfig::default(), 7);
    let (low, high) = (&v[0], &v[1]);
    assert!(low.local_addr() < high.local_addr());
    let to_low = high.add_peer(&low.local_addr()).expect("add peer");
    let s = high.isend(to_low, 5, 0, bytes::Bytes::from_static(b"first"));
    let r = low.irecv(Source::Any, Tag::Is(5), 0, vec![0; 16]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let got = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the message never arrived"
        );
        high.progress().expect("progress");
        if let Some(done) = low.test(&r) {
            break done.expect("low's receive");
        }
    };
    high.wait(s).expect("high's send");
    assert_eq!(
        got.data.as_deref().map(|d| &d[..got.status.len]),
        Some(&b"first"[..])
    );
    // The answer, to the peer as the receive named it, on that connection.
    let from = got.status.source;
    let s = low.isend(from, 6, 0, bytes::Bytes::from_static(b"answer"));
    let r = high.irecv(Source::Peer(to_low), Tag::Is(6), 0, vec![0; 16]);
    let got = high.wait(r).expect("high's receive");
    low.wait(s).expect("low's send");
    assert_eq!(
        got.data.as_deref().map(|d| &d[..got.status.len]),
        Some(&b"answer"[..])
    );
    let conns = |e: &SimEndpoint| {
        e.counters()
            .into_iter()
            .find(|(k, _)| *k == "link.accepted" || k.ends_with(".accepted"))
            .map_or(0, |(_, v)| v)
    };
    assert_eq!(conns(low), 1, "low accepted high's connection");
    assert_eq!(conns(high), 0, "one connection between them");
}

/// Both ends add each other and send at the same moment, the lower address
/// connecting as always and the higher one too (it has something to send):
/// the two SYNs cross, and one connection carries both messages.
#[test]
fn both_ends_sending_at_once_share_one_connection() {
    use msg_layer::{Source, Tag};
    for seed in 0..20 {
        let v = endpoints(2, &Config::default(), FaultConfig::default(), 100 + seed);
        let (low, high) = (&v[0], &v[1]);
        let to_high = low.add_peer(&high.local_addr()).expect("add peer");
        let to_low = high.add_peer(&low.local_addr()).expect("add peer");
        let s1 = low.isend(to_high, 1, 0, bytes::Bytes::from_static(b"from low"));
        let s2 = high.isend(to_low, 1, 0, bytes::Bytes::from_static(b"from high"));
        let r1 = high.irecv(Source::Peer(to_low), Tag::Is(1), 0, vec![0; 16]);
        let r2 = low.irecv(Source::Peer(to_high), Tag::Is(1), 0, vec![0; 16]);
        // One thread drives both ends.
        let (mut a, mut b) = (None, None);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while a.is_none() || b.is_none() {
            assert!(std::time::Instant::now() < deadline, "seed {seed}: stuck");
            // Both keep making progress: each answers the other's frames.
            high.progress().expect("progress");
            low.progress().expect("progress");
            a = a.or_else(|| high.test(&r1));
            b = b.or_else(|| low.test(&r2));
        }
        let (a, b) = (
            a.unwrap()
                .unwrap_or_else(|e| panic!("seed {seed}: high's receive: {e}")),
            b.unwrap()
                .unwrap_or_else(|e| panic!("seed {seed}: low's receive: {e}")),
        );
        for (ep, s) in [(low, s1), (high, s2)] {
            let done = loop {
                if let Some(done) = ep.test(&s) {
                    break done;
                }
                low.progress().expect("progress");
                high.progress().expect("progress");
            };
            done.unwrap_or_else(|e| panic!("seed {seed}: a send: {e}"));
        }
        assert_eq!(
            a.data.as_deref().map(|d| &d[..a.status.len]),
            Some(&b"from low"[..])
        );
        assert_eq!(
            b.data.as_deref().map(|d| &d[..b.status.len]),
            Some(&b"from high"[..])
        );
    }
}

/// A sender that posts only when the message would leave at once (MPI's
/// `btl_sendi` asks `can_post` first, and retries rather than queueing)
/// must get there with a peer that waits to be connected to: asking opens
/// the connection.
#[test]
fn asking_whether_a_send_would_leave_opens_the_connection() {
    let v = endpoints(2, &Config::default(), FaultConfig::default(), 11);
    let (low, high) = (&v[0], &v[1]);
    let to_low = high.add_peer(&low.local_addr()).expect("add peer");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !high.can_post(to_low) {
        assert!(
            std::time::Instant::now() < deadline,
            "a send to the peer never could leave"
        );
        low.progress().expect("progress");
    }
}

/// With `coalesce`, a window of small sends posted back to back leaves in
/// bundles (one transport message for many), in order, on a clean link and
/// on one that loses, duplicates and reorders frames.
#[test]
fn bursts_of_small_sends_leave_in_bundles() {
    let cfg = Config {
        coalesce: true,
        ..Config::default()
    };
    let (a, b) = two(&cfg);
    let windows = 20;
    let bundles = suite::bursts(&a, &b, windows);
    let s = a.stats();
    println!(
        "{windows} windows of 64: {bundles} bundles carried {} messages",
        s.bundled
    );
    assert!(
        bundles >= windows as u64 && s.bundled >= 2 * bundles,
        "{bundles} bundles carrying {} messages for {windows} windows",
        s.bundled
    );
    let faults = FaultConfig {
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        ..FaultConfig::default()
    };
    let cfg = Config {
        progress_thread: true,
        ..cfg
    };
    let mut v = endpoints(2, &cfg, faults, 11);
    let b = v.pop().unwrap();
    let a = v.pop().unwrap();
    assert!(suite::bursts(&a, &b, windows) > 0);
}

/// Without `coalesce` the same traffic arrives the same (each small send
/// leaves at once).
#[test]
fn bursts_without_coalescing_arrive_the_same() {
    let (a, b) = two(&Config::default());
    suite::bursts(&a, &b, 5);
}

/// Active messages posted back to back to one peer arrive in the order
/// posted, also when some wait in the peer's queue behind tagged messages
/// stalled for eager credit: a later one handed to the transport at once
/// would overtake them. With and without coalescing, and with more posted
/// while the queue drains.
#[test]
fn active_messages_queued_behind_a_credit_stall_keep_their_order() {
    use msg_layer::{Event, Source, Tag};
    for coalesce in [false, true] {
        let cfg = Config {
            eager_window: msg_layer::config::INITIAL_CREDIT,
            coalesce,
            ..Config::default()
        };
        let (a, b) = two(&cfg);
        b.set_pull_delivery(true);
        let pb = connect_settled(&a, &b);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let both = || {
            a.progress().unwrap();
            b.progress().unwrap();
            assert!(std::time::Instant::now() < deadline, "timed out");
        };
        let posted = std::cell::Cell::new(0u32);
        let post = |n: u32| {
            for _ in 0..n {
                let i = posted.get();
                let body = bytes::Bytes::from_static(b"active message");
                a.am_post_parts(pb, 3, &i.to_le_bytes(), body).unwrap();
                posted.set(i + 1);
            }
        };
        // Tagged messages b has not asked for yet use up a's credit: the
        // last ones wait for it, and the active messages behind them too
        // (coalescing holds them all until a round of progress).
        const TAGGED: usize = 600;
        const LEN: usize = 100;
        assert!(TAGGED * (LEN + msg_layer::wire::HEADER_LEN) > cfg.eager_window as usize);
        let sends: Vec<_> = (0..TAGGED)
            .map(|_| a.isend(pb, 1, 0, vec![7u8; LEN]))
            .collect();
        post(10);
        a.progress().unwrap();
        assert!(a.stats().credit_stalls > 0, "no credit stall");
        // These must wait behind the ones queued, not go to the transport.
        post(20);
        let next = std::cell::Cell::new(0u32);
        let take = |b: &SimEndpoint| {
            while let Some(ev) = b.poll_event() {
                let Event::Message(m) = ev else {
                    panic!("unexpected event {ev:?}");
                };
                let i = u32::from_le_bytes(m.data()[..4].try_into().unwrap());
                assert_eq!(
                    i,
                    next.get(),
                    "active messages out of order (coalesce {coalesce})"
                );
                assert_eq!(&m.data()[4..], b"active message");
                next.set(i + 1);
            }
        };
        for _ in 0..20 {
            both();
            take(&b);
        }
        // b takes the tagged messages, returning the credit; more active
        // messages follow while the queue drains.
        let recvs: Vec<_> = (0..TAGGED)
            .map(|_| b.irecv(Source::Any, Tag::Is(1), 0, vec![0; LEN]))
            .collect();
        post(10);
        while next.get() < 30 {
            both();
            take(&b);
        }
        post(10);
        while next.get() < posted.get() {
            both();
            take(&b);
        }
        assert_eq!(next.get(), 50);
        // The tagged messages were delivered too.
        for (s, r) in sends.into_iter().zip(recvs) {
            let sent = loop {
                match a.test(&s) {
                    Some(res) => break res,
                    None => both(),
                }
            };
            sent.unwrap();
            let got = loop {
                match b.test(&r) {
                    Some(res) => break res,
                    None => both(),
                }
            };
            assert_eq!(got.unwrap().data.unwrap(), vec![7u8; LEN]);
        }
    }
}

/// A rendezvous message leaves in whole frames: each piece, with its
/// header, fills the frames it takes, so 1 MiB at MTU 9000 costs the
/// frames its bytes need and one per piece for the headers' rounding at
/// most, where 256 KiB pieces took a short frame each.
#[test]
fn rendezvous_pieces_fill_whole_frames() {
    use msg_layer::{Source, Tag};
    let (a, b) = two(&Config::default());
    let to_b = connect_settled(&a, &b);
    let data_frames = |e: &SimEndpoint| {
        e.with_transport(|t| {
            t.stack()
                .endpoint()
                .connection_stats_all()
                .map(|(_, c)| c.data_frames_sent)
                .sum::<u64>()
        })
    };
    let frame = a.with_transport(|t| t.stack().endpoint().frame_payload());
    let before = data_frames(&a);
    let len = 1 << 20;
    let s = a.isend(to_b, 9, 0, bytes::Bytes::from(vec![7u8; len]));
    let r = b.irecv(Source::Any, Tag::Is(9), 0, vec![0; len]);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let got = loop {
        assert!(std::time::Instant::now() < deadline, "1 MiB never arrived");
        a.progress().expect("progress");
        if let Some(done) = b.test(&r) {
            break done.expect("b's receive");
        }
    };
    a.wait(s).expect("a's send");
    assert_eq!(got.status.len, len);
    let sent = data_frames(&a) - before;
    // The announcement, then the data: its bytes in whole frames, plus at
    // most the pieces' headers and the last piece's remainder.
    let pieces = len.div_ceil(msg_layer::config::fit_to_frames(256 << 10, frame)) as u64;
    let floor = len.div_ceil(frame) as u64;
    assert!(
        sent <= 1 + floor + 1 && sent >= floor,
        "{sent} data frames for 1 MiB in {pieces} pieces of whole {frame}-byte frames (at least {floor})"
    );
}

/// Frame authentication through the message layer: an endpoint opened with
/// a key nobody has (what `KeySource::Later` opens with) takes the job's key
/// with `set_auth_key` before its first connection and then talks to a
/// peer of the job; a process with another key cannot reach it: its send
/// fails with the cause, and the keyed endpoint counts the dropped frames.
#[test]
fn a_key_set_late_admits_the_job_and_no_one_else() {
    use msg_layer::transport::llc::AuthKey;
    use msg_layer::{Error, PeerEnd, Source, Tag};

    let sim = Sim::new(SimConfig::default());
    let open = |i: u8, key: &[u8]| {
        let mut c = llc_config(false);
        c.auth_key = Some(AuthKey::derive(key));
        // A stranger gives up after a few unanswered connection requests.
        c.max_syn_retries = 3;
        let t = LlcTransport::new(
            FaultInjector::new(sim.port(), FaultConfig::default(), i.into()),
            MacAddr([2, 0, 0, 0, 0, i]),
            7,
            c,
            Rng::new(i.into()),
        );
        Endpoint::new(t, Config::default()).unwrap()
    };
    let job = AuthKey::derive(b"the job's key material");
    let a = open(1, b"the job's key material");
    let b = open(2, b"a placeholder nobody has");
    let stranger = open(3, b"another job's key material");
    assert_ne!(a.auth_fingerprint(), b.auth_fingerprint());

    b.set_auth_key(job.clone()).unwrap();
    assert_eq!(a.auth_fingerprint(), b.auth_fingerprint());
    assert_eq!(a.auth_fingerprint(), Some(job.fingerprint()));

    let to_b = connect_settled(&a, &b);
    let r = b.irecv(Source::Any, Tag::Is(1), 0, vec![0; 64]);
    let s = a.isend(to_b, 1, 0, b"keyed".to_vec());
    let limit = Some(Duration::from_secs(10));
    a.wait_timeout(s, limit).unwrap();
    let got = b.wait_timeout(r, limit).unwrap();
    assert_eq!(got.data.as_deref(), Some(&b"keyed"[..]));
    let e = b.set_auth_key(job).unwrap_err().to_string();
    assert!(e.contains("before the endpoint's first connection"), "{e}");

    let to_b = stranger.connect(&b.local_addr()).unwrap();
    // An eager send completes when the transport took it; what depends on
    // the peer (a receive from it) fails with the connection.
    let s = stranger.isend(to_b, 1, 0, b"forged".to_vec());
    stranger.wait_timeout(s, limit).unwrap();
    let r = stranger.irecv(Source::Peer(to_b), Tag::Is(1), 0, vec![0; 64]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let err = loop {
        b.progress().unwrap();
        match stranger.wait_timeout(r, Some(Duration::from_millis(1))) {
            Err(Error::Timeout) => {}
            Err(e) => break e,
            Ok(_) => panic!("the stranger received from the keyed endpoint"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stranger never gave up"
        );
    };
    match &err {
        Error::PeerFailed {
            end: PeerEnd::Failed(_),
            ..
        } => {}
        other => panic!("expected a failed peer, got {other:?}"),
    }
    assert!(err.to_string().contains("authentication"), "{err}");
    let dropped: u64 = b
        .counters()
        .iter()
        .filter(|(k, _)| k == "link.dropped.auth_failed")
        .map(|(_, v)| v)
        .sum();
    assert!(dropped > 0, "the keyed endpoint counted no dropped frame");
    assert_eq!(b.peer_count(), 1, "only the job's peer got in");
}
