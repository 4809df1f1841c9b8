//! The `Transport` trait: reliable, ordered, message-oriented connections to
//! many peers. Everything above it (matching, eager and rendezvous, RMA, the
//! progress engine, tests and benchmarks) runs unchanged on every
//! implementation:
//! - [`llc`]: the LLC stack over AF_XDP or AF_PACKET (or a simulated link);
//! - [`tcp`]: kernel TCP, one connection per peer, `TCP_NODELAY`, over
//!   io_uring or over non-blocking sockets and epoll.
//!
//! [`TransportSpec`] opens any of them from an address-like string such as
//! `llc://eth0?backend=xdp` or `tcp://0.0.0.0:5201`, as an [`AnyTransport`].
//!
//! A transport moves whole messages: what one `send` queues arrives as one
//! [`TransportEvent::Message`], in order, exactly once, or the connection
//! fails with [`TransportEvent::Closed`] carrying the reason. It never drops a
//! message silently. Its own flow control pushes back with
//! [`SendError::WouldBlock`]; the caller keeps the message and retries after
//! the next `progress`.
//!
//! Waiting is split so that a progress thread can sleep without holding the
//! lock that guards the transport: [`Transport::prepare_wait`] names the file
//! descriptors that become readable when `progress` has work and the longest
//! sleep the transport's timers allow; the caller polls them unlocked.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use bytes::Bytes;

use crate::addr::Addr;

mod any;
pub mod floor_work;
pub mod llc;
pub mod placement;
pub mod spec;
pub mod tcp;

pub use any::AnyTransport;
pub use placement::{Placement, SharedSink, Sink};
pub use spec::TransportSpec;

/// Names a connection of one transport. Never reused by that transport.
pub type ConnId = u32;

/// What a transport reports from `progress`.
#[derive(Debug)]
pub enum TransportEvent {
    /// A connection we opened with `connect` is established.
    Connected(ConnId),
    /// A peer opened a connection to us.
    Accepted(ConnId),
    /// A whole message arrived (in order on its connection).
    Message(ConnId, Vec<u8>),
    /// The connection ended: `None` after an orderly close by either side,
    /// `Some(cause)` when it failed. Messages not yet delivered are lost
    /// with it, and the layer above fails what depended on them.
    Closed(ConnId, Option<FailureCause>),
}

/// The LLC stack's reason a reliable connection failed.
pub use llc_stack::proto::ConnectionError;

/// Why a connection failed: a type the layers above match on, displayed in
/// words a user can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FailureCause {
    /// The LLC stack's reliable connection failed (the peer went silent,
    /// refused, reset or restarted...).
    #[error(transparent)]
    Connection(#[from] ConnectionError),
    /// A system call on the connection failed (TCP: refused, reset,
    /// unreachable...).
    #[error("{context}: {message}{}", io_hint(*.kind))]
    Io {
        /// What was being done, with whom.
        context: String,
        /// The system's error kind.
        kind: io::ErrorKind,
        /// The system's error message.
        message: String,
    },
    /// No answer to the connection request in time.
    #[error("connecting to {peer}: no answer within {after:?}")]
    ConnectTimeout {
        /// The peer's address.
        peer: String,
        /// How long we waited.
        after: Duration,
    },
    /// The peer ended its side early: in the middle of a message, or with
    /// ours not yet sent.
    #[error("{peer} closed the connection {what}")]
    ClosedEarly {
        /// The peer's address.
        peer: String,
        /// What was left.
        what: String,
    },
    /// The peer broke the transport's framing.
    #[error("{peer}: protocol violation: {what}")]
    Protocol {
        /// The peer's address.
        peer: String,
        /// What it did.
        what: String,
    },
}

impl FailureCause {
    /// A system call failed while doing `context` (e.g. `connecting to 10.0.0.2:7000`).
    pub fn io(context: impl Into<String>, e: &io::Error) -> Self {
        FailureCause::Io {
            context: context.into(),
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// What to add to an I/O failure so that a user knows what it means.
fn io_hint(kind: io::ErrorKind) -> &'static str {
    match kind {
        io::ErrorKind::ConnectionRefused => " (nobody listens there)",
        io::ErrorKind::TimedOut => " (the peer stopped answering)",
        _ => "",
    }
}

/// Why a send was not queued.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The connection's send buffer is full: retry after `progress`.
    #[error("send buffer full")]
    WouldBlock,
    /// The connection is closed or failed (its `Closed` event says why).
    #[error("connection closed")]
    Closed,
    /// The message is longer than the transport carries.
    #[error("message of {len} bytes exceeds the transport's limit of {max}")]
    TooLong {
        /// Message length.
        len: usize,
        /// The transport's limit.
        max: usize,
    },
}

/// A transport failure, said in words a user can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Opening or using the link or socket failed.
    #[error("{0}")]
    Setup(String),
    /// The address is of another transport, or malformed.
    #[error("cannot reach {addr}: {reason}")]
    Address {
        /// The address given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error while making progress.
    #[error("{context}: {message}")]
    Io {
        /// What the transport was doing.
        context: String,
        /// The system's error message.
        message: String,
    },
}

impl TransportError {
    /// An I/O error with what was being done.
    pub fn io(context: impl Into<String>, e: &io::Error) -> Self {
        TransportError::Io {
            context: context.into(),
            message: e.to_string(),
        }
    }
}

/// A reliable message transport to many peers. See the module documentation
/// for the contract.
pub trait Transport: Send + 'static {
    /// What this is, for reports: e.g. `llc/af_xdp (native, copy)` or `tcp/io_uring`.
    fn name(&self) -> String;

    /// Where peers reach this endpoint.
    fn local_addr(&self) -> Addr;

