//! `shm`: a file of 64-bit words shared between processes, the statistics
//! page of [`crate::statpage`]. The publishing process maps it writable; a
//! reader (llc-stat) maps it read-only and can only load from it.
//!
//! Every access is an atomic operation on an aligned word, so a reader
//! racing a writer sees each word either before or after a store, never torn;
//! the page's sequence word (a seqlock) tells the reader whether the words it
//! copied belong to one snapshot.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};

use super::Mapping;

/// Bytes per word.
const WORD: usize = std::mem::size_of::<AtomicU64>();

/// The words of a mapped file.
struct Words {
    map: Mapping,
}

impl Words {
    fn map(file: &File, writable: bool) -> io::Result<Self> {
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        if len < WORD {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "statistics page shorter than one word",
            ));
        }
        let map = Mapping::file(file.as_fd(), len, writable)?;
        Ok(Words { map })
    }

    fn slice(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned (so aligned for AtomicU64, whose
        // size and alignment are 8) and `len / 8` whole words lie inside it;
        // it lives as long as `self`, which the returned slice borrows.
        // AtomicU64 accepts every bit pattern, and the other processes that
        // map the file touch it only with atomic word accesses too. A
        // read-only mapping is only ever loaded from (`ReadOnlyWords` lends
        // no slice and exposes loads alone); atomic loads of read-only
        // memory of at most 8 bytes are sound.
        unsafe {
            std::slice::from_raw_parts(
                self.map.ptr.as_ptr().cast::<AtomicU64>(),
                self.map.len / WORD,
            )
        }
    }
}

// SAFETY: the mapping is owned (unmapped on drop, by whichever thread drops
// it) and every access to its memory is an atomic word operation, which is
// sound from any thread, as it is from any process.
unsafe impl Send for Words {}
// SAFETY: as above: shared references only make atomic accesses.
unsafe impl Sync for Words {}

/// A file of words mapped writable: the publisher's side.
pub(crate) struct SharedWords(Words);

impl SharedWords {
    /// Map `file` (already sized) writable and shared.
    pub(crate) fn map(file: &File) -> io::Result<Self> {
        Words::map(file, true).map(SharedWords)
    }

    /// The words.
    pub(crate) fn words(&self) -> &[AtomicU64] {
        self.0.slice()
    }
}

/// A file of words mapped read-only: a reader's side.
pub(crate) struct ReadOnlyWords(Words);

impl ReadOnlyWords {
    /// Map `file` read-only and shared.
    pub(crate) fn map(file: &File) -> io::Result<Self> {
        Words::map(file, false).map(ReadOnlyWords)
    }

    /// Number of words.
    pub(crate) fn len(&self) -> usize {
        self.0.map.len / WORD
    }

    /// Load word `i` (panics when out of range, as indexing does).
    pub(crate) fn load(&self, i: usize, order: Ordering) -> u64 {
        self.0.slice()[i].load(order)
    }
}
