//! The application's endpoint: non-blocking point-to-point, probes, active
//! messages and RMA, with progress made by whoever waits and, optionally, by
//! a progress thread.
//!
//! The protocol engine sits behind one lock. A waiting caller takes it,
//! makes progress itself and checks its request (no hand-off to another
//! thread on the critical path). The progress thread, when enabled, does the
//! same between the application's calls, so rendezvous transfers and
//! one-sided accesses advance while the application computes. Both
//! busy-poll for [`Config::spin`] after the last activity and then sleep in
//! poll(2) on the transport's descriptors, without holding the lock.
//!
//! Active-message handlers and the peer-failure callback run after the lock
//! is released, in arrival order, from whichever thread made the progress;
//! they may call the endpoint (send, put, ...) but must not wait on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use llc_stack::pace::{Pace, Pacer};
use llc_stack::Instant;

use bytes::Bytes;
use parking_lot::Mutex as EngineLock;

use crate::addr::Addr;
use crate::config::Config;
use crate::delivery::{ActiveMessage, Event, EventQueue, ReleaseNotice, Request};
use crate::engine::{AddPeer, AmDelivery, Completion, Engine, PeerFailure, Stats, Status};
use crate::error::Error;
use crate::matching::{Pattern, PeerId, Source, Tag};
use crate::rma::{MemoryRegion, RegionKey};
use crate::sys;
use crate::transport::{Transport, TransportEvent};
use crate::wire::{BUNDLE_ITEM_MAX, HEADER_LEN};

mod fabric;

/// An active-message handler: the sending peer and the payload.
pub type AmHandler = Box<dyn FnMut(PeerId, &[u8]) + Send>;

/// Called once per failed peer, with the error its requests failed with.
pub type FailureHandler = Box<dyn FnMut(PeerId, &Error) + Send>;

struct Callbacks {
    am: HashMap<u16, AmHandler>,
    on_failure: Option<FailureHandler>,
    unhandled_am: u64,
}

/// The I/O edge of the sans-IO engine: the engine, the transport it runs
/// on, and the event list between them. One lock guards all three.
struct Core<T: Transport> {
    engine: Engine,
    t: T,
    /// The list a transport's [`Transport::progress_each`] may fill before
    /// handing the events over (kept for its allocation).
    events: Vec<TransportEvent>,
    /// Pull-style delivery: active messages and peer ends go to `queue`
    /// instead of the callbacks.
    pull: bool,
    /// The user's events, in order (see [`crate::delivery`]).
    queue: Arc<EventQueue>,
    /// Requests whose completion goes to `queue`.
    watched: Vec<u64>,
    /// [`Config::coalesce`].
    coalesce: bool,
    /// Rounds of progress so far: a post finds whether one ran since the
    /// last post to its peer.
    epoch: u64,
    /// Per peer, 1 + the epoch of the last post that left at once (0: none).
    last_post: Vec<u64>,
    /// Small messages wait in the engine's queues for the next transmit
    /// (readable without the lock: [`Endpoint::holding`]).
    holding: Arc<AtomicBool>,
}

impl<T: Transport> Core<T> {
    fn new(mut t: T, mut cfg: Config) -> Result<Self, Error> {
        let coalesce = cfg.coalesce;
        cfg.rndv_chunk = crate::config::fit_to_frames(cfg.rndv_chunk, t.frame_payload());
        let engine = Engine::new(t.local_addr(), cfg)?;
        t.set_placement(Box::new(engine.placement()));
        Ok(Core {
            engine,
            t,
            events: Vec::new(),
            pull: false,
            queue: Arc::default(),
            watched: Vec::new(),
            coalesce,
            epoch: 0,
            last_post: Vec::new(),
            holding: Arc::default(),
        })
    }

    /// Hand what the last rounds produced for the user to the event queue:
    /// active messages and peer ends (pull-style delivery), completions of
    /// watched requests.
    fn queue_events(&mut self) {
        if self.pull {
            let e = &mut self.engine;
            self.queue.take_from(&mut e.am_deliveries, &mut e.failures);
        }
        if !self.watched.is_empty() {
            let engine = &mut self.engine;
            let queue = &self.queue;
            self.watched.retain(|&r| {
                if !engine.is_done(r) {
                    return true;
                }
                if let Some(result) = engine.take(r) {
                    queue.push(Event::Completed {
                        request: Request(r),
                        result,
                    });
                }
                false
            });
        }
    }

    /// One pass: the transport's progress, every event to the engine, and
    /// what the engine has to send to the transport.
    ///
    /// What the events made the engine send goes out in a second transport
    /// pass before returning, so a caller that finds its request complete
    /// and stops making progress leaves nothing waiting in the transport.
    fn progress(&mut self) -> Result<bool, Error> {
        self.epoch += 1;
        self.released();
        let mut moved = false;
        let Core {
            engine, t, events, ..
        } = self;
        for _ in 0..2 {
            let handed_before = engine.handed();
            moved |= t.progress_each(events, |ev| engine.handle_event(ev))?;
            // Packets copied into receive buffers go back for the next ones
            // (in any order: popped, which costs less than a drain).
            while let Some(packet) = engine.spent.pop() {
                t.recycle(packet);
            }
            engine.transmit(t);
            if engine.handed() == handed_before {
                break;
            }
        }
        engine.reap_detached();
        self.queue_events();
        Ok(moved)
    }

