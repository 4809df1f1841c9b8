//! Completion queues: entries in the format the application chose, error
//! entries for `fi_cq_readerr`, and progress: a read that finds the queue
//! empty makes one round of progress on the endpoints bound to it (data
//! progress is manual unless the background thread has it), a blocking
//! read waits with the runtime's pacing.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::abi::*;
use crate::fi_ops;
use crate::fid;
use crate::objects::{Bound, DomainObj, Driver};

/// One completion.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub src: u64,
}

/// One failed operation.
#[derive(Clone, Debug)]
pub struct ErrEntry {
    pub entry: Entry,
    pub olen: usize,
    pub err: i32,
    pub prov_errno: i32,
    /// What happened, in words (`fi_cq_strerror`).
    pub why: String,
}

#[derive(Default)]
struct Queue {
    entries: VecDeque<Entry>,
    errors: VecDeque<ErrEntry>,
    /// The text of the last error read, kept until the next read
    /// (`fi_cq_strerror` may point into it).
    last_why: Option<CString>,
    signaled: bool,
}

/// What endpoints write into and the application reads.
pub struct CqState {
    q: Mutex<Queue>,
    /// Entries and errors queued: a read of an empty queue (a polling
    /// application's common case) looks here without the lock.
    queued: std::sync::atomic::AtomicUsize,
    format: i32,
    /// The application's API version: the size of its error entry.
    api_version: u32,
    eps: Bound,
}

// SAFETY: the raw pointers in entries are application contexts and
// buffers the provider only hands back.
unsafe impl Send for CqState {}
// SAFETY: as above; everything is behind mutexes.
unsafe impl Sync for CqState {}

impl CqState {
    /// Queue a completion.
    pub fn push(&self, e: Entry) {
        self.q.lock().entries.push_back(e);
        self.queued
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Queue an error.
    pub fn push_err(&self, e: ErrEntry) {
        self.q.lock().errors.push_back(e);
        self.queued
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Something to read (or an error, or a signal).
    pub fn ready(&self) -> bool {
        let q = self.q.lock();
        !q.entries.is_empty() || !q.errors.is_empty() || q.signaled
    }

    /// Note an endpoint bound to this queue, for progress.
    pub fn bind(&self, ep: &Arc<dyn Driver>) {
        self.eps.bind(ep);
    }

    /// One round of progress on every bound endpoint.
    fn progress(&self) {
        self.eps.progress();
    }

    fn entry_size(&self) -> usize {
        match self.format {
            FI_CQ_FORMAT_CONTEXT => 8,
            FI_CQ_FORMAT_MSG => 24,
            FI_CQ_FORMAT_DATA => 40,
            _ => 48,
        }
    }

    /// Move up to `count` entries into `buf` (and their sources into
    /// `src`): how many, -FI_EAVAIL when an error waits, -FI_EAGAIN when
    /// nothing does.
    fn take(&self, buf: *mut c_void, count: usize, src: *mut FiAddr) -> isize {
        if self.queued.load(std::sync::atomic::Ordering::Acquire) == 0 {
            return -(errno::FI_EAGAIN as isize);
        }
        let mut q = self.q.lock();
        if !q.errors.is_empty() {
            return -(errno::FI_EAVAIL as isize);
        }
        if q.entries.is_empty() {
            if std::mem::take(&mut q.signaled) {
                return -(errno::FI_EAGAIN as isize);
            }
            return -(errno::FI_EAGAIN as isize);
        }
        let n = count.min(q.entries.len());
        self.queued
            .fetch_sub(n, std::sync::atomic::Ordering::AcqRel);
        let size = self.entry_size();
        for i in 0..n {
            let e = q.entries.pop_front().expect("counted");
            let full = FiCqTaggedEntry {
                op_context: e.context,
                flags: e.flags,
                len: e.len,
                buf: e.buf,
                data: e.data,
                tag: e.tag,
            };
            // SAFETY: the application's buffer holds `count` entries of its
            // format, whose layout is a prefix of the tagged entry's.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&full as *const FiCqTaggedEntry).cast::<u8>(),
                    buf.cast::<u8>().add(i * size),
                    size,
                );
                if !src.is_null() {
                    *src.add(i) = e.src;
                }
            }
        }
        n as isize
    }
}

#[repr(C)]
pub struct CqObj {
    fid: FidCq,
    pub state: Arc<CqState>,
    domain: *const DomainObj,
}

static OPS: FiOps = fi_ops!(close, fid::no_bind, control);
static CQ_OPS: FiOpsCq = FiOpsCq {
    size: std::mem::size_of::<FiOpsCq>(),
    read,
    readfrom,
    readerr,
    sread,
    sreadfrom,
    signal,
    strerror,
};

