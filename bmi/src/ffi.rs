//! The C API (`include/bmi.h`, `libbmi.so`): PVFS2's BMI calls and types,
//! the version with contexts.
//!
//! Calls return 0 on success (a post: 1 when it completed at once, 0 when
//! it is pending) and a negative errno-style code on error;
//! `BMI_strerror` says a code in words and `BMI_last_error` the calling
//! thread's last failure in detail. One library instance per process,
//! between `BMI_initialize` and `BMI_finalize`; every call is thread-safe.
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]

use std::alloc::Layout;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::error::{describe, BmiError};
use crate::runtime::{Done, Posted};
use crate::{Bmi, InitFlags, MethodKind, MAX_MESSAGE};

/// An operation's handle.
pub type bmi_op_id_t = i64;
/// An address's handle (never 0).
pub type bmi_addr_t = i64;
/// PVFS2's spelling of [`bmi_addr_t`].
pub type BMI_addr_t = bmi_addr_t;
/// A message size.
pub type bmi_size_t = i64;
/// A message tag.
pub type bmi_msg_tag_t = i32;
/// A context's handle.
pub type bmi_context_id = c_int;
/// An operation's result: 0 or a negative errno-style code.
pub type bmi_error_code_t = i32;

/// Where a buffer came from: `BMI_memalloc` (`BMI_PRE_ALLOC`) or anywhere
/// (`BMI_EXT_ALLOC`). Both are accepted everywhere and handled alike.
#[repr(C)]
pub enum bmi_buffer_type {
    /// From `BMI_memalloc`.
    BMI_PRE_ALLOC = 0,
    /// The caller's own memory.
    BMI_EXT_ALLOC = 1,
}

/// Which direction a buffer is for (`BMI_memalloc`).
#[repr(C)]
pub enum bmi_op_type {
    /// Sending.
    BMI_SEND = 0,
    /// Receiving.
    BMI_RECV = 1,
}

/// An unexpected message (`BMI_testunexpected`). `buffer` is the library's:
/// give it back with `BMI_unexpected_free` (or `free`).
#[repr(C)]
pub struct BMI_unexpected_info {
    /// 0, or why the message could not be taken (`-EMSGSIZE`: above the
    /// unexpected limit; `buffer` is then NULL and `size` the message's).
    pub error_code: bmi_error_code_t,
    /// The sender: reply to it.
    pub addr: bmi_addr_t,
    /// The data.
    pub buffer: *mut c_void,
    /// Its size.
    pub size: bmi_size_t,
    /// Its tag.
    pub tag: bmi_msg_tag_t,
}

/// The limits of one method (`BMI_GET_METHOD_INFO`): set `method`, get the rest.
#[repr(C)]
pub struct BMI_method_info {
    /// In: `"bmi_llc"` or `"bmi_tcp"`.
    pub method: *const c_char,
    /// Out: messages up to this size go eagerly.
    pub eager_limit: bmi_size_t,
    /// Out: the largest message (sent by rendezvous above the eager limit).
    pub rendezvous_limit: bmi_size_t,
    /// Out: the largest unexpected message.
    pub unexpected_limit: bmi_size_t,
}

/// `BMI_initialize` flag: listen at the given addresses.
pub const BMI_INIT_SERVER: c_int = 1;

/// set_info: forget an address; its pending receives are cancelled.
pub const BMI_DROP_ADDR: c_int = 1;
/// get_info: 0 when initialized.
pub const BMI_CHECK_INIT: c_int = 2;
/// get_info (`int *`): the largest message every method carries, capped at INT_MAX.
pub const BMI_CHECK_MAXSIZE: c_int = 3;
/// Not supported (PVFS2's method-private address).
pub const BMI_GET_METH_ADDR: c_int = 4;
/// set_info: accepted, no effect (addresses live until dropped or finalize).
pub const BMI_INC_ADDR_REF: c_int = 5;
/// set_info: accepted, no effect.
pub const BMI_DEC_ADDR_REF: c_int = 6;
/// get_info (`int *`): the unexpected limit of the address's method (the
/// first method's for address 0).
pub const BMI_GET_UNEXP_SIZE: c_int = 9;
/// get_info / set_info (`bmi_size_t *`): the eager limit of the address's
/// method (the first method's for address 0).
pub const BMI_EAGER_LIMIT: c_int = 100;
/// get_info (`bmi_size_t *`): the largest message of the address's method.
pub const BMI_RENDEZVOUS_LIMIT: c_int = 101;
/// set_info (`bmi_size_t *`): the unexpected limit of the address's method.
pub const BMI_SET_UNEXP_SIZE: c_int = 102;
/// get_info (`struct BMI_method_info *`): one method's limits by name.
pub const BMI_GET_METHOD_INFO: c_int = 103;

