//! MPI message matching: posted receives against arriving messages.
//!
//! A message carries an [`Envelope`] (source, tag, context); a receive posts a
//! [`Pattern`] that may use [`Source::Any`] and [`Tag::Any`]. The rules are
//! MPI's:
//! - an arriving message matches the *earliest posted* receive whose pattern
//!   accepts it; if none does it waits in the unexpected queue;
//! - a posted receive matches the *earliest arrived* unexpected message it
//!   accepts;
//! - hence non-overtaking: two messages from one source (which the transport
//!   delivers in order) that both match a receive are received in send order.
//!
//! A libfabric-style receive ([`Select`]) sees the same queues: a message's
//! 64-bit tag is `context << 32 | tag`, compared under the receive's ignore
//! mask, and untagged messages form a space of their own that no tagged
//! receive matches, nor an untagged receive a tagged message. An MPI
//! [`Pattern`] is the tagged case whose context is never ignored: `Tag::Any`
//! ignores the low 32 bits. Both become a [`Rule`], which the matcher takes.
//!
//! The queues are generic over what a receive and a message carry, so the
//! same engine serves eager payloads, rendezvous announcements and tests.
//! Linear scans are fine at the queue depths MPI programs produce; binning by
//! (context, source) is the known next step if profiles ever show them.

use std::collections::VecDeque;

/// A peer of an endpoint, as the layer above numbers them (an MPI rank).
pub type PeerId = u32;

/// What a message says about itself.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Envelope {
    /// Sender.
    pub source: PeerId,
    /// Application tag.
    pub tag: u32,
    /// Communication context (an MPI communicator); never wildcarded.
    pub context: u32,
    /// An untagged message (libfabric's FI_MSG): `tag` and `context` are
    /// not compared, and only untagged receives take it.
    pub untagged: bool,
}

impl Envelope {
    /// A tagged message's 64-bit tag as libfabric numbers it.
    #[inline]
    pub fn bits(&self) -> u64 {
        (u64::from(self.context) << 32) | u64::from(self.tag)
    }
}

/// Which senders a receive accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Any sender (MPI_ANY_SOURCE).
    Any,
    /// This sender only.
    Peer(PeerId),
}

/// Which tags a receive accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Tag {
    /// Any tag (MPI_ANY_TAG).
    Any,
    /// This tag only.
    Is(u32),
}

/// What a posted receive (or a probe) accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// Accepted senders.
    pub source: Source,
    /// Accepted tags.
    pub tag: Tag,
    /// The context, matched exactly.
    pub context: u32,
}

impl Pattern {
    /// True when a message with envelope `e` satisfies this pattern.
    #[inline]
    pub fn accepts(&self, e: &Envelope) -> bool {
        Rule::from(*self).accepts(e)
    }
}

/// Which messages a libfabric-style receive or probe takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Select {
    /// Tagged messages whose 64-bit tag (`context << 32 | tag`) equals
    /// `bits` in every bit not set in `ignore`.
    Tagged {
        /// The tag wanted.
        bits: u64,
        /// Bits not compared.
        ignore: u64,
    },
    /// Untagged messages only, in arrival order.
    Untagged,
}

/// Which space a libfabric-style send goes to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Space {
    /// Tagged, with this 64-bit tag (`context << 32 | tag` on the wire).
    Tagged(u64),
    /// Untagged (FI_MSG).
    Untagged,
}

impl Space {
    /// The header's (tag, context, untagged) for a message in this space.
    pub fn envelope_fields(self) -> (u32, u32, bool) {
        match self {
            Space::Tagged(bits) => (bits as u32, (bits >> 32) as u32, false),
            Space::Untagged => (0, 0, true),
        }
    }
}

/// What the matcher compares: an MPI [`Pattern`] or a libfabric
/// [`Select`], with its source.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Accepted senders.
    pub source: Source,
    /// Accepted messages.
    pub select: Select,
}

