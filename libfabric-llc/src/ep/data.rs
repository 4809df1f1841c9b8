//! Sends and receives: FI_MSG (the message layer's untagged space) and
//! FI_TAGGED (its 64-bit tags with ignore masks), inject, remote CQ data,
//! directed receives, peek and claim, cancel.

use std::ffi::c_void;
use std::sync::Arc;

use app_runtime::PtrRegion;
use bytes::Bytes;
use msg_layer::{PeerId, Select, Source, Space};

use super::state::{EpApi, Op};
use super::{of, EpObj};
use crate::abi::*;
use crate::cq::{Entry, ErrEntry};
use crate::fid;
use crate::info::INJECT_SIZE;

/// Above this, a send's body is lent to the transport from the
/// application's buffer (which libfabric keeps unchanged until the send
/// completes) instead of copied.
const LEND_FROM: usize = 16 * 1024;

pub(super) fn err(code: i32) -> isize {
    -(code as isize)
}

/// The endpoint behind an `fid_ep *`.
pub(super) fn ep_of<'a>(ep: *mut FidEp) -> Result<&'a EpObj, isize> {
    // SAFETY: an fid_ep the application passes (its head checked).
    let obj = unsafe { super::live(ep.cast()) }.ok_or(err(errno::FI_EINVAL))?;
    // fi_endpoint(3): no data transfer before fi_enable.
    if !obj
        .shared
        .enabled
        .load(std::sync::atomic::Ordering::Acquire)
    {
        return Err(err(errno::FI_EOPBADSTATE));
    }
    Ok(obj)
}

/// The message-layer peer of `fi_addr`, made on first use.
pub(super) fn peer(st: &mut EpApi, ep: &app_runtime::Ep, fi_addr: u64) -> Result<PeerId, isize> {
    if let Some(&p) = st.peers.get(&fi_addr) {
        return Ok(p);
    }
    let av = st.av.as_ref().ok_or(err(errno::FI_ENOAV))?;
    let name = av.name(fi_addr).ok_or(err(errno::FI_EINVAL))?;
    let p = ep.add_peer(&name.addr()).map_err(|e| {
        crate::warn(FI_LOG_EP_DATA, &format!("peer {name}: {e}"));
        err(errno::FI_EINVAL)
    })?;
    st.peers.insert(fi_addr, p);
    st.fi_addr_of.insert(p, fi_addr);
    Ok(p)
}

/// The bytes of a send: copied when small, lent when large (with the
/// token its release is reported under).
///
/// # Safety
/// `buf` holds `len` readable bytes, unchanged until the send completes.
pub(super) unsafe fn body(
    st: &mut EpApi,
    ep: &app_runtime::Ep,
    buf: *const c_void,
    len: usize,
) -> (Bytes, Option<u64>) {
    if len == 0 || buf.is_null() {
        return (Bytes::new(), None);
    }
    if len >= LEND_FROM {
        st.next_token += 1;
        let token = st.next_token;
        // SAFETY: the caller's guarantee (libfabric's rule for a send
        // buffer until its completion, which waits for the release).
        let bytes = unsafe { msg_layer::lent::lend(buf.cast(), len, ep.release_notice(token)) };
        return (bytes, Some(token));
    }
    // SAFETY: as above.
    let copy = Bytes::copy_from_slice(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) });
    (copy, None)
}

#[allow(clippy::too_many_arguments)]
fn send(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest: u64,
    space: Space,
    data: Option<u64>,
    context: *mut c_void,
    flags: Option<u64>,
) -> isize {
    let obj = match ep_of(ep) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let s = &obj.shared;
    let flags = flags.unwrap_or_else(|| *s.tx_op_flags.lock());
    if flags & FI_INJECT != 0 && len > INJECT_SIZE {
        return err(errno::FI_EMSGSIZE);
    }
    let kind = match space {
        Space::Untagged => FI_MSG,
        Space::Tagged(_) => FI_TAGGED,
    };
    s.rt.note_call();
    let mut st = s.rt.lock();
    let p = match peer(&mut st, s.ep(), dest) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // SAFETY: libfabric's contract for a send buffer.
    let (bytes, lent) = unsafe { body(&mut st, s.ep(), buf, len) };
    let r = s.ep().isend_to(p, space, data, bytes, lent.is_some());
    s.ep().watch(r);
    st.ops.insert(
        r,
        Op {
            context,
            flags: FI_SEND | kind,
            buf: std::ptr::null_mut(),
            report: flags & FI_COMPLETION != 0,
            lent,
        },
    );
    drop(st);
    s.rt.note_held();
    0
}

