//! DECK's errors: a Rust enum for the Rust API, and the negative `DECK_E*`
//! codes of the C API (`deck_strerror` says each in words).

use std::os::raw::c_int;

/// Why a DECK call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeckError {
    /// A null pointer, an unknown type, a message not made by
    /// `deck_msg_create`, a name that is not valid UTF-8 or is empty...
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// DECK is not initialized (call `deck_init` first), or was finished.
    #[error("DECK is not initialized: call deck_init first")]
    NotInitialized,
    /// `deck_init` could not set the job up (transport, launcher...).
    #[error("DECK could not start: {0}")]
    Init(String),
    /// Packing would pass the message's size.
    #[error("packing {needed} bytes into a message with {free} bytes free (of {size})")]
    MsgFull {
        /// Bytes the pack needs.
        needed: usize,
        /// Bytes left before `size`.
        free: usize,
        /// The message's size.
        size: usize,
    },
    /// Unpacking would pass the message's data.
    #[error("unpacking {needed} bytes with {left} bytes of data left")]
    MsgShort {
        /// Bytes the unpack needs.
        needed: usize,
        /// Bytes of data after the cursor.
        left: usize,
    },
    /// The message waiting first in the mailbox is larger than the
    /// receiving message; it stays in the mailbox.
    #[error("the next message has {needed} bytes but the receiving message holds {size}; it stays first in the mailbox")]
    MsgTooBig {
        /// Size of the waiting message.
        needed: usize,
        /// Size of the receiving message.
        size: usize,
    },
    /// The mailbox was destroyed.
    #[error("mailbox {0} was destroyed")]
    Destroyed(String),
    /// Only the mailbox's owner may retrieve from it.
    #[error("mailbox {0} is a clone: only its owner may retrieve from it")]
    NotOwner(String),
    /// A mailbox of this name exists already.
    #[error("a mailbox named {0:?} exists already")]
    Exists(String),
    /// No mailbox of this name appeared in time.
    #[error("no mailbox named {name:?} was created within {waited_ms} ms")]
    NoSuchName {
        /// The name.
        name: String,
        /// How long the clone waited.
        waited_ms: u64,
    },
    /// The node a mailbox (or its name) lives on failed or left.
    #[error("node {node} failed: {}", cause.without_peer())]
    PeerFailed {
        /// The node.
        node: u32,
        /// What the message layer reported: the peer closed, or why its
        /// connection failed.
        cause: msg_layer::Error,
    },
    /// The transport failed as a whole.
    #[error("transport: {0}")]
    Transport(String),
    /// A wait passed its bound.
    #[error("timed out: {0}")]
    Timeout(String),
}

/// The C codes (negative; 0 is success), defined with the C API.
pub mod code {
    pub use crate::codes::{
        DECK_EDESTROYED, DECK_EEXIST, DECK_EINIT, DECK_EINVAL, DECK_EMSGFULL, DECK_EMSGSHORT,
        DECK_EMSGSIZE, DECK_ENOENT, DECK_ENOINIT, DECK_ENOTOWNER, DECK_EPEER, DECK_ETIMEDOUT,
        DECK_ETRANSPORT,
    };
}

impl app_runtime::cabi::Code for DeckError {
    fn code(&self) -> i32 {
        DeckError::code(self)
    }
}

impl DeckError {
    /// The C code of this error.
    pub fn code(&self) -> c_int {
        use code::*;
        match self {
            DeckError::Invalid(_) => DECK_EINVAL,
            DeckError::NotInitialized => DECK_ENOINIT,
            DeckError::Init(_) => DECK_EINIT,
            DeckError::MsgFull { .. } => DECK_EMSGFULL,
            DeckError::MsgShort { .. } => DECK_EMSGSHORT,
            DeckError::MsgTooBig { .. } => DECK_EMSGSIZE,
            DeckError::Destroyed(_) => DECK_EDESTROYED,
            DeckError::NotOwner(_) => DECK_ENOTOWNER,
            DeckError::Exists(_) => DECK_EEXIST,
            DeckError::NoSuchName { .. } => DECK_ENOENT,
            DeckError::PeerFailed { .. } => DECK_EPEER,
            DeckError::Transport(_) => DECK_ETRANSPORT,
            DeckError::Timeout(_) => DECK_ETIMEDOUT,
        }
    }
}

/// What a C code means, for `deck_strerror`.
pub fn describe(code: c_int) -> &'static std::ffi::CStr {
    use code::*;
    match code {
        0 => c"success",
        DECK_EINVAL => c"invalid argument",
        DECK_ENOINIT => c"DECK is not initialized (call deck_init first)",
        DECK_EINIT => c"DECK could not start (deck_last_error says why)",
        DECK_EMSGFULL => c"packing past the message's size",
        DECK_EMSGSHORT => c"unpacking past the message's data",
        DECK_EMSGSIZE => c"the next message is larger than the receiving message (its size is in msg->needed); it stays in the mailbox",
        DECK_EDESTROYED => c"the mailbox was destroyed",
        DECK_ENOTOWNER => c"only the mailbox's owner may retrieve from it (this is a clone)",
        DECK_EEXIST => c"a mailbox of this name exists already",
        DECK_ENOENT => c"no mailbox of this name was created in time",
        DECK_EPEER => c"the node of the mailbox or of its name failed",
        DECK_ETRANSPORT => c"the transport failed",
        DECK_ETIMEDOUT => c"timed out",
        _ => c"unknown DECK error code",
    }
}
