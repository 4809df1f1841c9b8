//! The shim's state behind a C handle: the message-layer endpoint, the C
//! callbacks registered on it, the one-sided operations and lent sends in
//! flight, and the counters; and the delivery of the endpoint's events to
//! the C callbacks.
//!
//! The endpoint delivers pull-style (`msg_layer::delivery`) on the
//! application runtime every API shares (`app_runtime`): its pump takes
//! messages, peer ends, completions of watched puts and gets and releases
//! of lent bodies, in the order they happened, into [`Pending`], whoever
//! made the progress (`llc_shim_progress`, a send, or the runtime's
//! background thread). Only
//! [`LlcShim::progress`] takes them out and calls C, so every C callback
//! runs on the thread in `llc_shim_progress`, outside every lock (ob1 may
//! send from inside a receive callback). A nested `llc_shim_progress` from
//! inside a callback makes progress and leaves delivery to the outer call,
//! which keeps the order.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use app_runtime::{Api, Cx, Options, Ranks, Runtime};
use msg_layer::delivery::Event;
use msg_layer::rma::RegionKey;
use msg_layer::transport::spec::{KeySource, LlcSpec};
use msg_layer::transport::TransportSpec;
use msg_layer::{Config, Endpoint, Error, PeerId, Request};

use crate::abi::{LlcShimConfig, LlcShimRmaFn, LlcShimStats, LlcShimStatus};
use app_runtime::PtrRegion;

pub(crate) type Ep = app_runtime::Ep;

/// The runtime's state: the events its pump took, waiting for the thread
/// in `llc_shim_progress` to hand them to C (outside every lock).
#[derive(Default)]
pub(crate) struct Pending(VecDeque<Event>);

impl Api for Pending {
    fn route(&mut self, _cx: &mut Cx<'_>, ev: Event) {
        self.0.push_back(ev);
    }
}

/// A C pointer carried across threads; only dereferenced by C, on the thread
/// that calls `llc_shim_progress`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct CPtr(pub *mut c_void);
// SAFETY: the pointer is never dereferenced by Rust; it is handed back to C
// callbacks, which the shim only calls from the thread in `llc_shim_progress`.
unsafe impl Send for CPtr {}
// SAFETY: as above: shared references never dereference it.
unsafe impl Sync for CPtr {}

/// A receive callback and its context.
pub(crate) type RecvHandler = (
    unsafe extern "C" fn(*mut c_void, u32, u8, *const u8, usize),
    CPtr,
);
/// A failure callback and its context.
pub(crate) type FailHandler = (
    unsafe extern "C" fn(*mut c_void, u32, bool, *const c_char),
    CPtr,
);
/// A lent send's completion and its context.
pub(crate) type SentHandler = (unsafe extern "C" fn(*mut c_void), CPtr);

/// A put or get waiting for its completion event.
pub(crate) struct RmaOp {
    pub cb: LlcShimRmaFn,
    pub ctx: CPtr,
    /// For a put from the caller's buffer: the transport still holds it
    /// (its release not yet reported).
    pub lent: bool,
    /// The outcome, kept while `lent`: the callback runs once both came.
    pub done: Option<LlcShimStatus>,
}

/// Where a lent put's release token stands.
enum PutToken {
    /// The put is being posted.
    Posting,
    /// Released while being posted (the put failed at once).
    ReleasedEarly,
    /// Posted as this request.
    Posted(Request),
}

/// Puts and gets in flight, and the release tokens of lent puts.
#[derive(Default)]
struct RmaTable {
    ops: HashMap<Request, RmaOp>,
    tokens: HashMap<u64, PutToken>,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub sent: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub received: AtomicU64,
    pub received_bytes: AtomicU64,
    pub queued: AtomicU64,
    pub unhandled: AtomicU64,
    pub puts: AtomicU64,
    pub gets: AtomicU64,
    pub peers_failed: AtomicU64,
    pub sent_lent: AtomicU64,
}

impl Counters {
    /// One message of `bytes` handed to the transport.
    pub fn count_sent(&self, bytes: usize) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The counters (`background_rounds` is the runtime's: the caller
    /// adds it).
    pub fn snapshot(&self) -> LlcShimStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LlcShimStats {
            sent: get(&self.sent),
            sent_bytes: get(&self.sent_bytes),
            received: get(&self.received),
            received_bytes: get(&self.received_bytes),
            queued: get(&self.queued),
            unhandled: get(&self.unhandled),
            puts: get(&self.puts),
            gets: get(&self.gets),
            peers_failed: get(&self.peers_failed),
            sent_lent: get(&self.sent_lent),
            ..LlcShimStats::default()
        }
    }
}

