//! 8-byte ping-pong over each transport between two network namespaces joined
//! by a veth pair; prints the median and p99 one-way latency (half the round
//! trip) of each, measured in one run so the numbers compare.
//!
//! ```sh
//! cargo run --release -p bench --example transport_pingpong -- \
//!     [--iters 20000] [--warmup 2000] [--mtu 1500] [--wait] \
//!     [--transports llc-packet,llc-xdp,tcp-uring,tcp-socket]
//! ```
//!
//! Both ends busy-poll `progress` (one thread each, in its namespace); with
//! `--wait` an end that found nothing sleeps in `poll(2)` on what
//! `prepare_wait` returned, which shows the cost of a wake-up. Needs root.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::transport::spec::Backend;
use msg_layer::transport::tcp::{TcpConfig, TcpSocketTransport, TcpUringTransport};
use msg_layer::transport::{ConnId, Transport, TransportError, TransportEvent};
use testbed::{Host, TwoHosts};

struct Opts {
    iters: usize,
    warmup: usize,
    mtu: u32,
    wait: bool,
    transports: Vec<String>,
}

fn parse() -> Opts {
    let mut o = Opts {
        iters: 20_000,
        warmup: 2_000,
        mtu: 1500,
        wait: false,
        transports: ["llc-packet", "llc-xdp", "tcp-uring", "tcp-socket"]
            .map(String::from)
            .to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--iters" => o.iters = val().parse().unwrap_or_else(|_| usage("--iters N")),
            "--warmup" => o.warmup = val().parse().unwrap_or_else(|_| usage("--warmup N")),
            "--mtu" => o.mtu = val().parse().unwrap_or_else(|_| usage("--mtu N")),
            "--wait" => o.wait = true,
            "--transports" => o.transports = val().split(',').map(String::from).collect(),
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    o
}

fn usage(msg: &str) -> ! {
    eprintln!("transport_pingpong: {msg}");
    eprintln!(
        "usage: transport_pingpong [--iters N] [--warmup N] [--mtu N] [--wait] \
         [--transports llc-packet,llc-xdp,tcp-uring,tcp-socket]"
    );
    std::process::exit(2)
}

/// Wait for the next event: busy-poll, or sleep in poll(2) when idle.
fn next_event<T: Transport>(
    t: &mut T,
    evs: &mut Vec<TransportEvent>,
    wait: bool,
) -> TransportEvent {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if !evs.is_empty() {
            return evs.remove(0);
        }
        let moved = t.progress(evs).expect("progress");
        if !evs.is_empty() {
            return evs.remove(0);
        }
        assert!(
            Instant::now() < deadline,
            "{}: no event within 10 s",
            t.name()
        );
        if wait && !moved {
            let mut fds = Vec::new();
            let d = t
                .prepare_wait(&mut fds)
                .unwrap_or(Duration::from_millis(100));
            if !d.is_zero() {
                poll(&fds, d);
            }
        }
    }
}

fn poll(fds: &[std::os::fd::RawFd], d: Duration) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = d.as_micros().div_ceil(1000).min(1000) as libc::c_int;
    // SAFETY: `p` is a valid array of `p.len()` pollfds during the call.
    unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
}

struct Result {
    name: String,
    median: Duration,
    p99: Duration,
    extra: String,
}

