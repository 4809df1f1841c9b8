//! What every object shares: the C head (`struct fid` first, so the
//! pointer the application holds is the object's), the registry of open
//! fabrics and domains (hints may carry another provider's pointers, which
//! must never be cast), child counts for `fi_close` ordering, and the
//! entries every table has.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use parking_lot::RwLock;

use crate::abi::*;

/// Run a C entry point; a panic becomes `on_panic` and a line on stderr.
pub fn guard<T>(name: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    app_runtime::cabi::guard(name, on_panic, f)
}

/// Open objects by (class, address). Read on every call (a read lock,
/// shared by threads), written at open and close.
static OPEN: RwLock<Option<HashSet<(usize, usize)>>> = RwLock::new(None);

/// Note an open object (class, address).
pub fn register(class: usize, p: *const c_void) {
    OPEN.write()
        .get_or_insert_with(HashSet::new)
        .insert((class, p as usize));
}

/// Forget a closed object.
pub fn unregister(class: usize, p: *const c_void) {
    if let Some(s) = OPEN.write().as_mut() {
        s.remove(&(class, p as usize));
    }
}

/// True when `p` is an open object of this provider of `class`.
pub fn is_ours(class: usize, p: *const c_void) -> bool {
    OPEN.read()
        .as_ref()
        .is_some_and(|s| s.contains(&(class, p as usize)))
}

/// The open children of an object: closing it while any is open is
/// -FI_EBUSY.
#[derive(Debug, Default)]
pub struct Children(AtomicUsize);

impl Children {
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
    pub fn remove(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
    pub fn any(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

/// The object behind a fid pointer the application passed, if it is one of
/// ours of `class`.
///
/// # Safety
/// `fid` is NULL or points to a `struct fid`.
pub unsafe fn cast<'a, T>(fid: *const FidT, class: usize) -> Option<&'a T> {
    if fid.is_null() || !is_ours(class, fid.cast()) {
        return None;
    }
    // SAFETY: registered objects of `class` are `T`s whose first field is
    // their `struct fid`, alive until unregistered.
    Some(unsafe { &*fid.cast::<T>() })
}

/// The `fi_ops` table of each class's objects (set when the first is
/// made): what [`cast_live`] compares a head with.
static CLASS_OPS: [AtomicPtr<FiOps>; 32] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 32];

/// A new head for an object of `class`.
pub fn head(class: usize, context: *mut c_void, ops: &'static FiOps) -> FidT {
    if let Some(slot) = CLASS_OPS.get(class) {
        slot.store((ops as *const FiOps).cast_mut(), Ordering::Relaxed);
    }
    FidT {
        fclass: class,
        context,
        ops,
    }
}

/// [`cast`] for the data path (sends, receives, queue reads), without the
/// registry's lock: the head names the class and carries this provider's
/// table for it. An application passing a handle it already closed has
/// dereferenced freed memory in libfabric's own inline wrapper before this
/// is reached; `fi_close`, which may be called twice, keeps the registry.
///
/// # Safety
/// `fid` is NULL or points to a `struct fid` (any provider's).
pub unsafe fn cast_live<'a, T>(fid: *const FidT, class: usize) -> Option<&'a T> {
    if fid.is_null() {
        return None;
    }
    let ours = CLASS_OPS.get(class)?.load(Ordering::Relaxed);
    // SAFETY: the caller's guarantee: a valid head to read.
    let head = unsafe { &*fid };
    if head.fclass != class || ours.is_null() || !std::ptr::eq(head.ops, ours) {
        return None;
    }
    // SAFETY: a head with this provider's table for `class` heads a `T`.
    Some(unsafe { &*fid.cast::<T>() })
}

pub unsafe extern "C" fn no_bind(_: Fid, _: Fid, _: u64) -> c_int {
    -errno::FI_ENOSYS
}
pub unsafe extern "C" fn no_control(_: Fid, _: c_int, _: *mut c_void) -> c_int {
    -errno::FI_ENOSYS
}
pub unsafe extern "C" fn no_ops_open(
    _: Fid,
    _: *const c_char,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
pub unsafe extern "C" fn no_tostr(_: *const FidT, _: *mut c_char, _: usize) -> c_int {
    -errno::FI_ENOSYS
}
pub unsafe extern "C" fn no_ops_set(
    _: Fid,
    _: *const c_char,
    _: u64,
    _: *mut c_void,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}

/// An entry of an operations table this provider does not implement.
pub unsafe extern "C" fn no_op() -> isize {
    -(errno::FI_ENOSYS as isize)
}

/// An `fi_ops` table with `close` (and optionally `bind`, `control`).
#[macro_export]
macro_rules! fi_ops {
    ($close:expr) => {
        $crate::fi_ops!($close, $crate::fid::no_bind, $crate::fid::no_control)
    };
    ($close:expr, $bind:expr, $control:expr) => {
        $crate::abi::FiOps {
            size: std::mem::size_of::<$crate::abi::FiOps>(),
            close: $close,
            bind: $bind,
            control: $control,
            ops_open: $crate::fid::no_ops_open,
            tostr: $crate::fid::no_tostr,
            ops_set: $crate::fid::no_ops_set,
        }
    };
}

/// Write `s` into a C buffer of `*len` bytes (NUL-terminated, cut if it
/// does not fit) and set `*len` to the length it needs: `fi_av_straddr`'s
/// and `fi_cq_strerror`'s contract.
///
/// # Safety
/// `buf` holds `*len` writable bytes (or is NULL with `*len` 0).
pub unsafe fn write_str(s: &str, buf: *mut c_char, len: &mut usize) {
    let need = s.len() + 1;
    if !buf.is_null() && *len > 0 {
        let n = s.len().min(*len - 1);
        // SAFETY: n + 1 <= *len bytes are writable at buf.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    *len = need;
}
