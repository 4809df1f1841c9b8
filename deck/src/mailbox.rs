//! The Rust API: a [`Deck`] per process, its [`Mailbox`]es, [`Msg`]s.
//!
//! ```no_run
//! use deck::{Deck, Msg};
//! let deck = Deck::init()?;
//! if deck.node() == 0 {
//!     let mb = deck.create("results")?;
//!     let mut m = Msg::new(64);
//!     for _ in 1..deck.numnodes() {
//!         mb.retrv(&mut m)?;
//!         let mut x = [0u64];
//!         m.unpack(&mut x)?;
//!     }
//! } else {
//!     let mb = deck.clone_mailbox("results")?;
//!     let mut m = Msg::new(64);
//!     m.pack(&[u64::from(deck.node())])?;
//!     mb.post(&m)?;
//! }
//! deck.done()?;
//! # Ok::<(), deck::DeckError>(())
//! ```

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::DeckError;
use crate::msg::Msg;
use crate::runtime::{DeckStats, Inner, MboxAddr};

/// This process's DECK: its node in the job, its mailboxes.
pub struct Deck {
    inner: Arc<Inner>,
    background: Option<JoinHandle<()>>,
}

impl Deck {
    /// Join the job `deckrun` started (or, started on its own, be a job of
    /// one node).
    pub fn init() -> Result<Deck, DeckError> {
        let inner = Inner::start()?;
        let background = inner.start_background();
        let deck = Deck { inner, background };
        // Every node is up and reachable before the application starts.
        deck.barrier()?;
        Ok(deck)
    }

    /// A job of one node per spec, all in this process (each `Deck` may
    /// move to a thread of its own): for tests, and for programs that run
    /// DECK nodes as threads. `clone_wait` bounds `clone_mailbox`.
    pub fn in_process(
        specs: &[msg_layer::transport::TransportSpec],
        clone_wait: std::time::Duration,
    ) -> Result<Vec<Deck>, DeckError> {
        Inner::in_process(specs)?
            .into_iter()
            .map(|mut inner| {
                if let Some(i) = Arc::get_mut(&mut inner) {
                    i.set_clone_wait(clone_wait);
                }
                let background = inner.start_background();
                Ok(Deck { inner, background })
            })
            .collect()
    }

    /// This process's node number, 0..numnodes.
    pub fn node(&self) -> u32 {
        self.inner.node()
    }

    /// Nodes in the job.
    pub fn numnodes(&self) -> u32 {
        self.inner.numnodes()
    }

    /// The transport's name (e.g. `llc/af_xdp (native, copy)`).
    pub fn transport_name(&self) -> &str {
        self.inner.transport_name()
    }

    /// Wait until every node reached the barrier.
    pub fn barrier(&self) -> Result<(), DeckError> {
        self.inner.barrier()
    }

    /// DECK's counters.
    pub fn stats(&self) -> DeckStats {
        self.inner.stats()
    }

    /// The message-layer endpoint underneath (`None` in a job of one
    /// node): for measurements that compare DECK with the layer it runs on,
    /// over the same connections. Its tagged messages in contexts other
    /// than [`crate::wire::DATA_CONTEXT`] do not disturb DECK.
    pub fn message_layer(
        &self,
    ) -> Option<&msg_layer::Endpoint<msg_layer::transport::AnyTransport>> {
        self.inner.endpoint()
    }

    /// The message layer's peer for `node` (with [`Deck::message_layer`]).
    pub fn peer_of(&self, node: u32) -> Option<msg_layer::PeerId> {
        self.inner.peer_of(node)
    }

    /// The message layer's and the transport's counters.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.inner.counters()
    }

    /// Create a mailbox and bind `name` to it in the job's naming service.
    pub fn create(&self, name: &str) -> Result<Mailbox, DeckError> {
        let addr = self.inner.create(name)?;
        Ok(Mailbox {
            inner: self.inner.clone(),
            addr,
            owned: true,
            name: name.to_owned(),
        })
    }

    /// A handle to post to the mailbox named `name`, wherever it is;
    /// waits (bounded: `DECK_CLONE_WAIT_MS`, 30 s by default) for a name
    /// not created yet.
    pub fn clone_mailbox(&self, name: &str) -> Result<Mailbox, DeckError> {
        let addr = self.inner.lookup(name)?;
        Ok(Mailbox {
            inner: self.inner.clone(),
            addr,
            owned: false,
            name: name.to_owned(),
        })
    }

    /// Leave the job: a barrier with every node, then everything sent is
    /// delivered and the connections close.
    pub fn done(mut self) -> Result<(), DeckError> {
        let res = self.inner.finish();
        if let Some(t) = self.background.take() {
            let _ = t.join();
        }
        res
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }
}

impl Drop for Deck {
    fn drop(&mut self) {
        self.inner.stop_background();
        if let Some(t) = self.background.take() {
            let _ = t.join();
        }
    }
}

/// A mailbox: owned (made by [`Deck::create`]: post and retrieve) or a
/// clone (made by [`Deck::clone_mailbox`]: post only).
#[derive(Clone)]
pub struct Mailbox {
    inner: Arc<Inner>,
    addr: MboxAddr,
    owned: bool,
    name: String,
}

impl std::fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mailbox")
            .field("name", &self.name)
            .field("node", &self.addr.node)
            .field("id", &self.addr.id)
            .field("owned", &self.owned)
            .finish()
    }
}

impl Mailbox {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it lives.
    pub fn addr(&self) -> MboxAddr {
        self.addr
    }

    /// Made by `create` here (not a clone).
    pub fn is_owner(&self) -> bool {
        self.owned
    }

    /// Post `msg`'s data. Small messages (up to the eager limit, 16 KiB)
    /// are copied and the call returns at once; larger ones are sent
    /// straight from `msg` and the call returns when the owner has
    /// received them.
    pub fn post(&self, msg: &Msg) -> Result<(), DeckError> {
        self.inner
            .post(self.addr, msg.data())
            .map_err(|e| self.named(e))
    }

    /// Take the first message (in arrival order) into `msg`, waiting for
    /// one. Owner only. A message larger than `msg` stays first in the
    /// mailbox and the call fails with [`DeckError::MsgTooBig`]
    /// ([`Msg::needed`] says its size).
    pub fn retrv(&self, msg: &mut Msg) -> Result<(), DeckError> {
        if !self.owned {
            return Err(DeckError::NotOwner(self.name.clone()));
        }
        self.inner
            .retrieve(self.addr.id, msg)
            .map_err(|e| self.named(e))
    }

    /// Destroy it (owner: unbind the name; messages waiting are refused and
    /// later posts fail). Destroying a clone only drops the handle.
    pub fn destroy(self) -> Result<(), DeckError> {
        if self.owned {
            self.inner.destroy(self.addr.id).map_err(|e| self.named(e))
        } else {
            Ok(())
        }
    }

    /// Errors name the mailbox by its name, not its number.
    fn named(&self, e: DeckError) -> DeckError {
        match e {
            DeckError::Destroyed(_) => DeckError::Destroyed(self.name.clone()),
            e => e,
        }
    }
}

/// The runtime behind a [`Deck`], for the C API.
pub(crate) fn inner_of(d: &Deck) -> &Arc<Inner> {
    d.inner()
}
