//! A simulated multi-host cluster on one machine, for MPI jobs that must see several nodes.
//!
//! [`Cluster::new`] builds one network namespace per simulated host, each with exactly one
//! interface `eth0` (plus `lo`): a veth whose peer is a port of a Linux bridge in a hub
//! namespace of its own, so the hosts share one Ethernet segment and nothing else. Every
//! `eth0` has the same MTU, a deterministic MAC and an IPv4 address in a per-cluster /24.
//!
//! Open MPI starts its daemons through an "rsh agent" ([`Cluster::agent`], set as
//! `plm_rsh_agent`) that it calls as it would call ssh: `AGENT HOST COMMAND...`. The agent runs
//! the command in HOST's namespace, and like every command of the bed ([`Cluster::command`],
//! [`Cluster::mpirun`]) with a private hostname, `/dev/shm`, `/etc/hosts` and `TMPDIR`: without
//! them btl/vader's shared-memory files of two "hosts" collide (ranks then crash in
//! `mca_btl_vader_poll_handle_frag`) and Open MPI takes both hosts for one node.
//!
//! Everything is deleted when the [`Cluster`] is dropped (also while a panic unwinds), and
//! commands run with [`run_bounded`] are killed, with every process they started, when
//! their time is up.
//!
//! ```no_run
//! use std::time::Duration;
//! use testbed::{forward_env, run_bounded, Cluster};
//!
//! testbed::require_root!(Ok(())); // prints SKIPPED and returns when not root
//! let cluster = Cluster::new(2, 1500)?; // h0 and h1, 1500 B MTU
//! let mut cmd = cluster.mpirun(2); // 2 ranks on each host: ranks 0,1 on h0, 2,3 on h1
//! cmd.args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"])
//!     .args(["--mca", "btl_tcp_if_include", &cluster.subnet()]);
//! forward_env(&mut cmd, "MY_SETTING", "1"); // env + `-x MY_SETTING`
//! cmd.arg("/path/to/mpi_program");
//! let out = run_bounded(&mut cmd, Duration::from_secs(60))?;
//! assert!(out.success(), "{out}"); // Display: status, stdout and stderr
//! # Ok::<(), testbed::HarnessError>(())
//! ```

use std::ffi::OsStr;
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::netns::{
    address_port, check_mtu, describe, ip_path, run_checked, AddressPlan, HarnessError, Netns,
    Segment, IP_TIMEOUT,
};
use crate::sys;
use crate::{Background, TestUser};

/// The first (in a plain [`Cluster`], the only) non-loopback interface of every
/// simulated host.
pub const CLUSTER_IFNAME: &str = "eth0";

/// The second interface of every host of a [`Cluster::with_rails`] bed.
pub const CLUSTER_IFNAME2: &str = "eth1";

/// How the second interface (`eth1`) of each host of [`Cluster::with_rails`] is wired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecondRail {
    /// A bridge of its own, in a hub namespace of its own: two separate Ethernet segments,
    /// as a cluster with two switches has (eth0 of one host cannot reach eth1 of another).
    OwnBridge,
    /// The same bridge as `eth0`: two ports per host on one segment.
    SameBridge,
}

/// Prefix of the cluster's temporary directory (in [`std::env::temp_dir`]); stale ones of
/// dead processes are removed like stale namespaces.
const DIR_PREFIX: &str = "llct-cluster-";

/// After a timeout, how long [`run_bounded`] lets the process group end on SIGTERM before it
/// sends SIGKILL: mpirun then tears its job down, which took about 2 s here (its daemons
/// and ranks are in process groups of their own, which the SIGKILL would not reach).
const TERM_GRACE: Duration = Duration::from_secs(3);

/// How long [`run_bounded`] waits for output still buffered in the pipes once the process is
/// gone (a stray grandchild could keep a pipe open forever).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// One simulated host of a [`Cluster`].
#[derive(Debug)]
pub struct ClusterHost {
    /// The host's network namespace; holds `lo` and [`CLUSTER_IFNAME`] only.
    pub ns: Netns,
    /// The host's name (`h0`, `h1`, ...): what `hostname` prints in the bed's commands and
    /// what `--host` names. Short on purpose: it is only ever seen inside the host's own
    /// UTS namespace and in this cluster's agent and hosts file, so distinct within the
    /// cluster is distinct enough (other clusters' `h0` live in other namespaces).
    pub hostname: String,
    /// MAC of `eth0`: `02:4c:4c:00:00:{i+1}` for host `i`. Locally administered unicast and
    /// the same in every cluster (each cluster is a separate Ethernet segment), so tests can
    /// predict it.
    pub mac: [u8; 6],
    /// IPv4 address of `eth0`: `.i+1` of the cluster's /24 ([`Cluster::subnet`]).
    pub ipv4: Ipv4Addr,
    /// `eth1` of a [`Cluster::with_rails`] bed: its MAC (`02:4c:4c:00:02:{i+1}`) and its
    /// IPv4 address (`.i+1` of [`Cluster::subnet2`]).
    pub second: Option<([u8; 6], Ipv4Addr)>,
}

