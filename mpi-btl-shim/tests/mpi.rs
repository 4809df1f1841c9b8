//! Open MPI over btl/llc, end to end: builds the component against the system
//! Open MPI and the shim of this build, builds the MPI test program with
//! mpicc, makes one namespace with a port per rank on a bridge, and runs
//! `mpirun --mca pml ob1 --mca btl self,llc` there. Only `self,llc`: no
//! shared-memory or TCP BTL can carry the traffic, and every rank prints its
//! btl/llc counters at finalize, which the tests check.
//!
//! Needs root (namespaces, raw sockets) and Open MPI (`scripts/install-deps.sh`
//! installs openmpi-bin, libopenmpi-dev and netpipe-openmpi); prints SKIPPED
//! when not root. The tests run one at a time (2 cores, up to 4 ranks).
//!
//! `netpipe_llc_vs_tcp`, `netpipe_cluster_shared_vs_exclusive_vs_tcp` and
//! `mbw_mr_cluster_llc_vs_tcp` (ignored by default) are the benchmarks of
//! docs/BENCHMARKS.md, `kernels_cluster_llc_vs_tcp` (seed 002's application
//! kernels) another: `cargo test --release -p mpi-btl-shim --test mpi --
//! --ignored --nocapture NAME`.

use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use msg_layer::transport::floor_work::FloorWork;
use testbed::netns::MultiPort;
use testbed::{forward_env, require_root, run_bounded, Cluster};

mod openmpi;
use openmpi::build;

/// One mpirun at a time: they would fight over the 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

struct Run {
    ok: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// `mpirun -np <np> <args>` inside the namespace, killed after `timeout`.
fn mpirun(
    bed: &MultiPort,
    np: usize,
    mca: &[(&str, &str)],
    args: &[&str],
    timeout: Duration,
) -> Run {
    let built = build();
    let library_path = built.library_path();
    let mut cmd = bed.ns.command("mpirun");
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(np.to_string())
        .args(["--mca", "pml", "ob1"]);
    for (k, v) in mca {
        cmd.args(["--mca", k, v]);
    }
    cmd.args(args)
        .env("OMPI_MCA_mca_component_path", built.component_path())
        .env("OMPI_MCA_btl_llc_if", "llc%d")
        .env("LD_LIBRARY_PATH", library_path)
        // A job with nothing set: btl/llc draws its key.
        .env_remove("LLC_AUTH_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let line = format!("{cmd:?}");
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{line}: {e}"));
    let (mut so, mut se) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut so, &mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut se, &mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for mpirun") {
            break Some(st);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    let Some(status) = status else {
        panic!("{line} did not end within {timeout:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
    };
    Run {
        ok: status.success(),
        code: status.code(),
        stdout,
        stderr,
        elapsed,
    }
}

/// The `btl/llc stats:` lines: one per rank, each with messages both ways.
fn check_stats(run: &Run, np: usize) {
    openmpi::check_stats(&run.stderr, np);
}

/// Run `mpi_check ARGS` over `np` ranks with `self,llc` and the extra MCA
/// parameters; it must succeed, print `ok`, and every rank's btl/llc
/// counters must show traffic.
fn run_mpi_check(np: usize, mca: &[(&str, &str)], args: &[&str], ok: &str) -> Run {
    let bed = MultiPort::new(np, 9000).expect("testbed");
    let program = build().dir.join("mpi_check");
    let mut cmd = vec![program.to_str().unwrap()];
    cmd.extend_from_slice(args);
    let mut all = vec![("btl", "self,llc"), ("btl_llc_print_stats", "1")];
    all.extend_from_slice(mca);
    let run = mpirun(&bed, np, &all, &cmd, Duration::from_secs(240));
    assert!(
        run.ok && run.stdout.contains(ok),
        "mpi_check {args:?} over {np} ranks failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    print!("{}", run.stdout);
    check_stats(&run, np);
    run
}

/// A counter of the `btl/llc stats:` lines, summed over the ranks.
fn stat_sum(run: &Run, key: &str) -> u64 {
    run.stderr
        .lines()
        .filter(|l| l.starts_with("btl/llc stats:"))
        .map(|l| {
            let rest = l
                .split(key)
                .nth(1)
                .unwrap_or_else(|| panic!("{key:?} in {l}"));
            let n = rest
                .trim_start()
                .split([',', ' ', ')'])
                .next()
                .unwrap_or("");
            n.parse::<u64>()
                .unwrap_or_else(|e| panic!("{key:?} in {l}: {e}"))
        })
        .sum()
}

/// Every rank's key fingerprint from its `btl/llc stats:` line (`auth
/// FINGERPRINT (dropped N)`, `auth off` without a key), checking that
/// no rank dropped a frame for its tag.
fn auth_of_ranks(run: &Run) -> Vec<String> {
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("btl/llc stats:"))
        .collect();
    assert!(!lines.is_empty(), "no stats lines:\n{}", run.stderr);
    lines
        .iter()
        .map(|l| {
            let rest = l
                .rsplit(", auth ")
                .next()
                .unwrap_or_else(|| panic!("no auth in {l}"));
            let (fp, dropped) = rest.split_once(" (dropped ").expect("auth (dropped N)");
            assert_eq!(dropped, "0)", "frames dropped for their tag: {l}");
            fp.to_string()
        })
        .collect()
}

/// Every rank authenticated its frames with one key: the same fingerprint
/// on every stats line. Returns it.
fn assert_one_key(run: &Run) -> String {
    let fps = auth_of_ranks(run);
    let first = fps[0].clone();
    assert!(
        first.len() == 8 && first.bytes().all(|b| b.is_ascii_hexdigit()),
        "rank 0 runs without a key ({first}):\n{}",
        run.stderr
    );
    assert!(
        fps.iter().all(|f| *f == first),
        "ranks hold different keys {fps:?}:\n{}",
        run.stderr
    );
    first
}

fn mpi_check(np: usize, mca: &[(&str, &str)]) -> Run {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_mpi_check(np, mca, &[], &format!("mpi_check: OK ranks={np}"));
    println!("{np} ranks, {mca:?}: {:.1?}", run.elapsed);
    run
}

/// By default ob1 is offered put alone (`btl_llc_put`): large contiguous
/// messages move by put, from the sender's buffer placed into the
/// receiver's, data checked. And by default the job is keyed: rank 0 drew
/// a key, both ranks authenticate every frame with it (the same
/// fingerprint; traffic that got through was verified), none dropped.
#[test]
fn mpi_check_2_ranks() {
    require_root!();
    let run = mpi_check(2, &[("btl_llc_backend", "auto")]);
    assert_one_key(&run);
    assert!(
        stat_sum(&run, " puts ") > 0,
        "no put was used:\n{}",
        run.stderr
    );
    assert_eq!(stat_sum(&run, " gets "), 0, "{}", run.stderr);
}

#[test]
fn mpi_check_4_ranks() {
    require_root!();
    mpi_check(4, &[("btl_llc_backend", "auto")]);
}

/// AF_PACKET, and every fragment packed into a shim buffer (lending and put
/// off); and authentication off (`btl_llc_auth 0`): no rank has a key, so
/// every frame that got through carried no tag (an endpoint without a key
/// drops tagged frames and counts them, and none was counted).
#[test]
fn mpi_check_4_ranks_af_packet() {
    require_root!();
    let run = mpi_check(
        4,
        &[
            ("btl_llc_backend", "packet"),
            ("btl_llc_lend_min", "0"),
            ("btl_llc_put", "0"),
            ("btl_llc_auth", "0"),
        ],
    );
    assert_eq!(stat_sum(&run, " lent "), 0, "lent with lending off");
    assert_eq!(auth_of_ranks(&run), vec!["off"; 4], "{}", run.stderr);
}

/// MPI_THREAD_MULTIPLE: 4 threads per rank exchange at once over btl/llc,
/// eager and rendezvous sizes, data checked.
#[test]
fn mpi_check_thread_multiple() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    run_mpi_check(2, &[], &["threads", "4"], "mpi_check: OK threads=4 ranks=2");
}

/// With put/get offered to ob1, large messages move by get.
#[test]
fn mpi_check_2_ranks_rdma() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_mpi_check(2, &[("btl_llc_rdma", "1")], &[], "mpi_check: OK ranks=2");
    let gets = stat_sum(&run, " gets ");
    assert!(gets > 0, "no get was used:\n{}", run.stderr);
}

/// Messages shorter than `btl_llc_min_rdma_pipeline_size` go by
/// send/receive although put is offered: with the bound above every message
/// of `mpi_check` (16 MiB at most) no put is used and the large fragments
/// are lent, data checked.
#[test]
fn mpi_check_2_ranks_put_bound_above_every_message() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_mpi_check(
        2,
        &[("btl_llc_min_rdma_pipeline_size", "1073741824")],
        &[],
        "mpi_check: OK ranks=2",
    );
    assert_eq!(stat_sum(&run, " puts "), 0, "{}", run.stderr);
    assert!(
        stat_sum(&run, " lent ") > 0,
        "no fragment was lent:\n{}",
        run.stderr
    );
}

