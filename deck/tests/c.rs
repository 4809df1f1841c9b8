//! The C API as C programs use it: the seed's appendix B program and
//! `deck_check.c` (every primitive, every error), compiled against
//! `include/deck.h` and `libdeck.so`, run as jobs by `deckrun`: over TCP on
//! this host (no privileges), and over LLC on one simulated host (nodes
//! sharing its NIC) and across two simulated hosts (root; skipped with a
//! printed reason otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use testbed::cdylib::{compile_c, profile_dir};
use testbed::{run_bounded, Cluster, JobOutput};

/// One job at a time: they would fight over the 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

const JOB_TIMEOUT: Duration = Duration::from_secs(240);

struct Built {
    appendix_b: PathBuf,
    deck_check: PathBuf,
}

fn build() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let compile = |src: &str, flags: &[&str]| {
            let out = profile_dir()
                .join("deck-c")
                .join(src.trim_end_matches(".c"));
            compile_c(
                &dir.join("tests/c").join(src),
                &dir.join("include"),
                "deck",
                &out,
                flags,
                &["-lpthread"],
            )
        };
        Built {
            // The seed's program as printed: it passes unsigned long to %d,
            // which compilers warn about; it must compile, not be clean.
            appendix_b: compile("appendix_b.c", &["-O2"]),
            deck_check: compile("deck_check.c", &["-O2", "-Wall", "-Wextra", "-Werror"]),
        }
    })
}

/// `deckrun ARGS` on this host, bounded.
fn deckrun_here(args: &[&str], program: &Path, prog_args: &[&str]) -> JobOutput {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_deckrun"));
    cmd.args(args)
        .args(["-x", "DECK_CLONE_WAIT_MS=2000"])
        .arg(program)
        .args(prog_args)
        .env("DECK_CLONE_WAIT_MS", "2000");
    run_bounded(&mut cmd, JOB_TIMEOUT).expect("running deckrun")
}

/// `deckrun` on host 0 of `cluster`, placing `per_host[i]` nodes on host i.
fn deckrun_cluster(
    cluster: &Cluster,
    per_host: &[usize],
    transport: &str,
    program: &Path,
    prog_args: &[&str],
) -> JobOutput {
    let hosts: Vec<String> = cluster
        .hosts()
        .iter()
        .zip(per_host)
        .map(|(h, k)| format!("{}:{k}", h.hostname))
        .collect();
    let n = per_host.iter().sum::<usize>().to_string();
    let mut cmd = cluster.command(0, env!("CARGO_BIN_EXE_deckrun"));
    cmd.args(["-n", &n, "--host", &hosts.join(","), "--rsh"])
        .arg(cluster.agent())
        .args(["--transport", transport])
        .args(["-x", "DECK_CLONE_WAIT_MS=2000"])
        // Each node says how its frames are keyed.
        .args(["-x", "DECK_LOG=deck::runtime=info"])
        .arg(program)
        .args(prog_args)
        .env("DECK_CLONE_WAIT_MS", "2000")
        // A job with nothing set: deckrun draws its key.
        .env_remove("LLC_AUTH_KEY");
    run_bounded(&mut cmd, JOB_TIMEOUT).expect("running deckrun")
}

/// The key fingerprint each node of a job run by [`deckrun_cluster`]
/// said it authenticates its frames with, by node.
fn node_keys(out: &JobOutput, n: usize) -> Vec<String> {
    node_keys_prefixed(out, n, |node| format!("[{node}] "))
}

