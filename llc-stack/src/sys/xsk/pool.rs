//! A buffer pool shared by the AF_XDP sockets of several endpoint
//! processes on one (interface, RX queue): `XDP_SHARED_UMEM`.
//!
//! # Why
//! The kernel keeps one buffer pool per (netdev, queue). A second socket on
//! a queue must bind with `XDP_SHARED_UMEM` naming a socket of the pool, and
//! then uses that pool's UMEM, fill ring and completion ring; only its RX and
//! TX rings are its own. Many endpoint processes (MPI ranks) on a NIC with
//! one RX queue (veth, most virtio-net) can use AF_XDP only this way.
//!
//! # Memory: a memfd every member maps
//! `[header][RX chunks][member 0's TX slots]...[member M-1's TX slots]`.
//! The first endpoint on the queue (the creator) makes the memfd, registers
//! the part after the header as the UMEM, creates the fill and completion
//! rings, primes the fill ring with every RX chunk and binds. UMEM addresses
//! are offsets, so every member may map the memfd at its own address.
//! memfd pages cost nothing until touched, but `XDP_UMEM_REG` pins the
//! whole UMEM: `members x tx_slots x slot_chunks` chunks of TX memory.
//!
//! # Joining
//! Every member offers its socket and its memfd descriptor under
//! `llc-xsk/v1/if<ifindex>/q<queue>/member/<pid>/<socket>,<memfd>`
//! (`xdp_prog::offer`). A later endpoint takes duplicates with
//! `pidfd_getfd`, maps the memfd, checks the header (magic, interface,
//! queue, chunk and frame sizes), maps the pool's fill and completion rings
//! through the taken socket, creates its own socket with only RX and TX
//! rings and binds it with `XDP_SHARED_UMEM`. (Endpoints starting together
//! do not race to create: the one holding the claim `.../creating` creates,
//! the others wait for its offer.) It then offers its own
//! socket and memfd, so the pool stays joinable after the creator is gone
//! (the kernel keeps the pool while any socket of it lives).
//!
//! # The lock
//! The fill ring (producer side) and the completion ring (consumer side)
//! are single-producer/single-consumer rings now used by several processes.
//! Their user-side index is serialised by a spinlock word in the header
//! that holds the holder's pid (compare-exchange 0 -> pid). A waiter that
//! has spun for a millisecond checks whether the holder lives
//! (`pidfd_open` fails with `ESRCH`, or the pidfd polls readable: exited,
//! also as an unreaped zombie) and steals the lock from a dead holder. A
//! wait is bounded (`LOCK_TIMEOUT`): a member that cannot get the lock skips
//! that refill or reap and tries again later.
//!
//! A death at any instruction leaves the rings consistent:
//! - fill ring: descriptors are written past the producer index, then the
//!   index is published; a death before publishing loses those chunks (they
//!   came from the dead member's own RX ring: see "Leaks").
//! - completion ring: each entry is applied through a one-entry journal in
//!   the header (intent: slot and new count, then the count, then the
//!   header's consumer index); the next holder replays an intent that was
//!   recorded but not committed (the replay is a plain store, so applying
//!   it twice is harmless), and publishes the kernel's consumer index from
//!   the header's.
//!
//! # TX: a region per member
//! Each member claims a region (`.../region/<n>` under the pool's nonce, an
//! abstract-socket claim freed when its holder dies) of `tx_slots` TX slots,
//! so TX slots need no shared free list. The header holds, per slot, the
//! descriptors submitted (written by the region's owner before it publishes
//! its TX ring) and completed (written by whoever drains the completion
//! ring, under the lock, attributing each completed address to its slot). A
//! slot is free when both are equal; a new owner of a dead member's region
//! starts from the counters as they are.
//!
//! # Leaks when a member dies
//! - RX: chunks in its RX ring, lent to it, or in its local backlog are lost
//!   to the pool: at most its RX ring's size plus a refill batch. Its share
//!   of the flow-control window ([`PoolLayout::share_chunks`]) and the
//!   rest of the pool keep the others going; a job that loses many members
//!   should be restarted (the pool is gone once every member is).
//! - TX: slots of its region whose descriptors the kernel never consumed
//!   (its TX ring at the moment of death) never complete: the next owner of
//!   the region never gets them back (at most its TX ring's content). A
//!   joiner takes a region without such slots while one is free.
//! - The lock word holds a pid: a holder's pid reused by another process
//!   before a waiter looks would look alive; the waiter then gives up after
//!   `LOCK_TIMEOUT` per attempt.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixDatagram;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use std::{io, mem};

use xdp_prog::offer::{self, Offer};

use super::{
    map_umem_rings, mmap_offsets, setsockopt, xdp_socket, Mapping, Provider, Ring, SocketSpec,
    UmemSpec, Xsk, XskParams, XskStep, REFILL_BATCH, XDP_MAX_TX_SKB_BUDGET,
};

/// "LLCPOOL" and layout version 1.
const MAGIC: u64 = 0x4C4C_4350_4F4F_4C01;
/// Prefix of the abstract names of pools (offers and claims).
const NAME_ROOT: &str = "llc-xsk/v1";
/// How long a waiter spins before it looks whether the holder lives.
const STEAL_CHECK: Duration = Duration::from_millis(1);
/// Longest wait for the lock before an operation is skipped.
const LOCK_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for another endpoint that is creating a queue's pool.
const CREATE_WAIT: Duration = Duration::from_secs(10);
/// Header flag: the creator bound in zero-copy mode.
const FLAG_ZERO_COPY: u32 = 1;

