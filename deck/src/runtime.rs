//! One DECK process: its node number, its message-layer endpoint, its
//! mailboxes, the part of the naming service it is home to, and the flow
//! control towards every other node.
//!
//! Delivery is pull-style, on the application runtime every API shares
//! (`app_runtime`): the endpoint's events (DECK packets as active
//! messages, completions, releases of lent memory, peers that ended) are
//! taken by whoever waits in DECK ([`Inner::wait_for`]) or, while the
//! application computes, by the runtime's background thread, and routed
//! here under one lock ([`State`]'s [`Api::route`]). Nothing of the
//! endpoint calls back into DECK, so DECK may call the endpoint while it
//! holds that lock.
//!
//! Every mailbox has one queue in arrival order at its node (all senders,
//! local ones too). Eager messages (up to the eager limit) travel whole as
//! active messages and wait in the queue, bounded by per-pair credit: a
//! sender has at most [`WINDOW`] bytes unretrieved at each receiver, and the
//! receiver returns credit as it retrieves. Large messages send only an
//! announcement ([`wire::Rts`]); their data follows as a tagged rendezvous
//! send of the message layer straight from the sender's message into the
//! receiver's, started when the owner retrieves the announcement (the post
//! returns then: the seed's synchronous large messages, without a copy).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use app_runtime::{Api, Cx, Options, Ranks, Runtime};
use bytes::Bytes;
use msg_layer::transport::llc::{AuthKey, AUTH_KEY_ENV};
use msg_layer::transport::spec::KeySource;
use msg_layer::transport::{Transport, TransportSpec};
use msg_layer::{ActiveMessage, Addr, Completion, Endpoint, Event, PeerId, Request, Source, Tag};
use parking_lot::{Mutex, MutexGuard};

use crate::boot::{Boot, BootError, BootHandle, JobEnv, KeyMaterial, PmixJob};
use crate::error::DeckError;
use crate::naming::{home_of, Answer, HomeTable};
use crate::wire::{self, am, BarrierStep, Gone, Name, NameOp, PostHeader, Rts};

/// Unretrieved eager bytes a sender may have at one receiver.
pub const WINDOW: u64 = 4 << 20;

/// What an eager message or an announcement costs of the window beyond its
/// data: the headers, and an upper bound of the queue entry's overhead.
const ENTRY_COST: u64 = 64;

/// Longest wait for the naming service to answer a bind.
const NAMING_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `clone` waits for a name not created yet, unless
/// `DECK_CLONE_WAIT_MS` says otherwise.
const DEFAULT_CLONE_WAIT: Duration = Duration::from_secs(30);

/// The background thread makes progress when no DECK call did for this
/// long (acknowledgements, keepalives, the naming service's answers).
const BACKGROUND_PERIOD: Duration = Duration::from_millis(5);

pub(crate) type Ep = app_runtime::Ep;

/// A message waiting in a mailbox.
enum Entry {
    /// An eager message from another node: the packet, data after the
    /// DECK header.
    Eager { from: u32, msg: ActiveMessage },
    /// A large message announced by another node.
    Rts { from: u32, token: u32, len: usize },
    /// Posted by this process (copied).
    Local(Vec<u8>),
}

impl Entry {
    fn len(&self) -> usize {
        match self {
            Entry::Eager { msg, .. } => msg.data().len() - PostHeader::LEN,
            Entry::Rts { len, .. } => *len,
            Entry::Local(v) => v.len(),
        }
    }

    /// What it costs its sender's window.
    fn cost(&self) -> Option<(u32, u64)> {
        match self {
            Entry::Eager { from, msg } => Some((*from, msg.data().len() as u64 + ENTRY_COST)),
            Entry::Rts { from, .. } => Some((*from, ENTRY_COST)),
            Entry::Local(_) => None,
        }
    }
}

struct Mailbox {
    name: String,
    queue: VecDeque<Entry>,
}

/// A packet to send once the state's lock is released.
enum Out {
    Am(u32, u16, Vec<u8>),
    /// Refuse the data of a large message to a destroyed mailbox (a
    /// zero-length receive the message layer answers with a refusal).
    Refuse(u32, u32),
}

/// What the router keeps (one lock).
#[derive(Default)]
struct State {
    next_mbox: u32,
    mailboxes: HashMap<u32, Mailbox>,
    /// Mailboxes of other nodes known destroyed.
    gone: HashSet<(u32, u32)>,
    /// Window left towards each node.
    credit: Vec<u64>,
    /// Credit owed to each node (its messages retrieved).
    owed: Vec<u64>,
    home: HomeTable,
    next_req: u32,
    answers: HashMap<u32, Name>,
    cache: HashMap<String, (u32, u32)>,
    next_token: u32,
    /// Large messages whose mailbox was gone.
    refused: HashSet<u32>,
    /// Lent bodies the transport let go of.
    released: HashSet<u64>,
    completed: HashMap<Request, Result<Completion, msg_layer::Error>>,
    /// Completions nobody waits for (refusals).
    ignored: HashSet<Request>,
    barrier_seen: HashSet<(u64, u32)>,
    barrier_epoch: u64,
    /// Messages that arrived for destroyed mailboxes.
    dropped: u64,
    /// Malformed or misplaced DECK packets.
    bad_packets: u64,
}