/// N simulated hosts on one Ethernet segment, and the means to run an MPI job across them.
/// See the [module documentation](self) for the layout.
#[derive(Debug)]
pub struct Cluster {
    // Dropped in declaration order: the services running in the hosts (llcd, logins),
    // then the host namespaces (which takes their veth pairs with them), then the hub,
    // then the directory with the agent.
    /// Per host: its `llcd --foreground`, when started ([`Cluster::start_llcd`]).
    llcds: Mutex<Vec<Option<Background>>>,
    /// Per host: the login server of [`Cluster::login_as`]'s user.
    logins: Vec<HostDaemon>,
    hosts: Vec<ClusterHost>,
    hub: Netns,
    /// The hub of the second rail when it has a bridge of its own.
    hub2: Option<Netns>,
    network: Ipv4Addr,
    /// The second rail's /24, when there is one.
    network2: Option<Ipv4Addr>,
    mtu: u32,
    /// The ordinary user the bed's commands run as, once [`Cluster::login_as`] chose one.
    user: Option<TestUser>,
    /// The endpoint service's binary and policy, once [`Cluster::start_llcd`] ran.
    llcd: Option<(PathBuf, PathBuf)>,
    dir: TempDir,
}

/// MAC of host `i` (`role` 0; its `eth1`: 2) or of its bridge-side veth end (`role` 1;
/// of `eth1`: 3).
fn cluster_mac(role: u8, i: usize) -> [u8; 6] {
    [0x02, 0x4c, 0x4c, 0x00, role, (i + 1) as u8]
}

impl Cluster {
    /// Builds `hosts` (1..=254) simulated hosts with the given MTU (68..=65535) on every link.
    ///
    /// The subnet is a 10.x.y.0/24 from the process id and a per-process counter, so
    /// clusters of one process never share one; clusters of different processes could
    /// (unlikely), which is harmless since every cluster lives in namespaces of its own. It
    /// never contains 10.255.255.0/24, where the machine's DNS server may live.
    ///
    /// Returns only when every link is up and every bridge port forwards; on error
    /// everything created so far is deleted again.
    pub fn new(hosts: usize, mtu: u32) -> Result<Cluster, HarnessError> {
        Self::build(hosts, mtu, None)
    }

    /// [`Cluster::new`] with a second interface per host, `eth1` ([`CLUSTER_IFNAME2`],
    /// same MTU), wired as `second` says, with an IPv4 address in a /24 of its own
    /// ([`Cluster::subnet2`]): the bed for jobs over several NICs (rails). Open MPI's own
    /// control traffic stays on `eth0`.
    pub fn with_rails(hosts: usize, mtu: u32, second: SecondRail) -> Result<Cluster, HarnessError> {
        Self::build(hosts, mtu, Some(second))
    }

    fn build(hosts: usize, mtu: u32, second: Option<SecondRail>) -> Result<Cluster, HarnessError> {
        check_mtu(mtu)?;
        crate::netns::check_count(hosts, "hosts")?;
        static CLEANUP: Once = Once::new();
        CLEANUP.call_once(cleanup_stale_dirs);
        let tools = Tools::find()?;
        let plan = AddressPlan::next();
        let network = plan.ipv4(0);

        let plan2 = second.map(|_| AddressPlan::next());
        let mut segment = Segment::new("chub", Some(mtu))?;
        let mut segment2 = match second {
            Some(SecondRail::OwnBridge) => Some(Segment::new("chub2", Some(mtu))?),
            _ => None,
        };
        let mut list = Vec::with_capacity(hosts);
        for i in 0..hosts {
            let ns = Netns::new(&format!("c{i}"))?;
            let (mac, hub_mac) = (cluster_mac(0, i), cluster_mac(1, i));
            segment.add_veth(&format!("p{i}"), &hub_mac, &ns, CLUSTER_IFNAME, &mac)?;
            no_ipv6(&ns, &[CLUSTER_IFNAME])?;
            let ipv4 = plan.ipv4((i + 1) as u8);
            address_port(&ns, CLUSTER_IFNAME, ipv4)?;
            let second_rail = match (second, &plan2) {
                (Some(how), Some(plan2)) => {
                    let (mac2, hub_mac2) = (cluster_mac(2, i), cluster_mac(3, i));
                    let seg = match how {
                        SecondRail::OwnBridge => segment2.as_mut().expect("second segment"),
                        SecondRail::SameBridge => &mut segment,
                    };
                    seg.add_veth(&format!("q{i}"), &hub_mac2, &ns, CLUSTER_IFNAME2, &mac2)?;
                    no_ipv6(&ns, &[CLUSTER_IFNAME2])?;
                    let ipv4_2 = plan2.ipv4((i + 1) as u8);
                    address_port(&ns, CLUSTER_IFNAME2, ipv4_2)?;
                    Some((mac2, ipv4_2))
                }
                _ => None,
            };
            list.push(ClusterHost {
                ns,
                hostname: format!("h{i}"),
                mac,
                ipv4,
                second: second_rail,
            });
        }
        // Returns once every link is up and every bridge port forwards.
        let hub = segment.finish()?;
        let hub2 = segment2.map(Segment::finish).transpose()?;

        let dir = TempDir::new()?;
        let cluster = Cluster {
            llcds: Mutex::new(Vec::new()),
            logins: Vec::new(),
            hosts: list,
            hub,
            hub2,
            network,
            network2: plan2.map(|p| p.ipv4(0)),
            mtu,
            user: None,
            llcd: None,
            dir,
        };
        cluster.write_scripts(&tools)?;
        Ok(cluster)
    }

