//! A C ABI over the message layer, for the Open MPI BTL component `btl/llc`
//! (`component/btl_llc*.c`) and any other C caller.
//!
//! The header `include/llc_shim.h` is generated from this file by cbindgen;
//! `tests/header.rs` fails when it is out of date.
//!
//! # Mapping
//! - BTL tags (0..=255) are message-layer active-message handler ids: a
//!   send is [`Endpoint::am_post`], a receive runs the callback registered
//!   for its tag.
//! - Registered memory is a [`MemoryRegion`] over a raw pointer
//!   ([`PtrRegion`]); put and get are the message layer's, completed with a
//!   callback.
//! - Progress is [`Endpoint::progress`].
//!
//! # Threads and callbacks
//! Every C callback (receive, RMA completion, peer failure) runs on the
//! thread that calls [`llc_shim_progress`] and from no other, so an Open
//! MPI built without thread support is never entered concurrently. A
//! callback may call the shim again (ob1 sends from inside its receive
//! callbacks): no shim or engine lock is held while it runs, and a nested
//! `llc_shim_progress` makes progress but delivers nothing (the outer one
//! delivers in order).
//!
//! The optional background thread ([`LlcShimConfig::progress_thread`]) only
//! keeps the connections alive while the application computes: every
//! `progress_interval_us` it makes progress if no caller did meanwhile
//! (acknowledgements, keepalives, retransmissions). What it receives is
//! queued, copied, for the next `llc_shim_progress`; it never calls C.

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::rma::{MemoryRegion, RegionKey};
use msg_layer::transport::spec::{Backend, LlcSpec};
use msg_layer::transport::{AnyTransport, TransportSpec};
use msg_layer::{Addr, Config, Endpoint, Error, PeerEnd, PeerId, Request};

/// Result codes of the shim's functions.
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum LlcShimStatus {
    /// Done.
    Ok = 0,
    /// Failed; the error text says why (where the function takes a buffer).
    Error = -1,
    /// Not now: resources are short; retry after progress.
    Busy = -2,
    /// The peer failed or closed.
    PeerFailed = -3,
    /// An argument is invalid (null pointer, unknown peer, bad address).
    Invalid = -4,
}

/// How to open an endpoint.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct LlcShimConfig {
    /// Interface name, NUL-terminated (e.g. "llc0").
    pub ifname: *const c_char,
    /// Backend: "auto", "xdp" or "packet" (NULL: auto).
    pub backend: *const c_char,
    /// LLC SAP (0: the stack's default).
    pub sap: u8,
    /// The endpoint's port on the interface (0: any free port). Every
    /// process on an interface has its own; the kernel hands each only the
    /// frames for its port.
    pub port: u16,
    /// A peer silent this long is declared failed (0: the stack's default,
    /// 10 s). Keepalives are sent after a quarter of it.
    pub idle_timeout_ms: u32,
    /// Run the background keep-alive progress thread.
    pub progress_thread: bool,
    /// Have the interface's SAP to this endpoint alone (one rank per NIC):
    /// no port filter, no same-host path. Off: the interface is shared with
    /// the other ranks of the host.
    pub exclusive: bool,
    /// Its period in microseconds (0: 10 ms).
    pub progress_interval_us: u32,
}

/// Counters, for the component's report at finalize.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
pub struct LlcShimStats {
    /// Messages sent (send, sendi).
    pub sent: u64,
    /// Payload bytes sent.
    pub sent_bytes: u64,
    /// Messages received and delivered to a receive callback.
    pub received: u64,
    /// Payload bytes received.
    pub received_bytes: u64,
    /// Received messages that were queued (copied) because they arrived
    /// outside `llc_shim_progress` (the background thread).
    pub queued: u64,
    /// Messages for a tag with no receive callback (dropped).
    pub unhandled: u64,
    /// Put operations started.
    pub puts: u64,
    /// Get operations started.
    pub gets: u64,
    /// Peers that failed (not counting orderly closes).
    pub peers_failed: u64,
    /// Rounds of the background thread that made progress.
    pub background_rounds: u64,
    /// LLC frames retransmitted (all connections).
    pub retransmits: u64,
    /// Of those, after a retransmission timeout.
    pub timeouts: u64,
    /// Frames the LLC endpoint dropped (malformed, beyond the window, ...).
    pub frames_dropped: u64,
    /// Of `sent`, messages whose body was lent (`llc_shim_send_lent`): sent
    /// from the caller's memory without a copy.
    pub sent_lent: u64,
}

/// Receive callback: `(ctx, peer, tag, data, len)`. `data` is valid only
/// during the call.
pub type LlcShimRecvFn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, peer: u32, tag: u8, data: *const u8, len: usize)>;

/// Peer failure callback: `(ctx, peer, orderly, reason)`. `orderly` is
/// true when the peer closed its connection in order (it finished); the
/// reason text is valid only during the call.
pub type LlcShimFailFn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, peer: u32, orderly: bool, reason: *const c_char)>;

/// Completion of a lent send: `(ctx)`, once the transport no longer needs
/// the lent body (its peer acknowledged it, or the peer failed).
pub type LlcShimSentFn = Option<unsafe extern "C" fn(ctx: *mut c_void)>;

/// Put/get completion: `(ctx, status)`.
pub type LlcShimRmaFn = Option<unsafe extern "C" fn(ctx: *mut c_void, status: LlcShimStatus)>;

