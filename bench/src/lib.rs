//! What the measurements of this workspace share: the platform and ceiling
//! measurements (`examples/path_ceiling.rs`, `link_ceiling`, `nic_model`,
//! `pnet_vs_tpacket`, ...), the seed benchmarks' drivers (`deck_bench`,
//! `bmi_bench`) and the examples that need test hosts live here, apart from
//! the libraries they measure (as quinn keeps `bench/` and `perf/` apart
//! from quinn-proto); they build their hosts with `testbed`.
#![deny(unsafe_code)]

#[allow(unsafe_code)] // sched_setaffinity
pub mod pin;
pub mod round_trip;
pub mod transport_stream;
pub mod veth_link;
