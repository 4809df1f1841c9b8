//! The VM harness: QEMU virtual machines with virtio-net NICs on a virtual link
//! ([`qemu`]; no root needed, a tap bridge needs it), booted from a small initramfs with the
//! workspace's programs, for what network namespaces cannot show (a kernel of its own per
//! host, a real NIC driver, several cores per host).
//!
//! The namespace beds, the simulated MPI cluster and link chaos are in `testbed`, the one
//! builder of test hosts; the VMs' tap bridge is one of its segments. No library crate and
//! no tool depends on this crate (tree-check's `no_crate_depends_on_the_vm_harness`).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod qemu;
