//! The application runtime above the message layer: what DECK, BMI, the
//! migrating-task runtime and the MPI shim share, so that each keeps only
//! what is its own (mailboxes and naming, BMI's unexpected queue and
//! methods, migration, the BTL's descriptors).
//!
//! - [`Runtime`]: an API's endpoints (one, or BMI's one per method), its
//!   state under one lock, and the loop that serves it: [`Runtime::pump`]
//!   takes the endpoints' events to the API's [`Api::route`],
//!   [`Runtime::wait_for`] makes progress until a condition on the state
//!   holds, paced by the message layer's one policy (`msg_layer::pace`),
//!   and one background thread ([`Runtime::start_background`]) makes
//!   progress while the application computes.
//! - [`peers`]: which rank is which peer, and which peers ended and why,
//!   as the message layer's typed error (never a string).
//! - [`cabi`]: the C entry points' helpers: panic capture at the boundary,
//!   the thread's last error; [`PtrRegion`]: a C caller's memory as a
//!   message-layer region.
//!
//! Delivery is pull-style: nothing of the endpoint calls back into the API
//! (`Endpoint::set_pull_delivery`), so an API may call its endpoint while it
//! holds its state's lock.

#![deny(unsafe_code)]

pub mod cabi;
pub mod peers;
mod region;
mod runtime;
mod sys;

pub use peers::{Ended, Ranks};
pub use region::PtrRegion;
pub use runtime::{Api, Cx, Ep, Options, Runtime};
