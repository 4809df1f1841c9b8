//! llc-ping over AF_XDP between two network namespaces: link-level TEST and
//! reliable echo, backend choice and reporting, SIGKILL leaving no XDP
//! program behind, and plain errors.

use std::process::Command;
use std::time::{Duration, Instant};

use testbed::{format_mac, TwoHosts};

mod common;
use common::{json, ping, responder, BIN};

/// `ip -d link show` of b's interface.
fn link_details(hosts: &TwoHosts) -> String {
    hosts
        .b
        .ns
        .ip(&["-d", "link", "show", "dev", &hosts.b.ifname])
        .expect("ip link show")
}

#[test]
fn xdp_link_level_and_reliable_ping() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let r = responder(&hosts, "xdp");
    assert!(r.output().contains("af_xdp/copy/"), "{}", r.output());
    let peer = format_mac(&hosts.b.mac);
    let (code, out, err) = ping(
        &hosts,
        &[
            "-c",
            "5000",
            "-i",
            "0",
            "-s",
            "64",
            "--backend",
            "xdp",
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["received"], 5000, "{v}");
    let backend = v["backend"].as_str().unwrap();
    assert!(backend.starts_with("af_xdp/copy/"), "{v}");
    // veth has no zero-copy: auto mode says so.
    assert!(err.contains("zero-copy refused"), "{err}");

    let (code, out, err) = ping(
        &hosts,
        &[
            "--reliable",
            "-c",
            "2000",
            "-i",
            "0",
            "-s",
            "64",
            "--backend",
            "xdp",
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["received"], 2000, "{v}");
    assert_eq!(v["mode"], "reliable");

    // Generic XDP on request.
    let (code, out, err) = ping(
        &hosts,
        &[
            "-c",
            "100",
            "-i",
            "0",
            "--backend",
            "xdp",
            "--xdp-attach",
            "generic",
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json(&out)["backend"], "af_xdp/copy/generic");
}

#[test]
fn auto_prefers_xdp_and_falls_back_to_packet_with_a_reason() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    // The responder holds b's interface with AF_XDP...
    let r = responder(&hosts, "auto");
    assert!(r.output().contains("af_xdp/"), "{}", r.output());
    let peer = format_mac(&hosts.b.mac);
    let (code, out, err) = ping(&hosts, &["-c", "10", "-i", "0", "--json", &peer]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        json(&out)["backend"]
            .as_str()
            .unwrap()
            .starts_with("af_xdp/"),
        "{out}"
    );
    // ...so a second auto instance there gets AF_PACKET and says why.
    let out = hosts
        .b
        .ns
        .command("timeout")
        .args(["20", BIN, "-I", &hosts.b.ifname, "-c", "1", "-W", "0.2"])
        .arg(format_mac(&hosts.a.mac))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("af_packet/mmap"), "{out:?}");
    assert!(
        stderr.contains("AF_XDP unavailable") && stderr.contains("busy"),
        "{stderr}"
    );
}

#[test]
fn sigkill_leaves_no_xdp_program_and_the_next_start_succeeds() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let mut r = responder(&hosts, "xdp");
    assert!(
        link_details(&hosts).contains("prog/xdp"),
        "program attached"
    );
    // SAFETY-free: kill(2) through the kill command, by pid.
    let status = Command::new("kill")
        .args(["-KILL", &r.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.is_running() {
        assert!(Instant::now() < deadline, "responder survived SIGKILL");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The link died with its last file descriptor; the kernel detaches at once.
    let details = link_details(&hosts);
    assert!(!details.contains("prog/xdp"), "left attached:\n{details}");
    // The next start on the same interface works (the queue may stay busy
    // for about a second; the backend retries the bind).
    let _r2 = responder(&hosts, "xdp");
    let peer = format_mac(&hosts.b.mac);
    let (code, out, err) = ping(&hosts, &["-c", "10", "-i", "0", "--backend", "xdp", &peer]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn xdp_errors_are_plain() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let peer = format_mac(&hosts.b.mac);
    // No privileges and no endpoint service: says which capability, and
    // what to install or start instead.
    let out = hosts
        .a
        .ns
        .command("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            BIN,
            "--backend",
            "xdp",
            "-I",
            "llc0",
            &peer,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_NET_RAW") && err.contains("no llcd service runs"),
        "{err}"
    );
    // Interface busy: a responder holds it.
    let _r = responder(&hosts, "xdp");
    let out = hosts
        .b
        .ns
        .command("timeout")
        .args([
            "20",
            BIN,
            "--backend",
            "xdp",
            "-I",
            &hosts.b.ifname,
            "-c",
            "1",
        ])
        .arg(format_mac(&hosts.a.mac))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is busy") && err.contains("another XDP program"),
        "{err}"
    );
    // Zero-copy demanded on veth.
    let (code, _, err) = ping(
        &hosts,
        &[
            "--backend",
            "xdp",
            "--xdp-mode",
            "zerocopy",
            "-c",
            "1",
            &peer,
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("zero-copy"), "{err}");
}