fn inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest: u64,
    space: Space,
    data: Option<u64>,
) -> isize {
    let obj = match ep_of(ep) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if len > INJECT_SIZE {
        return err(errno::FI_EMSGSIZE);
    }
    if len > 0 && buf.is_null() {
        return err(errno::FI_EINVAL);
    }
    let s = &obj.shared;
    s.rt.note_call();
    let mut st = s.rt.lock();
    let p = match peer(&mut st, s.ep(), dest) {
        Ok(p) => p,
        Err(e) => return e,
    };
    let bytes = if len == 0 {
        &[][..]
    } else {
        // SAFETY: `len` readable bytes at `buf`, copied before returning.
        unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }
    };
    if let Err(e) = s.ep().inject_to(p, space, data, bytes) {
        crate::warn(FI_LOG_EP_DATA, &format!("inject: {e}"));
        return err(super::state::code(&e));
    }
    if let Some(c) = &st.tx_cntr {
        c.value.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
    drop(st);
    s.rt.note_held();
    0
}

#[allow(clippy::too_many_arguments)]
fn recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    src: u64,
    select: Select,
    context: *mut c_void,
    flags: Option<u64>,
) -> isize {
    let obj = match ep_of(ep) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if len > 0 && buf.is_null() {
        return err(errno::FI_EINVAL);
    }
    let s = &obj.shared;
    let flags = flags.unwrap_or_else(|| *s.rx_op_flags.lock());
    // FI_MULTI_RECV given to fi_recvmsg, or as the receive context's
    // default (rx_attr->op_flags, which plain fi_recv takes).
    if flags & FI_MULTI_RECV != 0 && matches!(select, Select::Untagged) {
        return multi_recv(ep, buf, len, src, context);
    }
    let kind = match select {
        Select::Untagged => FI_MSG,
        Select::Tagged { .. } => FI_TAGGED,
    };
    s.rt.note_call();
    let mut st = s.rt.lock();
    let source = match source(
        &mut st,
        s.ep(),
        if s.directed { src } else { FI_ADDR_UNSPEC },
    ) {
        Ok(x) => x,
        Err(e) => return e,
    };
    // SAFETY: libfabric's contract: the receive buffer stays valid and
    // untouched by the application until the receive completes.
    let region = Arc::new(unsafe { PtrRegion::new(buf.cast(), len) });
    let r = s.ep().irecv_into(source, select, region);
    s.ep().watch(r);
    st.ops.insert(
        r,
        Op {
            context,
            flags: FI_RECV | kind,
            buf,
            report: flags & FI_COMPLETION != 0,
            lent: None,
        },
    );
    0
}

/// Post a multi-receive buffer (FI_MULTI_RECV).
fn multi_recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    src: u64,
    context: *mut c_void,
) -> isize {
    let obj = match ep_of(ep) {
        Ok(o) => o,
        Err(e) => return e,
    };
    if buf.is_null() || len == 0 {
        return err(errno::FI_EINVAL);
    }
    let s = &obj.shared;
    s.rt.note_call();
    let mut st = s.rt.lock();
    let source = match source(
        &mut st,
        s.ep(),
        if s.directed { src } else { FI_ADDR_UNSPEC },
    ) {
        Ok(x) => x,
        Err(e) => return e,
    };
    // SAFETY: libfabric's contract: a multi-receive buffer stays the
    // provider's until the completion with FI_MULTI_RECV releases it.
    let region = Arc::new(unsafe { PtrRegion::new(buf.cast(), len) });
    let min_free = s.min_multi_recv.load(std::sync::atomic::Ordering::Relaxed);
    let m = s.ep().irecv_multi(source, region, min_free);
    st.multis.push(super::state::Multi { m, context, buf });
    0
}