/// Counters of one process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeckStats {
    /// Messages dropped because their mailbox was destroyed.
    pub dropped: u64,
    /// Malformed or misplaced DECK packets (dropped).
    pub bad_packets: u64,
    /// Rounds the background thread made progress for an idle application.
    pub background_rounds: u64,
}

/// A mailbox's address: its node and its number there.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MboxAddr {
    /// The owner's node.
    pub node: u32,
    /// The mailbox's number on that node (never reused).
    pub id: u32,
}

pub(crate) struct Inner {
    node: u32,
    numnodes: u32,
    /// The endpoint (none in a job of one), the nodes' peers, the nodes
    /// that ended and why, and [`State`].
    rt: Arc<Runtime<State>>,
    /// One barrier at a time per process.
    barrier: Mutex<()>,
    /// What started the job, for as long as the process runs.
    boot: Option<JobLink>,
    eager_limit: usize,
    clone_wait: Duration,
    transport: String,
}

impl Api for State {
    fn route(&mut self, cx: &mut Cx<'_>, ev: Event) {
        let (mut out, mut spent) = (Vec::new(), Vec::new());
        self.route_event(cx.ranks(), ev, &mut out, &mut spent);
        self.finish_routing(cx, out, spent);
    }

    /// The naming service's parked requests past their time are answered.
    fn after_pump(&mut self, cx: &mut Cx<'_>) -> bool {
        if !self.home.has_parked() {
            return false;
        }
        let mut answers = Vec::new();
        self.home.expire(Instant::now(), &mut answers);
        let mut out = Vec::new();
        self.answer(cx.ranks().me(), answers, &mut out);
        self.finish_routing(cx, out, Vec::new());
        false
    }
}

impl State {
    /// What routing produced: packets posted once the lock is released,
    /// refusals of large messages as zero-length receives (the message
    /// layer answers them with a refusal), buffers recycled.
    fn finish_routing(&mut self, cx: &mut Cx<'_>, out: Vec<Out>, spent: Vec<ActiveMessage>) {
        for m in spent {
            cx.recycle(m);
        }
        for o in out {
            match o {
                Out::Am(node, id, data) => {
                    if let Some(p) = cx.ranks().peer(node) {
                        cx.post(p, id, data);
                    }
                }
                Out::Refuse(node, token) => {
                    if let (Some(ep), Some(p)) = (cx.ep(), cx.ranks().peer(node)) {
                        self.ignored.insert(refuse(ep, p, token));
                    }
                }
            }
        }
    }

    fn route_event(
        &mut self,
        ranks: &Ranks,
        ev: Event,
        out: &mut Vec<Out>,
        spent: &mut Vec<ActiveMessage>,
    ) {
        let st = self;
        match ev {
            Event::Message(m) => {
                let Some(from) = ranks.rank(m.peer) else {
                    st.bad_packets += 1;
                    return;
                };
                st.route_packet(from, ranks.me(), m, out, spent);
            }
            Event::PeerEnded { peer, error } => {
                if let Some(node) = ranks.rank(peer) {
                    tracing::debug!(node, %error, "node ended");
                    st.home.node_failed(node);
                }
            }
            Event::Completed { request, result } => {
                if !st.ignored.remove(&request) {
                    st.completed.insert(request, result);
                }
            }
            Event::Released(token) => {
                st.released.insert(token);
            }
        }
    }

    fn route_packet(
        &mut self,
        from: u32,
        me: u32,
        m: ActiveMessage,
        out: &mut Vec<Out>,
        spent: &mut Vec<ActiveMessage>,
    ) {
        let st = self;
        let data = m.data();
        match m.handler {
            am::POST => {
                let Some(h) = PostHeader::decode(data) else {
                    st.bad_packets += 1;
                    return;
                };
                if let Some(mb) = st.mailboxes.get_mut(&h.mbox) {
                    mb.queue.push_back(Entry::Eager { from, msg: m });
                } else {
                    let cost = data.len() as u64 + ENTRY_COST;
                    st.arrived_for_destroyed(from, h.mbox, 0, cost, out);
                    spent.push(m);
                }
            }
            am::RTS => {
                let Some(r) = Rts::decode(data) else {
                    st.bad_packets += 1;
                    return;
                };
                let len = usize::try_from(r.len).unwrap_or(usize::MAX);
                if let Some(mb) = st.mailboxes.get_mut(&r.mbox) {
                    mb.queue.push_back(Entry::Rts {
                        from,
                        token: r.token,
                        len,
                    });
                } else {
                    st.arrived_for_destroyed(from, r.mbox, r.token, ENTRY_COST, out);
                    out.push(Out::Refuse(from, r.token));
                }
            }
            am::GONE => {
                let Some(g) = Gone::decode(data) else {
                    st.bad_packets += 1;
                    return;
                };
                st.gone.insert((from, g.mbox));
                st.cache.retain(|_, at| *at != (from, g.mbox));
                if g.token != 0 {
                    st.refused.insert(g.token);
                }
            }
            am::CREDIT => match wire::decode_credit(data) {
                Some(n) => st.credit[from as usize] += n,
                None => st.bad_packets += 1,
            },
            am::NAME => {
                let Some(n) = Name::decode(data) else {
                    st.bad_packets += 1;
                    return;
                };
                st.handle_name(me, from, n, out);
            }
            am::BARRIER => match BarrierStep::decode(data) {
                Some(s) => {
                    st.barrier_seen.insert((s.epoch, s.round));
                }
                None => st.bad_packets += 1,
            },
            _ => st.bad_packets += 1,
        }
    }

