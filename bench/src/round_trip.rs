//! Two endpoints on a zero-latency simulated wire, for measuring the CPU cost
//! of one 64-byte round trip with the kernel taken out. Shared by the
//! criterion bench (`benches/pingpong.rs`) and the instruction-count example
//! (`examples/round_trip_cost.rs`, run under `valgrind --tool=callgrind`).

use std::time::Duration;

use bytes::Bytes;

use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::link::{RxToken, TxToken};
use llc_stack::proto::{Config, ConnHandle, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, Body, Command, MacAddr};
use llc_stack::{Device, Instant, Stack};

const A: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
const B: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);
const NOW: Instant = Instant::ZERO;

fn wire_pair() -> (SimPort, SimPort) {
    let sim = Sim::new(SimConfig {
        latency: Duration::ZERO,
        rate_bps: 0,
        ..Default::default()
    });
    (sim.port(), sim.port())
}

/// An 802.2 TEST command answered by the far endpoint.
pub struct LinkLevel {
    a: SimPort,
    b: Stack<SimPort>,
    addr: Addresses,
    info: [u8; 64],
}

impl LinkLevel {
    pub fn new() -> Self {
        let (a, b) = wire_pair();
        LinkLevel {
            a,
            b: Stack::new(b, Config::default(), B, Rng::new(2)),
            addr: Addresses {
                dst: B,
                src: A,
                dsap: 0x7c,
                ssap: 0x7c,
            },
            info: [7; 64],
        }
    }

    pub fn round_trip(&mut self) {
        let (addr, info) = (&self.addr, &self.info);
        self.a.transmit(NOW).unwrap().consume(|buf| {
            wire::emit_llc_control(buf, addr, false, Command::Test { pf: true }, info).unwrap()
        });
        self.b.poll_rx(NOW);
        self.b.poll_tx(NOW).unwrap();
        // The idle pass a busy-polling end makes while the frame crosses.
        self.b.poll_rx(NOW);
        let tok = self.a.receive(NOW).expect("TEST response");
        let ok = tok.consume(|f| {
            matches!(
                wire::parse(f, Some(0x7c)).map(|f| f.body),
                Ok(Body::Test { response: true, .. })
            )
        });
        assert!(ok);
    }
}

/// A 64-byte message echoed through a reliable connection. Both ends use
/// the transport as the message layer does: a message is sent from a
/// buffer the sender holds (a shared reference, no allocation), and a
/// delivered buffer goes back to the endpoint once read; the echo carries
/// the same 64 bytes back. So the figure is the transport's, not an
/// allocator's.
pub struct Reliable {
    a: Stack<SimPort>,
    b: Stack<SimPort>,
    conn: ConnHandle,
    msg: Bytes,
}

impl Reliable {
    pub fn new() -> Self {
        let (a, b) = wire_pair();
        // As llc-ping's echo: the reply is the completion.
        let cfg = Config {
            acked_events: false,
            ..Config::default()
        };
        let mut a = Stack::new(a, cfg.clone(), A, Rng::new(1));
        let mut b = Stack::new(b, cfg, B, Rng::new(2));
        b.endpoint_mut().listen(7);
        let conn = a.endpoint_mut().connect(NOW, B, 7, None).unwrap();
        for _ in 0..4 {
            a.poll(NOW).unwrap();
            b.poll(NOW).unwrap();
        }
        while a.endpoint_mut().poll_event().is_some() {}
        while b.endpoint_mut().poll_event().is_some() {}
        Reliable {
            a,
            b,
            conn,
            msg: Bytes::from(vec![7u8; 64]),
        }
    }

    /// The same pair with both ends publishing their llc-stat pages (in
    /// `LLC_STAT_DIR`, as a real endpoint does). The clock stands still
    /// here, so after the first publication each pass pays only the check
    /// whether the next one is due: the per-pass cost of publishing; the
    /// publication itself is measured apart (`Publisher::publish`).
    pub fn publishing() -> Self {
        let mut r = Self::new();
        for s in [&mut r.a, &mut r.b] {
            let info = llc_stack::statpage::PageInfo::default();
            assert!(s.publish_stats(info).unwrap().is_some(), "LLC_STAT=0 set");
        }
        r
    }

    /// The sending end's endpoint (one established connection).
    pub fn endpoint(&self) -> &llc_stack::proto::Endpoint {
        self.a.endpoint()
    }

    pub fn round_trip(&mut self) {
        self.a
            .endpoint_mut()
            .send(self.conn, self.msg.clone())
            .unwrap();
        self.a.poll_tx(NOW).unwrap();
        // Each end makes an idle receive pass while its frame crosses, as a
        // busy-polling end does (and frees what the last ACK released).
        self.a.poll_rx(NOW);
        self.b.poll_rx(NOW);
        while let Some((h, ev)) = self.b.endpoint_mut().poll_event() {
            if let Event::Message { data, .. } = ev {
                assert_eq!(data[..], self.msg[..]);
                let ep = self.b.endpoint_mut();
                ep.recycle(data);
                ep.send(h, self.msg.clone()).unwrap();
            }
        }
        self.b.poll_tx(NOW).unwrap();
        self.b.poll_rx(NOW);
        self.a.poll_rx(NOW);
        let mut got = false;
        while let Some((_, ev)) = self.a.endpoint_mut().poll_event() {
            if let Event::Message { data, .. } = ev {
                got = true;
                self.a.endpoint_mut().recycle(data);
            }
        }
        assert!(got);
    }
}

impl Default for LinkLevel {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for Reliable {
    fn default() -> Self {
        Self::new()
    }
}
