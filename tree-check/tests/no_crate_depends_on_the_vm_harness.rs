//! No workspace crate but `bench` lists the VM harness (`vm-tests`) among
//! its dependencies of any kind: libraries, tools and their tests build
//! their hosts with `testbed` (see `tree_check::harness`).

use std::path::Path;
use std::process::Command;

#[test]
fn no_crate_depends_on_the_vm_harness() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // The cargo running this test (cargo test sets CARGO), else the one in PATH.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata = String::from_utf8(out.stdout).expect("UTF-8 metadata");
    let found = tree_check::harness::dependents(&metadata).expect("reading the metadata");
    assert!(
        found.is_empty(),
        "crates that depend on the VM harness `{}` (only {:?} may; build test hosts \
         with testbed): {}",
        tree_check::harness::HARNESS,
        tree_check::harness::ALLOWED,
        found.join(", ")
    );
}
