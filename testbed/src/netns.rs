//! Test hosts on one machine: network namespaces joined by veth pairs or a Linux bridge.
//!
//! This is the one builder of test hosts of the workspace: the beds ([`TwoHosts`],
//! [`Bridged`], [`MultiPort`]), the simulated cluster ([`crate::cluster`]) and the QEMU VMs'
//! tap bridge (`vm-tests`) are all made of [`Netns`], [`add_veth`] and [`Segment`] (a
//! bridge in a hub namespace), addressed by an [`AddressPlan`] per run, with [`check_mtu`]
//! and [`run_checked`] for bounded commands.
//!
//! Every namespace is named `llct-{prefix}-{pid}-{counter}` so that parallel tests and
//! parallel test processes never collide, and is deleted when its [`Netns`] is dropped
//! (also while unwinding from a panic). Namespaces left behind by a crashed run are removed
//! by [`cleanup_stale`], which [`Netns::new`] calls once per process.
//!
//! Links are created directly inside their namespaces, so nothing ever appears in the root
//! namespace and short interface names (`llc0`, `br0`, `p0`...) are safe.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::sys;

/// Prefix of every namespace this harness creates; [`cleanup_stale`] only touches these.
pub const NS_PREFIX: &str = "llct-";

/// Where `ip netns add` puts the namespace handles.
const NETNS_DIR: &str = "/var/run/netns";

/// Upper bound for any `ip` invocation; namespace creation can be slow while the kernel
/// is still tearing down namespaces of earlier tests.
pub const IP_TIMEOUT: Duration = Duration::from_secs(30);

/// Interface name of each host's port (inside its own namespace).
pub const HOST_IFNAME: &str = "llc0";

/// Name of the bridge in the hub namespace of [`Bridged`].
pub const BRIDGE_NAME: &str = "br0";

/// Errors of the harness; messages name the failed command and carry its stderr.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The harness cannot run here (not root, missing capabilities, no `ip`).
    #[error("cannot create network namespaces: {0}")]
    Unprivileged(String),
    /// A caller-supplied argument is out of range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A command could not be started.
    #[error("could not start `{cmd}`: {source}")]
    Spawn {
        /// The command line.
        cmd: String,
        /// Why it could not start.
        #[source]
        source: io::Error,
    },
    /// A command exited unsuccessfully.
    #[error("`{cmd}` failed ({status}): {stderr}")]
    CommandFailed {
        /// The command line.
        cmd: String,
        /// Its exit status.
        status: ExitStatus,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A command did not finish in time and was killed.
    #[error("`{cmd}` did not finish within {timeout:?} and was killed")]
    Timeout {
        /// The command line.
        cmd: String,
        /// The limit that was exceeded.
        timeout: Duration,
    },
    /// A service of the bed (a server it starts in a host) did not start, or a program it
    /// needs was not built.
    #[error("{0}")]
    Setup(String),
    /// A file or system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// Writes a warning without ever panicking (used from Drop, possibly during unwinding).
fn warn(msg: &str) {
    tracing::warn!("{msg}");
    let _ = writeln!(io::stderr(), "testbed: {msg}");
}

/// Path of the `ip` binary: PATH first, then the usual sbin directories (cargo test may run
/// with a PATH that lacks /usr/sbin).
pub fn ip_path() -> Option<&'static Path> {
    static IP: OnceLock<Option<PathBuf>> = OnceLock::new();
    IP.get_or_init(|| {
        let from_path = std::env::var_os("PATH")
            .into_iter()
            .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .map(|dir| dir.join("ip"));
        let fixed = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .into_iter()
            .map(PathBuf::from);
        from_path.chain(fixed).find(|p| p.is_file())
    })
    .as_deref()
}

/// A `Command` for `ip` (falls back to plain "ip" so that spawning reports the problem).
fn ip_command() -> Command {
    Command::new(ip_path().unwrap_or(Path::new("ip")))
}

/// The command line of `cmd` as text, for error messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

/// Reads a child's pipe to the end on a helper thread.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Option<JoinHandle<Vec<u8>>> {
    let mut pipe = pipe?;
    thread::Builder::new()
        .name("testbed-pipe".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
        .ok()
}

