//! Event queues: control events (asynchronous address-vector inserts,
//! events the application writes itself). RDM endpoints need no
//! connection events.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::abi::*;
use crate::fi_ops;
use crate::fid;
use crate::objects::FabricObj;

#[derive(Default)]
struct Queue {
    events: VecDeque<(u32, Vec<u8>)>,
    errors: VecDeque<FiEqErrEntry>,
}

#[repr(C)]
pub struct EqObj {
    fid: FidEq,
    q: Mutex<Queue>,
    cv: Condvar,
    fabric: *const FabricObj,
}

// SAFETY: the raw pointers are the fabric (which outlives the EQ and is
// itself thread-safe) and application contexts the provider only copies.
unsafe impl Send for EqObj {}
// SAFETY: as above; the queue is behind a mutex.
unsafe impl Sync for EqObj {}

static OPS: FiOps = fi_ops!(close);
static EQ_OPS: FiOpsEq = FiOpsEq {
    size: std::mem::size_of::<FiOpsEq>(),
    read,
    readerr,
    write,
    sread,
    strerror,
};

pub unsafe extern "C" fn open(
    fabric: *mut FidFabric,
    attr: *mut FiEqAttr,
    eq: *mut *mut FidEq,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_eq_open", -errno::FI_EOTHER, || {
        // SAFETY: the application's fabric fid.
        let Some(f) = (unsafe { crate::objects::fabric_of(fabric) }) else {
            return -errno::FI_EINVAL;
        };
        if eq.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: a valid attr when non-NULL.
        if let Some(a) = unsafe { attr.as_ref() } {
            if !matches!(
                a.wait_obj,
                FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_MUTEX_COND | FI_WAIT_YIELD
            ) {
                return -errno::FI_ENOSYS;
            }
        }
        let obj = Box::into_raw(Box::new(EqObj {
            fid: FidEq {
                fid: fid::head(FI_CLASS_EQ, context, &OPS),
                ops: &EQ_OPS,
            },
            q: Mutex::new(Queue::default()),
            cv: Condvar::new(),
            fabric: f,
        }));
        f.children.add();
        fid::register(FI_CLASS_EQ, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *eq = obj.cast() };
        0
    })
}

unsafe extern "C" fn close(f: Fid) -> c_int {
    fid::guard("fi_close(eq)", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { fid::cast::<EqObj>(f, FI_CLASS_EQ) }) else {
            return -errno::FI_EINVAL;
        };
        fid::unregister(FI_CLASS_EQ, f.cast());
        // SAFETY: the fabric outlives its EQs.
        unsafe { (*obj.fabric).children.remove() };
        // SAFETY: allocated by open; unregistered.
        drop(unsafe { Box::from_raw(f.cast::<EqObj>()) });
        0
    })
}

/// Post an event (from the provider: an AV insert's completion).
///
/// # Safety
/// `eq` is NULL or a `struct fid_eq *`.
pub unsafe fn post(eq: *mut FidEq, event: u32, entry: FiEqEntry) {
    // SAFETY: the caller's guarantee.
    if let Some(obj) = unsafe { fid::cast::<EqObj>(eq.cast(), FI_CLASS_EQ) } {
        // SAFETY: FiEqEntry is plain data.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&entry as *const FiEqEntry).cast::<u8>(),
                std::mem::size_of::<FiEqEntry>(),
            )
        };
        obj.q.lock().events.push_back((event, bytes.to_vec()));
        obj.cv.notify_all();
    }
}

fn take(obj: &EqObj, event: *mut u32, buf: *mut c_void, len: usize, flags: u64) -> isize {
    let mut q = obj.q.lock();
    if !q.errors.is_empty() {
        return -(errno::FI_EAVAIL as isize);
    }
    let Some((ev, data)) = q.events.front() else {
        return -(errno::FI_EAGAIN as isize);
    };
    if len < data.len() {
        return -(errno::FI_ETOOSMALL as isize);
    }
    // SAFETY: `buf` holds `len >= data.len()` bytes; `event` is writable.
    unsafe {
        if !event.is_null() {
            *event = *ev;
        }
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
    }
    let n = data.len() as isize;
    if flags & FI_PEEK == 0 {
        q.events.pop_front();
    }
    n
}

unsafe extern "C" fn read(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    fid::guard("fi_eq_read", -(errno::FI_EOTHER as isize), || {
        // SAFETY: the application's fid.
        match unsafe { fid::cast::<EqObj>(eq.cast(), FI_CLASS_EQ) } {
            Some(obj) if !buf.is_null() || len == 0 => take(obj, event, buf, len, flags),
            _ => -(errno::FI_EINVAL as isize),
        }
    })
}

unsafe extern "C" fn sread(
    eq: *mut FidEq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    fid::guard("fi_eq_sread", -(errno::FI_EOTHER as isize), || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { fid::cast::<EqObj>(eq.cast(), FI_CLASS_EQ) }) else {
            return -(errno::FI_EINVAL as isize);
        };
        let deadline =
            (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        loop {
            let r = take(obj, event, buf, len, flags);
            if r != -(errno::FI_EAGAIN as isize) {
                return r;
            }
            let mut q = obj.q.lock();
            if q.events.is_empty() && q.errors.is_empty() {
                match deadline {
                    Some(d) => {
                        if obj.cv.wait_until(&mut q, d).timed_out() {
                            return -(errno::FI_EAGAIN as isize);
                        }
                    }
                    None => obj.cv.wait(&mut q),
                }
            }
        }
    })
}

unsafe extern "C" fn readerr(eq: *mut FidEq, buf: *mut FiEqErrEntry, _flags: u64) -> isize {
    fid::guard("fi_eq_readerr", -(errno::FI_EOTHER as isize), || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { fid::cast::<EqObj>(eq.cast(), FI_CLASS_EQ) }) else {
            return -(errno::FI_EINVAL as isize);
        };
        if buf.is_null() {
            return -(errno::FI_EINVAL as isize);
        }
        match obj.q.lock().errors.pop_front() {
            Some(e) => {
                // SAFETY: a writable error entry.
                unsafe { *buf = e };
                std::mem::size_of::<FiEqErrEntry>() as isize
            }
            None => -(errno::FI_EAGAIN as isize),
        }
    })
}

unsafe extern "C" fn write(
    eq: *mut FidEq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    fid::guard("fi_eq_write", -(errno::FI_EOTHER as isize), || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { fid::cast::<EqObj>(eq.cast(), FI_CLASS_EQ) }) else {
            return -(errno::FI_EINVAL as isize);
        };
        if buf.is_null() && len > 0 {
            return -(errno::FI_EINVAL as isize);
        }
        // SAFETY: `len` readable bytes at `buf`.
        let data = if len == 0 {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }.to_vec()
        };
        obj.q.lock().events.push_back((event, data));
        obj.cv.notify_all();
        len as isize
    })
}

unsafe extern "C" fn strerror(
    _eq: *mut FidEq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    let msg = format!("llc event error {prov_errno}");
    let mut l = len;
    // SAFETY: `buf` holds `len` bytes, or is NULL.
    unsafe { fid::write_str(&msg, buf, &mut l) };
    if buf.is_null() {
        c"llc event error".as_ptr()
    } else {
        buf
    }
}
