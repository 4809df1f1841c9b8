//! Helpers shared by llc-ping's namespace tests.

use std::time::Duration;

use testbed::{Background, TwoHosts};

pub const BIN: &str = env!("CARGO_BIN_EXE_llc-ping");

/// `llc-ping --respond` on b's interface with `backend`, ready when it says so.
pub fn responder(hosts: &TwoHosts, backend: &str) -> Background {
    Background::spawn(
        hosts
            .b
            .ns
            .command(BIN)
            .args(["--respond", "-I", &hosts.b.ifname, "--backend", backend]),
        "responding on",
        Duration::from_secs(10),
    )
    .expect("responder starts")
}

/// Run llc-ping in `a`'s namespace with a bound on its run time: (exit code, stdout, stderr).
pub fn ping(hosts: &TwoHosts, args: &[&str]) -> (i32, String, String) {
    let mut cmd = hosts.a.ns.command("timeout");
    cmd.args(["120", BIN, "-I", &hosts.a.ifname]).args(args);
    let out = cmd.output().expect("llc-ping runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Parse llc-ping's `--json` output.
pub fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}
