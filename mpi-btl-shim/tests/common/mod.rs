//! Shims opened through the C ABI on a test bed's hosts, for the tests
//! that drive two of them.

use std::ffi::CString;

use mpi_btl_shim::*;
use testbed::netns::Host;

/// A shim on `h`'s interface (AF_PACKET, any port, background thread on),
/// holding small sends when `coalesce_us` is non-zero.
#[allow(dead_code)] // not every test that includes this module uses it
pub fn open(h: &Host, coalesce_us: u32) -> *mut LlcShim {
    open_with(h, coalesce_us, true)
}

/// [`open`] with the background progress thread on or off.
pub fn open_with(h: &Host, coalesce_us: u32, progress_thread: bool) -> *mut LlcShim {
    let ifname = h.ifname.clone();
    // Opened inside the host's namespace (the handle crosses back as an
    // address: raw pointers are not Send).
    let (st, handle) = h.ns.run(move || {
        let ifname = CString::new(ifname).unwrap();
        let backend = CString::new("packet").unwrap();
        let cfg = LlcShimConfig {
            ifname: ifname.as_ptr(),
            backend: backend.as_ptr(),
            sap: 0,
            port: 0,
            idle_timeout_ms: 0,
            progress_thread,
            exclusive: false,
            progress_interval_us: 0,
            coalesce_us,
            ranks_on_interface: 0,
            auth: LLC_SHIM_AUTH_ENV,
        };
        let mut s = std::ptr::null_mut();
        let mut err = [0 as std::ffi::c_char; 256];
        // SAFETY: valid config, out pointer and error buffer; the strings
        // live through the call.
        let st = unsafe { llc_shim_open(&cfg, &mut s, err.as_mut_ptr(), err.len()) };
        (st, s as usize)
    });
    assert_eq!(st, LlcShimStatus::Ok, "opening a shim in {}", h.ns.name());
    handle as *mut LlcShim
}

/// The shim's address, as peers add it.
fn addr(s: *const LlcShim) -> CString {
    let mut buf = vec![0u8; 128];
    // SAFETY: a live handle and a buffer of the length given.
    let n = unsafe { llc_shim_addr(s, buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n > 0 && n <= buf.len());
    buf.truncate(n - 1);
    CString::new(buf).unwrap()
}

/// Each shim added as the other's peer: (b's id at a, a's id at b).
pub fn introduce(a: *const LlcShim, b: *const LlcShim) -> (u32, u32) {
    let (mut to_b, mut to_a) = (0u32, 0u32);
    // SAFETY: live handles, NUL-terminated addresses, writable out
    // parameters.
    unsafe {
        assert_eq!(
            llc_shim_add_peer(a, addr(b).as_ptr(), &mut to_b),
            LlcShimStatus::Ok
        );
        assert_eq!(
            llc_shim_add_peer(b, addr(a).as_ptr(), &mut to_a),
            LlcShimStatus::Ok
        );
    }
    (to_b, to_a)
}