/// With `btl_llc_put=0` ob1 has send/receive alone: large contiguous
/// messages move in fragments that leave from the application's buffers,
/// lent to the transport (`btl_llc_lend_min`, on by default), data checked.
#[test]
fn mpi_check_2_ranks_without_put() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let run = run_mpi_check(2, &[("btl_llc_put", "0")], &[], "mpi_check: OK ranks=2");
    assert_eq!(stat_sum(&run, " puts "), 0, "{}", run.stderr);
    assert_eq!(stat_sum(&run, " gets "), 0, "{}", run.stderr);
    assert!(
        stat_sum(&run, " lent ") > 0,
        "no fragment was lent:\n{}",
        run.stderr
    );
}

/// `mpirun` on the simulated cluster: `ranks_per_host` ranks on each host,
/// with the component of this build and the given MCA parameters, and
/// nothing else: no btl_llc parameter unless the caller passes one.
fn cluster_mpirun(
    cluster: &Cluster,
    ranks_per_host: usize,
    mca: &[(&str, &str)],
    args: &[&str],
    timeout: Duration,
) -> Run {
    cluster_mpirun_env(cluster, ranks_per_host, mca, &[], args, timeout)
}

/// [`cluster_mpirun`] with variables `env` given to every rank (`-x`).
fn cluster_mpirun_env(
    cluster: &Cluster,
    ranks_per_host: usize,
    mca: &[(&str, &str)],
    env: &[(&str, &str)],
    args: &[&str],
    timeout: Duration,
) -> Run {
    let built = build();
    let library_path = built.library_path();
    let mut cmd = cluster.mpirun(ranks_per_host);
    cmd.args(["--mca", "pml", "ob1"]);
    for (k, v) in mca {
        cmd.args(["--mca", k, v]);
    }
    forward_env(
        &mut cmd,
        "OMPI_MCA_mca_component_path",
        built.component_path(),
    );
    forward_env(&mut cmd, "LD_LIBRARY_PATH", library_path);
    if let Ok(log) = std::env::var("LLC_SHIM_LOG") {
        // The shim's own log, for a run being looked into.
        forward_env(&mut cmd, "LLC_SHIM_LOG", log);
    }
    // What a user who set nothing has: no interface named for btl/llc, no key.
    cmd.env_remove("OMPI_MCA_btl_llc_if");
    cmd.env_remove("LLC_AUTH_KEY");
    for (k, v) in env {
        forward_env(&mut cmd, k, v);
    }
    cmd.args(args);
    let out = run_bounded(&mut cmd, timeout).expect("starting mpirun");
    assert!(!out.timed_out(), "mpirun did not end in time:\n{out}");
    Run {
        ok: out.success(),
        code: out.status.and_then(|s| s.code()),
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: out.elapsed,
    }
}

