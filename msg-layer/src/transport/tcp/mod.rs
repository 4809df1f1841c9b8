//! Kernel TCP as a [`Transport`](super::Transport), for comparison with the
//! LLC stack under the same message layer.
//!
//! Two implementations with the same semantics and shared framing and
//! bookkeeping (this module and `framing`):
//! - [`TcpUringTransport`] (`tcp/io_uring`): sends, receives, accepts and
//!   connect completions go through one io_uring; `progress` submits and
//!   reaps without waiting; `prepare_wait` returns the ring's descriptor,
//!   which polls readable when completions are pending.
//! - [`TcpSocketTransport`] (`tcp/socket`): non-blocking sockets, `sendmsg`
//!   and `recv`, level-triggered epoll; `prepare_wait` returns the epoll
//!   descriptor.
//!
//! Both listen on one socket and open one connection per peer. Every
//! connection gets `TCP_NODELAY`, keepalive probes and `TCP_USER_TIMEOUT`
//! from [`TcpConfig::idle_timeout`] (so a peer host that vanishes is noticed
//! like the LLC stack's idle timeout would), and `SO_BUSY_POLL` when
//! [`TcpConfig::busy_poll`] asks for it.
//!
//! **Busy polling.** `SO_BUSY_POLL` lets a receive on the socket spin in the
//! driver's NAPI poll loop instead of waiting for the softirq. Setting it
//! needs CAP_NET_ADMIN above `net.core.busy_read` (the failure is recorded
//! in [`TcpUringTransport::notes`] and the connection works without). On a
//! veth pair it is accepted but has nothing to spin on: veth has a NAPI
//! context only while an XDP program is attached or GRO is enabled on it, so
//! received packets carry no NAPI id (`SO_INCOMING_NAPI_ID` reads 0 here)
//! and the kernel skips the busy loop. Low latency here comes from the
//! caller busy-polling `progress` instead. io_uring's own NAPI busy polling
//! (`IORING_REGISTER_NAPI`) has the same precondition and is not used.
//!
//! **Framing**: each message is a 4-byte little-endian length, then
//! `head ++ body`.
//!
//! **Closing**: [`Transport::close`](super::Transport::close) sends what is
//! queued, then shuts the write side; the peer reports `Closed(_, None)` when
//! it reads the end of the stream with nothing pending and closes too, upon
//! which the closing side reports `Closed(_, None)` as well. An end of stream
//! in the middle of a message, or while our messages are still queued, and
//! any socket error (reset, refused, timed out) give `Closed(_, Some(..))`.
//!
//! **Namespaces**: a socket belongs to the network namespace of the thread
//! that creates it. `bind` creates the listener and `connect` creates each
//! outgoing socket, so call them on a thread in the namespace the endpoint
//! belongs to; everything else may run on any thread.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{ConnId, FailureCause, SendError, TransportError, TransportEvent};
use crate::addr::Addr;
use framing::{RecvState, SendQueue, PREFIX_LEN};

mod framing;
mod socket;
#[allow(unsafe_code)]
mod sys;
#[allow(unsafe_code)]
mod uring;

/// Longest bundle of small messages handed as one message: within one
/// segment of a jumbo-frame link, and far below the socket buffer.
const TCP_BUNDLE_LEN: usize = 8192;

pub use socket::TcpSocketTransport;
pub use uring::TcpUringTransport;

/// Tunables of both TCP transports.
#[derive(Clone, Debug)]
pub struct TcpConfig {
    /// Bytes queued but not yet taken by the kernel per connection above
    /// which `send` returns [`SendError::WouldBlock`] (a message is always
    /// accepted when nothing is queued). Same default as the LLC stack's
    /// send buffer.
    pub send_buffer_bytes: usize,
    /// Receive buffer per connection. Messages up to
    /// [`TcpConfig::direct_recv_threshold`] are cut out of it; it is raised
    /// to hold at least one such message.
    pub recv_buffer_bytes: usize,
    /// A message longer than this that has not arrived whole gets its own
    /// buffer of the exact size, and the rest of it is received straight
    /// into that buffer.
    pub direct_recv_threshold: usize,
    /// Largest message, head and body together (at most `u32::MAX`).
    pub max_message_len: usize,
    /// `SO_BUSY_POLL` on every connection (see the module documentation for
    /// what it does on veth); `None` leaves the system default.
    pub busy_poll: Option<Duration>,
    /// A connection attempt fails after this long.
    pub connect_timeout: Duration,
    /// Keepalive probes start after this much silence and the connection
    /// fails after about this much more (`TCP_KEEPIDLE`, `TCP_KEEPINTVL`,
    /// `TCP_KEEPCNT`), and unacknowledged data fails it after this long
    /// (`TCP_USER_TIMEOUT`). `None` keeps the kernel's defaults (hours).
    pub idle_timeout: Option<Duration>,
    /// Submission queue entries of the io_uring transport's ring (the
    /// completion queue has twice as many).
    pub ring_entries: u32,
    /// Set the io_uring transport's ring up with `COOP_TASKRUN` and
    /// `TASKRUN_FLAG`: completions wait for the submitting thread's next
    /// `progress` (or other kernel entry) instead of interrupting it. Faster
    /// when one thread busy-polls (8-byte one-way 9-12 µs instead of 19-32 µs
    /// here), but wrong when another thread (a message-layer progress thread)
    /// sleeps on the ring while the submitter computes: the completion then
    /// waits for the submitter (measured: 1 MiB overlap went from 0% to over
    /// 300% of the transfer time in wait). Off by default; benchmarks that
    /// drive the transport from one thread turn it on.
    pub uring_coop_taskrun: bool,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            send_buffer_bytes: 64 << 20,
            recv_buffer_bytes: 256 << 10,
            direct_recv_threshold: 64 << 10,
            max_message_len: 1 << 30,
            busy_poll: Some(Duration::from_micros(50)),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(10)),
            ring_entries: 256,
            uring_coop_taskrun: false,
        }
    }
}

