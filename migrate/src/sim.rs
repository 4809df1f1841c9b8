//! A deterministic simulator: many host runtimes ([`Node`]s) in one process,
//! joined by a simulated network where every ordered pair of hosts is a
//! reliable FIFO channel (as the real transport is) with a random delay per
//! packet, so different pairs reorder against each other. An application
//! of tasks sends random traffic and a scheduler migrates random tasks
//! (again while messages to them are in flight, and back to earlier hosts);
//! every delivered message is checked for integrity, the right receiver,
//! uniqueness and per-pair order, and every sent one for delivery.
//!
//! One seed gives one run; a failing run prints the seed to replay with
//! `MIGRATE_SIM_SEED=<seed> cargo test -p migrate --test sim replay`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::proto::wire::peek_inter;
use crate::proto::{
    home_set, Config, Event, HostId, Loc, Mode, Node, Packet, RefuseReason, TaskId,
};

/// What one run does.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub hosts: u32,
    pub tasks: u32,
    /// Messages the tasks send in all.
    pub sends: u32,
    /// Migrations the scheduler makes.
    pub migrations: u32,
    pub mode: Mode,
    pub seed: u64,
    /// Time between two application operations (ns).
    pub op_gap_ns: u64,
    /// Packet delay range (ns).
    pub min_delay_ns: u64,
    pub max_delay_ns: u64,
    /// Fail this host after this fraction of the operations (0..1).
    pub fail: Option<(HostId, f64)>,
    /// Instead of `fail`'s host, fail the host then forwarding or holding
    /// the most messages between tasks of other hosts.
    pub fail_busiest: bool,
    /// How long after a failure the other hosts learn of it (ns).
    pub detect_ns: u64,
    /// The nodes' configuration (its mode is overwritten by `mode`).
    pub node: Config,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            hosts: 16,
            tasks: 64,
            sends: 1000,
            migrations: 100,
            mode: Mode::Seed,
            seed: 1,
            op_gap_ns: 3_000,
            min_delay_ns: 2_000,
            max_delay_ns: 100_000,
            fail: None,
            fail_busiest: false,
            detect_ns: 50_000,
            node: Config {
                dead_wait_ns: 2_000_000,
                ..Config::default()
            },
        }
    }
}

/// What one run found. A correct run has every violation counter at 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub sent: u64,
    pub delivered: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Delivered to a task other than the addressee, or altered.
    pub misdelivered: u64,
    /// Neither delivered nor accounted for (refused, skipped after a failure,
    /// or sent by a task lost with its host).
    pub lost: u64,
    pub migrations: u64,
    /// INTER packets a runtime forwarded (or held and then sent on).
    pub forwarded: u64,
    /// LOCAL, WHERE and HERE packets.
    pub control: u64,
    /// Control packets sent after all tasks were spawned and announced.
    pub control_after_start: u64,
    pub max_hops: u8,
    /// INTER packets seen with more forwards than the bound allows.
    pub hop_violations: u64,
    /// Messages refused, and how many of those were for tasks that were not lost.
    pub refused: u64,
    pub refused_alive: u64,
    /// Messages skipped by receivers after a failure.
    pub skipped: u64,
    /// Gaps reported for a sender that did not fail (its resends must
    /// have filled them).
    pub gaps_alive: u64,
    /// Longest time from a message's send (or the failure's detection, if
    /// later) to its refusal (ns).
    pub max_refusal_ns: u64,
    /// Messages whose sender failed with its host that were in flight to
    /// or from the failed host, or held there, when it failed.
    pub dropped_with_host: u64,
    /// Messages between two surviving tasks that were in flight to or from
    /// the failed host, or held there, when it failed: the senders' resends
    /// must deliver them.
    pub through_failed: u64,
    /// ACK packets, the pair entries they carried, and messages sent
    /// again after the failure.
    pub acks: u64,
    pub ack_entries: u64,
    /// ACK entries that rode on INTER packets.
    pub ack_piggybacked: u64,
    pub resent: u64,
    /// Copies the receivers dropped by seq (after resends).
    pub dropped_copies: u64,
    /// Messages of live tasks still unacknowledged when the network went quiet.
    pub unacked: u64,
    /// Messages still held or queued when the network went quiet.
    pub stuck: u64,
}

impl SimReport {
    /// The five properties held (and the hop bound).
    pub fn ok(&self) -> bool {
        self.duplicates == 0
            && self.out_of_order == 0
            && self.misdelivered == 0
            && self.lost == 0
            && self.hop_violations == 0
            && self.refused_alive == 0
            && self.gaps_alive == 0
            && self.stuck == 0
            && self.unacked == 0
    }
}

