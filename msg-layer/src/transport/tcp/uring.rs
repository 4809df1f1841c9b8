//! TCP over io_uring: see [`TcpUringTransport`].

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bytes::Bytes;
use io_uring::{opcode, squeue, types, IoUring};

use super::sys;
use super::{
    configure, conn_error, earliest_deadline, incoming_napi_id, listen, peer_of, unsent_bytes,
    ConnCore, Ids, Notes, Phase, TcpConfig, TCP_BUNDLE_LEN,
};
use crate::addr::Addr;
use crate::transport::{ConnId, SendError, Transport, TransportError, TransportEvent};

const OP_RECV: u64 = 1;
const OP_SEND: u64 = 2;
const OP_POLL: u64 = 3;
const OP_CANCEL: u64 = 4;
const OP_ACCEPT: u64 = 5;

fn user_data(id: ConnId, op: u64) -> u64 {
    (id as u64) << 8 | op
}

/// How long `Drop` waits for cancelled operations to complete.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// The `msghdr` and iovecs of a connection's send in flight.
struct SendBufs {
    msg: libc::msghdr,
    iov: Vec<libc::iovec>,
}

// SAFETY: the raw pointers only point into buffers owned by the same
// connection (its iovec Vec and its send queue's messages), which move
// between threads together with it; nothing in them is tied to a thread.
unsafe impl Send for SendBufs {}

/// One connection.
struct Conn {
    core: ConnCore,
    stream: TcpStream,
    recv_armed: bool,
    send_armed: bool,
    poll_armed: bool,
    /// Cancellations were submitted for what was in flight at failure.
    cancelled: bool,
    /// Listed in `to_arm`.
    listed: bool,
    out: SendBufs,
}

impl Conn {
    fn in_flight(&self) -> bool {
        self.recv_armed || self.send_armed || self.poll_armed
    }
}

/// TCP over io_uring (see also the [TCP transports' documentation](super)).
///
/// Per connection at most one receive, one send and (while connecting) one
/// poll are in flight. A receive writes into the connection's receive buffer
/// (or a large message's own buffer); a send is a `sendmsg` whose iovecs
/// point at the queued messages' headers and the callers' `Bytes` bodies,
/// so the body is never copied; a partial send is resubmitted for the rest.
/// Connects are non-blocking `connect(2)` calls whose completion a
/// `POLLOUT` poll reports. The listener has one accept in flight.
///
/// `progress` first submits what was prepared since the last call (new
/// sends, re-armed receives) in one `io_uring_enter` (none when there is
/// nothing to submit), then reaps the completion queue without entering the
/// kernel. `prepare_wait` submits too, so nothing is left unsubmitted while
/// the caller sleeps on the ring's descriptor, which polls readable when
/// completions are pending.
///
/// **Memory safety.** The kernel holds pointers into buffers owned by this
/// transport until each operation's completion is reaped: receive buffers,
/// the `msghdr`, iovecs and queued messages of a send. Connection state is
/// boxed (stable address), a connection with operations in flight is never
/// freed (a failed one is shut down, its operations cancelled, and it is
/// dropped once their completions arrived), and its send queue only drops
/// messages after the kernel reported taking them. `Drop` cancels everything
/// and waits (bounded) for the completions; what does not complete in time
/// is leaked rather than freed under the kernel.
///
/// **Threads.** The ring may be driven from any thread, but io_uring
/// completes socket operations through task work of the thread that
/// submitted them, and cancels a thread's operations when that thread
/// exits. Cancelled receives, sends, polls and accepts are resubmitted, so
/// a transport survives moving between threads; a submitting thread that
/// blocks in an uninterruptible sleep delays completions until it runs.
///
/// **Task work.** By default the ring is set up with `COOP_TASKRUN` and
/// `TASKRUN_FLAG` ([`TcpConfig::uring_coop_taskrun`]): the kernel does not
/// interrupt the submitting thread with an IPI to post a completion but
/// raises a flag in the ring that `progress` checks (one memory read) and
/// answers with an `io_uring_enter`, which runs the work. A thread asleep in
/// `poll(2)` is still woken. On this project's 2-core VM the IPI to a
/// spinning vCPU dominated: 8-byte one-way latency fell from 19-32 µs to
/// 9-12 µs with the flag. The cost: a submitting thread that computes in user
/// space without calling `progress` posts its completions only at its next
/// kernel entry (a system call or the next timer tick), so a progress thread
/// sleeping on the ring's descriptor may wake that much later for operations
/// another thread submitted (and meanwhile `prepare_wait` reports work
/// ready, so such a thread spins rather than sleeps). The ring is set up without `SQPOLL` (its kernel
/// thread competes with busy-polling threads on small machines).
pub struct TcpUringTransport {
    ring: IoUring,
    cfg: TcpConfig,
    listener: TcpListener,
    local: SocketAddr,
    accept_armed: bool,
    /// Boxed: the kernel holds pointers into each connection's buffers.
    conns: HashMap<ConnId, Box<Conn>>,
    ids: Ids,
    /// Events that arose outside `progress`.
    pending: Vec<TransportEvent>,
    /// Connections with operations to (re)submit.
    to_arm: Vec<ConnId>,
    cqes: Vec<(u64, i32)>,
    /// In `Drop`: completions are reaped, nothing is resubmitted.
    dropping: bool,
    notes: Notes,
}

