//! The library's state (methods, addresses, contexts, operations, the
//! unexpected queue) and the progress that moves it.
//!
//! Every method is one message-layer endpoint in pull-delivery mode. An
//! expected message is a tagged message of the message layer (context
//! [`EXPECTED_CONTEXT`], the BMI tag as its tag, matched per source
//! address, eager or rendezvous by size); an unexpected message is an
//! active message [`AM_UNEXPECTED`] carrying the tag before the data. Both
//! travel on the peer's one reliable connection, so per-peer order holds
//! across the two kinds. Completions of watched requests, unexpected
//! arrivals, peer ends and releases of lent send buffers come back through
//! the endpoints' event queues and are routed here ([`State`]'s
//! [`Api::route`]), under one lock, by whichever thread made the progress:
//! a test call or the background thread of the application runtime every
//! API shares (`app_runtime`), which also keeps the endpoints (one slot per
//! method) and the peers that ended.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use app_runtime::{Api, Cx, Options, Ranks, Runtime};
use bytes::Bytes;
use msg_layer::delivery::ActiveMessage;
use msg_layer::transport::llc::AuthKey;
use msg_layer::transport::spec::TransportSpec;
use msg_layer::{Endpoint, Event, PeerEnd, PeerId, Request, Source, Tag};
use parking_lot::Mutex;

use crate::addr::{self, MethodKind, PeerName};
use crate::error::BmiError;

/// The message-layer endpoint under one method.
pub type Ep = app_runtime::Ep;
/// An address handle (`bmi_addr_t`): never 0, never reused.
pub type BmiAddr = i64;
/// An operation handle (`bmi_op_id_t`).
pub type OpId = i64;
/// A context handle (`bmi_context_id`).
pub type ContextId = i32;

/// The message layer's context for BMI's expected messages.
pub const EXPECTED_CONTEXT: u32 = 0xB3_1000;
/// The active-message handler id of unexpected messages.
pub const AM_UNEXPECTED: u16 = 0xB310;
/// Default largest unexpected message (`BMI_GET_UNEXP_SIZE`): PVFS2's
/// requests are a few hundred bytes to a few KiB.
pub const DEFAULT_UNEXPECTED_LIMIT: usize = 16 << 10;
/// The most an unexpected message may be set to: what the message layer's
/// protocol lets a sender send before the receiver has spoken.
pub const MAX_UNEXPECTED_LIMIT: usize = 60 << 10;
/// The largest message a method carries (`bmi_size_t`).
pub const MAX_MESSAGE: u64 = i64::MAX as u64;

/// The background thread progresses when no BMI call did for this long.
const BACKGROUND_PERIOD: Duration = Duration::from_millis(5);
/// A test call busy-polls this long after the last movement, then sleeps
/// (`BMI_SPIN_US` sets it): waking a sleeping process costs tens to
/// hundreds of microseconds, more than a round trip, so a process that has
/// a core to itself spins longer.
const DEFAULT_SPIN: Duration = Duration::from_micros(100);
/// Past this much of the spin a test call yields the core between polls
/// (`BMI_SPIN_YIELD_US` sets it; at least the spin budget: never). A
/// process that yields while it waits lets the one it waits for (a server,
/// a client, sharing its core) run at once instead of after the
/// scheduler's time slice; a file system's processes often outnumber the
/// cores. With a core of its own a yield returns at once (a system call per
/// poll). Measured in docs/BENCHMARKS.md: from the first poll, 64 clients
/// on 2 cores moved 5x the bytes and stayed fair (yielding only after 20 µs
/// let some clients take 3x the others' share).
const DEFAULT_SPIN_YIELD: Duration = Duration::ZERO;

/// Whether this process accepts connections at known addresses, and how
/// its frames are authenticated.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitFlags {
    /// `BMI_INIT_SERVER`: listen at the given addresses.
    pub server: bool,
    /// The key that authenticates `bmi_llc`'s frames (docs/SECURITY.md);
    /// servers and their clients need the same. `None`: the key of
    /// `LLC_AUTH_KEY` when it is set, else none (frames not
    /// authenticated). `bmi_tcp` has no frame authentication and ignores
    /// it.
    pub auth_key: Option<AuthKey>,
}

/// One network method.
pub struct Method {
    pub kind: MethodKind,
    /// What to open: given at initialization, or chosen at first use.
    listen: Option<TransportSpec>,
    /// The key an LLC endpoint opens with (`InitFlags::auth_key`).
    auth_key: Option<AuthKey>,
    /// One opener at a time of a client's endpoint.
    open: Mutex<()>,
    pub eager_limit: AtomicUsize,
    /// Shared with [`State`], whose routing applies it.
    pub unexpected_limit: Arc<AtomicUsize>,
}

