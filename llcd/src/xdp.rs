//! AF_XDP endpoints for ordinary users: the interfaces' shared XDP program,
//! held by the service and pinned so that it outlives a restart of the
//! service, and each granted endpoint's session (its sockets, its steering,
//! the locked memory it costs its user).
//!
//! The service joins the interface's shared program once per granted
//! endpoint (`SharedProgram`: a slot of the program and the port's entry);
//! the endpoint's process keeps duplicates of those claims, so that its
//! slot and port stay its own while it lives, also when the service is
//! restarted. The link and maps are pinned in a BPF file system
//! (`/run/llcd/bpf` or `/sys/fs/bpf`, under `llcd/<netns>/if<ifindex>`;
//! see [`bpf_fs`]), and the pins
//! are removed once no endpoint of the interface holds a slot: the program
//! then leaves with its last member, as every shared program does.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use llc_stack::link::afxdp::{self, SharedProgram};
use llc_stack::link::grant::{self, FollowUp, SocketSpec};

use crate::sys;

/// `statfs` magic of a BPF file system.
const BPF_FS_MAGIC: i64 = 0xcafe_4a11;

/// How often pins of interfaces nobody uses any more are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// The pins of this network namespace's shared programs.
#[derive(Debug)]
pub struct Programs {
    /// `<bpffs>/llcd/<netns inode>`, once a BPF file system was found.
    root: Mutex<Option<PathBuf>>,
}

impl Programs {
    /// No program joined yet.
    pub fn new() -> Programs {
        Programs {
            root: Mutex::new(None),
        }
    }

    fn root(&self) -> Result<PathBuf, String> {
        let mut root = self.root.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = &*root {
            return Ok(r.clone());
        }
        let fs = bpf_fs()?;
        let netns = std::fs::metadata("/proc/thread-self/ns/net")
            .map_err(|e| format!("reading this network namespace's id: {e}"))?
            .ino();
        let r = fs.join("llcd").join(netns.to_string());
        *root = Some(r.clone());
        Ok(r)
    }

    /// Join the shared program of `ifname` for one granted endpoint of
    /// `sap`: a live member's, the pinned one, or a new one attached here.
    pub fn join(&self, ifname: &str, sap: u8) -> Result<SharedProgram, String> {
        let root = self.root()?;
        let cfg = afxdp::shared_program_config(ifname, sap).map_err(|e| e.to_string())?;
        let ifindex = llc_stack::link::interfaces::index(ifname).map_err(|e| e.to_string())?;
        // One join at a time: pins are made and removed under this lock.
        let _guard = self.root.lock().unwrap_or_else(|e| e.into_inner());
        SharedProgram::join_pinned(ifname, &cfg, &root.join(format!("if{ifindex}")))
            .map_err(|e| e.to_string())
    }

    /// An endpoint of interface `ifindex` left: remove the pins if no
    /// endpoint of the interface holds a slot any more.
    pub fn left(&self, ifindex: u32) {
        if let Ok(root) = self.root() {
            let _guard = self.root.lock().unwrap_or_else(|e| e.into_inner());
            unpin_if_unused(&root.join(format!("if{ifindex}")), ifindex);
        }
    }

    /// Remove the pins of every interface of this network namespace that no
    /// endpoint uses (endpoints granted before a restart end without
    /// telling the new service).
    pub fn sweep(&self) {
        let Ok(root) = self.root() else { return };
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        let _guard = self.root.lock().unwrap_or_else(|e| e.into_inner());
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(ifindex) = name
                .to_str()
                .and_then(|n| n.strip_prefix("if"))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            unpin_if_unused(&entry.path(), ifindex);
        }
    }
}

