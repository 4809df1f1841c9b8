//! The domain: one interface, the spec its endpoints open, the models the
//! application chose (threading, progress, address vector), and its
//! memory registrations.

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use app_runtime::PtrRegion;
use msg_layer::rma::RegionKey;
use parking_lot::Mutex;

use crate::abi::*;
use crate::fi_ops;
use crate::fid::{self, Children};
use crate::objects::{DomainObj, DomainState, Driver};

static OPS: FiOps = fi_ops!(close, fid::no_bind, fid::no_control);

static DOMAIN_OPS: FiOpsDomain = FiOpsDomain {
    size: std::mem::size_of::<FiOpsDomain>(),
    av_open: crate::av::open,
    cq_open: crate::cq::open,
    endpoint: crate::ep::open,
    scalable_ep: no_scalable_ep,
    cntr_open: crate::cntr::open,
    poll_open: no_poll_open,
    stx_ctx: no_stx_ctx,
    srx_ctx: no_srx_ctx,
    query_atomic: no_query_atomic,
    query_collective: no_query_collective,
    endpoint2,
};

static MR_OPS: FiOpsMr = FiOpsMr {
    size: std::mem::size_of::<FiOpsMr>(),
    reg: mr_reg,
    regv: mr_regv,
    regattr: mr_regattr,
};

pub unsafe extern "C" fn open(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    dom: *mut *mut FidDomain,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_domain", -errno::FI_EOTHER, || {
        // SAFETY: the application passes its fabric fid.
        let Some(f) = (unsafe { crate::objects::fabric_of(fabric) }) else {
            return -errno::FI_EINVAL;
        };
        if info.is_null() || dom.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: an fi_info from fi_getinfo (or the application's copy).
        let info = unsafe { &*info };
        // SAFETY: as above; attrs are valid when non-NULL.
        let Some(d) = (unsafe { info.domain_attr.as_ref() }) else {
            return -errno::FI_EINVAL;
        };
        let ifname = if d.name.is_null() {
            match crate::params::interfaces() {
                Ok(i) if !i.is_empty() => i[0].0.clone(),
                _ => return -errno::FI_ENODEV,
            }
        } else {
            // SAFETY: a C string.
            unsafe { CStr::from_ptr(d.name) }
                .to_string_lossy()
                .into_owned()
        };
        let spec = match crate::params::spec(&ifname) {
            Ok(s) => s,
            Err(why) => {
                crate::warn(FI_LOG_DOMAIN, &why);
                return -errno::FI_EINVAL;
            }
        };
        let obj = Box::into_raw(Box::new(DomainObj {
            fid: FidDomain {
                fid: fid::head(FI_CLASS_DOMAIN, context, &OPS),
                ops: &DOMAIN_OPS,
                mr: &MR_OPS,
            },
            state: DomainState {
                ifname,
                spec,
                mr_mode: d.mr_mode,
                api_version: f.fid.api_version,
                mrs: Mutex::new(HashMap::new()),
                next_key: AtomicU64::new(1),
            },
            children: Children::default(),
            fabric: f,
        }));
        f.children.add();
        fid::register(FI_CLASS_DOMAIN, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *dom = obj.cast() };
        0
    })
}

unsafe extern "C" fn close(d: Fid) -> c_int {
    fid::guard("fi_close(domain)", -errno::FI_EOTHER, || {
        // SAFETY: the application passes its domain fid.
        let Some(obj) = (unsafe { fid::cast::<DomainObj>(d, FI_CLASS_DOMAIN) }) else {
            return -errno::FI_EINVAL;
        };
        if obj.children.any() {
            return -errno::FI_EBUSY;
        }
        fid::unregister(FI_CLASS_DOMAIN, d.cast());
        // SAFETY: the fabric outlives its domains (it cannot close while
        // one is open).
        unsafe { (*obj.fabric).children.remove() };
        // SAFETY: allocated by `open`; unregistered.
        drop(unsafe { Box::from_raw(d.cast::<DomainObj>()) });
        0
    })
}

