//! RDM endpoints: one message-layer endpoint each, on the domain's
//! interface, with the application runtime (pump, waiter, background
//! thread) around it. This file is the object and its control path;
//! `data.rs` the sends and receives, `state.rs` what is pending and how
//! completions reach the queues.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use app_runtime::{Ep, Options, Ranks, Runtime};
use msg_layer::transport::spec::TransportSpec;
use msg_layer::{Config, Endpoint};
use parking_lot::Mutex;

use crate::abi::*;
use crate::addr::{Name, NAME_LEN};
use crate::fi_ops;
use crate::fid;
use crate::objects::{DomainObj, Driver};

/// A data-path entry point of the ops tables (data.rs, rma.rs): `body`
/// under the provider's panic guard, -FI_EOTHER if it panics. Defined
/// before the modules that use it (macro scope is textual).
macro_rules! entry {
    ($name:literal, $body:expr) => {
        fid::guard($name, err(errno::FI_EOTHER), || $body)
    };
}

mod data;
mod rma;
pub mod state;

use state::{CqBinding, EpApi};

/// What the endpoint's fid, its queues and counters share.
pub struct EpShared {
    pub rt: Arc<Runtime<EpApi>>,
    background: Mutex<Option<JoinHandle<()>>>,
    /// The name `fi_getname` returns.
    pub name: Name,
    pub tx_op_flags: Mutex<u64>,
    pub rx_op_flags: Mutex<u64>,
    /// FI_OPT_MIN_MULTI_RECV: a multi-receive buffer is released once
    /// less than this is left.
    pub min_multi_recv: std::sync::atomic::AtomicUsize,
    /// FI_DIRECTED_RECV: receives honour their source address (without
    /// it, fi_msg(3) says the address is ignored).
    pub directed: bool,
    pub(crate) enabled: AtomicBool,
}

impl EpShared {
    /// The message-layer endpoint.
    pub fn ep(&self) -> &Ep {
        self.rt.ep(0).expect("an endpoint's slot is set at open")
    }

    /// One round of progress (what a CQ or counter read makes).
    pub fn progress(&self) {
        self.rt.note_call();
        let _ = self.rt.progress();
    }
}

impl Driver for EpShared {
    fn progress(&self) {
        EpShared::progress(self);
    }

    fn wait_until(&self, timeout: Option<Duration>, cond: &dyn Fn() -> bool) {
        let _ = self.rt.wait_for(timeout, |_| cond().then_some(()));
    }
}

/// FI_OPT_MIN_MULTI_RECV until the application sets it: room for one
/// small message.
const DEFAULT_MIN_MULTI_RECV: usize = 64;

/// Every open endpoint, for `cleanup`.
static ALL: Mutex<Vec<Weak<EpShared>>> = Mutex::new(Vec::new());

/// Stop every background thread (the core is about to unload the provider).
pub fn stop_all() {
    for ep in ALL.lock().drain(..).filter_map(|w| w.upgrade()) {
        ep.rt.stop_background();
        if let Some(h) = ep.background.lock().take() {
            let _ = h.join();
        }
    }
}

#[repr(C)]
pub struct EpObj {
    fid: FidEp,
    pub shared: Arc<EpShared>,
    domain: *const DomainObj,
}

static OPS: FiOps = fi_ops!(close, bind, control);
static EP_OPS: FiOpsEp = FiOpsEp {
    size: std::mem::size_of::<FiOpsEp>(),
    cancel: data::cancel,
    getopt,
    setopt,
    tx_ctx: no_ctx,
    rx_ctx: no_ctx_rx,
    rx_size_left,
    tx_size_left,
};
static CM_OPS: FiOpsCm = FiOpsCm {
    size: std::mem::size_of::<FiOpsCm>(),
    setname,
    getname,
    getpeer: no_getpeer,
    connect: no_connect,
    listen: no_listen,
    accept: no_accept,
    reject: no_reject,
    shutdown: no_shutdown,
    join: no_join,
};
static NONE_ATOMIC: FiOpsNone<12> = FiOpsNone {
    size: std::mem::size_of::<FiOpsNone<12>>(),
    entries: [fid::no_op; 12],
};
static NONE_COLLECTIVE: FiOpsNone<8> = FiOpsNone {
    size: std::mem::size_of::<FiOpsNone<8>>(),
    entries: [fid::no_op; 8],
};

