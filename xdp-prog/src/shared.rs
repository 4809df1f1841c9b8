//! One XDP program per interface, shared by every endpoint process of the
//! host (see the README's "Sharing one interface" for the design).
//!
//! Many processes (MPI ranks) run LLC endpoints on one NIC: same MAC, same
//! SAP, one transport port each. An interface holds one XDP program per hook,
//! so the endpoints share one: `llc_steer`, which hands each UI frame to the
//! AF_XDP socket of the endpoint that registered its transport `dst_port`
//! (for the RX queue the frame came in on), TEST and XID to the endpoint
//! named as the interface's link responder, and everything else to the
//! kernel.
//!
//! [`SharedProgram::join`] attaches the program when no endpoint of this
//! interface (in this network namespace) holds it, and otherwise takes
//! duplicates of a live member's descriptors (the BPF link and the maps)
//! with `pidfd_open` + `pidfd_getfd`. The BPF link lives as long as any
//! process holds a descriptor of it: the program stays while one endpoint
//! lives and is detached by the kernel when the last one exits or is killed.
//!
//! Every cross-process fact lives in the kernel and dies with its process:
//! - membership: each member binds an abstract unix socket
//!   `llc-xdp/v1/if<ifindex>/member/<pid>/<link>,<ports>,<slots>,<xsks>,<config>,<counters>`
//!   (its descriptor numbers); joiners list them in
//!   `/proc/thread-self/net/unix`;
//! - claims (slot, ports, link responder): binding
//!   `llc-xdp/v1/if<ifindex>/slot/<n>`, `.../port/<p>`, `.../responder`;
//!   a second bind fails with `EADDRINUSE`, the name goes when its process
//!   does. The abstract namespace belongs to the network namespace, as the
//!   interface index does.

use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use libbpf_rs::query::{LinkInfo, LinkTypeInfo};
use libbpf_rs::MapCore;

use crate::offer::{self, bind_abstract, claim, Offered};
use crate::sys::{self, RawMap};
use crate::{
    attach_error, load_kind, quiet_libbpf, AttachMode, Attached, Counters, Kind, XdpConfig,
    XdpError, XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE,
};

/// Endpoint slots of a shared program: at most this many endpoints (live
/// processes, or several endpoints of one process) per interface.
pub const STEER_MAX_SLOTS: u32 = 256;

/// RX queues an endpoint can register a socket for: `0..STEER_MAX_QUEUES`.
/// The socket map's key is `slot * STEER_MAX_QUEUES + queue`.
pub const STEER_MAX_QUEUES: u32 = 64;

/// Entries of the port map: every 16-bit transport port.
pub const STEER_PORTS: u32 = 65536;

/// How long [`SharedProgram::join`] keeps trying while the interface has an
/// XDP program that no live member offers (another process attaching at the
/// same moment and not yet listed, or the last holder exiting).
pub const DEFAULT_JOIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Magic and layout version in `steer_config[STEER_CFG_MAGIC]`: "LS" and
/// version 1 of the maps' layout. A program of another layout is not joined.
const LAYOUT_MAGIC: u32 = 0x4C53_0001;

/// Prefix of every abstract socket name; the version changes with the
/// layout, so members of incompatible versions never see each other.
const NAME_ROOT: &str = "llc-xdp/v1";

// Indices of steer_config, as in the C source.
const CFG_RESPONDER: u32 = 0;
const CFG_MAGIC: u32 = 1;
const CFG_SAP: u32 = 2;
const CFG_MAC_HI: u32 = 3;
const CFG_MAC_LO: u32 = 4;
const CFG_FLAGS: u32 = 5;
const CFG_ENTRIES: u32 = 8;
const CFG_MAC_SET: u32 = 1 << 16;
const FLAG_FRAGS: u32 = 1;
const FLAG_NATIVE: u32 = 1 << 1;
const FLAG_GENERIC: u32 = 2 << 1;

// Counter indices, as in the C source.
const COUNTERS: u32 = 6;

/// Largest generation of a slot claim (24 bits of an endpoint reference).
const MAX_GENERATION: u32 = 0x00FF_FFFF;

/// Why a shared program could not be joined, or an endpoint registered.
/// Converts into [`XdpError`] for callers that handle only that.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShareError {
    /// Loading, attaching or a map operation failed (as for [`crate::LlcRedirect`]).
    #[error(transparent)]
    Xdp(#[from] XdpError),
    /// The program other endpoints attached to the interface was loaded with
    /// another SAP, MAC filter, attach mode or without multi-buffer support.
    #[error(
        "the shared XDP program on {iface} was attached with {attached}, but this endpoint \
         asks for {wanted}; all endpoints of an interface share one program, so they must \
         agree on the SAP, the MAC, the attach mode and multi-buffer frames (stop the other \
         endpoints, or open this one with their settings)"
    )]
    ConfigMismatch {
        /// Interface name.
        iface: String,
        /// The attached program's settings.
        attached: String,
        /// This endpoint's settings.
        wanted: String,
    },
    /// Another live endpoint of this host registered the port.
    #[error("port {port} on {iface} is registered by another live endpoint of this host")]
    PortTaken {
        /// Interface name.
        iface: String,
        /// The port.
        port: u16,
    },
    /// Every endpoint slot of the interface is held by a live endpoint.
    #[error("all {STEER_MAX_SLOTS} endpoint slots of the shared XDP program on {iface} are held by live endpoints")]
    NoSlot {
        /// Interface name.
        iface: String,
    },
    /// The RX queue is beyond what the socket map's key layout holds.
    #[error("RX queue {queue} of {iface} is beyond the {STEER_MAX_QUEUES} queues the shared XDP program steers")]
    QueueOutOfRange {
        /// Interface name.
        iface: String,
        /// The queue.
        queue: u32,
    },
    /// A member holds the program but its descriptors cannot be taken.
    #[error(
        "cannot take the shared XDP program's descriptors from endpoint process {pid} on \
         {iface}: {detail}; pidfd_getfd needs PTRACE_MODE_ATTACH over that process (the same \
         user and, when Yama's ptrace_scope is 1 or more or the process gained capabilities \
         from file capabilities, CAP_SYS_PTRACE; root has it)"
    )]
    NoAccess {
        /// Interface name.
        iface: String,
        /// The member process.
        pid: i32,
        /// What the kernel said.
        detail: String,
    },
}

impl From<ShareError> for XdpError {
    fn from(e: ShareError) -> XdpError {
        match e {
            ShareError::Xdp(e) => e,
            ShareError::NoAccess { ref iface, .. } => XdpError::PermissionDenied {
                iface: iface.clone(),
                what: "take the shared XDP program's descriptors from another endpoint process",
                needs: "PTRACE_MODE_ATTACH over it (same user; CAP_SYS_PTRACE under Yama \
                        ptrace_scope >= 1 or for processes with file capabilities)",
            },
            ShareError::QueueOutOfRange { ref iface, .. } => XdpError::Unsupported {
                iface: iface.clone(),
                mode: "shared",
                detail: e.to_string(),
            },
            ShareError::ConfigMismatch { ref iface, .. }
            | ShareError::PortTaken { ref iface, .. }
            | ShareError::NoSlot { ref iface } => XdpError::Other {
                context: format!("joining the shared XDP program on {iface}"),
                detail: e.to_string(),
            },
        }
    }
}

/// Counters of the shared program (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SteerCounters {
    /// UI frames handed to the socket of the endpoint owning their port.
    pub redirected: u64,
    /// UI frames for a live endpoint that has no socket on the frame's RX
    /// queue (or whose process died): passed to the kernel.
    pub no_socket: u64,
    /// Frames that are not ours (other SAP, other MAC, not LLC), or LLC
    /// commands other than UI, TEST and XID: passed to the kernel.
    pub passed: u64,
    /// UI frames for a port no live endpoint registered: passed to the
    /// kernel (an AF_PACKET endpoint of that port receives them there).
    pub no_endpoint: u64,
    /// TEST and XID frames handed to the link responder's socket.
    pub to_responder: u64,
    /// TEST and XID frames while no live endpoint is the link responder, or
    /// it has no socket on the frame's queue: passed to the kernel.
    pub no_responder: u64,
}

impl SteerCounters {
    /// The three counters of the single-owner program: redirected (to an
    /// endpoint or the responder), no socket (any of ours not redirected),
    /// passed.
    pub fn summary(&self) -> Counters {
        Counters {
            redirected: self.redirected + self.to_responder,
            no_socket: self.no_socket + self.no_endpoint + self.no_responder,
            passed: self.passed,
        }
    }
}

/// The maps of `llc_steer`, by descriptor.
#[derive(Debug)]
struct Maps {
    ports: RawMap,
    slots: RawMap,
    xsks: RawMap,
    config: RawMap,
    counters: RawMap,
}

