//! Choosing the accelerator: KVM only when a bounded probe boot under KVM reaches its
//! result, TCG otherwise. `/dev/kvm` existing proves nothing: on a host that is itself a
//! guest, KVM can hang the guest silently.

use std::fmt;
use std::io::Write;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use super::{Cluster, Guest, GuestImage, Link, VmError};

/// Bound of the probe boot (a KVM guest is up in about a second).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// A QEMU accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualization.
    Kvm,
    /// QEMU's emulator: slow, timings meaningless.
    Tcg,
}

impl Accel {
    /// The `-accel` argument.
    pub fn qemu_name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "KVM",
            Accel::Tcg => "TCG",
        })
    }
}

/// The accelerator chosen for this process, and why.
#[derive(Debug, Clone)]
pub struct AccelChoice {
    /// The choice.
    pub accel: Accel,
    /// Why (the probe's outcome, or `LLC_VM_ACCEL`).
    pub reason: String,
}

/// The accelerator for this process: `LLC_VM_ACCEL=kvm|tcg` when set, else KVM if `/dev/kvm`
/// opens and a probe boot of `image` under KVM finishes within 10 s, else TCG. Decided once
/// per process and printed to stderr.
pub fn accelerator(image: &GuestImage) -> Result<&'static AccelChoice, VmError> {
    static CHOICE: OnceLock<AccelChoice> = OnceLock::new();
    // Concurrent first callers wait for one probe instead of each running their own.
    static PROBING: Mutex<()> = Mutex::new(());
    if let Some(c) = CHOICE.get() {
        return Ok(c);
    }
    let _probing = PROBING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = CHOICE.get() {
        return Ok(c);
    }
    let choice = choose(image)?;
    // Past the test harness's output capture: every run says which accelerator it used.
    let _ = writeln!(
        std::io::stderr(),
        "vm-tests: QEMU accelerator {} ({}){}",
        choice.accel,
        choice.reason,
        if choice.accel == Accel::Tcg {
            "; guest timings are not performance figures"
        } else {
            ""
        }
    );
    Ok(CHOICE.get_or_init(|| choice))
}

fn choose(image: &GuestImage) -> Result<AccelChoice, VmError> {
    match std::env::var("LLC_VM_ACCEL").as_deref() {
        Ok("kvm") => {
            return Ok(AccelChoice {
                accel: Accel::Kvm,
                reason: "LLC_VM_ACCEL=kvm".into(),
            })
        }
        Ok("tcg") => {
            return Ok(AccelChoice {
                accel: Accel::Tcg,
                reason: "LLC_VM_ACCEL=tcg".into(),
            })
        }
        Ok(other) if !other.is_empty() => {
            return Err(VmError::InvalidArgument(format!(
                "LLC_VM_ACCEL={other}: kvm or tcg expected"
            )))
        }
        _ => {}
    }
    let kvm = std::path::Path::new("/dev/kvm");
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(kvm)
        .is_err()
    {
        return Ok(AccelChoice {
            accel: Accel::Tcg,
            reason: "/dev/kvm cannot be opened".into(),
        });
    }
    let probe = Cluster::new(image)
        .link(Link::Isolated)
        .accel(Accel::Kvm)
        .timeout(PROBE_TIMEOUT)
        .guest(Guest::task("true").name("kvm-probe"))
        .run();
    Ok(match probe {
        Ok(_) => AccelChoice {
            accel: Accel::Kvm,
            reason: "a probe boot under KVM succeeded".into(),
        },
        Err(e) => {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default().to_owned();
            AccelChoice {
                accel: Accel::Tcg,
                reason: format!("/dev/kvm exists but a probe boot under KVM failed: {first}"),
            }
        }
    })
}
