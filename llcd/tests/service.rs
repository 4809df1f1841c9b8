//! The endpoint service between two namespaces, with ordinary users: what
//! they get through it, what the policy refuses, what a dead client or a
//! dead service leaves, and what a hostile local user cannot do.
//!
//! Processes run as ordinary accounts (created once, `testbed::TestUser`)
//! through `setpriv`, with no capabilities. llc-ping is the client: the
//! workspace's build of it (`cargo test --workspace` builds it).

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use testbed::{format_mac, Background, TestUser, TwoHosts};

const LLCD: &str = env!("CARGO_BIN_EXE_llcd");

fn llc_ping() -> PathBuf {
    testbed::cdylib::binary("llc-ping", "llc-ping").expect("llc-ping")
}

fn user(name: &str) -> TestUser {
    TestUser::ensure(name).expect("test account")
}

/// `llcd --foreground` in `ns` with `policy` (written to a file beside it).
fn llcd(ns: &testbed::Netns, policy: &str) -> (Background, tempfile_path::Path) {
    let file = tempfile_path::Path::new(policy);
    let bg = testbed::llcd::start(ns, LLCD.as_ref(), file.path()).expect("llcd");
    (bg, file)
}

/// A policy file that removes itself.
mod tempfile_path {
    pub struct Path(std::path::PathBuf);
    impl Path {
        pub fn new(text: &str) -> Path {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "llcd-test-{}-{}.toml",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&p, text).expect("policy file");
            Path(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Run `program args` as `user` in `ns`, bounded.
fn run_as(
    ns: &testbed::Netns,
    user: &TestUser,
    program: &std::path::Path,
    args: &[&str],
) -> Output {
    let mut cmd = user.command_in(ns, "timeout");
    cmd.arg("30").arg(program).args(args);
    cmd.output().expect("running as the user")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `llcd --status` in `ns` as root: `name=value` pairs.
fn status(ns: &testbed::Netns) -> String {
    let out = ns
        .command(LLCD)
        .arg("--status")
        .output()
        .expect("llcd --status");
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .split_whitespace()
        .find_map(|w| w.strip_prefix(name).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("{name} in {status}"))
}

/// Wait (bounded) until `f` holds.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A user's llc-ping responder in `b`, granted by b's llcd.
fn responder(hosts: &TwoHosts, u: &TestUser, extra_env: &[(&str, &str)]) -> Background {
    let mut cmd = u.command_in(&hosts.b.ns, llc_ping());
    cmd.args(["--respond", "-I", &hosts.b.ifname, "--backend", "packet"])
        .env_remove("LLC_AUTH_KEY");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    Background::spawn(&mut cmd, "responding on", Duration::from_secs(20)).expect("responder")
}

#[test]
fn without_the_service_an_ordinary_user_is_told_what_to_do() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let u = user("llc-job-a");
    let out = run_as(
        &hosts.a.ns,
        &u,
        &llc_ping(),
        &[
            "-I",
            &hosts.a.ifname,
            "-c",
            "1",
            "--reliable",
            &format_mac(&hosts.b.mac),
        ],
    );
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("needs CAP_NET_RAW")
            && t.contains("no llcd service runs in this network namespace")
            && t.contains("systemctl start llcd"),
        "one line naming what to install or start:\n{t}"
    );
}

#[test]
fn an_ordinary_user_pings_link_level_and_reliable_through_llcd() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let (_da, _pa) = llcd(&hosts.a.ns, "");
    let (_db, _pb) = llcd(&hosts.b.ns, "");
    let u = user("llc-job-a");
    let _r = responder(&hosts, &u, &[]);
    let peer = format_mac(&hosts.b.mac);
    for mode in [&["--reliable"][..], &[][..]] {
        let mut args = vec![
            "-I",
            &hosts.a.ifname,
            "--backend",
            "packet",
            "-c",
            "20",
            "-i",
            "0",
            "-q",
        ];
        args.extend_from_slice(mode);
        args.push(&peer);
        let out = run_as(&hosts.a.ns, &u, &llc_ping(), &args);
        let t = text(&out);
        assert!(
            out.status.success() && t.contains("20 received"),
            "{mode:?}:\n{t}"
        );
    }
    // The responder holds one endpoint on b; the pingers' were released.
    let uid = u.uid.to_string();
    assert_eq!(field(&status(&hosts.b.ns), "held"), format!("{uid}:1"));
    wait_for("a's pingers to be released", || {
        field(&status(&hosts.a.ns), "held").is_empty()
    });
    assert_eq!(field(&status(&hosts.a.ns), "granted"), "2");
}

#[test]
fn the_policy_refuses_with_reasons_and_limits_hold() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let allowed = user("llc-job-a");
    let other = user("llc-job-b");
    let policy = format!(
        "allow = [\"{}\"]\nmax_endpoints_per_user = 1\n",
        allowed.name
    );
    let (_db, _pb) = llcd(&hosts.b.ns, &policy);
    let port_args = |port: &'static str| {
        [
            "--respond",
            "-I",
            "llc0",
            "--backend",
            "packet",
            "--port",
            port,
        ]
    };

    let out = run_as(&hosts.b.ns, &other, &llc_ping(), &port_args("9"));
    let t = text(&out);
    assert!(
        !out.status.success()
            && t.contains("llc-job-b")
            && t.contains("is not allowed to open endpoints"),
        "{t}"
    );
    let _first = responder(&hosts, &allowed, &[]);
    let out = run_as(&hosts.b.ns, &allowed, &llc_ping(), &port_args("9"));
    let t = text(&out);
    assert!(
        !out.status.success()
            && t.contains("already holds 1 endpoints")
            && t.contains("max_endpoints_per_user"),
        "{t}"
    );
    let s = status(&hosts.b.ns);
    assert_eq!(field(&s, "refused_policy"), "2", "{s}");

    let (_d2, _p2) = llcd(&hosts.a.ns, "interfaces = [\"eth9\"]\n");
    let out = run_as(&hosts.a.ns, &allowed, &llc_ping(), &port_args("9"));
    let t = text(&out);
    assert!(
        t.contains("interface llc0 is not open to users on this host (allowed: eth9)"),
        "{t}"
    );
}

