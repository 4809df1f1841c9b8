//! Network-namespace test beds: hosts on one machine that exchange real Ethernet frames.
//!
//! A bed is a set of network namespaces joined by veth pairs ([`TwoHosts`]) or by a Linux
//! bridge in a hub namespace of its own ([`Bridged`]); every namespace is deleted when its
//! owner is dropped, also while a panic unwinds, and names are unique per process and run
//! (see [`netns`]). Building one needs root of the initial user namespace
//! ([`check_privileges`], [`require_root!`]). [`Background`] runs a server for the length of
//! a test or a demo and kills it on drop. [`cpu::CpuBusy`] tells a benchmark how busy the
//! machine's CPUs were while it measured.
//!
//! The tools' demos build their beds with this crate at run time; the test harness
//! `vm-tests` builds its simulated cluster and QEMU hosts on the same pieces
//! ([`netns::add_veth`], [`netns::AddressPlan`], ...) and re-exports the beds.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cdylib;
pub mod cpu;
pub mod llcd;
pub mod netns;
pub mod process;
mod sys;
pub mod users;

pub use netns::{
    check_privileges, cleanup_stale, format_mac, interface_mac, interface_mtu, run_checked,
    Bridged, HarnessError, Host, Netns, TwoHosts,
};
pub use process::Background;
pub use users::TestUser;
