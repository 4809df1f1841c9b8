//! The sans-IO core: one [`Node`] per host runtime (the seed's
//! communication processor). It reads no clock and does no I/O: packets and
//! time come in as arguments ([`Node::receive`], [`Node::handle_timeout`]),
//! packets to send and events go out ([`Node::poll_transmit`],
//! [`Node::poll_event`]). The same code runs in the simulator
//! ([`crate::sim`]) and over the message layer ([`crate::Runtime`]).
//!
//! The rules are the seed's Figures 1-4, written out in docs/MIGRATION.md;
//! the comments below name the figure each step comes from.

pub mod wire;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

pub use wire::{AckEntry, Inter, Packet, RefuseReason, TaskImage, WireError};
use wire::{FLAG_SKIP, FLAG_STALE};

/// A host of the job: its index in the job's host list.
pub type HostId = u32;

/// A task's location-independent id; never changes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TaskId(pub u64);

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "task {}", self.0)
    }
}

/// A location and its freshness: 0 for a home (computed from the id),
/// otherwise 1 + the migrations the task had made when it was there.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Loc {
    pub host: HostId,
    pub fresh: u32,
}

/// Which location protocol a node runs: the seed's, or one of the two
/// baselines of its related work (simulator comparisons only).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Home sets, freshness, rewrite-and-forward, LOCAL updates (seed 003).
    #[default]
    Seed,
    /// Forwarding addresses only (Fowler): every host starts knowing every
    /// task's creation host; no LOCAL is ever sent.
    Fowler,
    /// Forwarding addresses, and a broadcast query for a task whose
    /// location is not known (Emerald, V).
    Broadcast,
}

/// A node's limits and choices.
#[derive(Clone, Debug)]
pub struct Config {
    pub mode: Mode,
    /// Hosts in a task's home set (at most the job's size).
    pub home_copies: usize,
    /// Payload bytes a node may hold for tasks whose location it does not
    /// know yet; beyond it messages are refused (the sender is told).
    pub hold_bytes: usize,
    /// A message forwarded more often than this is refused.
    pub max_hops: u8,
    /// After a host failed: how long a message for a task last seen there
    /// waits for news of a newer location before its sender is told the
    /// task is lost, and how long a receiver waits for a message missing
    /// from a pair's order before it skips it.
    pub dead_wait_ns: u64,
    /// Broadcast baseline: re-ask after this long when nobody knew.
    pub lookup_retry_ns: u64,
    /// A receiver acknowledges a pair at once after this many messages in
    /// order since its last ACK for it (and every pending pair of the same
    /// sender host with it) ...
    pub ack_every: u64,
    /// ... and otherwise this long after the first unacknowledged one, all
    /// pending pairs of the node at once, one ACK packet per sender host.
    pub ack_delay_ns: u64,
    /// Bytes (payload + INTER header each) a task may keep unacknowledged
    /// per addressee; beyond it `send` fails with [`ProtoError::Unacked`].
    pub retain_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mode: Mode::Seed,
            home_copies: 2,
            hold_bytes: 8 << 20,
            max_hops: 64,
            dead_wait_ns: 2_000_000_000,
            lookup_retry_ns: 1_000_000,
            ack_every: 32,
            ack_delay_ns: 1_000_000,
            retain_bytes: 1 << 20,
        }
    }
}

/// Why a call was refused. Nothing changed when one is returned.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// The task is not on this host (it may have migrated away).
    #[error("{0} is not on this host")]
    NotHere(TaskId),
    /// A task with this id already runs here.
    #[error("{0} already runs on this host")]
    Exists(TaskId),
    /// No such host in the job.
    #[error("host {host} is not in the job (it has {hosts} hosts)")]
    NoSuchHost { host: HostId, hosts: u32 },
    /// Migrating to the host the task is on.
    #[error("{0} is already on host {1}")]
    SameHost(TaskId, HostId),
    /// The target host failed.
    #[error("host {0} has failed")]
    HostDown(HostId),
    /// Every host of the task's home set failed and its location is unknown.
    #[error("{0}: every host of its home set has failed")]
    NoHome(TaskId),
    /// The pair's unacknowledged messages fill `Config::retain_bytes`: the
    /// receiver has not acknowledged them yet (backpressure; retry after
    /// progress).
    #[error("{task} -> {peer}: unacknowledged messages fill the {bound}-byte bound")]
    Unacked {
        task: TaskId,
        peer: TaskId,
        bound: usize,
    },
}

/// What a node tells its user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A task arrived by migration; `app` is its state as the old host saved it.
    Arrived {
        task: TaskId,
        app: Vec<u8>,
        /// When its migration started (ns, the old host's clock).
        started_ns: u64,
        migrations: u32,
    },
    /// A task left for `to`.
    Left { task: TaskId, to: HostId },
    /// A message `task` sent could not be delivered.
    Refused {
        task: TaskId,
        to: TaskId,
        seq: u64,
        reason: RefuseReason,
    },
    /// `peer`, a task `task` sent to, was last known on a host that
    /// failed: messages to it not delivered yet are lost with it (later
    /// sends are refused once its home set knows no newer location).
    PeerLost { task: TaskId, peer: TaskId },
    /// After a host failure, messages `first..=last` from `from` to `task`
    /// never came and were skipped: `from` was lost with the failed host
    /// before it could send them again (a surviving sender resends its
    /// unacknowledged messages, so its gaps fill).
    Gap {
        task: TaskId,
        from: TaskId,
        first: u64,
        last: u64,
    },
}

