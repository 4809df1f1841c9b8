//! Booting a set of VMs on one link, running their scripts, and collecting the results.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::{accelerator, qemu_binary, tail, Accel, GuestImage, VmError, INIT_FAILED};
use testbed::netns::{format_mac, HarnessError, Netns, Segment};

/// A guest script prints a line starting with this (then a reason) when the test cannot
/// run in this guest; [`Report::skipped`] returns the reason.
pub const SKIP_MARKER: &str = "LLC-VM-SKIP";
/// `/init` prints this (then the guest's name) once the NIC is configured.
const UP_MARKER: &str = "LLC-VM-UP";
/// `/init` prints this (then the status) when the script ended.
const RESULT_MARKER: &str = "LLC-VM-RESULT";

/// Console lines of each VM quoted in errors.
const TAIL_LINES: usize = 40;
/// How long a stopped service may take to end.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// Default hard timeout of a cluster run (TCG boots take seconds; tests take tens).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Guest memory: kernel, initramfs (unpacked into RAM) and the stack's rings.
const DEFAULT_MEMORY_MIB: u32 = 128;
/// The guests' subnet; guest `i` is `.i+1`.
const SUBNET: [u8; 3] = [10, 77, 0];
/// SIGTERM's exit status through a shell.
const RC_TERM: i32 = 128 + libc::SIGTERM;
/// Directories a [`Cluster::host_root`] may share besides the host's system directories.
const MAX_SHARED_DIRS: usize = 8;
/// Host paths a guest with a host root replaces with kernel file systems of its own, so
/// sharing them shows nothing. (Its tmpfs `/tmp`, `/run`, `/root` and `/var/tmp` are
/// mounted before the shares, so a directory below them can be shared.)
const GUEST_PRIVATE: [&str; 3] = ["/proc", "/sys", "/dev"];
/// The host's top-level directories the root needs besides `/usr` and `/etc` (symlinks into
/// `/usr` on a merged-/usr host).
const ROOT_TOP_LEVEL: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// How the VMs' NICs are joined. The rootless kinds need no privileges at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Link {
    /// Two VMs over a unix stream socket (`-netdev stream`); the default.
    #[default]
    Stream,
    /// Two VMs over a pair of unix datagram sockets (`-netdev dgram`).
    Dgram,
    /// Any number of VMs on a UDP multicast group on 127.0.0.1 (`-netdev socket,mcast=`).
    Multicast,
    /// Tap devices on a Linux bridge inside a fresh network namespace (root needed);
    /// `queues` > 1 gives multi-queue virtio-net (`mq=on`), e.g. for native XDP.
    Bridge {
        /// Queue pairs per NIC (1..=8).
        queues: u16,
    },
    /// Every NIC alone, with no peer (single-VM runs, the KVM probe).
    Isolated,
}

/// What a guest's script is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Starts after every VM is up and every service is ready; its status is the verdict.
    Task,
    /// Starts at once; ready when its console shows `ready`; stopped (SIGTERM to its
    /// session inside the guest) once every task has finished.
    Service {
        /// Text its output contains once it serves.
        ready: String,
    },
}

/// One VM: its role, its script and its NIC's MAC.
#[derive(Debug, Clone)]
pub struct Guest {
    name: Option<String>,
    role: Role,
    script: String,
    mac: Option<[u8; 6]>,
}

impl Guest {
    /// A task running `script` (`sh -e`).
    ///
    /// Every script starts with these variables set: `VM_INDEX`, `VM_NAME`, `VM_COUNT`,
    /// `IFACE` (`eth0`), `MAC_<i>` and `IP_<i>` of every guest `i`, and `PEER_MAC`,
    /// `PEER_IP` of the next guest (`(VM_INDEX + 1) % VM_COUNT`).
    pub fn task(script: impl Into<String>) -> Guest {
        Guest {
            name: None,
            role: Role::Task,
            script: script.into(),
            mac: None,
        }
    }

    /// A service running `script`, ready once its console shows `ready`.
    pub fn service(script: impl Into<String>, ready: impl Into<String>) -> Guest {
        Guest {
            role: Role::Service {
                ready: ready.into(),
            },
            ..Guest::task(script)
        }
    }

    /// Names the guest (default `vm<index>`; letters, digits, `-`, `_`).
    pub fn name(mut self, name: impl Into<String>) -> Guest {
        self.name = Some(name.into());
        self
    }

    /// Sets the NIC's MAC (default `02:4c:4c:00:00:<index+1>`).
    pub fn mac(mut self, mac: [u8; 6]) -> Guest {
        self.mac = Some(mac);
        self
    }
}

/// How one guest ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The guest's name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// The script's exit status (a stopped service: 0 or 143).
    pub rc: i32,
    /// Whether the harness stopped it (services only).
    pub stopped: bool,
    /// Everything its serial console printed.
    pub console: String,
}

/// The result of a successful run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The accelerator the VMs ran under (TCG timings are meaningless).
    pub accel: Accel,
    /// One per guest, in order.
    pub outcomes: Vec<Outcome>,
    /// Wall time from the first QEMU start to the last exit.
    pub elapsed: Duration,
}

impl Report {
    /// The console of the guest named `name`.
    pub fn console(&self, name: &str) -> Option<&str> {
        self.outcomes
            .iter()
            .find(|o| o.name == name)
            .map(|o| o.console.as_str())
    }

    /// The first reason a guest gave with a [`SKIP_MARKER`] line.
    pub fn skipped(&self) -> Option<String> {
        self.outcomes.iter().find_map(|o| {
            o.console
                .lines()
                .find_map(|l| l.trim().strip_prefix(SKIP_MARKER))
                .map(|r| format!("{}: {}", o.name, r.trim()))
        })
    }
}