/// `mpi_check` on `hosts` simulated hosts with one `eth0` each and
/// `ranks_per_host` ranks on each, `--mca btl self,vader,llc` and no
/// btl_llc parameter but the backend (and the counters at finalize): the
/// ranks of a host share its interface, btl/vader carries what stays on a
/// host, so btl/llc's traffic is the traffic between hosts, and every
/// rank's counters must show some.
fn cluster_mpi_check(hosts: usize, ranks_per_host: usize, backend: &str) -> Run {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(hosts, 9000).expect("cluster bed");
    let np = hosts * ranks_per_host;
    let program = build().dir.join("mpi_check");
    let run = cluster_mpirun(
        &cluster,
        ranks_per_host,
        &[
            ("btl", "self,vader,llc"),
            ("btl_llc_backend", backend),
            ("btl_llc_print_stats", "1"),
        ],
        &[program.to_str().unwrap()],
        Duration::from_secs(240),
    );
    let ok = format!("mpi_check: OK ranks={np}");
    assert!(
        run.ok && run.stdout.contains(&ok),
        "mpi_check over {hosts} hosts x {ranks_per_host} ranks ({backend}) failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    check_stats(&run, np);
    for l in run
        .stderr
        .lines()
        .filter(|l| l.starts_with("btl/llc stats:"))
    {
        assert!(
            l.contains(" if eth0 "),
            "every rank uses the host's eth0: {l}"
        );
    }
    println!(
        "{hosts} hosts x {ranks_per_host} ranks, {backend}: {:.1?}",
        run.elapsed
    );
    run
}

/// The ordinary account the jobs of [`cluster_as_an_ordinary_user`] run as.
const JOB_USER: &str = "llc-job-a";

/// As a cluster's users run jobs: the stack installed once, its service
/// `llcd` running on every host as root, and mpirun with its ranks and
/// daemons running as an ordinary user with no capabilities, with `--mca
/// btl self,vader,llc` and no btl_llc parameter (but the counters printed
/// at the end). The ranks' endpoints are then opened by llcd (AF_XDP
/// sockets in a pool the host's ranks share, or AF_PACKET sockets with
/// locked filters for a rank alone on its host), and btl/llc carries the
/// traffic between hosts. Without the service, btl/llc says in one line what to install
/// and disqualifies itself, so with llc the only inter-host BTL the job
/// fails at once.
#[test]
fn cluster_as_an_ordinary_user() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let user = testbed::TestUser::ensure(JOB_USER).expect("test account");
    let mut cluster = Cluster::new(2, 9000).expect("cluster bed");
    cluster.login_as(&user).expect("logins as the user");
    let program = build().dir.join("mpi_check");
    let mca = [("btl", "self,vader,llc"), ("btl_llc_print_stats", "1")];

    // No service yet: btl/llc steps aside with the line that says what to do.
    let run = cluster_mpirun(
        &cluster,
        1,
        &mca,
        &[program.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert!(
        !run.ok,
        "the job cannot run without llc and without the service:\n{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("no llcd service runs in this network namespace")
            && run.stderr.contains("systemctl start llcd"),
        "btl/llc names what to install or start:\n{}",
        run.stderr
    );

    cluster.start_llcd("").expect("llcd on every host");
    let run = cluster_mpirun(
        &cluster,
        2,
        &mca,
        &[program.to_str().unwrap()],
        Duration::from_secs(240),
    );
    assert!(
        run.ok && run.stdout.contains("mpi_check: OK ranks=4"),
        "mpi_check as {JOB_USER} failed ({:?})\nstdout:\n{}\nstderr:\n{}\nllcd of h0:\n{}",
        run.code,
        run.stdout,
        run.stderr,
        cluster.llcd_log(0)
    );
    check_stats(&run, 4);
    // Two ranks per host: `auto` takes AF_XDP, whose sockets llcd makes
    // in the pool the host's two ranks share.
    let stats = |run: &Run| -> Vec<String> {
        run.stderr
            .lines()
            .filter(|l| l.starts_with("btl/llc stats:"))
            .map(str::to_owned)
            .collect()
    };
    let lines = stats(&run);
    assert!(
        lines.len() == 4 && lines.iter().all(|l| l.contains("af_xdp")),
        "ordinary users get AF_XDP through llcd: {lines:#?}"
    );
    // Keyed by default, as every job: one key from rank 0 through the modex.
    assert_ne!(assert_one_key(&run), "off");
    // Every rank's endpoint was granted to the user and released at its end.
    // (The service sees each connection close a moment after the rank ended.)
    for i in 0..2 {
        let count = |log: &str, what: &str| log.lines().filter(|l| l.contains(what)).count();
        let deadline = Instant::now() + Duration::from_secs(10);
        while count(&cluster.llcd_log(i), " released ") < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = cluster.llcd_log(i);
        let (granted, released) = (count(&log, " granted "), count(&log, " released "));
        assert!(
            granted == 2 && released == 2 && log.contains(&format!("user={JOB_USER}")),
            "host {i}'s llcd granted and released each rank's endpoint:\n{log}"
        );
    }

    // The services killed with SIGKILL while a job runs: the job carries on
    // (its endpoints are its own), and restarted services serve the next.
    // The job's files: in the cluster's directory, which the user may write.
    let stop = cluster.scratch_dir().join("job.stop");
    let ready = cluster.scratch_dir().join("job.ready");
    let pingpong = build().dir.join("pingpong_until");
    let run = std::thread::scope(|scope| {
        let job = scope.spawn(|| {
            let args = [
                pingpong.to_str().unwrap(),
                stop.to_str().unwrap(),
                "60",
                ready.to_str().unwrap(),
            ];
            cluster_mpirun(&cluster, 1, &mca, &args, Duration::from_secs(120))
        });
        // Past the first round trip: every connection of the job is up.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            assert!(
                Instant::now() < deadline && !job.is_finished(),
                "the job never started its round trips"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        cluster.kill_llcd(0);
        cluster.kill_llcd(1);
        // Round trips go on without the services for a while.
        std::thread::sleep(Duration::from_secs(1));
        std::fs::write(&stop, b"").expect("stop file");
        job.join().expect("job thread")
    });
    assert!(
        run.ok && run.stdout.contains("pingpong_until: OK"),
        "the job did not survive its hosts' llcd:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    cluster.restart_llcd(0).expect("llcd again");
    cluster.restart_llcd(1).expect("llcd again");
    let run = cluster_mpirun(
        &cluster,
        1,
        &mca,
        &[program.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert!(
        run.ok && run.stdout.contains("mpi_check: OK ranks=2"),
        "restarted services serve a new job:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    // One rank per host at MTU 9000: `auto` takes AF_PACKET (alone on its
    // interface), also granted by llcd.
    let lines = stats(&run);
    assert!(
        lines.len() == 2 && lines.iter().all(|l| l.contains("af_packet")),
        "{lines:#?}"
    );
}

#[test]
fn cluster_2_hosts_x_2_ranks_af_packet() {
    require_root!();
    let run = cluster_mpi_check(2, 2, "packet");
    assert!(
        run.stderr.contains("transport llc/af_packet"),
        "{}",
        run.stderr
    );
}

#[test]
fn cluster_2_hosts_x_4_ranks_af_packet() {
    require_root!();
    cluster_mpi_check(2, 4, "packet");
}

/// The default backend (`auto`): every rank takes AF_XDP on the host's
/// single-queue eth0, the ranks of a host sharing the queue's buffer pool
/// and the interface's XDP program.
#[test]
fn cluster_2_hosts_x_2_ranks_auto() {
    require_root!();
    let run = cluster_mpi_check(2, 2, "auto");
    assert_eq!(
        run.stderr.matches("transport llc/af_xdp").count(),
        4,
        "every rank on AF_XDP:\n{}",
        run.stderr
    );
}

/// One rank per host (MTU 9000, veth: generic AF_XDP only, a frame in three
/// UMEM chunks): the component tells the shim each rank is alone on its
/// interface, and `auto` takes AF_PACKET, the faster backend for a single
/// endpoint there (docs/BENCHMARKS.md, "`auto` for an endpoint alone on its
/// interface"); with two ranks per host it keeps AF_XDP (above).
#[test]
fn cluster_2_hosts_x_1_rank_auto_takes_af_packet() {
    require_root!();
    let run = cluster_mpi_check(2, 1, "auto");
    assert_eq!(
        run.stderr.matches("transport llc/af_packet").count(),
        2,
        "every rank on AF_PACKET:\n{}",
        run.stderr
    );
}

/// Four ranks per host, every one on AF_XDP (required, no fallback): the
/// hosts' `eth0` (veth) has one RX queue, so the ranks of a host share that
/// queue's buffer pool (`XDP_SHARED_UMEM`) and the interface's XDP program
/// hands each rank's socket its own port's frames.
#[test]
fn cluster_2_hosts_x_4_ranks_af_xdp() {
    require_root!();
    let run = cluster_mpi_check(2, 4, "xdp");
    assert_eq!(
        run.stderr.matches("transport llc/af_xdp").count(),
        8,
        "every rank on AF_XDP:\n{}",
        run.stderr
    );
}

/// `--mca btl self,llc` (no shared memory): the ranks of one host reach
/// each other through the stack's same-host path, so the job works. The
/// job's environment gives the key (`LLC_AUTH_KEY`, forwarded to both
/// hosts): every rank uses the key derived from it instead of drawing one.
#[test]
fn cluster_without_vader_uses_the_same_host_path() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(2, 1500).expect("cluster bed");
    let program = build().dir.join("mpi_check");
    let material = "cluster test job 5f0c9a";
    let run = cluster_mpirun_env(
        &cluster,
        2,
        &[("btl", "self,llc"), ("btl_llc_print_stats", "1")],
        &[("LLC_AUTH_KEY", material)],
        &[program.to_str().unwrap()],
        Duration::from_secs(240),
    );
    assert!(
        run.ok && run.stdout.contains("mpi_check: OK ranks=4"),
        "self,llc on 2 hosts x 2 ranks failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    check_stats(&run, 4);
    let want = msg_layer::transport::llc::AuthKey::derive(material.as_bytes()).fingerprint();
    assert_eq!(assert_one_key(&run), want, "the environment's key");
}

/// A host whose interface does not carry LLC to the others (another
/// Ethernet segment, simulated by dropping LLC frames at its bridge port
/// while IPv4 still passes): btl/llc reports its rank unreachable after a
/// link-level probe, so ob1 carries that rank's traffic over btl/tcp, and
/// with no other BTL the job fails at once saying who cannot reach whom.
#[test]
fn cluster_peer_on_another_segment_is_unreachable_over_llc() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(3, 1500).expect("cluster bed");
    // Every LLC frame of our SAP leaving the bridge towards host 2 is
    // dropped (probes to it, answers to its probes); IPv4 passes.
    let _cut = testbed::LinkChaos::attach(
        cluster.hub(),
        &["p2"],
        &testbed::ChaosSettings {
            drop: 1.0,
            sap: Some(0x7c),
            ..Default::default()
        },
    )
    .expect("dropping LLC frames towards host 2");
    let program = build().dir.join("mpi_check");
    let run = cluster_mpirun(
        &cluster,
        1,
        &[
            ("btl", "self,vader,llc,tcp"),
            ("btl_tcp_if_include", &cluster.subnet()),
            ("btl_llc_print_stats", "1"),
            ("btl_llc_verbose", "1"),
        ],
        &[program.to_str().unwrap()],
        Duration::from_secs(240),
    );
    assert!(
        run.ok && run.stdout.contains("mpi_check: OK ranks=3"),
        "llc plus tcp with host 2 cut off from LLC ({:?})\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    assert!(
        run.stderr.contains("does not answer a link-level probe"),
        "btl/llc said nothing of the unreachable peer:\n{}",
        run.stderr
    );
    let stats: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("btl/llc stats:"))
        .collect();
    assert_eq!(stats.len(), 3, "{}", run.stderr);
    for l in stats {
        let n = |key: &str| -> u64 {
            l.split(key)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap()
                .parse()
                .unwrap()
        };
        let cut_off = l.contains("rank [[") && l.contains("],2] ");
        if cut_off {
            assert_eq!(
                (n(": sent "), n("received ")),
                (0, 0),
                "host 2 used btl/llc: {l}"
            );
        } else {
            assert!(
                n(": sent ") > 0 && n("received ") > 0,
                "hosts 0 and 1 talk over btl/llc: {l}"
            );
        }
        println!("{l}");
    }
    // Without btl/tcp nothing reaches host 2: the job ends, btl/llc names
    // the peers that do not answer, and ob1 says who cannot reach whom.
    let run = cluster_mpirun(
        &cluster,
        1,
        &[("btl", "self,vader,llc"), ("btl_llc_verbose", "1")],
        &[program.to_str().unwrap()],
        Duration::from_secs(120),
    );
    assert!(!run.ok, "the job ran although host 2 is unreachable");
    let unanswered: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("does not answer a link-level probe"))
        .collect();
    assert!(
        unanswered.iter().any(|l| l.contains("],2] at [")),
        "btl/llc did not name host 2's rank as unreachable:\n{}",
        run.stderr
    );
    let ob1_said = run.stdout.contains("unable to reach") || run.stderr.contains("unable to reach");
    // Open MPI 4.1's launcher sometimes loses a help message sent by a rank
    // that exits at once ("Data unpack would read past end of buffer in
    // file .../show_help.c"); btl/llc's own lines above still name the peer.
    let help_lost = run.stderr.contains("show_help.c");
    assert!(
        ob1_said || help_lost,
        "ob1 did not say who cannot reach whom:\n{}\n{}",
        run.stdout,
        run.stderr
    );
    if !ob1_said {
        println!(
            "ob1's message was lost by the launcher's show_help; btl/llc said: {unanswered:?}"
        );
    }
    println!("without btl/tcp: failed after {:.1?}", run.elapsed);
}

/// A bad interface list ends the job at once with one line that names the
/// problem and the fix.
#[test]
fn cluster_bad_interface_list_fails_clearly() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(2, 1500).expect("cluster bed");
    let program = build().dir.join("mpi_check");
    for (param, value, says) in [
        ("btl_llc_if_include", "eth7", "\"eth7\" does not exist"),
        (
            "btl_llc_if_exclude",
            "eth0",
            "no interface here can carry LLC",
        ),
    ] {
        let run = cluster_mpirun(
            &cluster,
            1,
            &[("btl", "self,vader,llc"), (param, value)],
            &[program.to_str().unwrap()],
            Duration::from_secs(60),
        );
        assert!(!run.ok, "{param}={value}: the job ran without btl/llc");
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains("btl/llc:") && l.contains(says))
            .unwrap_or_else(|| panic!("{param}={value}: no line saying {says:?}:\n{}", run.stderr));
        assert!(
            line.contains("eth0"),
            "the line lists the interfaces there: {line}"
        );
        println!("{param}={value}: {line} ({:.1?})", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(30), "{:.1?}", run.elapsed);
    }
}

/// `--mca btl self,llc` with an interface that does not exist: btl/llc
/// cannot open, nothing else may carry the traffic, so the job must fail
/// (proof that the passing runs went over llc).
#[test]
fn job_fails_without_llc() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = MultiPort::new(2, 1500).expect("testbed");
    let run = mpirun(
        &bed,
        2,
        &[("btl", "self,llc"), ("btl_llc_if", "nosuchif%d")],
        &[build().dir.join("mpi_check").to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert!(!run.ok, "the job ran without btl/llc:\n{}", run.stdout);
    assert!(
        run.stderr.contains("btl/llc: local rank"),
        "btl/llc did not say why:\n{}",
        run.stderr
    );
}

/// A rank kills itself (SIGKILL) while the others exchange messages with
/// it. First with mpirun's default policy (it tears the job down and fails);
/// then with --enable-recovery, where mpirun leaves the survivors running:
/// they must learn of the death from btl/llc (the retransmission bound) and
/// end through ob1's error handler (an MPI abort) in bounded time. (mpirun
/// itself exits 0 in recovery mode, so the survivors' messages are checked;
/// the first survivor's abort ends the job, so the second's own detection
/// is seen only when it comes first or close behind.)
#[test]
fn killed_rank_fails_the_others() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = MultiPort::new(3, 1500).expect("testbed");
    let prog = build().dir.join("mpi_check");
    let prog = prog.to_str().unwrap();
    let run = mpirun(
        &bed,
        3,
        &[("btl", "self,llc")],
        &[prog, "kill", "1"],
        Duration::from_secs(90),
    );
    assert!(!run.ok, "the job succeeded although a rank died");
    println!(
        "killed rank, default policy: job failed with {:?} after {:.1?}",
        run.code, run.elapsed
    );
    let run = mpirun(
        &bed,
        3,
        &[("btl", "self,llc")],
        &["--enable-recovery", prog, "kill", "1"],
        Duration::from_secs(90),
    );
    let detected: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("btl/llc: rank on") && l.contains("lost its peer"))
        .collect();
    // The first survivor to detect the death ends the job: ob1 treats a
    // failed BTL endpoint as fatal and aborts, and mpirun then kills the
    // other survivor, which may be a few retransmission timeouts short of
    // its own detection (each connection backs off from its own RTO).
    assert!(
        (1..=2).contains(&detected.len()),
        "a survivor must detect the death through btl/llc:\n{}",
        run.stderr
    );
    assert!(!run.stdout.contains("mpi_check: OK"), "{}", run.stdout);
    for l in &detected {
        println!("{l}");
    }
    println!(
        "killed rank, --enable-recovery: survivors aborted by btl/llc's error after {:.1?}",
        run.elapsed
    );
    assert!(run.elapsed < Duration::from_secs(60), "{:.1?}", run.elapsed);
}