enum Ev {
    Packet {
        from: HostId,
        to: HostId,
        bytes: Vec<u8>,
    },
    Op,
    Timer(HostId),
    Detect(HostId),
}

struct Sim {
    cfg: SimConfig,
    rng: SmallRng,
    now: u64,
    nodes: Vec<Node>,
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    evs: HashMap<usize, Ev>,
    order: u64,
    /// Arrival time of the last packet on each channel (FIFO).
    last: Vec<u64>,
    /// Each node's earliest timer scheduled (one event per wake-up, not
    /// one per call on the node).
    timer_at: Vec<Option<u64>>,
    /// The scheduler's view: where each task is (None: in transit).
    at: HashMap<TaskId, Option<HostId>>,
    migrations_of: HashMap<TaskId, u32>,
    recently_arrived: Vec<TaskId>,
    /// The application's books: per pair, messages sent and last received.
    sent: HashMap<(TaskId, TaskId), u64>,
    got: HashMap<(TaskId, TaskId), u64>,
    failed: Option<HostId>,
    lost_tasks: HashSet<TaskId>,
    detected_at: u64,
    /// Send times of messages sent after a failure (for the refusal bound).
    sent_at: HashMap<(TaskId, TaskId, u64), u64>,
    /// Per pair: sequence numbers accounted for without delivery.
    excused: HashMap<(TaskId, TaskId), HashSet<u64>>,
    r: SimReport,
}

/// A message's payload: who, to whom, which, and filler derived from them,
/// so the receiver can check it is whole and meant for it.
fn payload(src: TaskId, dst: TaskId, k: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(24 + 16);
    v.extend_from_slice(&src.0.to_le_bytes());
    v.extend_from_slice(&dst.0.to_le_bytes());
    v.extend_from_slice(&k.to_le_bytes());
    let fill = (src.0 ^ dst.0.rotate_left(7) ^ k.rotate_left(13)) as u8;
    v.extend((0..(k % 17)).map(|i| fill.wrapping_add(i as u8)));
    v
}

impl Sim {
    fn schedule(&mut self, at: u64, ev: Ev) {
        self.order += 1;
        let id = self.order as usize;
        self.evs.insert(id, ev);
        self.queue.push(Reverse((at, self.order, id)));
    }

    fn alive(&self, h: HostId) -> bool {
        self.failed != Some(h)
    }

    /// Take what node `h` wants to send and do, after any call on it.
    fn drain(&mut self, h: HostId) {
        let n = self.cfg.hosts as usize;
        while let Some((to, bytes)) = self.nodes[h as usize].poll_transmit() {
            if !self.alive(to) {
                // Before the others learn of the failure, what they send
                // there is lost in the transport, as on a real link.
                self.lost_in_transit(&bytes);
                continue;
            }
            let delay = self
                .rng
                .gen_range(self.cfg.min_delay_ns..=self.cfg.max_delay_ns);
            let ch = h as usize * n + to as usize;
            let at = (self.now + delay).max(self.last[ch] + 1);
            self.last[ch] = at;
            self.schedule(at, Ev::Packet { from: h, to, bytes });
        }
        while let Some(ev) = self.nodes[h as usize].poll_event() {
            match ev {
                Event::Arrived {
                    task, migrations, ..
                } => {
                    self.at.insert(task, Some(h));
                    self.migrations_of.insert(task, migrations);
                    self.recently_arrived.push(task);
                }
                Event::Left { .. } | Event::PeerLost { .. } => {}
                Event::Refused {
                    task,
                    to,
                    seq,
                    reason,
                } => {
                    self.r.refused += 1;
                    if !self.lost_tasks.contains(&to) || reason != RefuseReason::TaskLost {
                        self.r.refused_alive += 1;
                    }
                    let from = self
                        .sent_at
                        .get(&(task, to, seq))
                        .copied()
                        .unwrap_or(0)
                        .max(self.detected_at);
                    self.r.max_refusal_ns =
                        self.r.max_refusal_ns.max(self.now.saturating_sub(from));
                    self.excused.entry((task, to)).or_default().insert(seq);
                }
                Event::Gap {
                    task,
                    from,
                    first,
                    last,
                } => {
                    if !self.lost_tasks.contains(&from) {
                        self.r.gaps_alive += 1;
                    }
                    let e = self.excused.entry((from, task)).or_default();
                    for s in first..=last {
                        self.r.skipped += 1;
                        e.insert(s);
                    }
                    // The application's count moves past them too.
                    self.got.insert((from, task), last);
                }
            }
        }
        if let Some(t) = self.nodes[h as usize].poll_timeout() {
            let t = t.max(self.now);
            if self.timer_at[h as usize].is_none_or(|x| t < x) {
                self.timer_at[h as usize] = Some(t);
                self.schedule(t, Ev::Timer(h));
            }
        }
    }

