//! `fi_getinfo`: what this provider offers, matched against the
//! application's hints as fi_getinfo(3) says: a non-zero hint is a
//! requirement (one the provider cannot meet gives -FI_ENODATA, never a
//! weaker answer), a zero one leaves the choice to the provider; primary
//! capabilities come back only when asked for, secondary ones may be
//! added; the threading, progress and address-vector models asked for are
//! echoed.
//!
//! The matching is a pure function over Rust copies of the hints
//! ([`Hints`]), tested without a libfabric core; [`write_info`] then fills
//! the core's own `fi_info` allocations.

use std::ffi::CStr;

use crate::abi::*;
use crate::addr::{Name, NAME_LEN};

/// One-sided capabilities: served when the application takes this
/// provider's memory-registration modes ([`RMA_MR_MODE`]).
pub const RMA_CAPS: u64 = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
/// Primary capabilities served.
pub const PRIMARY_CAPS: u64 = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | RMA_CAPS;
/// What RMA needs of the application: registrations bound to an endpoint
/// (each endpoint registers the memory with its own message layer) and
/// keys the provider chooses; remote addresses are offsets into the
/// region (no FI_MR_VIRT_ADDR).
pub const RMA_MR_MODE: i32 = FI_MR_ENDPOINT | FI_MR_PROV_KEY;
/// Secondary capabilities served (returned whether asked for or not).
pub const SECONDARY_CAPS: u64 = FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_MULTI_RECV;
/// Everything served.
pub const CAPS: u64 = PRIMARY_CAPS | SECONDARY_CAPS;
/// The capabilities that describe a transmit context (`tx_attr->caps`).
const TX_CAPS: u64 = FI_MSG | FI_TAGGED | FI_RMA | FI_SEND | FI_READ | FI_WRITE;
/// The capabilities that describe a receive context (`rx_attr->caps`).
const RX_CAPS: u64 = FI_MSG
    | FI_TAGGED
    | FI_RMA
    | FI_RECV
    | FI_REMOTE_READ
    | FI_REMOTE_WRITE
    | FI_DIRECTED_RECV
    | FI_SOURCE
    | FI_MULTI_RECV;
/// Operation flags a transmit or receive context may default to.
const OP_FLAGS: u64 = FI_COMPLETION
    | FI_INJECT_COMPLETE
    | FI_TRANSMIT_COMPLETE
    | FI_DELIVERY_COMPLETE
    | FI_MULTI_RECV
    | FI_REMOTE_CQ_DATA;
/// Largest message: the message layer's header carries a 64-bit length;
/// what bounds it in practice is memory.
pub const MAX_MSG_SIZE: usize = 1 << 40;
/// Largest `fi_inject`: one item of a bundle (the message layer copies it
/// into the packet).
pub const INJECT_SIZE: usize = 1024;
/// Bytes of remote CQ data a message carries.
pub const CQ_DATA_SIZE: usize = 8;
/// Tag bits: all 64 (libfabric's generic format, every bit matchable).
pub const MEM_TAG_FORMAT: u64 = 0xAAAA_AAAA_AAAA_AAAA;
/// Queue depths advertised (the provider grows its queues instead of
/// overrunning them: FI_RM_ENABLED).
pub const QUEUE_SIZE: usize = 4096;

/// The fabric's name in `fabric_attr->name`.
pub const FABRIC_NAME: &str = "llc";

/// The parts of an application's `fi_info` hints that matter, copied out
/// of C memory (or built by a test).
#[derive(Clone, Debug, Default)]
pub struct Hints {
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addr: Option<Vec<u8>>,
    pub dest_addr: Option<Vec<u8>>,
    pub tx: Option<TxHints>,
    pub rx: Option<RxHints>,
    pub ep: Option<EpHints>,
    pub domain: Option<DomainHints>,
    pub fabric: Option<FabricHints>,
    /// `hints->handle` set (a passive endpoint's connection request).
    pub handle: bool,
}

#[derive(Clone, Debug, Default)]
pub struct TxHints {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
}

