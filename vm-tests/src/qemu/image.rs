//! The guests' initramfs: busybox-static, the kernel's virtio-net modules (and the 9p
//! modules of guests that mount host directories), the project's binaries (stripped) with
//! the shared libraries `ldd` names, and `/init`.
//!
//! The archive is written into the cache next to the kernel, named by a hash of its
//! contents, so equal inputs reuse one file and parallel processes never clash; archives
//! unused for a day are deleted.

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use super::cpio::{write_atomically, Archive};
use super::{find_program, Kernel, VmError};
use testbed::run_checked;

/// The guest's `/init`.
const INIT: &str = include_str!("init.sh");

/// Where the guests find the project's binaries (on their PATH).
const GUEST_BIN_DIR: &str = "usr/bin";

/// Archives older than this are pruned from the cache.
const MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// Bound for building a binary with cargo (a cold release build of the workspace).
const CARGO_TIMEOUT: Duration = Duration::from_secs(1800);

/// A bootable guest: kernel plus initramfs.
#[derive(Debug, Clone)]
pub struct GuestImage {
    /// The kernel.
    pub kernel: &'static Kernel,
    /// The initramfs (uncompressed newc cpio).
    pub initrd: PathBuf,
    /// Names of the project binaries in the guest's `/usr/bin`.
    pub binaries: Vec<String>,
}

impl GuestImage {
    /// Builds an image holding `binaries` (host paths; dynamically linked ones get their
    /// libraries). Fetches the kernel on first use. Missing QEMU, busybox-static or kernel
    /// is [`VmError::Unavailable`].
    pub fn build(binaries: &[PathBuf]) -> Result<GuestImage, VmError> {
        super::qemu_binary()?;
        let busybox = static_busybox()?;
        let kernel = Kernel::get()?;

        let mut a = Tree::new();
        for d in [
            "bin",
            "sbin",
            "usr",
            "usr/bin",
            "usr/sbin",
            "lib",
            "lib/modules",
            "dev",
            "proc",
            "sys",
            "tmp",
            "run",
            "etc",
            "root",
        ] {
            a.dir(d);
        }
        // Before devtmpfs is mounted, init's stdio is /dev/console from the archive.
        a.archive.char_dev("dev/console", 0o600, 5, 1);
        a.archive.char_dev("dev/null", 0o666, 1, 3);
        a.file("bin/busybox", 0o755, &read(&busybox)?);
        a.file("init", 0o755, INIT.as_bytes());
        let mut order = String::new();
        for m in &kernel.modules {
            let name = m.file_name().unwrap_or_default().to_string_lossy();
            a.file(&format!("lib/modules/{name}"), 0o644, &read(m)?);
            order.push_str(name.trim_end_matches(".ko"));
            order.push('\n');
        }
        a.file("lib/modules/order", 0o644, order.as_bytes());
        // Loaded only when the guest mounts host directories (about 0.8 MB).
        let mut hostfs_order = String::new();
        for m in &kernel.hostfs_modules {
            let name = m.file_name().unwrap_or_default().to_string_lossy();
            a.file(&format!("lib/modules/{name}"), 0o644, &read(m)?);
            hostfs_order.push_str(name.trim_end_matches(".ko"));
            hostfs_order.push('\n');
        }
        a.file("lib/modules/hostfs-order", 0o644, hostfs_order.as_bytes());

        let mut names = Vec::new();
        let mut libs = BTreeSet::new();
        for bin in binaries {
            let name = bin
                .file_name()
                .ok_or_else(|| {
                    VmError::InvalidArgument(format!("{} is not a file", bin.display()))
                })?
                .to_string_lossy()
                .into_owned();
            a.file(&format!("{GUEST_BIN_DIR}/{name}"), 0o755, &stripped(bin)?);
            libs.extend(shared_libraries(bin)?);
            names.push(name);
        }
        for lib in &libs {
            // Copy the target of symlinks under the name the loader asks for.
            let guest = lib.to_string_lossy();
            a.file(&guest, 0o755, &read(lib)?);
        }
        let bytes = a.archive.finish();

        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        let dir = kernel.dir.parent().unwrap_or(&kernel.dir).join("initrd");
        std::fs::create_dir_all(&dir)
            .map_err(|e| VmError::setup(format!("creating {}", dir.display()), e))?;
        let initrd = dir.join(format!("{:016x}.cpio", h.finish()));
        if !initrd.is_file() {
            write_atomically(&initrd, &bytes)
                .map_err(|e| VmError::setup(format!("writing {}", initrd.display()), e))?;
        }
        prune(&dir, &initrd);
        Ok(GuestImage {
            kernel,
            initrd,
            binaries: names,
        })
    }
}

/// An archive that creates parent directories on demand.
struct Tree {
    archive: Archive,
    dirs: HashSet<String>,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            archive: Archive::new(),
            dirs: HashSet::new(),
        }
    }

    fn dir(&mut self, path: &str) {
        let path = path.trim_matches('/');
        if path.is_empty() || self.dirs.contains(path) {
            return;
        }
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.archive.dir(path);
        self.dirs.insert(path.to_owned());
    }

    fn file(&mut self, path: &str, perm: u32, data: &[u8]) {
        let path = path.trim_start_matches('/');
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.archive.file(path, perm, data);
    }
}

