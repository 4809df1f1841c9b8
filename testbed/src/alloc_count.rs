//! Counting the allocations a piece of code makes, for the tests that hold
//! the common path to none: a test binary installs [`Counting`] as its
//! global allocator and measures with [`allocations`].
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: testbed::alloc_count::Counting = testbed::alloc_count::Counting;
//!
//! let n = testbed::alloc_count::allocations(|| round_trips(10_000));
//! ```
#![allow(unsafe_code)] // a global allocator is an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting the allocations (and reallocations) of
/// the thread inside [`allocations`].
#[derive(Debug)]
pub struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the
// thread-locals are const-initialised, so touching them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations made by `f` on this thread (0 unless the binary's global
/// allocator is [`Counting`]).
pub fn allocations(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    COUNT.with(Cell::get)
}
