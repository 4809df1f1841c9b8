//! The seed's BMI benchmarks on the multi-host bed.
//!
//! - `bmi_bench serverload` (root): the many-to-one server load of seed
//!   004. One server on host 0; 2 to 64 client processes spread over the
//!   other hosts, started together (each says hello, the server answers
//!   all at once); each client sends a small unexpected request and
//!   receives a reply of 10 KB or 100 KB, many rounds. Per client: min,
//!   average and max round-trip latency and its throughput; overall:
//!   aggregate throughput and the spread between clients. bmi_llc and
//!   bmi_tcp alternate in the same run.
//! - `bmi_bench stream` (root): the seed's streaming bandwidth sweep: one
//!   sender posts `--window` messages at a time to one receiver, message
//!   sizes 1 KB to 1 MB, over bmi_llc, bmi_tcp and a plain TCP socket
//!   (`TCP_NODELAY`, one `write` per message: the seed's ttcp).
//! - `server`, `client`, `stream-recv`, `stream-send`, `tcp-recv`,
//!   `tcp-send`: the processes the two above start in the bed's hosts.
//!
//! `cargo build --release -p bench --example bmi_bench && target/release/examples/bmi_bench serverload`

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use bmi::{Bmi, BmiAddr, InitFlags, Posted};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The many-to-one server load on a bed it builds (root).
    Serverload {
        /// Client counts to run.
        #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
        clients: Vec<usize>,
        /// Reply sizes in bytes.
        #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
        reply: Vec<usize>,
        /// Round trips each client times.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
        /// Hosts of the bed (the server on the first, clients on the others).
        #[arg(long, default_value_t = 4)]
        hosts: usize,
        /// MTU of the bed's links.
        #[arg(long, default_value_t = 9000)]
        mtu: u32,
        /// Methods, in the order each repetition runs them.
        #[arg(long, value_delimiter = ',', default_value = "bmi_llc,bmi_tcp")]
        methods: Vec<String>,
        /// LLC backend (auto: AF_XDP, and AF_PACKET for the clients beyond
        /// the 16 a NIC's shared AF_XDP pool takes).
        #[arg(long, default_value = "auto")]
        backend: String,
        /// Times every configuration runs (methods alternating).
        #[arg(long, default_value_t = 1)]
        repeat: usize,
        /// How long the server busy-polls before sleeping (BMI_SPIN_US;
        /// default: BMI's).
        #[arg(long)]
        server_spin_us: Option<u64>,
        /// How long each client busy-polls before sleeping.
        #[arg(long)]
        client_spin_us: Option<u64>,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// The streaming bandwidth sweep on a two-host bed it builds (root).
    Stream {
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "1000,4000,10000,16000,64000,100000,256000,1000000"
        )]
        sizes: Vec<usize>,
        /// Bytes moved per size.
        #[arg(long, default_value_t = 100_000_000)]
        total: usize,
        /// Messages in flight.
        #[arg(long, default_value_t = 16)]
        window: usize,
        #[arg(long, default_value_t = 9000)]
        mtu: u32,
        #[arg(long, default_value = "xdp")]
        backend: String,
        #[arg(long, default_value_t = 2)]
        repeat: usize,
        #[arg(long)]
        json: bool,
    },
    /// The server of one serverload run.
    Server {
        method: String,
        listen: String,
        clients: usize,
    },
    /// A client of one serverload run: prints one JSON line of its figures.
    Client {
        method: String,
        server: String,
        id: usize,
        rounds: usize,
        reply: usize,
    },
    /// The receiving side of one stream run.
    StreamRecv {
        method: String,
        listen: String,
        size: usize,
        count: usize,
        window: usize,
    },
    /// The sending side of one stream run: prints one JSON line.
    StreamSend {
        method: String,
        server: String,
        size: usize,
        count: usize,
        window: usize,
    },
    /// Plain TCP receiver (the seed's ttcp).
    TcpRecv {
        listen: String,
        size: usize,
        count: usize,
    },
    /// Plain TCP sender: prints one JSON line.
    TcpSend {
        server: String,
        size: usize,
        count: usize,
    },
}

const T_HELLO: i32 = 1;
const T_GO: i32 = 2;
const T_REQ: i32 = 3;
const T_REPLY: i32 = 4;
const T_DONE: i32 = 5;
const T_DATA: i32 = 6;
const WARMUP: usize = 20;
const WAIT: Duration = Duration::from_secs(120);