    /// A message for mailbox `mbox` of ours that is not there: counted,
    /// its credit returned, its sender told (a number we never gave out is
    /// a bad packet).
    fn arrived_for_destroyed(
        &mut self,
        from: u32,
        mbox: u32,
        token: u32,
        cost: u64,
        out: &mut Vec<Out>,
    ) {
        if mbox == 0 || mbox >= self.next_mbox {
            self.bad_packets += 1;
        } else {
            self.dropped += 1;
        }
        self.owe(from, cost, out);
        out.push(Out::Am(
            from,
            am::GONE,
            Gone { mbox, token }.encode().to_vec(),
        ));
    }

    /// Count credit owed to `node`; return it when a quarter of the window
    /// is owed (the sender blocks only with three quarters outstanding, so
    /// this never leaves it waiting for credit we keep).
    fn owe(&mut self, node: u32, cost: u64, out: &mut Vec<Out>) {
        let owed = &mut self.owed[node as usize];
        *owed += cost;
        if *owed >= WINDOW / 4 {
            out.push(Out::Am(
                node,
                am::CREDIT,
                wire::encode_credit(*owed).to_vec(),
            ));
            *owed = 0;
        }
    }

    fn handle_name(&mut self, me: u32, from: u32, n: Name, out: &mut Vec<Out>) {
        match n.op {
            NameOp::Bind | NameOp::Unbind | NameOp::Lookup => {
                let mut answers = Vec::new();
                self.home.handle(from, n, Instant::now(), &mut answers);
                self.answer(me, answers, out);
            }
            NameOp::Done | NameOp::Exists | NameOp::Found | NameOp::Missing => {
                self.answers.insert(n.req, n);
            }
        }
    }

    /// Deliver the home's answers: to this process directly, to others as
    /// packets.
    fn answer(&mut self, me: u32, answers: Vec<Answer>, out: &mut Vec<Out>) {
        for (to, a) in answers {
            if to == me {
                self.answers.insert(a.req, a);
            } else {
                out.push(Out::Am(to, am::NAME, a.encode()));
            }
        }
    }
}

/// Refuse the data of a large message whose mailbox is gone: a
/// zero-length receive for its token, which the message layer answers with
/// a refusal; its completion is watched (and ignored by the caller).
fn refuse(ep: &Ep, peer: PeerId, token: u32) -> Request {
    let r = ep.irecv(
        Source::Peer(peer),
        Tag::Is(token),
        wire::DATA_CONTEXT,
        Vec::new(),
    );
    ep.watch(r);
    r
}

fn transport_err(e: impl std::fmt::Display) -> DeckError {
    DeckError::Transport(e.to_string())
}

impl Inner {
    /// Start this process's part of the job: from `deckrun`'s environment,
    /// or alone (one node, no transport) when started on its own.
    pub fn start() -> Result<Arc<Inner>, DeckError> {
        let env = JobEnv::from_env().map_err(|e| DeckError::Init(e.to_string()))?;
        let clone_wait = match std::env::var("DECK_CLONE_WAIT_MS") {
            Ok(v) => Duration::from_millis(v.parse().map_err(|_| {
                DeckError::Init(format!(
                    "DECK_CLONE_WAIT_MS={v:?}: expected a number of milliseconds"
                ))
            })?),
            Err(_) => DEFAULT_CLONE_WAIT,
        };
        let init = |e: &dyn std::fmt::Display| DeckError::Init(e.to_string());
        let mut launch = match env {
            Some(env) => {
                let boot =
                    Boot::connect(&env, crate::boot::CONNECT_TIMEOUT).map_err(|e| init(&e))?;
                Launch::Deckrun(env, boot)
            }
            None => match PmixJob::from_env().map_err(|e| init(&e))? {
                Some(job) => Launch::Pmix(job),
                None => {
                    return Ok(Arc::new(Inner::new(
                        0,
                        1,
                        None,
                        Vec::new(),
                        None,
                        clone_wait,
                    )?))
                }
            },
        };
        let (node, numnodes) = (launch.node(), launch.numnodes());
        let mut spec = launch.transport_spec()?;
        let from_launcher = match (&mut spec, launch.key_material()) {
            // The launcher's key, unless DECK_TRANSPORT said auth=off.
            (TransportSpec::Llc(l), Some(m)) if l.auth != KeySource::Off => {
                l.config.auth_key = Some(AuthKey::derive(m.as_bytes()));
                true
            }
            _ => false,
        };
        let t = spec
            .open()
            .map_err(|e| init(&format!("opening {spec}: {e}")))?;
        if let TransportSpec::Llc(_) = spec {
            match t.auth_fingerprint() {
                Some(key) => tracing::info!(
                    "node {node}: frames authenticated with key fingerprint {key} (key from {})",
                    if from_launcher {
                        "the launcher"
                    } else {
                        AUTH_KEY_ENV
                    }
                ),
                None => tracing::warn!(
                    "node {node}: frames not authenticated: the launcher gave no key and \
                     {AUTH_KEY_ENV} is not set, so anyone on the segment can inject frames \
                     into this job (docs/SECURITY.md)"
                ),
            }
        }
        let cfg = msg_layer::Config {
            progress_thread: std::env::var("DECK_PROGRESS_THREAD").is_ok_and(|v| v == "1"),
            ..msg_layer::Config::default()
        };
        let ep = Endpoint::new(t, cfg).map_err(|e| init(&e))?;
        ep.set_pull_delivery(true);
        let card = ep.local_addr().to_string();
        let cards = launch.exchange(&card).map_err(|e| init(&e))?;
        if cards.len() != numnodes as usize {
            return Err(init(&format!(
                "the launcher gave {} addresses for {} nodes",
                cards.len(),
                numnodes
            )));
        }
        let mut peers = vec![None; cards.len()];
        for (i, c) in cards.iter().enumerate() {
            if i as u32 == node {
                continue;
            }
            let addr: Addr = c
                .parse()
                .map_err(|e| init(&format!("node {i}'s address {c:?}: {e}")))?;
            peers[i] = Some(
                ep.add_peer(&addr)
                    .map_err(|e| init(&format!("node {i} at {addr}: {e}")))?,
            );
        }
        let inner = Arc::new(Inner::new(
            node,
            numnodes,
            Some(ep),
            peers,
            Some(launch.into_link()),
            clone_wait,
        )?);
        Ok(inner)
    }

