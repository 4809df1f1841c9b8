//! BMI, the network interface of the PVFS2 parallel file system (seed 004),
//! over this project's message layer: the method `bmi_llc` runs on the LLC
//! stack (raw Ethernet, AF_XDP or AF_PACKET), `bmi_tcp` on kernel TCP.
//!
//! - [`Bmi`]: the Rust API. Non-blocking posts of sends, unexpected sends
//!   and receives that may complete at once, tests per operation, per set
//!   and per context, unexpected messages for requests nobody posted a
//!   receive for, address lookups resolved lazily and cached.
//! - `ffi`: the C API of `include/bmi.h` (`libbmi.so`), PVFS2's calls and
//!   types with contexts.
//!
//! docs/BMI.md says what is guaranteed (atomic messages, per-peer order,
//! errors) and how it maps onto the message layer.
#![warn(missing_docs)]

pub mod addr;
pub mod error;
pub mod ffi;
mod job;
mod runtime;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;

pub use crate::addr::MethodKind;
pub use crate::error::BmiError;
pub use crate::job::JobPeers;
pub use crate::runtime::{
    BmiAddr, BmiStats, ContextId, Done, InitFlags, OpId, OpKind, Posted, Unexpected,
    UnexpectedData, AM_UNEXPECTED, DEFAULT_UNEXPECTED_LIMIT, EXPECTED_CONTEXT, MAX_MESSAGE,
    MAX_UNEXPECTED_LIMIT,
};
use crate::runtime::{Inner, RawSeg, SendBody};
/// The key that authenticates `bmi_llc`'s frames ([`InitFlags::auth_key`]):
/// `AuthKey::derive(material)` from any key material the job shares.
pub use msg_layer::transport::llc::AuthKey;

/// A BMI instance: its methods, addresses, contexts and operations.
/// Thread-safe; dropping it finalizes (delivers what is queued, bounded,
/// and closes every connection).
pub struct Bmi {
    inner: Arc<Inner>,
    background: Option<JoinHandle<()>>,
    /// The connection to the job's PMIx server ([`Bmi::initialize_in_job`]), open for as
    /// long as this instance.
    job: Option<pmix_boot::Pmix>,
}

/// The limits of one method (`BMI_get_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MethodLimits {
    /// The method.
    pub method: MethodKind,
    /// Messages up to this size go eagerly (with their envelope); longer
    /// ones by rendezvous into the posted receive.
    pub eager_limit: u64,
    /// The largest message the method carries (by rendezvous).
    pub rendezvous_limit: u64,
    /// The largest unexpected message.
    pub unexpected_limit: u64,
    /// Where the method's endpoint listens, once open.
    pub local_addr: Option<String>,
}

impl Bmi {
    /// Start the methods of `method_list` (`"bmi_llc"`, `"bmi_tcp"` or
    /// both, comma-separated), listening at `listen` (one address per
    /// method, comma-separated: a transport spec, `llc://IFACE?port=PORT`
    /// or `tcp://HOST:PORT`).
    /// A client may give none: its endpoints open at the first lookup's use
    /// (`BMI_LLC_IFACE` names the LLC interface when the host has several).
    pub fn initialize(
        method_list: &str,
        listen: Option<&str>,
        flags: InitFlags,
    ) -> Result<Bmi, BmiError> {
        let inner = Arc::new(Inner::new(method_list, listen, flags)?);
        let background = inner.start_background();
        Ok(Bmi {
            inner,
            background,
            job: None,
        })
    }

    /// Open a context: a set of operations tested together.
    pub fn open_context(&self) -> ContextId {
        self.inner.open_context()
    }

    /// Close a context; its pending operations are cancelled and forgotten.
    pub fn close_context(&self, ctx: ContextId) -> Result<(), BmiError> {
        self.inner.close_context(ctx)
    }

    /// The handle of a peer address (form checked now; connected, and a
    /// host name resolved, at first use; the same string gives the same
    /// handle).
    pub fn addr_lookup(&self, addr: &str) -> Result<BmiAddr, BmiError> {
        self.inner.lookup(addr)
    }

