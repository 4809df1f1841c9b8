//! The libfabric-facing paths of the engine, over the back-to-back pair of
//! `tests.rs`: 64-bit masked tags, the untagged space, remote data.

use std::sync::Arc;

use bytes::Bytes;

use super::p2p::MsgHead;
use super::tests::{done, Pair};
use super::*;
use crate::matching::{Rule, Select, Source, Space, Tag};
use crate::rma::VecRegion;

fn tagged(source: Source, bits: u64, ignore: u64) -> Rule {
    Rule {
        source,
        select: Select::Tagged { bits, ignore },
    }
}

fn untagged(source: Source) -> Rule {
    Rule {
        source,
        select: Select::Untagged,
    }
}

/// The payload a completed receive got.
fn got(e: &mut Engine, r: u64) -> (Status, Vec<u8>) {
    let c = done(e, r).expect("received");
    (c.status, c.data.expect("a buffer"))
}

#[test]
fn a_masked_receive_compares_only_the_bits_not_ignored() {
    let mut p = Pair::new(Config::default());
    let send = |p: &mut Pair, bits: u64, body: &'static [u8]| {
        let head = MsgHead::fabric(Space::Tagged(bits), None);
        p.a.send_msg(p.ab, head, Bytes::from_static(body), false)
    };
    send(&mut p, 0x1234_5678_0000_0001, b"one");
    send(&mut p, 0x1234_5678_0000_0002, b"two");
    send(&mut p, 0x9234_5678_0000_0001, b"high");
    p.pump();
    // Exact bits: the third only.
    let r =
        p.b.irecv(tagged(Source::Any, 0x9234_5678_0000_0001, 0), vec![0; 8]);
    let (st, body) = got(&mut p.b, r);
    assert_eq!(body, b"high");
    assert_eq!((st.tag, st.context), (1, 0x9234_5678));
    // Low bits ignored: the earliest of the other two.
    let r =
        p.b.irecv(tagged(Source::Any, 0x1234_5678_0000_0000, 0xff), vec![0; 8]);
    assert_eq!(got(&mut p.b, r).1, b"one");
    // A bit that differs and is compared: no match.
    let r = p.b.irecv(
        tagged(Source::Peer(p.ba), 0x1234_5678_0000_0003, 0),
        vec![0; 8],
    );
    assert!(!p.b.is_done(r));
    assert_eq!(p.b.iprobe(tagged(Source::Any, 0, u64::MAX)).unwrap().len, 3);
    // An MPI receive sees a 64-bit tag as context and tag.
    let mpi = crate::matching::Pattern {
        source: Source::Any,
        tag: Tag::Any,
        context: 0x1234_5678,
    };
    let r2 = p.b.irecv(mpi, vec![0; 8]);
    assert_eq!(got(&mut p.b, r2).1, b"two");
    assert!(!p.b.is_done(r), "still waiting for its tag");
}

#[test]
fn untagged_and_tagged_messages_never_cross_and_untagged_ones_come_in_order() {
    let mut p = Pair::new(Config::default());
    let len = Config::default().eager_limit + 100;
    let any_tagged = p.b.irecv(tagged(Source::Any, 0, u64::MAX), vec![0; len]);
    for (i, n) in [5usize, len, 7].into_iter().enumerate() {
        let head = MsgHead::fabric(Space::Untagged, None);
        p.a.send_msg(p.ab, head, Bytes::from(vec![i as u8; n]), false);
    }
    p.a.isend(p.ab, 0, 0, Bytes::from_static(b"tagged"));
    p.pump();
    // The wildcard tagged receive let the three untagged messages pass.
    assert_eq!(got(&mut p.b, any_tagged).1, b"tagged");
    assert!(p.b.iprobe(tagged(Source::Any, 0, u64::MAX)).is_none());
    for (i, n) in [5usize, len, 7].into_iter().enumerate() {
        let r = p.b.irecv(untagged(Source::Peer(p.ba)), vec![0; len]);
        p.pump();
        let (st, body) = got(&mut p.b, r);
        assert_eq!((body.len(), body[0]), (n, i as u8), "untagged message {i}");
        assert_eq!((st.tag, st.context, st.data), (0, 0, None));
    }
    // An untagged receive posted first is not taken by a tagged message.
    let r = p.b.irecv(untagged(Source::Any), vec![0; 8]);
    p.a.isend(p.ab, 0, 0, Bytes::from_static(b"no"));
    p.pump();
    assert!(!p.b.is_done(r));
}