    /// A job of `specs.len()` nodes in this process, one endpoint each
    /// (tests, and programs that run DECK nodes as threads).
    pub fn in_process(specs: &[TransportSpec]) -> Result<Vec<Arc<Inner>>, DeckError> {
        let init = |e: &dyn std::fmt::Display| DeckError::Init(e.to_string());
        let mut eps = Vec::new();
        for s in specs {
            let t = s.open().map_err(|e| init(&format!("opening {s}: {e}")))?;
            let ep = Endpoint::new(t, msg_layer::Config::default()).map_err(|e| init(&e))?;
            ep.set_pull_delivery(true);
            eps.push(ep);
        }
        let addrs: Vec<Addr> = eps.iter().map(|e| e.local_addr()).collect();
        let n = eps.len() as u32;
        let mut out = Vec::new();
        for (i, ep) in eps.into_iter().enumerate() {
            let mut peers = vec![None; addrs.len()];
            for (j, a) in addrs.iter().enumerate() {
                if i != j {
                    peers[j] = Some(ep.add_peer(a).map_err(|e| init(&e))?);
                }
            }
            out.push(Arc::new(Inner::new(
                i as u32,
                n,
                Some(ep),
                peers,
                None,
                DEFAULT_CLONE_WAIT,
            )?));
        }
        Ok(out)
    }

    /// How long `clone` waits for a name not created yet.
    pub fn set_clone_wait(&mut self, wait: Duration) {
        self.clone_wait = wait;
    }

    fn new(
        node: u32,
        numnodes: u32,
        ep: Option<Ep>,
        peers: Vec<Option<PeerId>>,
        boot: Option<JobLink>,
        clone_wait: Duration,
    ) -> Result<Inner, DeckError> {
        let n = numnodes as usize;
        let transport = ep
            .as_ref()
            .map_or_else(|| "none (one node)".to_string(), |e| e.transport_name());
        let state = State {
            next_mbox: 1,
            credit: vec![WINDOW; n],
            owed: vec![0; n],
            next_req: 1,
            next_token: 1,
            ..State::default()
        };
        let opts = Options {
            background_period: BACKGROUND_PERIOD,
            // DECK's waits spin without yielding for the whole budget, as
            // before the runtime was shared: a yield in a ping-pong's wait
            // costs more than the reply is away.
            yield_after: Duration::MAX,
            background_on_traffic: false,
            ..Options::default()
        };
        let rt = Runtime::new(1, Ranks::new(node, peers), state, opts)
            .map_err(|e| DeckError::Init(format!("setting up the runtime: {e}")))?;
        if let Some(ep) = ep {
            rt.set_ep(0, ep);
        }
        Ok(Inner {
            node,
            numnodes,
            rt: Arc::new(rt),
            barrier: Mutex::new(()),
            boot,
            eager_limit: msg_layer::Config::default().eager_limit,
            clone_wait,
            transport,
        })
    }

    pub fn node(&self) -> u32 {
        self.node
    }

    pub fn numnodes(&self) -> u32 {
        self.numnodes
    }

    pub fn endpoint(&self) -> Option<&Ep> {
        self.rt.ep(0)
    }