    /// The application at host `h` reads everything `task` has.
    fn read(&mut self, h: HostId, task: TaskId) {
        while let Ok(Some((from, p))) = self.nodes[h as usize].recv(task) {
            self.r.delivered += 1;
            if p.len() < 24 {
                self.r.misdelivered += 1;
                continue;
            }
            let src = TaskId(u64::from_le_bytes(p[0..8].try_into().expect("8")));
            let dst = TaskId(u64::from_le_bytes(p[8..16].try_into().expect("8")));
            let k = u64::from_le_bytes(p[16..24].try_into().expect("8"));
            if src != from || dst != task || p != payload(src, dst, k) {
                self.r.misdelivered += 1;
                continue;
            }
            let last = self.got.entry((src, dst)).or_insert(0);
            let excused = self.excused.get(&(src, dst));
            let mut expect = *last + 1;
            while excused.is_some_and(|e| e.contains(&expect)) {
                expect += 1;
            }
            if k <= *last {
                self.r.duplicates += 1;
            } else if k != expect {
                self.r.out_of_order += 1;
                *last = k;
            } else {
                *last = k;
            }
        }
    }

    fn present_tasks(&self) -> Vec<(TaskId, HostId)> {
        let mut v: Vec<(TaskId, HostId)> = self
            .at
            .iter()
            .filter_map(|(t, h)| h.map(|h| (*t, h)))
            .filter(|(t, _)| !self.lost_tasks.contains(t))
            .collect();
        v.sort_unstable();
        v
    }

    fn op(&mut self, migrate: bool) {
        let present = self.present_tasks();
        if present.is_empty() {
            return;
        }
        if migrate {
            // Often the task that arrived last: it moves again while
            // messages to it are still on their way.
            let pick = if self.rng.gen_bool(0.3) {
                self.recently_arrived
                    .iter()
                    .rev()
                    .find_map(|t| present.iter().find(|(p, _)| p == t).copied())
            } else {
                None
            };
            let (task, h) = pick.unwrap_or_else(|| present[self.rng.gen_range(0..present.len())]);
            let mut to = self.rng.gen_range(0..self.cfg.hosts - 1);
            if to >= h {
                to += 1;
            }
            if !self.alive(to) {
                return;
            }
            self.read(h, task);
            if self.nodes[h as usize].migrate(self.now, task, to).is_ok() {
                self.at.insert(task, None);
                *self.migrations_of.entry(task).or_insert(0) += 1;
                self.r.migrations += 1;
            }
            self.drain(h);
        } else {
            let (src, h) = present[self.rng.gen_range(0..present.len())];
            // Mostly to a few partners (pairs then have many messages in
            // flight at once, both ways), sometimes to anyone.
            let n = self.cfg.tasks as u64;
            let d = if self.rng.gen_bool(0.8) {
                (src.0 + [1, 2, n - 1][self.rng.gen_range(0..3)]) % n
            } else {
                let mut d = self.rng.gen_range(0..n - 1);
                if d >= src.0 {
                    d += 1;
                }
                d
            };
            let dst = TaskId(d);
            let k = self.sent.get(&(src, dst)).copied().unwrap_or(0) + 1;
            let p = payload(src, dst, k);
            if let Ok(seq) = self.nodes[h as usize].send(src, dst, p) {
                self.sent.insert((src, dst), k);
                if self.failed.is_some() {
                    self.sent_at.insert((src, dst, seq), self.now);
                }
                self.r.sent += 1;
            }
            self.drain(h);
            // Now and then a task reads its mailbox.
            let (t, th) = present[self.rng.gen_range(0..present.len())];
            self.read(th, t);
        }
    }

    /// A packet to or from the failed host that will never arrive.
    fn lost_in_transit(&mut self, bytes: &[u8]) {
        match Packet::decode(bytes) {
            Ok(Packet::Migrate(img)) => {
                self.lost_tasks.insert(img.id);
            }
            Ok(Packet::Inter(m)) => self.gone_with_host(m.src, m.dst, m.seq),
            _ => {}
        }
    }

