//! What the MPI benchmarks' path gives any LLC transport against what it
//! gives TCP, for the traffic patterns of issue 24's goals: 1 MiB
//! ping-pong (NetPIPE's 1 MiB point) and both directions at once (the
//! exchanges of the application kernels). Needs root; builds the 2-host
//! cluster bed (veth pairs to one bridge, as `mpirun` runs on) itself.
//!
//! ```text
//! cargo run --release -p llc-stack --example path_ceiling -- [--mtu 9000,65000] [--rounds 3] [--backend packet]
//! ```
//!
//! The LLC side is raw frames with no protocol at all: the transport's
//! frame size (LLC UI, its 56-byte header, `max_payload(mtu)` bytes of
//! payload), headers written and nothing else (no copy, no CRC, no
//! acknowledgement, no window), through the same device code as the
//! transport. A message is the frames of 1 MiB; the receiver of a
//! ping-pong answers once all of them arrived. That is more than any LLC
//! transport can get from this kernel path. A second level, `copy+crc`,
//! adds the work any transport that checks its payloads end to end does
//! per frame: the sender cuts each payload from a 1 MiB message and
//! computes its CRC32C (the transport's own frame writer), the receiver
//! checks it (the transport's parser) and copies the payload into a 1 MiB
//! message. The TCP side is one
//! connection between the hosts' addresses at the same MTU, set up as its
//! fastest users set it: TCP_NODELAY, non-blocking sockets polled in a
//! loop (busy polling; faster here than blocking sockets with or without
//! `SO_BUSY_POLL`, and than writes of 64-256 KiB), 1 MiB written and read
//! per message; each host's thread on a CPU of its own, for both. Rounds
//! alternate the two; the figures are medians. (At MTU 65000 Open MPI's
//! btl/tcp, measured by NetPIPE on the same bed, reaches more than this
//! socket pair: compare with it too.)
//!
//! A goal "LLC at least x times TCP" on this path is out of reach for any
//! LLC transport when the raw frames' ratio is below x.

#[path = "support/pin.rs"]
mod pin;
// Only `open` and `list` are used here.
#[allow(dead_code)]
#[path = "support/veth_link.rs"]
mod veth_link;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant as StdInstant};

use llc_stack::link::any::AnyLink;
use llc_stack::link::{RxToken, TxToken};
use llc_stack::wire::transport::{self, TransportHeader};
use llc_stack::wire::{self, ethernet, llc, Addresses, Body, MacAddr, Trailer};
use llc_stack::{Device, Instant};
use vm_tests::Cluster;

const MSG: usize = 1 << 20;
/// Header bytes in front of the payload: Ethernet, LLC, transport header.
const HEAD: usize = ethernet::HEADER_LEN + llc::HEADER_LEN + transport::HEADER_LEN;
/// A message not complete this long after its last frame lost frames.
const LOST_AFTER: Duration = Duration::from_millis(200);
const PORT: u16 = 7911;

struct Args {
    mtus: Vec<u32>,
    rounds: usize,
    backend: String,
    pingpongs: usize,
    bidir_mib: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        mtus: vec![9000, 65000],
        rounds: 3,
        backend: "packet".into(),
        pingpongs: 300,
        bidir_mib: 1024,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let val = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--mtu" => a.mtus = veth_link::list(&val, |v| v.parse().expect("--mtu")),
            "--rounds" => a.rounds = val.parse().expect("--rounds N"),
            "--backend" => a.backend = val,
            "--pingpongs" => a.pingpongs = val.parse().expect("--pingpongs N"),
            "--bidir-mib" => a.bidir_mib = val.parse().expect("--bidir-mib N"),
            other => panic!(
                "unknown argument {other} (--mtu, --rounds, --backend, --pingpongs, --bidir-mib)"
            ),
        }
    }
    a
}

/// One end of the raw-frame link: its device, whom it sends to, the
/// payload per frame.
struct RawEnd {
    dev: AnyLink,
    addr: Addresses,
    payload: usize,
    burst: usize,
    /// With the payload copied and CRC32C-checked (`copy+crc`), the
    /// message each frame is cut from and the one it is copied into.
    crc: bool,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    out_at: usize,
    in_at: usize,
}