/// What a client without a listen address opens: LLC on `BMI_LLC_IFACE`
/// (or the interface btl/llc would pick) at any free port; TCP on the
/// address its route to the first server leaves from, any free port.
fn client_spec(kind: MethodKind, first_peer: &msg_layer::Addr) -> Result<TransportSpec, BmiError> {
    let setup = |reason: String| BmiError::Setup {
        method: kind.name().into(),
        reason,
    };
    let text = match (kind, first_peer) {
        (MethodKind::Llc, _) => {
            // Unset: the stack picks as btl/llc does (`llc://`, no interface).
            let iface = std::env::var("BMI_LLC_IFACE").unwrap_or_default();
            let backend = std::env::var("BMI_LLC_BACKEND").unwrap_or_else(|_| "auto".into());
            format!("llc://{iface}?port=0&backend={backend}")
        }
        (MethodKind::Tcp, msg_layer::Addr::Tcp(to)) => {
            let ip = addr::route_source(*to).ok_or_else(|| setup(format!("no route to {to}")))?;
            format!("tcp://{}", std::net::SocketAddr::new(ip, 0))
        }
        (MethodKind::Tcp, other) => {
            return Err(setup(format!("{other} is not a TCP address")));
        }
    };
    text.parse().map_err(|e| setup(format!("{text}: {e}")))
}

/// `spec` with `key` when one is given (else the opener's default:
/// `LLC_AUTH_KEY`'s key when set).
fn keyed(spec: TransportSpec, key: &Option<AuthKey>) -> TransportSpec {
    match key {
        Some(k) => spec.with_auth_key(k.clone()),
        None => spec,
    }
}

fn open_endpoint(kind: MethodKind, spec: &TransportSpec) -> Result<Ep, BmiError> {
    let setup = |reason: String| BmiError::Setup {
        method: kind.name().into(),
        reason,
    };
    let t = spec
        .open()
        .map_err(|e| setup(format!("opening {spec}: {e}")))?;
    let ep = Endpoint::new(t, msg_layer::Config::default()).map_err(|e| setup(e.to_string()))?;
    ep.set_pull_delivery(true);
    Ok(ep)
}

/// A known address.
struct AddrEntry {
    method: usize,
    /// As looked up, or as the peer's endpoint names itself.
    text: CString,
    name: Option<PeerName>,
    /// Once connected; when its peer ended (the runtime's table says so),
    /// later operations fail at once with the cause.
    peer: Option<PeerId>,
    dropped: bool,
}

/// Where a receive's data goes.
enum RecvInto {
    /// A send.
    Nothing,
    /// Back to a Rust caller.
    Owned,
    /// The C caller's buffers, in order (a list receive has several).
    Raw(Vec<RawSeg>),
}

/// A piece of a C caller's buffer.
#[derive(Copy, Clone)]
pub(crate) struct RawSeg {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: a segment is written only while its operation is pending, which
// BMI's contract says the caller's buffer outlives, whichever thread
// completes it.
unsafe impl Send for RawSeg {}

/// Whether an operation sends or receives (`enum bmi_op_type`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// BMI_SEND.
    Send,
    /// BMI_RECV.
    Recv,
}

struct Op {
    ctx: ContextId,
    kind: OpKind,
    addr: BmiAddr,
    method: usize,
    req: Option<Request>,
    user: usize,
    into: RecvInto,
    size: u64,
    /// A lent send buffer the transport still holds.
    lent: Option<u64>,
    result: Option<Result<u64, BmiError>>,
    data: Option<Vec<u8>>,
}

/// A finished operation, as a test call returns it.
#[derive(Debug)]
pub struct Done {
    /// The operation.
    pub op: OpId,
    /// Bytes moved, or why it failed.
    pub result: Result<u64, BmiError>,
    /// The user pointer given at post.
    pub user: usize,
    /// A Rust receive's data.
    pub data: Option<Vec<u8>>,
}

/// The result of a post: finished at once (BMI's immediate completion), or
/// pending under an operation id.
#[derive(Debug)]
pub enum Posted {
    /// Finished: nothing to test.
    Now(Done),
    /// Test this operation.
    Pending(OpId),
}

/// A message nobody posted a receive for.
#[derive(Debug)]
pub struct Unexpected {
    /// Who sent it (reply to this address).
    pub addr: BmiAddr,
    /// Its tag.
    pub tag: i32,
    /// Its data, or why it could not be taken (above the limit).
    pub result: Result<UnexpectedData, BmiError>,
}

/// An unexpected message's data, still in the buffer it arrived in.
#[derive(Debug)]
pub struct UnexpectedData {
    msg: ActiveMessage,
}

impl UnexpectedData {
    /// The bytes.
    pub fn data(&self) -> &[u8] {
        &self.msg.data()[4..]
    }
}

#[derive(Default)]
struct Ctx {
    done: VecDeque<OpId>,
}

/// Counters of what BMI itself saw (the transports keep their own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BmiStats {
    /// Posts that completed at once.
    pub immediate: u64,
    /// Unexpected messages received.
    pub unexpected: u64,
    /// Unexpected messages above the limit (reported with an error).
    pub unexpected_too_long: u64,
    /// Malformed or unknown packets dropped.
    pub bad_packets: u64,
    /// Rounds the background thread made while the application did not call.
    pub background_rounds: u64,
}

#[derive(Default)]
struct State {
    addrs: Vec<AddrEntry>,
    by_text: HashMap<Vec<u8>, BmiAddr>,
    by_peer: HashMap<(usize, PeerId), BmiAddr>,
    contexts: Vec<Option<Ctx>>,
    ops: HashMap<OpId, Op>,
    by_req: HashMap<(usize, Request), OpId>,
    by_token: HashMap<u64, OpId>,
    next_op: OpId,
    next_token: u64,
    unexpected: VecDeque<Unexpected>,
    /// Receive buffers given back, for the next receives.
    pool: Vec<Vec<u8>>,
    stats: BmiStats,
    /// Each method's unexpected-message limit.
    limits: Vec<Arc<AtomicUsize>>,
}

