#!/bin/bash
# libfabric's conformance tests (fabtests) against the provider llc, between
# two network namespaces this script makes (a veth pair, IPv4 on both ends
# for fabtests' out-of-band exchange) and removes again.
#
#   scripts/fabtests.sh FABTESTS_BIN [PROVIDER_DIR]
#
# FABTESTS_BIN: the bin/ of a fabtests build. Debian 12 does not package
# fabtests: build them from the libfabric release that matches the system's
# (1.17.0), e.g. from its source tree:
#   cd fabtests && ./autogen.sh && ./configure --prefix=$PWD/inst && make -j2 install
# (needs autoconf, automake, libtool and libfabric-dev).
# PROVIDER_DIR: the directory of libllc-fi.so (default: the installed one,
# found by libfabric with nothing set).
#
# (fi_rma_bw -o writedata is left out: writedata is not offered, and
# fabtests' server then waits out its bound.)
# Runs the unit tests and the RDM lists of fabtests' runfabtests.sh
# (functional and short), each with a 90 s bound, and prints one line per
# test: pass, notrun (the provider answered -FI_ENODATA or -FI_ENOSYS: a
# capability it does not offer) or FAIL (with the ends of both logs).
# Exit status: 0 when nothing failed. Needs root (namespaces).
set -u
bin=${1:?usage: scripts/fabtests.sh FABTESTS_BIN [PROVIDER_DIR]}
[ "$(id -u)" = 0 ] || { echo "fabtests.sh: needs root (it makes network namespaces)" >&2; exit 2; }
[ -x "$bin/fi_rdm" ] || { echo "fabtests.sh: no fi_rdm in $bin (a fabtests bin/ directory)" >&2; exit 2; }
if [ $# -ge 2 ]; then export FI_PROVIDER_PATH=$2; fi
export FI_LLC_AUTH=off

tag=ft$$
a=${tag}a b=${tag}b
work=$(mktemp -d)
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b" || exit 1
ip link add "${tag}x" type veth peer name "${tag}y" || exit 1
ip link set "${tag}x" netns "$a" && ip link set "${tag}y" netns "$b" || exit 1
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "${tag}x" up && ip -n "$b" link set "${tag}y" up
ip -n "$a" addr add 10.251.0.1/24 dev "${tag}x" && ip -n "$b" addr add 10.251.0.2/24 dev "${tag}y"

failed=0
verdict() { # server-status client-status
    case "$1/$2" in
        0/0) echo pass ;;
        61/* | */61 | 38/* | */38) echo notrun ;;
        *) echo FAIL ;;
    esac
}
unit() {
    timeout 90 ip netns exec "$a" "$bin/$1" -p llc "${@:2}" >"$work/u.log" 2>&1
    local rc=$? r
    r=$(verdict "$rc" "$rc")
    echo "$r  $*"
    if [ "$r" = FAIL ]; then failed=$((failed + 1)); tail -n 8 "$work/u.log" | sed 's/^/    | /'; fi
}
pair() {
    # shellcheck disable=SC2086 # each test's own arguments split on purpose
    timeout 90 ip netns exec "$a" "$bin"/$1 -p llc -E >"$work/s.log" 2>&1 &
    local server=$! i
    for i in $(seq 200); do
        ip netns exec "$a" ss -ltnH | grep -q ':9228 ' && break
        kill -0 "$server" 2>/dev/null || break
        sleep 0.05
    done
    # shellcheck disable=SC2086
    timeout 90 ip netns exec "$b" "$bin"/$1 -p llc -E 10.251.0.1 >"$work/c.log" 2>&1
    local crc=$?
    wait "$server"
    local src=$? r
    r=$(verdict "$src" "$crc")
    echo "$r  $1"
    if [ "$r" = FAIL ]; then
        failed=$((failed + 1))
        tail -n 6 "$work/s.log" | sed 's/^/    server| /'
        tail -n 6 "$work/c.log" | sed 's/^/    client| /'
    fi
}

unit fi_getinfo_test
unit fi_dom_test -n 2
unit fi_eq_test
unit fi_cq_test
unit fi_mr_test
unit fi_cntr_test
for t in "fi_av_xfer -e rdm" "fi_cq_data -e rdm" "fi_poll -t queue" "fi_poll -t counter" \
    "fi_rdm" "fi_rdm -U" "fi_rdm_rma_event" "fi_rdm_rma_trigger" "fi_rdm_tagged_peek" \
    "fi_rdm_shared_av" "fi_multi_mr -e rdm -V" "fi_multi_ep -e rdm -v" \
    "fi_recv_cancel -e rdm -V" "fi_unexpected_msg -e rdm -I 10" "fi_bw -e rdm -v -T 1" \
    "fi_bw -e rdm -v -T 1 -U" "fi_rdm_multi_client -C 10 -I 5" \
    "fi_rdm_multi_client -C 10 -I 5 -U" \
    "fi_rma_bw -e rdm -o write -I 5" "fi_rma_bw -e rdm -o write -I 5 -U" \
    "fi_rma_bw -e rdm -o read -I 5" "fi_rma_bw -e rdm -o read -I 5 -U" \
    "fi_rdm_atomic -I 5 -o all" "fi_rdm_cntr_pingpong -I 5" "fi_multi_recv -e rdm -I 5" \
    "fi_multi_recv -e rdm -I 5 -M" "fi_rdm_pingpong -I 5" "fi_rdm_pingpong -I 5 -U" \
    "fi_rdm_pingpong -I 5 -v" "fi_rdm_pingpong -I 5 -v -U" "fi_rdm_tagged_pingpong -I 5" \
    "fi_rdm_tagged_pingpong -I 5 -U" "fi_rdm_tagged_pingpong -I 5 -v" \
    "fi_rdm_tagged_pingpong -I 5 -v -U" "fi_rdm_tagged_bw -I 5" "fi_rdm_tagged_bw -I 5 -U" \
    "fi_rdm_tagged_bw -I 5 -v" "fi_rdm_tagged_bw -I 5 -v -U"; do
    pair "$t"
done
echo "fabtests.sh: $failed failed"
[ "$failed" = 0 ]