/// Counters of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages sent by tasks here.
    pub inter_sent: u64,
    /// INTER packets this node forwarded for others (rewritten or held first).
    pub forwarded: u64,
    /// Messages put in a task's mailbox here.
    pub delivered: u64,
    /// Messages that arrived twice (dropped by seq; only after a resend).
    pub duplicates: u64,
    /// ACK packets sent (first sends and forwards), and pair entries in them.
    pub ack_sent: u64,
    pub ack_entries: u64,
    /// ACK entries that rode on INTER packets instead.
    pub ack_piggybacked: u64,
    /// Messages sent again after a host failure.
    pub resent: u64,
    pub local_sent: u64,
    pub where_sent: u64,
    pub here_sent: u64,
    pub migrations_out: u64,
    pub migrations_in: u64,
    /// Messages held (home buffering, or waiting for an arriving task).
    pub held: u64,
    pub refused: u64,
    pub gaps: u64,
    pub bad_packets: u64,
    /// Most forwards any message delivered here had taken.
    pub max_hops: u8,
}

impl Stats {
    /// Control packets (LOCAL, WHERE, HERE) sent; ACKs are counted apart.
    pub fn control(&self) -> u64 {
        self.local_sent + self.where_sent + self.here_sent
    }
}

/// A pair's sending side, kept by the sending task.
#[derive(Debug, Default)]
struct Pair {
    /// Last sequence number used.
    seq: u64,
    /// Sent and not acknowledged yet: (seq, payload), in seq order.
    unacked: VecDeque<(u64, Vec<u8>)>,
    /// Their cost against `Config::retain_bytes`.
    bytes: usize,
}

impl Pair {
    fn cost(payload: &[u8]) -> usize {
        Inter::HEADER + payload.len()
    }

    /// The receiver has everything up to `seq`.
    fn ack(&mut self, seq: u64) {
        while self.unacked.front().is_some_and(|(s, _)| *s <= seq) {
            let (_, p) = self.unacked.pop_front().expect("front");
            self.bytes -= Pair::cost(&p);
        }
    }

    /// `seq` was refused: it will never be acknowledged.
    fn forget(&mut self, seq: u64) {
        if let Some(i) = self.unacked.iter().position(|(s, _)| *s == seq) {
            let (_, p) = self.unacked.remove(i).expect("index");
            self.bytes -= Pair::cost(&p);
        }
    }
}

/// A task present on this node.
#[derive(Debug, Default)]
struct Task {
    migrations: u32,
    app: Vec<u8>,
    /// Correspondents this task sent to.
    sent: HashMap<TaskId, Pair>,
    /// Correspondents this task received from: last sequence delivered.
    recvd: HashMap<TaskId, u64>,
    /// The resequencing queue: messages ahead of their turn, per sender.
    ahead: HashMap<TaskId, BTreeMap<u64, Inter>>,
    /// Since when each sender's messages have waited ahead of a gap.
    ahead_since: HashMap<TaskId, u64>,
    mailbox: VecDeque<(TaskId, Vec<u8>)>,
}

impl Task {
    fn image(self, id: TaskId, started_ns: u64, dead: Vec<HostId>) -> TaskImage {
        let mut pairs: Vec<_> = self.sent.into_iter().collect();
        pairs.sort_unstable_by_key(|(d, _)| *d);
        let sent = pairs.iter().map(|(d, p)| (*d, p.seq)).collect();
        let unacked = pairs
            .into_iter()
            .flat_map(|(d, p)| p.unacked.into_iter().map(move |(s, b)| (d, s, b)))
            .collect();
        let mut recvd: Vec<_> = self.recvd.into_iter().collect();
        recvd.sort_unstable();
        TaskImage {
            id,
            migrations: self.migrations,
            app: self.app,
            sent,
            recvd,
            ahead: self
                .ahead
                .into_values()
                .flat_map(BTreeMap::into_values)
                .collect(),
            mailbox: self.mailbox.into(),
            started_ns,
            unacked,
            dead,
        }
    }
}

/// A message waiting at this node.
#[derive(Debug)]
struct Held {
    m: Inter,
    /// Set when the task was last seen on a failed host: refuse then.
    deadline: Option<u64>,
}

/// Broadcast baseline: a lookup under way.
#[derive(Debug, Default)]
struct Lookup {
    waiting: Vec<Inter>,
    answers: usize,
    expected: usize,
    retry_at: Option<u64>,
}

/// One host's runtime state (the seed's communication processor).
#[derive(Debug)]
pub struct Node {
    me: HostId,
    hosts: u32,
    cfg: Config,
    /// The table of tasks: the freshest location known of each.
    table: HashMap<TaskId, Loc>,
    /// Tasks present here.
    present: HashMap<TaskId, Task>,
    held: HashMap<TaskId, Vec<Held>>,
    held_bytes: usize,
    lookups: HashMap<TaskId, Lookup>,
    dead: HashSet<HostId>,
    /// When this node last learned of a failure (gaps wait from then on).
    failed_at: u64,
    /// Pairs (receiver here, sender) with messages in order not yet
    /// acknowledged: how many.
    ack_due: HashMap<(TaskId, TaskId), u64>,
    /// When the oldest of `ack_due` became due.
    ack_since: Option<u64>,
    /// ACKs for tasks on their way here: sender -> addressee -> seq.
    early_acks: HashMap<TaskId, HashMap<TaskId, u64>>,
    /// Refusals for tasks on their way here: (reason, addressee, seq).
    early_refused: HashMap<TaskId, Vec<(RefuseReason, TaskId, u64)>>,
    now: u64,
    out: VecDeque<(HostId, Packet)>,
    events: VecDeque<Event>,
    stats: Stats,
}

