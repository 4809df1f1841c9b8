//! What the MPI benchmarks' path gives any LLC transport against what it
//! gives TCP, for the traffic patterns of issue 24's goals: 1 MiB
//! ping-pong (NetPIPE's 1 MiB point) and both directions at once (the
//! exchanges of the application kernels). Needs root; builds the 2-host
//! cluster bed (veth pairs to one bridge, as `mpirun` runs on) itself.
//!
//! ```text
//! cargo run --release -p bench --example path_ceiling -- [--mtu 9000,65000] [--rounds 3] [--backend packet] [--patterns stream,reqreply,put]
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
//! computes its CRC32C (the transport's own frame writer), sending a
//! payload of 1 KiB or more from the message as the transport does (the
//! kernel copies it into the skb; AF_XDP copies it into its chunk), the
//! receiver checks it (the transport's parser) and copies the payload into
//! a 1 MiB message. The TCP side is one
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
//!
//! `--patterns reqreply` measures issue 21's pattern the same way: 8-byte
//! requests from 1 or more clients (a host each) to one server, which
//! answers each with a reply of `--reply` bytes (raw frames of the
//! transport's size, or one TCP write); the mean round trip per client.
//! Every thread yields the core when a poll found nothing, as BMI's test
//! calls do, and none is pinned (the benchmark's processes are not):
//!
//! ```text
//! path_ceiling --patterns reqreply --mtu 9000,65000 --clients 1,2 --reply 10000,100000 --rounds 3
//! ```
//!
//! `--patterns put` is the 1 MiB ping-pong as Open MPI's ob1 moves it over
//! a BTL with RDMA put, the protocol NetPIPE's 1 MiB point takes over both
//! btl/llc and btl/tcp: before the data, the sender's rendezvous header
//! and the receiver's answer naming its buffer; after it, the one message
//! any transport needs to know a put landed where the sender's buffer may
//! still be read for a retransmission (a TCP socket has copied it, so
//! btl/tcp needs none), then ob1's FIN. Each small message is one frame
//! (or one TCP write) of 64 bytes; the data as in `stream`. So this is
//! what the path gives btl/llc's 1 MiB point with no cost of its own.
//!
//! `--patterns exchange` is the exchange test of seed 002's kernels: both
//! hosts send a message of each of `--sizes` bytes to each other at once
//! and wait for the other's, `--exchanges` times; raw frames (the message
//! split evenly over as many frames as the transport would use) against
//! the TCP socket pair, mean µs per exchange.
//!
//! `--patterns incast` is issue 24's incast: `--senders` hosts each send
//! `--incast-mib` MiB to one receiver at once. The raw senders get the
//! least flow control any transport needs (at most `--window` frames
//! outstanding, by default 64, the transport's initial congestion window;
//! a credit frame back for every 8 frames received); TCP is one
//! connection per sender, the senders' sockets polled or blocking. No
//! thread is pinned and every idle thread spins, yields and sleeps as the
//! message layer's waiters do. Goodput at the receiver, Jain's fairness
//! index of the senders' shares when the first one finished, and the
//! CPUs' busy share during the round:
//!
//! ```text
//! path_ceiling --patterns incast --mtu 9000 --senders 3 --incast-mib 256 --window 64 --rounds 3
//! ```

use bench::{pin, veth_link};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant as StdInstant};

use bytes::Bytes;

use llc_stack::link::any::AnyLink;
use llc_stack::link::{RxToken, TxToken};
use llc_stack::wire::transport::{self, TransportHeader};
use llc_stack::wire::{self, ethernet, llc, Addresses, Body, MacAddr, Trailer};
use llc_stack::{Device, Instant};
use testbed::cpu::CpuBusy;
use testbed::Cluster;

const MSG: usize = 1 << 20;
/// Payloads from this size on are sent from the message itself, as the
/// transport sends them (its `GATHER_FROM`).
const GATHER_FROM: usize = 1024;
/// Header bytes in front of the payload: Ethernet, LLC, transport header.
const HEAD: usize = ethernet::HEADER_LEN + llc::HEADER_LEN + transport::HEADER_LEN;
/// A message not complete this long after its last frame lost frames.
const LOST_AFTER: Duration = Duration::from_millis(200);
const PORT: u16 = 7911;
/// Payload bytes of a control message of `--patterns put` (ob1's headers
/// are 24-64 bytes).
const CONTROL: usize = 64;