/// Runs `cmd` with stdin closed and output captured, killing it after `timeout`.
/// Returns its stdout; a non-zero exit becomes [`HarnessError::CommandFailed`] with stderr.
pub fn run_checked(cmd: &mut Command, timeout: Duration) -> Result<String, HarnessError> {
    let line = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| HarnessError::Spawn {
            cmd: line.clone(),
            source,
        })?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_micros(200);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(HarnessError::Timeout {
                    cmd: line.clone(),
                    timeout,
                });
            }
            Ok(None) => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(HarnessError::Io {
                    what: format!("waiting for `{line}`"),
                    source,
                });
            }
        }
    };
    // The child is gone, so its pipes are closed and the readers finish.
    let collect = |h: Option<JoinHandle<Vec<u8>>>| {
        let bytes = h.and_then(|h| h.join().ok()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let stdout = collect(out);
    let stderr = collect(err);
    let status = status?;
    if status.success() {
        Ok(stdout)
    } else {
        Err(HarnessError::CommandFailed {
            cmd: line,
            status,
            stderr: stderr.trim().to_owned(),
        })
    }
}

/// Runs `ip <args>` in the root namespace.
fn ip_root(args: &[&str]) -> Result<String, HarnessError> {
    run_checked(ip_command().args(args), IP_TIMEOUT)
}

/// Checks that the harness can run here: effective CAP_SYS_ADMIN and CAP_NET_ADMIN in the
/// initial user namespace, and an `ip` binary. `Err` carries a reason to print when skipping.
pub fn check_privileges() -> Result<(), String> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status: {e}"))?;
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .ok_or("no CapEff line in /proc/self/status")?;
    let has = |cap: u32| cap_eff & (1u64 << cap) != 0;
    if !has(CAP_SYS_ADMIN) || !has(CAP_NET_ADMIN) {
        return Err(format!(
            "not running as root (CAP_SYS_ADMIN and CAP_NET_ADMIN needed, CapEff={cap_eff:#x})"
        ));
    }
    // Capabilities inside a child user namespace (e.g. `unshare -Ur`) cannot mount on
    // /var/run/netns: only the full identity map of the initial namespace will do.
    if let Ok(map) = std::fs::read_to_string("/proc/self/uid_map") {
        let fields: Vec<&str> = map.split_whitespace().collect();
        if fields != ["0", "0", "4294967295"] {
            return Err(format!(
                "running inside a user namespace (uid_map {:?}): root of the initial user \
                 namespace needed",
                map.trim()
            ));
        }
    }
    if ip_path().is_none() {
        return Err("`ip` (iproute2) not found in PATH or /usr/sbin, /sbin".into());
    }
    Ok(())
}

/// Skips the current test (prints `SKIPPED <test path>: <reason>` to stderr and returns)
/// when [`check_privileges`] fails, so unprivileged `cargo test` runs stay green.
/// `require_root!(value)` returns `value` instead, for tests that return something.
#[macro_export]
macro_rules! require_root {
    () => {
        $crate::require_root!(())
    };
    ($ret:expr) => {
        if let ::std::result::Result::Err(reason) = $crate::check_privileges() {
            fn __testbed_here() {}
            let here = ::std::any::type_name_of_val(&__testbed_here);
            let here = here.strip_suffix("::__testbed_here").unwrap_or(here);
            ::std::eprintln!("SKIPPED {}: {}", here, reason);
            return $ret;
        }
    };
}

/// Is a process with this pid alive (as seen from our pid namespace)?
fn pid_alive(pid: u64) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// The pid embedded in a harness namespace name `llct-{prefix}-{pid}-{counter}`.
fn embedded_pid(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let counter = parts.next()?;
    let pid = parts.next()?;
    let prefix = parts.next()?;
    if prefix.is_empty() || counter.parse::<u64>().is_err() {
        return None;
    }
    pid.parse().ok()
}

/// Deletes namespaces left behind by crashed runs: names starting with `llct-` whose
/// embedded pid is not a live process. Failures are logged, never fatal.
/// (Assumes all test processes share one pid namespace, as they do on the test machine.)
pub fn cleanup_stale() {
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => return warn(&format!("cleanup_stale: cannot list {NETNS_DIR}: {e}")),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = embedded_pid(&name) else {
            continue;
        };
        if pid_alive(pid) {
            continue;
        }
        match ip_root(&["netns", "del", &name]) {
            Ok(_) => tracing::info!("deleted stale namespace {name}"),
            Err(e) => warn(&format!("cleanup_stale: {e}")),
        }
    }
}

