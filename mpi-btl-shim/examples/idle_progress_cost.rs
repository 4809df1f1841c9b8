//! The cost of one `llc_shim_progress` call that finds nothing to do: what
//! a busy-polling MPI rank pays on every turn of `opal_progress` while it
//! waits, and so, on average, half of it on top of every message's
//! one-way time. Needs an interface and CAP_NET_RAW:
//!
//! ```sh
//! cargo build --release -p mpi-btl-shim --example idle_progress_cost
//! valgrind --tool=callgrind target/release/examples/idle_progress_cost IFACE 100000
//! ```

use std::ffi::CString;
use std::time::Instant;

use mpi_btl_shim::{
    llc_shim_close, llc_shim_open, llc_shim_progress, LlcShimConfig, LlcShimStatus,
    LLC_SHIM_AUTH_ENV,
};

fn main() {
    let mut args = std::env::args().skip(1);
    let ifname = CString::new(
        args.next()
            .expect("usage: idle_progress_cost IFACE [CALLS]"),
    )
    .unwrap();
    let calls: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let backend = CString::new("packet").unwrap();
    let cfg = LlcShimConfig {
        ifname: ifname.as_ptr(),
        backend: backend.as_ptr(),
        sap: 0,
        port: 7,
        idle_timeout_ms: 0,
        progress_thread: true,
        exclusive: false,
        progress_interval_us: 0,
        coalesce_us: 0,
        ranks_on_interface: 0,
        auth: LLC_SHIM_AUTH_ENV,
    };
    let mut shim = std::ptr::null_mut();
    let mut err = [0 as std::ffi::c_char; 256];
    // SAFETY: valid config, out pointer and error buffer.
    let st = unsafe { llc_shim_open(&cfg, &mut shim, err.as_mut_ptr(), err.len()) };
    if st != LlcShimStatus::Ok {
        // SAFETY: the shim wrote a NUL-terminated reason.
        let why = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        eprintln!("cannot open the shim: {}", why.to_string_lossy());
        std::process::exit(1);
    }
    let t = Instant::now();
    for _ in 0..calls {
        // SAFETY: `shim` is live until closed below.
        unsafe { llc_shim_progress(shim) };
    }
    let ns = t.elapsed().as_nanos() as f64 / calls as f64;
    // SAFETY: opened above, closed once.
    unsafe { llc_shim_close(shim, 0) };
    println!("idle llc_shim_progress: {ns:.1} ns per call");
}
