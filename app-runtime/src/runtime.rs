//! [`Runtime`]: an API's endpoints and state, the pump that routes the
//! endpoints' events into the state, the waiter, and the background thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::pace::{Instant as PaceInstant, Pace, Pacer};
use msg_layer::transport::AnyTransport;
use msg_layer::{ActiveMessage, Endpoint, Error, Event, PeerId};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::peers::{Ended, Ranks};
use crate::sys::{lower_priority, Wake};

/// The endpoint every API opens: any transport a spec names.
pub type Ep = Endpoint<AnyTransport>;

/// What an API keeps under the runtime's lock, and how it takes the
/// endpoints' events.
pub trait Api: Send + 'static {
    /// Take one event of the endpoint in `cx.slot()`. A peer's end is
    /// already in [`Runtime::ended`] when it arrives here.
    fn route(&mut self, cx: &mut Cx<'_>, ev: Event);

    /// After the events of a pump: the API's own timers. True when that
    /// moved something.
    fn after_pump(&mut self, _cx: &mut Cx<'_>) -> bool {
        false
    }
}

/// How a runtime waits and what its background thread does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Busy-poll this long after the last activity before sleeping.
    pub spin: Duration,
    /// Past this much idle time within the spin, yield the core between
    /// polls (another rank on the core runs instead).
    pub yield_after: Duration,
    /// Longest single sleep of a waiter (a local post wakes it earlier).
    pub max_sleep: Duration,
    /// The background thread's period: how often it looks whether the
    /// application still calls.
    pub background_period: Duration,
    /// Once the application computes (a period without a call), whether
    /// the background thread sleeps on the transports' descriptors and
    /// makes a round as soon as a frame comes (the MPI shim: a computing
    /// rank's peers see their sends acknowledged at once), or keeps
    /// looking once a period and makes one round then (DECK, BMI: no
    /// wake-up per frame on the receive path, which cost DECK's 8-byte
    /// ping-pong about 0.1 µs).
    pub background_on_traffic: bool,
}

impl Default for Options {
    /// The message layer's pacing: 200 µs of spin, yielding after 5 µs,
    /// sleeps of at most 1 ms, a background look every 2 ms.
    fn default() -> Self {
        Options {
            spin: Duration::from_micros(200),
            yield_after: Duration::from_micros(5),
            max_sleep: Duration::from_millis(1),
            background_period: Duration::from_millis(2),
            background_on_traffic: true,
        }
    }
}

/// One API instance: its endpoints (slots, opened at once or on first use),
/// the job's ranks, the peers that ended, and its state `S`.
pub struct Runtime<S: Api> {
    slots: Vec<OnceLock<Ep>>,
    ranks: Ranks,
    st: Mutex<S>,
    /// Wakes waiters of a runtime without endpoints (a job of one).
    local: Condvar,
    ended: Mutex<Ended>,
    opts: Options,
    /// Calls of the application that made progress: the background thread
    /// stays away while this grows.
    calls: AtomicU64,
    background_rounds: AtomicU64,
    stop: AtomicBool,
    /// Sends a call left held for a bundle, for the background thread.
    held: AtomicBool,
    background: AtomicBool,
    wake: Wake,
}

/// A packet to post once the state's lock is released.
struct Out {
    slot: usize,
    peer: PeerId,
    handler: u16,
    data: Bytes,
}

/// What [`Api::route`] may use besides its state: the event's endpoint,
/// the job's ranks, the ended peers, and posts and recycling deferred until
/// the state's lock is released.
pub struct Cx<'a> {
    slot: usize,
    slots: &'a [OnceLock<Ep>],
    ranks: &'a Ranks,
    ended: &'a Mutex<Ended>,
    out: &'a mut Vec<Out>,
    spent: &'a mut Vec<(usize, ActiveMessage)>,
}

