//! Peers: the `Hello` that identifies each end and grants its eager window,
//! credit (piggybacked on every packet, or sent alone when much is owed),
//! the per-peer send queue, and what a peer's failure fails.

use std::collections::VecDeque;

use bytes::Bytes;

use super::packet::{starts_bundle, Out, PacketHead};
use super::{Completion, Engine, Outlet, PeerFailure, ReqState, Unexpected};
use crate::addr::Addr;
use crate::config::INITIAL_CREDIT;
use crate::error::{Error, PeerEnd};
use crate::matching::PeerId;
use crate::transport::{ConnId, FailureCause, SendError};
use crate::wire::{flags, Header, Kind, BUNDLE_ITEM_PREFIX, HEADER_LEN};

#[derive(Debug, PartialEq, Eq)]
pub(super) enum PeerState {
    /// We wait for the peer's `Hello` (it connects to us).
    Awaiting,
    /// Connection opened or identified: traffic may flow.
    Ready,
    /// Ended: closed in order, or failed with a cause.
    Failed(PeerEnd),
}

#[derive(Debug)]
pub(super) struct Peer {
    pub addr: Option<Addr>,
    /// The connection we send on.
    pub conn: Option<ConnId>,
    pub state: PeerState,
    /// Eager credit we may still use towards the peer.
    pub credit: u64,
    /// Credit we owe the peer (its messages we consumed).
    pub owed: u64,
    /// Bytes of its unexpected messages we buffer, as credit counts them.
    pub unexpected: usize,
    pub queue: VecDeque<Out>,
    /// The queue's head waits for credit or transport room (what is queued
    /// otherwise is only waiting for the next transmit).
    pub stalled: bool,
    /// The peer's `Hello` said it takes bundles.
    pub bundles: bool,
    /// On the engine's attention list.
    pub marked: bool,
}

#[derive(Debug)]
pub(super) enum ConnRole {
    /// Accepted; the peer has not said who it is yet.
    Unidentified,
    Peer(PeerId),
}

/// What [`Engine::add_peer`] decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AddPeer {
    /// Known already, or added to wait for its connection.
    Known(PeerId),
    /// This side connects: open a connection and call [`Engine::connected`].
    Connect,
}

impl Engine {
    pub(super) fn new_peer(&mut self, addr: Option<Addr>, state: PeerState) -> PeerId {
        let id = self.peers.len() as PeerId;
        self.peers.push(Peer {
            addr,
            conn: None,
            state,
            credit: INITIAL_CREDIT as u64,
            owed: 0,
            unexpected: 0,
            queue: VecDeque::new(),
            stalled: false,
            bundles: false,
            marked: false,
        });
        if let Some(a) = addr {
            self.by_addr.insert(a, id);
        }
        id
    }

    fn hello(&self) -> Out {
        let mut hdr = Header::new(Kind::Hello);
        hdr.len = self.cfg.eager_window as u64;
        hdr.flags = flags::BUNDLES;
        Out::with_body(hdr, Bytes::from(self.local.to_string()))
    }

    /// The peer at `addr` if we have a connection to send to it on.
    pub fn connected_peer(&self, addr: &Addr) -> Option<PeerId> {
        let &p = self.by_addr.get(addr)?;
        self.peers[p as usize].conn.is_some().then_some(p)
    }

    /// The transport opened `conn` to `addr` for us (this side initiates):
    /// the peer, which greets on it first.
    pub fn connected(&mut self, addr: Addr, conn: ConnId) -> PeerId {
        let p = match self.by_addr.get(&addr) {
            Some(&p) => p,
            None => self.new_peer(Some(addr), PeerState::Ready),
        };
        self.by_conn.insert(conn, ConnRole::Peer(p));
        self.last_conn = None;
        let hello = self.hello();
        let peer = &mut self.peers[p as usize];
        peer.conn = Some(conn);
        peer.state = PeerState::Ready;
        peer.queue.push_front(hello);
        self.mark(p);
        p
    }