fn source(st: &mut EpApi, ep: &app_runtime::Ep, src: u64) -> Result<Source, isize> {
    if src == FI_ADDR_UNSPEC {
        Ok(Source::Any)
    } else {
        peer(st, ep, src).map(Source::Peer)
    }
}

/// FI_PEEK, FI_PEEK|FI_CLAIM, FI_CLAIM and FI_DISCARD on a tagged receive.
fn peek_or_claim(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    src: u64,
    select: Select,
    context: *mut c_void,
    flags: u64,
) -> isize {
    let obj = match ep_of(ep) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let s = &obj.shared;
    s.rt.note_call();
    if flags & FI_PEEK != 0 {
        // A peek looks at what has arrived: a round of progress first.
        s.progress();
    }
    let mut st = s.rt.lock();
    let Some(cq) = st.rx_cq.clone() else {
        return err(errno::FI_ENOCQ);
    };
    let source = match source(
        &mut st,
        s.ep(),
        if s.directed { src } else { FI_ADDR_UNSPEC },
    ) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let entry = |st: &mut EpApi, status: &msg_layer::Status| Entry {
        context,
        flags: FI_RECV
            | FI_TAGGED
            | if status.data.is_some() {
                FI_REMOTE_CQ_DATA
            } else {
                0
            },
        len: status.msg_len,
        buf: std::ptr::null_mut(),
        data: status.data.unwrap_or(0),
        tag: (u64::from(status.context) << 32) | u64::from(status.tag),
        src: st.fi_addr(Some(s.ep()), status.source),
    };
    if flags & FI_PEEK != 0 {
        let found = if flags & (FI_CLAIM | FI_DISCARD) != 0 {
            s.ep().claim(source, select).map(|(status, claimed)| {
                let e = entry(&mut st, &status);
                if flags & FI_DISCARD != 0 {
                    s.ep().discard(claimed);
                } else {
                    st.claimed.insert(context as usize, claimed);
                }
                e
            })
        } else {
            s.ep()
                .iprobe_sel(source, select)
                .map(|status| entry(&mut st, &status))
        };
        match found {
            Some(e) => cq.cq.push(e),
            None => cq.cq.push_err(ErrEntry {
                entry: Entry {
                    context,
                    flags: FI_RECV | FI_TAGGED,
                    len: 0,
                    buf: std::ptr::null_mut(),
                    data: 0,
                    tag: 0,
                    src: FI_ADDR_NOTAVAIL,
                },
                olen: 0,
                err: errno::FI_ENOMSG,
                prov_errno: errno::FI_ENOMSG,
                why: "no message matches the peek".into(),
            }),
        }
        return 0;
    }
    // FI_CLAIM without FI_PEEK: receive (or discard) the message claimed
    // earlier under this context.
    let Some(claimed) = st.claimed.remove(&(context as usize)) else {
        return err(errno::FI_EINVAL);
    };
    if flags & FI_DISCARD != 0 {
        s.ep().discard(claimed);
        cq.cq.push(Entry {
            context,
            flags: FI_RECV | FI_TAGGED,
            len: 0,
            buf: std::ptr::null_mut(),
            data: 0,
            tag: 0,
            src: FI_ADDR_NOTAVAIL,
        });
        return 0;
    }
    // SAFETY: as for any receive buffer.
    let region = Arc::new(unsafe { PtrRegion::new(buf.cast(), len) });
    let r = s.ep().irecv_claimed(claimed, region);
    s.ep().watch(r);
    st.ops.insert(
        r,
        Op {
            context,
            flags: FI_RECV | FI_TAGGED,
            buf,
            report: true,
            lent: None,
        },
    );
    0
}

