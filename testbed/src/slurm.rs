//! A Slurm cluster on the simulated hosts of a [`Cluster`]: Debian's slurm-wlm 22.05 and
//! munge, started and torn down by the harness, for jobs started the way a cluster's users
//! start them (`srun`, `sbatch`, `srun --mpi=pmix`).
//!
//! [`Slurm::start`] takes a [`Cluster`] and runs, all as root and all under a directory of
//! the cluster's (so removed with it):
//! - one `munged` with a key of its own drawn for this run and its own socket, in the
//!   machine's namespaces (a munge socket is a file, reachable from every host); every
//!   daemon and client finds it through `AuthInfo=socket=...` in the run's `slurm.conf`;
//! - `slurmctld` in host 0's network namespace (host 0 is the controller and, like every
//!   host, a compute node);
//! - one `slurmd -N h<i>` per host, through [`Cluster::command`]: in the host's network
//!   namespace, with the host's hostname, `/dev/shm` and `/etc/hosts`, in a PID namespace
//!   of its own that holds its job steps and tasks, and with a private mount of the host's
//!   own directory on the run's `TmpFS` path (Slurm's PMIx plugin puts its per-step
//!   directories there, and two nodes sharing one collide: "Cannot create directory
//!   .../spmix_appdir_0_2.0: File exists").
//!
//! The configuration asks for nothing the bed cannot give: `ProctrackType=proctrack/linuxproc`
//! (the tasks of a step are found through /proc, which the node's PID namespace keeps to
//! the node), `TaskPlugin=task/none`, no accounting, `MpiDefault=none` (`srun --mpi=pmix`
//! selects Debian's `mpi_pmix_v4`). slurmd 22.05 initializes a cgroup plugin whatever the
//! other plugins are, and its autodetection fails on this machine (a tmpfs on
//! /sys/fs/cgroup with v1 hierarchies under it), so `cgroup.conf` names `cgroup/v1`;
//! nothing is constrained and no cgroup is created. The ports are Slurm's defaults (6817,
//! 6818): every daemon listens in a network namespace of its run, so concurrent beds
//! cannot collide. Nodes declare `CPUs` as the caller asks (`config_overrides`), whatever
//! the machine has, so a test can place 2 tasks on each node of a 2-core machine.
//!
//! Jobs run as root: the bed refuses a cluster that already runs its commands as an
//! ordinary user ([`Cluster::login_as`]), since the daemons must stay root.
//!
//! Dropping the [`Slurm`] kills the daemons, which ends every job step and task with them
//! (each slurmd's PID namespace goes down as a whole), then `munged`, then the cluster.
//!
//! ```no_run
//! use std::time::Duration;
//! use testbed::{run_bounded, slurm::Slurm, Cluster};
//!
//! testbed::require_root!(Ok(()));
//! let slurm = Slurm::start(Cluster::new(2, 1500)?, 2)?; // h0, h1 with 2 CPUs each, idle
//! let mut srun = slurm.command("srun");
//! srun.args(["-N", "2", "-n", "4", "hostname"]);
//! let out = run_bounded(&mut srun, Duration::from_secs(30))?;
//! assert!(out.success(), "{out}");
//! # Ok::<(), testbed::HarnessError>(())
//! ```

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::cluster::{find_program, HostDaemon};
use crate::netns::{run_checked, HarnessError};
use crate::process::{die_with_parent, Background};
use crate::Cluster;

/// slurmctld's port: Slurm's default. Every run has network namespaces of its own.
pub const SLURMCTLD_PORT: u16 = 6817;
/// slurmd's port: Slurm's default, for the same reason.
pub const SLURMD_PORT: u16 = 6818;

/// The partition every node is in (the default one).
pub const PARTITION: &str = "bed";

/// How long a daemon may take to say it runs.
const DAEMON_START: Duration = Duration::from_secs(30);
/// How long the nodes may take to register and become idle.
const NODES_IDLE: Duration = Duration::from_secs(60);
/// Bound of one query (`sinfo`, `mungekey`).
const QUERY: Duration = Duration::from_secs(20);

/// The Slurm programs the bed runs, found in PATH or the usual (s)bin directories.
struct Programs {
    munged: PathBuf,
    mungekey: PathBuf,
    slurmctld: PathBuf,
    slurmd: PathBuf,
    sinfo: PathBuf,
}

impl Programs {
    fn find() -> Result<Programs, HarnessError> {
        let find = |name: &str, package: &str| {
            find_program(name).ok_or_else(|| {
                HarnessError::Setup(format!(
                    "`{name}` not found: the Slurm bed needs Debian's {package} \
                     (scripts/install-deps.sh installs it)"
                ))
            })
        };
        Ok(Programs {
            munged: find("munged", "munge")?,
            mungekey: find("mungekey", "munge")?,
            slurmctld: find("slurmctld", "slurmctld")?,
            slurmd: find("slurmd", "slurmd")?,
            sinfo: find("sinfo", "slurm-client")?,
        })
    }
}

