//! Why the stack has its own AF_PACKET rings instead of pnet's datalink
//! channel: the same 64-byte LLC ping-pong over a veth pair between two
//! namespaces, through pnet_datalink's channel and through the stack's
//! TPACKET ring device (`AfPacket`), both sides busy-polling on their own
//! CPU (needs root; creates and removes its hosts).
//!
//! ```text
//! cargo run --release -p bench --example pnet_vs_tpacket -- [--rounds N] [--repeat R]
//! ```
//!
//! Each of `--repeat` passes (default 3) runs, one after the other:
//! - `tpacket`: the stack's device: mmap'ed RX ring read without a syscall,
//!   one `sendto` kick per frame sent, the SAP filtered in the kernel;
//! - `pnet`: `pnet_datalink::channel` with a zero read timeout, so that
//!   `next()` polls instead of sleeping: one `poll` and one `recvfrom` per
//!   frame received (copied out of the kernel), one `sendto` per frame sent,
//!   every frame of the interface delivered to user space and filtered there;
//! - `pnet-blocking`: the same channel with its default (blocking) reads,
//!   as pnet's examples use it.
//!
//! Prints the one-way latency (RTT/2) median and 99th percentile of each.

use bench::pin;
use std::thread;
use std::time::{Duration, Instant as StdInstant};

use llc_stack::link::afpacket::{AfPacket, AfPacketConfig};
use llc_stack::link::{Device, RxToken, TxToken};
use llc_stack::Instant;
use pnet_datalink::{Channel, DataLinkReceiver, DataLinkSender};
use testbed::{Host, TwoHosts};

const SAP: u8 = 0x7C;
const LEN: usize = 64;
const WARMUP: usize = 2_000;
/// Give up when the peer has been silent this long.
const STALL: Duration = Duration::from_secs(10);

/// One end of the ping-pong: sends a frame, waits for the next one of ours.
trait End: Send {
    fn send(&mut self, frame: &[u8]);
    /// Blocks (spinning or sleeping, as the backend does) until a frame
    /// from `from` arrives; copies it into `out`.
    fn recv(&mut self, from: [u8; 6], out: &mut [u8; LEN]);
}

struct Tpacket(AfPacket);

impl End for Tpacket {
    fn send(&mut self, frame: &[u8]) {
        let start = StdInstant::now();
        let token = loop {
            if let Some(t) = self.0.transmit(Instant::ZERO) {
                break t;
            }
            self.0.flush(Instant::ZERO).expect("flush");
            assert!(start.elapsed() < STALL, "no TX room");
        };
        token.consume(|buf| {
            buf[..frame.len()].copy_from_slice(frame);
            frame.len()
        });
        self.0.flush(Instant::ZERO).expect("flush");
    }

    fn recv(&mut self, from: [u8; 6], out: &mut [u8; LEN]) {
        let start = StdInstant::now();
        loop {
            if let Some(t) = self.0.receive(Instant::ZERO) {
                if t.consume(|f| ours(f, from, out)) {
                    return;
                }
            }
            assert!(start.elapsed() < STALL, "no frame");
            std::hint::spin_loop();
        }
    }
}

struct Pnet {
    tx: Box<dyn DataLinkSender>,
    rx: Box<dyn DataLinkReceiver>,
}

impl End for Pnet {
    fn send(&mut self, frame: &[u8]) {
        self.tx
            .send_to(frame, None)
            .expect("pnet send")
            .expect("pnet send");
    }

    fn recv(&mut self, from: [u8; 6], out: &mut [u8; LEN]) {
        let start = StdInstant::now();
        loop {
            match self.rx.next() {
                Ok(f) if ours(f, from, out) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => panic!("pnet receive: {e}"),
            }
            assert!(start.elapsed() < STALL, "no frame");
        }
    }
}

/// Is `f` a ping-pong frame from `from` on our SAP? If so copy it out.
fn ours(f: &[u8], from: [u8; 6], out: &mut [u8; LEN]) -> bool {
    if f.len() < LEN || f[6..12] != from || f[14] != SAP {
        return false;
    }
    out.copy_from_slice(&f[..LEN]);
    true
}