/// What a send carries.
pub(crate) enum SendBody {
    /// Owned bytes.
    Owned(Bytes),
    /// A C caller's buffer, valid until the send completes.
    Raw(*const u8, usize),
}

/// The library: its methods and state.
pub(crate) struct Inner {
    pub methods: Vec<Method>,
    pub flags: InitFlags,
    /// The endpoints (slot = method), the peers that ended, [`State`].
    rt: Arc<Runtime<State>>,
}

fn peer_error(text: &str, e: &msg_layer::Error) -> BmiError {
    match e {
        msg_layer::Error::PeerFailed {
            end: PeerEnd::Closed,
            ..
        } => BmiError::PeerClosed(text.to_string()),
        other => BmiError::PeerFailed {
            peer: text.to_string(),
            cause: other.clone(),
        },
    }
}

impl Inner {
    /// Set up the methods of `method_list` (comma-separated), listening at
    /// `listen` (comma-separated, one per method at most, matched by scheme).
    pub fn new(
        method_list: &str,
        listen: Option<&str>,
        flags: InitFlags,
    ) -> Result<Inner, BmiError> {
        let mut kinds = Vec::new();
        for name in method_list.split(',').filter(|s| !s.trim().is_empty()) {
            let k = MethodKind::from_name(name)?;
            if kinds.contains(&k) {
                return Err(BmiError::Invalid(format!(
                    "method {} listed twice",
                    k.name()
                )));
            }
            kinds.push(k);
        }
        if kinds.is_empty() {
            return Err(BmiError::Invalid(
                "empty method list: expected bmi_llc, bmi_tcp or both".into(),
            ));
        }
        let mut specs: Vec<Option<TransportSpec>> = vec![None; kinds.len()];
        for l in listen
            .unwrap_or("")
            .split(',')
            .filter(|s| !s.trim().is_empty())
        {
            let (k, spec) = addr::listen_spec(l.trim())?;
            let Some(i) = kinds.iter().position(|&m| m == k) else {
                return Err(BmiError::UnknownMethod(format!(
                    "{} (listen address {l:?} is for a method not in {method_list:?})",
                    k.name()
                )));
            };
            specs[i] = Some(spec);
        }
        if flags.server && specs.iter().all(Option::is_none) {
            return Err(BmiError::Invalid(
                "BMI_INIT_SERVER needs a listen address (llc://IFACE?port=PORT or tcp://HOST:PORT)"
                    .into(),
            ));
        }
        let mut methods = Vec::new();
        let mut opened = Vec::new();
        for (kind, listen) in kinds.into_iter().zip(specs) {
            let m = Method {
                kind,
                listen,
                auth_key: flags.auth_key.clone(),
                open: Mutex::new(()),
                eager_limit: AtomicUsize::new(msg_layer::Config::default().eager_limit),
                unexpected_limit: Arc::new(AtomicUsize::new(DEFAULT_UNEXPECTED_LIMIT)),
            };
            opened.push(match &m.listen {
                Some(spec) => Some(open_endpoint(kind, &keyed(spec.clone(), &m.auth_key))?),
                None => None,
            });
            methods.push(m);
        }
        let state = State {
            next_op: 1,
            next_token: 1,
            limits: methods.iter().map(|m| m.unexpected_limit.clone()).collect(),
            ..State::default()
        };
        let opts = Options {
            spin: micros_from_env("BMI_SPIN_US", DEFAULT_SPIN)?,
            yield_after: micros_from_env("BMI_SPIN_YIELD_US", DEFAULT_SPIN_YIELD)?,
            background_period: BACKGROUND_PERIOD,
            background_on_traffic: false,
            ..Options::default()
        };
        let rt = Runtime::new(methods.len(), Ranks::default(), state, opts)
            .map_err(|e| BmiError::Transport(format!("setting up the runtime: {e}")))?;
        for (i, ep) in opened.into_iter().enumerate() {
            if let Some(ep) = ep {
                rt.set_ep(i, ep);
            }
        }
        Ok(Inner {
            methods,
            flags,
            rt: Arc::new(rt),
        })
    }

    /// The endpoint of `method`, opened now if it was not (a client's,
    /// chosen for the first peer it talks to).
    fn ep_for(&self, method: usize, first_peer: &msg_layer::Addr) -> Result<&Ep, BmiError> {
        if let Some(ep) = self.rt.ep(method) {
            return Ok(ep);
        }
        let m = &self.methods[method];
        let _g = m.open.lock();
        self.rt.ep_or_open(method, || {
            let spec = match &m.listen {
                Some(s) => s.clone(),
                None => client_spec(m.kind, first_peer)?,
            };
            open_endpoint(m.kind, &keyed(spec, &m.auth_key))
        })
    }

