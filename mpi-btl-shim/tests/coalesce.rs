//! The shim's held small sends through its C ABI, between two namespaces
//! (AF_PACKET): sends that follow each other with no progress call leave
//! in one bundle, and they arrive although the sender never calls
//! `llc_shim_progress` again (its background thread sends what is held at
//! its next look, and receives and acknowledges for it). With
//! `coalesce_us` 0 every send leaves alone. Needs root (skipped with a
//! printed reason otherwise).

use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mpi_btl_shim::*;
use testbed::netns::TwoHosts;
use testbed::require_root;

mod common;
use common::{introduce, open};

/// What the receive callback collected: (tag, payload).
type Got = Mutex<Vec<(u8, Vec<u8>)>>;

unsafe extern "C" fn on_recv(ctx: *mut c_void, _peer: u32, tag: u8, data: *const u8, len: usize) {
    // SAFETY: `ctx` is the `Got` the test registered and keeps alive;
    // `data` is valid for `len` bytes during the call (the shim's contract).
    let (got, data) = unsafe { (&*(ctx as *const Got), std::slice::from_raw_parts(data, len)) };
    got.lock().unwrap().push((tag, data.to_vec()));
}

/// Sends 3 small messages from a shim on host a to one on host b, then
/// only b makes progress. Returns the sender's bundle count.
fn three_sends_then_silence(coalesce_us: u32) -> u64 {
    let bed = TwoHosts::new(1500).expect("testbed");
    let (a, b) = (open(&bed.a, coalesce_us), open(&bed.b, coalesce_us));
    let got: Got = Mutex::new(Vec::new());
    let (to_b, to_a) = introduce(a, b);
    // SAFETY: a live handle; `got` outlives both shims (closed below).
    unsafe {
        let ctx = &got as *const Got as *mut c_void;
        assert_eq!(
            llc_shim_set_recv_handler(b, 9, Some(on_recv), ctx),
            LlcShimStatus::Ok
        );
    }
    // One message each way first, both ends making progress: each has the
    // other's Hello (bundles go only to a peer that said it takes them).
    let (back, there): (Got, Got) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let one = [1u8];
    // SAFETY: live handles; `back` and `there` outlive the shims; buffers
    // valid for their lengths.
    unsafe {
        let ctx = &back as *const Got as *mut c_void;
        assert_eq!(
            llc_shim_set_recv_handler(a, 8, Some(on_recv), ctx),
            LlcShimStatus::Ok
        );
        let ctx = &there as *const Got as *mut c_void;
        assert_eq!(
            llc_shim_set_recv_handler(b, 8, Some(on_recv), ctx),
            LlcShimStatus::Ok
        );
        assert_eq!(
            llc_shim_send(a, to_b, 8, one.as_ptr(), 1, std::ptr::null(), 0),
            LlcShimStatus::Ok
        );
        assert_eq!(
            llc_shim_send(b, to_a, 8, one.as_ptr(), 1, std::ptr::null(), 0),
            LlcShimStatus::Ok
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while back.lock().unwrap().is_empty() || there.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the warm-up exchange");
        // SAFETY: live handles.
        unsafe {
            llc_shim_progress(a);
            llc_shim_progress(b);
        }
    }
    let bodies: Vec<Vec<u8>> = (0..3u8).map(|i| vec![0x40 + i; 8 + i as usize]).collect();
    for body in &bodies {
        let head = [0xeeu8; 4];
        // SAFETY: a live handle; both buffers valid for their lengths.
        let st = unsafe {
            llc_shim_send(
                a,
                to_b,
                9,
                head.as_ptr(),
                head.len(),
                body.as_ptr(),
                body.len(),
            )
        };
        assert_eq!(st, LlcShimStatus::Ok);
    }
    // Only the receiver makes progress from here on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.lock().unwrap().len() < bodies.len() {
        assert!(
            Instant::now() < deadline,
            "held sends never left (got {:?})",
            got.lock().unwrap()
        );
        // SAFETY: a live handle.
        assert!(unsafe { llc_shim_progress(b) } >= 0);
    }
    for ((tag, data), body) in got.lock().unwrap().iter().zip(&bodies) {
        assert_eq!(*tag, 9);
        assert_eq!(&data[..4], &[0xee; 4]);
        assert_eq!(&data[4..], &body[..], "in order, whole");
    }
    let mut st = LlcShimStats::default();
    // SAFETY: a live handle and a writable stats struct.
    assert_eq!(unsafe { llc_shim_stats(a, &mut st) }, LlcShimStatus::Ok);
    // SAFETY: handles from llc_shim_open, closed once; no callback runs
    // after close returns.
    unsafe {
        llc_shim_close(a, 1000);
        llc_shim_close(b, 1000);
    }
    println!(
        "coalesce_us {coalesce_us}: {} bundles carrying {} messages",
        st.bundles, st.bundled
    );
    assert_eq!(st.bundled, if st.bundles > 0 { 2 } else { 0 });
    st.bundles
}

#[test]
fn held_sends_leave_in_a_bundle_without_another_progress_call() {
    require_root!();
    assert_eq!(three_sends_then_silence(50), 1);
}

#[test]
fn with_coalescing_off_every_send_leaves_alone() {
    require_root!();
    assert_eq!(three_sends_then_silence(0), 0);
}
