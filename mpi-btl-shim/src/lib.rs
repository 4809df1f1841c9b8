//! A C ABI over the message layer, for the Open MPI BTL component `btl/llc`
//! (`component/btl_llc*.c`) and any other C caller.
//!
//! The header `include/llc_shim.h` is generated from the crate (the C ABI
//! is `src/ffi.rs`) by cbindgen; `tests/header.rs` fails when it is out of
//! date.
//!
//! # Mapping
//! - BTL tags (0..=255) are message-layer active-message handler ids: a
//!   send is [`msg_layer::Endpoint::am_post`], a receive runs the callback registered
//!   for its tag.
//! - Registered memory is a [`msg_layer::rma::MemoryRegion`] over a raw pointer
//!   ([`PtrRegion`]); put and get are the message layer's, completed with a
//!   callback.
//! - Frame authentication: [`LlcShimConfig::auth`] says where the key
//!   comes from; with [`LLC_SHIM_AUTH_LATER`] the endpoint takes no frame
//!   until [`llc_shim_new_auth_key`] (the job's rank 0: draws the key and
//!   returns its material for the modex) or [`llc_shim_set_auth_key`] (the
//!   other ranks) keys it, before the first peer is added
//!   ([`msg_layer::Endpoint::set_auth_key`]).
//! - Progress is [`msg_layer::Endpoint::progress`]; the endpoint delivers pull-style
//!   (one ordered queue of messages, peer ends, completions and releases),
//!   and the shim hands each event to its C callback.
//!
//! # Files
//! - `ffi.rs`: the C ABI (types and `extern "C"` functions of
//!   `include/llc_shim.h`), argument checks only;
//! - `state.rs`: the endpoint and what is registered on it, and the
//!   delivery of events to C;
//!
//! # Threads and callbacks
//! Every C callback (receive, RMA completion, peer failure) runs on the
//! thread that calls [`llc_shim_progress`] and from no other, so an Open
//! MPI built without thread support is never entered concurrently. A
//! callback may call the shim again (ob1 sends from inside its receive
//! callbacks): no shim or engine lock is held while it runs, and a nested
//! `llc_shim_progress` makes progress but delivers nothing (the outer one
//! delivers in order).
//!
//! The optional background thread ([`LlcShimConfig::progress_thread`]) only
//! keeps the connections alive while the application computes: every
//! `progress_interval_us` it makes progress if no caller did meanwhile
//! (acknowledgements, keepalives, retransmissions). What it receives waits
//! in the endpoint's event queue for the next `llc_shim_progress`; it never
//! calls C. It runs at niceness 19: on a node where every core runs a rank
//! it takes the time the scheduler can spare instead of preempting one.

mod abi;
mod ffi;
mod state;

pub use abi::*;
pub use app_runtime::PtrRegion;
pub use ffi::*;
pub use state::LlcShim;
