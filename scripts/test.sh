#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, simulation and real-link tests.
# Tests that need root (namespaces, raw sockets) print SKIPPED when not root.
# The QEMU VM tests (vm-tests/tests/qemu.rs) run too; see the README for them alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
# install-deps.sh provided QEMU, busybox-static and the guest kernel: the QEMU VM
# tests must run here, not skip.
export LLC_VM_REQUIRE=1
cargo test --workspace --locked
echo "== done: all tests passed"
