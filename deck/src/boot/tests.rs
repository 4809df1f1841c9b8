//! Tests of the bootstrap: protocol, node and launcher together.
use super::wire::*;
use super::*;
use std::collections::HashMap;
use std::sync::mpsc;

const T: Duration = Duration::from_secs(10);

fn env_of(vars: &[(&str, &str)]) -> Result<Option<JobEnv>, BootError> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    JobEnv::from_lookup(|k| map.get(k).cloned())
}

fn full_env() -> Vec<(&'static str, &'static str)> {
    vec![
        (ENV_NODE, "2"),
        (ENV_NUMNODES, "4"),
        (ENV_BOOT, "127.0.0.1:4711, 10.0.0.1:4711"),
        (ENV_JOB, "00c0ffee12345678"),
        (ENV_TRANSPORT, "tcp://0.0.0.0:0"),
    ]
}

#[test]
fn env_is_parsed() {
    assert!(env_of(&[]).unwrap().is_none());
    let env = env_of(&full_env()).unwrap().unwrap();
    assert_eq!((env.node, env.numnodes), (2, 4));
    assert_eq!(env.job, 0x00c0_ffee_1234_5678);
    assert_eq!(
        env.boot,
        vec![
            "127.0.0.1:4711".parse::<SocketAddr>().unwrap(),
            "10.0.0.1:4711".parse().unwrap()
        ]
    );
    assert_eq!(env.transport.to_string(), "tcp://0.0.0.0:0");
    let mut vars = full_env();
    vars.retain(|(k, _)| *k != ENV_TRANSPORT);
    let env = env_of(&vars).unwrap().unwrap();
    // The default; any free port, as several nodes share an interface.
    assert_eq!(env.transport.to_string(), "llc://?port=0");
    vars.push((ENV_TRANSPORT, "llc://eth0?backend=xdp"));
    let env = env_of(&vars).unwrap().unwrap();
    assert_eq!(env.transport.to_string(), "llc://eth0?backend=xdp&port=0");
    vars.push((ENV_TRANSPORT, "llc://eth0?port=9"));
    let env = env_of(&vars).unwrap().unwrap();
    assert_eq!(
        env.transport.to_string(),
        "llc://eth0?port=9",
        "a port named"
    );
}

#[test]
fn bad_env_names_the_variable_and_value() {
    for (var, value, expect) in [
        (ENV_NODE, "4", "below DECK_NUMNODES=4"),
        (ENV_NUMNODES, "0", "1..="),
        (ENV_JOB, "xyz", "hex"),
        (ENV_JOB, "12345678123456789", "hex"),
        (ENV_BOOT, "localhost:1", "IP:PORT"),
        (ENV_BOOT, ",", "IP:PORT"),
        (ENV_TRANSPORT, "rdma://x", "a transport spec"),
        (ENV_TRANSPORT, "eth0", "a transport spec"),
    ] {
        let mut vars = full_env();
        vars.retain(|(k, _)| *k != var);
        vars.push((var, value));
        let e = env_of(&vars).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, BootError::EnvInvalid { var: v, .. } if v == var),
            "{text}"
        );
        assert!(text.contains(var) && text.contains(value), "{text}");
        assert!(text.contains(expect), "{text}");
    }
    let mut vars = full_env();
    vars.retain(|(k, _)| *k != ENV_JOB);
    let e = env_of(&vars).unwrap_err();
    assert!(matches!(e, BootError::EnvMissing { var: ENV_JOB }), "{e}");
}