static LIB: RwLock<Option<Arc<Bmi>>> = RwLock::new(None);

/// Memory from `BMI_memalloc`: address to layout.
static MEMORY: Mutex<Option<HashMap<usize, Layout>>> = Mutex::new(None);

fn fail(e: BmiError) -> c_int {
    app_runtime::cabi::set_last_error(&e.to_string());
    e.code()
}

fn lib() -> Result<Arc<Bmi>, BmiError> {
    LIB.read().clone().ok_or(BmiError::NotInitialized)
}

/// Run `f`, turning errors and panics into codes (`app_runtime::cabi`).
fn guard(f: impl FnOnce() -> Result<c_int, BmiError>) -> c_int {
    let on_panic = BmiError::Transport("internal error (panic); see stderr".into()).code();
    app_runtime::cabi::call("libbmi", on_panic, f)
}

fn invalid(what: &str) -> BmiError {
    BmiError::Invalid(what.to_string())
}

unsafe fn opt_str<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, BmiError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map(Some)
        .map_err(|_| invalid(&format!("{what} is not UTF-8")))
}

fn idle(ms: c_int) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

/// Write `v` through `p` when `p` is not null.
unsafe fn put<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: the caller passes a valid pointer or null.
        unsafe { p.write(v) };
    }
}

fn posted(p: Posted, id: *mut bmi_op_id_t, actual: *mut bmi_size_t) -> Result<c_int, BmiError> {
    match p {
        Posted::Now(d) => {
            // SAFETY: checked non-null by the callers; `actual` may be null.
            unsafe {
                put(id, d.op);
            }
            // A receive that failed at once still says the message's size
            // when it was too long for the buffer.
            let (_, n) = code_of(&d);
            // SAFETY: as above.
            unsafe { put(actual, n) };
            d.result?;
            Ok(1)
        }
        Posted::Pending(op) => {
            // SAFETY: as above.
            unsafe { put(id, op) };
            Ok(0)
        }
    }
}

fn code_of(d: &Done) -> (bmi_error_code_t, bmi_size_t) {
    match &d.result {
        Ok(n) => (0, *n as bmi_size_t),
        Err(BmiError::Truncated { len, .. }) => (
            BmiError::Truncated {
                len: *len,
                expected: 0,
            }
            .code(),
            *len as bmi_size_t,
        ),
        Err(e) => (e.code(), 0),
    }
}

/// Start BMI with the methods of `method_list` (`"bmi_llc"`, `"bmi_tcp"`,
/// or `"bmi_llc,bmi_tcp"`), listening at `listen_addr` (one address per
/// method, comma-separated: a transport spec, `llc://IFACE?port=PORT`
/// or `tcp://HOST:PORT`; needed with
/// `BMI_INIT_SERVER`, optional for a client).
#[no_mangle]
pub unsafe extern "C" fn BMI_initialize(
    method_list: *const c_char,
    listen_addr: *const c_char,
    flags: c_int,
) -> c_int {
    guard(|| {
        // SAFETY: NUL-terminated strings or null.
        let methods = unsafe { opt_str(method_list, "method_list") }?
            .ok_or_else(|| invalid("method_list is NULL: expected e.g. \"bmi_llc\""))?;
        // SAFETY: as above.
        let listen = unsafe { opt_str(listen_addr, "listen_addr") }?;
        let mut g = LIB.write();
        if g.is_some() {
            return Err(BmiError::AlreadyInitialized);
        }
        let flags = InitFlags {
            server: flags & BMI_INIT_SERVER != 0,
            // The key, if any, comes from LLC_AUTH_KEY (PVFS2's call has no
            // place for one).
            auth_key: None,
        };
        *g = Some(Arc::new(Bmi::initialize(methods, listen, flags)?));
        Ok(0)
    })
}

