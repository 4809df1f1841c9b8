//! The calls the libfabric provider uses, end to end over the LLC stack on
//! the simulated link: tagged (masked) and untagged sends with remote data,
//! inject, receives into caller memory (placed by the transport), truncation,
//! and peek, claim and discard.

mod suite;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use msg_layer::rma::VecRegion;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint, Select, Source, Space};
use suite::{payload, WAIT};

type SimEndpoint = Endpoint<LlcTransport<SimPort>>;

/// Two endpoints on one simulated link, each with a progress thread (so
/// that one test thread can wait on either), introduced to each other.
fn two() -> (SimEndpoint, SimEndpoint, u32, u32) {
    let sim = Sim::new(SimConfig {
        mtu: 9000,
        ..SimConfig::default()
    });
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    let mut v: Vec<SimEndpoint> = (0..2u8)
        .map(|i| {
            let mac = MacAddr([2, 0, 0, 0, 0, i + 1]);
            let t = LlcTransport::new(sim.port(), mac, 7, LlcConfig::default(), Rng::new(i as u64));
            Endpoint::new(t, cfg.clone()).unwrap()
        })
        .collect();
    let b = v.pop().unwrap();
    let a = v.pop().unwrap();
    let (pb, pa) = suite::pair(&a, &b);
    (a, b, pb, pa)
}

/// The closing barrier, both ends at once.
fn finish(a: &SimEndpoint, b: &SimEndpoint, pb: u32, pa: u32) {
    std::thread::scope(|s| {
        s.spawn(|| suite::finish(a, pb));
        suite::finish(b, pa);
    });
}

fn region(n: usize) -> Arc<VecRegion> {
    Arc::new(VecRegion::new(vec![0xee; n]))
}

const ANY_TAG: Select = Select::Tagged {
    bits: 0,
    ignore: u64::MAX,
};