    /// The state, locked.
    fn st(&self) -> parking_lot::MutexGuard<'_, State> {
        self.rt.lock()
    }

    /// Start the thread that makes progress (acknowledgements,
    /// retransmissions, rendezvous) while the application does not call BMI.
    pub fn start_background(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        self.rt.start_background("bmi-progress").ok()
    }

    /// Stop the background thread, deliver what is queued (bounded) and
    /// close every connection.
    pub fn finalize(&self) {
        self.rt.stop_background();
        for (_, ep) in self.rt.eps() {
            let _ = ep.flush(Some(Duration::from_secs(5)));
            let _ = ep.close(Duration::from_secs(1));
        }
    }

    pub fn stats(&self) -> BmiStats {
        let st = self.st();
        BmiStats {
            background_rounds: self.rt.background_rounds(),
            ..st.stats.clone()
        }
    }

    // ----- contexts -----

    pub fn open_context(&self) -> ContextId {
        let mut st = self.st();
        if let Some(i) = st.contexts.iter().position(Option::is_none) {
            st.contexts[i] = Some(Ctx::default());
            return i as ContextId;
        }
        st.contexts.push(Some(Ctx::default()));
        (st.contexts.len() - 1) as ContextId
    }

    /// Close a context: its pending operations are cancelled and forgotten.
    pub fn close_context(&self, ctx: ContextId) -> Result<(), BmiError> {
        let mut st = self.st();
        let Some(slot) = st.contexts.get_mut(ctx as usize).filter(|c| c.is_some()) else {
            return Err(BmiError::Invalid(format!("no open context {ctx}")));
        };
        *slot = None;
        let ids: Vec<OpId> = st
            .ops
            .iter()
            .filter(|(_, o)| o.ctx == ctx)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let op = st.ops.remove(&id).expect("listed");
            self.forget(&mut st, op);
        }
        Ok(())
    }

    /// Let go of an operation nobody will test: cancel its receive. (A send
    /// goes on; as with any pending operation, its buffer must stay valid
    /// until the transport is done with it: until finalize at the latest.)
    fn forget(&self, st: &mut State, op: Op) {
        if let Some(r) = op.req {
            st.by_req.remove(&(op.method, r));
            if op.kind == OpKind::Recv {
                if let Some(ep) = self.rt.ep(op.method) {
                    let _ = ep.cancel(r);
                }
            }
        }
        if let Some(t) = op.lent {
            st.by_token.remove(&t);
        }
    }

    fn check_ctx(st: &State, ctx: ContextId) -> Result<(), BmiError> {
        match st.contexts.get(ctx as usize) {
            Some(Some(_)) if ctx >= 0 => Ok(()),
            _ => Err(BmiError::Invalid(format!("no open context {ctx}"))),
        }
    }

    // ----- addresses -----

    /// The handle for `text` (checked for form now, connected at first use).
    pub fn lookup(&self, text: &str) -> Result<BmiAddr, BmiError> {
        let name = PeerName::parse(text)?;
        let method = self
            .methods
            .iter()
            .position(|m| m.kind == name.method())
            .ok_or_else(|| BmiError::UnknownMethod(name.method().name().into()))?;
        let mut st = self.st();
        if let Some(&a) = st.by_text.get(text.as_bytes()) {
            return Ok(a);
        }
        let a = Self::add_addr(&mut st, method, text, Some(name), None);
        Ok(a)
    }

    fn add_addr(
        st: &mut State,
        method: usize,
        text: &str,
        name: Option<PeerName>,
        peer: Option<PeerId>,
    ) -> BmiAddr {
        let text = CString::new(text.replace('\0', "")).expect("no NUL");
        st.addrs.push(AddrEntry {
            method,
            text: text.clone(),
            name,
            peer,
            dropped: false,
        });
        let a = st.addrs.len() as BmiAddr;
        st.by_text.insert(text.into_bytes(), a);
        if let Some(p) = peer {
            st.by_peer.insert((method, p), a);
        }
        a
    }

    /// The address a peer of `method` names itself by (one handle per peer).
    fn addr_of_peer(st: &mut State, ep: Option<&Ep>, method: usize, peer: PeerId) -> BmiAddr {
        if let Some(&a) = st.by_peer.get(&(method, peer)) {
            return a;
        }
        let text = ep
            .and_then(|ep| ep.peer_addr(peer))
            .map_or_else(|| format!("peer-{peer}"), |a| a.to_string());
        // The same peer looked up by name before it spoke: one handle.
        if let Some(&a) = st.by_text.get(text.as_bytes()) {
            let e = &mut st.addrs[a as usize - 1];
            if e.method == method && e.peer.is_none() && !e.dropped {
                e.peer = Some(peer);
                st.by_peer.insert((method, peer), a);
                return a;
            }
        }
        let name = PeerName::parse(&text).ok();
        Self::add_addr(st, method, &text, name, Some(peer))
    }

    /// The string an address was looked up by, or its peer names itself by.
    pub fn rev_lookup(&self, a: BmiAddr) -> Option<CString> {
        let st = self.st();
        st.addrs
            .get((a as usize).wrapping_sub(1))
            .filter(|_| a > 0)
            .map(|e| e.text.clone())
    }

    /// The string of an address as a C pointer, stable until the library is
    /// dropped (entries are never removed, only marked dropped).
    pub fn rev_lookup_ptr(&self, a: BmiAddr) -> Option<*const std::ffi::c_char> {
        let st = self.st();
        st.addrs
            .get((a as usize).wrapping_sub(1))
            .filter(|_| a > 0)
            .map(|e| e.text.as_ptr())
    }

    /// The method of a live address.
    pub fn method_of(&self, a: BmiAddr) -> Result<usize, BmiError> {
        let st = self.st();
        Self::entry(&st, a).map(|e| e.method)
    }

    fn entry(st: &State, a: BmiAddr) -> Result<&AddrEntry, BmiError> {
        match st.addrs.get((a as usize).wrapping_sub(1)) {
            Some(e) if a > 0 && !e.dropped => Ok(e),
            _ => Err(BmiError::UnknownAddress(a)),
        }
    }

    /// Forget an address (`BMI_DROP_ADDR`): its pending receives are
    /// cancelled; later operations on the handle fail; a lookup or a new
    /// message from the peer makes a new handle.
    pub fn drop_addr(&self, a: BmiAddr) -> Result<(), BmiError> {
        let mut st = self.st();
        Self::entry(&st, a)?;
        let e = &mut st.addrs[a as usize - 1];
        e.dropped = true;
        let (method, peer, text) = (e.method, e.peer, e.text.clone());
        if st.by_text.get(text.as_bytes()) == Some(&a) {
            st.by_text.remove(text.as_bytes());
        }
        if let Some(p) = peer {
            st.by_peer.remove(&(method, p));
        }
        Self::fail_pending(&mut st, |m| self.rt.ep(m), a, true, BmiError::Cancelled);
        Ok(())
    }

    /// Complete `a`'s pending receives (and sends too when `sends`) with `e`.
    fn fail_pending<'e>(
        st: &mut State,
        ep_of: impl Fn(usize) -> Option<&'e Ep>,
        a: BmiAddr,
        sends: bool,
        e: BmiError,
    ) {
        let ids: Vec<OpId> = st
            .ops
            .iter()
            .filter(|(_, o)| o.addr == a && o.result.is_none())
            .filter(|(_, o)| o.kind == OpKind::Recv || sends)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let op = st.ops.get_mut(&id).expect("listed");
            if op.kind == OpKind::Send {
                // A send cannot be taken back: it ends when the transport
                // does with it (the peer's failure ends it).
                continue;
            }
            if let Some(r) = op.req.take() {
                let m = op.method;
                if let Some(ep) = ep_of(m) {
                    let _ = ep.cancel(r);
                }
                st.by_req.remove(&(m, r));
            }
            let op = st.ops.get_mut(&id).expect("listed");
            op.result = Some(Err(e.clone()));
            Self::finish(st, id);
        }
    }

    /// The peer of `a`, connecting now if this is the first use.
    fn peer_for(&self, st: &mut State, a: BmiAddr) -> Result<(usize, PeerId, &Ep), BmiError> {
        let e = Self::entry(st, a)?;
        let method = e.method;
        if let Some(p) = e.peer {
            if let Some(cause) = self.rt.ended(method, p) {
                return Err(peer_error(&e.text.to_string_lossy(), &cause));
            }
            let ep = self.rt.ep(method).expect("a peer has an endpoint");
            return Ok((method, p, ep));
        }
        let name = e.name.clone().ok_or(BmiError::UnknownAddress(a))?;
        let to = name.resolve()?;
        let ep = self.ep_for(method, &to)?;
        let text = e.text.to_string_lossy().into_owned();
        let p = ep
            .connect(&to)
            .map_err(|cause| BmiError::PeerFailed { peer: text, cause })?;
        // Another handle may already stand for this peer (it spoke first,
        // under the name its endpoint prints): both lead to it.
        st.by_peer.entry((method, p)).or_insert(a);
        st.addrs[a as usize - 1].peer = Some(p);
        Ok((method, p, ep))
    }

    // ----- posts -----

    fn new_op(st: &mut State) -> OpId {
        let id = st.next_op;
        st.next_op += 1;
        id
    }

    /// Post a send (`unexpected`: an unexpected message).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_send(
        &self,
        a: BmiAddr,
        body: SendBody,
        tag: i32,
        user: usize,
        ctx: ContextId,
        unexpected: bool,
    ) -> Result<Posted, BmiError> {
        self.rt.note_call();
        let mut st = self.st();
        Self::check_ctx(&st, ctx)?;
        let len = match &body {
            SendBody::Owned(b) => b.len(),
            SendBody::Raw(_, l) => *l,
        };
        let method = Self::entry(&st, a)?.method;
        let m = &self.methods[method];
        if unexpected {
            let limit = m.unexpected_limit.load(Ordering::Relaxed);
            if len > limit {
                return Err(BmiError::UnexpectedTooLong {
                    len: len as u64,
                    limit: limit as u64,
                });
            }
        }
        let (method, peer, ep) = self.peer_for(&mut st, a)?;
        let id = Self::new_op(&mut st);
        if unexpected {
            let data = match body {
                SendBody::Owned(b) => b,
                // SAFETY: BMI's contract: `len` readable bytes at `p`.
                SendBody::Raw(p, l) => Bytes::copy_from_slice(unsafe { raw_slice(p, l) }),
            };
            let r = ep.am_post_parts(peer, AM_UNEXPECTED, &tag.to_le_bytes(), data);
            return match r {
                Ok(()) => {
                    st.stats.immediate += 1;
                    Ok(Posted::Now(Done {
                        op: id,
                        result: Ok(len as u64),
                        user,
                        data: None,
                    }))
                }
                Err(e) => Err(peer_error(&st_text(&st, a), &e)),
            };
        }
        let eager = len <= m.eager_limit.load(Ordering::Relaxed);
        let mut lent = None;
        let data = match body {
            SendBody::Owned(b) => b,
            // SAFETY: BMI's contract: `len` readable bytes at `p`.
            SendBody::Raw(p, l) if eager => Bytes::copy_from_slice(unsafe { raw_slice(p, l) }),
            SendBody::Raw(p, l) => {
                let token = st.next_token;
                st.next_token += 1;
                lent = Some(token);
                // SAFETY: BMI's contract: `len` readable bytes at `p`,
                // unchanged until the send completes, which it does only
                // after the release is reported.
                unsafe { msg_layer::lent::lend(p, l, ep.release_notice(token)) }
            }
        };
        let r = if lent.is_some() {
            ep.isend_lent(peer, tag as u32, EXPECTED_CONTEXT, data)
        } else {
            ep.isend(peer, tag as u32, EXPECTED_CONTEXT, data)
        };
        if lent.is_none() {
            if let Some(res) = ep.test(&r) {
                return match res {
                    Ok(_) => {
                        st.stats.immediate += 1;
                        Ok(Posted::Now(Done {
                            op: id,
                            result: Ok(len as u64),
                            user,
                            data: None,
                        }))
                    }
                    Err(e) => Err(peer_error(&st_text(&st, a), &e)),
                };
            }
        }
        ep.watch(r);
        st.by_req.insert((method, r), id);
        if let Some(t) = lent {
            st.by_token.insert(t, id);
        }
        st.ops.insert(
            id,
            Op {
                ctx,
                kind: OpKind::Send,
                addr: a,
                method,
                req: Some(r),
                user,
                into: RecvInto::Nothing,
                size: len as u64,
                lent,
                result: None,
                data: None,
            },
        );
        Ok(Posted::Pending(id))
    }

    /// Post a receive of at most `expected` bytes from `a` with `tag`, into
    /// `raw` (a C caller's buffers) or, when `None`, into a buffer returned
    /// with the completion.
    pub(crate) fn post_recv(
        &self,
        a: BmiAddr,
        expected: u64,
        raw: Option<Vec<RawSeg>>,
        tag: i32,
        user: usize,
        ctx: ContextId,
    ) -> Result<Posted, BmiError> {
        self.rt.note_call();
        let mut st = self.st();
        Self::check_ctx(&st, ctx)?;
        let expected_len = usize::try_from(expected)
            .map_err(|_| BmiError::Invalid(format!("expected size {expected}")))?;
        // A peer that ended may have sent messages before it did: the
        // message layer still matches those and fails the receive otherwise.
        let (method, peer, ep) = match Self::entry(&st, a)? {
            AddrEntry {
                peer: Some(p),
                method,
                ..
            } if self.rt.ended(*method, *p).is_some() => {
                let ep = self.rt.ep(*method).expect("a peer has an endpoint");
                (*method, *p, ep)
            }
            _ => self.peer_for(&mut st, a)?,
        };
        let text = st_text(&st, a);
        let mut buf = st.pool.pop().unwrap_or_default();
        buf.clear();
        buf.resize(expected_len, 0);
        let r = ep.irecv(
            Source::Peer(peer),
            Tag::Is(tag as u32),
            EXPECTED_CONTEXT,
            buf,
        );
        let id = Self::new_op(&mut st);
        let into = match raw {
            Some(segs) => RecvInto::Raw(segs),
            None => RecvInto::Owned,
        };
        let mut op = Op {
            ctx,
            kind: OpKind::Recv,
            addr: a,
            method,
            req: Some(r),
            user,
            into,
            size: expected,
            lent: None,
            result: None,
            data: None,
        };
        if let Some(res) = ep.test(&r) {
            Self::settle(&mut st, &mut op, res, &text);
            st.stats.immediate += 1;
            return Ok(Posted::Now(Done {
                op: id,
                result: op.result.take().expect("settled"),
                user,
                data: op.data.take(),
            }));
        }
        ep.watch(r);
        st.by_req.insert((method, r), id);
        st.ops.insert(id, op);
        Ok(Posted::Pending(id))
    }

    /// Record a message-layer result in `op` (and place a receive's data).
    fn settle(
        st: &mut State,
        op: &mut Op,
        res: Result<msg_layer::Completion, msg_layer::Error>,
        peer_text: &str,
    ) {
        op.req = None;
        op.result = Some(match res {
            Ok(c) if op.kind == OpKind::Send => {
                let _ = c;
                Ok(op.size)
            }
            Ok(c) => {
                let data = c.data.unwrap_or_default();
                let n = data.len() as u64;
                match &op.into {
                    RecvInto::Raw(segs) => {
                        scatter(segs, &data);
                        if st.pool.len() < 16 {
                            st.pool.push(data);
                        }
                    }
                    RecvInto::Owned => op.data = Some(data),
                    RecvInto::Nothing => {}
                }
                Ok(n)
            }
            Err(msg_layer::Error::Truncated { message_len, .. }) => Err(BmiError::Truncated {
                len: message_len as u64,
                expected: op.size,
            }),
            Err(msg_layer::Error::Cancelled) => Err(BmiError::Cancelled),
            Err(e @ msg_layer::Error::PeerFailed { .. }) => Err(peer_error(peer_text, &e)),
            Err(e) => Err(BmiError::Transport(e.to_string())),
        });
    }

    /// An operation has its result (and its lent buffer back): it waits in
    /// its context for a test.
    fn finish(st: &mut State, id: OpId) {
        let Some(op) = st.ops.get(&id) else { return };
        if op.result.is_none() || op.lent.is_some() {
            return;
        }
        let ctx = op.ctx;
        match st.contexts.get_mut(ctx as usize) {
            Some(Some(c)) => c.done.push_back(id),
            _ => {
                st.ops.remove(&id);
            }
        }
    }

    /// Cancel a pending operation: a receive not matched yet completes
    /// with `Cancelled`; anything already moving completes as it would.
    pub fn cancel(&self, id: OpId, ctx: ContextId) -> Result<(), BmiError> {
        self.rt.note_call();
        let st = self.st();
        let Some(op) = st.ops.get(&id) else {
            return Err(BmiError::Invalid(format!("no pending operation {id}")));
        };
        if op.ctx != ctx {
            return Err(BmiError::Invalid(format!(
                "operation {id} belongs to context {}, not {ctx}",
                op.ctx
            )));
        }
        if let (Some(r), OpKind::Recv) = (op.req, op.kind) {
            if let Some(ep) = self.rt.ep(op.method) {
                // Its completion (Cancelled) comes back as a watched event.
                let _ = ep.cancel(r);
            }
        }
        Ok(())
    }

    // ----- progress -----

    /// One round on every method, then their events routed.
    /// Make progress until `cond` (checked under the state's lock) gives
    /// something, or `idle` passes with nothing (then `None`).
    fn wait_for<R>(
        &self,
        idle: Duration,
        cond: impl FnMut(&mut State) -> Option<R>,
    ) -> Result<Option<R>, BmiError> {
        self.rt
            .wait_for(Some(idle), cond)
            .map_err(|e| BmiError::Transport(e.to_string()))
    }

    fn take_done(st: &mut State, id: OpId) -> Option<Done> {
        let op = st.ops.get(&id)?;
        if op.result.is_none() || op.lent.is_some() {
            return None;
        }
        let mut op = st.ops.remove(&id).expect("present");
        if let Some(Some(c)) = st.contexts.get_mut(op.ctx as usize) {
            if let Some(pos) = c.done.iter().position(|&d| d == id) {
                c.done.remove(pos);
            }
        }
        Some(Done {
            op: id,
            result: op.result.take().expect("checked"),
            user: op.user,
            data: op.data.take(),
        })
    }

    /// `BMI_test`: the operation's completion, if it comes within `idle`.
    pub fn test(&self, id: OpId, ctx: ContextId, idle: Duration) -> Result<Option<Done>, BmiError> {
        {
            let st = self.st();
            Self::check_ctx(&st, ctx)?;
            match st.ops.get(&id) {
                Some(op) if op.ctx == ctx => {}
                _ => {
                    return Err(BmiError::Invalid(format!(
                        "no pending operation {id} in context {ctx}"
                    )))
                }
            }
        }
        self.wait_for(idle, |st| Self::take_done(st, id))
    }

    /// `BMI_testsome`: the completions among `ids` (with their index), once
    /// at least one is there or `idle` passed.
    pub fn testsome(
        &self,
        ids: &[OpId],
        ctx: ContextId,
        idle: Duration,
    ) -> Result<Vec<(usize, Done)>, BmiError> {
        {
            let st = self.st();
            Self::check_ctx(&st, ctx)?;
        }
        let out = self.wait_for(idle, |st| {
            let got: Vec<(usize, Done)> = ids
                .iter()
                .enumerate()
                .filter(|(_, &id)| id != 0)
                .filter_map(|(i, &id)| {
                    let mine = st.ops.get(&id).is_some_and(|o| o.ctx == ctx);
                    mine.then(|| Self::take_done(st, id))
                        .flatten()
                        .map(|d| (i, d))
                })
                .collect();
            (!got.is_empty()).then_some(got)
        })?;
        Ok(out.unwrap_or_default())
    }

    /// `BMI_testcontext`: up to `max` completions of `ctx`, in the order
    /// they completed, once at least one is there or `idle` passed.
    pub fn testcontext(
        &self,
        max: usize,
        ctx: ContextId,
        idle: Duration,
    ) -> Result<Vec<Done>, BmiError> {
        {
            let st = self.st();
            Self::check_ctx(&st, ctx)?;
        }
        let out = self.wait_for(idle, |st| {
            let mut got = Vec::new();
            while got.len() < max {
                let Some(Some(c)) = st.contexts.get_mut(ctx as usize) else {
                    break;
                };
                let Some(id) = c.done.pop_front() else { break };
                if let Some(d) = Self::take_done(st, id) {
                    got.push(d);
                }
            }
            (!got.is_empty()).then_some(got)
        })?;
        Ok(out.unwrap_or_default())
    }

    /// `BMI_testunexpected`: up to `max` unexpected messages, in arrival
    /// order, once at least one is there or `idle` passed.
    pub fn testunexpected(&self, max: usize, idle: Duration) -> Result<Vec<Unexpected>, BmiError> {
        let out = self.wait_for(idle, |st| {
            let n = st.unexpected.len().min(max);
            (n > 0).then(|| st.unexpected.drain(..n).collect::<Vec<_>>())
        })?;
        Ok(out.unwrap_or_default())
    }

    /// Give an unexpected message's buffer back to its endpoint.
    pub fn recycle(&self, u: UnexpectedData, addr: BmiAddr) {
        if let Ok(m) = self.method_of(addr) {
            if let Some(ep) = self.rt.ep(m) {
                ep.recycle(u.msg);
            }
        }
    }

    /// The message layer's and transports' counters, per method.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut out = Vec::new();
        for (i, ep) in self.rt.eps() {
            for (k, v) in ep.counters() {
                out.push((format!("{}.{k}", self.methods[i].kind.name()), v));
            }
        }
        out
    }

    /// The transport under a method's endpoint, as it names itself (once open).
    pub fn transport_name(&self, method: usize) -> Option<String> {
        self.methods
            .get(method)
            .and(self.rt.ep(method))
            .map(|e| e.transport_name())
    }

    /// The local address of a method's endpoint (open).
    pub fn local_addr(&self, method: usize) -> Option<String> {
        self.methods
            .get(method)
            .and(self.rt.ep(method))
            .map(|e| e.local_addr().to_string())
    }
}

