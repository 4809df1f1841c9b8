//! Test hosts on one machine that exchange real Ethernet frames: the one builder of them.
//!
//! A bed is a set of network namespaces joined by veth pairs ([`TwoHosts`]) or by a Linux
//! bridge in a hub namespace of its own ([`Bridged`], [`MultiPort`], the simulated MPI
//! cluster [`Cluster`]; every bridge is a [`netns::Segment`]); every namespace is deleted
//! when its owner is dropped, also while a panic unwinds, and names are unique per process
//! and run (see [`netns`]). Building one needs root of the initial user namespace
//! ([`check_privileges`], [`require_root!`]). [`Background`] runs a server for the length of
//! a test or a demo and kills it on drop. [`LinkChaos`] damages the frames of a bed's link;
//! [`cpu::CpuBusy`] tells a benchmark how busy the machine's CPUs were while it measured;
//! [`alloc_count`] counts a test's allocations; [`slurm::Slurm`] runs Slurm (slurmctld, a
//! slurmd per host, munge) on a [`Cluster`].
//!
//! The tests, the tools' demos (at run time), the benchmarks of the `bench` crate and the
//! QEMU harness `vm-tests` (whose tap bridge is a [`netns::Segment`]) all build their hosts
//! with this crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod alloc_count;
pub mod cdylib;
pub mod cluster;
pub mod cpu;
pub mod link_chaos;
pub mod llcd;
pub mod netns;
pub mod process;
pub mod pypi;
pub mod slurm;
mod sys;
pub mod users;

pub use cluster::{
    forward_env, run_bounded, Cluster, ClusterHost, JobOutput, SecondRail, CLUSTER_IFNAME,
    CLUSTER_IFNAME2,
};
pub use link_chaos::{ChaosCounters, ChaosSettings, LinkChaos};
pub use netns::{
    check_privileges, cleanup_stale, format_mac, interface_mac, interface_mtu, run_checked,
    Bridged, HarnessError, Host, MultiPort, Netns, TwoHosts,
};
pub use process::Background;
pub use users::TestUser;