/// A Slurm cluster on the hosts of a [`Cluster`]; see the [module documentation](self).
#[derive(Debug)]
pub struct Slurm {
    // Dropped in declaration order: the nodes (with their steps and tasks), the
    // controller, munged, then the cluster (and with it the run's directory).
    slurmds: Vec<HostDaemon>,
    slurmctld: HostDaemon,
    munged: Background,
    dir: PathBuf,
    conf: PathBuf,
    cluster: Cluster,
}

impl Slurm {
    /// Starts munged, slurmctld and one slurmd per host of `cluster`, each node declaring
    /// `cpus_per_node` CPUs, and returns once every node is idle.
    pub fn start(cluster: Cluster, cpus_per_node: u32) -> Result<Slurm, HarnessError> {
        Slurm::start_with(cluster, cpus_per_node, "")
    }

    /// [`Slurm::start`] with `extra` appended to `slurm.conf` (whole lines, before the
    /// nodes), e.g. `Epilog=/path/to/script\n`.
    pub fn start_with(
        cluster: Cluster,
        cpus_per_node: u32,
        extra: &str,
    ) -> Result<Slurm, HarnessError> {
        if cluster.user().is_some() {
            return Err(HarnessError::InvalidArgument(
                "the Slurm bed runs its daemons as root: start it on a cluster without \
                 login_as"
                    .into(),
            ));
        }
        if cpus_per_node == 0 {
            return Err(HarnessError::InvalidArgument(
                "cpus_per_node must be >= 1".into(),
            ));
        }
        let programs = Programs::find()?;
        let dir = cluster.dir().join("slurm");
        let munge = dir.join("munge");
        for d in [&dir, &munge, &dir.join("ctld"), &dir.join("node-tmp")] {
            make_dir(d, 0o755)?;
        }
        make_dir(&dir.join("jobs"), 0o755)?;
        for h in cluster.hosts() {
            let node = dir.join("nodes").join(&h.hostname);
            make_dir(&node.join("spool"), 0o755)?;
            make_dir(&node.join("tmp"), 0o1777)?;
        }

        // munged: a key of this run's, a socket of its own.
        let key = munge.join("munge.key");
        run_checked(
            Command::new(&programs.mungekey)
                .arg("--create")
                .arg(format!("--keyfile={}", key.display())),
            QUERY,
        )?;
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "exec 2>&1; exec {munged} --foreground --socket={m}/socket --key-file={key} \
             --pid-file={m}/munged.pid --log-file={m}/munged.log --seed-file={m}/munged.seed",
            munged = programs.munged.display(),
            m = munge.display(),
            key = key.display(),
        ));
        die_with_parent(&mut cmd, None)?;
        let munged = Background::spawn(&mut cmd, "Created socket", DAEMON_START)
            .map_err(|e| HarnessError::Setup(format!("munged did not start: {e}")))?;

        let conf = dir.join("slurm.conf");
        write(&conf, &slurm_conf(&cluster, &dir, cpus_per_node, extra))?;
        write(&dir.join("cgroup.conf"), CGROUP_CONF)?;

        let slurmctld = host_daemon(
            &cluster,
            0,
            &format!(
                "exec 2>&1; {ctld} -D -f {conf} & wait",
                ctld = programs.slurmctld.display(),
                conf = conf.display()
            ),
            "Running as primary controller",
            "slurmctld",
        )?;
        let mut slurmds = Vec::new();
        for (i, h) in cluster.hosts().iter().enumerate() {
            let script = format!(
                "exec 2>&1; mount --bind {node}/tmp {tmp} || exit 1; \
                 {slurmd} -D -N {name} -f {conf} & wait",
                node = dir.join("nodes").join(&h.hostname).display(),
                tmp = dir.join("node-tmp").display(),
                slurmd = programs.slurmd.display(),
                name = h.hostname,
                conf = conf.display(),
            );
            let what = format!("slurmd of {}", h.hostname);
            slurmds.push(host_daemon(
                &cluster,
                i,
                &script,
                "slurmd started on",
                &what,
            )?);
        }
        let slurm = Slurm {
            slurmds,
            slurmctld,
            munged,
            dir,
            conf,
            cluster,
        };
        slurm.wait_idle(NODES_IDLE, &programs.sinfo)?;
        Ok(slurm)
    }

    /// The cluster the nodes run on.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The run's `slurm.conf` (what `SLURM_CONF` names in [`Slurm::command`]).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The node names, `h0`, `h1`, ... (the cluster's hostnames).
    pub fn nodes(&self) -> Vec<String> {
        self.cluster
            .hosts()
            .iter()
            .map(|h| h.hostname.clone())
            .collect()
    }

    /// A `Command` that runs a Slurm client (`srun`, `sbatch`, `squeue`, ...) or any program
    /// on host 0, the bed's login node, through [`Cluster::command`], with `SLURM_CONF`
    /// naming this run's configuration. `SLURM_*` and `PMIX_*` variables of the calling
    /// process (a test run inside a Slurm job) are not passed on. Run it with
    /// [`crate::run_bounded`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.cluster.command(0, program);
        for (name, _) in std::env::vars_os() {
            let n = name.to_string_lossy();
            if n.starts_with("SLURM_") || n.starts_with("PMIX_") {
                cmd.env_remove(&name);
            }
        }
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// Writes `script` (a batch script, `#!/bin/sh` and `#SBATCH` lines) into the run's
    /// directory and returns `sbatch --wait -o OUTPUT SCRIPT` (a [`Slurm::command`]: add
    /// options before running it) and OUTPUT, the file the job's output goes to. `sbatch
    /// --wait` ends when the job does, with the job's exit status.
    pub fn sbatch(&self, script: &str) -> Result<(Command, PathBuf), HarnessError> {
        static JOBS: AtomicU32 = AtomicU32::new(0);
        let n = JOBS.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join("jobs").join(format!("job{n}.sh"));
        let output = self.dir.join("jobs").join(format!("job{n}.out"));
        write(&path, script)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).map_err(|source| {
            HarnessError::Io {
                what: format!("making {} executable", path.display()),
                source,
            }
        })?;
        let mut cmd = self.command("sbatch");
        cmd.arg("--wait").arg("-o").arg(&output);
        // The script goes last: the caller's options come before it.
        cmd.arg(path);
        Ok((cmd, output))
    }

    /// Every node's state as `sinfo` reports it (`idle`, `alloc`, `down*` ...), by name.
    pub fn node_states(&self) -> Result<Vec<(String, String)>, HarnessError> {
        let sinfo = find_program("sinfo").unwrap_or_else(|| "sinfo".into());
        self.states(&sinfo)
    }

    fn states(&self, sinfo: &Path) -> Result<Vec<(String, String)>, HarnessError> {
        let mut cmd = self.cluster.hosts()[0].ns.command(sinfo);
        cmd.args(["-h", "-N", "-o", "%N %T"])
            .env("SLURM_CONF", &self.conf);
        let out = run_checked(&mut cmd, QUERY)?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.trim().to_string()))
            .collect())
    }

    /// Polls `sinfo` until every node is idle, for at most `timeout`.
    fn wait_idle(&self, timeout: Duration, sinfo: &Path) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(50);
        loop {
            let states = self.states(sinfo)?;
            let idle = states.len() == self.cluster.hosts().len()
                && states.iter().all(|(_, s)| s == "idle");
            if idle {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Setup(format!(
                    "the Slurm nodes are not idle after {timeout:?}: {states:?}\n\
                     slurmctld:\n{}\n{}",
                    self.slurmctld.0.output(),
                    self.slurmds
                        .iter()
                        .map(|d| d.0.output())
                        .collect::<Vec<_>>()
                        .join("\n")
                )));
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(500));
        }
    }

    /// Wait (bounded) until node `i` runs no step or task; the error names
    /// what is left, with the node's slurmd log.
    pub fn wait_node_empty(&self, i: usize, timeout: Duration) -> Result<(), String> {
        let deadline = std::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            let left = self.node_processes(i);
            if left.is_empty() {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                return Err(format!(
                    "node {i} still runs {left:?} after {timeout:?}\n{}",
                    self.slurmd_log(i)
                ));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// The processes of node `i` (its slurmd's PID namespace: job steps and tasks) other
    /// than slurmd and the shell that started it, as (pid, command name). Empty when no job
    /// runs there.
    pub fn node_processes(&self, i: usize) -> Vec<(u32, String)> {
        let Some(init) = self.slurmds.get(i).and_then(HostDaemon::init_pid) else {
            return Vec::new();
        };
        let Ok(ns) = fs::read_link(format!("/proc/{init}/ns/pid")) else {
            return Vec::new();
        };
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        let mut list = Vec::new();
        for e in entries.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            if pid == init || !crate::process::running(pid) {
                continue;
            }
            if fs::read_link(e.path().join("ns/pid")).ok().as_ref() != Some(&ns) {
                continue;
            }
            let comm = fs::read_to_string(e.path().join("comm")).unwrap_or_default();
            let comm = comm.trim().to_string();
            if comm != "slurmd" {
                list.push((pid, comm));
            }
        }
        list
    }

    /// `path` as node `i`'s processes see it (e.g. `/dev/shm`, private to each node), for a
    /// test that checks what a job left behind; `None` if the node's slurmd is gone.
    pub fn node_path(&self, i: usize, path: &str) -> Option<PathBuf> {
        let init = self.slurmds.get(i).and_then(HostDaemon::init_pid)?;
        Some(PathBuf::from(format!("/proc/{init}/root")).join(path.trim_start_matches('/')))
    }

    /// Node `i`'s slurmd log (`SlurmdLogFile`), for failure messages.
    pub fn slurmd_log(&self, i: usize) -> String {
        let name = &self.cluster.hosts()[i].hostname;
        fs::read_to_string(self.dir.join("nodes").join(name).join("slurmd.log")).unwrap_or_default()
    }

    /// The pids of the bed's daemons (munged, slurmctld and the slurmds, each with the
    /// shell that started it), for a test that checks they are gone after the drop.
    pub fn daemon_pids(&self) -> Vec<u32> {
        let mut pids = vec![self.munged.id()];
        for d in std::iter::once(&self.slurmctld).chain(&self.slurmds) {
            pids.push(d.0.id());
            pids.extend(d.init_pid());
        }
        pids
    }
}

