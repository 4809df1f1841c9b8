//! Open MPI over btl/llc started by Slurm (the bed of `testbed::slurm`: 2 nodes with 2
//! CPUs each): ranks direct-launched by `srun --mpi=pmix` (Slurm's PMIx server wires them
//! up, no mpirun), mpirun inside an `sbatch` allocation (it starts its daemons with
//! srun), and a rank killed with SIGKILL, which ends the step with nothing left behind.
//!
//! Ranks run with `--mca btl self,vader,llc`: btl/vader carries what stays on a node,
//! btl/llc everything between the nodes, and every rank's counters (printed at finalize)
//! must show traffic. Root needed (skipped otherwise); Slurm, munge and Open MPI come from
//! scripts/install-deps.sh.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use testbed::slurm::Slurm;
use testbed::{require_root, run_bounded, Cluster, JobOutput};

mod openmpi;
use openmpi::{build, check_stats};

/// One job at a time: they would fight over the 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// Bound of one job (mpi_check takes a few seconds here).
const JOB: Duration = Duration::from_secs(240);

/// 2 nodes, 2 CPUs each, MTU 9000 (as the cluster tests of tests/mpi.rs).
fn bed() -> Slurm {
    Slurm::start(Cluster::new(2, 9000).expect("cluster bed"), 2).expect("Slurm bed")
}

/// [`bed`] with the stack's job epilog (scripts/slurm-epilog.sh) on every node, running
/// this build's llc-stat (`cargo build -p llc-stat`; the workspace's tests build it).
fn bed_with_epilog() -> Slurm {
    let llc_stat = testbed::cdylib::binary("llc-stat", "llc-stat").expect("llc-stat");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/slurm-epilog.sh");
    let cluster = Cluster::new(2, 9000).expect("cluster bed");
    // slurmd runs the epilog with a bare environment: a wrapper names llc-stat.
    let epilog = cluster.scratch_dir().join("epilog.sh");
    std::fs::write(
        &epilog,
        format!(
            "#!/bin/sh\nLLC_STAT={} exec {}\n",
            llc_stat.display(),
            script.display()
        ),
    )
    .expect("writing the epilog");
    std::fs::set_permissions(&epilog, std::fs::Permissions::from_mode(0o755))
        .expect("chmod the epilog");
    Slurm::start_with(cluster, 2, &format!("Epilog={}\n", epilog.display())).expect("Slurm bed")
}

/// The environment that makes the ranks load btl/llc of this build, use it between
/// nodes with `backend`, and print its counters; nothing else of btl/llc's is set (no
/// interface, no key: the job draws one).
fn mpi_env(cmd: &mut Command, backend: &str) {
    let built = build();
    cmd.env("OMPI_MCA_mca_component_path", built.component_path())
        .env("LD_LIBRARY_PATH", built.library_path())
        .env("OMPI_MCA_pml", "ob1")
        .env("OMPI_MCA_btl", "self,vader,llc")
        .env("OMPI_MCA_btl_llc_backend", backend)
        .env("OMPI_MCA_btl_llc_print_stats", "1")
        .env_remove("OMPI_MCA_btl_llc_if")
        .env_remove("LLC_AUTH_KEY");
}

/// `srun --mpi=pmix -N 2 -n 4 ARGS...` with [`mpi_env`].
fn srun_pmix(slurm: &Slurm, backend: &str, extra: &[&str], args: &[&str]) -> JobOutput {
    let mut cmd = slurm.command("srun");
    cmd.args(["--mpi=pmix", "-N", "2", "-n", "4"])
        .args(extra)
        .args(args);
    mpi_env(&mut cmd, backend);
    let out = run_bounded(&mut cmd, JOB).expect("starting srun");
    assert!(!out.timed_out(), "srun did not end in time:\n{out}");
    out
}

/// Every rank's counters show traffic over the nodes' `eth0`.
fn check_llc_between_nodes(text: &str) {
    check_stats(text, 4);
    for l in text.lines().filter(|l| l.starts_with("btl/llc stats:")) {
        assert!(
            l.contains(" if eth0 "),
            "every rank uses its node's eth0: {l}"
        );
    }
}

