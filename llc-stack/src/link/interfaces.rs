//! The host's interfaces, and which of them can carry LLC: what a program
//! that is given no interface (an MPI component with its defaults, a DECK
//! node) chooses from. Also the questions a backend asks about the
//! interface it opens, with the kernel's answers turned into [`LinkError`]s.

use std::io;

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

/// A failed question about interface `name`: the kernel does not know the
/// name (`ENODEV`, `ENXIO`, also what `sys` answers for a string that cannot
/// be a name) becomes [`LinkError::NoSuchInterface`], which tells the user
/// how to list interfaces; anything else an [`LinkError::Io`] saying what
/// was asked.
fn query_error(name: &str, asking: impl FnOnce() -> String, e: io::Error) -> LinkError {
    match e.raw_os_error() {
        Some(libc::ENODEV | libc::ENXIO) => LinkError::NoSuchInterface(name.to_owned()),
        _ => LinkError::Io {
            context: asking(),
            source: e,
        },
    }
}

/// The interface of the calling thread's network namespace that holds IP
/// address `ip`, if one does: lets a tool or provider that is handed an IP
/// address of this host (a launcher's node name) find the interface meant.
pub fn interface_with_address(ip: std::net::IpAddr) -> Result<Option<String>, LinkError> {
    let all = sys::interface_addresses().map_err(|source| LinkError::Io {
        context: "listing the interfaces' addresses".into(),
        source,
    })?;
    Ok(all.into_iter().find(|(_, a)| *a == ip).map(|(n, _)| n))
}

/// Index of interface `name` in the calling thread's network namespace.
pub fn index(name: &str) -> Result<u32, LinkError> {
    sys::interface_index(name)
        .map_err(|e| query_error(name, || format!("looking up interface {name}"), e))
}

/// Hardware (MAC) address of interface `name`.
pub(crate) fn mac(name: &str) -> Result<[u8; 6], LinkError> {
    sys::interface_mac(name).map_err(|e| {
        query_error(
            name,
            || format!("reading the hardware address of interface {name}"),
            e,
        )
    })
}

/// MTU of interface `name`: the largest payload after the Ethernet header.
pub(crate) fn mtu(name: &str) -> Result<usize, LinkError> {
    sys::interface_mtu(name)
        .map_err(|e| query_error(name, || format!("reading the MTU of interface {name}"), e))
}

/// Whether interface `name` is administratively up (`IFF_UP`).
pub(crate) fn is_up(name: &str) -> Result<bool, LinkError> {
    sys::interface_flags(name)
        .map(|flags| flags & libc::IFF_UP != 0)
        .map_err(|e| query_error(name, || format!("reading the flags of interface {name}"), e))
}

/// Number of RX queues of interface `name` (one for drivers that do not say).
pub(crate) fn rx_queues(name: &str) -> Result<u32, LinkError> {
    sys::interface_rx_queues(name).map_err(|e| {
        query_error(
            name,
            || format!("reading the channel count of interface {name}"),
            e,
        )
    })
}

/// The driver of interface `name`, e.g. `veth`; `None` when it does not say.
pub(crate) fn driver(name: &str) -> Option<String> {
    sys::interface_driver(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_impossible_names_are_no_such_interface() {
        for name in [
            "llc-no-such0",
            "",
            "a-name-longer-than-ifnamsiz",
            "nul\0name",
        ] {
            for result in [
                index(name).map(drop),
                mtu(name).map(drop),
                mac(name).map(drop),
            ] {
                match result {
                    Err(LinkError::NoSuchInterface(n)) => assert_eq!(n, name),
                    other => panic!("{name:?}: {other:?}"),
                }
            }
            assert!(matches!(is_up(name), Err(LinkError::NoSuchInterface(_))));
            assert!(matches!(
                rx_queues(name),
                Err(LinkError::NoSuchInterface(_))
            ));
        }
    }

    #[test]
    fn loopback_is_found_and_up() {
        assert!(index("lo").unwrap() > 0);
        assert!(is_up("lo").unwrap());
        assert_eq!(rx_queues("lo").unwrap(), 1);
        let err = LinkError::NoSuchInterface("x0".into()).to_string();
        assert!(
            err.contains("no such interface") && err.contains("ip link"),
            "{err}"
        );
    }

    #[test]
    fn the_loopback_address_is_found_on_lo_and_a_foreign_one_nowhere() {
        let lo = interface_with_address("127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(lo.as_deref(), Some("lo"));
        // TEST-NET-3 (RFC 5737): documentation only, never configured here.
        let none = interface_with_address("203.0.113.77".parse().unwrap()).unwrap();
        assert_eq!(none, None);
    }
}