impl Api for State {
    fn route(&mut self, cx: &mut Cx<'_>, ev: Event) {
        let (st, mi) = (self, cx.slot());
        match ev {
            Event::Message(msg) => {
                let data = msg.data();
                if msg.handler != AM_UNEXPECTED || data.len() < 4 {
                    st.stats.bad_packets += 1;
                    cx.recycle(msg);
                    return;
                }
                let tag = i32::from_le_bytes(data[..4].try_into().expect("4 bytes"));
                let len = (data.len() - 4) as u64;
                let addr = Inner::addr_of_peer(st, cx.ep(), mi, msg.peer);
                st.stats.unexpected += 1;
                let limit = st.limits[mi].load(Ordering::Relaxed) as u64;
                let result = if len > limit {
                    st.stats.unexpected_too_long += 1;
                    cx.recycle(msg);
                    Err(BmiError::UnexpectedTooLong { len, limit })
                } else {
                    Ok(UnexpectedData { msg })
                };
                st.unexpected.push_back(Unexpected { addr, tag, result });
            }
            Event::PeerEnded { peer, error } => {
                let Some(&a) = st.by_peer.get(&(mi, peer)) else {
                    return;
                };
                let text = st_text(st, a);
                let e = peer_error(&text, &error);
                // Every handle that leads to this peer is dead (the
                // runtime's table has its end): their pending operations
                // fail now.
                let handles: Vec<BmiAddr> = (1..=st.addrs.len() as BmiAddr)
                    .filter(|&h| {
                        let en = &st.addrs[h as usize - 1];
                        en.method == mi && en.peer == Some(peer)
                    })
                    .collect();
                for h in handles {
                    Inner::fail_pending(st, |m| cx.ep_of(m), h, false, e.clone());
                }
            }
            Event::Completed { request, result } => {
                let Some(id) = st.by_req.remove(&(mi, request)) else {
                    return;
                };
                let Some(mut op) = st.ops.remove(&id) else {
                    return;
                };
                let text = st_text(st, op.addr);
                Inner::settle(st, &mut op, result, &text);
                st.ops.insert(id, op);
                Inner::finish(st, id);
            }
            Event::Released(token) => {
                let Some(id) = st.by_token.remove(&token) else {
                    return;
                };
                if let Some(op) = st.ops.get_mut(&id) {
                    op.lent = None;
                }
                Inner::finish(st, id);
            }
        }
    }
}

