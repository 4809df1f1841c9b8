//! Real-namespace tests of the test beds (root needed; skipped otherwise).

use std::net::{Ipv4Addr, UdpSocket};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use testbed::{cleanup_stale, interface_mac, interface_mtu, run_checked, Bridged, Netns, TwoHosts};

const WAIT: Duration = Duration::from_secs(10);

/// Names currently listed by `ip netns list`.
fn listed() -> Vec<String> {
    let out = run_checked(
        std::process::Command::new("ip").args(["netns", "list"]),
        WAIT,
    )
    .expect("ip netns list");
    out.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Pings `to` once from inside `ns` (bounded by ping's own deadline and our timeout).
fn ping(ns: &Netns, to: Ipv4Addr) {
    let to = to.to_string();
    let mut cmd = ns.command("ping");
    cmd.args(["-c1", "-W2", "-w5", &to]);
    if let Err(e) = run_checked(&mut cmd, WAIT) {
        panic!(
            "ping {to} from {}: {e} (is iputils-ping installed?)",
            ns.name()
        );
    }
}

/// The network namespace of the calling thread, as `net:[inode]`.
fn current_netns() -> String {
    std::fs::read_link("/proc/thread-self/ns/net")
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn check_two_hosts(mtu: u32) {
    let hosts = TwoHosts::new(mtu).expect("TwoHosts::new");
    let (a, b) = (&hosts.a, &hosts.b);
    assert_ne!(a.ns.name(), b.ns.name());
    assert_eq!((a.ifname.as_str(), b.ifname.as_str()), ("llc0", "llc0"));
    assert_ne!(a.mac, b.mac);

    ping(&a.ns, b.ipv4);
    ping(&b.ns, a.ipv4);

    // MTU and MAC as asked, seen by `ip` and by ioctls from a thread inside the namespace.
    for h in [a, b] {
        let link = h.ns.ip(&["-o", "link", "show", "dev", &h.ifname]).unwrap();
        assert!(link.contains(&format!(" mtu {mtu} ")), "{link}");
        assert!(link.contains(&testbed::format_mac(&h.mac)), "{link}");
        let (got_mtu, got_mac) = h.ns.run(|| {
            (
                interface_mtu(&h.ifname).unwrap(),
                interface_mac(&h.ifname).unwrap(),
            )
        });
        assert_eq!((got_mtu, got_mac), (mtu, h.mac));
    }

    // A full-MTU UDP datagram (no fragmentation) from a thread in A to a socket made in B.
    let rx =
        b.ns.run(|| UdpSocket::bind((b.ipv4, 0)).expect("bind in b"));
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let to = rx.local_addr().unwrap();
    let payload: Vec<u8> = (0..mtu as usize - 28).map(|i| i as u8).collect();
    let mut buf = vec![0u8; 65536];
    let mut got = None;
    for _ in 0..3 {
        a.ns.run(|| {
            let tx = UdpSocket::bind((a.ipv4, 0)).expect("bind in a");
            assert_eq!(tx.send_to(&payload, to).expect("send_to"), payload.len());
        });
        if let Ok((n, from)) = rx.recv_from(&mut buf) {
            got = Some((n, from));
            break;
        }
    }
    let (n, from) = got.expect("no UDP datagram from a to b within 3 tries");
    assert_eq!(from.ip(), a.ipv4);
    assert_eq!(&buf[..n], &payload[..]);
}

#[test]
fn two_hosts_mtu_1500() {
    testbed::require_root!();
    check_two_hosts(1500);
}

#[test]
fn two_hosts_mtu_9000() {
    testbed::require_root!();
    check_two_hosts(9000);
}

#[test]
fn bridged_three_hosts_all_ping() {
    testbed::require_root!();
    let net = Bridged::new(3, 9000).expect("Bridged::new");
    assert_eq!(net.hosts.len(), 3);
    let br = net
        .hub
        .ip(&["-o", "link", "show", "dev", &net.bridge])
        .unwrap();
    assert!(br.contains(" mtu 9000 "), "{br}");
    for (i, from) in net.hosts.iter().enumerate() {
        assert_eq!(from.ns.run(|| interface_mtu(&from.ifname).unwrap()), 9000);
        for (j, to) in net.hosts.iter().enumerate() {
            if i != j {
                ping(&from.ns, to.ipv4);
            }
        }
    }
}

#[test]
fn drop_deletes_namespaces() {
    testbed::require_root!();
    let two = TwoHosts::new(1500).unwrap();
    let bridged = Bridged::new(2, 1500).unwrap();
    let mut names = vec![two.a.ns.name().to_owned(), two.b.ns.name().to_owned()];
    names.push(bridged.hub.name().to_owned());
    names.extend(bridged.hosts.iter().map(|h| h.ns.name().to_owned()));
    let before = listed();
    assert!(
        names.iter().all(|n| before.contains(n)),
        "{names:?} not all in {before:?}"
    );
    // A thread still inside a namespace does not stop the deletion.
    let inside = two
        .a
        .ns
        .spawn(|| std::thread::sleep(Duration::from_millis(300)));
    drop(two);
    drop(bridged);
    let after = listed();
    assert!(
        names.iter().all(|n| !after.contains(n)),
        "{names:?} left in {after:?}"
    );
    inside.join().unwrap();
}

#[test]
fn panic_in_test_still_deletes_namespaces() {
    testbed::require_root!();
    let names = std::sync::Mutex::new(Vec::new());
    let result = catch_unwind(AssertUnwindSafe(|| {
        let hosts = TwoHosts::new(1500).unwrap();
        names
            .lock()
            .unwrap()
            .extend([hosts.a.ns.name().to_owned(), hosts.b.ns.name().to_owned()]);
        panic!("test failure while the hosts exist");
    }));
    assert!(result.is_err());
    let names = names.into_inner().unwrap();
    assert_eq!(names.len(), 2);
    let after = listed();
    assert!(
        names.iter().all(|n| !after.contains(n)),
        "{names:?} left in {after:?}"
    );
}

#[test]
fn run_enters_namespace_and_propagates_panic() {
    testbed::require_root!();
    let ns = Netns::new("run").unwrap();
    let outside = current_netns();
    let inside = ns.run(current_netns);
    assert_ne!(inside, outside);
    assert_eq!(
        current_netns(),
        outside,
        "the caller's thread must not switch"
    );
    // Borrowing from the caller works (scoped thread).
    let local = [1, 2, 3];
    assert_eq!(ns.run(|| local.iter().sum::<i32>()), 6);

    let err = catch_unwind(AssertUnwindSafe(|| ns.run(|| panic!("boom in ns")))).unwrap_err();
    assert_eq!(err.downcast_ref::<&str>(), Some(&"boom in ns"));
}

#[test]
fn spawn_runs_in_namespace() {
    testbed::require_root!();
    let ns = Netns::new("spawn").unwrap();
    let expected = ns.run(current_netns);
    let handle = ns.spawn(current_netns);
    assert_eq!(handle.join().unwrap(), expected);
    assert!(ns.spawn(|| panic!("boom")).join().is_err());
}

#[test]
fn command_and_ip_run_inside() {
    testbed::require_root!();
    let ns = Netns::new("cmd").unwrap();
    let mut cmd = ns.command("ip");
    cmd.args(["-o", "link", "show"]);
    let links = run_checked(&mut cmd, WAIT).unwrap();
    assert_eq!(
        links.lines().count(),
        1,
        "a fresh namespace has only lo: {links}"
    );
    assert!(links.contains("lo:") && links.contains("UP"), "{links}");
    let err = ns
        .ip(&["link", "show", "dev", "nosuchdev0"])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("nosuchdev0") && err.contains(ns.name()),
        "{err}"
    );
}

#[test]
fn names_are_unique_and_checked() {
    testbed::require_root!();
    let (x, y) = (Netns::new("u").unwrap(), Netns::new("u").unwrap());
    assert_ne!(x.name(), y.name());
    assert!(x
        .name()
        .starts_with(&format!("llct-u-{}-", std::process::id())));
    assert!(Netns::new("").is_err());
    assert!(Netns::new("bad/name").is_err());
    assert!(TwoHosts::new(10).is_err());
    assert!(Bridged::new(0, 1500).is_err());
}

#[test]
fn cleanup_stale_removes_dead_pids_only() {
    testbed::require_root!();
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dead_pid = 999_999_999;
    assert!(dead_pid > pid_max);
    let dead = format!("llct-x-{dead_pid}-0");
    let alive = format!("llct-x-{}-999999", std::process::id());
    for name in [&dead, &alive] {
        run_checked(
            std::process::Command::new("ip").args(["netns", "add", name]),
            WAIT,
        )
        .unwrap();
    }
    cleanup_stale();
    let after = listed();
    // Delete ours before asserting, so a failure leaves nothing behind.
    let _ = run_checked(
        std::process::Command::new("ip").args(["netns", "del", &alive]),
        WAIT,
    );
    assert!(!after.contains(&dead), "stale {dead} still listed");
    assert!(after.contains(&alive), "{alive} of a live pid was deleted");
}
