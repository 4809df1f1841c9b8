//! Tests of the llc-perf tool itself: argument errors, a server that is not
//! there, and the JSON document of a short demo and of a client/server run
//! between two namespaces (root only; skipped with the reason otherwise).

use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use testbed::{format_mac, require_root, Background, TwoHosts};

const BIN: &str = env!("CARGO_BIN_EXE_llc-perf");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("running llc-perf")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn argument_errors_are_clear() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["client", "--transport", "udp", "10.0.0.1"],
            "unknown transport \"udp\"",
        ),
        (&["client", "not-an-address"], "neither a MAC address"),
        (
            &["client", "--transport", "llc-xdp", "02:00:00:00:00:02"],
            "need the interface",
        ),
        (
            &["client", "--transport", "tcp", "02:00:00:00:00:02"],
            "needs the server's IP address",
        ),
        (
            &["client", "--rounds", "0", "127.0.0.1"],
            "--rounds and --window",
        ),
        (
            &["client", "--json", "--csv", "127.0.0.1"],
            "cannot be used with",
        ),
        (&["client"], "PEER"),
        (&["frobnicate"], "unrecognized subcommand"),
        (
            &["demo", "--floor-work", "lots"],
            "a number of cache lines, msg, am, or frame=BYTES",
        ),
        (
            &["demo", "--floor-work", "frame=9000"],
            "frame=N with N from 25 to 273",
        ),
    ];
    for (args, want) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(want),
            "{args:?}: expected {want:?} in:\n{}",
            stderr(&o)
        );
    }
}

/// A TCP server that is not there: the client fails at once with the reason.
#[test]
fn absent_tcp_server_is_reported() {
    // A port nobody listens on: bind one, note it, close it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t0 = Instant::now();
    let o = run(&[
        "client",
        "--transport",
        "tcp",
        "--port",
        &(port - 1).to_string(),
        "--connect-timeout",
        "3",
        "127.0.0.1",
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t0.elapsed()
    );
    assert!(
        err.contains("127.0.0.1")
            && (err.contains("refused") || err.contains("no llc-perf server")),
        "{err}"
    );
}

/// An LLC server that is not there: a bounded wait, then a clear error.
#[test]
fn absent_llc_server_times_out() {
    require_root!();
    let bed = TwoHosts::new(1500).expect("testbed");
    let peer = format_mac(&bed.b.mac);
    let t0 = Instant::now();
    let o = bed
        .a
        .ns
        .command(BIN)
        .args(["client", "-I", &bed.a.ifname, "--transport", "llc-packet"])
        .args(["--connect-timeout", "2", &peer])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "took {:?}",
        t0.elapsed()
    );
    assert!(err.contains("no llc-perf server answered"), "{err}");
}

fn check_results(v: &serde_json::Value, tests: &[&str], keys: &[(&str, &str)]) -> usize {
    let results = v["results"].as_array().expect("results array");
    assert!(!results.is_empty(), "no results: {v}");
    for r in results {
        assert!(r["transport"].is_string() && r["detail"].is_string(), "{r}");
        for t in tests {
            let points = r[*t]
                .as_array()
                .unwrap_or_else(|| panic!("{t} missing in {r}"));
            assert!(!points.is_empty(), "{t} empty");
            for p in points {
                for (test, key) in keys {
                    if test == t {
                        let x = p[*key]
                            .as_f64()
                            .unwrap_or_else(|| panic!("{t}.{key} missing in {p}"));
                        assert!(x.is_finite() && x >= 0.0, "{t}.{key} = {x}");
                    }
                }
            }
        }
    }
    results.len()
}

