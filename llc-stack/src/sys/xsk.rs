//! AF_XDP sockets: the UMEM, its fill and completion rings, the RX and TX
//! descriptor rings, binding and kicks.
//!
//! # Why our own ring code
//! The rings are four single-producer/single-consumer queues in shared memory
//! whose protocol (libxdp's `xsk.h`) fits in a page of code. The crates that
//! wrap it were weighed: `xsk-rs` pins `libbpf-sys` 1.5 while the loader's
//! `libbpf-rs` 0.27 needs 1.7 (only one can be linked), and `xdpilone` (pure
//! Rust, works here) is EUPL-1.2 licensed, a copyleft licence this MIT/Apache
//! workspace would rather not pull in, and it hides the descriptor `options`
//! word that multi-buffer frames need. Owning the code also lets the
//! ownership of every UMEM chunk be tracked in one place, which is what makes
//! lending chunks as Rust slices sound.
//!
//! # UMEM layout
//! One anonymous mapping per socket, cut into `chunk`-byte chunks (aligned
//! mode). The first `rx_chunks` chunks receive: each is, at any time, in
//! exactly one place: the fill ring, the kernel, the RX ring, a lent
//! [`RxFrame`], or the local backlog. The rest are TX slots of `slot_chunks`
//! consecutive chunks each, so one slot is a contiguous buffer for a whole
//! frame of the interface's MTU; a frame longer than a chunk leaves as several
//! descriptors (all but the last flagged `XDP_PKT_CONTD`), which needs the
//! socket bound with `XDP_USE_SG`.
//!
//! # A UMEM shared by several processes
//! On an interface shared by several endpoint processes, the sockets of one
//! RX queue share one buffer pool (`XDP_SHARED_UMEM`): a memfd UMEM, one
//! fill ring and one completion ring for all of them, each with its own RX
//! and TX ring. Then the RX chunks belong to the pool (each still in exactly
//! one place: the fill ring, the kernel, one member's RX ring, lent, or one
//! member's backlog), every member has its own region of TX slots, and the
//! shared rings' user-side indices are updated under a lock in the pool's
//! header. See the `pool` module.
//!
//! # Memory ordering
//! As libxdp: the producer index is stored with release ordering after the
//! descriptors are written; the consumer index is loaded with acquire
//! ordering before descriptors (or buffer bytes) are read, and stored with
//! release ordering after the last read.

use std::io;
use std::marker::PhantomData;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::Mapping;

mod pool;

/// Where the UMEM and rings of one socket come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct XskParams {
    /// Bytes per UMEM chunk: a power of two between 2048 and the page size.
    pub chunk: usize,
    /// Chunks reserved for receiving.
    pub rx_chunks: u32,
    /// TX slots.
    pub tx_slots: u32,
    /// Chunks per TX slot: a whole frame of `max_frame` bytes fits one slot.
    pub slot_chunks: u32,
    /// Largest frame (MTU + Ethernet header).
    pub max_frame: usize,
}

impl XskParams {
    /// Entries of the fill ring: room for every RX chunk twice over, so a
    /// chunk handed back always fits even when the kernel publishes its
    /// consumer index late.
    fn fill_size(&self) -> u32 {
        (2 * self.rx_chunks).next_power_of_two()
    }
    fn rx_size(&self) -> u32 {
        self.rx_chunks.next_power_of_two()
    }
    /// TX descriptors that may be in flight: every chunk of every slot.
    fn tx_size(&self) -> u32 {
        (self.tx_slots * self.slot_chunks).next_power_of_two()
    }
    fn comp_size(&self) -> u32 {
        self.tx_size()
    }
    fn umem_len(&self) -> usize {
        (self.rx_chunks as usize + (self.tx_slots * self.slot_chunks) as usize) * self.chunk
    }
}

/// Which setup step failed, so the caller can say what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum XskStep {
    /// `socket(AF_XDP)`.
    Socket,
    /// Allocating and registering the UMEM, creating and mapping rings.
    Rings,
    /// `bind` to the interface's queue.
    Bind,
    /// Taking and checking a shared pool another endpoint offers.
    Join,
}

/// One mapped ring of `T` entries.
struct Ring<T> {
    _map: Mapping,
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    mask: u32,
    size: u32,
    /// Producer rings: our producer index. Consumer rings: the last
    /// producer index seen.
    cached_prod: u32,
    /// Producer rings: the last consumer index seen, plus `size`. Consumer
    /// rings: our consumer index.
    cached_cons: u32,
    _t: PhantomData<T>,
}