impl RawEnd {
    fn new(dev: AnyLink, dst: MacAddr, payload: usize, crc: bool) -> Self {
        let addr = Addresses {
            dst,
            src: dev.mac(),
            dsap: llc::DEFAULT_SAP,
            ssap: llc::DEFAULT_SAP,
        };
        let burst = dev.capabilities().max_burst.max(1);
        RawEnd {
            dev,
            addr,
            payload,
            burst,
            crc,
            out: vec![0x5Au8; MSG],
            inbuf: vec![0u8; MSG],
            out_at: 0,
            in_at: 0,
        }
    }

    /// Write up to `n` frames (fewer when the device is full); returns how
    /// many.
    fn send(&mut self, n: usize) -> usize {
        let now = Instant::now();
        let mut sent = 0;
        while sent < n {
            let Some(tok) = self.dev.transmit(now) else {
                break;
            };
            let (addr, payload) = (&self.addr, self.payload);
            if self.out_at + payload > MSG {
                self.out_at = 0;
            }
            let data = &self.out[self.out_at..self.out_at + payload];
            self.out_at += payload;
            let crc = self.crc;
            tok.consume(|buf| {
                if crc {
                    let header = TransportHeader::default();
                    return wire::emit_transport_gather(
                        buf,
                        addr,
                        &header,
                        &[],
                        [data, &[]],
                        Trailer::None,
                    )
                    .expect("frame fits");
                }
                ethernet::emit_header(
                    buf,
                    addr.dst,
                    addr.src,
                    llc::HEADER_LEN + transport::HEADER_LEN + payload,
                );
                let at = ethernet::HEADER_LEN;
                buf[at..at + 3].copy_from_slice(&[addr.dsap, addr.ssap, llc::CONTROL_UI]);
                HEAD + payload
            });
            sent += 1;
            if sent % self.burst == 0 {
                self.dev.flush(now).expect("flush");
            }
        }
        self.dev.flush(now).expect("flush");
        sent
    }

    /// Take what arrived (up to `max` frames); returns the frames of our
    /// size.
    fn receive(&mut self, max: usize) -> usize {
        let now = Instant::now();
        let mut got = 0;
        while got < max {
            let Some(tok) = self.dev.receive(now) else {
                break;
            };
            let want = HEAD + self.payload;
            if self.in_at + self.payload > MSG {
                self.in_at = 0;
            }
            let dst = &mut self.inbuf[self.in_at..self.in_at + self.payload];
            let crc = self.crc;
            let ok = tok.consume(|f| {
                if !crc {
                    return f.len() >= want;
                }
                match wire::parse(f, Some(llc::DEFAULT_SAP)) {
                    Ok(wire::Frame {
                        body: Body::Transport(t),
                        ..
                    }) if t.payload.len() == dst.len() => {
                        dst.copy_from_slice(t.payload);
                        true
                    }
                    _ => false,
                }
            });
            if ok {
                self.in_at += self.payload;
                got += 1;
            }
        }
        got
    }

    /// Send a message of `frames` frames, all of them.
    fn send_message(&mut self, frames: usize) {
        let mut left = frames;
        while left > 0 {
            left -= self.send(left);
        }
    }

    /// Wait for a message of `frames` frames; false when some never came.
    fn receive_message(&mut self, frames: usize) -> bool {
        let (mut got, mut last) = (0, StdInstant::now());
        while got < frames {
            let n = self.receive(frames - got);
            if n > 0 {
                got += n;
                last = StdInstant::now();
            } else if last.elapsed() > LOST_AFTER {
                return false;
            }
        }
        true
    }
}

fn open_raw(cluster: &Cluster, i: usize, backend: &str, payload: usize, crc: bool) -> RawEnd {
    let peer = MacAddr(cluster.hosts()[1 - i].mac);
    let dev = cluster.hosts()[i]
        .ns
        .run(|| veth_link::open(vm_tests::CLUSTER_IFNAME, backend));
    RawEnd::new(dev, peer, payload, crc)
}