#[test]
fn quick_demo_json_holds_the_documented_keys() {
    require_root!();
    let o = run(&[
        "demo",
        "--quick",
        "--json",
        "--rounds",
        "1",
        "--big-mtu",
        "9000",
        "--tests",
        "latency,bandwidth,overhead,overlap,incast",
        "--incast-senders",
        "2",
        "--transport",
        "llc-packet,tcp",
        "--verify",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    assert_eq!(v["tool"], "llc-perf");
    assert_eq!(v["mode"], "demo");
    assert!(v["host"]["load_avg_start"].is_string());
    let keys = [
        ("latency", "one_way_min_us"),
        ("latency", "one_way_median_us"),
        ("latency", "one_way_p99_us"),
        ("bandwidth", "gbit_s"),
        ("bandwidth", "msgs_per_s"),
        ("overhead", "os_us"),
        ("overhead", "or_us"),
        ("overlap", "wait_us"),
        ("overlap", "overlap_pct"),
        ("incast", "gbit_s"),
        ("incast", "jain_fairness"),
        ("incast", "min_share"),
        ("incast", "max_share"),
    ];
    let results = v["results"].as_array().unwrap();
    // MTU 1500: latency, bandwidth, overhead; MTU 9000: latency, bandwidth,
    // overlap and incast (on a bridge of its own, at the default incast MTU).
    let small: Vec<_> = results
        .iter()
        .filter(|r| r["mtu"] == 1500)
        .cloned()
        .collect();
    let big: Vec<_> = results
        .iter()
        .filter(|r| r["mtu"] == 9000)
        .cloned()
        .collect();
    assert_eq!(small.len(), 2, "{v}");
    assert_eq!(big.len(), 2, "{v}");
    // Every transport reports its counters; the LLC one its link's too,
    // and the floor of its link (802.2 TEST on the same pair), measured
    // before and after the sweep.
    for r in results {
        for key in ["link_floor_one_way_us", "link_floor_after_one_way_us"] {
            if r["transport"] == "llc-packet" {
                let f = r[key].as_f64().expect(key);
                assert!(f > 0.0 && f < 1000.0, "{key}: {r}");
            } else {
                assert!(r[key].is_null(), "{key}: {r}");
            }
        }
        let c = &r["counters"];
        assert!(c["msg.eager_sent"].as_u64().unwrap() > 0, "{r}");
        if r["transport"] == "llc-packet" {
            assert!(c["link.tx_frames"].as_u64().unwrap() > 0, "{r}");
            assert!(c["link.conn.data_frames_sent"].as_u64().unwrap() > 0, "{r}");
            assert!(c["link.dropped.bad_checksum"].is_u64(), "{r}");
        }
    }
    check_results(
        &serde_json::json!({ "results": small }),
        &["latency", "bandwidth", "overhead"],
        &keys,
    );
    for r in &big {
        for p in r["incast"].as_array().unwrap() {
            assert_eq!(p["senders"], 2, "{p}");
            let j = p["jain_fairness"].as_f64().unwrap();
            assert!(j > 0.0 && j <= 1.0 + 1e-9, "{p}");
            // Absent only when the round was shorter than a clock tick.
            if !p["cpu_busy"].is_null() {
                let b = p["cpu_busy"].as_f64().expect("cpu_busy is a number");
                assert!((0.0..=1.0).contains(&b), "{p}");
            }
        }
    }
    check_results(
        &serde_json::json!({ "results": big }),
        &["latency", "bandwidth", "overlap", "incast"],
        &keys,
    );
    // Each transport at its best MTU against the best TCP set-up.
    let targets = v["targets"].as_array().expect("targets");
    for what in ["1 MiB bandwidth", "64 KiB one-way latency"] {
        assert!(
            targets.iter().any(|t| t["name"].as_str().is_some_and(
                |n| n.starts_with(what) && n.contains("each at its best MTU: llc-packet")
            )),
            "{what}: {targets:?}"
        );
    }
    // What the message layer adds to its link's floor, at each MTU.
    let above: Vec<_> = targets
        .iter()
        .filter(|t| {
            t["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("8 B one-way above the link floor"))
        })
        .collect();
    assert_eq!(above.len(), 2, "{targets:?}");
    for t in above {
        assert_eq!(t["unit"], " µs", "{t}");
        assert!(t["ratio"].as_f64().is_some_and(f64::is_finite), "{t}");
    }
    let cmp = v["comparison"].as_array().expect("comparison");
    assert!(
        cmp.iter()
            .any(|c| c["metric"] == "latency.one_way_median_us"
                && c["bytes"] == 8
                && c["reference"] == "tcp"),
        "{cmp:?}"
    );
}

/// The link floor with work per message: each kind asked for is measured
/// and reported beside its warm cost.
#[test]
fn demo_measures_the_floor_with_work_per_message() {
    require_root!();
    let o = run(&[
        "demo",
        "--quick",
        "--json",
        "--rounds",
        "1",
        "--big-mtu",
        "0",
        "--max-size",
        "8",
        "--tests",
        "latency",
        "--transport",
        "llc-packet",
        "--floor-work",
        "64,msg,frame=129",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let r = &v["results"][0];
    assert_eq!(r["transport"], "llc-packet", "{v}");
    assert!(r["link_floor_one_way_us"].as_f64().is_some(), "{v}");
    let worked = r["link_floor_worked"]
        .as_array()
        .expect("link_floor_worked");
    let names: Vec<&str> = worked.iter().map(|w| w["work"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "64 cache lines touched",
            "an in-memory message-layer round trip",
            "129-byte frames"
        ],
        "{v}"
    );
    for w in worked {
        let f = w["one_way_us"].as_f64().unwrap();
        assert!(f > 0.0 && f < 1000.0, "{w}");
        let above = w["above_bare_us"].as_f64().unwrap();
        assert!(above.abs() < f, "{w}");
    }
    // Work that costs something costs something in a warm loop; a longer
    // frame is no work.
    assert!(worked[0]["warm_us"].as_f64().unwrap() > 0.0, "{v}");
    assert!(worked[1]["warm_us"].as_f64().unwrap() > 0.0, "{v}");
    assert!(worked[2]["warm_us"].as_f64().unwrap() < 0.05, "{v}");
}

#[test]
fn client_and_server_in_namespaces() {
    require_root!();
    let bed = TwoHosts::new(1500).expect("testbed");
    let port = (20000 + std::process::id() % 20000).to_string();
    let _server = Background::spawn(
        bed.b.ns.command(BIN).args([
            "server",
            "-I",
            &bed.b.ifname,
            "--transport",
            "llc-packet,tcp-uring",
            "--port",
            &port,
        ]),
        "ready",
        Duration::from_secs(10),
    )
    .expect("server starts");
    let dir = std::env::temp_dir().join(format!("llc-perf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("plot.svg");
    let o = bed
        .a
        .ns
        .command(BIN)
        .args([
            "client",
            "-I",
            &bed.a.ifname,
            "--port",
            &port,
            "--quick",
            "--json",
        ])
        .args([
            "--rounds",
            "1",
            "--tests",
            "latency,bandwidth,bibw,msgrate",
            "--verify",
        ])
        .args(["--transport", "llc-packet,tcp-uring"])
        .args(["--plot", svg.to_str().unwrap()])
        .arg(format_mac(&bed.b.mac))
        .arg(bed.b.ipv4.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let n = check_results(
        &v,
        &["latency", "bandwidth", "bibw", "msgrate"],
        &[
            ("latency", "one_way_median_us"),
            ("bandwidth", "gbit_s"),
            ("bibw", "gbit_s"),
            ("msgrate", "msgs_per_s"),
        ],
    );
    assert_eq!(n, 2);
    let plot = std::fs::read_to_string(&svg).expect("plot written");
    assert!(
        plot.starts_with("<svg") && plot.contains("llc-packet") && plot.contains("message size")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One data row of OSU's layout: `%-10d` then `%20.2f` per column, read
/// strictly (the text must be exactly what that format prints).
fn osu_row(line: &str, columns: usize) -> (usize, Vec<f64>) {
    assert_eq!(line.len(), 10 + 20 * columns, "row width: {line:?}");
    let bytes: usize = line[..10]
        .trim_end()
        .parse()
        .unwrap_or_else(|e| panic!("size in {line:?}: {e}"));
    assert_eq!(format!("{bytes:<10}"), line[..10], "size column: {line:?}");
    let vals: Vec<f64> = (0..columns)
        .map(|c| {
            let cell = &line[10 + 20 * c..30 + 20 * c];
            let v: f64 = cell
                .trim_start()
                .parse()
                .unwrap_or_else(|e| panic!("value in {line:?}: {e}"));
            assert_eq!(format!("{v:>20.2}"), cell, "two decimals: {line:?}");
            assert!(v > 0.0, "{line:?}");
            v
        })
        .collect();
    (bytes, vals)
}

/// An OSU block: test name, extra header line, columns, sizes of a quick run.
type OsuBlock = (
    &'static str,
    Option<&'static str>,
    &'static [&'static str],
    &'static [usize],
);

#[test]
fn osu_format_prints_the_osu_layout() {
    require_root!();
    let o = run(&[
        "demo",
        "--quick",
        "--format",
        "osu",
        "--rounds",
        "1",
        "--big-mtu",
        "0",
        "--tests",
        "latency,bandwidth,bibw,msgrate",
        "--transport",
        "llc-packet",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    let blocks: [OsuBlock; 4] = [
        ("Latency", None, &["Latency (us)"], &[1, 8, 1024, 65536]),
        (
            "Bandwidth",
            None,
            &["Bandwidth (MB/s)"],
            &[8, 4096, 1 << 20],
        ),
        (
            "Bi-Directional Bandwidth",
            None,
            &["Bandwidth (MB/s)"],
            &[8, 4096, 1 << 20],
        ),
        (
            "Multiple Bandwidth / Message Rate",
            Some("# [ pairs: 1 ] [ window size: 64 ]"),
            &["MB/s", "Messages/s"],
            &[8],
        ),
    ];
    let mut lines = text.lines();
    for (i, (name, extra, columns, sizes)) in blocks.iter().enumerate() {
        if i > 0 {
            assert_eq!(lines.next(), Some(""), "blank line between blocks:\n{text}");
        }
        assert_eq!(
            lines.next(),
            Some(format!("# llc-perf {name} Test v{version}").as_str()),
            "{text}"
        );
        let t = lines.next().unwrap();
        assert!(
            t.starts_with("# Transport: llc-packet (llc/af_packet") && t.ends_with("link MTU 1500"),
            "{t}"
        );
        if let Some(e) = extra {
            assert_eq!(lines.next(), Some(*e), "{text}");
        }
        // OSU's header: printf("%-*s%*s\n", 10, "# Size", FIELD_WIDTH, ...).
        let mut head = format!("{:<10}", "# Size");
        for c in *columns {
            head.push_str(&format!("{c:>20}"));
        }
        assert_eq!(lines.next(), Some(head.as_str()), "{text}");
        for &want in *sizes {
            let (bytes, vals) = osu_row(lines.next().expect("a row"), columns.len());
            assert_eq!(bytes, want, "{text}");
            if columns.len() == 2 {
                // MB/s = size x messages/s / 1e6 (decimal MB), as OSU computes it.
                let mb = bytes as f64 * vals[1] / 1e6;
                assert!((mb - vals[0]).abs() <= 0.01 + mb * 1e-3, "{text}");
            }
        }
    }
    assert_eq!(lines.next(), None, "nothing after the last block:\n{text}");
}

/// The message rate of 2 sender/receiver pairs at once between a client
/// and a server in two namespaces (`--pairs 2` on both sides), over LLC and
/// TCP: the JSON has the aggregate and each pair's rate (the aggregate their
/// sum, as osu_mbw_mr adds them), `--format osu` says `pairs: 2` and lists
/// the pairs, the tables show them; a client asking for more pairs than the
/// server has fails at once, naming the missing pair and the server option.
#[test]
fn msgrate_with_two_pairs() {
    require_root!();
    let bed = TwoHosts::new(1500).expect("testbed");
    let port = (20000 + std::process::id() % 20000).to_string();
    let _server = Background::spawn(
        bed.b.ns.command(BIN).args([
            "server",
            "-I",
            &bed.b.ifname,
            "--transport",
            "llc-packet,tcp",
            "--port",
            &port,
            "--pairs",
            "2",
        ]),
        "ready",
        Duration::from_secs(10),
    )
    .expect("server starts");
    let peers = [format_mac(&bed.b.mac), bed.b.ipv4.to_string()];
    let client = |pairs: &str, out: &[&str]| {
        bed.a
            .ns
            .command(BIN)
            .args(["client", "-I", &bed.a.ifname, "--port", &port])
            .args(["--transport", "llc-packet,tcp", "--tests", "msgrate"])
            .args(["--quick", "--rounds", "3", "--verify", "--pairs", pairs])
            .args(["--connect-timeout", "3"])
            .args(out)
            .args(&peers)
            .output()
            .unwrap()
    };
    let o = client("2", &["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["settings"]["pairs"], 2, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{v}");
    for r in results {
        let points = r["msgrate"].as_array().unwrap();
        assert_eq!(points.len(), 1, "{r}");
        let p = &points[0];
        assert_eq!(
            (p["bytes"].as_u64(), p["pairs"].as_u64()),
            (Some(8), Some(2))
        );
        assert_eq!(p["window"], 64, "{p}");
        let each: Vec<f64> = p["per_pair_msgs_per_s"]
            .as_array()
            .unwrap_or_else(|| panic!("per_pair_msgs_per_s in {p}"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(each.len(), 2, "{p}");
        assert!(each.iter().all(|x| x.is_finite() && *x > 0.0), "{p}");
        // The aggregate is the sum of the two pairs' rates (those of the
        // median round).
        let sum: f64 = each.iter().sum();
        let agg = p["msgs_per_s"].as_f64().unwrap();
        assert!((agg - sum).abs() <= sum * 1e-9, "{p}");
        // Both pairs' messages were timed: windows of 64 from each.
        let msgs = p["messages"].as_u64().unwrap();
        assert!(msgs >= 2 * 2 * 64 && msgs % 64 == 0, "{p}");
    }

    let o = client("2", &["--format", "osu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    for transport in ["llc-packet", "tcp"] {
        let block = text
            .split("\n\n")
            .find(|b| b.contains(&format!("# Transport: {transport} (")))
            .unwrap_or_else(|| panic!("no {transport} block:\n{text}"));
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines[2], "# [ pairs: 2 ] [ window size: 64 ]", "{block}");
        let (bytes, vals) = osu_row(lines[4], 2);
        assert_eq!(bytes, 8, "{block}");
        let per: Vec<f64> = lines[5]
            .strip_prefix("# 8 B, Messages/s per pair: ")
            .unwrap_or_else(|| panic!("per-pair line in {block}"))
            .split(' ')
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(per.len(), 2, "{block}");
        let sum: f64 = per.iter().sum();
        assert!((vals[1] - sum).abs() <= 0.02 + sum * 1e-6, "{block}");
    }

    let o = client("2", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("msgrate: messages/s, window 64, 2 pairs at once")
            && text.contains("msgrate per pair: messages/s, pair 0 first"),
        "{text}"
    );
    for transport in ["llc-packet", "tcp"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(transport) && l.contains(" 8 B  "))
            .unwrap_or_else(|| panic!("no per-pair line of {transport}:\n{text}"));
        assert_eq!(
            line.split(" 8 B  ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .count(),
            2
        );
    }

    // The server has 2 pairs: a third one finds nobody, a bounded wait.
    let t0 = Instant::now();
    let o = client("3", &["--json"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("pair 2") && err.contains("--pairs 3"),
        "the error names the pair and the server option: {err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}