/// A duration in microseconds from the environment variable `name`, or
/// `default` when it is not set.
fn micros_from_env(name: &str, default: Duration) -> Result<Duration, BmiError> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse::<u64>()
            .map(Duration::from_micros)
            .map_err(|_| {
                BmiError::Invalid(format!("{name}={v:?}: expected a number of microseconds"))
            }),
        Err(_) => Ok(default),
    }
}

fn st_text(st: &State, a: BmiAddr) -> String {
    st.addrs.get((a as usize).wrapping_sub(1)).map_or_else(
        || format!("address {a}"),
        |e| e.text.to_string_lossy().into_owned(),
    )
}

/// # Safety
/// `p` must be valid for reading `l` bytes (or `l` be 0).
unsafe fn raw_slice<'a>(p: *const u8, l: usize) -> &'a [u8] {
    if l == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(p, l) }
}

/// Copy `data` across a C caller's buffers, in order.
fn scatter(segs: &[RawSeg], data: &[u8]) {
    let mut off = 0;
    for s in segs {
        if off >= data.len() {
            break;
        }
        let n = s.len.min(data.len() - off);
        // SAFETY: each segment is the caller's buffer of `len` writable
        // bytes, valid while its receive is pending (BMI's contract); `n`
        // is within both it and `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(off), s.ptr, n) };
        off += n;
    }
}