#[test]
fn remote_data_reaches_the_receiver_eager_and_rendezvous() {
    let cfg = Config {
        rndv_chunk: 3000,
        ..Config::default()
    };
    let big = cfg.eager_limit + 5000;
    let mut p = Pair::new(cfg);
    let posted = p.b.irecv(untagged(Source::Any), vec![0; 16]);
    let e = p.a.send_msg(
        p.ab,
        MsgHead::fabric(Space::Untagged, Some(u64::MAX - 7)),
        Bytes::from_static(b"eager"),
        false,
    );
    let body: Vec<u8> = (0..big).map(|i| i as u8).collect();
    let head = MsgHead::fabric(Space::Tagged(42), Some(0xdada));
    let r = p.a.send_msg(p.ab, head, Bytes::from(body.clone()), false);
    // And an unexpected eager one, whose data comes from its kept header.
    let head = MsgHead::fabric(Space::Tagged(43), Some(9));
    p.a.send_msg(p.ab, head, Bytes::from_static(b"late"), false);
    p.pump();
    let (st, data) = got(&mut p.b, posted);
    assert_eq!(
        (data.as_slice(), st.data),
        (&b"eager"[..], Some(u64::MAX - 7))
    );
    assert_eq!(
        p.b.iprobe(tagged(Source::Any, 42, 0)).unwrap().data,
        Some(0xdada)
    );
    let rr = p.b.irecv(tagged(Source::Any, 42, 0), vec![0; big]);
    p.pump();
    let (st, data) = got(&mut p.b, rr);
    assert_eq!((st.data, st.len, st.msg_len), (Some(0xdada), big, big));
    assert_eq!(data, body);
    assert!(done(&mut p.a, e).is_ok() && done(&mut p.a, r).is_ok());
    let late = p.b.irecv(tagged(Source::Any, 43, 0), vec![0; 8]);
    assert_eq!(got(&mut p.b, late).0.data, Some(9));
    // MPI messages carry none.
    p.a.isend(p.ab, 1, 0, Bytes::from_static(b"mpi"));
    p.pump();
    let m = p.b.irecv(tagged(Source::Any, 1, 0), vec![0; 8]);
    assert_eq!(got(&mut p.b, m).0.data, None);
}

/// A region of `n` bytes set to 0xee, to see what a receive wrote.
fn region(n: usize) -> Arc<VecRegion> {
    Arc::new(VecRegion::new(vec![0xee; n]))
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 253) as u8).collect()
}

#[test]
fn a_receive_into_caller_memory_takes_eager_and_rendezvous_messages() {
    let cfg = Config {
        rndv_chunk: 4000,
        ..Config::default()
    };
    let big = cfg.eager_limit + 9000;
    let mut p = Pair::new(cfg);
    let (small_dst, big_dst) = (region(64), region(big + 10));
    let small = p.b.irecv_into(untagged(Source::Any), small_dst.clone());
    let large = p.b.irecv_into(tagged(Source::Any, 5, 0), big_dst.clone());
    p.a.send_msg(
        p.ab,
        MsgHead::fabric(Space::Untagged, Some(1)),
        Bytes::from(pattern(20)),
        false,
    );
    let s = p.a.send_msg(
        p.ab,
        MsgHead::fabric(Space::Tagged(5), None),
        Bytes::from(pattern(big)),
        false,
    );
    p.pump();
    let c = done(&mut p.b, small).unwrap();
    assert_eq!(
        (c.status.len, c.status.msg_len, c.status.data, c.data),
        (20, 20, Some(1), None)
    );
    assert_eq!(
        &small_dst.snapshot()[..21],
        &[pattern(20), vec![0xee]].concat()[..]
    );
    let c = done(&mut p.b, large).unwrap();
    assert_eq!((c.status.len, c.status.msg_len, c.data), (big, big, None));
    assert_eq!(big_dst.snapshot()[..big], pattern(big)[..]);
    assert_eq!(big_dst.snapshot()[big], 0xee, "nothing past the message");
    assert!(done(&mut p.a, s).is_ok());
}