/// A set of VMs on one link. Build it, add guests, [`Cluster::run`] it.
#[derive(Debug, Clone)]
pub struct Cluster<'a> {
    image: &'a GuestImage,
    link: Link,
    timeout: Duration,
    memory_mib: u32,
    cpus: u16,
    mtu: Option<u32>,
    accel: Option<Accel>,
    host_root: Option<Vec<PathBuf>>,
    guests: Vec<Guest>,
}

impl<'a> Cluster<'a> {
    /// An empty cluster booting `image`: stream link, 300 s timeout, 128 MiB, 1 vCPU.
    pub fn new(image: &'a GuestImage) -> Cluster<'a> {
        Cluster {
            image,
            link: Link::default(),
            timeout: DEFAULT_TIMEOUT,
            memory_mib: DEFAULT_MEMORY_MIB,
            cpus: 1,
            mtu: None,
            accel: None,
            host_root: None,
            guests: Vec::new(),
        }
    }

    /// How the NICs are joined.
    pub fn link(mut self, link: Link) -> Self {
        self.link = link;
        self
    }

    /// Hard limit for the whole run (boot to last exit); every VM is killed after it.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Guest memory in MiB.
    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    /// vCPUs per guest.
    pub fn cpus(mut self, cpus: u16) -> Self {
        self.cpus = cpus;
        self
    }

    /// MTU set on every guest's `eth0` (and on the bridge and taps of [`Link::Bridge`]).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Uses this accelerator instead of [`accelerator`]'s choice (the KVM probe does).
    pub(crate) fn accel(mut self, accel: Accel) -> Self {
        self.accel = Some(accel);
        self
    }

    /// Runs every guest's script in a root made of the host's own files instead of the
    /// initramfs, so host programs with many files (Open MPI: mpirun, its libraries,
    /// plugins and help files) run in the guest unchanged and uncopied.
    ///
    /// The root is a tmpfs holding the host's `/usr` and `/etc`, the host's top-level
    /// `/bin`, `/sbin`, `/lib*` (symlinks as on a merged-/usr host, else shared too) and
    /// each of `dirs` at its host path, all shared **read-only** over virtio-9p
    /// (`-virtfs ...,readonly=on`); and, private to the guest: `/proc`, `/sys`, `/dev` with
    /// `/dev/pts` and a tmpfs `/dev/shm`, tmpfs `/tmp`, `/run`, `/root` (HOME) and `/var/tmp`,
    /// `/etc/hosts` naming every guest, and the guest's own hostname. Nothing else of the
    /// host is visible (not its home directories, `/var` or `/tmp`), and nothing the guest
    /// does can change a host file. The script then runs chrooted there, with the host's
    /// `sh`; the initramfs's project binaries are not in that root (run them from `dirs`).
    ///
    /// `dirs` must be absolute paths of existing directories, without whitespace or commas,
    /// and not under `/proc`, `/sys` or `/dev`, which the guest replaces with its own (one
    /// below the guest's tmpfs `/tmp`, `/run` or `/root` is mounted inside it). At most 8.
    pub fn host_root<P: Into<PathBuf>>(mut self, dirs: impl IntoIterator<Item = P>) -> Self {
        self.host_root = Some(dirs.into_iter().map(Into::into).collect());
        self
    }

    /// Adds a guest.
    pub fn guest(mut self, guest: Guest) -> Self {
        self.guests.push(guest);
        self
    }

    /// Boots every guest, runs the scripts as their roles say, and returns when every VM
    /// has ended. Any task or service failing, any VM ending without a result, and the
    /// timeout are errors carrying every console's tail; all VMs are killed then.
    pub fn run(self) -> Result<Report, VmError> {
        self.check()?;
        let accel = match self.accel {
            Some(a) => a,
            None => accelerator(self.image)?.accel,
        };
        let _slots = Slots::acquire(self.guests.len())?;
        let mut run = Running::start(&self, accel)?;
        let result = run.wait(&self);
        if std::env::var_os("LLC_VM_CONSOLE").is_some() {
            for vm in &run.vms {
                eprintln!("--- console of {} ---\n{}", vm.name, vm.console.join("\n"));
            }
        }
        result.map(|elapsed| run.report(accel, elapsed))
    }

    fn check(&self) -> Result<(), VmError> {
        let n = self.guests.len();
        let bad = |m: String| Err(VmError::InvalidArgument(m));
        if n == 0 {
            return bad("a cluster needs at least one guest".into());
        }
        if n > 250 {
            return bad(format!("{n} guests: at most 250"));
        }
        match self.link {
            Link::Stream | Link::Dgram if n != 2 => {
                return bad(format!("{:?} joins exactly 2 VMs, not {n}", self.link))
            }
            Link::Bridge { queues } if !(1..=8).contains(&queues) => {
                return bad(format!("{queues} queues: 1..=8 allowed"))
            }
            _ => {}
        }
        if !self.guests.iter().any(|g| g.role == Role::Task) {
            return bad("a cluster needs at least one task".into());
        }
        if self.cpus == 0 || self.memory_mib < 64 {
            return bad("at least 1 vCPU and 64 MiB per guest".into());
        }
        for (i, g) in self.guests.iter().enumerate() {
            let name = self.name(i);
            let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
            if name.is_empty() || name.len() > 32 || !name.chars().all(ok) {
                return bad(format!(
                    "guest name {name:?}: 1..=32 letters, digits, '-', '_'"
                ));
            }
            if let Role::Service { ready } = &g.role {
                if ready.is_empty() {
                    return bad(format!("service {name} has an empty ready marker"));
                }
            }
        }
        if let Some(dirs) = &self.host_root {
            if dirs.len() > MAX_SHARED_DIRS {
                return bad(format!(
                    "{} shared directories: at most {MAX_SHARED_DIRS}",
                    dirs.len()
                ));
            }
            for d in dirs {
                check_shared_dir(d).map_err(VmError::InvalidArgument)?;
            }
        }
        Ok(())
    }

    /// The guests' `/etc/hosts`: every guest's name and address.
    fn hosts_file(&self) -> String {
        let mut s = String::from("127.0.0.1\tlocalhost\n");
        for i in 0..self.guests.len() {
            s.push_str(&format!("{}\t{}\n", self.ipv4(i), self.name(i)));
        }
        s
    }

    fn name(&self, i: usize) -> String {
        self.guests[i]
            .name
            .clone()
            .unwrap_or_else(|| format!("vm{i}"))
    }

    fn mac(&self, i: usize) -> [u8; 6] {
        self.guests[i]
            .mac
            .unwrap_or([0x02, 0x4c, 0x4c, 0x00, 0x00, i as u8 + 1])
    }

    fn ipv4(&self, i: usize) -> String {
        format!("{}.{}.{}.{}", SUBNET[0], SUBNET[1], SUBNET[2], i + 1)
    }

    /// The variables prepended to guest `i`'s script.
    fn prelude(&self, i: usize) -> String {
        let n = self.guests.len();
        let mut s = format!(
            "VM_INDEX={i}\nVM_NAME={}\nVM_COUNT={n}\nIFACE=eth0\n",
            self.name(i)
        );
        for j in 0..n {
            s.push_str(&format!(
                "MAC_{j}={}\nIP_{j}={}\n",
                format_mac(&self.mac(j)),
                self.ipv4(j)
            ));
        }
        let peer = (i + 1) % n;
        s.push_str(&format!(
            "PEER_MAC={}\nPEER_IP={}\n",
            format_mac(&self.mac(peer)),
            self.ipv4(peer)
        ));
        s
    }
}

/// Caps the VMs one process runs at once (`LLC_VM_MAX`, default 2: TCG guests are CPU-heavy).
pub fn max_vms() -> usize {
    std::env::var("LLC_VM_MAX")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(2)
}

/// VM slots held by a running cluster; clusters wait for each other.
struct Slots(usize);

static SLOTS_USED: Mutex<usize> = Mutex::new(0);
static SLOTS_FREED: Condvar = Condvar::new();

impl Slots {
    fn acquire(n: usize) -> Result<Slots, VmError> {
        let max = max_vms();
        if n > max {
            return Err(VmError::InvalidArgument(format!(
                "{n} VMs at once, but LLC_VM_MAX allows {max}"
            )));
        }
        let mut used = SLOTS_USED.lock().unwrap_or_else(|p| p.into_inner());
        while *used + n > max {
            used = SLOTS_FREED.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += n;
        Ok(Slots(n))
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        let mut used = SLOTS_USED.lock().unwrap_or_else(|p| p.into_inner());
        *used -= self.0;
        SLOTS_FREED.notify_all();
    }
}

/// A temporary directory removed on drop.
struct RunDir(PathBuf);

impl RunDir {
    fn new() -> Result<RunDir, VmError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        static CLEANUP: std::sync::Once = std::sync::Once::new();
        CLEANUP.call_once(RunDir::remove_stale);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // Short: unix socket paths must fit in 108 bytes.
        let dir = std::env::temp_dir().join(format!("llc-vm-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .map_err(|e| VmError::setup(format!("creating {}", dir.display()), e))?;
        Ok(RunDir(dir))
    }
}

impl RunDir {
    /// Removes run directories of processes that died without unwinding (`llc-vm-{pid}-{n}`
    /// whose pid is gone).
    fn remove_stale() {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("llc-vm-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok());
            if let Some(pid) = pid {
                if !Path::new("/proc").join(pid.to_string()).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the console threads report.
enum Event {
    Line(usize, String),
    Closed(usize),
}

/// One QEMU process and what is known about its guest.
struct Vm {
    name: String,
    role: Role,
    child: Child,
    stdin: Option<ChildStdin>,
    console: Vec<String>,
    up: bool,
    ready: bool,
    marker_rc: Option<i32>,
    /// Set once QEMU has exited.
    exit: Option<ExitStatus>,
    stop_sent: bool,
    go_sent: bool,
}

impl Vm {
    fn done(&self) -> bool {
        self.exit.is_some()
    }

    fn send(&mut self, line: &str) {
        if let Some(stdin) = &mut self.stdin {
            let _ = stdin.write_all(line.as_bytes()).and_then(|_| stdin.flush());
        }
    }

    /// The script's status, from the console marker checked against QEMU's exit status.
    fn result(&self) -> Result<i32, String> {
        let status = self.exit.ok_or("still running")?;
        let from_exit = match status.code() {
            Some(c) if c & 1 == 1 => Some(c >> 1),
            _ => None,
        };
        // An exit status has 8 bits: rc*2+1 keeps only rc's low 7 bits (143 arrives as 15).
        match (self.marker_rc, from_exit) {
            (Some(m), Some(e)) if m & 0x7f == e => Ok(m),
            (Some(m), Some(e)) => Err(format!(
                "the console says status {m} but QEMU exited with {} (status {e})",
                status.code().unwrap_or(-1)
            )),
            (Some(m), None) => Err(format!(
                "the console says status {m} but QEMU {}",
                describe_exit(status)
            )),
            (None, _) => Err(format!(
                "no {RESULT_MARKER} line on the console; QEMU {}",
                describe_exit(status)
            )),
        }
    }
}

fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(0), _) => "exited with status 0: the guest powered off or rebooted (a kernel \
                         panic reboots) without writing its result to isa-debug-exit"
            .into(),
        (Some(1), _) => "exited with status 1: QEMU itself failed (see its messages)".into(),
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        (None, None) => "ended".into(),
    }
}

fn hint(rc: i32) -> String {
    let h = match rc {
        INIT_FAILED => "the guest's /init failed (see its console)",
        127 => "a command was not found in the guest (is the binary in the image?)",
        126 => "a command could not be executed in the guest",
        124 => "a command in the guest timed out",
        RC_TERM => "the script was terminated",
        _ => return String::new(),
    };
    format!(" ({h})")
}

/// VMs being run, with the link resources they use; Drop kills them and removes the rest.
struct Running {
    vms: Vec<Vm>,
    events: Receiver<Event>,
    started: Instant,
    // Dropped after the VMs (field order): the sockets' directory, the taps' namespace.
    dir: RunDir,
    bridge: Option<Netns>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for vm in &mut self.vms {
            if vm.exit.is_none() {
                let _ = vm.child.kill();
                let _ = vm.child.wait();
            }
        }
    }
}

impl Running {
    fn start(c: &Cluster<'_>, accel: Accel) -> Result<Running, VmError> {
        let qemu = qemu_binary()?;
        let dir = RunDir::new()?;
        let n = c.guests.len();
        let bridge = match c.link {
            Link::Bridge { queues } => Some(make_bridge(n, queues, c.mtu)?),
            _ => None,
        };
        let (tx, events) = mpsc::channel();
        let mut run = Running {
            vms: Vec::with_capacity(n),
            events,
            started: Instant::now(),
            dir,
            bridge,
        };
        let mcast_port =
            20000 + (std::process::id() % 20000) as u16 + (run_counter() % 1000) as u16;
        let dir = run.dir.0.clone();
        let write = |name: &str, text: &str| -> Result<PathBuf, VmError> {
            let path = dir.join(name);
            std::fs::write(&path, text)
                .map_err(|e| VmError::setup(format!("writing {}", path.display()), e))?;
            Ok(path)
        };
        let hosts = write("hosts", &c.hosts_file())?;
        let host_root = match &c.host_root {
            Some(dirs) => {
                let plan = HostRoot::plan(dirs)?;
                let file = write("hostroot", &plan.file())?;
                Some((plan, file))
            }
            None => None,
        };
        for i in 0..n {
            let script = write(
                &format!("{}.sh", c.name(i)),
                &format!("{}{}", c.prelude(i), c.guests[i].script),
            )?;
            let files = GuestFiles {
                script: &script,
                hosts: &hosts,
                host_root: host_root
                    .as_ref()
                    .map(|(plan, file)| (plan, file.as_path())),
            };
            let netdev = netdev_arg(c.link, i, &run.dir.0, mcast_port);
            let mut cmd = qemu_command(&qemu, c, i, accel, &files, &netdev);
            testbed::process::die_with_parent(&mut cmd, run.bridge.as_ref())
                .map_err(|e| VmError::setup("entering the taps' namespace", e))?;
            let mut child = cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| VmError::setup(format!("starting {}", qemu.display()), e))?;
            spawn_reader(i, child.stdout.take(), "", tx.clone(), true);
            spawn_reader(i, child.stderr.take(), "qemu: ", tx.clone(), false);
            run.vms.push(Vm {
                name: c.name(i),
                role: c.guests[i].role.clone(),
                stdin: child.stdin.take(),
                child,
                console: Vec::new(),
                up: false,
                ready: false,
                marker_rc: None,
                exit: None,
                stop_sent: false,
                go_sent: false,
            });
            // The stream client needs the server's socket.
            if c.link == Link::Stream && i == 0 {
                run.wait_for_socket(&run.dir.0.join("link.sock"), c.timeout)?;
            }
        }
        Ok(run)
    }