#[derive(Clone, Debug, Default)]
pub struct RxHints {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[derive(Clone, Debug, Default)]
pub struct EpHints {
    pub type_: i32,
    pub protocol: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
}

#[derive(Clone, Debug, Default)]
pub struct DomainHints {
    /// `domain_attr->domain`: an open domain the application wants reused.
    pub domain: usize,
    pub name: Option<String>,
    pub threading: i32,
    pub control_progress: i32,
    pub data_progress: i32,
    pub resource_mgmt: i32,
    pub av_type: i32,
    pub mr_mode: i32,
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
    pub auth_key_size: usize,
}

#[derive(Clone, Debug, Default)]
pub struct FabricHints {
    /// `fabric_attr->fabric`: an open fabric the application wants reused.
    pub fabric: usize,
    pub name: Option<String>,
}

/// One answer: an interface and the attributes chosen for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    pub ifname: String,
    pub caps: u64,
    pub mode: u64,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub msg_order: u64,
    pub mem_tag_format: u64,
    pub threading: i32,
    pub control_progress: i32,
    pub data_progress: i32,
    pub resource_mgmt: i32,
    pub av_type: i32,
    pub mr_mode: i32,
    pub src_addr: Option<Name>,
    pub dest_addr: Option<Name>,
    pub domain: usize,
    pub fabric: usize,
}

/// Why no answer: always -FI_ENODATA to the core, with the reason logged.
#[derive(Debug, PartialEq, Eq)]
pub struct NoMatch(pub String);

fn need(ok: bool, why: impl FnOnce() -> String) -> Result<(), NoMatch> {
    if ok {
        Ok(())
    } else {
        Err(NoMatch(why()))
    }
}

/// What [`answer`] needs to know of this host.
pub struct Host<'a> {
    /// The interfaces to offer, in order, with their MACs.
    pub ifaces: &'a [(String, [u8; 6])],
    /// Whether a `fabric_attr->fabric` in the hints is one of this provider's.
    pub known_fabric: &'a dyn Fn(usize) -> bool,
    /// Whether a `domain_attr->domain` (with its name) is one of this provider's.
    pub known_domain: &'a dyn Fn(usize, &str) -> bool,
    /// Whether a node name that is neither an interface nor a `[MAC]` names
    /// this host: `Some(None)` for the host as a whole (`localhost`, its host
    /// name, a loopback address), `Some(Some(ifname))` for an IP address one
    /// of its interfaces holds, `None` for anything else.
    pub this_host: &'a dyn Fn(&str) -> Option<Option<String>>,
}

