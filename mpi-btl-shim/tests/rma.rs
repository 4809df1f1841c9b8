//! The shim's put and get through its C ABI, between two namespaces (AF_PACKET):
//! 1 MiB sent from the caller's buffer lands in the target's registered
//! region (written there by the transport as frames arrive) and the
//! callback runs once, with success; a put to a key the target never gave
//! completes once with an error, and the shim stays usable. A get reads a
//! registered region straight into the caller's buffer. Needs root
//! (skipped with a printed reason otherwise).

use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mpi_btl_shim::*;
use testbed::netns::TwoHosts;
use testbed::require_root;

mod common;
use common::{introduce, open};

/// The statuses a put's callback reported, in order.
type Done = Mutex<Vec<LlcShimStatus>>;

unsafe extern "C" fn on_done(ctx: *mut c_void, status: LlcShimStatus) {
    // SAFETY: `ctx` is the `Done` the test passed and keeps alive.
    let done = unsafe { &*(ctx as *const Done) };
    done.lock().unwrap().push(status);
}

/// Both ends make progress until `done` holds one status (or panics after
/// 10 s); then a while longer, to see that no second one comes.
fn until_done(a: *const LlcShim, b: *const LlcShim, done: &Done) -> LlcShimStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.lock().unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the put never completed");
        // SAFETY: live handles.
        unsafe {
            assert!(llc_shim_progress(a) >= 0);
            assert!(llc_shim_progress(b) >= 0);
        }
    }
    let settle = Instant::now() + Duration::from_millis(50);
    while Instant::now() < settle {
        // SAFETY: live handles.
        unsafe {
            llc_shim_progress(a);
            llc_shim_progress(b);
        }
    }
    let v = done.lock().unwrap();
    assert_eq!(v.len(), 1, "one callback per put: {v:?}");
    v[0]
}

#[test]
fn a_put_lands_in_the_region_and_completes_once() {
    require_root!();
    let bed = TwoHosts::new(9000).expect("testbed");
    let (a, b) = (open(&bed.a, 0), open(&bed.b, 0));
    let (to_b, _) = introduce(a, b);
    const LEN: usize = 1 << 20;
    let mut region = vec![0u8; LEN + 4096];
    let mut key = 0u64;
    // SAFETY: a live handle and a writable out parameter; `region`
    // outlives its registration (closed below).
    unsafe {
        assert_eq!(
            llc_shim_register(b, region.as_mut_ptr().cast(), region.len(), &mut key),
            LlcShimStatus::Ok
        );
    }
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4099) as u8).collect();
    let done: Done = Mutex::new(Vec::new());
    let ctx = &done as *const Done as *mut c_void;
    // SAFETY: a live handle; `data` stays valid and unchanged until the
    // callback ran (checked by `until_done` before it is dropped).
    let st = unsafe {
        llc_shim_put(
            a,
            to_b,
            data.as_ptr().cast(),
            LEN,
            key,
            4096,
            Some(on_done),
            ctx,
        )
    };
    assert_eq!(st, LlcShimStatus::Ok);
    assert_eq!(until_done(a, b, &done), LlcShimStatus::Ok);
    assert!(
        region[..4096].iter().all(|&x| x == 0),
        "nothing before the offset"
    );
    assert!(
        region[4096..] == data[..],
        "the region holds the put's bytes"
    );

    // A key b never gave: refused, one callback with an error.
    let refused: Done = Mutex::new(Vec::new());
    let ctx = &refused as *const Done as *mut c_void;
    // SAFETY: as above.
    let st = unsafe {
        llc_shim_put(
            a,
            to_b,
            data.as_ptr().cast(),
            1000,
            key ^ 1,
            0,
            Some(on_done),
            ctx,
        )
    };
    assert_eq!(st, LlcShimStatus::Ok);
    assert_eq!(until_done(a, b, &refused), LlcShimStatus::Error);

    // Still usable: a second put into the region.
    let again: Done = Mutex::new(Vec::new());
    let ctx = &again as *const Done as *mut c_void;
    let small = [0xabu8; 3000];
    // SAFETY: as above.
    let st = unsafe {
        llc_shim_put(
            a,
            to_b,
            small.as_ptr().cast(),
            small.len(),
            key,
            0,
            Some(on_done),
            ctx,
        )
    };
    assert_eq!(st, LlcShimStatus::Ok);
    assert_eq!(until_done(a, b, &again), LlcShimStatus::Ok);
    assert!(region[..3000].iter().all(|&x| x == 0xab));

    let mut st = LlcShimStats::default();
    // SAFETY: a live handle and a writable stats struct.
    assert_eq!(unsafe { llc_shim_stats(a, &mut st) }, LlcShimStatus::Ok);
    assert_eq!(st.puts, 3);
    // SAFETY: handles from llc_shim_open, closed once; no callback runs
    // after close returns; `region` is deregistered by the close.
    unsafe {
        llc_shim_close(a, 1000);
        llc_shim_close(b, 1000);
    }
    drop(region);
}

