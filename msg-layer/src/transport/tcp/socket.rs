//! TCP over non-blocking sockets: see [`TcpSocketTransport`].

use std::collections::HashMap;
use std::io::{self, IoSlice, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::framing::MAX_IOVECS;
use super::sys::{self, Epoll};
use super::{
    configure, conn_error, earliest_deadline, incoming_napi_id, listen, peer_of, unsent_bytes,
    ConnCore, Ids, Notes, Phase, TcpConfig, TCP_BUNDLE_LEN,
};
use crate::addr::Addr;
use crate::transport::{
    ConnId, FailureCause, SendError, Transport, TransportError, TransportEvent,
};

/// The listener's epoll token (connections use their id).
const LISTENER: u64 = u64::MAX;

/// Bytes read from one connection per `progress` before moving on to the
/// others (level-triggered epoll brings us back).
const READ_BUDGET: usize = 4 << 20;

/// TCP over plain non-blocking sockets and level-triggered epoll (see also
/// the [TCP transports' documentation](super)).
///
/// `send` writes at once when the connection's queue was empty (one
/// `sendmsg` gathering header and body); what the kernel does not take waits
/// for `EPOLLOUT`. `progress` asks epoll (without waiting) which sockets are
/// ready, accepts, finishes connects, reads and writes.
#[derive(Debug)]
pub struct TcpSocketTransport {
    cfg: TcpConfig,
    listener: TcpListener,
    local: SocketAddr,
    epoll: Epoll,
    conns: HashMap<ConnId, Conn>,
    ids: Ids,
    ready: Vec<libc::epoll_event>,
    /// Events that arose outside `progress` (failures seen by `send`).
    pending: Vec<TransportEvent>,
    notes: Notes,
}

#[derive(Debug)]
struct Conn {
    core: ConnCore,
    stream: TcpStream,
    /// `EPOLLOUT` is in the interest set.
    want_out: bool,
}

const IN: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
const OUT: u32 = libc::EPOLLOUT as u32;

impl TcpSocketTransport {
    /// Listen on `addr` (port 0: any free port, which
    /// [`Transport::local_addr`] then reports).
    pub fn bind(addr: SocketAddr, cfg: TcpConfig) -> Result<Self, TransportError> {
        cfg.check()?;
        let (listener, local) = listen(addr)?;
        let epoll =
            Epoll::new().map_err(|e| TransportError::io("creating an epoll instance", &e))?;
        epoll
            .add(listener.as_raw_fd(), IN, LISTENER)
            .map_err(|e| TransportError::io("watching the listening socket", &e))?;
        tracing::debug!(%local, "tcp/socket listening");
        Ok(TcpSocketTransport {
            cfg,
            listener,
            local,
            epoll,
            conns: HashMap::new(),
            ids: Ids(1),
            ready: Vec::with_capacity(256),
            pending: Vec::new(),
            notes: Notes::default(),
        })
    }

    /// What the transport could not set up as asked (busy polling refused).
    pub fn notes(&self) -> &[String] {
        &self.notes.0
    }

    /// Bytes queued on open connections that the kernel has not taken yet
    /// (0: everything sent so far is in the kernel's hands, which delivers
    /// it even if this process exits).
    pub fn unsent_bytes(&self) -> usize {
        unsent_bytes(self.conns.values().map(|c| &c.core))
    }

    /// The NAPI id the kernel recorded for `conn`'s last received packet
    /// (0: none, so `SO_BUSY_POLL` has nothing to poll).
    pub fn incoming_napi_id(&self, conn: ConnId) -> Option<u32> {
        self.conns
            .get(&conn)
            .and_then(|c| incoming_napi_id(&c.stream))
    }

    fn add_conn(&mut self, core: ConnCore, stream: TcpStream, want_out: bool) -> io::Result<()> {
        let mut ev = IN;
        if want_out {
            ev |= OUT;
        }
        self.epoll.add(stream.as_raw_fd(), ev, core.id as u64)?;
        self.conns.insert(
            core.id,
            Conn {
                core,
                stream,
                want_out,
            },
        );
        Ok(())
    }

    fn accept_all(&mut self, events: &mut Vec<TransportEvent>) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let setup = stream
                        .set_nonblocking(true)
                        .and_then(|()| configure(&stream, &self.cfg));
                    match setup {
                        Ok(note) => self.notes.add(note),
                        Err(e) => {
                            tracing::warn!(%peer, "dropping an accepted connection: {e}");
                            continue;
                        }
                    }
                    let id = self.ids.next(&self.conns);
                    let core = ConnCore::new(id, peer, Phase::Open, &self.cfg);
                    if let Err(e) = self.add_conn(core, stream, false) {
                        tracing::warn!(%peer, "dropping an accepted connection: {e}");
                        continue;
                    }
                    tracing::debug!(conn = id, %peer, "accepted");
                    events.push(TransportEvent::Accepted(id));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ECONNABORTED and the like concern one connection; EMFILE
                // and ENOBUFS pass. Either way the listener stays.
                Err(e) => {
                    tracing::warn!("accept on tcp://{}: {e}", self.local);
                    return;
                }
            }
        }
    }

    /// Handle readiness `ev` of connection `id`.
    fn ready(&mut self, id: ConnId, ev: u32, events: &mut Vec<TransportEvent>) -> bool {
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        let mut moved = false;
        if c.core.phase == Phase::Connecting {
            if ev & (OUT | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) == 0 {
                return false;
            }
            moved = true;
            match c.stream.take_error() {
                Ok(None) => c.core.connected(events),
                Ok(Some(e)) | Err(e) => {
                    let err = conn_error("connecting to", c.core.peer, &e);
                    c.core.finish(Some(err), events);
                    return true;
                }
            }
        }
        if ev & (IN | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) != 0 {
            moved |= read(c, events);
        }
        if c.core.phase != Phase::Done && (ev & OUT != 0 || !c.core.sendq.is_empty()) {
            moved |= flush(&self.epoll, c, events);
        }
        moved
    }

    fn teardown_done(&mut self) {
        let done: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.core.phase == Phase::Done)
            .map(|(&id, _)| id)
            .collect();
        for id in done {
            if let Some(c) = self.conns.remove(&id) {
                let _ = self.epoll.delete(c.stream.as_raw_fd());
                // Dropping the stream closes it; the peer reads the end.
            }
        }
    }
}