/// `cgroup.conf`: see the module documentation.
const CGROUP_CONF: &str = "\
# testbed::slurm: slurmd 22.05 always initializes a cgroup plugin, and autodetection fails
# here (a tmpfs on /sys/fs/cgroup). Nothing is constrained: TaskPlugin=task/none,
# ProctrackType=proctrack/linuxproc.
CgroupPlugin=cgroup/v1
CgroupAutomount=no
IgnoreSystemd=yes
";

/// The run's `slurm.conf`.
fn slurm_conf(cluster: &Cluster, dir: &Path, cpus: u32, extra: &str) -> String {
    let d = dir.display();
    let first = &cluster.hosts()[0];
    let mut conf = format!(
        "# slurm.conf of a testbed::slurm::Slurm run\n\
         ClusterName=llct\n\
         SlurmctldHost={ctld}({ctld_addr})\n\
         SlurmctldPort={SLURMCTLD_PORT}\n\
         SlurmdPort={SLURMD_PORT}\n\
         AuthType=auth/munge\n\
         CredType=cred/munge\n\
         AuthInfo=socket={d}/munge/socket\n\
         SlurmUser=root\n\
         SlurmdUser=root\n\
         StateSaveLocation={d}/ctld\n\
         SlurmctldPidFile={d}/ctld/slurmctld.pid\n\
         SlurmctldLogFile={d}/ctld/slurmctld.log\n\
         SlurmdSpoolDir={d}/nodes/%n/spool\n\
         SlurmdPidFile={d}/nodes/%n/slurmd.pid\n\
         SlurmdLogFile={d}/nodes/%n/slurmd.log\n\
         TmpFS={d}/node-tmp\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         AccountingStorageType=accounting_storage/none\n\
         JobCompType=jobcomp/none\n\
         MpiDefault=none\n\
         SwitchType=switch/none\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_CPU\n\
         SlurmdParameters=config_overrides\n\
         ReturnToService=2\n\
         MailProg=/bin/true\n\
         # A cancelled or failed step's tasks get SIGKILL 2 s after SIGTERM (default 30).\n\
         KillWait=2\n",
        ctld = first.hostname,
        ctld_addr = first.ipv4,
    );
    conf.push_str(extra);
    if !extra.is_empty() && !extra.ends_with('\n') {
        conf.push('\n');
    }
    for h in cluster.hosts() {
        conf.push_str(&format!(
            "NodeName={name} NodeAddr={addr} NodeHostname={name} CPUs={cpus} State=UNKNOWN\n",
            name = h.hostname,
            addr = h.ipv4,
        ));
    }
    conf.push_str(&format!(
        "PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    ));
    conf
}

/// Runs `script` with `/bin/sh -c` on host `i` through [`Cluster::command`] and returns
/// once it printed `ready`. The shell stays the first process of the host command's PID
/// namespace and reaps the job steps that slurmd leaves to it (a slurmd there as the first
/// process would leave them zombies).
fn host_daemon(
    cluster: &Cluster,
    i: usize,
    script: &str,
    ready: &str,
    what: &str,
) -> Result<HostDaemon, HarnessError> {
    let mut cmd = cluster.command(i, "/bin/sh");
    cmd.arg("-c").arg(script);
    die_with_parent(&mut cmd, None)?;
    Background::spawn(&mut cmd, ready, DAEMON_START)
        .map(HostDaemon)
        .map_err(|e| HarnessError::Setup(format!("{what} did not start: {e}")))
}

fn make_dir(path: &Path, mode: u32) -> Result<(), HarnessError> {
    let io_err = |source| HarnessError::Io {
        what: format!("creating {}", path.display()),
        source,
    };
    fs::create_dir_all(path).map_err(io_err)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io_err)
}

fn write(path: &Path, text: &str) -> Result<(), HarnessError> {
    fs::write(path, text).map_err(|source| HarnessError::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}