    fn wait_for_socket(&mut self, path: &Path, timeout: Duration) -> Result<(), VmError> {
        let deadline = Instant::now() + timeout.min(Duration::from_secs(30));
        while !path.exists() {
            if Instant::now() >= deadline || self.vms[0].child.try_wait().ok().flatten().is_some() {
                // Collect what QEMU said before giving up.
                while let Ok(ev) = self.events.recv_timeout(Duration::from_millis(200)) {
                    self.handle(ev);
                }
                return Err(VmError::setup(
                    format!("{} did not create {}", self.vms[0].name, path.display()),
                    self.consoles(),
                ));
            }
            thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Applies one console event to the VMs' state.
    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Line(i, line) => {
                let vm = &mut self.vms[i];
                let t = line.trim();
                if t.starts_with(UP_MARKER) {
                    vm.up = true;
                } else if let Some(rc) = t.strip_prefix(RESULT_MARKER) {
                    vm.marker_rc = rc.trim().parse().ok();
                } else if let Role::Service { ready } = &vm.role {
                    if vm.up && line.contains(ready.as_str()) {
                        vm.ready = true;
                    }
                }
                vm.console.push(line);
            }
            Event::Closed(i) => {
                // stdout closed: QEMU is exiting; reap it (bounded: kill if it lingers).
                let vm = &mut self.vms[i];
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    match vm.child.try_wait() {
                        Ok(Some(status)) => {
                            vm.exit = Some(status);
                            break;
                        }
                        Ok(None) if Instant::now() < deadline => {
                            thread::sleep(Duration::from_millis(10))
                        }
                        _ => {
                            let _ = vm.child.kill();
                            vm.exit = vm.child.wait().ok();
                            break;
                        }
                    }
                }
                vm.stdin = None;
            }
        }
    }