    /// Know a peer by address, MPI style: of each pair, the endpoint with the
    /// smaller address connects and the other waits for it.
    pub fn add_peer(&mut self, addr: Addr) -> Result<AddPeer, Error> {
        if let Some(&p) = self.by_addr.get(&addr) {
            return Ok(AddPeer::Known(p));
        }
        if self.local < addr {
            Ok(AddPeer::Connect)
        } else if self.local == addr {
            Ok(AddPeer::Known(self.own_peer()))
        } else {
            Ok(AddPeer::Known(
                self.new_peer(Some(addr), PeerState::Awaiting),
            ))
        }
    }

    /// About to send to `p`: if we wait for it to connect (its address is
    /// the lower), open the connection ourselves. It may never connect: it
    /// has not heard of us (an MPI rank adds peers as it first sends to
    /// them). Should the peer open it at the same moment, the transport
    /// makes one connection of the two.
    pub(crate) fn open_to<O: Outlet + ?Sized>(&mut self, p: PeerId, o: &mut O) {
        let Some(peer) = self.peers.get(p as usize) else {
            return;
        };
        if peer.conn.is_none() && peer.state == PeerState::Awaiting && o.peers_accept() {
            self.dial(p, o);
        }
    }

    /// Open the connection to a peer that was to connect to us.
    fn dial<O: Outlet + ?Sized>(&mut self, p: PeerId, o: &mut O) {
        let Some(addr) = self.peers[p as usize].addr else {
            return;
        };
        tracing::debug!(%addr, "connecting to a peer that was to connect to us");
        match o.connect(&addr) {
            Ok(conn) => {
                self.connected(addr, conn);
            }
            Err(e) => {
                let cause = FailureCause::Io {
                    context: format!("connecting to {addr}"),
                    kind: std::io::ErrorKind::Other,
                    message: e.to_string(),
                };
                self.fail_peer(p, PeerEnd::Failed(std::sync::Arc::new(cause)));
            }
        }
    }

    /// A peer identified itself on an accepted connection `c`.
    pub(super) fn handle_hello(&mut self, c: ConnId, hdr: &Header, body: &[u8]) {
        let addr: Option<Addr> = std::str::from_utf8(body).ok().and_then(|s| s.parse().ok());
        let Some(addr) = addr else {
            return self.bad_packet(&"Hello without a valid address");
        };
        let p = match self.by_addr.get(&addr) {
            Some(&p) => p,
            None => self.new_peer(Some(addr), PeerState::Awaiting),
        };
        self.by_conn.insert(c, ConnRole::Peer(p));
        self.last_conn = None;
        let hello = self.hello();
        let peer = &mut self.peers[p as usize];
        if let PeerState::Failed(_) = peer.state {
            // A restarted peer: a fresh start under the same id.
            peer.credit = INITIAL_CREDIT as u64;
            peer.owed = 0;
            peer.conn = None;
        }
        peer.credit += hdr.len.saturating_sub(INITIAL_CREDIT as u64);
        peer.bundles = hdr.flags & flags::BUNDLES != 0;
        if peer.conn.is_none() {
            peer.conn = Some(c);
            peer.state = PeerState::Ready;
            peer.queue.push_front(hello);
        } else {
            // Both sides connected: answer on this connection too so the
            // peer learns our window, and keep sending on ours.
            self.direct.push((c, hello));
        }
        self.mark(p);
    }

    /// The answer to our `Hello`: the window the peer grants.
    pub(super) fn handle_hello_answer(&mut self, p: PeerId, hdr: &Header) {
        let extra = hdr.len.saturating_sub(INITIAL_CREDIT as u64);
        let peer = &mut self.peers[p as usize];
        peer.credit += extra;
        peer.bundles = hdr.flags & flags::BUNDLES != 0;
    }

    /// Connection `c` ended: with it the peer that sends on it.
    pub(super) fn connection_closed(&mut self, c: ConnId, cause: Option<FailureCause>) {
        self.last_conn = None;
        if let Some(ConnRole::Peer(p)) = self.by_conn.remove(&c) {
            let peer = &self.peers[p as usize];
            // A second connection from a peer (both sides connected)
            // closing leaves the one we send on.
            if peer.conn == Some(c) || peer.conn.is_none() {
                self.fail_peer(
                    p,
                    cause.map_or(PeerEnd::Closed, |c| PeerEnd::Failed(c.into())),
                );
            }
        }
    }

