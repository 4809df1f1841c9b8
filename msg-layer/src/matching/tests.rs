//! The matcher's rules, by example and by property.

use super::*;
use proptest::prelude::*;

fn env(source: PeerId, tag: u32) -> Envelope {
    Envelope {
        source,
        tag,
        context: 0,
        untagged: false,
    }
}

fn pat(source: Source, tag: Tag) -> Pattern {
    Pattern {
        source,
        tag,
        context: 0,
    }
}

#[test]
fn posted_first_or_arrived_first() {
    let mut m: Matcher<&str, u32> = Matcher::new();
    assert!(matches!(
        m.post(pat(Source::Peer(1), Tag::Is(5)), "r1"),
        Posting::Queued(_)
    ));
    let got = m
        .arrive(env(1, 5), 10, 100)
        .expect("matches the posted receive");
    assert_eq!((got.recv, got.msg, got.len), ("r1", 100, 10));
    assert!(m.arrive(env(1, 6), 20, 200).is_none());
    assert_eq!(m.unexpected_bytes(), 20);
    match m.post(pat(Source::Peer(1), Tag::Is(6)), "r2") {
        Posting::Matched(x) => assert_eq!((x.recv, x.msg, x.env), ("r2", 200, env(1, 6))),
        other => panic!("{other:?}"),
    }
    assert_eq!(m.unexpected_bytes(), 0);
}

#[test]
fn wildcards_and_contexts() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    m.post(pat(Source::Any, Tag::Is(3)), 1);
    m.post(pat(Source::Peer(2), Tag::Any), 2);
    m.post(
        Pattern {
            source: Source::Any,
            tag: Tag::Any,
            context: 9,
        },
        3,
    );
    assert_eq!(
        m.arrive(env(2, 3), 0, 0).unwrap().recv,
        1,
        "earliest posted wins"
    );
    assert_eq!(m.arrive(env(2, 3), 0, 0).unwrap().recv, 2);
    assert!(
        m.arrive(env(4, 4), 0, 0).is_none(),
        "context 9 receive does not see context 0"
    );
    let e9 = Envelope {
        source: 4,
        tag: 4,
        context: 9,
        untagged: false,
    };
    assert_eq!(m.arrive(e9, 0, 0).unwrap().recv, 3);
}

#[test]
fn non_overtaking() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    m.arrive(env(1, 7), 0, 1);
    m.arrive(env(1, 7), 0, 2);
    m.arrive(env(1, 8), 0, 3);
    let take = |m: &mut Matcher<u32, u32>, p| match m.post(p, 0) {
        Posting::Matched(x) => x.msg,
        Posting::Queued(_) => panic!("nothing matched"),
    };
    assert_eq!(take(&mut m, pat(Source::Any, Tag::Any)), 1);
    assert_eq!(
        take(&mut m, pat(Source::Peer(1), Tag::Is(8))),
        3,
        "a tag selects past earlier messages"
    );
    assert_eq!(take(&mut m, pat(Source::Peer(1), Tag::Any)), 2);
}

#[test]
fn probe_cancel_and_peer_removal() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    assert_eq!(m.probe(pat(Source::Any, Tag::Any)), None);
    m.arrive(env(3, 1), 42, 0);
    assert_eq!(
        m.probe(pat(Source::Any, Tag::Any)),
        Some((env(3, 1), 42, &0))
    );
    assert_eq!(m.unexpected_len(), 1, "probe leaves the message");
    let Posting::Queued(id) = m.post(pat(Source::Peer(5), Tag::Any), 7) else {
        panic!()
    };
    assert_eq!(m.cancel(id), Some(7));
    assert_eq!(m.cancel(id), None, "cancel twice");
    assert!(
        m.arrive(env(5, 0), 0, 0).is_none(),
        "cancelled receive does not match"
    );
    m.post(pat(Source::Peer(5), Tag::Is(99)), 8);
    m.post(pat(Source::Any, Tag::Is(99)), 9);
    assert_eq!(m.remove_peer(5, |_| false), (vec![8], 1));
    assert_eq!(m.posted_len(), 1);
    assert_eq!((m.unexpected_len(), m.unexpected_bytes()), (1, 42));
    assert_eq!(m.remove_peer(3, |_| true), (Vec::<u32>::new(), 0));
    assert_eq!((m.unexpected_len(), m.unexpected_bytes()), (1, 42), "kept");
    assert_eq!(m.remove_peer(3, |_| false), (Vec::<u32>::new(), 1));
    assert_eq!((m.unexpected_len(), m.unexpected_bytes()), (0, 0));
}

