//! Messages an engine sends to itself, beside its traffic with a real peer.

use std::sync::Arc;

use bytes::Bytes;

use super::p2p::MsgHead;
use super::tests::{addr, done, Outbox, Pair};
use super::*;
use crate::matching::{Rule, Select, Source, Space};
use crate::rma::VecRegion;

fn untagged(source: Source) -> Rule {
    Rule {
        source,
        select: Select::Untagged,
    }
}

fn tag(t: u64) -> Rule {
    Rule {
        source: Source::Any,
        select: Select::Tagged { bits: t, ignore: 0 },
    }
}

fn body(i: u8, n: usize) -> Bytes {
    Bytes::from(vec![i; n])
}

/// A's own peer, by its address.
fn own(p: &mut Pair) -> PeerId {
    match p.a.add_peer(addr(1)).unwrap() {
        AddPeer::Known(me) => me,
        AddPeer::Connect => panic!("no connection to ourselves"),
    }
}

#[test]
fn messages_to_self_match_complete_and_keep_their_order() {
    let cfg = Config {
        rndv_chunk: 5000,
        ..Config::default()
    };
    let big = cfg.eager_limit + 12_000;
    let mut p = Pair::new(cfg);
    let me = own(&mut p);
    assert_eq!(own(&mut p), me, "one peer for ourselves");
    assert_eq!(p.a.peer_addr(me), Some(addr(1)));
    // Posted first, then unexpected; small and large; MPI and libfabric.
    let first = p.a.irecv(tag(4), vec![0; big]);
    let sends = [
        p.a.isend(me, 4, 0, body(1, big)),
        p.a.send_msg(
            me,
            MsgHead::fabric(Space::Untagged, Some(8)),
            body(2, 10),
            false,
        ),
        p.a.isend(p.ab, 4, 0, body(3, 10)),
        p.a.send_msg(
            me,
            MsgHead::fabric(Space::Untagged, None),
            body(4, big),
            false,
        ),
        p.a.isend(me, 4, 0, body(5, 3)),
    ];
    p.a.transmit(&mut p.a_out);
    // All there before B took a packet; the rendezvous copied.
    let c = done(&mut p.a, first).unwrap();
    assert_eq!(
        (c.status.source, c.data.unwrap()),
        (me, body(1, big).to_vec())
    );
    assert_eq!(p.a.stats().rndv_bytes_copied, big as u64);
    assert_eq!(
        p.a.iprobe(untagged(Source::Peer(me))).unwrap().data,
        Some(8)
    );
    let (st, claimed) = p.a.claim(untagged(Source::Any)).unwrap();
    assert_eq!(st.len, 10);
    let dst = Arc::new(VecRegion::new(vec![0; big]));
    let r = p.a.irecv_into(untagged(Source::Peer(me)), dst.clone());
    p.a.transmit(&mut p.a_out);
    assert_eq!(
        done(&mut p.a, r).unwrap().status.len,
        big,
        "past the claimed one"
    );
    assert_eq!(dst.snapshot(), body(4, big).to_vec());
    let r = p.a.irecv_claimed(claimed, dst.clone());
    assert_eq!(done(&mut p.a, r).unwrap().status.data, Some(8));
    let r = p.a.irecv(tag(4), vec![0; 8]);
    assert_eq!(done(&mut p.a, r).unwrap().data.unwrap(), b"\x05\x05\x05");
    for s in sends {
        p.pump();
        assert!(done(&mut p.a, s).is_ok());
    }
    // The real peer got its message, through the transport.
    let r = p.b.irecv(tag(4), vec![0; 16]);
    assert_eq!(
        done(&mut p.b, r).unwrap().data.unwrap(),
        body(3, 10).to_vec()
    );
    assert_eq!(p.a.unexpected_bytes(), 0);
    assert!(p.a.queues_empty());
}

#[test]
fn sends_to_self_beyond_the_window_wait_and_resume_in_order() {
    let cfg = Config {
        eager_window: 64 * 1024,
        ..Config::default()
    };
    let limit = cfg.eager_limit;
    let mut p = Pair::new(cfg);
    let me = own(&mut p);
    let n = 10;
    let sends: Vec<u64> = (0..n)
        .map(|i| p.a.isend(me, 1, 0, body(i as u8, limit)))
        .collect();
    p.a.transmit(&mut Outbox::new());
    assert!(p.a.unexpected_bytes() <= 64 * 1024);
    assert!(!p.a.is_done(sends[n - 1]), "held for credit");
    for i in 0..n {
        let r = p.a.irecv(tag(1), vec![0; limit]);
        p.a.transmit(&mut Outbox::new());
        assert_eq!(done(&mut p.a, r).unwrap().data.unwrap()[0], i as u8);
    }
    for s in sends {
        assert!(done(&mut p.a, s).is_ok());
    }
}

#[test]
fn put_and_get_to_self() {
    let mut p = Pair::new(Config::default());
    let me = own(&mut p);
    let region = Arc::new(VecRegion::new(vec![0; 64]));
    let key = p.a.register(region.clone());
    let put = p.a.put(me, key, 8, Bytes::from_static(b"self"));
    let get = p.a.get(me, key, 7, vec![0; 6]);
    p.a.transmit(&mut Outbox::new());
    assert!(done(&mut p.a, put).is_ok());
    assert_eq!(done(&mut p.a, get).unwrap().data.unwrap(), b"\0self\0");
}