    /// The hosts, in order: host `i` is `h{i}` with address `.i+1`.
    pub fn hosts(&self) -> &[ClusterHost] {
        &self.hosts
    }

    /// The namespace of the bridge (`br0`, ports `p0..pN`, and `q0..qN` for `eth1` on
    /// [`SecondRail::SameBridge`]); it has no IP address.
    pub fn hub(&self) -> &Netns {
        &self.hub
    }

    /// The namespace of the second rail's bridge (ports `q0..qN`), on
    /// [`SecondRail::OwnBridge`].
    pub fn hub2(&self) -> Option<&Netns> {
        self.hub2.as_ref()
    }

    /// The second rail's subnet (`10.x.y.0/24`), on a [`Cluster::with_rails`] bed.
    pub fn subnet2(&self) -> Option<String> {
        self.network2.map(|n| format!("{n}/24"))
    }

    /// The hosts' subnet in CIDR notation (`10.x.y.0/24`), e.g. for `btl_tcp_if_include`.
    pub fn subnet(&self) -> String {
        format!("{}/24", self.network)
    }

    /// The MTU of every link.
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// The rsh agent to give Open MPI as `plm_rsh_agent` ([`Cluster::mpirun`] does): an
    /// executable `sh` script that Open MPI calls like ssh, `AGENT [-opts] HOST COMMAND...`.
    /// HOST is a hostname of [`Cluster::hosts`] or its IPv4 address. Like sshd, it joins the
    /// COMMAND words with spaces and runs the result with `sh -c` (Open MPI quotes the
    /// daemon's arguments for a remote shell, e.g. `"…;tcp://…"`), in HOST's namespace with
    /// HOST's private hostname, `/dev/shm`, `/etc/hosts` and `TMPDIR` (see
    /// [`Cluster::command`]). Leading single-word options (ssh's `-x`) are ignored.
    pub fn agent(&self) -> PathBuf {
        self.dir.path.join("agent")
    }

    /// A `Command` that runs `program` on host `i` as a login through the agent would, but
    /// with its arguments passed as they are (no shell): in the host's network namespace and
    /// in fresh PID, UTS and mount namespaces, where `hostname` is the host's name, `/dev/shm`
    /// is an empty tmpfs, `/etc/hosts` names every host of the cluster and `TMPDIR` is a
    /// fresh directory of the cluster's (Open MPI puts its session directory there).
    ///
    /// The PID namespace makes the command's whole process tree, including Open MPI daemons
    /// started on other hosts through the agent, end when the command's first process is
    /// killed (as [`run_bounded`] does on timeout), so no rank outlives a test.
    ///
    /// # Panics
    /// If `i` is not a host index.
    pub fn command(&self, i: usize, program: impl AsRef<OsStr>) -> Command {
        let host = &self.hosts[i];
        let mut cmd = host.ns.command(unshare_path());
        cmd.args([
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--uts",
            "--mount",
        ])
        .arg(self.enter())
        .arg(&host.hostname)
        .arg(program);
        cmd
    }

