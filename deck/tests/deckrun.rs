//! deckrun end to end: jobs of `examples/boot_probe` (a DECK-like process
//! that uses only `deck::boot`) on this host and, as root, across the
//! simulated hosts of a `testbed::Cluster` through its rsh agent.
//!
//! Every job runs bounded ([`run_bounded`], or [`Running`] whose waits
//! all have deadlines); a job still running when a test fails is killed
//! with its nodes.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use testbed::process::running;
use testbed::{run_bounded, Cluster, JobOutput};

const DECKRUN: &str = env!("CARGO_BIN_EXE_deckrun");
/// Bound on one job: they take well under a second when all is well.
/// The transport spec of the jobs that need no LLC interface.
const TCP: &str = "tcp://0.0.0.0:0";
const JOB_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a node may take to vanish once deckrun reported the job's end.
const GONE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on building the probe.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// The probe, built once per test binary with the profile and target
/// directory of the deckrun under test.
fn probe() -> &'static Path {
    static PROBE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PROBE.get_or_init(build_probe) {
        Ok(p) => p,
        Err(e) => panic!("cannot build examples/boot_probe: {e}"),
    }
}

fn build_probe() -> Result<PathBuf, String> {
    let profile_dir = Path::new(DECKRUN)
        .parent()
        .ok_or("deckrun has no directory")?;
    let target_dir = profile_dir.parent().ok_or("no target directory")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => return Err(format!("odd profile directory {}", profile_dir.display())),
    };
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "-q", "-p", "deck", "--example", "boot_probe"])
        .args(["--profile", profile])
        .arg("--target-dir")
        .arg(target_dir);
    let out = run_bounded(&mut cmd, BUILD_TIMEOUT).map_err(|e| e.to_string())?;
    if !out.success() {
        return Err(out.to_string());
    }
    let path = profile_dir.join("examples").join("boot_probe");
    if !path.is_file() {
        return Err(format!("{} missing after the build", path.display()));
    }
    Ok(path)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// `deckrun ARGS PROBE PROBE_ARGS`, bounded.
fn deckrun(args: &[&str], probe_args: &[&str]) -> JobOutput {
    let mut cmd = Command::new(DECKRUN);
    cmd.args(args).arg(probe()).args(probe_args);
    run_bounded(&mut cmd, JOB_TIMEOUT).unwrap()
}

fn code(out: &JobOutput) -> Option<i32> {
    out.status.and_then(|s| s.code())
}

/// The lines of `text` that carry node `node`'s prefix, without it.
fn lines_of(text: &str, node: u32) -> Vec<&str> {
    let prefix = format!("[{node}] ");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .collect()
}

