//! The PMIx bootstrap under real launchers: `examples/pmix_rounds` (rank 0's value
//! handed to all, then all-gather rounds) started by Open MPI's mpirun on this host, and
//! by `srun --mpi=pmix` across the two nodes of the Slurm bed (root; skipped otherwise).

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use testbed::slurm::Slurm;
use testbed::{run_bounded, Cluster, JobOutput};

/// One job at a time: they would fight over the 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

const JOB: Duration = Duration::from_secs(120);

/// `examples/pmix_rounds`, built on first use (cargo test builds the examples, but a
/// filtered run may not have).
fn example() -> std::path::PathBuf {
    let path = testbed::cdylib::profile_dir().join("examples/pmix_rounds");
    if !path.is_file() {
        let out = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "pmix-boot", "--example", "pmix_rounds"])
            .output()
            .expect("running cargo build");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    path
}

/// Every process printed the same view: rank 0's choice and, per round, every card in
/// rank order.
fn check(out: &JobOutput, n: u32, rounds: u32) {
    assert!(out.success(), "{out}");
    for rank in 0..n {
        let mut want = format!("rank {rank} of {n} ");
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(&want))
            .unwrap_or_else(|| panic!("no line of rank {rank}:\n{out}"));
        want = " first=chosen-by-0".to_string();
        for r in 0..rounds {
            let cards: Vec<String> = (0..n).map(|i| format!("r{r}-from-{i}")).collect();
            want.push_str(&format!(" round{r}={}", cards.join(",")));
        }
        assert!(line.ends_with(&want), "{line}\nwanted the end {want}");
    }
}

#[test]
fn on_its_own_it_says_no_launcher_started_it() {
    let out = Command::new(example())
        .env_remove("PMIX_RANK")
        .env_remove("PMIX_NAMESPACE")
        .output()
        .expect("running pmix_rounds");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not started by a PMIx launcher"));
}

#[test]
fn mpirun_on_this_host() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", "4"])
        .arg(example())
        .arg("3");
    let out = run_bounded(&mut cmd, JOB).expect("running mpirun");
    check(&out, 4, 3);
    for l in 0..4 {
        assert!(out.stdout.contains(&format!("(local {l})")), "{out}");
    }
}

#[test]
fn srun_across_two_nodes() {
    testbed::require_root!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = Slurm::start(Cluster::new(2, 1500).expect("cluster"), 2).expect("Slurm bed");
    let mut cmd = slurm.command("srun");
    cmd.args(["--mpi=pmix", "-N", "2", "-n", "4"])
        .arg(example())
        .arg("3");
    let out = run_bounded(&mut cmd, JOB).expect("running srun");
    check(&out, 4, 3);
    // Two processes per node: local ranks 0 and 1 on each.
    assert_eq!(out.stdout.matches("(local 0)").count(), 2, "{out}");
    assert_eq!(out.stdout.matches("(local 1)").count(), 2, "{out}");
}