    /// A `Command` that runs `mpirun` on host 0 (through [`Cluster::command`]) for
    /// `ranks_per_host` ranks on every host, so `-np hosts*ranks_per_host`. Ranks are
    /// placed by slot: ranks `0..k` on `h0`, `k..2k` on `h1`, ... (k = `ranks_per_host`).
    ///
    /// Options already given, and why:
    /// - `--allow-run-as-root`: the bed needs root;
    /// - `--oversubscribe --bind-to none`: mpirun believes every host has all the machine's
    ///   cores and would bind each host's local rank 0 to the same core;
    /// - `--host h0:k,h1:k,... -np N`;
    /// - `--mca plm rsh --mca plm_rsh_agent AGENT`: daemons on the other hosts start
    ///   through [`Cluster::agent`] (and no other launcher, e.g. Slurm's when the test runs
    ///   inside a Slurm job, is chosen);
    /// - `--mca oob_tcp_if_include SUBNET`: Open MPI's own control traffic uses `eth0`.
    ///
    /// Add your own options (`--mca pml ob1 --mca btl self,vader,tcp`, `btl_tcp_if_include`
    /// ...), then the program and its arguments, and run it with [`run_bounded`].
    ///
    /// Environment: set variables on the returned `Command` and name them with `-x NAME`
    /// (or use [`forward_env`], which does both): mpirun then gives them to every rank, as
    /// it would on a real cluster. `OMPI_MCA_*` variables reach every rank without `-x`.
    /// (On this bed the daemons inherit mpirun's environment through the agent, so other
    /// variables may reach the ranks even without `-x`; do not rely on it.)
    ///
    /// # Panics
    /// If `ranks_per_host` is 0.
    pub fn mpirun(&self, ranks_per_host: usize) -> Command {
        assert!(ranks_per_host > 0, "mpirun: ranks_per_host must be >= 1");
        let hosts = self
            .hosts
            .iter()
            .map(|h| format!("{}:{ranks_per_host}", h.hostname))
            .collect::<Vec<_>>()
            .join(",");
        let np = (self.hosts.len() * ranks_per_host).to_string();
        let mut cmd = self.command(0, "mpirun");
        cmd.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
        ])
        .args(["--host", &hosts, "-np", &np])
        .args(["--mca", "plm", "rsh", "--mca", "plm_rsh_agent"])
        .arg(self.agent())
        .args(["--mca", "oob_tcp_if_include", &self.subnet()]);
        cmd
    }

    /// The script that sets a host up inside fresh namespaces: `enter HOST PROGRAM ARGS...`.
    fn enter(&self) -> PathBuf {
        self.dir.path.join("enter")
    }

    /// Writes the hosts file, `enter` and the agent into the cluster's directory.
    fn write_scripts(&self, tools: &Tools) -> Result<(), HarnessError> {
        let dir = &self.dir.path;
        let mut hosts = String::from(
            "# /etc/hosts of a testbed::cluster::Cluster\n127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n",
        );
        for h in &self.hosts {
            hosts.push_str(&format!("{}\t{}\n", h.ipv4, h.hostname));
        }
        write_file(&dir.join("hosts"), &hosts, 0o644)?;
        if !dir.join("tmp").exists() {
            fs::create_dir(dir.join("tmp")).map_err(|source| HarnessError::Io {
                what: format!("creating {}/tmp", dir.display()),
                source,
            })?;
        }

        // Runs as the first program in fresh UTS and mount namespaces (unshare makes the
        // mounts private, so nothing here is seen outside). Writing the hostname through
        // /proc needs no `hostname` binary.
        let enter = format!(
            r#"#!/bin/sh
# enter HOST PROGRAM [ARGS...], generated by testbed::cluster: gives the simulated host
# HOST its own hostname, /dev/shm, /etc/hosts and TMPDIR, then executes PROGRAM.
host=$1
shift
printf '%s' "$host" > /proc/sys/kernel/hostname || exit 255
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || exit 255
if [ -e /etc/hosts ]; then mount --bind {dir}/hosts /etc/hosts || exit 255; fi
TMPDIR=$(mktemp -d {dir}/tmp/"$host".XXXXXX) || exit 255
export TMPDIR
{drop}exec "$@"
"#,
            dir = dir.display(),
            drop = match &self.user {
                None => String::new(),
                Some(u) => format!(
                    "# Everything from here on runs as {name}, with no capabilities.\n\
                     chown {uid}:{gid} \"$TMPDIR\" || exit 255\n\
                     export HOME={dir}/home USER={name} LOGNAME={name}\n\
                     set -- {setpriv} \"$@\"\n",
                    name = u.name,
                    uid = u.uid,
                    gid = u.gid,
                    dir = dir.display(),
                    setpriv = u.setpriv_words().join(" "),
                ),
            }
        );
        write_file(&self.enter(), &enter, 0o755)?;

        // HOST may be a name or an address; `enter` always gets the name.
        let mut cases = String::new();
        for h in &self.hosts {
            cases.push_str(&format!(
                "    {name}|{addr}) ns={ns} name={name} ;;\n",
                name = h.hostname,
                addr = h.ipv4,
                ns = h.ns.name()
            ));
        }
        let agent = format!(
            r#"#!/bin/sh
# rsh agent of a testbed::cluster::Cluster (Open MPI's plm_rsh_agent), called like ssh:
#   agent [-opt...] HOST COMMAND...
# Runs COMMAND, its words joined by spaces, with `sh -c` as sshd would, on the simulated
# host HOST: in its network namespace, with its own hostname, /dev/shm, /etc/hosts, TMPDIR.
while [ $# -gt 0 ]; do
    case "$1" in
        -*) shift ;;
        *) break ;;
    esac
done
if [ $# -lt 1 ]; then
    echo "$0: usage: $0 HOST COMMAND..." >&2
    exit 255
fi
host=$1
shift
case "$host" in
{cases}    *) echo "$0: unknown host '$host'" >&2; exit 255 ;;
esac
{run}
"#,
            run = match &self.user {
                None => format!(
                    r#"exec {ip} netns exec "$ns" {unshare} --uts --mount {enter} "$name" /bin/sh -c "$*""#,
                    ip = tools.ip.display(),
                    unshare = tools.unshare.display(),
                    enter = self.enter().display(),
                ),
                // An ordinary user cannot enter the host's namespaces: the host's login
                // server, started as root and already the user, runs the command (sshd's
                // part; `llc-bed-login`).
                Some(_) => format!(
                    r#"exec {login} connect {dir}/login/"$name".sock "$@""#,
                    login = tools
                        .login
                        .as_deref()
                        .unwrap_or(Path::new("llc-bed-login"))
                        .display(),
                    dir = self.dir.path.display(),
                ),
            }
        );
        write_file(&self.agent(), &agent, 0o755)
    }

    /// From now on run the bed's commands ([`Cluster::command`], [`Cluster::mpirun`]) and the
    /// commands Open MPI starts through the agent as `user`, an ordinary account with no
    /// capabilities, as a cluster's users run jobs. Each host gets a login server
    /// (`llc-bed-login`, a binary of this crate; `cargo build -p testbed` builds it) that
    /// runs inside the host as the user and stands in for sshd.
    pub fn login_as(&mut self, user: &TestUser) -> Result<(), HarnessError> {
        let login =
            crate::cdylib::binary("llc-bed-login", "testbed").map_err(HarnessError::Setup)?;
        let dir = self.dir.path.clone();
        let io_err = |what: String| move |source| HarnessError::Io { what, source };
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(io_err(format!(
            "opening {} to {}",
            dir.display(),
            user.name
        )))?;
        for sub in ["tmp", "home", "login"] {
            let d = dir.join(sub);
            if !d.exists() {
                fs::create_dir(&d).map_err(io_err(format!("creating {}", d.display())))?;
            }
            std::os::unix::fs::chown(&d, Some(user.uid), Some(user.gid))
                .map_err(io_err(format!("giving {} to {}", d.display(), user.name)))?;
        }
        self.user = Some(user.clone());
        let mut tools = Tools::find()?;
        tools.login = Some(login.clone());
        self.write_scripts_again(&tools)?;
        let mut logins = Vec::new();
        for i in 0..self.hosts.len() {
            let sock = dir
                .join("login")
                .join(format!("{}.sock", self.hosts[i].hostname));
            let mut cmd = self.command(i, &login);
            cmd.arg("serve").arg(&sock);
            let bg = Background::spawn(&mut cmd, "llc-bed-login: serving", Duration::from_secs(20))
                .map_err(HarnessError::Setup)?;
            logins.push(HostDaemon(bg));
        }
        self.logins = logins;
        Ok(())
    }

    /// A directory of the cluster's that the bed's user may write (the hosts' TMPDIRs are in
    /// it too): for files a test and its job share. Removed with the cluster.
    pub fn scratch_dir(&self) -> PathBuf {
        self.dir.path.join("tmp")
    }

    /// The cluster's own directory (removed with the cluster), for the bed's services.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir.path
    }

    /// The user [`Cluster::login_as`] chose, if any.
    pub fn user(&self) -> Option<&TestUser> {
        self.user.as_ref()
    }

    /// Start the endpoint service `llcd --foreground` (binary `llcd`, found beside the test
    /// executable: `cargo build -p llcd` builds it) in every host's network namespace, as
    /// root, with the policy `policy` (TOML; empty: the defaults), as `scripts/install.sh`
    /// installs it on a real cluster. Returns once every host's service answers.
    pub fn start_llcd(&mut self, policy: &str) -> Result<(), HarnessError> {
        let llcd = crate::cdylib::binary("llcd", "llcd").map_err(HarnessError::Setup)?;
        let config = self.dir.path.join("llcd.toml");
        write_file(&config, policy, 0o644)?;
        self.llcd = Some((llcd, config));
        *self.llcd_slots() = (0..self.hosts.len()).map(|_| None).collect();
        for i in 0..self.hosts.len() {
            self.restart_llcd(i)?;
        }
        Ok(())
    }

    fn llcd_slots(&self) -> std::sync::MutexGuard<'_, Vec<Option<Background>>> {
        self.llcds.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Kill host `i`'s llcd with SIGKILL (its granted endpoints live on: their descriptors
    /// belong to their processes). Callable while a job runs on the cluster.
    pub fn kill_llcd(&self, i: usize) {
        let taken = self.llcd_slots().get_mut(i).and_then(Option::take);
        if let Some(mut bg) = taken {
            bg.kill();
        }
    }

    /// Start host `i`'s llcd again (after [`Cluster::kill_llcd`]).
    pub fn restart_llcd(&self, i: usize) -> Result<(), HarnessError> {
        let (llcd, config) = self.llcd.clone().ok_or_else(|| {
            HarnessError::InvalidArgument("restart_llcd before start_llcd".into())
        })?;
        self.kill_llcd(i);
        let bg = crate::llcd::start(&self.hosts[i].ns, &llcd, &config)?;
        self.llcd_slots()[i] = Some(bg);
        Ok(())
    }

    /// What host `i`'s running llcd printed so far (its log; empty once killed).
    pub fn llcd_log(&self, i: usize) -> String {
        self.llcd_slots()
            .get(i)
            .and_then(Option::as_ref)
            .map(Background::output)
            .unwrap_or_default()
    }

    fn write_scripts_again(&self, tools: &Tools) -> Result<(), HarnessError> {
        for f in ["hosts", "enter", "agent"] {
            let _ = fs::remove_file(self.dir.path.join(f));
        }
        self.write_scripts(tools)
    }
}