/// A C pointer carried across threads; only dereferenced by C, on the thread
/// that calls `llc_shim_progress`.
#[derive(Copy, Clone, Debug)]
struct CPtr(*mut c_void);
// SAFETY: the pointer is never dereferenced by Rust; it is handed back to C
// callbacks, which the shim only calls from the thread in `llc_shim_progress`.
unsafe impl Send for CPtr {}
// SAFETY: as above: shared references never dereference it.
unsafe impl Sync for CPtr {}

/// What a background round received, for the next `llc_shim_progress`.
enum Delivery {
    Message {
        peer: PeerId,
        tag: u8,
        data: Vec<u8>,
    },
    Failure {
        peer: PeerId,
        orderly: bool,
        reason: String,
    },
}

struct RmaOp {
    req: Request,
    cb: LlcShimRmaFn,
    ctx: CPtr,
    /// For a get: where the data goes.
    dst: Option<(CPtr, usize)>,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    sent_bytes: AtomicU64,
    received: AtomicU64,
    received_bytes: AtomicU64,
    queued: AtomicU64,
    unhandled: AtomicU64,
    puts: AtomicU64,
    gets: AtomicU64,
    peers_failed: AtomicU64,
    background_rounds: AtomicU64,
    sent_lent: AtomicU64,
}

impl Counters {
    /// One message of `bytes` handed to the transport.
    fn count_sent(&self, bytes: usize) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.sent_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }
}

/// A receive callback and its context.
type RecvHandler = (
    unsafe extern "C" fn(*mut c_void, u32, u8, *const u8, usize),
    CPtr,
);
/// A failure callback and its context.
type FailHandler = (
    unsafe extern "C" fn(*mut c_void, u32, bool, *const c_char),
    CPtr,
);

struct Inner {
    recv: Mutex<Vec<Option<RecvHandler>>>,
    fail: Mutex<Option<FailHandler>>,
    queue: Mutex<VecDeque<Delivery>>,
    rma: Mutex<Vec<RmaOp>>,
    counters: Counters,
    /// Calls of `llc_shim_progress` so far: the background thread stays out
    /// while it moves. Counted, not timed: a clock read on every idle turn
    /// of `opal_progress` cost more than the rest of an idle call. Bumped
    /// with a load and a store; an increment lost between two racing
    /// callers still shows a change.
    progress_calls: AtomicU64,
    /// Set while `queue` may hold deliveries (written under its lock): an
    /// idle progress call then takes no lock for it.
    queued: AtomicBool,
    /// Set while `rma` may hold operations (written under its lock).
    rma_pending: AtomicBool,
    /// Lent sends the transport has let go of, for their completion
    /// callbacks in the next `llc_shim_progress`.
    sent: Mutex<Vec<(unsafe extern "C" fn(*mut c_void), CPtr)>>,
    /// Set while `sent` may hold completions (written under its lock).
    sent_pending: AtomicBool,
}

/// A body lent by the C caller (`llc_shim_send_lent`): the transport holds
/// it, without a copy, until the peer acknowledged it; dropping the last
/// reference queues the caller's completion.
struct Lent {
    ptr: *const u8,
    len: usize,
    done: Option<(unsafe extern "C" fn(*mut c_void), CPtr)>,
    inner: std::sync::Weak<Inner>,
}

// SAFETY: the bytes at `ptr` are only read, and the caller keeps them valid
// and unchanged until the completion queued by `drop` runs (the contract of
// `llc_shim_send_lent`), whichever thread drops the last reference.
unsafe impl Send for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes until the completion runs,
        // which is after this owner is dropped (see `Send` above), and
        // non-null unless `len` is 0 (checked by `llc_shim_send_lent`).
        unsafe { c_bytes(self.ptr, self.len) }.unwrap_or_default()
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let (Some(done), Some(inner)) = (self.done.take(), self.inner.upgrade()) {
            let mut q = inner.sent.lock().expect("sent");
            q.push(done);
            inner.sent_pending.store(true, Ordering::Release);
        }
    }
}

thread_local! {
    /// Set while this thread is inside `llc_shim_progress`: handlers may
    /// then call C directly.
    static IN_PROGRESS: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread delivers queued events (no nested delivery).
    static DELIVERING: Cell<bool> = const { Cell::new(false) };
}

type Ep = Endpoint<AnyTransport>;

/// An open endpoint. Opaque to C.
pub struct LlcShim {
    ep: Arc<Ep>,
    inner: Arc<Inner>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    regions: Mutex<Vec<RegionKey>>,
}

/// Registered memory: a raw range Open MPI keeps valid until it
/// deregisters it.
#[derive(Debug)]
pub struct PtrRegion {
    base: *mut u8,
    len: usize,
}

impl PtrRegion {
    /// A region over `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must stay valid for reads and writes until the
    /// region is deregistered and every access in progress has finished
    /// (the shim deregisters under the engine lock, which accesses hold).
    /// What peers write there races with local accesses exactly as RDMA
    /// does; keeping them apart is MPI's job (its synchronization rules).
    pub unsafe fn new(base: *mut u8, len: usize) -> Self {
        PtrRegion { base, len }
    }
}

// SAFETY: the region is plain memory whose validity the registrant
// guarantees (see `PtrRegion::new`); it may be accessed from any thread.
unsafe impl Send for PtrRegion {}
// SAFETY: as above; accesses are byte copies, their ordering is MPI's.
unsafe impl Sync for PtrRegion {}