    /// Start an operation and hand what it sends to the transport, which
    /// puts it on the wire at once (its transmit pass, or a whole round of
    /// progress where it has none).
    fn post<R>(&mut self, start: impl FnOnce(&mut Engine) -> R) -> R {
        self.post_via(|e, _| start(e))
    }

    /// [`Core::post`] of an operation that may hand its packet to the
    /// transport itself ([`Engine::isend_via`]).
    fn post_via<R>(&mut self, start: impl FnOnce(&mut Engine, &mut T) -> R) -> R {
        let handed = self.engine.handed();
        let r = start(&mut self.engine, &mut self.t);
        self.engine.transmit(&mut self.t);
        if self.engine.handed() == handed {
            return r; // nothing to send (a receive, a send waiting for credit)
        }
        self.released();
        // The transport's transmit pass when it has one (what came in is
        // for the next round of progress), a whole round otherwise.
        if !matches!(self.t.transmit_queued(), Ok(true)) {
            let _ = self.progress();
        }
        r
    }

    /// [`Core::post`] of a message of `len` bytes to `p`, held in the
    /// peer's queue instead when [`Config::coalesce`] is on, the message is
    /// small, and a message to `p` left at once since the last round of
    /// progress: the first of a burst leaves at once, the rest wait for
    /// the next round (or post that leaves) to go in one bundle. `start`
    /// gets the transport when the message is to leave now.
    fn post_to<R>(
        &mut self,
        p: PeerId,
        len: usize,
        start: impl FnOnce(&mut Engine, Option<&mut T>) -> R,
    ) -> R {
        let slot = p as usize;
        if self.coalesce
            && HEADER_LEN + len <= BUNDLE_ITEM_MAX
            && self.last_post.get(slot) == Some(&(self.epoch + 1))
            && self.engine.may_hold(p)
        {
            let r = start(&mut self.engine, None);
            self.holding.store(true, Ordering::Release);
            return r;
        }
        let r = self.post_via(|e, t| start(e, Some(t)));
        if self.coalesce {
            if self.last_post.len() <= slot {
                self.last_post.resize(slot + 1, 0);
            }
            self.last_post[slot] = self.epoch + 1;
        }
        r
    }

    /// Hand what waits to the transport (held messages included).
    fn send_held(&mut self) {
        self.engine.transmit(&mut self.t);
        self.released();
    }

    /// Nothing is held once the engine's queues went to the transport.
    fn released(&mut self) {
        if self.coalesce {
            self.holding.store(false, Ordering::Release);
        }
    }

    fn connect(&mut self, addr: Addr) -> Result<PeerId, Error> {
        if addr == self.engine.local_addr() {
            return Ok(self.engine.own_peer());
        }
        if let Some(p) = self.engine.connected_peer(&addr) {
            return Ok(p);
        }
        let conn = self.t.connect(&addr)?;
        let p = self.engine.connected(addr, conn);
        self.engine.transmit(&mut self.t);
        Ok(p)
    }

    fn add_peer(&mut self, addr: Addr) -> Result<PeerId, Error> {
        match self.engine.add_peer(addr)? {
            AddPeer::Known(p) => Ok(p),
            AddPeer::Connect => self.connect(addr),
        }
    }

    /// True when nothing we sent waits in the engine's queues or
    /// unacknowledged in the transport.
    fn flushed(&self) -> bool {
        self.engine.queues_empty() && self.t.flushed()
    }

    /// Close every connection (messages queued are still delivered).
    fn close_all(&mut self) {
        for c in self.engine.connections().collect::<Vec<_>>() {
            self.t.close(c);
        }
    }
}

struct Shared<T: Transport> {
    core: EngineLock<Core<T>>,
    /// The core's event queue, reachable without its lock.
    queue: Arc<EventQueue>,
    /// The core's [`Core::holding`], readable without its lock.
    holding: Arc<AtomicBool>,
    /// The engine's multi-receive activity, readable without its lock.
    multi_activity: Arc<crate::engine::MultiActivity>,
    callbacks: Mutex<Callbacks>,
    stop: AtomicBool,
    spin: Duration,
    max_sleep: Duration,
    /// A progress thread runs: waiters sleep on `progressed`, which it
    /// signals after every round that moved something (it may have
    /// completed their request and consumed the readiness they would poll).
    threaded: AtomicBool,
    /// Rounds of the progress thread that moved something.
    generation: parking_lot::Mutex<u64>,
    progressed: parking_lot::Condvar,
}

/// A message-layer endpoint over transport `T`.
pub struct Endpoint<T: Transport> {
    shared: Arc<Shared<T>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<T: Transport> std::fmt::Debug for Endpoint<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.local_addr().to_string())
            .field("progress_thread", &self.has_progress_thread())
            .finish()
    }
}