/// Turns IPv6 off for the given interfaces (or `all`/`default`) of `ns`: no link-local
/// addresses, router solicitations or MLD reports on the segment, so the only frames on it
/// are those of the test, and Open MPI (built with IPv6) sees one IPv4 address per host.
fn no_ipv6(ns: &Netns, ifaces: &[&str]) -> Result<(), HarnessError> {
    let mut cmd = ns.command("sysctl");
    cmd.arg("-qw");
    for iface in ifaces {
        cmd.arg(format!("net.ipv6.conf.{iface}.disable_ipv6=1"));
    }
    run_checked(&mut cmd, IP_TIMEOUT).map(drop)
}

/// A server started with [`Cluster::command`] that runs as long as the bed: a host's login
/// server, or a daemon of the Slurm bed ([`crate::slurm`]). Its first process is the
/// init of the host command's PID namespace; once a login server dropped its privileges
/// the kernel no longer kills it with its parent (`unshare --kill-child` sets a
/// parent-death signal, which a change of credentials clears), and a daemon may do the
/// same. So on drop that init is killed itself, which ends every process of the
/// namespace (the logins' commands, a slurmd's steps and tasks), and the drop waits (at
/// most [`HOST_DAEMON_END`]) until the kernel took them all down.
#[derive(Debug)]
pub(crate) struct HostDaemon(pub(crate) Background);