/// Stop BMI: deliver what is queued (bounded), close every connection,
/// forget every address, context and operation.
#[no_mangle]
pub extern "C" fn BMI_finalize() -> c_int {
    guard(|| {
        let lib = LIB.write().take().ok_or(BmiError::NotInitialized)?;
        drop(lib);
        Ok(0)
    })
}

/// Open a context.
#[no_mangle]
pub unsafe extern "C" fn BMI_open_context(context_id: *mut bmi_context_id) -> c_int {
    guard(|| {
        if context_id.is_null() {
            return Err(invalid("context_id is NULL"));
        }
        let c = lib()?.open_context();
        // SAFETY: checked non-null.
        unsafe { context_id.write(c) };
        Ok(0)
    })
}

/// Close a context; its pending operations are cancelled and forgotten.
#[no_mangle]
pub extern "C" fn BMI_close_context(context_id: bmi_context_id) {
    let _ = guard(|| lib()?.close_context(context_id).map(|_| 0));
}

/// Send `size` bytes at `buffer` to `dest` with `tag`. Returns 1 when done
/// at once (the buffer may be reused), 0 when pending (keep the buffer
/// until a test reports the operation), or a negative code.
#[no_mangle]
pub unsafe extern "C" fn BMI_post_send(
    id: *mut bmi_op_id_t,
    dest: bmi_addr_t,
    buffer: *const c_void,
    size: bmi_size_t,
    buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        send(
            id,
            dest,
            buffer,
            size,
            buffer_type,
            tag,
            user_ptr,
            context_id,
            false,
        )
    }
}