impl std::fmt::Debug for TcpUringTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpUringTransport")
            .field("local", &self.local)
            .field("connections", &self.conns.len())
            .finish()
    }
}

/// Queue `entry` for submission, submitting what is queued first when the
/// submission queue is full.
///
/// # Safety
/// Every buffer `entry` points at must stay valid, and unmoved, until its
/// completion has been reaped.
unsafe fn push(ring: &mut IoUring, entry: &squeue::Entry) -> io::Result<()> {
    // SAFETY: forwarded to the caller.
    if unsafe { ring.submission().push(entry) }.is_ok() {
        return Ok(());
    }
    ring.submit()?;
    // SAFETY: forwarded to the caller.
    unsafe { ring.submission().push(entry) }
        .map_err(|_| io::Error::new(io::ErrorKind::WouldBlock, "submission queue full"))
}

impl TcpUringTransport {
    /// Listen on `addr` (port 0: any free port, which
    /// [`Transport::local_addr`] then reports).
    pub fn bind(addr: SocketAddr, cfg: TcpConfig) -> Result<Self, TransportError> {
        cfg.check()?;
        let mut builder = IoUring::builder();
        builder.setup_cqsize(cfg.ring_entries.saturating_mul(2));
        if cfg.uring_coop_taskrun {
            builder.setup_coop_taskrun().setup_taskrun_flag();
        }
        let ring = builder
            .build(cfg.ring_entries)
            .map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOSYS) => " (the kernel has no io_uring)",
                    Some(libc::EPERM) => {
                        " (io_uring is disabled for this process: see the sysctl kernel.io_uring_disabled)"
                    }
                    Some(libc::ENOMEM) => " (locked-memory limit too low: raise RLIMIT_MEMLOCK)",
                    _ => "",
                };
                TransportError::Setup(format!("cannot create an io_uring: {e}{hint}"))
            })?;
        let (listener, local) = listen(addr)?;
        tracing::debug!(%local, "tcp/io_uring listening");
        Ok(TcpUringTransport {
            ring,
            cfg,
            listener,
            local,
            accept_armed: false,
            conns: HashMap::new(),
            ids: Ids(1),
            pending: Vec::new(),
            to_arm: Vec::new(),
            cqes: Vec::new(),
            dropping: false,
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

    fn list(&mut self, id: ConnId) {
        if let Some(c) = self.conns.get_mut(&id) {
            if !c.listed {
                c.listed = true;
                self.to_arm.push(id);
            }
        }
    }

    fn insert(&mut self, core: ConnCore, stream: TcpStream) {
        let id = core.id;
        self.conns.insert(
            id,
            Box::new(Conn {
                core,
                stream,
                recv_armed: false,
                send_armed: false,
                poll_armed: false,
                cancelled: false,
                listed: false,
                out: SendBufs {
                    msg: sys::empty_msghdr(),
                    iov: Vec::with_capacity(super::framing::MAX_IOVECS),
                },
            }),
        );
        self.list(id);
    }

    /// Prepare the operations the listed connections (and the listener)
    /// need. Returns false when the submission queue is full and some were
    /// left for later.
    fn arm_all(&mut self) -> io::Result<()> {
        if !self.accept_armed && !self.dropping {
            let e = opcode::Accept::new(
                types::Fd(self.listener.as_raw_fd()),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
            .flags(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data(0, OP_ACCEPT));
            // SAFETY: no buffers (null address); the listener lives until
            // Drop, which waits for this operation's completion.
            unsafe { push(&mut self.ring, &e)? };
            self.accept_armed = true;
        }
        while let Some(id) = self.to_arm.pop() {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            c.listed = false;
            if let Err(e) = arm(&mut self.ring, c, self.dropping, &mut self.pending) {
                c.listed = true;
                self.to_arm.push(id);
                return Err(e);
            }
        }
        Ok(())
    }

    fn submit(&mut self) -> io::Result<()> {
        match self.ring.submit() {
            Ok(_) => Ok(()),
            // The kernel could not take everything now (completion queue
            // overflowing, out of memory): retry on the next call.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EBUSY) | Some(libc::EAGAIN) | Some(libc::EINTR)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Take the completion queue's entries and act on them.
    fn reap(&mut self, events: &mut Vec<TransportEvent>) -> usize {
        let mut cqes = std::mem::take(&mut self.cqes);
        cqes.clear();
        cqes.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(ud, res) in &cqes {
            self.complete(ud, res, events);
        }
        let n = cqes.len();
        self.cqes = cqes;
        n
    }

    fn complete(&mut self, ud: u64, res: i32, events: &mut Vec<TransportEvent>) {
        let (id, op) = ((ud >> 8) as ConnId, ud & 0xff);
        if op == OP_CANCEL {
            return;
        }
        if op == OP_ACCEPT {
            self.accept_armed = false;
            if res >= 0 {
                self.accepted(sys::stream_from_accepted(res), events);
            } else if res != -libc::ECANCELED {
                tracing::warn!(
                    "accept on tcp://{}: {}",
                    self.local,
                    io::Error::from_raw_os_error(-res)
                );
            }
            return;
        }
        let dropping = self.dropping;
        let Some(c) = self.conns.get_mut(&id) else {
            tracing::error!(conn = id, op, "completion for an unknown connection");
            return;
        };
        let again = |res: i32| {
            !dropping && matches!(-res, libc::ECANCELED | libc::EAGAIN | libc::EINTR) && res < 0
        };
        match op {
            OP_RECV => {
                c.recv_armed = false;
                if c.core.phase == Phase::Done || dropping {
                } else if res > 0 {
                    if let Err(e) = c.core.received(res as usize, events) {
                        fail(c, Some(e), events);
                    }
                } else if res == 0 {
                    let reason = c.core.eof_reason();
                    fail(c, reason, events);
                } else if !again(res) {
                    let e = io::Error::from_raw_os_error(-res);
                    let err = conn_error("receiving from", c.core.peer, &e);
                    fail(c, Some(err), events);
                }
            }
            OP_SEND => {
                c.send_armed = false;
                if res >= 0 {
                    c.core.sendq.advance(res as usize);
                } else if c.core.phase != Phase::Done && !again(res) {
                    let e = io::Error::from_raw_os_error(-res);
                    let err = conn_error("sending to", c.core.peer, &e);
                    fail(c, Some(err), events);
                }
            }
            OP_POLL => {
                c.poll_armed = false;
                if c.core.phase == Phase::Connecting && !again(res) {
                    match c.stream.take_error() {
                        Ok(None) if res >= 0 => {
                            c.core.connected(events);
                        }
                        Ok(None) => {
                            let e = io::Error::from_raw_os_error(-res);
                            let err = conn_error("connecting to", c.core.peer, &e);
                            fail(c, Some(err), events);
                        }
                        Ok(Some(e)) | Err(e) => {
                            let err = conn_error("connecting to", c.core.peer, &e);
                            fail(c, Some(err), events);
                        }
                    }
                }
            }
            _ => tracing::error!(op, "completion of an unknown operation"),
        }
        self.list(id);
    }

    fn accepted(&mut self, stream: TcpStream, events: &mut Vec<TransportEvent>) {
        let peer = match stream.peer_addr() {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("dropping an accepted connection: {e}");
                return;
            }
        };
        match configure(&stream, &self.cfg) {
            Ok(note) => self.notes.add(note),
            Err(e) => {
                tracing::warn!(%peer, "dropping an accepted connection: {e}");
                return;
            }
        }
        let id = self.ids.next(&self.conns);
        tracing::debug!(conn = id, %peer, "accepted");
        self.insert(ConnCore::new(id, peer, Phase::Open, &self.cfg), stream);
        events.push(TransportEvent::Accepted(id));
    }

    fn check_deadlines(&mut self, events: &mut Vec<TransportEvent>) -> bool {
        let now = Instant::now();
        match earliest_deadline(self.conns.values().map(|c| &c.core)) {
            Some(d) if now >= d => {}
            _ => return false,
        }
        let mut expired = Vec::new();
        for (&id, c) in self.conns.iter_mut() {
            if c.core.connect_expired(now) {
                let err = c.core.connect_timeout_error(&self.cfg);
                fail(c, Some(err), events);
                expired.push(id);
            }
        }
        for id in &expired {
            self.list(*id);
        }
        !expired.is_empty()
    }

    fn teardown_done(&mut self) {
        self.conns
            .retain(|_, c| c.core.phase != Phase::Done || c.in_flight());
    }
}

/// Report the end, shut the socket (in-flight operations then complete) and
/// leave the connection for teardown once nothing is in flight.
fn fail(
    c: &mut Conn,
    reason: Option<crate::transport::FailureCause>,
    events: &mut Vec<TransportEvent>,
) {
    c.core.finish(reason, events);
    let _ = c.stream.shutdown(Shutdown::Both);
}

/// Prepare what `c` needs in flight.
fn arm(
    ring: &mut IoUring,
    c: &mut Conn,
    dropping: bool,
    events: &mut Vec<TransportEvent>,
) -> io::Result<()> {
    let fd = types::Fd(c.stream.as_raw_fd());
    let id = c.core.id;
    if c.core.phase == Phase::Done || dropping {
        if !c.cancelled && c.in_flight() {
            for (armed, op) in [
                (c.recv_armed, OP_RECV),
                (c.send_armed, OP_SEND),
                (c.poll_armed, OP_POLL),
            ] {
                if armed {
                    let e = opcode::AsyncCancel::new(user_data(id, op))
                        .build()
                        .user_data(user_data(id, OP_CANCEL));
                    // SAFETY: a cancellation points at no buffer.
                    unsafe { push(ring, &e)? };
                }
            }
            c.cancelled = true;
        }
        return Ok(());
    }
    if c.core.phase == Phase::Connecting {
        if !c.poll_armed {
            let e = opcode::PollAdd::new(fd, libc::POLLOUT as u32)
                .build()
                .user_data(user_data(id, OP_POLL));
            // SAFETY: a poll points at no buffer; the socket stays open
            // while the operation is in flight (the connection is only
            // dropped when nothing is).
            unsafe { push(ring, &e)? };
            c.poll_armed = true;
        }
        return Ok(());
    }
    if !c.recv_armed {
        let spare = c.core.recv.spare();
        let len = spare.len().min(u32::MAX as usize) as u32;
        let e = opcode::Recv::new(fd, spare.as_mut_ptr(), len)
            .build()
            .user_data(user_data(id, OP_RECV));
        // SAFETY: `spare` is heap memory of the boxed connection's receive
        // state, which neither moves nor is freed nor handed out again
        // until this receive's completion is reaped (`recv_armed` guards
        // it, and the connection is not dropped while it is set).
        unsafe { push(ring, &e)? };
        c.recv_armed = true;
    }
    if c.core.phase == Phase::Open && !c.send_armed && !c.core.sendq.is_empty() {
        c.core.sendq.iovecs(&mut c.out.iov);
        c.out.msg.msg_iov = c.out.iov.as_mut_ptr();
        c.out.msg.msg_iovlen = c.out.iov.len() as _;
        let e = opcode::SendMsg::new(fd, &c.out.msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(user_data(id, OP_SEND));
        // SAFETY: the msghdr and iovecs live in the boxed connection and
        // the iovecs point into messages of its send queue; none of them is
        // modified, moved or freed until this send's completion is reaped
        // (`send_armed` guards the iovecs; the queue only drops messages in
        // `advance`, after the completion; pushing new messages moves no
        // queued byte; the connection is not dropped while it is set).
        unsafe { push(ring, &e)? };
        c.send_armed = true;
    }
    if c.core.wants_shutdown() && !c.send_armed {
        match c.stream.shutdown(Shutdown::Write) {
            Ok(()) => c.core.phase = Phase::ShutWr,
            Err(e) => {
                let err = conn_error("closing", c.core.peer, &e);
                fail(c, Some(err), events);
            }
        }
    }
    Ok(())
}

impl Transport for TcpUringTransport {
    fn name(&self) -> String {
        "tcp/io_uring".into()
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
                self.insert(core, stream);
            }
            Err(e) => {
                let err = conn_error("connecting to", peer, &e);
                core.finish(Some(err), &mut self.pending);
            }
        }
        tracing::debug!(conn = id, %peer, "connecting");
        Ok(id)
    }

    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        let c = self.conns.get_mut(&conn).ok_or(SendError::Closed)?;
        c.core.enqueue(head, body, &self.cfg)?;
        if !c.send_armed {
            self.list(conn);
        }
        Ok(())
    }

    fn close(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.core.closing = true;
            self.list(conn);
        }
    }

    fn progress(&mut self, events: &mut Vec<TransportEvent>) -> Result<bool, TransportError> {
        let mut moved = !self.pending.is_empty();
        events.append(&mut self.pending);
        let armed = self.arm_all();
        let sq_pending = !self.ring.submission().is_empty();
        let flush = {
            let sq = self.ring.submission();
            sq.cq_overflow() || sq.taskrun()
        };
        if sq_pending || flush {
            self.submit()
                .map_err(|e| TransportError::io("submitting to the io_uring", &e))?;
        }
        if let Err(e) = armed {
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(TransportError::io("preparing io_uring operations", &e));
            }
        }
        moved |= self.reap(events) > 0;
        moved |= self.check_deadlines(events);
        moved |= !self.pending.is_empty();
        events.append(&mut self.pending);
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
        // Everything that should be in flight while we sleep must be
        // submitted now.
        let armed = self.arm_all();
        if !self.ring.submission().is_empty() && self.submit().is_err() {
            return Some(Duration::ZERO);
        }
        if armed.is_err()
            || !self.pending.is_empty()
            || !self.ring.completion().is_empty()
            || self.ring.submission().taskrun()
        {
            return Some(Duration::ZERO);
        }
        fds.push(self.ring.as_raw_fd());
        earliest_deadline(self.conns.values().map(|c| &c.core))
            .map(|d| d.saturating_duration_since(Instant::now()))
    }
}