/// How long dropping a [`HostDaemon`] waits for the processes of its namespace to end.
const HOST_DAEMON_END: Duration = Duration::from_secs(10);

impl HostDaemon {
    /// The pid (in our namespace) of the first process of the daemon's PID namespace.
    pub(crate) fn init_pid(&self) -> Option<u32> {
        let unshare = self.0.id();
        let children = format!("/proc/{unshare}/task/{unshare}/children");
        fs::read_to_string(children)
            .ok()?
            .split_whitespace()
            .find_map(|p| p.parse::<u32>().ok())
    }
}

impl Drop for HostDaemon {
    fn drop(&mut self) {
        let Some(init) = self.init_pid() else {
            return;
        };
        if let Err(e) = sys::kill_process(init, libc::SIGKILL) {
            warn(&format!("killing the host daemon {init}: {e}"));
            return;
        }
        // The init of a PID namespace becomes a zombie only after every other process of
        // the namespace is gone.
        let deadline = Instant::now() + HOST_DAEMON_END;
        let mut pause = Duration::from_millis(1);
        while crate::process::running(init) {
            if Instant::now() >= deadline {
                warn(&format!(
                    "the processes of host daemon {init} still run after {HOST_DAEMON_END:?}"
                ));
                return;
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

/// Absolute paths of the programs the agent runs (it may run with a PATH lacking sbin).
struct Tools {
    ip: PathBuf,
    unshare: PathBuf,
    /// `llc-bed-login`, when the bed runs as an ordinary user.
    login: Option<PathBuf>,
}

impl Tools {
    fn find() -> Result<Tools, HarnessError> {
        let ip = ip_path()
            .ok_or_else(|| HarnessError::Unprivileged("`ip` (iproute2) not found".into()))?
            .to_owned();
        let unshare = find_program("unshare")
            .ok_or_else(|| HarnessError::Unprivileged("`unshare` (util-linux) not found".into()))?;
        Ok(Tools {
            ip,
            unshare,
            login: None,
        })
    }
}

/// `unshare`'s path, or plain "unshare" so that spawning reports the problem.
fn unshare_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| find_program("unshare").unwrap_or_else(|| "unshare".into()))
        .clone()
}

/// Finds `name` in PATH, then in the usual bin and sbin directories (the
/// test hosts' and the VM harness's one lookup of a host program).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let fixed = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .into_iter()
        .map(PathBuf::from);
    from_path
        .chain(fixed)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Writes `text` to `path` with the given permission bits.
fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), HarnessError> {
    let io_err = |source| HarnessError::Io {
        what: format!("writing {}", path.display()),
        source,
    };
    fs::write(path, text).map_err(io_err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err)
}

/// The cluster's directory `llct-cluster-{pid}-{n}` in the temp dir, removed on drop.
#[derive(Debug)]
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> Result<TempDir, HarnessError> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
        // The path is written into shell scripts and into Open MPI's `plm_rsh_agent`, which
        // splits on white space and ':'.
        let text = path.to_string_lossy();
        let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+".contains(c);
        if !text.chars().all(plain) {
            return Err(HarnessError::InvalidArgument(format!(
                "temporary directory {text:?} has characters the rsh agent cannot carry \
                 (set TMPDIR to a plain path)"
            )));
        }
        fs::create_dir(&path).map_err(|source| HarnessError::Io {
            what: format!("creating {}", path.display()),
            source,
        })?;
        Ok(TempDir { path })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_dir_all(&self.path) {
            warn(&format!("removing {}: {e}", self.path.display()));
        }
    }
}

