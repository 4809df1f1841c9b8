//! The C API as C programs use it: `bmi_check.c` (every call, every error),
//! compiled against `include/bmi.h` and `libbmi.so`, run as one server and
//! several client processes, plus a client that vanishes while the server
//! waits on it: over bmi_tcp on this host (no privileges), over bmi_llc with
//! every process on one simulated host's NIC, and across three simulated
//! hosts over bmi_llc and bmi_tcp (root; skipped with a printed reason
//! otherwise).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use testbed::cdylib::{compile_c, profile_dir};
use testbed::Background;
use testbed::{run_bounded, Cluster, JobOutput};

/// One job at a time: they would fight over the 2 cores.
static SERIAL: Mutex<()> = Mutex::new(());

const JOB_TIMEOUT: Duration = Duration::from_secs(240);

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `bmi_check`, compiled once per run.
fn bmi_check() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| compile("bmi_check.c"))
}

/// Compile `tests/c/SRC` against `include/bmi.h` and `libbmi.so`.
fn compile(src: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = profile_dir().join("bmi-c").join(src.trim_end_matches(".c"));
    compile_c(
        &dir.join("tests/c").join(src),
        &dir.join("include"),
        "bmi",
        &out,
        &["-O2", "-Wall", "-Wextra", "-Werror"],
        &[],
    )
}

/// Where each process runs: a command for host `i` (this host when there
/// is no cluster).
struct Place<'a> {
    cluster: Option<&'a Cluster>,
    env: Vec<(&'static str, String)>,
    /// Run as this ordinary user (no capabilities) instead of root.
    user: Option<&'a testbed::TestUser>,
}

impl Place<'_> {
    fn command(&self, host: usize) -> Command {
        let mut cmd = match self.cluster {
            // In the host's network namespace but not a PID namespace of
            // its own (as `Cluster::command` would give): processes of one
            // host must see each other to share its NIC's XDP program, as
            // they do on a real host.
            Some(c) => match self.user {
                Some(u) => u.command_in(&c.hosts()[host].ns, bmi_check()),
                None => c.hosts()[host].ns.command(bmi_check()),
            },
            None => Command::new(bmi_check()),
        };
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }
}

/// The server on host 0; `clients[i]` is the host of client `i`; clients
/// listed in `crash` vanish while the server waits on them.
fn run(
    place: &Place,
    method: &str,
    listen: &str,
    server_addr: &str,
    clients: &[usize],
    crash: &[usize],
) {
    let all: Vec<_> = clients.iter().map(|&h| (h, method, server_addr)).collect();
    run_mixed(place, method, listen, &all, crash);
}