#[test]
fn client_frames_from_literal_bytes() {
    #[rustfmt::skip]
    let hello = [
        0, 0, 0, 19, 0x01, b'D', b'E', b'C', b'K', 0, 1,
        0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 3,
    ];
    let msg = ClientMsg::Hello {
        version: 1,
        job: 0x1234,
        node: 3,
    };
    assert_eq!(msg.emit(), hello);
    assert_eq!(ClientMsg::parse(hello[4], &hello[5..]), Ok(msg));

    let card = [0, 0, 0, 7, 0x02, 0, 0, 0, 9, b'a', b'b'];
    let msg = ClientMsg::Card {
        round: 9,
        card: "ab".into(),
    };
    assert_eq!(msg.emit(), card);
    assert_eq!(ClientMsg::parse(card[4], &card[5..]), Ok(msg));
    assert_eq!(ClientMsg::Finish.emit(), [0, 0, 0, 1, 0x03]);

    assert_eq!(
        ClientMsg::parse(0x42, &[1, 2]),
        Ok(ClientMsg::Unknown(0x42))
    );
    assert_eq!(
        ClientMsg::parse(0x01, b"HTTP/1.1 2"),
        Err(ProtocolError::BadMagic(*b"HTTP"))
    );
    assert_eq!(
        ClientMsg::parse(0x01, &hello[5..20]),
        Err(ProtocolError::Truncated { what: "HELLO" })
    );
    assert_eq!(
        ClientMsg::parse(0x03, &[0]),
        Err(ProtocolError::Trailing {
            what: "FINISH",
            extra: 1
        })
    );
    assert_eq!(
        ClientMsg::parse(0x02, &[0, 0, 0, 0, 0xff]),
        Err(ProtocolError::NotUtf8 { what: "CARD" })
    );
    let long = vec![b'x'; 4 + MAX_CARD + 1];
    assert_eq!(
        ClientMsg::parse(0x02, &long),
        Err(ProtocolError::CardTooLong { len: MAX_CARD + 1 })
    );
}

#[test]
fn server_frames_from_literal_bytes() {
    #[rustfmt::skip]
    let cards = [
        0, 0, 0, 20, 0x83, 0, 0, 0, 1, 0, 0, 0, 2,
        0, 0, 0, 1, b'x', 0, 0, 0, 2, b'y', b'z',
    ];
    let msg = ServerMsg::Cards {
        round: 1,
        cards: vec!["x".into(), "yz".into()],
    };
    assert_eq!(msg.emit(), cards);
    assert_eq!(ServerMsg::parse(cards[4], &cards[5..]), Ok(msg));
    // A count larger than the body: an error, not a huge allocation.
    assert_eq!(
        ServerMsg::parse(0x83, &[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]),
        Err(ProtocolError::Truncated { what: "CARDS" })
    );

    let welcome = [0, 0, 0, 7, 0x81, 0, 1, 0, 0, 0, 4];
    let msg = ServerMsg::Welcome {
        version: 1,
        numnodes: 4,
    };
    assert_eq!(msg.emit(), welcome);
    assert_eq!(ServerMsg::parse(welcome[4], &welcome[5..]), Ok(msg));

    let reject = [0, 0, 0, 4, 0x82, 1, b'n', b'o'];
    let msg = ServerMsg::Reject {
        why: Rejection::WrongJob,
        detail: "no".into(),
    };
    assert_eq!(msg.emit(), reject);
    assert_eq!(ServerMsg::parse(reject[4], &reject[5..]), Ok(msg));
    assert_eq!(
        ServerMsg::parse(0x82, &[77]),
        Ok(ServerMsg::Reject {
            why: Rejection::Unknown(77),
            detail: String::new()
        })
    );

    let abort = [0, 0, 0, 3, 0x84, b'o', b'k'];
    let msg = ServerMsg::Abort {
        reason: "ok".into(),
    };
    assert_eq!(msg.emit(), abort);
    assert_eq!(ServerMsg::parse(abort[4], &abort[5..]), Ok(msg));
    assert_eq!(ServerMsg::Finished.emit(), [0, 0, 0, 1, 0x85]);
    let key = [0, 0, 0, 3, 0x86, b'k', b'1'];
    let msg = ServerMsg::Key(KeyMaterial::new("k1".into()).unwrap());
    assert_eq!(msg.emit(), key);
    assert_eq!(ServerMsg::parse(key[4], &key[5..]), Ok(msg));
    assert_eq!(
        ServerMsg::parse(0x86, &[]),
        Err(ProtocolError::BadKey { len: 0 })
    );
    assert_eq!(
        format!("{:?}", KeyMaterial::new("secret".into()).unwrap()),
        "KeyMaterial(6 bytes)"
    );
    assert_eq!(ServerMsg::parse(0x99, &[]), Ok(ServerMsg::Unknown(0x99)));
}

#[test]
fn clip_keeps_whole_characters() {
    assert_eq!(clip("héllo", 2), "h");
    assert_eq!(clip("héllo", 3), "hé");
    assert_eq!(clip("abc", 10), "abc");
}

/// A server on loopback whose owner thread runs until dropped; notices
/// come out of the returned channel.
struct TestServer {
    port: u16,
    notices: mpsc::Receiver<String>,
    /// Notices received but not yet expected.
    backlog: std::cell::RefCell<Vec<String>>,
    abort: mpsc::Sender<String>,
}