    /// The string of an address: as looked up, or as the peer's endpoint
    /// names itself for one that arrived with an unexpected message.
    pub fn addr_rev_lookup(&self, addr: BmiAddr) -> Option<String> {
        self.inner
            .rev_lookup(addr)
            .map(|c| c.to_string_lossy().into_owned())
    }

    /// Forget an address (`BMI_DROP_ADDR`): its pending receives complete
    /// with [`BmiError::Cancelled`]; the handle is no longer valid.
    pub fn drop_addr(&self, addr: BmiAddr) -> Result<(), BmiError> {
        self.inner.drop_addr(addr)
    }

    /// Send `data` to `addr` with `tag`, to be received by a matching
    /// [`Bmi::post_recv`].
    pub fn post_send(
        &self,
        addr: BmiAddr,
        data: impl Into<Bytes>,
        tag: i32,
        user: usize,
        ctx: ContextId,
    ) -> Result<Posted, BmiError> {
        self.inner
            .post_send(addr, SendBody::Owned(data.into()), tag, user, ctx, false)
    }

    /// Send an unexpected message (at most the unexpected limit), for the
    /// peer's [`Bmi::testunexpected`].
    pub fn post_sendunexpected(
        &self,
        addr: BmiAddr,
        data: impl Into<Bytes>,
        tag: i32,
        user: usize,
        ctx: ContextId,
    ) -> Result<Posted, BmiError> {
        self.inner
            .post_send(addr, SendBody::Owned(data.into()), tag, user, ctx, true)
    }

    /// Receive a message of at most `expected` bytes from `addr` with `tag`;
    /// the completion carries the data.
    pub fn post_recv(
        &self,
        addr: BmiAddr,
        expected: u64,
        tag: i32,
        user: usize,
        ctx: ContextId,
    ) -> Result<Posted, BmiError> {
        self.inner.post_recv(addr, expected, None, tag, user, ctx)
    }

    /// Cancel an operation: a receive not matched yet completes with
    /// [`BmiError::Cancelled`]; one already moving completes as it would.
    pub fn cancel(&self, op: OpId, ctx: ContextId) -> Result<(), BmiError> {
        self.inner.cancel(op, ctx)
    }

    /// The operation's completion, if it comes within `idle`.
    pub fn test(&self, op: OpId, ctx: ContextId, idle: Duration) -> Result<Option<Done>, BmiError> {
        self.inner.test(op, ctx, idle)
    }

    /// The completions among `ops` with their index, once there is one or
    /// `idle` passed.
    pub fn testsome(
        &self,
        ops: &[OpId],
        ctx: ContextId,
        idle: Duration,
    ) -> Result<Vec<(usize, Done)>, BmiError> {
        self.inner.testsome(ops, ctx, idle)
    }

    /// Up to `max` completions of `ctx`, once there is one or `idle` passed.
    pub fn testcontext(
        &self,
        max: usize,
        ctx: ContextId,
        idle: Duration,
    ) -> Result<Vec<Done>, BmiError> {
        self.inner.testcontext(max, ctx, idle)
    }

    /// Up to `max` unexpected messages, once there is one or `idle` passed.
    pub fn testunexpected(&self, max: usize, idle: Duration) -> Result<Vec<Unexpected>, BmiError> {
        self.inner.testunexpected(max, idle)
    }

    /// Give an unexpected message's buffer back (optional: dropping it is
    /// fine; giving it back saves the next large message a fresh buffer).
    pub fn unexpected_free(&self, u: Unexpected) {
        if let Ok(d) = u.result {
            self.inner.recycle(d, u.addr);
        }
    }

    /// The limits of the method `addr` belongs to.
    pub fn limits_of(&self, addr: BmiAddr) -> Result<MethodLimits, BmiError> {
        let m = self.inner.method_of(addr)?;
        Ok(self.limits(m))
    }

    /// The limits of `method`, if initialized.
    pub fn method_limits(&self, method: MethodKind) -> Result<MethodLimits, BmiError> {
        let m = self
            .inner
            .methods
            .iter()
            .position(|x| x.kind == method)
            .ok_or_else(|| BmiError::UnknownMethod(method.name().into()))?;
        Ok(self.limits(m))
    }