/// Raw frames, 1 MiB ping-pong: Gbit/s of one direction (NetPIPE's
/// figure), or None when frames were lost.
fn raw_pingpong(cluster: &Cluster, backend: &str, mtu: u32, n: usize, crc: bool) -> Option<f64> {
    let payload = transport::max_payload(mtu as usize, 0);
    let frames = MSG.div_ceil(payload);
    let mut a = open_raw(cluster, 0, backend, payload, crc);
    let mut b = open_raw(cluster, 1, backend, payload, crc);
    pin::pin_to_cpu(0);
    let echo = std::thread::spawn(move || {
        pin::pin_to_cpu(1);
        for _ in 0..n + 1 {
            if !b.receive_message(frames) {
                return false;
            }
            b.send_message(frames);
        }
        true
    });
    let mut ok = true;
    let mut start = StdInstant::now();
    for i in 0..n + 1 {
        if i == 1 {
            // The first exchange warms both ends up.
            start = StdInstant::now();
        }
        a.send_message(frames);
        if !a.receive_message(frames) {
            ok = false;
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    ok &= echo.join().expect("echo thread");
    ok.then(|| gbit(MSG, secs / (2 * n) as f64))
}

/// Raw frames both ways at once, `mib` MiB each way: Gbit/s of both
/// directions together (frames the kernel dropped are not counted).
fn raw_bidir(cluster: &Cluster, backend: &str, mtu: u32, mib: usize, crc: bool) -> f64 {
    let payload = transport::max_payload(mtu as usize, 0);
    let frames = (mib * MSG).div_ceil(payload);
    let ends = [
        open_raw(cluster, 0, backend, payload, crc),
        open_raw(cluster, 1, backend, payload, crc),
    ];
    let go = Arc::new(Barrier::new(2));
    let threads: Vec<_> = ends
        .into_iter()
        .enumerate()
        .map(|(cpu, mut end)| {
            let go = go.clone();
            std::thread::spawn(move || {
                pin::pin_to_cpu(cpu);
                go.wait();
                let (mut sent, mut got) = (0usize, 0usize);
                let mut last = StdInstant::now();
                let start = StdInstant::now();
                while got < frames {
                    if sent < frames {
                        sent += end.send(end.burst.min(frames - sent));
                    }
                    let n = end.receive(usize::MAX);
                    if n > 0 {
                        got += n;
                        last = StdInstant::now();
                    } else if sent == frames && last.elapsed() > LOST_AFTER {
                        break;
                    }
                }
                (got, (last - start).as_secs_f64())
            })
        })
        .collect();
    let mut bytes = 0usize;
    let mut secs: f64 = 0.0;
    for t in threads {
        let (got, s) = t.join().expect("bidir thread");
        bytes += got * payload;
        secs = secs.max(s);
    }
    bytes as f64 * 8.0 / secs / 1e9
}

fn gbit(bytes: usize, secs: f64) -> f64 {
    bytes as f64 * 8.0 / secs / 1e9
}

/// Non-blocking socket set-up of TCP's fastest users.
fn tuned(s: TcpStream) -> TcpStream {
    s.set_nodelay(true).expect("TCP_NODELAY");
    s.set_nonblocking(true).expect("non-blocking");
    s
}

/// A connected pair of TCP sockets, one in each host.
fn tcp_pair(cluster: &Cluster) -> (TcpStream, TcpStream) {
    let (h0, h1) = (&cluster.hosts()[0], &cluster.hosts()[1]);
    let listener = h1
        .ns
        .run(|| TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT))))
        .expect("listen");
    let to = SocketAddr::from((h1.ipv4, PORT));
    let a = h0
        .ns
        .run(|| TcpStream::connect_timeout(&to, Duration::from_secs(5)))
        .expect("connect");
    let (b, _) = listener.accept().expect("accept");
    (tuned(a), tuned(b))
}

fn write_all_spin(s: &mut TcpStream, mut buf: &[u8]) {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("TCP write: {e}"),
        }
    }
}

fn read_exact_spin(s: &mut TcpStream, buf: &mut [u8]) {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => panic!("TCP peer closed"),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("TCP read: {e}"),
        }
    }
}