impl Rule {
    /// True when a message with envelope `e` satisfies this rule.
    #[inline]
    pub fn accepts(&self, e: &Envelope) -> bool {
        (match self.source {
            Source::Any => true,
            Source::Peer(p) => p == e.source,
        }) && match self.select {
            Select::Tagged { bits, ignore } => !e.untagged && (e.bits() ^ bits) & !ignore == 0,
            Select::Untagged => e.untagged,
        }
    }
}

impl From<Pattern> for Rule {
    fn from(p: Pattern) -> Rule {
        let (tag, ignore) = match p.tag {
            Tag::Any => (0, 0xffff_ffff),
            Tag::Is(t) => (t, 0),
        };
        Rule {
            source: p.source,
            select: Select::Tagged {
                bits: (u64::from(p.context) << 32) | u64::from(tag),
                ignore,
            },
        }
    }
}

impl From<&Pattern> for Rule {
    fn from(p: &Pattern) -> Rule {
        Rule::from(*p)
    }
}

/// Names a posted receive, for `cancel`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PostId(pub u64);

#[derive(Debug)]
struct Posted<R> {
    id: PostId,
    rule: Rule,
    recv: R,
    /// Stays posted when it matches (a multi-receive buffer), until
    /// cancelled.
    keep: bool,
}

#[derive(Debug)]
struct Unexpected<M> {
    env: Envelope,
    len: usize,
    msg: M,
}

/// A match: the receive, and the message it gets.
#[derive(Debug, PartialEq, Eq)]
pub struct Matched<R, M> {
    /// The posted receive.
    pub recv: R,
    /// The message's envelope.
    pub env: Envelope,
    /// The message's length in bytes.
    pub len: usize,
    /// The message (payload, or a rendezvous announcement).
    pub msg: M,
}

/// What `post` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Posting<R, M> {
    /// An unexpected message was waiting and matched at once.
    Matched(Matched<R, M>),
    /// Nothing waiting: the receive is queued under this id.
    Queued(PostId),
}

/// Posted receives and unexpected messages of one endpoint.
#[derive(Debug)]
pub struct Matcher<R, M> {
    posted: VecDeque<Posted<R>>,
    unexpected: VecDeque<Unexpected<M>>,
    unexpected_bytes: usize,
    next_id: u64,
}

impl<R, M> Default for Matcher<R, M> {
    fn default() -> Self {
        Matcher {
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            next_id: 1,
        }
    }
}

impl<R, M> Matcher<R, M> {
    /// An empty matcher.
    pub fn new() -> Self {
        Self::default()
    }

    /// The id the next receive that queues gets.
    pub fn next_post_id(&self) -> PostId {
        PostId(self.next_id)
    }

    /// Post a receive: it takes the earliest waiting message it accepts, or
    /// queues behind the receives posted before it.
    pub fn post(&mut self, rule: impl Into<Rule>, recv: R) -> Posting<R, M> {
        let rule = rule.into();
        if let Some(u) = take_first(&mut self.unexpected, |u| rule.accepts(&u.env)) {
            self.unexpected_bytes -= u.len;
            return Posting::Matched(Matched {
                recv,
                env: u.env,
                len: u.len,
                msg: u.msg,
            });
        }
        let id = PostId(self.next_id);
        self.next_id += 1;
        self.posted.push_back(Posted {
            id,
            rule,
            recv,
            keep: false,
        });
        Posting::Queued(id)
    }

    /// Post a receive that stays posted when messages match it, each
    /// taking its place in order, until [`Matcher::cancel`]. Messages
    /// already waiting are left to the caller ([`Matcher::claim`]).
    pub fn post_kept(&mut self, rule: Rule, recv: R) -> PostId {
        let id = PostId(self.next_id);
        self.next_id += 1;
        self.posted.push_back(Posted {
            id,
            rule,
            recv,
            keep: true,
        });
        id
    }

    /// A message arrived: it goes to the earliest posted receive that accepts
    /// it, or waits in the unexpected queue (`None`).
    pub fn arrive(&mut self, env: Envelope, len: usize, msg: M) -> Option<Matched<R, M>>
    where
        R: Copy,
    {
        match self.take_receive(&env) {
            Some(recv) => Some(Matched {
                recv,
                env,
                len,
                msg,
            }),
            None => {
                self.wait_unexpected(env, len, msg);
                None
            }
        }
    }

