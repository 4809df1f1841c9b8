//! Test hosts for the LLC stack: network namespaces joined by veth pairs or a Linux bridge
//! (the beds of the `testbed` crate, re-exported here, and [`MultiPort`]), so integration
//! tests can exchange real Ethernet frames on one machine (root needed), and
//! QEMU virtual machines with virtio-net NICs on a virtual link ([`qemu`], no root needed).
//!
//! ## A simulated cluster for MPI jobs ([`cluster`])
//!
//! [`Cluster::new(n, mtu)`](Cluster::new) builds `n` hosts `h0, h1, ...`: one network
//! namespace each, holding only `lo` and `eth0` (a veth on a bridge in a hub namespace;
//! address `.i+1` of a per-cluster 10.x.y.0/24, MAC `02:4c:4c:00:00:{i+1}`). Open MPI's
//! `mpirun` ([`Cluster::mpirun`]) runs on `h0` and starts its daemons on the other hosts
//! through the cluster's rsh agent ([`Cluster::agent`], an `sh` script called like ssh:
//! `AGENT HOST COMMAND...`), which runs the command in HOST's namespace. Every command of
//! the bed gets the host's own hostname, `/dev/shm`, `/etc/hosts` and `TMPDIR`, so Open MPI
//! sees separate nodes (local ranks `0..k` on each) and btl/vader's files never collide,
//! and a PID namespace of its own, so [`run_bounded`] ends a job that overruns its time
//! with every daemon and rank it started.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod alloc_count;
pub mod cluster;
pub mod link_chaos;
pub mod netns;
pub mod qemu;
mod sys;

pub use cluster::{forward_env, run_bounded, Cluster, ClusterHost, JobOutput, CLUSTER_IFNAME};
pub use link_chaos::{ChaosCounters, ChaosSettings, LinkChaos};
pub use netns::MultiPort;
// The namespace beds and background processes live in `testbed` (the tools build their
// demos' beds with it at run time); the harness's users name them through this crate.
pub use testbed::{
    cdylib, check_privileges, cleanup_stale, format_mac, interface_mac, interface_mtu, process,
    require_root, run_checked, Background, Bridged, HarnessError, Host, Netns, TestUser, TwoHosts,
};
