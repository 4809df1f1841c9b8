#!/usr/bin/env bash
# Install the Debian packages the build, the tests and the demo need, when missing.
# Safe to run repeatedly; installs nothing when everything is present.
set -euo pipefail

# iproute2: ip netns/link for the test hosts; iputils-ping: IPv4 checks in the
# harness tests; util-linux: setpriv for the no-privilege tests; procps: pgrep;
# tshark: checks that PcapWriter captures open in Wireshark's reader.
# clang, llvm, libbpf-dev, linux-libc-dev: xdp-prog compiles its XDP program
# (clang -target bpf, <bpf/bpf_helpers.h>, <linux/bpf.h>); libelf-dev,
# zlib1g-dev, pkg-config: the vendored libbpf that libbpf-sys builds.
PACKAGES=(iproute2 iputils-ping util-linux procps tshark
          clang llvm libbpf-dev linux-libc-dev libelf-dev zlib1g-dev pkg-config)

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        SUDO="sudo"
    else
        echo "install-deps: need root to install ${missing[*]} (run as root or install them yourself)" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