fn frame(dst: [u8; 6], src: [u8; 6], seq: u64) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..6].copy_from_slice(&dst);
    b[6..12].copy_from_slice(&src);
    b[12..14].copy_from_slice(&((LEN - 14) as u16).to_be_bytes());
    b[14..17].copy_from_slice(&[SAP, SAP, 0x03]);
    b[17..25].copy_from_slice(&seq.to_be_bytes());
    b
}

fn open_tpacket(host: &Host) -> Tpacket {
    let name = host.ifname.clone();
    let cfg = AfPacketConfig {
        tx_batch: 1,
        ..AfPacketConfig::default()
    };
    Tpacket(
        host.ns
            .run(move || AfPacket::open(&name, cfg))
            .unwrap_or_else(|e| panic!("opening {}: {e}", host.ifname)),
    )
}

fn open_pnet(host: &Host, busy_poll: bool) -> Pnet {
    let name = host.ifname.clone();
    host.ns.run(move || {
        // The interface list is read in the namespace, as the socket is made.
        let iface = pnet_datalink::interfaces()
            .into_iter()
            .find(|i| i.name == name)
            .unwrap_or_else(|| panic!("no interface {name}"));
        let cfg = pnet_datalink::Config {
            read_timeout: busy_poll.then_some(Duration::ZERO),
            ..Default::default()
        };
        match pnet_datalink::channel(&iface, cfg) {
            Ok(Channel::Ethernet(tx, rx)) => Pnet { tx, rx },
            Ok(_) => panic!("pnet: not an Ethernet channel"),
            Err(e) => panic!("pnet channel on {name}: {e}"),
        }
    })
}

/// One-way times (RTT/2) of `rounds` round trips after a warm-up.
fn pingpong(
    mut a: impl End,
    mut b: impl End,
    am: [u8; 6],
    bm: [u8; 6],
    rounds: usize,
) -> Vec<Duration> {
    let total = WARMUP + rounds;
    thread::scope(|s| {
        s.spawn(move || {
            pin::pin_to_cpu(1);
            let mut f = [0u8; LEN];
            for _ in 0..total {
                b.recv(am, &mut f);
                f[..6].copy_from_slice(&am);
                f[6..12].copy_from_slice(&bm);
                b.send(&f);
            }
        });
        pin::pin_to_cpu(0);
        let mut out = Vec::with_capacity(rounds);
        let mut f = [0u8; LEN];
        for i in 0..total as u64 {
            let start = StdInstant::now();
            a.send(&frame(bm, am, i));
            a.recv(bm, &mut f);
            let rtt = start.elapsed();
            assert_eq!(
                u64::from_be_bytes(f[17..25].try_into().unwrap()),
                i,
                "reply out of order"
            );
            if i as usize >= WARMUP {
                out.push(rtt / 2);
            }
        }
        out
    })
}

fn summary(name: &str, mut v: Vec<Duration>) {
    v.sort_unstable();
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e6;
    println!(
        "{name:<14} {LEN} B x {}: one-way median {:.2} us, p99 {:.2} us",
        v.len(),
        q(0.5),
        q(0.99)
    );
}

fn main() {
    let mut rounds = 50_000;
    let mut repeat = 3;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().expect("a value").parse().expect("a number");
        match arg.as_str() {
            "--rounds" => rounds = value(),
            "--repeat" => repeat = value(),
            other => {
                panic!("unknown argument {other}; usage: pnet_vs_tpacket [--rounds N] [--repeat R]")
            }
        }
    }
    let hosts = TwoHosts::new(1500).expect("two namespaces joined by a veth pair (root)");
    let (am, bm) = (hosts.a.mac, hosts.b.mac);
    for pass in 1..=repeat {
        println!("pass {pass}");
        summary(
            "tpacket",
            pingpong(
                open_tpacket(&hosts.a),
                open_tpacket(&hosts.b),
                am,
                bm,
                rounds,
            ),
        );
        summary(
            "pnet",
            pingpong(
                open_pnet(&hosts.a, true),
                open_pnet(&hosts.b, true),
                am,
                bm,
                rounds,
            ),
        );
        summary(
            "pnet-blocking",
            pingpong(
                open_pnet(&hosts.a, false),
                open_pnet(&hosts.b, false),
                am,
                bm,
                rounds / 5,
            ),
        );
    }
}
