//! Peers of an API's endpoints: ranks of a job (DECK's nodes, migrate's
//! hosts) and the peers that ended, with the message layer's error.

use std::collections::HashMap;

use msg_layer::transport::Transport;
use msg_layer::{Addr, Endpoint, Error, PeerEnd, PeerId};

/// A job's ranks and the peer each is on this process's endpoint, fixed
/// once the job is set up.
#[derive(Clone, Debug, Default)]
pub struct Ranks {
    me: u32,
    /// The endpoint's peer for each rank (`None` for this one).
    peers: Vec<Option<PeerId>>,
    rank_of: HashMap<PeerId, u32>,
}

impl Ranks {
    /// Rank `me` of a job whose ranks are `peers` on this endpoint (`None`
    /// for `me` itself).
    pub fn new(me: u32, peers: Vec<Option<PeerId>>) -> Ranks {
        let rank_of = peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| p.map(|p| (p, r as u32)))
            .collect();
        Ranks { me, peers, rank_of }
    }

    /// Rank `me` of a job of `addrs.len()` ranks (in rank order, this
    /// one's included): every other rank added as a peer of `ep`; an error
    /// names the rank whose address failed.
    pub fn connect<T: Transport>(
        ep: &Endpoint<T>,
        me: u32,
        addrs: &[Addr],
    ) -> Result<Ranks, (u32, Error)> {
        let mut peers = vec![None; addrs.len()];
        for (r, a) in addrs.iter().enumerate() {
            if r as u32 != me {
                peers[r] = Some(ep.add_peer(a).map_err(|e| (r as u32, e))?);
            }
        }
        Ok(Ranks::new(me, peers))
    }

    /// This process's rank.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// How many ranks the job has (1 when it was never set up).
    pub fn len(&self) -> u32 {
        (self.peers.len() as u32).max(1)
    }

    /// Never true: a job has at least this process.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The peer of `rank` (`None` for this one or one out of range).
    pub fn peer(&self, rank: u32) -> Option<PeerId> {
        self.peers.get(rank as usize).copied().flatten()
    }

    /// The rank of `peer`, if it is one of the job's.
    pub fn rank(&self, peer: PeerId) -> Option<u32> {
        self.rank_of.get(&peer).copied()
    }
}

/// Peers whose connection ended, with the message layer's error, by
/// endpoint (an API's slot) and peer. The runtime notes every end it pumps
/// before the API routes the event; later calls towards the peer fail at
/// once with the cause.
#[derive(Debug, Default)]
pub struct Ended {
    cause: HashMap<(usize, PeerId), Error>,
}

impl Ended {
    /// `peer` of endpoint `slot` ended with `error` (the first cause stays).
    pub fn note(&mut self, slot: usize, peer: PeerId, error: &Error) {
        self.cause
            .entry((slot, peer))
            .or_insert_with(|| error.clone());
    }

    /// Why `peer` of endpoint `slot` ended, if it did.
    pub fn cause(&self, slot: usize, peer: PeerId) -> Option<&Error> {
        self.cause.get(&(slot, peer))
    }

    /// How many peers ended.
    pub fn len(&self) -> usize {
        self.cause.len()
    }

    /// True when no peer ended.
    pub fn is_empty(&self) -> bool {
        self.cause.is_empty()
    }
}

/// True when `error` is a peer's orderly end (it closed), not a failure.
pub fn orderly(error: &Error) -> bool {
    matches!(
        error,
        Error::PeerFailed {
            end: PeerEnd::Closed,
            ..
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_map_both_ways() {
        let r = Ranks::new(1, vec![Some(7), None, Some(9)]);
        assert_eq!((r.me(), r.len()), (1, 3));
        assert_eq!(r.peer(0), Some(7));
        assert_eq!(r.peer(1), None);
        assert_eq!(r.peer(5), None);
        assert_eq!(r.rank(9), Some(2));
        assert_eq!(r.rank(8), None);
        assert_eq!(Ranks::default().len(), 1);
    }

    #[test]
    fn the_first_cause_stays() {
        let mut e = Ended::default();
        assert!(e.is_empty());
        let closed = Error::PeerFailed {
            peer: 3,
            end: PeerEnd::Closed,
        };
        e.note(0, 3, &closed);
        e.note(0, 3, &Error::Timeout);
        assert_eq!(e.len(), 1);
        assert!(orderly(e.cause(0, 3).unwrap()));
        assert!(e.cause(1, 3).is_none());
        assert!(!orderly(&Error::Timeout));
    }
}
