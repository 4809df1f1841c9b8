//! BMI servers and clients found through PMIx: `examples/pmix_job` started by
//! `srun --mpi=pmix -N 2 -n 4` on the Slurm bed (`testbed::slurm`): rank 0 serves
//! `bmi_llc` on its host's eth0, ranks 1..3 (one beside it, two on the other host) learn
//! its address and the job's key through PMIx, send a request and get their reply. Root
//! needed (skipped otherwise).

use std::time::Duration;

use testbed::slurm::Slurm;
use testbed::{run_bounded, Cluster};

#[test]
fn a_server_and_its_clients_find_each_other_through_pmix() {
    testbed::require_root!();
    let slurm = Slurm::start(Cluster::new(2, 1500).expect("cluster"), 2).expect("Slurm bed");
    let mut srun = slurm.command("srun");
    srun.args(["--mpi=pmix", "-K", "-N", "2", "-n", "4"])
        .arg(testbed::cdylib::example("bmi", "pmix_job"))
        .arg("llc://eth0?port=0")
        .env_remove("LLC_AUTH_KEY")
        .env_remove("BMI_LLC_IFACE");
    let out = run_bounded(&mut srun, Duration::from_secs(120)).expect("running srun");
    assert!(out.success(), "{out}");
    assert!(out.stdout.contains("server: served 3 clients"), "{out}");
    for r in 1..4 {
        let want = format!("client {r}: reply \"ok {r}\" from server rank 0");
        assert!(out.stdout.contains(&want), "missing {want:?}:\n{out}");
    }
}