#[test]
fn a_killed_client_gives_its_port_back_and_a_killed_service_breaks_no_endpoint() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let (_da, _pa) = llcd(&hosts.a.ns, "");
    let (mut db, pb) = llcd(&hosts.b.ns, "");
    let u = user("llc-job-a");
    let uid = u.uid.to_string();
    let ping = |count: &str| {
        let out = reliable_ping(&hosts, &u, "packet", "7", count);
        (out.status.success(), text(&out))
    };

    // SIGKILL the responder: its endpoint is released and port 7 is free again.
    let mut r = responder(&hosts, &u, &[]);
    assert_eq!(field(&status(&hosts.b.ns), "held"), format!("{uid}:1"));
    r.kill();
    wait_for("the killed client's endpoint to be released", || {
        field(&status(&hosts.b.ns), "held").is_empty()
    });
    let r = responder(&hosts, &u, &[]);
    let (ok, t) = ping("10");
    assert!(ok, "{t}");

    // SIGKILL the service: the endpoint it granted carries on.
    db.kill();
    let (ok, t) = ping("10");
    assert!(ok, "the responder works without the service:\n{t}");
    // A restarted service serves new endpoints (port 7 is still the
    // responder's: a second one is refused for that reason).
    let _db2 = testbed::llcd::start(&hosts.b.ns, LLCD.as_ref(), pb.path()).expect("llcd again");
    let out = run_as(
        &hosts.b.ns,
        &u,
        &llc_ping(),
        &["--respond", "-I", "llc0", "--backend", "packet"],
    );
    let t = text(&out);
    assert!(
        t.contains("port 7 of SAP 0x7c is held by another endpoint"),
        "{t}"
    );
    let s = status(&hosts.b.ns);
    assert_eq!(field(&s, "refused_port_held"), "1", "{s}");
    drop(r);
}

/// A user's llc-ping responder on `port` of b over `backend`.
fn responder_on(hosts: &TwoHosts, u: &TestUser, backend: &str, port: &str) -> Background {
    let mut cmd = u.command_in(&hosts.b.ns, llc_ping());
    cmd.args([
        "--respond",
        "-I",
        &hosts.b.ifname,
        "--backend",
        backend,
        "--port",
        port,
    ])
    .env_remove("LLC_AUTH_KEY");
    Background::spawn(&mut cmd, "responding on", Duration::from_secs(20)).expect("responder")
}

/// `count` reliable pings as `u` from a to port `port` of b over `backend`.
fn reliable_ping(hosts: &TwoHosts, u: &TestUser, backend: &str, port: &str, count: &str) -> Output {
    let peer = format_mac(&hosts.b.mac);
    run_as(
        &hosts.a.ns,
        u,
        &llc_ping(),
        &[
            "-I",
            &hosts.a.ifname,
            "--backend",
            backend,
            "--reliable",
            "--port",
            port,
            "-c",
            count,
            "-i",
            "0",
            "-q",
            &peer,
        ],
    )
}