/// The pid a probe printed (`pid PID host ...`).
fn pid_of(stdout: &str, node: u32) -> u32 {
    lines_of(stdout, node)
        .iter()
        .find_map(|l| l.strip_prefix("pid ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("node {node} printed no pid:\n{stdout}"))
}

/// Polls (bounded) until none of `pids` runs; there is no event for the
/// end of a process that is not our child.
fn assert_gone(pids: &[u32], context: &str) {
    let deadline = Instant::now() + GONE_TIMEOUT;
    while pids.iter().any(|&p| running(p)) {
        let left: Vec<_> = pids.iter().filter(|&&p| running(p)).collect();
        assert!(
            Instant::now() < deadline,
            "still running {GONE_TIMEOUT:?} later: {left:?}\n{context}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn local_job_gathers_identical_cards_and_prefixes_output() {
    let out = deckrun(
        &["-n", "4", "--transport", TCP],
        &["--rounds", "2", "--stderr", "--partial"],
    );
    assert!(out.success(), "{out}");
    let host = hostname();
    let round0: Vec<String> = (0..4).map(|n| format!("node-{n}@{host}")).collect();
    let round1: Vec<String> = (0..4).map(|n| format!("node-{n}@{host}#1")).collect();
    for node in 0..4 {
        let lines = lines_of(&out.stdout, node);
        assert!(
            lines.contains(&format!("round 0: {}", round0.join(" ")).as_str()),
            "node {node}: {out}"
        );
        assert!(
            lines.contains(&format!("round 1: {}", round1.join(" ")).as_str()),
            "node {node}: {out}"
        );
        // The partial last line came out whole, with its prefix.
        assert!(
            lines.contains(&format!("tail without newline from {node}").as_str()),
            "{out}"
        );
        let err = lines_of(&out.stderr, node);
        assert_eq!(err, [format!("node {node} says hello on stderr")], "{out}");
        assert!(!lines.iter().any(|l| l.contains("stderr")), "{out}");
    }
    // Every line of stdout is a node's, and nothing else was said.
    for line in out.stdout.lines() {
        let node = line
            .strip_prefix('[')
            .and_then(|l| l.split_once("] "))
            .and_then(|(n, _)| n.parse::<u32>().ok());
        assert!(
            node.is_some_and(|n| n < 4),
            "unprefixed line {line:?}\n{out}"
        );
    }
    assert_eq!(out.stdout.lines().count(), 4 * 4, "{out}");
    assert_eq!(out.stderr.lines().count(), 4, "{out}");
}

#[test]
fn failing_node_sets_the_status_and_stops_the_others() {
    let out = deckrun(
        &["-n", "4", "--transport", TCP],
        &["--exit-on", "2:7", "--sleep-others"],
    );
    assert_eq!(code(&out), Some(7), "{out}");
    let host = hostname();
    let line =
        format!("deckrun: node 2 on {host} exited with status 7; stopping the other 3 processes");
    assert!(out.stderr.lines().any(|l| l == line), "{out}");
    let sleepers: Vec<u32> = [0, 1, 3].iter().map(|&n| pid_of(&out.stdout, n)).collect();
    for n in [0, 1, 3] {
        // Each sleeper ended through ABORT, not through a signal.
        let want = format!("deck: node {n}: job aborted by deckrun: node 2 on {host}");
        assert!(
            lines_of(&out.stderr, n)
                .iter()
                .any(|l| l.starts_with(&want)),
            "node {n}: {out}"
        );
    }
    assert_gone(&sleepers, &out.to_string());
}

#[test]
fn signalled_node_gives_128_plus_signal() {
    let out = deckrun(
        &["-n", "3", "--transport", TCP],
        &["--raise-on", "1:9", "--sleep-others"],
    );
    assert_eq!(code(&out), Some(128 + 9), "{out}");
    let line = format!(
        "deckrun: node 1 on {} was killed by signal 9 (SIGKILL); stopping the other 2 processes",
        hostname()
    );
    assert!(out.stderr.lines().any(|l| l == line), "{out}");
    let others = [pid_of(&out.stdout, 0), pid_of(&out.stdout, 2)];
    assert_gone(&others, &out.to_string());
}

/// A file that a job must not create, removed again in any case.
struct Marker(PathBuf);

impl Marker {
    fn new(name: &str) -> Marker {
        let path = std::env::temp_dir().join(format!("deckrun-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        Marker(path)
    }
}

impl Drop for Marker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs deckrun with PROGRAM `touch MARKER`, expecting it to refuse.
fn refused(args: &[&str], env_remove: &[&str], marker: &Marker) -> JobOutput {
    let mut cmd = Command::new(DECKRUN);
    for var in env_remove {
        cmd.env_remove(var);
    }
    cmd.args(args).arg("touch").arg(&marker.0);
    let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
    assert_eq!(code(&out), Some(1), "{out}");
    assert!(!marker.0.exists(), "a node was started: {out}");
    assert_eq!(out.stdout, "", "{out}");
    out
}

#[test]
fn bad_command_lines_start_nothing() {
    let marker = Marker::new("refused");
    let out = refused(
        &[
            "-n",
            "5",
            "--host",
            "localhost:2,127.0.0.1:2",
            "--transport",
            TCP,
        ],
        &[],
        &marker,
    );
    assert!(
        out.stderr
            .contains("5 nodes but only 4 slots on the hosts (localhost:2,127.0.0.1:2)"),
        "{out}"
    );
    let out = refused(
        &["-n", "1", "--transport", TCP, "-x", "DECK_NODE=4"],
        &[],
        &marker,
    );
    assert!(
        out.stderr.contains("deckrun sets DECK_NODE itself"),
        "{out}"
    );
    // An option deckrun does not have (one it had once) is not a program.
    let out = refused(&["-n", "1", "--backend", "tcp"], &[], &marker);
    assert!(
        out.stderr.contains("unknown option --backend")
            && out.stderr.contains("--transport llc://IF?backend=B"),
        "{out}"
    );

    for (program, why) in [
        (
            "./no-such-deck-program",
            "program ./no-such-deck-program: no such file",
        ),
        (
            "no-such-deck-program",
            "program no-such-deck-program: not found in PATH",
        ),
    ] {
        let mut cmd = Command::new(DECKRUN);
        cmd.args(["-n", "2", "--transport", TCP, program]);
        let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
        assert_eq!(code(&out), Some(1), "{out}");
        assert!(out.stderr.contains(why), "{out}");
    }
}

#[test]
fn nodes_get_the_job_environment() {
    let mut cmd = Command::new(DECKRUN);
    cmd.env("DECK_TRANSPORT", "llc://from-env?backend=packet")
        .env("FWD_ME", "forwarded")
        .args(["-n", "2", "-x", "FWD_ME", "-x", "SET_ME=a b"])
        .arg(probe());
    for var in ["DECK_TRANSPORT", "DECK_NUMNODES", "FWD_ME", "SET_ME"] {
        cmd.args(["--show-env", var]);
    }
    let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
    assert!(out.success(), "{out}");
    for node in 0..2 {
        let lines = lines_of(&out.stdout, node);
        for want in [
            // deckrun's own DECK_TRANSPORT, as the spec prints.
            "env DECK_TRANSPORT=llc://from-env?backend=packet",
            "env DECK_NUMNODES=2",
            "env FWD_ME=forwarded",
            "env SET_ME=a b",
        ] {
            assert!(lines.contains(&want), "node {node}: {want}: {out}");
        }
        assert!(lines.iter().any(|l| l.ends_with(" ip 127.0.0.1")), "{out}");
    }

    // --transport wins over deckrun's own; with neither, `llc://` (the
    // stack picks the interface).
    for (flag, want) in [
        (Some(TCP), "env DECK_TRANSPORT=tcp://0.0.0.0:0"),
        (None, "env DECK_TRANSPORT=llc://"),
    ] {
        let mut cmd = Command::new(DECKRUN);
        match flag {
            Some(t) => cmd
                .env("DECK_TRANSPORT", "llc://from-env")
                .args(["--transport", t]),
            None => cmd.env_remove("DECK_TRANSPORT"),
        };
        cmd.args(["-n", "1"])
            .arg(probe())
            .args(["--show-env", "DECK_TRANSPORT"]);
        let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
        assert!(out.success(), "{out}");
        assert!(lines_of(&out.stdout, 0).contains(&want), "{want}: {out}");
    }

    // A spec deckrun cannot read starts nothing and says why.
    let mut cmd = Command::new(DECKRUN);
    cmd.args(["-n", "1", "--transport", "udp://x"]).arg(probe());
    let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
    assert_eq!(code(&out), Some(1), "{out}");
    assert!(out.stderr.contains("--transport udp://x"), "{out}");
}

#[test]
fn nodes_that_never_connect_stop_the_job() {
    let mut cmd = Command::new(DECKRUN);
    cmd.args([
        "-n",
        "2",
        "--transport",
        TCP,
        "--boot-timeout",
        "1",
        "sleep",
        "30",
    ]);
    let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
    assert_eq!(code(&out), Some(1), "{out}");
    let host = hostname();
    let want = format!("node 0 on {host}, node 1 on {host} did not connect to deckrun within 1s");
    assert!(out.stderr.contains(&want), "{out}");
    // SIGTERM at once (no ABORT can reach them), not after `sleep 30`.
    assert!(out.elapsed < Duration::from_secs(20), "{out}");
}

#[test]
fn exit_without_deck_done_during_a_round_stops_the_job() {
    // Node 1 exits 0 before its card: the others' round can never complete.
    let mut cmd = Command::new(DECKRUN);
    cmd.args(["-n", "3", "--transport", TCP, "sh", "-c"])
        .arg(r#"if [ "$DECK_NODE" = 1 ]; then exit 0; fi; exec "$0" --rounds 1"#)
        .arg(probe());
    let out = run_bounded(&mut cmd, JOB_TIMEOUT).unwrap();
    assert_eq!(code(&out), Some(1), "{out}");
    assert!(
        out.stderr
            .contains("exited before bootstrap round 0 was complete"),
        "{out}"
    );
}

/// A deckrun whose output is read while it runs, for tests that act on
/// the job midway. Dropping it kills deckrun's group and any node it
/// printed, so nothing outlives a failed test.
struct Running {
    pid: u32,
    out: Arc<(Mutex<(String, String)>, Condvar)>,
    exit: mpsc::Receiver<ExitStatus>,
    ended: Option<ExitStatus>,
}

impl Running {
    fn start(args: &[&str], probe_args: &[&str]) -> Running {
        let mut child: Child = Command::new(DECKRUN)
            .args(args)
            .arg(probe())
            .args(probe_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let out = Arc::new((Mutex::new((String::new(), String::new())), Condvar::new()));
        for (i, pipe) in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ]
        .into_iter()
        .enumerate()
        {
            let out = out.clone();
            thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    let mut o = out.0.lock().unwrap();
                    if i == 0 { &mut o.0 } else { &mut o.1 }.push_str(&text);
                    out.1.notify_all();
                }
            });
        }
        let pid = child.id();
        let (tx, exit) = mpsc::channel();
        thread::spawn(move || {
            if let Ok(status) = child.wait() {
                let _ = tx.send(status);
            }
        });
        Running {
            pid,
            out,
            exit,
            ended: None,
        }
    }

    /// Waits (bounded) until stdout satisfies `ready`.
    fn wait_stdout(&self, ready: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + JOB_TIMEOUT;
        let mut o = self.out.0.lock().unwrap();
        while !ready(&o.0) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out; stdout:\n{}\nstderr:\n{}",
                o.0,
                o.1
            );
            o = self.out.1.wait_timeout(o, left).unwrap().0;
        }
        o.0.clone()
    }

    fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.pid as i32), sig).unwrap();
    }

    /// Waits (bounded) for deckrun's exit.
    fn wait(&mut self) -> ExitStatus {
        let status = self
            .exit
            .recv_timeout(JOB_TIMEOUT)
            .expect("deckrun did not exit");
        self.ended = Some(status);
        status
    }

    fn output(&self) -> (String, String) {
        self.out.0.lock().unwrap().clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.ended.is_none() {
            let _ = killpg(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        }
        // Nodes are in groups of their own: those it printed, if still
        // running (a failed test).
        let stdout = self.output().0;
        for line in stdout.lines() {
            let pid = line
                .split_once("] pid ")
                .and_then(|(_, rest)| rest.split(' ').next()?.parse::<i32>().ok());
            if let Some(pid) = pid.filter(|&p| running(p as u32)) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
}

/// True once every one of `n` nodes printed its round-0 cards.
fn all_exchanged(n: u32) -> impl Fn(&str) -> bool {
    move |s| (0..n).all(|node| lines_of(s, node).iter().any(|l| l.starts_with("round 0:")))
}

#[test]
fn sigterm_to_deckrun_stops_the_job() {
    let mut job = Running::start(&["-n", "3", "--transport", TCP], &["--sleep-others"]);
    let stdout = job.wait_stdout(all_exchanged(3));
    job.signal(Signal::SIGTERM);
    let status = job.wait();
    let (out, err) = job.output();
    assert_eq!(status.code(), Some(130), "{out}\n{err}");
    assert!(
        err.contains("deckrun: interrupted; stopping the 3 processes"),
        "{err}"
    );
    let pids: Vec<u32> = (0..3).map(|n| pid_of(&stdout, n)).collect();
    assert_gone(&pids, &err);
}

#[test]
fn nodes_exit_when_deckrun_dies() {
    let mut job = Running::start(&["-n", "3", "--transport", TCP], &["--sleep-others"]);
    let stdout = job.wait_stdout(all_exchanged(3));
    let pids: Vec<u32> = (0..3).map(|n| pid_of(&stdout, n)).collect();
    // SIGKILL: deckrun can tell nobody; the nodes' watchdogs see the
    // connection end.
    job.signal(Signal::SIGKILL);
    job.wait();
    assert_gone(&pids, &stdout);
}

#[test]
fn job_across_two_hosts() {
    testbed::require_root!();
    let cluster = Cluster::new(2, 1500).unwrap();
    let h0_ip = cluster.hosts()[0].ipv4.to_string();
    let h1_ip = cluster.hosts()[1].ipv4.to_string();
    let run = |probe_args: &[&str]| {
        let mut cmd = cluster.command(0, DECKRUN);
        cmd.args(["-n", "4", "--host", "h0:2,h1:2", "--rsh"])
            .arg(cluster.agent())
            .args(["--transport", TCP, "-x", "FWD_ME=across"])
            .arg(probe())
            .args(probe_args);
        run_bounded(&mut cmd, JOB_TIMEOUT).unwrap()
    };

    let out = run(&["--show-env", "FWD_ME", "--show-env", "DECK_BOOT"]);
    assert!(out.success(), "{out}");
    let cards = "round 0: node-0@h0 node-1@h0 node-2@h1 node-3@h1";
    for node in 0..4 {
        let lines = lines_of(&out.stdout, node);
        let (host, ip) = if node < 2 {
            ("h0", h0_ip.as_str())
        } else {
            ("h1", h1_ip.as_str())
        };
        let hello = lines.iter().find(|l| l.starts_with("pid ")).unwrap();
        assert!(hello.ends_with(&format!(" host {host} ip {ip}")), "{out}");
        assert!(lines.contains(&cards), "node {node}: {out}");
        assert!(lines.contains(&"env FWD_ME=across"), "{out}");
        // Every node reaches deckrun at h0's address on the shared link
        // (local ones too: a TCP transport binds the address the launcher
        // was reached from, which the other hosts must reach).
        let boot = lines
            .iter()
            .find(|l| l.starts_with("env DECK_BOOT="))
            .unwrap();
        assert!(
            boot["env DECK_BOOT=".len()..].starts_with(&format!("{h0_ip}:")),
            "{out}"
        );
    }

    let out = run(&["--exit-on", "3:5", "--sleep-others"]);
    assert_eq!(code(&out), Some(5), "{out}");
    assert!(
        out.stderr
            .lines()
            .any(|l| l
                == "deckrun: node 3 on h1 exited with status 5; stopping the other 3 processes"),
        "{out}"
    );
    for n in 0..3 {
        let want = format!("deck: node {n}: job aborted by deckrun: node 3 on h1");
        assert!(
            lines_of(&out.stderr, n)
                .iter()
                .any(|l| l.starts_with(&want)),
            "node {n}: {out}"
        );
    }
}