impl TcpConfig {
    fn check(&self) -> Result<(), TransportError> {
        if self.max_message_len > u32::MAX as usize {
            return Err(TransportError::Setup(format!(
                "max_message_len {} does not fit the 32-bit length prefix (at most {})",
                self.max_message_len,
                u32::MAX
            )));
        }
        if self.ring_entries == 0 {
            return Err(TransportError::Setup(
                "ring_entries must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// The listening socket, non-blocking, with errors a user can act on.
fn listen(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), TransportError> {
    let fail = |e: io::Error| {
        let why = match e.kind() {
            io::ErrorKind::AddrInUse => {
                "the address is in use (another endpoint listens there?)".to_string()
            }
            io::ErrorKind::AddrNotAvailable => {
                return TransportError::Address {
                    addr: Addr::Tcp(addr).to_string(),
                    reason: "no interface in this network namespace has that IP address".into(),
                }
            }
            io::ErrorKind::PermissionDenied => {
                format!("permission denied (ports below 1024 need CAP_NET_BIND_SERVICE): {e}")
            }
            _ => e.to_string(),
        };
        TransportError::Setup(format!("cannot listen on tcp://{addr}: {why}"))
    };
    let listener = TcpListener::bind(addr).map_err(fail)?;
    listener.set_nonblocking(true).map_err(fail)?;
    let local = listener.local_addr().map_err(fail)?;
    Ok((listener, local))
}

/// Socket options every connection gets. Failures of the optional ones
/// (busy polling) are returned as notes, not errors.
fn configure(stream: &TcpStream, cfg: &TcpConfig) -> io::Result<Option<String>> {
    stream.set_nodelay(true)?;
    if let Some(idle) = cfg.idle_timeout {
        let secs = idle.as_secs().clamp(1, i32::MAX as u64 / 1000) as libc::c_int;
        let probes = 3;
        let interval = (secs / probes).max(1);
        sys::set_int_opt(stream, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
        sys::set_int_opt(stream, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs)?;
        sys::set_int_opt(stream, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, interval)?;
        sys::set_int_opt(stream, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, probes)?;
        sys::set_int_opt(
            stream,
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            secs * 1000,
        )?;
    }
    if let Some(bp) = cfg.busy_poll {
        let us = bp.as_micros().min(i32::MAX as u128) as libc::c_int;
        if let Err(e) = sys::set_int_opt(stream, libc::SOL_SOCKET, libc::SO_BUSY_POLL, us) {
            return Ok(Some(format!(
                "SO_BUSY_POLL {us} µs refused ({e}); running without"
            )));
        }
    }
    Ok(None)
}

/// The connection's NAPI id as the kernel last saw it (0: none, busy polling
/// inert), for reports.
fn incoming_napi_id(stream: &TcpStream) -> Option<u32> {
    sys::get_int_opt(stream, libc::SOL_SOCKET, libc::SO_INCOMING_NAPI_ID)
        .ok()
        .map(|v| v as u32)
}

fn peer_of(to: &Addr) -> Result<SocketAddr, TransportError> {
    let bad = |reason: &str| TransportError::Address {
        addr: to.to_string(),
        reason: reason.into(),
    };
    match to {
        Addr::Tcp(a) if a.ip().is_unspecified() || a.port() == 0 => {
            Err(bad("a peer address needs a specific IP and a port"))
        }
        Addr::Tcp(a) => Ok(*a),
        Addr::Llc(_) => Err(bad("a TCP endpoint cannot reach an LLC address")),
    }
}

fn conn_error(what: &str, peer: SocketAddr, e: &io::Error) -> FailureCause {
    FailureCause::io(format!("{what} {peer}"), e)
}

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Outbound, handshake under way.
    Connecting,
    /// Up; sends flow.
    Open,
    /// We sent everything and shut our write side; waiting for the peer's
    /// end of stream.
    ShutWr,
    /// `Closed` was reported; the transport tears the socket down.
    Done,
}

/// What both transports keep per connection.
#[derive(Debug)]
struct ConnCore {
    id: ConnId,
    peer: SocketAddr,
    phase: Phase,
    /// `close` was called: no more sends; shut down once the queue drains.
    closing: bool,
    sendq: SendQueue,
    recv: RecvState,
    connect_deadline: Option<Instant>,
}

impl ConnCore {
    fn new(id: ConnId, peer: SocketAddr, phase: Phase, cfg: &TcpConfig) -> Self {
        ConnCore {
            id,
            peer,
            phase,
            closing: false,
            sendq: SendQueue::default(),
            recv: RecvState::new(
                cfg.recv_buffer_bytes,
                cfg.direct_recv_threshold,
                cfg.max_message_len,
            ),
            connect_deadline: (phase == Phase::Connecting)
                .then(|| Instant::now() + cfg.connect_timeout),
        }
    }

    /// Queue `head ++ body` (the caller then starts sending if it can).
    fn enqueue(&mut self, head: &[u8], body: Bytes, cfg: &TcpConfig) -> Result<(), SendError> {
        let len = head.len() + body.len();
        if len > cfg.max_message_len {
            return Err(SendError::TooLong {
                len,
                max: cfg.max_message_len,
            });
        }
        if self.closing || matches!(self.phase, Phase::ShutWr | Phase::Done) {
            return Err(SendError::Closed);
        }
        let queued = self.sendq.bytes();
        if queued > 0 && queued + PREFIX_LEN + len > cfg.send_buffer_bytes {
            return Err(SendError::WouldBlock);
        }
        self.sendq.push(head, body);
        Ok(())
    }

    /// The handshake completed.
    fn connected(&mut self, events: &mut Vec<TransportEvent>) {
        self.phase = Phase::Open;
        self.connect_deadline = None;
        tracing::debug!(conn = self.id, peer = %self.peer, "connected");
        events.push(TransportEvent::Connected(self.id));
    }

    /// `n` bytes were received where `recv.spare()` pointed.
    fn received(&mut self, n: usize, events: &mut Vec<TransportEvent>) -> Result<(), FailureCause> {
        let id = self.id;
        self.recv
            .commit(n, &mut |m| events.push(TransportEvent::Message(id, m)))
            .map_err(|e| FailureCause::Protocol {
                peer: self.peer.to_string(),
                what: e.0.to_string(),
            })
    }

    /// The peer ended its stream: how the connection ends.
    fn eof_reason(&self) -> Option<FailureCause> {
        if !self.recv.at_boundary() {
            return Some(FailureCause::ClosedEarly {
                peer: self.peer.to_string(),
                what: format!(
                    "in the middle of a message ({} received)",
                    self.recv.pending()
                ),
            });
        }
        if self.phase == Phase::Open && !self.sendq.is_empty() {
            return Some(FailureCause::ClosedEarly {
                peer: self.peer.to_string(),
                what: format!("with {} bytes of ours unsent", self.sendq.bytes()),
            });
        }
        None
    }

    /// Report the end (once) and mark the connection for teardown.
    fn finish(&mut self, reason: Option<FailureCause>, events: &mut Vec<TransportEvent>) {
        if self.phase == Phase::Done {
            return;
        }
        match &reason {
            None => tracing::debug!(conn = self.id, peer = %self.peer, "closed"),
            Some(e) => tracing::debug!(conn = self.id, peer = %self.peer, "failed: {e}"),
        }
        self.phase = Phase::Done;
        events.push(TransportEvent::Closed(self.id, reason));
    }

    /// Should the write side be shut now?
    fn wants_shutdown(&self) -> bool {
        self.closing && self.phase == Phase::Open && self.sendq.is_empty()
    }

    /// The connect deadline passed?
    fn connect_expired(&self, now: Instant) -> bool {
        self.phase == Phase::Connecting && self.connect_deadline.is_some_and(|d| now >= d)
    }

    fn connect_timeout_error(&self, cfg: &TcpConfig) -> FailureCause {
        FailureCause::ConnectTimeout {
            peer: self.peer.to_string(),
            after: cfg.connect_timeout,
        }
    }
}

/// Ids, and the earliest connect deadline among `conns`.
fn earliest_deadline<'a>(cores: impl Iterator<Item = &'a ConnCore>) -> Option<Instant> {
    cores
        .filter(|c| c.phase == Phase::Connecting)
        .filter_map(|c| c.connect_deadline)
        .min()
}

/// Bytes queued on open connections that the kernel has not taken yet.
fn unsent_bytes<'a>(cores: impl Iterator<Item = &'a ConnCore>) -> usize {
    cores
        .filter(|c| c.phase != Phase::Done)
        .map(|c| c.sendq.bytes())
        .sum()
}

/// What a transport could not set up as asked, each said once (and logged).
#[derive(Debug, Default)]
struct Notes(Vec<String>);

impl Notes {
    fn add(&mut self, n: Option<String>) {
        if let Some(n) = n {
            if !self.0.contains(&n) {
                tracing::info!("{n}");
                self.0.push(n);
            }
        }
    }
}

/// Hands out connection ids, never reused.
#[derive(Debug)]
struct Ids(ConnId);

impl Ids {
    fn next<T>(&mut self, live: &HashMap<ConnId, T>) -> ConnId {
        loop {
            let id = self.0;
            self.0 = self.0.wrapping_add(1);
            if !live.contains_key(&id) {
                return id;
            }
        }
    }
}