    /// The state, locked.
    fn st(&self) -> MutexGuard<'_, State> {
        self.rt.lock()
    }

    /// The endpoint's peer for `node`.
    pub fn peer_of(&self, node: u32) -> Option<PeerId> {
        self.peer(node)
    }

    pub fn transport_name(&self) -> &str {
        &self.transport
    }

    pub fn stats(&self) -> DeckStats {
        let st = self.st();
        DeckStats {
            dropped: st.dropped,
            bad_packets: st.bad_packets,
            background_rounds: self.rt.background_rounds(),
        }
    }

    /// The message layer's and the transport's counters.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.rt.counters()
    }

    /// Start the thread that makes progress while the application does not
    /// call DECK.
    pub fn start_background(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        self.rt.ep(0)?;
        self.rt.start_background("deck-progress").ok()
    }

    pub fn stop_background(&self) {
        self.rt.stop_background();
    }

    // ----- progress and routing -----

    /// Send packets routing produced. A node that failed gets nothing (its
    /// end was routed already).
    fn send_out(&self, out: Vec<Out>) {
        let Some(ep) = self.rt.ep(0) else { return };
        for o in out {
            match o {
                Out::Am(node, id, data) => {
                    if let Some(p) = self.peer(node) {
                        let _ = ep.am_post(p, id, data);
                    }
                }
                Out::Refuse(node, token) => {
                    if let Some(p) = self.peer(node) {
                        let r = refuse(ep, p, token);
                        self.st().ignored.insert(r);
                    }
                }
            }
        }
    }

    fn peer(&self, node: u32) -> Option<PeerId> {
        self.rt.ranks().peer(node)
    }

    /// Make progress until `cond` (checked under the state's lock) says
    /// so, or `timeout` passes (`what` names the wait in the error).
    fn wait_for<R>(
        &self,
        what: &str,
        timeout: Option<Duration>,
        cond: impl FnMut(&mut State) -> Option<R>,
    ) -> Result<R, DeckError> {
        self.rt
            .wait_for(timeout, cond)
            .map_err(transport_err)?
            .ok_or_else(|| {
                DeckError::Timeout(format!("{what} after {:?}", timeout.unwrap_or_default()))
            })
    }

    /// The error of a call towards `node` if it ended.
    fn dead_error(&self, node: u32) -> Option<DeckError> {
        self.rt
            .rank_ended(node)
            .map(|cause| DeckError::PeerFailed { node, cause })
    }

    // ----- mailboxes -----

    /// Create a mailbox named `name` and bind the name.
    pub fn create(&self, name: &str) -> Result<MboxAddr, DeckError> {
        check_name(name)?;
        let (id, req) = {
            let mut st = self.st();
            let id = st.next_mbox;
            st.next_mbox += 1;
            st.mailboxes.insert(
                id,
                Mailbox {
                    name: name.to_owned(),
                    queue: VecDeque::new(),
                },
            );
            let req = st.next_req;
            st.next_req += 1;
            (id, req)
        };
        let bind = Name {
            op: NameOp::Bind,
            req,
            node: self.node,
            mbox: id,
            wait_ms: 0,
            name: name.to_owned(),
        };
        let answer = self.ask_home(bind, NAMING_TIMEOUT);
        let ok = matches!(&answer, Ok(a) if a.op == NameOp::Done);
        if !ok {
            self.st().mailboxes.remove(&id);
        }
        match answer?.op {
            NameOp::Done => Ok(MboxAddr {
                node: self.node,
                id,
            }),
            NameOp::Exists => Err(DeckError::Exists(name.to_owned())),
            op => Err(DeckError::Transport(format!(
                "the naming service answered a bind with {op:?}"
            ))),
        }
    }

    /// Send a naming request to the name's home and wait for the answer.
    fn ask_home(&self, req: Name, timeout: Duration) -> Result<Name, DeckError> {
        let home = home_of(&req.name, self.numnodes);
        let id = req.req;
        let what = format!("the naming service (node {home}) about {:?}", req.name);
        if home == self.node {
            let mut st = self.st();
            let mut out = Vec::new();
            st.handle_name(self.node, self.node, req, &mut out);
            drop(st);
            self.send_out(out);
        } else {
            self.send_am(home, am::NAME, req.encode())?;
        }
        self.wait_for(&what, Some(timeout), |st| {
            if let Some(a) = st.answers.remove(&id) {
                return Some(Ok(a));
            }
            self.dead_error(home).map(Err)
        })?
    }

    /// Look `name` up (waiting, bounded, for it to be created).
    pub fn lookup(&self, name: &str) -> Result<MboxAddr, DeckError> {
        check_name(name)?;
        let req = {
            let mut st = self.st();
            if let Some(&(node, id)) = st.cache.get(name) {
                return Ok(MboxAddr { node, id });
            }
            let req = st.next_req;
            st.next_req += 1;
            req
        };
        let wait_ms = u32::try_from(self.clone_wait.as_millis()).unwrap_or(u32::MAX);
        let lookup = Name {
            op: NameOp::Lookup,
            req,
            node: 0,
            mbox: 0,
            wait_ms,
            name: name.to_owned(),
        };
        // The home answers Missing at the end of the wait; give it time.
        let a = self.ask_home(lookup, self.clone_wait + Duration::from_secs(10))?;
        match a.op {
            NameOp::Found => {
                let at = MboxAddr {
                    node: a.node,
                    id: a.mbox,
                };
                let mut st = self.st();
                if !st.gone.contains(&(at.node, at.id)) {
                    st.cache.insert(name.to_owned(), (at.node, at.id));
                }
                Ok(at)
            }
            _ => Err(DeckError::NoSuchName {
                name: name.to_owned(),
                waited_ms: self.clone_wait.as_millis() as u64,
            }),
        }
    }

    /// Destroy mailbox `id` of this process: unbind its name, tell every
    /// node, refuse what waits in it.
    pub fn destroy(&self, id: u32) -> Result<(), DeckError> {
        let mut out = Vec::new();
        let mut spent = Vec::new();
        let name = {
            let mut st = self.st();
            let Some(mb) = st.mailboxes.remove(&id) else {
                return Err(DeckError::Destroyed(format!("#{id}")));
            };
            for e in mb.queue {
                if let Some((from, cost)) = e.cost() {
                    st.owe(from, cost, &mut out);
                }
                match e {
                    Entry::Rts { from, token, .. } => {
                        out.push(Out::Am(
                            from,
                            am::GONE,
                            Gone { mbox: id, token }.encode().to_vec(),
                        ));
                        out.push(Out::Refuse(from, token));
                    }
                    Entry::Eager { msg, .. } => spent.push(msg),
                    Entry::Local(_) => {}
                }
            }
            for n in 0..self.numnodes {
                if n != self.node && self.rt.rank_ended(n).is_none() {
                    out.push(Out::Am(
                        n,
                        am::GONE,
                        Gone { mbox: id, token: 0 }.encode().to_vec(),
                    ));
                }
            }
            let req = st.next_req;
            st.next_req += 1;
            let unbind = Name {
                op: NameOp::Unbind,
                req,
                node: self.node,
                mbox: id,
                wait_ms: 0,
                name: mb.name.clone(),
            };
            let home = home_of(&mb.name, self.numnodes);
            if home == self.node {
                st.handle_name(self.node, self.node, unbind, &mut out);
            } else {
                out.push(Out::Am(home, am::NAME, unbind.encode()));
            }
            mb.name
        };
        if let Some(ep) = self.rt.ep(0) {
            for m in spent {
                ep.recycle(m);
            }
        }
        self.send_out(out);
        self.rt.notify_local();
        tracing::debug!(name, id, "mailbox destroyed");
        Ok(())
    }

    fn send_am(&self, node: u32, id: u16, data: Vec<u8>) -> Result<(), DeckError> {
        let (Some(ep), Some(p)) = (self.rt.ep(0), self.peer(node)) else {
            return Err(DeckError::Invalid(format!("no node {node}")));
        };
        ep.am_post(p, id, data)
            .map_err(|e| DeckError::PeerFailed { node, cause: e })
    }

    /// Post `data` to mailbox `to`. Eager sizes return at once (copied);
    /// larger ones when the owner has received them.
    pub fn post(&self, to: MboxAddr, data: &[u8]) -> Result<(), DeckError> {
        self.rt.note_call();
        if to.node == self.node {
            let mut st = self.st();
            let Some(mb) = st.mailboxes.get_mut(&to.id) else {
                return Err(DeckError::Destroyed(format!("#{}", to.id)));
            };
            mb.queue.push_back(Entry::Local(data.to_vec()));
            drop(st);
            self.rt.notify_local();
            return Ok(());
        }
        if to.node >= self.numnodes {
            return Err(DeckError::Invalid(format!(
                "mailbox on node {} of a job of {}",
                to.node, self.numnodes
            )));
        }
        let ep = self.rt.ep(0).expect("several nodes have an endpoint");
        let peer = self.peer(to.node).expect("every other node has a peer");
        let eager = data.len() <= self.eager_limit;
        let cost = if eager {
            (PostHeader::LEN + data.len()) as u64 + ENTRY_COST
        } else {
            ENTRY_COST
        };
        // Take the window (waiting for credit), or fail.
        self.wait_for("credit", None, |st| {
            if let Some(e) = self.dead_error(to.node) {
                return Some(Err(e));
            }
            if st.gone.contains(&(to.node, to.id)) {
                return Some(Err(DeckError::Destroyed(format!(
                    "#{} on node {}",
                    to.id, to.node
                ))));
            }
            let c = &mut st.credit[to.node as usize];
            (*c >= cost).then(|| {
                *c -= cost;
                Ok(())
            })
        })??;
        let failed = |e: msg_layer::Error| DeckError::PeerFailed {
            node: to.node,
            cause: e,
        };
        if eager {
            let hdr = PostHeader { mbox: to.id }.encode();
            return ep
                .am_post_parts(peer, am::POST, &hdr, Bytes::copy_from_slice(data))
                .map_err(failed);
        }
        let token = {
            let mut st = self.st();
            let t = st.next_token;
            st.next_token = st.next_token.wrapping_add(1).max(1);
            t
        };
        let rts = Rts {
            mbox: to.id,
            token,
            len: data.len() as u64,
        };
        ep.am_post(peer, am::RTS, rts.encode().to_vec())
            .map_err(failed)?;
        // SAFETY: `data` is borrowed for this call, which does not return
        // until the transport released the body (waited for below).
        let lent = unsafe {
            msg_layer::lent::lend(
                data.as_ptr(),
                data.len(),
                ep.release_notice(u64::from(token)),
            )
        };
        let r = ep.isend_lent(peer, token, wire::DATA_CONTEXT, lent);
        ep.watch(r);
        // The data is the caller's: wait until the transport let go of it,
        // whatever happens (a failed peer's connection releases it too).
        let res = self.wait_for("a large post", None, |st| {
            if !st.released.contains(&u64::from(token)) {
                return None;
            }
            let done = st.completed.remove(&r)?;
            st.released.remove(&u64::from(token));
            Some(if st.refused.remove(&token) {
                Err(DeckError::Destroyed(format!(
                    "#{} on node {}",
                    to.id, to.node
                )))
            } else {
                done.map(|_| ()).map_err(failed)
            })
        });
        match res {
            Ok(r) => r,
            Err(e) => {
                // Only a failed transport ends the wait early; the memory
                // may still be referenced, so it must not be given back.
                eprintln!("deck: node {}: the transport failed while it held a message being posted ({e}); aborting", self.node);
                std::process::abort();
            }
        }
    }

    /// Wait for the first message of mailbox `id` and receive it with
    /// `recv` (given the entry's length; it returns its buffer to fill).
    pub fn retrieve(&self, id: u32, target: &mut dyn RecvTarget) -> Result<(), DeckError> {
        self.rt.note_call();
        let size = target.size();
        let entry = self.wait_for("a message", None, |st| {
            let Some(mb) = st.mailboxes.get_mut(&id) else {
                return Some(Err(DeckError::Destroyed(format!("#{id}"))));
            };
            let head = mb.queue.front()?;
            if head.len() > size {
                return Some(Err(DeckError::MsgTooBig {
                    needed: head.len(),
                    size,
                }));
            }
            mb.queue.pop_front().map(Ok)
        })?;
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                if let DeckError::MsgTooBig { needed, .. } = e {
                    target.set_needed(needed);
                }
                return Err(e);
            }
        };
        let mut out = Vec::new();
        if let Some((from, cost)) = entry.cost() {
            self.st().owe(from, cost, &mut out);
        }
        self.send_out(out);
        match entry {
            Entry::Local(v) => {
                target.buffer()[..v.len()].copy_from_slice(&v);
                target.received(v.len());
                Ok(())
            }
            Entry::Eager { msg, .. } => {
                let data = &msg.data()[PostHeader::LEN..];
                target.buffer()[..data.len()].copy_from_slice(data);
                target.received(data.len());
                if let Some(ep) = self.rt.ep(0) {
                    ep.recycle(msg);
                }
                Ok(())
            }
            Entry::Rts { from, token, len } => self.receive_large(from, token, len, target),
        }
    }

    /// Receive a large message's data straight into the target's buffer.
    fn receive_large(
        &self,
        from: u32,
        token: u32,
        len: usize,
        target: &mut dyn RecvTarget,
    ) -> Result<(), DeckError> {
        let ep = self.rt.ep(0).expect("announcements come from peers");
        let peer = self.peer(from).expect("announcements come from peers");
        let buf = target.take_buffer();
        let taken = Taken {
            ptr: buf.as_ptr(),
            size: buf.len(),
        };
        let r = ep.irecv(Source::Peer(peer), Tag::Is(token), wire::DATA_CONTEXT, buf);
        ep.watch(r);
        let done = self.wait_for("a large message", None, |st| st.completed.remove(&r))?;
        match done {
            Ok(Completion {
                data: Some(buf), ..
            }) => {
                debug_assert_eq!(buf.len(), len);
                target.restore_buffer(buf, taken);
                Ok(())
            }
            Ok(_) => {
                target.restore_buffer(Vec::new(), taken);
                Err(DeckError::Transport(
                    "a receive completed without its buffer".into(),
                ))
            }
            Err(e) => {
                target.restore_buffer(Vec::new(), taken);
                Err(DeckError::PeerFailed {
                    node: from,
                    cause: e,
                })
            }
        }
    }

    /// Block until every node reached the barrier (dissemination: log2(N)
    /// rounds of one packet per node).
    pub fn barrier(&self) -> Result<(), DeckError> {
        let _one = self.barrier.lock();
        let n = self.numnodes;
        if n == 1 {
            return Ok(());
        }
        let epoch = {
            let mut st = self.st();
            st.barrier_epoch += 1;
            st.barrier_epoch
        };
        let mut round = 0u32;
        while (1u64 << round) < u64::from(n) {
            let dist = (1u64 << round) as u32;
            let to = (self.node + dist) % n;
            let from = (self.node + n - dist % n) % n;
            self.send_am(
                to,
                am::BARRIER,
                BarrierStep { epoch, round }.encode().to_vec(),
            )?;
            self.wait_for("the barrier", None, |st| {
                if st.barrier_seen.remove(&(epoch, round)) {
                    return Some(Ok(()));
                }
                self.dead_error(from).map(Err)
            })??;
            round += 1;
        }
        Ok(())
    }

    /// End this process's part: a barrier (no one leaves while others may
    /// still send to it), everything sent delivered, the launcher told.
    pub fn finish(&self) -> Result<(), DeckError> {
        let res = self.barrier();
        if let Some(ep) = self.rt.ep(0) {
            if let Err(e) = ep.flush(Some(Duration::from_secs(30))) {
                tracing::warn!(%e, "not everything sent was acknowledged");
            }
        }
        self.stop_background();
        if let Some(JobLink::Deckrun(b)) = &self.boot {
            b.finish()
                .map_err(|e| DeckError::Transport(e.to_string()))?;
        }
        if let Some(ep) = self.rt.ep(0) {
            let _ = ep.close(Duration::from_secs(1));
        }
        res
    }
}

