//! The message layer: what applications and the MPI shim use.
//!
//! Built so far: endpoint addresses ([`addr`]), MPI matching ([`matching`])
//! and the [`transport::Transport`] trait with the LLC stack behind it. The
//! eager/rendezvous protocols, RMA and the progress engine build on them.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod matching;
pub mod transport;
