//! The objects other objects hold: the fabric and the domain (whose
//! children count them and read their state), and what completion queues
//! and counters know of the endpoints bound to them (a [`Driver`] to make
//! progress with). Below every object's file, so that none imports another's.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use msg_layer::transport::spec::LlcSpec;
use parking_lot::Mutex;

use crate::abi::*;
use crate::fid::{self, Children};

#[repr(C)]
pub struct FabricObj {
    pub fid: FidFabric,
    pub children: Children,
}

/// What a domain's children read.
pub struct DomainState {
    pub ifname: String,
    pub spec: LlcSpec,
    pub mr_mode: i32,
    /// The fabric's API version (which layout the application's structs
    /// have, e.g. `fi_cq_err_entry`).
    pub api_version: u32,
    /// Registered memory by key.
    pub mrs: Mutex<HashMap<u64, (usize, usize)>>,
    pub next_key: AtomicU64,
}

#[repr(C)]
pub struct DomainObj {
    pub fid: FidDomain,
    pub state: DomainState,
    pub children: Children,
    pub fabric: *const FabricObj,
}

/// The fabric behind a fid the application passed.
///
/// # Safety
/// `f` is NULL or a `struct fid_fabric *`.
pub unsafe fn fabric_of<'a>(f: *mut FidFabric) -> Option<&'a FabricObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast::<FabricObj>(f.cast(), FI_CLASS_FABRIC) }
}

/// The domain an object is opened on.
///
/// # Safety
/// `d` is NULL or a `struct fid_domain *`.
pub unsafe fn domain_of<'a>(d: *mut FidDomain) -> Option<&'a DomainObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast::<DomainObj>(d.cast(), FI_CLASS_DOMAIN) }
}

/// `domain_attr->domain` in hints: one of ours (on the interface named,
/// if one is)?
pub fn known_domain(p: usize, name: &str) -> bool {
    // SAFETY: checked against the registry of open objects first.
    match unsafe { domain_of(p as *mut FidDomain) } {
        Some(d) => name.is_empty() || d.state.ifname == name,
        None => false,
    }
}

/// `fabric_attr->fabric` in hints: one of ours?
pub fn known_fabric(p: usize) -> bool {
    fid::is_ours(FI_CLASS_FABRIC, p as *const c_void)
}

/// What a queue or counter drives to get its completions: an endpoint.
pub trait Driver: Send + Sync {
    /// One round of progress.
    fn progress(&self);
    /// Progress until `cond` holds or `timeout` passes.
    fn wait_until(&self, timeout: Option<Duration>, cond: &dyn Fn() -> bool);
}

/// The endpoints bound to a queue or counter.
#[derive(Default)]
pub struct Bound(Mutex<Vec<Weak<dyn Driver>>>);

impl Bound {
    /// Note `ep` (once).
    pub fn bind(&self, ep: &Arc<dyn Driver>) {
        let mut eps = self.0.lock();
        eps.retain(|w| w.strong_count() > 0);
        if !eps
            .iter()
            .any(|w| std::ptr::addr_eq(w.as_ptr(), Arc::as_ptr(ep)))
        {
            eps.push(Arc::downgrade(ep));
        }
    }

    /// True while an endpoint bound to it is open.
    pub fn any(&self) -> bool {
        self.0.lock().iter().any(|w| w.strong_count() > 0)
    }

    /// One round of progress on each.
    pub fn progress(&self) {
        for w in self.0.lock().iter() {
            if let Some(ep) = w.upgrade() {
                ep.progress();
            }
        }
    }

    /// Wait on the first (its pacing; the others progress in between
    /// through the rounds `cond`'s reads make), or sleep a moment when
    /// none is bound.
    pub fn wait_until(&self, timeout: Option<Duration>, cond: &dyn Fn() -> bool) {
        let first = self.0.lock().iter().find_map(Weak::upgrade);
        match first {
            Some(ep) => ep.wait_until(timeout, cond),
            None => std::thread::sleep(
                timeout
                    .unwrap_or(Duration::from_millis(1))
                    .min(Duration::from_millis(1)),
            ),
        }
    }
}