/// Send an unexpected message (at most `BMI_GET_UNEXP_SIZE` bytes): the
/// peer takes it with `BMI_testunexpected` without having posted a receive.
#[no_mangle]
pub unsafe extern "C" fn BMI_post_sendunexpected(
    id: *mut bmi_op_id_t,
    dest: bmi_addr_t,
    buffer: *const c_void,
    size: bmi_size_t,
    buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        send(
            id,
            dest,
            buffer,
            size,
            buffer_type,
            tag,
            user_ptr,
            context_id,
            true,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn send(
    id: *mut bmi_op_id_t,
    dest: bmi_addr_t,
    buffer: *const c_void,
    size: bmi_size_t,
    _buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
    unexpected: bool,
) -> c_int {
    guard(|| {
        if id.is_null() {
            return Err(invalid("id is NULL"));
        }
        if size < 0 || (buffer.is_null() && size > 0) {
            return Err(invalid("buffer is NULL or size negative"));
        }
        let p = lib()?.post_send_raw(
            dest,
            buffer.cast(),
            size as usize,
            tag,
            user_ptr as usize,
            context_id,
            unexpected,
        )?;
        posted(p, id, std::ptr::null_mut())
    })
}

/// Receive a message of at most `expected_size` bytes from `src` with
/// `tag` into `buffer`. Returns 1 when it was there already
/// (`*actual_size` says its size), 0 when pending, or a negative code.
#[no_mangle]
pub unsafe extern "C" fn BMI_post_recv(
    id: *mut bmi_op_id_t,
    src: bmi_addr_t,
    buffer: *mut c_void,
    expected_size: bmi_size_t,
    actual_size: *mut bmi_size_t,
    _buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
) -> c_int {
    guard(|| {
        if id.is_null() {
            return Err(invalid("id is NULL"));
        }
        if expected_size < 0 || (buffer.is_null() && expected_size > 0) {
            return Err(invalid("buffer is NULL or expected_size negative"));
        }
        let p = lib()?.post_recv_raw(
            src,
            vec![(buffer.cast(), expected_size as usize)],
            tag,
            user_ptr as usize,
            context_id,
        )?;
        posted(p, id, actual_size)
    })
}

unsafe fn list<'a, P>(
    buffers: *const P,
    sizes: *const bmi_size_t,
    count: c_int,
    total: bmi_size_t,
) -> Result<(&'a [P], &'a [bmi_size_t]), BmiError> {
    if count <= 0 || buffers.is_null() || sizes.is_null() {
        return Err(invalid("empty list, or a NULL buffer or size list"));
    }
    // SAFETY: the caller passes `count` entries in each list.
    let (b, s) = unsafe {
        (
            std::slice::from_raw_parts(buffers, count as usize),
            std::slice::from_raw_parts(sizes, count as usize),
        )
    };
    if s.iter().any(|&n| n < 0) {
        return Err(invalid("a negative size in the list"));
    }
    let sum: i64 = s.iter().sum();
    if sum != total {
        return Err(invalid(&format!(
            "the list's sizes add up to {sum}, not the total {total}"
        )));
    }
    Ok((b, s))
}

#[allow(clippy::too_many_arguments)]
unsafe fn send_list(
    id: *mut bmi_op_id_t,
    dest: bmi_addr_t,
    buffer_list: *const *const c_void,
    size_list: *const bmi_size_t,
    list_count: c_int,
    total_size: bmi_size_t,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
    unexpected: bool,
) -> c_int {
    guard(|| {
        if id.is_null() {
            return Err(invalid("id is NULL"));
        }
        // SAFETY: the caller's lists.
        let (bufs, sizes) = unsafe { list(buffer_list, size_list, list_count, total_size) }?;
        let lib = lib()?;
        let p = if let ([b], [n]) = (bufs, sizes) {
            lib.post_send_raw(
                dest,
                b.cast(),
                *n as usize,
                tag,
                user_ptr as usize,
                context_id,
                unexpected,
            )?
        } else {
            let mut data = Vec::with_capacity(total_size as usize);
            for (&b, &n) in bufs.iter().zip(sizes) {
                if b.is_null() && n > 0 {
                    return Err(invalid("a NULL buffer in the list"));
                }
                if n > 0 {
                    // SAFETY: the caller's buffer of `n` bytes.
                    data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(b.cast::<u8>(), n as usize)
                    });
                }
            }
            let ctx = context_id;
            if unexpected {
                lib.post_sendunexpected(dest, data, tag, user_ptr as usize, ctx)?
            } else {
                lib.post_send(dest, data, tag, user_ptr as usize, ctx)?
            }
        };
        posted(p, id, std::ptr::null_mut())
    })
}

/// `BMI_post_send` of the concatenation of `list_count` buffers.
#[no_mangle]
pub unsafe extern "C" fn BMI_post_send_list(
    id: *mut bmi_op_id_t,
    dest: bmi_addr_t,
    buffer_list: *const *const c_void,
    size_list: *const bmi_size_t,
    list_count: c_int,
    total_size: bmi_size_t,
    _buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        send_list(
            id,
            dest,
            buffer_list,
            size_list,
            list_count,
            total_size,
            tag,
            user_ptr,
            context_id,
            false,
        )
    }
}

/// `BMI_post_sendunexpected` of the concatenation of `list_count` buffers.
#[no_mangle]
pub unsafe extern "C" fn BMI_post_sendunexpected_list(
    id: *mut bmi_op_id_t,
    dest: bmi_addr_t,
    buffer_list: *const *const c_void,
    size_list: *const bmi_size_t,
    list_count: c_int,
    total_size: bmi_size_t,
    _buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
) -> c_int {
    // SAFETY: forwarded.
    unsafe {
        send_list(
            id,
            dest,
            buffer_list,
            size_list,
            list_count,
            total_size,
            tag,
            user_ptr,
            context_id,
            true,
        )
    }
}