/// One client's figures.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct ClientFigures {
    id: usize,
    rounds: usize,
    min_us: f64,
    avg_us: f64,
    max_us: f64,
    /// Reply bytes per second of this client over its timed rounds.
    mbytes_per_s: f64,
    /// Wall-clock start and end of the timed rounds (microseconds since
    /// the epoch; every process of the bed shares the machine's clock).
    start_us: u64,
    end_us: u64,
    bytes: u64,
    /// The transport under the method (AF_XDP or AF_PACKET for bmi_llc).
    #[serde(default)]
    transport: String,
    /// Retransmissions, drops and timeouts the client's endpoint counted
    /// (the non-zero ones).
    #[serde(default)]
    trouble: BTreeMap<String, u64>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn init(method: &str, listen: Option<&str>) -> Result<Bmi> {
    Bmi::initialize(
        method,
        listen,
        InitFlags {
            server: listen.is_some(),
            ..InitFlags::default()
        },
    )
    .with_context(|| format!("BMI_initialize({method}, {listen:?})"))
}

/// Wait for a post.
fn complete(b: &Bmi, p: Posted, ctx: i32) -> Result<bmi::Done> {
    match p {
        Posted::Now(d) => Ok(d),
        Posted::Pending(op) => b
            .test(op, ctx, WAIT)?
            .with_context(|| format!("operation {op} did not complete in {WAIT:?}")),
    }
}

fn server(method: &str, listen: &str, clients: usize) -> Result<()> {
    let b = init(method, Some(listen))?;
    let ctx = b.open_context();
    println!("ready");
    std::io::stdout().flush()?;
    // Everyone says hello; then everyone starts at once.
    let mut peers: Vec<BmiAddr> = Vec::new();
    while peers.len() < clients {
        for u in b.testunexpected(64, WAIT)? {
            anyhow::ensure!(u.tag == T_HELLO, "expected hello, got tag {}", u.tag);
            peers.push(u.addr);
            b.unexpected_free(u);
        }
    }
    for &p in &peers {
        complete(&b, b.post_send(p, vec![0u8; 8], T_GO, 0, ctx)?, ctx)?;
    }
    let mut replies: BTreeMap<usize, bytes::Bytes> = BTreeMap::new();
    let mut done = 0;
    let mut pending = 0usize;
    while done < clients || pending > 0 {
        // Wait (spinning briefly, then asleep until the NIC has something)
        // only when no reply is in flight: then a request is all there is to do.
        let idle = if pending > 0 {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        };
        for u in b.testunexpected(64, idle)? {
            match u.tag {
                T_REQ => {
                    let data = u
                        .result
                        .as_ref()
                        .map_err(|e| anyhow::anyhow!("{e}"))?
                        .data();
                    let size = u64::from_le_bytes(data[..8].try_into()?) as usize;
                    let body = replies
                        .entry(size)
                        .or_insert_with(|| bytes::Bytes::from(vec![0x5a; size]))
                        .clone();
                    if let Posted::Pending(_) = b.post_send(u.addr, body, T_REPLY, 0, ctx)? {
                        pending += 1;
                    }
                }
                T_DONE => done += 1,
                t => bail!("unexpected tag {t}"),
            }
            b.unexpected_free(u);
        }
        // Drain every completion each call (the seed's lesson).
        if pending > 0 {
            for d in b.testcontext(64, ctx, Duration::ZERO)? {
                d.result.map_err(|e| anyhow::anyhow!("reply: {e}"))?;
                pending -= 1;
            }
        }
    }
    // What went wrong on the server's side (its receive drops, its
    // repairs), for the report next to the clients'.
    println!("trouble {}", serde_json::to_string(&trouble(&b))?);
    println!("server done");
    Ok(())
}

/// The counters that say something went wrong (retransmissions, drops,
/// timeouts, stalls) and are not zero.
fn trouble(b: &Bmi) -> BTreeMap<String, u64> {
    b.counters()
        .into_iter()
        .filter(|(k, v)| {
            *v > 0
                && ["retrans", "drop", "timeout", "stall"]
                    .iter()
                    .any(|w| k.contains(w))
        })
        .collect()
}

