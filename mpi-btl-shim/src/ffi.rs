//! The C ABI: the types and functions of `include/llc_shim.h` (generated
//! by cbindgen; `tests/header.rs` fails when it is out of date). Each
//! function checks its arguments, borrows the shim behind the handle and
//! calls into [`crate::state`]; nothing here keeps state of its own.

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::rma::RegionKey;
use msg_layer::{Addr, Error};

use crate::abi::*;
use crate::state::{CPtr, LlcShim, RmaOp};
use app_runtime::PtrRegion;

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

fn status_of(e: &Error) -> LlcShimStatus {
    match e {
        Error::PeerFailed { .. } => LlcShimStatus::PeerFailed,
        Error::UnknownPeer(_) => LlcShimStatus::Invalid,
        _ => LlcShimStatus::Error,
    }
}

/// Run the body of the C entry point `name`: a panic (a bug in the shim
/// or below it) is reported on stderr and becomes `on_panic`, an error the
/// caller handles, instead of unwinding into C (`app_runtime::cabi`).
fn guard<T>(name: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    app_runtime::cabi::guard(name, on_panic, f)
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
    guard("llc_shim_open", LlcShimStatus::Error, || {
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
    })
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
    guard("llc_shim_new_auth_key", LlcShimStatus::Error, || {
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
        if let Err(e) = s.ep().set_auth_key(key) {
            tracing::error!(%e, "keying the endpoint");
            return LlcShimStatus::Error;
        }
        write_err(out, out_len, &material);
        LlcShimStatus::Ok
    })
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
    guard("llc_shim_set_auth_key", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let (Some(s), Some(m)) = (unsafe { shim(s) }, unsafe { c_bytes(material, len) }) else {
            return LlcShimStatus::Invalid;
        };
        if m.is_empty() {
            return LlcShimStatus::Invalid;
        }
        match s
            .ep()
            .set_auth_key(msg_layer::transport::llc::AuthKey::derive(m))
        {
            Ok(()) => LlcShimStatus::Ok,
            Err(e) => {
                tracing::error!(%e, "keying the endpoint");
                status_of(&e)
            }
        }
    })
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
    guard("llc_shim_auth_fingerprint", 0, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return 0;
        };
        match s.ep().auth_fingerprint() {
            Some(f) => write_text(buf, len, &f),
            None => 0,
        }
    })
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
    guard("llc_shim_select_interface", LlcShimStatus::Error, || {
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
    })
}

/// The endpoint's address (`[MAC]:PORT`, or `[MAC%0xSAP]:PORT` at another SAP), NUL-terminated,
/// into `buf`; returns the length it needs including the NUL (call again
/// with a larger buffer when that exceeds `len`).
///
/// # Safety
/// `s` is a live handle; `buf` is null or has `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_addr(s: *const LlcShim, buf: *mut c_char, len: usize) -> usize {
    guard("llc_shim_addr", 0, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return 0;
        };
        write_text(buf, len, &s.ep().local_addr().to_string())
    })
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
    guard("llc_shim_transport_name", 0, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return 0;
        };
        write_text(buf, len, &s.ep().transport_name())
    })
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
    guard("llc_shim_reachable", LlcShimStatus::Error, || {
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
        let answers = s
            .ep()
            .reachable(&valid, Duration::from_millis(timeout_ms.into()));
        let mut answers = answers.into_iter();
        for (i, p) in parsed.iter().enumerate() {
            let ok = p.is_some() && answers.next().unwrap_or(false);
            // SAFETY: `out` has `n` writable entries.
            unsafe { *out.add(i) = ok };
        }
        LlcShimStatus::Ok
    })
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
    guard("llc_shim_add_peer", LlcShimStatus::Error, || {
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
        match s.ep().add_peer(&a) {
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
    })
}

/// Forget a peer (Open MPI's del_procs). The message layer keeps its
/// connection until the endpoint closes; this only validates the number.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_remove_peer(s: *const LlcShim, peer: u32) -> LlcShimStatus {
    guard("llc_shim_remove_peer", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return LlcShimStatus::Invalid;
        };
        if (peer as usize) < s.ep().peer_count() {
            LlcShimStatus::Ok
        } else {
            LlcShimStatus::Invalid
        }
    })
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
    guard("llc_shim_set_recv_handler", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return LlcShimStatus::Invalid;
        };
        s.set_recv_handler(tag, cb.map(|f| (f, CPtr(ctx))));
        LlcShimStatus::Ok
    })
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
    guard("llc_shim_set_failure_handler", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return LlcShimStatus::Invalid;
        };
        s.set_fail_handler(cb.map(|f| (f, CPtr(ctx))));
        LlcShimStatus::Ok
    })
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
    guard("llc_shim_can_send", false, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return false;
        };
        s.ep().can_post(peer)
    })
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
    guard("llc_shim_send", LlcShimStatus::Error, || {
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
        posted(s, n, s.ep().am_post_copy(peer, tag.into(), head, body))
    })
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
    guard("llc_shim_send_lent", LlcShimStatus::Error, || {
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
    })
}

