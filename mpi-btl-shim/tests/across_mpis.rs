//! One MPI program (`mpi-tests/mpi_latency.c`: 8-byte one-way latency and
//! 1 MiB ping-pong throughput) under every MPI and transport this stack
//! serves, on one multi-host bed, in one run: Debian's Open MPI 4.1 over
//! btl/llc, over mtl/ofi with the libfabric provider llc, and over btl/tcp;
//! MPICH 5 from PyPI over ch4:ofi with llc, with libfabric's tcp provider,
//! and over ch4:ucx with UCX's tcp transport. The figures of issue 45's
//! performance items (docs/BENCHMARKS.md); a benchmark, never asserted.
//!
//! ```text
//! cargo build --release -p libfabric-llc
//! cargo test --release -p mpi-btl-shim --test across_mpis -- --ignored --nocapture
//! ```
//! `LLC_BENCH_MTU` (default 9000), `LLC_BENCH_ROUNDS` (2),
//! `LLC_BENCH_TRIPS` (20000 8-byte round trips per batch), `LLC_BENCH_ONLY`
//! (run only the set-ups whose names contain it, e.g. `mtl/ofi`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use testbed::pypi::PypiMpi;
use testbed::{forward_env, require_root, run_bounded, Cluster, JobOutput};

// Shared with tests/mpi.rs and tests/slurm.rs; this file uses only the build.
#[allow(dead_code)]
mod openmpi;

/// One set-up: a name and how to start `mpi_latency` under it.
struct Setup<'a> {
    name: &'static str,
    run: Box<dyn Fn(&str) -> JobOutput + 'a>,
}

/// The provider under its installed name, in a directory of its own.
fn provider_dir() -> PathBuf {
    let lib = testbed::cdylib::cdylib_dir("libllc_fi.so").join("libllc_fi.so");
    let dir = testbed::cdylib::profile_dir().join("across-mpis-provider");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&lib, dir.join("libllc-fi.so")).unwrap();
    dir
}

/// `(mpi_latency's 8-byte one-way µs, 1 MiB MB/s)` from a run's output.
fn figures(out: &JobOutput) -> Option<(f64, f64)> {
    let text = out.to_string();
    let num = |prefix: &str| {
        text.lines()
            .find_map(|l| l.split_once(prefix).map(|(_, r)| r.to_owned()))
            .and_then(|r| r.split_whitespace().next()?.parse::<f64>().ok())
    };
    Some((
        num("mpi_latency: 8 B one-way ")?,
        num("mpi_latency: 1048576 B one-way ")?,
    ))
}