/// What a buffer taken out for a receive was: its address and size.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Taken {
    pub ptr: *const u8,
    pub size: usize,
}

/// Where a retrieve puts a message: the C `deck_msg_t` or the Rust `Msg`.
pub trait RecvTarget {
    /// Room in bytes.
    fn size(&self) -> usize;
    /// The buffer (length `size`), for a copy into it.
    fn buffer(&mut self) -> &mut [u8];
    /// A message of `len` bytes is in the buffer now.
    fn received(&mut self, len: usize);
    /// The waiting message needs `needed` bytes.
    fn set_needed(&mut self, needed: usize);
    /// Take the buffer out (length and capacity `size`) to receive in place.
    fn take_buffer(&mut self) -> Vec<u8>;
    /// Put it back, holding a message of `buf.len()` bytes (empty: lost,
    /// allocate anew); `from` is what was taken.
    fn restore_buffer(&mut self, buf: Vec<u8>, from: Taken);
}

fn check_name(name: &str) -> Result<(), DeckError> {
    if name.is_empty() || name.len() > Name::MAX_NAME {
        return Err(DeckError::Invalid(format!(
            "mailbox name of {} bytes: 1 to {} allowed",
            name.len(),
            Name::MAX_NAME
        )));
    }
    Ok(())
}

