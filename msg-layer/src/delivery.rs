//! Pull-style delivery: what the endpoint has for its user, in the order it
//! happened, taken with [`crate::Endpoint::poll_event`].
//!
//! The other style is callbacks ([`crate::Endpoint::set_am_handler`],
//! [`crate::Endpoint::on_peer_failure`]), run by whichever thread made the
//! progress. A caller that must run its own code on its own thread (the MPI
//! shim: Open MPI built without thread support is never entered
//! concurrently) pulls instead: active messages, peer ends, completions of
//! watched requests and releases of lent bodies all wait in one queue, in
//! order, whoever made the progress (the caller, a nested call, or the
//! progress thread).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

use parking_lot::Mutex;

use crate::engine::{AmDelivery, Completion, PeerFailure};
use crate::error::Error;
use crate::matching::PeerId;
use crate::wire::HEADER_LEN;

/// A pending operation. Copyable like an MPI_Request; its result is taken
/// once, by the `test` or `wait` that sees it complete.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[must_use = "a request must be tested or waited for"]
pub struct Request(pub(crate) u64);

/// Something for the endpoint's user.
#[derive(Debug)]
pub enum Event {
    /// An active message arrived.
    Message(ActiveMessage),
    /// A peer ended (closed in order, or failed); its requests failed with
    /// `error`.
    PeerEnded {
        /// The peer.
        peer: PeerId,
        /// What its requests failed with.
        error: Error,
    },
    /// A request given to [`crate::Endpoint::watch`] completed.
    Completed {
        /// The request.
        request: Request,
        /// Its result.
        result: Result<Completion, Error>,
    },
    /// The transport let go of a lent body (the peer acknowledged it, or
    /// its connection ended): the [`ReleaseNotice`] with this token was
    /// dropped.
    Released(u64),
}

/// An active message: the sender, the handler id, the payload.
#[derive(Debug)]
pub struct ActiveMessage {
    /// The sender.
    pub peer: PeerId,
    /// The handler id it was sent to.
    pub handler: u16,
    /// The whole packet; the payload starts at [`HEADER_LEN`].
    pub(crate) packet: Vec<u8>,
}

impl ActiveMessage {
    /// The payload.
    pub fn data(&self) -> &[u8] {
        &self.packet[HEADER_LEN..]
    }
}

/// The queue behind [`crate::Endpoint::poll_event`].
#[derive(Debug, Default)]
pub(crate) struct EventQueue {
    /// A `parking_lot` lock: taken several times per message, it costs
    /// less than the standard one (no poisoning to check).
    events: Mutex<VecDeque<Event>>,
    /// Set while `events` may hold something (written under its lock): an
    /// idle poll takes no lock.
    ready: AtomicBool,
}

impl EventQueue {
    pub fn push(&self, e: Event) {
        let mut q = self.events.lock();
        q.push_back(e);
        self.ready.store(true, Ordering::Release);
    }

    /// Queue the active messages, then the peer ends, the engine collected
    /// (emptying both lists), under one lock.
    pub fn take_from(&self, ams: &mut Vec<AmDelivery>, failures: &mut Vec<PeerFailure>) {
        if ams.is_empty() && failures.is_empty() {
            return;
        }
        let mut q = self.events.lock();
        for d in ams.drain(..) {
            q.push_back(Event::Message(ActiveMessage {
                peer: d.peer,
                handler: d.handler,
                packet: d.packet,
            }));
        }
        for f in failures.drain(..) {
            q.push_back(Event::PeerEnded {
                peer: f.peer,
                error: f.error,
            });
        }
        self.ready.store(true, Ordering::Release);
    }

    pub fn pop(&self) -> Option<Event> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        let mut q = self.events.lock();
        let e = q.pop_front();
        if q.is_empty() {
            self.ready.store(false, Ordering::Release);
        }
        e
    }
}

/// Reports [`Event::Released`] with its token when dropped. Put it in the
/// owner of a lent body (`Bytes::from_owner`) to learn when the transport
/// has let go of the memory, on whatever thread that happens.
#[derive(Debug)]
pub struct ReleaseNotice {
    token: u64,
    queue: Weak<EventQueue>,
}

impl ReleaseNotice {
    pub(crate) fn new(token: u64, queue: Weak<EventQueue>) -> Self {
        ReleaseNotice { token, queue }
    }
}

impl Drop for ReleaseNotice {
    fn drop(&mut self) {
        if let Some(q) = self.queue.upgrade() {
            q.push(Event::Released(self.token));
        }
    }
}