/// A 64-bit mix (splitmix64's finaliser): ids that differ in one bit land
/// on unrelated homes.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The home set of `task` in a job of `hosts` hosts: `copies` hosts spread
/// evenly around the host ring from a start hashed from the id.
pub fn home_set(task: TaskId, hosts: u32, copies: usize) -> Vec<HostId> {
    let n = hosts.max(1) as u64;
    let k = (copies as u64).clamp(1, n);
    let start = mix(task.0) % n;
    (0..k)
        .map(|i| ((start + i * n / k) % n) as HostId)
        .collect()
}

impl Node {
    /// Host `me` of a job of `hosts` hosts.
    pub fn new(me: HostId, hosts: u32, cfg: Config) -> Node {
        assert!(me < hosts, "host {me} of {hosts}");
        Node {
            me,
            hosts,
            cfg,
            table: HashMap::new(),
            present: HashMap::new(),
            held: HashMap::new(),
            held_bytes: 0,
            lookups: HashMap::new(),
            dead: HashSet::new(),
            failed_at: 0,
            ack_due: HashMap::new(),
            ack_since: None,
            early_acks: HashMap::new(),
            early_refused: HashMap::new(),
            now: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    pub fn me(&self) -> HostId {
        self.me
    }

    pub fn hosts(&self) -> u32 {
        self.hosts
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Tasks present here.
    pub fn tasks(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.present.keys().copied()
    }

    pub fn is_present(&self, task: TaskId) -> bool {
        self.present.contains_key(&task)
    }

    /// (sender, addressee, sequence number) of every message held here.
    pub fn held_messages(&self) -> Vec<(TaskId, TaskId, u64)> {
        self.held
            .values()
            .flatten()
            .map(|h| &h.m)
            .chain(self.lookups.values().flat_map(|l| l.waiting.iter()))
            .map(|m| (m.src, m.dst, m.seq))
            .collect()
    }

    /// Messages held here (all tasks).
    pub fn held_count(&self) -> usize {
        self.held.values().map(Vec::len).sum::<usize>()
            + self
                .lookups
                .values()
                .map(|l| l.waiting.len())
                .sum::<usize>()
    }

    /// Messages tasks here sent that no receiver acknowledged yet.
    pub fn unacked_count(&self) -> usize {
        self.present
            .values()
            .flat_map(|t| t.sent.values())
            .map(|p| p.unacked.len())
            .sum()
    }

    /// Messages in order waiting in `task`'s mailbox, and messages ahead of
    /// their turn.
    pub fn queued(&self, task: TaskId) -> Option<(usize, usize)> {
        self.present
            .get(&task)
            .map(|t| (t.mailbox.len(), t.ahead.values().map(BTreeMap::len).sum()))
    }

    /// The freshest location this node knows of `task` (a home, fresh 0,
    /// when it knows none; `None` in the baselines).
    pub fn location(&self, task: TaskId) -> Option<Loc> {
        self.known(task).or_else(|| match self.cfg.mode {
            Mode::Seed => Some(Loc {
                host: self.nearest_home(task).unwrap_or(self.me),
                fresh: 0,
            }),
            _ => None,
        })
    }

    fn known(&self, task: TaskId) -> Option<Loc> {
        if let Some(t) = self.present.get(&task) {
            return Some(Loc {
                host: self.me,
                fresh: t.migrations + 1,
            });
        }
        self.table.get(&task).copied()
    }

    /// The member of `task`'s home set nearest to this host that has not
    /// failed (this host when it is one).
    fn nearest_home(&self, task: TaskId) -> Option<HostId> {
        let n = self.hosts;
        home_set(task, n, self.cfg.home_copies)
            .into_iter()
            .filter(|h| !self.dead.contains(h))
            .min_by_key(|&h| {
                let d = (h + n - self.me) % n;
                (d.min(n - d), h)
            })
    }

    /// Take note of a location (true when it was fresher than what we knew).
    /// The baselines' simulator also uses it to give every host the
    /// creation host of every task (Fowler's assumption).
    pub fn learn(&mut self, task: TaskId, loc: Loc) -> bool {
        if self.present.contains_key(&task) {
            return false;
        }
        match self.table.get(&task) {
            Some(l) if l.fresh >= loc.fresh => false,
            _ => {
                self.table.insert(task, loc);
                true
            }
        }
    }

    // ----- the application's calls -----

    /// Figure 1: a task's first run here. Its home set learns where it is.
    pub fn spawn(&mut self, task: TaskId, app: Vec<u8>) -> Result<(), ProtoError> {
        if self.present.contains_key(&task) {
            return Err(ProtoError::Exists(task));
        }
        self.present.insert(
            task,
            Task {
                app,
                ..Task::default()
            },
        );
        self.table.insert(
            task,
            Loc {
                host: self.me,
                fresh: 1,
            },
        );
        self.announce(task);
        self.flush_held(task);
        Ok(())
    }

    /// LOCAL to the home set (Figure 1, and after a migration).
    fn announce(&mut self, task: TaskId) {
        if self.cfg.mode != Mode::Seed {
            return;
        }
        let loc = self.known(task).expect("present");
        for h in home_set(task, self.hosts, self.cfg.home_copies) {
            if h != self.me && !self.dead.contains(&h) {
                self.stats.local_sent += 1;
                self.out.push_back((h, Packet::Local { task, loc }));
            }
        }
    }

    /// Figure 2: `src` (here) sends `payload` to `dst` (anywhere). Returns
    /// the pair's sequence number.
    pub fn send(&mut self, src: TaskId, dst: TaskId, payload: Vec<u8>) -> Result<u64, ProtoError> {
        let Some(t) = self.present.get(&src) else {
            return Err(ProtoError::NotHere(src));
        };
        let src_loc = Loc {
            host: self.me,
            fresh: t.migrations + 1,
        };
        let dst_loc = match self.location(dst) {
            Some(l) => l,
            None if self.cfg.mode == Mode::Seed => return Err(ProtoError::NoHome(dst)),
            None => Loc::default(),
        };
        let bound = self.cfg.retain_bytes;
        let t = self.present.get_mut(&src).expect("present");
        let pair = t.sent.entry(dst).or_default();
        if pair.bytes + Pair::cost(&payload) > bound {
            return Err(ProtoError::Unacked {
                task: src,
                peer: dst,
                bound,
            });
        }
        pair.seq += 1;
        pair.bytes += Pair::cost(&payload);
        pair.unacked.push_back((pair.seq, payload.clone()));
        let m = Inter {
            flags: 0,
            hops: 0,
            seq: pair.seq,
            src,
            src_loc,
            dst,
            dst_loc,
            payload,
            acks: Vec::new(),
        };
        self.stats.inter_sent += 1;
        let seq = m.seq;
        self.dispatch(m);
        Ok(seq)
    }

    /// Figure 2's last step for a message of a task present here.
    fn dispatch(&mut self, m: Inter) {
        if self.cfg.mode == Mode::Broadcast && self.known(m.dst).is_none() {
            self.look_up(m);
        } else {
            self.route(m, false);
        }
    }

    /// Send every unacknowledged message of `task` (present here) again,
    /// towards the freshest location known of each addressee.
    fn resend(&mut self, task: TaskId) {
        let Some(t) = self.present.get(&task) else {
            return;
        };
        let src_loc = Loc {
            host: self.me,
            fresh: t.migrations + 1,
        };
        let mut again: Vec<(TaskId, u64, Vec<u8>)> = t
            .sent
            .iter()
            .flat_map(|(d, p)| p.unacked.iter().map(|(s, b)| (*d, *s, b.clone())))
            .collect();
        again.sort_unstable_by_key(|(d, s, _)| (*d, *s));
        for (dst, seq, payload) in again {
            let dst_loc = self.location(dst).unwrap_or_default();
            self.stats.resent += 1;
            self.dispatch(Inter {
                flags: 0,
                hops: 0,
                seq,
                src: task,
                src_loc,
                dst,
                dst_loc,
                payload,
                acks: Vec::new(),
            });
        }
    }

    /// Take the next message of `task`'s mailbox: (sender, payload).
    pub fn recv(&mut self, task: TaskId) -> Result<Option<(TaskId, Vec<u8>)>, ProtoError> {
        match self.present.get_mut(&task) {
            Some(t) => Ok(t.mailbox.pop_front()),
            None => Err(ProtoError::NotHere(task)),
        }
    }

    /// The application state stored with `task`.
    pub fn app_state(&self, task: TaskId) -> Option<&[u8]> {
        self.present.get(&task).map(|t| t.app.as_slice())
    }

    /// Replace the application state stored with `task` (it moves with it).
    pub fn set_app_state(&mut self, task: TaskId, app: Vec<u8>) -> Result<(), ProtoError> {
        match self.present.get_mut(&task) {
            Some(t) => {
                t.app = app;
                Ok(())
            }
            None => Err(ProtoError::NotHere(task)),
        }
    }

    /// Move `task` to host `to`, with its state, mailbox, resequencing queue
    /// and correspondent lists, in one packet. From now on this node
    /// forwards what arrives for it.
    pub fn migrate(&mut self, now: u64, task: TaskId, to: HostId) -> Result<(), ProtoError> {
        self.now = now;
        if to >= self.hosts {
            return Err(ProtoError::NoSuchHost {
                host: to,
                hosts: self.hosts,
            });
        }
        if to == self.me {
            return Err(ProtoError::SameHost(task, to));
        }
        if self.dead.contains(&to) {
            return Err(ProtoError::HostDown(to));
        }
        if !self.present.contains_key(&task) {
            return Err(ProtoError::NotHere(task));
        }
        // What it received here is acknowledged from here: the ACK state
        // stays behind, the received list travels.
        self.send_acks(|dst, _| dst == task);
        let mut t = self.present.remove(&task).expect("present");
        t.migrations += 1;
        let mut dead: Vec<HostId> = self.dead.iter().copied().collect();
        dead.sort_unstable();
        self.table.insert(
            task,
            Loc {
                host: to,
                fresh: t.migrations + 1,
            },
        );
        self.stats.migrations_out += 1;
        self.out
            .push_back((to, Packet::Migrate(Box::new(t.image(task, now, dead)))));
        self.events.push_back(Event::Left { task, to });
        Ok(())
    }

    // ----- input from the network and the clock -----

    /// A packet from host `from`.
    pub fn receive(&mut self, now: u64, from: HostId, bytes: &[u8]) {
        self.now = now;
        match Packet::decode(bytes) {
            Ok(p) => self.handle(from, p),
            Err(e) => {
                tracing::debug!(from, %e, "bad packet");
                self.stats.bad_packets += 1;
            }
        }
    }

    fn handle(&mut self, from: HostId, p: Packet) {
        match p {
            Packet::Inter(m) => self.on_inter(m),
            // Figure 3.
            Packet::Local { task, loc } => {
                if self.learn(task, loc) {
                    self.flush_held(task);
                }
            }
            Packet::Migrate(img) => self.arrive(*img),
            Packet::Refused {
                reason,
                src,
                src_loc,
                dst,
                seq,
            } => self.on_refused(reason, src, src_loc, dst, seq),
            Packet::Where { task } => {
                self.stats.here_sent += 1;
                let loc = self.known(task);
                self.out.push_back((from, Packet::Here { task, loc }));
            }
            Packet::Here { task, loc } => self.on_here(task, loc),
            Packet::Ack(entries) => self.on_ack(entries),
        }
    }

    /// A host failed: its tasks are lost; messages for them are refused
    /// once `dead_wait_ns` passed without news of a newer location.
    pub fn host_failed(&mut self, now: u64, host: HostId) {
        self.now = now;
        if host == self.me || !self.dead.insert(host) {
            return;
        }
        self.failed_at = now;
        for (&task, t) in &self.present {
            for peer in t.sent.keys() {
                if self.table.get(peer).is_some_and(|l| l.host == host) {
                    self.events.push_back(Event::PeerLost { task, peer: *peer });
                }
            }
        }
        // Any unacknowledged message may have been passing through the
        // failed host: send them all again, routed afresh around it.
        let tasks: Vec<TaskId> = self.present.keys().copied().collect();
        for t in tasks {
            self.resend(t);
        }
        // Messages waiting for a lookup or a location are re-examined later.
        let tasks: Vec<TaskId> = self.held.keys().copied().collect();
        for t in tasks {
            self.flush_held(t);
        }
    }

    /// When [`Node::handle_timeout`] wants to be called next (ns).
    pub fn poll_timeout(&self) -> Option<u64> {
        let held = self
            .held
            .values()
            .flatten()
            .filter_map(|h| h.deadline)
            .min();
        let look = self.lookups.values().filter_map(|l| l.retry_at).min();
        let gap = if self.dead.is_empty() {
            None
        } else {
            self.present
                .values()
                .flat_map(|t| t.ahead_since.iter())
                .map(|(src, since)| self.gap_due(*src, *since))
                .min()
        };
        let ack = self.ack_since.map(|s| s + self.cfg.ack_delay_ns);
        [held, look, gap, ack].into_iter().flatten().min()
    }

    /// Expire what is due; a call before anything is due does nothing.
    pub fn handle_timeout(&mut self, now: u64) {
        self.now = now;
        let due: Vec<TaskId> = self
            .held
            .iter()
            .filter(|(_, v)| v.iter().any(|h| h.deadline.is_some_and(|d| d <= now)))
            .map(|(t, _)| *t)
            .collect();
        for task in due {
            let v = self.held.remove(&task).unwrap_or_default();
            let mut keep = Vec::new();
            for h in v {
                if h.deadline.is_some_and(|d| d <= now) {
                    self.held_bytes -= h.m.payload.len();
                    self.refuse(RefuseReason::TaskLost, &h.m);
                } else {
                    keep.push(h);
                }
            }
            if !keep.is_empty() {
                self.held.insert(task, keep);
            }
        }
        if !self.dead.is_empty() {
            self.skip_gaps();
        }
        if self
            .ack_since
            .is_some_and(|s| s + self.cfg.ack_delay_ns <= now)
        {
            self.send_acks(|_, _| true);
        }
        let retry: Vec<TaskId> = self
            .lookups
            .iter()
            .filter(|(_, l)| l.retry_at.is_some_and(|d| d <= now))
            .map(|(t, _)| *t)
            .collect();
        for task in retry {
            self.broadcast_where(task);
        }
    }

    /// Acknowledge every due pair now (a runtime about to close, so that
    /// its senders do not resend and get refusals for what was delivered).
    pub fn ack_now(&mut self) {
        self.send_acks(|_, _| true);
    }

    /// Next packet to send: (host, bytes).
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<(HostId, Vec<u8>)> {
        let (h, mut p) = self.out.pop_front()?;
        if let Packet::Inter(m) = &mut p {
            // Due ACKs for senders on that host ride along for free.
            if !self.ack_due.is_empty() {
                m.acks = self.take_acks(h);
                self.stats.ack_piggybacked += m.acks.len() as u64;
            }
        }
        Some((h, p.encode()))
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ----- routing -----

    /// Figure 4: an INTER from another runtime.
    fn on_inter(&mut self, mut m: Inter) {
        let acks = std::mem::take(&mut m.acks);
        if !acks.is_empty() {
            self.on_ack(acks);
        }
        if self.learn(m.src, m.src_loc) {
            self.flush_held(m.src);
        }
        let addressed_here = m.dst_loc.host == self.me;
        match self.known(m.dst) {
            Some(mine) if mine.fresh > m.dst_loc.fresh => {
                m.dst_loc = mine;
                m.flags |= FLAG_STALE;
            }
            _ => {
                if m.dst_loc.fresh > 0 && self.learn(m.dst, m.dst_loc) {
                    self.flush_held(m.dst);
                }
            }
        }
        if self.present.contains_key(&m.dst) {
            if (!addressed_here || m.stale()) && self.cfg.mode == Mode::Seed {
                self.tell_sender(&m);
            }
            self.accept(m);
            return;
        }
        self.forward(m);
    }

    /// A LOCAL with the destination's location to the sender's runtime.
    fn tell_sender(&mut self, m: &Inter) {
        let to = m.src_loc.host;
        if to == self.me || self.dead.contains(&to) {
            return;
        }
        self.stats.local_sent += 1;
        let loc = self.known(m.dst).expect("present");
        self.out.push_back((to, Packet::Local { task: m.dst, loc }));
    }

    /// Send a message on towards `m.dst_loc`, counting the hop.
    fn forward(&mut self, mut m: Inter) {
        if m.dst_loc.host == self.me || self.dead.contains(&m.dst_loc.host) {
            self.route(m, true);
            return;
        }
        m.hops = m.hops.saturating_add(1);
        if m.hops > self.cfg.max_hops {
            self.refuse(RefuseReason::TooManyHops, &m);
            return;
        }
        self.stats.forwarded += 1;
        self.out.push_back((m.dst_loc.host, Packet::Inter(m)));
    }

    /// Deliver here, send towards `m.dst_loc`, or hold (Figure 2's and
    /// Figure 4's last steps). `forwarding`: the message came from elsewhere.
    fn route(&mut self, m: Inter, forwarding: bool) {
        if self.present.contains_key(&m.dst) {
            self.accept(m);
            return;
        }
        let host = m.dst_loc.host;
        if self.dead.contains(&host) {
            self.towards_dead(m);
        } else if host == self.me {
            self.hold(m, None);
        } else if forwarding {
            self.forward(m);
        } else {
            self.out.push_back((host, Packet::Inter(m)));
        }
    }

    /// The message's best location is a failed host: the task may have
    /// left it before it failed, and its home set would know.
    fn towards_dead(&mut self, mut m: Inter) {
        if self.cfg.mode != Mode::Seed {
            self.refuse(RefuseReason::TaskLost, &m);
            return;
        }
        match self.nearest_home(m.dst) {
            None => self.refuse(RefuseReason::TaskLost, &m),
            Some(h) if h == self.me => {
                let deadline = self.now + self.cfg.dead_wait_ns;
                self.hold(m, Some(deadline));
            }
            Some(h) => {
                m.hops = m.hops.saturating_add(1);
                self.stats.forwarded += 1;
                self.out.push_back((h, Packet::Inter(m)));
            }
        }
    }

    /// Keep a message until this node learns where its task is (home
    /// buffering) or the task arrives; refuse it when the buffer is full.
    fn hold(&mut self, mut m: Inter, deadline: Option<u64>) {
        if !m.skip() && self.held_bytes + m.payload.len() > self.cfg.hold_bytes {
            self.refuse(RefuseReason::HomeFull, &m);
            // Keep a tombstone so the receiver's order moves past it.
            m.payload = Vec::new();
            m.flags |= FLAG_SKIP;
        }
        self.stats.held += 1;
        self.held_bytes += m.payload.len();
        self.held
            .entry(m.dst)
            .or_default()
            .push(Held { m, deadline });
    }

    /// Send on what was held for `task` if its location is now known
    /// elsewhere (Figures 3 and 4: "if there are messages held for the
    /// task whose location was updated, send them").
    fn flush_held(&mut self, task: TaskId) {
        if !self.held.contains_key(&task) {
            return;
        }
        let Some(loc) = self.known(task) else { return };
        let present = self.present.contains_key(&task);
        if !present && loc.host == self.me {
            return;
        }
        if !present && self.dead.contains(&loc.host) {
            // Still no newer location: wait for one, for a bounded time.
            let deadline = self.now + self.cfg.dead_wait_ns;
            for h in self.held.get_mut(&task).into_iter().flatten() {
                h.deadline.get_or_insert(deadline);
            }
            if self.nearest_home(task) == Some(self.me) {
                return;
            }
        }
        let v = self.held.remove(&task).unwrap_or_default();
        for h in v {
            self.held_bytes -= h.m.payload.len();
            let mut m = h.m;
            if loc.fresh > m.dst_loc.fresh {
                m.dst_loc = loc;
            }
            if present {
                self.accept(m);
            } else {
                self.forward(m);
            }
        }
    }

    /// Per-pair order (the resequencing queue): deliver `m` if it is the
    /// pair's next, keep it if it is ahead.
    fn accept(&mut self, m: Inter) {
        self.stats.max_hops = self.stats.max_hops.max(m.hops);
        let t = self.present.get_mut(&m.dst).expect("present");
        let last = t.recvd.get(&m.src).copied().unwrap_or(0);
        if m.seq <= last {
            // A resent copy: its sender may have missed our ACK.
            self.stats.duplicates += 1;
            self.ack_later(m.dst, m.src, 0);
            return;
        }
        if m.seq > last + 1 {
            t.ahead_since.entry(m.src).or_insert(self.now);
            let q = t.ahead.entry(m.src).or_default();
            if q.insert(m.seq, m).is_some() {
                self.stats.duplicates += 1;
            }
            return;
        }
        let (src, dst) = (m.src, m.dst);
        let mut moved = 0;
        let mut next = Some(m);
        while let Some(m) = next {
            moved += 1;
            t.recvd.insert(src, m.seq);
            if !m.skip() {
                t.mailbox.push_back((src, m.payload));
                self.stats.delivered += 1;
            }
            next = t.ahead.get_mut(&src).and_then(|q| {
                let first = q.first_key_value().map(|(k, _)| *k)?;
                (first == m.seq + 1).then(|| q.pop_first().expect("first").1)
            });
        }
        if t.ahead.get(&src).is_some_and(BTreeMap::is_empty) {
            t.ahead.remove(&src);
        }
        if !t.ahead.contains_key(&src) {
            t.ahead_since.remove(&src);
        }
        self.ack_later(dst, src, moved);
    }

    // ----- acknowledgements (beyond the seed) -----

    /// `moved` more messages of `src -> dst` (here) are in order: note the
    /// pair for the next ACK, and send the ACKs of its sender's host now
    /// if the pair reached `ack_every`.
    fn ack_later(&mut self, dst: TaskId, src: TaskId, moved: u64) {
        let n = self.ack_due.entry((dst, src)).or_insert(0);
        *n += moved;
        let full = *n >= self.cfg.ack_every;
        self.ack_since.get_or_insert(self.now);
        if full {
            let host = self.known(src).map(|l| l.host);
            self.send_acks(move |_, l| l.map(|l| l.host) == host);
        }
    }

    /// The due ACKs whose senders are known on `host`, taken off the due
    /// list (at most what one INTER carries).
    fn take_acks(&mut self, host: HostId) -> Vec<AckEntry> {
        let keys: Vec<(TaskId, TaskId)> = self
            .ack_due
            .keys()
            .filter(|(_, s)| self.known(*s).is_some_and(|l| l.host == host))
            .take(u16::MAX as usize)
            .copied()
            .collect();
        let mut v = Vec::new();
        for (dst, src) in keys {
            self.ack_due.remove(&(dst, src));
            let seq = self.present.get(&dst).and_then(|t| t.recvd.get(&src));
            if let (Some(seq), Some(src_loc)) = (seq, self.known(src)) {
                v.push(AckEntry {
                    src,
                    src_loc,
                    dst,
                    seq: *seq,
                });
            }
        }
        if self.ack_due.is_empty() {
            self.ack_since = None;
        }
        v
    }

    /// Acknowledge the due pairs `pick` chooses (addressee here, the
    /// sender's known location): one ACK packet per sender host.
    fn send_acks(&mut self, pick: impl Fn(TaskId, Option<Loc>) -> bool) {
        let keys: Vec<(TaskId, TaskId)> = self
            .ack_due
            .keys()
            .filter(|(d, s)| pick(*d, self.known(*s)))
            .copied()
            .collect();
        let mut out = BTreeMap::new();
        for (dst, src) in keys {
            self.ack_due.remove(&(dst, src));
            let Some(seq) = self.present.get(&dst).and_then(|t| t.recvd.get(&src)) else {
                continue;
            };
            let Some(src_loc) = self.known(src) else {
                continue;
            };
            let e = AckEntry {
                src,
                src_loc,
                dst,
                seq: *seq,
            };
            self.ack_to(e, &mut out);
        }
        if self.ack_due.is_empty() {
            self.ack_since = None;
        }
        self.push_acks(out);
    }

    fn push_acks(&mut self, out: BTreeMap<HostId, Vec<AckEntry>>) {
        for (h, v) in out {
            self.stats.ack_sent += 1;
            self.stats.ack_entries += v.len() as u64;
            self.out.push_back((h, Packet::Ack(v)));
        }
    }

    /// Apply an ACK to its sending task if it is here, else send it on
    /// towards the freshest location known (each forward goes to a
    /// strictly fresher one, as INTERs do), or keep it for a task on its
    /// way here. An ACK for a task on a failed host is dropped: the task's
    /// messages died with it.
    fn ack_to(&mut self, e: AckEntry, out: &mut BTreeMap<HostId, Vec<AckEntry>>) {
        if let Some(t) = self.present.get_mut(&e.src) {
            if let Some(p) = t.sent.get_mut(&e.dst) {
                p.ack(e.seq);
            }
            return;
        }
        let loc = match self.known(e.src) {
            Some(l) if l.fresh > e.src_loc.fresh => l,
            _ => e.src_loc,
        };
        if self.dead.contains(&loc.host) {
            tracing::debug!(src = %e.src, "ACK for a task on a failed host");
        } else if loc.host == self.me {
            let seq = self
                .early_acks
                .entry(e.src)
                .or_default()
                .entry(e.dst)
                .or_insert(0);
            *seq = (*seq).max(e.seq);
        } else {
            out.entry(loc.host)
                .or_default()
                .push(AckEntry { src_loc: loc, ..e });
        }
    }

    fn on_ack(&mut self, entries: Vec<AckEntry>) {
        let mut out = BTreeMap::new();
        for e in entries {
            self.ack_to(e, &mut out);
        }
        self.push_acks(out);
    }

    /// A task arrived (the other half of [`Node::migrate`]).
    fn arrive(&mut self, img: TaskImage) {
        let id = img.id;
        let mut sent: HashMap<TaskId, Pair> = img
            .sent
            .into_iter()
            .map(|(d, seq)| {
                (
                    d,
                    Pair {
                        seq,
                        ..Pair::default()
                    },
                )
            })
            .collect();
        for (d, seq, b) in img.unacked {
            let p = sent.entry(d).or_default();
            p.bytes += Pair::cost(&b);
            p.unacked.push_back((seq, b));
        }
        for (d, seq) in self.early_acks.remove(&id).unwrap_or_default() {
            if let Some(p) = sent.get_mut(&d) {
                p.ack(seq);
            }
        }
        let mut t = Task {
            migrations: img.migrations,
            app: img.app,
            sent,
            recvd: img.recvd.into_iter().collect(),
            ahead: HashMap::new(),
            ahead_since: HashMap::new(),
            mailbox: img.mailbox.into(),
        };
        for m in img.ahead {
            t.ahead_since.insert(m.src, self.now);
            t.ahead.entry(m.src).or_default().insert(m.seq, m);
        }
        self.present.insert(id, t);
        self.table.insert(
            id,
            Loc {
                host: self.me,
                fresh: img.migrations + 1,
            },
        );
        self.stats.migrations_in += 1;
        self.events.push_back(Event::Arrived {
            task: id,
            app: self.present[&id].app.clone(),
            started_ns: img.started_ns,
            migrations: img.migrations,
        });
        self.announce(id);
        self.flush_held(id);
        // A host its old host did not know had failed may have taken what
        // it had unacknowledged.
        if self.dead.iter().any(|h| !img.dead.contains(h)) {
            self.resend(id);
        }
        for (reason, dst, seq) in self.early_refused.remove(&id).unwrap_or_default() {
            self.on_refused(reason, id, Loc::default(), dst, seq);
        }
    }

    /// Tell `m`'s sender that `m` cannot be delivered.
    fn refuse(&mut self, reason: RefuseReason, m: &Inter) {
        self.stats.refused += 1;
        self.on_refused(reason, m.src, m.src_loc, m.dst, m.seq);
    }

    fn on_refused(
        &mut self,
        reason: RefuseReason,
        src: TaskId,
        src_loc: Loc,
        dst: TaskId,
        seq: u64,
    ) {
        if let Some(t) = self.present.get_mut(&src) {
            if let Some(p) = t.sent.get_mut(&dst) {
                p.forget(seq);
            }
            self.events.push_back(Event::Refused {
                task: src,
                to: dst,
                seq,
                reason,
            });
            return;
        }
        let loc = match self.known(src) {
            Some(l) if l.fresh > src_loc.fresh => l,
            _ => src_loc,
        };
        if loc.host == self.me {
            // On its way here: told when it arrives.
            self.early_refused
                .entry(src)
                .or_default()
                .push((reason, dst, seq));
            return;
        }
        if self.dead.contains(&loc.host) {
            tracing::debug!(%src, %dst, seq, ?reason, "refusal for a task that is gone");
            return;
        }
        self.out.push_back((
            loc.host,
            Packet::Refused {
                reason,
                src,
                src_loc: loc,
                dst,
                seq,
            },
        ));
    }

    /// When a gap in `src`'s messages that opened at `since` is skipped
    /// (after a failure only). A surviving sender resends what a failure
    /// may have taken, so its gaps fill; a sender last seen on a failed
    /// host is given `dead_wait_ns` from the failure to show it survived
    /// (its resends carry its new location), one last seen elsewhere (it
    /// may have moved to the failed host since) four times that.
    fn gap_due(&self, src: TaskId, since: u64) -> u64 {
        let on_dead = self.known(src).is_some_and(|l| self.dead.contains(&l.host));
        let wait = if on_dead {
            self.cfg.dead_wait_ns
        } else {
            self.cfg.dead_wait_ns.saturating_mul(4)
        };
        since.max(self.failed_at).saturating_add(wait)
    }

    /// After a failure: messages a lost sender sent through the failed
    /// host will never come; move a pair's order past them (`gap_due`).
    fn skip_gaps(&mut self) {
        let mut gaps = Vec::new();
        let now = self.now;
        for (&task, t) in self.present.iter() {
            let srcs: Vec<TaskId> = t
                .ahead_since
                .iter()
                .filter(|(src, s)| self.gap_due(**src, **s) <= now)
                .map(|(src, _)| *src)
                .collect();
            for src in srcs {
                let first = *t.ahead[&src].keys().next().expect("non-empty");
                let last = t.recvd.get(&src).copied().unwrap_or(0);
                gaps.push((task, src, last + 1, first - 1));
            }
        }
        for (task, from, first, last) in gaps {
            self.stats.gaps += 1;
            self.events.push_back(Event::Gap {
                task,
                from,
                first,
                last,
            });
            let m = Inter {
                flags: FLAG_SKIP,
                hops: 0,
                seq: last,
                src: from,
                src_loc: Loc::default(),
                dst: task,
                dst_loc: Loc::default(),
                payload: Vec::new(),
                acks: Vec::new(),
            };
            // Pretend the last missing one arrived as a tombstone.
            let t = self.present.get_mut(&task).expect("present");
            t.recvd.insert(from, last - 1);
            self.accept(m);
        }
    }

    // ----- the broadcast baseline -----

    fn look_up(&mut self, m: Inter) {
        let task = m.dst;
        let new = !self.lookups.contains_key(&task);
        self.lookups.entry(task).or_default().waiting.push(m);
        if new {
            self.broadcast_where(task);
        }
    }

    fn broadcast_where(&mut self, task: TaskId) {
        let others: Vec<HostId> = (0..self.hosts)
            .filter(|h| *h != self.me && !self.dead.contains(h))
            .collect();
        let l = self.lookups.entry(task).or_default();
        l.answers = 0;
        l.expected = others.len();
        l.retry_at = None;
        for h in others {
            self.stats.where_sent += 1;
            self.out.push_back((h, Packet::Where { task }));
        }
    }

    fn on_here(&mut self, task: TaskId, loc: Option<Loc>) {
        if let Some(loc) = loc {
            self.learn(task, loc);
        }
        let known = self.known(task).is_some();
        let now = self.now;
        let Some(l) = self.lookups.get_mut(&task) else {
            return;
        };
        l.answers += 1;
        if l.answers < l.expected {
            return;
        }
        if !known {
            l.retry_at = Some(now + self.cfg.lookup_retry_ns);
            return;
        }
        let l = self.lookups.remove(&task).expect("lookup");
        let loc = self.known(task).expect("known");
        for mut m in l.waiting {
            m.dst_loc = loc;
            self.route(m, false);
        }
    }
}

#[cfg(test)]
mod tests;
