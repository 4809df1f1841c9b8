//! The Slurm bed (`testbed::slurm`): Debian's slurmctld, a slurmd per simulated host and a
//! munged of the run's own, as a cluster's users see them (srun, sbatch), and torn down
//! with nothing left behind. Root needed (skipped otherwise); the packages come from
//! scripts/install-deps.sh (slurmd, slurmctld, slurm-client, munge).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use testbed::slurm::Slurm;
use testbed::{run_bounded, Cluster, JobOutput};

/// Bound of a job of these tests (each takes well under a second).
const JOB: Duration = Duration::from_secs(60);

/// One bed at a time: they would fight over the 2 cores.
static BED: Mutex<()> = Mutex::new(());

fn bed() -> Slurm {
    Slurm::start(Cluster::new(2, 1500).expect("cluster"), 2).expect("Slurm bed")
}

fn run(cmd: &mut std::process::Command, timeout: Duration) -> JobOutput {
    run_bounded(cmd, timeout).expect("starting a Slurm client")
}

/// Both nodes come up idle with the cluster's names; `srun -N 2 -n 4` places two tasks on
/// each, and each task sees its node's hostname and address; dropping the bed ends every
/// daemon and removes the run's files.
#[test]
fn srun_runs_tasks_on_every_node_and_the_bed_leaves_nothing() {
    testbed::require_root!();
    let _one = BED.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = bed();
    let states = slurm.node_states().expect("sinfo");
    assert_eq!(
        states,
        vec![("h0".into(), "idle".into()), ("h1".into(), "idle".into())]
    );

    let mut srun = slurm.command("srun");
    srun.args(["-N", "2", "-n", "4", "-l", "sh", "-c"])
        .arg("echo $(hostname) $SLURMD_NODENAME $(ip -4 -o addr show eth0 | awk '{print $4}')");
    let out = run(&mut srun, JOB);
    assert!(out.success(), "{out}");
    let mut by_task = BTreeMap::new();
    for line in out.stdout.lines() {
        let (task, rest) = line.split_once(": ").expect("srun -l prefixes the task");
        by_task.insert(
            task.trim().parse::<u32>().expect("task number"),
            rest.to_string(),
        );
    }
    let hosts = slurm.cluster().hosts();
    let expect = |h: usize| format!("h{h} h{h} {}/24", hosts[h].ipv4);
    let want: BTreeMap<u32, String> = [
        (0, expect(0)),
        (1, expect(0)),
        (2, expect(1)),
        (3, expect(1)),
    ]
    .into_iter()
    .collect();
    assert_eq!(by_task, want, "{out}");
    for i in 0..2 {
        slurm
            .wait_node_empty(i, JOB)
            .unwrap_or_else(|e| panic!("{e}"));
    }

    let pids = slurm.daemon_pids();
    let dir = slurm.conf().parent().expect("run directory").to_path_buf();
    assert!(
        pids.iter().all(|&p| testbed::process::running(p)),
        "{pids:?}"
    );
    drop(slurm);
    let alive: Vec<u32> = pids
        .into_iter()
        .filter(|&p| testbed::process::running(p))
        .collect();
    assert!(alive.is_empty(), "daemons left behind: {alive:?}");
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        !Path::new(&dir).parent().unwrap().exists(),
        "cluster directory left behind"
    );
}

/// A batch script runs on the first node of its allocation and starts a step on both
/// nodes; `sbatch --wait` returns the job's status.
#[test]
fn sbatch_runs_a_script_in_its_allocation() {
    testbed::require_root!();
    let _one = BED.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = bed();
    let (mut sbatch, output) = slurm
        .sbatch(
            "#!/bin/sh\n\
             #SBATCH -N 2\n\
             #SBATCH --ntasks-per-node=2\n\
             echo \"batch on $(hostname) nodes $SLURM_JOB_NODELIST tasks $SLURM_NTASKS\"\n\
             srun hostname | sort\n\
             exit 3\n",
        )
        .expect("writing the script");
    let out = run(&mut sbatch, JOB);
    assert_eq!(out.status.and_then(|s| s.code()), Some(3), "{out}");
    let text = std::fs::read_to_string(&output).expect("the job's output");
    assert_eq!(
        text, "batch on h0 nodes h[0-1] tasks 4\nh0\nh0\nh1\nh1\n",
        "{out}"
    );
}

/// A task killed with SIGKILL ends its step (`srun -K`, kill on bad exit): srun names the
/// task and the signal, and no process of the step is left on either node.
#[test]
fn a_killed_task_ends_the_step() {
    testbed::require_root!();
    let _one = BED.lock().unwrap_or_else(|e| e.into_inner());
    let slurm = bed();
    let mut srun = slurm.command("srun");
    srun.args(["-K", "-N", "2", "-n", "4", "sh", "-c"])
        .arg("if [ \"$SLURM_PROCID\" = 3 ]; then kill -9 $$; fi; exec sleep 600");
    let out = run(&mut srun, JOB);
    assert!(!out.timed_out(), "the step did not end: {out}");
    assert!(!out.success(), "{out}");
    assert!(out.stderr.contains("h1: task 3: Killed"), "{out}");
    assert!(out.elapsed < Duration::from_secs(30), "{out}");
    for i in 0..2 {
        slurm
            .wait_node_empty(i, JOB)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
