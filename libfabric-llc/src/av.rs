//! Address vectors: a table of endpoint names; an `fi_addr_t` is the
//! name's index, for FI_AV_TABLE and FI_AV_MAP alike (MAP's values are
//! opaque to the application, so the index serves both). Endpoints bound
//! to the vector turn an index into a message-layer peer when they first
//! use it.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::abi::*;
use crate::addr::{Name, NAME_LEN};
use crate::fi_ops;
use crate::fid;
use crate::objects::DomainObj;

/// Names by index (`None`: removed), and indices by name.
type Table = (Vec<Option<Name>>, HashMap<Name, u64>);

/// The names and their indices.
#[derive(Default)]
pub struct AvState {
    names: RwLock<Table>,
    eq: Mutex<Option<usize>>,
}

impl AvState {
    /// The name at `fi_addr`.
    pub fn name(&self, fi_addr: u64) -> Option<Name> {
        self.names.read().0.get(fi_addr as usize).copied().flatten()
    }

    /// The index of `name` (FI_ADDR_NOTAVAIL when not inserted).
    pub fn index(&self, name: &Name) -> u64 {
        self.names
            .read()
            .1
            .get(name)
            .copied()
            .unwrap_or(FI_ADDR_NOTAVAIL)
    }

    fn insert(&self, name: Name) -> u64 {
        let mut g = self.names.write();
        if let Some(&i) = g.1.get(&name) {
            return i;
        }
        let i = g.0.len() as u64;
        g.0.push(Some(name));
        g.1.insert(name, i);
        i
    }

    fn remove(&self, fi_addr: u64) -> bool {
        let mut g = self.names.write();
        let Some(slot) = g.0.get_mut(fi_addr as usize) else {
            return false;
        };
        match slot.take() {
            Some(n) => {
                g.1.remove(&n);
                true
            }
            None => false,
        }
    }
}

#[repr(C)]
pub struct AvObj {
    fid: FidAv,
    pub state: Arc<AvState>,
    domain: *const DomainObj,
}

static OPS: FiOps = fi_ops!(close, bind, fid::no_control);
static AV_OPS: FiOpsAv = FiOpsAv {
    size: std::mem::size_of::<FiOpsAv>(),
    insert,
    insertsvc,
    insertsym,
    remove,
    lookup,
    straddr,
    av_set: no_av_set,
    insert_auth_key: no_insert_auth_key,
    lookup_auth_key: no_lookup_auth_key,
    set_user_id: no_set_user_id,
};

pub unsafe extern "C" fn open(
    domain: *mut FidDomain,
    attr: *mut FiAvAttr,
    av: *mut *mut FidAv,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_av_open", -errno::FI_EOTHER, || {
        // SAFETY: the application's domain fid.
        let Some(d) = (unsafe { crate::objects::domain_of(domain) }) else {
            return -errno::FI_EINVAL;
        };
        if av.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: valid when non-NULL.
        if let Some(a) = unsafe { attr.as_ref() } {
            if !matches!(a.type_, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE) {
                return -errno::FI_EINVAL;
            }
            if !a.name.is_null() || a.rx_ctx_bits != 0 {
                // Named (shared) vectors and receive-context bits are not
                // served (no FI_SHARED_AV, no FI_NAMED_RX_CTX).
                return -errno::FI_ENOSYS;
            }
        }
        let obj = Box::into_raw(Box::new(AvObj {
            fid: FidAv {
                fid: fid::head(FI_CLASS_AV, context, &OPS),
                ops: &AV_OPS,
            },
            state: Arc::default(),
            domain: d,
        }));
        d.children.add();
        fid::register(FI_CLASS_AV, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *av = obj.cast() };
        0
    })
}

/// The vector behind an AV fid.
///
/// # Safety
/// `f` is NULL or a `struct fid *`.
pub unsafe fn of<'a>(f: *const FidT) -> Option<&'a AvObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast::<AvObj>(f, FI_CLASS_AV) }
}

unsafe extern "C" fn close(f: Fid) -> c_int {
    fid::guard("fi_close(av)", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        if Arc::strong_count(&obj.state) > 1 {
            // Bound to an endpoint that is still open.
            return -errno::FI_EBUSY;
        }
        fid::unregister(FI_CLASS_AV, f.cast());
        // SAFETY: the domain outlives its vectors.
        unsafe { (*obj.domain).children.remove() };
        // SAFETY: allocated by open; unregistered.
        drop(unsafe { Box::from_raw(f.cast::<AvObj>()) });
        0
    })
}

unsafe extern "C" fn bind(f: Fid, bfid: Fid, _flags: u64) -> c_int {
    // SAFETY: the application's fids.
    let (Some(obj), true) = (unsafe { of(f) }, fid::is_ours(FI_CLASS_EQ, bfid.cast())) else {
        return -errno::FI_EINVAL;
    };
    *obj.state.eq.lock() = Some(bfid as usize);
    0
}