/// [`node_keys`] for a launcher that starts node `i`'s lines with `prefix(i)`.
fn node_keys_prefixed(out: &JobOutput, n: usize, prefix: impl Fn(usize) -> String) -> Vec<String> {
    const SAYS: &str = "frames authenticated with key fingerprint ";
    (0..n)
        .map(|node| {
            let prefix = prefix(node);
            let line = out
                .stderr
                .lines()
                .chain(out.stdout.lines())
                .find(|l| l.starts_with(&prefix) && l.contains(SAYS))
                .unwrap_or_else(|| panic!("node {node} did not say its key:\n{out}"));
            let rest = line.split(SAYS).nth(1).expect("after the words");
            assert!(rest.contains("(key from the launcher)"), "{line}");
            rest.split_whitespace().next().unwrap_or("").to_string()
        })
        .collect()
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn the_seeds_example_compiles_unchanged_and_prints_the_right_values() {
    let b = build();
    let _g = lock();
    // Alone: a job of one node.
    let out = Command::new(&b.appendix_b).output().expect("appendix_b");
    assert!(out.status.success());
    let alone = String::from_utf8_lossy(&out.stdout);
    assert!(alone.contains("caractere = L"), "{alone}");
    assert!(alone.contains("string = GPPD!"), "{alone}");
    assert!(alone.contains("inteiro = 0"), "{alone}");
    // Two nodes: node 1 packs vetor[i] = 1 * i. (The seed prints `node`,
    // which it never sets: the number after "nó" means nothing.)
    let out = deckrun_here(
        &["-n", "2", "--transport", "tcp://0.0.0.0:0"],
        &b.appendix_b,
        &[],
    );
    assert!(out.success(), "{out}");
    let node_says = |node: u32, what: &str| {
        out.stdout
            .lines()
            .any(|l| l.starts_with(&format!("[{node}] DEBUG nó")) && l.ends_with(what))
    };
    for i in 0..10 {
        let what = format!(": vetor[{i}] = {i}.000000");
        assert!(node_says(1, &what), "node 1 did not print {what:?}:\n{out}");
    }
    assert!(node_says(1, ": inteiro = 1"), "{out}");
    assert!(node_says(0, ": inteiro = 0"), "{out}");
    assert!(node_says(0, ": string = GPPD!"), "{out}");
    assert!(node_says(1, ": caractere = L"), "{out}");
}

fn assert_checks_pass(out: &JobOutput, test: &str, n: usize) {
    assert!(out.success(), "{out}");
    let want = format!("[0] deck_check {test}: ok ({n} nodes)");
    assert!(out.stdout.contains(&want), "missing {want:?} in\n{out}");
}

#[test]
fn every_primitive_and_error_over_tcp_on_this_host() {
    let b = build();
    let _g = lock();
    let out = deckrun_here(
        &["-n", "5", "--transport", "tcp://0.0.0.0:0"],
        &b.deck_check,
        &["all"],
    );
    assert_checks_pass(&out, "all", 5);
}

/// Five nodes: the all-to-one check then has four senders of 1,000
/// messages each.
#[test]
fn every_primitive_and_error_over_llc_with_five_nodes_on_one_nic() {
    testbed::require_root!();
    let b = build();
    let _g = lock();
    let cluster = Cluster::new(1, 1500).expect("bed");
    for backend in ["xdp", "packet"] {
        let out = deckrun_cluster(
            &cluster,
            &[5],
            &format!("llc://eth0?backend={backend}"),
            &b.deck_check,
            &["all"],
        );
        assert_checks_pass(&out, "all", 5);
    }
}

#[test]
fn every_primitive_and_error_over_llc_across_two_hosts() {
    testbed::require_root!();
    let b = build();
    let _g = lock();
    let cluster = Cluster::new(2, 9000).expect("bed");
    // A ring of four, two per host.
    let out = deckrun_cluster(
        &cluster,
        &[2, 2],
        "llc://eth0?backend=xdp",
        &b.deck_check,
        &["ring"],
    );
    assert_checks_pass(&out, "ring", 4);
    // Keyed by default: deckrun drew a key and every node, on both hosts,
    // authenticated its frames with it.
    let keys = node_keys(&out, 4);
    assert_eq!(keys[0].len(), 8, "a key fingerprint: {keys:?}");
    assert!(keys.iter().all(|k| *k == keys[0]), "one key: {keys:?}");
    // Everything with five nodes (four senders to node 0), three on h0.
    let out = deckrun_cluster(
        &cluster,
        &[3, 2],
        "llc://eth0?backend=xdp",
        &b.deck_check,
        &["all"],
    );
    assert_checks_pass(&out, "all", 5);
    let out = deckrun_cluster(
        &cluster,
        &[1, 1],
        "llc://eth0?backend=packet",
        &b.deck_check,
        &["sizes"],
    );
    assert_checks_pass(&out, "sizes", 2);
    // No interface named (as with btl/llc, nothing set): each node opens
    // its host's one Ethernet interface.
    let out = deckrun_cluster(
        &cluster,
        &[2, 2],
        "llc://?backend=xdp",
        &b.deck_check,
        &["ring"],
    );
    assert_checks_pass(&out, "ring", 4);
    // The same program where LLC cannot run: TCP between the hosts' addresses.
    let out = deckrun_cluster(
        &cluster,
        &[2, 2],
        "tcp://0.0.0.0:0",
        &b.deck_check,
        &["all"],
    );
    assert_checks_pass(&out, "all", 4);
}

/// As a cluster's users run jobs: deckrun, its nodes and the agent's
/// logins run as an ordinary user with no capabilities, and the stack's
/// endpoint service (llcd) on every host opens the nodes' endpoints.
#[test]
fn the_ring_across_two_hosts_as_an_ordinary_user() {
    testbed::require_root!();
    let b = build();
    let _g = lock();
    let user = testbed::TestUser::ensure("llc-job-a").expect("test account");
    let mut cluster = Cluster::new(2, 1500).expect("bed");
    cluster.start_llcd("").expect("llcd on every host");
    cluster.login_as(&user).expect("logins as the user");
    let out = deckrun_cluster(&cluster, &[2, 2], "llc://eth0", &b.deck_check, &["ring"]);
    assert_checks_pass(&out, "ring", 4);
    for i in 0..2 {
        let log = cluster.llcd_log(i);
        assert!(
            log.contains("granted user=llc-job-a"),
            "host {i}'s nodes got their endpoints from llcd:\n{log}"
        );
    }
}

/// `deck_check TEST` started by Slurm with no deckrun: `srun --mpi=pmix -N 2 -n 4` on the
/// Slurm bed (`testbed::slurm`), two nodes on each host, `DECK_TRANSPORT` unset (`llc://`:
/// each node finds its host's eth0 on its own), nothing else set. Returns srun's output
/// once it succeeded and node 0 said the test passed.
fn deck_check_under_srun(test: &str) -> JobOutput {
    let b = build();
    let slurm =
        testbed::slurm::Slurm::start(Cluster::new(2, 1500).expect("bed"), 2).expect("Slurm bed");
    let mut srun = slurm.command("srun");
    // -K: a node that fails ends the step.
    srun.args(["--mpi=pmix", "-K", "-N", "2", "-n", "4", "-l"])
        .arg(&b.deck_check)
        .arg(test)
        .env("DECK_CLONE_WAIT_MS", "2000")
        .env("DECK_LOG", "deck::runtime=info")
        .env_remove("DECK_TRANSPORT")
        .env_remove("DECK_BOOT")
        .env_remove("LLC_AUTH_KEY")
        // srun hands its environment to the tasks: cargo's LD_LIBRARY_PATH could name an
        // older libdeck.so left in target/<profile> by a `cargo build`, which would win
        // over deck_check's run path to the one it was linked with.
        .env_remove("LD_LIBRARY_PATH");
    let out = run_bounded(&mut srun, JOB_TIMEOUT).expect("running srun");
    assert!(out.success(), "{out}");
    let want = format!("0: deck_check {test}: ok (4 nodes)");
    assert!(out.stdout.contains(&want), "missing {want:?} in\n{out}");
    out
}

/// The ring with no deckrun: each node learns its number, the job's size and its rank on
/// its host from Slurm's PMIx server, gets the job's key from node 0 and every node's
/// address through PMIx; all four use one key, the launcher's.
#[test]
fn the_ring_under_srun_with_no_deckrun() {
    testbed::require_root!();
    let _g = lock();
    let out = deck_check_under_srun("ring");
    let keys = node_keys_prefixed(&out, 4, |node| format!("{node}: "));
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}\n{out}");
}

/// Every primitive and error of `deck_check` under srun, the naming service included:
/// its semantics do not depend on the launcher.
#[test]
fn every_primitive_and_error_under_srun() {
    testbed::require_root!();
    let _g = lock();
    deck_check_under_srun("all");
}