impl<T: Copy> Ring<T> {
    /// Map the ring of `size` entries at page offset `pgoff` of socket `fd`,
    /// laid out as `off` says. `producer_side`: this process produces.
    fn map(
        fd: BorrowedFd<'_>,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: libc::off_t,
        producer_side: bool,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * mem::size_of::<T>();
        let map = Mapping::shared(fd, len, pgoff)?;
        let base = map.ptr;
        let at = |o: u64| -> io::Result<NonNull<u8>> {
            if o as usize + 4 > len {
                return Err(io::Error::other("ring offset outside the mapping"));
            }
            // SAFETY: `o` is inside the mapping (checked above).
            Ok(unsafe { NonNull::new_unchecked(base.as_ptr().add(o as usize)) })
        };
        let producer = at(off.producer)?.cast::<AtomicU32>();
        let consumer = at(off.consumer)?.cast::<AtomicU32>();
        let flags = at(off.flags)?.cast::<AtomicU32>();
        let descs = at(off.desc)?.cast::<T>();
        // SAFETY: producer and consumer are u32 words of the mapped ring
        // header (kernel-aligned); AtomicU32 has u32's layout.
        let (prod, cons) = unsafe {
            (
                producer.as_ref().load(Ordering::Acquire),
                consumer.as_ref().load(Ordering::Acquire),
            )
        };
        Ok(Ring {
            _map: map,
            producer,
            consumer,
            flags,
            descs,
            mask: size - 1,
            size,
            cached_prod: prod,
            cached_cons: if producer_side {
                cons.wrapping_add(size)
            } else {
                cons
            },
            _t: PhantomData,
        })
    }

    #[inline]
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping this ring owns (see `map`).
        unsafe { self.producer.as_ref() }
    }

    #[inline]
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { self.consumer.as_ref() }
    }

    /// Whether the kernel asked to be woken (`XDP_RING_NEED_WAKEUP`).
    #[inline]
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as in `producer`.
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    // --- producer side ----------------------------------------------------

    /// Free entries, looking at the kernel's consumer index only if fewer
    /// than `want` are known to be free.
    #[inline]
    fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Write entry `i` past our producer index (not yet visible).
    #[inline]
    fn write(&mut self, i: u32, value: T) {
        let idx = (self.cached_prod.wrapping_add(i) & self.mask) as usize;
        // SAFETY: idx < size, so the entry lies in the mapped descriptor
        // array; entries between the consumer and producer+free belong to the
        // producer (us), so the kernel does not read this one concurrently.
        unsafe { self.descs.as_ptr().add(idx).write_volatile(value) }
    }

    /// Publish `n` written entries.
    #[inline]
    fn submit(&mut self, n: u32) {
        self.cached_prod = self.cached_prod.wrapping_add(n);
        self.producer().store(self.cached_prod, Ordering::Release);
    }

    /// Entries published and not yet consumed by the kernel.
    #[inline]
    fn outstanding(&self) -> u32 {
        self.cached_prod
            .wrapping_sub(self.consumer().load(Ordering::Acquire))
    }

    // --- consumer side ----------------------------------------------------

    /// Entries ready to read.
    #[inline]
    fn available(&mut self) -> u32 {
        let n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n > 0 {
            return n;
        }
        self.cached_prod = self.producer().load(Ordering::Acquire);
        self.cached_prod.wrapping_sub(self.cached_cons)
    }

    /// Entry `i` past our consumer index (`i < available()`).
    #[inline]
    fn read(&self, i: u32) -> T {
        let idx = (self.cached_cons.wrapping_add(i) & self.mask) as usize;
        // SAFETY: idx < size, inside the mapped array; the entry was
        // published by the kernel (acquire load in `available`) and is ours
        // until `release` moves the consumer index past it.
        unsafe { self.descs.as_ptr().add(idx).read_volatile() }
    }

    /// Entry at absolute ring index `index` (consumer side, shared rings:
    /// the caller knows the entry is published and not yet consumed).
    #[inline]
    fn read_at(&self, index: u32) -> T {
        let idx = (index & self.mask) as usize;
        // SAFETY: idx < size, inside the mapped array; the caller holds the
        // pool lock and reads only entries between the consumer index it
        // owns and the producer index the kernel published (acquire).
        unsafe { self.descs.as_ptr().add(idx).read_volatile() }
    }

    /// Producer rings shared between processes: take over the producer
    /// index other processes advanced (called under the pool lock, which
    /// makes their stores visible).
    #[inline]
    fn sync_producer_side(&mut self) {
        self.cached_prod = self.producer().load(Ordering::Acquire);
        self.cached_cons = self
            .consumer()
            .load(Ordering::Acquire)
            .wrapping_add(self.size);
    }

    /// Hand `n` read entries back.
    #[inline]
    fn release(&mut self, n: u32) {
        self.cached_cons = self.cached_cons.wrapping_add(n);
        self.consumer().store(self.cached_cons, Ordering::Release);
    }
}

