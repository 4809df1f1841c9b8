#!/usr/bin/env bash
# Install the LLC stack like an Open MPI component: the C libraries of the
# C-ABI crates (libmpi_btl_shim.so, libdeck.so, libbmi.so: every workspace
# member with include/*.h) with their headers and pkg-config files, the tools, and
# mca_btl_llc.so in Open MPI's own component directory, so that
#   mpirun --mca pml ob1 --mca btl self,vader,llc ./app
# works with nothing else set; also the endpoint service llcd (P/sbin) with its
# systemd unit (P/lib/systemd/system/llcd.service) and an example policy
# (P/share/llc-stack/llcd.toml.example; the live one is /etc/llc/llcd.toml),
# and the libfabric provider libllc-fi.so in libfabric's provider directory,
# so that `fi_info -p llc` and every libfabric MPI find it with nothing set:
# installed by root, it lets ordinary users open endpoints. A root install
# on a host run by systemd enables and starts it (not with --destdir, --deb
# or --no-service). Every file it writes is listed in a manifest;
# --uninstall removes exactly those (and the directories it created, when
# empty).
#
#   scripts/install.sh [--prefix P] [--destdir D] [--component-dir DIR | --user-component]
#                      [--provider-dir DIR] [--profile PROFILE] [--no-build] [--no-service]
#                      [--uninstall] [--deb FILE]
#
# --prefix P        libraries in P/lib, headers in P/include, pkg-config files in
#                   P/lib/pkgconfig, tools in P/bin (default /usr/local).
# --destdir D       stage everything under D (packagers: the files keep the paths
#                   they will have once D's contents are copied to /); the
#                   component's run-time search path names P/lib, not D.
# --component-dir   where mca_btl_llc.so goes. Default: Open MPI's pkglibdir, from
#                   `ompi_info --path pkglibdir` (or pkg-config's ompi), never guessed.
# --user-component  put it in ~/.openmpi/components, which Open MPI searches by
#                   default after its own directory: an install without root (the
#                   libfabric provider then goes to ~/.local/lib/libfabric, which
#                   libfabric searches only when FI_PROVIDER_PATH names it).
# --provider-dir    where libllc-fi.so goes. Default: libfabric's provider directory,
#                   pkg-config's libfabric libdir + /libfabric (Debian:
#                   /usr/lib/x86_64-linux-gnu/libfabric), never guessed. The libfabric
#                   bundled in the PyPI MPI packages finds it through
#                   FI_PROVIDER_PATH=DIR:VENV/lib/<mpi>/libfabric (docs/ARCHITECTURE.md).
# --profile         the cargo profile to build and install (default release).
# --no-build        install what the profile's target directory already holds.
# --no-service      do not enable and start llcd.service after installing.
# --uninstall       remove what the install with the same --prefix/--destdir wrote.
# --deb FILE        build a Debian package instead (dpkg-deb): prefix /usr unless
#                   given, component in Open MPI's directory; dpkg then tracks the
#                   files (`dpkg -i FILE`, `dpkg -r llc-stack`).
# CARGO and CARGO_TARGET_DIR are honoured as cargo does.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PREFIX=/usr/local
DESTDIR=""
COMPONENT_DIR=""
PROVIDER_DIR=""
USER_COMPONENT=0
PROFILE=release
BUILD=1
UNINSTALL=0
SERVICE=1
DEB=""
PREFIX_GIVEN=0

die() { echo "install: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; PREFIX="$2"; PREFIX_GIVEN=1; shift 2 ;;
        --prefix=*) PREFIX="${1#*=}"; PREFIX_GIVEN=1; shift ;;
        --deb) [ $# -ge 2 ] || die "--deb needs a file name"; DEB="$2"; shift 2 ;;
        --deb=*) DEB="${1#*=}"; shift ;;
        --destdir) [ $# -ge 2 ] || die "--destdir needs a directory"; DESTDIR="$2"; shift 2 ;;
        --destdir=*) DESTDIR="${1#*=}"; shift ;;
        --component-dir) [ $# -ge 2 ] || die "--component-dir needs a directory"; COMPONENT_DIR="$2"; shift 2 ;;
        --component-dir=*) COMPONENT_DIR="${1#*=}"; shift ;;
        --user-component) USER_COMPONENT=1; shift ;;
        --provider-dir) [ $# -ge 2 ] || die "--provider-dir needs a directory"; PROVIDER_DIR="$2"; shift 2 ;;
        --provider-dir=*) PROVIDER_DIR="${1#*=}"; shift ;;
        --profile) [ $# -ge 2 ] || die "--profile needs a cargo profile"; PROFILE="$2"; shift 2 ;;
        --profile=*) PROFILE="${1#*=}"; shift ;;
        --no-build) BUILD=0; shift ;;
        --no-service) SERVICE=0; shift ;;
        --uninstall) UNINSTALL=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
