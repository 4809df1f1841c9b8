//! The message layer: what applications and the MPI shim use.
//!
//! Built so far: endpoint addresses ([`addr`]) and MPI matching
//! ([`matching`]). The transports, eager/rendezvous protocols, RMA and the
//! progress engine build on them.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod matching;