/// Counters of the kernel (`XDP_STATISTICS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KernelStats {
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    pub rx_ring_full: u64,
    pub rx_fill_ring_empty: u64,
    pub tx_ring_empty: u64,
}

/// One AF_XDP socket bound to one queue, with its own UMEM.
pub(crate) struct Xsk {
    // The pool's offer and claims go first (nobody takes a descriptor that
    // is about to close); rings are unmapped before the socket is closed,
    // the UMEM last (the kernel keeps its pages pinned until the socket is
    // gone).
    /// The shared buffer pool's state, when the UMEM is shared.
    pool: Option<pool::Pool>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fd: OwnedFd,
    /// The UMEM; a shared pool's mapping starts with the pool header.
    umem: Mapping,
    /// Where the UMEM starts in `umem` (0, or the shared pool's header length).
    umem_off: usize,
    params: XskParams,
    zero_copy: bool,
    /// End of the RX chunks (byte offset in the UMEM).
    rx_end: u64,
    /// Byte offset of our first TX slot.
    tx_base: u64,
    /// Free TX slots.
    tx_free: Vec<u32>,
    /// Descriptors of each TX slot not completed yet.
    tx_inflight: Vec<u32>,
    /// Frames submitted since the last kick.
    tx_unkicked: u32,
    /// RX chunks to give back to the fill ring.
    fill_backlog: Vec<u64>,
    /// Reassembly buffer for multi-buffer frames.
    scratch: Vec<u8>,
    /// Multi-buffer frames dropped because they were longer than a frame
    /// can be, or malformed descriptors.
    pub rx_bad: u64,
}

// SAFETY: the mappings are process-wide memory with no thread affinity and
// the socket is a plain descriptor; moving the owner moves the only handle.
unsafe impl Send for Xsk {}

/// `XDP_MAX_TX_SKB_BUDGET` (linux/if_xdp.h, 6.17; not yet in libc).
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// Hand the backlog to the fill ring once this many chunks are waiting (or
/// whenever the RX ring is empty).
const REFILL_BATCH: usize = 32;

fn setsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, value: &T) -> io::Result<()> {
    super::setsockopt(fd, libc::SOL_XDP, name, value)
}

impl Xsk {
    /// Create a socket with its UMEM and rings, prime the fill ring and bind
    /// it to queue `queue` of interface `ifindex`. `bind_flags` are
    /// `XDP_COPY`/`XDP_ZEROCOPY`, `XDP_USE_NEED_WAKEUP`, `XDP_USE_SG`.
    pub fn new(
        ifindex: u32,
        queue: u32,
        params: XskParams,
        bind_flags: u16,
    ) -> Result<Xsk, (XskStep, io::Error)> {
        let chunk = params.chunk;
        assert!(chunk.is_power_of_two() && chunk >= 2048);
        assert!(params.slot_chunks as usize * chunk >= params.max_frame);
        assert!(params.rx_chunks > 0 && params.tx_slots > 0);

        let fd = xdp_socket().map_err(|e| (XskStep::Socket, e))?;
        let rings = |e| (XskStep::Rings, e);

        let len = params.umem_len();
        let umem = Mapping::anonymous(len).map_err(rings)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr.as_ptr() as u64,
            len: len as u64,
            chunk_size: chunk as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg).map_err(rings)?;
        let sizes = [
            (libc::XDP_UMEM_FILL_RING, params.fill_size()),
            (libc::XDP_UMEM_COMPLETION_RING, params.comp_size()),
            (libc::XDP_RX_RING, params.rx_size()),
            (libc::XDP_TX_RING, params.tx_size()),
        ];
        for (opt, size) in sizes {
            setsockopt(fd.as_fd(), opt, &(size as libc::c_int)).map_err(rings)?;
        }
        // Linux 6.17+: let one `sendto` in copy mode transmit the whole TX
        // ring instead of 32 descriptors (`XDP_MAX_TX_SKB_BUDGET`). Older
        // kernels refuse the option; then `flush` kicks repeatedly.
        let budget = params.tx_size();
        if let Err(e) = setsockopt(fd.as_fd(), XDP_MAX_TX_SKB_BUDGET, &budget) {
            tracing::debug!(error = %e, "XDP_MAX_TX_SKB_BUDGET refused: 32 descriptors per kick");
        }
        let off = mmap_offsets(fd.as_fd()).map_err(rings)?;
        let (fill, comp) = map_umem_rings(fd.as_fd(), &off, params.fill_size(), params.comp_size())
            .map_err(rings)?;
        let rx = Ring::map(
            fd.as_fd(),
            &off.rx,
            params.rx_size(),
            libc::XDP_PGOFF_RX_RING,
            false,
        )
        .map_err(rings)?;
        let tx = Ring::map(
            fd.as_fd(),
            &off.tx,
            params.tx_size(),
            libc::XDP_PGOFF_TX_RING,
            true,
        )
        .map_err(rings)?;