    /// A message gone with the failed host: excused only if its sender
    /// failed too (it cannot send it again).
    fn gone_with_host(&mut self, src: TaskId, dst: TaskId, seq: u64) {
        if self.lost_tasks.contains(&src) {
            self.r.dropped_with_host += 1;
            self.excused.entry((src, dst)).or_default().insert(seq);
        } else if !self.lost_tasks.contains(&dst) {
            self.r.through_failed += 1;
        }
    }

    /// The host forwarding or holding the most messages between tasks of
    /// other hosts now.
    fn busiest(&self) -> HostId {
        let mut score = vec![0u64; self.cfg.hosts as usize];
        let elsewhere = |t: &TaskId, h: HostId| self.at.get(t).copied().flatten() != Some(h);
        for ev in self.evs.values() {
            if let Ev::Packet { from, to, bytes } = ev {
                if let Ok(Packet::Inter(m)) = Packet::decode(bytes) {
                    for h in [*from, *to] {
                        if elsewhere(&m.src, h) && elsewhere(&m.dst, h) {
                            score[h as usize] += 1;
                        }
                    }
                }
            }
        }
        for (h, n) in self.nodes.iter().enumerate() {
            score[h] += n.held_count() as u64;
        }
        (0..self.cfg.hosts)
            .max_by_key(|h| (score[*h as usize], Reverse(*h)))
            .unwrap_or(0)
    }

    fn fail(&mut self, host: HostId) {
        self.failed = Some(host);
        for (t, h) in self.at.iter() {
            if *h == Some(host) {
                self.lost_tasks.insert(*t);
            }
        }
        // A task in transit to or from the failed host: its MIGRATE is
        // dropped below, and the task with it (first, so that the messages
        // below are judged by whether their sender survived).
        let mut pending = Vec::new();
        for (id, ev) in self.evs.iter() {
            if let Ev::Packet { from, to, bytes } = ev {
                if *from == host || *to == host {
                    let migrate = matches!(Packet::decode(bytes), Ok(Packet::Migrate(_)));
                    pending.push((!migrate, *id, bytes.clone()));
                }
            }
        }
        pending.sort_unstable_by_key(|(later, id, _)| (*later, *id));
        // Messages passing through the failed host go with it; their
        // senders, when they survive, send them again.
        let gone = self.nodes[host as usize].held_messages();
        for (_, id, bytes) in pending {
            self.lost_in_transit(&bytes);
            self.evs.remove(&id);
        }
        for (src, dst, seq) in gone {
            self.gone_with_host(src, dst, seq);
        }
        for h in 0..self.cfg.hosts {
            if h != host {
                self.schedule(self.now + self.cfg.detect_ns, Ev::Detect(h));
            }
        }
    }