impl<'a> Cx<'a> {
    /// The endpoint the event came from (its slot).
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// That endpoint (`None` in a runtime without one).
    pub fn ep(&self) -> Option<&'a Ep> {
        self.ep_of(self.slot)
    }

    /// The endpoint of another slot, if open.
    pub fn ep_of(&self, slot: usize) -> Option<&'a Ep> {
        self.slots.get(slot).and_then(OnceLock::get)
    }

    /// The job's ranks.
    pub fn ranks(&self) -> &Ranks {
        self.ranks
    }

    /// Why `peer` of this slot ended, if it did.
    pub fn ended(&self, peer: PeerId) -> Option<Error> {
        self.ended.lock().cause(self.slot, peer).cloned()
    }

    /// Post an active message to `peer` of this slot once the lock is
    /// released (a peer that ended gets nothing: its end is routed).
    pub fn post(&mut self, peer: PeerId, handler: u16, data: impl Into<Bytes>) {
        self.out.push(Out {
            slot: self.slot,
            peer,
            handler,
            data: data.into(),
        });
    }

    /// Give a delivered message's buffer back to its endpoint once the lock
    /// is released.
    pub fn recycle(&mut self, msg: ActiveMessage) {
        self.spent.push((self.slot, msg));
    }
}

impl<S: Api> Runtime<S> {
    /// A runtime with `slots` endpoints (none open yet), the job's `ranks`
    /// and the API's `state`.
    pub fn new(slots: usize, ranks: Ranks, state: S, opts: Options) -> std::io::Result<Self> {
        Ok(Runtime {
            slots: (0..slots).map(|_| OnceLock::new()).collect(),
            ranks,
            st: Mutex::new(state),
            local: Condvar::new(),
            ended: Mutex::new(Ended::default()),
            opts,
            calls: AtomicU64::new(0),
            background_rounds: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            held: AtomicBool::new(false),
            background: AtomicBool::new(false),
            wake: Wake::new()?,
        })
    }

    /// A runtime over the one endpoint `ep`.
    pub fn with_endpoint(ep: Ep, ranks: Ranks, state: S, opts: Options) -> std::io::Result<Self> {
        let rt = Runtime::new(1, ranks, state, opts)?;
        rt.set_ep(0, ep);
        Ok(rt)
    }

    /// Put `ep` in `slot` (a slot is set once; a second endpoint is
    /// dropped: the first stays).
    pub fn set_ep(&self, slot: usize, ep: Ep) {
        ep.set_pull_delivery(true);
        let _ = self.slots[slot].set(ep);
    }

    /// The endpoint of `slot`, opening it with `open` on first use.
    pub fn ep_or_open<E>(
        &self,
        slot: usize,
        open: impl FnOnce() -> Result<Ep, E>,
    ) -> Result<&Ep, E> {
        if let Some(ep) = self.slots[slot].get() {
            return Ok(ep);
        }
        let ep = open()?;
        self.set_ep(slot, ep);
        Ok(self.slots[slot].get().expect("just set"))
    }

    /// The endpoint of `slot`, if open.
    pub fn ep(&self, slot: usize) -> Option<&Ep> {
        self.slots.get(slot).and_then(OnceLock::get)
    }

