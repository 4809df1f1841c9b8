//! Two users' jobs at once on the same hosts and segment, and a third,
//! hostile local user with no privileges who tries to take a port in use,
//! to receive the jobs' frames and to inject frames into them. Every
//! attempt must fail and be counted, and both jobs must complete with
//! their echoes checked.
//!
//! The hostile user's program is this test executable run again as that
//! user (the ignored test `intruder`, started with `--ignored --exact`),
//! so it can do what a user's own program would: ask llcd for an endpoint
//! and then try everything on the socket it got.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use llc_stack::link::grant;
use llc_stack::wire::{self, Addresses, FrameType, MacAddr, Trailer, TransportHeader};
use testbed::{format_mac, Background, TestUser, TwoHosts};

const LLCD: &str = env!("CARGO_BIN_EXE_llcd");
const ROLE: &str = "LLCD_TEST_INTRUDER";

fn bin(name: &str, package: &str) -> PathBuf {
    testbed::cdylib::binary(name, package).expect("workspace binary")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The intruder's program: `LLCD_TEST_INTRUDER=listen IFNAME SECONDS` or
/// `inject IFNAME DST_MAC SRC_MAC PORT COUNT`. Prints `key=value` results.
#[test]
#[ignore = "the hostile user's program, run by `two_jobs_and_an_intruder`"]
fn intruder() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let words: Vec<&str> = role.split_whitespace().collect();
    match words.as_slice() {
        ["listen", ifname, seconds] => listen(ifname, seconds.parse().unwrap()),
        ["inject", ifname, dst, src, port, count] => inject(
            ifname,
            dst.parse().unwrap(),
            src.parse().unwrap(),
            port.parse().unwrap(),
            count.parse().unwrap(),
        ),
        _ => panic!("unknown role {role:?}"),
    }
}

fn errno_of(rc: libc::c_int) -> i32 {
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    }
}

/// Bind the granted socket to `ifname` (every protocol).
fn bind(fd: &OwnedFd, ifname: &str) {
    let name = std::ffi::CString::new(ifname).unwrap();
    // SAFETY: name is a NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(index > 0, "no interface {ifname}");
    // SAFETY: sockaddr_ll is plain data; all zeros is valid.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = index as i32;
    // SAFETY: sll is a valid sockaddr_ll for the call.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
}

/// Ask for the job's port (refused), then for any port; try to widen and
/// to remove the filter (refused by the kernel); then read everything the
/// socket gets for `seconds` and count frames for another port.
fn listen(ifname: &str, seconds: u64) {
    let taken = grant::request(ifname, 0x7c, 7).map(|g| g.port);
    println!("port7={}", if taken.is_ok() { "taken" } else { "refused" });
    let g = grant::request(ifname, 0x7c, 0).expect("a free port");
    let fd = g.packet;
    // Accept everything: one instruction, `ret #-1`.
    let accept_all = [libc::sock_filter {
        code: 0x06,
        jt: 0,
        jf: 0,
        k: u32::MAX,
    }];
    let prog = libc::sock_fprog {
        len: 1,
        filter: accept_all.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prog points to a valid one-instruction program for the call.
    let attach = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as u32,
        )
    };
    println!("attach_errno={}", errno_of(attach));
    let zero: libc::c_int = 0;
    // SAFETY: zero is a readable int for the call.
    let detach = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_DETACH_FILTER,
            (&zero as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as u32,
        )
    };
    println!("detach_errno={}", errno_of(detach));
    bind(&fd, ifname);
    let (mut frames, mut foreign) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut buf = vec![0u8; 65536];
    while Instant::now() < deadline {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        frames += 1;
        let dst_port = buf.get(23..25).map(|p| u16::from_be_bytes([p[0], p[1]]));
        if dst_port != Some(g.port) {
            foreign += 1;
        }
    }
    println!("frames={frames} foreign={foreign}");
}

