#!/usr/bin/env bash
# The main job: build the stack and llc-perf, make a two-namespace veth testbed,
# and measure latency and bandwidth (plus CPU overhead and overlap) of the
# message layer over LLC (AF_XDP, AF_PACKET) and kernel TCP (io_uring, sockets)
# in one run, with ratios against the fastest TCP. Needs root.
# Extra arguments go to `llc-perf demo` (see `llc-perf demo --help`), e.g.
#   scripts/demo.sh --json > /tmp/demo.json
#   scripts/demo.sh --plot /tmp/llc-perf.svg
# The earlier ping-only comparison is `target/release/llc-ping-demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --locked -p llc-perf -p llc-ping
exec target/release/llc-perf demo "$@"