pub unsafe extern "C" fn open(
    domain: *mut FidDomain,
    attr: *mut FiCqAttr,
    cq: *mut *mut FidCq,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_cq_open", -errno::FI_EOTHER, || {
        // SAFETY: the application's domain fid.
        let Some(d) = (unsafe { crate::objects::domain_of(domain) }) else {
            return -errno::FI_EINVAL;
        };
        if cq.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: valid when non-NULL.
        let (format, wait) = match unsafe { attr.as_ref() } {
            Some(a) => {
                if a.flags != 0 && a.flags != FI_AFFINITY {
                    return -errno::FI_EBADFLAGS;
                }
                if a.wait_cond != FI_CQ_COND_NONE {
                    return -errno::FI_ENOSYS;
                }
                (a.format, a.wait_obj)
            }
            None => (FI_CQ_FORMAT_UNSPEC, FI_WAIT_NONE),
        };
        let format = match format {
            FI_CQ_FORMAT_UNSPEC => FI_CQ_FORMAT_CONTEXT,
            f @ (FI_CQ_FORMAT_CONTEXT | FI_CQ_FORMAT_MSG | FI_CQ_FORMAT_DATA
            | FI_CQ_FORMAT_TAGGED) => f,
            _ => return -errno::FI_ENOSYS,
        };
        if !matches!(
            wait,
            FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD | FI_WAIT_MUTEX_COND
        ) {
            return -errno::FI_ENOSYS;
        }
        let obj = Box::into_raw(Box::new(CqObj {
            fid: FidCq {
                fid: fid::head(FI_CLASS_CQ, context, &OPS),
                ops: &CQ_OPS,
            },
            state: Arc::new(CqState {
                q: Mutex::new(Queue::default()),
                queued: std::sync::atomic::AtomicUsize::new(0),
                format,
                api_version: d.state.api_version,
                eps: Bound::default(),
            }),
            domain: d,
        }));
        d.children.add();
        fid::register(FI_CLASS_CQ, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *cq = obj.cast() };
        0
    })
}

/// The queue behind a CQ fid.
///
/// # Safety
/// `f` is NULL or a `struct fid *`.
pub unsafe fn of<'a>(f: *const FidT) -> Option<&'a CqObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast::<CqObj>(f, FI_CLASS_CQ) }
}

unsafe extern "C" fn close(f: Fid) -> c_int {
    fid::guard("fi_close(cq)", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        if obj.state.eps.any() {
            return -errno::FI_EBUSY;
        }
        fid::unregister(FI_CLASS_CQ, f.cast());
        // SAFETY: the domain outlives its queues.
        unsafe { (*obj.domain).children.remove() };
        // SAFETY: allocated by open; unregistered.
        drop(unsafe { Box::from_raw(f.cast::<CqObj>()) });
        0
    })
}

unsafe extern "C" fn control(f: Fid, command: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: the application's fid.
    let Some(_) = (unsafe { of(f) }) else {
        return -errno::FI_EINVAL;
    };
    match command {
        FI_GETWAITOBJ if !arg.is_null() => {
            // SAFETY: an `enum fi_wait_obj *`.
            unsafe { *arg.cast::<c_int>() = FI_WAIT_NONE };
            0
        }
        _ => -errno::FI_ENOSYS,
    }
}

fn read_impl(cq: *mut FidCq, buf: *mut c_void, count: usize, src: *mut FiAddr) -> isize {
    // SAFETY: the application's fid (its head checked).
    let Some(obj) = (unsafe { fid::cast_live::<CqObj>(cq.cast(), FI_CLASS_CQ) }) else {
        return -(errno::FI_EINVAL as isize);
    };
    if buf.is_null() && count > 0 {
        return -(errno::FI_EINVAL as isize);
    }
    let r = obj.state.take(buf, count, src);
    if r != -(errno::FI_EAGAIN as isize) {
        return r;
    }
    obj.state.progress();
    obj.state.take(buf, count, src)
}

unsafe extern "C" fn read(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize {
    fid::guard("fi_cq_read", -(errno::FI_EOTHER as isize), || {
        read_impl(cq, buf, count, std::ptr::null_mut())
    })
}

unsafe extern "C" fn readfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut FiAddr,
) -> isize {
    fid::guard("fi_cq_readfrom", -(errno::FI_EOTHER as isize), || {
        read_impl(cq, buf, count, src)
    })
}

