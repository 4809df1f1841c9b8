//! The XDP program of the AF_XDP backend, and its loader.
//!
//! `bpf/llc_redirect.bpf.c` is compiled by `build.rs` with clang and embedded
//! here. It redirects frames that carry our LLC SAP (802.3 length form or the
//! jumbo form, EtherType 0x8870) to the AF_XDP socket of their RX queue, via
//! an XSKMAP, and passes every other frame to the kernel, so IP, ARP and IPv6
//! neighbour discovery keep working on the interface.
//!
//! [`LlcRedirect::attach`] loads the program with the SAP (and our MAC) baked
//! in as read-only globals, and attaches it through a BPF link
//! (`BPF_LINK_CREATE`), not through netlink: a link belongs to its file
//! descriptor, so the program goes away when the owner drops it, when the
//! process exits, and also when it is killed with SIGKILL. A netlink
//! attachment would outlive a crashed process and make the next start fail
//! with "busy".
//!
//! Native (driver) XDP is tried first unless generic is requested; the
//! `xdp.frags` variant of the program is used when frames may span several
//! buffers (MTU above what one AF_XDP chunk holds), which native XDP on veth
//! requires at jumbo MTUs.
//!
//! When many endpoint processes share one interface (one transport port
//! each), [`SharedProgram::join`] attaches the object's second program,
//! `llc_steer`, once per interface, and every later endpoint joins it: UI
//! frames go to the socket of the endpoint owning their `dst_port`, TEST and
//! XID to the link responder. See the [`shared`] module and the README.
#![deny(unsafe_code)]
#![warn(missing_docs)]

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Once;

use libbpf_rs::{ErrorKind, MapCore, MapFlags, MapHandle, ObjectBuilder};

pub mod offer;
pub mod shared;
#[allow(unsafe_code)]
mod sys;

pub use shared::{
    ShareError, SharedProgram, SteerCounters, DEFAULT_JOIN_TIMEOUT, STEER_MAX_QUEUES,
    STEER_MAX_SLOTS, STEER_PORTS,
};

/// The compiled BPF object (ELF), built from `bpf/llc_redirect.bpf.c`.
pub const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/llc_redirect.bpf.o"));

/// Entries of the socket map: RX queue indices `0..MAX_QUEUES` can carry a socket.
pub const MAX_QUEUES: u32 = 256;

// linux/if_link.h
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// Which XDP hook to attach to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttachMode {
    /// Native, and generic if the driver has no native XDP.
    #[default]
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP only: works on every interface, costs an skb per frame.
    Generic,
}

/// The hook the program ended up on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// In the driver, before an skb is built.
    Native,
    /// In the kernel's receive path, after the skb is built.
    Generic,
}

impl Attached {
    /// "native" or "generic".
    pub fn name(self) -> &'static str {
        match self {
            Attached::Native => "native",
            Attached::Generic => "generic",
        }
    }
}

/// How to load the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpConfig {
    /// Frames whose DSAP equals this SAP are redirected.
    pub sap: u8,
    /// Redirect only frames addressed to this MAC (or to a group address);
    /// `None`: any destination.
    pub mac: Option<[u8; 6]>,
    /// Which hook.
    pub attach: AttachMode,
    /// Load the multi-buffer (`xdp.frags`) variant: needed when a frame may
    /// not fit one buffer, i.e. with the socket bound with `XDP_USE_SG`.
    pub frags: bool,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            sap: 0x7C,
            mac: None,
            attach: AttachMode::Auto,
            frags: false,
        }
    }
}