/// What a map must look like: name, type, key size, value size, entries.
const MAP_SHAPES: [(&str, u32, u32, u32, u32); 5] = [
    (
        "steer_ports",
        libbpf_sys::BPF_MAP_TYPE_ARRAY,
        4,
        4,
        STEER_PORTS,
    ),
    (
        "steer_slots",
        libbpf_sys::BPF_MAP_TYPE_ARRAY,
        4,
        4,
        STEER_MAX_SLOTS,
    ),
    (
        "steer_xsks",
        libbpf_sys::BPF_MAP_TYPE_XSKMAP,
        4,
        4,
        STEER_MAX_SLOTS * STEER_MAX_QUEUES,
    ),
    (
        "steer_config",
        libbpf_sys::BPF_MAP_TYPE_ARRAY,
        4,
        4,
        CFG_ENTRIES,
    ),
    (
        "counters",
        libbpf_sys::BPF_MAP_TYPE_PERCPU_ARRAY,
        4,
        8,
        COUNTERS,
    ),
];

impl Maps {
    /// Check that `maps` (in the order of [`MAP_SHAPES`]) are ours.
    fn from_vec(maps: Vec<RawMap>) -> Result<Maps, String> {
        if maps.len() != MAP_SHAPES.len() {
            return Err(format!(
                "{} maps, expected {}",
                maps.len(),
                MAP_SHAPES.len()
            ));
        }
        for (m, &(name, ty, key, value, entries)) in maps.iter().zip(MAP_SHAPES.iter()) {
            if m.name != name
                || m.map_type != ty
                || m.key_size != key
                || m.value_size != value
                || m.max_entries != entries
            {
                return Err(format!(
                    "map {:?} (type {}, key {}, value {}, {} entries) is not {name}",
                    m.name, m.map_type, m.key_size, m.value_size, m.max_entries
                ));
            }
        }
        let mut it = maps.into_iter();
        let mut next = || it.next().expect("length checked");
        Ok(Maps {
            ports: next(),
            slots: next(),
            xsks: next(),
            config: next(),
            counters: next(),
        })
    }

    fn fds(&self) -> [BorrowedFd<'_>; 5] {
        [
            self.ports.fd(),
            self.slots.fd(),
            self.xsks.fd(),
            self.config.fd(),
            self.counters.fd(),
        ]
    }

    fn get(map: &RawMap, key: u32) -> io::Result<u32> {
        let mut v = [0u8; 4];
        map.lookup(&key.to_ne_bytes(), &mut v)?;
        Ok(u32::from_ne_bytes(v))
    }

    fn set(map: &RawMap, key: u32, value: u32) -> io::Result<()> {
        map.update(&key.to_ne_bytes(), &value.to_ne_bytes(), 0)
    }
}

/// The settings a program was loaded with, as its config map tells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProgramSettings {
    sap: u8,
    mac: Option<[u8; 6]>,
    frags: bool,
    attached: Attached,
}

impl ProgramSettings {
    fn read(config: &RawMap) -> io::Result<Result<ProgramSettings, String>> {
        let magic = Maps::get(config, CFG_MAGIC)?;
        if magic != LAYOUT_MAGIC {
            return Ok(Err(format!(
                "layout magic {magic:#x}, expected {LAYOUT_MAGIC:#x}"
            )));
        }
        let sap = Maps::get(config, CFG_SAP)? as u8;
        let hi = Maps::get(config, CFG_MAC_HI)?.to_be_bytes();
        let lo = Maps::get(config, CFG_MAC_LO)?;
        let mac = (lo & CFG_MAC_SET != 0).then(|| {
            let lo = (lo as u16).to_be_bytes();
            [hi[0], hi[1], hi[2], hi[3], lo[0], lo[1]]
        });
        let flags = Maps::get(config, CFG_FLAGS)?;
        let attached = match flags & (3 << 1) {
            FLAG_NATIVE => Attached::Native,
            FLAG_GENERIC => Attached::Generic,
            other => return Ok(Err(format!("attach mode bits {other:#x}"))),
        };
        Ok(Ok(ProgramSettings {
            sap,
            mac,
            frags: flags & FLAG_FRAGS != 0,
            attached,
        }))
    }

    fn write(&self, config: &RawMap) -> io::Result<()> {
        let mac = self.mac.unwrap_or([0; 6]);
        let set = if self.mac.is_some() { CFG_MAC_SET } else { 0 };
        Maps::set(config, CFG_SAP, u32::from(self.sap))?;
        Maps::set(
            config,
            CFG_MAC_HI,
            u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]),
        )?;
        Maps::set(
            config,
            CFG_MAC_LO,
            u32::from(u16::from_be_bytes([mac[4], mac[5]])) | set,
        )?;
        let mode = match self.attached {
            Attached::Native => FLAG_NATIVE,
            Attached::Generic => FLAG_GENERIC,
        };
        Maps::set(
            config,
            CFG_FLAGS,
            mode | if self.frags { FLAG_FRAGS } else { 0 },
        )?;
        Maps::set(config, CFG_MAGIC, LAYOUT_MAGIC)
    }

    fn describe(sap: u8, mac: Option<[u8; 6]>, frags: bool, mode: &str) -> String {
        let mac = match mac {
            Some(m) => format!(
                "MAC {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            None => "any destination MAC".into(),
        };
        let frags = if frags {
            "multi-buffer frames"
        } else {
            "single-buffer frames"
        };
        format!("SAP {sap:#04x}, {mac}, {mode} XDP, {frags}")
    }

    /// `None` when an endpoint asking for `cfg` can use this program, else
    /// the reason. A multi-buffer program serves single-buffer endpoints
    /// too; `AttachMode::Auto` accepts either hook.
    fn mismatch(&self, cfg: &XdpConfig) -> Option<(String, String)> {
        let mode_ok = match cfg.attach {
            AttachMode::Auto => true,
            AttachMode::Native => self.attached == Attached::Native,
            AttachMode::Generic => self.attached == Attached::Generic,
        };
        let ok =
            self.sap == cfg.sap && self.mac == cfg.mac && mode_ok && (self.frags || !cfg.frags);
        if ok {
            return None;
        }
        let wanted_mode = match cfg.attach {
            AttachMode::Auto => "any",
            AttachMode::Native => "native",
            AttachMode::Generic => "generic",
        };
        Some((
            Self::describe(self.sap, self.mac, self.frags, self.attached.name()),
            Self::describe(cfg.sap, cfg.mac, cfg.frags, wanted_mode),
        ))
    }
}

/// An endpoint reference as the program stores it: slot and generation.
fn reference(slot: u32, generation: u32) -> u32 {
    (generation << 8) | slot
}

/// The name prefix of everything of interface `ifindex`.
fn iface_prefix(ifindex: u32) -> String {
    format!("{NAME_ROOT}/if{ifindex}/")
}

/// A member as its abstract socket name describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    pid: i32,
    /// Link, then the maps in the order of [`MAP_SHAPES`].
    fds: [i32; 6],
}

impl Member {
    fn name(ifindex: u32, pid: u32, fds: &[i32; 6]) -> String {
        offer::offer_name(&iface_prefix(ifindex), pid, fds)
    }

    #[cfg(test)]
    fn parse(prefix: &str, name: &str) -> Option<Member> {
        Self::from_offer(Offered::parse(prefix, name)?)
    }

    fn from_offer(o: Offered) -> Option<Member> {
        Some(Member {
            pid: o.pid,
            fds: o.fds.try_into().ok()?,
        })
    }
}

/// The members of interface `ifindex` in the calling thread's network
/// namespace, as listed in `/proc/thread-self/net/unix` (abstract names
/// show there with a leading `@`).
fn list_members(ifindex: u32) -> io::Result<Vec<Member>> {
    Ok(offer::offers(&iface_prefix(ifindex))?
        .into_iter()
        .filter_map(Member::from_offer)
        .collect())
}

/// Why a member's descriptors could not be taken.
enum TakeError {
    /// The process or a descriptor is gone, or the descriptors are not (or
    /// no longer) a live program of this interface: try another member.
    Gone(String),
    /// The kernel refused (EPERM): we lack PTRACE_MODE_ATTACH over it.
    Refused(String),
}

/// A link and maps, with what they were loaded with.
struct Held {
    link: OwnedFd,
    maps: Maps,
    settings: ProgramSettings,
    program_id: u32,
}

/// Take duplicates of `member`'s descriptors and check they are a live
/// `llc_steer` of interface `ifindex` with our layout.
fn take(member: &Member, ifindex: u32) -> Result<Held, TakeError> {
    let gone = |what: &str, e: io::Error| TakeError::Gone(format!("{what}: {e}"));
    let pidfd = sys::pidfd_open(member.pid).map_err(|e| gone("pidfd_open", e))?;
    let mut fds = Vec::with_capacity(member.fds.len());
    for &fd in &member.fds {
        match sys::pidfd_getfd(pidfd.as_fd(), fd) {
            Ok(dup) => fds.push(dup),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Err(TakeError::Refused(e.to_string()))
            }
            Err(e) => return Err(gone(&format!("pidfd_getfd of descriptor {fd}"), e)),
        }
    }
    let mut fds = fds.into_iter();
    let link = fds.next().expect("six descriptors");
    let info = LinkInfo::from_fd(link.as_fd())
        .map_err(|e| TakeError::Gone(format!("descriptor is not a BPF link: {e:#}")))?;
    match info.info {
        LinkTypeInfo::Xdp(x) if x.ifindex == ifindex => {}
        other => {
            return Err(TakeError::Gone(format!(
                "link is not an XDP link on ifindex {ifindex} ({other:?})"
            )))
        }
    }
    let maps = fds
        .map(RawMap::from_fd)
        .collect::<io::Result<Vec<_>>>()
        .map_err(|e| gone("reading map info", e))?;
    let maps = Maps::from_vec(maps).map_err(TakeError::Gone)?;
    let settings = ProgramSettings::read(&maps.config)
        .map_err(|e| gone("reading the program's configuration", e))?
        .map_err(TakeError::Gone)?;
    Ok(Held {
        link,
        maps,
        settings,
        program_id: info.prog_id,
    })
}