impl<T: Transport> Endpoint<T> {
    /// An endpoint over `transport`; starts the progress thread when
    /// `cfg.progress_thread` says so.
    pub fn new(transport: T, cfg: Config) -> Result<Self, Error> {
        let spin = cfg.spin;
        let max_sleep = cfg.max_sleep.max(Duration::from_micros(1));
        let threaded = cfg.progress_thread;
        let core = Core::new(transport, cfg)?;
        let shared = Arc::new(Shared {
            queue: core.queue.clone(),
            holding: core.holding.clone(),
            multi_activity: core.engine.multi_activity.clone(),
            core: EngineLock::new(core),
            callbacks: Mutex::new(Callbacks {
                am: HashMap::new(),
                on_failure: None,
                unhandled_am: 0,
            }),
            stop: AtomicBool::new(false),
            spin,
            max_sleep,
            threaded: AtomicBool::new(false),
            generation: parking_lot::Mutex::new(0),
            progressed: parking_lot::Condvar::new(),
        });
        let ep = Endpoint {
            shared,
            thread: Mutex::new(None),
        };
        if threaded {
            ep.set_progress_thread(true)?;
        }
        Ok(ep)
    }

    /// Start or stop the progress thread (what `Config::progress_thread`
    /// sets at creation), e.g. to measure overlap both ways on one
    /// connection. Stopping waits for the thread to finish its round.
    pub fn set_progress_thread(&self, on: bool) -> Result<(), Error> {
        let mut slot = self.thread.lock().expect("progress thread slot");
        match (on, slot.is_some()) {
            (true, false) => {
                self.shared.stop.store(false, Ordering::Relaxed);
                self.shared.threaded.store(true, Ordering::Relaxed);
                let s = self.shared.clone();
                let t = std::thread::Builder::new()
                    .name("msg-progress".into())
                    .spawn(move || progress_thread(&s))
                    .map_err(|e| {
                        Error::Transport(crate::transport::TransportError::io(
                            "starting the progress thread",
                            &e,
                        ))
                    })?;
                *slot = Some(t);
            }
            (false, true) => {
                self.shared.stop.store(true, Ordering::Relaxed);
                if let Some(t) = slot.take() {
                    let _ = t.join();
                }
                self.shared.threaded.store(false, Ordering::Relaxed);
            }
            _ => {}
        }
        Ok(())
    }

    /// Is a progress thread running?
    pub fn has_progress_thread(&self) -> bool {
        self.thread.lock().expect("progress thread slot").is_some()
    }