        let tx_base = params.rx_chunks as u64 * chunk as u64;
        let mut xsk = Xsk {
            pool: None,
            umem_off: 0,
            rx_end: tx_base,
            fill,
            comp,
            rx,
            tx,
            fd,
            umem,
            params,
            zero_copy: bind_flags & libc::XDP_ZEROCOPY != 0,
            tx_base,
            tx_free: (0..params.tx_slots).rev().collect(),
            tx_inflight: vec![0; params.tx_slots as usize],
            tx_unkicked: 0,
            fill_backlog: (0..params.rx_chunks as u64)
                .rev()
                .map(|i| i * chunk as u64)
                .collect(),
            scratch: Vec::with_capacity(params.max_frame),
            rx_bad: 0,
        };
        // Prime the fill ring with every RX chunk (it is twice that size).
        xsk.refill();

        // SAFETY: sockaddr_xdp is plain old data; all-zero is valid.
        let mut addr: libc::sockaddr_xdp = unsafe { mem::zeroed() };
        addr.sxdp_family = libc::AF_XDP as u16;
        addr.sxdp_flags = bind_flags;
        addr.sxdp_ifindex = ifindex;
        addr.sxdp_queue_id = queue;
        // SAFETY: `addr` is a valid sockaddr_xdp whose size is passed with
        // it; the kernel copies it.
        syscall!(bind(
            xsk.fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_xdp).cast::<libc::sockaddr>(),
            mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        ))
        .map_err(|e| (XskStep::Bind, e))?;
        Ok(xsk)
    }

    /// The first byte of the UMEM.
    #[inline]
    fn umem_ptr(&self) -> *mut u8 {
        // SAFETY: `umem_off` is within the mapping (0, or the pool header's
        // length, which the mapping was made to exceed).
        unsafe { self.umem.ptr.as_ptr().add(self.umem_off) }
    }

    /// The socket (for the XSKMAP and poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the socket is bound in zero-copy mode.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Move backlog chunks into the fill ring, as many as fit.
    fn refill(&mut self) {
        if self.fill_backlog.is_empty() {
            return;
        }
        // A shared fill ring has several producers: serialise them.
        let _guard = match &self.pool {
            Some(pool) => match pool.lock() {
                Some(g) => {
                    self.fill.sync_producer_side();
                    Some(g)
                }
                None => return,
            },
            None => None,
        };
        let n = self.fill.free(self.fill_backlog.len() as u32) as usize;
        let n = n.min(self.fill_backlog.len());
        if n == 0 {
            return;
        }
        for i in 0..n {
            let addr = self.fill_backlog.pop().expect("n <= len");
            self.fill.write(i as u32, addr);
        }
        self.fill.submit(n as u32);
        // A zero-copy driver that ran out of chunks waits to be poked.
        self.wake_rx_if_needed();
    }

    /// Give the RX chunk holding byte `addr` back (via the backlog).
    #[inline]
    fn recycle(&mut self, addr: u64) {
        let chunk = self.params.chunk as u64;
        self.fill_backlog.push(addr & !(chunk - 1));
    }

    /// Whether `addr..addr+len` lies inside one RX chunk.
    #[inline]
    fn rx_desc_ok(&self, addr: u64, len: u32) -> bool {
        let chunk = self.params.chunk as u64;
        addr < self.rx_end && (addr & (chunk - 1)) + u64::from(len) <= chunk
    }

    /// Whether a received frame is waiting (no syscall).
    #[inline]
    pub fn rx_ready(&mut self) -> bool {
        self.rx.available() > 0
    }

    /// The next received frame, if one is complete. A frame in one buffer is
    /// lent in place; a multi-buffer frame is copied into a scratch buffer
    /// and its chunks are recycled at once.
    #[inline]
    pub fn rx_next(&mut self) -> Option<RxFrame<'_>> {
        loop {
            let avail = self.rx.available();
            if avail == 0 || self.fill_backlog.len() >= REFILL_BATCH {
                self.refill();
            }
            if avail == 0 {
                return None;
            }
            let first = self.rx.read(0);
            if first.options & libc::XDP_PKT_CONTD == 0 {
                if !self.rx_desc_ok(first.addr, first.len) {
                    self.drop_descs(1);
                    continue;
                }
                return Some(RxFrame {
                    kind: RxKind::InPlace {
                        addr: first.addr,
                        len: first.len as usize,
                    },
                    xsk: self,
                });
            }
            // Multi-buffer: the kernel publishes a frame's descriptors
            // together; find the last one.
            let Some(last) =
                (1..avail).find(|&i| self.rx.read(i).options & libc::XDP_PKT_CONTD == 0)
            else {
                if avail == self.rx.size {
                    // A full ring without a frame end cannot happen; recover.
                    self.drop_descs(avail);
                    continue;
                }
                return None;
            };
            let n = last + 1;
            self.scratch.clear();
            let mut ok = true;
            for i in 0..n {
                let d = self.rx.read(i);
                if !self.rx_desc_ok(d.addr, d.len)
                    || self.scratch.len() + d.len as usize > self.params.max_frame
                {
                    ok = false;
                    break;
                }
                // SAFETY: the descriptor lies inside one RX chunk of the UMEM
                // (checked above); the chunk is ours while its descriptor is
                // in the RX ring before our consumer index moves past it.
                let bytes = unsafe {
                    std::slice::from_raw_parts(self.umem_ptr().add(d.addr as usize), d.len as usize)
                };
                self.scratch.extend_from_slice(bytes);
            }
            self.drop_descs(n);
            if !ok {
                continue;
            }
            return Some(RxFrame {
                kind: RxKind::Scratch,
                xsk: self,
            });
        }
    }

    /// Release the first `n` RX descriptors and recycle their chunks.
    fn drop_descs(&mut self, n: u32) {
        for i in 0..n {
            let d = self.rx.read(i);
            if d.addr < self.rx_end {
                self.recycle(d.addr);
            } else {
                self.rx_bad += 1;
            }
        }
        self.rx.release(n);
    }

    // --- TX -------------------------------------------------------------

    /// Collect completed TX descriptors; slots whose descriptors all
    /// completed become free.
    pub fn reap(&mut self) {
        if let Some(pool) = &mut self.pool {
            pool.drain_completions(&mut self.comp);
            pool.collect(&mut self.tx_free);
            return;
        }
        let n = self.comp.available();
        if n == 0 {
            return;
        }
        let slot_len = self.params.slot_chunks as u64 * self.params.chunk as u64;
        for i in 0..n {
            let addr = self.comp.read(i);
            let Some(slot) = addr
                .checked_sub(self.tx_base)
                .map(|o| (o / slot_len) as usize)
                .filter(|&s| s < self.tx_inflight.len())
            else {
                continue;
            };
            let inflight = &mut self.tx_inflight[slot];
            if *inflight > 0 {
                *inflight -= 1;
                if *inflight == 0 {
                    self.tx_free.push(slot as u32);
                }
            }
        }
        self.comp.release(n);
    }

    /// Whether a TX slot and TX ring room for its largest frame are free
    /// (collects completions first if no slot is).
    #[inline]
    pub fn tx_has_room(&mut self) -> bool {
        if self.tx_free.is_empty() {
            self.reap();
        }
        !self.tx_free.is_empty() && self.tx.free(self.params.slot_chunks) >= self.params.slot_chunks
    }

    /// A free TX slot lent for one frame, if [`Xsk::tx_has_room`].
    #[inline]
    pub fn tx_next(&mut self) -> Option<TxSlot<'_>> {
        if !self.tx_has_room() {
            return None;
        }
        let slot = self.tx_free.pop()?;
        let offset = self.tx_base as usize
            + slot as usize * self.params.slot_chunks as usize * self.params.chunk;
        Some(TxSlot {
            xsk: self,
            slot: Some(slot),
            offset,
        })
    }

    /// TX frames submitted since the last kick.
    pub fn tx_unkicked(&self) -> u32 {
        self.tx_unkicked
    }

    /// TX descriptors the kernel has not consumed yet.
    pub fn tx_outstanding(&self) -> u32 {
        self.tx.outstanding()
    }

    /// Wake the kernel's transmit path if it asked for it (always in copy
    /// mode): one `sendto`, which in copy mode transmits up to the budget
    /// descriptors before returning. "Try again" answers are `Ok(false)`.
    pub fn kick(&mut self) -> io::Result<bool> {
        self.tx_unkicked = 0;
        if !self.tx.needs_wakeup() {
            return Ok(true);
        }
        // SAFETY: a zero-length send with no buffer or address reads no
        // memory; for an AF_XDP socket it only starts transmission.
        match syscall!(sendto(
            self.fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0
        )) {
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::ENETDOWN)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel wants a wake-up to refill from the fill ring
    /// (zero-copy drivers); a `recvfrom` does it.
    pub fn wake_rx_if_needed(&self) {
        if self.fill.needs_wakeup() && self.zero_copy {
            // SAFETY: a zero-length non-blocking receive with no buffer or
            // address reads and writes no memory.
            let _ = syscall!(recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut()
            ));
        }
    }

    /// The kernel's counters (`XDP_STATISTICS`), cumulative.
    pub fn kernel_stats(&self) -> io::Result<KernelStats> {
        // SAFETY: plain old data; all-zero is valid.
        let mut s: libc::xdp_statistics = unsafe { mem::zeroed() };
        let mut len = mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `s` is writable for `len` bytes; the kernel writes at most
        // that and updates `len`.
        syscall!(getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            (&mut s as *mut libc::xdp_statistics).cast::<libc::c_void>(),
            &mut len,
        ))?;
        Ok(KernelStats {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty: s.rx_fill_ring_empty_descs,
            tx_ring_empty: s.tx_ring_empty_descs,
        })
    }
}

