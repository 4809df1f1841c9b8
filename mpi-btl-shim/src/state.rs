//! The shim's state behind a C handle: the message-layer endpoint, the C
//! callbacks registered on it, the one-sided operations and lent sends in
//! flight, and the counters; and the delivery of the endpoint's events to
//! the C callbacks.
//!
//! The endpoint delivers pull-style (`msg_layer::delivery`): messages, peer
//! ends, completions of watched puts and gets and releases of lent bodies
//! wait in one queue, in the order they happened, whoever made the progress
//! (`llc_shim_progress`, a send, or the background thread). Only
//! [`LlcShim::progress`] takes them out and calls C, so every C callback
//! runs on the thread in `llc_shim_progress`, outside every lock (ob1 may
//! send from inside a receive callback). A nested `llc_shim_progress` from
//! inside a callback makes progress and leaves delivery to the outer call,
//! which keeps the order.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use msg_layer::delivery::Event;
use msg_layer::rma::RegionKey;
use msg_layer::transport::spec::{KeySource, LlcSpec};
use msg_layer::transport::{AnyTransport, TransportSpec};
use msg_layer::{Config, Endpoint, Error, PeerEnd, PeerId, Request};

use crate::abi::{LlcShimConfig, LlcShimRmaFn, LlcShimStats, LlcShimStatus};
use crate::region::PtrRegion;

pub(crate) type Ep = Endpoint<AnyTransport>;

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
    pub background_rounds: AtomicU64,
    pub sent_lent: AtomicU64,
}

