//! Registered memory: a raw range a C caller keeps valid until it
//! deregisters it (Open MPI's registrations for btl/llc, a libfabric
//! application's buffers and memory regions), as a message-layer
//! [`MemoryRegion`] that receives, peers' put and get reach.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use msg_layer::rma::MemoryRegion;

/// deregisters it.
#[derive(Debug)]
pub struct PtrRegion {
    base: *mut u8,
    len: usize,
    /// Ranges lent to the transport (a get's reply sent from here) and not
    /// yet let go: the memory must outlive them ([`PtrRegion::lent_out`]).
    lent: Arc<AtomicUsize>,
}

impl PtrRegion {
    /// A region over `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base + len` must stay valid for reads and writes until the
    /// region is deregistered and every access in progress has finished
    /// (the shim deregisters under the engine lock, which accesses hold).
    /// What peers write there races with local accesses exactly as RDMA
    /// does; keeping them apart is MPI's job (its synchronization rules).
    pub unsafe fn new(base: *mut u8, len: usize) -> Self {
        PtrRegion {
            base,
            len,
            lent: Arc::default(),
        }
    }

    /// Ranges of the region the transport still holds (sent to a peer's get
    /// and not yet acknowledged). Deregistration waits for 0.
    pub fn lent_out(&self) -> usize {
        self.lent.load(Ordering::Acquire)
    }
}

/// Counts a range of a region lent as a message body while the transport
/// holds it.
struct LentCount(Arc<AtomicUsize>);

impl Drop for LentCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

// SAFETY: the region is plain memory whose validity the registrant
// guarantees (see `PtrRegion::new`); it may be accessed from any thread.
unsafe impl Send for PtrRegion {}
// SAFETY: as above; accesses are byte copies, their ordering is MPI's.
unsafe impl Sync for PtrRegion {}

impl MemoryRegion for PtrRegion {
    fn len(&self) -> usize {
        self.len
    }
    fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "engine checked bounds");
        // SAFETY: in bounds (checked above); valid per `PtrRegion::new`;
        // `src` is a message buffer, never inside the region.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(offset), src.len()) }
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "engine checked bounds");
        // SAFETY: as in `write`, the other way round.
        unsafe { std::ptr::copy_nonoverlapping(self.base.add(offset), dst.as_mut_ptr(), dst.len()) }
    }
    fn lend(&self, offset: usize, len: usize) -> Option<Bytes> {
        assert!(offset + len <= self.len, "engine checked bounds");
        self.lent.fetch_add(1, Ordering::AcqRel);
        let guard = LentCount(self.lent.clone());
        // SAFETY: in bounds (checked above); the region's owner keeps the
        // bytes valid and unchanged while any range is lent (deregistration
        // waits for the count to reach 0; a get's target does not change
        // the data it serves).
        Some(unsafe { msg_layer::lent::lend_guarded(self.base.add(offset), len, guard) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lent range is counted while the transport holds it, so that a
    /// deregistration can wait for it; its bytes are the region's own.
    #[test]
    fn lent_ranges_are_counted_until_dropped() {
        let mut mem = vec![7u8; 64];
        // SAFETY: `mem` outlives the region and every range lent from it.
        let region = unsafe { PtrRegion::new(mem.as_mut_ptr(), mem.len()) };
        assert_eq!(region.lent_out(), 0);
        let a = region.lend(8, 16).expect("lends");
        let b = a.slice(4..8);
        assert_eq!(region.lent_out(), 1);
        assert_eq!(&a[..], &[7u8; 16][..]);
        drop(a);
        assert_eq!(region.lent_out(), 1, "a slice still holds it");
        drop(b);
        assert_eq!(region.lent_out(), 0);
        drop(region);
        mem[0] = 1;
    }
}
