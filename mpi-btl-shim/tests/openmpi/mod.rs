//! Open MPI with btl/llc as the MPI tests build and run it (tests/mpi.rs on the test
//! beds, tests/slurm.rs under Slurm): the component built against the system Open MPI and
//! this build's shim, the MPI test programs, the environment that makes Open MPI load
//! the component, and the check of the counters every rank prints at finalize.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Where Debian's Open MPI keeps its components.
const SYSTEM_COMPONENTS: &str = "/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3";

pub struct Built {
    /// Directory of mca_btl_llc.so and the MPI programs (mpi_check, mbw_mr,
    /// kernels).
    pub dir: PathBuf,
    /// Directory of the libmpi_btl_shim.so the component was linked with.
    pub shim_dir: PathBuf,
}

/// Builds (once per test process) btl/llc and the MPI test programs.
pub fn build() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        for tool in ["mpirun", "mpicc", "make", "cc"] {
            let found = Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            assert!(
                found,
                "{tool} not found: run scripts/install-deps.sh (openmpi-bin, libopenmpi-dev)"
            );
        }
        let profile = testbed::cdylib::profile_dir();
        let shim_dir = testbed::cdylib::cdylib_dir("libmpi_btl_shim.so");
        let dir = profile.join("btl-llc");
        std::fs::create_dir_all(&dir).expect("output directory");
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new("make")
            .arg("-C")
            .arg(crate_dir.join("component"))
            .arg(format!("SHIM_DIR={}", shim_dir.display()))
            .arg(format!("OUT={}", dir.display()))
            .output()
            .expect("running make");
        assert!(
            out.status.success(),
            "building mca_btl_llc.so failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        for program in [
            "mpi_check",
            "mbw_mr",
            "kernels",
            "pingpong_until",
            "mpi_latency",
        ] {
            let out = Command::new("mpicc")
                .args(["-O2", "-Wall", "-pthread", "-o"])
                .arg(dir.join(program))
                .arg(crate_dir.join(format!("mpi-tests/{program}.c")))
                // kernels' FFT needs libm (cos, sin); the others do not mind.
                .arg("-lm")
                .output()
                .expect("running mpicc");
            assert!(
                out.status.success(),
                "building {program} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Built { dir, shim_dir }
    })
}

impl Built {
    /// `mca_component_path` (`OMPI_MCA_mca_component_path`): Debian's components and
    /// btl/llc of this build.
    pub fn component_path(&self) -> String {
        format!("{SYSTEM_COMPONENTS}:{}", self.dir.display())
    }

    /// `LD_LIBRARY_PATH` for the ranks: cargo's names target/<profile> before its deps/,
    /// and an earlier `cargo build` may have left an older shim there, which would win
    /// over the component's RUNPATH: the linked one goes first.
    pub fn library_path(&self) -> OsString {
        let inherited = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
        std::env::join_paths(
            std::iter::once(self.shim_dir.clone()).chain(std::env::split_paths(&inherited)),
        )
        .expect("library path")
    }
}

/// The `btl/llc stats:` lines of a job's output: one per rank, each with messages both
/// ways.
pub fn check_stats(stderr: &str, np: usize) {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("btl/llc stats:"))
        .collect();
    assert_eq!(
        lines.len(),
        np,
        "expected one btl/llc stats line per rank\n{}",
        stderr
    );
    for l in lines {
        let num = |key: &str| -> u64 {
            let rest = l
                .split(key)
                .nth(1)
                .unwrap_or_else(|| panic!("{key} in {l}"));
            rest.split_whitespace().next().unwrap().parse().unwrap()
        };
        assert!(num(": sent ") > 0 && num("received ") > 0, "idle rank: {l}");
        println!("{l}");
    }
}