/// NetPIPE (Debian's NPopenmpi) completes its whole default sweep over btl/llc.
#[test]
fn netpipe_sweep_over_llc() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = MultiPort::new(2, 9000).expect("testbed");
    let out = std::env::temp_dir().join(format!("np-llc-{}.out", std::process::id()));
    let run = mpirun(
        &bed,
        2,
        &[("btl", "self,llc"), ("btl_llc_print_stats", "1")],
        &["NPopenmpi", "-o", out.to_str().unwrap()],
        Duration::from_secs(600),
    );
    let table = std::fs::read_to_string(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    assert!(run.ok, "NPopenmpi failed:\n{}\n{}", run.stdout, run.stderr);
    check_stats(&run, 2);
    let rows = parse_netpipe(&table);
    let last = rows.last().expect("NetPIPE wrote no results");
    assert!(
        last.0 >= 8 << 20,
        "sweep ended at {} bytes:\n{table}",
        last.0
    );
    println!(
        "NetPIPE over btl/llc: {} sizes up to {} B in {:.1?}",
        rows.len(),
        last.0,
        run.elapsed
    );
}

/// A NetPIPE output row: (bytes, Mbit/s, one-way µs).
type Row = (u64, f64, f64);

/// NetPIPE output rows.
fn parse_netpipe(table: &str) -> Vec<Row> {
    table
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let bytes = f.next()?.parse::<u64>().ok()?;
            let mbps = f.next()?.parse::<f64>().ok()?;
            let secs = f.next()?.parse::<f64>().ok()?;
            Some((bytes, mbps, secs * 1e6))
        })
        .collect()
}

/// The row nearest `bytes`.
fn at(rows: &[Row], bytes: u64) -> Row {
    *rows
        .iter()
        .min_by_key(|r| r.0.abs_diff(bytes))
        .expect("rows")
}

/// The link's own latency between ports 0 and 1 of `bed`: median one-way
/// time (half the round trip) of `rounds` LLC TEST commands with an 8-byte
/// information field, answered at link level (no transport, no MPI), both
/// ends busy-polling on their own thread, over `backend` ("auto", "xdp",
/// "packet"). Nothing sent over that backend between those ports can take
/// less: the floor under btl/llc's 8 B NetPIPE time.
fn link_floor(bed: &MultiPort, backend: &str, rounds: usize) -> f64 {
    link_floor_between(
        [
            (&bed.ns, &bed.ports[0], bed.macs[0]),
            (&bed.ns, &bed.ports[1], bed.macs[1]),
        ],
        backend,
        rounds,
        FloorWork::None,
    )
}

/// [`link_floor`] between two interfaces, each in its namespace: (namespace,
/// interface, MAC) of the pinging end and of the answering end; each end
/// does `work` per message it sends (`FloorWork::None`: the bare floor).
fn link_floor_between(
    ends: [(&testbed::Netns, &String, [u8; 6]); 2],
    backend: &str,
    rounds: usize,
    work: FloorWork,
) -> f64 {
    use llc_stack::link::any::{self, Backend};
    use llc_stack::link::test_ping;
    use llc_stack::wire::llc::DEFAULT_SAP;
    use llc_stack::wire::{Addresses, MacAddr};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};

    let kind: Backend = backend.parse().expect("backend name");
    let open = move |ifname: &str| {
        any::open(ifname, kind, Default::default(), Default::default())
            .unwrap_or_else(|e| panic!("opening {kind} on {ifname}: {e}"))
            .0
    };
    let macs = [ends[0].2, ends[1].2];
    let addr = |from: usize, to: usize| Addresses {
        dst: MacAddr(macs[to]),
        src: MacAddr(macs[from]),
        dsap: DEFAULT_SAP,
        ssap: DEFAULT_SAP,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (reply_to, responder_stop) = (addr(1, 0), stop.clone());
    let ifname1 = ends[1].1.clone();
    let responder = ends[1].0.spawn(move || {
        let mut dev = open(&ifname1);
        let mut work = work.make();
        ready_tx.send(()).expect("ready");
        test_ping::answer_tests_with(&mut dev, reply_to, &responder_stop, &mut work)
    });
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("responder ready");
    let (to, ifname0) = (addr(0, 1), ends[0].1.clone());
    let pinger = ends[0].0.spawn(move || {
        let mut dev = open(&ifname0);
        let (info_len, mut work) = (work.info_len(), work.make());
        test_ping::round_trips_with(
            &mut dev,
            to,
            rounds / 10,
            rounds,
            Duration::from_secs(10),
            info_len,
            &mut work,
        )
    });
    let rtts = pinger.join();
    stop.store(true, Ordering::Relaxed);
    responder
        .join()
        .expect("responder")
        .expect("answering TEST");
    let mut rtts: Vec<f64> = rtts
        .expect("pinger")
        .expect("TEST round trips")
        .iter()
        .map(|d| d.as_secs_f64() * 1e6)
        .collect();
    rtts.sort_by(f64::total_cmp);
    rtts[rtts.len() / 2] / 2.0
}

/// The benchmark: NPopenmpi over btl/llc and over btl/tcp, alternating, on
/// the same two ports, each llc run after its backend's link floor
/// ([`link_floor`]). Prints the table for docs/BENCHMARKS.md.
#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn netpipe_llc_vs_tcp() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mtu: u32 = std::env::var("LLC_BENCH_MTU")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9000);
    let rounds: usize = std::env::var("LLC_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let bed = MultiPort::new(2, mtu).expect("testbed");
    // TCP between the two ports crosses the bridge as LLC does, not loopback.
    bed.route_through_bridge()
        .expect("policy routing through the bridge");
    let subnet = format!("{}/24", bed.ipv4[0]);
    let backends = std::env::var("LLC_BENCH_BACKENDS").unwrap_or_else(|_| "xdp,packet".into());
    let mut configs: Vec<String> = backends.split(',').map(|b| format!("llc/{b}")).collect();
    configs.push("tcp".into());
    // Extra MCA parameters of the llc runs ("name=value,..."), and
    // NPopenmpi arguments replacing the full sweep (e.g. "-l 8 -u 8 -n 20000").
    let extra = std::env::var("LLC_BENCH_LLC_MCA").unwrap_or_default();
    let extra: Vec<(&str, &str)> = extra
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let np_args = std::env::var("LLC_BENCH_NP_ARGS").unwrap_or_else(|_| "-u 8388608".into());
    let mut results: Vec<(String, Vec<Row>)> = Vec::new();
    let mut floors: Vec<(String, f64)> = Vec::new();
    for round in 0..rounds {
        for which in &configs {
            if let Some(backend) = which.strip_prefix("llc/") {
                let floor = link_floor(&bed, backend, 20_000);
                println!("round {round} link floor {backend}: {floor:.2} µs one-way");
                floors.push((which.clone(), floor));
            }
            let out = std::env::temp_dir().join(format!("np-bench-{}.out", std::process::id()));
            let mca: Vec<(&str, &str)> = match which.strip_prefix("llc/") {
                Some(backend) => [("btl", "self,llc"), ("btl_llc_backend", backend)]
                    .into_iter()
                    .chain(extra.iter().copied())
                    .collect(),
                None => vec![("btl", "self,tcp"), ("btl_tcp_if_include", &subnet)],
            };
            let mut args = vec!["NPopenmpi"];
            args.extend(np_args.split_whitespace());
            args.extend(["-o", out.to_str().unwrap()]);
            let crossed = || -> u64 {
                (0..2)
                    .map(|p| bed.bridge_rx_bytes(p).expect("link statistics"))
                    .sum()
            };
            let before = crossed();
            let run = mpirun(&bed, 2, &mca, &args, Duration::from_secs(900));
            let crossed = crossed() - before;
            assert!(
                run.ok,
                "NPopenmpi over {which}:\n{}\n{}",
                run.stdout, run.stderr
            );
            if std::env::var_os("LLC_BENCH_SHOW").is_some() {
                println!("{}\n{}", run.stdout, run.stderr);
            }
            let rows = parse_netpipe(&std::fs::read_to_string(&out).unwrap_or_default());
            let _ = std::fs::remove_file(&out);
            println!(
                "round {round} {which}: {} rows in {:.1?}, {:.1} MB crossed the bridge",
                rows.len(),
                run.elapsed,
                crossed as f64 / 1e6
            );
            results.push((which.clone(), rows));
        }
    }
    println!("\n| round | BTL | 8 B one-way µs | 1 KiB µs | 64 KiB Mbit/s | 1 MiB Mbit/s | 4 MiB Mbit/s | peak Mbit/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, (which, rows)) in results.iter().enumerate() {
        let peak = rows.iter().map(|r| r.1).fold(0.0, f64::max);
        println!(
            "| {} | {which} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} |",
            i / configs.len(),
            at(rows, 8).2,
            at(rows, 1024).2,
            at(rows, 65536).1,
            at(rows, 1 << 20).1,
            at(rows, 4 << 20).1,
            peak
        );
    }
    let llc_per_round = configs.len() - 1;
    for (round, floors) in results
        .chunks(configs.len())
        .zip(floors.chunks(llc_per_round))
    {
        let tcp = &round.last().expect("tcp").1;
        // Only the sizes the run measured (LLC_BENCH_NP_ARGS may narrow it).
        let has_8 = at(tcp, 8).0 <= 16;
        let has_1m = at(tcp, 1 << 20).0.abs_diff(1 << 20) <= 1 << 16;
        for ((which, rows), (_, floor)) in round[..llc_per_round].iter().zip(floors) {
            let mut line = format!("ratio {which}/tcp:");
            if has_8 {
                line += &format!(
                    " latency at 8 B {:.2}x (link floor {:.2}x)",
                    at(rows, 8).2 / at(tcp, 8).2,
                    floor / at(tcp, 8).2
                );
            }
            if has_1m {
                line += &format!(
                    " bandwidth at 1 MiB {:.2}x",
                    at(rows, 1 << 20).1 / at(tcp, 1 << 20).1
                );
            }
            println!("{line}");
        }
    }
}