fn tagged(source: Source, bits: u64, ignore: u64) -> Rule {
    Rule {
        source,
        select: Select::Tagged { bits, ignore },
    }
}

fn untagged(source: PeerId) -> Envelope {
    Envelope {
        untagged: true,
        ..env(source, 0)
    }
}

#[test]
fn masked_bits_compare_only_what_is_not_ignored() {
    let e = Envelope {
        source: 1,
        tag: 0x0000_00f5,
        context: 0x8000_0001,
        untagged: false,
    };
    assert_eq!(e.bits(), 0x8000_0001_0000_00f5);
    assert!(
        tagged(Source::Any, 0x8000_0001_0000_00f5, 0).accepts(&e),
        "exact"
    );
    assert!(!tagged(Source::Any, 0x8000_0001_0000_00f4, 0).accepts(&e));
    assert!(
        tagged(Source::Any, 0x8000_0001_0000_00f4, 1).accepts(&e),
        "bit 0 ignored"
    );
    assert!(
        !tagged(Source::Any, 0x0000_0001_0000_00f5, 0).accepts(&e),
        "high bit compared"
    );
    assert!(tagged(Source::Any, 0x0000_0001_0000_00f5, 1 << 63).accepts(&e));
    assert!(
        tagged(Source::Any, 0, u64::MAX).accepts(&e),
        "everything ignored"
    );
    assert!(
        !tagged(Source::Peer(2), 0, u64::MAX).accepts(&e),
        "source still compared"
    );
    // An MPI pattern is the case that ignores no context bit.
    let any = Rule::from(pat(Source::Any, Tag::Any));
    assert_eq!(any, tagged(Source::Any, 0, 0xffff_ffff));
    assert_eq!(
        Rule::from(Pattern {
            source: Source::Peer(3),
            tag: Tag::Is(7),
            context: 2
        }),
        tagged(Source::Peer(3), (2 << 32) | 7, 0)
    );
    assert_eq!(
        Space::Tagged(e.bits()).envelope_fields(),
        (0xf5, 0x8000_0001, false)
    );
}

#[test]
fn tagged_and_untagged_never_cross() {
    let mut m: Matcher<u32, u32> = Matcher::new();
    let all_tagged = tagged(Source::Any, 0, u64::MAX);
    let msg_untagged = Rule {
        source: Source::Any,
        select: Select::Untagged,
    };
    m.post(all_tagged, 1);
    assert!(
        m.arrive(untagged(5), 0, 10).is_none(),
        "a tagged receive takes no untagged message"
    );
    assert!(matches!(m.post(msg_untagged, 2), Posting::Matched(x) if x.msg == 10));
    m.post(msg_untagged, 3);
    assert_eq!(
        m.arrive(env(5, 0), 0, 11).unwrap().recv,
        1,
        "nor the reverse"
    );
    assert_eq!(m.arrive(untagged(5), 0, 12).unwrap().recv, 3);
    // Untagged: by source only, first come first taken.
    m.arrive(untagged(1), 0, 20);
    m.arrive(untagged(2), 0, 21);
    m.arrive(untagged(1), 0, 22);
    m.arrive(env(1, 0), 0, 23);
    let by_peer = Rule {
        source: Source::Peer(1),
        select: Select::Untagged,
    };
    assert_eq!(m.claim(by_peer).map(|c| c.2), Some(20));
    assert_eq!(m.probe(msg_untagged).map(|c| *c.2), Some(21));
    assert_eq!(m.claim(by_peer).map(|c| c.2), Some(22));
    assert_eq!(
        m.claim(by_peer),
        None,
        "the tagged one stays for tagged receives"
    );
    assert_eq!(m.claim(all_tagged).map(|c| c.2), Some(23));
    assert_eq!(m.unexpected_len(), 1);
}