    fn run(mut self) -> SimReport {
        let mut cfg = self.cfg.node.clone();
        cfg.mode = self.cfg.mode;
        self.nodes = (0..self.cfg.hosts)
            .map(|h| Node::new(h, self.cfg.hosts, cfg.clone()))
            .collect();
        // Spawn every task on a random host (the application never names a
        // host to send; only the scheduler does, to spawn and migrate).
        for t in 0..self.cfg.tasks as u64 {
            let h = self.rng.gen_range(0..self.cfg.hosts);
            let task = TaskId(t);
            self.nodes[h as usize]
                .spawn(task, Vec::new())
                .expect("spawn");
            self.at.insert(task, Some(h));
            if self.cfg.mode == Mode::Fowler {
                // Fowler: every host knows every task's creation host.
                for n in self.nodes.iter_mut() {
                    n.learn(task, Loc { host: h, fresh: 1 });
                }
            }
            self.drain(h);
        }
        let start_control: u64 = self.nodes.iter().map(|n| n.stats().control()).sum();
        let ops = self.cfg.sends + self.cfg.migrations;
        let fail_at = self.cfg.fail.map(|(h, f)| (h, (f * ops as f64) as u32));
        let mut migrations_left = self.cfg.migrations;
        for i in 0..ops {
            self.schedule(i as u64 * self.cfg.op_gap_ns + 1, Ev::Op);
        }
        let mut done = 0u32;
        while let Some(Reverse((at, _, id))) = self.queue.pop() {
            let Some(ev) = self.evs.remove(&id) else {
                continue;
            };
            self.now = at;
            match ev {
                Ev::Packet { from, to, bytes } => {
                    if let Some((dst, hops)) = peek_inter(&bytes) {
                        // Every forward follows a strictly fresher location,
                        // except one hop to a home: at most the task's
                        // migrations + 2.
                        let m = self.migrations_of.get(&dst).copied().unwrap_or(0);
                        if hops as u32 > m + 2 {
                            self.r.hop_violations += 1;
                        }
                        self.r.max_hops = self.r.max_hops.max(hops);
                    }
                    self.nodes[to as usize].receive(self.now, from, &bytes);
                    self.drain(to);
                }
                Ev::Op => {
                    if let Some((h, at)) = fail_at {
                        if done == at && self.failed.is_none() {
                            let h = if self.cfg.fail_busiest {
                                self.busiest()
                            } else {
                                h
                            };
                            self.fail(h);
                        }
                    }
                    let left = ops - done;
                    let migrate = self.rng.gen_range(0..left) < migrations_left;
                    if migrate {
                        migrations_left -= 1;
                    }
                    done += 1;
                    self.op(migrate);
                }
                Ev::Timer(h) => {
                    self.timer_at[h as usize] = None;
                    if self.alive(h) {
                        self.nodes[h as usize].handle_timeout(self.now);
                        self.drain(h);
                    }
                }
                Ev::Detect(h) => {
                    let dead = self.failed.expect("failed");
                    self.detected_at = self.now;
                    self.nodes[h as usize].host_failed(self.now, dead);
                    self.drain(h);
                }
            }
        }
        // The network is quiet: read every mailbox and settle the books.
        for (task, h) in self.present_tasks() {
            self.read(h, task);
            let (mail, ahead) = self.nodes[h as usize].queued(task).unwrap_or((0, 0));
            self.r.stuck += (mail + ahead) as u64;
        }
        for (h, n) in self.nodes.iter().enumerate() {
            if self.alive(h as HostId) {
                self.r.stuck += n.held_count() as u64;
                self.r.unacked += n.unacked_count() as u64;
            }
        }
        let sent: Vec<_> = self.sent.iter().map(|(k, v)| (*k, *v)).collect();
        for ((src, dst), n) in sent {
            if self.lost_tasks.contains(&src) || self.lost_tasks.contains(&dst) {
                // Lost with their host: messages from them may be gone;
                // messages to them must have been refused or delivered
                // before the failure (checked by refused_alive and the
                // order checks); not counted as lost.
                continue;
            }
            let got = self.got.get(&(src, dst)).copied().unwrap_or(0);
            if got < n {
                let excused = self.excused.get(&(src, dst));
                let missing = (got + 1..=n)
                    .filter(|s| !excused.is_some_and(|e| e.contains(s)))
                    .count();
                self.r.lost += missing as u64;
                if missing > 0 {
                    tracing::warn!(%src, %dst, got, sent = n, "messages lost");
                }
            }
        }
        for n in &self.nodes {
            let s = n.stats();
            self.r.forwarded += s.forwarded;
            self.r.control += s.control();
            self.r.acks += s.ack_sent;
            self.r.ack_entries += s.ack_entries;
            self.r.ack_piggybacked += s.ack_piggybacked;
            self.r.resent += s.resent;
            // Without a failure nothing is resent, so a copy is a bug.
            if self.failed.is_some() {
                self.r.dropped_copies += s.duplicates;
            } else {
                self.r.duplicates += s.duplicates;
            }
        }
        self.r.control_after_start = self.r.control - start_control;
        self.r
    }
}

/// Run one simulation.
pub fn run(cfg: SimConfig) -> SimReport {
    let n = cfg.hosts as usize;
    let seed = cfg.seed;
    let sim = Sim {
        rng: SmallRng::seed_from_u64(seed),
        now: 0,
        nodes: Vec::new(),
        queue: BinaryHeap::new(),
        evs: HashMap::new(),
        order: 0,
        last: vec![0; n * n],
        timer_at: vec![None; n],
        at: HashMap::new(),
        migrations_of: HashMap::new(),
        recently_arrived: Vec::new(),
        sent: HashMap::new(),
        got: HashMap::new(),
        failed: None,
        lost_tasks: HashSet::new(),
        detected_at: 0,
        sent_at: HashMap::new(),
        excused: HashMap::new(),
        r: SimReport {
            seed,
            ..SimReport::default()
        },
        cfg,
    };
    sim.run()
}

/// The home set's hosts of a task (re-exported for tests and docs).
pub fn homes(task: TaskId, hosts: u32, copies: usize) -> Vec<HostId> {
    home_set(task, hosts, copies)
}