/// Match `hints` (API `version`) against the host's interfaces (in the
/// order to offer them). `node`/`service` with `FI_SOURCE` in `flags` name
/// the local address (an interface name, a `[MAC]`, or a name or IP address
/// of this host, and a port); without it the destination, like `dest_addr`
/// (a `[MAC]`, or this host: its own interface's address). Every answer
/// carries its source address (port 0 when none was asked for: the
/// endpoint takes a free port).
pub fn answer(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&Hints>,
    host: &Host,
) -> Result<Vec<Offer>, NoMatch> {
    let default = Hints::default();
    let h = hints.unwrap_or(&default);
    need(!h.handle, || {
        "passive endpoints are not offered (FI_EP_RDM only)".into()
    })?;
    need(h.caps & !CAPS == 0, || {
        format!(
            "capabilities {:#x} not offered (offered: {CAPS:#x})",
            h.caps & !CAPS
        )
    })?;
    need(h.addr_format == FI_FORMAT_UNSPEC, || {
        format!(
            "address format {} (this provider's is FI_FORMAT_UNSPEC)",
            h.addr_format
        )
    })?;
    let caps = if h.caps == 0 {
        CAPS
    } else {
        (h.caps & CAPS) | SECONDARY_CAPS
    };
    let mut offer = Offer {
        ifname: String::new(),
        caps,
        mode: 0,
        tx_op_flags: 0,
        rx_op_flags: 0,
        msg_order: FI_ORDER_SAS,
        mem_tag_format: MEM_TAG_FORMAT,
        threading: FI_THREAD_SAFE,
        control_progress: FI_PROGRESS_AUTO,
        data_progress: FI_PROGRESS_MANUAL,
        resource_mgmt: FI_RM_ENABLED,
        av_type: FI_AV_UNSPEC,
        mr_mode: if version < fi_version(1, 5) {
            FI_MR_SCALABLE
        } else {
            0
        },
        src_addr: None,
        dest_addr: None,
        domain: 0,
        fabric: 0,
    };
    if let Some(tx) = &h.tx {
        need(tx.caps & !CAPS == 0, || {
            format!("tx capabilities {:#x}", tx.caps & !CAPS)
        })?;
        need(tx.op_flags & !OP_FLAGS == 0, || {
            format!("tx op_flags {:#x}", tx.op_flags & !OP_FLAGS)
        })?;
        need(tx.msg_order & !FI_ORDER_SAS == 0, || {
            format!("tx msg_order {:#x}", tx.msg_order)
        })?;
        need(tx.comp_order == 0, || {
            format!("tx comp_order {:#x}", tx.comp_order)
        })?;
        need(tx.inject_size <= INJECT_SIZE, || {
            format!("inject_size {}", tx.inject_size)
        })?;
        need(tx.size <= QUEUE_SIZE, || format!("tx size {}", tx.size))?;
        need(tx.iov_limit <= 1, || {
            format!("tx iov_limit {}", tx.iov_limit)
        })?;
        need(tx.rma_iov_limit <= 1, || {
            format!("rma_iov_limit {}", tx.rma_iov_limit)
        })?;
        offer.tx_op_flags = tx.op_flags;
    }
    if let Some(rx) = &h.rx {
        need(rx.caps & !CAPS == 0, || {
            format!("rx capabilities {:#x}", rx.caps & !CAPS)
        })?;
        need(rx.op_flags & !OP_FLAGS == 0, || {
            format!("rx op_flags {:#x}", rx.op_flags & !OP_FLAGS)
        })?;
        need(rx.msg_order & !FI_ORDER_SAS == 0, || {
            format!("rx msg_order {:#x}", rx.msg_order)
        })?;
        need(rx.comp_order == 0, || {
            format!("rx comp_order {:#x}", rx.comp_order)
        })?;
        need(rx.total_buffered_recv == 0, || "total_buffered_recv".into())?;
        need(rx.size <= QUEUE_SIZE, || format!("rx size {}", rx.size))?;
        need(rx.iov_limit <= 1, || {
            format!("rx iov_limit {}", rx.iov_limit)
        })?;
        offer.rx_op_flags = rx.op_flags;
    }
    if let Some(ep) = &h.ep {
        need(ep.type_ == FI_EP_UNSPEC || ep.type_ == FI_EP_RDM, || {
            format!("endpoint type {} (only FI_EP_RDM)", ep.type_)
        })?;
        need(ep.protocol == 0, || format!("protocol {}", ep.protocol))?;
        need(ep.max_msg_size <= MAX_MSG_SIZE, || {
            format!("max_msg_size {}", ep.max_msg_size)
        })?;
        need(ep.msg_prefix_size == 0, || "msg_prefix_size".into())?;
        need(
            ep.max_order_raw_size == 0 && ep.max_order_war_size == 0 && ep.max_order_waw_size == 0,
            || "RMA ordering sizes".into(),
        )?;
        need(ep.tx_ctx_cnt <= 1 && ep.rx_ctx_cnt <= 1, || {
            "shared or several contexts".into()
        })?;
        need(ep.auth_key_size == 0, || {
            "endpoint auth_key (set LLC_AUTH_KEY)".into()
        })?;
        if ep.mem_tag_format != 0 {
            need(
                ep.mem_tag_format.leading_zeros() >= MEM_TAG_FORMAT.leading_zeros(),
                || format!("mem_tag_format {:#x}", ep.mem_tag_format),
            )?;
            offer.mem_tag_format = ep.mem_tag_format;
        }
    }
    if let Some(d) = &h.domain {
        need(
            matches!(
                d.threading,
                FI_THREAD_UNSPEC
                    | FI_THREAD_SAFE
                    | FI_THREAD_FID
                    | FI_THREAD_DOMAIN
                    | FI_THREAD_COMPLETION
                    | FI_THREAD_ENDPOINT
            ),
            || format!("threading {}", d.threading),
        )?;
        if d.threading != FI_THREAD_UNSPEC {
            offer.threading = d.threading;
        }
        for (p, slot) in [
            (d.control_progress, &mut offer.control_progress),
            (d.data_progress, &mut offer.data_progress),
        ] {
            need(
                matches!(
                    p,
                    FI_PROGRESS_UNSPEC | FI_PROGRESS_AUTO | FI_PROGRESS_MANUAL
                ),
                || format!("progress {p}"),
            )?;
            if p != FI_PROGRESS_UNSPEC {
                *slot = p;
            }
        }
        need(
            matches!(
                d.resource_mgmt,
                FI_RM_UNSPEC | FI_RM_ENABLED | FI_RM_DISABLED
            ),
            || format!("resource_mgmt {}", d.resource_mgmt),
        )?;
        if d.resource_mgmt != FI_RM_UNSPEC {
            offer.resource_mgmt = d.resource_mgmt;
        }
        need(
            matches!(d.av_type, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE),
            || format!("av_type {}", d.av_type),
        )?;
        offer.av_type = d.av_type;
        offer.mr_mode = mr_mode(version, d.mr_mode)?;
        need(d.mr_key_size <= 8, || {
            format!("mr_key_size {}", d.mr_key_size)
        })?;
        need(d.cq_data_size <= CQ_DATA_SIZE, || {
            format!("cq_data_size {}", d.cq_data_size)
        })?;
        need(d.max_ep_tx_ctx <= 1 && d.max_ep_rx_ctx <= 1, || {
            "several contexts per endpoint".into()
        })?;
        need(d.max_ep_stx_ctx == 0 && d.max_ep_srx_ctx == 0, || {
            "shared contexts".into()
        })?;
        need(d.mr_iov_limit <= 1, || {
            format!("mr_iov_limit {}", d.mr_iov_limit)
        })?;
        need(d.caps & !CAPS == 0, || {
            format!("domain capabilities {:#x}", d.caps & !CAPS)
        })?;
        need(d.auth_key_size == 0, || {
            "domain auth_key (set LLC_AUTH_KEY)".into()
        })?;
        if d.domain != 0 {
            need(
                (host.known_domain)(d.domain, d.name.as_deref().unwrap_or("")),
                || "domain_attr->domain is not one of this provider's".into(),
            )?;
            offer.domain = d.domain;
        }
    }
    // RMA only where the application takes the registration modes it needs.
    if offer.caps & RMA_CAPS != 0 {
        let allowed = version >= fi_version(1, 5)
            && h.domain
                .as_ref()
                .is_none_or(|d| d.mr_mode & RMA_MR_MODE == RMA_MR_MODE);
        if allowed {
            offer.mr_mode |= RMA_MR_MODE;
        } else {
            need(h.caps & RMA_CAPS == 0, || {
                "RMA needs mr_mode FI_MR_ENDPOINT|FI_MR_PROV_KEY in the hints (API 1.5 or later)"
                    .into()
            })?;
            offer.caps &= !RMA_CAPS;
        }
    }
    if let Some(f) = &h.fabric {
        if let Some(name) = &f.name {
            need(name == FABRIC_NAME, || {
                format!("fabric {name:?} (this provider's is {FABRIC_NAME:?})")
            })?;
        }
        if f.fabric != 0 {
            need((host.known_fabric)(f.fabric), || {
                "fabric_attr->fabric is not one of this provider's".into()
            })?;
            offer.fabric = f.fabric;
        }
    }
    let domain_name = h.domain.as_ref().and_then(|d| d.name.clone());

    // Addresses: the source (FI_SOURCE with node/service, or src_addr)
    // picks the interface; the destination is returned as given.
    let (mut src, mut dest) = (None, None);
    if let Some(b) = &h.src_addr {
        src =
            Some(Name::from_bytes(b).ok_or_else(|| NoMatch("src_addr is not an llc name".into()))?);
    }
    if let Some(b) = &h.dest_addr {
        dest = Some(
            Name::from_bytes(b).ok_or_else(|| NoMatch("dest_addr is not an llc name".into()))?,
        );
    }
    let ifaces = host.ifaces;
    let mut src_iface: Option<String> = None;
    // The destination is this host itself (its own interface's address).
    let mut dest_self: Option<Option<String>> = None;
    if node.is_some() || service.is_some() {
        let port = match service {
            Some(s) => Some(
                s.parse::<u16>()
                    .map_err(|_| NoMatch(format!("service {s:?} is not a port number")))?,
            ),
            None => None,
        };
        if flags & FI_SOURCE != 0 {
            if let Some(n) = node {
                if let Some((name, _)) = ifaces.iter().find(|(i, _)| i == n) {
                    src_iface = Some(name.clone());
                } else if let Some(mac) = Name::parse_mac(n) {
                    src = Some(Name::new(mac, port.unwrap_or(0)));
                } else {
                    match (host.this_host)(n) {
                        Some(iface) => src_iface = iface,
                        None => {
                            return Err(NoMatch(format!(
                                "node {n:?}: not an interface, a [MAC], or a name or address of \
                                 this host"
                            )))
                        }
                    }
                }
            }
            if let (Some(p), None) = (port, &src) {
                src = Some(Name::new([0; 6], p));
            }
        } else {
            let n = node.ok_or_else(|| NoMatch("service without node names no peer".into()))?;
            if let Some(mac) = Name::parse_mac(n) {
                dest = Some(Name::new(mac, port.unwrap_or(0)));
            } else if let Some(iface) = (host.this_host)(n) {
                dest_self = Some(iface);
                dest = Some(Name::new([0; 6], port.unwrap_or(0)));
            } else {
                return Err(NoMatch(format!(
                    "node {n:?}: peers are named by [MAC]; host names and IP addresses name only \
                     this host"
                )));
            }
        }
    }

    let mut out = Vec::new();
    for (ifname, mac) in ifaces {
        if let Some(n) = &domain_name {
            if n != ifname {
                continue;
            }
        }
        if let Some(n) = &src_iface {
            if n != ifname {
                continue;
            }
        }
        if let Some(Some(n)) = &dest_self {
            if n != ifname {
                continue;
            }
        }
        let mut o = offer.clone();
        o.ifname = ifname.clone();
        let port = match src {
            Some(s) if s.mac != [0; 6] && s.mac != *mac => continue,
            Some(s) => s.port,
            None => 0,
        };
        o.src_addr = Some(Name::new(*mac, port));
        o.dest_addr = match (dest, &dest_self) {
            (Some(d), Some(_)) => Some(Name::new(*mac, d.port)),
            (d, _) => d,
        };
        out.push(o);
    }
    if out.is_empty() {
        return Err(NoMatch(match domain_name {
            Some(n) => format!(
                "domain {n:?} is not an interface that can carry LLC here ({})",
                ifaces
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None if ifaces.is_empty() => "no interface here can carry LLC".into(),
            None => "no interface has the source address asked for".into(),
        }));
    }
    Ok(out)
}

/// The memory-registration mode to answer: this provider requires none.
/// Before API 1.5, FI_MR_BASIC and FI_MR_SCALABLE are the only modes (an
/// unspecified one is answered as scalable); from 1.5 on, hints list the
/// modes the application can work with, and none of them is required.
fn mr_mode(version: u32, hint: i32) -> Result<i32, NoMatch> {
    if version < fi_version(1, 5) {
        return match hint {
            FI_MR_UNSPEC | FI_MR_SCALABLE => Ok(FI_MR_SCALABLE),
            FI_MR_BASIC => Ok(FI_MR_BASIC),
            other => Err(NoMatch(format!("mr_mode {other} for API below 1.5"))),
        };
    }
    // Whatever the hint lists (FI_MR_BASIC included, the old name of
    // VIRT_ADDR|PROV_KEY|ALLOCATED), nothing is required here.
    let _ = hint;
    Ok(0)
}

/// The hints as Rust values. Reads `fi_domain_attr`'s 2.x tail only when
/// the core (whose layout hints always have) is 1.20 or newer.
///
/// # Safety
/// `info` is a valid `fi_info` from the core.
pub unsafe fn read_hints(info: &FiInfo) -> Hints {
    let cstr = |p: *const std::ffi::c_char| {
        // SAFETY: the caller's guarantee covers the strings it points to.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let bytes = |p: *const std::ffi::c_void, len: usize| {
        // SAFETY: as above; a NULL or empty address is no address.
        (!p.is_null() && len > 0)
            .then(|| unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec())
    };
    // SAFETY: non-NULL attr pointers of a valid fi_info point to valid
    // attrs of the core's layout (1.17's fields are a prefix of 2.x's and
    // nothing past them is read here).
    unsafe {
        Hints {
            caps: info.caps,
            mode: info.mode,
            addr_format: info.addr_format,
            src_addr: bytes(info.src_addr, info.src_addrlen),
            dest_addr: bytes(info.dest_addr, info.dest_addrlen),
            handle: !info.handle.is_null(),
            tx: info.tx_attr.as_ref().map(|t| TxHints {
                caps: t.caps,
                mode: t.mode,
                op_flags: t.op_flags,
                msg_order: t.msg_order,
                comp_order: t.comp_order,
                inject_size: t.inject_size,
                size: t.size,
                iov_limit: t.iov_limit,
                rma_iov_limit: t.rma_iov_limit,
            }),
            rx: info.rx_attr.as_ref().map(|r| RxHints {
                caps: r.caps,
                mode: r.mode,
                op_flags: r.op_flags,
                msg_order: r.msg_order,
                comp_order: r.comp_order,
                total_buffered_recv: r.total_buffered_recv,
                size: r.size,
                iov_limit: r.iov_limit,
            }),
            ep: info.ep_attr.as_ref().map(|e| EpHints {
                type_: e.type_,
                protocol: e.protocol,
                max_msg_size: e.max_msg_size,
                msg_prefix_size: e.msg_prefix_size,
                max_order_raw_size: e.max_order_raw_size,
                max_order_war_size: e.max_order_war_size,
                max_order_waw_size: e.max_order_waw_size,
                mem_tag_format: e.mem_tag_format,
                tx_ctx_cnt: e.tx_ctx_cnt,
                rx_ctx_cnt: e.rx_ctx_cnt,
                auth_key_size: e.auth_key_size,
            }),
            domain: info.domain_attr.as_ref().map(|d| DomainHints {
                domain: d.domain as usize,
                name: cstr(d.name),
                threading: d.threading,
                control_progress: d.control_progress,
                data_progress: d.data_progress,
                resource_mgmt: d.resource_mgmt,
                av_type: d.av_type,
                mr_mode: d.mr_mode,
                mr_key_size: d.mr_key_size,
                cq_data_size: d.cq_data_size,
                cq_cnt: d.cq_cnt,
                ep_cnt: d.ep_cnt,
                tx_ctx_cnt: d.tx_ctx_cnt,
                rx_ctx_cnt: d.rx_ctx_cnt,
                max_ep_tx_ctx: d.max_ep_tx_ctx,
                max_ep_rx_ctx: d.max_ep_rx_ctx,
                max_ep_stx_ctx: d.max_ep_stx_ctx,
                max_ep_srx_ctx: d.max_ep_srx_ctx,
                cntr_cnt: d.cntr_cnt,
                mr_iov_limit: d.mr_iov_limit,
                caps: d.caps,
                mode: d.mode,
                auth_key_size: d.auth_key_size,
            }),
            fabric: info.fabric_attr.as_ref().map(|f| FabricHints {
                fabric: f.fabric as usize,
                name: cstr(f.name),
            }),
        }
    }
}

/// Fill `info` (allocated by the core's `fi_dupinfo(NULL)`: every attr
/// present and zeroed, in the core's layout) with `offer`. Strings and
/// addresses are allocated with libc's allocator, which the core's
/// `fi_freeinfo` frees.
///
/// # Safety
/// `info` and its attrs are valid, writable and zeroed; `core_version` is
/// the core's (which fields of `fi_domain_attr` exist).
pub unsafe fn write_info(info: &mut FiInfo, o: &Offer, core_version: u32) {
    let strdup = |s: &str| {
        let c = std::ffi::CString::new(s).unwrap_or_default();
        // SAFETY: a NUL-terminated string; the core frees it with free().
        unsafe { libc::strdup(c.as_ptr()) }
    };
    let addr = |n: &Name| {
        // SAFETY: malloc of NAME_LEN bytes, filled below; freed by the core.
        let p = unsafe { libc::malloc(NAME_LEN) }.cast::<u8>();
        if !p.is_null() {
            // SAFETY: p holds NAME_LEN bytes.
            unsafe { std::ptr::copy_nonoverlapping(n.to_bytes().as_ptr(), p, NAME_LEN) };
        }
        p.cast::<std::ffi::c_void>()
    };
    info.caps = o.caps;
    info.mode = o.mode;
    info.addr_format = FI_FORMAT_UNSPEC;
    if let Some(s) = &o.src_addr {
        info.src_addr = addr(s);
        info.src_addrlen = if info.src_addr.is_null() { 0 } else { NAME_LEN };
    }
    if let Some(d) = &o.dest_addr {
        info.dest_addr = addr(d);
        info.dest_addrlen = if info.dest_addr.is_null() {
            0
        } else {
            NAME_LEN
        };
    }
    // SAFETY: the caller's guarantee: every attr pointer is valid.
    unsafe {
        let tx = &mut *info.tx_attr;
        tx.caps = o.caps & TX_CAPS;
        tx.mode = o.mode;
        tx.op_flags = o.tx_op_flags;
        tx.msg_order = o.msg_order;
        tx.comp_order = 0;
        tx.inject_size = INJECT_SIZE;
        tx.size = QUEUE_SIZE;
        tx.iov_limit = 1;
        tx.rma_iov_limit = 1;
        let rx = &mut *info.rx_attr;
        rx.caps = o.caps & RX_CAPS;
        rx.mode = o.mode;
        rx.op_flags = o.rx_op_flags;
        rx.msg_order = o.msg_order;
        rx.comp_order = 0;
        rx.size = QUEUE_SIZE;
        rx.iov_limit = 1;
        let ep = &mut *info.ep_attr;
        ep.type_ = FI_EP_RDM;
        ep.protocol = 0;
        ep.protocol_version = 1;
        ep.max_msg_size = MAX_MSG_SIZE;
        ep.mem_tag_format = o.mem_tag_format;
        ep.tx_ctx_cnt = 1;
        ep.rx_ctx_cnt = 1;
        let d = &mut *info.domain_attr;
        d.domain = o.domain as *mut FidDomain;
        d.name = strdup(&o.ifname);
        d.threading = o.threading;
        d.control_progress = o.control_progress;
        d.data_progress = o.data_progress;
        d.resource_mgmt = o.resource_mgmt;
        d.av_type = o.av_type;
        d.mr_mode = o.mr_mode;
        d.mr_key_size = 8;
        d.cq_data_size = CQ_DATA_SIZE;
        d.cq_cnt = 1024;
        d.ep_cnt = 1024;
        d.tx_ctx_cnt = 1024;
        d.rx_ctx_cnt = 1024;
        d.max_ep_tx_ctx = 1;
        d.max_ep_rx_ctx = 1;
        d.max_ep_stx_ctx = 0;
        d.max_ep_srx_ctx = 0;
        d.cntr_cnt = 1024;
        d.mr_iov_limit = 1;
        d.caps = o.caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);
        d.mode = 0;
        d.max_err_data = 0;
        d.mr_cnt = 1 << 16;
        if core_version >= fi_version(1, 20) {
            d.max_ep_auth_key = 0;
            d.max_cntr_value = u64::MAX;
            d.max_err_cntr_value = u64::MAX;
        }
        let f = &mut *info.fabric_attr;
        f.fabric = o.fabric as *mut FidFabric;
        f.name = strdup(FABRIC_NAME);
        // prov_name stays NULL: the core fills it (a non-NULL one would be
        // taken for a utility provider's layering).
        f.prov_version = crate::PROVIDER_VERSION;
    }
}

#[cfg(test)]
mod tests;