enum RxKind {
    InPlace { addr: u64, len: usize },
    Scratch,
}

/// A received frame: in its UMEM chunk (given back to the kernel when this
/// is dropped) or reassembled in the scratch buffer.
pub(crate) struct RxFrame<'a> {
    xsk: &'a mut Xsk,
    kind: RxKind,
}

impl RxFrame<'_> {
    /// The frame, Ethernet header first.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        match self.kind {
            // SAFETY: `rx_desc_ok` checked the bytes lie inside one RX chunk
            // of the UMEM mapping. The descriptor is still in the RX ring
            // before our consumer index, so the chunk is not in the fill ring
            // and the kernel does not write it; `Drop` releases it, which
            // needs `&mut self` and so ends this borrow first.
            RxKind::InPlace { addr, len } => unsafe {
                std::slice::from_raw_parts(self.xsk.umem_ptr().add(addr as usize), len)
            },
            RxKind::Scratch => &self.xsk.scratch,
        }
    }
}

impl Drop for RxFrame<'_> {
    #[inline]
    fn drop(&mut self) {
        if let RxKind::InPlace { addr, .. } = self.kind {
            self.xsk.rx.release(1);
            self.xsk.recycle(addr);
        }
    }
}

/// A free TX slot: a contiguous buffer of whole chunks. [`TxSlot::send`]
/// queues the frame; dropping the slot unsent gives it back.
pub(crate) struct TxSlot<'a> {
    xsk: &'a mut Xsk,
    slot: Option<u32>,
    /// Byte offset of the slot in the UMEM.
    offset: usize,
}

