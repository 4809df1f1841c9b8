//! QEMU test hosts: N virtual machines with virtio-net NICs on one virtual Ethernet link,
//! each running a Debian kernel and a test script, so the stack is tested on a real NIC
//! driver in separate kernels.
//!
//! A [`GuestImage`] is built once per process: the pinned Debian kernel (downloaded once
//! into a cache by `scripts/fetch-vm-kernel.sh`), and an initramfs holding busybox-static,
//! the virtio-net modules, the project's binaries with their shared libraries and an
//! `/init` (`init.sh` next to this file). A [`Cluster`] then boots one VM per [`Guest`],
//! joins them with a [`Link`], and runs each guest's script:
//!
//! * a *service* guest runs its script at once (a responder, a server) and is stopped
//!   (SIGTERM inside the guest) when every task has finished;
//! * a *task* guest waits until every VM is up and every service printed its ready marker,
//!   then runs its script; its exit status is the test's verdict.
//!
//! Every guest's hostname is its name (`vm0`, `vm1`, ... unless [`Guest::name`] says
//! otherwise) and its `/etc/hosts` names every guest with its IPv4 address.
//!
//! ## Host programs in the guests: a read-only root of host directories
//!
//! Programs with a few files go into the initramfs with their `ldd` libraries. Open MPI does
//! not fit that mould: mpirun and orted, libmpi and libopen-pal/rte, PMIx with its plugins,
//! about a hundred MCA components loaded with dlopen, hwloc, libevent, help files in
//! `/usr/share/openmpi`, `/etc/openmpi`: copying them means chasing every dlopen and data
//! file, and an initramfs of that size is unpacked into each guest's RAM at every boot.
//! [`Cluster::host_root`] instead shares the host's own files read-only over virtio-9p
//! (`-virtfs local,...,security_model=none,readonly=on`; the kernel cache carries the 9p
//! modules, loaded only then): `/init` builds a root on a tmpfs from the host's `/usr`,
//! `/etc`, top-level `/bin`, `/lib`... symlinks and the directories the test names (the
//! build's target directory), gives it private `/proc`, `/sys`, `/dev`, `/dev/shm`, `/tmp`,
//! `/run`, `/root` and the guests' `/etc/hosts`, and runs the script chrooted there. Files
//! are read on demand and cached by the guest, nothing is copied, the guest runs exactly
//! the host's build, and it can change no host file. Only `/usr`, `/etc` and the named
//! directories are shared, not `/` (home directories, `/var`, the host's `/tmp` stay out of
//! the guests). Paths under `/dev`, `/proc` and `/sys` cannot be shared: the guests mount
//! their own there. A directory below the guests' private tmpfs `/tmp`, `/run` or `/root`
//! (a clone, and so a target directory, under `/tmp`) is mounted inside that tmpfs.
//!
//! Open MPI starts its daemons with an "rsh agent", called like ssh (`AGENT HOST
//! COMMAND...`); the guests have no ssh, so `llc-vm-agent` (a binary of this crate,
//! `src/bin/llc-vm-agent.rs`) stands in for it: `llc-vm-agent serve ADDR:PORT` in one guest
//! runs the commands the other guest's `llc-vm-agent HOST COMMAND...` sends it with
//! `sh -c`, relaying stdout, stderr and the exit status. It has no authentication and
//! listens only on the guests' private link.
//!
//! Results travel over two channels: a `LLC-VM-RESULT rc` line on the serial console and
//! QEMU's exit status (the guest writes rc to an `isa-debug-exit` port, QEMU exits with
//! `rc*2+1`, of which an exit status keeps 8 bits); the harness accepts a result only when
//! both agree, so QEMU's own failures (status 1) are never taken for a guest's 0. A
//! non-zero status, a guest that stops without a result, and a VM that outlives its hard
//! timeout all become a [`VmError`] carrying every VM's console tail.
//! Every QEMU process is killed when its [`Cluster`] drops (also on panic) and when the
//! thread that started it dies (`PR_SET_PDEATHSIG`).
//!
//! KVM is used only when a bounded probe boot under KVM succeeds ([`accelerator`]);
//! otherwise TCG, which is slow: **timings measured in these guests mean nothing** and must
//! never be reported as performance.
//!
//! Environment: `LLC_VM_ACCEL=kvm|tcg` skips the probe; `LLC_VM_CONSOLE=1` prints every
//! console after each run; `LLC_VM_MAX` (default 2) caps the
//! VMs one process runs at once; `LLC_VM_REQUIRE=1` turns "QEMU or the kernel is not
//! available" from a skip into a failure (CI sets it); `LLC_VM_CACHE` moves the cache.

