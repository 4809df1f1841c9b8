//! The C API of the seed (`include/deck.h`, generated from this file):
//! every primitive with the seed's signature, so the seed's programs
//! compile unchanged. Every call is thread-safe; errors are negative
//! `DECK_E*` codes, `deck_strerror` says each in words and
//! `deck_last_error` gives the calling thread's last failure in full.
#![allow(non_camel_case_types)]

use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int, c_ulong};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::DeckError;
use crate::mailbox::{inner_of, Deck};
use crate::msg::{refill, Cursor, DataType, NESTED_HEADER};
use crate::runtime::{Inner, MboxAddr, RecvTarget, Taken};

/// `char`.
pub const DECK_CHAR: c_int = 1;
/// `short`.
pub const DECK_SHORT: c_int = 2;
/// `int`.
pub const DECK_INT: c_int = 3;
/// `long`.
pub const DECK_LONG: c_int = 4;
/// `float`.
pub const DECK_FLOAT: c_int = 5;
/// `double`.
pub const DECK_DOUBLE: c_int = 6;
/// Raw bytes.
pub const DECK_BYTE: c_int = 7;
/// A `deck_msg_t` packed inside another (the datum is an array of `n`
/// messages; unpacking fills messages made by `deck_msg_create`).
pub const DECK_MSG: c_int = 8;

pub use crate::codes::*;

/// `deck_mbox_t.kind` of a mailbox made by `deck_mbox_create`.
pub const DECK_MBOX_OWNED: c_int = 1;
/// `deck_mbox_t.kind` of a mailbox made by `deck_mbox_clone`.
pub const DECK_MBOX_CLONE: c_int = 2;

/// A mailbox's name.
pub type deck_name_t = *mut c_char;

/// A message: the seed's four fields, then `needed` (after a retrieve
/// failed with `DECK_EMSGSIZE`: the size the waiting message needs) and
/// two fields DECK checks its buffer with (do not change them).
#[repr(C)]
pub struct deck_msg_t {
    /// The buffer (`size` bytes).
    pub buf: *mut c_char,
    /// Room in bytes.
    pub size: c_ulong,
    /// Bytes of data.
    pub datalen: c_ulong,
    /// Where the next pack writes and the next unpack reads.
    pub cursor: *mut c_char,
    /// Size of the message a retrieve could not take (0 otherwise).
    pub needed: c_ulong,
    /// The buffer as allocated (private).
    pub _base: *mut c_char,
    /// Its size as allocated (private).
    pub _alloc: c_ulong,
}

/// A mailbox handle: owned (create) or a clone (clone).
#[repr(C)]
pub struct deck_mbox_t {
    /// The owner's node.
    pub node: c_ulong,
    /// The mailbox's number on that node.
    pub id: c_ulong,
    /// `DECK_MBOX_OWNED` or `DECK_MBOX_CLONE` (anything else: not made by
    /// create or clone).
    pub kind: c_int,
}

/// The process's DECK, between `deck_init` and `deck_done`.
static DECK: Mutex<Option<Deck>> = Mutex::new(None);

/// Run a call: its error becomes a code (and the thread's last error), a
/// panic `DECK_EINVAL` instead of unwinding into C (`app_runtime::cabi`).
fn call(f: impl FnOnce() -> Result<(), DeckError>) -> c_int {
    app_runtime::cabi::call("libdeck", DECK_EINVAL, || f().map(|()| 0))
}

fn runtime() -> Result<Arc<Inner>, DeckError> {
    DECK.lock()
        .as_ref()
        .map(|d| inner_of(d).clone())
        .ok_or(DeckError::NotInitialized)
}

fn invalid(what: &str) -> DeckError {
    DeckError::Invalid(what.to_owned())
}

/// Join the job `deckrun` started (or, started alone, a job of one node).
/// `argc` and `argv` may be null; DECK takes nothing from them.
///
/// # Safety
/// The pointers are not read.
#[no_mangle]
pub unsafe extern "C" fn deck_init(argc: *mut c_int, argv: *mut *mut *mut c_char) -> c_int {
    let _ = (argc, argv);
    call(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("DECK_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .try_init();
        let mut slot = DECK.lock();
        if slot.is_some() {
            return Err(invalid("deck_init was called already"));
        }
        match Deck::init() {
            Ok(d) => {
                *slot = Some(d);
                Ok(())
            }
            Err(e) => {
                eprintln!("deck: {e}");
                Err(e)
            }
        }
    })
}