fn pingpong<T: Transport>(
    hosts: &TwoHosts,
    mk: impl Fn(&Host) -> std::result::Result<T, TransportError> + Sync,
    report: impl Fn(&T, ConnId) -> String + Send + 'static,
    o: &Opts,
) -> std::result::Result<Result, String> {
    let mut b = hosts.b.ns.run(|| mk(&hosts.b)).map_err(|e| e.to_string())?;
    let mut a = hosts.a.ns.run(|| mk(&hosts.a)).map_err(|e| e.to_string())?;
    let to = b.local_addr();
    let wait = o.wait;
    let echo = hosts.b.ns.spawn(move || {
        let mut evs = Vec::new();
        loop {
            match next_event(&mut b, &mut evs, wait) {
                TransportEvent::Accepted(_) => {}
                TransportEvent::Message(c, m) if m.is_empty() => {
                    b.close(c);
                }
                TransportEvent::Message(c, m) => {
                    b.send(c, &m, Bytes::new()).expect("echo");
                }
                TransportEvent::Closed(..) => return,
                other => panic!("echo: unexpected {other:?}"),
            }
        }
    });
    let (iters, warmup) = (o.iters, o.warmup);
    let pinger = hosts.a.ns.spawn(move || {
        let conn = a.connect(&to).expect("connect");
        let mut evs = Vec::new();
        match next_event(&mut a, &mut evs, wait) {
            TransportEvent::Connected(c) if c == conn => {}
            other => panic!("connect: {other:?}"),
        }
        let mut rtts = Vec::with_capacity(iters);
        for i in 0..warmup + iters {
            let ping = (i as u64).to_le_bytes();
            let t0 = Instant::now();
            a.send(conn, &ping, Bytes::new()).expect("ping");
            match next_event(&mut a, &mut evs, wait) {
                TransportEvent::Message(c, m) if c == conn && m == ping => {}
                other => panic!("pong {i}: {other:?}"),
            }
            if i >= warmup {
                rtts.push(t0.elapsed());
            }
        }
        let extra = report(&a, conn);
        a.send(conn, &[], Bytes::new()).expect("quit");
        loop {
            if let TransportEvent::Closed(..) = next_event(&mut a, &mut evs, wait) {
                break;
            }
        }
        let name = a.name();
        (name, rtts, extra)
    });
    let (name, mut rtts, extra) = pinger.join().map_err(|_| "the pinging thread panicked")?;
    echo.join().map_err(|_| "the echo thread panicked")?;
    rtts.sort();
    let q = |f: f64| rtts[((rtts.len() as f64 * f) as usize).min(rtts.len() - 1)] / 2;
    Ok(Result {
        name,
        median: q(0.5),
        p99: q(0.99),
        extra,
    })
}

fn main() {
    let o = parse();
    if let Err(e) = testbed::check_privileges() {
        eprintln!("transport_pingpong needs root: {e}");
        std::process::exit(1);
    }
    println!(
        "8-byte ping-pong, veth pair at MTU {}, {} round trips after {} warm-up, {}",
        o.mtu,
        o.iters,
        o.warmup,
        if o.wait {
            "sleeping in poll(2) when idle"
        } else {
            "busy-polling"
        }
    );
    println!(
        "{:<28} {:>12} {:>12}",
        "transport", "median 1-way", "p99 1-way"
    );
    for which in &o.transports {
        let hosts = TwoHosts::new(o.mtu).expect("testbed");
        let llc_cfg = LlcConfig::default;
        let tcp_addr = |h: &Host| SocketAddr::new(h.ipv4.into(), 0);
        let napi = |id: Option<u32>| match id {
            Some(id) => format!("SO_INCOMING_NAPI_ID {id}"),
            None => String::new(),
        };
        let r = match which.as_str() {
            "llc-packet" => pingpong(
                &hosts,
                |h| LlcTransport::open(&h.ifname, Backend::Packet, 7, llc_cfg()),
                |_, _| String::new(),
                &o,
            ),
            "llc-xdp" => pingpong(
                &hosts,
                |h| LlcTransport::open(&h.ifname, Backend::Xdp, 7, llc_cfg()),
                |_, _| String::new(),
                &o,
            ),
            "tcp-uring" => pingpong(
                &hosts,
                |h| TcpUringTransport::bind(tcp_addr(h), TcpConfig::default()),
                move |t, c| {
                    let mut s = napi(t.incoming_napi_id(c));
                    for n in t.notes() {
                        s.push_str("; ");
                        s.push_str(n);
                    }
                    s
                },
                &o,
            ),
            "tcp-socket" => pingpong(
                &hosts,
                |h| TcpSocketTransport::bind(tcp_addr(h), TcpConfig::default()),
                move |t, c| {
                    let mut s = napi(t.incoming_napi_id(c));
                    for n in t.notes() {
                        s.push_str("; ");
                        s.push_str(n);
                    }
                    s
                },
                &o,
            ),
            other => usage(&format!("unknown transport {other}")),
        };
        match r {
            Ok(r) => println!(
                "{:<28} {:>9.2} µs {:>9.2} µs  {}",
                r.name,
                r.median.as_secs_f64() * 1e6,
                r.p99.as_secs_f64() * 1e6,
                r.extra
            ),
            Err(e) => println!("{which:<28} failed: {e}"),
        }
    }
}
