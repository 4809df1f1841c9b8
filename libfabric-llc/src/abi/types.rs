//! The structs (see the module's documentation).

use std::ffi::{c_char, c_int, c_void};

pub type FiAddr = u64;
pub type Fid = *mut FidT;

#[repr(C)]
#[derive(Debug)]
pub struct FiTxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiRxAttr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiEpAttr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

/// 192 bytes in 1.17; 2.x appended the last four fields (224 bytes).
#[repr(C)]
#[derive(Debug)]
pub struct FiDomainAttr {
    pub domain: *mut FidDomain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
    // libfabric 1.20+ (read or written only when the core is that new).
    pub max_ep_auth_key: usize,
    pub max_group_id: u32,
    pub max_cntr_value: u64,
    pub max_err_cntr_value: u64,
}

/// Size of `fi_domain_attr` before libfabric 1.20.
pub const DOMAIN_ATTR_1_17_SIZE: usize = 192;

#[repr(C)]
#[derive(Debug)]
pub struct FiFabricAttr {
    pub fabric: *mut FidFabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiInfo {
    pub next: *mut FiInfo,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: Fid,
    pub tx_attr: *mut FiTxAttr,
    pub rx_attr: *mut FiRxAttr,
    pub ep_attr: *mut FiEpAttr,
    pub domain_attr: *mut FiDomainAttr,
    pub fabric_attr: *mut FiFabricAttr,
    pub nic: *mut c_void,
}

/// `struct fi_context`: what the core writes into the provider struct.
#[repr(C)]
#[derive(Debug)]
pub struct FiContext {
    pub internal: [*mut c_void; 4],
}

pub type GetinfoFn = unsafe extern "C" fn(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int;
pub type FabricFn = unsafe extern "C" fn(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int;

#[repr(C)]
#[derive(Debug)]
pub struct FiProvider {
    pub version: u32,
    pub fi_version: u32,
    pub context: FiContext,
    pub name: *const c_char,
    pub getinfo: GetinfoFn,
    pub fabric: FabricFn,
    pub cleanup: unsafe extern "C" fn(),
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOps {
    pub size: usize,
    pub close: unsafe extern "C" fn(fid: Fid) -> c_int,
    pub bind: unsafe extern "C" fn(fid: Fid, bfid: Fid, flags: u64) -> c_int,
    pub control: unsafe extern "C" fn(fid: Fid, command: c_int, arg: *mut c_void) -> c_int,
    pub ops_open: unsafe extern "C" fn(
        fid: Fid,
        name: *const c_char,
        flags: u64,
        ops: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub tostr: unsafe extern "C" fn(fid: *const FidT, buf: *mut c_char, len: usize) -> c_int,
    pub ops_set: unsafe extern "C" fn(
        fid: Fid,
        name: *const c_char,
        flags: u64,
        ops: *mut c_void,
        context: *mut c_void,
    ) -> c_int,
}

/// `struct fid`: the head of every object.
#[repr(C)]
#[derive(Debug)]
pub struct FidT {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *const FiOps,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsFabric {
    pub size: usize,
    pub domain: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        info: *mut FiInfo,
        dom: *mut *mut FidDomain,
        context: *mut c_void,
    ) -> c_int,
    pub passive_ep: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        info: *mut FiInfo,
        pep: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub eq_open: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        attr: *mut FiEqAttr,
        eq: *mut *mut FidEq,
        context: *mut c_void,
    ) -> c_int,
    pub wait_open: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        attr: *mut c_void,
        waitset: *mut *mut c_void,
    ) -> c_int,
    pub trywait:
        unsafe extern "C" fn(fabric: *mut FidFabric, fids: *mut Fid, count: c_int) -> c_int,
    pub domain2: unsafe extern "C" fn(
        fabric: *mut FidFabric,
        info: *mut FiInfo,
        dom: *mut *mut FidDomain,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct FidFabric {
    pub fid: FidT,
    pub ops: *const FiOpsFabric,
    pub api_version: u32,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsDomain {
    pub size: usize,
    pub av_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiAvAttr,
        av: *mut *mut FidAv,
        context: *mut c_void,
    ) -> c_int,
    pub cq_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiCqAttr,
        cq: *mut *mut FidCq,
        context: *mut c_void,
    ) -> c_int,
    pub endpoint: unsafe extern "C" fn(
        domain: *mut FidDomain,
        info: *mut FiInfo,
        ep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub scalable_ep: unsafe extern "C" fn(
        domain: *mut FidDomain,
        info: *mut FiInfo,
        sep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub cntr_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiCntrAttr,
        cntr: *mut *mut FidCntr,
        context: *mut c_void,
    ) -> c_int,
    pub poll_open: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut c_void,
        pollset: *mut *mut c_void,
    ) -> c_int,
    pub stx_ctx: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiTxAttr,
        stx: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub srx_ctx: unsafe extern "C" fn(
        domain: *mut FidDomain,
        attr: *mut FiRxAttr,
        rx_ep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub query_atomic: unsafe extern "C" fn(
        domain: *mut FidDomain,
        datatype: c_int,
        op: c_int,
        attr: *mut c_void,
        flags: u64,
    ) -> c_int,
    pub query_collective: unsafe extern "C" fn(
        domain: *mut FidDomain,
        coll: c_int,
        attr: *mut c_void,
        flags: u64,
    ) -> c_int,
    pub endpoint2: unsafe extern "C" fn(
        domain: *mut FidDomain,
        info: *mut FiInfo,
        ep: *mut *mut FidEp,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsMr {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub reg: unsafe extern "C" fn(
        fid: Fid,
        buf: *const c_void,
        len: usize,
        access: u64,
        offset: u64,
        requested_key: u64,
        flags: u64,
        mr: *mut *mut FidMr,
        context: *mut c_void,
    ) -> c_int,
    #[allow(clippy::type_complexity)]
    pub regv: unsafe extern "C" fn(
        fid: Fid,
        iov: *const libc::iovec,
        count: usize,
        access: u64,
        offset: u64,
        requested_key: u64,
        flags: u64,
        mr: *mut *mut FidMr,
        context: *mut c_void,
    ) -> c_int,
    pub regattr: unsafe extern "C" fn(
        fid: Fid,
        attr: *const FiMrAttr,
        flags: u64,
        mr: *mut *mut FidMr,
    ) -> c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct FidDomain {
    pub fid: FidT,
    pub ops: *const FiOpsDomain,
    pub mr: *const FiOpsMr,
}

#[repr(C)]
#[derive(Debug)]
pub struct FidMr {
    pub fid: FidT,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiMrAttr {
    pub mr_iov: *const libc::iovec,
    pub iov_count: usize,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub context: *mut c_void,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
    pub iface: c_int,
    pub device: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiAvAttr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

/// 64 bytes in 1.17; 2.x appended three entries (88 bytes). Callers test
/// `size` before using an entry past the old end.
#[repr(C)]
#[derive(Debug)]
pub struct FiOpsAv {
    pub size: usize,
    pub insert: unsafe extern "C" fn(
        av: *mut FidAv,
        addr: *const c_void,
        count: usize,
        fi_addr: *mut FiAddr,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
    pub insertsvc: unsafe extern "C" fn(
        av: *mut FidAv,
        node: *const c_char,
        service: *const c_char,
        fi_addr: *mut FiAddr,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
    #[allow(clippy::type_complexity)]
    pub insertsym: unsafe extern "C" fn(
        av: *mut FidAv,
        node: *const c_char,
        nodecnt: usize,
        service: *const c_char,
        svccnt: usize,
        fi_addr: *mut FiAddr,
        flags: u64,
        context: *mut c_void,
    ) -> c_int,
    pub remove: unsafe extern "C" fn(
        av: *mut FidAv,
        fi_addr: *mut FiAddr,
        count: usize,
        flags: u64,
    ) -> c_int,
    pub lookup: unsafe extern "C" fn(
        av: *mut FidAv,
        fi_addr: FiAddr,
        addr: *mut c_void,
        addrlen: *mut usize,
    ) -> c_int,
    pub straddr: unsafe extern "C" fn(
        av: *mut FidAv,
        addr: *const c_void,
        buf: *mut c_char,
        len: *mut usize,
    ) -> *const c_char,
    pub av_set: unsafe extern "C" fn(
        av: *mut FidAv,
        attr: *mut c_void,
        av_set: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
    pub insert_auth_key: unsafe extern "C" fn(
        av: *mut FidAv,
        auth_key: *const c_void,
        auth_key_size: usize,
        fi_addr: *mut FiAddr,
        flags: u64,
    ) -> c_int,
    pub lookup_auth_key: unsafe extern "C" fn(
        av: *mut FidAv,
        fi_addr: FiAddr,
        auth_key: *mut c_void,
        auth_key_size: *mut usize,
    ) -> c_int,
    pub set_user_id:
        unsafe extern "C" fn(av: *mut FidAv, fi_addr: FiAddr, user_id: FiAddr, flags: u64) -> c_int,
}

/// `fi_ops_av` up to `av_set`: its size in libfabric before 1.20.
pub const OPS_AV_1_17_SIZE: usize = 64;

#[repr(C)]
#[derive(Debug)]
pub struct FidAv {
    pub fid: FidT,
    pub ops: *const FiOpsAv,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiEqAttr {
    pub size: usize,
    pub flags: u64,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiEqEntry {
    pub fid: Fid,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiEqErrEntry {
    pub fid: Fid,
    pub context: *mut c_void,
    pub data: u64,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsEq {
    pub size: usize,
    pub read: unsafe extern "C" fn(
        eq: *mut FidEq,
        event: *mut u32,
        buf: *mut c_void,
        len: usize,
        flags: u64,
    ) -> isize,
    pub readerr: unsafe extern "C" fn(eq: *mut FidEq, buf: *mut FiEqErrEntry, flags: u64) -> isize,
    pub write: unsafe extern "C" fn(
        eq: *mut FidEq,
        event: u32,
        buf: *const c_void,
        len: usize,
        flags: u64,
    ) -> isize,
    pub sread: unsafe extern "C" fn(
        eq: *mut FidEq,
        event: *mut u32,
        buf: *mut c_void,
        len: usize,
        timeout: c_int,
        flags: u64,
    ) -> isize,
    pub strerror: unsafe extern "C" fn(
        eq: *mut FidEq,
        prov_errno: c_int,
        err_data: *const c_void,
        buf: *mut c_char,
        len: usize,
    ) -> *const c_char,
}

#[repr(C)]
#[derive(Debug)]
pub struct FidEq {
    pub fid: FidT,
    pub ops: *const FiOpsEq,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiCqAttr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiCqTaggedEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

/// 88 bytes (`src_addr` appended in 1.20); 80 before.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiCqErrEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
    pub src_addr: FiAddr,
}

/// Size of `fi_cq_err_entry` for applications of API 1.5 to 1.19.
pub const CQ_ERR_ENTRY_1_5_SIZE: usize = 80;
/// Size of `fi_cq_err_entry` for applications of API below 1.5 (no
/// `err_data_size`).
pub const CQ_ERR_ENTRY_1_0_SIZE: usize = 72;

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsCq {
    pub size: usize,
    pub read: unsafe extern "C" fn(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize,
    pub readfrom: unsafe extern "C" fn(
        cq: *mut FidCq,
        buf: *mut c_void,
        count: usize,
        src_addr: *mut FiAddr,
    ) -> isize,
    pub readerr: unsafe extern "C" fn(cq: *mut FidCq, buf: *mut FiCqErrEntry, flags: u64) -> isize,
    pub sread: unsafe extern "C" fn(
        cq: *mut FidCq,
        buf: *mut c_void,
        count: usize,
        cond: *const c_void,
        timeout: c_int,
    ) -> isize,
    pub sreadfrom: unsafe extern "C" fn(
        cq: *mut FidCq,
        buf: *mut c_void,
        count: usize,
        src_addr: *mut FiAddr,
        cond: *const c_void,
        timeout: c_int,
    ) -> isize,
    pub signal: unsafe extern "C" fn(cq: *mut FidCq) -> c_int,
    pub strerror: unsafe extern "C" fn(
        cq: *mut FidCq,
        prov_errno: c_int,
        err_data: *const c_void,
        buf: *mut c_char,
        len: usize,
    ) -> *const c_char,
}

#[repr(C)]
#[derive(Debug)]
pub struct FidCq {
    pub fid: FidT,
    pub ops: *const FiOpsCq,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiCntrAttr {
    pub events: c_int,
    pub wait_obj: c_int,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsCntr {
    pub size: usize,
    pub read: unsafe extern "C" fn(cntr: *mut FidCntr) -> u64,
    pub readerr: unsafe extern "C" fn(cntr: *mut FidCntr) -> u64,
    pub add: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
    pub set: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
    pub wait: unsafe extern "C" fn(cntr: *mut FidCntr, threshold: u64, timeout: c_int) -> c_int,
    pub adderr: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
    pub seterr: unsafe extern "C" fn(cntr: *mut FidCntr, value: u64) -> c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct FidCntr {
    pub fid: FidT,
    pub ops: *const FiOpsCntr,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiMsg {
    pub msg_iov: *const libc::iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiMsgTagged {
    pub msg_iov: *const libc::iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsEp {
    pub size: usize,
    pub cancel: unsafe extern "C" fn(fid: Fid, context: *mut c_void) -> isize,
    pub getopt: unsafe extern "C" fn(
        fid: Fid,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut usize,
    ) -> c_int,
    pub setopt: unsafe extern "C" fn(
        fid: Fid,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: usize,
    ) -> c_int,
    pub tx_ctx: unsafe extern "C" fn(
        sep: *mut FidEp,
        index: c_int,
        attr: *mut FiTxAttr,
        tx_ep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub rx_ctx: unsafe extern "C" fn(
        sep: *mut FidEp,
        index: c_int,
        attr: *mut FiRxAttr,
        rx_ep: *mut *mut FidEp,
        context: *mut c_void,
    ) -> c_int,
    pub rx_size_left: unsafe extern "C" fn(ep: *mut FidEp) -> isize,
    pub tx_size_left: unsafe extern "C" fn(ep: *mut FidEp) -> isize,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsCm {
    pub size: usize,
    pub setname: unsafe extern "C" fn(fid: Fid, addr: *mut c_void, addrlen: usize) -> c_int,
    pub getname: unsafe extern "C" fn(fid: Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int,
    pub getpeer:
        unsafe extern "C" fn(ep: *mut FidEp, addr: *mut c_void, addrlen: *mut usize) -> c_int,
    pub connect: unsafe extern "C" fn(
        ep: *mut FidEp,
        addr: *const c_void,
        param: *const c_void,
        paramlen: usize,
    ) -> c_int,
    pub listen: unsafe extern "C" fn(pep: *mut c_void) -> c_int,
    pub accept:
        unsafe extern "C" fn(ep: *mut FidEp, param: *const c_void, paramlen: usize) -> c_int,
    pub reject: unsafe extern "C" fn(
        pep: *mut c_void,
        handle: Fid,
        param: *const c_void,
        paramlen: usize,
    ) -> c_int,
    pub shutdown: unsafe extern "C" fn(ep: *mut FidEp, flags: u64) -> c_int,
    pub join: unsafe extern "C" fn(
        ep: *mut FidEp,
        addr: *const c_void,
        flags: u64,
        mc: *mut *mut c_void,
        context: *mut c_void,
    ) -> c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsMsg {
    pub size: usize,
    pub recv: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub recvv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        count: usize,
        src_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub recvmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize,
    pub send: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub sendv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        count: usize,
        dest_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub sendmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsg, flags: u64) -> isize,
    pub inject: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        dest_addr: FiAddr,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub senddata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest_addr: FiAddr,
        context: *mut c_void,
    ) -> isize,
    pub injectdata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        data: u64,
        dest_addr: FiAddr,
    ) -> isize,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsTagged {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub recv: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src_addr: FiAddr,
        tag: u64,
        ignore: u64,
        context: *mut c_void,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub recvv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        count: usize,
        src_addr: FiAddr,
        tag: u64,
        ignore: u64,
        context: *mut c_void,
    ) -> isize,
    pub recvmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize,
    #[allow(clippy::type_complexity)]
    pub send: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest_addr: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub sendv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        count: usize,
        dest_addr: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> isize,
    pub sendmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgTagged, flags: u64) -> isize,
    pub inject: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        dest_addr: FiAddr,
        tag: u64,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub senddata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest_addr: FiAddr,
        tag: u64,
        context: *mut c_void,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub injectdata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        data: u64,
        dest_addr: FiAddr,
        tag: u64,
    ) -> isize,
}

/// An operations table this provider does not implement (RMA, atomics,
/// collectives until they are): `size` and entries that each answer
/// -FI_ENOSYS. The entries have no common C prototype; every one returns an
/// integer in the same register and ignores its arguments, which the C
/// calling conventions this runs on (x86-64 and AArch64 System V) allow.
#[repr(C)]
#[derive(Debug)]
pub struct FiOpsNone<const N: usize> {
    pub size: usize,
    pub entries: [unsafe extern "C" fn() -> isize; N],
}

#[repr(C)]
#[derive(Debug)]
pub struct FidEp {
    pub fid: FidT,
    pub ops: *const FiOpsEp,
    pub cm: *const FiOpsCm,
    pub msg: *const FiOpsMsg,
    pub rma: *const FiOpsRma,
    pub tagged: *const FiOpsTagged,
    pub atomic: *const c_void,
    pub collective: *const c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FiRmaIov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiMsgRma {
    pub msg_iov: *const libc::iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub rma_iov: *const FiRmaIov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct FiOpsRma {
    pub size: usize,
    #[allow(clippy::type_complexity)]
    pub read: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src_addr: FiAddr,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub readv: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        count: usize,
        src_addr: FiAddr,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize,
    pub readmsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgRma, flags: u64) -> isize,
    #[allow(clippy::type_complexity)]
    pub write: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest_addr: FiAddr,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub writev: unsafe extern "C" fn(
        ep: *mut FidEp,
        iov: *const libc::iovec,
        desc: *mut *mut c_void,
        count: usize,
        dest_addr: FiAddr,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize,
    pub writemsg: unsafe extern "C" fn(ep: *mut FidEp, msg: *const FiMsgRma, flags: u64) -> isize,
    #[allow(clippy::type_complexity)]
    pub inject: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        dest_addr: FiAddr,
        addr: u64,
        key: u64,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub writedata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest_addr: FiAddr,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize,
    #[allow(clippy::type_complexity)]
    pub injectdata: unsafe extern "C" fn(
        ep: *mut FidEp,
        buf: *const c_void,
        len: usize,
        data: u64,
        dest_addr: FiAddr,
        addr: u64,
        key: u64,
    ) -> isize,
}
