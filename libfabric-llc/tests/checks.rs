//! Bad use gets libfabric's answers, through Debian's libfabric and the
//! provider, as a C application sees them (`tests/c/fi_checks.c`, one
//! endpoint sending to itself): truncation reported in the error entry with
//! the sizes, an address not in the AV, closing what a bound endpoint still
//! uses, cancel, peek and claim; and sends to itself at all.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use testbed::netns::{add_veth_loop, Netns};
use testbed::{run_bounded, Background};

struct Built {
    program: PathBuf,
    provider: PathBuf,
}

fn build() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = testbed::cdylib::profile_dir().join("fi-llc-checks");
        let provider = dir.join("provider");
        std::fs::create_dir_all(&provider).unwrap();
        let lib = testbed::cdylib::cdylib_dir("libllc_fi.so").join("libllc_fi.so");
        std::fs::copy(&lib, provider.join("libllc-fi.so")).unwrap();
        let program = dir.join("fi_checks");
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/fi_checks.c");
        let out = Command::new("cc")
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&program)
            .arg(&src)
            .arg("-lfabric")
            .output()
            .expect("cc");
        assert!(
            out.status.success(),
            "building fi_checks (libfabric-dev: scripts/install-deps.sh): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Built { program, provider }
    })
}

/// `fi_checks ARGS` in `ns` on `iface`.
fn command(ns: &Netns, iface: &str, args: &[&str]) -> Command {
    let built = build();
    let mut cmd = ns.command(&built.program);
    cmd.args(args)
        .env("FI_PROVIDER_PATH", &built.provider)
        .env("FI_PROVIDER", "llc")
        .env("FI_LLC_IFACE", iface)
        .env("FI_LLC_AUTH", "off")
        .env("FI_LLC_IDLE_TIMEOUT_MS", "2000");
    cmd
}

fn check(what: &[&str]) -> String {
    let ns = Netns::new("fichk").unwrap();
    add_veth_loop(&ns, "fa0", "fb0", 1).unwrap();
    let out = run_bounded(&mut command(&ns, "fa0", what), Duration::from_secs(60))
        .expect("fi_checks runs");
    let text = out.to_string();
    assert!(out.success(), "fi_checks {what:?}:\n{text}");
    assert!(text.contains(&format!("OK {}", what[0])), "{text}");
    text
}

#[test]
fn an_endpoint_sends_to_itself() {
    testbed::require_root!();
    let text = check(&["self", "1000"]);
    assert!(text.contains("self: 1000 round trips"), "{text}");
}

#[test]
fn truncation_is_an_error_entry_with_both_sizes() {
    testbed::require_root!();
    check(&["truncate"]);
}

#[test]
fn a_send_to_an_address_not_in_the_av_is_invalid() {
    testbed::require_root!();
    check(&["noaddr"]);
}

#[test]
fn closing_what_a_bound_endpoint_uses_is_busy() {
    testbed::require_root!();
    check(&["busy"]);
}

#[test]
fn a_cancelled_receive_completes_with_ecanceled() {
    testbed::require_root!();
    check(&["cancel"]);
}

#[test]
fn peek_and_claim_as_open_mpi_uses_them() {
    testbed::require_root!();
    check(&["peek"]);
}

#[test]
fn fi_recv_takes_multi_recv_from_the_receive_context_s_default_flags() {
    testbed::require_root!();
    check(&["multi"]);
}

#[test]
fn data_transfer_before_fi_enable_is_a_bad_state() {
    testbed::require_root!();
    check(&["disabled"]);
}

#[test]
fn hints_not_served_give_no_data_and_null_hints_answers_can_be_asked_again() {
    testbed::require_root!();
    check(&["hints"]);
}

#[test]
fn a_peer_that_dies_fails_the_pending_operations_with_error_entries() {
    testbed::require_root!();
    let ns = Netns::new("fidie").unwrap();
    add_veth_loop(&ns, "fa0", "fb0", 1).unwrap();
    let mut peer = Background::spawn(
        &mut command(&ns, "fb0", &["serve"]),
        "name ",
        Duration::from_secs(20),
    )
    .expect("the peer starts");
    let name = peer
        .output()
        .lines()
        .find_map(|l| l.strip_prefix("name ").map(str::to_string))
        .expect("the peer's name");
    let mut orphan = Background::spawn(
        &mut command(&ns, "fa0", &["orphan", &name]),
        "posted",
        Duration::from_secs(20),
    )
    .expect("the operations are posted");
    peer.kill();
    let status = orphan
        .wait_timeout(Duration::from_secs(60))
        .expect("fi_checks orphan ends");
    let text = orphan.output();
    assert!(status.success() && text.contains("OK orphan"), "{text}");
    assert_eq!(text.matches("error ").count(), 2, "{text}");
}

#[test]
fn rma_write_and_read_through_a_registration_bound_to_the_endpoint() {
    testbed::require_root!();
    check(&["rma"]);
}