/// Insert `count` names; each result (index, or FI_ADDR_NOTAVAIL for what
/// is not a name) goes to `fi_addr` when given. With an event queue bound,
/// the insert completes there too (FI_AV_COMPLETE, `data` = inserted).
fn insert_names(
    obj: &AvObj,
    names: impl Iterator<Item = Option<Name>>,
    fi_addr: *mut FiAddr,
    context: *mut c_void,
) -> c_int {
    let mut ok = 0;
    for (i, n) in names.enumerate() {
        let a = match n {
            Some(n) => {
                ok += 1;
                obj.state.insert(n)
            }
            None => FI_ADDR_NOTAVAIL,
        };
        if !fi_addr.is_null() {
            // SAFETY: the application's array holds `count` entries.
            unsafe { *fi_addr.add(i) = a };
        }
    }
    if let Some(eq) = *obj.state.eq.lock() {
        // SAFETY: registered EQ (checked at bind).
        unsafe {
            crate::eq::post(
                eq as *mut FidEq,
                FI_AV_COMPLETE,
                FiEqEntry {
                    fid: &obj.fid as *const FidAv as Fid,
                    context,
                    data: ok as u64,
                },
            )
        };
        return 0;
    }
    ok
}

unsafe extern "C" fn insert(
    av: *mut FidAv,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut FiAddr,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_av_insert", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(av.cast()) }) else {
            return -errno::FI_EINVAL;
        };
        if addr.is_null() && count > 0 {
            return -errno::FI_EINVAL;
        }
        let base = addr.cast::<u8>();
        let names = (0..count).map(|i| {
            // SAFETY: `count` names of NAME_LEN bytes at `addr`.
            Name::from_bytes(unsafe {
                std::slice::from_raw_parts(base.add(i * NAME_LEN), NAME_LEN)
            })
        });
        insert_names(obj, names, fi_addr, context)
    })
}

unsafe extern "C" fn insertsvc(
    av: *mut FidAv,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut FiAddr,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_av_insertsvc", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(av.cast()) }) else {
            return -errno::FI_EINVAL;
        };
        if node.is_null() || service.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: C strings.
        let (node, service) = unsafe {
            (
                CStr::from_ptr(node).to_string_lossy(),
                CStr::from_ptr(service).to_string_lossy(),
            )
        };
        let name = match (Name::parse_mac(&node), service.parse::<u16>()) {
            (Some(mac), Ok(port)) => Some(Name::new(mac, port)),
            _ => None,
        };
        insert_names(obj, std::iter::once(name), fi_addr, context)
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn insertsym(
    _: *mut FidAv,
    _: *const c_char,
    _: usize,
    _: *const c_char,
    _: usize,
    _: *mut FiAddr,
    _: u64,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}

unsafe extern "C" fn remove(
    av: *mut FidAv,
    fi_addr: *mut FiAddr,
    count: usize,
    _flags: u64,
) -> c_int {
    fid::guard("fi_av_remove", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(av.cast()) }) else {
            return -errno::FI_EINVAL;
        };
        if fi_addr.is_null() && count > 0 {
            return -errno::FI_EINVAL;
        }
        let mut rc = 0;
        for i in 0..count {
            // SAFETY: `count` entries.
            if !obj.state.remove(unsafe { *fi_addr.add(i) }) {
                rc = -errno::FI_EINVAL;
            }
        }
        rc
    })
}

unsafe extern "C" fn lookup(
    av: *mut FidAv,
    fi_addr: FiAddr,
    addr: *mut c_void,
    addrlen: *mut usize,
) -> c_int {
    fid::guard("fi_av_lookup", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(av.cast()) }) else {
            return -errno::FI_EINVAL;
        };
        if addrlen.is_null() {
            return -errno::FI_EINVAL;
        }
        let Some(name) = obj.state.name(fi_addr) else {
            return -errno::FI_EINVAL;
        };
        // SAFETY: `*addrlen` writable bytes at `addr`.
        unsafe {
            let n = (*addrlen).min(NAME_LEN);
            if !addr.is_null() {
                std::ptr::copy_nonoverlapping(name.to_bytes().as_ptr(), addr.cast::<u8>(), n);
            }
            *addrlen = NAME_LEN;
        }
        0
    })
}

unsafe extern "C" fn straddr(
    _av: *mut FidAv,
    addr: *const c_void,
    buf: *mut c_char,
    len: *mut usize,
) -> *const c_char {
    fid::guard("fi_av_straddr", std::ptr::null(), || {
        if addr.is_null() || len.is_null() {
            return std::ptr::null();
        }
        // SAFETY: an address of this provider's format is NAME_LEN bytes.
        let bytes = unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), NAME_LEN) };
        let text = match Name::from_bytes(bytes) {
            Some(n) => n.to_string(),
            None => "(not an llc address)".to_string(),
        };
        // SAFETY: `*len` bytes at `buf`.
        unsafe { fid::write_str(&text, buf, &mut *len) };
        buf
    })
}

unsafe extern "C" fn no_av_set(
    _: *mut FidAv,
    _: *mut c_void,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_insert_auth_key(
    _: *mut FidAv,
    _: *const c_void,
    _: usize,
    _: *mut FiAddr,
    _: u64,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_lookup_auth_key(
    _: *mut FidAv,
    _: FiAddr,
    _: *mut c_void,
    _: *mut usize,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_set_user_id(_: *mut FidAv, _: FiAddr, _: FiAddr, _: u64) -> c_int {
    -errno::FI_ENOSYS
}
