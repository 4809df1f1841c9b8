//! The C ABI: the types and functions of `include/llc_shim.h` (generated
//! by cbindgen; `tests/header.rs` fails when it is out of date). Each
//! function checks its arguments, borrows the shim behind the handle and
//! calls into [`crate::state`]; nothing here keeps state of its own.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::rma::RegionKey;
use msg_layer::{Addr, Error};

use crate::region::PtrRegion;
use crate::state::{CPtr, LlcShim, RmaOp};

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
    /// Its period in microseconds (0: 1 ms): how often it looks whether the
    /// application still calls `llc_shim_progress`; after a period without
    /// a call it makes progress whenever the transport has work.
    pub progress_interval_us: u32,
    /// Non-zero: small sends (up to 1 KiB) that follow another to the same
    /// peer with no `llc_shim_progress` between them wait, so that a burst
    /// leaves in one frame: at the end of the next `llc_shim_progress` (or
    /// a send that leaves), or, should the application stop calling, at
    /// the background thread's next look (`progress_interval_us`). The
    /// first send of a burst, and the first to each peer, leave at once.
    /// 0, or no background thread: every send leaves at once. (The value
    /// once bounded the wait with a timer that woke the thread; any
    /// non-zero value now means on.)
    pub coalesce_us: u32,
    /// How many ranks of the job on this host open this interface (0:
    /// unknown). 1 tells backend `auto` the endpoint is alone on it, where
    /// AF_PACKET is the faster choice for jumbo frames on a link with only
    /// copy-mode generic AF_XDP (veth); with more, AF_XDP's steering hands
    /// each rank its own frames. `exclusive` implies alone.
    pub ranks_on_interface: u32,
    /// Where the frame authentication key comes from: `LLC_SHIM_AUTH_ENV`
    /// (0: `LLC_AUTH_KEY` when set, else none), `LLC_SHIM_AUTH_OFF` (none)
    /// or `LLC_SHIM_AUTH_LATER` (the job's key, given with
    /// `llc_shim_new_auth_key` or `llc_shim_set_auth_key` before the first
    /// peer is added; until then the endpoint takes no frame).
    pub auth: u32,
}

/// `LlcShimConfig::auth`: the key derived from `LLC_AUTH_KEY` when it is
/// set (opening fails when it is set but empty), no key when it is not.
pub const LLC_SHIM_AUTH_ENV: u32 = 0;
/// `LlcShimConfig::auth`: no key; frames are not authenticated.
pub const LLC_SHIM_AUTH_OFF: u32 = 1;
/// `LlcShimConfig::auth`: the job's key comes after opening.
pub const LLC_SHIM_AUTH_LATER: u32 = 2;

/// Room for the key material `llc_shim_new_auth_key` writes: 64 hex digits
/// and the NUL.
pub const LLC_SHIM_KEY_MATERIAL_LEN: usize = 65;

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
    /// Received messages that waited for a later `llc_shim_progress`
    /// because they arrived outside one (the background thread, or a
    /// send's progress). Not copied: they wait in the endpoint's queue.
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
    /// Timeouts found spurious afterwards (the originals had arrived).
    pub spurious_timeouts: u64,
    /// Tail-loss probes sent (each one of `retransmits`).
    pub tail_probes: u64,
    /// Fast recoveries entered on frames found lost.
    pub loss_episodes: u64,
    /// Frames the LLC endpoint dropped (malformed, beyond the window, ...).
    pub frames_dropped: u64,
    /// Frames the kernel dropped before the endpoint saw them (a full RX
    /// ring or AF_XDP fill ring): each one costs its sender a repair.
    pub device_drops: u64,
    /// Of `sent`, messages whose body was lent (`llc_shim_send_lent`): sent
    /// from the caller's memory without a copy.
    pub sent_lent: u64,
    /// Bundles sent: small messages that waited for each other
    /// (`coalesce_us`) and left in one frame.
    pub bundles: u64,
    /// Of `sent`, messages that left inside a bundle.
    pub bundled: u64,
    /// Of `frames_dropped`, frames that failed authentication: without a
    /// tag where a key is set, with a wrong one, or with one where none is.
    pub auth_dropped: u64,
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