struct Args {
    mtus: Vec<u32>,
    rounds: usize,
    backend: String,
    pingpongs: usize,
    bidir_mib: usize,
    /// `stream` (1 MiB ping-pong and both ways), `reqreply` (issue 21's
    /// 8-byte requests and their replies), `put` (the 1 MiB ping-pong with
    /// ob1's RDMA handshakes).
    patterns: Vec<String>,
    clients: Vec<usize>,
    replies: Vec<usize>,
    requests: usize,
    /// Message sizes of `exchange`.
    sizes: Vec<usize>,
    exchanges: usize,
    /// Senders of `incast`.
    senders: usize,
    /// MiB each sender of `incast` sends.
    incast_mib: usize,
    /// Raw frames outstanding per sender of `incast`.
    window: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        mtus: vec![9000, 65000],
        rounds: 3,
        backend: "packet".into(),
        pingpongs: 300,
        bidir_mib: 1024,
        patterns: vec!["stream".into()],
        clients: vec![1, 2],
        replies: vec![10_000, 100_000],
        requests: 2000,
        sizes: vec![65_536, 262_144, 1 << 20],
        exchanges: 2000,
        senders: 3,
        incast_mib: 256,
        window: INCAST_WINDOW,
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
            "--patterns" => a.patterns = veth_link::list(&val, |v| v.to_string()),
            "--clients" => a.clients = veth_link::list(&val, |v| v.parse().expect("--clients")),
            "--reply" => a.replies = veth_link::list(&val, |v| v.parse().expect("--reply")),
            "--requests" => a.requests = val.parse().expect("--requests N"),
            "--sizes" => a.sizes = veth_link::list(&val, |v| v.parse().expect("--sizes")),
            "--exchanges" => a.exchanges = val.parse().expect("--exchanges N"),
            "--senders" => a.senders = val.parse().expect("--senders N"),
            "--incast-mib" => a.incast_mib = val.parse().expect("--incast-mib N"),
            "--window" => a.window = val.parse().expect("--window FRAMES"),
            other => panic!(
                "unknown argument {other} (--mtu, --rounds, --backend, --pingpongs, --bidir-mib, \
                 --patterns stream,reqreply,put,exchange,incast, --clients, --reply, \
                 --requests, --sizes, --exchanges, --senders, --incast-mib, --window)"
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
    out: Bytes,
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
            out: Bytes::from(vec![0x5Au8; MSG]),
            inbuf: vec![0u8; MSG],
            out_at: 0,
            in_at: 0,
        }
    }

    /// Write up to `n` frames (fewer when the device is full); returns how
    /// many.
    fn send(&mut self, n: usize) -> usize {
        let mut sent = 0;
        while sent < n && self.send_to(self.addr.dst, self.payload) {
            sent += 1;
            if sent % self.burst == 0 {
                self.dev.flush(Instant::now()).expect("flush");
            }
        }
        self.dev.flush(Instant::now()).expect("flush");
        sent
    }

    /// Take what arrived (up to `max` frames); returns the frames of our
    /// size.
    fn receive(&mut self, max: usize) -> usize {
        let mut got = 0;
        while got < max {
            match self.receive_from() {
                Some((_, len)) if len >= self.payload => got += 1,
                Some(_) => {}
                None => break,
            }
        }
        got
    }

    /// Send one frame of `len` payload bytes to `dst`, cut from the
    /// message (with its CRC32C at `copy+crc`); false when the device is
    /// full. At `copy+crc` a payload of [`GATHER_FROM`] bytes or more goes
    /// as the transport sends it: the headers written, the CRC computed
    /// where the payload lies, the payload handed to the device to send
    /// from the message (AF_PACKET's kernel copies it into the skb; a
    /// device that cannot gather copies it in).
    fn send_to(&mut self, dst: MacAddr, len: usize) -> bool {
        let now = Instant::now();
        let Some(tok) = self.dev.transmit(now) else {
            return false;
        };
        if self.out_at + len > MSG {
            self.out_at = 0;
        }
        let at = self.out_at;
        self.out_at += len;
        let addr = Addresses { dst, ..self.addr };
        if self.crc && len >= GATHER_FROM {
            let data = self.out.slice(at..at + len);
            tok.consume_gather(|buf| {
                let head = wire::emit_transport_head(
                    buf,
                    &addr,
                    &TransportHeader::default(),
                    &[],
                    [&[], &data],
                )
                .expect("frame fits");
                (
                    head,
                    Some(wire::Tail {
                        body: data,
                        trailer: 0,
                    }),
                )
            });
            return true;
        }
        let data = &self.out[at..at + len];
        let crc = self.crc;
        tok.consume(|buf| {
            if crc {
                let header = TransportHeader::default();
                return wire::emit_transport_gather(
                    buf,
                    &addr,
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
                llc::HEADER_LEN + transport::HEADER_LEN + len,
            );
            let at = ethernet::HEADER_LEN;
            buf[at..at + 3].copy_from_slice(&[addr.dsap, addr.ssap, llc::CONTROL_UI]);
            HEAD + len
        });
        true
    }

    /// Take one frame, if one arrived: its sender and payload length (at
    /// `copy+crc` checked and copied into the message).
    fn receive_from(&mut self) -> Option<(MacAddr, usize)> {
        let tok = self.dev.receive(Instant::now())?;
        if self.in_at + self.payload > MSG {
            self.in_at = 0;
        }
        let dst = &mut self.inbuf[self.in_at..];
        let crc = self.crc;
        let got = tok.consume(|f| {
            let src = f.get(6..12)?;
            let src = MacAddr(src.try_into().ok()?);
            if !crc {
                return Some((src, f.len().checked_sub(HEAD)?));
            }
            match wire::parse(f, Some(llc::DEFAULT_SAP)) {
                Ok(wire::Frame {
                    body: Body::Transport(t),
                    ..
                }) if t.payload.len() <= dst.len() => {
                    dst[..t.payload.len()].copy_from_slice(t.payload);
                    Some((src, t.payload.len()))
                }
                _ => None,
            }
        })?;
        self.in_at += got.1;
        Some(got)
    }

    /// Send a message of `frames` frames, all of them.
    fn send_message(&mut self, frames: usize) {
        let mut left = frames;
        while left > 0 {
            left -= self.send(left);
        }
    }

    /// Send one small control message (a frame of [`CONTROL`] payload bytes).
    fn send_control(&mut self) {
        while !self.send_to(self.addr.dst, CONTROL) {
            // The batch is full: send it and try again.
            self.dev.flush(Instant::now()).expect("flush");
        }
        self.dev.flush(Instant::now()).expect("flush");
    }

    /// Wait for one small control message; false when none came.
    fn receive_control(&mut self) -> bool {
        let since = StdInstant::now();
        loop {
            match self.receive_from() {
                Some((_, len)) if len < self.payload => return true,
                Some(_) => {}
                None if since.elapsed() > LOST_AFTER => return false,
                None => {}
            }
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
    open_raw_to(cluster, i, 1 - i, backend, payload, crc)
}

/// Host `i`'s raw end, sending to host `peer` by default.
fn open_raw_to(
    cluster: &Cluster,
    i: usize,
    peer: usize,
    backend: &str,
    payload: usize,
    crc: bool,
) -> RawEnd {
    let peer = MacAddr(cluster.hosts()[peer].mac);
    let dev = cluster.hosts()[i]
        .ns
        .run(|| veth_link::open(testbed::CLUSTER_IFNAME, backend));
    RawEnd::new(dev, peer, payload, crc)
}

/// Raw frames, 1 MiB ping-pong: Gbit/s of one direction (NetPIPE's
/// figure), or None when frames were lost.
fn raw_pingpong(cluster: &Cluster, backend: &str, mtu: u32, n: usize, crc: bool) -> Option<f64> {
    let send = |end: &mut RawEnd, frames| {
        end.send_message(frames);
        true
    };
    pingpong_by(cluster, backend, mtu, n, crc, send, RawEnd::receive_message)
}

/// Send one 1 MiB message over ob1's RDMA put protocol: rendezvous
/// header, wait for the receiver's answer, the data, wait for the put's
/// completion notice, ob1's FIN. False when frames were lost.
fn put_send(end: &mut RawEnd, frames: usize) -> bool {
    end.send_control();
    if !end.receive_control() {
        return false;
    }
    end.send_message(frames);
    if !end.receive_control() {
        return false;
    }
    end.send_control();
    true
}

/// The receiving side of [`put_send`].
fn put_receive(end: &mut RawEnd, frames: usize) -> bool {
    if !end.receive_control() {
        return false;
    }
    end.send_control();
    if !end.receive_message(frames) {
        return false;
    }
    end.send_control();
    end.receive_control()
}

/// Raw frames, 1 MiB ping-pong with ob1's put handshakes: Gbit/s of one
/// direction, or None when frames were lost.
fn raw_put_pingpong(
    cluster: &Cluster,
    backend: &str,
    mtu: u32,
    n: usize,
    crc: bool,
) -> Option<f64> {
    pingpong_by(cluster, backend, mtu, n, crc, put_send, put_receive)
}

/// A 1 MiB ping-pong of raw frames whose one-way legs `send` and `receive`
/// move (false: frames were lost): Gbit/s of one direction, or None.
fn pingpong_by(
    cluster: &Cluster,
    backend: &str,
    mtu: u32,
    n: usize,
    crc: bool,
    send: fn(&mut RawEnd, usize) -> bool,
    receive: fn(&mut RawEnd, usize) -> bool,
) -> Option<f64> {
    let payload = transport::max_payload(mtu as usize, 0);
    let frames = MSG.div_ceil(payload);
    let mut a = open_raw(cluster, 0, backend, payload, crc);
    let mut b = open_raw(cluster, 1, backend, payload, crc);
    pin::pin_to_cpu(0);
    let echo = std::thread::spawn(move || {
        pin::pin_to_cpu(1);
        (0..n + 1).all(|_| receive(&mut b, frames) && send(&mut b, frames))
    });
    let mut ok = true;
    let mut start = StdInstant::now();
    for i in 0..n + 1 {
        if i == 1 {
            // The first exchange warms both ends up.
            start = StdInstant::now();
        }
        if !(send(&mut a, frames) && receive(&mut a, frames)) {
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
    let done = on_both(ends, move |mut end| {
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
    });
    let bytes: usize = done.iter().map(|&(got, _)| got * payload).sum();
    let secs = done.iter().map(|&(_, s)| s).fold(0.0, f64::max);
    bytes as f64 * 8.0 / secs / 1e9
}

/// Run `work` on each of the two ends at once, each on a thread of its own
/// pinned to CPU 0 and 1, started together; their results in order.
fn on_both<E, T>(ends: [E; 2], work: impl Fn(E) -> T + Clone + Send + 'static) -> Vec<T>
where
    E: Send + 'static,
    T: Send + 'static,
{
    let go = Arc::new(Barrier::new(2));
    let threads: Vec<_> = ends
        .into_iter()
        .enumerate()
        .map(|(cpu, end)| {
            let (go, work) = (go.clone(), work.clone());
            std::thread::spawn(move || {
                pin::pin_to_cpu(cpu);
                go.wait();
                work(end)
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("thread of an end"))
        .collect()
}

/// One pass of a TCP end that sends and receives at once: a non-blocking
/// write of `out` (if given) and a read into `into` (if given). Returns the
/// bytes written and read.
fn tcp_step(s: &mut TcpStream, out: Option<&[u8]>, into: Option<&mut [u8]>) -> (usize, usize) {
    let wrote = match out.map(|b| s.write(b)) {
        Some(Ok(n)) => n,
        Some(Err(e)) if e.kind() != ErrorKind::WouldBlock => panic!("TCP write: {e}"),
        _ => 0,
    };
    let read = match into.map(|b| s.read(b)) {
        Some(Ok(0)) => panic!("TCP peer closed"),
        Some(Ok(n)) => n,
        Some(Err(e)) if e.kind() != ErrorKind::WouldBlock => panic!("TCP read: {e}"),
        _ => 0,
    };
    (wrote, read)
}

/// Raw frames, both hosts exchanging a message of `bytes` at once, `n`
/// times after one to warm up: mean µs per exchange, or None when frames
/// were lost. The message is split evenly over the frames the transport
/// would use for it.
fn raw_exchange(
    cluster: &Cluster,
    backend: &str,
    mtu: u32,
    bytes: usize,
    n: usize,
    crc: bool,
) -> Option<f64> {
    let frames = bytes.div_ceil(transport::max_payload(mtu as usize, 0));
    let payload = bytes.div_ceil(frames);
    let ends = [
        open_raw(cluster, 0, backend, payload, crc),
        open_raw(cluster, 1, backend, payload, crc),
    ];
    let done = on_both(ends, move |mut end| {
        let mut start = StdInstant::now();
        for i in 0..n + 1 {
            if i == 1 {
                start = StdInstant::now();
            }
            let (mut sent, mut got) = (0, 0);
            let mut last = StdInstant::now();
            while got < frames || sent < frames {
                if sent < frames {
                    sent += end.send(end.burst.min(frames - sent));
                }
                let k = end.receive(frames - got);
                if k > 0 {
                    got += k;
                    last = StdInstant::now();
                } else if got < frames && last.elapsed() > LOST_AFTER {
                    return None;
                } else {
                    // Frames a full socket buffer left in the batch go now.
                    end.dev.flush(Instant::now()).expect("flush");
                }
            }
        }
        Some(start.elapsed().as_secs_f64())
    });
    let secs = done
        .into_iter()
        .try_fold(0.0, |a: f64, s| s.map(|s| a.max(s)));
    secs.map(|s| s * 1e6 / n as f64)
}

/// TCP, both hosts exchanging `bytes` at once, `n` times after one to
/// warm up (writes and reads interleaved, so neither waits for the other
/// to read): mean µs per exchange.
fn tcp_exchange(cluster: &Cluster, bytes: usize, n: usize) -> f64 {
    let (a, b) = tcp_pair(cluster);
    let done = on_both([a, b], move |mut s| {
        let out = vec![0x5Au8; bytes];
        let mut inbuf = vec![0u8; bytes];
        let mut start = StdInstant::now();
        for i in 0..n + 1 {
            if i == 1 {
                start = StdInstant::now();
            }
            let (mut sent, mut got) = (0, 0);
            while sent < bytes || got < bytes {
                let out = (sent < bytes).then(|| &out[sent..]);
                let into = (got < bytes).then(|| &mut inbuf[got..]);
                let (w, r) = tcp_step(&mut s, out, into);
                sent += w;
                got += r;
            }
        }
        start.elapsed().as_secs_f64()
    });
    done.into_iter().fold(0.0, f64::max) * 1e6 / n as f64
}

/// The request of the request/reply pattern: 8 bytes, as a BMI client's
/// request to its server (issue 21's many-to-one load).
const REQUEST: usize = 8;

/// Raw frames, request/reply: a server on host 0 answers each 8-byte
/// request with `reply` bytes in frames of the transport's size; `clients`
/// clients on hosts 1.. each time `n` round trips. Every thread yields the
/// core when a poll found nothing, as BMI's test calls do, and none is
/// pinned (the benchmark's processes are not). The mean round trip in µs
/// over all clients, or None when frames were lost.
fn raw_reqreply(
    cluster: &Cluster,
    backend: &str,
    mtu: u32,
    clients: usize,
    reply: usize,
    n: usize,
    crc: bool,
) -> Option<f64> {
    let payload = transport::max_payload(mtu as usize, 0);
    let mut server = open_raw_to(cluster, 0, 1, backend, payload, crc);
    let ends: Vec<_> = (1..=clients)
        .map(|i| open_raw_to(cluster, i, 0, backend, payload, crc))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(clients + 1));
    let srv = {
        let (stop, go) = (stop.clone(), go.clone());
        std::thread::spawn(move || {
            pin::any_cpu();
            go.wait();
            while !stop.load(Ordering::Relaxed) {
                match server.receive_from() {
                    Some((src, REQUEST)) => {
                        let mut left = reply;
                        while left > 0 {
                            let len = left.min(payload);
                            while !server.send_to(src, len) {
                                server.dev.flush(Instant::now()).expect("flush");
                            }
                            left -= len;
                        }
                        server.dev.flush(Instant::now()).expect("flush");
                    }
                    Some(_) => {}
                    None => std::thread::yield_now(),
                }
            }
        })
    };
    let threads: Vec<_> = ends
        .into_iter()
        .map(|mut c| {
            let go = go.clone();
            std::thread::spawn(move || {
                pin::any_cpu();
                go.wait();
                let to = c.addr.dst;
                let mut start = StdInstant::now();
                for i in 0..n + 1 {
                    if i == 1 {
                        start = StdInstant::now();
                    }
                    while !c.send_to(to, REQUEST) {
                        c.dev.flush(Instant::now()).expect("flush");
                    }
                    c.dev.flush(Instant::now()).expect("flush");
                    let (mut got, mut last) = (0, StdInstant::now());
                    while got < reply {
                        match c.receive_from() {
                            Some((_, len)) => {
                                got += len;
                                last = StdInstant::now();
                            }
                            None if last.elapsed() > LOST_AFTER => return None,
                            None => std::thread::yield_now(),
                        }
                    }
                }
                Some(start.elapsed().as_secs_f64() / n as f64)
            })
        })
        .collect();
    let rts: Vec<Option<f64>> = threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    srv.join().expect("server thread");
    let rts: Option<Vec<f64>> = rts.into_iter().collect();
    rts.map(|v| v.iter().sum::<f64>() / v.len() as f64 * 1e6)
}

/// TCP, request/reply as [`raw_reqreply`]: one connection per client to
/// the server on host 0, set up as `tcp_pair`'s; the mean round trip in µs.
fn tcp_reqreply(cluster: &Cluster, clients: usize, reply: usize, n: usize) -> f64 {
    let (conns, served) = tcp_to_host0(cluster, clients);
    let stop = Arc::new(AtomicBool::new(false));
    let go = Arc::new(Barrier::new(clients + 1));
    let srv = {
        let (stop, go) = (stop.clone(), go.clone());
        std::thread::spawn(move || {
            let mut served = served;
            pin::any_cpu();
            let answer = vec![0x5Au8; reply];
            let mut have = vec![0usize; served.len()];
            let mut req = [0u8; REQUEST];
            go.wait();
            while !stop.load(Ordering::Relaxed) {
                let mut busy = false;
                for (s, have) in served.iter_mut().zip(&mut have) {
                    if *have == usize::MAX {
                        continue;
                    }
                    match s.read(&mut req[..REQUEST - *have]) {
                        // This client is done.
                        Ok(0) => *have = usize::MAX,
                        Ok(k) => {
                            busy = true;
                            *have += k;
                            if *have == REQUEST {
                                *have = 0;
                                write_all_spin(s, &answer);
                            }
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == ErrorKind::ConnectionReset => *have = usize::MAX,
                        Err(e) => panic!("TCP read: {e}"),
                    }
                }
                if !busy {
                    std::thread::yield_now();
                }
            }
        })
    };
    let threads: Vec<_> = conns
        .into_iter()
        .map(|mut s| {
            let go = go.clone();
            std::thread::spawn(move || {
                pin::any_cpu();
                let mut buf = vec![0u8; reply];
                go.wait();
                let mut start = StdInstant::now();
                for i in 0..n + 1 {
                    if i == 1 {
                        start = StdInstant::now();
                    }
                    write_all_spin(&mut s, &[7u8; REQUEST]);
                    let mut at = 0;
                    while at < reply {
                        match s.read(&mut buf[at..]) {
                            Ok(0) => panic!("TCP server closed"),
                            Ok(k) => at += k,
                            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                            Err(e) => panic!("TCP read: {e}"),
                        }
                    }
                }
                start.elapsed().as_secs_f64() / n as f64
            })
        })
        .collect();
    let rts: Vec<f64> = threads
        .into_iter()
        .map(|t| t.join().expect("client thread"))
        .collect();
    stop.store(true, Ordering::Relaxed);
    srv.join().expect("server thread");
    rts.iter().sum::<f64>() / rts.len() as f64 * 1e6
}

/// Data frames per credit of `--patterns incast`: the transport's
/// `ack_every`.
const CREDIT_EVERY: usize = 8;
/// Frames each raw incast sender may have outstanding by default: the
/// transport's initial congestion window. With three senders, windows of
/// 256 frames and more overflow the receiver's ring on this bed, and a
/// sender with no protocol waits [`LOST_AFTER`] for each loss.
const INCAST_WINDOW: usize = 64;

/// What an incast round measured: goodput at the receiver and Jain's
/// fairness index of the bytes received from each sender when the first
/// one had everything received (as `llc-perf`'s incast test takes it).
struct IncastFigures {
    gbit: f64,
    jain: f64,
    /// Frames (raw) that never arrived.
    lost: usize,
    /// Share of the machine's CPU time that was busy during the round.
    busy: f64,
}

/// Jain's index of `x` (1: equal shares).
fn jain(x: &[usize]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64).powi(2)).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// Start a thread under `name` (what a profile of the pattern shows).
fn spawn_named<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(work)
        .expect("starting a thread")
}

/// How long an idle incast thread polls before it sleeps: the message
/// layer's default `spin`.
const SPIN: Duration = Duration::from_micros(200);

/// One idle turn of a raw end last busy at `since`, paced as the message
/// layer paces its waiters: spin for 5 µs, then yield the core between
/// polls, after [`SPIN`] sleep in poll(2) until a frame arrives (at most
/// a millisecond).
fn idle(end: &mut RawEnd, since: StdInstant) {
    let idle = since.elapsed();
    if idle < Duration::from_micros(5) {
        std::hint::spin_loop();
    } else if idle < SPIN {
        std::thread::yield_now();
    } else {
        end.dev
            .wait(Some(Duration::from_millis(1)))
            .expect("waiting for frames");
    }
}

/// Raw frames, incast: `senders` hosts (1..) each send `mib` MiB to host
/// 0 at once, in frames of the transport's size. A transport cannot send
/// into a receiver that has no room, so the raw senders get the least
/// flow control any has: at most `window` frames outstanding, one credit
/// frame ([`CONTROL`] bytes) back from the receiver for every
/// [`CREDIT_EVERY`] frames it took (the transport's acknowledgement
/// rate), the outstanding frames written off when no credit came for
/// [`LOST_AFTER`]. No thread is pinned (the benchmark's processes are
/// not); each yields the core when a poll found nothing to do.
fn raw_incast(
    cluster: &Cluster,
    backend: &str,
    mtu: u32,
    senders: usize,
    mib: usize,
    window: usize,
    crc: bool,
) -> IncastFigures {
    let payload = transport::max_payload(mtu as usize, 0);
    let frames = (mib * MSG).div_ceil(payload);
    let mut rx = open_raw_to(cluster, 0, 1, backend, payload, crc);
    let macs: Vec<MacAddr> = (1..=senders)
        .map(|i| MacAddr(cluster.hosts()[i].mac))
        .collect();
    let ends: Vec<_> = (1..=senders)
        .map(|i| open_raw_to(cluster, i, 0, backend, payload, crc))
        .collect();
    let go = Arc::new(Barrier::new(senders + 1));
    let cpu = CpuBusy::start();
    let receiver = {
        let go = go.clone();
        spawn_named(if crc { "crc-rx" } else { "raw-rx" }, move || {
            pin::any_cpu();
            let mut got = vec![0usize; macs.len()];
            let mut snapshot = None;
            let total = frames * macs.len();
            let (mut all, mut last) = (0, StdInstant::now());
            go.wait();
            let start = StdInstant::now();
            while all < total {
                let mut took = 0;
                while took < rx.burst {
                    let Some((src, len)) = rx.receive_from() else {
                        break;
                    };
                    took += 1;
                    let Some(i) = macs.iter().position(|&m| m == src) else {
                        continue;
                    };
                    if len < payload {
                        continue;
                    }
                    got[i] += 1;
                    all += 1;
                    if got[i].is_multiple_of(CREDIT_EVERY) {
                        while !rx.send_to(src, CONTROL) {
                            rx.dev.flush(Instant::now()).expect("flush");
                        }
                    }
                    if got[i] == frames && snapshot.is_none() {
                        snapshot = Some(got.clone());
                    }
                }
                if took > 0 {
                    rx.dev.flush(Instant::now()).expect("flush");
                    last = StdInstant::now();
                } else if last.elapsed() > LOST_AFTER {
                    break;
                } else {
                    idle(&mut rx, last);
                }
            }
            let secs = (last - start).as_secs_f64();
            (all, secs, snapshot.unwrap_or(got))
        })
    };
    let threads: Vec<_> = ends
        .into_iter()
        .map(|mut end| {
            let go = go.clone();
            spawn_named(if crc { "crc-tx" } else { "raw-tx" }, move || {
                pin::any_cpu();
                go.wait();
                let (mut sent, mut credited) = (0usize, 0usize);
                let (mut heard, mut moved) = (StdInstant::now(), StdInstant::now());
                while sent < frames {
                    while let Some((_, len)) = end.receive_from() {
                        if len < end.payload {
                            credited += CREDIT_EVERY;
                            heard = StdInstant::now();
                        }
                    }
                    let room = window.saturating_sub(sent - credited.min(sent));
                    let n = room.min(end.burst).min(frames - sent);
                    let wrote = if n > 0 { end.send(n) } else { 0 };
                    sent += wrote;
                    if wrote > 0 {
                        moved = StdInstant::now();
                    } else if heard.elapsed() > LOST_AFTER {
                        // Whatever is outstanding is lost.
                        credited = sent;
                        heard = StdInstant::now();
                    } else {
                        idle(&mut end, moved.max(heard));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("sender thread");
    }
    let (all, secs, shares) = receiver.join().expect("receiver thread");
    IncastFigures {
        gbit: gbit(all * payload, secs),
        jain: jain(&shares),
        lost: frames * senders - all,
        busy: cpu.share().unwrap_or(f64::NAN),
    }
}

/// TCP, incast as [`raw_incast`]: one connection from each sender to host
/// 0, `mib` MiB written on each in 1 MiB writes, the receiver reading the
/// connections in turn into a 1 MiB buffer. `blocking`: the senders'
/// sockets block (the kernel puts a sender to sleep while its window is
/// full), else they are polled; the receiver polls its sockets (a 1 MiB
/// read of each in turn) and yields the core when none had data, as
/// the raw receiver does.
fn tcp_incast(cluster: &Cluster, senders: usize, mib: usize, blocking: bool) -> IncastFigures {
    let (conns, served) = tcp_to_host0(cluster, senders);
    for s in &conns {
        s.set_nonblocking(!blocking).expect("blocking mode");
    }
    let total = mib * MSG;
    let go = Arc::new(Barrier::new(senders + 1));
    let cpu = CpuBusy::start();
    let receiver = {
        let go = go.clone();
        spawn_named("tcp-rx", move || {
            pin::any_cpu();
            let mut served = served;
            let mut buf = vec![0u8; MSG];
            let mut got = vec![0usize; served.len()];
            let mut snapshot = None;
            go.wait();
            let start = StdInstant::now();
            while got.iter().any(|&g| g < total) {
                let mut busy = false;
                for (i, s) in served.iter_mut().enumerate() {
                    if got[i] == total {
                        continue;
                    }
                    let want = MSG.min(total - got[i]);
                    let (_, r) = tcp_step(s, None, Some(&mut buf[..want]));
                    if r > 0 {
                        busy = true;
                        got[i] += r;
                        if got[i] == total && snapshot.is_none() {
                            snapshot = Some(got.clone());
                        }
                    }
                }
                if !busy {
                    std::thread::yield_now();
                }
            }
            (start.elapsed().as_secs_f64(), snapshot.unwrap_or(got))
        })
    };
    let threads: Vec<_> = conns
        .into_iter()
        .map(|mut s| {
            let go = go.clone();
            spawn_named("tcp-tx", move || {
                pin::any_cpu();
                let out = vec![0x5Au8; MSG];
                go.wait();
                for _ in 0..mib {
                    if blocking {
                        s.write_all(&out).expect("TCP write");
                    } else {
                        let mut at = 0;
                        while at < MSG {
                            match s.write(&out[at..]) {
                                Ok(n) => at += n,
                                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                    std::thread::yield_now()
                                }
                                Err(e) => panic!("TCP write: {e}"),
                            }
                        }
                    }
                }
                // Stay connected until the receiver has read everything.
                s
            })
        })
        .collect();
    let conns: Vec<TcpStream> = threads
        .into_iter()
        .map(|t| t.join().expect("sender thread"))
        .collect();
    let (secs, shares) = receiver.join().expect("receiver thread");
    let busy = cpu.share().unwrap_or(f64::NAN);
    drop(conns);
    IncastFigures {
        gbit: gbit(total * senders, secs),
        jain: jain(&shares),
        lost: 0,
        busy,
    }
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

/// One TCP connection from each of hosts 1..=`n` to host 0, set up as
/// [`tuned`]: the hosts' ends in host order, and host 0's ends in the
/// order it accepted them.
fn tcp_to_host0(cluster: &Cluster, n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let h0 = &cluster.hosts()[0];
    let listener = h0
        .ns
        .run(|| TcpListener::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, PORT))))
        .expect("listen");
    let to = SocketAddr::from((h0.ipv4, PORT));
    let conns = (1..=n)
        .map(|i| {
            let s = cluster.hosts()[i]
                .ns
                .run(|| TcpStream::connect_timeout(&to, Duration::from_secs(5)))
                .expect("connect");
            tuned(s)
        })
        .collect();
    let served = (0..n)
        .map(|_| tuned(listener.accept().expect("accept").0))
        .collect();
    (conns, served)
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
    let send = |s: &mut TcpStream, buf: &mut [u8]| write_all_spin(s, buf);
    tcp_pingpong_by(cluster, n, send, read_exact_spin)
}

/// TCP, 1 MiB ping-pong with ob1's put handshakes as btl/tcp has them
/// (rendezvous header, answer, data, FIN; the put completes when the
/// socket took the bytes): Gbit/s of one direction.
fn tcp_put_pingpong(cluster: &Cluster, n: usize) -> f64 {
    fn send(s: &mut TcpStream, buf: &mut [u8]) {
        write_all_spin(s, &buf[..CONTROL]);
        read_exact_spin(s, &mut buf[..CONTROL]);
        write_all_spin(s, buf);
        write_all_spin(s, &buf[..CONTROL]);
    }
    fn receive(s: &mut TcpStream, buf: &mut [u8]) {
        read_exact_spin(s, &mut buf[..CONTROL]);
        write_all_spin(s, &buf[..CONTROL]);
        read_exact_spin(s, buf);
        read_exact_spin(s, &mut buf[..CONTROL]);
    }
    tcp_pingpong_by(cluster, n, send, receive)
}

/// A 1 MiB ping-pong over the TCP pair whose one-way legs `send` and
/// `receive` move: Gbit/s of one direction.
fn tcp_pingpong_by(
    cluster: &Cluster,
    n: usize,
    send: fn(&mut TcpStream, &mut [u8]),
    receive: fn(&mut TcpStream, &mut [u8]),
) -> f64 {
    let (mut a, mut b) = tcp_pair(cluster);
    pin::pin_to_cpu(0);
    let echo = std::thread::spawn(move || {
        pin::pin_to_cpu(1);
        let mut buf = vec![0u8; MSG];
        for _ in 0..n + 1 {
            receive(&mut b, &mut buf);
            send(&mut b, &mut buf);
        }
    });
    let mut buf = vec![0x5Au8; MSG];
    let mut start = StdInstant::now();
    for i in 0..n + 1 {
        if i == 1 {
            start = StdInstant::now();
        }
        send(&mut a, &mut buf);
        receive(&mut a, &mut buf);
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
    on_both([a, b], move |mut s| {
        let out = vec![0x5Au8; MSG];
        let mut inbuf = vec![0u8; MSG];
        let (mut sent, mut got) = (0usize, 0usize);
        while sent < total || got < total {
            let at = sent % MSG;
            let out = (sent < total).then(|| &out[at..MSG.min(at + (total - sent))]);
            let into = (got < total).then_some(&mut inbuf[..]);
            let (w, r) = tcp_step(&mut s, out, into);
            sent += w;
            got += r;
        }
    });
    gbit(2 * total, start.elapsed().as_secs_f64())
}

/// A table's figures from the rounds of raw frames, raw frames with
/// copy+crc and TCP: their medians and the first two against TCP's.
fn cells(v: [Vec<f64>; 3]) -> String {
    let [raw, crc, tcp] = v.map(|v| (!v.is_empty()).then(|| median(v)));
    let tcp = tcp.expect("TCP rounds");
    let show = |x: Option<f64>| x.map_or("lost".into(), |x| format!("{x:.1}"));
    let ratio = |x: Option<f64>| x.map_or("-".into(), |x| format!("{:.2}x", x / tcp));
    format!(
        "{} | {} | {tcp:.1} | {} | {}",
        show(raw),
        show(crc),
        ratio(raw),
        ratio(crc)
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if let Err(why) = testbed::check_privileges() {
        eprintln!("path_ceiling needs root (namespaces, raw sockets): {why}");
        std::process::exit(2);
    }
    let args = parse_args();
    for p in &args.patterns {
        assert!(
            ["stream", "reqreply", "put", "exchange", "incast"].contains(&p.as_str()),
            "unknown pattern {p} (stream, reqreply, put, exchange, incast)"
        );
    }
    if args.patterns.iter().any(|p| p == "exchange") {
        exchange_pattern(&args);
    }
    if args.patterns.iter().any(|p| p == "put") {
        put_pattern(&args);
    }
    if args.patterns.iter().any(|p| p == "stream") {
        stream_patterns(&args);
    }
    if args.patterns.iter().any(|p| p == "reqreply") {
        reqreply_pattern(&args);
    }
    if args.patterns.iter().any(|p| p == "incast") {
        incast_pattern(&args);
    }
}

/// 1 MiB ping-pong and both ways at once, per MTU.
fn stream_patterns(args: &Args) {
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
            println!("| {mtu} | {name} | {} | {lost} |", cells(v));
        }
    }
}

/// The 1 MiB ping-pong with and without ob1's put handshakes, per MTU:
/// raw frames at `copy+crc` against TCP sockets.
fn put_pattern(args: &Args) {
    println!();
    println!(
        "1 MiB ping-pong as ob1's RDMA put protocol moves it: raw LLC frames ({}, copy+crc) against TCP, medians of {} alternating rounds",
        args.backend, args.rounds
    );
    println!();
    println!("| MTU | copy+crc, data only | copy+crc with ob1's put handshakes | TCP, data only | TCP with btl/tcp's handshakes | handshakes' cost, LLC / TCP (µs per message) | lost rounds |");
    println!("|---:|---:|---:|---:|---:|---|---:|");
    let us = |g: f64| MSG as f64 * 8.0 / (g * 1e3);
    for &mtu in &args.mtus {
        let cluster = Cluster::new(2, mtu).expect("cluster bed");
        let mut v: [Vec<f64>; 4] = Default::default();
        let mut lost = 0;
        for _ in 0..args.rounds {
            let raw = [
                raw_pingpong(&cluster, &args.backend, mtu, args.pingpongs, true),
                raw_put_pingpong(&cluster, &args.backend, mtu, args.pingpongs, true),
            ];
            for (k, g) in raw.into_iter().enumerate() {
                match g {
                    Some(g) => v[k].push(g),
                    None => lost += 1,
                }
            }
            v[2].push(tcp_pingpong(&cluster, args.pingpongs));
            v[3].push(tcp_put_pingpong(&cluster, args.pingpongs));
        }
        let [data, put, tcp, tcp_put] = v.map(|v| if v.is_empty() { f64::NAN } else { median(v) });
        println!(
            "| {mtu} | {data:.1} | {put:.1} | {tcp:.1} | {tcp_put:.1} | {:.1} / {:.1} | {lost} |",
            us(put) - us(data),
            us(tcp_put) - us(tcp)
        );
    }
}

/// Seed 002's exchange test, per MTU and message size: raw frames (with
/// and without the copy and CRC) against TCP sockets.
fn exchange_pattern(args: &Args) {
    println!();
    println!(
        "both hosts exchanging a message at once: raw LLC frames ({}) against TCP, mean µs per exchange, medians of {} alternating rounds of {} exchanges",
        args.backend, args.rounds, args.exchanges
    );
    println!();
    println!("| MTU | bytes | frames | raw frames µs | raw frames, copy+crc µs | TCP µs | TCP / raw | TCP / copy+crc | lost rounds |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &mtu in &args.mtus {
        let cluster = Cluster::new(2, mtu).expect("cluster bed");
        for &bytes in &args.sizes {
            let mut v: [Vec<f64>; 3] = Default::default();
            let mut lost = 0;
            for _ in 0..args.rounds {
                for (k, crc) in [(0, false), (1, true)] {
                    let n = args.exchanges;
                    match raw_exchange(&cluster, &args.backend, mtu, bytes, n, crc) {
                        Some(us) => v[k].push(us),
                        None => lost += 1,
                    }
                }
                v[2].push(tcp_exchange(&cluster, bytes, args.exchanges));
            }
            let frames = bytes.div_ceil(transport::max_payload(mtu as usize, 0));
            let [raw, crc, tcp] = v.map(|v| if v.is_empty() { f64::NAN } else { median(v) });
            println!(
                "| {mtu} | {bytes} | {frames} | {raw:.1} | {crc:.1} | {tcp:.1} | {:.2}x | {:.2}x | {lost} |",
                tcp / raw,
                tcp / crc
            );
        }
    }
}

/// Issue 21's request/reply, per MTU, client count and reply size.
fn reqreply_pattern(args: &Args) {
    let most = args.clients.iter().copied().max().unwrap_or(1);
    println!();
    println!(
        "request/reply: 8-byte requests from each client (own host), replies from one server; raw LLC frames ({}) against TCP, mean round trip, medians of {} alternating rounds of {} requests per client",
        args.backend, args.rounds, args.requests
    );
    println!();
    println!("| MTU | clients | reply B | raw frames µs | raw frames, copy+crc µs | TCP µs | raw / TCP | copy+crc / TCP | lost rounds |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &mtu in &args.mtus {
        let cluster = Cluster::new(1 + most, mtu).expect("cluster bed");
        for &clients in &args.clients {
            for &reply in &args.replies {
                let mut v = [vec![], vec![], vec![]];
                let mut lost = 0;
                for _ in 0..args.rounds {
                    for (k, crc) in [(0, false), (1, true)] {
                        let got = raw_reqreply(
                            &cluster,
                            &args.backend,
                            mtu,
                            clients,
                            reply,
                            args.requests,
                            crc,
                        );
                        match got {
                            Some(us) => v[k].push(us),
                            None => lost += 1,
                        }
                    }
                    v[2].push(tcp_reqreply(&cluster, clients, reply, args.requests));
                }
                println!("| {mtu} | {clients} | {reply} | {} | {lost} |", cells(v));
            }
        }
    }
}

/// Issue 24's incast, per MTU: raw frames (with and without the copy and
/// CRC) against TCP sockets, polled and blocking.
fn incast_pattern(args: &Args) {
    println!();
    println!(
        "incast: {} senders (a host each) stream {} MiB each to one receiver at once; raw LLC frames ({}, credit per {CREDIT_EVERY} frames) against TCP, Gbit/s at the receiver (Jain fairness, the CPUs' busy share), medians of {} alternating rounds",
        args.senders, args.incast_mib, args.backend, args.rounds
    );
    println!();
    println!("| MTU | raw frames | raw frames, copy+crc | TCP, polled | TCP, blocking senders | raw / best TCP | copy+crc / best TCP | frames lost |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &mtu in &args.mtus {
        let cluster = Cluster::new(1 + args.senders, mtu).expect("cluster bed");
        let window = args.window;
        let mut v: [Vec<IncastFigures>; 4] = Default::default();
        for _ in 0..args.rounds {
            for (k, crc) in [(0, false), (1, true)] {
                let f = raw_incast(
                    &cluster,
                    &args.backend,
                    mtu,
                    args.senders,
                    args.incast_mib,
                    window,
                    crc,
                );
                v[k].push(f);
            }
            for (k, blocking) in [(2, false), (3, true)] {
                v[k].push(tcp_incast(
                    &cluster,
                    args.senders,
                    args.incast_mib,
                    blocking,
                ));
            }
        }
        let lost: usize = v[..2].iter().flatten().map(|f| f.lost).sum();
        let [raw, crc, polled, blocking] = v.map(|mut v| {
            v.sort_by(|a, b| a.gbit.total_cmp(&b.gbit));
            v.swap_remove(v.len() / 2)
        });
        let best = polled.gbit.max(blocking.gbit);
        let show =
            |f: &IncastFigures| format!("{:.1} ({:.3}, {:.0}%)", f.gbit, f.jain, f.busy * 100.0);
        println!(
            "| {mtu} | {} | {} | {} | {} | {:.2}x | {:.2}x | {lost} |",
            show(&raw),
            show(&crc),
            show(&polled),
            show(&blocking),
            raw.gbit / best,
            crc.gbit / best
        );
    }
}