    /// The engine and its transport, locked.
    fn core(&self) -> parking_lot::MutexGuard<'_, Core<T>> {
        self.shared.core.lock()
    }

    /// Where peers reach this endpoint.
    pub fn local_addr(&self) -> Addr {
        self.core().engine.local_addr()
    }

    /// The transport's name, e.g. `llc/af_xdp (native, copy)` or `tcp/io_uring`.
    pub fn transport_name(&self) -> String {
        self.core().t.name()
    }

    /// Authenticate the transport's frames with `key` from now on (LLC
    /// only): for an endpoint opened with [`crate::transport::spec::KeySource::Later`],
    /// whose address was published before the job's key was known, or to
    /// replace the key it opened with. Must come before the first
    /// connection (refused after); peers that reached for this endpoint
    /// before retry their connection requests, and succeed once they hold
    /// the same key.
    pub fn set_auth_key(&self, key: crate::transport::llc::AuthKey) -> Result<(), Error> {
        let mut c = self.core();
        let c = &mut *c;
        c.t.set_auth_key(key)?;
        // The transport's endpoint is a new one: give it the placement again.
        c.t.set_placement(Box::new(c.engine.placement()));
        Ok(())
    }

    /// The fingerprint of the key the transport's frames are authenticated
    /// with ([`Transport::auth_fingerprint`]); `None` when they are not.
    pub fn auth_fingerprint(&self) -> Option<String> {
        self.core().t.auth_fingerprint()
    }

    /// Run `f` on the transport (statistics, notes).
    pub fn with_transport<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.core().t)
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.core().engine.stats().clone()
    }

    /// The message layer's counters (`msg.*`) and the transport's
    /// (`link.*`; over LLC these include the connections' sums,
    /// `link.conn.*`, and the device's own, `link.device.*`: what the
    /// kernel dropped before the stack saw a frame), named, for reports.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let c = self.core();
        let mut out: Vec<(String, u64)> = c
            .engine
            .stats()
            .counters()
            .iter()
            .map(|(k, v)| (format!("msg.{k}"), *v))
            .collect();
        out.extend(
            c.t.counters()
                .into_iter()
                .map(|(k, v)| (format!("link.{k}"), v)),
        );
        out
    }

    /// Bytes of unexpected messages buffered now (bounded by the eager
    /// window times the number of peers).
    pub fn unexpected_bytes(&self) -> usize {
        self.core().engine.unexpected_bytes()
    }

    /// Active messages that arrived for a handler nobody registered.
    pub fn unhandled_am(&self) -> u64 {
        self.shared
            .callbacks
            .lock()
            .expect("callbacks")
            .unhandled_am
    }

    /// Open a connection to the endpoint at `addr` (this side initiates; a
    /// server just receives, and its peers appear as they connect). This
    /// endpoint's own address gives the peer that is itself: what is sent
    /// to it is taken in by the engine, with no transport.
    pub fn connect(&self, addr: &Addr) -> Result<PeerId, Error> {
        self.core().connect(*addr)
    }

    /// Know the endpoint at `addr`, MPI style: every process adds every
    /// other, and of each pair the one with the smaller address connects.
    pub fn add_peer(&self, addr: &Addr) -> Result<PeerId, Error> {
        self.core().add_peer(*addr)
    }

    /// The address of a peer.
    pub fn peer_addr(&self, peer: PeerId) -> Option<Addr> {
        self.core().engine.peer_addr(peer)
    }

    /// Number of peers known (added, connected or connected to us).
    pub fn peer_count(&self) -> usize {
        self.core().engine.peer_count()
    }

    /// Start an operation; what it sends leaves at once ([`Core::post`]).
    fn post(&self, start: impl FnOnce(&mut Engine) -> u64) -> Request {
        Request(self.core().post(start))
    }

    /// Start sending `data` to `peer` with `tag` in `context`. An eager
    /// send completes when handed to the transport (which delivers it or
    /// fails the peer); a rendezvous send when the receiver has placed all
    /// of it in the posted buffer.
    ///
    /// With [`Config::coalesce`] a small send may wait for the next call
    /// that makes progress, to leave in one bundle with the ones after it.
    pub fn isend(&self, peer: PeerId, tag: u32, context: u32, data: impl Into<Bytes>) -> Request {
        let data = data.into();
        Request(self.core().post_to(peer, data.len(), |e, t| {
            e.isend_via(t, peer, tag, context, data)
        }))
    }

    /// [`Endpoint::isend`] of a body the caller waits to have back (lent
    /// with [`crate::lent::lend`]): an eager send asks the peer to
    /// acknowledge it promptly, so that the release is not held by a
    /// delayed acknowledgement.
    pub fn isend_lent(&self, peer: PeerId, tag: u32, context: u32, data: Bytes) -> Request {
        self.post(|e| e.isend_with(peer, tag, context, data, true))
    }

    /// Post a receive into `buf` (its length is the most accepted). The
    /// completion returns the buffer cut to the message's length.
    pub fn irecv(&self, source: Source, tag: Tag, context: u32, buf: Vec<u8>) -> Request {
        let pattern = Pattern {
            source,
            tag,
            context,
        };
        // Nothing of ours goes out unless it matched an announced
        // rendezvous (its CTS): hand that over, without a round of
        // progress; the wait or test that follows makes it.
        let mut c = self.core();
        let Core { engine, t, .. } = &mut *c;
        let r = engine.irecv(pattern, buf);
        engine.transmit(t);
        Request(r)
    }

    /// Blocking send.
    pub fn send(
        &self,
        peer: PeerId,
        tag: u32,
        context: u32,
        data: impl Into<Bytes>,
        timeout: Option<Duration>,
    ) -> Result<Completion, Error> {
        let r = self.isend(peer, tag, context, data);
        self.wait_timeout(r, timeout)
    }

    /// Blocking receive.
    pub fn recv(
        &self,
        source: Source,
        tag: Tag,
        context: u32,
        buf: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Completion, Error> {
        let r = self.irecv(source, tag, context, buf);
        self.wait_timeout(r, timeout)
    }

    /// Cancel a receive that has not matched; it then completes with
    /// [`Error::Cancelled`]. False when it had matched already.
    pub fn cancel(&self, r: Request) -> bool {
        self.core().engine.cancel(r.0)
    }

    /// One round of progress; true when anything moved.
    pub fn progress(&self) -> Result<bool, Error> {
        let (moved, callbacks) = {
            let mut c = self.core();
            let moved = c.progress()?;
            (moved, c.engine.has_callbacks())
        };
        // An idle call (the common one while a caller busy-polls) takes no
        // second lock for callbacks that are not there.
        if callbacks {
            self.shared.deliver();
        }
        Ok(moved)
    }

    /// Sleep until the transport may have work, the progress thread moved
    /// something, or `max` passed: for a layer above that keeps its own
    /// wait loop (its conditions live in its own state, and what it does
    /// between rounds calls this endpoint) and found a round idle.
    pub fn wait_ready(&self, max: Duration) {
        self.wait_ready_or(&[], max)
    }

    /// [`Endpoint::wait_ready`], also woken when one of the caller's `extra`
    /// descriptors is readable (unless a progress thread runs: it polls the
    /// transport, and waiters sleep on its rounds alone).
    pub fn wait_ready_or(&self, extra: &[std::os::fd::RawFd], max: Duration) {
        if max.is_zero() {
            return;
        }
        if self.shared.threaded.load(Ordering::Relaxed) {
            let mut g = self.shared.generation.lock();
            self.shared.progressed.wait_for(&mut g, max);
            return;
        }
        let mut fds = extra.to_vec();
        let allowed = self.core().t.prepare_wait(&mut fds);
        let sleep = allowed.map_or(max, |a| a.min(max));
        if !sleep.is_zero() {
            sys::poll_readable(&fds, sleep);
        }
    }

    /// Run `f` on the core after a round of progress (skipped when `needed`
    /// says the answer is there already), then run the callbacks that
    /// round collected.
    fn after_progress<R>(
        &self,
        needed: impl FnOnce(&Core<T>) -> bool,
        f: impl FnOnce(&mut Core<T>) -> R,
    ) -> R {
        let mut c = self.core();
        if needed(&c) {
            let _ = c.progress();
        }
        let res = f(&mut c);
        // Whoever makes progress delivers what it collected, so callbacks
        // wait only if a round just now (ours or one before) left some.
        let callbacks = c.engine.has_callbacks();
        drop(c);
        if callbacks {
            self.shared.deliver();
        }
        res
    }

    /// The result of `r` if it completed (then it is forgotten).
    pub fn test(&self, r: &Request) -> Option<Result<Completion, Error>> {
        // Taken at once when it is in (one lookup); a round of progress
        // and a second look otherwise.
        let mut c = self.core();
        let res = match c.engine.take(r.0) {
            Some(res) => Some(res),
            None => {
                let _ = c.progress();
                c.engine.take(r.0)
            }
        };
        let callbacks = c.engine.has_callbacks();
        drop(c);
        if callbacks {
            self.shared.deliver();
        }
        res
    }

    /// The completed ones among `reqs`, with their index (MPI_Testsome).
    pub fn test_some(&self, reqs: &[Request]) -> Vec<(usize, Result<Completion, Error>)> {
        self.after_progress(
            |_| true,
            |c| {
                let mut out = Vec::new();
                for (i, r) in reqs.iter().enumerate() {
                    if c.engine.is_done(r.0) {
                        if let Some(res) = c.engine.take(r.0) {
                            out.push((i, res));
                        }
                    }
                }
                out
            },
        )
    }

    /// Wait for `r` with no time limit (a failed peer still ends it, after
    /// the transport's failure timeout).
    pub fn wait(&self, r: Request) -> Result<Completion, Error> {
        self.wait_timeout(r, None)
    }

    /// Wait for `r` at most `timeout`; [`Error::Timeout`] leaves it pending.
    pub fn wait_timeout(&self, r: Request, timeout: Option<Duration>) -> Result<Completion, Error> {
        // A wait on a send handed to the transport finds it complete: no
        // deadline or waiting loop for it.
        if let Some(res) = self.core().engine.take(r.0) {
            return res;
        }
        self.shared
            .drive(deadline(timeout), |c| c.engine.take(r.0))?
    }

    /// Wait until one of `reqs` completes: its index and result (MPI_Waitany).
    pub fn wait_any(
        &self,
        reqs: &[Request],
        timeout: Option<Duration>,
    ) -> Result<(usize, Result<Completion, Error>), Error> {
        self.shared.drive(deadline(timeout), |c| {
            let i = reqs.iter().position(|r| c.engine.is_done(r.0))?;
            c.engine.take(reqs[i].0).map(|res| (i, res))
        })
    }

    /// Wait for all of `reqs` (MPI_Waitall); results in order.
    /// [`Error::Timeout`] when the deadline passes first (the ones that
    /// completed are then consumed).
    pub fn wait_all(
        &self,
        reqs: &[Request],
        timeout: Option<Duration>,
    ) -> Result<Vec<Result<Completion, Error>>, Error> {
        let mut out: Vec<Option<Result<Completion, Error>>> = vec![None; reqs.len()];
        let mut left = reqs.len();
        self.shared.drive(deadline(timeout), |c| {
            for (i, r) in reqs.iter().enumerate() {
                if out[i].is_none() && c.engine.is_done(r.0) {
                    out[i] = c.engine.take(r.0);
                    left -= 1;
                }
            }
            (left == 0).then_some(())
        })?;
        Ok(out.into_iter().map(|o| o.expect("all taken")).collect())
    }

    /// The message a receive with this pattern would get now, if any
    /// (MPI_Iprobe).
    pub fn iprobe(&self, source: Source, tag: Tag, context: u32) -> Option<Status> {
        let pattern = Pattern {
            source,
            tag,
            context,
        };
        self.after_progress(|_| true, |c| c.engine.iprobe(pattern))
    }

    /// Wait until a message matching the pattern is there (MPI_Probe).
    pub fn probe(
        &self,
        source: Source,
        tag: Tag,
        context: u32,
        timeout: Option<Duration>,
    ) -> Result<Status, Error> {
        let pattern = Pattern {
            source,
            tag,
            context,
        };
        self.shared
            .drive(deadline(timeout), |c| c.engine.iprobe(pattern))
    }

    /// Pull-style delivery on or off. On, active messages and peer ends
    /// are not given to the callbacks but wait, in order with completions
    /// of watched requests and releases of lent bodies, for
    /// [`Endpoint::poll_event`].
    pub fn set_pull_delivery(&self, on: bool) {
        self.core().pull = on;
    }

    /// The next event for the user, if any (pull-style delivery). Makes no
    /// progress: call [`Endpoint::progress`] (or let the progress thread
    /// run) to receive; an idle call takes no lock.
    pub fn poll_event(&self) -> Option<Event> {
        self.shared.queue.pop()
    }

    /// Report the completion of `r` as an [`Event::Completed`] instead of
    /// through `test` or `wait` (for a caller that learns of everything from
    /// [`Endpoint::poll_event`]).
    pub fn watch(&self, r: Request) {
        self.core().watched.push(r.0);
    }

    /// A notice that reports [`Event::Released`] with `token` when dropped:
    /// put it in the owner of a body lent to [`Endpoint::am_post_parts`]
    /// (`Bytes::from_owner`) to learn when the transport let go of it.
    pub fn release_notice(&self, token: u64) -> ReleaseNotice {
        ReleaseNotice::new(token, Arc::downgrade(&self.shared.queue))
    }

    /// Give a delivered message's buffer back for later messages (a fresh
    /// large one costs page faults and clearing, a small one an allocation).
    pub fn recycle(&self, msg: ActiveMessage) {
        if msg.packet.capacity() >= RECYCLE_FROM {
            self.core().t.recycle(msg.packet);
        }
    }

    /// Route active messages for `id` to `handler` (replacing any before).
    pub fn set_am_handler(&self, id: u16, handler: AmHandler) {
        self.shared
            .callbacks
            .lock()
            .expect("callbacks")
            .am
            .insert(id, handler);
    }

    /// Call `handler` when a peer fails.
    pub fn on_peer_failure(&self, handler: FailureHandler) {
        self.shared.callbacks.lock().expect("callbacks").on_failure = Some(handler);
    }

    /// Send an active message to handler `id` at `peer`. Completes when
    /// handed to the transport. Active messages are not matched and use no
    /// eager credit: the handler consumes them on arrival.
    pub fn am_send(&self, peer: PeerId, id: u16, data: impl Into<Bytes>) -> Request {
        let data = data.into();
        Request(
            self.core()
                .post_to(peer, data.len(), |e, t| e.am_send_via(t, peer, id, data)),
        )
    }

    /// Send an active message without a request: nothing to wait for or
    /// take. The message is queued in order with everything else to `peer`;
    /// if the peer fails later, the failure callback says so. Fails at once
    /// only for an unknown or already failed peer.
    pub fn am_post(&self, peer: PeerId, id: u16, data: impl Into<Bytes>) -> Result<(), Error> {
        let data = data.into();
        self.core().post_to(peer, data.len(), |e, t| {
            e.am_post_via(t, peer, id, &[], data, false)
        })
    }

    /// [`Endpoint::am_post`] of the message `prefix ++ body`, sending `body`
    /// without copying it: the transport keeps a reference until the peer
    /// has acknowledged it, so memory lent through [`Bytes::from_owner`] is
    /// released (its owner dropped) only then. `prefix` is copied. The peer
    /// may hold its acknowledgement (of a body nobody waits for) up to its
    /// announced delay: a caller that waits for the release uses
    /// [`Endpoint::am_post_lent`].
    pub fn am_post_parts(
        &self,
        peer: PeerId,
        id: u16,
        prefix: &[u8],
        body: Bytes,
    ) -> Result<(), Error> {
        self.am_post_with(peer, id, prefix, body, false)
    }

    /// [`Endpoint::am_post_parts`] of a body the caller waits to have back
    /// (lent with [`crate::lent::lend`]): the transport asks the peer to
    /// acknowledge it promptly, so that the release, and the caller's
    /// completion, do not wait for a delayed acknowledgement.
    pub fn am_post_lent(
        &self,
        peer: PeerId,
        id: u16,
        prefix: &[u8],
        body: Bytes,
    ) -> Result<(), Error> {
        self.am_post_with(peer, id, prefix, body, true)
    }

    /// [`Endpoint::am_post`] of the message `head ++ body`, both copied
    /// before this returns (the caller's buffers are free at once). A
    /// message of at most [`AM_COPY_INLINE`] bytes is copied straight into
    /// the packet the transport keeps and allocates nothing (an MPI match
    /// header and a small payload, as `btl_sendi` sends them); a longer one
    /// is joined into one buffer first.
    pub fn am_post_copy(
        &self,
        peer: PeerId,
        id: u16,
        head: &[u8],
        body: &[u8],
    ) -> Result<(), Error> {
        let n = head.len() + body.len();
        if n > AM_COPY_INLINE {
            return self.am_post(peer, id, Bytes::from([head, body].concat()));
        }
        let mut buf = [0u8; AM_COPY_INLINE];
        buf[..head.len()].copy_from_slice(head);
        buf[head.len()..n].copy_from_slice(body);
        self.am_post_with(peer, id, &buf[..n], Bytes::new(), false)
    }

    fn am_post_with(
        &self,
        peer: PeerId,
        id: u16,
        prefix: &[u8],
        body: Bytes,
        lent: bool,
    ) -> Result<(), Error> {
        let mut c = self.core();
        if lent {
            c.post_via(|e, t| e.am_post_via(Some(t), peer, id, prefix, body, lent))
        } else {
            c.post_to(peer, prefix.len() + body.len(), |e, t| {
                e.am_post_via(t, peer, id, prefix, body, lent)
            })
        }
    }

    /// True when small messages wait for the next round of progress
    /// ([`Config::coalesce`]); cheap, takes no lock.
    pub fn holding(&self) -> bool {
        self.shared.holding.load(Ordering::Acquire)
    }

    /// Hand the messages held by [`Config::coalesce`] to the transport now,
    /// without a round of progress: for a caller's own timer, which bounds
    /// how long a burst's last messages wait when no progress call follows.
    pub fn send_held(&self) {
        if self.holding() {
            self.core().send_held();
        }
    }

    /// True when a message posted to `peer` now would leave at once rather
    /// than wait in its queue (the peer is connected, the transport takes
    /// more, nothing is waiting for credit): what an inline send
    /// (MPI's `btl_sendi`) needs to know before it commits.
    pub fn can_post(&self, peer: PeerId) -> bool {
        let mut c = self.core();
        if !c.engine.sends_now(peer) {
            // A peer we wait for may never connect: the caller wants to
            // send to it now, so open the connection (a caller that finds
            // it cannot post may never queue a message that would).
            let Core { engine, t, .. } = &mut *c;
            engine.open_to(peer, t);
            // Progress may have drained the queue since.
            let _ = c.progress();
        }
        c.engine.sends_now(peer)
    }

    /// Make `region` accessible to peers' `put` and `get` under the returned key.
    pub fn register(&self, region: Arc<dyn MemoryRegion>) -> RegionKey {
        self.core().engine.register(region)
    }

    /// Withdraw a region; later accesses are refused.
    pub fn deregister(&self, key: RegionKey) -> bool {
        self.core().engine.deregister(key)
    }

    /// Write `data` into `peer`'s region `key` at `offset`. Completes when
    /// the target has written it.
    pub fn put(
        &self,
        peer: PeerId,
        key: RegionKey,
        offset: u64,
        data: impl Into<Bytes>,
    ) -> Request {
        self.post(|e| e.put(peer, key, offset, data.into()))
    }

    /// Read `len` bytes of `peer`'s region `key` at `offset`; the completion
    /// carries them.
    pub fn get(&self, peer: PeerId, key: RegionKey, offset: u64, len: usize) -> Request {
        self.post(|e| e.get(peer, key, offset, vec![0; len]))
    }

    /// Read `dst.len()` bytes of `peer`'s region `key` at `offset` straight
    /// into `dst`: the transport writes each frame of the reply there, and
    /// the completion carries no data. `dst` must not be accessed until the
    /// get completes.
    pub fn get_into(
        &self,
        peer: PeerId,
        key: RegionKey,
        offset: u64,
        dst: Arc<dyn MemoryRegion>,
    ) -> Request {
        self.post(|e| e.get_into(peer, key, offset, dst))
    }

    /// Which of `addrs` this endpoint can reach, found without connecting
    /// (a link-level probe over LLC, repeated a few times within
    /// `timeout`): what an MPI component reports as reachable, so that
    /// peers on another Ethernet segment go to another transport. Waits
    /// only while some answer is missing.
    pub fn reachable(&self, addrs: &[Addr], timeout: Duration) -> Vec<bool> {
        let mut known: Vec<Option<bool>> = {
            let mut c = self.core();
            addrs.iter().map(|a| c.t.probe(a)).collect()
        };
        let start = Instant::now();
        let mut probes = 1u32;
        let _ = self.shared.drive(Some(start + timeout), |c| {
            for (k, a) in known.iter_mut().zip(addrs) {
                if k.is_none() && c.t.probe_answered(a) {
                    *k = Some(true);
                }
            }
            if known.iter().all(Option::is_some) {
                return Some(());
            }
            // Repeat unanswered probes four times over the timeout: a TEST
            // frame is not retransmitted by anyone else.
            if Instant::now().saturating_duration_since(start) >= timeout * probes / 4 {
                probes += 1;
                for (k, a) in known.iter_mut().zip(addrs) {
                    if k.is_none() {
                        *k = c.t.probe(a);
                    }
                }
            }
            None
        });
        known.into_iter().map(|k| k == Some(true)).collect()
    }

    /// Make progress until everything sent so far has reached its peers
    /// (the last step before a process exits, as in MPI_Finalize).
    pub fn flush(&self, timeout: Option<Duration>) -> Result<(), Error> {
        self.shared
            .drive(deadline(timeout), |c| c.flushed().then_some(()))
    }

    /// Deliver what is queued and close every connection, waiting at most
    /// `timeout` for the queues to drain.
    pub fn close(&self, timeout: Duration) -> Result<(), Error> {
        let res = self
            .shared
            .drive(deadline(Some(timeout)), |c| c.flushed().then_some(()));
        self.core().close_all();
        let _ = self
            .shared
            .drive(deadline(Some(Duration::from_millis(10))), |_| None::<()>);
        res
    }
}