/// Write `text` NUL-terminated into `buf` when it fits in `len` bytes;
/// the length it needs, NUL included (a caller with a smaller buffer asks
/// again).
fn write_text(buf: *mut c_char, len: usize, text: &str) -> usize {
    if text.len() < len {
        write_err(buf, len, text);
    }
    text.len() + 1
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
pub(crate) unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
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
pub(crate) unsafe fn c_bytes<'a>(p: *const u8, n: usize) -> Option<&'a [u8]> {
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
            write_err(err, err_len, &e.to_string());
            LlcShimStatus::Error
        }
    }
}

/// Draw the job's key material (32 bytes from the operating system's
/// random source, as 64 hex digits), key this endpoint with it, and write
/// it NUL-terminated to `out` (`out_len` at least
/// `LLC_SHIM_KEY_MATERIAL_LEN`) for the launcher's channel, from which the
/// job's other processes give it to `llc_shim_set_auth_key`. The caller
/// wipes `out` once it passed it on. Only before the first peer is added.
///
/// # Safety
/// `s` is a live handle; `out` has `out_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_new_auth_key(
    s: *const LlcShim,
    out: *mut c_char,
    out_len: usize,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    if out.is_null() || out_len < LLC_SHIM_KEY_MATERIAL_LEN {
        return LlcShimStatus::Invalid;
    }
    let material = match msg_layer::transport::llc::random_key_material() {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(%e, "drawing the job's key");
            return LlcShimStatus::Error;
        }
    };
    let key = msg_layer::transport::llc::AuthKey::derive(material.as_bytes());
    if let Err(e) = s.ep.set_auth_key(key) {
        tracing::error!(%e, "keying the endpoint");
        return LlcShimStatus::Error;
    }
    write_err(out, out_len, &material);
    LlcShimStatus::Ok
}

/// Key this endpoint with the job's key material (`len` bytes at
/// `material`, as `llc_shim_new_auth_key` drew it, or any value
/// `LLC_AUTH_KEY` may hold): every frame is then authenticated, and peers
/// with another key (or none) cannot reach it. Only before the first peer
/// is added.
///
/// # Safety
/// `s` is a live handle; `material` has `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_set_auth_key(
    s: *const LlcShim,
    material: *const u8,
    len: usize,
) -> LlcShimStatus {
    // SAFETY: per the contract.
    let (Some(s), Some(m)) = (unsafe { shim(s) }, unsafe { c_bytes(material, len) }) else {
        return LlcShimStatus::Invalid;
    };
    if m.is_empty() {
        return LlcShimStatus::Invalid;
    }
    match s
        .ep
        .set_auth_key(msg_layer::transport::llc::AuthKey::derive(m))
    {
        Ok(()) => LlcShimStatus::Ok,
        Err(e) => {
            tracing::error!(%e, "keying the endpoint");
            status_of(&e)
        }
    }
}

/// The public fingerprint of the endpoint's key (8 hex digits; never the
/// key), like `llc_shim_addr`; writes nothing and returns 0 when frames are
/// not authenticated (or the key is still to come).
///
/// # Safety
/// As `llc_shim_addr`.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_auth_fingerprint(
    s: *const LlcShim,
    buf: *mut c_char,
    len: usize,
) -> usize {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return 0;
    };
    match s.ep.auth_fingerprint() {
        Some(f) => write_text(buf, len, &f),
        None => 0,
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
    write_text(buf, len, &s.ep.local_addr().to_string())
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
    write_text(buf, len, &s.ep.transport_name())
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
    s.set_recv_handler(tag, cb.map(|f| (f, CPtr(ctx))));
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
    s.set_fail_handler(cb.map(|f| (f, CPtr(ctx))));
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

/// Messages of at most this many bytes (`head ++ body`) sent with
/// `llc_shim_send` are copied straight into the transport's packet, with no
/// allocation: btl/llc's inline send (`btl_sendi`) packs such messages on
/// its stack and sends them this way.
pub const LLC_SHIM_SEND_INLINE: usize = 64;

const _: () = assert!(LLC_SHIM_SEND_INLINE == msg_layer::AM_COPY_INLINE);

/// Send `head ++ body` to `peer` with `tag`. The bytes are copied: both
/// buffers may be reused when this returns, and the send counts as
/// complete (delivery is the transport's job; a failure is reported
/// through the failure callback). Up to `LLC_SHIM_SEND_INLINE` bytes this
/// allocates nothing.
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
    let n = head.len() + body.len();
    posted(s, n, s.ep.am_post_copy(peer, tag.into(), head, body))
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
    match s.send_lent(peer, tag, prefix, (body, body_len), (done, CPtr(ctx))) {
        Ok(()) => LlcShimStatus::Ok,
        Err(e) => status_of(&e),
    }
}