thread_local! {
    /// Set while this thread delivers events to C: a nested
    /// `llc_shim_progress` (from inside a callback) then only makes
    /// progress, and the outer call delivers what it received, in order.
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

/// An open endpoint. Opaque to C.
pub struct LlcShim {
    /// The endpoint, the events waiting for C, the background thread's
    /// pacing (it stays out while `llc_shim_progress` is called).
    rt: Arc<Runtime<Pending>>,
    pub(crate) counters: Arc<Counters>,
    recv: Mutex<Vec<Option<RecvHandler>>>,
    fail: Mutex<Option<FailHandler>>,
    /// Puts and gets in flight, by request.
    rma: Mutex<RmaTable>,
    /// Lent sends in flight, by release token.
    lent: Mutex<HashMap<u64, SentHandler>>,
    next_token: AtomicU64,
    thread: Option<JoinHandle<()>>,
    /// Registered regions, with what each has lent to the transport.
    pub(crate) regions: Mutex<Vec<(RegionKey, Arc<PtrRegion>)>>,
}

/// Longest wait of a deregistration for ranges a peer's get still holds:
/// beyond the idle timeout that fails a silent peer.
const UNLENT_WAIT: Duration = Duration::from_secs(60);

pub(crate) fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(filter) = std::env::var("LLC_SHIM_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_writer(std::io::stderr)
                .try_init();
        }
    });
}

/// Why `llc_shim_open` failed, for the caller's error buffer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("no interface name given")]
    NoInterface,
    #[error("backend: {0}")]
    Backend(msg_layer::transport::spec::ChoiceError),
    #[error("opening {backend} on {ifname}: {source}")]
    Transport {
        backend: String,
        ifname: String,
        source: msg_layer::transport::TransportError,
    },
    #[error(transparent)]
    Endpoint(#[from] Error),
    #[error("auth {0}: expected LLC_SHIM_AUTH_ENV, _OFF or _LATER")]
    Auth(u32),
    #[error("starting the progress thread: {0}")]
    Thread(std::io::Error),
}

impl LlcShim {
    pub(crate) fn open(cfg: &LlcShimConfig) -> Result<LlcShim, OpenError> {
        init_logging();
        // SAFETY: the C caller passes NUL-terminated strings or null.
        let ifname = unsafe { crate::abi::cstr(cfg.ifname) }.ok_or(OpenError::NoInterface)?;
        // SAFETY: as above.
        let backend = unsafe { crate::abi::cstr(cfg.backend) }
            .unwrap_or("auto")
            .parse()
            .map_err(OpenError::Backend)?;
        let mut llc = LlcSpec {
            backend,
            port: cfg.port,
            exclusive: cfg.exclusive,
            alone: cfg.ranks_on_interface == 1,
            ..LlcSpec::new(ifname)
        };
        if cfg.sap != 0 {
            llc.config.sap = cfg.sap;
        }
        llc.auth = match cfg.auth {
            crate::abi::LLC_SHIM_AUTH_ENV => KeySource::Env,
            crate::abi::LLC_SHIM_AUTH_OFF => KeySource::Off,
            crate::abi::LLC_SHIM_AUTH_LATER => KeySource::Later,
            other => return Err(OpenError::Auth(other)),
        };
        if cfg.idle_timeout_ms != 0 {
            llc.set_idle_timeout(Duration::from_millis(cfg.idle_timeout_ms.into()));
        }
        let spec = TransportSpec::Llc(llc);
        tracing::debug!(%spec, "opening");
        let t = spec.open().map_err(|source| OpenError::Transport {
            backend: backend.to_string(),
            ifname: ifname.to_string(),
            source,
        })?;
        for n in t.notes() {
            tracing::info!(ifname, "{n}");
        }
        let coalesce = cfg.progress_thread && cfg.coalesce_us > 0;
        let mcfg = Config {
            progress_thread: false,
            coalesce,
            ..Config::default()
        };
        let ep = Endpoint::new(t, mcfg)?;
        let opts = Options {
            background_period: Duration::from_micros(match cfg.progress_interval_us {
                0 => 1_000,
                n => n.into(),
            }),
            ..Options::default()
        };
        let rt = Runtime::with_endpoint(ep, Ranks::default(), Pending::default(), opts)
            .map_err(OpenError::Thread)?;
        let rt = Arc::new(rt);
        let thread = if cfg.progress_thread {
            Some(
                rt.start_background("llc-shim-bg")
                    .map_err(OpenError::Thread)?,
            )
        } else {
            None
        };
        Ok(LlcShim {
            rt,
            counters: Arc::new(Counters::default()),
            recv: Mutex::new(vec![None; 256]),
            fail: Mutex::new(None),
            rma: Mutex::new(RmaTable::default()),
            lent: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            thread,
            regions: Mutex::new(Vec::new()),
        })
    }