/// TCP, 1 MiB ping-pong: Gbit/s of one direction.
fn tcp_pingpong(cluster: &Cluster, n: usize) -> f64 {
    let (mut a, mut b) = tcp_pair(cluster);
    pin::pin_to_cpu(0);
    let echo = std::thread::spawn(move || {
        pin::pin_to_cpu(1);
        let mut buf = vec![0u8; MSG];
        for _ in 0..n + 1 {
            read_exact_spin(&mut b, &mut buf);
            write_all_spin(&mut b, &buf);
        }
    });
    let mut buf = vec![0x5Au8; MSG];
    let mut start = StdInstant::now();
    for i in 0..n + 1 {
        if i == 1 {
            start = StdInstant::now();
        }
        write_all_spin(&mut a, &buf);
        read_exact_spin(&mut a, &mut buf);
    }
    let secs = start.elapsed().as_secs_f64();
    echo.join().expect("echo thread");
    gbit(MSG, secs / (2 * n) as f64)
}

/// TCP both ways at once, `mib` MiB each way: Gbit/s of both directions.
fn tcp_bidir(cluster: &Cluster, mib: usize) -> f64 {
    let (a, b) = tcp_pair(cluster);
    let total = mib * MSG;
    let start = StdInstant::now();
    let threads: Vec<_> = [a, b]
        .into_iter()
        .enumerate()
        .map(|(cpu, mut s)| {
            std::thread::spawn(move || {
                pin::pin_to_cpu(cpu);
                let out = vec![0x5Au8; MSG];
                let mut inbuf = vec![0u8; MSG];
                let (mut sent, mut got) = (0usize, 0usize);
                while sent < total || got < total {
                    if sent < total {
                        let at = sent % MSG;
                        let end = MSG.min(at + (total - sent));
                        match s.write(&out[at..end]) {
                            Ok(n) => sent += n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                            Err(e) => panic!("TCP write: {e}"),
                        }
                    }
                    if got < total {
                        match s.read(&mut inbuf) {
                            Ok(0) => panic!("TCP peer closed"),
                            Ok(n) => got += n,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                            Err(e) => panic!("TCP read: {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("bidir thread");
    }
    gbit(2 * total, start.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if let Err(why) = vm_tests::check_privileges() {
        eprintln!("path_ceiling needs root (namespaces, raw sockets): {why}");
        std::process::exit(2);
    }
    let args = parse_args();
    println!(
        "the cluster bed's path (2 hosts on a bridge): raw LLC frames ({}, no protocol) against TCP, medians of {} alternating rounds",
        args.backend, args.rounds
    );
    println!();
    println!("| MTU | pattern | raw frames Gbit/s | raw frames, copy+crc | TCP Gbit/s | raw / TCP | copy+crc / TCP | lost rounds |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for &mtu in &args.mtus {
        let cluster = Cluster::new(2, mtu).expect("cluster bed");
        let mut pp = [vec![], vec![], vec![]];
        let mut bi = [vec![], vec![], vec![]];
        let mut lost = 0;
        for _ in 0..args.rounds {
            for (k, crc) in [(0, false), (1, true)] {
                match raw_pingpong(&cluster, &args.backend, mtu, args.pingpongs, crc) {
                    Some(g) => pp[k].push(g),
                    None => lost += 1,
                }
                bi[k].push(raw_bidir(&cluster, &args.backend, mtu, args.bidir_mib, crc));
            }
            pp[2].push(tcp_pingpong(&cluster, args.pingpongs));
            bi[2].push(tcp_bidir(&cluster, args.bidir_mib));
        }
        for (name, v, lost) in [("1 MiB ping-pong", pp, lost), ("both ways at once", bi, 0)] {
            let [raw, crc, tcp] = v.map(|v| (!v.is_empty()).then(|| median(v)));
            let tcp = tcp.expect("TCP rounds");
            let show = |x: Option<f64>| x.map_or("lost".into(), |x| format!("{x:.1}"));
            let ratio = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.2}x", x / tcp));
            println!(
                "| {mtu} | {name} | {} | {} | {tcp:.1} | {} | {} | {lost} |",
                show(raw),
                show(crc),
                ratio(raw),
                ratio(crc)
            );
        }
    }
}
