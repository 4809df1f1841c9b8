//! The message layer's conformance suite, generic over the transport: the
//! simulated link runs it without privileges (engine_sim.rs), and the real
//! links run the same functions over veth pairs in namespaces.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::rma::VecRegion;
use msg_layer::transport::Transport;
use msg_layer::{Endpoint, Error, PeerId, Source, Tag};

/// Longest any single wait in the suite may take.
pub const WAIT: Duration = Duration::from_secs(60);

/// Deterministic test payload: message `i` of `len` bytes.
pub fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ len as u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Introduce `a` and `b` to each other MPI style. Returns (a's id for b,
/// b's id for a).
pub fn pair<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>) -> (PeerId, PeerId) {
    let pb = a.add_peer(&b.local_addr()).unwrap();
    let pa = b.add_peer(&a.local_addr()).unwrap();
    (pb, pa)
}

/// Context reserved for [`finish`].
const FIN_CONTEXT: u32 = 0xf1f1;

/// A barrier with one peer, as at the end of an MPI program: each side
/// keeps making progress (acknowledging, retransmitting, serving RMA) until
/// the other is done too.
pub fn finish<T: Transport>(me: &Endpoint<T>, peer: PeerId) {
    let r = me.irecv(Source::Peer(peer), Tag::Is(0), FIN_CONTEXT, vec![0; 1]);
    me.wait_timeout(me.isend(peer, 0, FIN_CONTEXT, vec![1u8]), Some(WAIT))
        .expect("finish send");
    if let Err(e) = me.wait_timeout(r, Some(WAIT)) {
        panic!("{} finish with peer {peer}: {e}", me.local_addr());
    }
    me.flush(Some(WAIT))
        .expect("everything sent reaches the peer");
}

/// Sizes around every boundary the layers have: link MTUs, the eager
/// limit, rendezvous chunks.
pub fn sizes(eager_limit: usize, largest: usize) -> Vec<usize> {
    let mut v = vec![0, 1, 7, 64, 1000];
    for b in [
        1440,
        1500,
        8952,
        9000,
        eager_limit,
        64 << 10,
        256 << 10,
        1 << 20,
    ] {
        v.extend([b - 1, b, b + 1]);
    }
    v.push(largest);
    v.retain(|&s| s <= largest);
    v.sort_unstable();
    v.dedup();
    v
}

/// Every size arrives whole and intact, both directions at once.
pub fn sizes_both_ways<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>, sizes: &[usize]) {
    let (pb, pa) = pair(a, b);
    std::thread::scope(|s| {
        for (me, peer) in [(a, pb), (b, pa)] {
            s.spawn(move || {
                let sends: Vec<_> = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| me.isend(peer, i as u32, 0, payload(i as u64, n)))
                    .collect();
                let recvs: Vec<_> = sizes
                    .iter()
                    .enumerate()
                    // Half the receives get a larger buffer than the message.
                    .map(|(i, &n)| {
                        me.irecv(
                            Source::Peer(peer),
                            Tag::Is(i as u32),
                            0,
                            vec![0; n + (i % 2) * 100],
                        )
                    })
                    .collect();
                for r in me.wait_all(&sends, Some(WAIT)).expect("sends complete") {
                    r.expect("send succeeds");
                }
                for (i, r) in me
                    .wait_all(&recvs, Some(WAIT))
                    .unwrap()
                    .into_iter()
                    .enumerate()
                {
                    let c = r.expect("receive succeeds");
                    assert_eq!(c.status.len, sizes[i]);
                    assert_eq!(c.status.source, peer);
                    assert!(
                        c.data.unwrap() == payload(i as u64, sizes[i]),
                        "message {i} of {} bytes corrupted",
                        sizes[i]
                    );
                }
                finish(me, peer);
            });
        }
    });
}