impl Drop for TcpUringTransport {
    fn drop(&mut self) {
        self.dropping = true;
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in ids {
            if let Some(c) = self.conns.get_mut(&id) {
                let _ = c.stream.shutdown(Shutdown::Both);
            }
            self.list(id);
        }
        if self.accept_armed {
            let e = opcode::AsyncCancel::new(user_data(0, OP_ACCEPT))
                .build()
                .user_data(user_data(0, OP_CANCEL));
            // SAFETY: a cancellation points at no buffer.
            let _ = unsafe { push(&mut self.ring, &e) };
        }
        let deadline = Instant::now() + DROP_WAIT;
        let mut scratch = Vec::new();
        loop {
            let _ = self.arm_all();
            self.teardown_done();
            let busy = self.accept_armed || self.conns.values().any(|c| c.in_flight());
            if !busy {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                // The kernel may still write into these buffers: leak them.
                tracing::error!(
                    "io_uring operations did not complete in {DROP_WAIT:?}; leaking their buffers"
                );
                for (_, c) in self.conns.drain() {
                    if c.in_flight() {
                        std::mem::forget(c);
                    }
                }
                break;
            }
            let ts = types::Timespec::from(Duration::from_millis(50).min(deadline - now));
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            self.reap(&mut scratch);
        }
    }
}
