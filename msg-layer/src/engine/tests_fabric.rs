//! The libfabric-facing paths of the engine, over the back-to-back pair of
//! `tests.rs`: 64-bit masked tags, the untagged space, remote data.

use bytes::Bytes;

use super::p2p::MsgHead;
use super::tests::{done, Pair};
use super::*;
use crate::matching::{Rule, Select, Source, Space, Tag};

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
    let r = p.b.irecv(tagged(Source::Any, 0x9234_5678_0000_0001, 0), vec![0; 8]);
    let (st, body) = got(&mut p.b, r);
    assert_eq!(body, b"high");
    assert_eq!((st.tag, st.context), (1, 0x9234_5678));
    // Low bits ignored: the earliest of the other two.
    let r = p.b.irecv(tagged(Source::Any, 0x1234_5678_0000_0000, 0xff), vec![0; 8]);
    assert_eq!(got(&mut p.b, r).1, b"one");
    // A bit that differs and is compared: no match.
    let r = p.b.irecv(tagged(Source::Peer(p.ba), 0x1234_5678_0000_0003, 0), vec![0; 8]);
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
    assert_eq!((data.as_slice(), st.data), (&b"eager"[..], Some(u64::MAX - 7)));
    assert_eq!(p.b.iprobe(tagged(Source::Any, 42, 0)).unwrap().data, Some(0xdada));
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
