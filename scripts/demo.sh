#!/usr/bin/env bash
# The main job: build the stack, make a two-namespace veth testbed, and compare
# llc-ping latency (link level and reliable) with busy-polling TCP in one run.
# Extra arguments go to llc-ping-demo (see `llc-ping-demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --locked -p llc-ping
exec target/release/llc-ping-demo "$@"
