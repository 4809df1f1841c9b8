//! The endpoint's connections, ordered by handle.
//!
//! A sorted vector instead of a `BTreeMap`: an endpoint has a handful of
//! connections (one per peer process), and the busy-poll loop looks them up
//! several times per frame (the frame's own connection, the transmit
//! round robin, "anything to send?"). A binary search over a short
//! contiguous array costs a few instructions and touches one cache line;
//! a B-tree search walks node arrays and its iterators set up leaf ranges.
//! Handles grow (until they wrap, after 2^32 connections), so inserting is
//! an append; removing shifts the connections after it, which happens once
//! per connection's life.
//!
//! An endpoint of a large job holds a connection per peer (a thousand, and
//! more), of which a few are busy at a time, and a frame's work looks its
//! connection up several times: the position last found is tried first
//! (one comparison), and beyond [`SEARCH_LIMIT`] connections a hash index
//! finds the others in one probe instead of ten halvings. Inserting and
//! removing renumber the positions after them, once per connection's life.
//!
//! The order is the handles' order, as the map's was, so every walk over
//! the connections, and so every seeded test, is deterministic.
//!
//! [`ConnHandle`] is defined here, the lowest place that needs it; the
//! endpoint, which hands handles out, re-exports it.

/// Names a connection of an endpoint. Never reused within an endpoint.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnHandle(pub u32);

/// Up to this many connections a binary search finds a handle as fast as
/// a hash probe.
const SEARCH_LIMIT: usize = 16;

use std::cell::Cell;

/// Values (connections) keyed by [`ConnHandle`], in handle order.
#[derive(Debug)]
pub(crate) struct ConnTable<V> {
    entries: Vec<(ConnHandle, V)>,
    /// Position of each handle in `entries`, kept while there are more than
    /// [`SEARCH_LIMIT`] entries (empty otherwise).
    index: rustc_hash::FxHashMap<ConnHandle, u32>,
    /// The position last found: a hint, checked before use (entries move
    /// when others come and go).
    last: Cell<usize>,
}

impl<V> Default for ConnTable<V> {
    fn default() -> Self {
        ConnTable {
            entries: Vec::new(),
            index: Default::default(),
            last: Cell::new(0),
        }
    }
}

impl<V> ConnTable<V> {
    /// Index of `h`, or where it would go.
    #[inline]
    fn find(&self, h: ConnHandle) -> Result<usize, usize> {
        // The common case, the busy connection again, needs no search.
        let hint = self.last.get();
        if self.entries.get(hint).is_some_and(|(k, _)| *k == h) {
            return Ok(hint);
        }
        self.search(h)
    }

    #[cold]
    #[inline(never)]
    fn search(&self, h: ConnHandle) -> Result<usize, usize> {
        let found = match self.index.get(&h) {
            Some(&i) => Ok(i as usize),
            None => self.entries.binary_search_by_key(&h, |(k, _)| *k),
        };
        if let Ok(i) = found {
            self.last.set(i);
        }
        found
    }

    /// Bring the index up to date from position `from` on (after an insert
    /// or removal there); build or drop it as the table crosses the limit.
    fn reindex(&mut self, from: usize) {
        if self.entries.len() <= SEARCH_LIMIT {
            self.index.clear();
            return;
        }
        let from = if self.index.is_empty() { 0 } else { from };
        for (i, (h, _)) in self.entries.iter().enumerate().skip(from) {
            self.index.insert(*h, i as u32);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The hinted position holds `h` (the busy connection again): its
    /// entry is then read with the one bounds check made here.
    #[inline]
    fn at_hint(&self, h: ConnHandle) -> Option<usize> {
        let hint = self.last.get();
        self.entries
            .get(hint)
            .is_some_and(|(k, _)| *k == h)
            .then_some(hint)
    }

    #[inline]
    pub fn get(&self, h: &ConnHandle) -> Option<&V> {
        if let Some(i) = self.at_hint(*h) {
            return Some(&self.entries[i].1);
        }
        let i = self.search(*h).ok()?;
        Some(&self.entries[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, h: &ConnHandle) -> Option<&mut V> {
        if let Some(i) = self.at_hint(*h) {
            return Some(&mut self.entries[i].1);
        }
        let i = self.search(*h).ok()?;
        Some(&mut self.entries[i].1)
    }

    /// Add `v` under `h`, replacing (and returning) a value already there.
    pub fn insert(&mut self, h: ConnHandle, v: V) -> Option<V> {
        match self.find(h) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].1, v)),
            Err(i) => {
                self.entries.insert(i, (h, v));
                self.reindex(i);
                None
            }
        }
    }

    pub fn remove(&mut self, h: &ConnHandle) -> Option<V> {
        let i = self.find(*h).ok()?;
        let (_, v) = self.entries.remove(i);
        self.index.remove(h);
        self.reindex(i);
        Some(v)
    }

    /// Handles and values in handle order.
    pub fn iter(&self) -> impl Iterator<Item = (&ConnHandle, &V)> {
        self.entries.iter().map(|(h, v)| (h, v))
    }

    /// Handles in order.
    #[cfg(test)]
    pub fn keys(&self) -> impl Iterator<Item = &ConnHandle> {
        self.entries.iter().map(|(h, _)| h)
    }

    /// Values in handle order.
    #[inline]
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, v)| v)
    }

    /// Handles and values in handle order, the values mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&ConnHandle, &mut V)> {
        self.entries.iter_mut().map(|(h, v)| (&*h, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The table answers as a `BTreeMap` does, over a seeded mix of inserts
    /// (mostly growing handles, some out of order), removals and lookups.
    #[test]
    fn behaves_as_an_ordered_map() {
        let mut rng = crate::rng::Rng::new(7);
        let mut table = ConnTable::default();
        let mut map = BTreeMap::new();
        let mut next = 1u32;
        for step in 0..20_000u32 {
            let h = ConnHandle(match rng.below(8) {
                0 => rng.below(next.max(1) as u64) as u32,
                _ => {
                    next += rng.below(3) as u32;
                    next
                }
            });
            match rng.below(4) {
                0 | 1 => assert_eq!(table.insert(h, step), map.insert(h, step)),
                2 => assert_eq!(table.remove(&h), map.remove(&h)),
                _ => {
                    assert_eq!(table.get(&h), map.get(&h));
                    if let (Some(a), Some(b)) = (table.get_mut(&h), map.get_mut(&h)) {
                        *a += 1;
                        *b += 1;
                    }
                }
            }
            assert_eq!(table.len(), map.len());
        }
        assert!(table.iter().eq(map.iter()));
        assert!(table.values().eq(map.values()));
        for ((_, a), b) in table.iter_mut().zip(map.values_mut()) {
            assert_eq!(a, b);
        }
    }
}