/// MPI matching: wildcards, contexts, non-overtaking, probe, cancel, and
/// truncation errors that lose nothing else.
pub fn matching<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>, eager_limit: usize) {
    let (pb, pa) = pair(a, b);
    let big = eager_limit * 4;
    // Sends, in order: (tag, context, len).
    let plan: [(u32, u32, usize); 8] = [
        (1, 0, 10),
        (2, 0, 20),
        (1, 0, 30),
        (3, 0, 40),
        (1, 5, 50),
        (4, 0, 100), // truncated (eager)
        (5, 0, big), // truncated (rendezvous)
        (6, 0, big), // intact after the truncations
    ];
    std::thread::scope(|s| {
        s.spawn(|| {
            let sends: Vec<_> = plan
                .iter()
                .enumerate()
                .map(|(i, &(tag, ctx, len))| a.isend(pb, tag, ctx, payload(i as u64, len)))
                .collect();
            // Every send completes, the truncated ones too (MPI semantics).
            for res in a.wait_all(&sends, Some(WAIT)).unwrap() {
                res.unwrap();
            }
            finish(a, pb);
        });
        matching_receiver(b, pa, big);
        finish(b, pa);
        assert_eq!(b.unexpected_bytes(), 0, "everything sent was received");
    });
}

fn matching_receiver<T: Transport>(b: &Endpoint<T>, pa: PeerId, big: usize) {
    // Probe sees tag 3 without taking it, once it has arrived.
    let st = b
        .probe(Source::Any, Tag::Is(3), 0, Some(WAIT))
        .expect("probe finds tag 3");
    assert_eq!((st.source, st.tag, st.len), (pa, 3, 40));
    assert_eq!(b.iprobe(Source::Any, Tag::Is(3), 0).unwrap().len, 40);
    assert!(
        b.iprobe(Source::Any, Tag::Is(3), 9).is_none(),
        "contexts are separate"
    );
    // A receive that matches nothing, cancelled.
    let never = b.irecv(Source::Any, Tag::Is(99), 0, vec![0; 8]);
    assert!(b.cancel(never));
    assert_eq!(b.wait_timeout(never, Some(WAIT)), Err(Error::Cancelled));
    // Non-overtaking: tag 1 messages in send order; ANY_TAG takes the earliest.
    let r = |src, tag, ctx, cap| b.wait_timeout(b.irecv(src, tag, ctx, vec![0; cap]), Some(WAIT));
    let c = r(Source::Peer(pa), Tag::Is(1), 0, 64).unwrap();
    assert_eq!(c.data.unwrap(), payload(0, 10));
    let c = r(Source::Any, Tag::Any, 0, 64).unwrap();
    assert_eq!((c.status.tag, c.data.unwrap()), (2, payload(1, 20)));
    let c = r(Source::Any, Tag::Is(1), 0, 64).unwrap();
    assert_eq!(c.data.unwrap(), payload(2, 30));
    let c = r(Source::Any, Tag::Any, 5, 64).unwrap();
    assert_eq!((c.status.tag, c.data.unwrap()), (1, payload(4, 50)));
    let c = r(Source::Any, Tag::Any, 0, 64).unwrap();
    assert_eq!((c.status.tag, c.data.unwrap()), (3, payload(3, 40)));
    // Truncation, eager then rendezvous; the message after them is intact.
    assert_eq!(
        r(Source::Any, Tag::Is(4), 0, 99),
        Err(Error::Truncated {
            message_len: 100,
            buffer_len: 99
        })
    );
    assert_eq!(
        r(Source::Any, Tag::Is(5), 0, big - 1),
        Err(Error::Truncated {
            message_len: big,
            buffer_len: big - 1
        })
    );
    let c = r(Source::Peer(pa), Tag::Is(6), 0, big).unwrap();
    assert_eq!(c.data.unwrap(), payload(7, big));
}

/// `n` back-to-back non-blocking sends all complete and arrive in order.
pub fn back_to_back<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>, n: usize, len: usize) {
    let (pb, pa) = pair(a, b);
    let sends: Vec<_> = (0..n)
        .map(|i| a.isend(pb, 7, 0, payload(i as u64, len)))
        .collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            for r in a.wait_all(&sends, Some(WAIT)).expect("all sends complete") {
                r.unwrap();
            }
            finish(a, pb);
        });
        for i in 0..n {
            let c = b
                .recv(Source::Peer(pa), Tag::Is(7), 0, vec![0; len], Some(WAIT))
                .unwrap();
            assert!(
                c.data.unwrap() == payload(i as u64, len),
                "message {i} out of order"
            );
        }
        finish(b, pa);
    });
}