fn client(method: &str, server: &str, id: usize, rounds: usize, reply: usize) -> Result<()> {
    let b = init(method, None)?;
    let ctx = b.open_context();
    let s = b.addr_lookup(server)?;
    complete(
        &b,
        b.post_sendunexpected(s, vec![0u8; 8], T_HELLO, 0, ctx)?,
        ctx,
    )?;
    complete(&b, b.post_recv(s, 8, T_GO, 0, ctx)?, ctx)?;
    let req = (reply as u64).to_le_bytes().repeat(8);
    let mut times = Vec::with_capacity(rounds);
    let mut start_us = 0;
    let t_start = Instant::now();
    let mut t_timed = t_start;
    for r in 0..WARMUP + rounds {
        if r == WARMUP {
            start_us = now_us();
            t_timed = Instant::now();
        }
        let t0 = Instant::now();
        let rp = b.post_recv(s, reply as u64, T_REPLY, 0, ctx)?;
        complete(
            &b,
            b.post_sendunexpected(s, req.clone(), T_REQ, 0, ctx)?,
            ctx,
        )?;
        let d = complete(&b, rp, ctx)?;
        anyhow::ensure!(d.result == Ok(reply as u64), "reply {:?}", d.result);
        if r >= WARMUP {
            times.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    let secs = t_timed.elapsed().as_secs_f64();
    let end_us = now_us();
    complete(
        &b,
        b.post_sendunexpected(s, vec![0u8; 8], T_DONE, 0, ctx)?,
        ctx,
    )?;
    let bytes = (reply * rounds) as u64;
    let f = ClientFigures {
        id,
        rounds,
        min_us: times.iter().copied().fold(f64::MAX, f64::min),
        avg_us: times.iter().sum::<f64>() / times.len() as f64,
        max_us: times.iter().copied().fold(0.0, f64::max),
        mbytes_per_s: bytes as f64 / secs / 1e6,
        start_us,
        end_us,
        bytes,
        transport: b
            .transports()
            .first()
            .map(|t| t.1.clone())
            .unwrap_or_default(),
        trouble: trouble(&b),
    };
    println!("{}", serde_json::to_string(&f)?);
    Ok(())
}

fn stream_recv(method: &str, listen: &str, size: usize, count: usize, window: usize) -> Result<()> {
    let b = init(method, Some(listen))?;
    let ctx = b.open_context();
    println!("ready");
    std::io::stdout().flush()?;
    let mut hello = b.testunexpected(1, WAIT)?;
    anyhow::ensure!(hello.len() == 1, "no sender");
    let from = hello.remove(0).addr;
    let mut posted = 0;
    let mut received = 0;
    while received < count {
        while posted < count && posted - received < window {
            match b.post_recv(from, size as u64, T_DATA, 0, ctx)? {
                Posted::Now(_) => received += 1,
                Posted::Pending(_) => {}
            }
            posted += 1;
        }
        if received == count {
            break;
        }
        for d in b.testcontext(window, ctx, WAIT)? {
            anyhow::ensure!(d.result == Ok(size as u64), "{:?}", d.result);
            received += 1;
        }
    }
    complete(&b, b.post_send(from, vec![1u8; 8], T_DONE, 0, ctx)?, ctx)?;
    println!("received {count}");
    Ok(())
}

fn stream_send(method: &str, server: &str, size: usize, count: usize, window: usize) -> Result<()> {
    let b = init(method, None)?;
    let ctx = b.open_context();
    let s = b.addr_lookup(server)?;
    complete(
        &b,
        b.post_sendunexpected(s, vec![0u8; 8], T_HELLO, 0, ctx)?,
        ctx,
    )?;
    let body = bytes::Bytes::from(vec![0x33u8; size]);
    let t0 = Instant::now();
    let mut sent = 0;
    let mut done = 0;
    while done < count {
        while sent < count && sent - done < window {
            if let Posted::Now(_) = b.post_send(s, body.clone(), T_DATA, 0, ctx)? {
                done += 1;
            }
            sent += 1;
        }
        // The last posts may all have completed at once.
        if done == count {
            break;
        }
        for d in b.testcontext(window, ctx, WAIT)? {
            d.result.map_err(|e| anyhow::anyhow!("{e}"))?;
            done += 1;
        }
    }
    // The receiver has everything once its done message arrives.
    complete(&b, b.post_recv(s, 8, T_DONE, 0, ctx)?, ctx)?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"size": size, "count": count, "mbytes_per_s": (size * count) as f64 / secs / 1e6})
    );
    Ok(())
}

fn tcp_recv(listen: &str, size: usize, count: usize) -> Result<()> {
    let l = std::net::TcpListener::bind(listen)?;
    println!("ready");
    std::io::stdout().flush()?;
    let (mut s, _) = l.accept()?;
    s.set_nodelay(true)?;
    let mut buf = vec![0u8; size];
    for _ in 0..count {
        s.read_exact(&mut buf)?;
    }
    s.write_all(&[1u8; 8])?;
    Ok(())
}