impl MemoryRegion for PtrRegion {
    fn len(&self) -> usize {
        self.len
    }
    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "engine checked bounds");
        // SAFETY: in bounds (checked above); valid per `PtrRegion::new`;
        // `src` is a message buffer, never inside the region.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(offset), src.len()) }
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "engine checked bounds");
        // SAFETY: as in `write`, the other way round.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(offset), dst.as_mut_ptr(), dst.len()) }
    }
}

fn write_err(buf: *mut c_char, len: usize, msg: &str) {
    if buf.is_null() || len == 0 {
        return;
    }
    let n = msg.len().min(len - 1);
    // SAFETY: the caller gave `len` writable bytes at `buf`; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
}

/// The non-empty items of a comma list (none when absent).
fn comma_list(s: Option<&str>) -> Vec<&str> {
    s.map(|s| {
        s.split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect()
    })
    .unwrap_or_default()
}

/// A NUL-terminated C string argument as UTF-8 (None when null or invalid).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

fn init_logging() {
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

impl Inner {
    fn touch(&self) {
        let n = self.progress_calls.load(Ordering::Relaxed);
        self.progress_calls
            .store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Track a put or get until `complete_rma` sees it done.
    fn add_rma(&self, op: RmaOp) {
        let mut ops = self.rma.lock().expect("rma");
        ops.push(op);
        self.rma_pending.store(true, Ordering::Release);
    }

    /// Queue a delivery for the next `llc_shim_progress`.
    fn enqueue(&self, d: Delivery) {
        let mut q = self.queue.lock().expect("queue");
        q.push_back(d);
        self.queued.store(true, Ordering::Release);
    }

    /// A message arrived for `tag` (from inside the endpoint's delivery).
    fn on_message(&self, peer: PeerId, tag: u8, data: &[u8]) {
        let direct = IN_PROGRESS.with(Cell::get) && !DELIVERING.with(Cell::get);
        if direct && !self.queued.load(Ordering::Acquire) {
            self.call_recv(peer, tag, data);
        } else {
            self.counters.queued.fetch_add(1, Ordering::Relaxed);
            self.enqueue(Delivery::Message {
                peer,
                tag,
                data: data.to_vec(),
            });
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

    fn call_fail(&self, peer: PeerId, orderly: bool, reason: &str) {
        let handler = *self.fail.lock().expect("fail");
        if let Some((f, ctx)) = handler {
            let text = std::ffi::CString::new(reason.replace('\0', " ")).expect("no NUL");
            // SAFETY: the registrant promised `f` accepts `ctx`; the text
            // lives through the call.
            unsafe { f(ctx.0, peer, orderly, text.as_ptr()) }
        }
    }

    /// Deliver what was queued, in order, unless this thread is delivering.
    fn drain(&self) -> usize {
        if !self.queued.load(Ordering::Acquire) || DELIVERING.with(Cell::get) {
            return 0;
        }
        DELIVERING.with(|d| d.set(true));
        let mut n = 0;
        loop {
            let next = {
                let mut q = self.queue.lock().expect("queue");
                let d = q.pop_front();
                if q.is_empty() {
                    self.queued.store(false, Ordering::Release);
                }
                d
            };
            let Some(d) = next else { break };
            n += 1;
            match d {
                Delivery::Message { peer, tag, data } => self.call_recv(peer, tag, &data),
                Delivery::Failure {
                    peer,
                    orderly,
                    reason,
                } => self.call_fail(peer, orderly, &reason),
            }
        }
        DELIVERING.with(|d| d.set(false));
        n
    }
}

impl LlcShim {
    fn open(cfg: &LlcShimConfig) -> Result<LlcShim, String> {
        init_logging();
        // SAFETY: the C caller passes NUL-terminated strings or null.
        let ifname = unsafe { cstr(cfg.ifname) }.ok_or("no interface name given")?;
        // SAFETY: as above.
        let backend: Backend = unsafe { cstr(cfg.backend) }
            .unwrap_or("auto")
            .parse()
            .map_err(|e| format!("backend: {e}"))?;
        let mut llc = LlcSpec {
            backend,
            port: cfg.port,
            exclusive: cfg.exclusive,
            ..LlcSpec::new(ifname)
        };
        if cfg.sap != 0 {
            llc.config.sap = cfg.sap;
        }
        if cfg.idle_timeout_ms != 0 {
            llc.set_idle_timeout(Duration::from_millis(cfg.idle_timeout_ms.into()));
        }
        let spec = TransportSpec::Llc(llc);
        tracing::debug!(%spec, "opening");
        let t = spec
            .open()
            .map_err(|e| format!("opening {backend} on {ifname}: {e}"))?;
        for n in t.notes() {
            tracing::info!(ifname, "{n}");
        }
        let mcfg = Config {
            progress_thread: false,
            ..Config::default()
        };
        let ep = Arc::new(Endpoint::new(t, mcfg).map_err(|e| e.to_string())?);
        let inner = Arc::new(Inner {
            recv: Mutex::new(vec![None; 256]),
            fail: Mutex::new(None),
            queue: Mutex::new(VecDeque::new()),
            rma: Mutex::new(Vec::new()),
            counters: Counters::default(),
            progress_calls: AtomicU64::new(0),
            queued: AtomicBool::new(false),
            rma_pending: AtomicBool::new(false),
            sent: Mutex::new(Vec::new()),
            sent_pending: AtomicBool::new(false),
        });
        let i = inner.clone();
        ep.on_peer_failure(Box::new(move |peer, err| {
            let orderly = matches!(
                err,
                Error::PeerFailed {
                    end: PeerEnd::Closed,
                    ..
                }
            );
            // Words for the C side's log; the decision above is by type.
            let reason = match err {
                Error::PeerFailed { end, .. } => end.to_string(),
                other => other.to_string(),
            };
            if !orderly {
                i.counters.peers_failed.fetch_add(1, Ordering::Relaxed);
            }
            tracing::debug!(peer, orderly, %reason, "peer gone");
            // Failures always go through the queue, after the messages
            // that arrived before them.
            i.enqueue(Delivery::Failure {
                peer,
                orderly,
                reason,
            });
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if cfg.progress_thread {
            let period = Duration::from_micros(match cfg.progress_interval_us {
                0 => 10_000,
                n => n.into(),
            });
            let (ep, inner, stop) = (ep.clone(), inner.clone(), stop.clone());
            Some(
                std::thread::Builder::new()
                    .name("llc-shim-bg".into())
                    .spawn(move || background(&ep, &inner, &stop, period))
                    .map_err(|e| format!("starting the progress thread: {e}"))?,
            )
        } else {
            None
        };
        Ok(LlcShim {
            ep,
            inner,
            stop,
            thread,
            regions: Mutex::new(Vec::new()),
        })
    }

    fn progress(&self) -> Result<usize, Error> {
        self.inner.touch();
        let outer = !IN_PROGRESS.with(Cell::get);
        IN_PROGRESS.with(|p| p.set(true));
        let mut n = self.inner.drain();
        let res = self.ep.progress();
        n += self.inner.drain();
        n += self.complete_sends();
        n += self.complete_rma();
        if outer {
            IN_PROGRESS.with(|p| p.set(false));
        }
        res.map(|moved| n + usize::from(moved))
    }

    /// Run the completions of lent sends the transport let go of.
    fn complete_sends(&self) -> usize {
        if !self.inner.sent_pending.load(Ordering::Acquire) {
            return 0;
        }
        let done = {
            let mut q = self.inner.sent.lock().expect("sent");
            self.inner.sent_pending.store(false, Ordering::Release);
            std::mem::take(&mut *q)
        };
        let n = done.len();
        for (cb, ctx) in done {
            // SAFETY: the caller of llc_shim_send_lent promised `cb`
            // accepts `ctx`; no shim lock is held (it may send again).
            unsafe { cb(ctx.0) }
        }
        n
    }

    fn complete_rma(&self) -> usize {
        if !self.inner.rma_pending.load(Ordering::Acquire) {
            return 0;
        }
        let reqs: Vec<Request> = {
            let ops = self.inner.rma.lock().expect("rma");
            if ops.is_empty() {
                self.inner.rma_pending.store(false, Ordering::Release);
                return 0;
            }
            ops.iter().map(|o| o.req).collect()
        };
        let done = self.ep.test_some(&reqs);
        if done.is_empty() {
            return 0;
        }
        let mut finished = Vec::with_capacity(done.len());
        {
            let mut ops = self.inner.rma.lock().expect("rma");
            for (i, res) in &done {
                let req = reqs[*i];
                if let Some(pos) = ops.iter().position(|o| o.req == req) {
                    finished.push((ops.swap_remove(pos), res.clone()));
                }
            }
        }
        let n = finished.len();
        for (op, res) in finished {
            let status = match res {
                Ok(c) => {
                    if let (Some((dst, len)), Some(data)) = (op.dst, c.data.as_ref()) {
                        let n = len.min(data.len());
                        // SAFETY: the caller of llc_shim_get gave `len`
                        // writable bytes at `dst`, valid until completion.
                        unsafe {
                            std::ptr::copy_nonoverlapping(data.as_ptr(), dst.0.cast::<u8>(), n)
                        }
                    }
                    LlcShimStatus::Ok
                }
                Err(Error::PeerFailed { .. }) => LlcShimStatus::PeerFailed,
                Err(e) => {
                    tracing::warn!(%e, "one-sided operation failed");
                    LlcShimStatus::Error
                }
            };
            if let Some(cb) = op.cb {
                // SAFETY: the caller promised `cb` accepts `ctx`.
                unsafe { cb(op.ctx.0, status) }
            }
        }
        n
    }
}

fn background(ep: &Ep, inner: &Inner, stop: &AtomicBool, period: Duration) {
    let mut seen = inner.progress_calls.load(Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(period);
        let calls = inner.progress_calls.load(Ordering::Relaxed);
        if calls != seen {
            seen = calls;
            continue; // the application made progress itself this period
        }
        inner
            .counters
            .background_rounds
            .fetch_add(1, Ordering::Relaxed);
        if let Err(e) = ep.progress() {
            tracing::warn!(%e, "background progress");
        }
    }
}

fn status_of(e: &Error) -> LlcShimStatus {
    match e {
        Error::PeerFailed { .. } => LlcShimStatus::PeerFailed,
        Error::UnknownPeer(_) => LlcShimStatus::Invalid,
        _ => LlcShimStatus::Error,
    }
}

/// The `n` bytes at `p` from C: empty when `n` is 0 (`p` may then be
/// null), `None` for a null `p` with bytes to read.
///
/// # Safety
/// A non-null `p` is valid for reads of `n` bytes for `'a`.
unsafe fn c_bytes<'a>(p: *const u8, n: usize) -> Option<&'a [u8]> {
    if n == 0 {
        Some(&[])
    } else if p.is_null() {
        None
    } else {
        // SAFETY: non-null, and valid for `n` bytes (this function's contract).
        Some(unsafe { std::slice::from_raw_parts(p, n) })
    }
}

/// Borrow the shim behind a C handle.
///
/// # Safety
/// `s` is null or a handle from `llc_shim_open` not yet closed.
unsafe fn shim<'a>(s: *const LlcShim) -> Option<&'a LlcShim> {
    // SAFETY: per this function's contract.
    unsafe { s.as_ref() }
}

/// Open an endpoint; on success `*out` holds the handle. On failure the
/// reason is written to `err` (NUL-terminated, at most `err_len` bytes).
///
/// # Safety
/// `cfg` and `out` are valid pointers; `err` is null or has `err_len`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_open(
    cfg: *const LlcShimConfig,
    out: *mut *mut LlcShim,
    err: *mut c_char,
    err_len: usize,
) -> LlcShimStatus {
    if cfg.is_null() || out.is_null() {
        write_err(err, err_len, "null argument");
        return LlcShimStatus::Invalid;
    }
    // SAFETY: checked non-null; the caller passes a valid config.
    let cfg = unsafe { &*cfg };
    match LlcShim::open(cfg) {
        Ok(s) => {
            // SAFETY: `out` is valid for a write (checked non-null).
            unsafe { *out = Box::into_raw(Box::new(s)) };
            LlcShimStatus::Ok
        }
        Err(e) => {
            write_err(err, err_len, &e);
            LlcShimStatus::Error
        }
    }
}

/// Choose the interface of the `index`th local process (MPI: the local
/// rank) when none was named: the interfaces that can carry LLC
/// (`include`, a comma list, or when null or empty every up Ethernet
/// interface but loopback and bridge/bond ports; minus the comma list
/// `exclude`), shared round-robin by the local processes. Writes the name
/// to `out` (NUL-terminated, at most `out_len` bytes); on failure writes
/// the reason, naming the problem and the fix, to `err`.
///
/// # Safety
/// `include` and `exclude` are null or NUL-terminated; `out` has `out_len`
/// writable bytes; `err` is null or has `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_select_interface(
    include: *const c_char,
    exclude: *const c_char,
    index: u32,
    out: *mut c_char,
    out_len: usize,
    err: *mut c_char,
    err_len: usize,
) -> LlcShimStatus {
    // SAFETY: per the contract: null or NUL-terminated, alive for the call
    // (the borrowed names are not kept beyond it).
    let (include, exclude) = unsafe { (comma_list(cstr(include)), comma_list(cstr(exclude))) };
    match msg_layer::transport::llc::select_interfaces(&include, &exclude) {
        Ok(names) => {
            let name = &names[index as usize % names.len()];
            if out.is_null() || name.len() >= out_len {
                write_err(err, err_len, "interface name buffer too small");
                return LlcShimStatus::Invalid;
            }
            write_err(out, out_len, name);
            LlcShimStatus::Ok
        }
        Err(e) => {
            write_err(err, err_len, &e.to_string());
            LlcShimStatus::Error
        }
    }
}

/// The endpoint's address (`llc://MAC/PORT[?sap=0xNN]`), NUL-terminated,
/// into `buf`; returns the length it needs including the NUL (call again
/// with a larger buffer when that exceeds `len`).
///
/// # Safety
/// `s` is a live handle; `buf` is null or has `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_addr(s: *const LlcShim, buf: *mut c_char, len: usize) -> usize {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return 0;
    };
    let a = s.ep.local_addr().to_string();
    if a.len() < len {
        write_err(buf, len, &a);
    }
    a.len() + 1
}

/// What the endpoint runs on (e.g. `llc/af_packet`), like `llc_shim_addr`.
///
/// # Safety
/// As `llc_shim_addr`.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_transport_name(
    s: *const LlcShim,
    buf: *mut c_char,
    len: usize,
) -> usize {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return 0;
    };
    let a = s.ep.transport_name();
    if a.len() < len {
        write_err(buf, len, &a);
    }
    a.len() + 1
}

/// Which of the `n` peer addresses in `addrs` this endpoint can reach,
/// found without connecting (a link-level probe to each peer's interface,
/// repeated within `timeout_ms`; endpoints of this host are reachable
/// through the same-host path): `out[i]` is set for each. Waits only while
/// an answer is missing, so a job whose peers all answer pays a round trip.
/// An address that does not parse is unreachable.
///
/// # Safety
/// `s` is a live handle; `addrs` has `n` NUL-terminated strings (or
/// nulls); `out` has `n` writable bools.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_reachable(
    s: *const LlcShim,
    addrs: *const *const c_char,
    n: usize,
    out: *mut bool,
    timeout_ms: u32,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    if n > 0 && (addrs.is_null() || out.is_null()) {
        return LlcShimStatus::Invalid;
    }
    // SAFETY: `addrs` has `n` entries, each null or NUL-terminated.
    let parsed: Vec<Option<Addr>> = (0..n)
        .map(|i| unsafe { cstr(*addrs.add(i)) }.and_then(|a| a.parse().ok()))
        .collect();
    let valid: Vec<Addr> = parsed.iter().flatten().copied().collect();
    let answers =
        s.ep.reachable(&valid, Duration::from_millis(timeout_ms.into()));
    let mut answers = answers.into_iter();
    for (i, p) in parsed.iter().enumerate() {
        let ok = p.is_some() && answers.next().unwrap_or(false);
        // SAFETY: `out` has `n` writable entries.
        unsafe { *out.add(i) = ok };
    }
    LlcShimStatus::Ok
}

