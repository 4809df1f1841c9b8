#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, simulation and real-link tests.
# Tests that need root (namespaces, raw sockets) print SKIPPED when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== done: all tests passed"