#[test]
fn tagged_untagged_and_remote_data_into_caller_memory() {
    let (a, b, pb, pa) = two();
    let big = Config::default().eager_limit * 5 + 123;
    let untagged_dst = region(64);
    let masked_dst = region(big);
    // Posted first: an untagged receive, and a tagged one ignoring the low byte.
    let ru = b.irecv_into(Source::Peer(pa), Select::Untagged, untagged_dst.clone());
    let rm = b.irecv_into(
        Source::Any,
        Select::Tagged {
            bits: 0xabcd_0000_0000_1200,
            ignore: 0xff,
        },
        masked_dst.clone(),
    );
    let s1 = a.isend_to(
        pb,
        Space::Tagged(0xabcd_0000_0000_1234),
        Some(77),
        payload(1, big).into(),
        false,
    );
    let s2 = a.isend_to(pb, Space::Untagged, Some(5), payload(2, 40).into(), false);
    a.inject_to(pb, Space::Tagged(3), None, &payload(3, 10))
        .unwrap();
    for s in [s1, s2] {
        a.wait_timeout(s, Some(WAIT)).unwrap();
    }
    let c = b.wait_timeout(rm, Some(WAIT)).unwrap();
    assert_eq!(
        (c.status.len, c.status.data, c.status.tag, c.status.context),
        (big, Some(77), 0x1234, 0xabcd_0000)
    );
    assert!(c.data.is_none());
    assert_eq!(masked_dst.snapshot(), payload(1, big));
    let c = b.wait_timeout(ru, Some(WAIT)).unwrap();
    assert_eq!((c.status.len, c.status.data), (40, Some(5)));
    assert_eq!(untagged_dst.snapshot()[..40], payload(2, 40)[..]);
    // The injected one, by probe then receive.
    let st = loop {
        if let Some(st) = b.iprobe_sel(Source::Any, ANY_TAG) {
            break st;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!((st.len, st.tag), (10, 3));
    assert!(b.iprobe_sel(Source::Any, Select::Untagged).is_none());
    let r = b.irecv_into(Source::Any, ANY_TAG, region(10));
    assert_eq!(b.wait_timeout(r, Some(WAIT)).unwrap().status.len, 10);
    // The rendezvous data went from the frames straight into the region.
    assert!(b.stats().rndv_bytes_placed > 0, "{:?}", b.stats());
    finish(&a, &b, pb, pa);
}

#[test]
fn truncation_keeps_the_prefix_and_the_sender_completes() {
    let (a, b, pb, pa) = two();
    let big = Config::default().eager_limit * 3;
    for (i, len) in [(0u64, 500usize), (1, big)] {
        let dst = region(100);
        let r = b.irecv_into(Source::Peer(pa), Select::Untagged, dst.clone());
        let s = a.isend_to(
            pb,
            Space::Untagged,
            None,
            Bytes::from(payload(i, len)),
            false,
        );
        a.wait_timeout(s, Some(WAIT))
            .expect("the sender completes normally");
        let c = b
            .wait_timeout(r, Some(WAIT))
            .expect("truncation is no error here");
        assert_eq!((c.status.len, c.status.msg_len), (100, len));
        assert_eq!(dst.snapshot(), payload(i, len)[..100]);
    }
    finish(&a, &b, pb, pa);
}

#[test]
fn claimed_messages_skip_later_receives_and_discard_completes_the_sender() {
    let (a, b, pb, pa) = two();
    let big = Config::default().eager_limit * 2;
    let sends = [
        a.isend_to(pb, Space::Tagged(1), None, payload(0, big).into(), false),
        a.isend_to(pb, Space::Tagged(1), None, payload(1, 16).into(), false),
        a.isend_to(pb, Space::Tagged(1), Some(9), payload(2, 24).into(), false),
    ];
    let one = Select::Tagged { bits: 1, ignore: 0 };
    let claim = |b: &SimEndpoint| loop {
        if let Some(c) = b.claim(Source::Peer(pa), one) {
            break c;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let (st, rndv) = claim(&b);
    assert_eq!(st.len, big);
    let (st, small) = claim(&b);
    assert_eq!(st.len, 16);
    // A receive now takes the third, past the two claimed.
    let r = b.irecv_into(Source::Any, one, region(64));
    let c = b.wait_timeout(r, Some(WAIT)).unwrap();
    assert_eq!((c.status.len, c.status.data), (24, Some(9)));
    b.discard(rndv);
    let dst = region(16);
    let r = b.irecv_claimed(small, dst.clone());
    b.wait_timeout(r, Some(WAIT)).unwrap();
    assert_eq!(dst.snapshot(), payload(1, 16));
    for s in sends {
        a.wait_timeout(s, Some(WAIT))
            .expect("every send completes, the discarded one too");
    }
    finish(&a, &b, pb, pa);
    assert_eq!(b.unexpected_bytes(), 0);
}

#[test]
fn an_endpoint_sends_to_itself_in_order_with_its_other_traffic() {
    let (a, b, pb, pa) = two();
    let me = a
        .add_peer(&a.local_addr())
        .expect("our own address is a peer");
    assert_eq!(a.connect(&a.local_addr()).unwrap(), me);
    assert_eq!(a.peer_addr(me), Some(a.local_addr()));
    let big = Config::default().eager_limit * 2 + 17;
    let one = Select::Tagged { bits: 1, ignore: 0 };
    let plan = [(0u64, 12usize), (1, big), (2, 30), (3, big), (4, 0)];
    let mut sends = Vec::new();
    for &(i, len) in &plan {
        sends.push(a.isend_to(me, Space::Tagged(1), Some(i), payload(i, len).into(), false));
        sends.push(a.isend_to(pb, Space::Tagged(1), Some(i), payload(i, len).into(), false));
    }
    a.inject_to(me, Space::Untagged, Some(99), b"to self")
        .unwrap();
    // Peek and claim work on messages to self like on any peer's.
    let st = a
        .iprobe_sel(Source::Peer(me), one)
        .expect("arrived at once");
    assert_eq!((st.source, st.len, st.data), (me, 12, Some(0)));
    let (_, first) = a.claim(Source::Any, one).unwrap();
    for &(i, len) in &plan[1..] {
        let dst = region(big);
        let r = a.irecv_into(Source::Peer(me), one, dst.clone());
        let c = a.wait_timeout(r, Some(WAIT)).unwrap();
        assert_eq!((c.status.len, c.status.data), (len, Some(i)), "message {i}");
        assert_eq!(dst.snapshot()[..len], payload(i, len)[..]);
    }
    let dst = region(12);
    let r = a.irecv_claimed(first, dst.clone());
    a.wait_timeout(r, Some(WAIT)).unwrap();
    assert_eq!(dst.snapshot(), payload(0, 12));
    let r = a.irecv(Source::Peer(me), msg_layer::Tag::Any, 0, vec![0; 8]);
    assert!(a.test(&r).is_none(), "untagged is not for an MPI receive");
    assert!(a.cancel(r));
    let r = a.irecv_into(Source::Any, Select::Untagged, region(8));
    assert_eq!(a.wait_timeout(r, Some(WAIT)).unwrap().status.data, Some(99));
    // B got the same messages over the link, in the same order.
    for &(i, len) in &plan {
        let r = b.irecv_into(Source::Peer(pa), one, region(big));
        let c = b.wait_timeout(r, Some(WAIT)).unwrap();
        assert_eq!((c.status.len, c.status.data), (len, Some(i)));
    }
    for s in sends {
        a.wait_timeout(s, Some(WAIT)).unwrap();
    }
    // One-sided access to our own memory.
    let mem = Arc::new(VecRegion::new(vec![0; 32]));
    let key = a.register(mem.clone());
    a.wait_timeout(a.put(me, key, 4, &b"mine"[..]), Some(WAIT))
        .unwrap();
    let got = a.wait_timeout(a.get(me, key, 3, 6), Some(WAIT)).unwrap();
    assert_eq!(got.data.unwrap(), b"\0mine\0");
    assert_eq!(a.unexpected_bytes(), 0);
    finish(&a, &b, pb, pa);
}

#[test]
fn a_multi_receive_buffer_takes_messages_until_released() {
    let (a, b, pb, pa) = two();
    let big = Config::default().eager_limit + 1000;
    let dst = region(big + 300);
    let m = b.irecv_multi(Source::Peer(pa), dst.clone(), 256);
    let sizes = [10usize, big, 20, 30];
    for (i, &n) in sizes.iter().enumerate() {
        let s = a.isend_to(
            pb,
            Space::Untagged,
            Some(i as u64),
            payload(i as u64, n).into(),
            false,
        );
        a.wait_timeout(s, Some(WAIT)).unwrap();
    }
    let mut pieces = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while pieces
        .last()
        .is_none_or(|p: &msg_layer::MultiPiece| !p.last)
    {
        pieces.extend(b.test_multi(m).expect("live until its last piece"));
        assert!(std::time::Instant::now() < deadline, "{pieces:?}");
    }
    // 10 + big + 20 leaves 270, then 30 leaves 240 < 256: released.
    let mut at = 0;
    for (i, piece) in pieces.iter().enumerate() {
        let st = piece.result.as_ref().unwrap();
        assert_eq!(
            (piece.offset, st.len, st.data),
            (at, sizes[i], Some(i as u64))
        );
        assert_eq!(
            dst.snapshot()[at..at + st.len],
            payload(i as u64, sizes[i])[..]
        );
        at += st.len;
    }
    assert_eq!(pieces.len(), 4);
    assert_eq!(b.test_multi(m), None);
    finish(&a, &b, pb, pa);
}