/// Read what `c` has, up to the budget.
fn read(c: &mut Conn, events: &mut Vec<TransportEvent>) -> bool {
    let mut total = 0;
    while c.core.phase != Phase::Done && total < READ_BUDGET {
        let spare = c.core.recv.spare();
        let want = spare.len();
        match c.stream.read(spare) {
            Ok(0) => {
                let reason = c.core.eof_reason();
                c.core.finish(reason, events);
                return true;
            }
            Ok(n) => {
                total += n;
                if let Err(e) = c.core.received(n, events) {
                    c.core.finish(Some(e), events);
                    return true;
                }
                if n < want {
                    // The socket is most likely empty: epoll says when not.
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let err = conn_error("receiving from", c.core.peer, &e);
                c.core.finish(Some(err), events);
                return true;
            }
        }
    }
    total > 0
}

/// Write what `c` has queued until the kernel pushes back; shut the write
/// side when a close was asked and everything left.
fn flush(epoll: &Epoll, c: &mut Conn, events: &mut Vec<TransportEvent>) -> bool {
    if c.core.phase != Phase::Open {
        return false;
    }
    let mut moved = false;
    let mut blocked = false;
    while !c.core.sendq.is_empty() {
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let k = c.core.sendq.io_slices(&mut slices);
        let r = sys::send_vectored(&c.stream, &slices[..k]);
        match r {
            Ok(n) => {
                moved = true;
                c.core.sendq.advance(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                blocked = true;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let err = conn_error("sending to", c.core.peer, &e);
                c.core.finish(Some(err), events);
                return true;
            }
        }
    }
    if blocked != c.want_out {
        let ev = if blocked { IN | OUT } else { IN };
        if let Err(e) = epoll.modify(c.stream.as_raw_fd(), ev, c.core.id as u64) {
            c.core
                .finish(Some(FailureCause::io("updating epoll", &e)), events);
            return true;
        }
        c.want_out = blocked;
    }
    if c.core.wants_shutdown() {
        match c.stream.shutdown(Shutdown::Write) {
            Ok(()) => c.core.phase = Phase::ShutWr,
            Err(e) => {
                let err = conn_error("closing", c.core.peer, &e);
                c.core.finish(Some(err), events);
            }
        }
        moved = true;
    }
    moved
}

impl Transport for TcpSocketTransport {
    fn name(&self) -> String {
        "tcp/socket".into()
    }

    fn local_addr(&self) -> Addr {
        Addr::Tcp(self.local)
    }

    fn max_message_len(&self) -> usize {
        self.cfg.max_message_len
    }

    /// Small messages queued behind each other go in one write.
    fn bundle_len(&self) -> usize {
        TCP_BUNDLE_LEN.min(self.cfg.max_message_len)
    }

    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError> {
        let peer = peer_of(to)?;
        let id = self.ids.next(&self.conns);
        let mut core = ConnCore::new(id, peer, Phase::Connecting, &self.cfg);
        match sys::connect_nonblocking(&peer) {
            Ok((stream, done)) => {
                let note = configure(&stream, &self.cfg)
                    .map_err(|e| TransportError::io("setting socket options", &e))?;
                self.notes.add(note);
                if done {
                    core.connected(&mut self.pending);
                }
                self.add_conn(core, stream, !done)
                    .map_err(|e| TransportError::io("watching a socket", &e))?;
            }
            Err(e) => {
                // Failed at once (no route, no ports left...): report it like
                // a failure found later.
                let err = conn_error("connecting to", peer, &e);
                core.finish(Some(err), &mut self.pending);
            }
        }
        tracing::debug!(conn = id, %peer, "connecting");
        Ok(id)
    }

    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        let c = self.conns.get_mut(&conn).ok_or(SendError::Closed)?;
        let was_empty = c.core.sendq.is_empty();
        c.core.enqueue(head, body, &self.cfg)?;
        if was_empty && !c.want_out {
            flush(&self.epoll, c, &mut self.pending);
        }
        Ok(())
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.core.closing = true;
            flush(&self.epoll, c, &mut self.pending);
        }
    }

    fn progress(&mut self, events: &mut Vec<TransportEvent>) -> Result<bool, TransportError> {
        let mut moved = !self.pending.is_empty();
        events.append(&mut self.pending);
        let mut ready = std::mem::take(&mut self.ready);
        self.epoll
            .poll_now(&mut ready)
            .map_err(|e| TransportError::io("polling sockets", &e))?;
        for ev in &ready {
            let (token, bits) = (ev.u64, ev.events);
            if token == LISTENER {
                let before = events.len();
                self.accept_all(events);
                moved |= events.len() > before;
            } else {
                moved |= self.ready(token as ConnId, bits, events);
            }
        }
        self.ready = ready;
        let now = Instant::now();
        if earliest_deadline(self.conns.values().map(|c| &c.core)).is_some_and(|d| now >= d) {
            for c in self.conns.values_mut() {
                if c.core.connect_expired(now) {
                    let err = c.core.connect_timeout_error(&self.cfg);
                    c.core.finish(Some(err), events);
                    moved = true;
                }
            }
        }
        self.teardown_done();
        Ok(moved)
    }

    fn flushed(&self) -> bool {
        // The kernel delivers what it holds even after this process exits.
        self.unsent_bytes() == 0
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        if !self.pending.is_empty() {
            return Some(Duration::ZERO);
        }
        fds.push(self.epoll.raw_fd());
        earliest_deadline(self.conns.values().map(|c| &c.core))
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}