fn test_server(job: u64, numnodes: u32) -> TestServer {
    let (tx, rx) = mpsc::channel::<Incoming>();
    let mut server = BootServer::start(job, numnodes, move |i| {
        let _ = tx.send(i);
    })
    .unwrap();
    let port = server.port();
    let (ntx, nrx) = mpsc::channel();
    let (atx, arx) = mpsc::channel::<String>();
    // The server's owner: ends (dropping the server) when the test
    // drops its TestServer, whose abort sender then disconnects.
    thread::spawn(move || loop {
        match arx.try_recv() {
            Ok(reason) => {
                let told = server.abort(&reason);
                let _ = ntx.send(format!("told {told:?}"));
            }
            Err(mpsc::TryRecvError::Disconnected) => return,
            Err(mpsc::TryRecvError::Empty) => {}
        }
        let Ok(i) = rx.recv_timeout(Duration::from_millis(5)) else {
            continue;
        };
        let text = match server.handle(i) {
            None => continue,
            Some(BootNotice::Connected { node, .. }) => format!("connected {node}"),
            Some(BootNotice::RoundComplete { round }) => format!("round {round}"),
            Some(BootNotice::Finished { node }) => format!("finished {node}"),
            Some(BootNotice::Closed { node, finished, .. }) => {
                format!("closed {node} {finished}")
            }
        };
        let _ = ntx.send(text);
    });
    TestServer {
        port,
        notices: nrx,
        backlog: Default::default(),
        abort: atx,
    }
}

impl TestServer {
    fn env(&self, job: u64, node: u32, numnodes: u32) -> JobEnv {
        JobEnv {
            node,
            numnodes,
            boot: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))],
            job,
            transport: "tcp://0.0.0.0:0".parse().unwrap(),
            local_rank: 0,
        }
    }

    /// Waits (bounded) for a notice; others seen meanwhile are kept
    /// for later calls, so notices may be expected in any order.
    fn expect(&self, want: &str) {
        let mut seen = self.backlog.borrow_mut();
        if let Some(i) = seen.iter().position(|n| n == want) {
            seen.remove(i);
            return;
        }
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            match self.notices.recv_timeout(Duration::from_millis(100)) {
                Ok(n) if n == want => return,
                Ok(n) => seen.push(n),
                Err(_) => {}
            }
        }
        panic!("no notice {want:?} within {T:?}; saw {seen:?}");
    }
}

#[test]
fn rounds_gather_every_card_in_node_order() {
    const N: u32 = 3;
    let server = test_server(7, N);
    let clients: Vec<_> = (0..N)
        .map(|node| {
            let env = server.env(7, node, N);
            thread::spawn(move || {
                let mut boot = Boot::connect(&env, T).unwrap();
                assert!(boot.local_ip().is_loopback());
                let r0 = boot.exchange(&format!("card{node}"), T).unwrap();
                let r1 = boot.exchange(&format!("again{node}"), T).unwrap();
                let handle = boot.watch_with(|end| panic!("watchdog ended: {end:?}"));
                let r2 = handle.exchange(&"z".repeat(node as usize), T).unwrap();
                handle.finish().unwrap();
                handle.finish().unwrap();
                (r0, r1, r2)
            })
        })
        .collect();
    for c in clients {
        let (r0, r1, r2) = c.join().unwrap();
        assert_eq!(r0, ["card0", "card1", "card2"]);
        assert_eq!(r1, ["again0", "again1", "again2"]);
        assert_eq!(r2, ["", "z", "zz"]);
    }
    server.expect("round 2");
    for node in 0..N {
        server.expect(&format!("finished {node}"));
    }
}

