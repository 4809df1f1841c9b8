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
echo "== cargo fuzz (bounded)"
# About a minute per target. New inputs go to a scratch directory (libFuzzer
# writes to the first corpus directory it is given), so the committed corpus
# under llc-stack/fuzz/corpus stays as it is; a crash fails the suite and
# leaves its input in llc-stack/fuzz/artifacts.
FUZZ_SECONDS="${LLC_FUZZ_SECONDS:-60}"
if cargo fuzz --version >/dev/null 2>&1; then
    for target in parse_frame endpoint_pair; do
        scratch="$(mktemp -d)"
        echo "-- fuzz $target for ${FUZZ_SECONDS}s"
        set +e
        (cd llc-stack/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" "$scratch" "corpus/$target" \
            -- -max_total_time="$FUZZ_SECONDS" -max_len=4096 -print_final_stats=1 2>&1 | tail -n 15)
        status=$?
        set -e
        rm -rf "$scratch"
        if [ "$status" -ne 0 ]; then
            echo "fuzz target $target failed (exit $status); see llc-stack/fuzz/artifacts/$target" >&2
            exit 1
        fi
    done
else
    # install-deps.sh (run above) installs cargo-fuzz: its absence is an error,
    # so the fuzz runs are never skipped silently.
    echo "cargo-fuzz is missing although scripts/install-deps.sh ran (cargo install cargo-fuzz --locked)" >&2
    exit 1
fi
echo "== done: all tests passed"