mod accel;
mod cpio;
mod image;
mod kernel;
mod vm;

use std::path::PathBuf;
use std::time::Duration;

pub use accel::{accelerator, Accel, AccelChoice};
pub use image::{cargo_release_binary, cargo_release_lib, GuestImage};
pub use kernel::Kernel;
pub use vm::{max_vms, Cluster, Guest, Link, Outcome, Report, Role, SKIP_MARKER};

/// Status `/init` reports when it fails itself (module, NIC or script set-up).
pub const INIT_FAILED: i32 = 199;

/// Errors of the QEMU harness. Guest failures carry the consoles' last lines.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// QEMU, busybox-static or the guest kernel is missing here (tests skip on it unless
    /// `LLC_VM_REQUIRE=1`).
    #[error("QEMU test hosts unavailable: {0}")]
    Unavailable(String),
    /// A caller-supplied argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Setting up (files, commands, namespaces) failed.
    #[error("{what}: {detail}")]
    Setup {
        /// What was being done.
        what: String,
        /// Why it failed.
        detail: String,
    },
    /// A guest's script exited with a non-zero status.
    #[error("guest {vm} failed with status {rc}{hint}\n{consoles}")]
    GuestFailed {
        /// The guest's name.
        vm: String,
        /// The script's exit status (or [`INIT_FAILED`]).
        rc: i32,
        /// A short explanation of well-known statuses.
        hint: String,
        /// The last console lines of every VM.
        consoles: String,
    },
    /// A VM stopped without reporting a result (kernel panic, QEMU error).
    #[error("guest {vm} stopped without a result ({why})\n{consoles}")]
    NoResult {
        /// The guest's name.
        vm: String,
        /// QEMU's exit status and what it means.
        why: String,
        /// The last console lines of every VM.
        consoles: String,
    },
    /// The cluster did not finish within its hard timeout; all VMs were killed.
    #[error("guests {vms} did not finish within {timeout:?} ({stage}); killed\n{consoles}")]
    Timeout {
        /// The unfinished guests.
        vms: String,
        /// The limit.
        timeout: Duration,
        /// What the harness was waiting for.
        stage: String,
        /// The last console lines of every VM.
        consoles: String,
    },
}

impl VmError {
    pub(crate) fn setup(what: impl Into<String>, detail: impl std::fmt::Display) -> VmError {
        VmError::Setup {
            what: what.into(),
            detail: detail.to_string(),
        }
    }
}

/// Is `LLC_VM_REQUIRE` set (to anything but "0" or "")?
pub fn vm_tests_required() -> bool {
    std::env::var("LLC_VM_REQUIRE").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `qemu-system-x86_64` from PATH or the usual directories.
pub fn qemu_binary() -> Result<PathBuf, VmError> {
    find_program("qemu-system-x86_64").ok_or_else(|| {
        VmError::Unavailable(
            "qemu-system-x86_64 not found (scripts/install-deps.sh installs qemu-system-x86 \
             from bookworm-backports)"
                .into(),
        )
    })
}

/// A program from PATH, else from the usual bin and sbin directories (on
/// the host): testbed's lookup.
pub use testbed::cluster::find_program;

/// The last `n` lines of `text`.
pub(crate) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Prints `SKIPPED <test>: <reason>` on the process's stderr, past the test harness's
/// output capture, so a skipped test is visible in every `cargo test` run.
pub fn print_skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// Skips the current test when the QEMU harness cannot run here: evaluates `$e` (a
/// `Result<T, VmError>`); on `VmError::Unavailable` prints `SKIPPED <test>: <reason>` and
/// returns, unless `LLC_VM_REQUIRE=1`, where it panics; other errors panic.
#[macro_export]
macro_rules! vm_or_skip {
    ($e:expr) => {
        match $e {
            ::std::result::Result::Ok(v) => v,
            ::std::result::Result::Err($crate::qemu::VmError::Unavailable(reason))
                if !$crate::qemu::vm_tests_required() =>
            {
                fn __vm_tests_here() {}
                let here = ::std::any::type_name_of_val(&__vm_tests_here);
                let here = here.strip_suffix("::__vm_tests_here").unwrap_or(here);
                $crate::qemu::print_skipped(here, &reason);
                return;
            }
            ::std::result::Result::Err(e) => ::std::panic!("{e}"),
        }
    };
}
