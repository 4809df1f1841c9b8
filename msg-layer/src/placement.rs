//! Rendezvous data placed by the transport straight into the receive buffer.
//!
//! When a receive matches a rendezvous announcement, its buffer becomes a
//! [`RecvBuffer`] registered under the receive's id. The LLC transport asks
//! [`DataPlacement`] where each incoming multi-fragment message goes; for a
//! `Data` packet of a registered receive the answer is the buffer at the
//! packet's offset, so every fragment is copied once, from the frame into the
//! application's buffer. Packets the transport did not place (a reordered
//! first fragment, or a transport without placement) are copied in by the
//! engine through the same buffer, which counts every byte either way.
//!
//! A peer's `Put` into a registered region is placed the same way: each
//! piece of a put long enough to span frames goes from the frames straight
//! into the region at its offset, and the engine, delivered the header
//! alone, only acknowledges it. A piece that would not fit the region is
//! delivered whole and refused by the engine as before. So are the pieces
//! of the reply to a get into the caller's memory (`Endpoint::get_into`),
//! found by the get's request id.

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::rma::MemoryRegion;
use crate::transport::placement::{Placement, SharedSink, Sink};

use crate::wire::{flags, Header, Kind, HEADER_LEN};

/// A receive buffer that fills from any thread, in any order: the
/// engine's own, or the caller's memory (`Endpoint::irecv_into`).
#[derive(Debug)]
pub(crate) struct RecvBuffer {
    store: Store,
    len: usize,
    written: AtomicUsize,
    /// Writes that fell outside the buffer (a confused or hostile peer).
    rejected: AtomicUsize,
}

/// Where a [`RecvBuffer`]'s bytes live.
enum Store {
    Owned(Mutex<Vec<u8>>),
    Region(Arc<dyn MemoryRegion>),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Store::Owned(_) => f.write_str("Owned"),
            Store::Region(r) => write!(f, "Region({} bytes)", r.len()),
        }
    }
}

impl RecvBuffer {
    pub fn new(buf: Vec<u8>) -> Self {
        RecvBuffer {
            len: buf.len(),
            store: Store::Owned(Mutex::new(buf)),
            written: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
        }
    }

    /// The first `len` bytes of `region` (at most its length).
    pub fn region(region: Arc<dyn MemoryRegion>, len: usize) -> Self {
        RecvBuffer {
            len: len.min(region.len()),
            store: Store::Region(region),
            written: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Copy `data` in at `offset`; false (and nothing written) when it does
    /// not fit.
    pub fn write(&self, offset: usize, data: &[u8]) -> bool {
        match offset.checked_add(data.len()) {
            Some(end) if end <= self.len => {
                match &self.store {
                    Store::Owned(buf) => {
                        buf.lock().expect("receive buffer")[offset..end].copy_from_slice(data)
                    }
                    Store::Region(r) => r.write(offset, data),
                }
                self.written.fetch_add(data.len(), Ordering::AcqRel);
                true
            }
            _ => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    pub fn is_full(&self) -> bool {
        self.written.load(Ordering::Acquire) >= self.len
    }

    /// The buffer, once no placement holds it any more; `None` for the
    /// caller's memory, which holds the bytes already.
    pub fn into_vec(self: Arc<Self>) -> Option<Vec<u8>> {
        match Arc::try_unwrap(self) {
            Ok(b) => match b.store {
                Store::Owned(buf) => Some(buf.into_inner().expect("receive buffer")),
                Store::Region(_) => None,
            },
            Err(shared) => match &shared.store {
                Store::Owned(buf) => {
                    Some(std::mem::take(&mut *buf.lock().expect("receive buffer")))
                }
                Store::Region(_) => None,
            },
        }
    }
}

/// One `Data` packet's share of a receive buffer.
struct Piece {
    buf: Arc<RecvBuffer>,
    base: usize,
}

impl Sink for Piece {
    fn write(&self, offset: usize, data: &[u8]) {
        if let Some(at) = self.base.checked_add(offset) {
            self.buf.write(at, data);
        }
    }
}

/// One `Put` piece's share of a registered region.
struct RegionPiece {
    region: Arc<dyn MemoryRegion>,
    base: usize,
}

impl Sink for RegionPiece {
    fn write(&self, offset: usize, data: &[u8]) {
        // In range: `place` checked the whole piece against the region.
        self.region.write(self.base + offset, data);
    }
}

/// Receive buffers open for placement, by receive id.
pub(crate) type Registry = Arc<Mutex<FxHashMap<u64, Arc<RecvBuffer>>>>;

/// Registered memory regions, by key: the engine's table of them, shared
/// with the placement hook.
pub(crate) type Regions = Arc<Mutex<FxHashMap<u64, Arc<dyn MemoryRegion>>>>;

/// The transport's placement hook: `Data` packets of registered receives go
/// straight to their buffers, `Put` pieces straight to their regions.
pub(crate) struct DataPlacement {
    pub recvs: Registry,
    pub regions: Regions,
    /// Destinations of our gets, by request id.
    pub gets: Regions,
}

impl Placement for DataPlacement {
    fn place(&mut self, len: usize, first: &[u8]) -> Option<(usize, SharedSink)> {
        let hdr = Header::decode(first).ok()?;
        if len < HEADER_LEN {
            return None;
        }
        let base = usize::try_from(hdr.offset).ok()?;
        let end = base.checked_add(len - HEADER_LEN)?;
        match hdr.kind {
            Kind::Data => {
                let buf = self
                    .recvs
                    .lock()
                    .expect("placement registry")
                    .get(&hdr.id)?
                    .clone();
                (end <= buf.len()).then(|| (HEADER_LEN, SharedSink::new(Piece { buf, base })))
            }
            Kind::Put => region_piece(&self.regions, hdr.id, base, end),
            Kind::GetReply if hdr.flags & flags::REFUSED == 0 => {
                region_piece(&self.gets, hdr.aux, base, end)
            }
            _ => None,
        }
    }
}

/// Where a piece spanning `base..end` of the region `table` holds under
/// `key` goes, if it lies inside it.
fn region_piece(table: &Regions, key: u64, base: usize, end: usize) -> Option<(usize, SharedSink)> {
    let region = table.lock().expect("regions").get(&key)?.clone();
    (end <= region.len()).then(|| (HEADER_LEN, SharedSink::new(RegionPiece { region, base })))
}
