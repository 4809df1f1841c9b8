//! llc-ping-demo: builds a two-namespace veth testbed, then measures in one
//! run the 64-byte one-way latency (RTT/2) of
//! - llc-ping link level (802.2 TEST answered by the stack's endpoint),
//! - llc-ping reliable (echo through the reliable transport),
//!
//! each over every LLC backend asked for (AF_PACKET and AF_XDP by default;
//! both ends use the same backend, the responder is restarted per backend),
//! - a TCP ping-pong with TCP_NODELAY and busy-polling on both ends,
//!
//! interleaved over several rounds, and prints a comparison table.
//! Removes the testbed when done (also on failure).

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde::Serialize;
use testbed::{format_mac, Background, TwoHosts};

#[derive(Parser, Debug)]
#[command(
    name = "llc-ping-demo",
    version,
    about = "Build a two-namespace veth testbed and compare LLC ping latency with busy-polling TCP"
)]
struct Args {
    /// Round trips per measurement.
    #[arg(short = 'c', long, default_value_t = 20_000)]
    count: u64,
    /// Payload bytes per round trip.
    #[arg(short = 's', long, default_value_t = 64)]
    size: usize,
    /// Interleaved rounds; each figure is the median over rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// MTU of the veth pair.
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// LLC backends to measure, comma-separated: llc-ping --backend values,
    /// plus `xdp-generic` (AF_XDP with generic XDP).
    #[arg(long, default_value = "packet,xdp", value_delimiter = ',')]
    backends: Vec<String>,
    /// The llc-ping binary (default: next to this program).
    #[arg(long)]
    llc_ping: Option<PathBuf>,
}

