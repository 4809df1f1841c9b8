//! Message-layer measurements between two network namespaces joined by a
//! veth pair (needs root): the eager/rendezvous crossover that chose the
//! default `eager_limit`, and computation/communication overlap with the
//! progress thread on and off.
//!
//! `cargo run --release -p bench --example msg_bench -- [packet|xdp|tcp-uring|tcp-uring-coop|tcp] [MTU]`

use std::time::{Duration, Instant};

use std::net::SocketAddr;

use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::transport::spec::Backend;
use msg_layer::transport::tcp::{TcpConfig, TcpSocketTransport, TcpUringTransport};
use msg_layer::transport::Transport;
use msg_layer::{Config, Endpoint, PeerId, Source, Tag};
use testbed::netns::{Host, TwoHosts};

const WAIT: Option<Duration> = Some(Duration::from_secs(30));

/// Which transport to measure.
#[derive(Copy, Clone, Debug)]
enum Which {
    Llc(Backend),
    TcpUring,
    TcpUringCoop,
    TcpSocket,
}

/// An endpoint on `host`, created (and later introduced) inside its namespace.
fn open<T: Transport>(host: &Host, cfg: &Config, mk: &(impl Fn(&Host) -> T + Sync)) -> Endpoint<T> {
    let t = host.ns.run(|| mk(host));
    Endpoint::new(t, cfg.clone()).expect("endpoint")
}

fn introduce<T: Transport>(bed: &TwoHosts, a: &Endpoint<T>, b: &Endpoint<T>) -> (PeerId, PeerId) {
    let (aa, ba) = (a.local_addr(), b.local_addr());
    let pb = bed.a.ns.run(|| a.add_peer(&ba)).unwrap();
    let pa = bed.b.ns.run(|| b.add_peer(&aa)).unwrap();
    (pb, pa)
}

/// Median one-way time of `reps` ping-pongs of `len` bytes.
fn pingpong<T: Transport>(
    a: &Endpoint<T>,
    b: &Endpoint<T>,
    pb: PeerId,
    pa: PeerId,
    len: usize,
    reps: usize,
) -> Duration {
    let data = bytes::Bytes::from(vec![7u8; len]);
    let mut samples = Vec::with_capacity(reps);
    std::thread::scope(|s| {
        let echo = data.clone();
        s.spawn(move || {
            for _ in 0..reps + 10 {
                b.recv(Source::Peer(pa), Tag::Is(1), 0, vec![0; len], WAIT)
                    .unwrap();
                b.send(pa, 1, 0, echo.clone(), WAIT).unwrap();
            }
        });
        for i in 0..reps + 10 {
            let t0 = Instant::now();
            let r = a.irecv(Source::Peer(pb), Tag::Is(1), 0, vec![0; len]);
            a.send(pb, 1, 0, data.clone(), WAIT).unwrap();
            a.wait_timeout(r, WAIT).unwrap();
            if i >= 10 {
                samples.push(t0.elapsed() / 2);
            }
        }
    });
    samples.sort();
    samples[samples.len() / 2]
}

/// Spin for `d`, touching memory like a compute kernel would.
fn compute(d: Duration) -> u64 {
    let t0 = Instant::now();
    let mut x = 0u64;
    while t0.elapsed() < d {
        for i in 0..1000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
    }
    x
}