/// Writes a warning without ever panicking (used from Drop, possibly during unwinding).
fn warn(msg: &str) {
    tracing::warn!("{msg}");
    let _ = writeln!(io::stderr(), "testbed: {msg}");
}

/// Removes cluster directories left behind by processes that no longer run.
fn cleanup_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(DIR_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid.to_string()).exists() {
            if let Err(e) = fs::remove_dir_all(entry.path()) {
                warn(&format!("removing stale {}: {e}", entry.path().display()));
            }
        }
    }
}

/// Sets `name=value` in `cmd`'s environment and appends `-x name`, so that mpirun hands the
/// variable to every rank on every host. Call it where mpirun options go (before the
/// program).
pub fn forward_env<'a>(
    cmd: &'a mut Command,
    name: &str,
    value: impl AsRef<OsStr>,
) -> &'a mut Command {
    cmd.env(name, value).args(["-x", name])
}

/// What a command run by [`run_bounded`] did.
#[derive(Debug, Clone)]
pub struct JobOutput {
    /// The command line.
    pub command: String,
    /// Its exit status; `None` if it did not end in time and was killed.
    pub status: Option<ExitStatus>,
    /// Its standard output (what it printed before it ended or was killed).
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// From start to end (or to the kill).
    pub elapsed: Duration,
}

impl JobOutput {
    /// True if the command ended by itself with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// True if the command was killed because its time was up.
    pub fn timed_out(&self) -> bool {
        self.status.is_none()
    }

    /// True if Open MPI's btl/tcp reported that a connection to a peer failed ("Open MPI
    /// failed to TCP connect to a peer MPI process"). Open MPI 4.1.4 prints the stale
    /// `errno` of the non-blocking `connect()` there, `Operation now in progress (115)`,
    /// not the socket's real error, so the text says nothing about the cause. Tests that
    /// measure or check btl/tcp on the bed may retry such a job a bounded number of times.
    pub fn btl_tcp_connect_failed(&self) -> bool {
        let text = |s: &str| s.contains("failed to TCP connect to a peer");
        text(&self.stderr) || text(&self.stdout)
    }
}

impl fmt::Display for JobOutput {
    /// The command, how it ended and everything it printed: for test failure messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => writeln!(f, "`{}` ended ({s}) after {:?}", self.command, self.elapsed)?,
            None => writeln!(
                f,
                "`{}` was killed after {:?} (timeout)",
                self.command, self.elapsed
            )?,
        }
        writeln!(f, "--- stdout:\n{}", self.stdout.trim_end())?;
        write!(f, "--- stderr:\n{}", self.stderr.trim_end())
    }
}