    /// The open endpoints with their slots.
    pub fn eps(&self) -> impl Iterator<Item = (usize, &Ep)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.get().map(|ep| (i, ep)))
    }

    /// The job's ranks.
    pub fn ranks(&self) -> &Ranks {
        &self.ranks
    }

    /// The API's state, locked.
    pub fn lock(&self) -> MutexGuard<'_, S> {
        self.st.lock()
    }

    /// Why `peer` of `slot` ended, if it did.
    pub fn ended(&self, slot: usize, peer: PeerId) -> Option<Error> {
        self.ended.lock().cause(slot, peer).cloned()
    }

    /// Why `rank`'s peer (on slot 0) ended, if it did.
    pub fn rank_ended(&self, rank: u32) -> Option<Error> {
        self.ranks.peer(rank).and_then(|p| self.ended(0, p))
    }

    /// Wake the waiters of a runtime without endpoints: the state changed
    /// (this process posted to itself).
    pub fn notify_local(&self) {
        self.local.notify_all();
    }

    /// The application made progress itself (the background thread stays
    /// away while it does). Counted, not timed: a clock read on every idle
    /// turn of a progress loop (Open MPI's `opal_progress`) costs more than
    /// the rest of an idle call. A load and a store, not a locked add: an
    /// increment lost between two racing callers still shows a change.
    #[inline]
    pub fn note_call(&self) {
        let n = self.calls.load(Ordering::Relaxed);
        self.calls.store(n.wrapping_add(1), Ordering::Relaxed);
    }

    /// Rounds the background thread made for an idle application.
    pub fn background_rounds(&self) -> u64 {
        self.background_rounds.load(Ordering::Relaxed)
    }

    /// The message layer's and the transports' counters, every endpoint's.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.eps().flat_map(|(_, ep)| ep.counters()).collect()
    }

    /// Take every event of every endpoint, noting ended peers, and hand
    /// each with its slot to `each`. True when there was any.
    pub fn drain(&self, mut each: impl FnMut(usize, Event)) -> bool {
        let mut any = false;
        for (slot, ep) in self.eps() {
            while let Some(ev) = ep.poll_event() {
                any = true;
                if let Event::PeerEnded { peer, error } = &ev {
                    self.ended.lock().note(slot, *peer, error);
                }
                each(slot, ev);
            }
        }
        any
    }

    /// Route every event the endpoints have into the state, run its timers,
    /// then post what routing asked and recycle what it spent. True when
    /// anything moved.
    pub fn pump(&self) -> bool {
        let mut out = Vec::new();
        let mut spent = Vec::new();
        let any = {
            let mut st = self.st.lock();
            let routed = self.drain(|slot, ev| {
                let mut cx = self.cx(slot, &mut out, &mut spent);
                st.route(&mut cx, ev);
            });
            let mut cx = self.cx(0, &mut out, &mut spent);
            st.after_pump(&mut cx) || routed
        };
        for (slot, msg) in spent {
            if let Some(ep) = self.ep(slot) {
                ep.recycle(msg);
            }
        }
        for o in out {
            if let Some(ep) = self.ep(o.slot) {
                if let Err(e) = ep.am_post(o.peer, o.handler, o.data) {
                    tracing::debug!(peer = o.peer, %e, "post to a peer that ended");
                }
            }
        }
        any
    }

    fn cx<'a>(
        &'a self,
        slot: usize,
        out: &'a mut Vec<Out>,
        spent: &'a mut Vec<(usize, ActiveMessage)>,
    ) -> Cx<'a> {
        Cx {
            slot,
            slots: &self.slots,
            ranks: &self.ranks,
            ended: &self.ended,
            out,
            spent,
        }
    }

    /// One round: every endpoint's progress, then the pump. True when
    /// anything moved.
    pub fn progress(&self) -> Result<bool, Error> {
        let mut moved = false;
        for (_, ep) in self.eps() {
            moved |= ep.progress()?;
        }
        Ok(self.pump() || moved)
    }

    /// Make progress until `cond` (checked under the state's lock) gives
    /// something, or `timeout` passes (then `None`), paced by the message
    /// layer's policy: poll while rounds move, spin after the last one that
    /// did, then sleep in the endpoints' wait (or, without endpoints, until
    /// [`Runtime::notify_local`]).
    pub fn wait_for<R>(
        &self,
        timeout: Option<Duration>,
        mut cond: impl FnMut(&mut S) -> Option<R>,
    ) -> Result<Option<R>, Error> {
        let start = Instant::now();
        let mut pacer: Option<Pacer> = None;
        loop {
            if let Some(r) = cond(&mut self.st.lock()) {
                return Ok(Some(r));
            }
            self.note_call();
            let moved = self.progress()?;
            let mut st = self.st.lock();
            if let Some(r) = cond(&mut st) {
                return Ok(Some(r));
            }
            let waited = start.elapsed();
            let left = match timeout {
                Some(t) if waited >= t => return Ok(None),
                Some(t) => t - waited,
                None => Duration::MAX,
            };
            let now = PaceInstant::now();
            let pacer = pacer.get_or_insert_with(|| Pacer::new(self.opts.spin, now));
            match pacer.after_round(moved, now) {
                Pace::Busy => continue,
                Pace::Spin => {
                    drop(st);
                    if pacer.idle_for(now) >= self.opts.yield_after {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                    continue;
                }
                Pace::Sleep => {}
            }
            let sleep = left.min(self.opts.max_sleep);
            let eps: Vec<&Ep> = self.eps().map(|(_, ep)| ep).collect();
            match eps.as_slice() {
                [] => {
                    self.local.wait_for(&mut st, sleep);
                }
                [one] => {
                    drop(st);
                    one.wait_ready(sleep);
                }
                // Several endpoints (BMI's methods): a share of the sleep
                // on each in turn.
                many => {
                    drop(st);
                    for ep in many {
                        ep.wait_ready(sleep / many.len() as u32);
                    }
                }
            }
            pacer.woke(PaceInstant::now());
        }
    }

    /// A call left sends held for a bundle: the background thread (if it
    /// runs) sends them at its next look should no call come first.
    pub fn note_held(&self) {
        if self.background.load(Ordering::Relaxed) && self.eps().any(|(_, ep)| ep.holding()) {
            self.held.store(true, Ordering::Release);
        }
    }

    /// Start the background thread, named `name`, that makes progress
    /// while the application does not call: it looks every period whether
    /// the application called; once a whole period passed without a call
    /// it makes a round at each look, or, with
    /// [`Options::background_on_traffic`], whenever the transport has work
    /// (it sleeps in poll(2) on the transports' descriptors), at niceness 19 so that it
    /// takes no time a computing rank on its core needs. It ends at
    /// [`Runtime::stop_background`] or when the runtime is dropped. This
    /// returns once the thread has lowered its priority.
    pub fn start_background(self: &Arc<Self>, name: &str) -> std::io::Result<JoinHandle<()>> {
        self.stop.store(false, Ordering::Relaxed);
        self.background.store(true, Ordering::Relaxed);
        let rt = Arc::downgrade(self);
        let (started, ready) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                lower_priority();
                let _ = started.send(());
                background(rt)
            })?;
        let _ = ready.recv();
        Ok(handle)
    }

    /// Ask the background thread to end, and wake it.
    pub fn stop_background(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.background.store(false, Ordering::Relaxed);
        self.wake.signal();
    }

    /// One background look: sleep, then a round if the application made
    /// none since `seen`. False when the thread should end.
    fn background_look(&self, seen: &mut u64, computing: &mut bool) -> bool {
        let period = self.opts.background_period;
        let wake = [self.wake.fd()];
        match (
            self.eps().next(),
            *computing && self.opts.background_on_traffic,
        ) {
            (Some((_, ep)), true) => ep.wait_ready_or(&wake, period),
            _ => msg_layer::sys::poll_readable(&wake, period),
        }
        self.wake.clear();
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        // Cleared before sending: a burst that starts after this is noted
        // again.
        if self.held.swap(false, Ordering::AcqRel) {
            for (_, ep) in self.eps() {
                ep.send_held();
            }
        }
        let now = self.calls.load(Ordering::Relaxed);
        if now != *seen {
            *seen = now;
            *computing = false;
            return true; // the application makes progress itself
        }
        *computing = true;
        self.background_rounds.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = self.progress() {
            tracing::warn!(%e, "background progress");
        }
        true
    }
}

/// The background thread's body: looks until told to stop or the runtime
/// is gone.
fn background<S: Api>(rt: Weak<Runtime<S>>) {
    let (mut seen, mut computing) = (u64::MAX, false);
    loop {
        let Some(rt) = rt.upgrade() else { return };
        if rt.stop.load(Ordering::Relaxed) || !rt.background_look(&mut seen, &mut computing) {
            return;
        }
    }
}