/// A network namespace created with `ip netns add`, deleted on Drop (also during a panic
/// unwind), so tests never leave namespaces behind.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace named `llct-{prefix}-{pid}-{counter}` (unique per process and
    /// run), with loopback up. `prefix`: 1..=16 ASCII letters, digits, `_` or `-`.
    pub fn new(prefix: &str) -> Result<Netns, HarnessError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        static CLEANUP: Once = Once::new();
        // `ip netns add` sets up the shared /var/run/netns mount on first use; two
        // concurrent first uses can stack mounts, so creations are serialized per process.
        static CREATE: Mutex<()> = Mutex::new(());

        let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if prefix.is_empty() || prefix.len() > 16 || !prefix.chars().all(valid) {
            return Err(HarnessError::InvalidArgument(format!(
                "namespace prefix {prefix:?} must be 1..=16 ASCII letters, digits, '_' or '-'"
            )));
        }
        check_privileges().map_err(HarnessError::Unprivileged)?;
        CLEANUP.call_once(cleanup_stale);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NS_PREFIX}{prefix}-{}-{n}", std::process::id());
        {
            let _guard = CREATE.lock().unwrap_or_else(|e| e.into_inner());
            ip_root(&["netns", "add", &name])?;
        }
        // From here on Drop deletes it, also when the setup below fails.
        let ns = Netns { name };
        ns.ip(&["link", "set", "dev", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name, as `ip netns` knows it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path of the namespace handle that `setns` opens.
    fn path(&self) -> PathBuf {
        Path::new(NETNS_DIR).join(&self.name)
    }

    /// Opens the namespace handle (an owned fd, so a thread or a child process that holds
    /// it can outlive `self`), as `setns` takes it.
    pub fn handle(&self) -> Result<OwnedFd, HarnessError> {
        File::open(self.path())
            .map(OwnedFd::from)
            .map_err(|source| HarnessError::Io {
                what: format!("opening {}", self.path().display()),
                source,
            })
    }

    /// Runs `f` on a dedicated thread that first entered this namespace (only that thread
    /// switches), so sockets `f` creates belong to the namespace. Returns `f`'s result;
    /// a panic in `f` (or failing to enter the namespace) is resumed in the caller.
    pub fn run<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let fd = self.handle();
        let name = self.name.as_str();
        thread::scope(|s| {
            let handle = thread::Builder::new()
                .name(format!("in-{name}"))
                .spawn_scoped(s, move || {
                    enter(name, fd);
                    f()
                })
                .expect("spawning a namespace thread");
            match handle.join() {
                Ok(r) => r,
                Err(payload) => std::panic::resume_unwind(payload),
            }
        })
    }

    /// Like [`Netns::run`] but returns at once with the thread's handle; the thread holds its
    /// own fd of the namespace, so it may outlive `self`. `join` yields `Err` if `f` panicked.
    pub fn spawn<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let fd = self.handle();
        let name = self.name.clone();
        thread::Builder::new()
            .name(format!("in-{name}"))
            .spawn(move || {
                enter(&name, fd);
                f()
            })
            .expect("spawning a namespace thread")
    }

    /// A `Command` that runs `program` inside the namespace (`ip netns exec NAME program`);
    /// add arguments and run it as usual (or with [`run_checked`] for a bounded wait).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = ip_command();
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `ip -n NAME <args>` and returns its stdout; the error names the command line
    /// and carries its stderr.
    pub fn ip(&self, args: &[&str]) -> Result<String, HarnessError> {
        run_checked(ip_command().args(["-n", &self.name]).args(args), IP_TIMEOUT)
    }
}

/// Moves the calling thread into the namespace, panicking with a clear message on failure
/// (the panic reaches the caller of `run` or the joiner of `spawn`).
fn enter(name: &str, fd: Result<OwnedFd, HarnessError>) {
    let result = fd.and_then(|fd| {
        sys::setns_net(fd.as_fd()).map_err(|source| HarnessError::Io {
            what: format!("setns into {name}"),
            source,
        })
    });
    if let Err(e) = result {
        panic!("cannot enter network namespace {name}: {e}");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Threads still inside keep the namespace alive until they leave; the name goes now.
        if let Err(e) = ip_root(&["netns", "del", &self.name]) {
            warn(&format!("deleting namespace {}: {e}", self.name));
        }
    }
}

/// MTU of `ifname` in the calling thread's namespace (ioctl SIOCGIFMTU); call it inside
/// [`Netns::run`] to look into a namespace (/sys is not remounted after setns).
pub fn interface_mtu(ifname: &str) -> io::Result<u32> {
    sys::if_mtu(ifname)
}

/// MAC address of `ifname` in the calling thread's namespace (ioctl SIOCGIFHWADDR).
pub fn interface_mac(ifname: &str) -> io::Result<[u8; 6]> {
    sys::if_hwaddr(ifname)
}

