//! Why a connection ended, as the application sees it.

/// The reason a connection failed. Pending sends on it fail with the same reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectionError {
    /// The peer never answered the handshake.
    #[error("peer does not answer: no reply to the connection request after {0} attempts")]
    ConnectTimeout(u32),
    /// The peer never answered the handshake while an authentication key was
    /// configured: it may be down, or use another key or none (it drops our
    /// frames without answering, and counts them).
    #[error(
        "peer does not answer: no reply to {0} authenticated connection requests \
         (is it down, or does it use another authentication key, or none?)"
    )]
    AuthConnectTimeout(u32),
    /// Nobody listens on that port at the peer.
    #[error("connection refused: nothing listens on port {0} at the peer")]
    Refused(u16),
    /// Frames went unacknowledged for the retry bound.
    #[error("peer does not answer: {0} retransmission timeouts in a row")]
    RetransmitLimit(u32),
    /// Nothing was heard from the peer for the idle timeout (keepalives included).
    #[error("peer went silent: nothing heard for {0:?}")]
    IdleTimeout(std::time::Duration),
    /// The peer has no such connection (it restarted, or closed it).
    #[error("connection reset by peer")]
    Reset,
    /// The peer opened a new connection from the same address with a new
    /// cookie: the process we talked to restarted.
    #[error("peer restarted (new connection cookie)")]
    PeerRestarted,
    /// The peer closed the connection while our messages were still unacknowledged.
    #[error("peer closed the connection with {0} message(s) of ours unacknowledged")]
    PeerClosed(usize),
    /// The local application aborted the connection.
    #[error("connection aborted locally")]
    Aborted,
    /// The peer sent something the protocol forbids.
    #[error("protocol violation by peer: {0}")]
    ProtocolViolation(&'static str),
}