/// Why the program could not be loaded, attached or given a socket.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// The process lacks the capabilities BPF and XDP need.
    #[error("not permitted to {what} on {iface}: needs {needs} (run as root, or grant them with `setcap cap_bpf,cap_net_admin,cap_net_raw+ep`)")]
    PermissionDenied {
        /// Interface name.
        iface: String,
        /// What was attempted.
        what: &'static str,
        /// The capabilities required.
        needs: &'static str,
    },
    /// Another XDP program is already attached to the interface (by another
    /// process, by `ip link set dev X xdp ...`, or a leftover netlink
    /// attachment), so ours cannot be.
    #[error("interface {iface} is busy: another XDP program is attached ({detail}); see it with `ip -d link show {iface}` and remove it with `ip link set dev {iface} xdp off`")]
    Busy {
        /// Interface name.
        iface: String,
        /// What the kernel said.
        detail: String,
    },
    /// The kernel or driver cannot run this program in the requested mode.
    #[error("XDP is not supported on {iface} in {mode} mode: {detail}")]
    Unsupported {
        /// Interface name.
        iface: String,
        /// "native" or "generic".
        mode: &'static str,
        /// What the kernel said, and why it matters.
        detail: String,
    },
    /// Anything else, with what was being done.
    #[error("{context}: {detail}")]
    Other {
        /// What the loader was doing.
        context: String,
        /// The underlying error.
        detail: String,
    },
}

/// Counters kept by the program (summed over CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Our frames handed to `bpf_redirect_map` (a socket was registered).
    pub redirected: u64,
    /// Our frames that found no socket on their queue, and were passed on.
    pub no_socket: u64,
    /// Frames that were not ours, passed to the kernel's stack.
    pub passed: u64,
}

/// The loaded and attached program; dropping it detaches the program.
#[derive(Debug)]
pub struct LlcRedirect {
    // Dropped first: detaching happens before the maps lose their last handle.
    link: OwnedFd,
    xsks: MapHandle,
    counters: MapHandle,
    iface: String,
    ifindex: u32,
    attached: Attached,
    frags: bool,
}

/// Route libbpf's messages (verifier logs, probe failures) into `tracing`
/// instead of stderr; errors reach the caller as [`XdpError`]s.
pub(crate) fn quiet_libbpf() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((
            libbpf_rs::PrintLevel::Debug,
            |level, msg: String| match level {
                libbpf_rs::PrintLevel::Warn => {
                    tracing::debug!(target: "libbpf", "{}", msg.trim_end())
                }
                _ => tracing::trace!(target: "libbpf", "{}", msg.trim_end()),
            },
        )));
    });
}

pub(crate) fn permission(iface: &str, what: &'static str) -> XdpError {
    XdpError::PermissionDenied {
        iface: iface.to_owned(),
        what,
        needs: "CAP_BPF and CAP_NET_ADMIN (and CAP_NET_RAW for the AF_XDP socket)",
    }
}