impl TxSlot<'_> {
    /// The slot's buffer for one frame of up to the largest frame size.
    #[inline]
    pub fn buf(&mut self) -> &mut [u8] {
        let start = self.offset;
        // SAFETY: the slot's chunks lie inside the UMEM (the layout puts
        // `tx_slots` slots after the RX chunks) and hold at least
        // `max_frame` bytes. The slot was on the free list: none of its
        // descriptors is in the TX or completion ring, so the kernel neither
        // reads nor writes it until `send`, which consumes `self`.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.xsk.umem_ptr().add(start),
                self.xsk.params.max_frame,
            )
        }
    }

    /// Queue the first `len` bytes (`1..=max_frame`) for transmission: one
    /// descriptor per chunk, all but the last flagged `XDP_PKT_CONTD`.
    #[inline]
    pub fn send(mut self, len: usize) {
        assert!(len > 0 && len <= self.xsk.params.max_frame);
        let start = self.offset as u64;
        let slot = self.slot.take().expect("slot present until sent");
        let chunk = self.xsk.params.chunk;
        let n = len.div_ceil(chunk) as u32;
        for i in 0..n {
            let off = i as usize * chunk;
            let this = (len - off).min(chunk);
            self.xsk.tx.write(
                i,
                libc::xdp_desc {
                    addr: start + off as u64,
                    len: this as u32,
                    options: if i + 1 < n { libc::XDP_PKT_CONTD } else { 0 },
                },
            );
        }
        match &mut self.xsk.pool {
            // Counted in the pool before the kernel can see the descriptors.
            Some(pool) => pool.submitting(slot, n),
            None => self.xsk.tx_inflight[slot as usize] = n,
        }
        self.xsk.tx.submit(n);
        self.xsk.tx_unkicked += 1;
    }
}

impl Drop for TxSlot<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.xsk.tx_free.push(slot);
        }
    }
}

