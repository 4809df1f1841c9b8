//! llc-ping between two network namespaces joined by a veth pair, with the
//! AF_PACKET backend: link-level TEST and reliable echo, and its errors.

use std::process::Command;

use testbed::{format_mac, TwoHosts};

mod common;
use common::{json, ping, responder, BIN};

#[test]
fn ten_thousand_back_to_back_test_round_trips_lose_nothing() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let _r = responder(&hosts, "packet");
    let peer = format_mac(&hosts.b.mac);
    let (code, out, err) = ping(
        &hosts,
        &[
            "-c",
            "10000",
            "-i",
            "0",
            "-s",
            "64",
            "--backend",
            "packet",
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["transmitted"], 10000);
    assert_eq!(v["received"], 10000, "{v}");
    assert_eq!(v["loss_pct"], 0.0);
    assert_eq!(v["backend"], "af_packet/mmap");
    for k in ["rtt_min_us", "rtt_avg_us", "rtt_max_us", "rtt_mdev_us"] {
        assert!(v[k].as_f64().is_some_and(|x| x >= 0.0), "{k} in {v}");
    }
    assert!(v["rtt_min_us"].as_f64() <= v["rtt_avg_us"].as_f64());
}

#[test]
fn text_output_reads_like_ping() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let _r = responder(&hosts, "packet");
    let peer = format_mac(&hosts.b.mac);
    let (code, out, err) = ping(&hosts, &["-c", "3", "-i", "0.01", &peer]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.matches(&format!("bytes from {peer}: seq=")).count(),
        3,
        "{out}"
    );
    assert!(
        out.contains("3 packets transmitted, 3 received, 0% packet loss"),
        "{out}"
    );
    assert!(out.contains("rtt min/avg/max/mdev = "), "{out}");
}

#[test]
fn reliable_echo_works_and_survives_injected_loss() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let _r = responder(&hosts, "packet");
    let peer = format_mac(&hosts.b.mac);
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
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["received"], 2000, "{v}");
    assert_eq!(v["mode"], "reliable");
    // Messages larger than a frame, with 10% of received frames dropped on our side.
    let (code, out, err) = ping(
        &hosts,
        &[
            "--reliable",
            "-c",
            "200",
            "-i",
            "0",
            "-s",
            "5000",
            "--drop-chance",
            "0.1",
            "-W",
            "5",
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["received"], 200, "{v}");
}

#[test]
fn errors_are_plain() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    // Missing interface.
    let out = hosts
        .a
        .ns
        .command(BIN)
        .args(["-I", "nosuch0", "02:00:00:00:00:01"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no such interface"),
        "{out:?}"
    );
    // A MAC nobody answers for.
    let (code, _, err) = ping(
        &hosts,
        &["-c", "2", "-W", "0.2", "-i", "0", "02:00:00:00:00:99"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("does not answer"), "{err}");
    // Reliable mode with no responder: the connection is refused or unanswered.
    let peer = format_mac(&hosts.b.mac);
    let (code, _, err) = ping(&hosts, &["--reliable", "-c", "1", &peer]);
    assert_eq!(code, 2);
    assert!(
        err.contains("does not answer") || err.contains("refused"),
        "{err}"
    );
    // Bad arguments.
    let (code, _, err) = ping(&hosts, &["--sap", "0x7d", &peer]);
    assert_eq!(code, 2);
    assert!(err.contains("group address"), "{err}");
    // No CAP_NET_RAW: drop privileges with setpriv.
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
            "-I",
            "llc0",
            &peer,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("CAP_NET_RAW"),
        "{out:?}"
    );
}

#[test]
fn help_and_argument_errors_need_no_privilege() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let out = Command::new(BIN).args(["-I", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "PEER_MAC is required");
    let out = Command::new(BIN)
        .args(["-I", "x", "not-a-mac"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid MAC"));
}

/// `--pcap` writes a capture that tshark reads and decodes as 802.2 LLC:
/// every TEST command and response of the run, with our SAP.
#[test]
fn pcap_capture_opens_in_tshark() {
    testbed::require_root!();
    if Command::new("tshark").arg("--version").output().is_err() {
        panic!("tshark is missing: scripts/install-deps.sh installs it");
    }
    let hosts = TwoHosts::new(1500).unwrap();
    let _r = responder(&hosts, "packet");
    let peer = format_mac(&hosts.b.mac);
    let dir = std::env::temp_dir().join(format!("llc-ping-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ping.pcap");
    let (code, out, err) = ping(
        &hosts,
        &[
            "-c",
            "5",
            "-i",
            "0",
            "-q",
            "--pcap",
            file.to_str().unwrap(),
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let out = Command::new("tshark")
        .args([
            "-r",
            file.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "llc.dsap",
            "-e",
            "llc.ssap",
            "-e",
            "eth.src",
        ])
        .output()
        .expect("tshark runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        10,
        "5 commands and 5 responses expected:\n{text}"
    );
    // Command SSAP 0x7c, response SSAP 0x7c with the C/R bit (tshark shows 0x7d or "0x7c").
    assert!(lines.iter().all(|l| l.starts_with("0x7c")), "{text}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(&format_mac(&hosts.a.mac)))
            .count(),
        5,
        "{text}"
    );
}