/// Leave the job: a barrier with every node, then everything sent is
/// delivered and the connections close.
#[no_mangle]
pub extern "C" fn deck_done() -> c_int {
    call(|| {
        let d = DECK.lock().take().ok_or(DeckError::NotInitialized)?;
        d.done()
    })
}

/// This process's node number (0 before `deck_init`).
#[no_mangle]
pub extern "C" fn deck_node() -> c_ulong {
    runtime().map_or(0, |r| r.node().into())
}

/// Nodes in the job (0 before `deck_init`).
#[no_mangle]
pub extern "C" fn deck_numnodes() -> c_ulong {
    runtime().map_or(0, |r| r.numnodes().into())
}

/// Wait until every node reached the barrier.
#[no_mangle]
pub extern "C" fn deck_barrier() -> c_int {
    call(|| runtime()?.barrier())
}

/// What an error code means.
#[no_mangle]
pub extern "C" fn deck_strerror(code: c_int) -> *const c_char {
    crate::error::describe(code).as_ptr()
}

/// The calling thread's last failure, in full (empty when none). Valid
/// until the thread's next failing call.
#[no_mangle]
pub extern "C" fn deck_last_error() -> *const c_char {
    app_runtime::cabi::last_error_ptr()
}

// ----- messages -----

/// The checked view of a C message.
struct CMsg<'a> {
    m: &'a mut deck_msg_t,
}

impl<'a> CMsg<'a> {
    /// # Safety
    /// `m` is null or points to a `deck_msg_t` the caller lets DECK use
    /// alone for the call.
    unsafe fn new(m: *mut deck_msg_t) -> Result<CMsg<'a>, DeckError> {
        // SAFETY: the caller's contract.
        let m = unsafe { m.as_mut() }.ok_or_else(|| invalid("message is NULL"))?;
        let c = CMsg { m };
        c.check()?;
        Ok(c)
    }

    /// The message was made by `deck_msg_create` and its fields agree.
    fn check(&self) -> Result<(), DeckError> {
        let m = &self.m;
        if m._base.is_null() || m.buf != m._base || m.size != m._alloc {
            return Err(invalid(
                "message not made by deck_msg_create (or destroyed, or its buf/size changed)",
            ));
        }
        if m.datalen > m.size {
            return Err(invalid("message's datalen exceeds its size"));
        }
        let at = (m.cursor as usize).wrapping_sub(m.buf as usize);
        if m.cursor.is_null() || at > m.size as usize {
            return Err(invalid("message's cursor is outside its buffer"));
        }
        Ok(())
    }

    fn size(&self) -> usize {
        self.m.size as usize
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: checked in `new`: `buf` is the allocation of `size`
        // bytes made by `deck_msg_create`, used by this call alone.
        unsafe { std::slice::from_raw_parts_mut(self.m.buf.cast::<u8>(), self.size()) }
    }

    fn data(&self) -> &[u8] {
        // SAFETY: as in `bytes`; `datalen <= size` was checked.
        unsafe { std::slice::from_raw_parts(self.m.buf.cast::<u8>(), self.m.datalen as usize) }
    }

    /// Run `f` on the packing view; the fields follow what it did.
    fn with_cursor<R>(&mut self, f: impl FnOnce(&mut Cursor<'_>) -> R) -> R {
        let mut datalen = self.m.datalen as usize;
        let mut cursor = self.m.cursor as usize - self.m.buf as usize;
        let buf = self.m.buf;
        let r = f(&mut Cursor {
            buf: self.bytes(),
            datalen: &mut datalen,
            cursor: &mut cursor,
        });
        self.m.datalen = datalen as c_ulong;
        // SAFETY: the cursor stays within the buffer (`Cursor` checks).
        self.m.cursor = unsafe { buf.add(cursor) };
        r
    }

    /// Adopt the buffer `b` (message of `len` bytes at its start).
    fn adopt(&mut self, b: Box<[u8]>, len: usize) {
        let size = b.len();
        let p = Box::into_raw(b).cast::<c_char>();
        self.m.buf = p;
        self.set_base(p, size);
        self.m.datalen = len as c_ulong;
        self.m.cursor = p;
        self.m.needed = 0;
    }

    fn set_base(&mut self, p: *mut c_char, size: usize) {
        self.m._base = p;
        self.m._alloc = size as c_ulong;
        self.m.size = size as c_ulong;
    }
}

