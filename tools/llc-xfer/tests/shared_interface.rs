//! Endpoint processes sharing one interface, one of them killed with SIGKILL
//! in the middle of the streams: the survivor's stream arrives whole (same
//! SHA-256 as sent), the interface's XDP program stays while an AF_XDP
//! endpoint lives and is gone after the last one exits.
//!
//! Host B runs two `llc-xfer --receive --shared --backend auto` processes on
//! one veth (ports 9 and 10); host A streams to each from a process of its
//! own. Once both streams are under way (host B's interface counted the
//! bytes), one receiver is killed. Needs root; prints SKIPPED otherwise.

use std::time::{Duration, Instant};

use testbed::{require_root, Background, Host, TwoHosts};

const XFER: &str = env!("CARGO_BIN_EXE_llc-xfer");
/// Per stream: long enough that the kill lands while both streams run.
const BYTES: usize = 512 << 20;
/// Received on host B before the kill.
const UNDER_WAY: u64 = 48 << 20;
const START: Duration = Duration::from_secs(20);
const FINISH: Duration = Duration::from_secs(120);

fn receiver(host: &Host, port: u16) -> Background {
    let mut cmd = host.ns.command(XFER);
    cmd.args([
        "--receive",
        "-I",
        &host.ifname,
        "--shared",
        "--backend",
        "auto",
    ])
    .args(["--port", &port.to_string(), "--bytes", &BYTES.to_string()])
    .args(["--timeout", "120"]);
    Background::spawn(&mut cmd, "llc-xfer: receiving on", START)
        .unwrap_or_else(|e| panic!("receiver on port {port}: {e}"))
}

fn sender(host: &Host, to: &Host, port: u16) -> Background {
    let mac = testbed::format_mac(&to.mac);
    let mut cmd = host.ns.command(XFER);
    cmd.args(["-I", &host.ifname, "--shared", "--backend", "packet"])
        .args(["--port", &port.to_string(), "--bytes", &BYTES.to_string()])
        .args(["--timeout", "120", &mac]);
    Background::spawn(&mut cmd, "llc-xfer: sending to", START)
        .unwrap_or_else(|e| panic!("sender to port {port}: {e}"))
}

/// Bytes host `h`'s interface received so far (/proc/net/dev of its namespace).
fn rx_bytes(h: &Host) -> u64 {
    let out =
        h.ns.command("cat")
            .arg("/proc/net/dev")
            .output()
            .expect("reading /proc/net/dev");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{}:", h.ifname)))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {} in /proc/net/dev:\n{text}", h.ifname))
}

fn xdp_attached(h: &Host) -> bool {
    let out =
        h.ns.command("ip")
            .args(["-d", "link", "show", "dev", &h.ifname])
            .output()
            .expect("ip link show");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

fn sha(out: &str) -> String {
    out.lines()
        .find_map(|l| l.split("sha256 ").nth(1))
        .unwrap_or_else(|| panic!("no sha256 in:\n{out}"))
        .trim()
        .to_owned()
}

fn backend(out: &str) -> String {
    out.lines()
        .find(|l| l.contains("receiving on"))
        .and_then(|l| l.rsplit(", ").next())
        .unwrap_or("")
        .to_owned()
}

/// Wait (bounded) until both streams are under way.
fn wait_under_way(b: &Host) {
    let base = rx_bytes(b);
    let deadline = Instant::now() + START;
    while rx_bytes(b) < base + UNDER_WAY {
        assert!(Instant::now() < deadline, "the streams did not start");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn finish(p: &mut Background, what: &str) -> String {
    let status = p
        .wait_timeout(FINISH)
        .unwrap_or_else(|| panic!("{what} did not finish:\n{}", p.output()));
    let out = p.output();
    assert!(status.success(), "{what} failed ({status}):\n{out}");
    out
}

/// Kill receiver `victim` (0: the first, which attached the XDP program;
/// 1: the second) while both streams run.
fn kill_one_receiver(victim: usize) {
    let hosts = TwoHosts::new(9000).expect("test hosts");
    let (a, b) = (&hosts.a, &hosts.b);
    let mut receivers = [receiver(b, 9), receiver(b, 10)];
    let backends = [
        backend(&receivers[0].output()),
        backend(&receivers[1].output()),
    ];
    println!("receivers: {backends:?}");
    assert!(
        backends[0].starts_with("af_xdp"),
        "the first endpoint takes AF_XDP: {backends:?}"
    );
    assert!(xdp_attached(b));
    let mut senders = [sender(a, b, 9), sender(a, b, 10)];
    let started = Instant::now();
    wait_under_way(b);
    receivers[victim].kill();
    let survivor = 1 - victim;
    // The program stays while an AF_XDP endpoint lives.
    if backends[survivor].starts_with("af_xdp") {
        assert!(xdp_attached(b), "the survivor holds the XDP program");
    }
    let sent = finish(&mut senders[survivor], "the survivor's sender");
    let got = finish(&mut receivers[survivor], "the surviving receiver");
    assert_eq!(sha(&sent), sha(&got), "the survivor's stream arrived whole");
    println!(
        "survivor ({}) received {BYTES} bytes in {:.2?} with the other endpoint killed",
        backends[survivor],
        started.elapsed()
    );
    // The killed receiver's sender learns that its peer is gone.
    let status = senders[victim]
        .wait_timeout(FINISH)
        .expect("the victim's sender gives up in bounded time");
    assert!(!status.success(), "{}", senders[victim].output());
    // Nobody left on the interface: no program either.
    let deadline = Instant::now() + Duration::from_secs(5);
    while xdp_attached(b) {
        assert!(
            Instant::now() < deadline,
            "an XDP program outlived every endpoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn killing_the_second_endpoint_spares_the_first() {
    require_root!();
    kill_one_receiver(1);
}

#[test]
fn killing_the_endpoint_that_attached_the_program_spares_the_other() {
    require_root!();
    kill_one_receiver(0);
}

/// Two endpoints of a host cannot hold one port: the second says so.
#[test]
fn receivers_of_one_host_need_distinct_ports() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("test hosts");
    let _first = receiver(&hosts.b, 9);
    let out = hosts
        .b
        .ns
        .command(XFER)
        .args([
            "--receive",
            "-I",
            &hosts.b.ifname,
            "--shared",
            "--port",
            "9",
        ])
        .output()
        .expect("second receiver");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("port 9") && err.contains("held by another endpoint"),
        "{err}"
    );
}
