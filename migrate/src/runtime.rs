//! A host's runtime over the message layer: one [`Node`] and one
//! endpoint (LLC or TCP), the node's packets carried as active messages
//! ([`AM_ID`]) on reliable, per-peer FIFO connections.
//!
//! Delivery is pull-style, on the application runtime every API shares
//! (`app_runtime`): whoever calls the runtime makes progress, the runtime's
//! pump routes the endpoint's events into the node ([`State`]'s
//! [`Api::route`]) and the node's packets go out, under one lock. A peer the message layer
//! reports failed ([`msg_layer::Event::PeerEnded`]) is a failed host for
//! the node: its tasks are lost, and senders to them get
//! [`Event::Refused`] with [`RefuseReason::TaskLost`] in bounded time.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use app_runtime::{Api, Cx, Ep, Options, Ranks};
use msg_layer::transport::{AnyTransport, TransportSpec};
use msg_layer::{Addr, Endpoint};

use crate::proto::{Config, Event, HostId, Node, ProtoError, Stats, TaskId};

/// The active-message handler id of the runtime's packets.
pub const AM_ID: u16 = 0x4d47;

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
    /// The job's PMIx launcher failed ([`Runtime::open_in_job`]).
    #[error("PMIx: {0}")]
    Pmix(#[from] pmix_boot::PmixError),
    /// A host's address from the job's exchange does not parse.
    #[error("host {host}'s address {addr:?}: {source}")]
    BadAddr {
        /// The host.
        host: HostId,
        /// What it gave.
        addr: String,
        /// Why it does not parse.
        source: msg_layer::addr::AddrError,
    },
    /// Rank 0 could not draw the job's key ([`Runtime::open_in_job`]).
    #[error("cannot draw the job's key: {0}")]
    Key(#[source] msg_layer::transport::TransportError),
}

/// The node and the events it produced for the application, under the
/// runtime's lock.
struct State {
    node: Node,
    events: VecDeque<Event>,
}

impl Api for State {
    fn route(&mut self, cx: &mut Cx<'_>, ev: msg_layer::Event) {
        match ev {
            msg_layer::Event::Message(m) => {
                if let Some(from) = cx.ranks().rank(m.peer) {
                    if m.handler == AM_ID {
                        self.node.receive(now(), from, m.data());
                    }
                }
                cx.recycle(m);
            }
            msg_layer::Event::PeerEnded { peer, error } => {
                if let Some(h) = cx.ranks().rank(peer) {
                    tracing::info!(host = h, %error, "host ended");
                    self.node.host_failed(now(), h);
                }
            }
            msg_layer::Event::Completed { .. } | msg_layer::Event::Released(_) => {}
        }
    }

    /// The node's timers, then its packets out.
    fn after_pump(&mut self, cx: &mut Cx<'_>) -> bool {
        if self.node.poll_timeout().is_some_and(|t| t <= now()) {
            self.node.handle_timeout(now());
        }
        if let Some(ep) = cx.ep() {
            self.flush(ep, cx.ranks());
        }
        false
    }
}

impl State {
    /// Hand the node's packets to the endpoint; collect its events.
    fn flush(&mut self, ep: &Ep, ranks: &Ranks) {
        while let Some((h, bytes)) = self.node.poll_transmit() {
            let Some(p) = ranks.peer(h) else {
                continue;
            };
            if let Err(e) = ep.am_post(p, AM_ID, bytes) {
                // The peer failed: the node learns it from the endpoint's
                // event; this packet is lost with the host.
                tracing::debug!(host = h, %e, "packet to a failed host");
                self.node.host_failed(now(), h);
            }
        }
        while let Some(ev) = self.node.poll_event() {
            self.events.push_back(ev);
        }
    }
}

/// The clock the node runs on: the system's real-time clock in ns, so
/// that a migration's start stamp (carried with the task) means the
/// same on every host of one machine or of a synchronized cluster. The
/// node's timers use differences only.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One host's runtime (the seed's communication processor).
pub struct Runtime {
    rt: app_runtime::Runtime<State>,
    /// The connection to the job's PMIx server ([`Runtime::open_in_job`]), open for as
    /// long as the runtime.
    job: Option<pmix_boot::Pmix>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("me", &self.host()).finish()
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
        let ranks = Ranks::connect(&ep, me, addrs).map_err(|(h, source)| MigrateError::Peer {
            host: h,
            addr: addrs[h as usize].to_string(),
            source,
        })?;
        let state = State {
            node: Node::new(me, hosts, cfg),
            events: VecDeque::new(),
        };
        // Spin without yielding for the whole budget (the waiter's pacing
        // before the runtime was shared).
        let opts = Options {
            yield_after: Duration::MAX,
            ..Options::default()
        };
        let rt = app_runtime::Runtime::with_endpoint(ep, ranks, state, opts).map_err(|e| {
            MigrateError::Transport(msg_layer::Error::Transport(
                msg_layer::transport::TransportError::io("setting up the runtime", &e),
            ))
        })?;
        Ok(Runtime { rt, job: None })
    }

    /// This host's runtime in a job started by a PMIx launcher (`srun --mpi=pmix`,
    /// mpirun): the host is the PMIx rank, the job's hosts its processes. Over LLC rank
    /// 0's key material (`LLC_AUTH_KEY` when it has it, else 32 random bytes) keys every
    /// host's frames, unless `spec` has a key or says `auth=off`; a spec naming no
    /// interface takes the one btl/llc would for the host's local rank. The endpoints'
    /// addresses are exchanged through PMIx. `Ok(None)` when no PMIx launcher started
    /// this process.
    pub fn open_in_job(spec: &TransportSpec, cfg: Config) -> Result<Option<Runtime>, MigrateError> {
        use msg_layer::transport::llc::{random_key_material, AuthKey, AUTH_KEY_ENV};
        use msg_layer::transport::spec::KeySource;
        let Some(pmix) = pmix_boot::Pmix::from_env()? else {
            return Ok(None);
        };
        let text = spec.to_string();
        let mut spec = spec.clone();
        if let TransportSpec::Llc(l) = &mut spec {
            *l = msg_layer::transport::llc::on_interface_for(l, usize::from(pmix.local_rank()))
                .map_err(|e| MigrateError::Open {
                    spec: text,
                    source: msg_layer::Error::Transport(e),
                })?;
            if l.auth != KeySource::Off && l.config.auth_key.is_none() {
                let material = pmix
                    .from_first("llc.migrate.key", || match std::env::var(AUTH_KEY_ENV) {
                        Ok(m) if !m.is_empty() => Ok(m),
                        _ => random_key_material().map_err(MigrateError::Key),
                    })
                    .map_err(|e| match e {
                        pmix_boot::FromFirstError::Choose(e) => e,
                        pmix_boot::FromFirstError::Pmix(e) => MigrateError::Pmix(e),
                    })?;
                l.config.auth_key = Some(AuthKey::derive(material.as_bytes()));
            }
        }
        let ep = open_endpoint(&spec)?;
        let cards = pmix.all_gather("llc.migrate.addr", &ep.local_addr().to_string())?;
        let addrs = cards
            .iter()
            .enumerate()
            .map(|(h, c)| {
                c.parse::<Addr>().map_err(|source| MigrateError::BadAddr {
                    host: h as HostId,
                    addr: c.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut rt = Runtime::with_endpoint(pmix.rank(), ep, &addrs, cfg)?;
        rt.job = Some(pmix);
        Ok(Some(rt))
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
        self.rt.ranks().me()
    }

    /// Hosts in the job.
    pub fn hosts(&self) -> u32 {
        self.rt.ranks().len()
    }

    /// This endpoint's address (what the other hosts are given).
    pub fn local_addr(&self) -> Addr {
        self.ep().local_addr()
    }

    /// The transport's name (backend and mode).
    pub fn transport_name(&self) -> String {
        self.ep().transport_name()
    }

    fn ep(&self) -> &Ep {
        self.rt.ep(0).expect("a runtime has its endpoint")
    }

    /// The state locked; `f` changes the node, then its packets go out.
    fn with_node<R>(
        &self,
        f: impl FnOnce(&mut Node) -> Result<R, ProtoError>,
    ) -> Result<R, MigrateError> {
        let mut st = self.rt.lock();
        let r = f(&mut st.node)?;
        st.flush(self.ep(), self.rt.ranks());
        Ok(r)
    }

    /// The node's counters.
    pub fn stats(&self) -> Stats {
        self.rt.lock().node.stats().clone()
    }

    /// Tasks on this host now.
    pub fn tasks(&self) -> Vec<TaskId> {
        let mut v: Vec<TaskId> = self.rt.lock().node.tasks().collect();
        v.sort_unstable();
        v
    }

    /// Start `task` here with application state `state` (Figure 1).
    pub fn spawn(&self, task: TaskId, state: Vec<u8>) -> Result<(), MigrateError> {
        self.with_node(|n| n.spawn(task, state))
    }

    /// `src` (on this host) sends `data` to `dst`, wherever it is. Returns
    /// the pair's sequence number.
    pub fn send(&self, src: TaskId, dst: TaskId, data: Vec<u8>) -> Result<u64, MigrateError> {
        self.with_node(|n| n.send(src, dst, data))
    }

    /// The next message for `task` (on this host), after a round of
    /// progress: (sender, data).
    pub fn try_recv(&self, task: TaskId) -> Result<Option<(TaskId, Vec<u8>)>, MigrateError> {
        self.progress()?;
        Ok(self.rt.lock().node.recv(task)?)
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
        self.with_node(|n| {
            n.set_app_state(task, state)?;
            n.migrate(now(), task, to)
        })
    }

    /// The next event (task arrived or left, message refused, gap).
    pub fn poll_event(&self) -> Option<Event> {
        let _ = self.progress();
        self.rt.lock().events.pop_front()
    }

    /// Wait up to `timeout` for an event.
    pub fn wait_event(&self, timeout: Duration) -> Result<Event, MigrateError> {
        self.wait_for("an event", timeout, |st| st.events.pop_front())
    }

    /// One round: the endpoint's progress, its events into the node, the
    /// node's timers, its packets out. True when anything moved.
    pub fn progress(&self) -> Result<bool, MigrateError> {
        self.rt.progress().map_err(MigrateError::Transport)
    }

    /// Make progress until `cond` says so or `timeout` passes.
    fn wait_for<R>(
        &self,
        what: &'static str,
        timeout: Duration,
        cond: impl FnMut(&mut State) -> Option<R>,
    ) -> Result<R, MigrateError> {
        self.rt
            .wait_for(Some(timeout), cond)
            .map_err(MigrateError::Transport)?
            .ok_or(MigrateError::Timeout(what))
    }

    /// Send what is queued and close the endpoint, waiting up to `timeout`.
    /// Due acknowledgements go first, so that senders do not resend (and
    /// see refused) what was delivered here.
    pub fn close(&self, timeout: Duration) -> Result<(), MigrateError> {
        let _ = self.progress();
        self.with_node(|n| {
            n.ack_now();
            Ok(())
        })?;
        self.ep().close(timeout).map_err(MigrateError::Transport)
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