/// A loaded (not yet attached) `llc_steer`, kept across attach attempts.
struct Loaded {
    object: libbpf_rs::Object,
    maps: Maps,
}

impl Loaded {
    fn new(iface: &str, cfg: &XdpConfig) -> Result<Loaded, XdpError> {
        let object = load_kind(iface, cfg, Kind::Steer)?;
        let mut maps = Vec::new();
        for &(name, ..) in &MAP_SHAPES {
            let map = object
                .maps()
                .find(|m| m.name() == name)
                .ok_or_else(|| XdpError::Other {
                    context: "loading the shared XDP program".into(),
                    detail: format!("map {name} missing from the object"),
                })?;
            let fd = map
                .as_fd()
                .try_clone_to_owned()
                .and_then(RawMap::from_fd)
                .map_err(|e| XdpError::Other {
                    context: format!("taking a handle of map {name}"),
                    detail: e.to_string(),
                })?;
            maps.push(fd);
        }
        let maps = Maps::from_vec(maps).map_err(|detail| XdpError::Other {
            context: "loading the shared XDP program".into(),
            detail,
        })?;
        Ok(Loaded { object, maps })
    }

    /// Attach in the modes `cfg.attach` allows: the link, the settings
    /// obtained and the program id. [`XdpError::Busy`] when a program is
    /// attached already (the loaded program can be tried again later).
    fn attach(
        &self,
        iface: &str,
        ifindex: u32,
        cfg: &XdpConfig,
    ) -> Result<(OwnedFd, ProgramSettings, u32), XdpError> {
        let modes: &[Attached] = match cfg.attach {
            AttachMode::Auto => &[Attached::Native, Attached::Generic],
            AttachMode::Native => &[Attached::Native],
            AttachMode::Generic => &[Attached::Generic],
        };
        let wanted = Kind::Steer.program_name(cfg.frags);
        let mut last = None;
        for &mode in modes {
            let settings = ProgramSettings {
                sap: cfg.sap,
                mac: cfg.mac,
                frags: cfg.frags,
                attached: mode,
            };
            // Written before attaching: a joiner can only find the program
            // through a member, after it is attached, and then reads these.
            if let Err(e) = settings.write(&self.maps.config) {
                let e = XdpError::Other {
                    context: format!("configuring the shared XDP program for {iface}"),
                    detail: e.to_string(),
                };
                return Err(e);
            }
            let flags = match mode {
                Attached::Native => XDP_FLAGS_DRV_MODE,
                Attached::Generic => XDP_FLAGS_SKB_MODE,
            };
            let created = match self.object.progs().find(|p| p.name() == wanted) {
                Some(prog) => sys::xdp_link_create(prog.as_fd(), ifindex, flags),
                None => {
                    let e = XdpError::Other {
                        context: "loading the shared XDP program".into(),
                        detail: format!("program {wanted} missing from the object"),
                    };
                    return Err(e);
                }
            };
            match created {
                Ok(link) => {
                    let program_id = LinkInfo::from_fd(link.as_fd())
                        .map(|i| i.prog_id)
                        .unwrap_or(0);
                    tracing::debug!(%iface, ifindex, mode = mode.name(), frags = cfg.frags, sap = cfg.sap, program_id, "attached the shared XDP program");
                    return Ok((link, settings, program_id));
                }
                Err(e) => match attach_error(iface, mode, cfg.frags, e) {
                    e @ XdpError::Unsupported { .. } => {
                        tracing::debug!(%iface, error = %e, "XDP attach mode unavailable");
                        last = Some(e);
                    }
                    e => return Err(e),
                },
            }
        }
        Err(last.expect("at least one mode was tried"))
    }
}

/// What this endpoint has registered.
#[derive(Debug, Default)]
struct Registrations {
    /// Ports and their claims.
    ports: BTreeMap<u16, UnixDatagram>,
    /// RX queues with a socket in the map.
    queues: BTreeSet<u32>,
    /// The link-responder claim, while this endpoint is the responder.
    responder: Option<UnixDatagram>,
}

/// One endpoint's membership of the interface's shared XDP program.
///
/// Dropping it removes this endpoint's ports, sockets and responder role
/// from the maps and releases its claims; the program stays attached while
/// any other member holds it, and is detached by the kernel with the last.
#[derive(Debug)]
pub struct SharedProgram {
    // Held for their names; dropped in this order after `Drop::drop` cleaned
    // the maps: first the name that offers our descriptors, then the slot
    // claim, then the link and maps.
    _member: UnixDatagram,
    _slot_claim: UnixDatagram,
    state: Mutex<Registrations>,
    link: OwnedFd,
    maps: Maps,
    iface: String,
    ifindex: u32,
    settings: ProgramSettings,
    slot: u32,
    generation: u32,
    attached_here: bool,
    program_id: u32,
}

impl SharedProgram {
    /// Join the shared program of interface `iface` (in the calling thread's
    /// network namespace): take it from a live member, or load and attach it
    /// when there is none. Waits at most [`DEFAULT_JOIN_TIMEOUT`] for a
    /// program attached by someone else to become joinable.
    ///
    /// `cfg` must match the program other endpoints attached (SAP, MAC,
    /// multi-buffer, and the mode unless [`AttachMode::Auto`]):
    /// [`ShareError::ConfigMismatch`] otherwise.
    pub fn join(iface: &str, cfg: &XdpConfig) -> Result<SharedProgram, ShareError> {
        Self::join_timeout(iface, cfg, DEFAULT_JOIN_TIMEOUT)
    }

    /// [`SharedProgram::join`] with another bound on the wait.
    pub fn join_timeout(
        iface: &str,
        cfg: &XdpConfig,
        timeout: Duration,
    ) -> Result<SharedProgram, ShareError> {
        Self::join_inner(iface, cfg, timeout, None)
    }

    /// [`SharedProgram::join`] for a process that must not take the
    /// program with it when it dies (the endpoint service, whose granted
    /// endpoints outlive a restart of it): the link and maps are pinned in
    /// directory `pins` of a BPF file system, and a program pinned there
    /// is taken up again when no live member offers it. [`unpin`] removes
    /// the pins; the program is then detached with its last member.
    pub fn join_pinned(
        iface: &str,
        cfg: &XdpConfig,
        pins: &Path,
    ) -> Result<SharedProgram, ShareError> {
        let p = Self::join_inner(iface, cfg, DEFAULT_JOIN_TIMEOUT, Some(pins))?;
        if !pins.join(PIN_NAMES[0]).exists() {
            p.pin(pins).map_err(|e| XdpError::Other {
                context: format!(
                    "pinning the shared XDP program of {iface} in {}",
                    pins.display()
                ),
                detail: e.to_string(),
            })?;
        }
        Ok(p)
    }