/// `fi_cancel`: a pending receive posted with `context` completes with
/// FI_ECANCELED.
pub unsafe extern "C" fn cancel(f: Fid, context: *mut c_void) -> isize {
    fid::guard("fi_cancel", err(errno::FI_EOTHER), || {
        // SAFETY: the application's fid.
        let Some(obj) = (unsafe { of(f) }) else {
            return err(errno::FI_EINVAL);
        };
        let s = &obj.shared;
        let st = s.rt.lock();
        let found = st
            .ops
            .iter()
            .find(|(_, op)| op.context == context && op.flags & FI_RECV != 0)
            .map(|(r, _)| *r);
        drop(st);
        if let Some(r) = found {
            s.ep().cancel(r);
        } else {
            let st = s.rt.lock();
            if let Some(m) = st.multis.iter().find(|m| m.context == context) {
                s.ep().cancel_multi(m.m);
            }
        }
        0
    })
}

/// One buffer of an iovec list (this provider's iov_limit is 1).
///
/// # Safety
/// `iov` holds `count` entries.
pub(super) unsafe fn one(
    iov: *const libc::iovec,
    count: usize,
) -> Result<(*mut c_void, usize), isize> {
    match count {
        0 => Ok((std::ptr::null_mut(), 0)),
        // SAFETY: the caller's guarantee.
        1 if !iov.is_null() => Ok(unsafe { ((*iov).iov_base, (*iov).iov_len) }),
        _ => Err(err(errno::FI_EINVAL)),
    }
}

// FI_MSG.

unsafe extern "C" fn msg_recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    ctx: *mut c_void,
) -> isize {
    entry!(
        "fi_recv",
        recv(ep, buf, len, src, Select::Untagged, ctx, None)
    )
}
unsafe extern "C" fn msg_recvv(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: `count` iovecs.
    entry!(
        "fi_recvv",
        match unsafe { one(iov, count) } {
            Ok((b, l)) => recv(ep, b, l, src, Select::Untagged, ctx, None),
            Err(e) => e,
        }
    )
}
unsafe extern "C" fn msg_recvmsg(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize {
    entry!("fi_recvmsg", {
        // SAFETY: the application's message.
        match unsafe { msg.as_ref() } {
            None => err(errno::FI_EINVAL),
            // SAFETY: its iovecs.
            Some(m) => match unsafe { one(m.msg_iov, m.iov_count) } {
                Ok((b, l)) => recv(ep, b, l, m.addr, Select::Untagged, m.context, Some(flags)),
                Err(e) => e,
            },
        }
    })
}
unsafe extern "C" fn msg_send(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    entry!(
        "fi_send",
        send(ep, buf, len, dest, Space::Untagged, None, ctx, None)
    )
}
unsafe extern "C" fn msg_sendv(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: `count` iovecs.
    entry!(
        "fi_sendv",
        match unsafe { one(iov, count) } {
            Ok((b, l)) => send(ep, b, l, dest, Space::Untagged, None, ctx, None),
            Err(e) => e,
        }
    )
}
unsafe extern "C" fn msg_sendmsg(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize {
    entry!("fi_sendmsg", {
        // SAFETY: the application's message.
        match unsafe { msg.as_ref() } {
            None => err(errno::FI_EINVAL),
            // SAFETY: its iovecs.
            Some(m) => match unsafe { one(m.msg_iov, m.iov_count) } {
                Ok((b, l)) if flags & FI_INJECT != 0 && flags & FI_COMPLETION == 0 => inject(
                    ep,
                    b,
                    l,
                    m.addr,
                    Space::Untagged,
                    (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data),
                ),
                Ok((b, l)) => send(
                    ep,
                    b,
                    l,
                    m.addr,
                    Space::Untagged,
                    (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data),
                    m.context,
                    Some(flags),
                ),
                Err(e) => e,
            },
        }
    })
}
unsafe extern "C" fn msg_inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest: u64,
) -> isize {
    entry!(
        "fi_inject",
        inject(ep, buf, len, dest, Space::Untagged, None)
    )
}
unsafe extern "C" fn msg_senddata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: u64,
    ctx: *mut c_void,
) -> isize {
    entry!(
        "fi_senddata",
        send(ep, buf, len, dest, Space::Untagged, Some(data), ctx, None)
    )
}
unsafe extern "C" fn msg_injectdata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
) -> isize {
    entry!(
        "fi_injectdata",
        inject(ep, buf, len, dest, Space::Untagged, Some(data))
    )
}

