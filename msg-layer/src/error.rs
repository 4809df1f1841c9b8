//! Why a request or a call failed.

use crate::matching::PeerId;
use crate::transport::{FailureCause, TransportError};

/// How a peer ended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PeerEnd {
    /// It closed its connection in order (it finished, e.g. MPI_Finalize).
    #[error("the peer closed the connection")]
    Closed,
    /// Its connection failed. (Shared: every request that depended on the
    /// peer fails with it, and it keeps [`Error`] small.)
    #[error(transparent)]
    Failed(std::sync::Arc<FailureCause>),
}

/// A request's or a call's failure, in words a user can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The message is longer than the posted buffer. The message is
    /// consumed (MPI_ERR_TRUNCATE); other messages are not affected.
    #[error("message of {message_len} bytes truncated: the receive buffer holds {buffer_len}")]
    Truncated {
        /// Length the sender sent.
        message_len: usize,
        /// Length of the posted buffer.
        buffer_len: usize,
    },
    /// The receive was cancelled before it matched.
    #[error("request cancelled")]
    Cancelled,
    /// The peer failed or closed; what depended on it fails with this.
    #[error("peer {peer} failed: {end}")]
    PeerFailed {
        /// The peer.
        peer: PeerId,
        /// How it ended: closed in order, or failed with a cause.
        end: PeerEnd,
    },
    /// No such peer.
    #[error("no peer {0}")]
    UnknownPeer(PeerId),
    /// The request is not known (completed and taken already, or never made).
    #[error("unknown request {0}")]
    UnknownRequest(u64),
    /// A wait reached its deadline; the request is still pending.
    #[error("timed out waiting")]
    Timeout,
    /// A one-sided access the target refused (unknown region, out of bounds).
    #[error("remote memory access refused: {0}")]
    RmaRefused(String),
    /// The message is longer than the transport carries.
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The transport failed as a whole.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The configuration cannot work.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
}

impl Error {
    /// What went wrong, for a caller that names the peer its own way (a
    /// DECK node, a BMI address): a peer's end without "peer N failed",
    /// anything else as it displays.
    pub fn without_peer(&self) -> String {
        match self {
            Error::PeerFailed { end, .. } => end.to_string(),
            other => other.to_string(),
        }
    }
}
