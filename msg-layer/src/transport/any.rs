//! The transport a [`super::TransportSpec`] opens: one type for every
//! transport, so one endpoint type serves programs that choose at run time.
//! Each call is a `match` (one predictable branch), not a virtual call.

use std::os::fd::RawFd;
use std::time::Duration;

use bytes::Bytes;

use super::llc::{LlcLinkTransport, LlcTransport};
use super::spec::TransportSpec;
use super::tcp::{TcpSocketTransport, TcpUringTransport};
use super::{ConnId, Placement, SendError, Transport, TransportError, TransportEvent};
use crate::addr::Addr;

/// An open transport of any kind.
// One per endpoint, kept in place by the engine: boxing the large variant
// would save memory nobody misses and add a pointer chase to every call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum AnyTransport {
    /// `llc://`: the LLC stack on an interface.
    Llc(LlcLinkTransport),
    /// `tcp://`: kernel TCP over sockets and epoll.
    Tcp(TcpSocketTransport),
    /// `tcp-uring://`: kernel TCP over io_uring.
    TcpUring(TcpUringTransport),
}

/// `$body` with `$t` bound to whichever transport `$self` holds.
macro_rules! each {
    ($self:expr, $t:ident => $body:expr) => {
        match $self {
            AnyTransport::Llc($t) => $body,
            AnyTransport::Tcp($t) => $body,
            AnyTransport::TcpUring($t) => $body,
        }
    };
}

impl AnyTransport {
    /// What opening it fell back from or could not obtain, and why (AF_XDP
    /// unavailable, zero-copy refused, a socket option refused...), for
    /// the user's log.
    pub fn notes(&self) -> &[String] {
        each!(self, t => t.notes())
    }

    /// The LLC transport, for what only it has (its totals, its stack).
    pub fn as_llc(&self) -> Option<&LlcLinkTransport> {
        match self {
            AnyTransport::Llc(t) => Some(t),
            _ => None,
        }
    }

    /// The LLC transport, mutably.
    pub fn as_llc_mut(&mut self) -> Option<&mut LlcLinkTransport> {
        match self {
            AnyTransport::Llc(t) => Some(t),
            _ => None,
        }
    }
}

impl Transport for AnyTransport {
    fn name(&self) -> String {
        each!(self, t => t.name())
    }
    #[inline]
    fn local_addr(&self) -> Addr {
        each!(self, t => t.local_addr())
    }
    #[inline]
    fn max_message_len(&self) -> usize {
        each!(self, t => t.max_message_len())
    }
    #[inline]
    fn transmit_queued(&mut self) -> Result<bool, TransportError> {
        each!(self, t => t.transmit_queued())
    }
    #[inline]
    fn bundle_len(&self) -> usize {
        each!(self, t => t.bundle_len())
    }
    fn frame_payload(&self) -> usize {
        each!(self, t => t.frame_payload())
    }
    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError> {
        each!(self, t => t.connect(to))
    }
    #[inline]
    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        each!(self, t => t.send(conn, head, body))
    }
    #[inline]
    fn send_awaited(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        each!(self, t => t.send_awaited(conn, head, body))
    }
    fn close(&mut self, conn: ConnId) {
        each!(self, t => t.close(conn))
    }
    #[inline]
    fn recycle(&mut self, buf: Vec<u8>) {
        each!(self, t => t.recycle(buf))
    }
    #[inline]
    fn progress(&mut self, events: &mut Vec<TransportEvent>) -> Result<bool, TransportError> {
        each!(self, t => t.progress(events))
    }
    fn progress_each(
        &mut self,
        scratch: &mut Vec<TransportEvent>,
        each: impl FnMut(TransportEvent),
    ) -> Result<bool, TransportError> {
        each!(self, t => t.progress_each(scratch, each))
    }
    fn counters(&self) -> Vec<(String, u64)> {
        each!(self, t => t.counters())
    }
    fn set_placement(&mut self, placement: Box<dyn Placement>) {
        each!(self, t => t.set_placement(placement))
    }
    fn set_auth_key(&mut self, key: super::llc::AuthKey) -> Result<(), TransportError> {
        each!(self, t => t.set_auth_key(key))
    }
    fn auth_fingerprint(&self) -> Option<String> {
        each!(self, t => t.auth_fingerprint())
    }
    fn peers_accept(&self) -> bool {
        each!(self, t => t.peers_accept())
    }
    #[inline]
    fn flushed(&self) -> bool {
        each!(self, t => t.flushed())
    }
    #[inline]
    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        each!(self, t => t.prepare_wait(fds))
    }
    fn probe(&mut self, to: &Addr) -> Option<bool> {
        each!(self, t => t.probe(to))
    }
    fn probe_answered(&self, to: &Addr) -> bool {
        each!(self, t => t.probe_answered(to))
    }
}

impl From<LlcLinkTransport> for AnyTransport {
    fn from(t: LlcLinkTransport) -> Self {
        AnyTransport::Llc(t)
    }
}

impl From<TcpSocketTransport> for AnyTransport {
    fn from(t: TcpSocketTransport) -> Self {
        AnyTransport::Tcp(t)
    }
}

impl From<TcpUringTransport> for AnyTransport {
    fn from(t: TcpUringTransport) -> Self {
        AnyTransport::TcpUring(t)
    }
}

impl TransportSpec {
    /// Open the transport. What an `auto` choice fell back from, and why,
    /// is in [`AnyTransport::notes`].
    pub fn open(&self) -> Result<AnyTransport, TransportError> {
        Ok(match self {
            TransportSpec::Llc(s) => AnyTransport::Llc(LlcTransport::open_spec(s)?),
            TransportSpec::Tcp(s) => {
                AnyTransport::Tcp(TcpSocketTransport::bind(s.addr, s.config.clone())?)
            }
            TransportSpec::TcpUring(s) => {
                AnyTransport::TcpUring(TcpUringTransport::bind(s.addr, s.config.clone())?)
            }
        })
    }
}
