//! llc-ping's counters (`--stats`, and the `stats` object of `--json`) and
//! frame authentication with `LLC_AUTH_KEY`, between two namespaces.

use std::time::Duration;

use testbed::{format_mac, Background, TwoHosts};

mod common;
use common::{json, ping, responder, BIN};

#[test]
fn stats_are_printed_and_in_the_json() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let _r = responder(&hosts, "packet");
    let peer = format_mac(&hosts.b.mac);
    let count = 200u64;
    let (code, out, err) = ping(
        &hosts,
        &[
            "--reliable",
            "-c",
            &count.to_string(),
            "-i",
            "0",
            "--stats",
            "--json",
            &peer,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    let ep = &v["stats"]["endpoint"];
    let conn = &v["stats"]["connection"];
    let n = |x: &serde_json::Value, k: &str| {
        x[k].as_u64()
            .unwrap_or_else(|| panic!("no counter {k} in {x}"))
    };
    // Every request is a frame out and its echo a frame in; plus handshake and ACKs.
    assert!(n(ep, "tx_frames") > count, "{v}");
    assert!(n(ep, "rx_frames") >= count, "{v}");
    assert_eq!(n(ep, "dropped_total"), 0, "{v}");
    for reason in [
        "stale_cookie",
        "bad_checksum",
        "out_of_window",
        "auth_failed",
    ] {
        assert_eq!(n(&ep["dropped"], reason), 0, "{v}");
    }
    assert!(n(conn, "frames_sent") > count && n(conn, "frames_sent") <= n(ep, "tx_frames"));
    assert_eq!(n(conn, "data_frames_sent"), count, "{v}");
    assert_eq!(n(conn, "messages_received"), count, "{v}");
    assert_eq!(n(conn, "messages_acked"), count, "{v}");
    assert!(n(conn, "frames_received") >= count, "{v}");
    assert!(n(conn, "retransmits") <= count, "{v}");
    assert!(n(conn, "rtt_samples") >= 1, "{v}");
    let (min, srtt) = (n(conn, "min_rtt_ns"), n(conn, "srtt_ns"));
    assert!(min > 0 && min <= srtt && srtt < 1_000_000_000, "{v}");

    // Text: one line per object, RTTs in microseconds.
    let (code, out, err) = ping(
        &hosts,
        &["--reliable", "-c", "20", "-i", "0", "-q", "--stats", &peer],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("endpoint: rx_frames="), "{out}");
    assert!(out.contains("endpoint dropped: 0"), "{out}");
    assert!(
        out.contains("connection: data_frames_sent=20 ") && out.contains(" srtt_us="),
        "{out}"
    );
}

/// `llc-ping` in `a` with `LLC_AUTH_KEY` (when given): exit code, stdout, stderr.
fn ping_keyed(hosts: &TwoHosts, key: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = hosts.a.ns.command("timeout");
    cmd.args(["60", BIN, "-I", &hosts.a.ifname]).args(args);
    cmd.env_remove("LLC_AUTH_KEY");
    if let Some(k) = key {
        cmd.env("LLC_AUTH_KEY", k);
    }
    let out = cmd.output().expect("llc-ping runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn auth_key_from_the_environment() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let key = "b5f0c3e7a1d94c2e8f6a7b3c9d0e1f2a";
    let r = Background::spawn(
        hosts.b.ns.command(BIN).env("LLC_AUTH_KEY", key).args([
            "--respond",
            "-I",
            &hosts.b.ifname,
            "--backend",
            "packet",
        ]),
        "frames authenticated",
        Duration::from_secs(10),
    )
    .expect("keyed responder starts");
    let peer = format_mac(&hosts.b.mac);
    let args = [
        "--reliable",
        "-c",
        "100",
        "-i",
        "0",
        "-s",
        "3000",
        "--json",
        &peer,
    ];
    let (code, out, err) = ping_keyed(&hosts, Some(key), &args);
    assert_eq!(code, 0, "{out}{err}");
    let v = json(&out);
    assert_eq!(v["received"], 100, "{v}");
    assert_eq!(v["stats"]["endpoint"]["dropped_total"], 0, "{v}");
    // Another key, or none: the responder drops our frames; we say why we think so.
    let (code, _, err) = ping_keyed(&hosts, Some("another key"), &args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("authentication key"), "{err}");
    let (code, _, err) = ping_keyed(&hosts, None, &args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not answer"), "{err}");
    // Link-level TEST is not part of the transport: it needs no key.
    let (code, out, err) = ping_keyed(&hosts, None, &["-c", "3", "-i", "0", "-q", &peer]);
    assert_eq!(code, 0, "{out}{err}");
    drop(r);
}
