//! Registered memory for one-sided `put` and `get`.
//!
//! The target's progress engine performs the accesses (RDMA emulated in
//! software), so a region is anything that can be read and written at an
//! offset from that engine: a buffer owned here ([`VecRegion`]), or memory
//! the MPI shim registers on behalf of Open MPI.

use std::sync::Mutex;

use bytes::Bytes;

/// Memory a peer may read and write through `put` and `get`.
pub trait MemoryRegion: Send + Sync {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copy `src` into the region at `offset` (in bounds: the engine checked).
    fn write(&self, offset: usize, src: &[u8]);
    /// Copy from the region at `offset` into `dst` (in bounds).
    fn read(&self, offset: usize, dst: &mut [u8]);
    /// `len` bytes at `offset` (in bounds) to send from where they lie, if
    /// the region can lend them: a get's reply then leaves without a copy.
    /// The region's memory must stay valid, and the bytes unchanged, while
    /// the returned bytes live. `None` (the default): the engine copies.
    fn lend(&self, offset: usize, len: usize) -> Option<Bytes> {
        let _ = (offset, len);
        None
    }
}

/// A region backed by a buffer this process owns.
#[derive(Debug)]
pub struct VecRegion(Mutex<Vec<u8>>);

impl VecRegion {
    /// A region holding `data`.
    pub fn new(data: Vec<u8>) -> Self {
        VecRegion(Mutex::new(data))
    }

    /// A copy of the region's bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        self.0.lock().expect("region lock").clone()
    }
}

impl MemoryRegion for VecRegion {
    fn len(&self) -> usize {
        self.0.lock().expect("region lock").len()
    }
    fn write(&self, offset: usize, src: &[u8]) {
        self.0.lock().expect("region lock")[offset..offset + src.len()].copy_from_slice(src);
    }
    fn read(&self, offset: usize, dst: &mut [u8]) {
        let len = dst.len();
        dst.copy_from_slice(&self.0.lock().expect("region lock")[offset..offset + len]);
    }
}

/// Names a registered region; given to peers out of band (or in a message).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RegionKey(pub u64);