    /// Largest message `send` accepts (head and body together).
    fn max_message_len(&self) -> usize;

    /// Start opening a connection to `to`. `Connected` (or `Closed` with the
    /// reason) follows from `progress`; `send` may be called at once and the
    /// message goes out when the connection is up.
    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError>;

    /// Queue the message `head ++ body` on `conn`. The transport takes
    /// `body` without copying where it can.
    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError>;

    /// [`Transport::send`] of a packet whose sender waits for the transport
    /// to let go of it (a lent body, released when the peer acknowledged
    /// it): a transport that delays acknowledgements asks the peer for this
    /// one soon.
    fn send_awaited(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        self.send(conn, head, body)
    }

    /// Put on the wire what `send` queued, without receiving: what a post
    /// needs so that its message leaves at once. False when the transport
    /// has no such pass; the caller then makes a whole round of progress.
    fn transmit_queued(&mut self) -> Result<bool, TransportError> {
        Ok(false)
    }

    /// Longest `Bundle` of small packets the message layer hands as one
    /// message (0: none): what one frame or segment carries without being
    /// cut, so that a bundle costs one transport message on the wire too.
    fn bundle_len(&self) -> usize {
        0
    }

    /// Message bytes one frame carries, when the transport cuts messages
    /// into frames of a fixed size (0: it does not, e.g. a byte stream). The
    /// message layer cuts rendezvous data and puts into pieces of whole
    /// frames, so that no piece ends in a short frame of its own.
    fn frame_payload(&self) -> usize {
        0
    }

    /// Close `conn` once everything queued on it is delivered.
    fn close(&mut self, conn: ConnId);

    /// Take back the buffer of a delivered [`TransportEvent::Message`] the
    /// caller is done with, to receive a later message into (optional: the
    /// default frees it).
    fn recycle(&mut self, buf: Vec<u8>) {
        drop(buf);
    }

    /// Receive, run timers and transmit, appending what happened to `events`.
    /// Never blocks. Returns true when anything moved (frames, bytes or
    /// events), which callers use to decide when to stop busy-polling.
    fn progress(&mut self, events: &mut Vec<TransportEvent>) -> Result<bool, TransportError>;

    /// [`Transport::progress`], handing each event to `each` as it is
    /// taken, in order, rather than through a list (what the endpoint
    /// calls: a list filled only to be emptied costs the round trip). The
    /// default fills `scratch` (left empty) and hands its events over.
    fn progress_each(
        &mut self,
        scratch: &mut Vec<TransportEvent>,
        mut each: impl FnMut(TransportEvent),
    ) -> Result<bool, TransportError>
    where
        Self: Sized,
    {
        let moved = self.progress(scratch)?;
        for ev in scratch.drain(..) {
            each(ev);
        }
        Ok(moved)
    }

    /// The transport's own counters (frames, retransmissions, drops by
    /// reason...), named; empty when it keeps none.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }

    /// Let `placement` write incoming messages straight into the layer
    /// above's buffers (see [`placement`]). Transports that
    /// cannot (TCP reads into its own buffers) ignore it, and the layer above
    /// copies.
    fn set_placement(&mut self, placement: Box<dyn Placement>) {
        let _ = placement;
    }

    /// Authenticate this endpoint's frames with `key` from now on: for an
    /// endpoint opened waiting for its job's key
    /// ([`spec::KeySource::Later`]) or with another, before its first
    /// connection. Everything set on the transport before (the placement)
    /// must be set again. Refused once a connection exists, and by
    /// transports that have no frame authentication (TCP).
    fn set_auth_key(&mut self, key: llc::AuthKey) -> Result<(), TransportError> {
        let _ = key;
        Err(TransportError::Setup(format!(
            "{} has no frame authentication: a key applies to LLC endpoints only",
            self.name()
        )))
    }

    /// The public fingerprint of the key frames are authenticated with
    /// ([`llc::AuthKey::fingerprint`]), `None` when they are not (or the
    /// key is still to come); never the key itself.
    fn auth_fingerprint(&self) -> Option<String> {
        None
    }

    /// True when every endpoint of this transport accepts connections (an
    /// LLC endpoint listens on its port; a TCP client may not listen at
    /// all). The layer above then opens the connection to a peer that was
    /// to connect to it, once it has something to send and the peer has
    /// not, instead of waiting for a connection that may never come.
    fn peers_accept(&self) -> bool {
        false
    }

    /// True when everything sent so far has been delivered to the peer
    /// (acknowledged by its transport, or handed to the kernel, which
    /// delivers it even after this process exits) and everything received
    /// has been acknowledged. Callers wait for it before they stop making
    /// progress, so that no peer is left retransmitting.
    fn flushed(&self) -> bool {
        true
    }

    /// Get ready to sleep: push the descriptors whose readability means
    /// `progress` has work, and return the longest sleep the transport's
    /// timers allow (`None`: no limit). `Some(Duration::ZERO)` means work is
    /// ready now. The caller then polls the descriptors, without holding the
    /// transport, and calls `progress` when it wakes.
    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration>;

    /// Start finding out whether `to` can be reached, without connecting:
    /// `Some(answer)` when the transport knows at once, `None` when a probe
    /// went out and [`Transport::probe_answered`] will tell (call `probe`
    /// again to repeat a probe that may have been lost). Transports with no
    /// cheaper test than connecting say `Some(true)` for their own kind of
    /// address.
    fn probe(&mut self, to: &Addr) -> Option<bool> {
        let _ = to;
        Some(true)
    }

    /// Whether `to` answered a probe.
    fn probe_answered(&self, to: &Addr) -> bool {
        let _ = to;
        false
    }
}