impl LlcRedirect {
    /// Load the program and attach it to interface `ifindex` (named `iface`,
    /// for messages) of the calling thread's network namespace.
    pub fn attach(iface: &str, ifindex: u32, cfg: &XdpConfig) -> Result<LlcRedirect, XdpError> {
        quiet_libbpf();
        let modes: &[Attached] = match cfg.attach {
            AttachMode::Auto => &[Attached::Native, Attached::Generic],
            AttachMode::Native => &[Attached::Native],
            AttachMode::Generic => &[Attached::Generic],
        };
        let mut last = None;
        for &mode in modes {
            match Self::attach_in(iface, ifindex, cfg, mode) {
                Ok(p) => return Ok(p),
                // Only "this mode does not work here" moves on to the next mode.
                Err(e @ XdpError::Unsupported { .. }) => {
                    tracing::debug!(%iface, error = %e, "XDP attach mode unavailable");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one mode was tried"))
    }

    fn attach_in(
        iface: &str,
        ifindex: u32,
        cfg: &XdpConfig,
        mode: Attached,
    ) -> Result<LlcRedirect, XdpError> {
        let other = |context: &str| {
            let context = format!("{context} (XDP program for {iface})");
            move |e: libbpf_rs::Error| XdpError::Other {
                context,
                detail: format!("{e:#}"),
            }
        };
        let wanted = program_name(cfg.frags);
        let obj = load(iface, cfg)?;
        let prog = obj
            .progs()
            .find(|p| p.name() == wanted)
            .ok_or_else(|| XdpError::Other {
                context: "loading the XDP program".into(),
                detail: format!("program {wanted} missing from the object"),
            })?;
        let flags = match mode {
            Attached::Native => XDP_FLAGS_DRV_MODE,
            Attached::Generic => XDP_FLAGS_SKB_MODE,
        };
        let link = sys::xdp_link_create(prog.as_fd(), ifindex, flags)
            .map_err(|e| attach_error(iface, mode, cfg.frags, e))?;
        let handle = |name: &str| -> Result<MapHandle, XdpError> {
            let map = obj
                .maps()
                .find(|m| m.name() == name)
                .ok_or_else(|| XdpError::Other {
                    context: "loading the XDP program".into(),
                    detail: format!("map {name} missing from the object"),
                })?;
            MapHandle::try_from(&map).map_err(other("taking a handle of a BPF map"))
        };
        let xsks = handle("xsks")?;
        let counters = handle("counters")?;
        tracing::debug!(%iface, ifindex, mode = mode.name(), frags = cfg.frags, sap = cfg.sap, "attached XDP program");
        // `obj` is dropped here: the link holds the program, our handles the maps.
        Ok(LlcRedirect {
            link,
            xsks,
            counters,
            iface: iface.to_owned(),
            ifindex,
            attached: mode,
            frags: cfg.frags,
        })
    }

    /// Send our frames arriving on RX queue `queue` to the AF_XDP socket
    /// `xsk` (bound to that queue of this interface, with an RX ring).
    pub fn register(&self, queue: u32, xsk: std::os::fd::BorrowedFd<'_>) -> Result<(), XdpError> {
        if queue >= MAX_QUEUES {
            return Err(XdpError::Unsupported {
                iface: self.iface.clone(),
                mode: self.attached.name(),
                detail: format!("RX queue {queue} is beyond the {MAX_QUEUES} the program serves"),
            });
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&xsk) as u32;
        self.xsks
            .update(&queue.to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
            .map_err(|e| XdpError::Other {
                context: format!(
                    "registering the AF_XDP socket of queue {queue} on {}",
                    self.iface
                ),
                detail: format!("{e:#}"),
            })
    }

    /// Stop redirecting queue `queue` (its frames are passed to the kernel).
    pub fn unregister(&self, queue: u32) {
        let _ = self.xsks.delete(&queue.to_ne_bytes());
    }

    /// The program's counters, summed over CPUs.
    pub fn counters(&self) -> Counters {
        let read = |i: u32| -> u64 {
            match self.counters.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY) {
                Ok(Some(per_cpu)) => per_cpu
                    .iter()
                    .filter_map(|v| v.get(..8))
                    .map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
                    .sum(),
                _ => 0,
            }
        };
        Counters {
            redirected: read(0),
            no_socket: read(1),
            passed: read(2),
        }
    }

    /// The hook the program is attached to.
    pub fn attached(&self) -> Attached {
        self.attached
    }

    /// Whether the multi-buffer (`xdp.frags`) variant is loaded.
    pub fn frags(&self) -> bool {
        self.frags
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The BPF link's descriptor (closing it detaches the program).
    pub fn link_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.link.as_fd()
    }
}

/// The two programs of the object, each with a single-buffer and a
/// multi-buffer (`xdp.frags`) entry point and its own maps (the counters and
/// `.rodata` are common).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `llc_redirect`: one owner of the SAP, a socket per RX queue.
    Redirect,
    /// `llc_steer`: endpoints share the interface, steered by transport port.
    Steer,
}

impl Kind {
    /// The entry point for single-buffer or multi-buffer frames.
    pub(crate) fn program_name(self, frags: bool) -> &'static str {
        match (self, frags) {
            (Kind::Redirect, false) => "llc_redirect",
            (Kind::Redirect, true) => "llc_redirect_frags",
            (Kind::Steer, false) => "llc_steer",
            (Kind::Steer, true) => "llc_steer_frags",
        }
    }

    /// Whether map `name` of the object belongs to this program.
    fn uses_map(self, name: &str) -> bool {
        let steer = name.starts_with("steer_");
        match self {
            Kind::Redirect => !steer,
            Kind::Steer => steer || name != "xsks",
        }
    }
}

/// The entry point of `llc_redirect` for single-buffer or multi-buffer frames.
fn program_name(frags: bool) -> &'static str {
    Kind::Redirect.program_name(frags)
}

