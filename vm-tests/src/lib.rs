//! Test hosts for the LLC stack: network namespaces joined by veth pairs or a Linux bridge,
//! so integration tests can exchange real Ethernet frames on one machine (root needed), and
//! QEMU virtual machines with virtio-net NICs on a virtual link ([`qemu`], no root needed).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod link_chaos;
pub mod netns;
pub mod process;
pub mod qemu;
mod sys;

pub use link_chaos::{ChaosCounters, ChaosSettings, LinkChaos};
pub use netns::{
    check_privileges, cleanup_stale, format_mac, interface_mac, interface_mtu, run_checked,
    Bridged, HarnessError, Host, MultiPort, Netns, TwoHosts,
};
pub use process::Background;
