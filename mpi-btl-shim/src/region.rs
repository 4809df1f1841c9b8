//! Registered memory: a raw range Open MPI keeps valid until it
//! deregisters it, as a message-layer [`MemoryRegion`] that peers' put and
//! get reach.

use msg_layer::rma::MemoryRegion;

/// deregisters it.
#[derive(Debug)]
pub struct PtrRegion {
    base: *mut u8,
    len: usize,
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
        PtrRegion { base, len }
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
}
