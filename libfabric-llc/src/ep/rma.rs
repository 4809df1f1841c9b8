//! One-sided operations: `fi_write` is the message layer's put and
//! `fi_read` its get, into the target's region registered under the key
//! (FI_MR_ENDPOINT|FI_MR_PROV_KEY: the endpoint's own key); the remote
//! address is an offset into the region. They complete in the transmit
//! queue and count on the counters bound with FI_WRITE or FI_READ.

use std::ffi::c_void;
use std::sync::Arc;

use app_runtime::PtrRegion;
use msg_layer::rma::RegionKey;

use super::data::{body, ep_of, err, one, peer};
use super::state::Op;
use crate::abi::*;
use crate::fid;

#[allow(clippy::too_many_arguments)]
fn write(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest: u64,
    addr: u64,
    key: u64,
    context: *mut c_void,
    flags: Option<u64>,
) -> isize {
    let obj = match ep_of(ep) {
        Ok(o) => o,
        Err(e) => return e,
    };
    let s = &obj.shared;
    let flags = flags.unwrap_or_else(|| *s.tx_op_flags.lock());
    let inject = flags & FI_INJECT != 0;
    if inject && len > crate::info::INJECT_SIZE {
        return err(errno::FI_EMSGSIZE);
    }
    s.rt.note_call();
    let mut st = s.rt.lock();
    let p = match peer(&mut st, s.ep(), dest) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // SAFETY: libfabric's contract for a write's source buffer (an inject's
    // is copied: below the lending size).
    let (bytes, lent) = unsafe { body(&mut st, s.ep(), buf, len) };
    let r = s.ep().put(p, RegionKey(key), addr, bytes);
    s.ep().watch(r);
    st.ops.insert(
        r,
        Op {
            context,
            flags: FI_RMA | FI_WRITE | if inject { FI_INJECT } else { 0 },
            buf: std::ptr::null_mut(),
            report: flags & FI_COMPLETION != 0,
            lent,
        },
    );
    0
}

#[allow(clippy::too_many_arguments)]
fn read(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    src: u64,
    addr: u64,
    key: u64,
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
    let flags = flags.unwrap_or_else(|| *s.tx_op_flags.lock());
    s.rt.note_call();
    let mut st = s.rt.lock();
    let p = match peer(&mut st, s.ep(), src) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // SAFETY: libfabric's contract: the read's destination stays valid and
    // untouched by the application until the read completes.
    let dst = Arc::new(unsafe { PtrRegion::new(buf.cast(), len) });
    let r = s.ep().get_into(p, RegionKey(key), addr, dst);
    s.ep().watch(r);
    st.ops.insert(
        r,
        Op {
            context,
            flags: FI_RMA | FI_READ,
            buf,
            report: flags & FI_COMPLETION != 0,
            lent: None,
        },
    );
    0
}

/// The one remote range of a message (rma_iov_limit is 1).
///
/// # Safety
/// `m` is a valid message with `rma_iov_count` entries.
unsafe fn one_rma(m: &FiMsgRma) -> Result<FiRmaIov, isize> {
    match m.rma_iov_count {
        // SAFETY: one entry, as counted.
        1 if !m.rma_iov.is_null() => Ok(unsafe { *m.rma_iov }),
        _ => Err(err(errno::FI_EINVAL)),
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_read(
    ep: *mut FidEp,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: u64,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    entry!("fi_read", read(ep, buf, len, src, addr, key, ctx, None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_readv(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: u64,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: `count` iovecs.
    entry!(
        "fi_readv",
        match unsafe { one(iov, count) } {
            Ok((b, l)) => read(ep, b, l, src, addr, key, ctx, None),
            Err(e) => e,
        }
    )
}

unsafe extern "C" fn rma_readmsg(ep: *mut FidEp, msg: *const FiMsgRma, flags: u64) -> isize {
    entry!("fi_readmsg", {
        // SAFETY: the application's message and its vectors.
        match unsafe { msg.as_ref() }
            .map(|m| unsafe { (m, one(m.msg_iov, m.iov_count), one_rma(m)) })
        {
            Some((m, Ok((b, l)), Ok(r))) => {
                read(ep, b, l, m.addr, r.addr, r.key, m.context, Some(flags))
            }
            Some((_, Err(e), _)) | Some((_, _, Err(e))) => e,
            None => err(errno::FI_EINVAL),
        }
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_write(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: u64,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    entry!("fi_write", write(ep, buf, len, dest, addr, key, ctx, None))
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writev(
    ep: *mut FidEp,
    iov: *const libc::iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: u64,
    addr: u64,
    key: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: `count` iovecs.
    entry!(
        "fi_writev",
        match unsafe { one(iov, count) } {
            Ok((b, l)) => write(ep, b, l, dest, addr, key, ctx, None),
            Err(e) => e,
        }
    )
}

unsafe extern "C" fn rma_writemsg(ep: *mut FidEp, msg: *const FiMsgRma, flags: u64) -> isize {
    entry!("fi_writemsg", {
        if flags & FI_REMOTE_CQ_DATA != 0 {
            return err(errno::FI_ENOSYS);
        }
        // SAFETY: the application's message and its vectors.
        match unsafe { msg.as_ref() }
            .map(|m| unsafe { (m, one(m.msg_iov, m.iov_count), one_rma(m)) })
        {
            Some((m, Ok((b, l)), Ok(r))) => {
                write(ep, b, l, m.addr, r.addr, r.key, m.context, Some(flags))
            }
            Some((_, Err(e), _)) | Some((_, _, Err(e))) => e,
            None => err(errno::FI_EINVAL),
        }
    })
}

unsafe extern "C" fn rma_inject(
    ep: *mut FidEp,
    buf: *const c_void,
    len: usize,
    dest: u64,
    addr: u64,
    key: u64,
) -> isize {
    entry!(
        "fi_inject_write",
        write(
            ep,
            buf,
            len,
            dest,
            addr,
            key,
            std::ptr::null_mut(),
            Some(FI_INJECT)
        )
    )
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_writedata(
    _: *mut FidEp,
    _: *const c_void,
    _: usize,
    _: *mut c_void,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
    _: *mut c_void,
) -> isize {
    // Remote CQ data on writes is not offered (no FI_RMA_EVENT).
    err(errno::FI_ENOSYS)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn rma_injectdata(
    _: *mut FidEp,
    _: *const c_void,
    _: usize,
    _: u64,
    _: u64,
    _: u64,
    _: u64,
) -> isize {
    err(errno::FI_ENOSYS)
}

pub static RMA_OPS: FiOpsRma = FiOpsRma {
    size: std::mem::size_of::<FiOpsRma>(),
    read: rma_read,
    readv: rma_readv,
    readmsg: rma_readmsg,
    write: rma_write,
    writev: rma_writev,
    writemsg: rma_writemsg,
    inject: rma_inject,
    writedata: rma_writedata,
    injectdata: rma_injectdata,
};