fn read(path: &Path) -> Result<Vec<u8>, VmError> {
    std::fs::read(path).map_err(|e| VmError::setup(format!("reading {}", path.display()), e))
}

/// busybox-static's binary (Debian installs it as /bin/busybox, replacing the dynamic one).
fn static_busybox() -> Result<PathBuf, VmError> {
    let missing = || {
        VmError::Unavailable(
            "a statically linked busybox is needed for the guests' initramfs \
             (scripts/install-deps.sh installs busybox-static)"
                .into(),
        )
    };
    let path = find_program("busybox").ok_or_else(missing)?;
    // A dynamic busybox would not run in the guest (its libc is not copied).
    if shared_libraries(&path)?.is_empty() {
        Ok(path)
    } else {
        Err(missing())
    }
}

/// The binary without debug information (`strip --strip-debug`), or as-is without strip.
fn stripped(bin: &Path) -> Result<Vec<u8>, VmError> {
    let Some(strip) = find_program("strip") else {
        return read(bin);
    };
    let tmp = std::env::temp_dir().join(format!(
        "llc-vm-strip-{}-{}",
        std::process::id(),
        bin.file_name().unwrap_or_default().to_string_lossy()
    ));
    let result = run_checked(
        Command::new(strip)
            .arg("--strip-debug")
            .arg("-o")
            .arg(&tmp)
            .arg(bin),
        Duration::from_secs(60),
    );
    let bytes = match result {
        Ok(_) => read(&tmp),
        Err(_) => read(bin),
    };
    let _ = std::fs::remove_file(&tmp);
    bytes
}

/// The shared libraries (and the loader) `ldd` lists for `bin`; empty for static binaries.
fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>, VmError> {
    if !bin.is_file() {
        return Err(VmError::InvalidArgument(format!(
            "{} does not exist",
            bin.display()
        )));
    }
    let out = match run_checked(Command::new("ldd").arg(bin), Duration::from_secs(30)) {
        Ok(out) => out,
        // ldd exits 1 with "not a dynamic executable" for static binaries.
        Err(testbed::HarnessError::CommandFailed { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(VmError::setup(format!("ldd {}", bin.display()), e)),
    };
    parse_ldd(&out).map_err(|lib| {
        VmError::setup(
            format!("ldd {}", bin.display()),
            format!("library {lib} not found on the host"),
        )
    })
}

/// Paths in `ldd` output; `Err(name)` for a library that was not found.
fn parse_ldd(out: &str) -> Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in out.lines().map(str::trim) {
        let path = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(name.trim().to_owned());
                }
                rest.split(" (").next().unwrap_or("").trim()
            }
            None => line.split(" (").next().unwrap_or("").trim(),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// Deletes archives in `dir` other than `keep` that were not modified for [`MAX_AGE`].
fn prune(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for e in entries.flatten() {
        let p = e.path();
        if p == keep || p.extension().is_none_or(|x| x != "cpio") {
            continue;
        }
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age > MAX_AGE);
        if old {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Builds `bin` of `package` with `cargo build --release` in this workspace (once per call;
/// cargo makes repeated builds cheap) and returns its path.
pub fn cargo_release_binary(package: &str, bin: &str) -> Result<PathBuf, VmError> {
    let path = cargo_release(package, &["--bin", bin], bin)?.join(bin);
    built(&path, bin)
}

/// Builds the library of `package` (its rlib and any cdylib, e.g. `libmpi_btl_shim.so`)
/// with `cargo build --release --lib` and returns the directory cargo put them in
/// (`target/release`).
pub fn cargo_release_lib(package: &str) -> Result<PathBuf, VmError> {
    cargo_release(package, &["--lib"], package)
}

/// `cargo build --release -q -p package ARGS` in this workspace; returns `target/release`.
fn cargo_release(package: &str, args: &[&str], what: &str) -> Result<PathBuf, VmError> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run_checked(
        Command::new(cargo)
            .current_dir(&workspace)
            .args(["build", "--release", "-q", "-p", package])
            .args(args),
        CARGO_TIMEOUT,
    )
    .map_err(|e| VmError::setup(format!("building {what}"), e))?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    Ok(target.join("release"))
}

fn built(path: &Path, what: &str) -> Result<PathBuf, VmError> {
    if path.is_file() {
        Ok(path.to_owned())
    } else {
        Err(VmError::setup(
            format!("building {what}"),
            format!("{} missing after the build", path.display()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_is_parsed() {
        let out = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                   \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f1)\n\
                   \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)\n\
                   \t/lib64/ld-linux-x86-64.so.2 (0x00007f3)\n";
        assert_eq!(
            parse_ldd(out).unwrap(),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        assert_eq!(
            parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err(),
            "libfoo.so.1"
        );
    }
}