#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn mpi_latency_over_every_mpi_and_transport() {
    require_root!();
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let mtu: u32 = env("LLC_BENCH_MTU", "9000").parse().expect("LLC_BENCH_MTU");
    let rounds: usize = env("LLC_BENCH_ROUNDS", "2").parse().expect("rounds");
    let trips = env("LLC_BENCH_TRIPS", "20000");
    let built = openmpi::build();
    let provider = provider_dir();
    let mpich = testbed::pypi::install(testbed::pypi::MPICH).expect("MPICH 5 from PyPI");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi-tests/mpi_latency.c");
    let mpich_program = mpich
        .build(&source)
        .expect("mpi_latency with MPICH's mpicc");
    let bed = Cluster::new(2, mtu).expect("cluster bed");
    let timeout = Duration::from_secs(600);
    // A key for the MPICH runs over llc, as btl/llc (which draws one) and
    // mtl/ofi (Open MPI's job secret) are keyed: like against like.
    let key = format!("across-mpis-{}", std::process::id());

    let ompi4 = |mca: Vec<(&'static str, String)>, fi: bool| {
        let (bed, built, provider) = (&bed, built, provider.clone());
        move |trips: &str| {
            let mut cmd = bed.mpirun(1);
            for (k, v) in &mca {
                cmd.args(["--mca", k, v]);
            }
            forward_env(
                &mut cmd,
                "OMPI_MCA_mca_component_path",
                built.component_path(),
            );
            forward_env(&mut cmd, "LD_LIBRARY_PATH", built.library_path());
            if fi {
                forward_env(&mut cmd, "FI_PROVIDER_PATH", &provider);
            }
            cmd.arg(built.dir.join("mpi_latency")).arg(trips);
            run_bounded(&mut cmd, timeout).expect("mpirun runs")
        }
    };
    let mpich_run = |genv: Vec<(&'static str, String)>| {
        let (bed, mpich, program): (&Cluster, &PypiMpi, PathBuf) =
            (&bed, &mpich, mpich_program.clone());
        move |trips: &str| {
            let mut cmd = mpich.mpiexec(bed, 1);
            for (k, v) in &genv {
                cmd.args(["-genv", k, v]);
            }
            cmd.arg(&program).arg(trips);
            run_bounded(&mut cmd, timeout).expect("mpiexec runs")
        }
    };
    let llc_path = format!(
        "{}:{}",
        provider.display(),
        mpich.lib.join("libfabric").display()
    );
    let setups = [
        Setup {
            name: "ompi4 btl/llc",
            run: Box::new(ompi4(
                vec![("pml", "ob1".into()), ("btl", "self,vader,llc".into())],
                false,
            )),
        },
        Setup {
            name: "ompi4 mtl/ofi llc",
            run: Box::new(ompi4(
                vec![
                    ("pml", "cm".into()),
                    ("mtl", "ofi".into()),
                    ("mtl_ofi_provider_include", "llc".into()),
                ],
                true,
            )),
        },
        Setup {
            name: "ompi4 btl/tcp",
            run: Box::new(ompi4(
                vec![
                    ("pml", "ob1".into()),
                    ("btl", "self,vader,tcp".into()),
                    ("btl_tcp_if_include", bed.subnet()),
                ],
                false,
            )),
        },
        Setup {
            name: "mpich ofi llc",
            run: Box::new(mpich_run(vec![
                ("MPICH_CH4_NETMOD", "ofi".into()),
                ("FI_PROVIDER", "llc".into()),
                ("FI_PROVIDER_PATH", llc_path.clone()),
                ("LLC_AUTH_KEY", key.clone()),
            ])),
        },
        Setup {
            name: "mpich ofi tcp",
            run: Box::new(mpich_run(vec![
                ("MPICH_CH4_NETMOD", "ofi".into()),
                ("FI_PROVIDER", "tcp".into()),
                ("FI_TCP_IFACE", testbed::CLUSTER_IFNAME.into()),
            ])),
        },
        Setup {
            name: "mpich ucx tcp",
            run: Box::new(mpich_run(vec![
                ("MPICH_CH4_NETMOD", "ucx".into()),
                ("UCX_TLS", "self,tcp".into()),
                ("UCX_NET_DEVICES", testbed::CLUSTER_IFNAME.into()),
            ])),
        },
    ];
    if let Ok(only) = std::env::var("LLC_BENCH_ONLY") {
        for s in setups.iter().filter(|s| s.name.contains(&only)) {
            let out = (s.run)(&trips);
            println!("{}: {:?}\n{out}", s.name, figures(&out));
        }
        return;
    }
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); setups.len()];
    for round in 0..rounds {
        for (i, s) in setups.iter().enumerate() {
            let out = (s.run)(&trips);
            let f = figures(&out);
            assert!(
                out.success() && f.is_some(),
                "{} (round {round}):\n{out}",
                s.name
            );
            let (lat, bw) = f.unwrap();
            println!(
                "round {round} {}: 8 B one-way {lat:.2} µs, 1 MiB {bw:.0} MB/s ({:.1?})",
                s.name, out.elapsed
            );
            results[i].push((lat, bw));
        }
    }
    let best = |i: usize| {
        let r = &results[i];
        (
            r.iter().map(|x| x.0).fold(f64::MAX, f64::min),
            r.iter().map(|x| x.1).fold(0.0, f64::max),
        )
    };
    println!("\nMTU {mtu}, 2 hosts x 1 rank, best of {rounds} rounds");
    println!("| set-up | 8 B one-way µs | 1 MiB MB/s |");
    println!("|---|---|---|");
    for (i, s) in setups.iter().enumerate() {
        let (l, b) = best(i);
        println!("| {} | {l:.2} | {b:.0} |", s.name);
    }
    let (btl, mtl, mpich_llc, ofi_tcp, ucx_tcp) = (best(0), best(1), best(3), best(4), best(5));
    println!(
        "mtl/ofi over llc minus btl/llc, 8 B: {:+.2} µs",
        mtl.0 - btl.0
    );
    println!(
        "MPICH over llc, 8 B: {:.2}x ofi/tcp, {:.2}x ucx/tcp; 1 MiB: {:.2}x btl/llc's, {:.2}x ofi/tcp, {:.2}x ucx/tcp",
        mpich_llc.0 / ofi_tcp.0,
        mpich_llc.0 / ucx_tcp.0,
        mpich_llc.1 / btl.1,
        mpich_llc.1 / ofi_tcp.1,
        mpich_llc.1 / ucx_tcp.1
    );
}
