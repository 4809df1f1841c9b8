//! libfabric's constants, as `rdma/fabric.h`, `fi_errno.h`, `fi_eq.h`,
//! `fi_domain.h` and `fi_endpoint.h` define them (identical in 1.17 and 2.x
//! for every value used here).

/// `FI_VERSION(major, minor)`.
pub const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

// Capabilities and operation flags (`fabric.h`).
pub const FI_MSG: u64 = 1 << 1;
pub const FI_RMA: u64 = 1 << 2;
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_ATOMIC: u64 = 1 << 4;
pub const FI_MULTICAST: u64 = 1 << 5;
pub const FI_COLLECTIVE: u64 = 1 << 6;
pub const FI_READ: u64 = 1 << 8;
pub const FI_WRITE: u64 = 1 << 9;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_REMOTE_READ: u64 = 1 << 12;
pub const FI_REMOTE_WRITE: u64 = 1 << 13;
pub const FI_MULTI_RECV: u64 = 1 << 16;
pub const FI_REMOTE_CQ_DATA: u64 = 1 << 17;
pub const FI_MORE: u64 = 1 << 18;
pub const FI_PEEK: u64 = 1 << 19;
pub const FI_TRIGGER: u64 = 1 << 20;
pub const FI_FENCE: u64 = 1 << 21;
pub const FI_COMPLETION: u64 = 1 << 24;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_INJECT_COMPLETE: u64 = 1 << 26;
pub const FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
pub const FI_DELIVERY_COMPLETE: u64 = 1 << 28;
pub const FI_AFFINITY: u64 = 1 << 29;
pub const FI_COMMIT_COMPLETE: u64 = 1 << 30;
pub const FI_MATCH_COMPLETE: u64 = 1 << 31;
pub const FI_HMEM: u64 = 1 << 47;
pub const FI_VARIABLE_MSG: u64 = 1 << 48;
pub const FI_LOCAL_COMM: u64 = 1 << 51;
pub const FI_REMOTE_COMM: u64 = 1 << 52;
pub const FI_SHARED_AV: u64 = 1 << 53;
pub const FI_PROV_ATTR_ONLY: u64 = 1 << 54;
pub const FI_NUMERICHOST: u64 = 1 << 55;
pub const FI_RMA_EVENT: u64 = 1 << 56;
pub const FI_SOURCE: u64 = 1 << 57;
pub const FI_NAMED_RX_CTX: u64 = 1 << 58;
pub const FI_DIRECTED_RECV: u64 = 1 << 59;
pub const FI_CLAIM: u64 = 1 << 59;
pub const FI_DISCARD: u64 = 1 << 58;
/// `fi_bind` flag: only operations with FI_COMPLETION report a completion.
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;

// Mode bits.
pub const FI_CONTEXT: u64 = 1 << 59;
pub const FI_MSG_PREFIX: u64 = 1 << 58;
pub const FI_ASYNC_IOV: u64 = 1 << 57;
pub const FI_RX_CQ_DATA: u64 = 1 << 56;
pub const FI_LOCAL_MR: u64 = 1 << 55;
pub const FI_CONTEXT2: u64 = 1 << 52;

// Address formats, addresses.
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;

// enum fi_av_type
pub const FI_AV_UNSPEC: i32 = 0;
pub const FI_AV_MAP: i32 = 1;
pub const FI_AV_TABLE: i32 = 2;

// Memory registration modes.
pub const FI_MR_UNSPEC: i32 = 0;
pub const FI_MR_BASIC: i32 = 1;
pub const FI_MR_SCALABLE: i32 = 2;
pub const FI_MR_LOCAL: i32 = 1 << 2;
pub const FI_MR_RAW: i32 = 1 << 3;
pub const FI_MR_VIRT_ADDR: i32 = 1 << 4;
pub const FI_MR_ALLOCATED: i32 = 1 << 5;
pub const FI_MR_PROV_KEY: i32 = 1 << 6;
pub const FI_MR_MMU_NOTIFY: i32 = 1 << 7;
pub const FI_MR_RMA_EVENT: i32 = 1 << 8;
pub const FI_MR_ENDPOINT: i32 = 1 << 9;
pub const FI_MR_HMEM: i32 = 1 << 10;

// enum fi_progress, fi_threading, fi_resource_mgmt
pub const FI_PROGRESS_UNSPEC: i32 = 0;
pub const FI_PROGRESS_AUTO: i32 = 1;
pub const FI_PROGRESS_MANUAL: i32 = 2;
pub const FI_THREAD_UNSPEC: i32 = 0;
pub const FI_THREAD_SAFE: i32 = 1;
pub const FI_THREAD_FID: i32 = 2;
pub const FI_THREAD_DOMAIN: i32 = 3;
pub const FI_THREAD_COMPLETION: i32 = 4;
pub const FI_THREAD_ENDPOINT: i32 = 5;
pub const FI_RM_UNSPEC: i32 = 0;
pub const FI_RM_DISABLED: i32 = 1;
pub const FI_RM_ENABLED: i32 = 2;

// Message ordering.
pub const FI_ORDER_SAS: u64 = 1 << 8;

// enum fi_ep_type
pub const FI_EP_UNSPEC: i32 = 0;
pub const FI_EP_RDM: i32 = 3;