    /// Drives the run to its end; returns the elapsed time.
    fn wait(&mut self, c: &Cluster<'_>) -> Result<Duration, VmError> {
        let deadline = self.started + c.timeout;
        let mut stop_deadline = None;
        loop {
            // Everything that has happened so far, then decisions.
            let now = Instant::now();
            let limit = stop_deadline.map_or(deadline, |s: Instant| s.min(deadline));
            match self.events.recv_timeout(
                limit
                    .saturating_duration_since(now)
                    .min(Duration::from_millis(500)),
            ) {
                Ok(ev) => {
                    self.handle(ev);
                    while let Ok(ev) = self.events.try_recv() {
                        self.handle(ev);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {}
            }
            self.check_failures()?;
            if self.vms.iter().all(Vm::done) {
                return Ok(self.started.elapsed());
            }
            let tasks_done = self
                .vms
                .iter()
                .filter(|v| v.role == Role::Task)
                .all(Vm::done);
            if tasks_done && stop_deadline.is_none() {
                for vm in self.vms.iter_mut().filter(|v| !v.done()) {
                    vm.send("stop\n");
                    vm.stop_sent = true;
                }
                stop_deadline = Some(Instant::now() + STOP_GRACE);
            }
            let services_ready = self
                .vms
                .iter()
                .all(|v| v.done() || (v.up && (v.role == Role::Task || v.ready)));
            if services_ready {
                for vm in self.vms.iter_mut() {
                    if vm.role == Role::Task && !vm.go_sent {
                        vm.send("go\n");
                        vm.go_sent = true;
                    }
                }
            }
            let now = Instant::now();
            if now >= deadline || stop_deadline.is_some_and(|s| now >= s) {
                let stage = if stop_deadline.is_some() {
                    "stopping the services".to_owned()
                } else if !self.vms.iter().all(|v| v.up || v.done()) {
                    "booting".to_owned()
                } else if !services_ready {
                    let waiting: Vec<String> = self
                        .vms
                        .iter()
                        .filter_map(|v| match &v.role {
                            Role::Service { ready } if !v.ready && !v.done() => {
                                Some(format!("{} to print {ready:?}", v.name))
                            }
                            _ => None,
                        })
                        .collect();
                    format!("waiting for {}", waiting.join(", "))
                } else {
                    "running the tasks".to_owned()
                };
                let vms: Vec<&str> = self
                    .vms
                    .iter()
                    .filter(|v| !v.done())
                    .map(|v| v.name.as_str())
                    .collect();
                let vms = vms.join(", ");
                self.kill_all();
                return Err(VmError::Timeout {
                    vms,
                    timeout: if stop_deadline.is_some() {
                        STOP_GRACE
                    } else {
                        c.timeout
                    },
                    stage,
                    consoles: self.consoles(),
                });
            }
        }
    }

    /// A finished VM whose result is a failure ends the run.
    fn check_failures(&mut self) -> Result<(), VmError> {
        for i in 0..self.vms.len() {
            let vm = &self.vms[i];
            if !vm.done() {
                continue;
            }
            let ok_statuses: &[i32] = if vm.stop_sent { &[0, RC_TERM] } else { &[0] };
            let failure = match vm.result() {
                Ok(rc) if ok_statuses.contains(&rc) => None,
                Ok(rc) => Some(Err(rc)),
                Err(why) => Some(Ok(why)),
            };
            if let Some(f) = failure {
                let name = vm.name.clone();
                // Stop everything; kill_all collects the consoles' last lines.
                self.kill_all();
                let consoles = self.consoles();
                return Err(match f {
                    Err(rc) => VmError::GuestFailed {
                        vm: name,
                        rc,
                        hint: hint(rc),
                        consoles,
                    },
                    Ok(why) => VmError::NoResult {
                        vm: name,
                        why,
                        consoles,
                    },
                });
            }
        }
        Ok(())
    }

    fn kill_all(&mut self) {
        for vm in &mut self.vms {
            if vm.exit.is_none() {
                let _ = vm.child.kill();
            }
        }
        // Drain the console threads until every pipe closed (bounded).
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.vms.iter().any(|v| !v.done()) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(ev) => self.handle(ev),
                Err(_) => break,
            }
        }
        for vm in &mut self.vms {
            if vm.exit.is_none() {
                vm.exit = vm.child.wait().ok();
            }
        }
    }

