//! llc-stat against real endpoints: llc-ping's reliable echo between two
//! network namespaces joined by a veth pair (AF_PACKET), read while it
//! runs. The MPI rank case is in mpi-btl-shim/tests/install.rs, where the
//! installed llc-stat watches a job started from the installation.
//!
//! Needs root (namespaces, raw sockets); prints SKIPPED when not root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use testbed::{format_mac, run_checked, Background, TwoHosts};

const STAT: &str = env!("CARGO_BIN_EXE_llc-stat");
/// Bound on one llc-stat run.
const STAT_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on waiting for a page to show what the test waits for.
const SHOW_TIMEOUT: Duration = Duration::from_secs(15);
/// Bound on building llc-ping.
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// llc-ping, built with this test's profile and target directory (a binary
/// of another package: cargo does not build it for this one's tests).
fn llc_ping() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let profile_dir = Path::new(STAT).parent().expect("llc-stat's directory");
        let target_dir = profile_dir.parent().expect("target directory");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(other) => other,
            None => panic!("odd profile directory {}", profile_dir.display()),
        };
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "-q", "-p", "llc-ping", "--bin", "llc-ping"])
            .args(["--profile", profile])
            .arg("--target-dir")
            .arg(target_dir);
        run_checked(&mut cmd, BUILD_TIMEOUT).expect("building llc-ping");
        let bin = profile_dir.join("llc-ping");
        assert!(bin.is_file(), "{} missing after the build", bin.display());
        bin
    })
}