/// The pool header at the start of the memfd. Every field is atomic: other
/// processes read and write it concurrently.
#[repr(C)]
struct Header {
    /// [`MAGIC`], stored last by the creator (release).
    magic: AtomicU64,
    /// Random per pool: names the pool's region claims.
    nonce: AtomicU64,
    ifindex: AtomicU32,
    queue: AtomicU32,
    chunk: AtomicU32,
    rx_chunks: AtomicU32,
    members: AtomicU32,
    tx_slots: AtomicU32,
    slot_chunks: AtomicU32,
    max_frame: AtomicU32,
    flags: AtomicU32,
    /// The lock: 0, or the holder's pid.
    lock: AtomicU32,
    /// Locks taken over from dead holders.
    steals: AtomicU32,
    /// The completion ring's consumer index as far as applied.
    cq_applied: AtomicU32,
    /// Journal: `cq_applied + 1` while the entry at `cq_applied` is being
    /// applied as `completed[j_slot] = j_value`.
    j_seq: AtomicU32,
    j_slot: AtomicU32,
    j_value: AtomicU32,
}

/// The shape of a shared pool: who gets which part of the UMEM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PoolLayout {
    /// Bytes per chunk.
    pub chunk: usize,
    /// RX chunks of the pool (all members together).
    pub rx_chunks: u32,
    /// Most members (TX regions).
    pub members: u32,
    /// TX slots per member.
    pub tx_slots: u32,
    /// Chunks per TX slot.
    pub slot_chunks: u32,
    /// Largest frame.
    pub max_frame: usize,
}

impl PoolLayout {
    /// The layout for sockets of `params` with `members` members.
    pub fn new(params: &XskParams, members: u32) -> PoolLayout {
        PoolLayout {
            chunk: params.chunk,
            rx_chunks: params.rx_chunks,
            members,
            tx_slots: params.tx_slots,
            slot_chunks: params.slot_chunks,
            max_frame: params.max_frame,
        }
    }

    /// Whether a layout read from a header is one this code could have
    /// written (so none of the sizes below overflows or divides by zero).
    fn is_sane(&self) -> bool {
        self.chunk.is_power_of_two()
            && (2048..=65536).contains(&self.chunk)
            && (1..=256).contains(&self.members)
            && (1..=1 << 16).contains(&self.tx_slots)
            && (1..=17).contains(&self.slot_chunks)
            && (self.members..=1 << 24).contains(&self.rx_chunks)
            && self.max_frame <= self.slot_chunks as usize * self.chunk
    }

    fn total_slots(&self) -> u32 {
        self.members * self.tx_slots
    }

    /// Offset of the per-slot counters (submitted, then completed).
    fn counters_off() -> usize {
        mem::size_of::<Header>().next_multiple_of(64)
    }

    fn header_len(&self) -> usize {
        let page = super::super::page_size();
        (Self::counters_off() + 2 * 4 * self.total_slots() as usize).next_multiple_of(page)
    }

    fn rx_len(&self) -> u64 {
        u64::from(self.rx_chunks) * self.chunk as u64
    }

    fn slot_len(&self) -> u64 {
        u64::from(self.slot_chunks) * self.chunk as u64
    }

    fn umem_len(&self) -> usize {
        self.rx_len() as usize + self.total_slots() as usize * self.slot_len() as usize
    }

    fn fill_size(&self) -> u32 {
        (2 * self.rx_chunks).next_power_of_two()
    }

    fn comp_size(&self) -> u32 {
        (self.total_slots() * self.slot_chunks).next_power_of_two()
    }

    /// A member's RX ring: twice its share, so a burst within the window
    /// never overflows it; it also bounds what a killed member takes along.
    fn member_rx_size(&self) -> u32 {
        (2 * (self.rx_chunks / self.members).max(REFILL_BATCH as u32))
            .next_power_of_two()
            .min(self.rx_chunks.next_power_of_two())
            .max(64)
    }

    fn member_tx_size(&self) -> u32 {
        (self.tx_slots * self.slot_chunks).next_power_of_two()
    }

    /// RX chunks one member may have in flight so that all members together
    /// cannot empty the fill ring: an equal share, less the chunks a member
    /// keeps in its backlog before handing them back.
    pub fn share_chunks(&self) -> u32 {
        (self.rx_chunks / self.members)
            .saturating_sub(REFILL_BATCH as u32)
            .max(1)
    }

    /// The pool-wide slot index of a completed TX address.
    fn global_slot(&self, addr: u64) -> Option<u32> {
        let slot = addr.checked_sub(self.rx_len())? / self.slot_len();
        (slot < u64::from(self.total_slots())).then_some(slot as u32)
    }
}

/// What a device may report about its pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PoolInfo {
    /// This socket created the pool.
    pub created: bool,
    /// Our TX region.
    pub member: u32,
    /// Most members.
    pub members: u32,
    /// RX chunks one member may have in flight.
    pub share_chunks: u32,
    /// Locks taken over from dead holders (pool-wide).
    pub steals: u32,
    /// Lock waits given up (this member).
    pub lock_timeouts: u64,
}

/// One member's view of the shared pool.
pub(super) struct Pool {
    // Offer and claim go first: nobody takes our descriptors as they close.
    _offer: Option<Offer>,
    _region: UnixDatagram,
    memfd: OwnedFd,
    header: NonNull<Header>,
    counters: NonNull<AtomicU32>,
    layout: PoolLayout,
    member: u32,
    created: bool,
    me: u32,
    /// Our slots with descriptors in flight.
    inflight: Vec<u32>,
    lock_timeouts: std::cell::Cell<u64>,
}