/// The benchmark of the cluster issue: NPopenmpi with 1 rank on each of 2
/// simulated hosts (one `eth0` each, on one bridge), alternating in one
/// run: btl/llc with the interface shared (the default: per-port filter or
/// steering, port claim, same-host path), btl/llc with the interface to
/// itself (`btl_llc_exclusive`, how one rank per interface ran before),
/// each over AF_XDP and AF_PACKET, and btl/tcp (`self,vader,tcp`) between
/// the hosts' addresses, the same bridge path. Each llc run follows its
/// backend's link floor between the same two interfaces (and, with
/// `LLC_BENCH_FLOOR_WORK`, that floor with work per message: see
/// `FloorWork`). Prints the table and ratios for docs/BENCHMARKS.md;
/// `LLC_BENCH_SHOW` set: every row NetPIPE measured, too.
#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn netpipe_cluster_shared_vs_exclusive_vs_tcp() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let mtu: u32 = env("LLC_BENCH_MTU", "9000").parse().expect("LLC_BENCH_MTU");
    let rounds: usize = env("LLC_BENCH_ROUNDS", "2")
        .parse()
        .expect("LLC_BENCH_ROUNDS");
    let np_args = env("LLC_BENCH_NP_ARGS", "-u 4194304");
    let backends = env("LLC_BENCH_BACKENDS", "xdp,packet");
    // The link floor again with work per message (llc-perf's --floor-work
    // kinds, e.g. "frame=145,am": the BTL's 8-byte frame, the active
    // messages it runs): what this bed charges the software between frames.
    let floor_work: Vec<FloorWork> = env("LLC_BENCH_FLOOR_WORK", "")
        .split(',')
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().expect("LLC_BENCH_FLOOR_WORK"))
        .collect();
    // name=value,... for every btl/llc run (e.g. btl_llc_rdma=1).
    let llc_extra: Vec<(String, String)> = env("LLC_BENCH_LLC_MCA", "")
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let cluster = Cluster::new(2, mtu).expect("cluster bed");
    let hosts = cluster.hosts();
    let ifname = testbed::CLUSTER_IFNAME.to_owned();
    let ends = [
        (&hosts[0].ns, &ifname, hosts[0].mac),
        (&hosts[1].ns, &ifname, hosts[1].mac),
    ];
    // The btl/llc set-ups of each backend: `shared` (the default),
    // `exclusive`, or name=value+name=value (the interface shared, those
    // parameters set), e.g. LLC_BENCH_MODES="shared,btl_llc_put=1".
    let modes = env("LLC_BENCH_MODES", "shared,exclusive");
    let mut configs: Vec<(String, Vec<(&str, String)>)> = Vec::new();
    for b in backends.split(',') {
        for mode in modes.split(',') {
            let mut mca = vec![
                ("btl", "self,vader,llc".into()),
                ("btl_llc_backend", b.into()),
                (
                    "btl_llc_exclusive",
                    u8::from(mode == "exclusive").to_string(),
                ),
            ];
            mca.extend(llc_extra.iter().map(|(k, v)| (k.as_str(), v.clone())));
            for (k, v) in mode.split('+').filter_map(|kv| kv.split_once('=')) {
                mca.push((k, v.to_owned()));
            }
            configs.push((format!("llc/{b}/{mode}"), mca));
        }
    }
    configs.push((
        "tcp".into(),
        vec![
            ("btl", "self,vader,tcp".into()),
            ("btl_tcp_if_include", cluster.subnet()),
        ],
    ));
    let mut results: Vec<(String, Vec<Row>, Option<f64>)> = Vec::new();
    for round in 0..rounds {
        for (which, mca) in &configs {
            let floor = which.strip_prefix("llc/").map(|rest| {
                let backend = rest.split('/').next().expect("backend");
                let f = link_floor_between(ends, backend, 20_000, FloorWork::None);
                println!("round {round} link floor {backend}: {f:.2} µs one-way");
                // The floor with work per message, each right after a bare
                // one (see llc-perf's --floor-work).
                for &w in &floor_work {
                    let (bare, worked) = (
                        link_floor_between(ends, backend, 20_000, FloorWork::None),
                        link_floor_between(ends, backend, 20_000, w),
                    );
                    println!(
                        "round {round} link floor {backend} with {w}: {worked:.2} µs one-way, \
                         {:+.3} against the bare floor just before; warm {:.3} µs",
                        worked - bare,
                        w.warm_micros(2_000)
                    );
                }
                f
            });
            let out = std::env::temp_dir().join(format!("np-cluster-{}.out", std::process::id()));
            let mut args = vec!["NPopenmpi"];
            args.extend(np_args.split_whitespace());
            args.extend(["-o", out.to_str().unwrap()]);
            let mca: Vec<(&str, &str)> = mca.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut attempt = 0;
            let run = loop {
                attempt += 1;
                let run = cluster_mpirun(&cluster, 1, &mca, &args, Duration::from_secs(900));
                let flaky_tcp = which == "tcp"
                    && !run.ok
                    && run.stderr.contains("failed to TCP connect to a peer");
                if !flaky_tcp || attempt == 3 {
                    break run;
                }
                println!("round {round} tcp: btl/tcp connect failure, retrying");
            };
            assert!(
                run.ok,
                "NPopenmpi over {which}:\n{}\n{}",
                run.stdout, run.stderr
            );
            let rows = parse_netpipe(&std::fs::read_to_string(&out).unwrap_or_default());
            let _ = std::fs::remove_file(&out);
            if std::env::var_os("LLC_BENCH_SHOW").is_some() {
                for (bytes, mbps, micros) in &rows {
                    println!("round {round} {which}: {bytes} B {mbps:.0} Mbit/s {micros:.2} µs");
                }
            }
            println!(
                "round {round} {which}: {} rows in {:.1?}: 8 B {:.2} µs, 1 MiB {:.0} Mbit/s",
                rows.len(),
                run.elapsed,
                at(&rows, 8).2,
                at(&rows, 1 << 20).1
            );
            results.push((which.clone(), rows, floor));
        }
    }
    println!("\n| round | BTL | link floor µs | 8 B one-way µs | 1 KiB µs | 64 KiB Mbit/s | 1 MiB Mbit/s | peak Mbit/s |");
    println!("|---|---|---|---|---|---|---|---|");
    for (i, (which, rows, floor)) in results.iter().enumerate() {
        let peak = rows.iter().map(|r| r.1).fold(0.0, f64::max);
        println!(
            "| {} | {which} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:.0} |",
            i / configs.len(),
            floor.map_or("-".into(), |f| format!("{f:.2}")),
            at(rows, 8).2,
            at(rows, 1024).2,
            at(rows, 65536).1,
            at(rows, 1 << 20).1,
            peak
        );
    }
    let per_backend = modes.split(',').count();
    for round in results.chunks(configs.len()) {
        let tcp = &round.last().expect("tcp").1;
        for group in round[..round.len() - 1].chunks(per_backend) {
            let first = &group[0];
            for run in group {
                println!(
                    "ratio {}: 8 B {:.3}x {}, {:.2}x tcp; 1 MiB {:.3}x {}, {:.2}x tcp",
                    run.0,
                    at(&run.1, 8).2 / at(&first.1, 8).2,
                    first.0,
                    at(&run.1, 8).2 / at(tcp, 8).2,
                    at(&run.1, 1 << 20).1 / at(&first.1, 1 << 20).1,
                    first.0,
                    at(&run.1, 1 << 20).1 / at(tcp, 1 << 20).1,
                );
            }
        }
    }
}

