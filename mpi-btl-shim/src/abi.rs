//! The C ABI's types: status codes, the configuration and statistics
//! structs, the callbacks' signatures and the constants of
//! `include/llc_shim.h`, and the helpers that read C arguments. The
//! functions are in `ffi`; the shim's state (`state`) uses these types
//! without depending on the functions.

use std::ffi::{c_char, c_void, CStr};

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
