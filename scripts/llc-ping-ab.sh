#!/usr/bin/env bash
# Compare llc-ping binaries on reliable mode's extra latency over link level.
#
#   scripts/llc-ping-ab.sh [-n ITERATIONS] [-r ROUNDS] [-c COUNT] [-s SIZE] LABEL=BINARY...
#
# Runs `llc-ping-demo --json --rounds ROUNDS -c COUNT --backends packet
# --llc-ping BINARY` (and `--size SIZE` when given) for each binary in turn,
# ITERATIONS times. A BINARY may be a wrapper script that sets the
# environment (e.g. `LLC_STAT=0 exec target/release/llc-ping "$@"`). Within a
# round the demo times link level and then reliable mode seconds apart, so
# the per-round gap (reliable minus link level, one-way) is robust against
# the slow drifts of a shared machine; alternating binaries spreads the rest
# evenly. Prints each binary's median, quartiles and mean gap over all
# rounds. Needs root and a release build (cargo build --release -p llc-ping).
set -euo pipefail
iters=6 rounds=20 count=10000 size=()
while getopts "n:r:c:s:" o; do
    case $o in
        n) iters=$OPTARG ;; r) rounds=$OPTARG ;; c) count=$OPTARG ;; s) size=(--size "$OPTARG") ;;
        *) echo "usage: $0 [-n N] [-r ROUNDS] [-c COUNT] [-s SIZE] LABEL=BINARY..." >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { echo "usage: $0 [-n N] [-r ROUNDS] [-c COUNT] [-s SIZE] LABEL=BINARY..." >&2; exit 2; }
demo="$(dirname "$0")/../target/release/llc-ping-demo"
[ -x "$demo" ] || { echo "build first: cargo build --release -p llc-ping" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for _ in $(seq "$iters"); do
    for pair in "$@"; do
        label=${pair%%=*} bin=${pair#*=}
        "$demo" --json --rounds "$rounds" -c "$count" "${size[@]}" --backends packet --llc-ping "$bin" 2>/dev/null |
            python3 -c '
import json, sys
r = json.load(sys.stdin)["results"]
link, rel = r[0]["rounds_one_way_us"], r[1]["rounds_one_way_us"]
print(sys.argv[1], " ".join(f"{b - a:.3f}" for a, b in zip(link, rel)), "|", " ".join(f"{a:.2f}" for a in link))
' "$label" >>"$log"
    done
done
python3 - "$log" <<'PY'
import collections, statistics, sys
gaps, links = collections.defaultdict(list), collections.defaultdict(list)
for line in open(sys.argv[1]):
    left, right = line.split("|")
    f = left.split()
    gaps[f[0]] += [float(x) for x in f[1:]]
    links[f[0]] += [float(x) for x in right.split()]
for label, g in gaps.items():
    q = statistics.quantiles(g, n=4)
    print(f"{label:10s} rounds {len(g):4d}  gap median {statistics.median(g):+.3f} "
          f"(quartiles {q[0]:+.3f} {q[2]:+.3f}, mean {statistics.mean(g):+.3f})  "
          f"link level median {statistics.median(links[label]):.2f} us")
PY
