//! btl/llc's small sends allocate nothing: a ping-pong of MPI-sized small
//! messages (a 16-byte ob1 match header and an 8-byte payload, sent with a
//! copy as `btl_sendi` sends them) between two shims through their C ABI,
//! between two namespaces over AF_PACKET, both driven from this thread (no
//! background thread), counted by a global allocator on this thread once
//! the shims are warm. A malloc and a free per message cost more than the
//! rest of the shim's send path. Needs root (skipped with a printed reason
//! otherwise).
//!
//! Timers run on the real clock, so a rare event off the common path (a
//! tail-loss probe when the machine stalls the test, a list reaching a new
//! size) may allocate a few times inside the window: the bound is one
//! allocation per hundred messages, where one per message would be
//! thousands.

use std::cell::Cell;
use std::ffi::c_void;
use std::time::{Duration, Instant};

use mpi_btl_shim::*;
use testbed::alloc_count::{allocations, Counting};
use testbed::netns::TwoHosts;
use testbed::require_root;

mod common;
use common::{introduce, open_with};

#[global_allocator]
static ALLOC: Counting = Counting;

thread_local! {
    static RECEIVED: Cell<u64> = const { Cell::new(0) };
}

/// The receive callback: checks the message and counts it.
unsafe extern "C" fn on_recv(_ctx: *mut c_void, _peer: u32, tag: u8, data: *const u8, len: usize) {
    // SAFETY: `data` is valid for `len` bytes during the call (the shim's
    // contract).
    let data = unsafe { std::slice::from_raw_parts(data, len) };
    assert_eq!(tag, TAG);
    assert_eq!(data, &MESSAGE[..], "a whole message, as sent");
    RECEIVED.with(|r| r.set(r.get() + 1));
}

const TAG: u8 = 5;
/// ob1's match header, then the payload.
const HEADER: [u8; 16] = [0x5a; 16];
const PAYLOAD: [u8; 8] = [0xa5; 8];
const MESSAGE: [u8; 24] = {
    let mut m = [0u8; 24];
    let mut i = 0;
    while i < 24 {
        m[i] = if i < 16 { HEADER[i] } else { PAYLOAD[i - 16] };
        i += 1;
    }
    m
};

#[test]
fn small_sends_allocate_nothing_once_warm() {
    require_root!();
    let bed = TwoHosts::new(1500).expect("testbed");
    let (a, b) = (open_with(&bed.a, 0, false), open_with(&bed.b, 0, false));
    let (to_b, to_a) = introduce(a, b);
    // SAFETY: live handles; the callback needs no context.
    unsafe {
        for s in [a, b] {
            assert_eq!(
                llc_shim_set_recv_handler(s, TAG, Some(on_recv), std::ptr::null_mut()),
                LlcShimStatus::Ok
            );
        }
    }
    // One message from a to b, then b's answer, `n` times.
    let ping_pongs = |n: u64| {
        for i in 0..n {
            for (from, to, peer) in [(a, b, to_b), (b, a, to_a)] {
                let before = RECEIVED.with(Cell::get);
                // SAFETY: a live handle; both buffers valid for their lengths.
                let st = unsafe {
                    llc_shim_send(
                        from,
                        peer,
                        TAG,
                        HEADER.as_ptr(),
                        HEADER.len(),
                        PAYLOAD.as_ptr(),
                        PAYLOAD.len(),
                    )
                };
                assert_eq!(st, LlcShimStatus::Ok, "send {i}");
                let deadline = Instant::now() + Duration::from_secs(10);
                while RECEIVED.with(Cell::get) == before {
                    assert!(Instant::now() < deadline, "message {i} never arrived");
                    // SAFETY: live handles.
                    unsafe {
                        assert!(llc_shim_progress(to) >= 0);
                        assert!(llc_shim_progress(from) >= 0);
                    }
                }
            }
        }
    };
    // Warm up: connections, tables, free lists and rings reach their size.
    ping_pongs(2_000);
    let n = 5_000;
    let count = allocations(|| ping_pongs(n));
    // SAFETY: handles from llc_shim_open, closed once.
    unsafe {
        llc_shim_close(a, 1000);
        llc_shim_close(b, 1000);
    }
    println!(
        "{count} allocations in {} small messages ({:.3} per message)",
        2 * n,
        count as f64 / (2 * n) as f64
    );
    assert!(
        count <= 2 * n / 100,
        "{count} allocations in {} small messages: the send path allocates",
        2 * n
    );
}
