//! Starting the endpoint service `llcd` in a simulated host: the one way the
//! test beds run it.
//!
//! `llcd` pins the shared XDP programs it holds for ordinary users in a BPF
//! file system, so that they outlive a restart of the service. A service
//! started with `ip netns exec` runs in a mount namespace of its own, which
//! ends with it; a BPF file system it mounted there would take the pins
//! along. So the bed mounts one at `/run/llcd/bpf` in its own (the host's)
//! mount namespace first, which the service's copy of the mount tree then
//! shares, as `/sys/fs/bpf` is shared on a host where systemd mounted it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::netns::{run_checked, HarnessError, Netns};
use crate::process::Background;

/// Where the beds' services pin (see the module documentation).
pub const PIN_FS: &str = "/run/llcd/bpf";

/// Mount a BPF file system at [`PIN_FS`] unless one is there. It stays
/// mounted (as the service's runtime directory would on a host).
pub fn ensure_pin_fs() -> Result<(), HarnessError> {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| HarnessError::Setup(format!("reading /proc/self/mountinfo: {e}")))?
        .lines()
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.get(4) == Some(&PIN_FS) && l.contains(" - bpf ")
        });
    if mounted {
        return Ok(());
    }
    std::fs::create_dir_all(PIN_FS)
        .map_err(|e| HarnessError::Setup(format!("creating {PIN_FS}: {e}")))?;
    run_checked(
        Command::new("mount").args(["-t", "bpf", "-o", "mode=0700", "bpf", PIN_FS]),
        Duration::from_secs(10),
    )
    .map(drop)
}

/// `llcd --foreground --config CONFIG` in `ns`, once it serves.
pub fn start(ns: &Netns, llcd: &Path, config: &Path) -> Result<Background, HarnessError> {
    ensure_pin_fs()?;
    let mut cmd = ns.command(llcd);
    cmd.arg("--foreground").arg("--config").arg(config);
    Background::spawn(&mut cmd, "llcd: ready", Duration::from_secs(20)).map_err(HarnessError::Setup)
}