/// Formats a MAC address as `ip` expects it (`02:00:00:00:00:01`).
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One end of a link inside a namespace; owns the namespace.
#[derive(Debug)]
pub struct Host {
    /// The host's namespace (deleted when the host is dropped).
    pub ns: Netns,
    /// The port's interface name inside `ns` (always [`HOST_IFNAME`], `llc0`).
    pub ifname: String,
    /// The port's MAC: locally administered unicast, assigned by the harness.
    pub mac: [u8; 6],
    /// The port's IPv4 address (in a /24).
    pub ipv4: Ipv4Addr,
    /// The port's MTU.
    pub mtu: u32,
}

/// Per-run addressing: a 10.x.y.0/24 subnet and a MAC stem, from the pid and a counter.
/// Namespaces are isolated, so collisions between processes would be harmless anyway.
#[derive(Debug, Clone, Copy)]
pub struct AddressPlan {
    x: u8,
    y: u8,
    pid: u32,
}

impl AddressPlan {
    /// The next plan of this process: a subnet (10.x.y.0/24, x from the pid, y from a
    /// per-process counter) that no earlier plan of the process used, and a MAC stem.
    pub fn next() -> AddressPlan {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let pid = std::process::id();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        AddressPlan {
            x: 1 + (pid % 254) as u8,
            y: n as u8,
            pid,
        }
    }

    /// Address `.host` (1..=254) of the subnet.
    pub fn ipv4(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, self.x, self.y, host)
    }

    /// MAC of host port `index` on the bed's link: `02:PP:PP:YY:00:index`.
    pub fn host_mac(&self, index: u8) -> [u8; 6] {
        self.mac(ROLE_HOST, index)
    }

    /// MAC of the hub (bridge) side of host `index`'s veth: `02:PP:PP:YY:01:index`.
    pub fn hub_mac(&self, index: u8) -> [u8; 6] {
        self.mac(ROLE_HUB, index)
    }

    /// MAC `02:PP:PP:YY:role:index`: locally administered, unicast; unique on one link.
    fn mac(&self, role: u8, index: u8) -> [u8; 6] {
        [
            0x02,
            (self.pid >> 8) as u8,
            self.pid as u8,
            self.y,
            role,
            index,
        ]
    }
}

/// Role byte in MACs of host ports and of hub (bridge) ports.
const ROLE_HOST: u8 = 0x00;
const ROLE_HUB: u8 = 0x01;

/// Checks that veth accepts `mtu` (68..=65535 without XDP).
pub fn check_mtu(mtu: u32) -> Result<(), HarnessError> {
    if (68..=65535).contains(&mtu) {
        Ok(())
    } else {
        Err(HarnessError::InvalidArgument(format!(
            "MTU {mtu} outside 68..=65535"
        )))
    }
}

/// Checks that a segment of `n` `what` (hosts, ports) fits one /24: 1..=254.
pub fn check_count(n: usize, what: &str) -> Result<(), HarnessError> {
    if (1..=254).contains(&n) {
        Ok(())
    } else {
        Err(HarnessError::InvalidArgument(format!(
            "{n} {what}: 1..=254 allowed"
        )))
    }
}

/// Creates a veth pair from inside `ns` (end `name`) to `peer_ns` (end `peer`), both with the
/// given MACs and MTU; nothing passes through the root namespace. Both ends stay down.
pub fn add_veth(
    ns: &Netns,
    name: &str,
    mac: &[u8; 6],
    peer_ns: &Netns,
    peer: &str,
    peer_mac: &[u8; 6],
    mtu: u32,
) -> Result<(), HarnessError> {
    let mtu = mtu.to_string();
    let (mac, peer_mac) = (format_mac(mac), format_mac(peer_mac));
    #[rustfmt::skip]
    let args = [
        "link", "add", name, "address", &mac, "mtu", &mtu, "type", "veth",
        "peer", "name", peer, "address", &peer_mac, "mtu", &mtu, "netns", peer_ns.name(),
    ];
    ns.ip(&args).map(drop)
}

/// A veth pair with both ends, `a` and `b`, in `ns` and up, each with `queues` (1..=64) RX
/// and TX queues: one host that sends to itself over a link (per-queue delivery, steering,
/// sharing an interface between processes).
pub fn add_veth_loop(ns: &Netns, a: &str, b: &str, queues: u32) -> Result<(), HarnessError> {
    if !(1..=64).contains(&queues) {
        return Err(HarnessError::InvalidArgument(format!(
            "{queues} queues: 1..=64 allowed"
        )));
    }
    let q = queues.to_string();
    #[rustfmt::skip]
    let args = [
        "link", "add", a, "numtxqueues", &q, "numrxqueues", &q, "type", "veth",
        "peer", "name", b, "numtxqueues", &q, "numrxqueues", &q,
    ];
    ns.ip(&args)?;
    ns.ip(&["link", "set", "dev", a, "up"])?;
    ns.ip(&["link", "set", "dev", b, "up"]).map(drop)
}