    /// Fail `p` and everything that depends on it: queued sends, posted
    /// receives naming it, rendezvous and one-sided operations with it.
    fn fail_peer(&mut self, p: PeerId, end: PeerEnd) {
        let peer = &mut self.peers[p as usize];
        if let PeerState::Failed(_) = peer.state {
            return;
        }
        tracing::debug!(peer = p, %end, "peer ended");
        peer.state = PeerState::Failed(end.clone());
        self.stats.peers_failed += 1;
        let err = Error::PeerFailed { peer: p, end };
        let queued: Vec<Out> = peer.queue.drain(..).collect();
        for o in queued {
            if let Some(r) = o.completes {
                self.finish(r, Err(err.clone()));
            }
        }
        // Eager messages that arrived whole stay for the receives the
        // application has yet to post (a client that sends and exits); an
        // announced rendezvous can no longer deliver and goes.
        let (recvs, dropped) = self
            .matcher
            .remove_peer(p, |m| matches!(m, Unexpected::Eager(_)));
        let cost = dropped * HEADER_LEN;
        self.peers[p as usize].unexpected -= cost;
        self.unexpected_bytes -= cost;
        for r in recvs {
            if !self.multi_failed(r, &err) {
                self.finish(r, Err(err.clone()));
            }
        }
        let doomed: Vec<u64> = self
            .reqs
            .iter()
            .filter(|(_, st)| match st {
                ReqState::Send { peer, .. } => *peer == p,
                ReqState::Receiving { status, .. }
                | ReqState::Put { status }
                | ReqState::Get { status, .. }
                | ReqState::GetInto { status, .. } => status.source == p,
                ReqState::Posted { .. }
                | ReqState::PostedInto { .. }
                | ReqState::Multi(_)
                | ReqState::Done(_) => false,
            })
            .map(|(r, _)| r)
            .collect();
        for r in doomed {
            self.placements
                .lock()
                .expect("placement registry")
                .remove(&r);
            self.gets.lock().expect("get destinations").remove(&r);
            self.finish(r, Err(err.clone()));
        }
        self.failures.push(PeerFailure {
            peer: p,
            error: err,
        });
    }

    /// Why an operation on `p` cannot start, if it cannot.
    pub(super) fn peer_error(&self, p: PeerId) -> Option<Error> {
        match self.peers.get(p as usize) {
            None => Some(Error::UnknownPeer(p)),
            Some(Peer {
                state: PeerState::Failed(end),
                ..
            }) => Some(Error::PeerFailed {
                peer: p,
                end: end.clone(),
            }),
            Some(_) => None,
        }
    }

    /// True when a message to `p` would be handed to the transport at once,
    /// or with the messages held for the next transmit, instead of waiting
    /// (not yet connected, or the transport pushing back, or earlier
    /// messages waiting for credit).
    pub fn sends_now(&self, p: PeerId) -> bool {
        self.peers.get(p as usize).is_some_and(|peer| {
            matches!(peer.state, PeerState::Ready) && (peer.queue.is_empty() || !peer.stalled)
        })
    }

    /// True when `p` is ready and its queue's head waits for nothing but the
    /// next transmit: a small message posted now may wait with it, to leave
    /// in one bundle.
    pub fn may_hold(&self, p: PeerId) -> bool {
        self.peers
            .get(p as usize)
            .is_some_and(|peer| matches!(peer.state, PeerState::Ready) && !peer.stalled)
    }

    // ----- the send queue -----

    /// Queue `out` to `p`; the next [`Engine::transmit`] sends it.
    pub(super) fn push(&mut self, p: PeerId, out: Out) {
        self.peers[p as usize].queue.push_back(out);
        self.mark(p);
    }

    /// Queue `data` to `p` in `rndv_chunk` pieces (at least one, so that an
    /// empty operation is still answered), each under the header `piece`
    /// makes from its offset, length and whether it is the last.
    pub(super) fn push_pieces(
        &mut self,
        p: PeerId,
        data: &Bytes,
        piece: impl Fn(u64, usize, bool) -> Header,
    ) {
        let chunk = self.cfg.rndv_chunk;
        let queue = &mut self.peers[p as usize].queue;
        let mut off = 0;
        loop {
            let n = (data.len() - off).min(chunk);
            let last = off + n == data.len();
            queue.push_back(Out::with_body(
                piece(off as u64, n, last),
                data.slice(off..off + n),
            ));
            off += n;
            if last {
                break;
            }
        }
        self.mark(p);
    }