#[derive(Debug, Clone)]
enum Op {
    /// Source, tag, and the kind of receive: 0 MPI, 1 libfabric tagged
    /// ignoring tag bit 0, 2 untagged.
    Post(Option<u32>, Option<u32>, u8),
    /// Source, tag, untagged.
    Arrive(u32, u32, bool),
}

fn rule(s: Option<u32>, t: Option<u32>, kind: u8) -> Rule {
    let source = s.map_or(Source::Any, Source::Peer);
    match kind {
        0 => Rule::from(pat(source, t.map_or(Tag::Any, Tag::Is))),
        1 => tagged(source, u64::from(t.unwrap_or(0)), 1),
        _ => Rule {
            source,
            select: Select::Untagged,
        },
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (
            proptest::option::of(0..3u32),
            proptest::option::of(0..3u32),
            0..3u8
        )
            .prop_map(|(s, t, k)| Op::Post(s, t, k)),
        (0..3u32, 0..3u32, any::<bool>()).prop_map(|(s, t, u)| Op::Arrive(s, t, u)),
    ]
}

proptest! {
    /// Every message is received at most once, every receive gets at most
    /// one message, and no message overtakes an earlier one from the same
    /// source that the same receive would also accept; MPI, masked and
    /// untagged receives mixed.
    #[test]
    fn mpi_rules_hold(ops in proptest::collection::vec(op(), 1..200)) {
        let mut m: Matcher<usize, usize> = Matcher::new();
        let mut arrived: Vec<Envelope> = Vec::new();
        let mut pats: Vec<Rule> = Vec::new();
        let mut msg_taken = Vec::new();
        let mut recv_done = Vec::new();
        let check = |x: &Matched<usize, usize>, msg_taken: &mut Vec<bool>, recv_done: &mut Vec<bool>, arrived: &[Envelope], pats: &[Rule]| {
            assert!(!msg_taken[x.msg], "message received twice");
            assert!(!recv_done[x.recv], "receive completed twice");
            let p = pats[x.recv];
            assert!(p.accepts(&x.env));
            for (earlier, e) in arrived.iter().enumerate().take(x.msg) {
                if e.source == x.env.source && p.accepts(e) {
                    assert!(msg_taken[earlier], "message {} overtook {earlier}", x.msg);
                }
            }
            msg_taken[x.msg] = true;
            recv_done[x.recv] = true;
        };
        for o in ops {
            match o {
                Op::Post(s, t, kind) => {
                    let p = rule(s, t, kind);
                    pats.push(p);
                    recv_done.push(false);
                    if let Posting::Matched(x) = m.post(p, pats.len() - 1) {
                        check(&x, &mut msg_taken, &mut recv_done, &arrived, &pats);
                    }
                }
                Op::Arrive(s, t, untagged) => {
                    let e = Envelope { untagged, ..env(s, t) };
                    arrived.push(e);
                    msg_taken.push(false);
                    if let Some(x) = m.arrive(e, 1, arrived.len() - 1) {
                        check(&x, &mut msg_taken, &mut recv_done, &arrived, &pats);
                    }
                }
            }
        }
        // Nothing waits that a waiting receive would accept.
        let waiting = msg_taken.iter().filter(|t| !**t).count();
        prop_assert_eq!(waiting, m.unexpected_len());
        prop_assert_eq!(m.unexpected_bytes(), waiting);
        for (i, p) in pats.iter().enumerate() {
            if !recv_done[i] {
                prop_assert!(m.probe(*p).is_none(), "receive {} left waiting beside a message it accepts", i);
            }
        }
    }
}