/// Gives port `ifname` of `ns` the address `ipv4`/24 and brings it up.
pub fn address_port(ns: &Netns, ifname: &str, ipv4: Ipv4Addr) -> Result<(), HarnessError> {
    ns.ip(&["addr", "add", &format!("{ipv4}/24"), "dev", ifname])?;
    ns.ip(&["link", "set", "dev", ifname, "up"]).map(drop)
}

/// Gives the host port its address and brings it up.
fn configure_host(ns: Netns, mac: [u8; 6], ipv4: Ipv4Addr, mtu: u32) -> Result<Host, HarnessError> {
    address_port(&ns, HOST_IFNAME, ipv4)?;
    Ok(Host {
        ns,
        ifname: HOST_IFNAME.to_owned(),
        mac,
        ipv4,
        mtu,
    })
}

/// Two namespaces joined by a veth pair: `a.ifname` and `b.ifname` are both `llc0`, up, with
/// `.1` and `.2` of a per-run 10.x.y.0/24 and the given MTU; loopback is up in both.
#[derive(Debug)]
pub struct TwoHosts {
    /// Host A (address `.1`).
    pub a: Host,
    /// Host B (address `.2`).
    pub b: Host,
}

impl TwoHosts {
    /// Builds the pair; on error everything created so far is deleted again.
    pub fn new(mtu: u32) -> Result<TwoHosts, HarnessError> {
        check_mtu(mtu)?;
        let plan = AddressPlan::next();
        let a = Netns::new("a")?;
        let b = Netns::new("b")?;
        let (mac_a, mac_b) = (plan.host_mac(1), plan.host_mac(2));
        add_veth(&a, HOST_IFNAME, &mac_a, &b, HOST_IFNAME, &mac_b, mtu)?;
        let a = configure_host(a, mac_a, plan.ipv4(1), mtu)?;
        let b = configure_host(b, mac_b, plan.ipv4(2), mtu)?;
        Ok(TwoHosts { a, b })
    }
}

/// N hosts ("ranks") on a Linux bridge: host `i` has port `llc0` (address `.i+1` of a per-run
/// /24) whose veth peer `p{i}` is enslaved to bridge `br0` in a separate hub namespace.
/// All links are up with the given MTU (bridge and both veth ends); STP is off.
#[derive(Debug)]
pub struct Bridged {
    /// The namespace holding the bridge and the hub-side veth ends `p0..pN`.
    pub hub: Netns,
    /// The bridge's name in `hub` ([`BRIDGE_NAME`], `br0`).
    pub bridge: String,
    /// The ranks, in order; `hosts[i].ipv4` ends in `i+1`.
    pub hosts: Vec<Host>,
}

impl Bridged {
    /// Builds the switch and `n` (1..=254) hosts; on error everything created is deleted.
    pub fn new(n: usize, mtu: u32) -> Result<Bridged, HarnessError> {
        check_mtu(mtu)?;
        check_count(n, "hosts")?;
        let plan = AddressPlan::next();
        let mut segment = Segment::new("hub", Some(mtu))?;
        let mut hosts = Vec::with_capacity(n);
        for i in 0..n {
            let index = (i + 1) as u8;
            let ns = Netns::new(&format!("r{i}"))?;
            let (mac, hub_mac) = (plan.host_mac(index), plan.hub_mac(index));
            segment.add_veth(&format!("p{i}"), &hub_mac, &ns, HOST_IFNAME, &mac)?;
            hosts.push(configure_host(ns, mac, plan.ipv4(index), mtu)?);
        }
        Ok(Bridged {
            hub: segment.finish()?,
            bridge: BRIDGE_NAME.to_owned(),
            hosts,
        })
    }

    /// Pins host `i`'s MAC to its bridge port (a static, sticky forwarding entry), so that
    /// frames another port sends with that source address cannot move it there.
    ///
    /// # Panics
    /// If `i` is not a host index.
    pub fn pin_mac(&self, i: usize) -> Result<(), HarnessError> {
        let (mac, port) = (format_mac(&self.hosts[i].mac), format!("p{i}"));
        #[rustfmt::skip]
        let args = ["fdb", "replace", &mac, "dev", &port, "master", "static", "sticky"];
        run_checked(self.hub.command("bridge").args(args), IP_TIMEOUT).map(drop)
    }

