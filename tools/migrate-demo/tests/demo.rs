//! `migrate-demo` on a four-host bed it builds itself, over LLC and TCP in
//! one run, with a few migrations: its JSON says every message was
//! delivered once, in order and unaltered, and it exits 0. Root only.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

#[test]
fn four_hosts_llc_and_tcp_nothing_lost_duplicated_or_reordered() {
    if let Err(why) = testbed::check_privileges() {
        println!("SKIPPED migrate-demo builds network namespaces: {why}");
        return;
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_migrate-demo"));
    cmd.args(["--hosts", "4", "--tasks", "8", "--migrations", "24"])
        .args(["--duration-ms", "1500", "--transport", "both", "--json"]);
    let out =
        testbed::run_bounded(&mut cmd, Duration::from_secs(240)).expect("running migrate-demo");
    assert!(out.success(), "{out}");
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(v["ok"], Value::Bool(true), "{v:#}");
    for t in ["llc", "tcp"] {
        let r = &v[t];
        let n = |k: &str| {
            r[k].as_u64()
                .unwrap_or_else(|| panic!("{t}.{k} missing: {r:#}"))
        };
        assert!(n("sent") > 1000, "{r:#}");
        assert_eq!(n("delivered"), n("sent"), "{r:#}");
        for k in ["lost", "duplicates", "out_of_order", "corrupted"] {
            assert_eq!(n(k), 0, "{t}.{k}: {r:#}");
        }
        // A host whose tasks all left cannot make its share.
        assert!(n("migrations") >= 12, "{r:#}");
        assert!(n("forwarded") > 0, "no message was forwarded: {r:#}");
        assert_eq!(
            r["migration_time_us"]["count"].as_u64(),
            Some(n("migrations")),
            "every migration arrived: {r:#}"
        );
        assert!(r["latency_steady_us"]["p50_us"].as_f64().unwrap() > 0.0);
    }
}