/// Know the peer at `addr` (as another endpoint's `llc_shim_addr` gave it);
/// `*peer` receives its number. Every process adds every other: of each
/// pair the one with the smaller address connects.
///
/// # Safety
/// `s` is a live handle; `addr` a NUL-terminated string; `peer` writable.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_add_peer(
    s: *const LlcShim,
    addr: *const c_char,
    peer: *mut u32,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let (Some(s), Some(addr)) = (unsafe { shim(s) }, unsafe { cstr(addr) }) else {
        return LlcShimStatus::Invalid;
    };
    if peer.is_null() {
        return LlcShimStatus::Invalid;
    }
    let Ok(a) = addr.parse::<Addr>() else {
        tracing::warn!(addr, "unparsable peer address");
        return LlcShimStatus::Invalid;
    };
    match s.ep.add_peer(&a) {
        Ok(p) => {
            // SAFETY: checked non-null.
            unsafe { *peer = p };
            LlcShimStatus::Ok
        }
        Err(e) => {
            tracing::warn!(%e, addr, "adding a peer");
            status_of(&e)
        }
    }
}

/// Forget a peer (Open MPI's del_procs). The message layer keeps its
/// connection until the endpoint closes; this only validates the number.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_remove_peer(s: *const LlcShim, peer: u32) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    if (peer as usize) < s.ep.peer_count() {
        LlcShimStatus::Ok
    } else {
        LlcShimStatus::Invalid
    }
}