fn unpin_if_unused(dir: &Path, ifindex: u32) {
    if !dir.exists() {
        return;
    }
    match xdp_prog::shared::live_slots(ifindex) {
        Ok(0) => {
            tracing::info!(dir = %dir.display(), ifindex, "no endpoint uses the interface's XDP program: unpinned");
            xdp_prog::shared::unpin(dir);
            // The network namespace's directory, once its last interface went.
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot count the endpoints of an interface"),
    }
}

/// The BPF file system to pin in: `/run/llcd/bpf` or `/sys/fs/bpf` where
/// either is one, else one mounted at `/run/llcd/bpf`.
///
/// Pins must outlive the service, so the file system must belong to a
/// mount namespace that outlives it. A service started with `ip netns
/// exec` runs in a mount namespace of its own that ends with it (and sees
/// a fresh `/sys`): mount `/run/llcd/bpf` in the host's before starting it
/// (the test beds do, `testbed::llcd::start`); its copy of the mount tree
/// then shares that file system. A mount made here in such a namespace
/// would take the pins along when the service dies, so the service says so.
fn bpf_fs() -> Result<PathBuf, String> {
    let own = Path::new("/run/llcd/bpf");
    if let Some(p) = [own, Path::new("/sys/fs/bpf")]
        .into_iter()
        .find(|p| sys::fs_magic(p) == Some(BPF_FS_MAGIC))
    {
        return Ok(p.to_owned());
    }
    std::fs::create_dir_all(own)
        .and_then(|()| sys::mount_bpf_fs(own))
        .map_err(|e| {
            format!(
                "no BPF file system at /sys/fs/bpf or /run/llcd/bpf, and mounting one at \
                 /run/llcd/bpf failed: {e}"
            )
        })?;
    if sys::in_private_mount_ns() {
        tracing::warn!(
            "mounted a BPF file system at /run/llcd/bpf in this process's own mount namespace: \
             AF_XDP endpoints will not outlive this llcd; mount it in the host's namespace \
             before starting llcd (mount -t bpf bpf /run/llcd/bpf)"
        );
    }
    Ok(own.to_owned())
}

/// One granted AF_XDP endpoint, on the service's side.
pub struct Endpoint {
    /// The endpoint's membership of the interface's program.
    pub program: SharedProgram,
    ifname: String,
    port: u16,
    /// Sockets made in this session (device and inode), the only ones it
    /// may steer.
    made: HashSet<(u64, u64)>,
    /// Locked memory registered in this session, bytes.
    pub locked: u64,
    /// Whether the port is steered (`ready`).
    pub ready: bool,
}

/// Sockets one session may have made: two per RX queue the program steers.
const MAX_SOCKETS: usize = 2 * xdp_prog::shared::STEER_MAX_QUEUES as usize;

impl Endpoint {
    /// A granted endpoint of `port` on `ifname` with its membership.
    pub fn new(program: SharedProgram, ifname: &str, port: u16) -> Endpoint {
        Endpoint {
            program,
            ifname: ifname.to_owned(),
            port,
            made: HashSet::new(),
            locked: 0,
            ready: false,
        }
    }

    /// Serve one follow-up request: the answer line (after `ok`) and the
    /// descriptors to send, or the refusal. The caller has reserved the
    /// locked memory a socket request asks for.
    pub fn serve(
        &mut self,
        req: &FollowUp,
        fds: &[OwnedFd],
    ) -> Result<(String, Vec<OwnedFd>), String> {
        let one = || match fds {
            [fd] => Ok(fd.as_fd()),
            _ => Err(format!(
                "the request needs one descriptor, got {}",
                fds.len()
            )),
        };
        match req {
            FollowUp::Socket(spec) => {
                let fd = one()?;
                let xsk = self.socket(spec, fd)?;
                Ok((String::new(), vec![xsk]))
            }
            FollowUp::Steer { queue } => {
                let fd = one()?;
                if !self.made.contains(&identity(fd)?) {
                    return Err("only a socket this session made can be steered".into());
                }
                self.program
                    .register_socket(*queue, fd)
                    .map_err(|e| e.to_string())?;
                Ok((String::new(), vec![]))
            }
            FollowUp::Ready => {
                self.program
                    .register_port(self.port)
                    .map_err(|e| e.to_string())?;
                self.ready = true;
                let claims = self
                    .program
                    .holder_claims()
                    .map_err(|e| format!("duplicating the endpoint's claims: {e}"))?;
                // The slot's claim went with the grant; the port's follows.
                Ok((String::new(), claims.into_iter().skip(1).collect()))
            }
        }
    }

    fn socket(&mut self, spec: &SocketSpec, fd: BorrowedFd<'_>) -> Result<OwnedFd, String> {
        if self.made.len() >= MAX_SOCKETS {
            return Err(format!("at most {MAX_SOCKETS} sockets per endpoint"));
        }
        let bytes = spec.umem.map_or(0, |u| u.len);
        let xsk = grant::make_xsk(&self.ifname, spec, fd)?;
        self.made.insert(identity(xsk.as_fd())?);
        self.locked += bytes;
        Ok(xsk)
    }
}

/// A descriptor's file, as (device, inode).
fn identity(fd: BorrowedFd<'_>) -> Result<(u64, u64), String> {
    sys::file_identity(fd).map_err(|e| format!("fstat: {e}"))
}