/// `llc-stat ARGS` (exit code, stdout, stderr), bounded.
fn stat(args: &[&str], dir: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new("timeout");
    cmd.arg(STAT_TIMEOUT.as_secs().to_string())
        .arg(STAT)
        .args(args);
    if let Some(d) = dir {
        cmd.env("LLC_STAT_DIR", d);
    }
    let out = cmd.output().expect("llc-stat runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `llc-stat -p PID --json`: the process's endpoints.
fn endpoints(pid: u32, dir: Option<&Path>) -> Vec<Value> {
    let (code, out, err) = stat(&["-p", &pid.to_string(), "--json"], dir);
    assert_eq!(code, 0, "llc-stat -p {pid}: {out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(v["errors"], serde_json::json!([]), "{v}");
    v["endpoints"].as_array().cloned().unwrap_or_default()
}

/// Poll `llc-stat -p PID --json` until `want` finds what it looks for in
/// the first connection of the process's one endpoint (bounded).
fn wait_for_conn<T>(pid: u32, what: &str, mut want: impl FnMut(&Value, &Value) -> Option<T>) -> T {
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < SHOW_TIMEOUT {
        last = endpoints(pid, None);
        if let [ep] = &last[..] {
            if let Some(c) = ep["connections"].get(0) {
                if let Some(t) = want(ep, c) {
                    return t;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("llc-stat never showed {what} for pid {pid} within {SHOW_TIMEOUT:?}: {last:?}");
}

fn responder(hosts: &TwoHosts, dir: Option<&Path>) -> Background {
    let mut cmd = hosts.b.ns.command(llc_ping());
    cmd.args(["--respond", "-I", &hosts.b.ifname, "--backend", "packet"]);
    if let Some(d) = dir {
        cmd.env("LLC_STAT_DIR", d);
    }
    Background::spawn(&mut cmd, "responding on", Duration::from_secs(10)).expect("responder starts")
}

#[test]
fn sees_a_running_llc_ping_with_counters_that_move() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let resp = responder(&hosts, None);
    let peer = format_mac(&hosts.b.mac);
    let client = Background::spawn(
        hosts.a.ns.command(llc_ping()).args([
            "-I",
            &hosts.a.ifname,
            "--backend",
            "packet",
            "--reliable",
            "-i",
            "0.005",
            "-s",
            "100",
            &peer,
        ]),
        "bytes from",
        Duration::from_secs(20),
    )
    .expect("llc-ping starts");
    let pid = client.id();

    // The client's page: who, where, and one established connection whose
    // counters move between two reads.
    let (ep, first) = wait_for_conn(pid, "an established connection", |ep, c| {
        (c["state"] == "established" && c["messages_sent"].as_u64() > Some(0))
            .then(|| (ep.clone(), c.clone()))
    });
    assert_eq!(ep["process"], "llc-ping", "{ep}");
    assert_eq!(ep["label"], "llc-ping", "{ep}");
    assert_eq!(ep["interface"], hosts.a.ifname.as_str(), "{ep}");
    assert_eq!(ep["mac"], format_mac(&hosts.a.mac), "{ep}");
    assert_eq!(ep["alive"], true);
    assert!(
        ep["backend"].as_str().unwrap().starts_with("af_packet"),
        "{ep}"
    );
    assert_eq!(first["peer"], peer.as_str());
    assert_eq!(first["peer_port"], 7);
    assert_eq!(first["inbound"], false);
    let sent0 = first["messages_sent"].as_u64().unwrap();
    let second = wait_for_conn(pid, "messages_sent moving", |_, c| {
        (c["messages_sent"].as_u64() > Some(sent0)).then(|| c.clone())
    });
    let grew = |k: &str| second[k].as_u64().unwrap() > first[k].as_u64().unwrap();
    for k in [
        "messages_sent",
        "messages_received",
        "bytes_sent",
        "bytes_received",
    ] {
        assert!(grew(k), "{k}: {first} then {second}");
    }
    // Echo: every message is 100 bytes each way.
    let c = &second;
    assert!(c["bytes_sent"].as_u64().unwrap() >= 100 * sent0, "{c}");
    assert!(c["srtt_us"].as_f64().unwrap() > 0.0, "{c}");
    assert!(c["rttvar_us"].as_f64().is_some(), "{c}");
    assert!(c["cwnd"].as_u64().unwrap() > 0, "{c}");
    assert!(c["recv_window"].as_u64().unwrap() > 0, "{c}");
    assert!(c["send_credit"].as_u64().is_some(), "{c}");
    // A loaded 2-core machine stalls now and then, so a timeout (and its
    // retransmission) may happen: the figures must agree with the counters.
    assert_eq!(c["retransmits"], c["counters"]["retransmits"], "{c}");
    assert!(
        c["spurious_retransmits"].as_u64() <= c["counters"]["timeouts"].as_u64(),
        "{c}"
    );

    // The responder's side: the same connection, inbound, echoing.
    let r = wait_for_conn(resp.id(), "the responder's connection", |ep, c| {
        (c["messages_received"].as_u64() > Some(0)).then(|| (ep.clone(), c.clone()))
    });
    assert_eq!(r.0["label"], "llc-ping responder, port 7", "{}", r.0);
    let (code, out, _) = stat(&["-p", &resp.id().to_string()], None);
    assert_eq!(code, 0);
    assert!(
        out.starts_with(&format!(
            "pid {} llc-ping (llc-ping responder, port 7): ",
            resp.id()
        )),
        "{out}"
    );
    assert_eq!(r.1["peer"], format_mac(&hosts.a.mac));
    assert_eq!(r.1["inbound"], true);
    assert_eq!(r.1["local_port"], 7);

    // The table a user reads.
    let (code, out, err) = stat(&["-p", &pid.to_string()], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with(&format!(
            "pid {pid} llc-ping: {} {peer_a}/- sap 0x7c mtu 1500 af_packet",
            hosts.a.ifname,
            peer_a = format_mac(&hosts.a.mac)
        )),
        "{out}"
    );
    assert!(
        out.contains("PEER") && out.contains("RTT_US") && out.contains("SPURIOUS"),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{peer}/7")))
        .unwrap_or_else(|| panic!("no row for {peer}/7:\n{out}"));
    assert!(row.contains("established"), "{row}");

    // --watch: one JSON line per refresh, counters never going back.
    let (code, out, err) = stat(
        &[
            "-p",
            &pid.to_string(),
            "--json",
            "--watch",
            "0.2",
            "--count",
            "3",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let sent: Vec<u64> = out
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            v["endpoints"][0]["connections"][0]["messages_sent"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(sent.len(), 3, "{out}");
    assert!(sent.windows(2).all(|w| w[0] <= w[1]), "{sent:?}");
    assert!(sent[2] > sent[0], "moving while watched: {sent:?}");

    // Ended normally (SIGTERM: llc-ping stops and closes), an endpoint
    // takes its page with it: nothing left, not even as stale.
    let (mut client, mut resp) = (client, resp);
    for p in [&mut client, &mut resp] {
        let pid = p.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        assert!(
            p.wait_timeout(Duration::from_secs(10)).is_some(),
            "llc-ping {pid} did not end on SIGTERM"
        );
    }
    let (code, out, err) = stat(&["--all", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    for gone in [client.id(), resp.id()] {
        assert!(
            !v["endpoints"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["pid"] == gone),
            "page of {gone} left: {v}"
        );
    }
}

#[test]
fn a_killed_endpoint_leaves_a_page_shown_only_as_stale() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    // A directory of its own: another test's publisher would remove the
    // dead process's page, as it should.
    let dir = std::env::temp_dir().join(format!("llc-stat-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = Remove(dir.clone());
    let mut resp = responder(&hosts, Some(&dir));
    let pid = resp.id();
    let eps = endpoints(pid, Some(&dir));
    assert_eq!(eps.len(), 1, "{eps:?}");
    assert_eq!(eps[0]["connections"], serde_json::json!([]));
    assert_eq!(eps[0]["port"], Value::Null, "a listener binds no port");
    resp.kill(); // SIGKILL: no chance to remove its page
    let (code, out, err) = stat(&["-p", &pid.to_string()], Some(&dir));
    assert_ne!(code, 0, "{out}");
    assert!(err.contains(&format!("no process {pid}")), "{err}");
    let (code, out, _) = stat(&[], Some(&dir));
    assert_eq!(code, 0);
    assert!(out.contains("no live LLC endpoints"), "{out}");
    let (code, out, err) = stat(&["--all", "--json"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let stale = &v["endpoints"][0];
    assert_eq!(stale["pid"], pid, "{v}");
    assert_eq!(stale["alive"], false, "{v}");
    let (_, text, _) = stat(&["--all"], Some(&dir));
    assert!(text.contains("STALE (process gone)"), "{text}");
    // A job epilog's cleanup (scripts/slurm-epilog.sh) takes the page away.
    let (code, out, err) = stat(&["--remove-stale"], Some(&dir));
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, out, err) = stat(&["--all", "--json"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["endpoints"], serde_json::json!([]), "{v}");
}

#[test]
fn bad_arguments_get_a_clear_error() {
    let (code, _, err) = stat(&["--watch", "0"], None);
    assert_eq!(code, 1);
    assert!(
        err.contains("--watch needs a positive number of seconds"),
        "{err}"
    );
    let (code, _, err) = stat(&["--count", "2"], None);
    assert_eq!(code, 2, "clap: --count needs --watch");
    assert!(err.contains("--watch"), "{err}");
}