/// `BMI_post_recv` into `list_count` buffers, filled in order.
#[no_mangle]
pub unsafe extern "C" fn BMI_post_recv_list(
    id: *mut bmi_op_id_t,
    src: bmi_addr_t,
    buffer_list: *const *mut c_void,
    size_list: *const bmi_size_t,
    list_count: c_int,
    total_expected_size: bmi_size_t,
    total_actual_size: *mut bmi_size_t,
    _buffer_type: c_int,
    tag: bmi_msg_tag_t,
    user_ptr: *mut c_void,
    context_id: bmi_context_id,
) -> c_int {
    guard(|| {
        if id.is_null() {
            return Err(invalid("id is NULL"));
        }
        // SAFETY: the caller's lists.
        let (bufs, sizes) =
            unsafe { list(buffer_list, size_list, list_count, total_expected_size) }?;
        if bufs.iter().zip(sizes).any(|(b, &n)| b.is_null() && n > 0) {
            return Err(invalid("a NULL buffer in the list"));
        }
        let segs = bufs
            .iter()
            .zip(sizes)
            .map(|(&b, &n)| (b.cast::<u8>(), n as usize))
            .collect();
        let p = lib()?.post_recv_raw(src, segs, tag, user_ptr as usize, context_id)?;
        posted(p, id, total_actual_size)
    })
}

/// Test one operation, waiting up to `max_idle_time_ms` for it. On
/// completion `*outcount` is 1 and the other outputs are set (and the
/// operation is forgotten); otherwise `*outcount` is 0.
#[no_mangle]
pub unsafe extern "C" fn BMI_test(
    id: bmi_op_id_t,
    outcount: *mut c_int,
    error_code: *mut bmi_error_code_t,
    actual_size: *mut bmi_size_t,
    user_ptr: *mut *mut c_void,
    max_idle_time_ms: c_int,
    context_id: bmi_context_id,
) -> c_int {
    guard(|| {
        if outcount.is_null() {
            return Err(invalid("outcount is NULL"));
        }
        let done = lib()?.test(id, context_id, idle(max_idle_time_ms))?;
        // SAFETY: checked non-null; the others may be null.
        unsafe {
            outcount.write(done.is_some() as c_int);
            if let Some(d) = done {
                let (e, n) = code_of(&d);
                put(error_code, e);
                put(actual_size, n);
                put(user_ptr, d.user as *mut c_void);
            }
        }
        Ok(0)
    })
}

/// Test `incount` operations (ids of 0 are skipped), waiting up to
/// `max_idle_time_ms` for one. `*outcount` completed; for each, its index
/// in `id_array` and its results, in the output arrays' first `*outcount`
/// places.
#[no_mangle]
pub unsafe extern "C" fn BMI_testsome(
    incount: c_int,
    id_array: *const bmi_op_id_t,
    outcount: *mut c_int,
    index_array: *mut c_int,
    error_code_array: *mut bmi_error_code_t,
    actual_size_array: *mut bmi_size_t,
    user_ptr_array: *mut *mut c_void,
    max_idle_time_ms: c_int,
    context_id: bmi_context_id,
) -> c_int {
    guard(|| {
        if outcount.is_null() || index_array.is_null() || error_code_array.is_null() {
            return Err(invalid("outcount, index_array or error_code_array is NULL"));
        }
        if incount < 0 || (incount > 0 && id_array.is_null()) {
            return Err(invalid("id_array is NULL or incount negative"));
        }
        // SAFETY: `incount` ids.
        let ids = if incount == 0 {
            &[][..]
        } else {
            unsafe { std::slice::from_raw_parts(id_array, incount as usize) }
        };
        let got = lib()?.testsome(ids, context_id, idle(max_idle_time_ms))?;
        // SAFETY: the output arrays hold `incount` entries; at most that many completed.
        unsafe {
            outcount.write(got.len() as c_int);
            for (k, (i, d)) in got.iter().enumerate() {
                let (e, n) = code_of(d);
                index_array.add(k).write(*i as c_int);
                error_code_array.add(k).write(e);
                if !actual_size_array.is_null() {
                    actual_size_array.add(k).write(n);
                }
                if !user_ptr_array.is_null() {
                    user_ptr_array.add(k).write(d.user as *mut c_void);
                }
            }
        }
        Ok(0)
    })
}