    /// [`Matcher::arrive`] in two steps, for a caller that keeps the
    /// message until it knows where it goes: the earliest posted receive
    /// that accepts a message with envelope `env`, taken.
    /// A kept receive ([`Matcher::post_kept`]) is not taken but copied.
    #[inline(always)]
    pub fn take_receive(&mut self, env: &Envelope) -> Option<R>
    where
        R: Copy,
    {
        let front = self.posted.front()?;
        if front.rule.accepts(env) && !front.keep {
            return self.posted.pop_front().map(|p| p.recv);
        }
        let i = self.posted.iter().position(|p| p.rule.accepts(env))?;
        if self.posted[i].keep {
            return Some(self.posted[i].recv);
        }
        self.posted.remove(i).map(|p| p.recv)
    }

    /// The second step: a message no posted receive took waits in the
    /// unexpected queue.
    pub fn wait_unexpected(&mut self, env: Envelope, len: usize, msg: M) {
        self.unexpected_bytes += len;
        self.unexpected.push_back(Unexpected { env, len, msg });
    }

    /// The earliest waiting message a receive with `rule` would get, without
    /// taking it (MPI_Iprobe).
    pub fn probe(&self, rule: impl Into<Rule>) -> Option<(Envelope, usize, &M)> {
        let rule = rule.into();
        self.unexpected
            .iter()
            .find(|u| rule.accepts(&u.env))
            .map(|u| (u.env, u.len, &u.msg))
    }

    /// Take the earliest waiting message a receive with `rule` would get
    /// out of matching (libfabric's FI_CLAIM): no receive matches it after.
    pub fn claim(&mut self, rule: impl Into<Rule>) -> Option<(Envelope, usize, M)> {
        let rule = rule.into();
        let u = take_first(&mut self.unexpected, |u| rule.accepts(&u.env))?;
        self.unexpected_bytes -= u.len;
        Some((u.env, u.len, u.msg))
    }

    /// Withdraw a posted receive that has not matched yet.
    pub fn cancel(&mut self, id: PostId) -> Option<R> {
        let i = self.posted.iter().position(|p| p.id == id)?;
        self.posted.remove(i).map(|p| p.recv)
    }

    /// Remove the receives posted for `peer` and the messages waiting from it
    /// that `keep` refuses (the peer failed): the receives come back to be
    /// completed with an error, with the number of messages dropped. Messages
    /// `keep` accepts stay for later receives: what arrived whole before a
    /// peer ended is still the application's to receive.
    pub fn remove_peer(&mut self, peer: PeerId, keep: impl Fn(&M) -> bool) -> (Vec<R>, usize) {
        let mut out = Vec::new();
        let mut kept = VecDeque::with_capacity(self.posted.len());
        for p in self.posted.drain(..) {
            if p.rule.source == Source::Peer(peer) {
                out.push(p.recv);
            } else {
                kept.push_back(p);
            }
        }
        self.posted = kept;
        let before = self.unexpected.len();
        self.unexpected
            .retain(|u| u.env.source != peer || keep(&u.msg));
        let dropped = before - self.unexpected.len();
        if dropped != 0 {
            self.unexpected_bytes = self.unexpected.iter().map(|u| u.len).sum();
        }
        (out, dropped)
    }

    /// Bytes of messages waiting unexpected.
    pub fn unexpected_bytes(&self) -> usize {
        self.unexpected_bytes
    }

    /// Messages waiting unexpected.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }

    /// Receives posted and not matched.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }
}

/// Remove the first entry of `q` that `accepts` takes. Mostly the front
/// one (a receive posted ahead of its message, in order): that one is
/// tried and taken without setting up a walk or shifting the rest.
#[inline(always)]
fn take_first<T>(q: &mut VecDeque<T>, accepts: impl Fn(&T) -> bool) -> Option<T> {
    if accepts(q.front()?) {
        return q.pop_front();
    }
    let i = 1 + q.iter().skip(1).position(accepts)?;
    q.remove(i)
}

#[cfg(test)]
mod tests {
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
}
