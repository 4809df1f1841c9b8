//! The simulated cluster (`testbed::cluster`): the bed itself, its rsh agent, and Open MPI
//! jobs across its hosts (root needed; skipped otherwise; the MPI tests need Open MPI, which
//! scripts/install-deps.sh installs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use testbed::{
    format_mac, forward_env, run_bounded, run_checked, Cluster, JobOutput, SecondRail,
    CLUSTER_IFNAME, CLUSTER_IFNAME2,
};

/// Bound of every small command.
const WAIT: Duration = Duration::from_secs(10);
/// Bound of one MPI job (they take about a second; the machine may be busy).
const JOB: Duration = Duration::from_secs(60);
/// How often a btl/tcp job is tried when Open MPI reports a failed TCP connect (see
/// `JobOutput::btl_tcp_connect_failed`).
const TCP_ATTEMPTS: usize = 3;

/// One MPI job at a time: they would fight over the 2 cores.
static MPI: Mutex<()> = Mutex::new(());

/// Panics with a hint when an Open MPI tool is missing.
fn require_tool(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` not found: Open MPI is needed for this test; run scripts/install-deps.sh \
         (Debian packages openmpi-bin and libopenmpi-dev)"
    );
}

/// Runs `cmd` (bounded) and panics with its output unless it succeeds.
fn run_ok(cmd: &mut Command) -> JobOutput {
    let out = run_bounded(cmd, WAIT).expect("starting a command");
    assert!(out.success(), "{out}");
    out
}

#[test]
fn two_hosts_with_one_interface_each() {
    testbed::require_root!();
    let cluster = Cluster::new(2, 9000).expect("Cluster::new");
    let hosts = cluster.hosts();
    assert_eq!(hosts.len(), 2);
    assert!(cluster.subnet().ends_with(".0/24"), "{}", cluster.subnet());

    for (i, h) in hosts.iter().enumerate() {
        assert_eq!(h.hostname, format!("h{i}"));
        // Exactly lo and eth0, with the MAC, MTU and address the cluster reports.
        let links = h.ns.ip(&["-o", "link", "show"]).unwrap();
        let names: BTreeSet<&str> = links
            .lines()
            .filter_map(|l| l.split(':').nth(1))
            .map(|n| n.trim().split('@').next().unwrap())
            .collect();
        assert_eq!(names, BTreeSet::from(["lo", CLUSTER_IFNAME]), "{links}");
        let eth0 =
            h.ns.ip(&["-o", "link", "show", "dev", CLUSTER_IFNAME])
                .unwrap();
        assert!(eth0.contains(" mtu 9000 "), "{eth0}");
        assert!(eth0.contains("state UP"), "{eth0}");
        assert!(eth0.contains(&format_mac(&h.mac)), "{eth0}");
        let addr =
            h.ns.ip(&["-o", "-4", "addr", "show", "dev", CLUSTER_IFNAME])
                .unwrap();
        assert!(addr.contains(&format!(" {}/24 ", h.ipv4)), "{addr}");
        assert!(!h
            .ns
            .ip(&["-o", "-6", "addr", "show", "dev", CLUSTER_IFNAME])
            .unwrap()
            .contains("inet6"));

        for other in hosts {
            if other.ipv4 != h.ipv4 {
                let mut ping = h.ns.command("ping");
                ping.args(["-c1", "-W2", "-w5", &other.ipv4.to_string()]);
                if let Err(e) = run_checked(&mut ping, WAIT) {
                    panic!("ping {} from {}: {e}", other.ipv4, h.hostname);
                }
            }
        }
    }
    let hub_addrs = cluster.hub().ip(&["-o", "-4", "addr", "show"]).unwrap();
    assert!(
        hub_addrs.lines().all(|l| l.contains(" lo ")),
        "the hub has no address: {hub_addrs}"
    );

    // A command on a host sees its hostname, an empty private /dev/shm, the cluster's
    // names, and a TMPDIR of its own.
    let probe = "cat /proc/sys/kernel/hostname; ls -A /dev/shm | wc -l; touch /dev/shm/mine; \
                 getent hosts h0 h1 | tr -s ' \\t' ' '; test -d \"$TMPDIR\" && echo tmpdir";
    for (i, h) in hosts.iter().enumerate() {
        let out = run_ok(cluster.command(i, "sh").args(["-c", probe]));
        let want = format!(
            "{}\n0\n{} h0\n{} h1\ntmpdir\n",
            h.hostname, hosts[0].ipv4, hosts[1].ipv4
        );
        assert_eq!(out.stdout, want, "{out}");
    }
    // The outer /dev/shm did not get the file.
    assert!(!Path::new("/dev/shm/mine").exists());

    // The agent, called as Open MPI calls ssh: the words are joined and run by a shell,
    // so quotes and ';' in them work; the host may be named by address too.
    let agent = cluster.agent();
    let words = ["echo", "\"a;b\"", "$(hostname)", ";", "echo", "$#"];
    let out = run_ok(Command::new(&agent).arg("h1").args(words));
    assert_eq!(out.stdout, "a;b h1\n0\n", "{out}");
    let out = run_ok(Command::new(&agent).args(["-x", &hosts[0].ipv4.to_string(), "hostname"]));
    assert_eq!(out.stdout, "h0\n", "{out}");
    let out = run_bounded(Command::new(&agent).args(["h9", "true"]), WAIT).unwrap();
    assert_eq!(out.status.and_then(|s| s.code()), Some(255), "{out}");
    assert!(out.stderr.contains("unknown host"), "{out}");
}

/// The ports of the bridge in `hub` (`ip link show master br0`).
fn bridge_ports(hub: &testbed::Netns) -> BTreeSet<String> {
    hub.ip(&["-o", "link", "show", "master", "br0"])
        .unwrap()
        .lines()
        .filter_map(|l| l.split(':').nth(1))
        .map(|n| n.trim().split('@').next().unwrap().to_owned())
        .collect()
}

#[test]
fn two_rails_per_host_on_bridges_of_their_own_or_one() {
    testbed::require_root!();
    for layout in [SecondRail::OwnBridge, SecondRail::SameBridge] {
        let cluster = Cluster::with_rails(2, 1500, layout).expect("Cluster::with_rails");
        let subnet2 = cluster.subnet2().expect("a second subnet");
        assert_ne!(subnet2, cluster.subnet());
        let hosts = cluster.hosts();
        for h in hosts {
            let (mac2, ipv4_2) = h.second.expect("eth1");
            let eth1 =
                h.ns.ip(&["-o", "link", "show", "dev", CLUSTER_IFNAME2])
                    .unwrap();
            assert!(
                eth1.contains("state UP") && eth1.contains(" mtu 1500 "),
                "{eth1}"
            );
            assert!(eth1.contains(&format_mac(&mac2)), "{eth1}");
            assert_ne!(mac2, h.mac);
            let addr =
                h.ns.ip(&["-o", "-4", "addr", "show", "dev", CLUSTER_IFNAME2])
                    .unwrap();
            assert!(addr.contains(&format!(" {ipv4_2}/24 ")), "{addr}");
        }
        // Each rail carries frames between the hosts.
        for (ip, dev) in [
            (hosts[1].ipv4, CLUSTER_IFNAME),
            (hosts[1].second.unwrap().1, CLUSTER_IFNAME2),
        ] {
            let mut ping = hosts[0].ns.command("ping");
            ping.args(["-c1", "-W2", "-w5", "-I", dev, &ip.to_string()]);
            if let Err(e) = run_checked(&mut ping, WAIT) {
                panic!("{layout:?}: ping {ip} over {dev}: {e}");
            }
        }
        let ports = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        match layout {
            SecondRail::OwnBridge => {
                assert_eq!(bridge_ports(cluster.hub()), ports(&["p0", "p1"]));
                let hub2 = cluster.hub2().expect("a hub of its own");
                assert_eq!(bridge_ports(hub2), ports(&["q0", "q1"]));
            }
            SecondRail::SameBridge => {
                assert!(cluster.hub2().is_none());
                assert_eq!(
                    bridge_ports(cluster.hub()),
                    ports(&["p0", "p1", "q0", "q1"])
                );
            }
        }
    }
}

#[test]
fn cluster_is_deleted_on_drop() {
    testbed::require_root!();
    let cluster = Cluster::new(1, 1500).expect("Cluster::new");
    let names = [
        cluster.hub().name().to_owned(),
        cluster.hosts()[0].ns.name().to_owned(),
    ];
    let agent = cluster.agent();
    assert!(agent.is_file());
    let dir = agent.parent().unwrap().to_owned();
    drop(cluster);
    let listed = run_checked(Command::new("ip").args(["netns", "list"]), WAIT).unwrap();
    for name in &names {
        assert!(
            !listed.contains(name.as_str()),
            "{name} left behind: {listed}"
        );
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn mpirun_sees_two_nodes() {
    testbed::require_root!();
    require_tool("mpirun");
    let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(2, 1500).expect("Cluster::new");
    let mut cmd = cluster.mpirun(2);
    forward_env(&mut cmd, "LLCT_PROBE", "forwarded");
    cmd.args([
        "sh",
        "-c",
        "echo $(hostname) $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_LOCAL_RANK $LLCT_PROBE",
    ]);
    let out = run_bounded(&mut cmd, JOB).expect("starting mpirun");
    assert!(out.success(), "{out}");
    let seen: BTreeSet<(String, u32, u32)> = out
        .stdout
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "unexpected line {l:?} in\n{out}");
            assert_eq!(f[3], "forwarded", "{out}");
            (
                f[0].to_owned(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    let want = BTreeSet::from([
        ("h0".to_owned(), 0, 0),
        ("h0".to_owned(), 1, 1),
        ("h1".to_owned(), 2, 0),
        ("h1".to_owned(), 3, 1),
    ]);
    assert_eq!(seen, want, "{out}");
    eprintln!("mpirun on 2 hosts x 2 ranks took {:?}", out.elapsed);
}

/// A ring (each rank adds its rank to a token) and an allreduce, both checked; rank 0
/// prints "ring: OK" with the number of distinct hosts it saw.
const RING_C: &str = r#"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long token = 0;
    for (int round = 0; round < 20; round++) {
        if (rank == 0) {
            token = 1;
            MPI_Send(&token, 1, MPI_LONG, next, round, MPI_COMM_WORLD);
            MPI_Recv(&token, 1, MPI_LONG, prev, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (token != 1 + (long) size * (size - 1) / 2) {
                fprintf(stderr, "ring: round %d: token %ld\n", round, token);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank;
            MPI_Send(&token, 1, MPI_LONG, next, round, MPI_COMM_WORLD);
        }
    }
    /* 256 KiB each way between every pair: rendezvous over vader and tcp. */
    static char out[256 << 10], in[256 << 10];
    for (int peer = 0; peer < size; peer++) {
        if (peer == rank) continue;
        memset(out, rank + 1, sizeof out);
        MPI_Sendrecv(out, sizeof out, MPI_CHAR, peer, 7, in, sizeof in, MPI_CHAR, peer, 7,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (size_t i = 0; i < sizeof in; i++) {
            if (in[i] != (char) (peer + 1)) {
                fprintf(stderr, "ring: byte %zu from %d is %d\n", i, peer, in[i]);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
    }
    long mine = rank + 1, sum = 0;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (sum != (long) size * (size + 1) / 2) {
        fprintf(stderr, "ring: allreduce gave %ld\n", sum);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    char host[256] = {0}, all[64][256];
    gethostname(host, sizeof host - 1);
    MPI_Gather(host, 256, MPI_CHAR, all, 256, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        int distinct = 0;
        for (int i = 0; i < size && i < 64; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= 0 == strcmp(all[i], all[j]);
            distinct += !seen;
        }
        printf("ring: OK %d ranks on %d hosts\n", size, distinct);
    }
    MPI_Finalize();
    return 0;
}
"#;

/// A directory for the compiled program, removed on drop.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles RING_C with mpicc into a fresh directory.
fn build_ring() -> (Scratch, PathBuf) {
    require_tool("mpicc");
    let dir = std::env::temp_dir().join(format!("llct-cluster-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let scratch = Scratch(dir.clone());
    std::fs::write(dir.join("ring.c"), RING_C).unwrap();
    let exe = dir.join("ring");
    let mut cc = Command::new("mpicc");
    cc.arg("-O2").arg("-o").arg(&exe).arg(dir.join("ring.c"));
    let out = run_bounded(&mut cc, JOB).expect("starting mpicc");
    assert!(out.success(), "{out}");
    (scratch, exe)
}

#[test]
fn mpi_ring_over_vader_and_tcp() {
    testbed::require_root!();
    require_tool("mpirun");
    let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
    let (_scratch, ring) = build_ring();
    let cluster = Cluster::new(2, 1500).expect("Cluster::new");
    let job = |btl: &str| {
        let mut cmd = cluster.mpirun(2);
        cmd.args(["--mca", "pml", "ob1", "--mca", "btl", btl])
            .args(["--mca", "btl_tcp_if_include", &cluster.subnet()])
            .arg(&ring);
        run_bounded(&mut cmd, JOB).expect("starting mpirun")
    };

    // vader between the ranks of one host, tcp between hosts. btl/tcp of Open MPI 4.1.4
    // has been seen to fail a connect now and then on such a bed: retry that, bounded.
    let mut attempts = Vec::new();
    let out = loop {
        let out = job("self,vader,tcp");
        if out.success() || !out.btl_tcp_connect_failed() || attempts.len() + 1 == TCP_ATTEMPTS {
            break out;
        }
        eprintln!("btl/tcp connect failure, trying again:\n{out}");
        attempts.push(out);
    };
    assert!(out.success(), "{out}");
    assert!(out.stdout.contains("ring: OK 4 ranks on 2 hosts"), "{out}");
    eprintln!(
        "self,vader,tcp on 2 hosts x 2 ranks: {:?}, {} retries",
        out.elapsed,
        attempts.len()
    );

    // Without tcp, ranks of different hosts cannot reach each other: Open MPI does not
    // take the two hosts for one shared-memory node. Its daemon on the first host relays
    // the other host's explanation, and Open MPI 4.1.4 has been seen to lose it in transit
    // now and then (`ORTE_ERROR_LOG: Data unpack would read past end of buffer in file
    // .../show_help.c`, the job failing all the same): run again for the explanation,
    // bounded.
    let mut tries = 0;
    let (out, text) = loop {
        tries += 1;
        let out = job("self,vader");
        let text = format!("{}{}", out.stdout, out.stderr);
        let lost = text.contains("show_help.c") && !text.contains("unable to reach each other");
        if !lost || tries == TCP_ATTEMPTS {
            break (out, text);
        }
        eprintln!("the failing job's explanation was lost in transit, trying again:\n{out}");
    };
    eprintln!("self,vader: failed as it should after {:?}", out.elapsed);
    assert!(!out.success() && !out.timed_out(), "{out}");
    assert!(text.contains("unable to reach each other"), "{out}");
}