/// Both sides send rendezvous-size messages before either receives.
pub fn crossing_rendezvous<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>, len: usize) {
    let (pb, pa) = pair(a, b);
    std::thread::scope(|s| {
        for (me, peer, id) in [(a, pb, 1u64), (b, pa, 2)] {
            s.spawn(move || {
                let sends: Vec<_> = (0..3)
                    .map(|k| me.isend(peer, k, 0, payload(id * 10 + k as u64, len)))
                    .collect();
                let other = 3 - id;
                let recvs: Vec<_> = (0..3)
                    .map(|k| me.irecv(Source::Peer(peer), Tag::Is(k), 0, vec![0; len]))
                    .collect();
                for r in me.wait_all(&sends, Some(WAIT)).unwrap() {
                    r.unwrap();
                }
                for (k, r) in me
                    .wait_all(&recvs, Some(WAIT))
                    .unwrap()
                    .into_iter()
                    .enumerate()
                {
                    assert!(r.unwrap().data.unwrap() == payload(other * 10 + k as u64, len));
                }
                finish(me, peer);
            });
        }
    });
}

/// Active messages reach their handler in order; put and get move data;
/// bad accesses are refused with an error.
pub fn active_messages_and_rma<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>) {
    let (pb, pa) = pair(a, b);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    b.set_am_handler(
        3,
        Box::new(move |p, data| s2.lock().unwrap().push((p, data.to_vec()))),
    );
    let n = 100;
    let len = 3 << 20;
    let region = Arc::new(VecRegion::new(vec![0; len]));
    let key = b.register(region.clone());
    std::thread::scope(|s| {
        // The target only makes progress (as a computing MPI process would
        // inside any call), then waits at the final barrier.
        s.spawn(|| {
            let deadline = Instant::now() + WAIT;
            while seen.lock().unwrap().len() < n as usize {
                assert!(
                    Instant::now() < deadline,
                    "active messages did not all arrive"
                );
                b.progress().unwrap();
            }
            finish(b, pa);
        });
        let reqs: Vec<_> = (0..n)
            .map(|i| a.am_send(pb, 3, payload(i, i as usize * 37)))
            .collect();
        for r in a.wait_all(&reqs, Some(WAIT)).unwrap() {
            r.unwrap();
        }
        let data = payload(42, len - 1000);
        a.wait_timeout(a.put(pb, key, 1000, Bytes::from(data.clone())), Some(WAIT))
            .expect("put completes");
        assert!(region.snapshot()[1000..] == data[..]);
        let c = a
            .wait_timeout(a.get(pb, key, 500, len - 500), Some(WAIT))
            .expect("get completes");
        let got = c.data.unwrap();
        assert!(got[..500] == [0; 500]);
        assert!(got[500..] == data[..]);
        // The same read straight into the reader's memory: no data in
        // the completion, every byte where it belongs.
        let dst = Arc::new(VecRegion::new(vec![0xEE; len - 500]));
        let c = a
            .wait_timeout(a.get_into(pb, key, 500, dst.clone()), Some(WAIT))
            .expect("get into memory completes");
        assert!(c.data.is_none());
        let got = dst.snapshot();
        assert!(got[..500] == [0; 500]);
        assert!(got[500..] == data[..]);
        // Out of bounds and unknown keys are refused, either way.
        let e = a.wait_timeout(a.get(pb, key, len as u64 - 10, 11), Some(WAIT));
        assert!(matches!(e, Err(Error::RmaRefused(_))), "{e:?}");
        let small = Arc::new(VecRegion::new(vec![0; 11]));
        let e = a.wait_timeout(a.get_into(pb, key, len as u64 - 10, small), Some(WAIT));
        assert!(matches!(e, Err(Error::RmaRefused(_))), "{e:?}");
        let bogus = msg_layer::rma::RegionKey(key.0 ^ 1);
        let e = a.wait_timeout(a.put(pb, bogus, 0, vec![1u8; 10]), Some(WAIT));
        assert!(matches!(e, Err(Error::RmaRefused(_))), "{e:?}");
        finish(a, pb);
    });
    for (i, (p, d)) in seen.lock().unwrap().iter().enumerate() {
        assert_eq!(*p, pa);
        assert!(*d == payload(i as u64, i * 37), "active message {i}");
    }
}