/// Send `count` forged transport frames to `dst`'s `port`: half without a
/// tag, half with a made-up one; each a DATA frame with guessed cookies.
fn inject(ifname: &str, dst: MacAddr, src: MacAddr, port: u16, count: usize) {
    let g = grant::request(ifname, 0x7c, 0).expect("a free port");
    bind(&g.packet, ifname);
    let addr = Addresses {
        dst,
        src,
        dsap: 0x7c,
        ssap: 0x7c,
    };
    let mut sent = 0;
    for i in 0..count {
        let h = TransportHeader {
            kind: FrameType::Data.into(),
            flags: wire::transport::flags::LAST_FRAGMENT,
            src_port: g.port.into(),
            dst_port: port.into(),
            src_cookie: (0x1234_5678u32 ^ i as u32).into(),
            dst_cookie: (0x9abc_def0u32 ^ i as u32).into(),
            msg_id: (i as u32).into(),
            msg_len: 14.into(),
            seq: (i as u32).into(),
            ..Default::default()
        };
        let tag = [0x5a; wire::auth::TAG_LEN];
        let trailer = if i % 2 == 0 {
            Trailer::None
        } else {
            Trailer::Raw(&tag)
        };
        let mut frame = vec![0u8; 256];
        let n = wire::emit_transport_with(&mut frame, &addr, &h, &[], b"FORGED PAYLOAD", trailer)
            .expect("frame");
        // SAFETY: frame is readable for n bytes.
        let rc = unsafe { libc::send(g.packet.as_raw_fd(), frame.as_ptr().cast(), n, 0) };
        if rc == n as isize {
            sent += 1;
        }
    }
    println!("sent={sent}");
}

/// Run this executable's `intruder` as `user` in `ns` with `role`.
fn intruder_command(ns: &testbed::Netns, user: &TestUser, role: &str) -> std::process::Command {
    let exe = std::env::current_exe().expect("test executable");
    let mut cmd = user.command_in(ns, exe);
    cmd.args([
        "--ignored",
        "--exact",
        "intruder",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env(ROLE, role);
    cmd
}

fn value<'a>(out: &'a str, key: &str) -> &'a str {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .unwrap_or_else(|| panic!("{key} in {out}"))
}