fn tcp_send(server: &str, size: usize, count: usize) -> Result<()> {
    let mut s = std::net::TcpStream::connect(server)?;
    s.set_nodelay(true)?;
    let buf = vec![0x33u8; size];
    let t0 = Instant::now();
    for _ in 0..count {
        s.write_all(&buf)?;
    }
    let mut ack = [0u8; 8];
    s.read_exact(&mut ack)?;
    let secs = t0.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"size": size, "count": count, "mbytes_per_s": (size * count) as f64 / secs / 1e6})
    );
    Ok(())
}

// ----- the bed -----

fn mac(c: &testbed::Cluster, i: usize) -> String {
    c.hosts()[i]
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A process of this program in host `h`'s network namespace (not a PID
/// namespace of its own: one host's processes share its NIC's XDP program).
fn on_host(c: &testbed::Cluster, h: usize, exe: &Path, backend: &str) -> Command {
    let mut cmd = c.hosts()[h].ns.command(exe);
    cmd.env("BMI_LLC_IFACE", "eth0")
        .env("BMI_LLC_BACKEND", backend);
    cmd
}

/// Server and listen addresses of `method` on host 0.
fn addresses(c: &testbed::Cluster, method: &str, backend: &str, port: u16) -> (String, String) {
    if method == "bmi_llc" {
        (
            format!("[{}]:{port}", mac(c, 0)),
            format!("llc://eth0?port={port}&backend={backend}"),
        )
    } else {
        let ip = c.hosts()[0].ipv4;
        (format!("{ip}:{port}"), format!("tcp://{ip}:{port}"))
    }
}

#[derive(Serialize)]
struct LoadRun {
    method: String,
    clients: usize,
    reply: usize,
    rounds: usize,
    min_us: f64,
    avg_us: f64,
    max_us: f64,
    /// Per-client average latency: the best and the worst client.
    best_client_avg_us: f64,
    worst_client_avg_us: f64,
    /// Max over min of the clients' throughputs (1: perfectly fair).
    spread: f64,
    aggregate_mbytes_per_s: f64,
    per_client: Vec<ClientFigures>,
    /// The server's counters that say something went wrong.
    server_trouble: BTreeMap<String, u64>,
}

#[allow(clippy::too_many_arguments)]
fn serverload(
    clients: &[usize],
    replies: &[usize],
    rounds: usize,
    hosts: usize,
    mtu: u32,
    methods: &[String],
    backend: &str,
    repeat: usize,
    spin: (Option<u64>, Option<u64>),
    json: bool,
) -> Result<()> {
    testbed::check_privileges()
        .map_err(|w| anyhow::anyhow!("serverload builds namespaces: {w}"))?;
    anyhow::ensure!(
        hosts >= 2,
        "need a server host and at least one client host"
    );
    let exe = std::env::current_exe()?;
    let cluster = testbed::Cluster::new(hosts, mtu)?;
    let mut runs: Vec<LoadRun> = Vec::new();
    let mut port = 4000u16;
    for _ in 0..repeat {
        for &reply in replies {
            for &n in clients {
                for method in methods {
                    port += 1;
                    let (saddr, listen) = addresses(&cluster, method, backend, port);
                    let mut s = on_host(&cluster, 0, &exe, backend);
                    s.args(["server", method, &listen, &n.to_string()]);
                    if let Some(us) = spin.0 {
                        s.env("BMI_SPIN_US", us.to_string());
                    }
                    let mut server =
                        testbed::Background::spawn(&mut s, "ready", Duration::from_secs(60))
                            .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let jobs: Vec<_> = (0..n)
                        .map(|i| {
                            let h = 1 + i % (hosts - 1);
                            let mut cmd = on_host(&cluster, h, &exe, backend);
                            if let Some(us) = spin.1 {
                                cmd.env("BMI_SPIN_US", us.to_string());
                            }
                            cmd.args(["client", method, &saddr]).args([
                                i.to_string(),
                                rounds.to_string(),
                                reply.to_string(),
                            ]);
                            std::thread::spawn(move || {
                                testbed::run_bounded(&mut cmd, Duration::from_secs(600))
                            })
                        })
                        .collect();
                    let mut per_client = Vec::new();
                    for j in jobs {
                        let out = j.join().expect("client thread")?;
                        if !out.success() {
                            bail!(
                                "{method} client failed:\n{out}\n--- server:\n{}",
                                server.output()
                            );
                        }
                        let line = out
                            .stdout
                            .lines()
                            .find(|l| l.starts_with('{'))
                            .context("client figures")?;
                        per_client.push(serde_json::from_str::<ClientFigures>(line)?);
                    }
                    let status = server.wait_timeout(Duration::from_secs(60));
                    anyhow::ensure!(
                        status.is_some_and(|s| s.success()),
                        "server: {}",
                        server.output()
                    );
                    let server_trouble = server
                        .output()
                        .lines()
                        .find_map(|l| l.strip_prefix("trouble "))
                        .map(serde_json::from_str)
                        .transpose()?
                        .unwrap_or_default();
                    per_client.sort_by_key(|c| c.id);
                    let start = per_client.iter().map(|c| c.start_us).min().unwrap_or(0);
                    let end = per_client.iter().map(|c| c.end_us).max().unwrap_or(1);
                    let bytes: u64 = per_client.iter().map(|c| c.bytes).sum();
                    let tp: Vec<f64> = per_client.iter().map(|c| c.mbytes_per_s).collect();
                    let avgs: Vec<f64> = per_client.iter().map(|c| c.avg_us).collect();
                    let run = LoadRun {
                        method: method.clone(),
                        clients: n,
                        reply,
                        rounds,
                        min_us: per_client.iter().map(|c| c.min_us).fold(f64::MAX, f64::min),
                        avg_us: avgs.iter().sum::<f64>() / n as f64,
                        max_us: per_client.iter().map(|c| c.max_us).fold(0.0, f64::max),
                        best_client_avg_us: avgs.iter().copied().fold(f64::MAX, f64::min),
                        worst_client_avg_us: avgs.iter().copied().fold(0.0, f64::max),
                        spread: tp.iter().copied().fold(0.0, f64::max)
                            / tp.iter().copied().fold(f64::MAX, f64::min),
                        aggregate_mbytes_per_s: bytes as f64 / ((end - start).max(1) as f64),
                        per_client,
                        server_trouble,
                    };
                    eprintln!(
                        "{method} {n} clients, {reply} B: avg {:.1} us, aggregate {:.0} MB/s, spread {:.2}",
                        run.avg_us, run.aggregate_mbytes_per_s, run.spread
                    );
                    runs.push(run);
                }
            }
        }
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"bench": "serverload", "hosts": hosts, "mtu": mtu, "backend": backend, "runs": runs})
        );
        return Ok(());
    }
    println!("Many-to-one server load: 1 server on h0, clients on h1..h{}, MTU {mtu}, LLC backend {backend}", hosts - 1);
    println!("| reply | clients | method | min (us) | avg (us) | max (us) | best/worst client avg (us) | max/min client throughput | aggregate MB/s | llc/tcp avg latency | llc/tcp aggregate |");
    println!("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &reply in replies {
        for &n in clients {
            let pick = |m: &str| {
                runs.iter()
                    .filter(|r| r.method == m && r.clients == n && r.reply == reply)
                    .collect::<Vec<_>>()
            };
            let llc = pick("bmi_llc");
            let tcp = pick("bmi_tcp");
            let mean = |v: &[&LoadRun], f: fn(&LoadRun) -> f64| {
                v.iter().map(|r| f(r)).sum::<f64>() / v.len().max(1) as f64
            };
            for m in methods {
                for r in pick(m) {
                    let ratio = if m == "bmi_llc" && !tcp.is_empty() {
                        format!(
                            "{:.2}x | {:.2}x",
                            mean(&llc, |r| r.avg_us) / mean(&tcp, |r| r.avg_us),
                            mean(&llc, |r| r.aggregate_mbytes_per_s)
                                / mean(&tcp, |r| r.aggregate_mbytes_per_s)
                        )
                    } else {
                        " | ".into()
                    };
                    println!(
                        "| {reply} | {n} | {m} | {:.1} | {:.1} | {:.1} | {:.1} / {:.1} | {:.2} | {:.0} | {ratio} |",
                        r.min_us, r.avg_us, r.max_us, r.best_client_avg_us, r.worst_client_avg_us, r.spread, r.aggregate_mbytes_per_s
                    );
                }
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn stream(
    sizes: &[usize],
    total: usize,
    window: usize,
    mtu: u32,
    backend: &str,
    repeat: usize,
    json: bool,
) -> Result<()> {
    testbed::check_privileges().map_err(|w| anyhow::anyhow!("stream builds namespaces: {w}"))?;
    let exe = std::env::current_exe()?;
    let cluster = testbed::Cluster::new(2, mtu)?;
    let mut port = 5000u16;
    let kinds = ["bmi_llc", "bmi_tcp", "tcp"];
    let mut res: BTreeMap<(usize, &str), Vec<f64>> = BTreeMap::new();
    for _ in 0..repeat {
        for &size in sizes {
            let count = (total / size).max(10);
            for kind in kinds {
                port += 1;
                let (saddr, listen, recv, send) = if kind == "tcp" {
                    let a = format!("{}:{port}", cluster.hosts()[0].ipv4);
                    (
                        a.clone(),
                        a,
                        vec!["tcp-recv".to_string()],
                        vec!["tcp-send".to_string()],
                    )
                } else {
                    let (s, l) = addresses(&cluster, kind, backend, port);
                    (
                        s,
                        l,
                        vec!["stream-recv".into(), kind.to_string()],
                        vec!["stream-send".into(), kind.to_string()],
                    )
                };
                let mut r = on_host(&cluster, 0, &exe, backend);
                r.args(&recv)
                    .arg(&listen)
                    .args([size.to_string(), count.to_string()]);
                let mut s = on_host(&cluster, 1, &exe, backend);
                s.args(&send)
                    .arg(&saddr)
                    .args([size.to_string(), count.to_string()]);
                if kind != "tcp" {
                    r.arg(window.to_string());
                    s.arg(window.to_string());
                }
                let mut receiver =
                    testbed::Background::spawn(&mut r, "ready", Duration::from_secs(60))
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                let out = testbed::run_bounded(&mut s, Duration::from_secs(300))?;
                if !out.success() {
                    bail!("{kind} {size}: {out}\n--- receiver:\n{}", receiver.output());
                }
                receiver.wait_timeout(Duration::from_secs(30));
                let line = out
                    .stdout
                    .lines()
                    .find(|l| l.starts_with('{'))
                    .context("figures")?;
                let v: serde_json::Value = serde_json::from_str(line)?;
                res.entry((size, kind))
                    .or_default()
                    .push(v["mbytes_per_s"].as_f64().unwrap_or(0.0));
            }
        }
    }
    let med = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    if json {
        let rows: Vec<_> = res
            .iter()
            .map(|((size, kind), v)| serde_json::json!({"size": size, "kind": kind, "mbytes_per_s": med(v)}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"bench": "stream", "mtu": mtu, "window": window, "rows": rows})
        );
        return Ok(());
    }
    println!("Streaming bandwidth, h1 -> h0, MTU {mtu}, window {window}, median of {repeat} (MB/s, decimal)");
    println!("| size | bmi_llc | bmi_tcp | plain TCP socket | bmi_llc/socket | bmi_tcp/socket |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &size in sizes {
        let g = |k| res.get(&(size, k)).map(med).unwrap_or(0.0);
        let (l, t, s) = (g("bmi_llc"), g("bmi_tcp"), g("tcp"));
        println!(
            "| {size} | {l:.0} | {t:.0} | {s:.0} | {:.2}x | {:.2}x |",
            l / s,
            t / s
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Serverload {
            clients,
            reply,
            rounds,
            hosts,
            mtu,
            methods,
            backend,
            repeat,
            server_spin_us,
            client_spin_us,
            json,
        } => serverload(
            &clients,
            &reply,
            rounds,
            hosts,
            mtu,
            &methods,
            &backend,
            repeat,
            (server_spin_us, client_spin_us),
            json,
        ),
        Cmd::Stream {
            sizes,
            total,
            window,
            mtu,
            backend,
            repeat,
            json,
        } => stream(&sizes, total, window, mtu, &backend, repeat, json),
        Cmd::Server {
            method,
            listen,
            clients,
        } => server(&method, &listen, clients),
        Cmd::Client {
            method,
            server,
            id,
            rounds,
            reply,
        } => client(&method, &server, id, rounds, reply),
        Cmd::StreamRecv {
            method,
            listen,
            size,
            count,
            window,
        } => stream_recv(&method, &listen, size, count, window),
        Cmd::StreamSend {
            method,
            server,
            size,
            count,
            window,
        } => stream_send(&method, &server, size, count, window),
        Cmd::TcpRecv {
            listen,
            size,
            count,
        } => tcp_recv(&listen, size, count),
        Cmd::TcpSend {
            server,
            size,
            count,
        } => tcp_send(&server, size, count),
    }
}