    fn pin(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let fds = std::iter::once(self.link.as_fd()).chain(self.maps.fds());
        // The link last: its file is what says "pinned" to a later look.
        let mut pairs: Vec<_> = PIN_NAMES.iter().zip(fds).collect();
        pairs.rotate_left(1);
        for (name, fd) in pairs {
            let path = dir.join(name);
            match sys::obj_pin(fd, &path) {
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                    std::fs::remove_file(&path)?;
                    sys::obj_pin(fd, &path)?;
                }
                other => other?,
            }
        }
        Ok(())
    }

    fn join_inner(
        iface: &str,
        cfg: &XdpConfig,
        timeout: Duration,
        pins: Option<&Path>,
    ) -> Result<SharedProgram, ShareError> {
        quiet_libbpf();
        let ifindex = sys::if_nametoindex(iface).map_err(|e| XdpError::Other {
            context: format!("looking up interface {iface}"),
            detail: e.to_string(),
        })?;
        let deadline = Instant::now() + timeout;
        let mut loaded: Option<Loaded> = None;
        let mut pause = Duration::from_millis(1);
        loop {
            let found = match find_member(iface, ifindex)? {
                Some(held) => Some(held),
                None => pins.and_then(|dir| adopt_pins(dir, ifindex)),
            };
            if let Some(held) = found {
                if let Some((attached, wanted)) = held.settings.mismatch(cfg) {
                    return Err(ShareError::ConfigMismatch {
                        iface: iface.to_owned(),
                        attached,
                        wanted,
                    });
                }
                return Self::complete(iface, ifindex, held, false);
            }
            let l = match loaded.take() {
                Some(l) => l,
                None => Loaded::new(iface, cfg)?,
            };
            match l.attach(iface, ifindex, cfg) {
                Ok((link, settings, program_id)) => {
                    // The link holds the program; dropping the object
                    // closes only libbpf's descriptors.
                    let Loaded { object, maps } = l;
                    drop(object);
                    let held = Held {
                        link,
                        maps,
                        settings,
                        program_id,
                    };
                    return Self::complete(iface, ifindex, held, true);
                }
                Err(XdpError::Busy { iface, detail }) => {
                    if Instant::now() >= deadline {
                        return Err(XdpError::Busy {
                            iface,
                            detail: format!(
                                "{detail}; no live endpoint process of this network namespace \
                                 offers it within {timeout:?}, so it is not a shared LLC \
                                 program of this version (or its holders run in another PID \
                                 namespace)"
                            ),
                        }
                        .into());
                    }
                    // Someone attached first and is about to list itself, or
                    // the last holder is exiting: look again shortly.
                    loaded = Some(l);
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Offer our descriptors, then claim a slot.
    fn complete(
        iface: &str,
        ifindex: u32,
        held: Held,
        attached_here: bool,
    ) -> Result<SharedProgram, ShareError> {
        let other = |context: String| {
            move |e: io::Error| {
                ShareError::from(XdpError::Other {
                    context,
                    detail: e.to_string(),
                })
            }
        };
        let Held {
            link,
            maps,
            settings,
            program_id,
        } = held;
        let mut fds = [link.as_raw_fd(); 6];
        for (slot, fd) in fds[1..].iter_mut().zip(maps.fds()) {
            *slot = fd.as_raw_fd();
        }
        let name = Member::name(ifindex, std::process::id(), &fds);
        let member = bind_abstract(&name).map_err(other(format!(
            "offering the shared XDP program of {iface} to other endpoints ({name})"
        )))?;
        let (slot, slot_claim) = claim_slot(iface, ifindex)?;
        // We hold the slot alone: supersede whatever a dead previous owner
        // left (port references by generation, sockets by removal).
        let previous = Maps::get(&maps.slots, slot).map_err(other(format!(
            "reading slot {slot} of the shared XDP program on {iface}"
        )))?;
        let generation = previous % MAX_GENERATION + 1;
        Maps::set(&maps.slots, slot, generation).map_err(other(format!(
            "claiming slot {slot} of the shared XDP program on {iface}"
        )))?;
        for queue in 0..STEER_MAX_QUEUES {
            let key = slot * STEER_MAX_QUEUES + queue;
            if let Err(e) = maps.xsks.delete(&key.to_ne_bytes()) {
                tracing::debug!(%iface, slot, queue, error = %e, "could not clear a socket entry");
            }
        }
        tracing::debug!(%iface, ifindex, slot, generation, attached_here, program_id, "joined the shared XDP program");
        Ok(SharedProgram {
            _member: member,
            _slot_claim: slot_claim,
            state: Mutex::new(Registrations::default()),
            link,
            maps,
            iface: iface.to_owned(),
            ifindex,
            settings,
            slot,
            generation,
            attached_here,
            program_id,
        })
    }

    fn state(&self) -> MutexGuard<'_, Registrations> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn map_error(&self, context: String) -> impl FnOnce(io::Error) -> ShareError {
        move |e| {
            ShareError::from(XdpError::Other {
                context,
                detail: e.to_string(),
            })
        }
    }

    /// This endpoint's reference, as the program stores it.
    fn reference(&self) -> u32 {
        reference(self.slot, self.generation)
    }

    /// Steer UI frames for transport `port` to this endpoint: claim the port
    /// on the interface and point it at our slot. Registering a port again
    /// is harmless. [`ShareError::PortTaken`] when another live endpoint
    /// holds it.
    pub fn register_port(&self, port: u16) -> Result<(), ShareError> {
        let mut state = self.state();
        if let btree_map::Entry::Vacant(entry) = state.ports.entry(port) {
            let name = format!("{}port/{port}", iface_prefix(self.ifindex));
            let claim = claim(&name)
                .map_err(self.map_error(format!("claiming port {port} on {}", self.iface)))?
                .ok_or_else(|| ShareError::PortTaken {
                    iface: self.iface.clone(),
                    port,
                })?;
            entry.insert(claim);
        }
        Maps::set(&self.maps.ports, u32::from(port), self.reference())
            .map_err(self.map_error(format!("registering port {port} on {}", self.iface)))
    }

    /// Add `xsk`, an AF_XDP socket bound to RX queue `queue` of this
    /// interface, as this endpoint's socket for frames arriving on that queue
    /// (replacing an earlier one). The kernel drops frames redirected to a
    /// socket bound to another queue or interface: the caller must pass the
    /// queue the socket is bound to.
    pub fn register_socket(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<(), ShareError> {
        if queue >= STEER_MAX_QUEUES {
            return Err(ShareError::QueueOutOfRange {
                iface: self.iface.clone(),
                queue,
            });
        }
        let mut state = self.state();
        let key = self.slot * STEER_MAX_QUEUES + queue;
        let fd = xsk.as_raw_fd() as u32;
        self.maps
            .xsks
            .update(&key.to_ne_bytes(), &fd.to_ne_bytes(), 0)
            .map_err(self.map_error(format!(
                "registering the AF_XDP socket of queue {queue} on {}",
                self.iface
            )))?;
        state.queues.insert(queue);
        Ok(())
    }

    /// [`SharedProgram::register_socket`] then
    /// [`SharedProgram::register_port`]: frames for `port` arriving on
    /// `queue` go to `xsk`. Call once per queue the endpoint serves.
    pub fn register(&self, port: u16, queue: u32, xsk: BorrowedFd<'_>) -> Result<(), ShareError> {
        self.register_socket(queue, xsk)?;
        self.register_port(port)
    }

    /// Stop steering `port` here and release its claim; its frames are
    /// passed to the kernel (`no_endpoint`). Returns whether it was ours.
    pub fn unregister(&self, port: u16) -> bool {
        let mut state = self.state();
        let Some(claim) = state.ports.remove(&port) else {
            return false;
        };
        // Cleared while we still hold the claim: nobody else can have
        // written the entry.
        if let Err(e) = Maps::set(&self.maps.ports, u32::from(port), 0) {
            tracing::warn!(iface = %self.iface, port, error = %e, "could not clear a port entry");
        }
        drop(claim);
        true
    }

    /// Remove this endpoint's socket of RX queue `queue`. Returns whether
    /// there was one.
    pub fn unregister_socket(&self, queue: u32) -> bool {
        let mut state = self.state();
        if !state.queues.remove(&queue) {
            return false;
        }
        let key = self.slot * STEER_MAX_QUEUES + queue;
        let _ = self.maps.xsks.delete(&key.to_ne_bytes());
        true
    }

    /// Make this endpoint the interface's link responder (`true`: TEST and
    /// XID frames come to its sockets), or give the role up (`false`).
    /// Returns whether this endpoint holds the role afterwards: taking it
    /// fails (`Ok(false)`) while another live endpoint holds it. The role is
    /// claimed like a port, so it is exclusive between processes and freed
    /// when its holder exits or is killed.
    pub fn set_link_responder(&self, on: bool) -> Result<bool, ShareError> {
        let mut state = self.state();
        if !on {
            if let Some(claim) = state.responder.take() {
                if let Err(e) = Maps::set(&self.maps.config, CFG_RESPONDER, 0) {
                    tracing::warn!(iface = %self.iface, error = %e, "could not clear the link responder");
                }
                drop(claim);
            }
            return Ok(false);
        }
        if state.responder.is_none() {
            let name = format!("{}responder", iface_prefix(self.ifindex));
            match claim(&name).map_err(self.map_error(format!(
                "claiming the link responder role on {}",
                self.iface
            )))? {
                Some(c) => state.responder = Some(c),
                None => return Ok(false),
            }
        }
        Maps::set(&self.maps.config, CFG_RESPONDER, self.reference())
            .map_err(self.map_error(format!("setting the link responder on {}", self.iface)))?;
        Ok(true)
    }

    /// Whether this endpoint is the link responder.
    pub fn is_link_responder(&self) -> bool {
        self.state().responder.is_some()
    }

    /// The ports this endpoint registered.
    pub fn ports(&self) -> Vec<u16> {
        self.state().ports.keys().copied().collect()
    }

    /// The program's counters, summed over CPUs (all endpoints' frames).
    pub fn counters(&self) -> SteerCounters {
        let len = match self.maps.counters.value_len() {
            Ok(len) => len,
            Err(_) => return SteerCounters::default(),
        };
        let mut buf = vec![0u8; len];
        let mut read = |i: u32| -> u64 {
            match self.maps.counters.lookup(&i.to_ne_bytes(), &mut buf) {
                Ok(true) => buf
                    .chunks_exact(8)
                    .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
                    .sum(),
                _ => 0,
            }
        };
        SteerCounters {
            redirected: read(0),
            no_socket: read(1),
            passed: read(2),
            no_endpoint: read(3),
            to_responder: read(4),
            no_responder: read(5),
        }
    }

    /// The pids of the live members of this interface's program (this
    /// process included), as their names list them.
    pub fn members(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = list_members(self.ifindex)
            .unwrap_or_default()
            .into_iter()
            .map(|m| m.pid as u32)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// The hook the program is attached to (by whichever member attached it).
    pub fn attached(&self) -> Attached {
        self.settings.attached
    }

    /// Whether this endpoint loaded and attached the program (rather than
    /// joining a live member's).
    pub fn attached_here(&self) -> bool {
        self.attached_here
    }

    /// Whether the multi-buffer (`xdp.frags`) entry point is attached.
    pub fn frags(&self) -> bool {
        self.settings.frags
    }

    /// The SAP the program steers.
    pub fn sap(&self) -> u8 {
        self.settings.sap
    }

    /// This endpoint's slot (`0..STEER_MAX_SLOTS`).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The kernel's id of the attached program (as `ip -d link` shows it).
    pub fn program_id(&self) -> u32 {
        self.program_id
    }

    /// The interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Duplicates of this endpoint's claims (its slot, and the ports it
    /// registered), for the process the endpoint is made for: the endpoint
    /// service keeps a granted endpoint's membership, the endpoint's process
    /// keeps these, so that its slot and ports stay its own while it lives,
    /// also across a restart of the service.
    pub fn holder_claims(&self) -> io::Result<Vec<OwnedFd>> {
        let state = self.state();
        std::iter::once(&self._slot_claim)
            .chain(state.ports.values())
            .map(|c| c.as_fd().try_clone_to_owned())
            .collect()
    }

    /// Our descriptor of the BPF link (the program stays attached while any
    /// member holds one).
    pub fn link_fd(&self) -> BorrowedFd<'_> {
        self.link.as_fd()
    }
}

impl Drop for SharedProgram {
    fn drop(&mut self) {
        let reference = self.reference();
        let state = std::mem::take(&mut *self.state());
        for (port, claim) in state.ports {
            // Only while we hold the claim may we write the entry.
            if let Err(e) = Maps::set(&self.maps.ports, u32::from(port), 0) {
                tracing::debug!(iface = %self.iface, port, error = %e, "could not clear a port entry");
            }
            drop(claim);
        }
        for queue in state.queues {
            let key = self.slot * STEER_MAX_QUEUES + queue;
            let _ = self.maps.xsks.delete(&key.to_ne_bytes());
        }
        if let Some(claim) = state.responder {
            if Maps::get(&self.maps.config, CFG_RESPONDER).ok() == Some(reference) {
                let _ = Maps::set(&self.maps.config, CFG_RESPONDER, 0);
            }
            drop(claim);
        }
        tracing::debug!(iface = %self.iface, slot = self.slot, "left the shared XDP program");
        // The fields go next, in order: the member name, the slot claim,
        // the link and the maps.
    }
}

/// File names of the pins in a pin directory: the link, then the maps in
/// the order of [`MAP_SHAPES`].
const PIN_NAMES: [&str; 6] = [
    "link",
    "steer_ports",
    "steer_slots",
    "steer_xsks",
    "steer_config",
    "counters",
];

/// The program pinned in `dir`, if it is a live `llc_steer` of interface
/// `ifindex`; pins of a program whose interface went away are removed.
fn adopt_pins(dir: &Path, ifindex: u32) -> Option<Held> {
    let link = sys::obj_get(&dir.join(PIN_NAMES[0])).ok()?;
    let info = LinkInfo::from_fd(link.as_fd()).ok()?;
    if !matches!(info.info, LinkTypeInfo::Xdp(ref x) if x.ifindex == ifindex) {
        tracing::debug!(dir = %dir.display(), "removing the pins of a detached XDP program");
        unpin(dir);
        return None;
    }
    let maps = PIN_NAMES[1..]
        .iter()
        .map(|name| sys::obj_get(&dir.join(name)).and_then(RawMap::from_fd))
        .collect::<io::Result<Vec<_>>>()
        .ok()?;
    let maps = Maps::from_vec(maps).ok()?;
    let settings = ProgramSettings::read(&maps.config).ok()?.ok()?;
    tracing::debug!(dir = %dir.display(), program_id = info.prog_id, "took the shared XDP program up from its pins");
    Some(Held {
        link,
        maps,
        settings,
        program_id: info.prog_id,
    })
}

/// Remove the pins [`SharedProgram::join_pinned`] made in `dir` (and the
/// directory, when empty). The program stays attached while a member holds
/// its link.
pub fn unpin(dir: &Path) {
    for name in PIN_NAMES {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let _ = std::fs::remove_dir(dir);
}

/// How many endpoints of the host hold a slot of the shared program of
/// interface `ifindex`: members of any process, and the granted endpoints
/// that keep their slot's claim ([`SharedProgram::holder_claims`]).
pub fn live_slots(ifindex: u32) -> io::Result<usize> {
    offer::count_names(&format!("{}slot/", iface_prefix(ifindex)))
}

/// Claim a free slot of interface `ifindex`.
fn claim_slot(iface: &str, ifindex: u32) -> Result<(u32, UnixDatagram), ShareError> {
    // Start where this process's neighbours are unlikely to.
    let start = (std::process::id().wrapping_mul(2_654_435_761) >> 8) % STEER_MAX_SLOTS;
    let prefix = iface_prefix(ifindex);
    for i in 0..STEER_MAX_SLOTS {
        let slot = (start + i) % STEER_MAX_SLOTS;
        match claim(&format!("{prefix}slot/{slot}")) {
            Ok(Some(s)) => return Ok((slot, s)),
            Ok(None) => continue,
            Err(e) => {
                return Err(XdpError::Other {
                    context: format!("claiming an endpoint slot on {iface}"),
                    detail: e.to_string(),
                }
                .into())
            }
        }
    }
    Err(ShareError::NoSlot {
        iface: iface.to_owned(),
    })
}

/// Take the program from a live member of interface `ifindex`, if there is
/// one whose descriptors we can take.
fn find_member(iface: &str, ifindex: u32) -> Result<Option<Held>, ShareError> {
    let members = list_members(ifindex).map_err(|e| XdpError::Other {
        context: "listing the endpoints sharing the interface (/proc/thread-self/net/unix)".into(),
        detail: e.to_string(),
    })?;
    let mut refused = None;
    for m in &members {
        match take(m, ifindex) {
            Ok(held) => {
                tracing::debug!(%iface, pid = m.pid, program_id = held.program_id, "took the shared XDP program from a member");
                return Ok(Some(held));
            }
            Err(TakeError::Gone(why)) => {
                tracing::debug!(%iface, pid = m.pid, %why, "member not usable");
            }
            Err(TakeError::Refused(why)) => refused = Some((m.pid, why)),
        }
    }
    match refused {
        Some((pid, detail)) => Err(ShareError::NoAccess {
            iface: iface.to_owned(),
            pid,
            detail,
        }),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_round_trip() {
        let fds = [5, 6, 7, 8, 9, 10];
        let name = Member::name(3, 4242, &fds);
        assert_eq!(name, "llc-xdp/v1/if3/member/4242/5,6,7,8,9,10");
        assert!(name.len() < 108);
        let m = Member::parse(&iface_prefix(3), &name).unwrap();
        assert_eq!(m, Member { pid: 4242, fds });
        // Another interface, another version, malformed: not ours.
        assert_eq!(Member::parse(&iface_prefix(4), &name), None);
        assert_eq!(
            Member::parse(&iface_prefix(3), "llc-xdp/v1/if3/slot/7"),
            None
        );
        for bad in [
            "4242/5,6",
            "0/1,2,3,4,5,6",
            "x/1,2,3,4,5,6",
            "42/1,2,3,4,5,-6",
        ] {
            let name = format!("llc-xdp/v1/if3/member/{bad}");
            assert_eq!(Member::parse(&iface_prefix(3), &name), None, "{bad}");
        }
    }

    #[test]
    fn shared_program_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SharedProgram>();
    }

    #[test]
    fn references_and_generations() {
        assert_eq!(reference(7, 1), 0x107);
        // The generation wraps within 24 bits and never becomes 0.
        assert_eq!(MAX_GENERATION % MAX_GENERATION + 1, 1);
        assert_eq!(0 % MAX_GENERATION + 1, 1);
        assert_eq!(reference(255, MAX_GENERATION), u32::MAX);
    }

    #[test]
    fn settings_mismatch_rules() {
        let attached = ProgramSettings {
            sap: 0x7C,
            mac: Some([2, 0, 0, 0, 0, 1]),
            frags: false,
            attached: Attached::Generic,
        };
        let cfg = XdpConfig {
            sap: 0x7C,
            mac: Some([2, 0, 0, 0, 0, 1]),
            attach: AttachMode::Auto,
            frags: false,
        };
        assert_eq!(attached.mismatch(&cfg), None);
        let generic = XdpConfig {
            attach: AttachMode::Generic,
            ..cfg.clone()
        };
        assert_eq!(attached.mismatch(&generic), None);
        for bad in [
            XdpConfig {
                sap: 0x42,
                ..cfg.clone()
            },
            XdpConfig {
                mac: None,
                ..cfg.clone()
            },
            XdpConfig {
                attach: AttachMode::Native,
                ..cfg.clone()
            },
            XdpConfig {
                frags: true,
                ..cfg.clone()
            },
        ] {
            let (a, w) = attached.mismatch(&bad).expect("a mismatch");
            assert_ne!(a, w);
        }
        // A multi-buffer program serves single-buffer endpoints.
        let frags = ProgramSettings {
            frags: true,
            ..attached
        };
        assert_eq!(frags.mismatch(&cfg), None);
    }
}

/// The steering decisions of `llc_steer`, run in the kernel with
/// `BPF_PROG_TEST_RUN` on a loaded (not attached) program.
#[cfg(test)]
mod steering_tests {
    use super::*;
    use libbpf_rs::{MapFlags, Object, ProgramInput};

    const XDP_PASS: u32 = 2;
    const XDP_REDIRECT: u32 = 4;
    const US: [u8; 6] = [2, 0, 0, 0, 0, 2];

    // Counter indices.
    const REDIRECTED: usize = 0;
    const NO_SOCKET: usize = 1;
    const PASSED: usize = 2;
    const NO_ENDPOINT: usize = 3;
    const TO_RESPONDER: usize = 4;
    const NO_RESPONDER: usize = 5;

    /// A frame to `dst` with DSAP `dsap`, LLC control `control` and, from
    /// offset 17, a transport header whose `dst_port` is `port`.
    fn frame(
        dst: [u8; 6],
        length_type: u16,
        dsap: u8,
        control: u8,
        port: u16,
        total: usize,
    ) -> Vec<u8> {
        let mut f = vec![0u8; total];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&length_type.to_be_bytes());
        let mut put = |at: usize, bytes: &[u8]| {
            for (i, b) in bytes.iter().enumerate() {
                if let Some(x) = f.get_mut(at + i) {
                    *x = *b;
                }
            }
        };
        put(14, &[dsap, dsap, control]);
        put(17, &[1, 3, 0, 0, 0xC0, 0x01]); // version, type, flags, sacks, src_port
        put(23, &port.to_be_bytes());
        f
    }

    fn ui(port: u16) -> Vec<u8> {
        frame(US, 100, 0x7C, 0x03, port, 114)
    }

    struct Steer {
        obj: Object,
        prog: &'static str,
    }

    impl Steer {
        fn load(frags: bool) -> Steer {
            let cfg = XdpConfig {
                sap: 0x7C,
                mac: Some(US),
                frags,
                ..XdpConfig::default()
            };
            Steer {
                obj: load_kind("test", &cfg, Kind::Steer).unwrap(),
                prog: Kind::Steer.program_name(frags),
            }
        }

        fn set(&self, map: &str, key: u32, value: u32) {
            let m = self.obj.maps().find(|m| m.name() == map).unwrap();
            m.update(&key.to_ne_bytes(), &value.to_ne_bytes(), MapFlags::ANY)
                .unwrap();
        }

        fn counters(&self) -> Vec<u64> {
            let m = self.obj.maps().find(|m| m.name() == "counters").unwrap();
            (0..COUNTERS)
                .map(|i| {
                    m.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                        .unwrap()
                        .unwrap()
                        .iter()
                        .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap()))
                        .sum()
                })
                .collect()
        }

        /// Run the program on `frame` (arriving on `rxq` = (ifindex, queue),
        /// or queue 0 of no device); its verdict and the one counter that
        /// moved.
        fn run(&self, frame: &[u8], rxq: Option<(u32, u32)>) -> (u32, usize) {
            let prog = self
                .obj
                .progs_mut()
                .find(|p| p.name() == self.prog)
                .unwrap();
            let before = self.counters();
            // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
            // rx_queue_index, egress_ifindex.
            let mut ctx = [0u8; 24];
            let mut input = ProgramInput {
                data_in: Some(frame),
                ..Default::default()
            };
            if let Some((ifindex, queue)) = rxq {
                ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
                ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
                ctx[16..20].copy_from_slice(&queue.to_ne_bytes());
                input.context_in = Some(&mut ctx);
            }
            let out = prog.test_run(input).unwrap();
            let after = self.counters();
            let moved: Vec<usize> = (0..after.len())
                .filter(|&i| after[i] != before[i])
                .collect();
            assert_eq!(
                moved.len(),
                1,
                "exactly one counter moves: {before:?} -> {after:?}"
            );
            (out.return_value, moved[0])
        }
    }

    #[test]
    fn ui_frames_follow_their_port_and_the_rest_passes() {
        testbed::require_root!();
        let xsk = sys::xdp_socket().unwrap();
        for frags in [false, true] {
            let s = Steer::load(frags);
            // Slot 3, generation 5, has a socket on queue 0 and port 7000.
            s.set("steer_slots", 3, 5);
            s.set("steer_xsks", 3 * STEER_MAX_QUEUES, xsk.as_raw_fd() as u32);
            s.set("steer_ports", 7000, reference(3, 5));
            assert_eq!(s.run(&ui(7000), None), (XDP_REDIRECT, REDIRECTED));
            // Broadcast and the jumbo form are ours too.
            let bcast = frame([0xFF; 6], 100, 0x7C, 0x03, 7000, 114);
            assert_eq!(s.run(&bcast, None), (XDP_REDIRECT, REDIRECTED));
            let jumbo = frame(US, 0x8870, 0x7C, 0x03, 7000, 3000);
            assert_eq!(s.run(&jumbo, None), (XDP_REDIRECT, REDIRECTED));
            // A port nobody registered.
            assert_eq!(s.run(&ui(7001), None), (XDP_PASS, NO_ENDPOINT));
            // A port whose endpoint's slot has a new owner since (the
            // reference is stale): never delivered to the new owner.
            s.set("steer_ports", 7002, reference(3, 4));
            assert_eq!(s.run(&ui(7002), None), (XDP_PASS, NO_ENDPOINT));
            // A live endpoint without a socket (its process was killed: the
            // kernel removed the socket).
            s.set("steer_slots", 9, 1);
            s.set("steer_ports", 7003, reference(9, 1));
            assert_eq!(s.run(&ui(7003), None), (XDP_PASS, NO_SOCKET));
            // Too short for a transport header.
            let short = frame(US, 10, 0x7C, 0x03, 7000, 24);
            assert_eq!(s.run(&short, None), (XDP_PASS, NO_ENDPOINT));
            // Not ours: other SAP, other host, IP, ARP, VLAN, runt; LLC
            // commands other than UI, TEST and XID.
            let not_ours = [
                frame(US, 100, 0x42, 0x03, 7000, 114),
                frame([2, 0, 0, 0, 0, 9], 100, 0x7C, 0x03, 7000, 114),
                frame(US, 0x0800, 0x7C, 0x03, 7000, 114),
                frame(US, 0x0806, 0x7C, 0x03, 7000, 114),
                frame(US, 0x8100, 0x7C, 0x03, 7000, 114),
                frame(US, 100, 0x7C, 0x03, 7000, 16),
                frame(US, 100, 0x7C, 0x53, 7000, 114), // DISC
            ];
            for f in &not_ours {
                assert_eq!(s.run(f, None), (XDP_PASS, PASSED), "{:02x?}", &f[..17]);
            }
        }
    }

    #[test]
    fn test_and_xid_go_to_the_link_responder() {
        testbed::require_root!();
        let xsk = sys::xdp_socket().unwrap();
        for frags in [false, true] {
            let s = Steer::load(frags);
            let commands = [0xE3u8, 0xF3, 0xAF, 0xBF];
            // No responder yet.
            for &c in &commands {
                let f = frame(US, 100, 0x7C, c, 0, 60);
                assert_eq!(s.run(&f, None), (XDP_PASS, NO_RESPONDER), "{c:#x}");
            }
            s.set("steer_slots", 200, 1);
            s.set("steer_xsks", 200 * STEER_MAX_QUEUES, xsk.as_raw_fd() as u32);
            s.set("steer_config", CFG_RESPONDER, reference(200, 1));
            for &c in &commands {
                // Commands and responses (C/R bit in the SSAP), any bytes
                // where a UI frame has its port.
                let mut f = frame(US, 100, 0x7C, c, 7000, 60);
                assert_eq!(s.run(&f, None), (XDP_REDIRECT, TO_RESPONDER), "{c:#x}");
                f[15] |= 1;
                assert_eq!(s.run(&f, None), (XDP_REDIRECT, TO_RESPONDER), "{c:#x}");
                let bcast = frame([0xFF; 6], 100, 0x7C, c, 0, 60);
                assert_eq!(s.run(&bcast, None), (XDP_REDIRECT, TO_RESPONDER));
            }
            // Another host's TEST is not ours.
            let other = frame([2, 0, 0, 0, 0, 9], 100, 0x7C, 0xF3, 0, 60);
            assert_eq!(s.run(&other, None), (XDP_PASS, PASSED));
            // The responder's slot got a new owner: the old reference is dead.
            s.set("steer_slots", 200, 2);
            let f = frame(US, 100, 0x7C, 0xF3, 0, 60);
            assert_eq!(s.run(&f, None), (XDP_PASS, NO_RESPONDER));
        }
    }

    /// A TEST answer to a reachability probe ("LLCR" + the prober's port in
    /// the information field) goes to the endpoint of that port, not to
    /// the link responder; a probe command (no C/R bit) to the responder.
    #[test]
    fn probe_answers_go_to_the_probing_port() {
        testbed::require_root!();
        let (xsk, responder) = (sys::xdp_socket().unwrap(), sys::xdp_socket().unwrap());
        for frags in [false, true] {
            let s = Steer::load(frags);
            s.set("steer_slots", 3, 5);
            s.set("steer_xsks", 3 * STEER_MAX_QUEUES, xsk.as_raw_fd() as u32);
            s.set("steer_ports", 7000, reference(3, 5));
            s.set("steer_slots", 200, 1);
            s.set(
                "steer_xsks",
                200 * STEER_MAX_QUEUES,
                responder.as_raw_fd() as u32,
            );
            s.set("steer_config", CFG_RESPONDER, reference(200, 1));
            let probe = |port: u16, response: bool| {
                let mut f = frame(US, 100, 0x7C, 0xF3, 0, 60);
                f[15] |= u8::from(response);
                f[17..21].copy_from_slice(b"LLCR");
                f[21..23].copy_from_slice(&port.to_be_bytes());
                f
            };
            assert_eq!(s.run(&probe(7000, true), None), (XDP_REDIRECT, REDIRECTED));
            assert_eq!(s.run(&probe(7001, true), None), (XDP_PASS, NO_ENDPOINT));
            assert_eq!(
                s.run(&probe(7000, false), None),
                (XDP_REDIRECT, TO_RESPONDER)
            );
        }
    }

    /// Sockets are per (slot, RX queue): a frame is only redirected to the
    /// endpoint's socket of the queue it arrived on.
    #[test]
    fn frames_go_to_the_socket_of_their_rx_queue() {
        testbed::require_root!();
        let ns = testbed::Netns::new("steerq").unwrap();
        testbed::netns::add_veth_loop(&ns, "q0", "q1", 4).unwrap();
        ns.run(|| {
            let ifindex = sys::if_nametoindex("q0").unwrap();
            let xsk = sys::xdp_socket().unwrap();
            let s = Steer::load(false);
            s.set("steer_slots", 1, 1);
            s.set("steer_ports", 5000, reference(1, 1));
            s.set("steer_xsks", STEER_MAX_QUEUES + 2, xsk.as_raw_fd() as u32);
            assert_eq!(
                s.run(&ui(5000), Some((ifindex, 2))),
                (XDP_REDIRECT, REDIRECTED)
            );
            for queue in [0, 1, 3] {
                assert_eq!(
                    s.run(&ui(5000), Some((ifindex, queue))),
                    (XDP_PASS, NO_SOCKET)
                );
            }
            // Slot 0's socket of queue 2 is not slot 1's.
            s.set("steer_slots", 0, 1);
            s.set("steer_ports", 5001, reference(0, 1));
            assert_eq!(s.run(&ui(5001), Some((ifindex, 2))), (XDP_PASS, NO_SOCKET));
        });
    }
}

/// Sharing between real processes on a veth pair in a fresh network
/// namespace. The processes are this test binary, started again to run
/// [`process_tests::helper_member`] (ignored in normal runs) with its
/// parameters in the environment.
#[cfg(test)]
mod process_tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;
    use testbed::{Background, Netns};

    const IFACE: &str = "llc0";
    const START: Duration = Duration::from_secs(30);
    const SETTLE: Duration = Duration::from_secs(10);

    /// One network namespace with a veth pair `llc0`-`llc1`, both up;
    /// deleted on drop (also when a test panics).
    fn veth_namespace(prefix: &str) -> Netns {
        let ns = Netns::new(prefix).unwrap();
        testbed::netns::add_veth_loop(&ns, IFACE, "llc1", 1).unwrap();
        ns
    }

    /// What a helper reported.
    #[derive(Debug)]
    struct Joined {
        attached_here: bool,
        program: u32,
        slot: u32,
    }

    fn helper_command(ns: &Netns, port: u16, extra: &[(&str, &str)]) -> Command {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = ns.command(exe);
        cmd.args([
            "--exact",
            "shared::process_tests::helper_member",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("XDP_PROG_HELPER_IFACE", IFACE)
        .env("XDP_PROG_HELPER_PORT", port.to_string());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        cmd
    }

    fn parse(output: &str) -> Result<Joined, String> {
        let line = output
            .lines()
            .find_map(|l| Some(&l[l.find("RESULT ")? + "RESULT ".len()..]))
            .ok_or_else(|| format!("no RESULT line in:\n{output}"))?;
        let Some(fields) = line.strip_prefix("ok ") else {
            return Err(line.to_owned());
        };
        let get = |key: &str| -> String {
            fields
                .split_whitespace()
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key} in {line}"))
                .to_owned()
        };
        Ok(Joined {
            attached_here: get("attached_here") == "true",
            program: get("program").parse().unwrap(),
            slot: get("slot").parse().unwrap(),
        })
    }

    /// Start a member process and wait until it has joined.
    fn start_member(ns: &Netns, port: u16) -> (Background, Joined) {
        let bg = Background::spawn(&mut helper_command(ns, port, &[]), "RESULT", START)
            .unwrap_or_else(|e| panic!("member did not start: {e}"));
        let joined = parse(&bg.output()).unwrap_or_else(|e| panic!("member failed: {e}"));
        (bg, joined)
    }

    /// The XDP program id `ip -d link show` reports on the interface.
    fn attached_program(ns: &Netns) -> Option<u32> {
        let out = ns.ip(&["-d", "link", "show", "dev", IFACE]).unwrap();
        let at = out.find("prog/xdp id ")?;
        out[at + "prog/xdp id ".len()..]
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Poll `cond` until it holds or `limit` passes.
    fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_millis(1);
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}"
            );
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn member_pids(ns: &Netns) -> Vec<i32> {
        ns.run(|| {
            let ifindex = sys::if_nametoindex(IFACE).unwrap();
            list_members(ifindex)
                .unwrap()
                .into_iter()
                .map(|m| m.pid)
                .collect()
        })
    }

    /// Kill `bg` with SIGKILL (and reap it), then wait until its member
    /// name is gone, i.e. its descriptors are closed.
    fn kill(ns: &Netns, bg: Background) {
        let pid = bg.id() as i32;
        drop(bg);
        wait_for(SETTLE, "the killed member's name to go", || {
            !member_pids(ns).contains(&pid)
        });
    }

    /// Not a test: the member process the lifetime tests start. Joins the
    /// shared program of `XDP_PROG_HELPER_IFACE`, registers an AF_XDP socket
    /// on queue 0 for `XDP_PROG_HELPER_PORT`, prints one `RESULT` line and
    /// lives until killed (at most two minutes).
    #[test]
    #[ignore = "a helper process that the process tests start"]
    fn helper_member() {
        let Ok(iface) = std::env::var("XDP_PROG_HELPER_IFACE") else {
            return;
        };
        let env = |k: &str| std::env::var(k).ok();
        if let Some(go) = env("XDP_PROG_HELPER_GO") {
            println!("WAITING");
            let deadline = Instant::now() + START;
            while !Path::new(&go).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let cfg = XdpConfig {
            sap: env("XDP_PROG_HELPER_SAP").map_or(0x7C, |s| s.parse().unwrap()),
            mac: None,
            attach: match env("XDP_PROG_HELPER_ATTACH").as_deref() {
                Some("native") => AttachMode::Native,
                Some("generic") => AttachMode::Generic,
                _ => AttachMode::Auto,
            },
            frags: false,
        };
        let port: u16 = env("XDP_PROG_HELPER_PORT").unwrap().parse().unwrap();
        match SharedProgram::join(&iface, &cfg) {
            Ok(p) => {
                let xsk = sys::xdp_socket().unwrap();
                p.register(port, 0, xsk.as_fd()).unwrap();
                println!(
                    "RESULT ok pid={} attached_here={} program={} slot={} mode={}",
                    std::process::id(),
                    p.attached_here(),
                    p.program_id(),
                    p.slot(),
                    p.attached().name()
                );
                std::thread::sleep(Duration::from_secs(120));
            }
            Err(e) => println!("RESULT err {e}"),
        }
    }

    /// A attaches, B joins (no second program); killing A with SIGKILL
    /// leaves the program to B; a later C joins from B; when the last member
    /// is killed the program is gone, and the next process attaches afresh.
    #[test]
    fn program_lives_while_any_member_does() {
        testbed::require_root!();
        let ns = veth_namespace("share");
        assert_eq!(attached_program(&ns), None);

        let (a, ja) = start_member(&ns, 7000);
        assert!(ja.attached_here, "{ja:?}");
        assert_eq!(attached_program(&ns), Some(ja.program));

        let (b, jb) = start_member(&ns, 7001);
        assert!(!jb.attached_here, "B joins A's program: {jb:?}");
        assert_eq!(jb.program, ja.program);
        assert_ne!(jb.slot, ja.slot);
        assert_eq!(member_pids(&ns).len(), 2);

        kill(&ns, a);
        assert_eq!(
            attached_program(&ns),
            Some(ja.program),
            "B holds the program after A was killed"
        );

        let (c, jc) = start_member(&ns, 7000);
        assert!(!jc.attached_here, "C joins the program B holds: {jc:?}");
        assert_eq!(jc.program, ja.program);

        kill(&ns, b);
        assert_eq!(attached_program(&ns), Some(ja.program), "C holds it");
        kill(&ns, c);
        wait_for(SETTLE, "the program to be detached", || {
            attached_program(&ns).is_none()
        });

        // The next job starts cleanly: no EBUSY, a new program.
        let (d, jd) = start_member(&ns, 7000);
        assert!(jd.attached_here, "{jd:?}");
        assert_ne!(jd.program, ja.program);
        assert_eq!(attached_program(&ns), Some(jd.program));
        kill(&ns, d);
        wait_for(SETTLE, "the program to be detached", || {
            attached_program(&ns).is_none()
        });
    }

    /// Four processes starting at once: one attaches, the others join it.
    #[test]
    fn simultaneous_starts_attach_once() {
        testbed::require_root!();
        let ns = veth_namespace("race");
        let go = std::env::temp_dir().join(format!("xdp-prog-go-{}", std::process::id()));
        let _ = std::fs::remove_file(&go);
        struct RemoveOnDrop<'a>(&'a Path);
        impl Drop for RemoveOnDrop<'_> {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(self.0);
            }
        }
        let _cleanup = RemoveOnDrop(&go);
        let go_s = go.to_str().unwrap();
        let members: Vec<Background> = (0..4)
            .map(|i| {
                let mut cmd = helper_command(&ns, 8000 + i, &[("XDP_PROG_HELPER_GO", go_s)]);
                Background::spawn(&mut cmd, "WAITING", START).unwrap()
            })
            .collect();
        std::fs::write(&go, b"go").unwrap();
        let mut results = Vec::new();
        for m in &members {
            wait_for(START, "a member's RESULT", || m.output().contains("RESULT"));
            results.push(parse(&m.output()).unwrap_or_else(|e| panic!("member failed: {e}")));
        }
        let attachers = results.iter().filter(|j| j.attached_here).count();
        assert_eq!(attachers, 1, "{results:?}");
        assert!(
            results.iter().all(|j| j.program == results[0].program),
            "{results:?}"
        );
        let mut slots: Vec<u32> = results.iter().map(|j| j.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), 4, "{results:?}");
        assert_eq!(attached_program(&ns), Some(results[0].program));
        assert_eq!(member_pids(&ns).len(), 4);
        for m in members {
            kill(&ns, m);
        }
        wait_for(SETTLE, "the program to be detached", || {
            attached_program(&ns).is_none()
        });
    }

    /// A joiner whose settings differ from the attached program's gets a
    /// clear error, and the members are unaffected.
    #[test]
    fn config_mismatch_is_refused() {
        testbed::require_root!();
        let ns = veth_namespace("mismatch");
        let (a, ja) = start_member(&ns, 7000);
        let mode = ns.run(|| {
            let p = SharedProgram::join(IFACE, &XdpConfig::default()).unwrap();
            assert!(!p.attached_here());
            assert_eq!(p.program_id(), ja.program);
            p.attached()
        });
        let other_mode = match mode {
            Attached::Native => AttachMode::Generic,
            Attached::Generic => AttachMode::Native,
        };
        let bad = [
            XdpConfig {
                sap: 0x42,
                ..XdpConfig::default()
            },
            XdpConfig {
                mac: Some([2, 0, 0, 0, 0, 1]),
                ..XdpConfig::default()
            },
            XdpConfig {
                attach: other_mode,
                ..XdpConfig::default()
            },
            XdpConfig {
                frags: true,
                ..XdpConfig::default()
            },
        ];
        for cfg in bad {
            let err = ns.run(|| SharedProgram::join(IFACE, &cfg).unwrap_err());
            assert!(
                matches!(err, ShareError::ConfigMismatch { .. }),
                "{cfg:?}: {err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains("must agree"), "{msg}");
            // As an XdpError it keeps the message.
            let x = XdpError::from(err);
            assert!(x.to_string().contains("must agree"), "{x}");
        }
        assert_eq!(attached_program(&ns), Some(ja.program));
        kill(&ns, a);
        wait_for(SETTLE, "the program to be detached", || {
            attached_program(&ns).is_none()
        });
    }

    /// Ports and the responder role are exclusive among live endpoints;
    /// a released one can be taken; stale and bogus member names are
    /// skipped.
    #[test]
    fn claims_are_exclusive_and_released() {
        testbed::require_root!();
        let ns = veth_namespace("claims");
        ns.run(|| {
            let ifindex = sys::if_nametoindex(IFACE).unwrap();
            // Bogus members: a dead process, and a live one (us) whose
            // descriptors are no BPF objects.
            let mut dead = Command::new("true").spawn().unwrap();
            dead.wait().unwrap();
            let devnull = std::fs::File::open("/dev/null").unwrap();
            let junk = [devnull.as_raw_fd(); 6];
            let _fake_dead = bind_abstract(&Member::name(ifindex, dead.id(), &[3; 6])).unwrap();
            let _fake_live =
                bind_abstract(&Member::name(ifindex, std::process::id(), &junk)).unwrap();

            let cfg = XdpConfig::default();
            let p1 = SharedProgram::join(IFACE, &cfg).unwrap();
            assert!(p1.attached_here());
            let p2 = SharedProgram::join(IFACE, &cfg).unwrap();
            assert!(!p2.attached_here());
            assert_eq!(p1.program_id(), p2.program_id());
            assert_ne!(p1.slot(), p2.slot());

            let xsk = sys::xdp_socket().unwrap();
            p1.register(7000, 0, xsk.as_fd()).unwrap();
            p1.register_port(7000).unwrap(); // again: harmless
            let err = p2.register(7000, 0, xsk.as_fd()).unwrap_err();
            assert!(
                matches!(err, ShareError::PortTaken { port: 7000, .. }),
                "{err:?}"
            );
            assert!(p1.unregister(7000));
            assert!(!p1.unregister(7000));
            p2.register_port(7000).unwrap();
            assert_eq!(p2.ports(), vec![7000]);
            assert!(p1.ports().is_empty());

            let err = p1
                .register_socket(STEER_MAX_QUEUES, xsk.as_fd())
                .unwrap_err();
            assert!(matches!(err, ShareError::QueueOutOfRange { .. }), "{err:?}");
            assert!(p1.unregister_socket(0));
            assert!(!p1.unregister_socket(0));

            assert!(p1.set_link_responder(true).unwrap());
            assert!(p1.set_link_responder(true).unwrap(), "again: still ours");
            assert!(!p2.set_link_responder(true).unwrap());
            drop(p1);
            // Names are freed when the last copy of their socket closes: a
            // helper process forked by another test holds copies until its
            // exec, so await the release rather than assume it.
            wait_for(
                SETTLE,
                "the link role to be free once its holder left",
                || p2.set_link_responder(true).unwrap(),
            );
            assert!(p2.is_link_responder());
            assert!(!p2.set_link_responder(false).unwrap());
            assert!(!p2.is_link_responder());

            drop((_fake_dead, _fake_live));
            wait_for(SETTLE, "the bogus members' names to be gone", || {
                p2.members() == vec![std::process::id()]
            });
            let _ = p2.counters();
        });
        // The last member left with p2: the program is gone.
        wait_for(SETTLE, "the program to be detached", || {
            attached_program(&ns).is_none()
        });
    }

    /// A program that no member offers (here one attached through netlink,
    /// as `ip` does) keeps the interface busy: a clear error after the wait.
    #[test]
    fn foreign_program_is_busy() {
        testbed::require_root!();
        let ns = veth_namespace("foreign");
        let obj = std::env::temp_dir().join(format!("xdp-prog-foreign-{}.o", std::process::id()));
        std::fs::write(&obj, crate::OBJECT).unwrap();
        #[rustfmt::skip]
        let attached = ns.ip(&[
            "link", "set", "dev", IFACE, "xdpgeneric", "obj", obj.to_str().unwrap(), "sec", "xdp",
        ]);
        let _ = std::fs::remove_file(&obj);
        attached.unwrap();
        let err = ns.run(|| {
            SharedProgram::join_timeout(IFACE, &XdpConfig::default(), Duration::from_millis(200))
                .unwrap_err()
        });
        assert!(
            matches!(err, ShareError::Xdp(XdpError::Busy { .. })),
            "{err:?}"
        );
        assert!(err.to_string().contains("no live endpoint"), "{err}");
    }
}
