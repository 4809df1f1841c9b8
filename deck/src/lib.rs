//! DECK over the LLC stack: the mailbox message-passing library of the
//! seeds (000, 001), with the reliability, flow control and progress of the
//! message layer underneath.
//!
//! - [`Deck`], [`Mailbox`], [`Msg`]: the Rust API;
//! - `include/deck.h` and `libdeck.so` ([`ffi`]): the seed's C API, so its
//!   programs compile unchanged;
//! - `deckrun` ([`boot`]): the launcher, and how a process joins its job;
//! - [`naming`]: where names live; [`wire`]: DECK's packets.
//!
//! deck/README.md says what DECK guarantees and how it is built.

pub mod boot;
mod codes;
pub mod error;
pub mod ffi;
mod mailbox;
pub mod msg;
pub mod naming;
mod runtime;
pub mod wire;

pub use error::DeckError;
pub use mailbox::{Deck, Mailbox};
pub use msg::{DataType, Msg, Packable};
pub use runtime::{DeckStats, MboxAddr, WINDOW};