#[test]
fn two_jobs_and_an_intruder() {
    testbed::require_root!();
    let hosts = TwoHosts::new(1500).unwrap();
    let start = |ns: &testbed::Netns| {
        testbed::llcd::start(ns, LLCD.as_ref(), "/dev/null".as_ref()).expect("llcd")
    };
    let (_la, _lb) = (start(&hosts.a.ns), start(&hosts.b.ns));
    let alice = TestUser::ensure("llc-job-a").unwrap();
    let bob = TestUser::ensure("llc-job-b").unwrap();
    let mallory = TestUser::ensure("llc-intruder").unwrap();
    let ping = bin("llc-ping", "llc-ping");
    let (a_mac, b_mac) = (format_mac(&hosts.a.mac), format_mac(&hosts.b.mac));

    // Each job: a responder on b and a pinger on a, with the job's own key.
    // Job A takes AF_XDP; job B, with the default backend, finds the
    // interface queue's buffer pool held by another user (the kernel has
    // one per queue) and takes AF_PACKET.
    let job = |u: &TestUser, backend: &str, port: &str, key: &str| {
        let mut cmd = u.command_in(&hosts.b.ns, &ping);
        cmd.args([
            "--respond",
            "-I",
            "llc0",
            "--backend",
            backend,
            "--port",
            port,
        ])
        .env("LLC_AUTH_KEY", key);
        Background::spawn(&mut cmd, "responding on", Duration::from_secs(20)).expect("responder")
    };
    let ra = job(&alice, "xdp", "7", "job A's key");
    let rb = job(&bob, "auto", "8", "job B's key");
    assert!(ra.output().contains("af_xdp/"), "{}", ra.output());
    assert!(rb.output().contains("af_packet"), "{}", rb.output());

    // The intruder listens on b while both jobs run.
    let mut listener = Background::spawn(
        &mut intruder_command(&hosts.b.ns, &mallory, "listen llc0 4"),
        "detach_errno=",
        Duration::from_secs(20),
    )
    .expect("intruder listening");
    let pinger = |u: &TestUser, backend: &'static str, port: &'static str, key: &'static str| {
        let mut cmd = u.command_in(&hosts.a.ns, &ping);
        cmd.args([
            "-I",
            "llc0",
            "--backend",
            backend,
            "--reliable",
            "-c",
            "3000",
            "-i",
            "0",
            "-q",
        ])
        .args(["--port", port, &b_mac])
        .env("LLC_AUTH_KEY", key);
        std::thread::spawn(move || cmd.output().expect("pinger"))
    };
    let (pa, pb) = (
        // Started together: whichever opens first takes the AF_XDP pool
        // of a's queue, the other AF_PACKET.
        pinger(&alice, "auto", "7", "job A's key"),
        pinger(&bob, "auto", "8", "job B's key"),
    );
    // Meanwhile the intruder, on a, forges frames to both jobs' ports.
    for port in ["7", "8"] {
        let role = format!("inject llc0 {b_mac} {a_mac} {port} 200");
        let out = intruder_command(&hosts.a.ns, &mallory, &role)
            .output()
            .unwrap();
        assert_eq!(value(&text(&out), "sent"), "200", "{}", text(&out));
    }
    for (name, p) in [("A", pa), ("B", pb)] {
        let out = p.join().unwrap();
        let t = text(&out);
        assert!(
            out.status.success() && t.contains("3000 received"),
            "job {name}:\n{t}"
        );
    }

    // What the intruder got: the port in use refused, the filter locked,
    // and nothing but frames for its own port (there were none).
    listener
        .wait_timeout(Duration::from_secs(20))
        .expect("listener ends");
    let out = listener.output();
    assert_eq!(value(&out, "port7"), "refused", "{out}");
    assert_eq!(
        value(&out, "attach_errno"),
        libc::EPERM.to_string(),
        "{out}"
    );
    assert_eq!(
        value(&out, "detach_errno"),
        libc::EPERM.to_string(),
        "{out}"
    );
    assert_eq!(value(&out, "foreign"), "0", "{out}");

    // Counted: the refusal by llcd, the forgeries by the jobs' endpoints.
    let status = hosts.b.ns.command(LLCD).arg("--status").output().unwrap();
    let status = text(&status);
    assert_eq!(value(&status, "refused_port_held"), "1", "{status}");
    let stat = bin("llc-stat", "llc-stat");
    let json = hosts.b.ns.command(&stat).arg("--json").output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("llc-stat --json");
    let dropped = |port: u64, reason: &str| -> u64 {
        v["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["label"].as_str() == Some(&format!("llc-ping responder, port {port}")))
            .map(|e| e["drops"][reason].as_u64().unwrap_or(0))
            .sum()
    };
    for port in [7, 8] {
        let (missing, failed) = (dropped(port, "auth_missing"), dropped(port, "auth_failed"));
        assert!(
            missing >= 100 && failed >= 100,
            "port {port}: auth_missing {missing}, auth_failed {failed}\n{v}"
        );
    }
    // Each user sees its own endpoints only (root saw both above).
    let seen_by = |u: &TestUser| -> Vec<String> {
        let out = stat_as(&hosts.b.ns, u, &stat);
        let v: serde_json::Value = serde_json::from_str(&out).expect("llc-stat --json");
        let labels = v["endpoints"].as_array().unwrap().iter();
        // (Responders only: the accounts may run other tests' endpoints.)
        labels
            .filter_map(|e| e["label"].as_str().map(str::to_owned))
            .filter(|l| l.starts_with("llc-ping responder"))
            .collect()
    };
    assert_eq!(seen_by(&alice), vec!["llc-ping responder, port 7"]);
    assert_eq!(seen_by(&bob), vec!["llc-ping responder, port 8"]);
    assert_eq!(seen_by(&mallory), Vec::<String>::new());
}

/// `llc-stat --json` as `u` in `ns`.
fn stat_as(ns: &testbed::Netns, u: &TestUser, stat: &std::path::Path) -> String {
    let out = u.command_in(ns, stat).arg("--json").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}