/// Up to `incount` completed operations of the context, in completion
/// order, waiting up to `max_idle_time_ms` for one.
#[no_mangle]
pub unsafe extern "C" fn BMI_testcontext(
    incount: c_int,
    out_id_array: *mut bmi_op_id_t,
    outcount: *mut c_int,
    error_code_array: *mut bmi_error_code_t,
    actual_size_array: *mut bmi_size_t,
    user_ptr_array: *mut *mut c_void,
    max_idle_time_ms: c_int,
    context_id: bmi_context_id,
) -> c_int {
    guard(|| {
        if outcount.is_null() || out_id_array.is_null() || error_code_array.is_null() {
            return Err(invalid(
                "outcount, out_id_array or error_code_array is NULL",
            ));
        }
        if incount <= 0 {
            return Err(invalid("incount must be at least 1"));
        }
        let got = lib()?.testcontext(incount as usize, context_id, idle(max_idle_time_ms))?;
        // SAFETY: the output arrays hold `incount` entries; at most that many came.
        unsafe {
            outcount.write(got.len() as c_int);
            for (k, d) in got.iter().enumerate() {
                let (e, n) = code_of(d);
                out_id_array.add(k).write(d.op);
                error_code_array.add(k).write(e);
                if !actual_size_array.is_null() {
                    actual_size_array.add(k).write(n);
                }
                if !user_ptr_array.is_null() {
                    user_ptr_array.add(k).write(d.user as *mut c_void);
                }
            }
        }
        Ok(0)
    })
}

/// Up to `incount` unexpected messages, in arrival order, waiting up to
/// `max_idle_time_ms` for one. Each buffer is the caller's to give back
/// with `BMI_unexpected_free`.
#[no_mangle]
pub unsafe extern "C" fn BMI_testunexpected(
    incount: c_int,
    outcount: *mut c_int,
    info_array: *mut BMI_unexpected_info,
    max_idle_time_ms: c_int,
) -> c_int {
    guard(|| {
        if outcount.is_null() || info_array.is_null() {
            return Err(invalid("outcount or info_array is NULL"));
        }
        if incount <= 0 {
            return Err(invalid("incount must be at least 1"));
        }
        let lib = lib()?;
        let got = lib.testunexpected(incount as usize, idle(max_idle_time_ms))?;
        // SAFETY: `info_array` holds `incount` entries; at most that many came.
        unsafe {
            outcount.write(got.len() as c_int);
            for (k, u) in got.into_iter().enumerate() {
                let info = match &u.result {
                    Ok(d) => {
                        let data = d.data();
                        let buf = libc::malloc(data.len().max(1)) as *mut u8;
                        if buf.is_null() {
                            return Err(BmiError::Transport("out of memory".into()));
                        }
                        std::ptr::copy_nonoverlapping(data.as_ptr(), buf, data.len());
                        BMI_unexpected_info {
                            error_code: 0,
                            addr: u.addr,
                            buffer: buf.cast(),
                            size: data.len() as bmi_size_t,
                            tag: u.tag,
                        }
                    }
                    Err(e) => BMI_unexpected_info {
                        error_code: e.code(),
                        addr: u.addr,
                        buffer: std::ptr::null_mut(),
                        size: match e {
                            BmiError::UnexpectedTooLong { len, .. } => *len as bmi_size_t,
                            _ => 0,
                        },
                        tag: u.tag,
                    },
                };
                info_array.add(k).write(info);
                lib.unexpected_free(u);
            }
        }
        Ok(0)
    })
}

/// Give back the buffer of an unexpected message.
#[no_mangle]
pub unsafe extern "C" fn BMI_unexpected_free(_addr: bmi_addr_t, buffer: *mut c_void) -> c_int {
    // SAFETY: a buffer from BMI_testunexpected (malloc), or null.
    unsafe { libc::free(buffer) };
    0
}

