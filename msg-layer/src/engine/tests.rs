//! The engine alone: two engines wired back to back by the test, with no
//! transport. Every packet one hands out is fed to the other as the
//! transport would deliver it, so each protocol step can be checked.

use std::sync::Arc;

use bytes::Bytes;

use super::*;
use crate::config::INITIAL_CREDIT;
use crate::error::PeerEnd;
use crate::matching::{Pattern, Source, Tag};
use crate::rma::{RegionKey, VecRegion};
use crate::transport::{ConnectionError, FailureCause};
use crate::wire::HEADER_LEN;

/// The test's transport stand-in: records packets, and takes only `room`
/// more of them before pushing back.
pub(super) struct Outbox {
    pub sent: Vec<(ConnId, Vec<u8>)>,
    pub room: usize,
    /// What [`Outlet::bundle_len`] answers (0: no bundles).
    bundle_len: usize,
}

impl Outbox {
    pub fn new() -> Self {
        Outbox {
            sent: Vec::new(),
            room: usize::MAX,
            bundle_len: 0,
        }
    }
}

impl Outlet for Outbox {
    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        if self.room == 0 {
            return Err(SendError::WouldBlock);
        }
        self.room -= 1;
        let mut p = head.to_vec();
        p.extend_from_slice(&body);
        self.sent.push((conn, p));
        Ok(())
    }

    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError> {
        Err(TransportError::Address {
            addr: to.to_string(),
            reason: "the test outbox connects nothing".into(),
        })
    }

    fn peers_accept(&self) -> bool {
        false
    }

    fn bundle_len(&self) -> usize {
        self.bundle_len
    }
}

/// Connection id both sides use for their one connection.
pub(super) const CONN: ConnId = 1;

pub(super) struct Pair {
    pub a: Engine,
    pub b: Engine,
    pub a_out: Outbox,
    pub b_out: Outbox,
    /// B as A knows it, and A as B knows it.
    pub ab: PeerId,
    pub ba: PeerId,
}

pub(super) fn addr(n: u8) -> Addr {
    format!("[02:00:00:00:00:{n:02x}]:7").parse().unwrap()
}

impl Pair {
    /// A connects to B; both greet and learn each other.
    pub fn new(cfg: Config) -> Pair {
        let mut a = Engine::new(addr(1), cfg.clone()).unwrap();
        let mut b = Engine::new(addr(2), cfg).unwrap();
        let ab = a.connected(addr(2), CONN);
        b.handle_event(TransportEvent::Accepted(CONN));
        let mut pair = Pair {
            a,
            b,
            a_out: Outbox::new(),
            b_out: Outbox::new(),
            ab,
            ba: PeerId::MAX,
        };
        pair.pump();
        pair.ba = pair.b.connected_peer(&addr(1)).expect("B knows A");
        pair
    }

    /// Move packets both ways until neither engine has anything to send.
    /// Returns how many moved.
    pub fn pump(&mut self) -> usize {
        let mut moved = 0;
        loop {
            self.a.transmit(&mut self.a_out);
            self.b.transmit(&mut self.b_out);
            let from_a = std::mem::take(&mut self.a_out.sent);
            let from_b = std::mem::take(&mut self.b_out.sent);
            if from_a.is_empty() && from_b.is_empty() {
                return moved;
            }
            moved += from_a.len() + from_b.len();
            for (c, p) in from_a {
                self.b.handle_event(TransportEvent::Message(c, p));
            }
            for (c, p) in from_b {
                self.a.handle_event(TransportEvent::Message(c, p));
            }
        }
    }
}

fn any_from(p: PeerId, tag: u32) -> Pattern {
    Pattern {
        source: Source::Peer(p),
        tag: Tag::Is(tag),
        context: 0,
    }
}

pub(super) fn done(e: &mut Engine, r: u64) -> Result<Completion, Error> {
    assert!(e.is_done(r), "request {r} is still pending");
    e.take(r).expect("complete")
}

#[test]
fn hello_identifies_both_ends_and_grants_the_window() {
    let cfg = Config {
        eager_window: 1 << 20,
        ..Config::default()
    };
    let p = Pair::new(cfg);
    assert_eq!(p.a.peer_addr(p.ab), Some(addr(2)));
    assert_eq!(p.b.peer_addr(p.ba), Some(addr(1)));
    // Each side may now use the whole window the other granted.
    assert_eq!(p.a.peers[p.ab as usize].credit, 1 << 20);
    assert_eq!(p.b.peers[p.ba as usize].credit, 1 << 20);
    assert!(p.a.sends_now(p.ab) && p.b.sends_now(p.ba));
}