/// Four senders to one receiver that posts nothing for a while: the
/// receiver's unexpected buffer stays within the credit it granted, and
/// every message arrives once the receives are posted.
pub fn incast_bounded<T: Transport>(
    rx: &Endpoint<T>,
    senders: &[Endpoint<T>],
    per_sender: usize,
    len: usize,
    window: usize,
) {
    let ids: Vec<(PeerId, PeerId)> = senders.iter().map(|s| pair(s, rx)).collect();
    let peak = AtomicU64::new(0);
    std::thread::scope(|s| {
        for (k, snd) in senders.iter().enumerate() {
            let to_rx = ids[k].0;
            s.spawn(move || {
                let reqs: Vec<_> = (0..per_sender)
                    .map(|i| {
                        snd.isend(
                            to_rx,
                            k as u32,
                            0,
                            payload((k * per_sender + i) as u64, len),
                        )
                    })
                    .collect();
                for r in snd.wait_all(&reqs, Some(WAIT)).unwrap() {
                    r.unwrap();
                }
                finish(snd, to_rx);
            });
        }
        // Let the senders run into their credit limits before receiving.
        let deadline = Instant::now() + WAIT;
        let bound = senders.len() * window;
        loop {
            rx.progress().unwrap();
            let u = rx.unexpected_bytes();
            peak.fetch_max(u as u64, Ordering::Relaxed);
            assert!(u <= bound, "unexpected bytes {u} above the bound {bound}");
            if rx.stats().credit_stalls > 0 || u >= bound - senders.len() * (len + 48) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "senders never filled their windows"
            );
        }
        for i in 0..per_sender {
            for (k, &(_, from)) in ids.iter().enumerate() {
                let c = rx
                    .recv(
                        Source::Peer(from),
                        Tag::Is(k as u32),
                        0,
                        vec![0; len],
                        Some(WAIT),
                    )
                    .unwrap();
                assert!(c.data.unwrap() == payload((k * per_sender + i) as u64, len));
                let u = rx.unexpected_bytes();
                peak.fetch_max(u as u64, Ordering::Relaxed);
                assert!(u <= bound, "unexpected bytes {u} above the bound {bound}");
            }
        }
        for &(_, from) in &ids {
            finish(rx, from);
        }
    });
    assert!(
        peak.load(Ordering::Relaxed) > (len * 4) as u64,
        "the test never buffered unexpected messages"
    );
    assert_eq!(rx.unexpected_bytes(), 0);
}

/// A peer that disappears fails the requests that depend on it within the
/// transport's failure timeout; another peer is unaffected.
pub fn vanishing_peer<T: Transport>(
    a: &Endpoint<T>,
    gone: Endpoint<T>,
    other: &Endpoint<T>,
    eager_limit: usize,
    bound: Duration,
) {
    let (pg, pa_at_gone) = pair(a, &gone);
    let (po, pa) = pair(a, other);
    std::thread::scope(|sc| {
        // The other peer lives on (making progress) through all of this.
        sc.spawn(|| {
            let c = other
                .recv(Source::Peer(pa), Tag::Is(9), 0, vec![0; 5], Some(WAIT))
                .unwrap();
            assert_eq!(c.data.unwrap(), b"hello");
            finish(other, pa);
        });
        // Establish the connection to the peer that will vanish.
        std::thread::scope(|sc| {
            sc.spawn(|| finish(&gone, pa_at_gone));
            finish(a, pg);
        });
        let pending_recv = a.irecv(Source::Peer(pg), Tag::Any, 0, vec![0; 64]);
        let pending_send = a.isend(pg, 1, 0, vec![2u8; eager_limit * 4]);
        let failures = Arc::new(Mutex::new(Vec::new()));
        let f2 = failures.clone();
        a.on_peer_failure(Box::new(move |p, e| {
            f2.lock().unwrap().push((p, e.clone()))
        }));
        drop(gone);
        let t0 = Instant::now();
        let e = a.wait_timeout(pending_recv, Some(bound)).unwrap_err();
        assert!(
            matches!(e, Error::PeerFailed { peer, .. } if peer == pg),
            "{e:?}"
        );
        let e = a.wait_timeout(pending_send, Some(WAIT)).unwrap_err();
        assert!(matches!(e, Error::PeerFailed { .. }), "{e:?}");
        eprintln!("peer failure detected after {:?}", t0.elapsed());
        // New requests to it fail at once; the callback heard of it once.
        let e = a
            .wait_timeout(a.isend(pg, 2, 0, vec![0u8; 4]), Some(WAIT))
            .unwrap_err();
        assert!(matches!(e, Error::PeerFailed { .. }));
        a.progress().unwrap();
        assert_eq!(failures.lock().unwrap().len(), 1);
        // The other peer still works.
        a.wait_timeout(a.isend(po, 9, 0, b"hello".to_vec()), Some(WAIT))
            .unwrap();
        finish(a, po);
    });
}