pub unsafe extern "C" fn open(
    domain: *mut FidDomain,
    info: *mut FiInfo,
    ep: *mut *mut FidEp,
    context: *mut c_void,
) -> c_int {
    fid::guard("fi_endpoint", -errno::FI_EOTHER, || {
        // SAFETY: the application's domain fid.
        let Some(d) = (unsafe { crate::objects::domain_of(domain) }) else {
            return -errno::FI_EINVAL;
        };
        if ep.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: valid when non-NULL, attrs too.
        let (tx_flags, rx_flags, port, caps) = match unsafe { info.as_ref() } {
            Some(i) => unsafe {
                if let Some(e) = i.ep_attr.as_ref() {
                    if e.type_ != FI_EP_RDM && e.type_ != FI_EP_UNSPEC {
                        return -errno::FI_EINVAL;
                    }
                }
                let port = if i.src_addrlen == NAME_LEN && !i.src_addr.is_null() {
                    Name::from_bytes(std::slice::from_raw_parts(
                        i.src_addr.cast::<u8>(),
                        NAME_LEN,
                    ))
                    .map_or(0, |n| n.port)
                } else {
                    0
                };
                (
                    i.tx_attr.as_ref().map_or(0, |t| t.op_flags),
                    i.rx_attr.as_ref().map_or(0, |r| r.op_flags),
                    port,
                    i.caps | i.rx_attr.as_ref().map_or(0, |r| r.caps),
                )
            },
            None => (0, 0, 0, crate::info::CAPS),
        };
        let shared = match open_shared(d, port, tx_flags, rx_flags, caps & FI_DIRECTED_RECV != 0) {
            Ok(s) => s,
            Err(code) => return code,
        };
        ALL.lock().push(Arc::downgrade(&shared));
        let obj = Box::into_raw(Box::new(EpObj {
            fid: FidEp {
                fid: fid::head(FI_CLASS_EP, context, &OPS),
                ops: &EP_OPS,
                cm: &CM_OPS,
                msg: &data::MSG_OPS,
                rma: &rma::RMA_OPS,
                tagged: &data::TAGGED_OPS,
                atomic: (&NONE_ATOMIC as *const FiOpsNone<12>).cast(),
                collective: (&NONE_COLLECTIVE as *const FiOpsNone<8>).cast(),
            },
            shared,
            domain: d,
        }));
        d.children.add();
        fid::register(FI_CLASS_EP, obj.cast());
        // SAFETY: a writable result pointer.
        unsafe { *ep = obj.cast() };
        0
    })
}

fn open_shared(
    d: &DomainObj,
    port: u16,
    tx: u64,
    rx: u64,
    directed: bool,
) -> Result<Arc<EpShared>, c_int> {
    let mut spec = d.state.spec.clone();
    spec.port = port;
    let spec = TransportSpec::Llc(spec);
    let t = spec.open().map_err(|e| {
        crate::warn(FI_LOG_EP_CTRL, &format!("opening {spec}: {e}"));
        match e {
            msg_layer::transport::TransportError::Setup(_) => -errno::FI_ENODEV,
            _ => -errno::FI_EIO,
        }
    })?;
    for n in t.notes() {
        crate::info_log(FI_LOG_EP_CTRL, &format!("{spec}: {n}"));
    }
    let ep = Endpoint::new(
        t,
        Config {
            progress_thread: false,
            ..Config::default()
        },
    )
    .map_err(|e| {
        crate::warn(
            FI_LOG_EP_CTRL,
            &format!("opening an endpoint on {spec}: {e}"),
        );
        -errno::FI_EIO
    })?;
    let name = Name::of(&ep.local_addr()).ok_or(-errno::FI_EINVAL)?;
    crate::info_log(FI_LOG_EP_CTRL, &format!("endpoint {name} on {spec}"));
    let rt = Runtime::with_endpoint(ep, Ranks::default(), EpApi::default(), Options::default())
        .map_err(|_| -errno::FI_ENOMEM)?;
    Ok(Arc::new(EpShared {
        rt: Arc::new(rt),
        background: Mutex::new(None),
        name,
        tx_op_flags: Mutex::new(tx),
        rx_op_flags: Mutex::new(rx),
        directed,
        min_multi_recv: std::sync::atomic::AtomicUsize::new(DEFAULT_MIN_MULTI_RECV),
        enabled: AtomicBool::new(false),
    }))
}

/// The endpoint behind a fid.
///
/// # Safety
/// `f` is NULL or a `struct fid *`.
pub unsafe fn of<'a>(f: *const FidT) -> Option<&'a EpObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast::<EpObj>(f, FI_CLASS_EP) }
}

