//! The BMI seed benchmark's driver (`examples/bmi_bench.rs`) on the
//! simulated cluster: `serverload --json` runs both methods and reports
//! every client (root; skipped otherwise).

use std::process::Command;
use std::time::Duration;

use testbed::cdylib::profile_dir;
use testbed::run_bounded;

/// Bound of the whole benchmark job.
const JOB_TIMEOUT: Duration = Duration::from_secs(240);

/// `bmi_bench serverload --json` runs both methods and reports every client.
#[test]
fn the_serverload_benchmark_reports_every_client() {
    testbed::require_root!();
    let exe = profile_dir().join("examples/bmi_bench");
    assert!(
        exe.exists(),
        "{} not built (cargo test builds examples)",
        exe.display()
    );
    let out = run_bounded(
        Command::new(&exe).args([
            "serverload",
            "--clients",
            "2,5",
            "--reply",
            "10000",
            "--rounds",
            "30",
            "--hosts",
            "3",
            "--json",
        ]),
        JOB_TIMEOUT,
    )
    .expect("bmi_bench");
    assert!(out.success(), "{out}");
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4, "{v}");
    for r in runs {
        let n = r["clients"].as_u64().unwrap() as usize;
        let per = r["per_client"].as_array().unwrap();
        assert_eq!(per.len(), n, "{r}");
        for c in per {
            assert_eq!(c["rounds"], 30);
            assert_eq!(c["bytes"], 300_000);
            assert!(c["min_us"].as_f64().unwrap() > 0.0);
            assert!(c["min_us"].as_f64() <= c["avg_us"].as_f64());
            assert!(c["avg_us"].as_f64() <= c["max_us"].as_f64());
        }
        assert!(r["aggregate_mbytes_per_s"].as_f64().unwrap() > 0.0);
    }
    let methods: Vec<&str> = runs.iter().map(|r| r["method"].as_str().unwrap()).collect();
    assert_eq!(methods, ["bmi_llc", "bmi_tcp", "bmi_llc", "bmi_tcp"]);
}
