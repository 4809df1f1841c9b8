//! The link a veth benchmark names on its command line (`packet`, `xdp`,
//! `xdp-generic`), opened the same way by every streaming example.

use llc_stack::link::afpacket::AfPacketConfig;
use llc_stack::link::afxdp::{AfXdpConfig, AttachMode};
use llc_stack::link::any::{self, AnyLink, Backend};

/// The backend names [`open`] takes.
pub const BACKENDS: &str = "packet, xdp, xdp-generic";

/// Open `backend` on `ifname`; panics with the reason (a benchmark cannot
/// go on without its link).
pub fn open(ifname: &str, backend: &str) -> AnyLink {
    let (kind, xdp) = match backend {
        "packet" => (Backend::Packet, AfXdpConfig::default()),
        "xdp" => (Backend::Xdp, AfXdpConfig::default()),
        "xdp-generic" => (
            Backend::Xdp,
            AfXdpConfig {
                attach: AttachMode::Generic,
                ..Default::default()
            },
        ),
        other => panic!("unknown backend {other} ({BACKENDS})"),
    };
    let (link, _) = any::open(ifname, kind, AfPacketConfig::default(), xdp)
        .unwrap_or_else(|e| panic!("opening {backend} on {ifname}: {e}"));
    link
}

/// A comma-separated list argument, each item parsed by `parse`.
pub fn list<T>(value: &str, parse: impl Fn(&str) -> T) -> Vec<T> {
    value.split(',').map(parse).collect()
}