/// One line of `mbw_mr`'s output: the aggregate over the pairs at one size.
#[derive(Debug, Clone)]
struct MbwLine {
    pairs: usize,
    bytes: usize,
    window: usize,
    iters: usize,
    msgs_per_s: f64,
    mb_per_s: f64,
    delivered: u64,
    per_pair: Vec<f64>,
}

/// The `mbw_mr pairs=...` lines of `stdout`, each checked for every field;
/// panics on a line that does not parse.
fn parse_mbw_mr(stdout: &str) -> Vec<MbwLine> {
    stdout
        .lines()
        .filter(|l| l.starts_with("mbw_mr pairs="))
        .map(|l| {
            let field = |key: &str| -> &str {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                    .unwrap_or_else(|| panic!("no {key}= in {l:?}"))
            };
            let num = |key: &str| -> f64 {
                field(key)
                    .parse()
                    .unwrap_or_else(|e| panic!("{key} in {l:?}: {e}"))
            };
            let int = |key: &str| -> u64 {
                field(key)
                    .parse()
                    .unwrap_or_else(|e| panic!("{key} in {l:?}: {e}"))
            };
            MbwLine {
                pairs: int("pairs") as usize,
                bytes: int("bytes") as usize,
                window: int("window") as usize,
                iters: int("iters") as usize,
                msgs_per_s: num("msgs_per_s"),
                mb_per_s: num("MB_per_s"),
                delivered: int("delivered"),
                per_pair: field("per_pair_msgs_per_s")
                    .split(',')
                    .map(|v| {
                        v.parse()
                            .unwrap_or_else(|e| panic!("per-pair rate in {l:?}: {e}"))
                    })
                    .collect(),
            }
        })
        .collect()
}

/// `mbw_mr ARGS` with `pairs` ranks on each of the cluster's 2 hosts (pair i
/// = rank i on host 0 -> rank i+pairs on host 1), `mca` as given. Returns
/// the run, unchecked.
fn cluster_mbw_mr(
    cluster: &Cluster,
    pairs: usize,
    mca: &[(&str, &str)],
    args: &[&str],
    timeout: Duration,
) -> Run {
    let program = build().dir.join("mbw_mr");
    let mut cmd = vec![program.to_str().unwrap()];
    cmd.extend_from_slice(args);
    cluster_mpirun(cluster, pairs, mca, &cmd, timeout)
}

/// The aggregate line of a successful `mbw_mr` run at each of `sizes`,
/// checked against what was asked: every message of every window delivered
/// and checked by the receivers, a positive rate for every pair, and MB/s
/// consistent with messages/s.
fn checked_mbw_lines(
    run: &Run,
    pairs: usize,
    sizes: &[usize],
    iters: usize,
    warmup: usize,
) -> Vec<MbwLine> {
    assert!(
        run.ok && run.stdout.contains(&format!("mbw_mr: OK pairs={pairs}")),
        "mbw_mr with {pairs} pairs failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    let lines = parse_mbw_mr(&run.stdout);
    assert_eq!(
        lines.iter().map(|l| l.bytes).collect::<Vec<_>>(),
        sizes,
        "{}",
        run.stdout
    );
    for l in &lines {
        assert_eq!((l.pairs, l.window, l.iters), (pairs, 64, iters), "{l:?}");
        assert_eq!(
            l.delivered,
            (pairs * 64 * (iters + warmup)) as u64,
            "messages delivered: {l:?}"
        );
        assert_eq!(l.per_pair.len(), pairs, "{l:?}");
        assert!(
            l.per_pair.iter().all(|r| r.is_finite() && *r > 0.0),
            "{l:?}"
        );
        let sum: f64 = l.per_pair.iter().sum();
        assert!(
            (sum - l.msgs_per_s).abs() <= 0.01 * pairs as f64 + sum * 1e-6,
            "the aggregate is the sum of the pairs: {l:?}"
        );
        let mb = l.msgs_per_s * l.bytes as f64 / 1e6;
        assert!((mb - l.mb_per_s).abs() <= 0.01 + mb * 1e-6, "{l:?}");
    }
    lines
}

/// The osu_mbw_mr-style program over btl/llc (AF_PACKET) between the 2
/// hosts of the cluster bed, 1 pair (1 rank per host) and 2 pairs (2 ranks
/// per host, sharing the host's eth0), a few windows of 8 B (eager) and
/// 64 KiB (rendezvous) messages: every message arrives and passes the
/// receiver's check, every rank's btl/llc counters show traffic both ways
/// (the pairs cross hosts; btl/vader carries nothing of theirs). Then a
/// run with one byte spoiled at the sender must fail the job, which shows
/// the check works. Open MPI adds peers lazily here (its default), so with
/// 2 pairs a rank on the host with the higher address sends first to a
/// rank that never sent to it (the barrier's): that hung before btl/llc
/// connected from either end.
#[test]
fn cluster_mbw_mr_1_and_2_pairs_af_packet() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(2, 9000).expect("cluster bed");
    let mca = [
        ("btl", "self,vader,llc"),
        ("btl_llc_backend", "packet"),
        ("btl_llc_print_stats", "1"),
    ];
    let (iters, warmup) = (20, 5);
    let (i, x) = (iters.to_string(), warmup.to_string());
    for pairs in [1, 2] {
        let run = cluster_mbw_mr(
            &cluster,
            pairs,
            &mca,
            &["-s", "8,65536", "-i", &i, "-x", &x],
            Duration::from_secs(120),
        );
        let lines = checked_mbw_lines(&run, pairs, &[8, 65536], iters, warmup);
        check_stats(&run, 2 * pairs);
        let (mut bundles, mut bundled) = (0u64, 0u64);
        for l in run
            .stderr
            .lines()
            .filter(|l| l.starts_with("btl/llc stats:"))
        {
            assert!(l.contains(" if eth0 "), "every rank uses eth0: {l}");
            let n = |key: &str| -> u64 {
                l.split(key)
                    .nth(1)
                    .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("no {key:?} in {l}"))
            };
            bundles += n(", bundles ");
            bundled += n("(messages ");
        }
        // Windows of 8-byte sends with no progress call between them leave
        // in bundles (btl_llc_coalesce_us, on by default).
        assert!(
            bundles >= iters as u64 && bundled >= 2 * bundles,
            "{pairs} pair(s): {bundles} bundles carrying {bundled} messages:\n{}",
            run.stderr
        );
        println!("{pairs} pair(s): {bundles} bundles carried {bundled} messages");
        for l in &lines {
            println!(
                "{pairs} pair(s), {} B: {:.0} msgs/s ({:?} per pair), {} delivered",
                l.bytes, l.msgs_per_s, l.per_pair, l.delivered
            );
        }
        println!("{pairs} pair(s): {:.1?}", run.elapsed);
    }
    let run = cluster_mbw_mr(
        &cluster,
        1,
        &mca,
        &["-s", "8", "-i", "4", "-x", "1", "-C"],
        Duration::from_secs(60),
    );
    assert!(
        !run.ok,
        "a spoiled byte went unnoticed:\n{}\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.stderr
            .contains("mbw_mr: rank 1: FAILED: pair 0, window 1, message 0 of 8 bytes: byte 7"),
        "the receiver did not name the spoiled byte:\n{}",
        run.stderr
    );
    assert!(!run.stdout.contains("mbw_mr: OK"), "{}", run.stdout);
}

/// The BTL set-ups a benchmark alternates: btl/llc over each of
/// `backends` (with `LLC_BENCH_LLC_MCA`, name=value,...) and btl/tcp
/// between the bed's addresses; `LLC_BENCH_MCA` goes to every one of them
/// (e.g. mpi_yield_when_idle=1 when ranks outnumber cores).
fn bench_configs(cluster: &Cluster, backends: &str) -> Vec<(String, Vec<(String, String)>)> {
    let pairs_of = |var: &str| -> Vec<(String, String)> {
        std::env::var(var)
            .unwrap_or_default()
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    };
    let (extra, common) = (pairs_of("LLC_BENCH_LLC_MCA"), pairs_of("LLC_BENCH_MCA"));
    let owned = |list: &[(&str, String)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    };
    let mut configs = Vec::new();
    for b in backends.split(',') {
        let mut mca = owned(&[
            ("btl", "self,vader,llc".to_owned()),
            ("btl_llc_backend", b.to_owned()),
            ("btl_llc_print_stats", "1".to_owned()),
        ]);
        mca.extend(extra.iter().chain(&common).cloned());
        configs.push((format!("llc/{b}"), mca));
    }
    let mut tcp = owned(&[
        ("btl", "self,vader,tcp".to_owned()),
        ("btl_tcp_if_include", cluster.subnet()),
    ]);
    tcp.extend(common.iter().cloned());
    configs.push(("tcp".to_owned(), tcp));
    configs
}