    /// The last console lines of every VM, for error messages.
    fn consoles(&self) -> String {
        let mut s = String::new();
        for vm in &self.vms {
            let text = vm.console.join("\n");
            s.push_str(&format!(
                "--- console of {} (last {TAIL_LINES} lines) ---\n{}\n",
                vm.name,
                tail(&text, TAIL_LINES)
            ));
        }
        s.push_str("--- end of consoles ---");
        s
    }

    fn report(&mut self, accel: Accel, elapsed: Duration) -> Report {
        let outcomes = self
            .vms
            .iter()
            .map(|vm| Outcome {
                name: vm.name.clone(),
                role: vm.role.clone(),
                rc: vm.result().unwrap_or(-1),
                stopped: vm.stop_sent,
                console: vm.console.join("\n"),
            })
            .collect();
        Report {
            accel,
            outcomes,
            elapsed,
        }
    }
}

fn run_counter() -> u32 {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// Reads a QEMU pipe line by line into events (`closes`: report the end as `Closed`).
fn spawn_reader<R: Read + Send + 'static>(
    i: usize,
    pipe: Option<R>,
    prefix: &'static str,
    tx: Sender<Event>,
    closes: bool,
) {
    let Some(pipe) = pipe else {
        if closes {
            let _ = tx.send(Event::Closed(i));
        }
        return;
    };
    let spawned = thread::Builder::new()
        .name(format!("vm{i}-console"))
        .spawn(move || {
            let mut r = BufReader::new(pipe);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']);
                        let _ = tx.send(Event::Line(i, format!("{prefix}{line}")));
                    }
                }
            }
            if closes {
                let _ = tx.send(Event::Closed(i));
            }
        });
    if spawned.is_err() && closes {
        // Without a reader the run ends by timeout; nothing better to do here.
        eprintln!("vm-tests: cannot spawn a console reader thread for vm{i}");
    }
}

