//! Real-namespace test of [`MultiPort`] (root needed; skipped otherwise); the beds of
//! `testbed` are tested in that crate.

use std::time::Duration;

use testbed::MultiPort;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn multiport_tcp_crosses_the_bridge() {
    testbed::require_root!();
    let net = MultiPort::new(2, 1500).expect("MultiPort::new");
    net.route_through_bridge().expect("policy routing");
    let (before0, before1) = (
        net.bridge_rx_bytes(0).unwrap(),
        net.bridge_rx_bytes(1).unwrap(),
    );
    let (a, b) = (net.ipv4[0], net.ipv4[1]);
    const BYTES: usize = 4 << 20;
    let received = net.ns.run(move || {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind((b, 0)).unwrap();
        let to = listener.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            // Unbound (the kernel picks the source) and bound to port 0's address.
            let mut s = std::net::TcpStream::connect_timeout(&to, WAIT).unwrap();
            s.write_all(&vec![7u8; BYTES]).unwrap();
            drop(s);
            let sock =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            sock.bind(&std::net::SocketAddr::from((a, 0)).into())
                .unwrap();
            sock.connect_timeout(&to.into(), WAIT).unwrap();
            let mut s: std::net::TcpStream = sock.into();
            s.write_all(&vec![7u8; BYTES]).unwrap();
        });
        let mut total = 0;
        for _ in 0..2 {
            let (mut c, from) = listener.accept().unwrap();
            assert_eq!(from.ip(), a);
            c.set_read_timeout(Some(WAIT)).unwrap();
            let mut buf = Vec::new();
            c.read_to_end(&mut buf).unwrap();
            total += buf.len();
        }
        sender.join().unwrap();
        total
    });
    assert_eq!(received, 2 * BYTES);
    // The data left by llc0 (the hub received it on p0), the ACKs by llc1.
    let (sent0, sent1) = (
        net.bridge_rx_bytes(0).unwrap() - before0,
        net.bridge_rx_bytes(1).unwrap() - before1,
    );
    assert!(sent0 >= 2 * BYTES as u64, "p0 saw {sent0} bytes");
    assert!(sent1 > 0 && sent1 < sent0 / 4, "p1 saw {sent1} bytes");
}