    /// We consumed `n` bytes of the peer's eager window: owe them back.
    /// The next packet to the peer carries them; the peer needs a visit
    /// from [`Engine::transmit`] only once enough is owed for a `Credit`
    /// of its own ([`Engine::maybe_return_credit`]): a peer with packets
    /// queued is on the attention list already.
    pub(super) fn return_credit(&mut self, p: PeerId, n: u64) {
        let peer = &mut self.peers[p as usize];
        peer.owed += n;
        // Our own peer takes the credit back at its next visit (a sender
        // waiting for it has nobody else to return it).
        if peer.owed >= self.credit_due() || self.own == Some(p) {
            self.mark(p);
        }
    }

    /// Credit owed to a peer that is worth a `Credit` packet of its own.
    fn credit_due(&self) -> u64 {
        (self.cfg.eager_window / 4) as u64
    }

    /// Put `p` on the attention list for the next `transmit`.
    pub(super) fn mark(&mut self, p: PeerId) {
        let peer = &mut self.peers[p as usize];
        if !peer.marked {
            peer.marked = true;
            self.attention.push(p);
        }
    }

    /// Send an explicit credit return when a good part of the window is owed
    /// and no other packet is about to carry it.
    pub(super) fn maybe_return_credit<O: Outlet + ?Sized>(&mut self, p: PeerId, o: &mut O) {
        let due = self.credit_due();
        let peer = &mut self.peers[p as usize];
        if peer.owed >= due && peer.queue.is_empty() && matches!(peer.state, PeerState::Ready) {
            peer.queue
                .push_back(Out::control(Header::new(Kind::Credit)));
            self.flush_peer(p, o);
        }
    }

    /// Send what the queue of `p` holds while credit and `o` allow; what
    /// stays keeps `p` on the attention list.
    pub(super) fn flush_peer<O: Outlet + ?Sized>(&mut self, p: PeerId, o: &mut O) {
        self.send_queued(p, o);
        if !self.peers[p as usize].queue.is_empty() {
            self.mark(p);
        }
    }

