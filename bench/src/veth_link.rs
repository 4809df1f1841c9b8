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

/// What a streaming example sweeps: how many MiB, over which MTUs and
/// backends.
pub struct Sweep {
    pub mib: usize,
    pub mtus: Vec<u32>,
    pub backends: Vec<String>,
}

impl Sweep {
    /// Read `--mib N`, `--mtu 1500,9000` and `--backend a,b` from the
    /// command line; every other option goes to `other(name, value)`, which
    /// panics on one it does not know.
    pub fn from_args(mib: usize, backends: &[&str], mut other: impl FnMut(&str, &str)) -> Sweep {
        let mut sweep = Sweep {
            mib,
            mtus: vec![1500, 9000, 65000],
            backends: backends.iter().map(|b| b.to_string()).collect(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let val = it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
            match arg.as_str() {
                "--mib" => sweep.mib = val.parse().expect("--mib N"),
                "--mtu" => sweep.mtus = list(&val, |m| m.parse().expect("--mtu 1500,9000")),
                "--backend" => sweep.backends = list(&val, |b| b.to_string()),
                name => other(name, &val),
            }
        }
        sweep
    }
}

/// A comma-separated list argument, each item parsed by `parse`.
pub fn list<T>(value: &str, parse: impl Fn(&str) -> T) -> Vec<T> {
    value.split(',').map(parse).collect()
}