pub static MSG_OPS: FiOpsMsg = FiOpsMsg {
    size: std::mem::size_of::<FiOpsMsg>(),
    recv: msg_recv,
    recvv: msg_recvv,
    recvmsg: msg_recvmsg,
    send: msg_send,
    sendv: msg_sendv,
    sendmsg: msg_sendmsg,
    inject: msg_inject,
    senddata: msg_senddata,
    injectdata: msg_injectdata,
};

// FI_TAGGED.

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recv(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    entry!(
        "fi_trecv",
        recv(
            ep,
            buf,
            len,
            src,
            Select::Tagged { bits: tag, ignore },
            ctx,
            None
        )
    )
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recvv(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: `count` iovecs.
    entry!(
        "fi_trecvv",
        match unsafe { one(iov, count) } {
            Ok((b, l)) => recv(
                ep,
                b,
                l,
                src,
                Select::Tagged { bits: tag, ignore },
                ctx,
                None
            ),
            Err(e) => e,
        }
    )
}
unsafe extern "C" fn t_recvmsg(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize {
    entry!("fi_trecvmsg", {
        // SAFETY: the application's message.
        match unsafe { msg.as_ref() } {
            None => err(errno::FI_EINVAL),
            // SAFETY: its iovecs.
            Some(m) => match unsafe { one(m.msg_iov, m.iov_count) } {
                Ok((b, l)) => {
                    let select = Select::Tagged {
                        bits: m.tag,
                        ignore: m.ignore,
                    };
                    if flags & (FI_PEEK | FI_CLAIM) != 0 {
                        peek_or_claim(ep, b, l, m.addr, select, m.context, flags)
                    } else {
                        recv(ep, b, l, m.addr, select, m.context, Some(flags))
                    }
                }
                Err(e) => e,
            },
        }
    })
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_send(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    entry!(
        "fi_tsend",
        send(ep, buf, len, dest, Space::Tagged(tag), None, ctx, None)
    )
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_sendv(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: `count` iovecs.
    entry!(
        "fi_tsendv",
        match unsafe { one(iov, count) } {
            Ok((b, l)) => send(ep, b, l, dest, Space::Tagged(tag), None, ctx, None),
            Err(e) => e,
        }
    )
}
unsafe extern "C" fn t_sendmsg(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize {
    entry!("fi_tsendmsg", {
        // SAFETY: the application's message.
        match unsafe { msg.as_ref() } {
            None => err(errno::FI_EINVAL),
            // SAFETY: its iovecs.
            Some(m) => match unsafe { one(m.msg_iov, m.iov_count) } {
                Ok((b, l)) if flags & FI_INJECT != 0 && flags & FI_COMPLETION == 0 => inject(
                    ep,
                    b,
                    l,
                    m.addr,
                    Space::Tagged(m.tag),
                    (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data),
                ),
                Ok((b, l)) => send(
                    ep,
                    b,
                    l,
                    m.addr,
                    Space::Tagged(m.tag),
                    (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data),
                    m.context,
                    Some(flags),
                ),
                Err(e) => e,
            },
        }
    })
}
unsafe extern "C" fn t_inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest: u64,
    tag: u64,
) -> isize {
    entry!(
        "fi_tinject",
        inject(ep, buf, len, dest, Space::Tagged(tag), None)
    )
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_senddata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: u64,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    entry!(
        "fi_tsenddata",
        send(
            ep,
            buf,
            len,
            dest,
            Space::Tagged(tag),
            Some(data),
            ctx,
            None
        )
    )
}
unsafe extern "C" fn t_injectdata(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: u64,
    tag: u64,
) -> isize {
    entry!(
        "fi_tinjectdata",
        inject(ep, buf, len, dest, Space::Tagged(tag), Some(data))
    )
}

pub static TAGGED_OPS: FiOpsTagged = FiOpsTagged {
    size: std::mem::size_of::<FiOpsTagged>(),
    recv: t_recv,
    recvv: t_recvv,
    recvmsg: t_recvmsg,
    send: t_send,
    sendv: t_sendv,
    sendmsg: t_sendmsg,
    inject: t_inject,
    senddata: t_senddata,
    injectdata: t_injectdata,
};
