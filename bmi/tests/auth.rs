//! `bmi_llc` with a key (`InitFlags::auth_key`), between two namespaces: a
//! client with the server's key is served; a client with another key is
//! not: its operations fail saying why, and the server counts the frames
//! it dropped. Needs root (namespaces, raw sockets); prints SKIPPED
//! otherwise.

use std::time::{Duration, Instant};

use bmi::{AuthKey, Bmi, BmiError, InitFlags, MethodKind, Posted};
use testbed::{require_root, Host, TwoHosts};

const WAIT: Duration = Duration::from_secs(20);

/// A `bmi_llc` instance opened in `h`'s namespace, keyed from `material`.
fn open(h: &Host, server: bool, material: &[u8]) -> Bmi {
    let listen = format!("llc://{}?port=0&backend=packet", h.ifname);
    let flags = InitFlags {
        server,
        auth_key: Some(AuthKey::derive(material)),
    };
    h.ns.run(move || Bmi::initialize("bmi_llc", Some(&listen), flags))
        .expect("opening bmi_llc")
}

fn addr_of(b: &Bmi) -> String {
    b.method_limits(MethodKind::Llc)
        .unwrap()
        .local_addr
        .expect("listening")
}

/// A frame counter of `b`'s LLC endpoint (`link.dropped.NAME`), summed.
fn dropped(b: &Bmi, name: &str) -> u64 {
    let key = format!("link.dropped.{name}");
    b.counters()
        .iter()
        .filter(|(k, _)| k.ends_with(&key))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn only_a_client_with_the_servers_key_is_served() {
    require_root!();
    let hosts = TwoHosts::new(1500).expect("testbed");
    let server = open(&hosts.a, true, b"file system job key");
    let saddr = addr_of(&server);

    // The right key: a request arrives.
    let client = open(&hosts.b, false, b"file system job key");
    let cctx = client.open_context();
    let to = client.addr_lookup(&saddr).unwrap();
    let p = client
        .post_sendunexpected(to, b"keyed request".to_vec(), 7, 0, cctx)
        .unwrap();
    if let Posted::Pending(op) = p {
        client
            .test(op, cctx, WAIT)
            .unwrap()
            .expect("send completes");
    }
    let got = server.testunexpected(1, WAIT).unwrap();
    assert_eq!(got.len(), 1, "the keyed client's request did not arrive");
    assert_eq!(got[0].result.as_ref().unwrap().data(), b"keyed request");

    // Another key: nothing it sends is taken, and it is told why.
    let stranger = open(&hosts.b, false, b"another job's key");
    let xctx = stranger.open_context();
    let to = stranger.addr_lookup(&saddr).unwrap();
    let _ = stranger.post_sendunexpected(to, b"forged".to_vec(), 7, 0, xctx);
    let op = match stranger.post_recv(to, 64, 8, 0, xctx).unwrap() {
        Posted::Pending(op) => op,
        Posted::Now(d) => panic!("a receive from the server completed at once: {d:?}"),
    };
    let deadline = Instant::now() + WAIT;
    let err = loop {
        // The server keeps receiving (and dropping) while the stranger tries.
        let _ = server.testunexpected(1, Duration::from_millis(1));
        match stranger.test(op, xctx, Duration::from_millis(10)) {
            Ok(None) => {}
            Ok(Some(d)) => match d.result {
                Err(e) => break e,
                Ok(_) => panic!("the stranger got an answer"),
            },
            Err(e) => break e,
        }
        assert!(Instant::now() < deadline, "the stranger never gave up");
    };
    assert!(matches!(err, BmiError::PeerFailed { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("authentication key"),
        "the error does not say the keys may differ: {text}"
    );
    assert!(
        dropped(&server, "auth_failed") > 0,
        "the server counted no dropped frame: {:?}",
        server.counters()
    );
    assert!(
        server.testunexpected(1, Duration::ZERO).unwrap().is_empty(),
        "the stranger's request was taken"
    );
}