unsafe extern "C" fn endpoint2(
    domain: *mut FidDomain,
    info: *mut FiInfo,
    ep: *mut *mut FidEp,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -errno::FI_EBADFLAGS;
    }
    // SAFETY: forwarded as given.
    unsafe { crate::ep::open(domain, info, ep, context) }
}

unsafe extern "C" fn no_scalable_ep(
    _: *mut FidDomain,
    _: *mut FiInfo,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_poll_open(_: *mut FidDomain, _: *mut c_void, _: *mut *mut c_void) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_stx_ctx(
    _: *mut FidDomain,
    _: *mut FiTxAttr,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_srx_ctx(
    _: *mut FidDomain,
    _: *mut FiRxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_query_atomic(
    _: *mut FidDomain,
    _: c_int,
    _: c_int,
    _: *mut c_void,
    _: u64,
) -> c_int {
    -errno::FI_EOPNOTSUPP
}
unsafe extern "C" fn no_query_collective(
    _: *mut FidDomain,
    _: c_int,
    _: *mut c_void,
    _: u64,
) -> c_int {
    -errno::FI_EOPNOTSUPP
}

// Memory registration. Nothing is required for sends and receives (no
// FI_MR_LOCAL); a registration records the range and hands out its key
// (the requested one, or a fresh one under FI_MR_PROV_KEY). For RMA
// (FI_MR_ENDPOINT) the application binds it to an endpoint and enables it:
// the endpoint's message layer registers the range, and its key is the
// registration's.

#[repr(C)]
struct MrObj {
    fid: FidMr,
    domain: *const DomainObj,
    buf: usize,
    len: usize,
    /// The endpoint it is bound to, and, once enabled, the region it
    /// registered there.
    ep: Mutex<Option<Arc<crate::ep::EpShared>>>,
    region: Mutex<Option<Arc<PtrRegion>>>,
}

static MR_FID_OPS: FiOps = fi_ops!(mr_close, mr_bind, mr_control);

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_reg(
    fid: Fid,
    buf: *const c_void,
    len: usize,
    _access: u64,
    _offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_mr_reg", -errno::FI_EOTHER, || {
        // SAFETY: the application passes its domain's fid.
        let Some(d) = (unsafe { fid::cast::<DomainObj>(fid, FI_CLASS_DOMAIN) }) else {
            return -errno::FI_EINVAL;
        };
        if mr.is_null() {
            return -errno::FI_EINVAL;
        }
        if flags != 0 {
            return -errno::FI_EBADFLAGS;
        }
        let key = if d.state.mr_mode & FI_MR_ENDPOINT != 0 {
            FI_KEY_NOTAVAIL
        } else if d.state.mr_mode & FI_MR_PROV_KEY != 0 || d.state.mr_mode == FI_MR_BASIC {
            d.state.next_key.fetch_add(1, Ordering::Relaxed)
        } else {
            requested_key
        };
        if key != FI_KEY_NOTAVAIL {
            let mut mrs = d.state.mrs.lock();
            if mrs.contains_key(&key) {
                return -errno::FI_ENOKEY;
            }
            mrs.insert(key, (buf as usize, len));
        }
        let obj = Box::into_raw(Box::new(MrObj {
            fid: FidMr {
                fid: fid::head(FI_CLASS_MR, context, &MR_FID_OPS),
                mem_desc: std::ptr::null_mut(),
                key,
            },
            domain: d,
            buf: buf as usize,
            len,
            ep: Mutex::new(None),
            region: Mutex::new(None),
        }));
        d.children.add();
        fid::register(FI_CLASS_MR, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *mr = obj.cast() };
        0
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn mr_regv(
    fid: Fid,
    iov: *const libc::iovec,
    count: usize,
    access: u64,
    offset: u64,
    requested_key: u64,
    flags: u64,
    mr: *mut *mut FidMr,
    context: *mut c_void,
) -> c_int {
    if count != 1 || iov.is_null() {
        return -errno::FI_EINVAL;
    }
    // SAFETY: one iovec, as checked.
    let v = unsafe { &*iov };
    // SAFETY: forwarded.
    unsafe {
        mr_reg(
            fid,
            v.iov_base,
            v.iov_len,
            access,
            offset,
            requested_key,
            flags,
            mr,
            context,
        )
    }
}

unsafe extern "C" fn mr_regattr(
    fid: Fid,
    attr: *const FiMrAttr,
    flags: u64,
    mr: *mut *mut FidMr,
) -> c_int {
    if attr.is_null() {
        return -errno::FI_EINVAL;
    }
    // SAFETY: the application's attr.
    let a = unsafe { &*attr };
    // SAFETY: forwarded.
    unsafe {
        mr_regv(
            fid,
            a.mr_iov,
            a.iov_count,
            a.access,
            a.offset,
            a.requested_key,
            flags,
            mr,
            a.context,
        )
    }
}

unsafe extern "C" fn mr_close(f: Fid) -> c_int {
    fid::guard("fi_close(mr)", -errno::FI_EOTHER, || {
        // SAFETY: the application passes its mr fid.
        let Some(obj) = (unsafe { fid::cast::<MrObj>(f, FI_CLASS_MR) }) else {
            return -errno::FI_EINVAL;
        };
        fid::unregister(FI_CLASS_MR, f.cast());
        if let (Some(ep), Some(region)) = (obj.ep.lock().take(), obj.region.lock().take()) {
            ep.ep().deregister(RegionKey(obj.fid.key));
            // A get's reply may still be sent from the range: wait (bounded)
            // until the transport let go of it, making progress meanwhile.
            ep.wait_until(Some(std::time::Duration::from_secs(10)), &|| {
                region.lent_out() == 0
            });
        }
        // SAFETY: a domain outlives its registrations.
        let d = unsafe { &*obj.domain };
        d.state.mrs.lock().remove(&obj.fid.key);
        d.children.remove();
        // SAFETY: allocated by mr_reg; unregistered.
        drop(unsafe { Box::from_raw(f.cast::<MrObj>()) });
        0
    })
}

unsafe extern "C" fn mr_bind(f: Fid, bfid: Fid, _flags: u64) -> c_int {
    fid::guard("fi_mr_bind", -errno::FI_EOTHER, || {
        // SAFETY: the application's fids, checked against the registry.
        let (Some(obj), Some(ep)) = (unsafe { fid::cast::<MrObj>(f, FI_CLASS_MR) }, unsafe {
            crate::ep::of(bfid)
        }) else {
            return -errno::FI_EINVAL;
        };
        if obj.region.lock().is_some() {
            return -errno::FI_EOPBADSTATE;
        }
        *obj.ep.lock() = Some(ep.shared.clone());
        0
    })
}

unsafe extern "C" fn mr_control(f: Fid, command: c_int, _arg: *mut c_void) -> c_int {
    fid::guard("fi_mr_enable", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { fid::cast::<MrObj>(f, FI_CLASS_MR) }) else {
            return -errno::FI_EINVAL;
        };
        if command != FI_ENABLE {
            return -errno::FI_ENOSYS;
        }
        let Some(ep) = obj.ep.lock().clone() else {
            return -errno::FI_EOPBADSTATE;
        };
        let mut region = obj.region.lock();
        if region.is_some() {
            return 0;
        }
        // SAFETY: libfabric's contract: registered memory stays valid until
        // fi_close of the registration, which deregisters it first.
        let r = Arc::new(unsafe { PtrRegion::new(obj.buf as *mut u8, obj.len) });
        let key = ep.ep().register(r.clone());
        *region = Some(r);
        // SAFETY: `f` is this registration (checked above); the key is read
        // by the application (fi_mr_key) only after this returns.
        unsafe { (*f.cast::<MrObj>()).fid.key = key.0 };
        0
    })
}