/// Cancel an operation: a receive not matched yet completes with
/// `-ECANCELED` (test it as usual); one already moving completes as it would.
#[no_mangle]
pub extern "C" fn BMI_cancel(id: bmi_op_id_t, context_id: bmi_context_id) -> c_int {
    guard(|| lib()?.cancel(id, context_id).map(|_| 0))
}

/// `size` bytes of memory for messages (page-aligned), or NULL.
#[no_mangle]
pub extern "C" fn BMI_memalloc(
    _addr: bmi_addr_t,
    size: bmi_size_t,
    _send_recv: c_int,
) -> *mut c_void {
    if size < 0 {
        fail(invalid("negative size"));
        return std::ptr::null_mut();
    }
    let Ok(layout) = Layout::from_size_align((size as usize).max(1), 4096) else {
        fail(invalid("size too large"));
        return std::ptr::null_mut();
    };
    // SAFETY: the layout has a non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        fail(BmiError::Transport("out of memory".into()));
        return std::ptr::null_mut();
    }
    MEMORY
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(p as usize, layout);
    p.cast()
}

/// Free memory from `BMI_memalloc` (`-EINVAL` for any other pointer,
/// which is left alone).
#[no_mangle]
pub extern "C" fn BMI_memfree(
    _addr: bmi_addr_t,
    buffer: *mut c_void,
    _size: bmi_size_t,
    _send_recv: c_int,
) -> c_int {
    let layout = MEMORY
        .lock()
        .as_mut()
        .and_then(|m| m.remove(&(buffer as usize)));
    match layout {
        Some(l) => {
            // SAFETY: allocated by BMI_memalloc with this layout, freed once.
            unsafe { std::alloc::dealloc(buffer.cast(), l) };
            0
        }
        None => fail(invalid("not a buffer from BMI_memalloc (or freed already)")),
    }
}

/// Set an option (`BMI_DROP_ADDR`, `BMI_EAGER_LIMIT`, `BMI_SET_UNEXP_SIZE`,
/// `BMI_INC_ADDR_REF`, `BMI_DEC_ADDR_REF`).
#[no_mangle]
pub unsafe extern "C" fn BMI_set_info(
    addr: bmi_addr_t,
    option: c_int,
    inout_parameter: *mut c_void,
) -> c_int {
    guard(|| {
        let lib = lib()?;
        let size_arg = || -> Result<u64, BmiError> {
            if inout_parameter.is_null() {
                return Err(invalid("inout_parameter is NULL"));
            }
            // SAFETY: the option's documented type, `bmi_size_t *`.
            let v = unsafe { *(inout_parameter as *const bmi_size_t) };
            u64::try_from(v).map_err(|_| invalid("negative size"))
        };
        match option {
            BMI_DROP_ADDR => lib.drop_addr(addr).map(|_| 0),
            BMI_INC_ADDR_REF | BMI_DEC_ADDR_REF => Ok(0),
            BMI_EAGER_LIMIT => {
                let m = method_for(&lib, addr)?;
                lib.set_eager_limit(m, size_arg()?).map(|_| 0)
            }
            BMI_SET_UNEXP_SIZE => {
                let m = method_for(&lib, addr)?;
                lib.set_unexpected_limit(m, size_arg()?).map(|_| 0)
            }
            o => Err(unknown_option(o)),
        }
    })
}

fn unknown_option(o: c_int) -> BmiError {
    match o {
        1..=15 => BmiError::Unsupported(o),
        _ => invalid(&format!("unknown option {o}")),
    }
}

/// The method of `addr`, or the first method for address 0.
fn method_for(lib: &Bmi, addr: bmi_addr_t) -> Result<MethodKind, BmiError> {
    if addr == 0 {
        return Ok(lib.methods()[0]);
    }
    Ok(lib.limits_of(addr)?.method)
}