impl RecvTarget for CMsg<'_> {
    fn size(&self) -> usize {
        CMsg::size(self)
    }

    fn buffer(&mut self) -> &mut [u8] {
        self.bytes()
    }

    fn received(&mut self, len: usize) {
        self.m.datalen = len as c_ulong;
        self.m.cursor = self.m.buf;
        self.m.needed = 0;
    }

    fn set_needed(&mut self, needed: usize) {
        self.m.needed = needed as c_ulong;
    }

    fn take_buffer(&mut self) -> Vec<u8> {
        let size = self.size();
        let p = std::ptr::slice_from_raw_parts_mut(self.m.buf.cast::<u8>(), size);
        // SAFETY: `buf` is the boxed slice of `size` bytes
        // `deck_msg_create` leaked (checked in `new`); the message holds no
        // buffer until `restore_buffer` gives it one.
        let b = unsafe { Box::from_raw(p) };
        self.m.buf = std::ptr::null_mut();
        self.m._base = std::ptr::null_mut();
        b.into_vec()
    }

    fn restore_buffer(&mut self, buf: Vec<u8>, from: Taken) {
        let (b, len) = refill(buf, from);
        self.adopt(b, len);
    }
}

/// Make a message with room for `size` bytes (its buffer is DECK's; a
/// message received into it needs no copy when it is large).
///
/// # Safety
/// `m` is null or points to writable memory for a `deck_msg_t` (its old
/// contents are not read: a message created twice leaks its first buffer).
#[no_mangle]
pub unsafe extern "C" fn deck_msg_create(m: *mut deck_msg_t, size: c_ulong) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let m = unsafe { m.as_mut() }.ok_or_else(|| invalid("message is NULL"))?;
        let size = usize::try_from(size).map_err(|_| invalid("size"))?;
        let b = vec![0u8; size].into_boxed_slice();
        let p = Box::into_raw(b).cast::<c_char>();
        *m = deck_msg_t {
            buf: p,
            size: size as c_ulong,
            datalen: 0,
            cursor: p,
            needed: 0,
            _base: p,
            _alloc: size as c_ulong,
        };
        Ok(())
    })
}

/// Free a message's buffer.
///
/// # Safety
/// `m` is null or points to a message made by `deck_msg_create`.
#[no_mangle]
pub unsafe extern "C" fn deck_msg_destroy(m: *mut deck_msg_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { CMsg::new(m) }?;
        let size = c.size();
        let p = std::ptr::slice_from_raw_parts_mut(c.m.buf.cast::<u8>(), size);
        // SAFETY: checked: the boxed slice `deck_msg_create` leaked.
        drop(unsafe { Box::from_raw(p) });
        *c.m = deck_msg_t {
            buf: std::ptr::null_mut(),
            size: 0,
            datalen: 0,
            cursor: std::ptr::null_mut(),
            needed: 0,
            _base: std::ptr::null_mut(),
            _alloc: 0,
        };
        Ok(())
    })
}

/// The elements of a packed datum as bytes.
///
/// # Safety
/// `datum` points to `n` elements of `t` (not `DECK_MSG`).
unsafe fn datum_bytes<'a>(
    t: DataType,
    datum: *mut c_void,
    n: c_ulong,
) -> Result<&'a mut [u8], DeckError> {
    let size = t.elem_size().expect("not DECK_MSG");
    let len = (n as usize)
        .checked_mul(size)
        .ok_or_else(|| invalid("n elements overflow"))?;
    if len == 0 {
        return Ok(&mut []);
    }
    if datum.is_null() {
        return Err(invalid("datum is NULL"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(datum.cast::<u8>(), len) })
}