/// Call `cb(ctx, peer, tag, data, len)` for every message that arrives with
/// `tag` (replacing any earlier callback; NULL removes it).
///
/// # Safety
/// `s` is a live handle; `cb` accepts `ctx` for as long as it is registered.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_set_recv_handler(
    s: *const LlcShim,
    tag: u8,
    cb: LlcShimRecvFn,
    ctx: *mut c_void,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    s.inner.recv.lock().expect("recv")[tag as usize] = cb.map(|f| (f, CPtr(ctx)));
    let inner = s.inner.clone();
    s.ep.set_am_handler(
        tag.into(),
        Box::new(move |peer, data| inner.on_message(peer, tag, data)),
    );
    LlcShimStatus::Ok
}

/// Call `cb(ctx, peer, orderly, reason)` once per peer whose connection
/// ends: `orderly` when it closed in order, otherwise it failed (gone,
/// silent, reset) and every operation towards it failed.
///
/// # Safety
/// `s` is a live handle; `cb` accepts `ctx` for as long as it is registered.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_set_failure_handler(
    s: *const LlcShim,
    cb: LlcShimFailFn,
    ctx: *mut c_void,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    *s.inner.fail.lock().expect("fail") = cb.map(|f| (f, CPtr(ctx)));
    LlcShimStatus::Ok
}

