//! The migrating-task ring started by Slurm: `examples/pmix_ring` under
//! `srun --mpi=pmix -N 2 -n 4` on the Slurm bed (`testbed::slurm`), four runtimes (two
//! per host) that learn their host numbers, the job's key and each other's addresses
//! through PMIx; each task sends to the next, moves one runtime on, and sends again from
//! there. Root needed (skipped otherwise).

use std::time::Duration;

use testbed::slurm::Slurm;
use testbed::{run_bounded, Cluster};

#[test]
fn the_ring_of_migrating_tasks_under_srun() {
    testbed::require_root!();
    let slurm = Slurm::start(Cluster::new(2, 1500).expect("cluster"), 2).expect("Slurm bed");
    let mut srun = slurm.command("srun");
    srun.args(["--mpi=pmix", "-K", "-N", "2", "-n", "4"])
        .arg(testbed::cdylib::example("migrate", "pmix_ring"))
        .arg("llc://eth0?port=0")
        .env_remove("LLC_AUTH_KEY");
    let out = run_bounded(&mut srun, Duration::from_secs(120)).expect("running srun");
    assert!(out.success(), "{out}");
    for h in 0..4u32 {
        let (p, pp) = ((h + 3) % 4, (h + 2) % 4);
        let want =
            format!("host {h} of 4: lap1 from task {p}, task {p} arrived, lap2 from task {pp}");
        assert!(out.stdout.contains(&want), "missing {want:?}:\n{out}");
    }
}