/// `srun --mpi=pmix -N 2 -n 4 mpi_check`: direct launch through Slurm's PMIx server,
/// two ranks on each node, btl/llc (AF_PACKET) between the nodes.
#[test]
fn srun_pmix_2_nodes_x_2_tasks_over_llc() {
    require_root!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = bed();
    let program = build().dir.join("mpi_check");
    let out = srun_pmix(&slurm, "packet", &[], &[program.to_str().unwrap()]);
    assert!(
        out.success() && out.stdout.contains("mpi_check: OK ranks=4"),
        "{out}"
    );
    check_llc_between_nodes(&out.stderr);
    assert_eq!(
        out.stderr.matches("transport llc/af_packet").count(),
        4,
        "{out}"
    );
    println!("srun --mpi=pmix, 2 nodes x 2 tasks: {:.1?}", out.elapsed);
}

/// A batch script that runs mpirun inside its allocation: mpirun learns the nodes and
/// slots from Slurm and starts its daemons with srun (no rsh agent).
#[test]
fn sbatch_runs_mpirun_in_its_allocation() {
    require_root!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = bed();
    let program = build().dir.join("mpi_check");
    let script = format!(
        "#!/bin/sh\n\
         #SBATCH -N 2\n\
         #SBATCH --ntasks-per-node=2\n\
         exec mpirun --allow-run-as-root --bind-to none \
         --mca oob_tcp_if_include {subnet} {program}\n",
        subnet = slurm.cluster().subnet(),
        program = program.display(),
    );
    let (mut sbatch, output) = slurm.sbatch(&script).expect("writing the script");
    mpi_env(&mut sbatch, "packet");
    let out = run_bounded(&mut sbatch, JOB).expect("starting sbatch");
    let text = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(
        out.success() && text.contains("mpi_check: OK ranks=4"),
        "{out}\n--- job output:\n{text}"
    );
    check_llc_between_nodes(&text);
    println!("sbatch + mpirun, 2 nodes x 2 tasks: {:.1?}", out.elapsed);
}

/// A rank killed with SIGKILL (AF_XDP, so that the nodes' interfaces carry the stack's
/// XDP program while the job runs): Slurm's PMIx server reports the lost task, `srun -K`
/// ends the step and names the task, and nothing is left on the nodes: no process of the
/// step, no XDP program on `eth0`, nothing of the stack in `/dev/shm` once the job's
/// epilog ran (the killed ranks' statistics pages: a process killed with SIGKILL cannot
/// remove its own; scripts/slurm-epilog.sh does).
#[test]
fn a_killed_rank_ends_the_step_and_leaves_nothing() {
    require_root!();
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = bed_with_epilog();
    let program = build().dir.join("mpi_check");
    let out = srun_pmix(
        &slurm,
        "xdp",
        &["-K"],
        &[program.to_str().unwrap(), "kill", "3"],
    );
    assert!(
        !out.success(),
        "the step succeeded although a task died:\n{out}"
    );
    assert!(
        out.stderr.contains("mpi_check: rank 3: killing myself")
            && out.stderr.contains("h1: task 3: Killed"),
        "{out}"
    );
    assert!(out.elapsed < Duration::from_secs(60), "{out}");
    for (i, host) in slurm.cluster().hosts().iter().enumerate() {
        slurm
            .wait_node_empty(i, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        let link = host
            .ns
            .ip(&["-d", "link", "show", "eth0"])
            .expect("ip link");
        assert!(
            !link.contains("xdp"),
            "{}: XDP left on eth0:\n{link}",
            host.hostname
        );
        let shm = slurm.node_path(i, "/dev/shm").expect("node running");
        let left: Vec<String> = std::fs::read_dir(&shm)
            .expect("the node's /dev/shm")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        // The epilog runs once srun returned: wait for it (bounded).
        let pages = || -> Vec<String> {
            std::fs::read_dir(shm.join("llc-stack"))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut pause = Duration::from_millis(10);
        while !pages().is_empty() && Instant::now() < deadline {
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
        let stack = pages();
        assert!(
            stack.is_empty(),
            "{}: the stack left {stack:?} in /dev/shm/llc-stack (all of /dev/shm: {left:?})\n{}",
            host.hostname,
            slurm.slurmd_log(i)
        );
        println!("{}: /dev/shm after the job: {left:?}", host.hostname);
    }
}