/// True when a send to `peer` now would leave at once rather than wait in
/// the shim's queue for the peer's connection or for the transport (a full
/// send buffer). The inline send (`btl_sendi`) asks this first and refuses
/// with "out of resource" when it is false, so ob1 falls back to its
/// descriptor path instead of piling up queued messages.
///
/// # Safety
/// `s` is a live handle (or null: false).
#[no_mangle]
pub unsafe extern "C" fn llc_shim_can_send(s: *const LlcShim, peer: u32) -> bool {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return false;
    };
    s.ep.can_post(peer)
}

/// Send `head ++ body` to `peer` with `tag`. The bytes are copied: both
/// buffers may be reused when this returns, and the send counts as
/// complete (delivery is the transport's job; a failure is reported
/// through the failure callback).
///
/// # Safety
/// `s` is a live handle; `head`/`body` are null with length 0 or valid for
/// their lengths.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_send(
    s: *const LlcShim,
    peer: u32,
    tag: u8,
    head: *const u8,
    head_len: usize,
    body: *const u8,
    body_len: usize,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    // SAFETY: valid for their lengths per the contract.
    let (Some(head), Some(body)) = (unsafe { c_bytes(head, head_len) }, unsafe {
        c_bytes(body, body_len)
    }) else {
        return LlcShimStatus::Invalid;
    };
    send_owned(s, peer, tag, [head, body].concat())
}