impl<T: Transport> Drop for Endpoint<T> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let slot = self.thread.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = slot.take() {
            let _ = t.join();
        }
    }
}

/// The longest message [`Endpoint::am_post_copy`] sends without
/// allocating.
pub const AM_COPY_INLINE: usize = crate::engine::SHORT_PREFIX;

/// The deadline `timeout` from now, on the clock the pacer reads.
/// A waiter idle this long while it spins yields the core between rounds:
/// a reply within it is caught at once, and a waiter that shares its core
/// with the process it waits for (more busy threads than cores: incast,
/// several ranks per core) lets that one run instead of taking its time
/// slice.
const YIELD_AFTER: Duration = Duration::from_micros(5);

/// One idle turn of a spinning waiter.
#[inline]
fn spin_or_yield(pacer: &Pacer, now: Instant) {
    if pacer.idle_for(now) >= YIELD_AFTER {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

impl<T: Transport> Shared<T> {
    /// Make progress until `check` returns `Some` or the deadline passes,
    /// paced by [`Pacer`]: busy-poll while things move and for the spin
    /// budget after, then sleep in poll(2) on the transport's descriptors
    /// without the lock (or, with a progress thread, until it reports a
    /// round that moved something).
    fn drive<R>(
        &self,
        deadline: Option<Instant>,
        mut check: impl FnMut(&mut Core<T>) -> Option<R>,
    ) -> Result<R, Error> {
        // Made at the first idle round: a wait that finds its answer at
        // once (a send handed to the transport) reads no clock.
        let mut pacer: Option<Pacer> = None;
        let mut fds = Vec::new();
        loop {
            let threaded = self.threaded.load(Ordering::Relaxed);
            let seen = if threaded { *self.generation.lock() } else { 0 };
            let mut c = self.core.lock();
            if let Some(r) = check(&mut c) {
                return Ok(r);
            }
            let moved = c.progress()?;
            let done = check(&mut c);
            if c.engine.has_callbacks() {
                drop(c);
                self.deliver();
                if let Some(r) = done {
                    return Ok(r);
                }
                continue;
            }
            if let Some(r) = done {
                return Ok(r);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout);
            }
            let pacer = pacer.get_or_insert_with(|| Pacer::new(self.spin, now));
            match pacer.after_round(moved, now) {
                Pace::Busy => continue,
                Pace::Spin => {
                    drop(c);
                    spin_or_yield(pacer, now);
                    continue;
                }
                Pace::Sleep => {}
            }
            fds.clear();
            let allowed = c.t.prepare_wait(&mut fds);
            drop(c);
            let sleep = Pacer::sleep_limit(allowed, Some(self.max_sleep), deadline, now)
                .unwrap_or(self.max_sleep);
            if threaded {
                // The progress thread polls the transport and tells us when
                // it moved something.
                let mut g = self.generation.lock();
                if *g == seen && !sleep.is_zero() {
                    self.progressed.wait_for(&mut g, sleep);
                }
            } else if !sleep.is_zero() {
                sys::poll_readable(&fds, sleep);
            }
            pacer.woke(Instant::now());
        }
    }

    /// Run active-message handlers and failure callbacks, in arrival order.
    /// Whoever holds the callbacks lock delivers; a handler that calls back
    /// into the endpoint finds it taken and leaves the rest to its caller.
    fn deliver(&self) {
        let Ok(mut cb) = self.callbacks.try_lock() else {
            return;
        };
        loop {
            let (ams, failures): (Vec<AmDelivery>, Vec<PeerFailure>) = {
                let mut c = self.core.lock();
                (
                    std::mem::take(&mut c.engine.am_deliveries),
                    std::mem::take(&mut c.engine.failures),
                )
            };
            if ams.is_empty() && failures.is_empty() {
                return;
            }
            let mut spent = Vec::new();
            for d in ams {
                match cb.am.get_mut(&d.handler) {
                    Some(h) => h(d.peer, &d.packet[HEADER_LEN..]),
                    None => {
                        cb.unhandled_am += 1;
                        tracing::debug!(handler = d.handler, "active message for no handler");
                    }
                }
                if d.packet.capacity() >= RECYCLE_FROM {
                    spent.push(d.packet);
                }
            }
            if !spent.is_empty() {
                // Large buffers go back to the transport for the next large
                // messages (fresh ones cost page faults and clearing).
                let mut c = self.core.lock();
                for buf in spent {
                    c.t.recycle(buf);
                }
            }
            for f in failures {
                if let Some(h) = cb.on_failure.as_mut() {
                    h(f.peer, &f.error);
                }
            }
        }
    }
}

/// Delivered packets at least this large are given back to the transport
/// ([`Transport::recycle`]), which keeps what it can reuse; smaller ones
/// are simply freed.
const RECYCLE_FROM: usize = 512;

/// The progress thread, paced by [`Pacer`] like every waiter: progress
/// while anything moves and for the spin budget after, then sleep in
/// poll(2) until the transport has work (or `max_sleep`, to notice a stop
/// request).
fn progress_thread<T: Transport>(s: &Shared<T>) {
    let mut pacer = Pacer::new(s.spin, Instant::now());
    let mut fds = Vec::new();
    while !s.stop.load(Ordering::Relaxed) {
        let mut c = s.core.lock();
        let moved = match c.progress() {
            Ok(m) => m,
            Err(err) => {
                tracing::warn!(%err, "progress thread: transport error");
                false
            }
        };
        let callbacks = c.engine.has_callbacks();
        let now = Instant::now();
        match pacer.after_round(moved || callbacks, now) {
            Pace::Busy => {
                // Let a waiting application thread in before the next round.
                parking_lot::MutexGuard::unlock_fair(c);
                if callbacks {
                    s.deliver();
                }
                *s.generation.lock() += 1;
                s.progressed.notify_all();
                continue;
            }
            Pace::Spin => {
                parking_lot::MutexGuard::unlock_fair(c);
                spin_or_yield(&pacer, now);
                continue;
            }
            Pace::Sleep => {}
        }
        fds.clear();
        let allowed = c.t.prepare_wait(&mut fds);
        drop(c);
        let sleep =
            Pacer::sleep_limit(allowed, Some(s.max_sleep), None, now).unwrap_or(s.max_sleep);
        if !sleep.is_zero() {
            sys::poll_readable(&fds, sleep);
        }
        pacer.woke(Instant::now());
    }
}