/// Wait until one of `fds` is readable or `timeout` passes.
pub(crate) fn poll_any(
    fds: &[BorrowedFd<'_>],
    timeout: Option<std::time::Duration>,
) -> io::Result<()> {
    let timeout_ms = match timeout {
        None => -1,
        Some(t) => {
            libc::c_int::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX)
        }
    };
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid, writable array of `len` pollfds for the call.
    match syscall!(poll(
        pfds.as_mut_ptr(),
        pfds.len() as libc::nfds_t,
        timeout_ms
    )) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        Err(e) => Err(e),
    }
}

/// The rings' offsets in the socket's mmap areas (`XDP_MMAP_OFFSETS`).
fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: xdp_mmap_offsets is plain old data; all-zero is valid.
    let mut off: libc::xdp_mmap_offsets = unsafe { mem::zeroed() };
    let mut optlen = mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: `off` is writable for `optlen` bytes; the kernel writes at most
    // that and updates `optlen`.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_XDP,
        libc::XDP_MMAP_OFFSETS,
        (&mut off as *mut libc::xdp_mmap_offsets).cast::<libc::c_void>(),
        &mut optlen,
    ))?;
    if optlen as usize != mem::size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::other(
            "kernel too old: no ring flags in XDP_MMAP_OFFSETS (need Linux 5.4)",
        ));
    }
    Ok(off)
}

/// What a socket of a shared pool is made with, when a privileged party
/// (the endpoint service) makes it for a process that may not
/// ([`Provider`]): the RX queue, the ring sizes and bind flags, and for a
/// pool's first socket the UMEM's place in the pool's memfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketSpec {
    /// RX queue to bind to.
    pub queue: u32,
    /// RX ring entries.
    pub rx: u32,
    /// TX ring entries.
    pub tx: u32,
    /// `XDP_USE_NEED_WAKEUP`, `XDP_USE_SG`, `XDP_COPY`/`XDP_ZEROCOPY`.
    pub flags: u16,
    /// For a pool's first socket: the UMEM and its fill and completion
    /// rings (a joiner shares the pool's).
    pub umem: Option<UmemSpec>,
}

/// The UMEM of a pool's first socket: `len` bytes of the pool's memfd from
/// `offset` (after the pool header), cut into `chunk`-byte chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UmemSpec {
    /// Byte offset in the memfd (page-aligned).
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// Bytes per chunk (2048 or 4096).
    pub chunk: u32,
    /// Fill ring entries.
    pub fill: u32,
    /// Completion ring entries.
    pub comp: u32,
}

/// Largest ring the service makes (entries).
pub const MAX_RING: u32 = 1 << 17;

impl SocketSpec {
    /// Whether the sizes are ones the kernel takes (powers of two within
    /// bounds) and the flags are a socket's, not another pool's.
    pub fn check(&self) -> Result<(), String> {
        let ring = |what: &str, n: u32| {
            if n.is_power_of_two() && n <= MAX_RING {
                Ok(())
            } else {
                Err(format!(
                    "{what} ring of {n} entries (a power of two up to {MAX_RING})"
                ))
            }
        };
        ring("RX", self.rx)?;
        ring("TX", self.tx)?;
        let allowed =
            libc::XDP_USE_NEED_WAKEUP | libc::XDP_USE_SG | libc::XDP_COPY | libc::XDP_ZEROCOPY;
        if self.flags & !allowed != 0 {
            return Err(format!("bind flags {:#x}", self.flags));
        }
        if let Some(u) = &self.umem {
            ring("fill", u.fill)?;
            ring("completion", u.comp)?;
            if !matches!(u.chunk, 2048 | 4096)
                || u.offset % 4096 != 0
                || u.len == 0
                || u.len % u64::from(u.chunk) != 0
            {
                return Err(format!(
                    "UMEM of {} bytes at {} in {}-byte chunks",
                    u.len, u.offset, u.chunk
                ));
            }
        }
        Ok(())
    }
}

/// Makes the sockets of a shared pool for a process that may not create
/// AF_XDP sockets itself (no CAP_NET_RAW): the endpoint service, asked
/// through `link::grant`. Each socket comes back bound; the process maps
/// its rings afterwards (Linux 6.5 and later allow that).
pub(crate) trait Provider {
    /// A pool's first socket: the UMEM registered from `memfd` as `spec`
    /// says, bound to `spec.queue`.
    fn create(
        &self,
        spec: &SocketSpec,
        memfd: BorrowedFd<'_>,
    ) -> Result<OwnedFd, (XskStep, io::Error)>;
    /// A further socket of the pool `pool` (one of its sockets), bound to
    /// `spec.queue` with `XDP_SHARED_UMEM`.
    fn join(
        &self,
        spec: &SocketSpec,
        pool: BorrowedFd<'_>,
    ) -> Result<OwnedFd, (XskStep, io::Error)>;
}