/// A get through the C ABI: the target sends from its registered memory
/// and the reply lands in the caller's buffer (no copy on either side),
/// the callback runs once with success; a get beyond the region is
/// refused; after the target deregisters (which returns: the reply was
/// acknowledged), a get of the old key is refused and the shim stays usable.
#[test]
fn a_get_reads_the_region_into_the_callers_buffer() {
    require_root!();
    let bed = TwoHosts::new(9000).expect("testbed");
    let (a, b) = (open(&bed.a, 0), open(&bed.b, 0));
    let (to_b, _) = introduce(a, b);
    const LEN: usize = 1 << 20;
    let mut region: Vec<u8> = (0..LEN + 4096).map(|i| (i * 13 + i / 4093) as u8).collect();
    let mut key = 0u64;
    // SAFETY: a live handle and a writable out parameter; `region`
    // outlives its registration (deregistered below).
    unsafe {
        assert_eq!(
            llc_shim_register(b, region.as_mut_ptr().cast(), region.len(), &mut key),
            LlcShimStatus::Ok
        );
    }
    let get = |dst: &mut [u8], key: u64, offset: u64| -> LlcShimStatus {
        let done: Done = Mutex::new(Vec::new());
        let ctx = &done as *const Done as *mut c_void;
        // SAFETY: a live handle; `dst` stays writable until the callback
        // ran (`until_done` waits for it before `done` and `dst` go).
        let st = unsafe {
            llc_shim_get(
                a,
                to_b,
                dst.as_mut_ptr().cast(),
                dst.len(),
                key,
                offset,
                Some(on_done),
                ctx,
            )
        };
        assert_eq!(st, LlcShimStatus::Ok);
        until_done(a, b, &done)
    };
    let mut dst = vec![0xeeu8; LEN];
    assert_eq!(get(&mut dst, key, 4096), LlcShimStatus::Ok);
    assert!(
        dst[..] == region[4096..],
        "the buffer holds the region's bytes"
    );
    // Beyond the region: refused, once.
    let mut over = vec![0u8; 8192];
    assert_eq!(get(&mut over, key, LEN as u64), LlcShimStatus::Error);
    // SAFETY: a live handle.
    assert_eq!(unsafe { llc_shim_deregister(b, key) }, LlcShimStatus::Ok);
    let mut small = vec![0u8; 100];
    assert_eq!(get(&mut small, key, 0), LlcShimStatus::Error);
    let mut st = LlcShimStats::default();
    // SAFETY: a live handle and a writable stats struct.
    assert_eq!(unsafe { llc_shim_stats(a, &mut st) }, LlcShimStatus::Ok);
    assert_eq!(st.gets, 3);
    // SAFETY: handles from llc_shim_open, closed once.
    unsafe {
        llc_shim_close(a, 1000);
        llc_shim_close(b, 1000);
    }
    drop(region);
}