impl Counters {
    /// One message of `bytes` handed to the transport.
    pub fn count_sent(&self, bytes: usize) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

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
            background_rounds: get(&self.background_rounds),
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
    pub(crate) ep: Arc<Ep>,
    pub(crate) counters: Arc<Counters>,
    /// Calls of `llc_shim_progress` so far: the background thread stays out
    /// while it moves. Counted, not timed: a clock read on every idle turn
    /// of `opal_progress` cost more than the rest of an idle call. Bumped
    /// with a load and a store; an increment lost between two racing
    /// callers still shows a change.
    progress_calls: Arc<AtomicU64>,
    recv: Mutex<Vec<Option<RecvHandler>>>,
    fail: Mutex<Option<FailHandler>>,
    /// Puts and gets in flight, by request.
    rma: Mutex<RmaTable>,
    /// Lent sends in flight, by release token.
    lent: Mutex<HashMap<u64, SentHandler>>,
    next_token: AtomicU64,
    stop: Arc<AtomicBool>,
    /// Messages may be held: set by a send that left some held, cleared by
    /// the background thread before it sends them at its next look.
    held: Arc<AtomicBool>,
    /// Wakes the background thread to close.
    wake: Arc<Wake>,
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
        let ep = Arc::new(Endpoint::new(t, mcfg)?);
        ep.set_pull_delivery(true);
        let counters = Arc::new(Counters::default());
        let progress_calls = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let wake = Arc::new(Wake::new().map_err(OpenError::Thread)?);
        let thread = if cfg.progress_thread {
            let period = Duration::from_micros(match cfg.progress_interval_us {
                0 => 1_000,
                n => n.into(),
            });
            let bg = Background {
                ep: ep.clone(),
                counters: counters.clone(),
                calls: progress_calls.clone(),
                stop: stop.clone(),
                held: held.clone(),
                wake: wake.clone(),
                period,
            };
            // Open returns once the thread has lowered its priority.
            let (started, ready) = std::sync::mpsc::channel();
            let handle = std::thread::Builder::new()
                .name("llc-shim-bg".into())
                .spawn(move || {
                    lower_priority();
                    let _ = started.send(());
                    bg.run()
                })
                .map_err(OpenError::Thread)?;
            let _ = ready.recv();
            Some(handle)
        } else {
            None
        };
        Ok(LlcShim {
            ep,
            counters,
            progress_calls,
            recv: Mutex::new(vec![None; 256]),
            fail: Mutex::new(None),
            rma: Mutex::new(RmaTable::default()),
            lent: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(1),
            stop,
            held,
            wake,
            thread,
            regions: Mutex::new(Vec::new()),
        })
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
        let lent = unsafe { msg_layer::lent::lend(body.0, body.1, self.ep.release_notice(token)) };
        let res = self.ep.am_post_lent(peer, tag.into(), head, lent);
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
        self.ep.watch(req);
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
            unsafe { msg_layer::lent::lend(local.0, local.1, self.ep.release_notice(token)) };
        let req = self.ep.put(peer, key, offset, data);
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
        self.ep.watch(req);
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
            if let Err(e) = self.ep.progress() {
                tracing::warn!(%e, "progress while waiting for lent ranges");
            }
        }
    }

    /// Make progress and deliver what is due, on this thread. Returns how
    /// many events there were.
    pub(crate) fn progress(&self) -> Result<usize, Error> {
        let n = self.progress_calls.load(Ordering::Relaxed);
        self.progress_calls
            .store(n.wrapping_add(1), Ordering::Relaxed);
        // What waited since the last call was received outside it (by the
        // background thread, or by a send's progress).
        let (early, _) = self.deliver();
        self.counters.queued.fetch_add(early, Ordering::Relaxed);
        let res = self.ep.progress();
        let (now, _) = self.deliver();
        // What the callbacks sent in a burst was held: it goes now.
        self.ep.send_held();
        res.map(|moved| (early + now) as usize + usize::from(moved))
    }

    /// After a send: if it left messages held for a bundle, note it for
    /// the background thread, which sends them at its next look should no
    /// `llc_shim_progress` (or send that leaves) come first. Nothing wakes
    /// it: a rank that calls progress again soon, the common case, sends
    /// them itself, and waking the thread for every burst took a core from
    /// a busy rank (docs/BENCHMARKS.md, "Held sends that wake no thread").
    pub(crate) fn note_held(&self) {
        if self.thread.is_some() && self.ep.holding() {
            self.held.store(true, Ordering::Release);
        }
    }

    /// Hand the endpoint's events to the C callbacks, in order, unless this
    /// thread is delivering already. Returns (messages, events).
    fn deliver(&self) -> (u64, u64) {
        if DELIVERING.with(Cell::get) {
            return (0, 0);
        }
        let Some(first) = self.ep.poll_event() else {
            return (0, 0);
        };
        DELIVERING.with(|d| d.set(true));
        let (mut messages, mut events) = (0, 0);
        let mut next = Some(first);
        while let Some(ev) = next {
            events += 1;
            match ev {
                Event::Message(m) => {
                    messages += 1;
                    // BTL tags are the handler ids (0..=255).
                    self.call_recv(m.peer, m.handler as u8, m.data());
                    self.ep.recycle(m);
                }
                Event::PeerEnded { peer, error } => self.peer_ended(peer, &error),
                Event::Completed { request, result } => self.complete_rma(request, result),
                Event::Released(token) => {
                    if self.put_released(token) {
                        next = self.ep.poll_event();
                        continue;
                    }
                    let done = self.lent.lock().expect("lent").remove(&token);
                    if let Some((cb, ctx)) = done {
                        // SAFETY: the caller of llc_shim_send_lent promised
                        // `cb` accepts `ctx`; no shim lock is held.
                        unsafe { cb(ctx.0) }
                    }
                }
            }
            next = self.ep.poll_event();
        }
        DELIVERING.with(|d| d.set(false));
        (messages, events)
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
        let orderly = matches!(
            error,
            Error::PeerFailed {
                end: PeerEnd::Closed,
                ..
            }
        );
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
        self.ep.flush(Some(Duration::ZERO)).is_ok()
            && self.rma.lock().expect("rma").ops.is_empty()
            && self.lent.lock().expect("lent").is_empty()
    }

    /// Stop the background thread, forget the callbacks, deliver what is
    /// queued to no one and close every connection (at most `timeout`).
    pub(crate) fn close(mut self, timeout: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            self.wake.signal();
            let _ = t.join();
        }
        self.set_fail_handler(None);
        for r in self.recv.lock().expect("recv").iter_mut() {
            *r = None;
        }
        *self.rma.lock().expect("rma") = RmaTable::default();
        self.lent.lock().expect("lent").clear();
        if let Err(e) = self.ep.close(timeout) {
            tracing::debug!(%e, "closing: not everything was delivered");
        }
        for (k, _) in self.regions.lock().expect("regions").drain(..) {
            self.ep.deregister(k);
        }
    }
}

