//! BMI's errors: a Rust enum for the Rust API and the negative errno-style
//! codes of the C API (`BMI_strerror` says each in words; `BMI_last_error`
//! gives the last failure's details on the calling thread).

use std::os::raw::c_int;

/// Why a BMI call or operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BmiError {
    /// A null pointer, a negative size, an unknown context or operation, a
    /// list whose sizes do not add up...
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// BMI is not initialized (call `BMI_initialize` first), or finalized.
    #[error("BMI is not initialized: call BMI_initialize first")]
    NotInitialized,
    /// `BMI_initialize` was called twice without `BMI_finalize`.
    #[error("BMI is initialized already: call BMI_finalize first")]
    AlreadyInitialized,
    /// An address string that does not parse.
    #[error("malformed address {addr:?}: {reason}")]
    BadAddress {
        /// The string.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A method this library does not have, or one not in the method list
    /// given to `BMI_initialize`.
    #[error("unknown method {0:?}: expected bmi_llc or bmi_tcp (and one given to BMI_initialize)")]
    UnknownMethod(String),
    /// An address handle never returned by a lookup or an unexpected
    /// message, or dropped since.
    #[error("unknown address {0}: not from BMI_addr_lookup or BMI_testunexpected, or dropped")]
    UnknownAddress(i64),
    /// An unexpected message above the limit (`BMI_GET_UNEXP_SIZE`).
    #[error("unexpected message of {len} bytes exceeds the limit of {limit}")]
    UnexpectedTooLong {
        /// The message's length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The message is longer than the posted receive; it is consumed.
    #[error("message of {len} bytes is longer than the receive buffer of {expected}")]
    Truncated {
        /// The message's length.
        len: u64,
        /// The receive's expected size.
        expected: u64,
    },
    /// The operation was cancelled (`BMI_cancel`, a closed context or a
    /// dropped address).
    #[error("operation cancelled")]
    Cancelled,
    /// The peer closed its side (it finalized).
    #[error("the peer {0} closed its end")]
    PeerClosed(String),
    /// The peer failed: it stopped answering, reset, or was never there.
    #[error("the peer {peer} failed: {}", cause.without_peer())]
    PeerFailed {
        /// The peer's address.
        peer: String,
        /// What the message layer reported: why the connection failed.
        cause: msg_layer::Error,
    },
    /// The method could not be opened (interface, privilege, port in use...).
    #[error("method {method} could not start: {reason}")]
    Setup {
        /// The method.
        method: String,
        /// Why.
        reason: String,
    },
    /// The transport under a method failed as a whole.
    #[error("transport failed: {0}")]
    Transport(String),
    /// A known PVFS option this library does not implement.
    #[error("option {0} is not supported")]
    Unsupported(c_int),
    /// The job's PMIx launcher could not tell the servers' addresses
    /// ([`crate::Bmi::initialize_in_job`]).
    #[error("PMIx: {0}")]
    Pmix(#[from] pmix_boot::PmixError),
}

impl app_runtime::cabi::Code for BmiError {
    fn code(&self) -> i32 {
        BmiError::code(self)
    }
}

impl BmiError {
    /// The negative errno-style code the C API returns for this error.
    pub fn code(&self) -> c_int {
        -match self {
            BmiError::Invalid(_) | BmiError::UnknownAddress(_) => libc::EINVAL,
            BmiError::NotInitialized => libc::ENXIO,
            BmiError::AlreadyInitialized => libc::EALREADY,
            BmiError::BadAddress { .. } => libc::EADDRNOTAVAIL,
            BmiError::UnknownMethod(_) => libc::EPROTONOSUPPORT,
            BmiError::UnexpectedTooLong { .. } | BmiError::Truncated { .. } => libc::EMSGSIZE,
            BmiError::Cancelled => libc::ECANCELED,
            BmiError::PeerClosed(_) => libc::EPIPE,
            BmiError::PeerFailed { .. } => libc::ECONNRESET,
            BmiError::Setup { .. } => libc::ENODEV,
            BmiError::Transport(_) | BmiError::Pmix(_) => libc::EIO,
            BmiError::Unsupported(_) => libc::ENOSYS,
        }
    }
}

/// What a code returned by the C API means, in words (`BMI_strerror`).
pub fn describe(code: c_int) -> &'static std::ffi::CStr {
    match -code {
        0 => c"success",
        libc::EINVAL => c"invalid argument, or an unknown address, context or operation",
        libc::ENXIO => c"BMI is not initialized (call BMI_initialize first)",
        libc::EALREADY => c"BMI is initialized already (call BMI_finalize first)",
        libc::EADDRNOTAVAIL => {
            c"malformed address (a peer is [MAC]:PORT or HOST:PORT; a listen address llc://IFACE?port=PORT or tcp://HOST:PORT)"
        }
        libc::EPROTONOSUPPORT => {
            c"unknown method (expected bmi_llc or bmi_tcp, among those given to BMI_initialize)"
        }
        libc::EMSGSIZE => {
            c"message too long (an unexpected message above the limit, or a message longer than the receive buffer)"
        }
        libc::ECANCELED => c"operation cancelled",
        libc::EPIPE => c"the peer closed its end",
        libc::ECONNRESET => c"the peer failed (stopped answering, reset, or was never there)",
        libc::ENODEV => c"a method could not start (interface, privilege or port)",
        libc::EIO => c"the transport under a method failed",
        libc::ENOSYS => c"option not supported",
        libc::ENOMEM => c"out of memory",
        _ => c"unknown BMI error code",
    }
}
