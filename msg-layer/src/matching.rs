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
mod tests;
