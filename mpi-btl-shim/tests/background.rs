//! The shim's background thread runs at a low priority, so that on a node
//! where every core runs a rank it takes only the time the scheduler can
//! spare instead of preempting the rank it helps. Needs root (the test bed's
//! namespaces; skipped with a printed reason otherwise).

use mpi_btl_shim::*;
use testbed::netns::TwoHosts;
use testbed::require_root;

// This test uses `open` alone of the shared helpers.
#[allow(dead_code)]
mod common;
use common::open;

/// The niceness of every thread of this process named `name`, read from
/// /proc (field 19 of a task's `stat`).
fn nice_of_threads(name: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = task.expect("task").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).expect("stat");
        // Fields after the parenthesised command name start at field 3.
        let rest = &stat[stat.rfind(')').expect("comm in stat") + 2..];
        let nice = rest.split(' ').nth(19 - 3).expect("field 19");
        found.push(nice.parse().expect("nice"));
    }
    found
}

#[test]
fn the_background_thread_runs_at_low_priority() {
    require_root!();
    let bed = TwoHosts::new(1500).expect("testbed");
    let shim = open(&bed.a, 50);
    let nice = nice_of_threads("llc-shim-bg");
    // SAFETY: a live handle from llc_shim_open, closed once.
    unsafe { llc_shim_close(shim, 1000) };
    assert!(!nice.is_empty(), "no background thread found");
    assert!(
        nice.iter().all(|&n| n == 19),
        "background threads at niceness {nice:?}, not 19"
    );
}