/// Pack `n` elements of `type` from `datum` at the message's cursor.
/// `DECK_MSG`: `datum` is an array of `n` messages, each packed whole.
///
/// # Safety
/// `m` is a message made by `deck_msg_create`; `datum` points to `n`
/// elements of `type` (not overlapping `m`'s buffer).
#[no_mangle]
pub unsafe extern "C" fn deck_msg_pack(
    m: *mut deck_msg_t,
    r#type: c_int,
    datum: *mut c_void,
    n: c_ulong,
) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let mut c = unsafe { CMsg::new(m) }?;
        let t = DataType::from_code(r#type)
            .ok_or_else(|| invalid(&format!("unknown DECK type {}", r#type)))?;
        if t == DataType::Msg {
            let inner = datum.cast::<deck_msg_t>();
            if inner.is_null() && n > 0 {
                return Err(invalid("datum is NULL"));
            }
            for i in 0..n as usize {
                // SAFETY: `datum` is an array of `n` messages (contract).
                let ip = unsafe { inner.add(i) };
                if std::ptr::eq(ip, m) {
                    return Err(invalid("a message cannot be packed into itself"));
                }
                // SAFETY: as above; distinct from `m`.
                let im = unsafe { CMsg::new(ip) }?;
                let data = im.data().to_vec();
                c.with_cursor(|cur| cur.pack_nested(&data))?;
            }
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let bytes = unsafe { datum_bytes(t, datum, n) }?;
        c.with_cursor(|cur| cur.pack(bytes))
    })
}

/// Unpack `n` elements of `type` at the message's cursor into `datum`.
/// `DECK_MSG`: `datum` is an array of `n` messages made by
/// `deck_msg_create`, each large enough (else `DECK_EMSGSIZE` with the
/// size in its `needed`, and the cursor stays).
///
/// # Safety
/// As for `deck_msg_pack`, with `datum` writable.
#[no_mangle]
pub unsafe extern "C" fn deck_msg_unpack(
    m: *mut deck_msg_t,
    r#type: c_int,
    datum: *mut c_void,
    n: c_ulong,
) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let mut c = unsafe { CMsg::new(m) }?;
        let t = DataType::from_code(r#type)
            .ok_or_else(|| invalid(&format!("unknown DECK type {}", r#type)))?;
        if t == DataType::Msg {
            let inner = datum.cast::<deck_msg_t>();
            if inner.is_null() && n > 0 {
                return Err(invalid("datum is NULL"));
            }
            for i in 0..n as usize {
                // SAFETY: `datum` is an array of `n` messages (contract).
                let ip = unsafe { inner.add(i) };
                if std::ptr::eq(ip, m) {
                    return Err(invalid("a message cannot be unpacked into itself"));
                }
                // SAFETY: as above; distinct from `m`.
                let mut im = unsafe { CMsg::new(ip) }?;
                let len = c.with_cursor(|cur| cur.peek_nested_len())?;
                if len > im.size() {
                    im.m.needed = len as c_ulong;
                    return Err(DeckError::MsgTooBig {
                        needed: len,
                        size: im.size(),
                    });
                }
                c.with_cursor(|cur| {
                    let data = cur.unpack_nested()?;
                    im.bytes()[..data.len()].copy_from_slice(data);
                    im.received(data.len());
                    Ok::<_, DeckError>(())
                })?;
            }
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let out = unsafe { datum_bytes(t, datum, n) }?;
        c.with_cursor(|cur| {
            let data = cur.unpack(out.len())?;
            out.copy_from_slice(data);
            Ok(())
        })
    })
}

/// Empty a message for reuse.
///
/// # Safety
/// `m` is a message made by `deck_msg_create`.
#[no_mangle]
pub unsafe extern "C" fn deck_msg_clear(m: *mut deck_msg_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { CMsg::new(m) }?;
        c.m.datalen = 0;
        c.m.cursor = c.m.buf;
        c.m.needed = 0;
        Ok(())
    })
}

/// Move the cursor back to the start, to read the message again.
///
/// # Safety
/// `m` is a message made by `deck_msg_create`.
#[no_mangle]
pub unsafe extern "C" fn deck_msg_reset(m: *mut deck_msg_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let c = unsafe { CMsg::new(m) }?;
        c.m.cursor = c.m.buf;
        Ok(())
    })
}

// ----- mailboxes -----