/// Send `head ++ body` to `peer` with `tag`, copying `head` and lending
/// `body`: the transport sends it from the caller's memory, without a copy,
/// and keeps it until the peer has acknowledged it. `done(ctx)` then runs
/// from `llc_shim_progress` (also when the peer failed instead: the failure
/// callback says so); from then on the memory is the caller's again. When
/// this returns anything but `Ok`, nothing was sent and `done` never runs.
///
/// For large bodies, where the copy costs more than the wait: until `done`
/// the sender's buffer is pinned to an acknowledgement, not to the call.
///
/// # Safety
/// `s` is a live handle; `head` is valid for `head_len` bytes (or null with
/// 0); `body` is valid for `body_len` bytes (or null with 0) and stays valid
/// and unchanged until `done(ctx)` runs or the handle is closed; `done`
/// accepts `ctx`.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_send_lent(
    s: *const LlcShim,
    peer: u32,
    tag: u8,
    head: *const u8,
    head_len: usize,
    body: *const u8,
    body_len: usize,
    done: LlcShimSentFn,
    ctx: *mut c_void,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    let Some(done) = done else {
        return LlcShimStatus::Invalid;
    };
    // SAFETY: `head` is valid for `head_len` bytes per the contract.
    let Some(prefix) = (unsafe { c_bytes(head, head_len) }) else {
        return LlcShimStatus::Invalid;
    };
    if body.is_null() && body_len > 0 {
        return LlcShimStatus::Invalid;
    }
    let lent = Bytes::from_owner(Lent {
        ptr: body,
        len: body_len,
        done: Some((done, CPtr(ctx))),
        inner: Arc::downgrade(&s.inner),
    });
    match s.ep.am_post_parts(peer, tag.into(), prefix, lent) {
        Ok(()) => {
            s.inner.counters.count_sent(head_len + body_len);
            s.inner.counters.sent_lent.fetch_add(1, Ordering::Relaxed);
            LlcShimStatus::Ok
        }
        Err(e) => {
            // Refused before anything was queued: the body was dropped
            // already and queued its completion, which must not run.
            let mut q = s.inner.sent.lock().expect("sent");
            q.retain(|(_, c)| c.0 != ctx);
            status_of(&e)
        }
    }
}

fn send_owned(s: &LlcShim, peer: u32, tag: u8, v: Vec<u8>) -> LlcShimStatus {
    let n = v.len();
    match s.ep.am_post(peer, tag.into(), Bytes::from(v)) {
        Ok(()) => {
            s.inner.counters.count_sent(n);
            LlcShimStatus::Ok
        }
        Err(e) => status_of(&e),
    }
}

/// A send buffer the shim owns, which `llc_shim_send_buf` hands to the
/// transport without copying.
#[repr(C)]
#[derive(Debug)]
pub struct LlcShimBuf {
    /// Where to write.
    pub data: *mut u8,
    /// Bytes writable at `data`.
    pub capacity: usize,
}

/// A send buffer of `capacity` bytes (for a BTL descriptor); free it with
/// `llc_shim_buf_free` or send it with `llc_shim_send_buf`. NULL when
/// memory is short.
#[no_mangle]
pub extern "C" fn llc_shim_buf_alloc(capacity: usize) -> *mut LlcShimBuf {
    let mut v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(capacity));
    let b = LlcShimBuf {
        data: v.as_mut_ptr(),
        capacity: v.capacity(),
    };
    Box::into_raw(Box::new(b))
}

/// Take back a buffer from `llc_shim_buf_alloc` that will not be sent.
///
/// # Safety
/// `b` is null or from `llc_shim_buf_alloc`, neither freed nor sent.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_buf_free(b: *mut LlcShimBuf) {
    if b.is_null() {
        return;
    }
    // SAFETY: `b` came from Box::into_raw in llc_shim_buf_alloc.
    let b = unsafe { Box::from_raw(b) };
    // SAFETY: data/capacity describe the Vec leaked in llc_shim_buf_alloc.
    drop(unsafe { Vec::from_raw_parts(b.data, 0, b.capacity) });
}

/// Send the first `len` bytes of `b` to `peer` with `tag`, without copying.
/// The buffer belongs to the shim afterwards, whatever the result.
///
/// # Safety
/// `s` is a live handle; `b` is from `llc_shim_buf_alloc`, neither freed
/// nor sent, and its first `len` (<= capacity) bytes were written.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_send_buf(
    s: *const LlcShim,
    peer: u32,
    tag: u8,
    b: *mut LlcShimBuf,
    len: usize,
) -> LlcShimStatus {
    if b.is_null() {
        return LlcShimStatus::Invalid;
    }
    // SAFETY: `b` came from Box::into_raw in llc_shim_buf_alloc.
    let b = unsafe { Box::from_raw(b) };
    let len = len.min(b.capacity);
    // SAFETY: the Vec leaked in llc_shim_buf_alloc, its first `len` bytes
    // written by the caller (contract).
    let v = unsafe { Vec::from_raw_parts(b.data, len, b.capacity) };
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    send_owned(s, peer, tag, v)
}

/// Make `len` bytes at `base` accessible to peers' put and get; `*key`
/// receives the key peers name it by.
///
/// # Safety
/// `s` is a live handle; `key` writable; the memory stays valid until
/// `llc_shim_deregister` (see `PtrRegion::new`).
#[no_mangle]
pub unsafe extern "C" fn llc_shim_register(
    s: *const LlcShim,
    base: *mut c_void,
    len: usize,
    key: *mut u64,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    if key.is_null() || (base.is_null() && len > 0) {
        return LlcShimStatus::Invalid;
    }
    // SAFETY: the caller keeps the memory valid until deregistration.
    let region = unsafe { PtrRegion::new(base.cast(), len) };
    let k = s.ep.register(Arc::new(region));
    s.regions.lock().expect("regions").push(k);
    // SAFETY: checked non-null.
    unsafe { *key = k.0 };
    LlcShimStatus::Ok
}

/// Withdraw a registration; later accesses by peers are refused.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_deregister(s: *const LlcShim, key: u64) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    s.regions.lock().expect("regions").retain(|k| k.0 != key);
    if s.ep.deregister(RegionKey(key)) {
        LlcShimStatus::Ok
    } else {
        LlcShimStatus::Invalid
    }
}