/// Open the embedded object, bake the SAP and MAC into `.rodata`, and load
/// `llc_redirect`'s entry point that `cfg.frags` selects (not attached).
fn load(iface: &str, cfg: &XdpConfig) -> Result<libbpf_rs::Object, XdpError> {
    load_kind(iface, cfg, Kind::Redirect)
}

/// Open the embedded object, bake the SAP and MAC into `.rodata`, and load
/// the entry point of `kind` that `cfg.frags` selects, creating only the
/// maps that program uses (not attached).
pub(crate) fn load_kind(
    iface: &str,
    cfg: &XdpConfig,
    kind: Kind,
) -> Result<libbpf_rs::Object, XdpError> {
    let other = |context: &str| {
        let context = format!("{context} (XDP program for {iface})");
        move |e: libbpf_rs::Error| XdpError::Other {
            context,
            detail: format!("{e:#}"),
        }
    };
    let mut open = ObjectBuilder::default()
        .open_memory(OBJECT)
        .map_err(other("opening the embedded BPF object"))?;
    let wanted = kind.program_name(cfg.frags);
    for mut prog in open.progs_mut() {
        let keep = prog.name() == wanted;
        prog.set_autoload(keep);
    }
    let mut rodata_set = false;
    for mut map in open.maps_mut() {
        let name = map.name().to_string_lossy().into_owned();
        if !name.ends_with(".rodata") {
            map.set_autocreate(kind.uses_map(&name))
                .map_err(other("choosing the BPF maps to create"))?;
            continue;
        }
        let data = map.initial_value_mut().ok_or_else(|| XdpError::Other {
            context: "configuring the XDP program".into(),
            detail: ".rodata has no initial value".into(),
        })?;
        // Layout of .rodata, fixed by the C source: llc_sap (1 byte) then
        // our_mac (6 bytes); checked against the object in the tests.
        if data.len() < 7 {
            return Err(XdpError::Other {
                context: "configuring the XDP program".into(),
                detail: format!(".rodata is {} bytes, expected 7", data.len()),
            });
        }
        data[RODATA_SAP] = cfg.sap;
        data[RODATA_MAC..RODATA_MAC + 6].copy_from_slice(&cfg.mac.unwrap_or([0; 6]));
        rodata_set = true;
    }
    if !rodata_set {
        return Err(XdpError::Other {
            context: "configuring the XDP program".into(),
            detail: "the BPF object has no .rodata section".into(),
        });
    }
    open.load().map_err(|e| match e.kind() {
        ErrorKind::PermissionDenied => permission(iface, "load an XDP program"),
        _ => XdpError::Other {
            context: format!("loading the XDP program for {iface}"),
            detail: format!("{e:#}"),
        },
    })
}

const RODATA_SAP: usize = 0;
const RODATA_MAC: usize = 1;

