//! The message layer: what applications and the MPI shim use.
//!
//! - [`Endpoint`]: non-blocking `isend`/`irecv` with MPI matching (source,
//!   tag, context; wildcards; non-overtaking), `test`/`wait`/`wait_any`/
//!   `test_some`/`cancel`/`probe`, eager and rendezvous protocols, a bounded
//!   unexpected-message buffer with credit-based flow control, active
//!   messages, registered memory with `put`/`get`, and progress made by the
//!   waiter or by a progress thread.
//! - The calls the libfabric provider sits on, over the same engine:
//!   64-bit masked tags and an untagged space ([`Select`], [`Space`]),
//!   remote data, inject, receives into caller memory that report
//!   truncation, peek/claim/discard ([`Claimed`]), multi-receive buffers
//!   ([`MultiRecv`]), and sends to the endpoint's own address.
//! - [`transport::Transport`]: what the endpoint runs on: the LLC stack
//!   ([`transport::llc`]) or TCP.
//! - [`addr`]: printable, parsable endpoint addresses.
//!
//! The packet format is specified in docs/MESSAGES.md.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod config;
pub mod delivery;
mod endpoint;
mod engine;
pub mod error;
#[allow(unsafe_code)]
pub mod lent;
pub mod matching;
/// The one pacing policy of every loop that waits on the network (spin
/// while rounds move something and for a budget after, then sleep; a new
/// budget on waking), for the runtimes above the message layer too.
pub mod pace {
    pub use llc_stack::pace::{Pace, Pacer};
    pub use llc_stack::Instant;
}
mod placement;
pub mod rma;
#[allow(unsafe_code)]
pub mod sys;
pub mod transport;
pub mod wire;

pub use addr::Addr;
pub use config::Config;
pub use delivery::{ActiveMessage, Event, ReleaseNotice, Request};
pub use endpoint::{AmHandler, Endpoint, FailureHandler, AM_COPY_INLINE};
pub use engine::{Claimed, Completion, MultiActivity, MultiPiece, MultiRecv, Stats, Status};
pub use error::{Error, PeerEnd};
pub use matching::{PeerId, Select, Source, Space, Tag};
