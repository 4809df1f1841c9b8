//! The guests' kernel: a pinned Debian kernel package, fetched and unpacked once into a
//! cache by `scripts/fetch-vm-kernel.sh` (which holds the pin); this module runs the
//! script and reads what it left.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::VmError;
use testbed::run_checked;

/// The fetch script, found relative to this crate's sources.
const FETCH_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/fetch-vm-kernel.sh");

/// Bound for a first download (about 70 MB) and unpacking.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);

/// An unpacked guest kernel.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The cache directory it lives in.
    pub dir: PathBuf,
    /// What QEMU boots: `vmlinux` (PVH entry, fast) when it could be extracted, else `vmlinuz`.
    pub image: PathBuf,
    /// "package version", e.g. `linux-image-6.1.0-56-amd64 6.1.192-2`.
    pub version: String,
    /// Module files in the order `/init` loads them.
    pub modules: Vec<PathBuf>,
    /// The 9p modules (virtio transport and their dependencies) in load order: `/init`
    /// loads them only in guests that mount host directories ([`Cluster::host_root`]).
    ///
    /// [`Cluster::host_root`]: super::Cluster::host_root
    pub hostfs_modules: Vec<PathBuf>,
}

impl Kernel {
    /// The kernel, fetched on first use in this process (later calls return the same).
    /// Failing to fetch it is [`VmError::Unavailable`] with the script's explanation.
    pub fn get() -> Result<&'static Kernel, VmError> {
        static KERNEL: OnceLock<Result<Kernel, String>> = OnceLock::new();
        KERNEL
            .get_or_init(|| Kernel::fetch().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| VmError::Unavailable(e.clone()))
    }

    fn fetch() -> Result<Kernel, VmError> {
        let out = run_checked(Command::new("bash").arg(FETCH_SCRIPT), FETCH_TIMEOUT)
            .map_err(|e| VmError::Unavailable(format!("cannot fetch the guest kernel: {e}")))?;
        let dir = out
            .lines()
            .last()
            .map(PathBuf::from)
            .filter(|d| d.join("complete").is_file())
            .ok_or_else(|| {
                VmError::Unavailable(format!("{FETCH_SCRIPT} printed no cache directory"))
            })?;
        Kernel::load(&dir)
    }

    /// Reads an unpacked kernel directory (the layout the fetch script documents).
    pub fn load(dir: &Path) -> Result<Kernel, VmError> {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .map_err(|e| VmError::setup(format!("reading {}/{name}", dir.display()), e))
        };
        let image = ["vmlinux", "vmlinuz"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                VmError::setup(
                    format!("{} has no kernel", dir.display()),
                    "vmlinux/vmlinuz missing",
                )
            })?;
        let list = |name: &str| -> Result<Vec<PathBuf>, VmError> {
            Ok(read(name)?
                .split_whitespace()
                .map(|m| dir.join("modules").join(format!("{m}.ko")))
                .collect())
        };
        Ok(Kernel {
            dir: dir.to_owned(),
            image,
            version: read("version")?.trim().to_owned(),
            modules: list("modules/order")?,
            hostfs_modules: list("modules/hostfs-order")?,
        })
    }
}