#[test]
fn a_short_buffer_keeps_the_first_bytes_and_both_ends_complete() {
    let cfg = Config {
        rndv_chunk: 4000,
        ..Config::default()
    };
    let big = cfg.eager_limit + 9000;
    let mut p = Pair::new(cfg);
    // Eager, posted first; rendezvous, arrived first (unexpected).
    let e_dst = region(8);
    let e = p.b.irecv_into(untagged(Source::Any), e_dst.clone());
    let es = p.a.send_msg(
        p.ab,
        MsgHead::fabric(Space::Untagged, None),
        Bytes::from(pattern(100)),
        false,
    );
    let rs = p.a.send_msg(
        p.ab,
        MsgHead::fabric(Space::Tagged(9), Some(3)),
        Bytes::from(pattern(big)),
        false,
    );
    p.pump();
    let r_dst = region(5000);
    let r = p.b.irecv_into(tagged(Source::Any, 9, 0), r_dst.clone());
    let moved = p.pump();
    let c = done(&mut p.b, e).unwrap();
    assert_eq!((c.status.len, c.status.msg_len), (8, 100));
    assert_eq!(e_dst.snapshot(), pattern(8));
    let c = done(&mut p.b, r).unwrap();
    assert_eq!(
        (c.status.len, c.status.msg_len, c.status.data),
        (5000, big, Some(3))
    );
    assert_eq!(r_dst.snapshot(), pattern(5000));
    // CTS, the two pieces asked for (not the whole message), DONE.
    assert_eq!(moved, 4);
    assert_eq!(p.b.stats().rndv_bytes_copied, 5000);
    assert!(done(&mut p.a, es).is_ok() && done(&mut p.a, rs).is_ok());
    // An MPI receive still fails with Truncated.
    p.a.isend(p.ab, 1, 0, Bytes::from(pattern(10)));
    p.pump();
    let m = p.b.irecv(tagged(Source::Any, 1, 0), vec![0; 4]);
    assert!(matches!(
        done(&mut p.b, m),
        Err(Error::Truncated {
            message_len: 10,
            buffer_len: 4
        })
    ));
}

#[test]
fn a_claimed_message_is_matched_by_no_receive_and_is_received_or_discarded() {
    let cfg = Config::default();
    let big = cfg.eager_limit + 100;
    let mut p = Pair::new(cfg);
    let sends: Vec<u64> = [(7u64, 30usize), (7, big), (8, big), (7, 12)]
        .into_iter()
        .map(|(tag, n)| {
            p.a.send_msg(
                p.ab,
                MsgHead::fabric(Space::Tagged(tag), Some(tag)),
                Bytes::from(pattern(n)),
                false,
            )
        })
        .collect();
    p.pump();
    let sel7 = tagged(Source::Peer(p.ba), 7, 0);
    assert_eq!(p.b.iprobe(sel7).unwrap().len, 30, "peek leaves it");
    let (st, first) = p.b.claim(sel7).expect("a message to claim");
    assert_eq!((st.len, st.data), (30, Some(7)));
    let (st, second) = p.b.claim(sel7).expect("the next one");
    assert_eq!(st.len, big);
    // A receive posted now skips both claimed messages.
    let posted = p.b.irecv_into(sel7, region(64));
    let c = done(&mut p.b, posted).unwrap();
    assert_eq!(c.status.len, 12);
    let dst = region(40);
    let r = p.b.irecv_claimed(first, dst.clone());
    let c = done(&mut p.b, r).unwrap();
    assert_eq!((c.status.len, c.status.msg_len), (30, 30));
    assert_eq!(dst.snapshot()[..30], pattern(30)[..]);
    // A claimed rendezvous discarded: its sender completes, with nothing sent.
    p.b.discard(second);
    let (_, third) = p.b.claim(tagged(Source::Any, 8, 0)).unwrap();
    let dst = region(big);
    let r = p.b.irecv_claimed(third, dst.clone());
    p.pump();
    assert!(done(&mut p.b, r).is_ok());
    assert_eq!(dst.snapshot(), pattern(big));
    for s in sends {
        assert!(done(&mut p.a, s).is_ok());
    }
    assert!(p.b.claim(tagged(Source::Any, 0, u64::MAX)).is_none());
    assert_eq!(p.b.unexpected_bytes(), 0);
    assert_eq!(p.b.peers[p.ba as usize].unexpected, 0);
}