    /// Hand the packet `hdr` + `prefix` ++ `body` for `p` to `o` now, as
    /// [`Engine::send_queued`] would from the peer's queue: only when
    /// nothing waits to be sent to any peer (the transport then sees every
    /// peer's packets in posting order), the peer is connected and ready,
    /// and its credit covers `cost`. The packet carries the credit owed, as
    /// a queued one would. False otherwise, or when `o` refuses it: the
    /// caller then queues it, and the next transmit meets the refusal and
    /// handles it. Always inlined: outlined, a post paid the calls and a
    /// libc `memset` for its head.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn send_now<O: Outlet + ?Sized>(
        &mut self,
        o: &mut O,
        p: PeerId,
        mut hdr: Header,
        prefix: &[u8],
        body: &Bytes,
        lent: bool,
        cost: u64,
    ) -> bool {
        if !self.attention.is_empty() || !self.direct.is_empty() {
            return false;
        }
        let Some(peer) = self.peers.get_mut(p as usize) else {
            return false;
        };
        let Some(conn) = peer.conn else {
            return false;
        };
        if !matches!(peer.state, PeerState::Ready) || cost > peer.credit {
            return false;
        }
        // A peer with packets queued is on the attention list.
        debug_assert!(peer.queue.is_empty());
        let give = peer.owed.min(u32::MAX as u64);
        hdr.credit = give as u32;
        // No prefix (an eager message, the BTL's inline send): the header
        // is the whole head.
        let sent = if prefix.is_empty() && !lent {
            o.send(conn, &hdr.encode(), body.clone())
        } else {
            let head = PacketHead::new(&hdr, prefix);
            if lent {
                o.send_awaited(conn, head.as_slice(), body.clone())
            } else {
                o.send(conn, head.as_slice(), body.clone())
            }
        };
        if sent.is_err() {
            return false;
        }
        peer.credit -= cost;
        peer.owed -= give;
        peer.stalled = false;
        self.handed += 1;
        true
    }

    fn send_queued<O: Outlet + ?Sized>(&mut self, p: PeerId, o: &mut O) {
        if self.own == Some(p) {
            return self.deliver_own(p);
        }
        self.open_to(p, o);
        let peer = &mut self.peers[p as usize];
        let Some(conn) = peer.conn else {
            return;
        };
        if !matches!(peer.state, PeerState::Ready) {
            return;
        }
        let bundle_len = if peer.bundles { o.bundle_len() } else { 0 };
        peer.stalled = false;
        while let Some(out) = peer.queue.front() {
            if out.cost as u64 > peer.credit {
                self.stats.credit_stalls += 1;
                peer.stalled = true;
                break;
            }
            if bundle_len > 0 && starts_bundle(&peer.queue, bundle_len) {
                match send_bundle(peer, conn, o, bundle_len, &mut self.stats) {
                    Ok(n) => {
                        self.handed += 1;
                        for out in peer.queue.drain(..n) {
                            let Some(r) = out.completes else { continue };
                            if let Some(ReqState::Send { status, .. }) = self.reqs.remove(&r) {
                                self.reqs.insert(
                                    r,
                                    ReqState::Done(Ok(Completion { status, data: None })),
                                );
                            }
                        }
                        continue;
                    }
                    Err(SendError::WouldBlock) => {
                        self.stats.transport_stalls += 1;
                        peer.stalled = true;
                        break;
                    }
                    // Closed: the Closed event fails the peer. TooLong: the
                    // transport takes less than it said; one by one then.
                    Err(SendError::Closed) => break,
                    Err(SendError::TooLong { .. }) => {}
                }
            }
            let out = peer.queue.front_mut().expect("front exists");
            let give = peer.owed.min(u32::MAX as u64);
            out.hdr.credit = give as u32;
            let sent = if out.prefix.is_empty() && !out.awaited {
                o.send(conn, &out.hdr.encode(), out.body.clone())
            } else {
                let head = PacketHead::new(&out.hdr, &out.prefix);
                if out.awaited {
                    o.send_awaited(conn, head.as_slice(), out.body.clone())
                } else {
                    o.send(conn, head.as_slice(), out.body.clone())
                }
            };
            match sent {
                Ok(()) => {
                    self.handed += 1;
                    peer.credit -= out.cost as u64;
                    peer.owed -= give;
                    let out = peer.queue.pop_front().expect("front exists");
                    if let Some(r) = out.completes {
                        if let Some(ReqState::Send { status, .. }) = self.reqs.remove(&r) {
                            self.reqs
                                .insert(r, ReqState::Done(Ok(Completion { status, data: None })));
                        }
                    }
                }
                Err(SendError::WouldBlock) => {
                    self.stats.transport_stalls += 1;
                    peer.stalled = true;
                    break;
                }
                Err(SendError::Closed) => break, // the Closed event fails the peer
                Err(SendError::TooLong { len, max }) => {
                    let out = peer.queue.pop_front().expect("front exists");
                    if let Some(r) = out.completes {
                        self.finish(r, Err(Error::TooLong { len, max }));
                    }
                    return self.send_queued(p, o);
                }
            }
        }
    }
}

/// Send the small packets at the head of `peer`'s queue (at least two:
/// [`starts_bundle`]) as one `Bundle` of at most `max` bytes of body, within
/// the peer's credit; the bundle returns the credit owed. Returns how many
/// it carries, for the caller to take off the queue.
fn send_bundle<O: Outlet + ?Sized>(
    peer: &mut Peer,
    conn: ConnId,
    o: &mut O,
    max: usize,
    stats: &mut super::Stats,
) -> Result<usize, SendError> {
    let mut body = Vec::with_capacity(max);
    let (mut n, mut cost) = (0usize, 0u64);
    for out in &peer.queue {
        let len = BUNDLE_ITEM_PREFIX + out.packet_len();
        if !out.bundles() || body.len() + len > max || cost + out.cost as u64 > peer.credit {
            break;
        }
        out.append_to(&mut body);
        n += 1;
        cost += out.cost as u64;
    }
    let give = peer.owed.min(u32::MAX as u64);
    let mut hdr = Header::new(Kind::Bundle);
    hdr.credit = give as u32;
    hdr.len = n as u64;
    o.send(conn, &hdr.encode(), Bytes::from(body))?;
    peer.credit -= cost;
    peer.owed -= give;
    stats.bundles_sent += 1;
    stats.bundled += n as u64;
    Ok(n)
}