/// An eventfd the background thread sleeps on beside the transport's
/// descriptors: closing wakes it.
pub(crate) struct Wake(std::os::fd::OwnedFd);

impl Wake {
    fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd(2) with valid flags; it returns a new descriptor
        // or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Wake(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd; a full
        // counter (EAGAIN) means it is signalled already.
        let _ = unsafe { libc::write(self.fd(), one.as_ptr().cast(), one.len()) };
    }

    fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from our
        // non-blocking eventfd (EAGAIN when not signalled).
        let _ = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }
}

/// The background thread, at [`BACKGROUND_NICE`]. While the application
/// calls `llc_shim_progress` it only looks every `period` whether it still
/// does.
/// Once a whole period passed without a call (the rank computes, or waits
/// outside MPI), it makes progress itself whenever the transport has work
/// (it sleeps in poll(2) on the transport's descriptors, as the kernel's
/// TCP receives in its softirq): data is received and acknowledged, so a
/// peer's sends complete and nothing is retransmitted while this rank
/// computes; what it receives waits in the endpoint's event queue for the
/// next `llc_shim_progress` (it never calls C). Small messages a send left
/// held (`coalesce_us`) and no progress call has sent since, it sends at
/// its next look (every `period`).
struct Background {
    ep: Arc<Ep>,
    counters: Arc<Counters>,
    calls: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    held: Arc<AtomicBool>,
    wake: Arc<Wake>,
    period: Duration,
}

/// The background thread's niceness. It helps a rank that computes and
/// must not take the core from it: where every core runs a rank (as MPI
/// jobs run), a helper at the rank's own priority preempts the rank at
/// each of its wake-ups, and the radix sort lost about a tenth of its speed
/// to it; at 19 it takes the time the scheduler can spare, and all of an
/// idle core (docs/BENCHMARKS.md, "The radix sort and the background
/// thread").
const BACKGROUND_NICE: libc::c_int = 19;

/// Give the calling thread [`BACKGROUND_NICE`]; where the system refuses,
/// it keeps its priority (and says so in the log).
fn lower_priority() {
    // SAFETY: gettid has no arguments and cannot fail; setpriority with
    // PRIO_PROCESS and a thread id changes only that thread's niceness.
    let rc = unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::gettid() as libc::id_t,
            BACKGROUND_NICE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        tracing::debug!(%e, "background thread keeps its priority");
    }
}

impl Background {
    fn run(self) {
        let mut seen = self.calls.load(Ordering::Relaxed);
        let mut computing = false;
        let wake = [self.wake.fd()];
        while !self.stop.load(Ordering::Relaxed) {
            if computing {
                self.ep.wait_ready_or(&wake, self.period);
            } else {
                msg_layer::sys::poll_readable(&wake, self.period);
            }
            self.wake.clear();
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            // Cleared before sending: a burst that starts after this is
            // noted again.
            if self.held.swap(false, Ordering::AcqRel) {
                self.ep.send_held();
            }
            let now = self.calls.load(Ordering::Relaxed);
            if now != seen {
                seen = now;
                computing = false;
                continue; // the application makes progress itself
            }
            computing = true;
            self.counters
                .background_rounds
                .fetch_add(1, Ordering::Relaxed);
            if let Err(e) = self.ep.progress() {
                tracing::warn!(%e, "background progress");
            }
        }
    }
}