fn send_owned(s: &LlcShim, peer: u32, tag: u8, v: Vec<u8>) -> LlcShimStatus {
    let n = v.len();
    posted(s, n, s.ep().am_post(peer, tag.into(), Bytes::from(v)))
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
    guard("llc_shim_buf_alloc", std::ptr::null_mut(), || {
        let mut v = std::mem::ManuallyDrop::new(Vec::<u8>::with_capacity(capacity));
        let b = LlcShimBuf {
            data: v.as_mut_ptr(),
            capacity: v.capacity(),
        };
        Box::into_raw(Box::new(b))
    })
}

/// Take back a buffer from `llc_shim_buf_alloc` that will not be sent.
///
/// # Safety
/// `b` is null or from `llc_shim_buf_alloc`, neither freed nor sent.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_buf_free(b: *mut LlcShimBuf) {
    guard("llc_shim_buf_free", (), || {
        if b.is_null() {
            return;
        }
        // SAFETY: `b` came from Box::into_raw in llc_shim_buf_alloc.
        let b = unsafe { Box::from_raw(b) };
        // SAFETY: data/capacity describe the Vec leaked in llc_shim_buf_alloc.
        drop(unsafe { Vec::from_raw_parts(b.data, 0, b.capacity) });
    })
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
    guard("llc_shim_send_buf", LlcShimStatus::Error, || {
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
    })
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
    guard("llc_shim_register", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return LlcShimStatus::Invalid;
        };
        if key.is_null() || (base.is_null() && len > 0) {
            return LlcShimStatus::Invalid;
        }
        // SAFETY: the caller keeps the memory valid until deregistration.
        let region = Arc::new(unsafe { PtrRegion::new(base.cast(), len) });
        let k = s.ep().register(region.clone());
        s.regions.lock().expect("regions").push((k, region));
        // SAFETY: checked non-null.
        unsafe { *key = k.0 };
        LlcShimStatus::Ok
    })
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
    guard("llc_shim_deregister", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return LlcShimStatus::Invalid;
        };
        let region = {
            let mut regions = s.regions.lock().expect("regions");
            let at = regions.iter().position(|(k, _)| k.0 == key);
            at.map(|i| regions.swap_remove(i).1)
        };
        if !s.ep().deregister(RegionKey(key)) {
            return LlcShimStatus::Invalid;
        }
        if let Some(region) = region {
            s.wait_unlent(&region);
        }
        LlcShimStatus::Ok
    })
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
    guard("llc_shim_put", LlcShimStatus::Error, || {
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
    })
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
    guard("llc_shim_get", LlcShimStatus::Error, || {
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
        let req = s.ep().get_into(peer, RegionKey(key), offset, dst);
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
    })
}

/// Make progress and run the callbacks that are due (receives, RMA
/// completions, peer failures), on this thread. Returns how many events
/// there were (0: nothing happened), or a negative `LlcShimStatus`.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_progress(s: *const LlcShim) -> i32 {
    guard("llc_shim_progress", -1, || {
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
    })
}

/// Make progress until everything sent has reached its peers, at most
/// `timeout_ms`. Runs due callbacks like `llc_shim_progress`.
///
/// # Safety
/// `s` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_flush(s: *const LlcShim, timeout_ms: u32) -> LlcShimStatus {
    guard("llc_shim_flush", LlcShimStatus::Error, || {
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
    })
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
    guard("llc_shim_stats", LlcShimStatus::Error, || {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { shim(s) }) else {
            return LlcShimStatus::Invalid;
        };
        if out.is_null() {
            return LlcShimStatus::Invalid;
        }
        let mut st = s.counters.snapshot();
        st.background_rounds = s.background_rounds();
        let es = s.ep().stats();
        st.bundles = es.bundles_sent;
        st.bundled = es.bundled;
        if let Some(t) = s.ep().with_transport(|t| t.as_llc().map(|l| l.totals())) {
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
    })
}

/// Deliver what is queued (at most `timeout_ms`), close every connection,
/// stop the background thread and free the endpoint. No callback runs
/// after this returns.
///
/// # Safety
/// `s` is null or a live handle, not used again afterwards.
#[no_mangle]
pub unsafe extern "C" fn llc_shim_close(s: *mut LlcShim, timeout_ms: u32) {
    guard("llc_shim_close", (), || {
        if s.is_null() {
            return;
        }
        // SAFETY: from Box::into_raw in llc_shim_open, closed once (contract).
        let s = unsafe { Box::from_raw(s) };
        s.close(Duration::from_millis(timeout_ms.into()));
    })
}

#[cfg(test)]
mod guard_tests {
    use super::*;

    #[test]
    fn a_panic_in_an_entry_point_becomes_its_error_value() {
        assert_eq!(
            guard("test", LlcShimStatus::Error, || -> LlcShimStatus {
                panic!("a bug below the boundary")
            }),
            LlcShimStatus::Error
        );
        assert_eq!(guard("test", 0usize, || 5usize), 5);
    }
}
