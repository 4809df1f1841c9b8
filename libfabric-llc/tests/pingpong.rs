//! libfabric's own `fi_pingpong` (Debian's libfabric-bin, 1.17) between two
//! hosts of the multi-host bed over the provider: RDM endpoints, the name
//! exchanged out of band and inserted into an address vector, sends,
//! receives and injects, every message's data checked (`-c`), in both
//! message modes (FI_MSG and FI_TAGGED).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use testbed::{run_bounded, Background, Cluster};

const CTRL_PORT: &str = "47592";

struct ProviderDir(PathBuf);

impl ProviderDir {
    fn new() -> ProviderDir {
        let lib = testbed::cdylib::cdylib_dir("libllc_fi.so").join("libllc_fi.so");
        let dir = std::env::temp_dir().join(format!(
            "llc-fi-pp-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(&lib, dir.join("libllc-fi.so")).unwrap();
        ProviderDir(dir)
    }
}

impl Drop for ProviderDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `fi_pingpong` on host `host` (its errors joined to stdout), after a line
/// that says it started.
fn pingpong(bed: &Cluster, host: usize, dir: &ProviderDir, args: &[&str]) -> Command {
    let mut cmd = bed.command(host, "sh");
    cmd.args(["-c", "echo started; exec fi_pingpong \"$@\" 2>&1", "sh"])
        .env("FI_PROVIDER_PATH", &dir.0)
        .env("FI_LLC_AUTH", "off")
        .args(["-p", "llc", "-e", "rdm", "-P", CTRL_PORT])
        .args(args);
    cmd
}

/// Wait (bounded) until host `i` listens on the control port.
fn wait_listening(bed: &Cluster, i: usize, server: &mut Background) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = bed.hosts()[i]
            .ns
            .command("ss")
            .args(["-ltnH"])
            .output()
            .expect("ss (iproute2)");
        if String::from_utf8_lossy(&out.stdout).contains(&format!(":{CTRL_PORT}")) {
            return;
        }
        assert!(
            server.is_running(),
            "the server ended:\n{}",
            server.output()
        );
        assert!(
            Instant::now() < deadline,
            "the server never listened:\n{}",
            server.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One server and one client for messages of `size` bytes.
fn run_one(bed: &Cluster, dir: &ProviderDir, mode: &str, size: &str) {
    let args = ["-m", mode, "-I", "100", "-S", size, "-c"];
    let mut server = Background::spawn(
        &mut pingpong(bed, 0, dir, &args),
        "started",
        Duration::from_secs(20),
    )
    .expect("fi_pingpong server starts (libfabric-bin)");
    wait_listening(bed, 0, &mut server);
    let server_ip = bed.hosts()[0].ipv4.to_string();
    let mut client = pingpong(bed, 1, dir, &args);
    client.arg(&server_ip);
    let out = run_bounded(&mut client, Duration::from_secs(120)).unwrap();
    assert!(
        out.success(),
        "client:\n{out}\nserver:\n{}",
        server.output()
    );
    let status = server
        .wait_timeout(Duration::from_secs(30))
        .expect("the server ends");
    assert!(status.success(), "server:\n{}", server.output());
    // The result line: "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec".
    let text = out.to_string();
    let row = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("100"))
        .unwrap_or_else(|| panic!("no result line:\n{text}"));
    assert!(
        row.contains("=100"),
        "not every message acknowledged: {row}"
    );
}

/// 8 bytes (inject, eager) and 1 MiB (rendezvous from the application's
/// buffer), data checked.
fn run(mode: &str) {
    testbed::require_root!();
    let bed = Cluster::new(2, 1500).unwrap();
    let dir = ProviderDir::new();
    run_one(&bed, &dir, mode, "8");
    run_one(&bed, &dir, mode, "1048576");
}

#[test]
fn fi_pingpong_runs_between_two_hosts_untagged() {
    run("msg");
}

#[test]
fn fi_pingpong_runs_between_two_hosts_tagged() {
    run("tagged");
}

/// The median usec/xfer of `runs` fi_pingpong runs of `size` bytes with
/// provider `prov` between the bed's two hosts.
fn latency(bed: &Cluster, dir: &ProviderDir, prov: &str, size: &str, runs: usize) -> f64 {
    let mut got = Vec::new();
    for _ in 0..runs {
        let args = ["-e", "rdm", "-m", "tagged", "-I", "20000", "-S", size];
        let mut server = bed.command(0, "sh");
        server
            .args([
                "-c",
                "echo started; exec fi_pingpong -p \"$0\" -P 47592 \"$@\" 2>&1",
                prov,
            ])
            .args(args)
            .env("FI_PROVIDER_PATH", &dir.0)
            .env("FI_LLC_AUTH", "off");
        let mut server =
            Background::spawn(&mut server, "started", Duration::from_secs(20)).unwrap();
        wait_listening(bed, 0, &mut server);
        let mut client = bed.command(1, "fi_pingpong");
        client
            .args(["-p", prov, "-P", CTRL_PORT])
            .args(args)
            .arg(bed.hosts()[0].ipv4.to_string())
            .env("FI_PROVIDER_PATH", &dir.0)
            .env("FI_LLC_AUTH", "off");
        let out = run_bounded(&mut client, Duration::from_secs(120)).unwrap();
        assert!(out.success(), "{out}");
        let text = out.to_string();
        let row = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("20k"))
            .unwrap_or_else(|| panic!("no result line:\n{text}"));
        got.push(
            row.split_whitespace()
                .nth(6)
                .unwrap()
                .parse::<f64>()
                .unwrap(),
        );
        let _ = server.wait_timeout(Duration::from_secs(30));
    }
    got.sort_by(f64::total_cmp);
    got[got.len() / 2]
}

/// docs/BENCHMARKS.md: fi_pingpong's 8-byte round trip over llc against
/// libfabric's tcp provider (tcp;ofi_rxm for RDM) between the same two
/// hosts, alternating, median of 5 each. `cargo test --release -p
/// libfabric-llc --test pingpong -- --ignored --nocapture`.
#[test]
#[ignore]
fn fi_pingpong_latency_llc_vs_tcp() {
    testbed::require_root!();
    let bed = Cluster::new(2, 1500).unwrap();
    let dir = ProviderDir::new();
    for size in ["8", "65536"] {
        let llc = latency(&bed, &dir, "llc", size, 5);
        let tcp = latency(&bed, &dir, "tcp", size, 5);
        println!("fi_pingpong -e rdm -m tagged -S {size}: llc {llc:.2} us/xfer, tcp {tcp:.2} us/xfer, llc/tcp {:.2}", llc / tcp);
    }
}
