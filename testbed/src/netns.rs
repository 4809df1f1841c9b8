//! Test hosts on one machine: network namespaces joined by veth pairs or a Linux bridge.
//!
//! The beds ([`TwoHosts`], [`Bridged`]) are built from pieces that are public so that other
//! harnesses can build beds of their own shape the same way: [`Netns`], [`add_veth`],
//! [`AddressPlan`] for per-run addresses and MACs, [`check_mtu`], [`bridge_without_netfilter`]
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

    /// Opens the namespace handle (an owned fd, so a thread can outlive `self`).
    fn open(&self) -> Result<OwnedFd, HarnessError> {
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
        let fd = self.open();
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
        let fd = self.open();
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

/// Gives the host port its address and brings it up.
fn configure_host(ns: Netns, mac: [u8; 6], ipv4: Ipv4Addr, mtu: u32) -> Result<Host, HarnessError> {
    let cidr = format!("{ipv4}/24");
    ns.ip(&["addr", "add", &cidr, "dev", HOST_IFNAME])?;
    ns.ip(&["link", "set", "dev", HOST_IFNAME, "up"])?;
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
        if !(1..=254).contains(&n) {
            return Err(HarnessError::InvalidArgument(format!(
                "{n} hosts: 1..=254 allowed"
            )));
        }
        let plan = AddressPlan::next();
        let hub = Netns::new("hub")?;
        let mtu_s = mtu.to_string();
        hub.ip(&[
            "link",
            "add",
            BRIDGE_NAME,
            "mtu",
            &mtu_s,
            "type",
            "bridge",
            "stp_state",
            "0",
        ])?;
        hub.ip(&["link", "set", "dev", BRIDGE_NAME, "up"])?;
        let mut hosts = Vec::with_capacity(n);
        for i in 0..n {
            let index = (i + 1) as u8;
            let ns = Netns::new(&format!("r{i}"))?;
            let port = format!("p{i}");
            let (mac, hub_mac) = (plan.host_mac(index), plan.hub_mac(index));
            add_veth(&hub, &port, &hub_mac, &ns, HOST_IFNAME, &mac, mtu)?;
            hub.ip(&["link", "set", "dev", &port, "master", BRIDGE_NAME, "up"])?;
            hosts.push(configure_host(ns, mac, plan.ipv4(index), mtu)?);
        }
        // Enslaving ports may have adjusted the bridge MTU: pin it to what was asked.
        hub.ip(&["link", "set", "dev", BRIDGE_NAME, "mtu", &mtu_s])?;
        bridge_without_netfilter(&hub);
        Ok(Bridged {
            hub,
            bridge: BRIDGE_NAME.to_owned(),
            hosts,
        })
    }
}

/// Bridged IPv4 frames are not run through iptables in the hub (a switch does not
/// filter; `br_netfilter`, when loaded, would add its cost to every frame of every
/// transport). Best effort: without `br_netfilter` the settings do not exist.
pub fn bridge_without_netfilter(hub: &Netns) {
    let mut cmd = hub.command("sysctl");
    cmd.args([
        "-qw",
        "net.bridge.bridge-nf-call-iptables=0",
        "net.bridge.bridge-nf-call-ip6tables=0",
        "net.bridge.bridge-nf-call-arptables=0",
    ]);
    let _ = run_checked(&mut cmd, IP_TIMEOUT);
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