/// The `-netdev` argument of VM `i`.
fn netdev_arg(link: Link, i: usize, dir: &Path, mcast_port: u16) -> String {
    let p = |name: &str| dir.join(name).display().to_string();
    match link {
        Link::Stream => {
            let sock = p("link.sock");
            if i == 0 {
                format!("stream,id=n0,server=on,addr.type=unix,addr.path={sock}")
            } else {
                format!("stream,id=n0,server=off,addr.type=unix,addr.path={sock},reconnect-ms=100")
            }
        }
        Link::Dgram => {
            let (me, peer) = (p(&format!("d{i}.sock")), p(&format!("d{}.sock", 1 - i)));
            format!(
                "dgram,id=n0,local.type=unix,local.path={me},remote.type=unix,remote.path={peer}"
            )
        }
        Link::Multicast => {
            format!("socket,id=n0,mcast=239.255.76.76:{mcast_port},localaddr=127.0.0.1")
        }
        Link::Bridge { queues } => {
            let q = if queues > 1 {
                format!(",queues={queues}")
            } else {
                String::new()
            };
            format!("tap,id=n0,ifname=tap{i},script=no,downscript=no,vhost=off{q}")
        }
        // A listening stream socket nobody connects to: a NIC with no peer (a hub port
        // would do the same but makes QEMU warn).
        Link::Isolated => format!(
            "stream,id=n0,server=on,addr.type=unix,addr.path={}",
            p(&format!("alone{i}.sock"))
        ),
    }
}

/// Why `dir` cannot be shared into a host root, if it cannot.
fn check_shared_dir(dir: &Path) -> Result<(), String> {
    let s = dir
        .to_str()
        .ok_or_else(|| format!("shared directory {}: not UTF-8", dir.display()))?;
    if !dir.is_absolute() || dir.parent().is_none() {
        return Err(format!(
            "shared directory {s:?}: an absolute path below / expected"
        ));
    }
    if s.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(format!(
            "shared directory {s:?}: whitespace, control characters and commas are not allowed"
        ));
    }
    if let Some(p) = GUEST_PRIVATE.iter().find(|p| dir.starts_with(p)) {
        return Err(format!(
            "shared directory {s} is under {p}, which every guest replaces with its own"
        ));
    }
    if !dir.is_dir() {
        return Err(format!("shared directory {s} is not a directory"));
    }
    Ok(())
}

/// The host directories a [`Cluster::host_root`] shares and the symlinks it recreates.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostRoot {
    /// 9p mount tag and host path (the guest mounts it at the same path).
    shares: Vec<(String, PathBuf)>,
    /// Top-level symlinks: name and target (`bin` -> `usr/bin`).
    links: Vec<(String, String)>,
}

impl HostRoot {
    /// `/usr`, `/etc`, the top-level `/bin`, `/sbin`, `/lib*` as the host has them, `dirs`.
    fn plan(dirs: &[PathBuf]) -> Result<HostRoot, VmError> {
        let mut root = HostRoot {
            shares: vec![
                ("llc-usr".into(), "/usr".into()),
                ("llc-etc".into(), "/etc".into()),
            ],
            links: Vec::new(),
        };
        for name in ROOT_TOP_LEVEL {
            let path = Path::new("/").join(name);
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path)
                    .map_err(|e| VmError::setup(format!("reading {}", path.display()), e))?;
                let target = target.to_string_lossy().into_owned();
                if target.is_empty() || target.contains(char::is_whitespace) {
                    return Err(VmError::setup(
                        "building the guests' host root",
                        format!("{} points to {target:?}", path.display()),
                    ));
                }
                root.links.push((name.into(), target));
            } else if meta.is_dir() {
                root.shares.push((format!("llc-{name}"), path));
            }
        }
        for (i, d) in dirs.iter().enumerate() {
            check_shared_dir(d).map_err(VmError::InvalidArgument)?;
            root.shares.push((format!("llc-d{i}"), d.clone()));
        }
        Ok(root)
    }

    /// The `/init`'s instructions (fw_cfg `opt/llc/hostroot`): `share TAG PATH` and
    /// `link NAME TARGET` lines, mounted and created in this order.
    fn file(&self) -> String {
        let mut s = String::new();
        for (tag, path) in &self.shares {
            s.push_str(&format!("share {tag} {}\n", path.display()));
        }
        for (name, target) in &self.links {
            s.push_str(&format!("link {name} {target}\n"));
        }
        s
    }

    /// QEMU's `-virtfs` arguments: every share read-only, files as the host has them.
    fn virtfs_args(&self) -> Vec<String> {
        self.shares
            .iter()
            .map(|(tag, path)| {
                format!(
                    "local,path={},mount_tag={tag},security_model=none,readonly=on,\
                     multidevs=remap",
                    path.display()
                )
            })
            .collect()
    }
}