    pub(crate) fn limits(&self, m: usize) -> MethodLimits {
        use std::sync::atomic::Ordering::Relaxed;
        let method = &self.inner.methods[m];
        MethodLimits {
            method: method.kind,
            eager_limit: method.eager_limit.load(Relaxed) as u64,
            rendezvous_limit: MAX_MESSAGE,
            unexpected_limit: method.unexpected_limit.load(Relaxed) as u64,
            local_addr: self.inner.local_addr(m),
        }
    }

    /// Set the eager limit of `method` (sends above it go by rendezvous):
    /// at most the message layer's eager limit.
    pub fn set_eager_limit(&self, method: MethodKind, limit: u64) -> Result<(), BmiError> {
        let max = msg_layer::Config::default().eager_limit as u64;
        if limit > max {
            return Err(BmiError::Invalid(format!(
                "eager limit {limit} above the message layer's {max}"
            )));
        }
        self.method(method)?
            .eager_limit
            .store(limit as usize, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Set the unexpected-message limit of `method` (both what this process
    /// sends and what it accepts), at most [`MAX_UNEXPECTED_LIMIT`].
    pub fn set_unexpected_limit(&self, method: MethodKind, limit: u64) -> Result<(), BmiError> {
        if limit > MAX_UNEXPECTED_LIMIT as u64 {
            return Err(BmiError::Invalid(format!(
                "unexpected limit {limit} above {MAX_UNEXPECTED_LIMIT}"
            )));
        }
        self.method(method)?
            .unexpected_limit
            .store(limit as usize, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn method(&self, kind: MethodKind) -> Result<&runtime::Method, BmiError> {
        self.inner
            .methods
            .iter()
            .find(|m| m.kind == kind)
            .ok_or_else(|| BmiError::UnknownMethod(kind.name().into()))
    }

    /// The transport under each open method, as it names itself (e.g.
    /// whether `bmi_llc` runs on AF_XDP or fell back to AF_PACKET).
    pub fn transports(&self) -> Vec<(MethodKind, String)> {
        (0..self.inner.methods.len())
            .filter_map(|m| {
                let name = self.inner.transport_name(m)?;
                Some((self.inner.methods[m].kind, name))
            })
            .collect()
    }

    /// The methods, in the order of the method list.
    pub fn methods(&self) -> Vec<MethodKind> {
        self.inner.methods.iter().map(|m| m.kind).collect()
    }

    /// Whether this instance was started with `BMI_INIT_SERVER`.
    pub fn is_server(&self) -> bool {
        self.inner.flags.server
    }

    /// BMI's own counters.
    pub fn stats(&self) -> BmiStats {
        self.inner.stats()
    }

    /// The message layer's and the transports' counters, per method.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.inner.counters()
    }

    // ----- for the C API: the caller's own buffers -----

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post_send_raw(
        &self,
        addr: BmiAddr,
        ptr: *const u8,
        len: usize,
        tag: i32,
        user: usize,
        ctx: ContextId,
        unexpected: bool,
    ) -> Result<Posted, BmiError> {
        self.inner
            .post_send(addr, SendBody::Raw(ptr, len), tag, user, ctx, unexpected)
    }

    pub(crate) fn post_recv_raw(
        &self,
        addr: BmiAddr,
        segs: Vec<(*mut u8, usize)>,
        tag: i32,
        user: usize,
        ctx: ContextId,
    ) -> Result<Posted, BmiError> {
        let expected = segs.iter().map(|s| s.1 as u64).sum();
        let segs = segs
            .into_iter()
            .map(|(ptr, len)| RawSeg { ptr, len })
            .collect();
        self.inner
            .post_recv(addr, expected, Some(segs), tag, user, ctx)
    }
}

impl Drop for Bmi {
    fn drop(&mut self) {
        self.inner.finalize();
        if let Some(h) = self.background.take() {
            let _ = h.join();
        }
    }
}