fn send_owned(s: &LlcShim, peer: u32, tag: u8, v: Vec<u8>) -> LlcShimStatus {
    let n = v.len();
    posted(s, n, s.ep.am_post(peer, tag.into(), Bytes::from(v)))
}

/// What a post of `n` bytes returned, as the C caller sees it: a message
/// taken is counted, and messages it left held are noted for the
/// background thread.
fn posted(s: &LlcShim, n: usize, r: Result<(), Error>) -> LlcShimStatus {
    match r {
        Ok(()) => {
            s.counters.count_sent(n);
            s.note_held();
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
    let region = Arc::new(unsafe { PtrRegion::new(base.cast(), len) });
    let k = s.ep.register(region.clone());
    s.regions.lock().expect("regions").push((k, region));
    // SAFETY: checked non-null.
    unsafe { *key = k.0 };
    LlcShimStatus::Ok
}

/// Withdraw a registration; later accesses by peers are refused. Returns
/// once the transport holds nothing of the region any more (a peer's get
/// is answered from the region itself): normally at once, as the reader's
/// completion notice acknowledges the data; at most a bounded wait, making
/// progress, for a peer that has yet to acknowledge.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_deregister(s: *const LlcShim, key: u64) -> LlcShimStatus {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { shim(s) }) else {
        return LlcShimStatus::Invalid;
    };
    let region = {
        let mut regions = s.regions.lock().expect("regions");
        let at = regions.iter().position(|(k, _)| k.0 == key);
        at.map(|i| regions.swap_remove(i).1)
    };
    if !s.ep.deregister(RegionKey(key)) {
        return LlcShimStatus::Invalid;
    }
    if let Some(region) = region {
        s.wait_unlent(&region);
    }
    LlcShimStatus::Ok
}

/// Write `len` bytes from `local` into `peer`'s region `key` at `offset`.
/// The data is sent from `local` itself, not copied (as a BTL's put is):
/// `cb(ctx, status)` runs from `llc_shim_progress` once the target has
/// written it and the transport no longer needs `local`.
///
/// # Safety
/// `s` is a live handle; `local` valid for `len` bytes and unchanged until
/// `cb` runs.
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
    if local.is_null() && len > 0 {
        return LlcShimStatus::Invalid;
    }
    s.counters.puts.fetch_add(1, Ordering::Relaxed);
    s.put_lent(
        peer,
        (local.cast::<u8>(), len),
        RegionKey(key),
        offset,
        cb,
        CPtr(ctx),
    );
    LlcShimStatus::Ok
}

/// Read `len` bytes of `peer`'s region `key` at `offset` into `local`:
/// the transport writes the reply's frames there (no copy in between);
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
    s.counters.gets.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller keeps `local` writable for `len` bytes until `cb`
    // runs, which is after the get completed or failed; the engine forgets
    // the destination then, and only the reply's frames write there.
    let dst = Arc::new(unsafe { PtrRegion::new(local.cast(), len) });
    let req = s.ep.get_into(peer, RegionKey(key), offset, dst);
    s.add_rma(
        req,
        RmaOp {
            cb,
            ctx: CPtr(ctx),
            lent: false,
            done: None,
        },
    );
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
        if s.idle() {
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
    let mut st = s.counters.snapshot();
    let es = s.ep.stats();
    st.bundles = es.bundles_sent;
    st.bundled = es.bundled;
    if let Some(t) = s.ep.with_transport(|t| t.as_llc().map(|l| l.totals())) {
        st.frames_dropped = t.frames_dropped;
        st.device_drops = t.device_drops;
        st.retransmits = t.retransmits;
        st.timeouts = t.timeouts;
        st.spurious_timeouts = t.spurious_timeouts;
        st.tail_probes = t.tail_probes;
        st.loss_episodes = t.loss_episodes;
        st.auth_dropped = t.auth_dropped;
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
    let s = unsafe { Box::from_raw(s) };
    s.close(Duration::from_millis(timeout_ms.into()));
}