/// The files a guest's QEMU hands in through fw_cfg.
struct GuestFiles<'a> {
    /// `opt/llc/script`: the prelude and the guest's script.
    script: &'a Path,
    /// `opt/llc/hosts`: the guests' `/etc/hosts`.
    hosts: &'a Path,
    /// The host root's plan and `opt/llc/hostroot` (see [`Cluster::host_root`]).
    host_root: Option<(&'a HostRoot, &'a Path)>,
}

/// The QEMU command line of guest `i`.
fn qemu_command(
    qemu: &Path,
    c: &Cluster<'_>,
    i: usize,
    accel: Accel,
    files: &GuestFiles<'_>,
    netdev: &str,
) -> Command {
    let g = &c.guests[i];
    let role = match g.role {
        Role::Task => "task",
        Role::Service { .. } => "service",
    };
    let mut append = format!(
        "console=ttyS0 quiet panic=-1 llc.name={} llc.role={role} llc.ip={}/24",
        c.name(i),
        c.ipv4(i)
    );
    if let Some(mtu) = c.mtu {
        append.push_str(&format!(" llc.mtu={mtu}"));
    }
    let mut nic = format!(
        "virtio-net-pci,netdev=n0,mac={},romfile=",
        format_mac(&c.mac(i))
    );
    if let Link::Bridge { queues } = c.link {
        if queues > 1 {
            nic.push_str(&format!(",mq=on,vectors={}", 2 * queues + 2));
        }
    }
    let mut cmd = Command::new(qemu);
    cmd.args(["-name", &c.name(i)])
        .args(["-accel", accel.qemu_name()])
        .args(["-m", &c.memory_mib.to_string()])
        .args(["-smp", &c.cpus.to_string()])
        .args(["-nodefaults", "-no-user-config", "-no-reboot"])
        .args(["-display", "none", "-serial", "stdio"])
        .arg("-kernel")
        .arg(&c.image.kernel.image)
        .arg("-initrd")
        .arg(&c.image.initrd)
        .args(["-append", &append])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .arg("-fw_cfg")
        .arg(format!(
            "name=opt/llc/script,file={}",
            files.script.display()
        ))
        .arg("-fw_cfg")
        .arg(format!("name=opt/llc/hosts,file={}", files.hosts.display()))
        .args(["-netdev", netdev])
        .args(["-device", &nic]);
    if let Some((plan, file)) = files.host_root {
        cmd.arg("-fw_cfg")
            .arg(format!("name=opt/llc/hostroot,file={}", file.display()));
        for v in plan.virtfs_args() {
            cmd.args(["-virtfs", &v]);
        }
    }
    cmd
}