/// # Safety
/// `name` is null or a NUL-terminated string.
unsafe fn c_name(name: deck_name_t) -> Result<String, DeckError> {
    if name.is_null() {
        return Err(invalid("name is NULL"));
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str()
        .map(str::to_owned)
        .map_err(|_| invalid("name is not UTF-8"))
}

/// # Safety
/// `mb` is null or points to a `deck_mbox_t`.
unsafe fn handle<'a>(mb: *mut deck_mbox_t) -> Result<&'a mut deck_mbox_t, DeckError> {
    // SAFETY: the caller's contract.
    unsafe { mb.as_mut() }.ok_or_else(|| invalid("mailbox is NULL"))
}

fn addr_of(h: &deck_mbox_t) -> Result<MboxAddr, DeckError> {
    if h.kind != DECK_MBOX_OWNED && h.kind != DECK_MBOX_CLONE {
        return Err(invalid(
            "mailbox not made by deck_mbox_create or deck_mbox_clone",
        ));
    }
    Ok(MboxAddr {
        node: u32::try_from(h.node).map_err(|_| invalid("mailbox node"))?,
        id: u32::try_from(h.id).map_err(|_| invalid("mailbox id"))?,
    })
}

/// Create a mailbox and bind `name` to it in the job's naming service.
///
/// # Safety
/// `mb` points to a writable `deck_mbox_t`; `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn deck_mbox_create(mb: *mut deck_mbox_t, name: deck_name_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (h, name) = unsafe { (handle(mb)?, c_name(name)?) };
        let at = runtime()?.create(&name)?;
        *h = deck_mbox_t {
            node: at.node.into(),
            id: at.id.into(),
            kind: DECK_MBOX_OWNED,
        };
        Ok(())
    })
}

/// Look `name` up (waiting, bounded by `DECK_CLONE_WAIT_MS`, 30 s by
/// default, for a name not created yet) and make a handle to post to it.
///
/// # Safety
/// As for `deck_mbox_create`.
#[no_mangle]
pub unsafe extern "C" fn deck_mbox_clone(mbox: *mut deck_mbox_t, name: deck_name_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (h, name) = unsafe { (handle(mbox)?, c_name(name)?) };
        let at = runtime()?.lookup(&name)?;
        *h = deck_mbox_t {
            node: at.node.into(),
            id: at.id.into(),
            kind: DECK_MBOX_CLONE,
        };
        Ok(())
    })
}

/// Destroy a mailbox: the owner's unbinds its name, refuses what waits in
/// it, and makes later posts fail with `DECK_EDESTROYED`; a clone's only
/// drops the handle.
///
/// # Safety
/// `mb` points to a `deck_mbox_t` made by create or clone.
#[no_mangle]
pub unsafe extern "C" fn deck_mbox_destroy(mb: *mut deck_mbox_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { handle(mb) }?;
        let at = addr_of(h)?;
        let rt = runtime()?;
        if h.kind == DECK_MBOX_OWNED && at.node == rt.node() {
            rt.destroy(at.id)?;
        }
        Ok(())
    })
}

/// Post the message's data (`datalen` bytes) to the mailbox. Small
/// messages (up to 16 KiB) are copied and the call returns at once; larger
/// ones are sent straight from the message and the call returns when the
/// owner has received them (the buffer may be reused then).
///
/// # Safety
/// `mb` is a handle made by create or clone; `msg` a message made by
/// `deck_msg_create`, unchanged until the call returns.
#[no_mangle]
pub unsafe extern "C" fn deck_mbox_post(mb: *mut deck_mbox_t, msg: *mut deck_msg_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (h, c) = unsafe { (handle(mb)?, CMsg::new(msg)?) };
        let at = addr_of(h)?;
        runtime()?.post(at, c.data())
    })
}

/// Take the mailbox's first message (in arrival order) into `msg`, waiting
/// for one; `datalen` is its length and the cursor is at the start. Owner
/// only. A message larger than `msg->size` is not lost: the call fails with
/// `DECK_EMSGSIZE`, `msg->needed` says its size, and it stays first.
///
/// # Safety
/// `mb` is a handle made by create or clone; `msg` a message made by
/// `deck_msg_create`, used by no one else until the call returns.
#[no_mangle]
pub unsafe extern "C" fn deck_mbox_retrv(mb: *mut deck_mbox_t, msg: *mut deck_msg_t) -> c_int {
    call(|| {
        // SAFETY: the caller's contract.
        let (h, mut c) = unsafe { (handle(mb)?, CMsg::new(msg)?) };
        let at = addr_of(h)?;
        let rt = runtime()?;
        if h.kind != DECK_MBOX_OWNED || at.node != rt.node() {
            return Err(DeckError::NotOwner(format!(
                "#{} on node {}",
                at.id, at.node
            )));
        }
        rt.retrieve(at.id, &mut c)
    })
}

/// Bytes a nested message takes in its container: its data and a length.
#[no_mangle]
pub extern "C" fn deck_msg_nested_size(datalen: c_ulong) -> c_ulong {
    datalen.saturating_add(NESTED_HEADER as c_ulong)
}