/// As [`run`], each client with its own method and server address (a
/// server listening on several methods).
fn run_mixed(
    place: &Place,
    method: &str,
    listen: &str,
    clients: &[(usize, &str, &str)],
    crash: &[usize],
) {
    let (_, crash_method, crash_addr) = clients[0];
    let mut server = place.command(0);
    server
        .args(["server", method, listen])
        .arg(clients.len().to_string())
        .arg(crash.len().to_string());
    let mut server = Background::spawn(&mut server, "ready", Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("the server did not start: {e}"));
    let jobs: Vec<(String, std::thread::JoinHandle<JobOutput>)> = clients
        .iter()
        .enumerate()
        .map(|(i, &(h, m, a))| ("client", i, h, m, a))
        .chain(
            crash
                .iter()
                .enumerate()
                .map(|(i, &h)| ("crash", 100 + i, h, crash_method, crash_addr)),
        )
        .map(|(role, i, h, m, a)| {
            let mut cmd = place.command(h);
            cmd.args([role, m, a]).arg(i.to_string());
            let name = format!("{role} {i} on host {h}");
            (
                name,
                std::thread::spawn(move || {
                    run_bounded(&mut cmd, JOB_TIMEOUT).expect("client runs")
                }),
            )
        })
        .collect();
    let mut failed = Vec::new();
    for (name, j) in jobs {
        let out = j.join().expect("client thread");
        let vanished = name.starts_with("crash") && out.stdout.contains("vanishing");
        if !(out.success() || vanished) {
            failed.push(format!("{name}:\n{out}"));
        }
    }
    let status = server.wait_timeout(JOB_TIMEOUT);
    let output = server.output();
    assert!(
        failed.is_empty(),
        "{}\n--- server:\n{output}",
        failed.join("\n")
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "server: {status:?}\n{output}"
    );
    let want = format!(
        "bmi_check server: ok ({} clients, {} vanished)",
        clients.len(),
        crash.len()
    );
    assert!(output.contains(&want), "missing {want:?} in\n{output}");
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[test]
fn every_call_and_error_over_bmi_tcp_on_this_host() {
    let _g = lock();
    let port = free_tcp_port();
    let listen = format!("tcp://127.0.0.1:{port}");
    let addr = format!("127.0.0.1:{port}");
    let place = Place {
        cluster: None,
        env: Vec::new(),
        user: None,
    };
    run(&place, "bmi_tcp", &listen, &addr, &[0, 0, 0], &[0]);
}

fn llc_env(backend: &str) -> Vec<(&'static str, String)> {
    vec![
        ("BMI_LLC_IFACE", "eth0".into()),
        ("BMI_LLC_BACKEND", backend.into()),
    ]
}

fn mac(c: &Cluster, i: usize) -> String {
    let m = c.hosts()[i].mac;
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[test]
fn every_call_and_error_over_bmi_llc_with_every_process_on_one_nic() {
    testbed::require_root!();
    let _g = lock();
    let cluster = Cluster::new(1, 1500).expect("bed");
    let server = format!("[{}]:3334", mac(&cluster, 0));
    for backend in ["xdp", "packet"] {
        let place = Place {
            cluster: Some(&cluster),
            env: llc_env(backend),
            user: None,
        };
        let listen = format!("llc://eth0?port=3334&backend={backend}&idle_timeout_ms=2000");
        run(&place, "bmi_llc", &listen, &server, &[0, 0, 0], &[0]);
    }
}

#[test]
fn every_call_and_error_across_three_hosts_over_bmi_llc_and_bmi_tcp() {
    testbed::require_root!();
    let _g = lock();
    let cluster = Cluster::new(3, 9000).expect("bed");
    let place = Place {
        cluster: Some(&cluster),
        env: llc_env("xdp"),
        user: None,
    };
    let server = format!("[{}]:3334", mac(&cluster, 0));
    let listen = "llc://eth0?port=3334&backend=xdp&idle_timeout_ms=2000";
    run(&place, "bmi_llc", listen, &server, &[1, 1, 2, 2, 0], &[2]);
    let ip = cluster.hosts()[0].ipv4;
    run(
        &place,
        "bmi_tcp",
        &format!("tcp://{ip}:3335"),
        &format!("{ip}:3335"),
        &[1, 2, 2],
        &[1],
    );
    // Both methods in one server, clients of each.
    let addr = format!("{ip}:3336");
    let server = format!("[{}]:3337", mac(&cluster, 0));
    let listen = format!("llc://eth0?port=3337&backend=xdp,tcp://{addr}");
    let clients = [
        (1, "bmi_llc", server.as_str()),
        (2, "bmi_tcp", addr.as_str()),
        (2, "bmi_llc", server.as_str()),
        (1, "bmi_tcp", addr.as_str()),
    ];
    run_mixed(&place, "bmi_llc,bmi_tcp", &listen, &clients, &[]);
}

/// As a cluster's users run a file system's clients: ordinary users, with
/// the stack's endpoint service (llcd) on every host opening their
/// endpoints. The server and clients on two hosts, one client vanishing.
#[test]
fn every_call_and_error_over_bmi_llc_as_an_ordinary_user() {
    testbed::require_root!();
    let _g = lock();
    let user = testbed::TestUser::ensure("llc-job-a").expect("test account");
    let mut cluster = Cluster::new(2, 1500).expect("bed");
    cluster.start_llcd("").expect("llcd on every host");
    let place = Place {
        cluster: Some(&cluster),
        env: llc_env("auto"),
        user: Some(&user),
    };
    let server = format!("[{}]:3334", mac(&cluster, 0));
    let listen = "llc://eth0?port=3334&idle_timeout_ms=2000";
    run(&place, "bmi_llc", listen, &server, &[1, 1, 0], &[1]);
    let log = cluster.llcd_log(1);
    assert!(
        log.contains("granted user=llc-job-a"),
        "host 1's clients got their endpoints from llcd:\n{log}"
    );
}

/// The README's example is this file, and it does what the README says.
#[test]
fn the_readme_example_serves_a_request() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/readme_example.c");
    let text = std::fs::read_to_string(&src).expect("example source");
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .expect("README");
    assert!(
        readme.contains(&text),
        "README.md's BMI example differs from {}",
        src.display()
    );
    let exe = compile("readme_example.c");
    let _g = lock();
    let port = free_tcp_port();
    let (listen, addr) = (
        format!("tcp://127.0.0.1:{port}"),
        format!("127.0.0.1:{port}"),
    );
    let mut s = Command::new(&exe);
    s.args(["s", &listen]);
    let mut server = Background::spawn(&mut s, "listening at", Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("the example server did not start: {e}"));
    let client = run_bounded(Command::new(&exe).args(["c", &addr]), JOB_TIMEOUT).expect("client");
    assert!(client.success(), "{client}");
    assert!(
        client.stdout.contains("reply: hello back (11 bytes)"),
        "{client}"
    );
    assert!(server
        .wait_timeout(JOB_TIMEOUT)
        .is_some_and(|s| s.success()));
    assert!(
        server.output().contains(": hello from the client"),
        "{}",
        server.output()
    );
}