done

# A Debian package: install into a stage with prefix /usr, then pack it.
if [ -n "$DEB" ]; then
    [ "$UNINSTALL" = 0 ] && [ -z "$DESTDIR" ] && [ "$USER_COMPONENT" = 0 ] ||
        die "--deb takes no --uninstall, --destdir or --user-component (dpkg installs and removes the package)"
    command -v dpkg-deb >/dev/null || die "--deb needs dpkg-deb (Debian's dpkg package)"
    case "$DEB" in /*) ;; *) DEB="$PWD/$DEB" ;; esac
    [ "$PREFIX_GIVEN" = 1 ] || PREFIX=/usr
    root="$(mktemp -d)"
    trap 'rm -rf "$root"' EXIT
    args=(--prefix "$PREFIX" --destdir "$root/pkg" --profile "$PROFILE")
    [ "$BUILD" = 1 ] || args+=(--no-build)
    [ -z "$COMPONENT_DIR" ] || args+=(--component-dir "$COMPONENT_DIR")
    [ -z "$PROVIDER_DIR" ] || args+=(--provider-dir "$PROVIDER_DIR")
    "$0" "${args[@]}" >/dev/null
    # As Debian's packages are: without debugging symbols (debug builds carry
    # hundreds of MB of them).
    if command -v strip >/dev/null; then
        find "$root/pkg" -type f \( -name '*.so' -o -path '*/bin/*' -o -path '*/sbin/*' \) -exec strip --strip-unneeded {} +
    fi
    # dpkg keeps its own list of the package's files.
    rm -f "$root/pkg$PREFIX/share/llc-stack/install-manifest"
    rmdir "$root/pkg$PREFIX/share/llc-stack" "$root/pkg$PREFIX/share" 2>/dev/null || true
    version="$(awk '/^\[package\]/{p=1;next} /^\[/{p=0} p && /^version *=/{gsub(/"/,"");print $3;exit}' "$ROOT/mpi-btl-shim/Cargo.toml")"
    mkdir -p "$root/pkg/DEBIAN"
    cat > "$root/pkg/DEBIAN/control" <<EOF
Package: llc-stack
Version: $version
Architecture: $(dpkg --print-architecture)
Maintainer: llc-stack developers <llc-stack@localhost>
Depends: openmpi-bin, libopenmpi3
Recommends: libfabric1
Section: net
Priority: optional
Installed-Size: $(du -sk "$root/pkg" | cut -f1)
Description: kernel-bypass LLC transport: Open MPI btl/llc, DECK, BMI, tools
 The Open MPI component mca_btl_llc.so (mpirun --mca btl self,vader,llc),
 the C libraries libmpi_btl_shim, libdeck and libbmi with headers and
 pkg-config files, and llc-ping, llc-perf, llc-xfer, llc-stat, deckrun;
 the libfabric provider llc (libllc-fi.so: fi_info -p llc, Open MPI's
 mtl/ofi, MPICH's ch4:ofi);
 the endpoint service llcd (systemd unit llcd.service), which opens
 endpoints for ordinary users.
EOF
    # Enable and start the service on installation, stop it on removal.
    printf '%s\n' '#!/bin/sh' 'set -e' \
        'if [ "$1" = configure ] && [ -d /run/systemd/system ]; then' \
        '    systemctl daemon-reload || true' \
        '    systemctl enable --now llcd.service || true' 'fi' > "$root/pkg/DEBIAN/postinst"
    printf '%s\n' '#!/bin/sh' 'set -e' 'if [ -d /run/systemd/system ]; then' \
        '    systemctl disable --now llcd.service || true' 'fi' > "$root/pkg/DEBIAN/prerm"
    chmod 0755 "$root/pkg/DEBIAN/postinst" "$root/pkg/DEBIAN/prerm"
    dpkg-deb --root-owner-group --build "$root/pkg" "$DEB" >/dev/null
    echo "install: built $DEB (dpkg -i $DEB; dpkg -r llc-stack)"
    exit 0
fi

case "$PREFIX" in /*) ;; *) die "--prefix must be an absolute path, not '$PREFIX'" ;; esac
PREFIX="${PREFIX%/}"
[ -n "$PREFIX" ] || PREFIX=/
if [ -n "$DESTDIR" ]; then
    mkdir -p "$DESTDIR"
    DESTDIR="$(cd "$DESTDIR" && pwd)"
fi
[ -z "$COMPONENT_DIR" ] || [ "$USER_COMPONENT" = 0 ] || die "--component-dir and --user-component exclude each other"

LIBDIR="$PREFIX/lib"
INCLUDEDIR="$PREFIX/include"
PCDIR="$LIBDIR/pkgconfig"
BINDIR="$PREFIX/bin"
SBINDIR="$PREFIX/sbin"
# systemd reads units from /usr/lib/systemd/system and /usr/local/lib/systemd/system.
UNITDIR="$PREFIX/lib/systemd/system"
MANIFEST="$PREFIX/share/llc-stack/install-manifest"

# --- uninstall -------------------------------------------------------------
# The manifest holds `f PATH` for each file written and `d PATH` for each
# directory created (parents first), paths without DESTDIR.
if [ "$UNINSTALL" = 1 ]; then
    manifest="$DESTDIR$MANIFEST"
    [ -f "$manifest" ] || die "nothing to uninstall: no manifest at $manifest"
    n=0
    created=()
    while read -r kind path; do
        case "$kind" in
            f) rm -f -- "$DESTDIR$path"; n=$((n + 1)) ;;
            d) created+=("$path") ;;
        esac
    done < "$manifest"
    if [ -z "$DESTDIR" ] && [ -d /run/systemd/system ] && grep -q "^f $UNITDIR/llcd.service\$" "$manifest"; then
        systemctl disable --now llcd.service >/dev/null 2>&1 || true
    fi
    rm -f -- "$manifest"
    # Newest first, and only when empty: a directory that now holds someone
    # else's files stays.
    for ((i = ${#created[@]} - 1; i >= 0; i--)); do
        rmdir -- "$DESTDIR${created[i]}" 2>/dev/null || true
    done
    echo "install: removed the $n files listed in $MANIFEST${DESTDIR:+ (under $DESTDIR)}"
    [ -n "$DESTDIR" ] || [ "$(id -u)" -ne 0 ] || ! command -v ldconfig >/dev/null || ldconfig
    exit 0
fi

# --- where Open MPI looks for components ---------------------------------
ompi_pkglibdir() {
    local dir=""
    if command -v ompi_info >/dev/null; then
        dir="$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p' | head -n1)"
    fi
    if [ -z "$dir" ] && command -v pkg-config >/dev/null && pkg-config --exists ompi 2>/dev/null; then
        dir="$(pkg-config --variable=pkglibdir ompi 2>/dev/null || true)"
    fi
    [ -n "$dir" ] || return 1
    echo "$dir"
}
if [ "$USER_COMPONENT" = 1 ]; then
    [ -n "${HOME:-}" ] || die "--user-component needs HOME"
    COMPONENT_DIR="$HOME/.openmpi/components"
elif [ -z "$COMPONENT_DIR" ]; then
    COMPONENT_DIR="$(ompi_pkglibdir)" ||
        die "cannot find Open MPI's component directory (neither 'ompi_info --path pkglibdir' nor pkg-config's ompi answered): install openmpi-bin and libopenmpi-dev (scripts/install-deps.sh), or pass --component-dir DIR"
fi
case "$COMPONENT_DIR" in /*) ;; *) die "the component directory must be absolute, not '$COMPONENT_DIR'" ;; esac
# libfabric's provider directory: where the core scans for *fi.so with
# FI_PROVIDER_PATH unset (its pkglibdir, libdir/libfabric).
if [ -z "$PROVIDER_DIR" ]; then
    if [ "$USER_COMPONENT" = 1 ]; then
        PROVIDER_DIR="$HOME/.local/lib/libfabric"
    elif dir="$(pkg-config --variable=libdir libfabric 2>/dev/null)" && [ -n "$dir" ]; then
        PROVIDER_DIR="$dir/libfabric"
    else
        die "cannot find libfabric's provider directory (pkg-config's libfabric did not answer): install libfabric-dev (scripts/install-deps.sh), or pass --provider-dir DIR"
    fi
fi
case "$PROVIDER_DIR" in /*) ;; *) die "the provider directory must be absolute, not '$PROVIDER_DIR'" ;; esac

# --- what to install ------------------------------------------------------
# C-ABI crates: a workspace member with include/*.h gives lib<name>.so, its
# headers and one pkg-config file per header (a crate listed here but not
# in the workspace, or without headers, is skipped).
C_CRATES=()
for crate in mpi-btl-shim deck bmi; do
    if [ -f "$ROOT/$crate/Cargo.toml" ] && grep -q "\"$crate\"" "$ROOT/Cargo.toml" &&
        compgen -G "$ROOT/$crate/include/*.h" >/dev/null; then
        C_CRATES+=("$crate")
    fi
done
TOOL_PACKAGES=(llc-ping llc-perf llc-xfer llc-stat llcd libfabric-llc)
BINS=(llc-ping llc-ping-demo llc-perf llc-xfer llc-stat deckrun)

TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$PROFILE" in
    dev|test) PROFILE_DIR="$TARGET_DIR/debug" ;;
    bench) PROFILE_DIR="$TARGET_DIR/release" ;;
    *) PROFILE_DIR="$TARGET_DIR/$PROFILE" ;;
esac

if [ "$BUILD" = 1 ]; then
    args=()
    for p in "${C_CRATES[@]}" "${TOOL_PACKAGES[@]}"; do args+=(-p "$p"); done
    echo "install: building ${C_CRATES[*]} ${TOOL_PACKAGES[*]} (cargo profile $PROFILE)"
    (cd "$ROOT" && "${CARGO:-cargo}" build --locked --profile "$PROFILE" "${args[@]}")
fi

# The library file of a C-ABI crate: [lib] name, or the package name with - as _.
lib_name() {
    local toml="$ROOT/$1/Cargo.toml" name
    name="$(awk '/^\[lib\]/{l=1;next} /^\[/{l=0} l && /^name *=/{gsub(/[" ]/,"");sub(/name=/,"");print;exit}' "$toml")"
    [ -n "$name" ] || name="${1//-/_}"
    echo "lib$name.so"
}
pkg_version() {
    awk '/^\[package\]/{p=1;next} /^\[/{p=0} p && /^version *=/{gsub(/"/,"");print $3;exit}' "$ROOT/$1/Cargo.toml"
}
pkg_description() {
    awk -F'"' '/^\[package\]/{p=1;next} /^\[/{p=0} p && /^description *=/{print $2;exit}' "$ROOT/$1/Cargo.toml"
}

for crate in "${C_CRATES[@]}"; do
    f="$PROFILE_DIR/$(lib_name "$crate")"
    [ -f "$f" ] || die "$f is missing: build it (drop --no-build, or cargo build --profile $PROFILE -p $crate)"
done
for b in "${BINS[@]}" llcd libllc_fi.so; do
    [ -f "$PROFILE_DIR/$b" ] || die "$PROFILE_DIR/$b is missing: build the tools (drop --no-build)"
done

# --- what goes where: everything prepared before anything is written -----
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
MODES=() SOURCES=() DESTS=()
plan() { MODES+=("$1"); SOURCES+=("$2"); DESTS+=("$3"); }

for crate in "${C_CRATES[@]}"; do
    lib="$(lib_name "$crate")"
    plan 0755 "$PROFILE_DIR/$lib" "$LIBDIR/$lib"
    for h in "$ROOT/$crate"/include/*.h; do
        header="$(basename "$h")"
        name="${header%.h}"
        name="${name//_/-}"
        plan 0644 "$h" "$INCLUDEDIR/$header"
        cat > "$STAGE/$name.pc" <<EOF
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include
mca_component_dir=$COMPONENT_DIR

Name: $name
Description: $(pkg_description "$crate")
Version: $(pkg_version "$crate")
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -l$(basename "${lib#lib}" .so)
Cflags: -I\${includedir}
EOF
        plan 0644 "$STAGE/$name.pc" "$PCDIR/$name.pc"
    done
done
for b in "${BINS[@]}"; do
    plan 0755 "$PROFILE_DIR/$b" "$BINDIR/$b"
done
# The endpoint service: root's, so in sbin; its unit and an example policy.
plan 0755 "$PROFILE_DIR/llcd" "$SBINDIR/llcd"
cat > "$STAGE/llcd.service" <<EOF
[Unit]
Description=LLC stack endpoint service (endpoints for ordinary users)
Documentation=file://$PREFIX/share/llc-stack/llcd.toml.example
After=network.target

[Service]
Type=simple
ExecStart=$SBINDIR/llcd --foreground
Restart=on-failure

[Install]
WantedBy=multi-user.target
EOF
plan 0644 "$STAGE/llcd.service" "$UNITDIR/llcd.service"
plan 0644 "$ROOT/llcd/llcd.toml.example" "$PREFIX/share/llc-stack/llcd.toml.example"
# The libfabric provider, under the name libfabric's convention gives it.
plan 0755 "$PROFILE_DIR/libllc_fi.so" "$PROVIDER_DIR/libllc-fi.so"
# The Open MPI component, linked to the installed shim (run-time path P/lib).
mkdir "$STAGE/component"
make -s -C "$ROOT/mpi-btl-shim/component" SHIM_DIR="$PROFILE_DIR" OUT="$STAGE/component" RPATH="$LIBDIR" >&2 ||
    die "building mca_btl_llc.so failed (needs libopenmpi-dev, mpicc, make)"
plan 0755 "$STAGE/component/mca_btl_llc.so" "$COMPONENT_DIR/mca_btl_llc.so"

# --- install, recording every file and created directory -------------------
if [ -f "$DESTDIR$MANIFEST" ]; then
    echo "install: an earlier installation is there: removing it first"
    "$0" --prefix "$PREFIX" ${DESTDIR:+--destdir "$DESTDIR"} --uninstall
fi
# Our earlier installation is gone: a file still there belongs to someone
# else (a package, a copy by hand) and stays; nothing is written then.
for d in "${DESTS[@]}"; do
    [ ! -e "$DESTDIR$d" ] ||
        die "$DESTDIR$d exists and no manifest of ours lists it: remove it or choose another --prefix/--component-dir (nothing was installed)"
done

FILES=()
DIRS=()
make_dir() {
    local missing=() d="$1"
    while [ ! -d "$DESTDIR$d" ]; do missing=("$d" "${missing[@]}"); d="$(dirname "$d")"; done
    for d in "${missing[@]}"; do
        mkdir -m 0755 -- "$DESTDIR$d"
        DIRS+=("$d")
    done
}
write_manifest() {
    make_dir "$(dirname "$MANIFEST")"
    {
        for f in "${FILES[@]}"; do echo "f $f"; done
        for d in "${DIRS[@]}"; do echo "d $d"; done
    } > "$DESTDIR$MANIFEST"
}
# A failure half-way (a full disk) still leaves a manifest of what was
# written, so --uninstall can clean up.
trap 'write_manifest; rm -rf "$STAGE"' EXIT
for i in "${!DESTS[@]}"; do
    make_dir "$(dirname "${DESTS[i]}")"
    install -m "${MODES[i]}" -- "${SOURCES[i]}" "$DESTDIR${DESTS[i]}"
    FILES+=("${DESTS[i]}")
done

trap 'rm -rf "$STAGE"' EXIT
write_manifest
[ -n "$DESTDIR" ] || [ "$(id -u)" -ne 0 ] || ! command -v ldconfig >/dev/null || ldconfig
echo "install: ${#FILES[@]} files${DESTDIR:+ under $DESTDIR}: libraries and headers in $PREFIX, tools in $BINDIR, mca_btl_llc.so in $COMPONENT_DIR"
echo "install: manifest $MANIFEST; remove with: scripts/install.sh --prefix $PREFIX${DESTDIR:+ --destdir $DESTDIR} --uninstall"
echo "install: run MPI programs with: mpirun --mca pml ob1 --mca btl self,vader,llc ./app"
echo "install: libfabric provider in $PROVIDER_DIR: fi_info -p llc; mpirun --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include llc ./app"
# The endpoint service: enabled and started where systemd runs the host.
if [ -z "$DESTDIR" ] && [ "$(id -u)" -eq 0 ] && [ "$SERVICE" = 1 ]; then
    if [ -d /run/systemd/system ] && case "$PREFIX" in /usr|/usr/local) true ;; *) false ;; esac; then
        systemctl daemon-reload && systemctl enable --now llcd.service &&
            echo "install: llcd.service enabled and started: ordinary users can open endpoints"
    else
        echo "install: start the endpoint service for ordinary users: $SBINDIR/llcd (or under a supervisor: $SBINDIR/llcd --foreground; unit file $UNITDIR/llcd.service)"
    fi
fi