/// What started this process's job, while the node boots.
enum Launch {
    /// deckrun, through its bootstrap server.
    Deckrun(JobEnv, Boot),
    /// A PMIx launcher (srun --mpi=pmix, mpirun, ...).
    Pmix(PmixJob),
}

/// What stays of the launch for as long as the process runs.
#[derive(Debug)]
enum JobLink {
    /// The watchdog of the connection to deckrun (and FINISH at the end).
    Deckrun(BootHandle),
    /// The connection to the PMIx server (finalized on drop); the launcher ends the
    /// job's processes itself.
    Pmix(#[allow(dead_code)] pmix_boot::Pmix),
}

impl Launch {
    fn node(&self) -> u32 {
        match self {
            Launch::Deckrun(env, _) => env.node,
            Launch::Pmix(job) => job.node(),
        }
    }

    fn numnodes(&self) -> u32 {
        match self {
            Launch::Deckrun(env, _) => env.numnodes,
            Launch::Pmix(job) => job.numnodes(),
        }
    }

    fn key_material(&self) -> Option<&KeyMaterial> {
        match self {
            Launch::Deckrun(_, boot) => boot.key_material(),
            Launch::Pmix(job) => job.key_material(),
        }
    }

    /// The transport this node opens: `DECK_TRANSPORT`'s spec, its interface
    /// chosen as btl/llc chooses when it names none, a TCP spec's unspecified
    /// IP replaced by the address deckrun is reached from (the one the
    /// other hosts reach this one by; a PMIx launch refuses such a spec).
    fn transport_spec(&self) -> Result<TransportSpec, DeckError> {
        let (mut spec, local_rank, launcher_ip, hint) = match self {
            Launch::Deckrun(env, boot) => (
                env.transport.clone(),
                env.local_rank,
                Some(boot.local_ip()),
                "deckrun --transport llc://IF",
            ),
            Launch::Pmix(job) => (
                job.transport().clone(),
                job.local_rank(),
                None,
                "DECK_TRANSPORT=llc://IF in the job's environment",
            ),
        };
        match &mut spec {
            TransportSpec::Llc(l) => {
                *l = msg_layer::transport::llc::on_interface_for(l, local_rank as usize).map_err(
                    |e| {
                        DeckError::Init(format!(
                            "{e} (or name the interface the hosts share: {hint})"
                        ))
                    },
                )?;
            }
            TransportSpec::Tcp(t) | TransportSpec::TcpUring(t) => {
                if let Some(ip) = launcher_ip.filter(|_| t.addr.ip().is_unspecified()) {
                    t.addr.set_ip(ip);
                }
            }
        }
        Ok(spec)
    }

    fn exchange(&mut self, card: &str) -> Result<Vec<String>, BootError> {
        match self {
            Launch::Deckrun(_, boot) => boot.exchange(card, Duration::from_secs(120)),
            Launch::Pmix(job) => job.exchange(card),
        }
    }

    fn into_link(self) -> JobLink {
        match self {
            Launch::Deckrun(_, boot) => JobLink::Deckrun(boot.watch()),
            Launch::Pmix(job) => JobLink::Pmix(job.into_pmix()),
        }
    }
}