/// Whether an XDP program is attached to b's interface.
fn xdp_attached(hosts: &TwoHosts) -> bool {
    hosts
        .b
        .ns
        .ip(&["-d", "link", "show", &hosts.b.ifname])
        .expect("ip link")
        .contains("prog/xdp")
}

/// Where b's llcd pins its programs (`testbed::llcd::PIN_FS`, by netns).
fn pins_of(ns: &testbed::Netns) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(format!("/run/netns/{}", ns.name()))
        .expect("netns file")
        .ino();
    PathBuf::from(testbed::llcd::PIN_FS)
        .join("llcd")
        .join(ino.to_string())
}

#[test]
fn an_ordinary_user_gets_af_xdp_that_outlives_a_killed_service() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let (_da, _pa) = llcd(&hosts.a.ns, "");
    let (mut db, pb) = llcd(&hosts.b.ns, "");
    let u = user("llc-job-a");
    let ping = |port: &str| {
        let out = reliable_ping(&hosts, &u, "xdp", port, "50");
        let t = text(&out);
        assert!(
            out.status.success() && t.contains("50 received") && t.contains("af_xdp/"),
            "a reliable ping to port {port} over AF_XDP as {}:\n{t}",
            u.name
        );
    };
    let r7 = responder_on(&hosts, &u, "xdp", "7");
    assert!(r7.output().contains("af_xdp/"), "{}", r7.output());
    assert!(xdp_attached(&hosts));
    // Its queue's pool (MTU 1500, default sizes: 16 MiB of RX chunks, 16
    // members' TX slots of 1 MiB) is counted against the user.
    let s = status(&hosts.b.ns);
    assert_eq!(field(&s, "locked_mib"), format!("{}:32", u.uid), "{s}");
    ping("7");

    // SIGKILL the service: the program stays (pinned), the endpoint works.
    db.kill();
    assert!(xdp_attached(&hosts), "the program left with the service");
    ping("7");
    // A restarted service takes the program up again and serves new
    // endpoints beside the old one.
    let _db2 = testbed::llcd::start(&hosts.b.ns, LLCD.as_ref(), pb.path()).expect("llcd again");
    let r8 = responder_on(&hosts, &u, "xdp", "8");
    assert!(r8.output().contains("af_xdp/"), "{}", r8.output());
    ping("8");
    ping("7");

    // Once every endpoint is gone (one killed, one ended), nothing stays
    // attached or pinned.
    drop(r7);
    drop(r8);
    let pins = pins_of(&hosts.b.ns);
    wait_for("b's program to be unpinned and detached", || {
        !pins.exists() && !xdp_attached(&hosts)
    });
    wait_for("b's endpoints and memory to be released", || {
        let s = status(&hosts.b.ns);
        field(&s, "held").is_empty() && field(&s, "locked_mib").is_empty()
    });
}

#[test]
fn af_xdp_past_the_locked_memory_limit_is_refused_and_auto_takes_af_packet() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let (_da, _pa) = llcd(&hosts.a.ns, "max_locked_mib_per_user = 8\n");
    let (_db, _pb) = llcd(&hosts.b.ns, "");
    let u = user("llc-job-a");
    let _r = responder_on(&hosts, &u, "xdp", "7");
    let ping = |backend: &str| {
        let out = reliable_ping(&hosts, &u, backend, "7", "20");
        (out.status.success(), text(&out))
    };
    // A pool at MTU 1500 pins 32 MiB: refused, with the reason.
    let (ok, t) = ping("xdp");
    assert!(!ok && t.contains("max_locked_mib_per_user"), "{t}");
    // `auto` says why and opens AF_PACKET through the service.
    let (ok, t) = ping("auto");
    assert!(
        ok && t.contains("20 received")
            && t.contains("AF_XDP unavailable")
            && t.contains("af_packet"),
        "{t}"
    );
    let s = status(&hosts.a.ns);
    assert_eq!(field(&s, "refused_policy"), "2", "{s}");
    // The refused endpoints left nothing attached on a.
    wait_for("a's program to leave", || {
        !hosts
            .a
            .ns
            .ip(&["-d", "link", "show", &hosts.a.ifname])
            .expect("ip link")
            .contains("prog/xdp")
    });
}