/// The pool lock, released on drop.
pub(super) struct PoolLock<'a> {
    header: &'a Header,
}

impl Drop for PoolLock<'_> {
    fn drop(&mut self) {
        self.header.lock.store(0, Ordering::Release);
    }
}

/// Whether process `pid` has exited (or never existed). A zombie counts as
/// exited: its pidfd polls readable.
fn process_gone(pid: u32) -> bool {
    // SAFETY: pidfd_open takes two integers and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    }
    // SAFETY: the kernel returned a fresh descriptor that nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid, writable pollfd for the call.
    matches!(syscall!(poll(&mut pfd, 1, 0)), Ok(n) if n > 0)
}

fn pool_prefix(ifindex: u32, queue: u32) -> String {
    format!("{NAME_ROOT}/if{ifindex}/q{queue}/")
}

impl Pool {
    fn header(&self) -> &Header {
        // SAFETY: the header lies at the start of the pool mapping, which
        // outlives `self` (the `Xsk` drops its pool before its UMEM); all
        // fields are atomics, so shared access from other processes is fine.
        unsafe { self.header.as_ref() }
    }

    /// Submitted (`which` 0) or completed (1) counter of pool slot `g`.
    fn counter(&self, which: u32, g: u32) -> &AtomicU32 {
        debug_assert!(which < 2 && g < self.layout.total_slots());
        let i = (which * self.layout.total_slots() + g) as usize;
        // SAFETY: the counters array has 2 x total_slots entries after the
        // header, inside the header pages of the mapping (`header_len`).
        unsafe { &*self.counters.as_ptr().add(i) }
    }

    /// Take the pool lock (bounded wait); `None`: gave up.
    pub(super) fn lock(&self) -> Option<PoolLock<'_>> {
        let h = self.header();
        let start = Instant::now();
        let mut last_check = start;
        let mut spins = 0u32;
        loop {
            match h
                .lock
                .compare_exchange_weak(0, self.me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Some(PoolLock { header: h }),
                Err(holder) => {
                    spins = spins.wrapping_add(1);
                    if spins & 127 != 0 {
                        std::hint::spin_loop();
                        continue;
                    }
                    let now = Instant::now();
                    if holder != 0 && now - last_check >= STEAL_CHECK {
                        last_check = now;
                        if process_gone(holder)
                            && h.lock
                                .compare_exchange(
                                    holder,
                                    self.me,
                                    Ordering::Acquire,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                        {
                            h.steals.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!(holder, "took the AF_XDP pool lock from a dead holder");
                            return Some(PoolLock { header: h });
                        }
                    }
                    if now - start >= LOCK_TIMEOUT {
                        self.lock_timeouts.set(self.lock_timeouts.get() + 1);
                        tracing::warn!(holder, "AF_XDP pool lock held too long; skipping");
                        return None;
                    }
                    // The holder may be waiting for our core.
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Under the lock: apply completed TX descriptors to their slots'
    /// counters, through the journal, and hand the entries back.
    pub(super) fn drain_completions(&mut self, comp: &mut Ring<u64>) {
        // Nothing new and no unfinished intent: no need for the lock.
        let h = self.header();
        let applied = h.cq_applied.load(Ordering::Acquire);
        if comp.producer().load(Ordering::Acquire) == applied
            && h.j_seq.load(Ordering::Acquire) != applied.wrapping_add(1)
            && comp.consumer().load(Ordering::Relaxed) == applied
        {
            return;
        }
        let Some(_guard) = self.lock() else {
            return;
        };
        let h = self.header();
        let mut applied = h.cq_applied.load(Ordering::Acquire);
        // A holder died between recording an intent and committing it.
        if h.j_seq.load(Ordering::Acquire) == applied.wrapping_add(1) {
            let g = h.j_slot.load(Ordering::Relaxed);
            if g < self.layout.total_slots() {
                let v = h.j_value.load(Ordering::Relaxed);
                self.counter(1, g).store(v, Ordering::Release);
            }
            applied = applied.wrapping_add(1);
            h.cq_applied.store(applied, Ordering::Release);
        }
        let produced = comp.producer().load(Ordering::Acquire);
        while applied != produced {
            let addr = comp.read_at(applied);
            if let Some(g) = self.layout.global_slot(addr) {
                let c = self.counter(1, g);
                let v = c.load(Ordering::Relaxed).wrapping_add(1);
                h.j_slot.store(g, Ordering::Relaxed);
                h.j_value.store(v, Ordering::Relaxed);
                h.j_seq.store(applied.wrapping_add(1), Ordering::Release);
                c.store(v, Ordering::Release);
            }
            applied = applied.wrapping_add(1);
            h.cq_applied.store(applied, Ordering::Release);
        }
        comp.consumer().store(applied, Ordering::Release);
    }

    /// Our slots whose descriptors all completed go back to `free`.
    pub(super) fn collect(&mut self, free: &mut Vec<u32>) {
        let base = self.member * self.layout.tx_slots;
        let mut i = 0;
        while i < self.inflight.len() {
            let g = base + self.inflight[i];
            if self.counter(1, g).load(Ordering::Acquire)
                == self.counter(0, g).load(Ordering::Relaxed)
            {
                free.push(self.inflight.swap_remove(i));
            } else {
                i += 1;
            }
        }
    }

    /// Our slot `slot` is about to be submitted as `n` descriptors.
    pub(super) fn submitting(&mut self, slot: u32, n: u32) {
        let g = self.member * self.layout.tx_slots + slot;
        let c = self.counter(0, g);
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Release);
        self.inflight.push(slot);
    }

    pub(super) fn info(&self) -> PoolInfo {
        PoolInfo {
            created: self.created,
            member: self.member,
            members: self.layout.members,
            share_chunks: self.layout.share_chunks(),
            steals: self.header().steals.load(Ordering::Relaxed),
            lock_timeouts: self.lock_timeouts.get(),
        }
    }
}

/// Slots of region `n` whose descriptors have not all completed, in the
/// pool mapped at `umem` (checked to be at least `layout.header_len()`).
fn busy_slots(umem: &Mapping, layout: &PoolLayout, n: u32) -> u32 {
    let total = layout.total_slots();
    // SAFETY: the counters (2 x total u32 after `counters_off`) lie inside
    // the header pages, which the mapping covers; they are atomics.
    let counter = |i: u32| unsafe {
        &*umem
            .ptr
            .as_ptr()
            .add(PoolLayout::counters_off())
            .cast::<AtomicU32>()
            .add(i as usize)
    };
    (n * layout.tx_slots..(n + 1) * layout.tx_slots)
        .filter(|&g| {
            counter(g).load(Ordering::Relaxed) != counter(total + g).load(Ordering::Acquire)
        })
        .count() as u32
}

pub(super) fn bind(
    fd: BorrowedFd<'_>,
    ifindex: u32,
    queue: u32,
    flags: u16,
    shared: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    // SAFETY: sockaddr_xdp is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_xdp = unsafe { mem::zeroed() };
    addr.sxdp_family = libc::AF_XDP as u16;
    addr.sxdp_flags = flags;
    addr.sxdp_ifindex = ifindex;
    addr.sxdp_queue_id = queue;
    if let Some(s) = shared {
        addr.sxdp_shared_umem_fd = s.as_raw_fd() as u32;
    }
    // SAFETY: `addr` is a valid sockaddr_xdp whose size is passed with it;
    // the kernel copies it.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_xdp).cast::<libc::sockaddr>(),
        mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
    ))?;
    Ok(())
}

/// Claim a free TX region of the pool named by `nonce`, preferring one
/// without slots a dead owner left in flight (`busy_slots(n)`: how many of
/// region `n`'s slots are not free), so leaked slots stay with regions
/// nobody needs while clean ones remain.
fn claim_region(
    ifindex: u32,
    queue: u32,
    nonce: u64,
    members: u32,
    busy_slots: impl Fn(u32) -> u32,
) -> io::Result<(u32, UnixDatagram)> {
    let prefix = format!("{}{nonce:016x}/region/", pool_prefix(ifindex, queue));
    let mut best: Option<(u32, u32, UnixDatagram)> = None;
    for n in 0..members {
        if let Some(s) = offer::claim(&format!("{prefix}{n}"))? {
            let busy = busy_slots(n);
            if busy == 0 {
                return Ok((n, s));
            }
            if best.as_ref().is_none_or(|&(_, b, _)| busy < b) {
                // The claim we held before (if any) is released here.
                best = Some((n, busy, s));
            }
        }
    }
    best.map(|(n, _, s)| (n, s)).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!("all {members} members of the shared AF_XDP pool are taken"),
        )
    })
}

