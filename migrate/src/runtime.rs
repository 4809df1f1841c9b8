//! A host's runtime over the message layer: one [`Node`] and one
//! endpoint (LLC or TCP), the node's packets carried as active messages
//! ([`AM_ID`]) on reliable, per-peer FIFO connections.
//!
//! Delivery is pull-style (as in deck's runtime): whoever calls the runtime
//! makes progress, routes the endpoint's events into the node and sends
//! what the node wants sent, under one lock. A peer the message layer
//! reports failed ([`msg_layer::Event::PeerEnded`]) is a failed host for
//! the node: its tasks are lost, and senders to them get
//! [`Event::Refused`] with [`RefuseReason::TaskLost`] in bounded time.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use msg_layer::pace::{Instant as PaceInstant, Pace, Pacer};
use msg_layer::transport::{AnyTransport, TransportSpec};
use msg_layer::{Addr, Endpoint, PeerId};
use parking_lot::Mutex;

use crate::proto::{Config, Event, HostId, Node, ProtoError, Stats, TaskId};

/// The active-message handler id of the runtime's packets.
pub const AM_ID: u16 = 0x4d47;

/// Busy-poll this long after the last activity before sleeping (the
/// message layer's default spin; the policy is `msg_layer::pace`'s).
const SPIN: Duration = Duration::from_micros(200);
/// Longest single sleep of a waiter.
const MAX_SLEEP: Duration = Duration::from_millis(1);

/// Why a runtime call failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The protocol refused the call (nothing changed).
    #[error(transparent)]
    Proto(#[from] ProtoError),
    /// Opening the transport or the endpoint failed.
    #[error("opening {spec}: {source}")]
    Open {
        /// The transport spec.
        spec: String,
        /// The message layer's error.
        source: msg_layer::Error,
    },
    /// A peer's address could not be added.
    #[error("host {host} at {addr}: {source}")]
    Peer {
        /// The host.
        host: HostId,
        /// Its address.
        addr: String,
        /// The message layer's error.
        source: msg_layer::Error,
    },
    /// The message layer failed as a whole.
    #[error("transport: {0}")]
    Transport(#[source] msg_layer::Error),
    /// A wait reached its deadline.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
}

struct State {
    node: Node,
    events: VecDeque<Event>,
}

/// One host's runtime (the seed's communication processor).
pub struct Runtime {
    me: HostId,
    ep: Endpoint<AnyTransport>,
    peers: Vec<Option<PeerId>>,
    host_of: HashMap<PeerId, HostId>,
    st: Mutex<State>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("me", &self.me).finish()
    }
}

impl Runtime {
    /// Host `me` of a job whose hosts' endpoints are at `addrs` (one per
    /// host, this one's included, in host order); opens `spec` for this one.
    /// Over LLC its frames are authenticated with the spec's key
    /// (`TransportSpec::with_auth_key`) or else `LLC_AUTH_KEY`'s; every
    /// host of the job needs the same. With neither they are not, and a
    /// warning says so.
    pub fn open(
        me: HostId,
        spec: &TransportSpec,
        addrs: &[Addr],
        cfg: Config,
    ) -> Result<Runtime, MigrateError> {
        let ep = open_endpoint(spec)?;
        Runtime::with_endpoint(me, ep, addrs, cfg)
    }

    /// [`Runtime::open`] with an endpoint already open.
    pub fn with_endpoint(
        me: HostId,
        ep: Endpoint<AnyTransport>,
        addrs: &[Addr],
        cfg: Config,
    ) -> Result<Runtime, MigrateError> {
        let hosts = addrs.len() as u32;
        if me >= hosts {
            return Err(ProtoError::NoSuchHost { host: me, hosts }.into());
        }
        let mut peers = vec![None; addrs.len()];
        let mut host_of = HashMap::new();
        for (h, a) in addrs.iter().enumerate() {
            if h as HostId == me {
                continue;
            }
            let p = ep.add_peer(a).map_err(|source| MigrateError::Peer {
                host: h as HostId,
                addr: a.to_string(),
                source,
            })?;
            peers[h] = Some(p);
            host_of.insert(p, h as HostId);
        }
        Ok(Runtime {
            me,
            ep,
            peers,
            host_of,
            st: Mutex::new(State {
                node: Node::new(me, hosts, cfg),
                events: VecDeque::new(),
            }),
        })
    }