/// [`of`] on the data path ([`fid::cast_live`]).
///
/// # Safety
/// `f` is NULL or a `struct fid *`.
pub unsafe fn live<'a>(f: *const FidT) -> Option<&'a EpObj> {
    // SAFETY: the caller's guarantee.
    unsafe { fid::cast_live::<EpObj>(f, FI_CLASS_EP) }
}

unsafe extern "C" fn close(f: Fid) -> c_int {
    fid::guard("fi_close(ep)", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        fid::unregister(FI_CLASS_EP, f.cast());
        let s = &obj.shared;
        s.rt.stop_background();
        if let Some(h) = s.background.lock().take() {
            let _ = h.join();
        }
        // What was sent leaves before the endpoint goes (a peer waiting
        // for it must not wait for a timeout); bounded.
        let _ = s.ep().close(Duration::from_secs(2));
        // SAFETY: the domain outlives its endpoints.
        unsafe { (*obj.domain).children.remove() };
        // SAFETY: allocated by open; unregistered. Dropping the object
        // drops the bindings to the AV, CQs and counters (their Arcs).
        drop(unsafe { Box::from_raw(f.cast::<EpObj>()) });
        0
    })
}

unsafe extern "C" fn bind(f: Fid, bfid: Fid, flags: u64) -> c_int {
    fid::guard("fi_ep_bind", -errno::FI_EOTHER, || {
        // SAFETY: the application's fids.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        let s = &obj.shared;
        if s.enabled.load(Ordering::Acquire) {
            return -errno::FI_EOPBADSTATE;
        }
        let mut st = s.rt.lock();
        // SAFETY: `bfid` is checked against the registry before any cast.
        unsafe {
            if let Some(av) = crate::av::of(bfid) {
                st.av = Some(av.state.clone());
                return 0;
            }
            if let Some(cq) = crate::cq::of(bfid) {
                if flags & !(FI_SEND | FI_RECV | FI_SELECTIVE_COMPLETION) != 0 {
                    return -errno::FI_EBADFLAGS;
                }
                let b = CqBinding {
                    cq: cq.state.clone(),
                    selective: flags & FI_SELECTIVE_COMPLETION != 0,
                };
                if flags & FI_SEND != 0 {
                    st.tx_cq = Some(b.clone());
                }
                if flags & FI_RECV != 0 {
                    st.rx_cq = Some(b);
                }
                cq.state.bind(&(s.clone() as Arc<dyn Driver>));
                return 0;
            }
            if let Some(c) = crate::cntr::of(bfid) {
                if flags
                    & !(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
                    != 0
                {
                    return -errno::FI_EBADFLAGS;
                }
                if flags & FI_SEND != 0 {
                    st.tx_cntr = Some(c.state.clone());
                }
                if flags & FI_RECV != 0 {
                    st.rx_cntr = Some(c.state.clone());
                }
                if flags & FI_READ != 0 {
                    st.read_cntr = Some(c.state.clone());
                }
                if flags & FI_WRITE != 0 {
                    st.write_cntr = Some(c.state.clone());
                }
                c.state.bind(&(s.clone() as Arc<dyn Driver>));
                return 0;
            }
            if fid::is_ours(FI_CLASS_EQ, bfid.cast()) {
                return 0;
            }
        }
        -errno::FI_EINVAL
    })
}

unsafe extern "C" fn control(f: Fid, command: c_int, arg: *mut c_void) -> c_int {
    fid::guard("fi_control(ep)", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        let s = &obj.shared;
        match command {
            FI_ENABLE => {
                {
                    let st = s.rt.lock();
                    if st.av.is_none() {
                        return -errno::FI_ENOAV;
                    }
                    if st.tx_cq.is_none()
                        && st.rx_cq.is_none()
                        && st.tx_cntr.is_none()
                        && st.rx_cntr.is_none()
                    {
                        return -errno::FI_ENOCQ;
                    }
                }
                if !s.enabled.swap(true, Ordering::AcqRel) {
                    match s.rt.start_background("llc-fi-bg") {
                        Ok(h) => *s.background.lock() = Some(h),
                        Err(e) => {
                            crate::warn(FI_LOG_EP_CTRL, &format!("background thread: {e}"));
                            return -errno::FI_ENOMEM;
                        }
                    }
                }
                0
            }
            FI_GETOPSFLAG | FI_SETOPSFLAG if !arg.is_null() => {
                // SAFETY: a `uint64_t *` holding FI_TRANSMIT or FI_RECV
                // and, to set, the flags.
                let flags = unsafe { &mut *arg.cast::<u64>() };
                let slot = if *flags & FI_RECV != 0 {
                    &s.rx_op_flags
                } else {
                    &s.tx_op_flags
                };
                if command == FI_GETOPSFLAG {
                    *flags = *slot.lock();
                } else {
                    *slot.lock() = *flags & !(FI_SEND | FI_RECV);
                }
                0
            }
            _ => -errno::FI_ENOSYS,
        }
    })
}

