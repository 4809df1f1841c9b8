//! The libfabric provider `llc`: libfabric's RDM endpoints over the
//! stack's message layer, so that every libfabric application (Open MPI's
//! mtl/ofi and btl/ofi, MPICH's ch4:ofi, libfabric's own fi_pingpong) runs
//! over raw Ethernet with LLC without being rebuilt.
//!
//! Built as `libllc_fi.so` and installed as `libllc-fi.so` in libfabric's
//! provider directory (`scripts/install.sh`); the core loads it and calls
//! [`fi_prov_ini`], the one symbol it exports. docs/ARCHITECTURE.md ("The
//! libfabric provider") says what it offers and why it is one Rust object
//! for libfabric 1.17 and 2.x.
//!
//! # Files
//! - `abi/`: the C structs and constants, mirrored by hand;
//! - `core.rs`: the loaded core's functions (fi_dupinfo, parameters, log);
//! - `info.rs`: `fi_getinfo`'s hint matching;
//! - `addr.rs`: endpoint names;
//! - `fid.rs`: the objects' common head, the registry, error codes;
//! - `objects.rs`: the fabric and domain as their children see them, and
//!   the endpoints a queue or counter drives;
//! - `fabric.rs`, `domain.rs`, `eq.rs`, `av.rs`, `cq.rs`, `cntr.rs`,
//!   `ep/`: one file per libfabric object.

use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

pub mod abi;
pub mod addr;
mod av;
mod cntr;
pub mod core;
mod cq;
mod domain;
mod ep;
mod eq;
mod fabric;
mod fid;
pub mod info;
mod objects;
mod params;

use abi::*;

/// The provider's own version (`fabric_attr->prov_version`).
pub const PROVIDER_VERSION: u32 = fi_version(1, 0);
/// The libfabric API version the provider implements: 2.5, the newest the
/// MPIs this project serves ask for (the core skips a provider whose
/// version is below the application's request). What changed since 1.17
/// is only appended fields, handled by the core's version at run time.
pub const PROVIDER_FI_VERSION: u32 = fi_version(2, 5);

static PROVIDER: AtomicPtr<FiProvider> = AtomicPtr::new(std::ptr::null_mut());

/// The provider struct the core registered (NULL before `fi_prov_ini`).
pub(crate) fn provider() -> *const FiProvider {
    PROVIDER.load(Ordering::Acquire)
}

/// Log a warning through libfabric's logger (`FI_LOG_LEVEL=warn`).
pub(crate) fn warn(subsys: c_int, msg: &str) {
    core::log(FI_LOG_WARN, subsys, c"llc", msg);
}

/// Log at info level (`FI_LOG_LEVEL=info`).
pub(crate) fn info_log(subsys: c_int, msg: &str) {
    core::log(FI_LOG_INFO, subsys, c"llc", msg);
}

/// The provider's entry point, called by the libfabric core when it loads
/// `libllc-fi.so`.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut FiProvider {
    let existing = PROVIDER.load(Ordering::Acquire);
    if !existing.is_null() {
        return existing;
    }
    // The core writes into `context`, so the struct lives in writable
    // memory for the life of the process (the core may dlclose the object
    // only after `cleanup`).
    let p = Box::into_raw(Box::new(FiProvider {
        version: PROVIDER_VERSION,
        fi_version: PROVIDER_FI_VERSION,
        context: FiContext {
            internal: [std::ptr::null_mut(); 4],
        },
        name: c"llc".as_ptr(),
        getinfo,
        fabric: fabric::open,
        cleanup,
    }));
    match PROVIDER.compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {
            params::define();
            p
        }
        Err(other) => {
            // SAFETY: `p` was just leaked from a Box and never shared.
            drop(unsafe { Box::from_raw(p) });
            other
        }
    }
}

unsafe extern "C" fn cleanup() {
    fid::guard("cleanup", (), ep::stop_all);
}

unsafe extern "C" fn getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int {
    fid::guard("getinfo", -errno::FI_ENODATA, || {
        if info.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: the core passes valid (or NULL) strings and hints, and a
        // writable result pointer.
        unsafe {
            *info = std::ptr::null_mut();
            let s = |p: *const c_char| {
                (!p.is_null()).then(|| CStr::from_ptr(p).to_string_lossy().into_owned())
            };
            let hints = hints.as_ref().map(|h| info::read_hints(h));
            match getinfo_list(
                version,
                s(node).as_deref(),
                s(service).as_deref(),
                flags,
                hints.as_ref(),
            ) {
                Ok(list) => {
                    *info = list;
                    0
                }
                Err(code) => code,
            }
        }
    })
}

fn getinfo_list(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&info::Hints>,
) -> Result<*mut FiInfo, c_int> {
    let core = core::core().ok_or(-errno::FI_ENODATA)?;
    let ifaces = match params::interfaces() {
        Ok(i) => i,
        Err(why) => {
            warn(FI_LOG_CORE, &why);
            return Err(-errno::FI_ENODATA);
        }
    };
    let offers = info::answer(
        version,
        node,
        service,
        flags,
        hints,
        &info::Host {
            ifaces: &ifaces,
            known_fabric: &objects::known_fabric,
            known_domain: &objects::known_domain,
            this_host: &params::this_host,
        },
    )
    .map_err(|info::NoMatch(why)| {
        info_log(FI_LOG_CORE, &format!("no match for the hints: {why}"));
        -errno::FI_ENODATA
    })?;
    let mut head: *mut FiInfo = std::ptr::null_mut();
    for o in offers.iter().rev() {
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with every
        // attr, in the core's layout; write_info fills it.
        unsafe {
            let fi = (core.dupinfo)(std::ptr::null());
            if fi.is_null() {
                if !head.is_null() {
                    (core.freeinfo)(head);
                }
                return Err(-errno::FI_ENOMEM);
            }
            info::write_info(&mut *fi, o, core.version);
            (*fi).next = head;
            head = fi;
        }
    }
    Ok(head)
}