#[test]
fn eager_messages_match_posted_and_unexpected_receives_in_order() {
    let mut p = Pair::new(Config::default());
    let posted = p.b.irecv(any_from(p.ba, 5), vec![0; 64]);
    let s1 = p.a.isend(p.ab, 5, 0, Bytes::from_static(b"first"));
    let s2 = p.a.isend(p.ab, 5, 0, Bytes::from_static(b"second"));
    p.pump();
    // Eager sends complete when handed out.
    assert!(done(&mut p.a, s1).is_ok() && done(&mut p.a, s2).is_ok());
    let c = done(&mut p.b, posted).unwrap();
    assert_eq!(c.data.as_deref(), Some(&b"first"[..]));
    assert_eq!(c.status.source, p.ba);
    // The second waited as unexpected, counted in the credit it uses.
    assert_eq!(p.b.stats().unexpected, 1);
    assert_eq!(p.b.unexpected_bytes(), HEADER_LEN + 6);
    let probe = p.b.iprobe(any_from(p.ba, 5)).expect("visible to probe");
    assert_eq!(probe.len, 6);
    let late = p.b.irecv(any_from(p.ba, 5), vec![0; 64]);
    let c = done(&mut p.b, late).unwrap();
    assert_eq!(c.data.as_deref(), Some(&b"second"[..]));
    assert_eq!(p.b.unexpected_bytes(), 0);
    assert_eq!(p.b.stats().received, 2);
}

#[test]
fn a_sender_out_of_credit_waits_and_resumes_in_order_as_receives_match() {
    let cfg = Config {
        eager_window: INITIAL_CREDIT,
        ..Config::default()
    };
    let limit = cfg.eager_limit;
    let mut p = Pair::new(cfg);
    let n = 3 * INITIAL_CREDIT as usize / (limit + HEADER_LEN) + 1;
    let sends: Vec<u64> = (0..n)
        .map(|i| p.a.isend(p.ab, 9, 0, Bytes::from(vec![i as u8; limit])))
        .collect();
    p.pump();
    // B buffers at most the window it granted; A holds the rest, in order.
    assert!(p.b.unexpected_bytes() <= INITIAL_CREDIT as usize);
    let arrived = p.b.stats().unexpected as usize;
    assert!(arrived > 0 && arrived < n, "{arrived} of {n} went out");
    assert!(p.a.stats().credit_stalls > 0);
    assert!(!p.a.sends_now(p.ab), "the queue is held for credit");
    assert!(!p.a.is_done(sends[n - 1]));
    // Matching returns credit (explicitly once a quarter of the window is
    // owed), and the queue drains, in the order posted.
    for i in 0..n {
        let r = p.b.irecv(any_from(p.ba, 9), vec![0; limit]);
        p.pump();
        let c = done(&mut p.b, r).unwrap();
        assert_eq!(c.data.unwrap()[0], i as u8, "message {i} out of order");
    }
    for r in sends {
        assert!(done(&mut p.a, r).is_ok());
    }
    assert_eq!(p.b.unexpected_bytes(), 0);
}

#[test]
fn a_rendezvous_waits_for_a_late_receive_then_moves_the_data() {
    let cfg = Config {
        rndv_chunk: 1000,
        ..Config::default()
    };
    let len = cfg.eager_limit + 2500;
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let mut p = Pair::new(cfg);
    let s = p.a.isend(p.ab, 3, 1, Bytes::from(data.clone()));
    p.pump();
    // Only the announcement travelled; the sender keeps its data.
    assert!(!p.a.is_done(s));
    assert_eq!(p.b.unexpected_bytes(), HEADER_LEN);
    assert_eq!(p.a.stats().rndv_sent, 1);
    let r = p.b.irecv(
        Pattern {
            source: Source::Any,
            tag: Tag::Any,
            context: 1,
        },
        vec![0; len + 10],
    );
    // CTS, the data in pieces of rndv_chunk, DONE.
    let moved = p.pump();
    assert_eq!(moved, 1 + len.div_ceil(1000) + 1);
    let c = done(&mut p.b, r).unwrap();
    assert_eq!(c.status.len, len);
    assert_eq!(c.data.unwrap(), data);
    assert!(done(&mut p.a, s).is_ok());
    // No transport placed anything: the engine copied every byte.
    assert_eq!(p.b.stats().rndv_bytes_copied, len as u64);
    assert_eq!(p.b.stats().rndv_bytes_placed, 0);
}