    /// A job of `specs.len()` hosts in this process, one runtime each
    /// (tests, examples, programs that run hosts as threads).
    pub fn in_process(specs: &[TransportSpec], cfg: Config) -> Result<Vec<Runtime>, MigrateError> {
        let eps = specs
            .iter()
            .map(open_endpoint)
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<Addr> = eps.iter().map(|e| e.local_addr()).collect();
        eps.into_iter()
            .enumerate()
            .map(|(i, ep)| Runtime::with_endpoint(i as HostId, ep, &addrs, cfg.clone()))
            .collect()
    }

    /// This host's index in the job.
    pub fn host(&self) -> HostId {
        self.me
    }

    /// Hosts in the job.
    pub fn hosts(&self) -> u32 {
        self.peers.len() as u32
    }

    /// This endpoint's address (what the other hosts are given).
    pub fn local_addr(&self) -> Addr {
        self.ep.local_addr()
    }

    /// The transport's name (backend and mode).
    pub fn transport_name(&self) -> String {
        self.ep.transport_name()
    }

    /// The clock the node runs on: the system's real-time clock in ns, so
    /// that a migration's start stamp (carried with the task) means the
    /// same on every host of one machine or of a synchronized cluster. The
    /// node's timers use differences only.
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    }

    /// The node's counters.
    pub fn stats(&self) -> Stats {
        self.st.lock().node.stats().clone()
    }

    /// Tasks on this host now.
    pub fn tasks(&self) -> Vec<TaskId> {
        let mut v: Vec<TaskId> = self.st.lock().node.tasks().collect();
        v.sort_unstable();
        v
    }

    /// Start `task` here with application state `state` (Figure 1).
    pub fn spawn(&self, task: TaskId, state: Vec<u8>) -> Result<(), MigrateError> {
        let mut st = self.st.lock();
        st.node.spawn(task, state)?;
        self.flush(&mut st);
        Ok(())
    }

    /// `src` (on this host) sends `data` to `dst`, wherever it is. Returns
    /// the pair's sequence number.
    pub fn send(&self, src: TaskId, dst: TaskId, data: Vec<u8>) -> Result<u64, MigrateError> {
        let mut st = self.st.lock();
        let seq = st.node.send(src, dst, data)?;
        self.flush(&mut st);
        Ok(seq)
    }

    /// The next message for `task` (on this host), after a round of
    /// progress: (sender, data).
    pub fn try_recv(&self, task: TaskId) -> Result<Option<(TaskId, Vec<u8>)>, MigrateError> {
        self.progress()?;
        Ok(self.st.lock().node.recv(task)?)
    }

    /// Wait up to `timeout` for a message for `task`.
    pub fn recv_timeout(
        &self,
        task: TaskId,
        timeout: Duration,
    ) -> Result<(TaskId, Vec<u8>), MigrateError> {
        self.wait_for("a message", timeout, |st| st.node.recv(task).transpose())?
            .map_err(Into::into)
    }

    /// Move `task` to host `to` with application state `state`, its
    /// mailbox, resequencing queue and correspondent lists.
    pub fn migrate(&self, task: TaskId, to: HostId, state: Vec<u8>) -> Result<(), MigrateError> {
        let mut st = self.st.lock();
        st.node.set_app_state(task, state)?;
        let now = self.now();
        st.node.migrate(now, task, to)?;
        self.flush(&mut st);
        Ok(())
    }

    /// The next event (task arrived or left, message refused, gap).
    pub fn poll_event(&self) -> Option<Event> {
        let _ = self.progress();
        self.st.lock().events.pop_front()
    }

    /// Wait up to `timeout` for an event.
    pub fn wait_event(&self, timeout: Duration) -> Result<Event, MigrateError> {
        self.wait_for("an event", timeout, |st| st.events.pop_front())
    }

    /// One round: the endpoint's progress, its events into the node, the
    /// node's timers, its packets out. True when anything moved.
    pub fn progress(&self) -> Result<bool, MigrateError> {
        let moved = self.ep.progress().map_err(MigrateError::Transport)?;
        let mut st = self.st.lock();
        let mut any = moved;
        while let Some(ev) = self.ep.poll_event() {
            any = true;
            match ev {
                msg_layer::Event::Message(m) => {
                    let Some(&from) = self.host_of.get(&m.peer) else {
                        continue;
                    };
                    if m.handler == AM_ID {
                        let now = self.now();
                        st.node.receive(now, from, m.data());
                    }
                    self.ep.recycle(m);
                }
                msg_layer::Event::PeerEnded { peer, error } => {
                    if let Some(&h) = self.host_of.get(&peer) {
                        tracing::info!(host = h, %error, "host ended");
                        let now = self.now();
                        st.node.host_failed(now, h);
                    }
                }
                msg_layer::Event::Completed { .. } | msg_layer::Event::Released(_) => {}
            }
        }
        if st.node.poll_timeout().is_some_and(|t| t <= self.now()) {
            let now = self.now();
            st.node.handle_timeout(now);
        }
        self.flush(&mut st);
        Ok(any)
    }

    /// Hand the node's packets to the endpoint; collect its events.
    fn flush(&self, st: &mut State) {
        while let Some((h, bytes)) = st.node.poll_transmit() {
            let Some(p) = self.peers.get(h as usize).copied().flatten() else {
                continue;
            };
            if let Err(e) = self.ep.am_post(p, AM_ID, bytes) {
                // The peer failed: the node learns it from the endpoint's
                // event; this packet is lost with the host.
                tracing::debug!(host = h, %e, "packet to a failed host");
                let now = self.now();
                st.node.host_failed(now, h);
            }
        }
        while let Some(ev) = st.node.poll_event() {
            st.events.push_back(ev);
        }
    }

    /// Make progress until `cond` says so or `timeout` passes.
    fn wait_for<R>(
        &self,
        what: &'static str,
        timeout: Duration,
        mut cond: impl FnMut(&mut State) -> Option<R>,
    ) -> Result<R, MigrateError> {
        let start = Instant::now();
        let mut pacer = Pacer::new(SPIN, PaceInstant::now());
        loop {
            if let Some(r) = cond(&mut self.st.lock()) {
                return Ok(r);
            }
            let moved = self.progress()?;
            let now = Instant::now();
            if !moved && now.duration_since(start) >= timeout {
                return Err(MigrateError::Timeout(what));
            }
            match pacer.after_round(moved, PaceInstant::now()) {
                Pace::Busy | Pace::Spin => continue,
                Pace::Sleep => {
                    let left = timeout.saturating_sub(now.duration_since(start));
                    self.ep.wait_ready(left.min(MAX_SLEEP));
                    pacer.woke(PaceInstant::now());
                }
            }
        }
    }

    /// Send what is queued and close the endpoint, waiting up to `timeout`.
    /// Due acknowledgements go first, so that senders do not resend (and
    /// see refused) what was delivered here.
    pub fn close(&self, timeout: Duration) -> Result<(), MigrateError> {
        let _ = self.progress();
        {
            let mut st = self.st.lock();
            st.node.ack_now();
            self.flush(&mut st);
        }
        self.ep.close(timeout).map_err(MigrateError::Transport)
    }
}

/// Open `spec` as an endpoint for [`Runtime::with_endpoint`]: a job whose
/// hosts start separately opens every endpoint first (so each listens) and
/// only then adds the peers (the TCP transport connects when a peer is
/// added).
pub fn open_endpoint(spec: &TransportSpec) -> Result<Endpoint<AnyTransport>, MigrateError> {
    let err = |source| MigrateError::Open {
        spec: spec.to_string(),
        source,
    };
    let t = spec
        .open()
        .map_err(|e| err(msg_layer::Error::Transport(e)))?;
    let ep = Endpoint::new(t, msg_layer::Config::default()).map_err(err)?;
    ep.set_pull_delivery(true);
    if matches!(spec, TransportSpec::Llc(_)) && ep.auth_fingerprint().is_none() {
        tracing::warn!(
            "{spec}: frames not authenticated (no key given and LLC_AUTH_KEY not set): \
             anyone on the segment can inject frames into this job (docs/SECURITY.md)"
        );
    }
    Ok(ep)
}
