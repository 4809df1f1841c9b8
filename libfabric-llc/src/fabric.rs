//! The fabric: all of this provider's interfaces; it holds nothing but its
//! children (domains, event queues).

use std::ffi::{c_int, c_void, CStr};

use crate::abi::*;
use crate::fi_ops;
use crate::fid::{self, Children};
use crate::objects::FabricObj;

static OPS: FiOps = fi_ops!(close);

static FABRIC_OPS: FiOpsFabric = FiOpsFabric {
    size: std::mem::size_of::<FiOpsFabric>(),
    domain: crate::domain::open,
    passive_ep: no_passive_ep,
    eq_open: crate::eq::open,
    wait_open: no_wait_open,
    trywait: crate::cq::trywait,
    domain2,
};

pub unsafe extern "C" fn open(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_fabric", -errno::FI_EOTHER, || {
        if attr.is_null() || fabric.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: the core passes the application's valid attr.
        let attr = unsafe { &*attr };
        if !attr.name.is_null() {
            // SAFETY: a C string.
            let name = unsafe { CStr::from_ptr(attr.name) };
            if name.to_bytes() != crate::info::FABRIC_NAME.as_bytes() {
                return -errno::FI_ENODATA;
            }
        }
        let obj = Box::into_raw(Box::new(FabricObj {
            fid: FidFabric {
                fid: fid::head(FI_CLASS_FABRIC, context, &OPS),
                ops: &FABRIC_OPS,
                api_version: attr.api_version,
            },
            children: Children::default(),
        }));
        fid::register(FI_CLASS_FABRIC, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *fabric = obj.cast() };
        0
    })
}

unsafe extern "C" fn close(f: Fid) -> c_int {
    fid::guard("fi_close(fabric)", -errno::FI_EOTHER, || {
        // SAFETY: the application passes the fid it was given.
        let Some(obj) = (unsafe { crate::objects::fabric_of(f.cast()) }) else {
            return -errno::FI_EINVAL;
        };
        if obj.children.any() {
            return -errno::FI_EBUSY;
        }
        fid::unregister(FI_CLASS_FABRIC, f.cast());
        // SAFETY: allocated by `open` as a Box; unregistered, so no other
        // call reaches it.
        drop(unsafe { Box::from_raw(f.cast::<FabricObj>()) });
        0
    })
}

unsafe extern "C" fn no_passive_ep(
    _: *mut FidFabric,
    _: *mut FiInfo,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}

unsafe extern "C" fn no_wait_open(_: *mut FidFabric, _: *mut c_void, _: *mut *mut c_void) -> c_int {
    -errno::FI_ENOSYS
}

unsafe extern "C" fn domain2(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    dom: *mut *mut FidDomain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    if flags != 0 {
        return -errno::FI_EBADFLAGS;
    }
    // SAFETY: forwarded as given.
    unsafe { crate::domain::open(fabric, info, dom, context) }
}