// fid classes.
pub const FI_CLASS_FABRIC: usize = 1;
pub const FI_CLASS_DOMAIN: usize = 2;
pub const FI_CLASS_EP: usize = 3;
pub const FI_CLASS_AV: usize = 11;
pub const FI_CLASS_MR: usize = 12;
pub const FI_CLASS_EQ: usize = 13;
pub const FI_CLASS_CQ: usize = 14;
pub const FI_CLASS_CNTR: usize = 15;
pub const FI_KEY_NOTAVAIL: u64 = u64::MAX;

// fi_control commands.
pub const FI_GETOPSFLAG: i32 = 2;
pub const FI_SETOPSFLAG: i32 = 3;
pub const FI_GETWAIT: i32 = 5;
pub const FI_ENABLE: i32 = 6;
pub const FI_GETWAITOBJ: i32 = 16;

// enum fi_wait_obj
pub const FI_WAIT_NONE: i32 = 0;
pub const FI_WAIT_UNSPEC: i32 = 1;
pub const FI_WAIT_SET: i32 = 2;
pub const FI_WAIT_FD: i32 = 3;
pub const FI_WAIT_MUTEX_COND: i32 = 4;
pub const FI_WAIT_YIELD: i32 = 5;

// enum fi_cq_format
pub const FI_CQ_FORMAT_UNSPEC: i32 = 0;
pub const FI_CQ_FORMAT_CONTEXT: i32 = 1;
pub const FI_CQ_FORMAT_MSG: i32 = 2;
pub const FI_CQ_FORMAT_DATA: i32 = 3;
pub const FI_CQ_FORMAT_TAGGED: i32 = 4;
// enum fi_cq_wait_cond
pub const FI_CQ_COND_NONE: i32 = 0;

// EQ events.
pub const FI_AV_COMPLETE: u32 = 5;

// Endpoint options (level FI_OPT_ENDPOINT = 0).
pub const FI_OPT_ENDPOINT: i32 = 0;
pub const FI_OPT_MIN_MULTI_RECV: i32 = 0;

// enum fi_param_type
pub const FI_PARAM_STRING: i32 = 0;
pub const FI_PARAM_INT: i32 = 1;
pub const FI_PARAM_BOOL: i32 = 2;
pub const FI_PARAM_SIZE_T: i32 = 3;

// enum fi_log_level, fi_log_subsys
pub const FI_LOG_WARN: i32 = 0;
pub const FI_LOG_INFO: i32 = 2;
pub const FI_LOG_DEBUG: i32 = 3;
pub const FI_LOG_CORE: i32 = 0;
pub const FI_LOG_FABRIC: i32 = 1;
pub const FI_LOG_DOMAIN: i32 = 2;
pub const FI_LOG_EP_CTRL: i32 = 3;
pub const FI_LOG_EP_DATA: i32 = 4;
pub const FI_LOG_AV: i32 = 5;
pub const FI_LOG_CQ: i32 = 6;
pub const FI_LOG_MR: i32 = 7;

/// libfabric's error codes (positive; calls return them negated).
pub mod errno {
    pub const FI_EPERM: i32 = libc::EPERM;
    pub const FI_ENOENT: i32 = libc::ENOENT;
    pub const FI_EIO: i32 = libc::EIO;
    pub const FI_EAGAIN: i32 = libc::EAGAIN;
    pub const FI_ENOMEM: i32 = libc::ENOMEM;
    pub const FI_EACCES: i32 = libc::EACCES;
    pub const FI_EBUSY: i32 = libc::EBUSY;
    pub const FI_ENODEV: i32 = libc::ENODEV;
    pub const FI_EINVAL: i32 = libc::EINVAL;
    pub const FI_ENOSPC: i32 = libc::ENOSPC;
    pub const FI_ENOSYS: i32 = libc::ENOSYS;
    pub const FI_ENOMSG: i32 = libc::ENOMSG;
    pub const FI_ENODATA: i32 = libc::ENODATA;
    pub const FI_EOVERFLOW: i32 = libc::EOVERFLOW;
    pub const FI_EMSGSIZE: i32 = libc::EMSGSIZE;
    pub const FI_ENOPROTOOPT: i32 = libc::ENOPROTOOPT;
    pub const FI_EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
    pub const FI_EADDRINUSE: i32 = libc::EADDRINUSE;
    pub const FI_EADDRNOTAVAIL: i32 = libc::EADDRNOTAVAIL;
    pub const FI_ENETDOWN: i32 = libc::ENETDOWN;
    pub const FI_ECONNRESET: i32 = libc::ECONNRESET;
    pub const FI_ENOTCONN: i32 = libc::ENOTCONN;
    pub const FI_ETIMEDOUT: i32 = libc::ETIMEDOUT;
    pub const FI_ECONNREFUSED: i32 = libc::ECONNREFUSED;
    pub const FI_EHOSTUNREACH: i32 = libc::EHOSTUNREACH;
    pub const FI_EREMOTEIO: i32 = libc::EREMOTEIO;
    pub const FI_ECANCELED: i32 = libc::ECANCELED;
    pub const FI_EKEYREJECTED: i32 = libc::EKEYREJECTED;
    pub const FI_EOTHER: i32 = 256;
    pub const FI_ETOOSMALL: i32 = 257;
    pub const FI_EOPBADSTATE: i32 = 258;
    pub const FI_EAVAIL: i32 = 259;
    pub const FI_EBADFLAGS: i32 = 260;
    pub const FI_ENOEQ: i32 = 261;
    pub const FI_EDOMAIN: i32 = 262;
    pub const FI_ENOCQ: i32 = 263;
    pub const FI_ETRUNC: i32 = 265;
    pub const FI_ENOKEY: i32 = 266;
    pub const FI_ENOAV: i32 = 267;
}