unsafe extern "C" fn getname(f: Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    fid::guard("fi_getname", -errno::FI_EOTHER, || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return -errno::FI_EINVAL;
        };
        if addrlen.is_null() {
            return -errno::FI_EINVAL;
        }
        // SAFETY: `*addrlen` writable bytes at `addr`.
        unsafe {
            let room = *addrlen;
            *addrlen = NAME_LEN;
            if room < NAME_LEN || addr.is_null() {
                return -errno::FI_ETOOSMALL;
            }
            std::ptr::copy_nonoverlapping(
                obj.shared.name.to_bytes().as_ptr(),
                addr.cast::<u8>(),
                NAME_LEN,
            );
        }
        0
    })
}

unsafe extern "C" fn setname(_f: Fid, _addr: *mut c_void, _addrlen: usize) -> c_int {
    // The port is chosen at fi_endpoint (from the info's src_addr, or any
    // free one); renaming an open endpoint is not served.
    -errno::FI_ENOSYS
}

unsafe extern "C" fn getopt(
    f: Fid,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut usize,
) -> c_int {
    // SAFETY: the application's fid.
    let Some(obj) = (unsafe { of(f) }) else {
        return -errno::FI_EINVAL;
    };
    if level != FI_OPT_ENDPOINT {
        return -errno::FI_ENOPROTOOPT;
    }
    if optname != FI_OPT_MIN_MULTI_RECV {
        return -errno::FI_ENOPROTOOPT;
    }
    if optval.is_null() || optlen.is_null() {
        return -errno::FI_EINVAL;
    }
    // SAFETY: a size_t option and its length, as the man page says.
    unsafe {
        if *optlen < std::mem::size_of::<usize>() {
            return -errno::FI_ETOOSMALL;
        }
        *optval.cast::<usize>() = obj.shared.min_multi_recv.load(Ordering::Relaxed);
        *optlen = std::mem::size_of::<usize>();
    }
    0
}

unsafe extern "C" fn setopt(
    f: Fid,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: usize,
) -> c_int {
    // SAFETY: the application's fid.
    let Some(obj) = (unsafe { of(f) }) else {
        return -errno::FI_EINVAL;
    };
    if level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV {
        return -errno::FI_ENOPROTOOPT;
    }
    if optval.is_null() || optlen != std::mem::size_of::<usize>() {
        return -errno::FI_EINVAL;
    }
    // SAFETY: a size_t option, its length checked.
    let v = unsafe { *optval.cast::<usize>() };
    obj.shared.min_multi_recv.store(v, Ordering::Relaxed);
    0
}

unsafe extern "C" fn rx_size_left(_ep: *mut FidEp) -> isize {
    crate::info::QUEUE_SIZE as isize
}
unsafe extern "C" fn tx_size_left(_ep: *mut FidEp) -> isize {
    crate::info::QUEUE_SIZE as isize
}
unsafe extern "C" fn no_ctx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiTxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_ctx_rx(
    _: *mut FidEp,
    _: c_int,
    _: *mut FiRxAttr,
    _: *mut *mut FidEp,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_getpeer(_: *mut FidEp, _: *mut c_void, _: *mut usize) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_connect(
    _: *mut FidEp,
    _: *const c_void,
    _: *const c_void,
    _: usize,
) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_listen(_: *mut c_void) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_accept(_: *mut FidEp, _: *const c_void, _: usize) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_reject(_: *mut c_void, _: Fid, _: *const c_void, _: usize) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_shutdown(_: *mut FidEp, _: u64) -> c_int {
    -errno::FI_ENOSYS
}
unsafe extern "C" fn no_join(
    _: *mut FidEp,
    _: *const c_void,
    _: u64,
    _: *mut *mut c_void,
    _: *mut c_void,
) -> c_int {
    -errno::FI_ENOSYS
}