    /// Makes host `to`'s port a mirror (SPAN) port of host `from`'s: it also gets a copy of
    /// every frame `from` sends (tc `mirred` on the ingress of `from`'s bridge port).
    pub fn mirror(&self, from: usize, to: usize) -> Result<(), HarnessError> {
        let (port, dest) = (format!("p{from}"), format!("p{to}"));
        let tc = |args: &[&str]| run_checked(self.hub.command("tc").args(args), IP_TIMEOUT);
        // The clsact qdisc is shared by every mirror of the port: add it once.
        let qdiscs = tc(&["qdisc", "show", "dev", &port])?;
        if !qdiscs.contains("clsact") {
            tc(&["qdisc", "add", "dev", &port, "clsact"])?;
        }
        #[rustfmt::skip]
        tc(&["filter", "add", "dev", &port, "ingress", "protocol", "all", "u32", "match", "u32",
             "0", "0", "action", "mirred", "egress", "mirror", "dev", &dest])?;
        Ok(())
    }
}

/// One Ethernet segment: a Linux bridge ([`BRIDGE_NAME`], STP off) in a hub namespace of
/// its own, with no IPv6 (so the bridge itself sends nothing onto the segment). Every bed
/// that joins hosts on a switch builds it with this: add ports with [`Segment::add_veth`]
/// (a host's veth) or [`Segment::enslave`] (an interface made in the hub, e.g. a tap),
/// then [`Segment::finish`], which waits (bounded) until the veth ports forward.
#[derive(Debug)]
pub struct Segment {
    hub: Netns,
    mtu: Option<u32>,
    /// The veth ports: (hub end, host namespace name, host end).
    veths: Vec<(String, String, String)>,
}

/// How long [`Segment::finish`] waits for the links to come up and the bridge to forward.
pub const LINK_UP_TIMEOUT: Duration = Duration::from_secs(10);

impl Segment {
    /// Creates the hub namespace `llct-{prefix}-...` and its bridge, up, with `mtu` (veth
    /// ports then get it too; without, the kernel's default of 1500).
    pub fn new(prefix: &str, mtu: Option<u32>) -> Result<Segment, HarnessError> {
        if let Some(mtu) = mtu {
            check_mtu(mtu)?;
        }
        let hub = Netns::new(prefix)?;
        // Best effort: a kernel without IPv6 has no such settings and sends nothing anyway.
        let mut sysctl = hub.command("sysctl");
        sysctl.args([
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ]);
        let _ = run_checked(&mut sysctl, IP_TIMEOUT);
        // `mtu` is a link option: it goes before `type`, whose options follow.
        let mut args = vec!["link", "add", BRIDGE_NAME];
        let mtu_s = mtu.map(|m| m.to_string());
        if let Some(m) = &mtu_s {
            args.extend(["mtu", m.as_str()]);
        }
        args.extend(["type", "bridge", "stp_state", "0", "forward_delay", "0"]);
        hub.ip(&args)?;
        hub.ip(&["link", "set", "dev", BRIDGE_NAME, "up"])?;
        Ok(Segment {
            hub,
            mtu,
            veths: Vec::new(),
        })
    }

    /// The hub namespace (it holds the bridge and the hub ends of the ports).
    pub fn hub(&self) -> &Netns {
        &self.hub
    }

    /// Adds a veth pair with the segment's MTU: hub end `port` (MAC `hub_mac`) on the bridge
    /// and up, host end `ifname` (MAC `mac`) in `ns`, left down for the caller to configure
    /// ([`address_port`]).
    pub fn add_veth(
        &mut self,
        port: &str,
        hub_mac: &[u8; 6],
        ns: &Netns,
        ifname: &str,
        mac: &[u8; 6],
    ) -> Result<(), HarnessError> {
        let mtu = self.mtu.unwrap_or(1500);
        add_veth(&self.hub, port, hub_mac, ns, ifname, mac, mtu)?;
        self.enslave(port)?;
        self.veths
            .push((port.to_owned(), ns.name().to_owned(), ifname.to_owned()));
        Ok(())
    }

    /// Puts the hub's interface `port` (made there by the caller, e.g. a tap) on the bridge,
    /// with the segment's MTU when it has one, and brings it up.
    pub fn enslave(&self, port: &str) -> Result<(), HarnessError> {
        self.hub
            .ip(&["link", "set", "dev", port, "master", BRIDGE_NAME])?;
        if let Some(mtu) = self.mtu {
            self.hub
                .ip(&["link", "set", "dev", port, "mtu", &mtu.to_string()])?;
        }
        self.hub.ip(&["link", "set", "dev", port, "up"]).map(drop)
    }