fn sread_impl(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut FiAddr,
    timeout: c_int,
) -> isize {
    // SAFETY: the application's fid.
    let Some(obj) = (unsafe { of(cq.cast()) }) else {
        return -(errno::FI_EINVAL as isize);
    };
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let r = obj.state.take(buf, count, src);
        if r != -(errno::FI_EAGAIN as isize) {
            return r;
        }
        if std::mem::take(&mut obj.state.q.lock().signaled) {
            return -(errno::FI_EAGAIN as isize);
        }
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(l) if !l.is_zero() => Some(l),
                _ => return -(errno::FI_EAGAIN as isize),
            },
            None => None,
        };
        // The first bound endpoint's pacing (spin, then sleep in the
        // transport's wait) until this queue has something.
        obj.state.eps.wait_until(left, &|| obj.state.ready());
    }
}

unsafe extern "C" fn sread(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    fid::guard("fi_cq_sread", -(errno::FI_EOTHER as isize), || {
        sread_impl(cq, buf, count, std::ptr::null_mut(), timeout)
    })
}

unsafe extern "C" fn sreadfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut FiAddr,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    fid::guard("fi_cq_sreadfrom", -(errno::FI_EOTHER as isize), || {
        sread_impl(cq, buf, count, src, timeout)
    })
}

unsafe extern "C" fn readerr(cq: *mut FidCq, buf: *mut FiCqErrEntry, _flags: u64) -> isize {
    fid::guard("fi_cq_readerr", -(errno::FI_EOTHER as isize), || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(cq.cast()) }) else {
            return -(errno::FI_EINVAL as isize);
        };
        if buf.is_null() {
            return -(errno::FI_EINVAL as isize);
        }
        let mut q = obj.state.q.lock();
        let Some(e) = q.errors.pop_front() else {
            return -(errno::FI_EAGAIN as isize);
        };
        obj.state
            .queued
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        let full = FiCqErrEntry {
            op_context: e.entry.context,
            flags: e.entry.flags,
            len: e.entry.len,
            buf: e.entry.buf,
            data: e.entry.data,
            tag: e.entry.tag,
            olen: e.olen,
            err: e.err,
            prov_errno: e.prov_errno,
            err_data: std::ptr::null_mut(),
            err_data_size: 0,
            src_addr: e.entry.src,
        };
        // The application's entry is as large as its API version says:
        // writing 2.x's `src_addr` into an older one would overrun it.
        let size = if obj.state.api_version >= fi_version(1, 20) {
            std::mem::size_of::<FiCqErrEntry>()
        } else if obj.state.api_version >= fi_version(1, 5) {
            CQ_ERR_ENTRY_1_5_SIZE
        } else {
            CQ_ERR_ENTRY_1_0_SIZE
        };
        // SAFETY: the application's entry holds `size` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&full as *const FiCqErrEntry).cast::<u8>(),
                buf.cast::<u8>(),
                size,
            )
        };
        q.last_why = CString::new(e.why).ok();
        1
    })
}

unsafe extern "C" fn signal(cq: *mut FidCq) -> c_int {
    // SAFETY: the application's fid.
    match unsafe { of(cq.cast()) } {
        Some(obj) => {
            obj.state.q.lock().signaled = true;
            0
        }
        None => -errno::FI_EINVAL,
    }
}

unsafe extern "C" fn strerror(
    cq: *mut FidCq,
    prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    fid::guard("fi_cq_strerror", c"llc: error".as_ptr(), || {
        // SAFETY: the application's fid.
        let why = unsafe { of(cq.cast()) }
            .and_then(|o| {
                o.state
                    .q
                    .lock()
                    .last_why
                    .as_ref()
                    .map(|c| c.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| format!("llc provider error {prov_errno}"));
        if buf.is_null() || len == 0 {
            return c"llc: see the error entry".as_ptr();
        }
        let mut l = len;
        // SAFETY: `len` bytes at `buf`.
        unsafe { fid::write_str(&why, buf, &mut l) };
        buf
    })
}

/// `fi_trywait`: 0 when every queue listed is empty (the application may
/// block on it), -FI_EAGAIN otherwise.
pub unsafe extern "C" fn trywait(_fabric: *mut FidFabric, fids: *mut Fid, count: c_int) -> c_int {
    fid::guard("fi_trywait", -errno::FI_EOTHER, || {
        for i in 0..count.max(0) as usize {
            // SAFETY: `count` fids.
            let f = unsafe { *fids.add(i) };
            // SAFETY: a fid of the application's.
            match unsafe { of(f) } {
                Some(cq) if cq.state.ready() => return -errno::FI_EAGAIN,
                Some(_) => {}
                None => return -errno::FI_EINVAL,
            }
        }
        0
    })
}