/// The message-rate benchmark of issue 23: `mbw_mr` (8 B, window 64 by
/// default) between the 2 hosts of the cluster bed with 1 pair (1 rank per
/// host) and 2 pairs (2 ranks per host sharing the host's eth0),
/// alternating in every round btl/llc over each backend (the interface
/// shared, the default) and btl/tcp between the hosts' addresses (the same
/// bridge path). Prints a table and the llc/tcp ratio of the aggregate
/// message rate per round for docs/BENCHMARKS.md.
///
/// LLC_BENCH_ROUNDS (default 3), LLC_BENCH_BACKENDS (xdp,packet),
/// LLC_BENCH_PAIRS (1,2), LLC_BENCH_MTU (9000), LLC_BENCH_MBW_ARGS
/// (mbw_mr's arguments, default "-s 8 -w 64 -i 5000 -x 500"),
/// LLC_BENCH_LLC_MCA (name=value,... for the btl/llc runs), LLC_BENCH_MCA
/// (name=value,... for every run).
#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn mbw_mr_cluster_llc_vs_tcp() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let mtu: u32 = env("LLC_BENCH_MTU", "9000").parse().expect("LLC_BENCH_MTU");
    let rounds: usize = env("LLC_BENCH_ROUNDS", "3")
        .parse()
        .expect("LLC_BENCH_ROUNDS");
    let pair_counts: Vec<usize> = env("LLC_BENCH_PAIRS", "1,2")
        .split(',')
        .map(|p| p.parse().expect("LLC_BENCH_PAIRS: numbers"))
        .collect();
    let mbw_args = env("LLC_BENCH_MBW_ARGS", "-s 8 -w 64 -i 5000 -x 500");
    let backends = env("LLC_BENCH_BACKENDS", "xdp,packet");
    let cluster = Cluster::new(2, mtu).expect("cluster bed");
    let configs = bench_configs(&cluster, &backends);
    let args: Vec<&str> = mbw_args.split_whitespace().collect();
    // (round, pairs, config, lines of that run)
    let mut results: Vec<(usize, usize, String, Vec<MbwLine>)> = Vec::new();
    for round in 0..rounds {
        for &pairs in &pair_counts {
            for (which, mca) in &configs {
                let mca: Vec<(&str, &str)> =
                    mca.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                let mut attempt = 0;
                let run = loop {
                    attempt += 1;
                    let run =
                        cluster_mbw_mr(&cluster, pairs, &mca, &args, Duration::from_secs(600));
                    let flaky_tcp = which == "tcp"
                        && !run.ok
                        && run.stderr.contains("failed to TCP connect to a peer");
                    if !flaky_tcp || attempt == 3 {
                        break run;
                    }
                    println!("round {round} tcp: btl/tcp connect failure, retrying");
                };
                assert!(
                    run.ok && run.stdout.contains(&format!("mbw_mr: OK pairs={pairs}")),
                    "mbw_mr over {which} with {pairs} pairs ({:?}):\n{}\n{}",
                    run.code,
                    run.stdout,
                    run.stderr
                );
                let lines = parse_mbw_mr(&run.stdout);
                assert!(!lines.is_empty(), "no result line:\n{}", run.stdout);
                // btl/llc's retransmissions (and how many after a timeout,
                // 2 ms at least), summed over the ranks: what most often
                // explains a slow run here.
                let retransmits = if which.starts_with("llc/") {
                    format!(
                        ", {} retransmissions ({} after timeouts)",
                        stat_sum(&run, " retransmits "),
                        stat_sum(&run, "(timeouts ")
                    )
                } else {
                    String::new()
                };
                for l in &lines {
                    println!(
                        "round {round} {which} pairs={pairs} {} B: {:.0} msgs/s, per pair {:?} ({:.1?}{retransmits})",
                        l.bytes,
                        l.msgs_per_s,
                        l.per_pair.iter().map(|r| r.round()).collect::<Vec<_>>(),
                        run.elapsed
                    );
                }
                results.push((round, pairs, which.clone(), lines));
            }
        }
    }
    println!("\nmbw_mr {mbw_args}, MTU {mtu}");
    println!("| round | pairs | BTL | bytes | messages/s | MB/s | per pair messages/s |");
    println!("|---|---:|---|---:|---:|---:|---|");
    for (round, pairs, which, lines) in &results {
        for l in lines {
            println!(
                "| {round} | {pairs} | {which} | {} | {:.0} | {:.2} | {} |",
                l.bytes,
                l.msgs_per_s,
                l.mb_per_s,
                l.per_pair
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    for chunk in results.chunks(configs.len()) {
        let (round, pairs, _, tcp) = chunk.last().expect("tcp last");
        for (_, _, which, lines) in &chunk[..chunk.len() - 1] {
            for (l, t) in lines.iter().zip(tcp) {
                println!(
                    "ratio round {round} pairs={pairs} {} B {which}/tcp: {:.2}x messages/s",
                    l.bytes,
                    l.msgs_per_s / t.msgs_per_s
                );
            }
        }
    }
}

/// One result line of `kernels` (`kernels: NAME key=value ... check=ok`).
#[derive(Debug, Clone)]
struct KernelLine {
    /// The kernel and the parameters that tell its results apart, e.g.
    /// `alltoall variant=mpi bytes=65536`.
    key: String,
    /// Slowest rank's seconds per operation.
    time_s: f64,
    /// Of that, the slowest rank's seconds inside MPI's collectives
    /// (transpose, fft and radix print it; alltoall with `-g`).
    comm_s: Option<f64>,
    /// The kernel's rate figure (`MB_per_s=...`, `gflops=...`), as printed.
    rate: String,
    check: String,
}

/// The result lines of `kernels`' `stdout` (not its final `kernels: OK`);
/// panics on a line without a positive `time_s` or a `check`.
fn parse_kernels(stdout: &str) -> Vec<KernelLine> {
    const KEY_FIELDS: [&str; 7] = [
        "variant",
        "bytes",
        "window",
        "gap_kib",
        "n",
        "keys_per_rank",
        "updates_per_rank",
    ];
    const RATE_FIELDS: [&str; 4] = ["MB_per_s", "gflops", "Mkeys_per_s", "Mupdates_per_s"];
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("kernels: "))
        .filter(|l| !l.starts_with("OK "))
        .map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next().unwrap_or_default();
            let fields: Vec<(&str, &str)> = words.filter_map(|w| w.split_once('=')).collect();
            let field = |k: &str| fields.iter().find(|(f, _)| *f == k).map(|(_, v)| *v);
            let mut key = name.to_owned();
            for k in KEY_FIELDS {
                if let Some(v) = field(k) {
                    key += &format!(" {k}={v}");
                }
            }
            let time_s: f64 = field("time_s")
                .unwrap_or_else(|| panic!("no time_s in {l:?}"))
                .parse()
                .unwrap_or_else(|e| panic!("time_s in {l:?}: {e}"));
            assert!(time_s.is_finite() && time_s > 0.0, "time_s in {l:?}");
            let comm_s = field("comm_s").map(|v| {
                let c: f64 = v.parse().unwrap_or_else(|e| panic!("comm_s in {l:?}: {e}"));
                assert!(c.is_finite() && c >= 0.0, "comm_s in {l:?}");
                c
            });
            let rate = RATE_FIELDS
                .iter()
                .find_map(|k| field(k).map(|v| format!("{k}={v}")))
                .unwrap_or_else(|| panic!("no rate in {l:?}"));
            KernelLine {
                key,
                time_s,
                comm_s,
                rate,
                check: field("check")
                    .unwrap_or_else(|| panic!("no check in {l:?}"))
                    .to_owned(),
            }
        })
        .collect()
}

/// The result keys `kernels all -s 8,65536` prints on 2 ranks with
/// `-n 14 -k 14 -u 14` (the test's sizes).
const SMALL_KERNEL_KEYS: [&str; 10] = [
    "exchange bytes=8 window=1",
    "exchange bytes=65536 window=1",
    "alltoall variant=pairwise bytes=8",
    "alltoall variant=pairwise bytes=65536",
    "alltoall variant=mpi bytes=8",
    "alltoall variant=mpi bytes=65536",
    "transpose n=16384",
    "fft n=16384",
    "radix keys_per_rank=16384",
    "updates bytes=32 updates_per_rank=16384",
];