pub(crate) fn attach_error(iface: &str, mode: Attached, frags: bool, e: io::Error) -> XdpError {
    let iface_s = iface.to_owned();
    let mode_s = mode.name();
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => permission(iface, "attach an XDP program"),
        Some(libc::EBUSY) | Some(libc::EEXIST) => XdpError::Busy {
            iface: iface_s,
            detail: e.to_string(),
        },
        Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => XdpError::Unsupported {
            iface: iface_s,
            mode: mode_s,
            detail: format!("{e} (the driver has no {mode_s} XDP support)"),
        },
        Some(libc::ERANGE) => XdpError::Unsupported {
            iface: iface_s,
            mode: mode_s,
            detail: if frags {
                format!("{e} (the MTU is too large for {mode_s} XDP on this driver)")
            } else {
                format!("{e} (the MTU needs a multi-buffer `xdp.frags` program)")
            },
        },
        _ => XdpError::Other {
            context: format!("attaching the XDP program to {iface} ({mode_s})"),
            detail: e.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XDP_PASS: u32 = 2;

    fn frame(dst: [u8; 6], length_type: u16, dsap: u8, total: usize) -> Vec<u8> {
        let mut f = vec![0u8; total];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&length_type.to_be_bytes());
        if total > 14 {
            f[14] = dsap;
        }
        f
    }

    /// Run the loaded program on `frame` (BPF_PROG_TEST_RUN) and return its
    /// verdict and which counter moved.
    fn classify(obj: &libbpf_rs::Object, name: &str, frame: &[u8]) -> (u32, usize) {
        let prog = obj.progs_mut().find(|p| p.name() == name).unwrap();
        let counters = obj.maps().find(|m| m.name() == "counters").unwrap();
        let read = |i: u32| -> u64 {
            counters
                .lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY)
                .unwrap()
                .unwrap()
                .iter()
                .map(|v| u64::from_ne_bytes(v[..8].try_into().unwrap()))
                .sum()
        };
        let before: Vec<u64> = (0..3).map(read).collect();
        let input = libbpf_rs::ProgramInput {
            data_in: Some(frame),
            ..Default::default()
        };
        let out = prog.test_run(input).unwrap();
        let moved = (0..3)
            .position(|i| read(i as u32) != before[i])
            .expect("a counter moved");
        (out.return_value, moved)
    }

    /// The program's decisions, run in the kernel without an interface. With
    /// no socket in the map, our frames are passed too, but counted as
    /// `no_socket` (1) rather than `passed` (2). Needs root.
    #[test]
    fn program_picks_exactly_our_frames() {
        testbed::require_root!();
        let us = [2, 0, 0, 0, 0, 2];
        let cfg = XdpConfig {
            sap: 0x7C,
            mac: Some(us),
            ..XdpConfig::default()
        };
        for frags in [false, true] {
            let obj = load(
                "test",
                &XdpConfig {
                    frags,
                    ..cfg.clone()
                },
            )
            .unwrap();
            let name = program_name(frags);
            let ours = |f: &[u8]| classify(&obj, name, f);
            // Length form and jumbo form, unicast to us or broadcast.
            assert_eq!(ours(&frame(us, 46, 0x7C, 60)), (XDP_PASS, 1));
            assert_eq!(ours(&frame(us, 1500, 0x7C, 1514)), (XDP_PASS, 1));
            assert_eq!(ours(&frame(us, 0x8870, 0x7C, 3000)), (XDP_PASS, 1));
            assert_eq!(ours(&frame([0xFF; 6], 46, 0x7C, 60)), (XDP_PASS, 1));
            // Not ours: other SAP, other host, IPv4 / ARP / IPv6 / VLAN, runt.
            assert_eq!(ours(&frame(us, 46, 0x42, 60)), (XDP_PASS, 2));
            assert_eq!(
                ours(&frame([2, 0, 0, 0, 0, 9], 46, 0x7C, 60)),
                (XDP_PASS, 2)
            );
            for ethertype in [0x0800u16, 0x0806, 0x86DD, 0x8100, 1501] {
                assert_eq!(ours(&frame(us, ethertype, 0x7C, 60)), (XDP_PASS, 2));
            }
            assert_eq!(ours(&frame(us, 46, 0x7C, 14)), (XDP_PASS, 2));
        }
    }

    #[test]
    fn object_has_both_programs_and_the_expected_rodata() {
        let open = ObjectBuilder::default().open_memory(OBJECT).unwrap();
        let names: Vec<String> = open
            .progs()
            .map(|p| p.name().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"llc_redirect".to_string()), "{names:?}");
        assert!(
            names.contains(&"llc_redirect_frags".to_string()),
            "{names:?}"
        );
        let sections: Vec<String> = open
            .progs()
            .map(|p| p.section().to_string_lossy().into_owned())
            .collect();
        assert!(sections.contains(&"xdp".to_string()), "{sections:?}");
        assert!(sections.contains(&"xdp.frags".to_string()), "{sections:?}");
        let rodata = open
            .maps()
            .find(|m| m.name().to_string_lossy().ends_with(".rodata"))
            .expect(".rodata");
        let init = rodata.initial_value().expect("initial value");
        // Defaults from the C source: SAP 0x7C, MAC all zero.
        assert_eq!(&init[..7], &[0x7C, 0, 0, 0, 0, 0, 0]);
    }
}