/// Pids of processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            found.push(format!(
                "{}: {cmdline}",
                entry.file_name().to_string_lossy()
            ));
        }
    }
    found
}

#[test]
fn timed_out_job_leaves_no_process_on_three_hosts() {
    testbed::require_root!();
    require_tool("mpirun");
    let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
    let cluster = Cluster::new(3, 1500).expect("Cluster::new");
    // A sleep no other program runs: its argument carries our pid.
    let marker = format!("86399.{}", std::process::id());
    let mut cmd = cluster.mpirun(1);
    cmd.args([
        "sh",
        "-c",
        &format!("echo started $(hostname); exec sleep {marker}"),
    ]);
    let out = run_bounded(&mut cmd, Duration::from_secs(3)).expect("starting mpirun");
    assert!(out.timed_out(), "{out}");
    eprintln!("mpirun killed {:?} after its start", out.elapsed);
    // Three hosts: the third daemon started through the agent too.
    for host in ["h0", "h1", "h2"] {
        assert!(out.stdout.contains(&format!("started {host}\n")), "{out}");
    }
    let left = processes_with(&marker);
    assert!(left.is_empty(), "ranks outlived their job: {left:?}\n{out}");
}

/// Many btl/tcp jobs in a row (`LLCT_TCP_RUNS`, default 20), counting those where Open MPI
/// reports a failed TCP connect: the measurement behind the retry above. Not run by default
/// (tens of seconds): `cargo test -p testbed --test cluster -- --ignored --nocapture`.
#[test]
#[ignore]
fn btl_tcp_connect_stress() {
    testbed::require_root!();
    require_tool("mpirun");
    let _one = MPI.lock().unwrap_or_else(|e| e.into_inner());
    let runs: usize = std::env::var("LLCT_TCP_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let (_scratch, ring) = build_ring();
    let cluster = Cluster::new(2, 1500).expect("Cluster::new");
    let (mut connect_failures, mut other_failures) = (0, 0);
    for run in 0..runs {
        // Alternate: with vader on each host, and tcp only (same-host ranks over tcp too).
        let btl = if run % 2 == 0 {
            "self,vader,tcp"
        } else {
            "self,tcp"
        };
        let mut cmd = cluster.mpirun(2);
        cmd.args(["--mca", "pml", "ob1", "--mca", "btl", btl])
            .args(["--mca", "btl_tcp_if_include", &cluster.subnet()])
            .arg(&ring);
        let out = run_bounded(&mut cmd, JOB).expect("starting mpirun");
        if out.btl_tcp_connect_failed() {
            connect_failures += 1;
            eprintln!("run {run} ({btl}): TCP connect failure\n{out}");
        } else if !out.success() {
            other_failures += 1;
            eprintln!("run {run} ({btl}): failed\n{out}");
        }
    }
    eprintln!("{runs} runs: {connect_failures} TCP connect failures, {other_failures} others");
    assert_eq!((connect_failures, other_failures), (0, 0));
}