#[derive(Debug, Serialize, Clone)]
struct Figure {
    path: String,
    one_way_median_us: f64,
    rtt_median_us: f64,
    rtt_p99_us: f64,
    rounds_one_way_us: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    mtu: u32,
    size: usize,
    count: u64,
    rounds: usize,
    backends: Vec<String>,
    results: Vec<Figure>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llc-ping-demo: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run(args: &Args) -> Result<()> {
    if let Err(why) = testbed::check_privileges() {
        bail!(
            "this demo builds its own testbed (network namespaces, veth pair, raw sockets) and needs root: {why}.\n\
             Run it as root, e.g. `sudo {}`",
            std::env::args().collect::<Vec<_>>().join(" ")
        );
    }
    if args.rounds == 0 || args.count == 0 || args.size < 8 {
        bail!("--rounds and --count must be positive and --size at least 8");
    }
    let llc_ping = match &args.llc_ping {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("llc-ping"),
    };
    if !llc_ping.exists() {
        bail!(
            "llc-ping not found at {} (build it with `cargo build --release`)",
            llc_ping.display()
        );
    }
    let say = |s: String| {
        if !args.json {
            eprintln!("{s}");
        }
    };
    let hosts = TwoHosts::new(args.mtu).context("building the testbed")?;
    say(format!(
        "testbed: namespaces {} and {}, veth {} <-> {}, MTU {}, {} <-> {}",
        hosts.a.ns.name(),
        hosts.b.ns.name(),
        hosts.a.ifname,
        hosts.b.ifname,
        args.mtu,
        format_mac(&hosts.a.mac),
        format_mac(&hosts.b.mac)
    ));
    let responder = |backend: &str| {
        Background::spawn(
            hosts
                .b
                .ns
                .command(&llc_ping)
                .args(["--respond", "-I", &hosts.b.ifname])
                .args(backend_args(backend)),
            "responding on",
            Duration::from_secs(10),
        )
        .map_err(anyhow::Error::msg)
    };
    let tcp_port = 7000 + (std::process::id() % 1000) as u16;
    let tcp_server = tcp_echo_server(&hosts, tcp_port, args.size)?;

    let peer = format_mac(&hosts.b.mac);
    let nb = args.backends.len();
    let mut link = vec![Vec::new(); nb];
    let mut reliable = vec![Vec::new(); nb];
    let mut names = vec![String::new(); nb];
    let mut tcp = Vec::new();
    for round in 1..=args.rounds {
        say(format!("round {round}/{}", args.rounds));
        for (i, backend) in args.backends.iter().enumerate() {
            let _responder = responder(backend)?;
            let v = llc_ping_json(&hosts, &llc_ping, &peer, args, backend, false)?;
            names[i] = v["backend"].as_str().unwrap_or("?").to_string();
            link[i].push(v);
            reliable[i].push(llc_ping_json(
                &hosts, &llc_ping, &peer, args, backend, true,
            )?);
        }
        let addr = SocketAddr::from((hosts.b.ipv4, tcp_port));
        tcp.push(
            hosts
                .a
                .ns
                .run(|| tcp_ping_pong(addr, args.count, args.size))?,
        );
    }
    drop(tcp_server);

    let fig = |path: String, v: &[serde_json::Value]| {
        let get = |k: &str| -> Vec<f64> {
            v.iter()
                .map(|x| x[k].as_f64().unwrap_or(f64::NAN))
                .collect()
        };
        let rounds = get("one_way_median_us");
        Figure {
            path,
            one_way_median_us: median(&mut rounds.clone()),
            rtt_median_us: median(&mut get("rtt_median_us")),
            rtt_p99_us: median(&mut get("rtt_p99_us")),
            rounds_one_way_us: rounds,
        }
    };
    let tcp_json: Vec<serde_json::Value> = tcp
        .iter()
        .map(|(m, p99)| serde_json::json!({"one_way_median_us": m / 2.0, "rtt_median_us": m, "rtt_p99_us": p99}))
        .collect();
    let mut results = Vec::new();
    for i in 0..nb {
        results.push(fig(
            format!("llc link-level (TEST), {}", names[i]),
            &link[i],
        ));
        results.push(fig(
            format!("llc reliable (echo), {}", names[i]),
            &reliable[i],
        ));
    }
    results.push(fig("tcp busy-poll (NODELAY)".into(), &tcp_json));
    let report = Report {
        mtu: args.mtu,
        size: args.size,
        count: args.count,
        rounds: args.rounds,
        backends: names,
        results,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!();
    println!(
        "{} B one-way latency (RTT/2, median of {} rounds x {} round trips), veth MTU {}",
        args.size, args.rounds, args.count, args.mtu
    );
    println!("| path | one-way median µs | RTT median µs | RTT p99 µs | vs TCP |");
    println!("|---|---:|---:|---:|---:|");
    let tcp_ow = report.results.last().expect("tcp row").one_way_median_us;
    for f in &report.results {
        println!(
            "| {} | {:.2} | {:.2} | {:.1} | {:.2}x |",
            f.path,
            f.one_way_median_us,
            f.rtt_median_us,
            f.rtt_p99_us,
            f.one_way_median_us / tcp_ow
        );
    }
    Ok(())
}

/// llc-ping arguments selecting `backend` (see `Args::backends`).
fn backend_args(backend: &str) -> Vec<&str> {
    match backend {
        "xdp-generic" => vec!["--backend", "xdp", "--xdp-attach", "generic"],
        b => vec!["--backend", b],
    }
}

fn llc_ping_json(
    hosts: &TwoHosts,
    bin: &PathBuf,
    peer: &str,
    args: &Args,
    backend: &str,
    reliable: bool,
) -> Result<serde_json::Value> {
    let mut cmd: Command = hosts.a.ns.command("timeout");
    cmd.arg("300")
        .arg(bin)
        .args(["-I", &hosts.a.ifname, "-i", "0", "-q", "--json"])
        .args(backend_args(backend));
    cmd.args(["-c", &args.count.to_string(), "-s", &args.size.to_string()]);
    if reliable {
        cmd.arg("--reliable");
    }
    cmd.arg(peer);
    let out = cmd.output().context("running llc-ping")?;
    if !out.status.success() {
        bail!(
            "llc-ping{} failed: {}{}",
            if reliable { " --reliable" } else { "" },
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("llc-ping printed no JSON")?;
    if v["received"] != v["transmitted"] {
        bail!("llc-ping lost round trips: {v}");
    }
    Ok(v)
}

/// Set SO_BUSY_POLL (µs) so the kernel polls the device in recv as well.
fn busy_poll(s: &impl AsRawFd, usecs: libc::c_int) {
    // SAFETY: setsockopt on a valid, owned socket fd with a pointer to a
    // c_int that lives for the call and its exact size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_BUSY_POLL,
            &usecs as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        eprintln!(
            "llc-ping-demo: SO_BUSY_POLL not set: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Read exactly `buf.len()` bytes from a non-blocking socket, spinning.
fn spin_read(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(ErrorKind::TimedOut.into());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

struct TcpServer {
    _thread: std::thread::JoinHandle<()>,
}

fn tcp_echo_server(hosts: &TwoHosts, port: u16, size: usize) -> Result<TcpServer> {
    let ip: Ipv4Addr = hosts.b.ipv4;
    let listener = hosts
        .b
        .ns
        .run(move || TcpListener::bind((ip, port)))
        .context("binding the TCP echo server")?;
    let thread = std::thread::spawn(move || {
        // One connection per round; each is served until the client closes it.
        while let Ok((mut s, _)) = listener.accept() {
            let _ = s.set_nodelay(true);
            let _ = s.set_nonblocking(true);
            busy_poll(&s, 50);
            let mut buf = vec![0u8; size];
            loop {
                let far = Instant::now() + Duration::from_secs(60);
                if spin_read(&mut s, &mut buf, far).is_err() || s.write_all(&buf).is_err() {
                    break;
                }
            }
        }
    });
    Ok(TcpServer { _thread: thread })
}

/// Returns (median RTT µs, p99 RTT µs).
fn tcp_ping_pong(addr: SocketAddr, count: u64, size: usize) -> Result<(f64, f64)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .context("connecting to the TCP echo server")?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    busy_poll(&s, 50);
    let mut buf = vec![0u8; size];
    let mut rtts = Vec::with_capacity(count as usize);
    for i in 0..count {
        buf[..8].copy_from_slice(&i.to_be_bytes());
        let t0 = Instant::now();
        s.write_all(&buf)?;
        spin_read(&mut s, &mut buf, t0 + Duration::from_secs(5))
            .context("TCP echo did not come back")?;
        rtts.push(t0.elapsed().as_nanos() as f64 / 1000.0);
        if buf[..8] != i.to_be_bytes() {
            bail!("TCP echo returned the wrong data");
        }
    }
    rtts.sort_by(f64::total_cmp);
    let q = |p: f64| rtts[((rtts.len() - 1) as f64 * p) as usize];
    Ok((q(0.5), q(0.99)))
}
