#!/usr/bin/env bash
# Fetch the QEMU test guests' kernel once: a pinned Debian kernel package,
# checked against its SHA-256, unpacked into a cache directory. Prints that
# directory on stdout (messages go to stderr). Safe to run repeatedly and
# concurrently (a lock serializes fetches).
#
# The directory holds:
#   vmlinux    the uncompressed kernel (an ELF with a PVH note: QEMU boots it directly)
#   vmlinuz    the compressed bzImage (fallback)
#   modules/   the virtio-net, failover and fw_cfg modules the guests load
#              (listed in load order in modules/order), and the 9p modules of
#              guests that mount host directories (modules/hostfs-order)
#   version    "<package> <version>"
#   complete   the layout version (LAYOUT below); a directory of an older layout is
#              fetched again
#
# Environment: LLC_VM_CACHE (cache root, default ${XDG_CACHE_HOME:-~/.cache}/llc-vm);
# LLC_VM_KERNEL_DEB (use this already downloaded .deb of the pinned package).
set -euo pipefail

# The pin. When Debian drops this package from its archive, pick the current
# linux-image-6.1.0-*-amd64 (`apt-cache madison`), and update all three lines.
PKG=linux-image-6.1.0-56-amd64
VERSION=6.1.192-2
SHA256=a86e2049672f52354c4536a089203b6c82639420424d31c91cf31a181fd4d8f1
POOL_PATH=pool/updates/main/l/linux-signed-amd64
FILE="${PKG}_${VERSION}_amd64.deb"
KREL=${PKG#linux-image-}
# Loaded in this order by the guest's /init.
MODULES=(
    drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev
    drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci net/core/failover
    drivers/net/net_failover drivers/net/virtio_net drivers/firmware/qemu_fw_cfg
)
# virtio-9p and its dependencies (modinfo's depends=), in load order: loaded only by
# guests that mount host directories (vm_tests::qemu::Cluster::host_root).
HOSTFS_MODULES=(fs/netfs/netfs fs/fscache/fscache net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p)
# Bumped whenever the directory's contents change, so older caches are refreshed.
LAYOUT=2

CACHE=${LLC_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/llc-vm}
DIR="$CACHE/${PKG}_${VERSION}"
current() { [ -f "$DIR/complete" ] && [ "$(cat "$DIR/complete")" = "$LAYOUT" ]; }
if current; then
    echo "$DIR"
    exit 0
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if current; then
    echo "$DIR"
    exit 0
fi

say() { echo "fetch-vm-kernel: $*" >&2; }
die() {
    say "$*"
    say "the QEMU tests need $PKG $VERSION; put its .deb somewhere and set" \
        "LLC_VM_KERNEL_DEB=/path/$FILE, or update the pin in $0 if Debian dropped it"
    exit 1
}

WORK=$(mktemp -d "$CACHE/.fetch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

deb="$WORK/$FILE"
if [ -n "${LLC_VM_KERNEL_DEB:-}" ]; then
    cp "$LLC_VM_KERNEL_DEB" "$deb" || die "cannot read LLC_VM_KERNEL_DEB=$LLC_VM_KERNEL_DEB"
else
    say "downloading $PKG $VERSION (about 70 MB, once)"
    # apt first (uses the system's mirror and proxy), then the archive's pool directly.
    # apt drops privileges to _apt, which cannot enter a root-only home: stay root then.
    sandbox=()
    [ "$(id -u)" -ne 0 ] || sandbox=(-o APT::Sandbox::User=root)
    if ! (cd "$WORK" && apt-get "${sandbox[@]}" download -q "$PKG=$VERSION" >&2); then
        say "apt-get download failed; trying the Debian security archive directly"
        for base in https://deb.debian.org/debian-security https://security.debian.org/debian-security; do
            if curl -fsSL --retry 2 -o "$deb" "$base/$POOL_PATH/$FILE"; then
                break
            fi
            rm -f "$deb"
        done
    fi
    [ -f "$deb" ] || die "cannot download $FILE (no network, or no longer in the archive)"
fi
echo "$SHA256  $deb" | sha256sum -c --quiet - >&2 || die "$FILE does not match the pinned SHA-256"

say "unpacking into $DIR"
mkdir -p "$WORK/x" "$WORK/out/modules"
members=("./boot/vmlinuz-$KREL")
for m in "${MODULES[@]}" "${HOSTFS_MODULES[@]}"; do
    members+=("./lib/modules/$KREL/kernel/$m.ko")
done
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$WORK/x" "${members[@]}"
cp "$WORK/x/boot/vmlinuz-$KREL" "$WORK/out/vmlinuz"
for m in "${MODULES[@]}" "${HOSTFS_MODULES[@]}"; do
    cp "$WORK/x/lib/modules/$KREL/kernel/$m.ko" "$WORK/out/modules/"
done
printf '%s\n' "${MODULES[@]##*/}" > "$WORK/out/modules/order"
printf '%s\n' "${HOSTFS_MODULES[@]##*/}" > "$WORK/out/modules/hostfs-order"

# The bzImage carries the kernel as an xz stream; the uncompressed ELF boots
# about twice as fast under TCG (PVH entry, no decompression in the guest).
offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$WORK/out/vmlinuz" | head -1 | cut -d: -f1 || true)
if [ -n "$offset" ] &&
    { tail -c +$((offset + 1)) "$WORK/out/vmlinuz" || true; } |
    xz -dc --single-stream > "$WORK/out/vmlinux" 2>/dev/null &&
    [ "$(head -c 4 "$WORK/out/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ]; then
    :
else
    say "could not extract vmlinux from the bzImage; guests will boot vmlinuz (slower)"
    rm -f "$WORK/out/vmlinux"
fi
echo "$PKG $VERSION" > "$WORK/out/version"
echo "$LAYOUT" > "$WORK/out/complete"
rm -rf "$DIR"
mv "$WORK/out" "$DIR"
echo "$DIR"