    /// Pins the bridge's MTU to the segment's (enslaving ports may have changed it), turns
    /// netfilter off for bridged frames, waits (at most [`LINK_UP_TIMEOUT`]) until every veth
    /// port and its host end are up and forwarding, and returns the hub namespace.
    pub fn finish(self) -> Result<Netns, HarnessError> {
        if let Some(mtu) = self.mtu {
            self.hub
                .ip(&["link", "set", "dev", BRIDGE_NAME, "mtu", &mtu.to_string()])?;
        }
        bridge_without_netfilter(&self.hub);
        self.wait_forwarding()?;
        Ok(self.hub)
    }

    /// Waits (bounded) until every veth port forwards and every host end is up.
    fn wait_forwarding(&self) -> Result<(), HarnessError> {
        let deadline = Instant::now() + LINK_UP_TIMEOUT;
        loop {
            let mut waiting = Vec::new();
            if !self.veths.is_empty() {
                let ports = self
                    .hub
                    .ip(&["-d", "-o", "link", "show", "master", BRIDGE_NAME])?;
                for (port, ns, ifname) in &self.veths {
                    if !port_forwards(&ports, port) {
                        waiting.push(format!("{} port {port}", self.hub.name()));
                    }
                    let link = run_checked(
                        ip_command().args(["-n", ns, "-o", "link", "show", "dev", ifname]),
                        IP_TIMEOUT,
                    )?;
                    if !link.contains("state UP") {
                        waiting.push(format!("{ns} {ifname}"));
                    }
                }
            }
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Timeout {
                    cmd: format!("waiting for links to come up: {}", waiting.join(", ")),
                    timeout: LINK_UP_TIMEOUT,
                });
            }
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Is `port` up and forwarding in `ip -d -o link show master BRIDGE`'s output?
fn port_forwards(listing: &str, port: &str) -> bool {
    listing.lines().any(|l| {
        l.split(':').nth(1).map(|n| n.trim().split('@').next()) == Some(Some(port))
            && l.contains("state UP")
            && l.contains("bridge_slave state forwarding")
    })
}

/// Bridged IPv4 frames are not run through iptables in the hub (a switch does not
/// filter; `br_netfilter`, when loaded, would add its cost to every frame of every
/// transport). Best effort: without `br_netfilter` the settings do not exist.
fn bridge_without_netfilter(hub: &Netns) {
    let mut cmd = hub.command("sysctl");
    cmd.args([
        "-qw",
        "net.bridge.bridge-nf-call-iptables=0",
        "net.bridge.bridge-nf-call-ip6tables=0",
        "net.bridge.bridge-nf-call-arptables=0",
    ]);
    let _ = run_checked(&mut cmd, IP_TIMEOUT);
}

/// One namespace with `n` ports `llc0..llc{n-1}` on one Linux bridge (in a separate hub
/// namespace): for programs that start all their processes in one namespace, as `mpirun`
/// does, each process taking its own port. Port `i` has address `.i+1` of a per-run /24,
/// so TCP between the ports works too; by default the kernel delivers local addresses via
/// loopback, [`MultiPort::route_through_bridge`] makes it cross the bridge instead.
#[derive(Debug)]
pub struct MultiPort {
    /// The namespace holding the bridge and the hub-side veth ends `p0..pN`.
    pub hub: Netns,
    /// The namespace holding the ports.
    pub ns: Netns,
    /// Port names, in order (`llc0`, `llc1`, ...).
    pub ports: Vec<String>,
    /// Their MACs.
    pub macs: Vec<[u8; 6]>,
    /// Their IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// The MTU of every link.
    pub mtu: u32,
}

impl MultiPort {
    /// Builds the bridge and `n` (1..=254) ports; on error everything created is deleted.
    pub fn new(n: usize, mtu: u32) -> Result<MultiPort, HarnessError> {
        check_mtu(mtu)?;
        check_count(n, "ports")?;
        let plan = AddressPlan::next();
        let mut segment = Segment::new("mhub", Some(mtu))?;
        let ns = Netns::new("multi")?;
        let (mut ports, mut macs, mut ipv4) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let index = (i + 1) as u8;
            let port = format!("llc{i}");
            let (mac, hub_mac) = (plan.host_mac(index), plan.hub_mac(index));
            segment.add_veth(&format!("p{i}"), &hub_mac, &ns, &port, &mac)?;
            let addr = plan.ipv4(index);
            address_port(&ns, &port, addr)?;
            ports.push(port);
            macs.push(mac);
            ipv4.push(addr);
        }
        Ok(MultiPort {
            hub: segment.finish()?,
            ns,
            ports,
            macs,
            ipv4,
            mtu,
        })
    }
}