/// A random-enough pool nonce: time, pid and an address.
fn nonce() -> u64 {
    let t = super::super::monotonic_nanos();
    let x = t ^ (u64::from(std::process::id()) << 32) ^ (&t as *const u64 as u64);
    // splitmix64 finaliser
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Xsk {
    /// Create the shared pool of queue `queue` of `ifindex` (the first
    /// endpoint there): memfd UMEM, fill and completion rings, our socket
    /// bound with `bind_flags`, and the offer to later members.
    ///
    /// With a `provider`, it makes the socket (registering the UMEM and
    /// binding it); this process then maps the rings of the bound socket.
    pub fn create_pool(
        ifindex: u32,
        queue: u32,
        params: XskParams,
        members: u32,
        bind_flags: u16,
        provider: Option<&dyn Provider>,
    ) -> Result<Xsk, (XskStep, io::Error)> {
        let layout = PoolLayout::new(&params, members);
        assert!(members > 0 && params.slot_chunks as usize * params.chunk >= params.max_frame);
        let rings = |e| (XskStep::Rings, e);
        // SAFETY: the name is a NUL-terminated literal; no other pointers.
        let memfd =
            syscall!(memfd_create(c"llc-xsk-pool".as_ptr(), libc::MFD_CLOEXEC)).map_err(rings)?;
        // SAFETY: memfd_create returned a fresh descriptor nobody else owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(memfd) };
        let header_len = layout.header_len();
        let total = header_len + layout.umem_len();
        // SAFETY: ftruncate takes integers only.
        syscall!(ftruncate(memfd.as_raw_fd(), total as libc::off_t)).map_err(rings)?;
        let umem = Mapping::shared(memfd.as_fd(), total, 0).map_err(rings)?;
        // SAFETY: the mapping is page-aligned and larger than the header,
        // whose fields are all atomics (valid when zero, as a new memfd is).
        let header = unsafe { &*umem.ptr.as_ptr().cast::<Header>() };
        let nonce = nonce();
        for (field, value) in [
            (&header.ifindex, ifindex),
            (&header.queue, queue),
            (&header.chunk, params.chunk as u32),
            (&header.rx_chunks, layout.rx_chunks),
            (&header.members, members),
            (&header.tx_slots, layout.tx_slots),
            (&header.slot_chunks, layout.slot_chunks),
            (&header.max_frame, layout.max_frame as u32),
            (
                &header.flags,
                if bind_flags & libc::XDP_ZEROCOPY != 0 {
                    FLAG_ZERO_COPY
                } else {
                    0
                },
            ),
        ] {
            field.store(value, Ordering::Relaxed);
        }
        header.nonce.store(nonce, Ordering::Relaxed);

        let fd = match provider {
            Some(p) => {
                let spec = SocketSpec {
                    queue,
                    rx: layout.member_rx_size(),
                    tx: layout.member_tx_size(),
                    flags: bind_flags,
                    umem: Some(UmemSpec {
                        offset: header_len as u64,
                        len: layout.umem_len() as u64,
                        chunk: params.chunk as u32,
                        fill: layout.fill_size(),
                        comp: layout.comp_size(),
                    }),
                };
                p.create(&spec, memfd.as_fd())?
            }
            None => {
                let fd = xdp_socket().map_err(|e| (XskStep::Socket, e))?;
                let reg = libc::xdp_umem_reg {
                    // SAFETY: header_len < total: the UMEM part is inside
                    // the mapping.
                    addr: unsafe { umem.ptr.as_ptr().add(header_len) } as u64,
                    len: layout.umem_len() as u64,
                    chunk_size: params.chunk as u32,
                    headroom: 0,
                    flags: 0,
                    tx_metadata_len: 0,
                };
                setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg).map_err(rings)?;
                let sizes = [
                    (libc::XDP_UMEM_FILL_RING, layout.fill_size()),
                    (libc::XDP_UMEM_COMPLETION_RING, layout.comp_size()),
                    (libc::XDP_RX_RING, layout.member_rx_size()),
                    (libc::XDP_TX_RING, layout.member_tx_size()),
                ];
                for (opt, size) in sizes {
                    setsockopt(fd.as_fd(), opt, &(size as libc::c_int)).map_err(rings)?;
                }
                fd
            }
        };
        let off = mmap_offsets(fd.as_fd()).map_err(rings)?;
        let (fill, comp) = map_umem_rings(fd.as_fd(), &off, layout.fill_size(), layout.comp_size())
            .map_err(rings)?;
        // A new pool: every region is clean.
        let (region, claim) = claim_region(ifindex, queue, nonce, members, |_| 0).map_err(rings)?;
        let mut xsk = Self::member(
            fd, memfd, umem, layout, params, region, claim, fill, comp, true, bind_flags,
        )
        .map_err(rings)?;
        // Prime the fill ring with every RX chunk (it is twice that size).
        let chunk = params.chunk as u64;
        xsk.fill_backlog = (0..u64::from(layout.rx_chunks))
            .rev()
            .map(|i| i * chunk)
            .collect();
        xsk.refill();
        if provider.is_none() {
            bind(xsk.fd.as_fd(), ifindex, queue, bind_flags, None)
                .map_err(|e| (XskStep::Bind, e))?;
        }
        if let Some(pool) = &xsk.pool {
            pool.header().magic.store(MAGIC, Ordering::Release);
        }
        xsk.offer(ifindex, queue).map_err(rings)?;
        Ok(xsk)
    }

    /// Join the pool of queue `queue` of `ifindex`, or create it when no
    /// live member offers one. Creators are serialised by the claim
    /// `.../creating` (held until the new pool is offered, freed if its
    /// holder dies): endpoints starting together do not each build a UMEM
    /// only to find the queue taken; they wait (at most `CREATE_WAIT`) for
    /// the creator's offer and join.
    pub fn join_or_create_pool(
        ifindex: u32,
        queue: u32,
        params: XskParams,
        members: u32,
        bind_flags: u16,
        provider: Option<&dyn Provider>,
    ) -> Result<Xsk, (XskStep, io::Error)> {
        let name = format!("{}creating", pool_prefix(ifindex, queue));
        let deadline = Instant::now() + CREATE_WAIT;
        let mut pause = Duration::from_micros(500);
        loop {
            if let Some(x) = Self::join_pool(ifindex, queue, params, provider)? {
                return Ok(x);
            }
            match offer::claim(&name).map_err(|e| (XskStep::Join, e))? {
                Some(_creating) => {
                    // A creator may have offered between our look and claim.
                    if let Some(x) = Self::join_pool(ifindex, queue, params, provider)? {
                        return Ok(x);
                    }
                    return Self::create_pool(
                        ifindex, queue, params, members, bind_flags, provider,
                    );
                }
                None if Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(10));
                }
                None => {
                    return Err((
                        XskStep::Join,
                        io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "another endpoint has been creating this queue's shared pool \
                                 for {CREATE_WAIT:?} without offering it"
                            ),
                        ),
                    ))
                }
            }
        }
    }

    /// Join the shared pool a live member offers for queue `queue` of
    /// `ifindex`; `Ok(None)` when nobody offers one.
    pub fn join_pool(
        ifindex: u32,
        queue: u32,
        params: XskParams,
        provider: Option<&dyn Provider>,
    ) -> Result<Option<Xsk>, (XskStep, io::Error)> {
        let join = |e| (XskStep::Join, e);
        let offered = offer::offers(&pool_prefix(ifindex, queue)).map_err(join)?;
        let mut refused = None;
        for o in offered.iter().filter(|o| o.fds.len() == 2) {
            match Self::join_offer(ifindex, queue, params, o, provider) {
                Ok(x) => return Ok(Some(x)),
                Err((XskStep::Join, e)) => {
                    tracing::debug!(pid = o.pid, error = %e, "AF_XDP pool member not usable");
                    if e.raw_os_error() == Some(libc::EPERM)
                        || e.kind() == io::ErrorKind::InvalidData
                    {
                        refused = Some(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        match refused {
            Some(e) => Err(join(e)),
            None => Ok(None),
        }
    }

    fn join_offer(
        ifindex: u32,
        queue: u32,
        params: XskParams,
        o: &offer::Offered,
        provider: Option<&dyn Provider>,
    ) -> Result<Xsk, (XskStep, io::Error)> {
        let join = |e| (XskStep::Join, e);
        let mut fds = o.take().map_err(join)?.into_iter();
        let (theirs, memfd) = (fds.next().expect("two"), fds.next().expect("two"));
        // SAFETY: stat is plain old data; all-zero is valid.
        let mut st: libc::stat = unsafe { mem::zeroed() };
        // SAFETY: `st` is writable for the call.
        syscall!(fstat(memfd.as_raw_fd(), &mut st)).map_err(join)?;
        let size = st.st_size as usize;
        let head = mem::size_of::<Header>();
        if (st.st_mode & libc::S_IFMT) != libc::S_IFREG || size < head {
            return Err(join(io::Error::other(
                "offered descriptor is not a pool memfd",
            )));
        }
        let umem = Mapping::shared(memfd.as_fd(), size, 0).map_err(join)?;
        // SAFETY: the mapping is page-aligned and at least a header long;
        // all fields are atomics.
        let header = unsafe { &*umem.ptr.as_ptr().cast::<Header>() };
        if header.magic.load(Ordering::Acquire) != MAGIC {
            return Err(join(io::Error::other("offered memfd is not a ready pool")));
        }
        let get = |f: &AtomicU32| f.load(Ordering::Relaxed);
        let layout = PoolLayout {
            chunk: get(&header.chunk) as usize,
            rx_chunks: get(&header.rx_chunks),
            members: get(&header.members),
            tx_slots: get(&header.tx_slots),
            slot_chunks: get(&header.slot_chunks),
            max_frame: get(&header.max_frame) as usize,
        };
        if get(&header.ifindex) != ifindex || get(&header.queue) != queue {
            return Err(join(io::Error::other("offered pool is of another queue")));
        }
        if !layout.is_sane() || size < layout.header_len() + layout.umem_len() {
            return Err(join(io::Error::other(
                "offered pool header is inconsistent",
            )));
        }
        if layout.chunk != params.chunk || layout.max_frame != params.max_frame {
            return Err(join(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the shared AF_XDP pool on this queue has {}-byte chunks for {}-byte frames; \
                     this endpoint needs {}-byte chunks for {}-byte frames (MTU changed?)",
                    layout.chunk, layout.max_frame, params.chunk, params.max_frame
                ),
            )));
        }
        let nonce = header.nonce.load(Ordering::Relaxed);
        let zero_copy = get(&header.flags) & FLAG_ZERO_COPY != 0;

        let flags = if zero_copy { libc::XDP_ZEROCOPY } else { 0 };
        let rings = |e| (XskStep::Rings, e);
        let fd = match provider {
            Some(p) => {
                let spec = SocketSpec {
                    queue,
                    rx: layout.member_rx_size(),
                    tx: layout.member_tx_size(),
                    flags,
                    umem: None,
                };
                p.join(&spec, theirs.as_fd())?
            }
            None => {
                let fd = xdp_socket().map_err(|e| (XskStep::Socket, e))?;
                for (opt, size) in [
                    (libc::XDP_RX_RING, layout.member_rx_size()),
                    (libc::XDP_TX_RING, layout.member_tx_size()),
                ] {
                    setsockopt(fd.as_fd(), opt, &(size as libc::c_int)).map_err(rings)?;
                }
                fd
            }
        };
        let off = mmap_offsets(fd.as_fd()).map_err(rings)?;
        // The pool's fill and completion rings, through a socket of the pool.
        let (fill, comp) =
            map_umem_rings(theirs.as_fd(), &off, layout.fill_size(), layout.comp_size())
                .map_err(join)?;
        let (region, claim) = claim_region(ifindex, queue, nonce, layout.members, |n| {
            busy_slots(&umem, &layout, n)
        })
        .map_err(|e| (XskStep::Bind, e))?;
        let member_params = XskParams {
            rx_chunks: layout.rx_chunks,
            tx_slots: layout.tx_slots,
            slot_chunks: layout.slot_chunks,
            ..params
        };
        let xsk = Self::member(
            fd,
            memfd,
            umem,
            layout,
            member_params,
            region,
            claim,
            fill,
            comp,
            false,
            flags,
        )
        .map_err(rings)?;
        if provider.is_none() {
            bind(
                xsk.fd.as_fd(),
                ifindex,
                queue,
                libc::XDP_SHARED_UMEM,
                Some(theirs.as_fd()),
            )
            .map_err(|e| (XskStep::Bind, e))?;
        }
        let mut xsk = xsk;
        xsk.offer(ifindex, queue).map_err(rings)?;
        tracing::debug!(
            ifindex,
            queue,
            from = o.pid,
            region,
            "joined a shared AF_XDP pool"
        );
        Ok(xsk)
    }

    /// The member's own RX/TX rings and its state, for a socket whose UMEM
    /// is the pool mapped at `umem`.
    #[allow(clippy::too_many_arguments)]
    fn member(
        fd: OwnedFd,
        memfd: OwnedFd,
        umem: Mapping,
        layout: PoolLayout,
        params: XskParams,
        region: u32,
        claim: UnixDatagram,
        fill: Ring<u64>,
        comp: Ring<u64>,
        created: bool,
        bind_flags: u16,
    ) -> io::Result<Xsk> {
        let off = mmap_offsets(fd.as_fd())?;
        let rx = Ring::map(
            fd.as_fd(),
            &off.rx,
            layout.member_rx_size(),
            libc::XDP_PGOFF_RX_RING,
            false,
        )?;
        let tx = Ring::map(
            fd.as_fd(),
            &off.tx,
            layout.member_tx_size(),
            libc::XDP_PGOFF_TX_RING,
            true,
        )?;
        let budget = layout.member_tx_size();
        if let Err(e) = setsockopt(fd.as_fd(), XDP_MAX_TX_SKB_BUDGET, &budget) {
            tracing::debug!(error = %e, "XDP_MAX_TX_SKB_BUDGET refused: 32 descriptors per kick");
        }
        let header_len = layout.header_len();
        let header = umem.ptr.cast::<Header>();
        // SAFETY: the counters lie inside the header pages of the mapping.
        let counters = unsafe {
            NonNull::new_unchecked(
                umem.ptr
                    .as_ptr()
                    .add(PoolLayout::counters_off())
                    .cast::<AtomicU32>(),
            )
        };
        let mut pool = Pool {
            _offer: None,
            _region: claim,
            memfd,
            header,
            counters,
            layout,
            member: region,
            created,
            // SAFETY: getpid has no preconditions.
            me: unsafe { libc::getpid() } as u32,
            inflight: Vec::new(),
            lock_timeouts: std::cell::Cell::new(0),
        };
        // A dead member's region: slots with descriptors not completed yet
        // wait for them (or stay lost, see the module docs).
        let mut tx_free = Vec::new();
        pool.inflight = (0..layout.tx_slots).rev().collect();
        pool.collect(&mut tx_free);
        let rx_end = layout.rx_len();
        let tx_base = rx_end + u64::from(region) * u64::from(layout.tx_slots) * layout.slot_len();
        Ok(Xsk {
            pool: Some(pool),
            fill,
            comp,
            rx,
            tx,
            fd,
            umem,
            umem_off: header_len,
            params,
            zero_copy: bind_flags & libc::XDP_ZEROCOPY != 0,
            rx_end,
            tx_base,
            tx_free,
            tx_inflight: Vec::new(),
            tx_unkicked: 0,
            fill_backlog: Vec::with_capacity(REFILL_BATCH * 2),
            scratch: Vec::with_capacity(params.max_frame),
            rx_bad: 0,
        })
    }

    /// Offer our socket and the memfd to later members.
    fn offer(&mut self, ifindex: u32, queue: u32) -> io::Result<()> {
        let pool = self.pool.as_mut().expect("a pool member");
        pool._offer = Some(Offer::new(
            &pool_prefix(ifindex, queue),
            &[self.fd.as_fd(), pool.memfd.as_fd()],
        )?);
        Ok(())
    }

    /// The shared pool's state, if the UMEM is shared.
    pub fn pool_info(&self) -> Option<PoolInfo> {
        self.pool.as_ref().map(Pool::info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_shares_and_sizes() {
        let l = PoolLayout {
            chunk: 4096,
            rx_chunks: 4096,
            members: 16,
            tx_slots: 256,
            slot_chunks: 1,
            max_frame: 1514,
        };
        assert_eq!(l.share_chunks(), 256 - 32);
        assert!(l.share_chunks() * l.members + 32 * l.members <= l.rx_chunks);
        assert_eq!(l.fill_size(), 8192);
        assert_eq!(l.comp_size(), 4096);
        assert_eq!(l.member_rx_size(), 512);
        assert_eq!(l.member_tx_size(), 256);
        assert_eq!(l.umem_len(), (4096 + 16 * 256) * 4096);
        assert_eq!(l.header_len() % 4096, 0);
        assert!(l.header_len() >= PoolLayout::counters_off() + 8 * 16 * 256);
        assert_eq!(l.global_slot(0), None);
        assert_eq!(l.global_slot(4096 * 4096), Some(0));
        assert_eq!(l.global_slot(4096 * 4096 + 4096 * 257 + 100), Some(257));
        assert_eq!(l.global_slot(4096 * (4096 + 16 * 256)), None);
        assert!(l.is_sane());
        assert!(!PoolLayout {
            slot_chunks: 0,
            ..l
        }
        .is_sane());
        assert!(!PoolLayout { members: 0, ..l }.is_sane());
        assert!(!PoolLayout {
            max_frame: 9014,
            ..l
        }
        .is_sane());
    }

    fn make_memfd(len: usize) -> (OwnedFd, Mapping) {
        // SAFETY: the name is a NUL-terminated literal.
        let fd = syscall!(memfd_create(c"llc-xsk-test".as_ptr(), libc::MFD_CLOEXEC)).unwrap();
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate takes integers only.
        syscall!(ftruncate(fd.as_raw_fd(), len as libc::off_t)).unwrap();
        let map = Mapping::shared(fd.as_fd(), len, 0).unwrap();
        (fd, map)
    }

    /// A pool (header and counters in a memfd) and a completion ring laid
    /// out in another memfd as the kernel would: no socket needed.
    fn fake_pool(member: u32) -> (Pool, Mapping, Ring<u64>, OwnedFd) {
        let layout = PoolLayout {
            chunk: 4096,
            rx_chunks: 64,
            members: 2,
            tx_slots: 4,
            slot_chunks: 1,
            max_frame: 1514,
        };
        let (memfd, map) = make_memfd(layout.header_len());
        let (ring_fd, _ring_map) = make_memfd(4096);
        let off = libc::xdp_ring_offset {
            producer: 0,
            consumer: 64,
            desc: 128,
            flags: 4,
        };
        let comp = Ring::map(ring_fd.as_fd(), &off, 8, 0, false).unwrap();
        let pool = Pool {
            _offer: None,
            _region: UnixDatagram::unbound().unwrap(),
            memfd,
            header: map.ptr.cast::<Header>(),
            // SAFETY: inside the header pages.
            counters: unsafe {
                NonNull::new_unchecked(
                    map.ptr
                        .as_ptr()
                        .add(PoolLayout::counters_off())
                        .cast::<AtomicU32>(),
                )
            },
            layout,
            member,
            created: false,
            me: std::process::id(),
            inflight: Vec::new(),
            lock_timeouts: std::cell::Cell::new(0),
        };
        (pool, map, comp, ring_fd)
    }

    /// The pid of a process that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// A holder killed while applying the completion ring's entry 1 (intent
    /// recorded; the count stored or not): the next member steals the lock,
    /// replays the intent once and applies the rest exactly once.
    #[test]
    fn a_dead_holders_lock_is_stolen_and_its_completion_replayed_once() {
        for count_stored in [false, true] {
            let (mut pool, _map, mut comp, _fd) = fake_pool(1);
            let slot_addr = |g: u64| 64 * 4096 + g * 4096;
            // Entries: slot 0 twice, then slot 5 (member 1, its slot 1).
            for (i, g) in [0u64, 0, 5].into_iter().enumerate() {
                // SAFETY: index < ring size, inside the fake ring's mapping.
                unsafe { comp.descs.as_ptr().add(i).write(slot_addr(g)) };
            }
            comp.producer().store(3, Ordering::Release);
            pool.counter(0, 0).store(2, Ordering::Relaxed);
            pool.counter(0, 5).store(1, Ordering::Relaxed);
            let h = pool.header();
            // The dead holder applied entry 0 and began entry 1.
            pool.counter(1, 0).store(1, Ordering::Relaxed);
            h.cq_applied.store(1, Ordering::Relaxed);
            h.j_slot.store(0, Ordering::Relaxed);
            h.j_value.store(2, Ordering::Relaxed);
            h.j_seq.store(2, Ordering::Relaxed);
            if count_stored {
                pool.counter(1, 0).store(2, Ordering::Relaxed);
            }
            h.lock.store(dead_pid(), Ordering::Relaxed);

            pool.drain_completions(&mut comp);
            let h = pool.header();
            assert_eq!(h.steals.load(Ordering::Relaxed), 1);
            assert_eq!(h.lock.load(Ordering::Relaxed), 0, "released");
            assert_eq!(
                pool.counter(1, 0).load(Ordering::Relaxed),
                2,
                "applied once"
            );
            assert_eq!(pool.counter(1, 5).load(Ordering::Relaxed), 1);
            assert_eq!(h.cq_applied.load(Ordering::Relaxed), 3);
            assert_eq!(comp.consumer().load(Ordering::Relaxed), 3, "published");
            // Member 1's slot 1 is free again, nothing else of its region.
            pool.inflight = vec![1];
            let mut free = Vec::new();
            pool.collect(&mut free);
            assert_eq!(free, [1]);
            // A second drain finds nothing to do.
            pool.drain_completions(&mut comp);
            assert_eq!(pool.counter(1, 0).load(Ordering::Relaxed), 2);
        }
    }

    /// A joiner takes a clean region before one with slots a dead owner
    /// left in flight, and a dirty one only when no clean one is free.
    #[test]
    fn regions_with_leaked_slots_are_taken_last() {
        let (pool, map, _comp, _fd) = fake_pool(0);
        let layout = pool.layout;
        // Region 0 (slots 0..4): slot 2 submitted twice, completed once.
        pool.counter(0, 2).store(2, Ordering::Relaxed);
        pool.counter(1, 2).store(1, Ordering::Relaxed);
        assert_eq!(busy_slots(&map, &layout, 0), 1);
        assert_eq!(busy_slots(&map, &layout, 1), 0);
        let nonce = nonce();
        let busy = |n| busy_slots(&map, &layout, n);
        let (first, _a) = claim_region(1, 0, nonce, 2, busy).unwrap();
        assert_eq!(first, 1, "the clean region first");
        let (second, _b) = claim_region(1, 0, nonce, 2, busy).unwrap();
        assert_eq!(second, 0, "then the dirty one");
        let e = claim_region(1, 0, nonce, 2, busy).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy);
    }

    /// A live holder is waited for, never robbed; the wait is bounded.
    #[test]
    fn a_live_holders_lock_is_not_stolen() {
        let (pool, _map, _comp, _fd) = fake_pool(0);
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() } as u32;
        pool.header().lock.store(parent, Ordering::Relaxed);
        let t = Instant::now();
        assert!(pool.lock().is_none());
        assert!(t.elapsed() >= LOCK_TIMEOUT);
        assert_eq!(pool.header().lock.load(Ordering::Relaxed), parent);
        assert_eq!(pool.info().lock_timeouts, 1);
        pool.header().lock.store(0, Ordering::Relaxed);
        assert!(pool.lock().is_some());
    }

    #[test]
    fn a_dead_or_missing_process_is_gone_and_we_are_not() {
        assert!(!process_gone(std::process::id()));
        assert!(process_gone(i32::MAX as u32));
    }
}