/// Pull-style delivery: with `b` pulling, active messages (also ones lent
/// without a copy), completions of watched one-sided operations, the
/// release of a lent body and the orderly end of the connection (closed by
/// `b` itself) all come out of `poll_event`, each exactly once, messages in
/// the order sent and the end after every message; no callback runs.
pub fn pull_delivery_in_order<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>) {
    use msg_layer::{Event, PeerEnd};

    let called = Arc::new(AtomicU64::new(0));
    let c = called.clone();
    b.set_am_handler(
        3,
        Box::new(move |_, _| {
            c.fetch_add(1, Ordering::Relaxed);
        }),
    );
    b.set_pull_delivery(true);
    let (pb, pa) = pair(a, b);
    let region = Arc::new(VecRegion::new(vec![0; 4096]));
    let key = a.register(region.clone());

    // a -> b: messages of every size class, one with a lent body.
    let n = 50u64;
    for i in 0..n {
        let len = [0, 8, 1000, 70_000][i as usize % 4];
        if i == 7 {
            let lent = Bytes::from_owner(payload(i, len));
            a.am_post_parts(pb, 3, &i.to_le_bytes(), lent).unwrap();
        } else {
            let mut m = i.to_le_bytes().to_vec();
            m.extend_from_slice(&payload(i, len));
            a.am_post(pb, 3, m).unwrap();
        }
    }
    // b -> a: a put and a get, watched; and a lent body with a notice.
    let put = b.put(pa, key, 100, Bytes::from_static(b"pulled"));
    b.watch(put);
    let get = b.get(pa, key, 100, 6);
    b.watch(get);
    struct Noticed(Vec<u8>, #[allow(dead_code)] msg_layer::ReleaseNotice);
    impl AsRef<[u8]> for Noticed {
        fn as_ref(&self) -> &[u8] {
            &self.0
        }
    }
    let notice = b.release_notice(77);
    b.am_post_parts(
        pa,
        9,
        b"",
        Bytes::from_owner(Noticed(vec![1; 5000], notice)),
    )
    .unwrap();

    let deadline = Instant::now() + WAIT;
    let mut next = 0u64;
    let (mut put_done, mut get_done, mut released) = (false, false, false);
    let mut ended = false;
    let mut closed = false;
    while !(ended && released && put_done && get_done) {
        assert!(Instant::now() < deadline, "pull delivery timed out: message {next} of {n}, put {put_done}, get {get_done}, released {released}");
        a.progress().unwrap();
        b.progress().unwrap();
        while let Some(ev) = b.poll_event() {
            match ev {
                Event::Message(m) => {
                    assert_eq!(m.peer, pa);
                    assert_eq!(m.handler, 3);
                    let i = u64::from_le_bytes(m.data()[..8].try_into().unwrap());
                    assert_eq!(i, next, "messages out of order");
                    let len = [0, 8, 1000, 70_000][i as usize % 4];
                    assert_eq!(&m.data()[8..], &payload(i, len)[..]);
                    next += 1;
                    b.recycle(m);
                }
                Event::Completed { request, result } => {
                    let c = result.expect("one-sided operation");
                    if request == put {
                        assert!(!put_done);
                        put_done = true;
                    } else {
                        assert_eq!(request, get);
                        assert!(!get_done);
                        // The get was posted after the put: it sees its bytes.
                        assert_eq!(c.data.as_deref(), Some(&b"pulled"[..]));
                        get_done = true;
                    }
                }
                Event::Released(token) => {
                    assert_eq!(token, 77);
                    assert!(!released);
                    released = true;
                }
                Event::PeerEnded { peer, error } => {
                    assert_eq!(peer, pa);
                    assert_eq!(next, n, "the end overtook messages");
                    assert!(
                        matches!(
                            error,
                            Error::PeerFailed {
                                end: PeerEnd::Closed,
                                ..
                            }
                        ),
                        "{error}"
                    );
                    ended = true;
                }
            }
        }
        if next == n && put_done && get_done && released && !closed {
            // Everything arrived and was acknowledged: b leaves in order,
            // and its own end of the connection is its last event.
            b.close(WAIT).unwrap();
            closed = true;
        }
    }
    assert_eq!(
        called.load(Ordering::Relaxed),
        0,
        "a callback ran in pull mode"
    );
    assert_eq!(&region.snapshot()[100..106], b"pulled");
}

/// Windows of small sends, tagged and active, posted back to back with
/// no progress call between them, then waited for, as MPI's message-rate
/// tests post them: every message arrives once, in order, with its bytes,
/// including a long one in the middle of a window (it leaves alone, the
/// small ones around it keep their places). Returns the sender's count of
/// bundles sent (what [`msg_layer::Config::coalesce`] should make non-zero).
pub fn bursts<T: Transport>(a: &Endpoint<T>, b: &Endpoint<T>, windows: usize) -> u64 {
    let (pb, pa) = pair(a, b);
    const WINDOW: usize = 64;
    let len_of = |i: usize| match i % WINDOW {
        31 => 3000,          // longer than any bundle takes
        k => (k * 29) % 900, // 0..900 bytes
    };
    let ams = Arc::new(Mutex::new(Vec::new()));
    let seen = ams.clone();
    b.set_am_handler(
        9,
        Box::new(move |p, data| seen.lock().unwrap().push((p, data.to_vec()))),
    );
    std::thread::scope(|s| {
        s.spawn(|| {
            for w in 0..windows {
                let mut reqs = Vec::with_capacity(WINDOW);
                for k in 0..WINDOW {
                    let i = w * WINDOW + k;
                    let data = payload(i as u64, len_of(i));
                    if k % 4 == 3 {
                        a.am_post(pb, 9, data).expect("active message posted");
                    } else {
                        reqs.push(a.isend(pb, 5, 0, data));
                    }
                }
                for r in a.wait_all(&reqs, Some(WAIT)).expect("window sends") {
                    r.unwrap();
                }
            }
            finish(a, pb);
        });
        let mut expected_ams = 0;
        for w in 0..windows {
            // Half the receives are posted before the window arrives,
            // half after (unexpected messages).
            let tagged: Vec<usize> = (0..WINDOW)
                .filter(|k| k % 4 != 3)
                .map(|k| w * WINDOW + k)
                .collect();
            expected_ams += WINDOW - tagged.len();
            let mut reqs: Vec<_> = tagged
                .iter()
                .take(tagged.len() / 2)
                .map(|&i| b.irecv(Source::Peer(pa), Tag::Is(5), 0, vec![0; len_of(i)]))
                .collect();
            reqs.extend(
                tagged
                    .iter()
                    .skip(tagged.len() / 2)
                    .map(|&i| b.irecv(Source::Peer(pa), Tag::Is(5), 0, vec![0; len_of(i)])),
            );
            for (r, &i) in b
                .wait_all(&reqs, Some(WAIT))
                .expect("window receives")
                .into_iter()
                .zip(&tagged)
            {
                let got = r.unwrap().data.unwrap();
                assert!(
                    got == payload(i as u64, len_of(i)),
                    "message {i} wrong or out of order"
                );
            }
        }
        let deadline = Instant::now() + WAIT;
        while ams.lock().unwrap().len() < expected_ams {
            assert!(Instant::now() < deadline, "active messages missing");
            b.progress().unwrap();
        }
        finish(b, pa);
    });
    let got = ams.lock().unwrap();
    let am_ids = (0..windows * WINDOW).filter(|i| i % 4 == 3);
    for ((p, d), i) in got.iter().zip(am_ids) {
        assert_eq!(*p, pa);
        assert!(*d == payload(i as u64, len_of(i)), "active message {i}");
    }
    assert_eq!(got.len(), windows * WINDOW / 4);
    assert_eq!(b.stats().bad_packets, 0);
    a.stats().bundles_sent
}
