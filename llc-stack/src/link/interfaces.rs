//! The host's interfaces, and which of them can carry LLC: what a program
//! that is given no interface (an MPI component with its defaults, a DECK
//! node) chooses from.

use super::LinkError;
use crate::sys;

/// One interface of the calling thread's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Its name.
    pub name: String,
    /// Its hardware address.
    pub mac: [u8; 6],
    /// Its MTU.
    pub mtu: usize,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// The loopback interface.
    pub loopback: bool,
    /// An Ethernet interface (`ARPHRD_ETHER`): frames with MAC addresses and
    /// an 802.2 LLC header can cross it.
    pub ethernet: bool,
    /// A port of a bridge or bond (it has a master): the master is the
    /// interface the host uses; a port's frames are taken over by it.
    pub enslaved: bool,
}

impl InterfaceInfo {
    /// Whether an endpoint may use it by default: up, Ethernet, not
    /// loopback, not enslaved, with a non-zero MAC. The same exclusions
    /// btl/tcp makes by default (loopback, interfaces that are down).
    pub fn carries_llc(&self) -> bool {
        self.up && self.ethernet && !self.loopback && !self.enslaved && self.mac != [0; 6]
    }

    /// Why it does not carry LLC, for messages (`None` when it does).
    pub fn unusable_because(&self) -> Option<&'static str> {
        if self.loopback {
            Some("loopback")
        } else if !self.ethernet {
            Some("not Ethernet")
        } else if !self.up {
            Some("down")
        } else if self.enslaved {
            Some("a bridge or bond port")
        } else if self.mac == [0; 6] {
            Some("no MAC address")
        } else {
            None
        }
    }
}

/// `ARPHRD_ETHER` (linux/if_arp.h).
const ARPHRD_ETHER: u16 = 1;

/// Every interface of the calling thread's network namespace, in the
/// kernel's order (by index).
pub fn interfaces() -> Result<Vec<InterfaceInfo>, LinkError> {
    let names = sys::interface_names().map_err(|source| LinkError::Io {
        context: "listing the network interfaces".into(),
        source,
    })?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        // An interface can vanish between the listing and the questions.
        let Ok(flags) = sys::interface_flags(&name) else {
            continue;
        };
        let hw_type = sys::interface_hw_type(&name).unwrap_or(0);
        out.push(InterfaceInfo {
            mac: sys::interface_mac(&name).unwrap_or([0; 6]),
            mtu: sys::interface_mtu(&name).unwrap_or(0),
            up: flags & libc::IFF_UP != 0,
            loopback: flags & libc::IFF_LOOPBACK != 0,
            ethernet: hw_type == ARPHRD_ETHER,
            enslaved: flags & libc::IFF_SLAVE != 0 || has_master(&name),
            name,
        });
    }
    Ok(out)
}

/// Whether `/sys` says `name` has a master (a bridge or bond). Trusted only
/// when `/sys` shows this network namespace (the interface index matches):
/// a thread that entered a namespace with setns(2) still sees the old /sys.
fn has_master(name: &str) -> bool {
    let dir = std::path::Path::new("/sys/class/net").join(name);
    let index = std::fs::read_to_string(dir.join("ifindex"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match (index, sys::interface_index(name)) {
        (Some(a), Ok(b)) if a == b => dir.join("master").exists(),
        _ => false,
    }
}
