//! The functions of the libfabric core that loaded this provider.
//!
//! The provider links nothing of libfabric at build time: it is loaded by
//! whichever libfabric the application runs (Debian's 1.17, or the 2.x that
//! the PyPI MPI packages bundle), and takes the core's exports from the
//! already loaded `libfabric.so.1` by name. `dlsym` returns each symbol's
//! default version, so `fi_dupinfo` allocates the running core's layout of
//! `fi_info` (its `fi_freeinfo` later frees what we return). Outside a
//! libfabric process (this crate's tests) nothing is found and every user
//! of the core falls back (no logging, parameters from the environment).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use crate::abi::{FiInfo, FiProvider};

type DupinfoFn = unsafe extern "C" fn(*const FiInfo) -> *mut FiInfo;
type FreeinfoFn = unsafe extern "C" fn(*mut FiInfo);
type VersionFn = unsafe extern "C" fn() -> u32;
type ParamDefineFn =
    unsafe extern "C" fn(*const FiProvider, *const c_char, c_int, *const c_char, ...) -> c_int;
type ParamGetFn = unsafe extern "C" fn(*const FiProvider, *const c_char, *mut c_void) -> c_int;
type LogEnabledFn = unsafe extern "C" fn(*const FiProvider, c_int, c_int) -> c_int;
type LogFn =
    unsafe extern "C" fn(*const FiProvider, c_int, c_int, *const c_char, c_int, *const c_char, ...);

/// The core's functions this provider calls.
pub struct Core {
    pub dupinfo: DupinfoFn,
    pub freeinfo: FreeinfoFn,
    /// The running core's version (`fi_version()`): which tail fields of
    /// its structs exist.
    pub version: u32,
    param_define: Option<ParamDefineFn>,
    param_get: Option<ParamGetFn>,
    log_enabled: Option<LogEnabledFn>,
    log: Option<LogFn>,
}

static CORE: OnceLock<Option<Core>> = OnceLock::new();

/// The loaded core, if this runs inside a libfabric process.
pub fn core() -> Option<&'static Core> {
    CORE.get_or_init(find).as_ref()
}

fn find() -> Option<Core> {
    // SAFETY: dlopen with RTLD_NOLOAD only returns a handle to a library
    // already loaded in the process (by soname), loading nothing.
    let handle = unsafe {
        libc::dlopen(
            c"libfabric.so.1".as_ptr(),
            libc::RTLD_NOLOAD | libc::RTLD_LAZY,
        )
    };
    let handle = if handle.is_null() {
        libc::RTLD_DEFAULT
    } else {
        handle
    };
    let sym = |name: &CStr| {
        // SAFETY: dlsym on a valid handle (or RTLD_DEFAULT) with a C string.
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    // SAFETY (each transmute): the symbols are libfabric's exported
    // functions with these prototypes (rdma/fabric.h, rdma/providers/fi_prov.h
    // and fi_log.h, unchanged between 1.17 and 2.x).
    unsafe {
        let dupinfo: DupinfoFn = std::mem::transmute(sym(c"fi_dupinfo")?);
        let freeinfo: FreeinfoFn = std::mem::transmute(sym(c"fi_freeinfo")?);
        let version: VersionFn = std::mem::transmute(sym(c"fi_version")?);
        Some(Core {
            dupinfo,
            freeinfo,
            version: version(),
            param_define: sym(c"fi_param_define").map(|p| std::mem::transmute(p)),
            param_get: sym(c"fi_param_get").map(|p| std::mem::transmute(p)),
            log_enabled: sym(c"fi_log_enabled").map(|p| std::mem::transmute(p)),
            log: sym(c"fi_log").map(|p| std::mem::transmute(p)),
        })
    }
}

/// Declare a string parameter: `FI_LLC_<NAME>` (listed by `fi_info -e`).
pub fn define_param(name: &CStr, help: &str) {
    let prov = crate::provider();
    let Some(define) = core().and_then(|c| c.param_define) else {
        return;
    };
    if prov.is_null() {
        return;
    }
    let help = CString::new(help).unwrap_or_default();
    // SAFETY: a provider pointer the core registered (or is registering),
    // NUL-terminated strings, and a "%s" format with one string argument.
    unsafe {
        define(
            prov,
            name.as_ptr(),
            crate::abi::FI_PARAM_STRING,
            c"%s".as_ptr(),
            help.as_ptr(),
        );
    }
}

/// A string parameter's value: through the core (which reads
/// `FI_LLC_<NAME>` from the environment and its own configuration), or
/// from the environment when there is no core.
pub fn param(name: &CStr) -> Option<String> {
    let prov = crate::provider();
    if let Some(get) = core().and_then(|c| c.param_get).filter(|_| !prov.is_null()) {
        let mut value: *mut c_char = std::ptr::null_mut();
        // SAFETY: the parameter was defined as a string, so the core
        // writes a `char *` (which it owns) into `value`.
        let rc = unsafe { get(prov, name.as_ptr(), (&mut value as *mut *mut c_char).cast()) };
        if rc == 0 && !value.is_null() {
            // SAFETY: the core returned a NUL-terminated string.
            return Some(
                unsafe { CStr::from_ptr(value) }
                    .to_string_lossy()
                    .into_owned(),
            );
        }
        return None;
    }
    let var = format!("FI_LLC_{}", name.to_string_lossy().to_uppercase());
    std::env::var(var).ok()
}

/// Log through the core's logger (`FI_LOG_LEVEL`, `FI_LOG_PROV`), if it
/// is enabled for `level` and `subsys`.
pub fn log(level: c_int, subsys: c_int, func: &CStr, msg: &str) {
    let prov = crate::provider();
    let Some(core) = core() else {
        return;
    };
    let (Some(enabled), Some(log)) = (core.log_enabled, core.log) else {
        return;
    };
    if prov.is_null() {
        return;
    }
    // SAFETY: a registered provider; the core's own check.
    if unsafe { enabled(prov, level, subsys) } == 0 {
        return;
    }
    let msg = CString::new(format!("{msg}\n")).unwrap_or_default();
    // SAFETY: valid strings and a "%s" format with one string argument.
    unsafe {
        log(
            prov,
            level,
            subsys,
            func.as_ptr(),
            0,
            c"%s".as_ptr(),
            msg.as_ptr(),
        )
    };
}