/// Read an option (`BMI_CHECK_INIT`, `BMI_CHECK_MAXSIZE`,
/// `BMI_GET_UNEXP_SIZE`, `BMI_EAGER_LIMIT`, `BMI_RENDEZVOUS_LIMIT`,
/// `BMI_GET_METHOD_INFO`).
#[no_mangle]
pub unsafe extern "C" fn BMI_get_info(
    addr: bmi_addr_t,
    option: c_int,
    inout_parameter: *mut c_void,
) -> c_int {
    guard(|| {
        if option == BMI_CHECK_INIT {
            return lib().map(|_| 0);
        }
        let lib = lib()?;
        if inout_parameter.is_null() {
            return Err(invalid("inout_parameter is NULL"));
        }
        match option {
            BMI_CHECK_MAXSIZE => {
                let v = MAX_MESSAGE.min(c_int::MAX as u64) as c_int;
                // SAFETY: the option's type, `int *`.
                unsafe { *(inout_parameter as *mut c_int) = v };
                Ok(0)
            }
            BMI_GET_UNEXP_SIZE => {
                let l = lib.method_limits(method_for(&lib, addr)?)?;
                // SAFETY: the option's type, `int *`.
                unsafe { *(inout_parameter as *mut c_int) = l.unexpected_limit as c_int };
                Ok(0)
            }
            BMI_EAGER_LIMIT | BMI_RENDEZVOUS_LIMIT => {
                let l = lib.method_limits(method_for(&lib, addr)?)?;
                let v = if option == BMI_EAGER_LIMIT {
                    l.eager_limit
                } else {
                    l.rendezvous_limit
                };
                // SAFETY: the option's type, `bmi_size_t *`.
                unsafe {
                    *(inout_parameter as *mut bmi_size_t) = v.min(i64::MAX as u64) as bmi_size_t
                };
                Ok(0)
            }
            BMI_GET_METHOD_INFO => {
                // SAFETY: the option's type, `struct BMI_method_info *`.
                let info = unsafe { &mut *(inout_parameter as *mut BMI_method_info) };
                // SAFETY: a NUL-terminated string or null.
                let name = unsafe { opt_str(info.method, "method") }?
                    .ok_or_else(|| invalid("BMI_method_info.method is NULL"))?;
                let l = lib.method_limits(MethodKind::from_name(name)?)?;
                info.eager_limit = l.eager_limit as bmi_size_t;
                info.rendezvous_limit = l.rendezvous_limit.min(i64::MAX as u64) as bmi_size_t;
                info.unexpected_limit = l.unexpected_limit as bmi_size_t;
                Ok(0)
            }
            o => Err(unknown_option(o)),
        }
    })
}

/// Look a peer's address up (`[MAC]:PORT`, `HOST:PORT`): its
/// form is checked now; it is connected at first use. The same string
/// gives the same handle.
#[no_mangle]
pub unsafe extern "C" fn BMI_addr_lookup(
    new_addr: *mut bmi_addr_t,
    id_string: *const c_char,
) -> c_int {
    guard(|| {
        if new_addr.is_null() {
            return Err(invalid("new_addr is NULL"));
        }
        // SAFETY: NUL-terminated string or null.
        let s = unsafe { opt_str(id_string, "id_string") }?
            .ok_or_else(|| invalid("id_string is NULL"))?;
        let a = lib()?.addr_lookup(s)?;
        // SAFETY: checked non-null.
        unsafe { new_addr.write(a) };
        Ok(0)
    })
}

/// The string of an address (valid until `BMI_finalize`), or NULL for an
/// unknown one.
#[no_mangle]
pub extern "C" fn BMI_addr_rev_lookup(addr: bmi_addr_t) -> *const c_char {
    let Ok(lib) = lib() else {
        fail(BmiError::NotInitialized);
        return std::ptr::null();
    };
    match lib.inner.rev_lookup_ptr(addr) {
        Some(p) => p,
        None => {
            fail(BmiError::UnknownAddress(addr));
            std::ptr::null()
        }
    }
}

/// What a code returned by BMI means, in words (a static string).
#[no_mangle]
pub extern "C" fn BMI_strerror(code: c_int) -> *const c_char {
    describe(code).as_ptr()
}

/// The calling thread's last failure in detail (valid until its next
/// failing call).
#[no_mangle]
pub extern "C" fn BMI_last_error() -> *const c_char {
    app_runtime::cabi::last_error_ptr()
}