#[test]
fn a_rendezvous_into_a_short_buffer_is_refused_and_both_ends_complete() {
    let mut p = Pair::new(Config::default());
    let len = Config::default().eager_limit + 1;
    let s = p.a.isend(p.ab, 3, 0, Bytes::from(vec![1; len]));
    let r = p.b.irecv(any_from(p.ba, 3), vec![0; 10]);
    p.pump();
    assert_eq!(
        done(&mut p.b, r),
        Err(Error::Truncated {
            message_len: len,
            buffer_len: 10
        })
    );
    // MPI semantics: the send completes; the receiver reports truncation.
    assert!(done(&mut p.a, s).is_ok());
}

#[test]
fn rma_to_a_deregistered_region_is_refused_with_the_reason() {
    let mut p = Pair::new(Config::default());
    let region = Arc::new(VecRegion::new(vec![0; 100]));
    let key = p.b.register(region.clone());
    let put = p.a.put(p.ab, key, 10, Bytes::from_static(b"abc"));
    p.pump();
    assert!(done(&mut p.a, put).is_ok());
    assert_eq!(&region.snapshot()[10..13], b"abc");
    let get = p.a.get(p.ab, key, 9, vec![0; 5]);
    p.pump();
    assert_eq!(done(&mut p.a, get).unwrap().data.unwrap(), b"\0abc\0");
    // Outside the region: refused, the region untouched.
    let far = p.a.put(p.ab, key, 99, Bytes::from_static(b"xy"));
    p.pump();
    assert!(matches!(done(&mut p.a, far), Err(Error::RmaRefused(why)) if why.contains("outside")));
    assert!(p.b.deregister(key));
    let put = p.a.put(p.ab, key, 0, Bytes::from_static(b"late"));
    let get = p.a.get(p.ab, key, 0, vec![0; 4]);
    p.pump();
    for r in [put, get] {
        match done(&mut p.a, r) {
            Err(Error::RmaRefused(why)) => assert!(why.contains("no region"), "{why}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(&region.snapshot()[..4], &[0; 4]);
}

#[test]
fn a_transport_that_pushes_back_holds_the_queue_until_it_takes_more() {
    let mut p = Pair::new(Config::default());
    p.a_out.room = 1;
    let sends: Vec<u64> = (0..3u8)
        .map(|i| p.a.isend(p.ab, 1, 0, Bytes::from(vec![i; 4])))
        .collect();
    p.a.transmit(&mut p.a_out);
    assert_eq!(p.a_out.sent.len(), 1);
    assert!(p.a.stats().transport_stalls > 0);
    assert!(p.a.is_done(sends[0]) && !p.a.is_done(sends[1]));
    assert!(!p.a.queues_empty());
    p.a_out.room = usize::MAX;
    p.pump();
    assert!(p.a.queues_empty());
    for (i, r) in sends.into_iter().enumerate() {
        assert!(done(&mut p.a, r).is_ok());
        let got = p.b.irecv(any_from(p.ba, 1), vec![0; 4]);
        assert_eq!(done(&mut p.b, got).unwrap().data.unwrap(), vec![i as u8; 4]);
    }
}

#[test]
fn a_failed_peer_fails_what_depends_on_it_and_an_orderly_close_says_so() {
    let mut p = Pair::new(Config::default());
    let len = Config::default().eager_limit + 1;
    let rndv = p.a.isend(p.ab, 1, 0, Bytes::from(vec![0; len]));
    let recv = p.a.irecv(any_from(p.ab, 2), vec![0; 8]);
    let get = p.a.get(p.ab, RegionKey(42), 0, vec![0; 8]);
    p.a.transmit(&mut p.a_out);
    let silent = FailureCause::Connection(ConnectionError::RetransmitLimit(8));
    p.a.handle_event(TransportEvent::Closed(CONN, Some(silent.clone())));
    for r in [rndv, recv, get] {
        match done(&mut p.a, r) {
            Err(Error::PeerFailed { peer, end }) => {
                assert_eq!(peer, p.ab);
                assert_eq!(end, PeerEnd::Failed(silent.clone().into()));
            }
            other => panic!("expected the peer's failure, got {other:?}"),
        }
    }
    assert_eq!(p.a.failures.len(), 1);
    assert_eq!(p.a.stats().peers_failed, 1);
    // Later operations fail at once, with the same cause.
    let late = p.a.isend(p.ab, 1, 0, Bytes::from_static(b"x"));
    assert!(matches!(
        done(&mut p.a, late),
        Err(Error::PeerFailed { .. })
    ));
    // B's side ends in order.
    p.b.handle_event(TransportEvent::Closed(CONN, None));
    assert!(matches!(
        &p.b.failures[0].error,
        Error::PeerFailed {
            end: PeerEnd::Closed,
            ..
        }
    ));
}

#[test]
fn what_a_peer_sent_before_it_ended_can_still_be_received() {
    let mut p = Pair::new(Config::default());
    let big = Config::default().eager_limit + 1;
    // A sends two eager messages and announces a rendezvous, then closes;
    // B posts nothing until after the close (a client that sends and exits).
    p.a.isend(p.ab, 1, 0, Bytes::from_static(b"first"));
    p.a.isend(p.ab, 1, 0, Bytes::from_static(b"second"));
    p.a.isend(p.ab, 2, 0, Bytes::from(vec![7; big]));
    p.pump();
    assert_eq!(p.b.unexpected_bytes(), 3 * HEADER_LEN + 11);
    p.b.handle_event(TransportEvent::Closed(CONN, None));
    assert_eq!(p.b.failures.len(), 1, "the end is reported at once");
    // The rendezvous can no longer deliver: its announcement is gone.
    assert_eq!(p.b.unexpected_bytes(), 2 * HEADER_LEN + 11);
    for want in [&b"first"[..], b"second"] {
        let r = p.b.irecv(any_from(p.ba, 1), vec![0; 64]);
        assert_eq!(done(&mut p.b, r).unwrap().data.as_deref(), Some(want));
    }
    assert_eq!(p.b.unexpected_bytes(), 0);
    // Past what arrived, receives naming the peer fail with its end.
    for tag in [1, 2] {
        let r = p.b.irecv(any_from(p.ba, tag), vec![0; big]);
        assert!(matches!(
            done(&mut p.b, r),
            Err(Error::PeerFailed {
                end: PeerEnd::Closed,
                ..
            })
        ));
    }
    p.pump();
}

#[test]
fn malformed_and_out_of_place_packets_are_dropped_and_counted() {
    let mut p = Pair::new(Config::default());
    let before = p.b.stats().bad_packets;
    // Too short for a header.
    p.b.handle_event(TransportEvent::Message(CONN, vec![1, 2, 3]));
    // Data for a receive that does not exist.
    let mut h = crate::wire::Header::new(crate::wire::Kind::Data);
    h.id = 999;
    p.b.handle_event(TransportEvent::Message(CONN, h.encode().to_vec()));
    // Anything but Hello on a connection not yet identified.
    p.b.handle_event(TransportEvent::Accepted(2));
    let eager = crate::wire::Header::tagged(crate::wire::Kind::Eager, 0, 0);
    p.b.handle_event(TransportEvent::Message(2, eager.encode().to_vec()));
    assert_eq!(p.b.stats().bad_packets, before + 3);
    // Nothing else changed: the peer still works.
    let r = p.b.irecv(any_from(p.ba, 4), vec![0; 2]);
    let _ = p.a.isend(p.ab, 4, 0, Bytes::from_static(b"ok"));
    p.pump();
    assert_eq!(done(&mut p.b, r).unwrap().data.unwrap(), b"ok");
}

/// Small sends queued together leave in bundles of at most `bundle_len`
/// bytes, in order, around a long one that leaves alone; the receiver gets
/// each as if it had come alone, expected or not.
#[test]
fn queued_small_sends_leave_in_bundles_in_order() {
    let mut p = Pair::new(Config::default());
    p.a_out.bundle_len = 1400;
    let lens: Vec<usize> = (0..40)
        .map(|i| if i == 20 { 5000 } else { i * 7 })
        .collect();
    let body = |i: usize| Bytes::from(vec![i as u8; lens[i]]);
    // Half the receives posted first, the rest after the data arrived.
    let mut recvs: Vec<u64> = (0..20)
        .map(|i| p.b.irecv(any_from(p.ba, 9), vec![0; lens[i]]))
        .collect();
    let sends: Vec<u64> = (0..40).map(|i| p.a.isend(p.ab, 9, 0, body(i))).collect();
    p.a.transmit(&mut p.a_out);
    let packets = p.a_out.sent.len();
    let s = p.a.stats().clone();
    assert!(
        s.bundles_sent >= 2 && s.bundled == 39 && packets == s.bundles_sent as usize + 1,
        "{packets} packets, {s:?}"
    );
    assert!(p
        .a_out
        .sent
        .iter()
        .all(|(_, pk)| pk.len() <= HEADER_LEN + 5000));
    for r in sends {
        assert!(
            done(&mut p.a, r).is_ok(),
            "a bundled send completes when handed over"
        );
    }
    p.pump();
    recvs.extend((20..40).map(|i| p.b.irecv(any_from(p.ba, 9), vec![0; lens[i]])));
    for (i, r) in recvs.into_iter().enumerate() {
        assert_eq!(
            done(&mut p.b, r).unwrap().data.unwrap(),
            body(i),
            "message {i}"
        );
    }
    assert_eq!(p.b.stats().bad_packets, 0);
}

/// A bundle holding something other than Eager or Am, or cut short, is
/// counted as malformed from there on; what came before it stands.
#[test]
fn malformed_bundles_are_dropped_from_the_bad_packet_on() {
    use crate::wire::{Header, Kind};
    let mut p = Pair::new(Config::default());
    let item = |h: Header, body: &[u8]| {
        let mut v = ((HEADER_LEN + body.len()) as u16).to_le_bytes().to_vec();
        v.extend_from_slice(&h.encode());
        v.extend_from_slice(body);
        v
    };
    let mut eager = Header::tagged(Kind::Eager, 3, 0);
    eager.len = 2;
    let bundle = |items: &[Vec<u8>]| {
        let mut v = Header::new(Kind::Bundle).encode().to_vec();
        for i in items {
            v.extend_from_slice(i);
        }
        v
    };
    let before = p.b.stats().bad_packets;
    let rts = Header::tagged(Kind::Rts, 3, 0);
    let pk = bundle(&[item(eager, b"ok"), item(rts, b""), item(eager, b"no")]);
    p.b.handle_event(TransportEvent::Message(CONN, pk));
    let mut cut = bundle(&[item(eager, b"k2")]);
    cut.extend_from_slice(&item(eager, b"xx")[..10]);
    p.b.handle_event(TransportEvent::Message(CONN, cut));
    assert_eq!(p.b.stats().bad_packets, before + 2);
    let r1 = p.b.irecv(any_from(p.ba, 3), vec![0; 2]);
    let r2 = p.b.irecv(any_from(p.ba, 3), vec![0; 2]);
    let r3 = p.b.irecv(any_from(p.ba, 3), vec![0; 2]);
    assert_eq!(done(&mut p.b, r1).unwrap().data.unwrap(), b"ok");
    assert_eq!(done(&mut p.b, r2).unwrap().data.unwrap(), b"k2");
    assert!(!p.b.is_done(r3), "nothing after the bad packets");
}

/// Bundles go only to a peer whose `Hello` says it takes them: an older
/// peer gets every packet alone (it would drop a bundle as unknown).
#[test]
fn a_peer_that_does_not_announce_bundles_gets_every_packet_alone() {
    use crate::wire::{flags, Header, Kind};
    let mut a = Engine::new(addr(1), Config::default()).unwrap();
    let ab = a.connected(addr(2), CONN);
    let mut out = Outbox::new();
    out.bundle_len = 1400;
    a.transmit(&mut out);
    let ours = Header::decode(&out.sent[0].1).unwrap();
    assert_eq!(
        (ours.kind, ours.flags & flags::BUNDLES),
        (Kind::Hello, flags::BUNDLES)
    );
    out.sent.clear();
    let mut hello = Header::new(Kind::Hello);
    hello.len = INITIAL_CREDIT as u64;
    let mut pk = hello.encode().to_vec();
    pk.extend_from_slice(addr(2).to_string().as_bytes());
    a.handle_event(TransportEvent::Message(CONN, pk));
    for i in 0..10u8 {
        let _ = a.isend(ab, 1, 0, Bytes::from(vec![i; 8]));
    }
    a.transmit(&mut out);
    assert_eq!(out.sent.len(), 10);
    assert_eq!(a.stats().bundles_sent, 0);
}

#[test]
fn a_small_copy_equals_copy_from_slice() {
    for n in 0..=40usize {
        let src: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
        let mut dst = vec![0xffu8; n];
        super::p2p::copy_small(&mut dst, &src);
        assert_eq!(dst, src, "length {n}");
    }
}