/// The privileged side of [`Provider`]: make a socket as `spec` says on
/// interface `ifindex`, with its UMEM in `memfd` (mapped here only while it
/// is registered: the kernel pins the pages) or sharing the pool of
/// `shared`. Needs CAP_NET_RAW; the pinned memory is charged to the
/// caller's RLIMIT_MEMLOCK unless it has CAP_IPC_LOCK.
pub(crate) fn make_socket(
    ifindex: u32,
    spec: &SocketSpec,
    memfd: Option<BorrowedFd<'_>>,
    shared: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd, (XskStep, io::Error)> {
    let invalid = |why: String| {
        (
            XskStep::Rings,
            io::Error::new(io::ErrorKind::InvalidInput, why),
        )
    };
    spec.check().map_err(invalid)?;
    let fd = xdp_socket().map_err(|e| (XskStep::Socket, e))?;
    let rings = |e| (XskStep::Rings, e);
    match (spec.umem, memfd, shared) {
        (Some(u), Some(memfd), None) => {
            // SAFETY: stat is plain old data; all-zero is valid.
            let mut st: libc::stat = unsafe { mem::zeroed() };
            // SAFETY: `st` is writable for the call.
            syscall!(fstat(memfd.as_raw_fd(), &mut st)).map_err(rings)?;
            let end = u.offset + u.len;
            if (st.st_mode & libc::S_IFMT) != libc::S_IFREG || (st.st_size as u64) < end {
                return Err(invalid(format!(
                    "the pool memory is not a file of at least {end} bytes"
                )));
            }
            let map = Mapping::shared(memfd, end as usize, 0).map_err(rings)?;
            let reg = libc::xdp_umem_reg {
                // SAFETY: offset < end: the UMEM lies inside the mapping.
                addr: unsafe { map.ptr.as_ptr().add(u.offset as usize) } as u64,
                len: u.len,
                chunk_size: u.chunk,
                headroom: 0,
                flags: 0,
                tx_metadata_len: 0,
            };
            setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg).map_err(rings)?;
            for (opt, size) in [
                (libc::XDP_UMEM_FILL_RING, u.fill),
                (libc::XDP_UMEM_COMPLETION_RING, u.comp),
            ] {
                setsockopt(fd.as_fd(), opt, &(size as libc::c_int)).map_err(rings)?;
            }
        }
        (None, None, Some(_)) => {}
        _ => {
            return Err(invalid(
                "a socket needs either its UMEM or a pool to share".into(),
            ))
        }
    }
    for (opt, size) in [(libc::XDP_RX_RING, spec.rx), (libc::XDP_TX_RING, spec.tx)] {
        setsockopt(fd.as_fd(), opt, &(size as libc::c_int)).map_err(rings)?;
    }
    let flags = if shared.is_some() {
        libc::XDP_SHARED_UMEM
    } else {
        spec.flags
    };
    pool::bind(fd.as_fd(), ifindex, spec.queue, flags, shared).map_err(|e| (XskStep::Bind, e))?;
    Ok(fd)
}

/// A new AF_XDP socket (close-on-exec).
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Map the fill and completion rings of the UMEM registered on `fd` (a
/// socket of the pool: its own, or the creator's for a joiner).
fn map_umem_rings(
    fd: BorrowedFd<'_>,
    off: &libc::xdp_mmap_offsets,
    fill_size: u32,
    comp_size: u32,
) -> io::Result<(Ring<u64>, Ring<u64>)> {
    let fill = Ring::map(
        fd,
        &off.fr,
        fill_size,
        libc::XDP_UMEM_PGOFF_FILL_RING as libc::off_t,
        true,
    )?;
    let comp = Ring::map(
        fd,
        &off.cr,
        comp_size,
        libc::XDP_UMEM_PGOFF_COMPLETION_RING as libc::off_t,
        false,
    )?;
    Ok((fill, comp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_cover_every_chunk() {
        let p = XskParams {
            chunk: 4096,
            rx_chunks: 3000,
            tx_slots: 100,
            slot_chunks: 16,
            max_frame: 65014,
        };
        assert_eq!(p.fill_size(), 8192);
        assert!(p.fill_size() >= 2 * p.rx_chunks);
        assert!(p.rx_size() >= p.rx_chunks);
        assert!(p.tx_size() >= p.tx_slots * p.slot_chunks);
        assert_eq!(p.umem_len(), (3000 + 1600) * 4096);
    }
}
