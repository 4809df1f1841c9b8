//! Counters: completed and failed operations of the kinds an endpoint
//! bound them for; `fi_cntr_wait` makes progress until the count is
//! reached.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::abi::*;
use crate::fi_ops;
use crate::fid;
use crate::objects::{Bound, DomainObj, Driver};

/// A counter's values and the endpoints that drive it.
#[derive(Default)]
pub struct CntrState {
    pub value: AtomicU64,
    pub errors: AtomicU64,
    eps: Bound,
}

impl CntrState {
    /// Note an endpoint bound to this counter, for progress.
    pub fn bind(&self, ep: &Arc<dyn Driver>) {
        self.eps.bind(ep);
    }
}

#[repr(C)]
pub struct CntrObj {
    fid: FidCntr,
    pub state: Arc<CntrState>,
    domain: *const DomainObj,
}

static OPS: FiOps = fi_ops!(close);
static CNTR_OPS: FiOpsCntr = FiOpsCntr {
    size: std::mem::size_of::<FiOpsCntr>(),
    read,
    readerr,
    add,
    set,
    wait,
    adderr,
    seterr,
};

pub unsafe extern "C" fn open(
    domain: *mut FidDomain,
    attr: *mut FiCntrAttr,
    cntr: *mut *mut FidCntr,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_cntr_open", -errno::FI_EOTHER, || {
        // SAFETY: the application's domain fid.
        let Some(d) = (unsafe { crate::objects::domain_of(domain) }) else {
            return -errno::FI_EINVAL;
        };
        if cntr.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: valid when non-NULL.
        if let Some(a) = unsafe { attr.as_ref() } {
            if a.events != 0 {
                return -errno::FI_ENOSYS;
            }
            if !matches!(
                a.wait_obj,
                FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD | FI_WAIT_MUTEX_COND
            ) {
                return -errno::FI_ENOSYS;
            }
        }
        let obj = Box::into_raw(Box::new(CntrObj {
            fid: FidCntr {
                fid: fid::head(FI_CLASS_CNTR, context, &OPS),
                ops: &CNTR_OPS,
            },
            state: Arc::default(),
            domain: d,
        }));
        d.children.add();
        fid::register(FI_CLASS_CNTR, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *cntr = obj.cast() };
        0
    })
}

/// The counter behind a fid.
///
/// # Safety
/// `f` is NULL or a `struct fid *`.
pub unsafe fn of<'a>(f: *const FidT) -> Option<&'a CntrObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast::<CntrObj>(f, FI_CLASS_CNTR) }
}

unsafe extern "C" fn close(f: Fid) -> c_int {
    fid::guard("fi_close(cntr)", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        if obj.state.eps.any() {
            return -errno::FI_EBUSY;
        }
        fid::unregister(FI_CLASS_CNTR, f.cast());
        // SAFETY: the domain outlives its counters.
        unsafe { (*obj.domain).children.remove() };
        // SAFETY: allocated by open; unregistered.
        drop(unsafe { Box::from_raw(f.cast::<CntrObj>()) });
        0
    })
}

fn with<R>(c: *mut FidCntr, none: R, f: impl FnOnce(&CntrObj) -> R) -> R {
    // SAFETY: the application's fid.
    match unsafe { of(c.cast()) } {
        Some(obj) => f(obj),
        None => none,
    }
}

unsafe extern "C" fn read(c: *mut FidCntr) -> u64 {
    // A read is how an application polls a counter: one round of
    // progress first, as a CQ read makes.
    with(c, 0, |o| {
        o.state.eps.progress();
        o.state.value.load(Ordering::Acquire)
    })
}

unsafe extern "C" fn readerr(c: *mut FidCntr) -> u64 {
    with(c, 0, |o| o.state.errors.load(Ordering::Acquire))
}

unsafe extern "C" fn add(c: *mut FidCntr, v: u64) -> c_int {
    with(c, -errno::FI_EINVAL, |o| {
        o.state.value.fetch_add(v, Ordering::AcqRel);
        0
    })
}

unsafe extern "C" fn set(c: *mut FidCntr, v: u64) -> c_int {
    with(c, -errno::FI_EINVAL, |o| {
        o.state.value.store(v, Ordering::Release);
        0
    })
}

unsafe extern "C" fn adderr(c: *mut FidCntr, v: u64) -> c_int {
    with(c, -errno::FI_EINVAL, |o| {
        o.state.errors.fetch_add(v, Ordering::AcqRel);
        0
    })
}

unsafe extern "C" fn seterr(c: *mut FidCntr, v: u64) -> c_int {
    with(c, -errno::FI_EINVAL, |o| {
        o.state.errors.store(v, Ordering::Release);
        0
    })
}

unsafe extern "C" fn wait(c: *mut FidCntr, threshold: u64, timeout: c_int) -> c_int {
    fid::guard("fi_cntr_wait", -errno::FI_EOTHER, || {
        with(c, -errno::FI_EINVAL, |o| {
            let deadline =
                (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
            let errors = o.state.errors.load(Ordering::Acquire);
            let done = || {
                o.state.value.load(Ordering::Acquire) >= threshold
                    || o.state.errors.load(Ordering::Acquire) != errors
            };
            loop {
                if o.state.errors.load(Ordering::Acquire) != errors {
                    return -errno::FI_EAVAIL;
                }
                if o.state.value.load(Ordering::Acquire) >= threshold {
                    return 0;
                }
                let left = match deadline {
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(l) if !l.is_zero() => Some(l),
                        _ => return -errno::FI_ETIMEDOUT,
                    },
                    None => None,
                };
                o.state.eps.wait_until(left, &done);
            }
        })
    })
}
