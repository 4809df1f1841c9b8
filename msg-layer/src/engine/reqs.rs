//! The engine's live requests, in a slab: a request's id names its slot and
//! the slot's generation, so finding, changing and forgetting a request
//! costs an index and a comparison, not a hash-map probe (four requests per
//! round trip made the map ~6% of an 8-byte round trip).
//!
//! Ids are `generation << 32 | slot`, generations start at 1 (no id is 0),
//! and a slot's generation changes when its request is forgotten, so an id
//! that outlived its request (a late packet from a peer) finds nothing.

use super::{Completion, ReqState};
use crate::error::Error;

#[derive(Debug)]
struct Slot {
    generation: u32,
    /// `None` while a state is taken out for a transition ([`ReqTable::remove`]
    /// then [`ReqTable::insert`]) or once released.
    state: Option<ReqState>,
    /// Allocated (not on the free list).
    live: bool,
}

/// Requests by id.
#[derive(Debug, Default)]
pub(super) struct ReqTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

fn split(id: u64) -> (usize, u32) {
    ((id & 0xffff_ffff) as usize, (id >> 32) as u32)
}

impl ReqTable {
    /// A new request in state `st` (inlined: the state is built in its
    /// slot, not passed by pointer and copied).
    #[inline(always)]
    pub fn alloc(&mut self, st: ReqState) -> u64 {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 1,
                    state: None,
                    live: false,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.state = Some(st);
        slot.live = true;
        (u64::from(slot.generation) << 32) | u64::from(idx)
    }

    fn slot(&self, id: u64) -> Option<&Slot> {
        let (idx, generation) = split(id);
        self.slots
            .get(idx)
            .filter(|s| s.live && s.generation == generation)
    }

    fn slot_mut(&mut self, id: u64) -> Option<&mut Slot> {
        let (idx, generation) = split(id);
        self.slots
            .get_mut(idx)
            .filter(|s| s.live && s.generation == generation)
    }

    pub fn get(&self, id: &u64) -> Option<&ReqState> {
        self.slot(*id).and_then(|s| s.state.as_ref())
    }

    pub fn get_mut(&mut self, id: &u64) -> Option<&mut ReqState> {
        self.slot_mut(*id).and_then(|s| s.state.as_mut())
    }

    /// Take a request's state out for a transition; the id stays allocated
    /// until [`ReqTable::take_done`], so [`ReqTable::insert`] can put the next
    /// state back.
    pub fn remove(&mut self, id: &u64) -> Option<ReqState> {
        self.slot_mut(*id).and_then(|s| s.state.take())
    }

    /// Put a state back under an allocated id (no effect on an id that is
    /// not allocated).
    pub fn insert(&mut self, id: u64, st: ReqState) {
        if let Some(s) = self.slot_mut(id) {
            s.state = Some(st);
        }
    }

    /// The result of request `id` if it is done, the request forgotten
    /// with it in the same lookup (its id finds nothing from then on);
    /// `None` while it is pending, [`Error::UnknownRequest`] when `id`
    /// names no request.
    #[inline(always)]
    pub fn take_done(&mut self, id: u64) -> Option<Result<Completion, Error>> {
        let (idx, _) = split(id);
        let Some(s) = self.slot_mut(id) else {
            return Some(Err(Error::UnknownRequest(id)));
        };
        match s.state {
            Some(ReqState::Done(_)) => {}
            Some(_) => return None,
            None => return Some(Err(Error::UnknownRequest(id))),
        }
        s.live = false;
        s.generation = s.generation.checked_add(1).unwrap_or(1);
        let st = s.state.take();
        self.free.push(idx as u32);
        match st {
            Some(ReqState::Done(res)) => Some(res),
            _ => unreachable!("checked above"),
        }
    }

    /// Every request with a state.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &ReqState)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let st = s.state.as_ref().filter(|_| s.live)?;
            Some(((u64::from(s.generation) << 32) | i as u64, st))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    fn done() -> ReqState {
        ReqState::Done(Err(Error::Cancelled))
    }

    #[test]
    fn ids_are_unique_and_stale_ones_find_nothing() {
        let mut t = ReqTable::default();
        let a = t.alloc(done());
        let b = t.alloc(done());
        assert!(a != 0 && b != 0 && a != b);
        assert!(t.remove(&a).is_some(), "taken out for a transition");
        assert!(t.get(&a).is_none());
        t.insert(a, done());
        assert!(t.get(&a).is_some(), "put back under the same id");
        assert!(matches!(t.take_done(a), Some(Err(Error::Cancelled))));
        assert!(t.get(&a).is_none());
        assert!(matches!(
            t.take_done(a),
            Some(Err(Error::UnknownRequest(_)))
        ));
        t.insert(a, done());
        assert!(t.get(&a).is_none(), "a released id cannot be refilled");
        let c = t.alloc(done());
        assert_ne!(c, a, "the slot is reused under a new generation");
        assert_eq!(c & 0xffff_ffff, a & 0xffff_ffff);
        let ids: Vec<u64> = t.iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![c, b]);
    }
}