    /// The endpoint.
    #[inline]
    pub(crate) fn ep(&self) -> &Ep {
        self.rt.ep(0).expect("the shim's endpoint")
    }

    /// Rounds the background thread made for a rank that computed.
    pub(crate) fn background_rounds(&self) -> u64 {
        self.rt.background_rounds()
    }

    pub(crate) fn set_recv_handler(&self, tag: u8, h: Option<RecvHandler>) {
        self.recv.lock().expect("recv")[tag as usize] = h;
    }

    pub(crate) fn set_fail_handler(&self, h: Option<FailHandler>) {
        *self.fail.lock().expect("fail") = h;
    }

    /// Send `head ++ body` with `body` lent: `done` runs from a later
    /// `progress` once the transport let go of it. Nothing runs when this
    /// fails.
    pub(crate) fn send_lent(
        &self,
        peer: PeerId,
        tag: u8,
        head: &[u8],
        body: (*const u8, usize),
        done: SentHandler,
    ) -> Result<(), Error> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        self.lent.lock().expect("lent").insert(token, done);
        // SAFETY: the C caller keeps `len` bytes at `ptr` valid and
        // unchanged until its completion runs, which is after the release is
        // reported (`llc_shim_send_lent` checked `ptr` is non-null unless
        // `len` is 0).
        let lent =
            unsafe { msg_layer::lent::lend(body.0, body.1, self.ep().release_notice(token)) };
        let res = self.ep().am_post_lent(peer, tag.into(), head, lent);
        if res.is_err() {
            // Refused before anything was queued: the body was dropped
            // already and its release reported, which must not complete.
            self.lent.lock().expect("lent").remove(&token);
        } else {
            self.counters.count_sent(head.len() + body.1);
            self.counters.sent_lent.fetch_add(1, Ordering::Relaxed);
        }
        res
    }

    /// Track a get until its completion event.
    pub(crate) fn add_rma(&self, req: Request, op: RmaOp) {
        self.rma.lock().expect("rma").ops.insert(req, op);
        self.ep().watch(req);
    }

    /// Put `len` bytes at `local` into `peer`'s region `key` at `offset`,
    /// sent from `local` itself (no copy): `cb` runs from a later
    /// `progress` once the target wrote them and the transport let go of
    /// them, whichever comes last. The caller keeps the bytes valid and
    /// unchanged until then.
    pub(crate) fn put_lent(
        &self,
        peer: PeerId,
        local: (*const u8, usize),
        key: RegionKey,
        offset: u64,
        cb: LlcShimRmaFn,
        ctx: CPtr,
    ) {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        self.rma
            .lock()
            .expect("rma")
            .tokens
            .insert(token, PutToken::Posting);
        // SAFETY: the C caller keeps `len` bytes at `ptr` valid and
        // unchanged until its callback runs, which is after the release is
        // reported (`llc_shim_put` checked `ptr` is non-null unless `len`
        // is 0).
        let data =
            unsafe { msg_layer::lent::lend(local.0, local.1, self.ep().release_notice(token)) };
        let req = self.ep().put(peer, key, offset, data);
        {
            let mut t = self.rma.lock().expect("rma");
            let released = matches!(t.tokens.remove(&token), Some(PutToken::ReleasedEarly));
            if !released {
                t.tokens.insert(token, PutToken::Posted(req));
            }
            t.ops.insert(
                req,
                RmaOp {
                    cb,
                    ctx,
                    lent: !released,
                    done: None,
                },
            );
        }
        self.ep().watch(req);
    }

    /// A release token was reported: a lent put's (true) or not.
    fn put_released(&self, token: u64) -> bool {
        let ready = {
            let mut t = self.rma.lock().expect("rma");
            match t.tokens.remove(&token) {
                None => return false,
                Some(PutToken::Posting) => {
                    t.tokens.insert(token, PutToken::ReleasedEarly);
                    return true;
                }
                Some(PutToken::ReleasedEarly) => return true,
                Some(PutToken::Posted(req)) => match t.ops.get_mut(&req) {
                    Some(op) if op.done.is_some() => t.ops.remove(&req),
                    Some(op) => {
                        op.lent = false;
                        None
                    }
                    None => None,
                },
            }
        };
        if let Some(op) = ready {
            Self::call_rma(&op, op.done.expect("outcome kept"));
        }
        true
    }

    /// After `region` was deregistered: wait until the transport let go of
    /// every range of it that a peer's get was served from, so that its
    /// owner may reuse the memory. Normally there is none left: the get's
    /// initiator sends its completion notice (Open MPI's FIN) after the
    /// data arrived, on a frame that acknowledges it. Bounded by the
    /// connection's failure: a peer that stops acknowledging is declared
    /// failed within the idle timeout, which drops what it held.
    pub(crate) fn wait_unlent(&self, region: &PtrRegion) {
        if region.lent_out() == 0 {
            return;
        }
        let deadline = std::time::Instant::now() + UNLENT_WAIT;
        while region.lent_out() > 0 {
            if std::time::Instant::now() >= deadline {
                tracing::error!(
                    ranges = region.lent_out(),
                    "deregistered memory still lent to the transport after {UNLENT_WAIT:?}"
                );
                return;
            }
            if let Err(e) = self.ep().progress() {
                tracing::warn!(%e, "progress while waiting for lent ranges");
            }
        }
    }

    /// Make progress and deliver what is due, on this thread. Returns how
    /// many events there were.
    pub(crate) fn progress(&self) -> Result<usize, Error> {
        self.rt.note_call();
        // What waited since the last call was received outside it (by the
        // background thread, or by a send's progress).
        let (early, _) = self.deliver();
        self.counters.queued.fetch_add(early, Ordering::Relaxed);
        let res = self.ep().progress();
        let (now, _) = self.deliver();
        // What the callbacks sent in a burst was held: it goes now.
        self.ep().send_held();
        res.map(|moved| (early + now) as usize + usize::from(moved))
    }

    /// After a send: if it left messages held for a bundle, note it for
    /// the background thread, which sends them at its next look should no
    /// `llc_shim_progress` (or send that leaves) come first. Nothing wakes
    /// it: a rank that calls progress again soon, the common case, sends
    /// them itself, and waking the thread for every burst took a core from
    /// a busy rank (docs/BENCHMARKS.md, "Held sends that wake no thread").
    pub(crate) fn note_held(&self) {
        self.rt.note_held();
    }

    /// Hand the endpoint's events to the C callbacks, in order, unless this
    /// thread is delivering already. Returns (messages, events).
    fn deliver(&self) -> (u64, u64) {
        if DELIVERING.with(Cell::get) {
            return (0, 0);
        }
        self.rt.pump();
        let (mut messages, mut events) = (0, 0);
        let mut batch = VecDeque::new();
        loop {
            {
                // The queues trade places: the pump fills one while this
                // delivers the other, and the emptied one goes back with
                // its room (nothing allocated per message once warm).
                let mut pending = self.rt.lock();
                if pending.0.is_empty() {
                    if pending.0.capacity() < batch.capacity() {
                        std::mem::swap(&mut batch, &mut pending.0);
                    }
                    return (messages, events);
                }
                std::mem::swap(&mut batch, &mut pending.0);
            }
            DELIVERING.with(|d| d.set(true));
            for ev in batch.drain(..) {
                events += 1;
                messages += u64::from(matches!(ev, Event::Message(_)));
                self.deliver_one(ev);
            }
            DELIVERING.with(|d| d.set(false));
        }
    }

    /// Hand one event to its C callback (no lock held).
    fn deliver_one(&self, ev: Event) {
        match ev {
            Event::Message(m) => {
                // BTL tags are the handler ids (0..=255).
                self.call_recv(m.peer, m.handler as u8, m.data());
                self.ep().recycle(m);
            }
            Event::PeerEnded { peer, error } => self.peer_ended(peer, &error),
            Event::Completed { request, result } => self.complete_rma(request, result),
            Event::Released(token) => {
                if self.put_released(token) {
                    return;
                }
                let done = self.lent.lock().expect("lent").remove(&token);
                if let Some((cb, ctx)) = done {
                    // SAFETY: the caller of llc_shim_send_lent promised
                    // `cb` accepts `ctx`; no shim lock is held.
                    unsafe { cb(ctx.0) }
                }
            }
        }
    }

    fn call_recv(&self, peer: PeerId, tag: u8, data: &[u8]) {
        let handler = self.recv.lock().expect("recv")[tag as usize];
        match handler {
            Some((f, ctx)) => {
                self.counters.received.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .received_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                // SAFETY: the registrant promised `f` accepts `ctx`; `data`
                // is valid for `len` bytes during the call.
                unsafe { f(ctx.0, peer, tag, data.as_ptr(), data.len()) }
            }
            None => {
                self.counters.unhandled.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    peer,
                    tag,
                    "message for a tag with no receive callback dropped"
                );
            }
        }
    }

    /// A peer's connection ended: in order (it finished), or failed.
    fn peer_ended(&self, peer: PeerId, error: &Error) {
        let orderly = app_runtime::peers::orderly(error);
        if !orderly {
            self.counters.peers_failed.fetch_add(1, Ordering::Relaxed);
        }
        // Words for the C side's log; the decision above is by type.
        let reason = match error {
            Error::PeerFailed { end, .. } => end.to_string(),
            other => other.to_string(),
        };
        tracing::debug!(peer, orderly, %reason, "peer gone");
        let handler = *self.fail.lock().expect("fail");
        if let Some((f, ctx)) = handler {
            let text = std::ffi::CString::new(reason.replace('\0', " ")).expect("no NUL");
            // SAFETY: the registrant promised `f` accepts `ctx`; the text
            // lives through the call.
            unsafe { f(ctx.0, peer, orderly, text.as_ptr()) }
        }
    }

    fn complete_rma(&self, req: Request, res: Result<msg_layer::Completion, Error>) {
        let status = match &res {
            Ok(_) => LlcShimStatus::Ok,
            Err(Error::PeerFailed { .. }) => LlcShimStatus::PeerFailed,
            Err(e) => {
                tracing::warn!(%e, "one-sided operation failed");
                LlcShimStatus::Error
            }
        };
        // Decided under the table's lock, which `put_released` takes too: a
        // put whose bytes the transport still holds waits for their release.
        let op = {
            let mut t = self.rma.lock().expect("rma");
            let Some(op) = t.ops.get_mut(&req) else {
                return;
            };
            if op.lent {
                op.done = Some(status);
                return;
            }
            t.ops.remove(&req).expect("present")
        };
        Self::call_rma(&op, status);
    }

    fn call_rma(op: &RmaOp, status: LlcShimStatus) {
        if let Some(cb) = op.cb {
            // SAFETY: the caller promised `cb` accepts `ctx`.
            unsafe { cb(op.ctx.0, status) }
        }
    }

    /// True when nothing is in flight: everything sent acknowledged, every
    /// put, get and lent send completed (its callback ran).
    pub(crate) fn idle(&self) -> bool {
        self.ep().flush(Some(Duration::ZERO)).is_ok()
            && self.rma.lock().expect("rma").ops.is_empty()
            && self.lent.lock().expect("lent").is_empty()
    }

    /// Stop the background thread, forget the callbacks, deliver what is
    /// queued to no one and close every connection (at most `timeout`).
    pub(crate) fn close(mut self, timeout: Duration) {
        self.rt.stop_background();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.set_fail_handler(None);
        for r in self.recv.lock().expect("recv").iter_mut() {
            *r = None;
        }
        *self.rma.lock().expect("rma") = RmaTable::default();
        self.lent.lock().expect("lent").clear();
        if let Err(e) = self.ep().close(timeout) {
            tracing::debug!(%e, "closing: not everything was delivered");
        }
        for (k, _) in self.regions.lock().expect("regions").drain(..) {
            self.ep().deregister(k);
        }
    }
}