/// A namespace holding bridge `br0` with taps `tap0..tap{n-1}` (multi-queue when asked):
/// a segment of testbed's builder, the taps made in its hub.
fn make_bridge(n: usize, queues: u16, mtu: Option<u32>) -> Result<Netns, VmError> {
    let segment = Segment::new("vmbr", mtu).map_err(|e| match e {
        HarnessError::Unprivileged(why) => {
            VmError::Unavailable(format!("a tap bridge needs root: {why}"))
        }
        e => VmError::setup("creating the bridge namespace", e),
    })?;
    let setup = |e| VmError::setup("setting up the tap bridge", e);
    for i in 0..n {
        let tap = format!("tap{i}");
        let mut args = vec!["tuntap", "add", "dev", &tap, "mode", "tap"];
        if queues > 1 {
            args.push("multi_queue");
        }
        segment.hub().ip(&args).map_err(setup)?;
        segment.enslave(&tap).map_err(setup)?;
    }
    segment.finish().map_err(setup)
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Link::Stream => f.write_str("unix stream socket"),
            Link::Dgram => f.write_str("unix datagram sockets"),
            Link::Multicast => f.write_str("UDP multicast on 127.0.0.1"),
            Link::Bridge { queues } => write!(f, "tap bridge in a namespace ({queues} queues)"),
            Link::Isolated => f.write_str("no link"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::Kernel;

    fn image() -> GuestImage {
        static KERNEL: std::sync::OnceLock<Kernel> = std::sync::OnceLock::new();
        let kernel = KERNEL.get_or_init(|| Kernel {
            dir: "/k".into(),
            image: "/k/vmlinux".into(),
            version: "test".into(),
            modules: Vec::new(),
            hostfs_modules: Vec::new(),
        });
        GuestImage {
            kernel,
            initrd: "/k/initrd.cpio".into(),
            binaries: Vec::new(),
        }
    }

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn three_guests_share_one_multicast_group() {
        let image = image();
        let c = Cluster::new(&image)
            .link(Link::Multicast)
            .guest(Guest::task("true"))
            .guest(Guest::service("x", "ready"))
            .guest(Guest::service("x", "ready").mac([2, 0, 0, 0, 0, 9]));
        c.check().unwrap();
        let dir = Path::new("/run/x");
        let netdevs: Vec<String> = (0..3).map(|i| netdev_arg(c.link, i, dir, 4242)).collect();
        assert!(netdevs.iter().all(|n| n == &netdevs[0]), "{netdevs:?}");
        assert!(netdevs[0].contains("mcast=239.255.76.76:4242"));
        let files = GuestFiles {
            script: Path::new("/s"),
            hosts: Path::new("/h"),
            host_root: None,
        };
        let cmd = qemu_command(Path::new("qemu"), &c, 2, Accel::Tcg, &files, &netdevs[2]);
        let a = args(&cmd).join(" ");
        assert!(a.contains("-fw_cfg name=opt/llc/hosts,file=/h"), "{a}");
        assert!(!a.contains("-virtfs"), "{a}");
        assert_eq!(
            c.hosts_file(),
            "127.0.0.1\tlocalhost\n10.77.0.1\tvm0\n10.77.0.2\tvm1\n10.77.0.3\tvm2\n"
        );
        assert!(a.contains("mac=02:00:00:00:00:09,romfile="), "{a}");
        assert!(
            a.contains("llc.name=vm2 llc.role=service llc.ip=10.77.0.3/24"),
            "{a}"
        );
        assert!(a.contains("isa-debug-exit,iobase=0xf4,iosize=0x04"), "{a}");
        assert!(a.contains("-accel tcg"), "{a}");
        let prelude = c.prelude(2);
        assert!(prelude.contains("MAC_2=02:00:00:00:00:09\n"), "{prelude}");
        assert!(
            prelude.contains("PEER_MAC=02:4c:4c:00:00:01\nPEER_IP=10.77.0.1\n"),
            "{prelude}"
        );
    }

    #[test]
    fn host_root_shares_system_dirs_read_only() {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
        let plan = HostRoot::plan(std::slice::from_ref(&target)).unwrap();
        let file = plan.file();
        assert!(
            file.starts_with("share llc-usr /usr\nshare llc-etc /etc\n"),
            "{file}"
        );
        assert!(
            file.contains(&format!("share llc-d0 {}\n", target.display())),
            "{file}"
        );
        // /bin is either a symlink (merged /usr) or shared itself.
        assert!(
            file.contains("link bin ") || file.contains("share llc-bin /bin\n"),
            "{file}"
        );
        let virtfs = plan.virtfs_args();
        assert_eq!(virtfs.len(), plan.shares.len());
        assert!(
            virtfs.iter().all(|v| v.contains(",readonly=on,")),
            "{virtfs:?}"
        );
        assert!(virtfs[0].starts_with("local,path=/usr,mount_tag=llc-usr,"));

        let image = image();
        let c = Cluster::new(&image)
            .link(Link::Isolated)
            .host_root([target])
            .guest(Guest::task("true"));
        c.check().unwrap();
        let files = GuestFiles {
            script: Path::new("/s"),
            hosts: Path::new("/h"),
            host_root: Some((&plan, Path::new("/r"))),
        };
        let a = args(&qemu_command(
            Path::new("qemu"),
            &c,
            0,
            Accel::Tcg,
            &files,
            "x",
        ))
        .join(" ");
        assert!(a.contains("-fw_cfg name=opt/llc/hostroot,file=/r"), "{a}");
        assert!(
            a.contains("-virtfs local,path=/etc,mount_tag=llc-etc,"),
            "{a}"
        );

        for bad in [
            "relative",
            "/",
            "/dev/shm",
            "/sys/kernel",
            "/proc",
            "/a b",
            "/x,y",
            "/nonexistent-llc",
        ] {
            let c = Cluster::new(&image)
                .link(Link::Isolated)
                .host_root([bad])
                .guest(Guest::task("true"));
            assert!(c.check().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn point_to_point_links_pair_their_ends() {
        let dir = Path::new("/run/x");
        let (s0, s1) = (
            netdev_arg(Link::Stream, 0, dir, 0),
            netdev_arg(Link::Stream, 1, dir, 0),
        );
        assert!(
            s0.contains("server=on") && s1.contains("server=off"),
            "{s0} {s1}"
        );
        let (d0, d1) = (
            netdev_arg(Link::Dgram, 0, dir, 0),
            netdev_arg(Link::Dgram, 1, dir, 0),
        );
        assert!(
            d0.contains("local.path=/run/x/d0.sock,remote.type=unix,remote.path=/run/x/d1.sock")
        );
        assert!(
            d1.contains("local.path=/run/x/d1.sock,remote.type=unix,remote.path=/run/x/d0.sock")
        );
        let tap = netdev_arg(Link::Bridge { queues: 4 }, 1, dir, 0);
        assert!(
            tap.contains("ifname=tap1") && tap.contains("queues=4"),
            "{tap}"
        );
    }

    #[test]
    fn bad_clusters_are_refused() {
        let image = image();
        let three = Cluster::new(&image)
            .guest(Guest::task("true"))
            .guest(Guest::task("true"))
            .guest(Guest::task("true"));
        assert!(three.check().is_err(), "a stream link joins two VMs only");
        let services_only = Cluster::new(&image)
            .link(Link::Isolated)
            .guest(Guest::service("x", "ready"));
        assert!(services_only.check().is_err());
        let bad_name = Cluster::new(&image)
            .link(Link::Isolated)
            .guest(Guest::task("true").name("a b"));
        assert!(bad_name.check().is_err());
    }

    #[test]
    fn results_need_both_channels() {
        let vm = |marker: Option<i32>, code: i32| {
            let child = Command::new("true").spawn().unwrap();
            let mut vm = Vm {
                name: "t".into(),
                role: Role::Task,
                child,
                stdin: None,
                console: Vec::new(),
                up: true,
                ready: false,
                marker_rc: marker,
                exit: Some(ExitStatus::from_raw(code << 8)),
                stop_sent: false,
                go_sent: true,
            };
            let _ = vm.child.wait();
            vm
        };
        assert_eq!(vm(Some(0), 1).result(), Ok(0));
        assert_eq!(vm(Some(3), 7).result(), Ok(3));
        // QEMU's own failure (status 1) without the guest's marker is no result.
        assert!(vm(None, 1)
            .result()
            .unwrap_err()
            .contains("QEMU itself failed"));
        assert!(vm(Some(0), 0).result().is_err());
        assert!(vm(Some(2), 3).result().is_err());
        // 143 (SIGTERM through a shell) arrives as (143 * 2 + 1) & 0xff = 31.
        assert_eq!(vm(Some(143), 31).result(), Ok(143));
        assert!(vm(Some(143), 1).result().is_err());
    }
}