#[test]
fn wrong_job_and_duplicate_node_are_refused() {
    let server = test_server(1, 2);
    let e = Boot::connect(&server.env(2, 0, 2), T).unwrap_err();
    assert!(
        matches!(
            e,
            BootError::Rejected {
                rejection: Rejection::WrongJob,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("0000000000000002"), "{e}");
    let _first = Boot::connect(&server.env(1, 1, 2), T).unwrap();
    server.expect("connected 1");
    let e = Boot::connect(&server.env(1, 1, 2), T).unwrap_err();
    assert!(
        matches!(
            e,
            BootError::Rejected {
                rejection: Rejection::AlreadyConnected,
                ..
            }
        ),
        "{e}"
    );
    let e = Boot::connect(&server.env(1, 0, 3), T).unwrap_err();
    assert!(
        matches!(e, BootError::Protocol(ProtocolError::NumNodes { .. })),
        "{e}"
    );
}

#[test]
fn abort_reaches_the_watchdog() {
    let server = test_server(3, 2);
    let (tx, rx) = mpsc::channel();
    let mut boots: Vec<_> = (0..2)
        .map(|n| Boot::connect(&server.env(3, n, 2), T).unwrap())
        .collect();
    let b1 = boots.pop().unwrap();
    let b0 = boots.pop().unwrap();
    server.expect("connected 0");
    server.expect("connected 1");
    let _h0 = b0.watch_with(move |end| {
        let _ = tx.send(format!("{end:?}"));
    });
    server.abort.send("node 9 failed".into()).unwrap();
    let end = rx.recv_timeout(T).unwrap();
    assert!(end.contains("Aborted(\"node 9 failed\")"), "{end}");
    // Before watch(), the abort surfaces as an error of the call waiting.
    let mut b1 = b1;
    let e = b1.exchange("c", T).unwrap_err();
    assert!(matches!(e, BootError::Aborted { ref reason } if reason == "node 9 failed"));
    // A node connecting after the abort is told at once.
    let e = Boot::connect(&server.env(3, 1, 2), T).unwrap_err();
    assert!(matches!(e, BootError::Aborted { .. }), "{e}");
}

#[test]
fn lost_launcher_ends_the_watchdog_unless_finished() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    // A fake launcher: answers HELLO, then acknowledges FINISH when the
    // test says so, then closes.
    let fake = thread::spawn(move || {
        let mut closed = Vec::new();
        for finish in [false, true] {
            let (s, _) = listener.accept().unwrap();
            let mut r = FrameReader::new(MAX_CLIENT_FRAME);
            let deadline = Some(Instant::now() + T);
            assert!(matches!(
                r.read_client(&s, deadline).unwrap(),
                ClientMsg::Hello { .. }
            ));
            let welcome = ServerMsg::Welcome {
                version: VERSION,
                numnodes: 1,
            };
            send(&s, &welcome.emit(), T).unwrap();
            if finish {
                assert_eq!(r.read_client(&s, deadline).unwrap(), ClientMsg::Finish);
                send(&s, &ServerMsg::Finished.emit(), T).unwrap();
            }
            s.shutdown(Shutdown::Both).unwrap();
            closed.push(s);
        }
    });
    let env = JobEnv {
        node: 0,
        numnodes: 1,
        boot: vec![addr],
        job: 5,
        transport: "tcp://0.0.0.0:0".parse().unwrap(),
        local_rank: 0,
    };
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    let _h = Boot::connect(&env, T)
        .unwrap()
        .watch_with(move |end| tx.send(format!("{end:?}")).unwrap());
    let end = rx.recv_timeout(T).unwrap();
    assert!(end.starts_with("Lost"), "{end}");

    let h = Boot::connect(&env, T)
        .unwrap()
        .watch_with(move |end| tx2.send(format!("{end:?}")).unwrap());
    h.finish().unwrap();
    fake.join().unwrap();
    // The close after FINISH is no reason to exit: the watchdog ended
    // quietly (its sender is gone without a message).
    assert_eq!(
        rx.recv_timeout(T),
        Err(mpsc::RecvTimeoutError::Disconnected)
    );
}

#[test]
fn unreachable_launcher_names_the_addresses() {
    // A port nobody listens on: bind, note it, close.
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = JobEnv {
        node: 0,
        numnodes: 1,
        boot: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))],
        job: 1,
        transport: "tcp://0.0.0.0:0".parse().unwrap(),
        local_rank: 0,
    };
    let start = Instant::now();
    let e = Boot::connect(&env, Duration::from_millis(300)).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(matches!(e, BootError::Unreachable { .. }), "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn card_too_long_is_refused_locally() {
    let server = test_server(4, 1);
    let mut boot = Boot::connect(&server.env(4, 0, 1), T).unwrap();
    let e = boot.exchange(&"x".repeat(MAX_CARD + 1), T).unwrap_err();
    assert!(matches!(e, BootError::CardTooLong { .. }), "{e}");
    assert_eq!(
        boot.exchange(&"x".repeat(MAX_CARD), T).unwrap(),
        ["x".repeat(MAX_CARD)]
    );
}
