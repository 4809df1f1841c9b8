#!/usr/bin/env bash
# Install the Debian packages the build, the tests and the demo need, when missing,
# and fetch the pinned guest kernel of the QEMU tests into its cache.
# Safe to run repeatedly; installs and downloads nothing when everything is present.
set -euo pipefail

# iproute2: ip netns/link for the test hosts; iputils-ping: IPv4 checks in the
# harness tests; util-linux: setpriv for the no-privilege tests; procps: pgrep;
# tshark: checks that PcapWriter captures open in Wireshark's reader.
# clang, llvm, libbpf-dev, linux-libc-dev: xdp-prog compiles its XDP program
# (clang -target bpf, <bpf/bpf_helpers.h>, <linux/bpf.h>); libelf-dev,
# zlib1g-dev, pkg-config: the vendored libbpf that libbpf-sys builds.
# busybox-static: the userland of the QEMU test guests' initramfs.
# openmpi-bin, libopenmpi-dev (Open MPI 4.1.4 with its devel headers, BTL
# interface 3.1.0), netpipe-openmpi (NPopenmpi), make: the btl/llc component
# and its tests (mpi-btl-shim/tests/mpi.rs). gcc, libc6-dev: the C programs of
# deck's tests (deck/tests/c.rs: cc, pthreads) and cargo's linker.
# librsvg2-bin (rsvg-convert): llc-perf's plot test renders the SVG to PNG.
# binutils (readelf), pkg-config: scripts/install.sh's test checks the installed
# component's run-time path and builds a C program with the installed .pc files.
# libfabric-dev (rdma/*.h: the provider's layout test), libfabric-bin (fi_info,
# fi_pingpong): the libfabric provider's tests. python3, python3-venv: the
# provider's tests install the PyPI MPIs (Open MPI 5, MPICH 5) into virtual
# environments (testbed::pypi).
# slurmd, slurmctld, slurm-client, slurm-wlm-basic-plugins (mpi_pmix_v4 for
# `srun --mpi=pmix`), munge: the Slurm bed (testbed/src/slurm.rs), which runs its own
# daemons with its own key and configuration; a munged or slurmd the packages start
# as system services is not used. libpmix-dev: the PMIx client (pmix-boot).
PACKAGES=(iproute2 iputils-ping util-linux procps tshark librsvg2-bin gcc libc6-dev
          clang llvm libbpf-dev linux-libc-dev libelf-dev zlib1g-dev pkg-config
          busybox-static openmpi-bin libopenmpi-dev netpipe-openmpi make
          binutils libfabric-dev libfabric-bin python3 python3-venv
          slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libpmix-dev)
# qemu-system-x86 comes from bookworm-backports: the image carries qemu-utils from
# there, and bookworm's own qemu-system-x86 conflicts with it.
BACKPORTS_PACKAGES=(qemu-system-x86)
BACKPORTS_SOURCE=/etc/apt/sources.list.d/llc-bookworm-backports.sources

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

missing=()
for p in "${PACKAGES[@]}"; do
    installed "$p" || missing+=("$p")
done
missing_bpo=()
for p in "${BACKPORTS_PACKAGES[@]}"; do
    installed "$p" || missing_bpo+=("$p")
done

SUDO=""
if [ $(( ${#missing[@]} + ${#missing_bpo[@]} )) -gt 0 ] && [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then
        SUDO="sudo"
    else
        echo "install-deps: need root to install ${missing[*]} ${missing_bpo[*]}" \
            "(run as root or install them yourself)" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive

# Adds the bookworm-backports suite (same mirror and key as the system's Debian
# source) unless some apt source already names it.
add_backports() {
    if grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        return 0
    fi
    local uri="http://deb.debian.org/debian" key="/usr/share/keyrings/debian-archive-keyring.gpg"
    local src=/etc/apt/sources.list.d/debian.sources
    if [ -f "$src" ]; then
        uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$src")
        uri=${uri:-http://deb.debian.org/debian}
    fi
    echo "install-deps: adding bookworm-backports ($uri) as $BACKPORTS_SOURCE"
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: %s\n' \
        "$uri" "$key" | $SUDO tee "$BACKPORTS_SOURCE" >/dev/null
}

if [ $(( ${#missing[@]} + ${#missing_bpo[@]} )) -gt 0 ]; then
    [ ${#missing_bpo[@]} -eq 0 ] || add_backports
    echo "install-deps: installing ${missing[*]} ${missing_bpo[*]}"
    $SUDO apt-get update -q
    if [ ${#missing[@]} -gt 0 ]; then
        $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
    fi
    if [ ${#missing_bpo[@]} -gt 0 ]; then
        $SUDO apt-get install -y -q --no-install-recommends -t bookworm-backports "${missing_bpo[@]}"
    fi
fi

# cargo-fuzz, so that scripts/test.sh's bounded fuzz runs happen on a fresh
# machine too. It runs on the stable toolchain: the fuzz targets are built
# with RUSTC_BOOTSTRAP=1 (scripts/test.sh), no nightly needed. Pinned to the
# release checked here; installed for the user running this script.
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "install-deps: installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

# The QEMU tests' guest kernel: a pinned Debian package, downloaded once into
# ${LLC_VM_CACHE:-~/.cache/llc-vm} (vm-tests/src/qemu/kernel.rs reads the same pin).
"$(dirname "$0")/fetch-vm-kernel.sh"