/// Write `len` bytes from `local` into `peer`'s region `key` at `offset`.
/// The data is copied at once (`local` may be reused); `cb(ctx, status)`
/// runs from `llc_shim_progress` when the target has written it.
///
/// # Safety
/// `s` is a live handle; `local` valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_put(
    s: *const LlcShim,
    peer: u32,
    local: *const c_void,
    len: usize,
    key: u64,
    offset: u64,
    cb: LlcShimRmaFn,
    ctx: *mut c_void,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    // SAFETY: valid for `len` bytes per the contract.
    let Some(data) = (unsafe { c_bytes(local.cast::<u8>(), len) }) else {
        return LlcShimStatus::Invalid;
    };
    let data = Bytes::copy_from_slice(data);
    s.inner.counters.puts.fetch_add(1, Ordering::Relaxed);
    let req = s.ep.put(peer, RegionKey(key), offset, data);
    s.inner.add_rma(RmaOp {
        req,
        cb,
        ctx: CPtr(ctx),
        dst: None,
    });
    LlcShimStatus::Ok
}

/// Read `len` bytes of `peer`'s region `key` at `offset` into `local`;
/// `cb(ctx, status)` runs from `llc_shim_progress` once they are there.
///
/// # Safety
/// `s` is a live handle; `local` writable for `len` bytes until `cb` runs.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_get(
    s: *const LlcShim,
    peer: u32,
    local: *mut c_void,
    len: usize,
    key: u64,
    offset: u64,
    cb: LlcShimRmaFn,
    ctx: *mut c_void,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    if local.is_null() && len > 0 {
        return LlcShimStatus::Invalid;
    }
    s.inner.counters.gets.fetch_add(1, Ordering::Relaxed);
    let req = s.ep.get(peer, RegionKey(key), offset, len);
    s.inner.add_rma(RmaOp {
        req,
        cb,
        ctx: CPtr(ctx),
        dst: Some((CPtr(local), len)),
    });
    LlcShimStatus::Ok
}

/// Make progress and run the callbacks that are due (receives, RMA
/// completions, peer failures), on this thread. Returns how many events
/// there were (0: nothing happened), or a negative `LlcShimStatus`.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_progress(s: *const LlcShim) -> i32 {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid as i32;
    };
    match s.progress() {
        Ok(n) => n.min(i32::MAX as usize) as i32,
        Err(e) => {
            tracing::warn!(%e, "progress");
            LlcShimStatus::Error as i32
        }
    }
}

/// Make progress until everything sent has reached its peers, at most
/// `timeout_ms`. Runs due callbacks like `llc_shim_progress`.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_flush(s: *const LlcShim, timeout_ms: u32) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
    loop {
        let _ = s.progress();
        if s.ep.flush(Some(Duration::ZERO)).is_ok()
            && s.inner.rma.lock().expect("rma").is_empty()
            && !s.inner.sent_pending.load(Ordering::Acquire)
        {
            return LlcShimStatus::Ok;
        }
        if Instant::now() >= deadline {
            return LlcShimStatus::Busy;
        }
    }
}

/// Copy the counters into `*out`.
///
/// # Safety
/// `s` is a live handle; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_stats(
    s: *const LlcShim,
    out: *mut LlcShimStats,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    if out.is_null() {
        return LlcShimStatus::Invalid;
    }
    let c = &s.inner.counters;
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let st = LlcShimStats {
        sent: get(&c.sent),
        sent_bytes: get(&c.sent_bytes),
        received: get(&c.received),
        received_bytes: get(&c.received_bytes),
        queued: get(&c.queued),
        unhandled: get(&c.unhandled),
        puts: get(&c.puts),
        gets: get(&c.gets),
        peers_failed: get(&c.peers_failed),
        background_rounds: get(&c.background_rounds),
        sent_lent: get(&c.sent_lent),
        ..LlcShimStats::default()
    };
    let mut st = st;
    if let Some(t) = s.ep.with_transport(|t| t.as_llc().map(|l| l.totals())) {
        st.frames_dropped = t.frames_dropped;
        st.retransmits = t.retransmits;
        st.timeouts = t.timeouts;
    }
    // SAFETY: checked non-null.
    unsafe { *out = st };
    LlcShimStatus::Ok
}

/// Deliver what is queued (at most `timeout_ms`), close every connection,
/// stop the background thread and free the endpoint. No callback runs
/// after this returns.
///
/// # Safety
/// `s` is null or a live handle, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_close(s: *mut LlcShim, timeout_ms: u32) {
    if s.is_null() {
        return;
    }
    // SAFETY: from Box::into_raw in llc_shim_open, closed once (contract).
    let mut s = unsafe { Box::from_raw(s) };
    s.stop.store(true, Ordering::Relaxed);
    if let Some(t) = s.thread.take() {
        let _ = t.join();
    }
    *s.inner.fail.lock().expect("fail") = None;
    for r in s.inner.recv.lock().expect("recv").iter_mut() {
        *r = None;
    }
    if let Err(e) = s.ep.close(Duration::from_millis(timeout_ms.into())) {
        tracing::debug!(%e, "closing: not everything was delivered");
    }
    for k in s.regions.lock().expect("regions").drain(..) {
        s.ep.deregister(k);
    }
}