#[test]
fn injected_sends_are_forgotten_once_done_and_still_arrive_in_order() {
    let cfg = Config::default();
    let big = cfg.eager_limit + 1;
    let mut p = Pair::new(cfg);
    for n in [3, big, 4] {
        let head = MsgHead::fabric(Space::Untagged, None);
        p.a.inject_via(None::<&mut super::tests::Outbox>, p.ab, head, &pattern(n))
            .unwrap();
    }
    assert_eq!(p.a.detached_len(), 1, "only the rendezvous has a request");
    p.pump();
    for n in [3, big, 4] {
        let r = p.b.irecv_into(untagged(Source::Any), region(big));
        p.pump();
        assert_eq!(done(&mut p.b, r).unwrap().status.len, n);
    }
    p.a.reap_detached();
    assert_eq!(p.a.detached_len(), 0);
    assert_eq!(p.a.reqs.iter().count(), 0, "no request left behind");
    assert!(matches!(
        p.a.inject_via(
            None::<&mut super::tests::Outbox>,
            99,
            MsgHead::fabric(Space::Untagged, None),
            &[]
        ),
        Err(Error::UnknownPeer(99))
    ));
}

#[test]
fn a_multi_receive_buffer_packs_messages_and_says_when_it_is_released() {
    let cfg = Config {
        rndv_chunk: 3000,
        ..Config::default()
    };
    let big = cfg.eager_limit + 4000;
    let mut p = Pair::new(cfg);
    let send = |p: &mut Pair, i: u8, n: usize| {
        let head = MsgHead::fabric(Space::Untagged, Some(i as u64));
        p.a.send_msg(p.ab, head, Bytes::from(vec![i; n]), false)
    };
    // One waiting already, then posted: it goes in first.
    send(&mut p, 1, 100);
    p.pump();
    let dst = region(big + 400);
    let m = p.b.irecv_multi(Source::Any, dst.clone(), 300);
    let tagged_one = p.a.isend(p.ab, 0, 0, Bytes::from_static(b"not for it"));
    send(&mut p, 2, 50);
    send(&mut p, 3, big);
    send(&mut p, 4, 60);
    p.pump();
    let pieces = p.b.take_multi(m).expect("the buffer is live");
    let got: Vec<_> = pieces
        .iter()
        .map(|x| {
            let st = x.result.as_ref().unwrap();
            (x.offset, st.len, st.data, x.last)
        })
        .collect();
    // 100 + 50 + big leaves 250 < 300: released after the third, whose
    // piece (a rendezvous, last in) carries the flag.
    assert_eq!(
        got,
        vec![
            (0, 100, Some(1), false),
            (100, 50, Some(2), false),
            (150, big, Some(3), true)
        ]
    );
    let snap = dst.snapshot();
    assert_eq!((snap[0], snap[99], snap[100], snap[149]), (1, 1, 2, 2));
    assert!(snap[150..150 + big].iter().all(|&b| b == 3));
    assert_eq!(snap[150 + big], 0xee, "nothing past the last message");
    assert_eq!(p.b.take_multi(m), None, "forgotten after its last piece");
    // The fourth waits for another receive; the tagged one was never its.
    assert!(done(&mut p.a, tagged_one).is_ok());
    let r = p.b.irecv_into(untagged(Source::Any), region(64));
    assert_eq!(done(&mut p.b, r).unwrap().status.data, Some(4));
    assert_eq!(p.b.iprobe(tagged(Source::Any, 0, 0)).unwrap().len, 10);
}

#[test]
fn a_multi_receive_buffer_cuts_what_does_not_fit_and_can_be_cancelled() {
    let mut p = Pair::new(Config::default());
    let m = p.b.irecv_multi(Source::Peer(p.ba), region(64), 0);
    let head = MsgHead::fabric(Space::Untagged, None);
    p.a.send_msg(p.ab, head, Bytes::from(vec![7; 40]), false);
    p.a.send_msg(p.ab, head, Bytes::from(vec![8; 40]), false);
    p.pump();
    let pieces = p.b.take_multi(m).unwrap();
    let st = pieces[1].result.as_ref().unwrap();
    assert_eq!((pieces[1].offset, st.len, st.msg_len), (40, 24, 40));
    assert!(pieces[1].last, "a full buffer is released");
    assert!(!p.b.cancel_multi(m), "released already");
    // Cancelled with its pieces taken: a last piece says so.
    let m = p.b.irecv_multi(Source::Any, region(64), 0);
    p.a.send_msg(p.ab, head, Bytes::from(vec![9; 10]), false);
    p.pump();
    assert_eq!(p.b.take_multi(m).unwrap().len(), 1);
    assert!(p.b.cancel_multi(m));
    let end = p.b.take_multi(m).unwrap();
    assert_eq!((end.len(), end[0].last, end[0].offset), (1, true, 10));
    assert_eq!(end[0].result, Err(Error::Cancelled));
    assert_eq!(p.b.take_multi(m), None);
}