/// Fraction of the plain transfer time a sender spends in `wait` after
/// computing for longer than the transfer takes.
fn overlap<T: Transport>(
    a: &Endpoint<T>,
    b: &Endpoint<T>,
    pb: PeerId,
    pa: PeerId,
    len: usize,
    reps: usize,
) -> (Duration, Duration) {
    let data = bytes::Bytes::from(vec![3u8; len]);
    let mut plain = Vec::new();
    let mut waited = Vec::new();
    std::thread::scope(|s| {
        s.spawn(move || {
            for _ in 0..2 * reps {
                b.recv(Source::Peer(pa), Tag::Is(2), 0, vec![0; len], WAIT)
                    .unwrap();
                b.send(pa, 3, 0, vec![0u8; 1], WAIT).unwrap();
            }
        });
        for _ in 0..reps {
            let t0 = Instant::now();
            a.send(pb, 2, 0, data.clone(), WAIT).unwrap();
            plain.push(t0.elapsed());
            a.recv(Source::Peer(pb), Tag::Is(3), 0, vec![0; 1], WAIT)
                .unwrap();
        }
        plain.sort();
        let t_x = plain[plain.len() / 2];
        for _ in 0..reps {
            let r = a.isend(pb, 2, 0, data.clone());
            std::hint::black_box(compute(t_x * 2));
            let t0 = Instant::now();
            a.wait_timeout(r, WAIT).unwrap();
            waited.push(t0.elapsed());
            a.recv(Source::Peer(pb), Tag::Is(3), 0, vec![0; 1], WAIT)
                .unwrap();
        }
    });
    waited.sort();
    (plain[plain.len() / 2], waited[waited.len() / 2])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = match args.next().as_deref().unwrap_or("packet") {
        "packet" => Which::Llc(Backend::Packet),
        "xdp" => Which::Llc(Backend::Xdp),
        "tcp-uring" => Which::TcpUring,
        "tcp-uring-coop" => Which::TcpUringCoop,
        "tcp" => Which::TcpSocket,
        other => panic!("unknown transport {other}: packet, xdp, tcp-uring or tcp"),
    };
    let mtu: u32 = args.next().map(|s| s.parse().expect("MTU")).unwrap_or(9000);
    let bed = TwoHosts::new(mtu).expect("testbed (needs root)");
    let tcp_addr = |h: &Host| SocketAddr::new(h.ipv4.into(), 0);
    match which {
        Which::Llc(backend) => run(&bed, &format!("llc/{backend}"), mtu, &|h: &Host| {
            LlcTransport::open(&h.ifname, backend, 7, LlcConfig::default()).expect("open the link")
        }),
        Which::TcpUring => run(&bed, "tcp/io_uring", mtu, &|h: &Host| {
            TcpUringTransport::bind(tcp_addr(h), TcpConfig::default()).expect("bind")
        }),
        Which::TcpUringCoop => run(&bed, "tcp/io_uring (coop taskrun)", mtu, &|h: &Host| {
            let cfg = TcpConfig {
                uring_coop_taskrun: true,
                ..TcpConfig::default()
            };
            TcpUringTransport::bind(tcp_addr(h), cfg).expect("bind")
        }),
        Which::TcpSocket => run(&bed, "tcp/socket", mtu, &|h: &Host| {
            TcpSocketTransport::bind(tcp_addr(h), TcpConfig::default()).expect("bind")
        }),
    }
}

fn run<T: Transport>(bed: &TwoHosts, name: &str, mtu: u32, mk: &(impl Fn(&Host) -> T + Sync)) {
    println!("# eager vs rendezvous, {name} MTU {mtu}: median one-way latency (µs)");
    println!("{:>8} {:>10} {:>12}", "bytes", "eager", "rendezvous");
    let eager_cfg = Config {
        eager_limit: 63 << 10,
        ..Config::default()
    };
    let rndv_cfg = Config {
        eager_limit: 0,
        ..Config::default()
    };
    // One endpoint pair at a time: endpoints on one interface must not
    // share a port.
    let sizes = [
        256,
        1024,
        2048,
        4096,
        8192,
        12288,
        16384,
        24576,
        32768,
        49152,
        63 << 10,
    ];
    let mut results = Vec::new();
    for cfg in [&eager_cfg, &rndv_cfg] {
        let (a, b) = (open(&bed.a, cfg, mk), open(&bed.b, cfg, mk));
        let (pb, pa) = introduce(bed, &a, &b);
        results.push(sizes.map(|len| pingpong(&a, &b, pb, pa, len, 2000)));
    }
    for (i, len) in sizes.iter().enumerate() {
        println!(
            "{len:>8} {:>10.2} {:>12.2}",
            results[0][i].as_secs_f64() * 1e6,
            results[1][i].as_secs_f64() * 1e6
        );
    }

    println!("\n# overlap, {name} MTU {mtu}: 1 MiB isend, compute 2x the transfer time, wait");
    println!(
        "{:>16} {:>14} {:>14} {:>10}",
        "progress thread", "transfer µs", "in wait µs", "wait/xfer"
    );
    for thread in [false, true] {
        let sender = Config {
            progress_thread: thread,
            ..Config::default()
        };
        let a = open(&bed.a, &sender, mk);
        let b = open(&bed.b, &Config::default(), mk);
        let (pb, pa) = introduce(bed, &a, &b);
        let (t_x, w) = overlap(&a, &b, pb, pa, 1 << 20, 50);
        println!(
            "{:>16} {:>14.1} {:>14.1} {:>9.0}%",
            if thread { "on" } else { "off" },
            t_x.as_secs_f64() * 1e6,
            w.as_secs_f64() * 1e6,
            100.0 * w.as_secs_f64() / t_x.as_secs_f64()
        );
    }
}
