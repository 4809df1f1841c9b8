//! The C API's error codes (negative; 0 is success): the vocabulary that
//! `DeckError::code` maps to and `deck.h` defines (`tests/header.rs`
//! generates the header from this file and `ffi.rs`).

use std::ffi::c_int;

/// Invalid argument (a null pointer, an unknown type, a message not made
/// by `deck_msg_create` or a mailbox not made by create/clone, a bad name).
pub const DECK_EINVAL: c_int = -1;
/// DECK is not initialized: call `deck_init` first.
pub const DECK_ENOINIT: c_int = -2;
/// `deck_init` failed (`deck_last_error` says why).
pub const DECK_EINIT: c_int = -3;
/// Packing past the message's `size`.
pub const DECK_EMSGFULL: c_int = -4;
/// Unpacking past the message's `datalen`.
pub const DECK_EMSGSHORT: c_int = -5;
/// The next message is larger than the receiving message: its size is in
/// `needed`, and it stays first in the mailbox.
pub const DECK_EMSGSIZE: c_int = -6;
/// The mailbox was destroyed.
pub const DECK_EDESTROYED: c_int = -7;
/// Only the owner may retrieve: the mailbox is a clone.
pub const DECK_ENOTOWNER: c_int = -8;
/// A mailbox of that name exists already.
pub const DECK_EEXIST: c_int = -9;
/// No mailbox of that name was created within the clone's wait.
pub const DECK_ENOENT: c_int = -10;
/// The node of the mailbox (or of its name) failed.
pub const DECK_EPEER: c_int = -11;
/// The transport failed.
pub const DECK_ETRANSPORT: c_int = -12;
/// A bounded wait passed.
pub const DECK_ETIMEDOUT: c_int = -13;
