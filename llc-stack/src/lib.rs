//! A userspace network stack for messages over raw Ethernet with an IEEE 802.2 LLC header.
//!
//! Layers, bottom up (each knows nothing of the ones above it):
//! - [`wire`]: typed zero-copy views of the frame formats; parsing never panics.
//! - [`link`]: devices that move whole frames (AF_XDP, AF_PACKET, the same-host
//!   path, simulation) and middleware (fault injection, pcap capture).
//! - [`proto`]: the reliable connection as a sans-IO state machine fed frames and time.
//! - [`pace`]: the spin-then-sleep policy of every loop that waits.
//! - [`stack`]: the I/O edge that drives `proto` over a `link` device with a real clock.
//! - [`statpage`]: the live counters an endpoint publishes for `llc-stat`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod link;
pub mod pace;
pub mod proto;
pub mod rng;
pub mod stack;
pub mod statpage;
#[allow(unsafe_code)]
pub(crate) mod sys;
pub mod time;
pub mod wire;

pub use link::{Capabilities, Device, LinkError};
pub use stack::Stack;
pub use time::Instant;