/// Seed 002's application kernels (`mpi-tests/kernels.c`: exchange,
/// all-to-all, matrix transpose, six-step FFT, radix sort, small random
/// updates) over btl/llc (AF_PACKET) between the 2 hosts of the cluster bed,
/// 1 rank per host, MTU 9000, small sizes: every kernel's result passes its
/// check, and every rank's btl/llc counters show traffic both ways. Then
/// each kernel once more with one value spoiled on purpose (`-C`): every
/// such job must fail, and its check must say which kernel.
#[test]
fn cluster_kernels_af_packet() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(2, 9000).expect("cluster bed");
    let program = build().dir.join("kernels");
    let program = program.to_str().unwrap();
    let mca = [
        ("btl", "self,vader,llc"),
        ("btl_llc_backend", "packet"),
        ("btl_llc_print_stats", "1"),
    ];
    let small = [
        "-s", "8,65536", "-V", "2", "-i", "200", "-n", "14", "-k", "14", "-u", "14", "-r", "2",
    ];
    let mut args = vec![program, "all"];
    args.extend(small);
    let run = cluster_mpirun(&cluster, 1, &mca, &args, Duration::from_secs(120));
    assert!(
        run.ok && run.stdout.contains("kernels: OK ranks=2"),
        "kernels over btl/llc failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
    let lines = parse_kernels(&run.stdout);
    assert_eq!(
        lines.iter().map(|l| l.key.as_str()).collect::<Vec<_>>(),
        SMALL_KERNEL_KEYS,
        "{}",
        run.stdout
    );
    for l in &lines {
        assert_eq!(l.check, "ok", "{l:?}");
        let collective = ["transpose", "fft", "radix"]
            .iter()
            .any(|k| l.key.starts_with(k));
        assert_eq!(l.comm_s.is_some(), collective, "comm_s: {l:?}");
        println!("{}: {:.6} s, {}", l.key, l.time_s, l.rate);
    }
    check_stats(&run, 2);
    for l in run
        .stderr
        .lines()
        .filter(|l| l.starts_with("btl/llc stats:"))
    {
        assert!(l.contains(" if eth0 "), "every rank uses eth0: {l}");
    }
    println!("all kernels: {:.1?}", run.elapsed);
    for (kernel, says) in [
        ("exchange", "exchange: message 0->1 of 8 bytes"),
        ("alltoall", "alltoall pairwise: message 0->1 of 8 bytes"),
        ("transpose", "transpose: element ("),
        ("fft", "fft: output point"),
        ("radix", "radix: the keys changed"),
        ("updates", "updates: table word"),
    ] {
        let mut args = vec![program, kernel, "-C"];
        args.extend(small);
        let run = cluster_mpirun(&cluster, 1, &mca, &args, Duration::from_secs(60));
        assert!(
            !run.ok,
            "{kernel}: a spoiled value went unnoticed:\n{}\n{}",
            run.stdout, run.stderr
        );
        let line = run
            .stderr
            .lines()
            .find(|l| l.contains(": FAILED: ") && l.contains(says))
            .unwrap_or_else(|| panic!("{kernel}: no line saying {says:?}:\n{}", run.stderr));
        assert!(!run.stdout.contains("kernels: OK"), "{}", run.stdout);
        println!("{kernel} -C: {line} ({:.1?})", run.elapsed);
    }
}

/// The median of `v` (the mean of the middle two for an even count).
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Seed 002's application kernels (issue 24, goal 3): `kernels` with 1 rank
/// on each of the 2 hosts of the cluster bed, alternating in every round
/// btl/llc over each backend and btl/tcp between the hosts' addresses (the
/// same bridge path). Prints, per kernel result, a table of each round's
/// time per operation, the medians, and the ratio tcp time / llc time (>1:
/// btl/llc faster; for the bandwidth kernels the same as llc MB/s / tcp
/// MB/s).
///
/// LLC_BENCH_ROUNDS (default 3), LLC_BENCH_BACKENDS (xdp,packet),
/// LLC_BENCH_MTU (9000), LLC_BENCH_KERNEL_ARGS (kernels' arguments, default
/// "all"), LLC_BENCH_LLC_MCA (name=value,... for the btl/llc runs), LLC_BENCH_MCA
/// (name=value,... for every run), LLC_BENCH_SHOW (set: print each llc run's btl/llc counters).
#[test]
#[ignore = "benchmark: run with --release --ignored --nocapture"]
fn kernels_cluster_llc_vs_tcp() {
    require_root!();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_owned());
    let mtu: u32 = env("LLC_BENCH_MTU", "9000").parse().expect("LLC_BENCH_MTU");
    let rounds: usize = env("LLC_BENCH_ROUNDS", "3")
        .parse()
        .expect("LLC_BENCH_ROUNDS");
    let kernel_args = env("LLC_BENCH_KERNEL_ARGS", "all");
    let backends = env("LLC_BENCH_BACKENDS", "xdp,packet");
    let cluster = Cluster::new(2, mtu).expect("cluster bed");
    let configs = bench_configs(&cluster, &backends);
    let program = build().dir.join("kernels");
    let mut args = vec![program.to_str().unwrap()];
    args.extend(kernel_args.split_whitespace());
    // results[round][config] = that run's lines.
    let mut results: Vec<Vec<Vec<KernelLine>>> = Vec::new();
    for round in 0..rounds {
        let mut this_round = Vec::new();
        for (which, mca) in &configs {
            let mca: Vec<(&str, &str)> =
                mca.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut attempt = 0;
            let run = loop {
                attempt += 1;
                let run = cluster_mpirun(&cluster, 1, &mca, &args, Duration::from_secs(900));
                let flaky_tcp = which == "tcp"
                    && !run.ok
                    && run.stderr.contains("failed to TCP connect to a peer");
                if !flaky_tcp || attempt == 3 {
                    break run;
                }
                println!("round {round} tcp: btl/tcp connect failure, retrying");
            };
            assert!(
                run.ok && run.stdout.contains("kernels: OK ranks=2"),
                "kernels over {which} ({:?}):\n{}\n{}",
                run.code,
                run.stdout,
                run.stderr
            );
            let lines = parse_kernels(&run.stdout);
            assert!(!lines.is_empty(), "no result line:\n{}", run.stdout);
            assert!(lines.iter().all(|l| l.check == "ok"), "{}", run.stdout);
            let retransmits = if which.starts_with("llc/") {
                format!(
                    ", {} retransmissions ({} after timeouts)",
                    stat_sum(&run, " retransmits "),
                    stat_sum(&run, "(timeouts ")
                )
            } else {
                String::new()
            };
            println!("round {round} {which}: {:.1?}{retransmits}", run.elapsed);
            if std::env::var_os("LLC_BENCH_SHOW").is_some() {
                for l in run
                    .stderr
                    .lines()
                    .filter(|l| l.starts_with("btl/llc stats:"))
                {
                    println!("  {l}");
                }
            }
            for l in &lines {
                println!("  {}: {:.6} s, {}", l.key, l.time_s, l.rate);
            }
            this_round.push(lines);
        }
        results.push(this_round);
    }
    let names: Vec<&str> = configs.iter().map(|(n, _)| n.as_str()).collect();
    let tcp = names.len() - 1;
    let keys: Vec<String> = results[0][tcp].iter().map(|l| l.key.clone()).collect();
    let line = |round: usize, config: usize, key: &str| -> &KernelLine {
        results[round][config]
            .iter()
            .find(|l| l.key == key)
            .unwrap_or_else(|| panic!("round {round} {}: no {key}", names[config]))
    };
    let time = |round: usize, config: usize, key: &str| line(round, config, key).time_s;
    println!("\nkernels {kernel_args}, 1 rank per host, 2 hosts, MTU {mtu}; time per operation in ms (in brackets: of it, inside MPI's collectives); ratio = tcp time / llc time (>1: btl/llc faster)");
    let mut summary = Vec::new();
    for key in &keys {
        println!("\n{key}\n");
        let mut head = "| round |".to_owned();
        let mut rule = "|---|".to_owned();
        for n in &names {
            head += &format!(" {n} ms |");
            rule += "---:|";
        }
        for n in &names[..tcp] {
            head += &format!(" {n} ratio |");
            rule += "---:|";
        }
        println!("{head}\n{rule}");
        let mut per_config: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
        let mut comm_per_config: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
        for round in 0..rounds {
            let mut row = format!("| {round} |");
            for (c, times) in per_config.iter_mut().enumerate() {
                let l = line(round, c, key);
                times.push(l.time_s);
                row += &format!(" {:.4}", l.time_s * 1e3);
                if let Some(comm) = l.comm_s {
                    comm_per_config[c].push(comm);
                    row += &format!(" ({:.4})", comm * 1e3);
                }
                row += " |";
            }
            for c in 0..tcp {
                row += &format!(" {:.2}x |", time(round, tcp, key) / time(round, c, key));
            }
            println!("{row}");
        }
        let medians: Vec<f64> = per_config.iter().map(|t| median(t)).collect();
        let mut row = "| median |".to_owned();
        for (m, comm) in medians.iter().zip(&comm_per_config) {
            row += &format!(" {:.4}", m * 1e3);
            if !comm.is_empty() {
                row += &format!(" ({:.4})", median(comm) * 1e3);
            }
            row += " |";
        }
        for m in &medians[..tcp] {
            row += &format!(" {:.2}x |", medians[tcp] / m);
        }
        println!("{row}");
        summary.push((key.clone(), medians));
    }
    println!("\nsummary (medians over {rounds} rounds)\n");
    let mut head = "| kernel |".to_owned();
    let mut rule = "|---|".to_owned();
    for n in &names {
        head += &format!(" {n} ms |");
        rule += "---:|";
    }
    for n in &names[..tcp] {
        head += &format!(" {n} / tcp |");
        rule += "---:|";
    }
    println!("{head}\n{rule}");
    for (key, medians) in &summary {
        let mut row = format!("| {key} |");
        for m in medians {
            row += &format!(" {:.4} |", m * 1e3);
        }
        for m in &medians[..tcp] {
            row += &format!(" {:.2}x |", medians[tcp] / m);
        }
        println!("{row}");
    }
}