/// Runs `cmd` with stdin closed and its output captured, for at most `timeout`.
///
/// The command runs in a process group of its own; when its time is up the whole group gets
/// SIGTERM (mpirun then tears its job down), and SIGKILL 3 s later. The command
/// is also killed if the calling thread ends first (e.g. the test process dies). Commands
/// of [`Cluster::command`] and [`Cluster::mpirun`] run in a PID namespace of their own, so
/// killing them ends every process they started, on every host.
///
/// Returns `Err` only if the command cannot be started (or waited for); a failed or killed
/// command is an `Ok` whose [`JobOutput::status`] says so.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Result<JobOutput, HarnessError> {
    let line = describe(cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    sys::child_dies_with_parent(cmd, None);
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|source| HarnessError::Spawn {
        cmd: line.clone(),
        source,
    })?;
    let out = Capture::start(child.stdout.take());
    let err = Capture::start(child.stderr.take());
    let pgid = child.id();
    let mut status = wait_until(&mut child, start + timeout, &line)?;
    if status.is_none() {
        let _ = sys::kill_process_group(pgid, libc::SIGTERM);
        if wait_until(&mut child, Instant::now() + TERM_GRACE, &line)?.is_none() {
            let _ = sys::kill_process_group(pgid, libc::SIGKILL);
            let _ = child.kill();
            let _ = child.wait();
        }
        status = None;
    }
    let elapsed = start.elapsed();
    let drained = Instant::now() + DRAIN_GRACE;
    Ok(JobOutput {
        command: line,
        status,
        stdout: out.finish(drained),
        stderr: err.finish(drained),
        elapsed,
    })
}

/// Polls `child` until it exits (`Some`) or `deadline` passes (`None`).
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
    line: &str,
) -> Result<Option<ExitStatus>, HarnessError> {
    let mut pause = Duration::from_micros(200);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Some(status)),
            Ok(None) if Instant::now() >= deadline => return Ok(None),
            Ok(None) => {
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(source) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::Io {
                    what: format!("waiting for `{line}`"),
                    source,
                });
            }
        }
    }
}

/// A pipe read on a helper thread into a shared buffer, so that what was read can be taken
/// even if the pipe never closes.
struct Capture {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Option<mpsc::Receiver<()>>,
}

impl Capture {
    fn start<R: Read + Send + 'static>(pipe: Option<R>) -> Capture {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let Some(mut pipe) = pipe else {
            return Capture { buf, done: None };
        };
        let (tx, rx) = mpsc::channel();
        let shared = buf.clone();
        let spawned = thread::Builder::new()
            .name("testbed-capture".into())
            .spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => shared
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => break,
                    }
                }
                let _ = tx.send(());
            });
        Capture {
            buf,
            done: spawned.ok().map(|_| rx),
        }
    }

    /// Waits until the pipe closed or `deadline`, then returns what was read.
    fn finish(self, deadline: Instant) -> String {
        if let Some(done) = self.done {
            let _ = done.recv_timeout(deadline.saturating_duration_since(Instant::now()));
        }
        let bytes = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns::format_mac;

    #[test]
    fn macs_are_local_unicast_and_distinct() {
        let (a, b, c) = (cluster_mac(0, 0), cluster_mac(0, 1), cluster_mac(1, 0));
        assert_eq!(a[0] & 0x03, 0x02);
        assert_eq!(format_mac(&a), "02:4c:4c:00:00:01");
        assert_ne!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn bounded_run_kills_the_whole_group() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo started; sleep 30 & sleep 30; echo never"]);
        let out = run_bounded(&mut cmd, Duration::from_millis(300)).unwrap();
        assert!(out.timed_out(), "{out}");
        assert_eq!(out.stdout, "started\n", "{out}");
        // The background sleep held the pipe too: it is gone, or finish() would have
        // waited DRAIN_GRACE; well below TERM_GRACE + DRAIN_GRACE means both died on TERM.
        assert!(out.elapsed < Duration::from_secs(2), "{out}");
    }

    #[test]
    fn bounded_run_reports_status_and_output() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo out; echo err >&2; exit 3"]);
        let out = run_bounded(&mut cmd, Duration::from_secs(10)).unwrap();
        assert_eq!(out.status.and_then(|s| s.code()), Some(3), "{out}");
        assert!(!out.success());
        assert_eq!(
            (out.stdout.as_str(), out.stderr.as_str()),
            ("out\n", "err\n")
        );
    }
}
