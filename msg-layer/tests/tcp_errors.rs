//! TCP transports' set-up errors and argument checks, on loopback (no root
//! needed).

use std::net::{Ipv4Addr, SocketAddr};

use bytes::Bytes;
use msg_layer::addr::Addr;
use msg_layer::transport::tcp::{TcpConfig, TcpSocketTransport, TcpUringTransport};
use msg_layer::transport::{SendError, Transport, TransportError, TransportEvent};

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port)
}

fn checks<T: Transport + std::fmt::Debug>(
    bind: impl Fn(SocketAddr, TcpConfig) -> Result<T, TransportError>,
) {
    // Port 0: the real port is reported.
    let mut t = bind(loopback(0), TcpConfig::default()).expect("bind to a free port");
    let Addr::Tcp(local) = t.local_addr() else {
        panic!("a TCP transport reports a TCP address")
    };
    assert_ne!(local.port(), 0);
    assert_eq!(t.max_message_len(), 1 << 30);

    // The same address again: in use.
    let e = bind(local, TcpConfig::default()).expect_err("address in use");
    assert!(
        matches!(&e, TransportError::Setup(m) if m.contains("in use")),
        "{e}"
    );

    // An address no interface has.
    let e = bind(
        SocketAddr::new(Ipv4Addr::new(192, 0, 2, 1).into(), 0),
        TcpConfig::default(),
    )
    .expect_err("address not available");
    assert!(matches!(e, TransportError::Address { .. }), "{e}");

    // Addresses a TCP endpoint cannot reach.
    let llc: Addr = "[02:00:00:00:00:01]:7".parse().unwrap();
    assert!(matches!(
        t.connect(&llc),
        Err(TransportError::Address { .. })
    ));
    let unspecified: Addr = "0.0.0.0:7".parse().unwrap();
    assert!(matches!(
        t.connect(&unspecified),
        Err(TransportError::Address { .. })
    ));

    // Sends on unknown connections and messages above the limit.
    assert_eq!(t.send(12345, b"x", Bytes::new()), Err(SendError::Closed));
    let cfg = TcpConfig {
        max_message_len: 100,
        ..TcpConfig::default()
    };
    let mut small = bind(loopback(0), cfg).expect("bind");
    let conn = small.connect(&Addr::Tcp(local)).expect("connect");
    assert_eq!(
        small.send(conn, &[0; 50], Bytes::from(vec![0; 51])),
        Err(SendError::TooLong { len: 101, max: 100 })
    );
    // A limit the prefix cannot carry is refused at bind.
    let e = bind(
        loopback(0),
        TcpConfig {
            max_message_len: usize::MAX,
            ..TcpConfig::default()
        },
    )
    .expect_err("limit above u32");
    assert!(matches!(e, TransportError::Setup(_)), "{e}");

    // The connection comes up on loopback, and a close ends it cleanly at
    // both ends.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (mut up, mut accepted, mut closed_small, mut closed_t) = (false, None, false, false);
    while !(closed_small && closed_t) {
        assert!(
            std::time::Instant::now() < deadline,
            "loopback connection and close"
        );
        let mut evs = Vec::new();
        small.progress(&mut evs).unwrap();
        for ev in evs.drain(..) {
            match ev {
                TransportEvent::Connected(c) if c == conn => {
                    up = true;
                    small.close(conn);
                }
                TransportEvent::Closed(c, None) if c == conn => closed_small = true,
                other => panic!("dialer: unexpected {other:?}"),
            }
        }
        t.progress(&mut evs).unwrap();
        for ev in evs {
            match ev {
                TransportEvent::Accepted(c) => accepted = Some(c),
                TransportEvent::Closed(c, None) if Some(c) == accepted => closed_t = true,
                other => panic!("listener: unexpected {other:?}"),
            }
        }
    }
    assert!(up);
    assert_eq!(small.send(conn, b"x", Bytes::new()), Err(SendError::Closed));
}

#[test]
fn uring_errors_and_limits() {
    checks(TcpUringTransport::bind);
}

#[test]
fn socket_errors_and_limits() {
    checks(TcpSocketTransport::bind);
}