impl MultiPort {
    /// Bytes the bridge has received from port `i` (what the namespace sent
    /// out of it), from the hub-side veth end's counters.
    pub fn bridge_rx_bytes(&self, i: usize) -> Result<u64, HarnessError> {
        let dev = format!("p{i}");
        let out = self.hub.ip(&["-s", "-o", "link", "show", "dev", &dev])?;
        // "... RX: bytes packets ...\    <bytes> <packets> ..."
        out.split("RX:")
            .nth(1)
            .and_then(|rx| rx.split('\\').nth(1))
            .and_then(|f| f.split_whitespace().next())
            .and_then(|b| b.parse().ok())
            .ok_or_else(|| {
                HarnessError::InvalidArgument(format!("no RX byte count for {dev} in {out:?}"))
            })
    }

    /// Makes IPv4 traffic between two ports of this namespace leave by the sender's port,
    /// cross the bridge and arrive on the receiver's port, as it would between two hosts,
    /// instead of taking the loopback shortcut the kernel uses for local addresses: so that
    /// TCP measured here crosses the same link as LLC. Policy routing: frames arriving on
    /// a port are looked up in the local table first; a socket bound to port `i`'s address
    /// (or, unbound, sending to port `j`) routes through its own table, which sends to the
    /// other ports out of port `i` (for unbound sockets, out of the port before `j`); the local
    /// table comes after these rules. Neighbours are static and local sources are accepted.
    pub fn route_through_bridge(&self) -> Result<(), HarnessError> {
        let n = self.ports.len();
        if n < 2 {
            return Ok(());
        }
        let mut sysctl = self.ns.command("sysctl");
        sysctl.args([
            "-qw",
            "net.ipv4.conf.all.accept_local=1",
            "net.ipv4.conf.all.rp_filter=0",
        ]);
        for port in &self.ports {
            sysctl.arg(format!("net.ipv4.conf.{port}.accept_local=1"));
            sysctl.arg(format!("net.ipv4.conf.{port}.rp_filter=0"));
        }
        run_checked(&mut sysctl, IP_TIMEOUT)?;
        for (i, port) in self.ports.iter().enumerate() {
            let (table, pref) = ((100 + i).to_string(), (100 + i).to_string());
            let src = self.ipv4[i].to_string();
            self.ns
                .ip(&["rule", "add", "pref", "10", "iif", port, "lookup", "local"])?;
            self.ns
                .ip(&["rule", "add", "pref", &pref, "from", &src, "lookup", &table])?;
            for (j, dst) in self.ipv4.iter().enumerate() {
                if j != i {
                    let (dst, mac) = (dst.to_string(), format_mac(&self.macs[j]));
                    #[rustfmt::skip]
                    self.ns.ip(&["route", "add", &dst, "dev", port, "src", &src, "table", &table])?;
                    #[rustfmt::skip]
                    self.ns.ip(&["neigh", "replace", &dst, "lladdr", &mac, "dev", port, "nud", "permanent"])?;
                }
            }
        }
        for (j, dst) in self.ipv4.iter().enumerate() {
            let out = (j + n - 1) % n;
            let (table, pref) = ((100 + out).to_string(), (400 + j).to_string());
            #[rustfmt::skip]
            self.ns.ip(&["rule", "add", "pref", &pref, "to", &dst.to_string(), "lookup", &table])?;
        }
        self.ns
            .ip(&["rule", "add", "pref", "1000", "lookup", "local"])?;
        self.ns
            .ip(&["rule", "del", "pref", "0", "lookup", "local"])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_pid_parses_harness_names() {
        assert_eq!(embedded_pid("llct-a-1234-0"), Some(1234));
        assert_eq!(embedded_pid("llct-my-prefix-77-12"), Some(77));
        assert_eq!(embedded_pid("llct-x-999999999-0"), Some(999_999_999));
        assert_eq!(embedded_pid("llct-1234-0"), None);
        assert_eq!(embedded_pid("other-a-1234-0"), None);
        assert_eq!(embedded_pid("llct-a-12x-0"), None);
        assert_eq!(embedded_pid("llct-a-12-x"), None);
    }

    #[test]
    fn macs_are_local_unicast_and_distinct() {
        let plan = AddressPlan {
            x: 1,
            y: 2,
            pid: 0x12345,
        };
        let a = plan.host_mac(1);
        let b = plan.hub_mac(1);
        assert_eq!(a[0] & 0x03, 0x02);
        assert_ne!(a, b);
        assert_eq!(format_mac(&a), "02:23:45:02:00:01");
    }
}
