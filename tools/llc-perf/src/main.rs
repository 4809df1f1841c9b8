//! llc-perf: NetPIPE/OSU-style benchmarks of the message layer over the LLC
//! stack (AF_XDP, AF_PACKET) and kernel TCP (io_uring, sockets), measured
//! in one run, interleaved, on the same kind of link (the demo gives each
//! transport a veth pair of its own, set up as its users would set it).
//!
//! - `llc-perf server -I IFACE` / `llc-perf client -I IFACE PEER...`
//! - `llc-perf demo`: builds a two-namespace veth testbed, runs the server
//!   side itself, measures every transport available, compares with the
//!   fastest TCP, writes the plot and removes the testbed.

mod affinity;
mod bench;
mod driver;
mod floor;
mod incast;
mod plot;
mod proto;
mod report;
mod transports;

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use msg_layer::addr::MacAddr;
use msg_layer::transport::spec::AttachMode;

use driver::{Link, Settings, Test, TransportResult};
use report::{HostInfo, Report};
use transports::{pair_port, Kind, Open, Peers, MAX_PAIRS, SERVER_PORT};

#[derive(Parser, Debug)]
#[command(
    name = "llc-perf",
    version,
    about = "Latency, bandwidth, message rate, CPU overhead and overlap of the message layer over LLC (AF_XDP, AF_PACKET) and kernel TCP (io_uring, sockets), compared in one run",
    after_help = "The main command is `llc-perf demo` (as root): it builds its own two-namespace testbed.\nBetween two hosts: `llc-perf server -I eth0` on one, `llc-perf client -I eth0 MAC IP` on the other.\n\nEnvironment:\n  LLC_AUTH_KEY  per-job key material: the LLC transports then authenticate every\n                frame (docs/SECURITY.md); a server and its clients need the same value"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve clients on IFACE, one endpoint per transport on known ports.
    Server(ServerArgs),
    /// Measure against a server: PEER is its MAC (LLC) and/or its IP (TCP).
    Client(ClientArgs),
    /// Build a two-namespace veth testbed, measure every transport available
    /// and compare with TCP (needs root).
    Demo(DemoArgs),
}

#[derive(Args, Debug)]
struct ServerArgs {
    /// Interface for the LLC transports.
    #[arg(short = 'I', long = "interface")]
    iface: Option<String>,
    /// IP address the TCP endpoints listen on (default: all).
    #[arg(long)]
    ip: Option<IpAddr>,
    /// Transports to serve (default: all that can be opened here).
    #[arg(long, value_delimiter = ',')]
    transport: Vec<Kind>,
    /// Base port: LLC port and tcp-uring's TCP port; tcp uses the next.
    #[arg(long, default_value_t = SERVER_PORT)]
    port: u16,
    /// XDP attach mode of llc-xdp.
    #[arg(long, value_enum, default_value_t = XdpAttach::Auto)]
    xdp_attach: XdpAttach,
    /// Endpoints per transport, for clients measuring the message rate of
    /// several pairs (`--pairs N`): pair i's listens on the base port plus 2i.
    #[arg(long, default_value_t = 1)]
    pairs: usize,
}

/// How llc-xdp attaches the XDP program.
#[derive(clap::ValueEnum, Copy, Clone, Debug, PartialEq, Eq)]
enum XdpAttach {
    /// Native if the driver has it, else generic.
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP only: on veth the faster mode for our frames.
    Generic,
}

impl From<XdpAttach> for AttachMode {
    fn from(a: XdpAttach) -> AttachMode {
        match a {
            XdpAttach::Auto => AttachMode::Auto,
            XdpAttach::Native => AttachMode::Native,
            XdpAttach::Generic => AttachMode::Generic,
        }
    }
}

#[derive(Args, Debug)]
struct Measure {
    /// Tests to run, comma-separated.
    #[arg(long, value_delimiter = ',', value_enum)]
    tests: Vec<Test>,
    /// Interleaved repetitions of every point; figures are medians over them.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Outstanding isends per window in bandwidth tests (Q); default 16,
    /// or 64 with `--format osu` (osu_bw's window).
    #[arg(short = 'Q', long)]
    window: Option<usize>,
    /// Largest message of the sweeps, bytes.
    #[arg(long, default_value_t = 4 << 20)]
    max_size: usize,
    /// Rough duration of one measurement of one point, ms.
    #[arg(long, default_value_t = 20.0)]
    target_ms: f64,
    /// Check every payload byte.
    #[arg(long)]
    verify: bool,
    /// Tiny sweeps, for checking the tool.
    #[arg(long)]
    quick: bool,
    /// Message size of the overlap test.
    #[arg(long, default_value_t = 1 << 20)]
    overlap_bytes: usize,
    /// Sender/receiver pairs of the msgrate test, streaming at the same
    /// time over the same link, each over endpoints of its own and on its
    /// own thread (osu_mbw_mr's pairs); reports the sum of their rates and
    /// each pair's. A server needs as many (`llc-perf server --pairs N`).
    #[arg(long, default_value_t = 1)]
    pairs: usize,
}

#[derive(Args, Debug)]
struct Output {
    /// Print one JSON document (and nothing else on stdout).
    #[arg(long)]
    json: bool,
    /// Print CSV rows (transport, detail, mtu, test, bytes, key, value).
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Output layout: `table` (default), `json`, `csv`, or `osu`: the OSU
    /// micro-benchmarks' layout and units (osu_latency, osu_bw, osu_bibw,
    /// osu_mbw_mr), one block per transport, with powers-of-two sizes,
    /// mean latency and a window of 64, so runs diff against OSU's.
    #[arg(long, value_enum, conflicts_with_all = ["json", "csv"])]
    format: Option<Format>,
    /// Draw latency and bandwidth curves into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

/// What `--format` prints.
#[derive(clap::ValueEnum, Copy, Clone, Debug, PartialEq, Eq)]
enum Format {
    /// Readable tables and the comparison against TCP.
    Table,
    /// One JSON document.
    Json,
    /// CSV rows.
    Csv,
    /// The OSU micro-benchmarks' layout.
    Osu,
}

impl Output {
    /// JSON on stdout (and nothing else): `--json` or `--format json`.
    fn json(&self) -> bool {
        self.json || self.format == Some(Format::Json)
    }

    fn csv(&self) -> bool {
        self.csv || self.format == Some(Format::Csv)
    }

    fn osu(&self) -> bool {
        self.format == Some(Format::Osu)
    }
}

#[derive(Args, Debug)]
struct ClientArgs {
    /// Interface for the LLC transports.
    #[arg(short = 'I', long = "interface")]
    iface: Option<String>,
    /// The server: its MAC address (LLC transports) and/or IP (TCP).
    #[arg(required = true, value_name = "PEER")]
    peer: Vec<String>,
    /// Transports to measure (default: LLC ones when a MAC is given, TCP
    /// ones when an IP is).
    #[arg(long, value_delimiter = ',')]
    transport: Vec<Kind>,
    /// The server's base port.
    #[arg(long, default_value_t = SERVER_PORT)]
    port: u16,
    /// Local IP for the TCP endpoints (default: the route's source address).
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Give up when the server has not answered after this many seconds.
    #[arg(long, default_value_t = 5.0)]
    connect_timeout: f64,
    /// The link's MTU, for the report (not checked).
    #[arg(long)]
    mtu: Option<u32>,
    /// XDP attach mode of llc-xdp.
    #[arg(long, value_enum, default_value_t = XdpAttach::Auto)]
    xdp_attach: XdpAttach,
    #[command(flatten)]
    measure: Measure,
    #[command(flatten)]
    out: Output,
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// Transports to measure (default: every one available here).
    #[arg(long, value_delimiter = ',')]
    transport: Vec<Kind>,
    /// MTU of the large-MTU bandwidth run (falls back to 9000 when a
    /// transport cannot use it); 0 skips that run.
    #[arg(long, default_value_t = 65000)]
    big_mtu: u32,
    /// Do not pin the measuring thread and the server threads to different CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Senders of the incast test (each in its own namespace on one bridge
    /// with the receiver).
    #[arg(long, default_value_t = 3)]
    incast_senders: usize,
    /// MTU of the incast test's bridge and hosts (each transport's figure
    /// goes with its results at that MTU).
    #[arg(long, default_value_t = 9000)]
    incast_mtu: u32,
    /// XDP attach mode of llc-xdp. Generic by default: on the demo's veth
    /// pairs a native program is slower for LLC. Each transport has a veth
    /// pair of its own, so the program is on llc-xdp's link only.
    #[arg(long, value_enum, default_value_t = XdpAttach::Generic)]
    xdp_attach: XdpAttach,
    /// Also measure each LLC link's floor with each end doing this work
    /// per message (comma-separated: a number of cache lines to touch,
    /// `msg` for an in-memory message-layer round trip, `am` for an
    /// active-message one as btl/llc's, `frame=BYTES` for longer TEST
    /// frames), beside what the
    /// same work costs in a warm loop: what this platform charges software
    /// between its frames (latency test only).
    #[arg(long, value_delimiter = ',')]
    floor_work: Vec<floor::FloorWork>,
    #[command(flatten)]
    measure: Measure,
    #[command(flatten)]
    out: Output,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Before any thread is pinned (see `affinity::cpus`).
    let _ = affinity::cpus();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let res = match cli.cmd {
        Command::Server(a) => server(&a),
        Command::Client(a) => client(&a),
        Command::Demo(a) => demo(&a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("llc-perf: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn settings(m: &Measure, default_tests: &[Test], osu: bool) -> Result<Settings> {
    // osu_bw, osu_bibw and osu_mbw_mr keep 64 messages in flight.
    let window = m.window.unwrap_or(if osu { 64 } else { 16 });
    if m.rounds == 0 || window == 0 {
        bail!("--rounds and --window must be at least 1");
    }
    if m.max_size == 0 || m.max_size > 64 << 20 {
        bail!("--max-size must be 1 byte to 64 MiB");
    }
    if !m.target_ms.is_finite() || m.target_ms <= 0.0 {
        bail!("--target-ms must be positive");
    }
    let tests = if m.tests.is_empty() {
        default_tests.to_vec()
    } else {
        m.tests.clone()
    };
    check_pairs(m.pairs)?;
    if m.pairs > 1 && !tests.contains(&Test::Msgrate) {
        bail!("--pairs applies to the msgrate test: add it to --tests (e.g. --tests msgrate)");
    }
    Ok(Settings {
        tests,
        rounds: m.rounds,
        window,
        max_size: m.max_size,
        target_ms: if m.quick {
            m.target_ms.min(3.0)
        } else {
            m.target_ms
        },
        verify: m.verify,
        quick: m.quick,
        pow2_sizes: osu,
        overlap_bytes: if m.quick {
            m.overlap_bytes.min(256 << 10)
        } else {
            m.overlap_bytes
        },
        pairs: m.pairs,
        pair_cpus: vec![],
        floor_work: vec![],
    })
}

fn check_pairs(pairs: usize) -> Result<()> {
    if !(1..=MAX_PAIRS).contains(&pairs) {
        bail!("--pairs must be 1 to {MAX_PAIRS}");
    }
    Ok(())
}

/// `k`'s link floor again with each end doing each of `works` per message
/// (`--floor-work`), beside what the same work costs in a warm loop. Each
/// worked floor alternates three times with the bare floor and is stated
/// as the median of the differences: this machine's speed comes in phases,
/// and a difference of two measurements far apart would measure them.
fn worked_floors(
    out: &Output,
    works: &[floor::FloorWork],
    k: Kind,
    measure: impl Fn(floor::FloorWork) -> Result<f64>,
) -> Vec<driver::WorkedFloor> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut measured = Vec::new();
    for &w in works.iter().filter(|&&w| w != floor::FloorWork::None) {
        let warm = w.warm_micros(2_000);
        let pairs: Result<Vec<(f64, f64)>> = (0..3)
            .map(|_| Ok((measure(floor::FloorWork::None)?, measure(w)?)))
            .collect();
        match pairs {
            Ok(pairs) => {
                let f = median(pairs.iter().map(|p| p.1).collect());
                let above = median(pairs.iter().map(|p| p.1 - p.0).collect());
                say(
                    out,
                    &format!(
                        "{k}: link floor with {w} per message {f:.2} µs one-way, {above:+.3} against the bare floor; the same work in a warm loop {warm:.3} µs"
                    ),
                );
                measured.push(driver::WorkedFloor {
                    work: w.to_string(),
                    one_way_us: f,
                    above_bare_us: above,
                    warm_us: warm,
                });
            }
            Err(e) => say(
                out,
                &format!("{k}: link floor with {w} not measured: {e:#}"),
            ),
        }
    }
    measured
}

fn say(out: &Output, s: &str) {
    if !out.json() {
        eprintln!("{s}");
    }
}

fn emit(report: &mut Report, out: &Output) -> Result<()> {
    report.host.finish();
    report.compare();
    if let Some(p) = &out.plot {
        plot::write(report, p)?;
        say(out, &format!("plot written to {}", p.display()));
    }
    if out.json() {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else if out.csv() {
        print!("{}", report.csv());
    } else if out.osu() {
        print!("{}", report.osu());
    } else {
        print!("{}", report.tables());
    }
    Ok(())
}

// ------------------------------------------------------------------ server

fn server(a: &ServerArgs) -> Result<()> {
    let explicit = !a.transport.is_empty();
    let kinds = if explicit {
        a.transport.clone()
    } else {
        Kind::ALL.to_vec()
    };
    let ip = a.ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    check_pairs(a.pairs)?;
    let mut eps = Vec::new();
    for k in kinds {
        for pair in 0..a.pairs {
            let opened = match (&a.iface, k.is_llc()) {
                (None, true) => Err(anyhow!(
                    "{k} needs an interface: give -I IFACE (or --transport tcp,tcp-uring)"
                )),
                (iface, _) => transports::open(
                    k,
                    &Open {
                        ifname: iface.as_deref().unwrap_or(""),
                        ip,
                        server: true,
                        port: a.port,
                        uring_coop: true,
                        xdp_attach: a.xdp_attach.into(),
                        pair,
                    },
                ),
            };
            let which = if a.pairs > 1 {
                format!("{k} pair {pair}")
            } else {
                k.to_string()
            };
            match opened {
                Ok(ep) => {
                    println!(
                        "llc-perf server: {which:<10} {} ({})",
                        ep.local_addr(),
                        ep.transport_name()
                    );
                    eps.push(ep);
                }
                Err(e) if explicit => return Err(e),
                Err(e) => {
                    eprintln!("llc-perf server: {which:<10} not served: {e:#}");
                    break;
                }
            }
        }
    }
    if eps.is_empty() {
        bail!("no transport could be opened");
    }
    println!("llc-perf server: ready");
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = eps
        .into_iter()
        .map(|ep| {
            let stop = stop.clone();
            std::thread::spawn(move || bench::serve(&ep, &stop))
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

// ------------------------------------------------------------------ client

/// Open the client side of `kind` (inside the right namespace), connect to
/// the server and check that it answers; with `pairs` above 1, also the
/// endpoints of the message-rate test's other pairs, each to its own server
/// endpoint (`mac`/`ip`: the server's, `port`: its base port).
fn connect_link(
    kind: Kind,
    o: &Open<'_>,
    (mac, ip, port): (Option<MacAddr>, Option<IpAddr>, u16),
    pairs: usize,
    timeout: Duration,
) -> Result<Link> {
    let server = &kind.server_addr(mac, ip, port)?;
    let hello = |o: &Open<'_>| -> Result<(transports::Ep, msg_layer::PeerId)> {
        let ep = transports::open(kind, o)?;
        let peer = ep
            .connect(server)
            .map_err(|e| anyhow!("{kind}: connecting to {server}: {e}"))?;
        bench::command(&ep, peer, &proto::Cmd::Hello, timeout)
            .with_context(|| format!("{kind}: server {server}"))?;
        Ok((ep, peer))
    };
    let (ep, peer) = hello(o)?;
    // tcp/io_uring with cooperative task running misses completions when a
    // progress thread sleeps on the ring: the overlap test gets its own.
    let overlap = if kind == Kind::TcpUring {
        Some(hello(&Open {
            uring_coop: false,
            ..o.clone()
        })?)
    } else {
        None
    };
    let mut others = Vec::new();
    for pair in 1..pairs {
        let to = kind.server_addr(mac, ip, pair_port(port, pair))?;
        let o = Open { pair, ..o.clone() };
        let ep = transports::open(kind, &o)?;
        let peer = ep
            .connect(&to)
            .map_err(|e| anyhow!("{kind}: pair {pair}: connecting to {to}: {e}"))?;
        bench::command(&ep, peer, &proto::Cmd::Hello, timeout).with_context(|| {
            format!(
                "{kind}: pair {pair}: server {to} (a server for {pairs} pairs runs with --pairs {pairs})"
            )
        })?;
        others.push((ep, peer));
    }
    Ok(Link {
        kind,
        ep,
        peer,
        overlap,
        pairs: others,
    })
}

fn local_ip_towards(peer: IpAddr) -> Result<IpAddr> {
    let any: IpAddr = if peer.is_ipv4() {
        Ipv4Addr::UNSPECIFIED.into()
    } else {
        std::net::Ipv6Addr::UNSPECIFIED.into()
    };
    let s = UdpSocket::bind((any, 0))?;
    s.connect((peer, 9))
        .with_context(|| format!("no route to {peer}"))?;
    Ok(s.local_addr()?.ip())
}

fn client(a: &ClientArgs) -> Result<()> {
    let peers = Peers::parse(&a.peer)?;
    let s = settings(&a.measure, &[Test::Latency, Test::Bandwidth], a.out.osu())?;
    if s.tests.contains(&Test::Incast) {
        bail!(
            "incast needs several senders at once: `llc-perf demo --tests incast` builds a \
             bridge with --incast-senders hosts and measures it"
        );
    }
    let kinds: Vec<Kind> = if a.transport.is_empty() {
        Kind::ALL
            .into_iter()
            .filter(|k| {
                if k.is_llc() {
                    peers.mac.is_some()
                } else {
                    peers.ip.is_some()
                }
            })
            .collect()
    } else {
        a.transport.clone()
    };
    if kinds.iter().any(|k| k.is_llc()) && a.iface.is_none() {
        bail!("the LLC transports need the interface: give -I IFACE");
    }
    if !a.connect_timeout.is_finite() || a.connect_timeout <= 0.0 {
        bail!("--connect-timeout must be positive");
    }
    let ip = match (a.bind, peers.ip) {
        (Some(ip), _) => ip,
        (None, Some(p)) => local_ip_towards(p)?,
        (None, None) => Ipv4Addr::UNSPECIFIED.into(),
    };
    let timeout = Duration::from_secs_f64(a.connect_timeout);
    let mut links = Vec::new();
    for k in kinds {
        let server = k.server_addr(peers.mac, peers.ip, a.port)?;
        let o = Open {
            ifname: a.iface.as_deref().unwrap_or(""),
            ip,
            server: false,
            port: a.port,
            uring_coop: true,
            xdp_attach: a.xdp_attach.into(),
            pair: 0,
        };
        links.push(connect_link(
            k,
            &o,
            (peers.mac, peers.ip, a.port),
            s.pairs,
            timeout,
        )?);
        let more = if s.pairs > 1 {
            format!(" and {} more pairs", s.pairs - 1)
        } else {
            String::new()
        };
        say(&a.out, &format!("{k}: connected to {server}{more}"));
    }
    let mut report = new_report("client", &s);
    report.results = driver::run(&links, &s, a.mtu, !a.out.json())?;
    close(links);
    emit(&mut report, &a.out)
}

fn new_report(mode: &'static str, s: &Settings) -> Report {
    Report {
        tool: "llc-perf",
        version: env!("CARGO_PKG_VERSION"),
        mode,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        host: HostInfo::now(),
        settings: s.clone(),
        notes: vec![],
        unavailable: vec![],
        results: vec![],
        comparison: vec![],
        targets: vec![],
    }
}

fn close(links: Vec<Link>) {
    for l in &links {
        let _ = l.ep.close(Duration::from_millis(500));
        if let Some((ep, _)) = &l.overlap {
            let _ = ep.close(Duration::from_millis(500));
        }
        for (ep, _) in &l.pairs {
            let _ = ep.close(Duration::from_millis(500));
        }
    }
}

/// Where the demo pins the threads of message-rate pair `j` of `pairs`:
/// (client CPU, server CPU). Pair j gets a client and a server core of its
/// own when there are cores for all; otherwise every client shares CPU 0
/// and every server the last CPU, so that no client and server busy-poll
/// on one core.
fn pair_cpus(j: usize, pairs: usize, online: usize) -> (usize, usize) {
    if online >= 2 * pairs {
        (j, online - 1 - j)
    } else {
        (0, online - 1)
    }
}

/// [`pair_cpus`] as CPU numbers of the CPUs this process may use.
fn pair_cpu_ids(j: usize, pairs: usize) -> (usize, usize) {
    let cpus = affinity::cpus();
    let (client, server) = pair_cpus(j, pairs, cpus.len());
    (cpus[client], cpus[server])
}

// ------------------------------------------------------------------ demo

/// One testbed at one MTU: servers in namespace B, clients in A.
fn demo_phase(
    pin: bool,
    xdp_attach: AttachMode,
    mtu: u32,
    kinds: &[Kind],
    s: &Settings,
    out: &Output,
    unavailable: &mut Vec<(Kind, String)>,
) -> Result<Vec<TransportResult>> {
    // Each transport gets a veth pair of its own, set up as its own users
    // would set it: llc-xdp's XDP program is attached to its link only
    // (a program on a link costs every other user of it, TCP included: in
    // generic mode the kernel runs it for each of TCP's segments), and TCP's
    // link carries no packet socket. The pairs exist side by side, so the
    // rounds still interleave the transports.
    let mut beds = Vec::new();
    for &k in kinds {
        let bed =
            testbed::TwoHosts::new(mtu).with_context(|| format!("building the testbed of {k}"))?;
        say(
            out,
            &format!(
                "testbed of {k}: namespaces {} and {}, veth {} <-> {}, MTU {mtu}, {} <-> {}, {} <-> {}",
                bed.a.ns.name(),
                bed.b.ns.name(),
                bed.a.ifname,
                bed.b.ifname,
                testbed::format_mac(&bed.a.mac),
                testbed::format_mac(&bed.b.mac),
                bed.a.ipv4,
                bed.b.ipv4
            ),
        );
        beds.push((k, bed));
    }
    let bed_of = |k: Kind| {
        &beds
            .iter()
            .find(|(b, _)| *b == k)
            .expect("a bed per kind")
            .1
    };
    // The link floor of each LLC transport's pair, before its endpoints
    // take the links and again after they let go: what the latency sweep
    // is measured against, bracketing it (on a shared or virtual machine
    // the floor can move while the sweep runs).
    let worked = std::cell::RefCell::new(Vec::new());
    let measure_floors = |when: &str| -> Vec<(Kind, f64)> {
        let mut floors = Vec::new();
        if !s.tests.contains(&Test::Latency) {
            return floors;
        }
        let rounds = if s.quick { 2_000 } else { 20_000 };
        let cpus = pin.then(|| pair_cpu_ids(0, 1));
        for &k in kinds.iter().filter(|k| k.is_llc()) {
            match floor::link_floor(
                k,
                bed_of(k),
                xdp_attach,
                rounds,
                cpus,
                floor::FloorWork::None,
            ) {
                Ok(f) => {
                    say(
                        out,
                        &format!("{k}: link floor {f:.2} µs one-way {when} (802.2 TEST on the same pair and device code, no protocol)"),
                    );
                    floors.push((k, f));
                    if when == "before" {
                        let w = worked_floors(out, &s.floor_work, k, |w| {
                            floor::link_floor(k, bed_of(k), xdp_attach, rounds, cpus, w)
                        });
                        worked.borrow_mut().push((k, w));
                    }
                }
                Err(e) => say(out, &format!("{k}: link floor not measured {when}: {e:#}")),
            }
        }
        floors
    };
    let floors = measure_floors("before");
    // One server endpoint per message-rate pair (pair 0 serves every
    // other test too).
    let pairs = if s.tests.contains(&Test::Msgrate) {
        s.pairs
    } else {
        1
    };
    let mut served = Vec::new();
    for &k in kinds {
        let bed = bed_of(k);
        let opened: Result<Vec<_>> = (0..pairs)
            .map(|pair| {
                let o = Open {
                    ifname: &bed.b.ifname,
                    ip: bed.b.ipv4.into(),
                    server: true,
                    port: SERVER_PORT,
                    uring_coop: true,
                    xdp_attach,
                    pair,
                };
                bed.b.ns.run(|| transports::open(k, &o))
            })
            .collect();
        match opened {
            Ok(eps) => served.push((k, eps)),
            Err(e) => {
                say(out, &format!("{k}: not available at MTU {mtu}: {e:#}"));
                unavailable.push((k, format!("MTU {mtu}: {e:#}")));
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let mut kinds_up = Vec::new();
    for (k, eps) in served {
        kinds_up.push(k);
        let bed = bed_of(k);
        for (j, ep) in eps.into_iter().enumerate() {
            let stop = stop.clone();
            threads.push(bed.b.ns.spawn(move || {
                if pin {
                    let cpu = pair_cpu_ids(j, pairs).1;
                    if let Err(e) = affinity::pin_current(&[cpu]) {
                        tracing::warn!("pinning a server thread: {e}");
                    }
                }
                bench::serve(&ep, &stop)
            }));
        }
    }
    let result = (|| -> Result<Vec<TransportResult>> {
        let mut links = Vec::new();
        for &k in &kinds_up {
            let bed = bed_of(k);
            let o = Open {
                ifname: &bed.a.ifname,
                ip: bed.a.ipv4.into(),
                server: false,
                port: SERVER_PORT,
                uring_coop: true,
                xdp_attach,
                pair: 0,
            };
            let server = (
                Some(MacAddr(bed.b.mac)),
                Some(bed.b.ipv4.into()),
                SERVER_PORT,
            );
            match bed
                .a
                .ns
                .run(|| connect_link(k, &o, server, pairs, Duration::from_secs(10)))
            {
                Ok(l) => links.push(l),
                Err(e) => {
                    say(out, &format!("{k}: not available at MTU {mtu}: {e:#}"));
                    unavailable.push((k, format!("MTU {mtu}: {e:#}")));
                }
            }
        }
        if links.is_empty() {
            bail!("no transport could be measured at MTU {mtu}");
        }
        let names: Vec<String> = links
            .iter()
            .map(|l| format!("{} = {}", l.kind, l.ep.transport_name()))
            .collect();
        say(out, &format!("MTU {mtu}: measuring {}", names.join(", ")));
        if pin {
            let cpu = pair_cpu_ids(0, pairs).0;
            affinity::pin_current(&[cpu])
                .with_context(|| format!("pinning the measuring thread to CPU {cpu}"))?;
        }
        let s = &Settings {
            pair_cpus: if pin {
                (0..pairs).map(|j| pair_cpu_ids(j, pairs).0).collect()
            } else {
                vec![]
            },
            ..s.clone()
        };
        let r = driver::run(&links, s, Some(mtu), !out.json());
        if pin {
            let _ = affinity::pin_current(&[]);
        }
        close(links);
        r
    })();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let mut result = result?;
    let floors_after = measure_floors("after");
    let find = |fs: &[(Kind, f64)], k: Kind| fs.iter().find(|(f, _)| *f == k).map(|(_, f)| *f);
    for r in &mut result {
        r.link_floor_one_way_us = find(&floors, r.transport);
        r.link_floor_after_one_way_us = find(&floors_after, r.transport);
        if let Some((_, w)) = worked.borrow().iter().find(|(k, _)| *k == r.transport) {
            r.link_floor_worked = w.clone();
        }
    }
    Ok(result)
}

fn demo(a: &DemoArgs) -> Result<()> {
    if let Err(why) = testbed::check_privileges() {
        bail!(
            "`llc-perf demo` builds its own testbed and needs root: it creates two network \
             namespaces joined by a veth pair (CAP_SYS_ADMIN, CAP_NET_ADMIN), opens raw \
             AF_PACKET sockets (CAP_NET_RAW) and attaches an XDP program for AF_XDP \
             (CAP_BPF, CAP_NET_ADMIN). Here: {why}.\n\
             Run it as root: `sudo scripts/demo.sh` or `sudo target/release/llc-perf demo`.\n\
             Without root, kernel TCP can still be measured between two hosts: \
             `llc-perf server --transport tcp,tcp-uring` and \
             `llc-perf client --transport tcp,tcp-uring SERVER_IP`."
        );
    }
    let mut s = settings(
        &a.measure,
        &[
            Test::Latency,
            Test::Bandwidth,
            Test::Overhead,
            Test::Overlap,
            Test::Incast,
        ],
        a.out.osu(),
    )?;
    s.floor_work = a.floor_work.clone();
    if !(1..=32).contains(&a.incast_senders) {
        bail!("--incast-senders must be 1 to 32");
    }
    let kinds = if a.transport.is_empty() {
        Kind::ALL.to_vec()
    } else {
        a.transport.clone()
    };
    let mut report = new_report("demo", &s);
    report.notes.push(
        "client and server run in two network namespaces of this machine, joined by a veth pair; \
         all transports' endpoints coexist on it (LLC over AF_XDP on SAP 0x7c with the XDP \
         program attached, LLC over AF_PACKET on SAP 0x78, TCP on ports 5201/5202) and are \
         measured point by point in turn"
            .into(),
    );
    // MTU 1500: everything asked except what needs the large MTU.
    let small = Settings {
        tests: s
            .tests
            .iter()
            .copied()
            .filter(|t| (*t != Test::Overlap || a.big_mtu == 0) && *t != Test::Incast)
            .collect(),
        ..s.clone()
    };
    let big_tests: Vec<Test> = s
        .tests
        .iter()
        .copied()
        .filter(|t| {
            matches!(
                t,
                Test::Latency | Test::Bandwidth | Test::Bibw | Test::Overlap
            )
        })
        .collect();
    let pin = !a.no_pin && affinity::online() >= 2;
    if pin {
        let (client, server) = pair_cpu_ids(0, 1);
        report.notes.push(format!(
            "the measuring (client) thread runs on CPU {client}, the server threads on CPU \
             {server}, in every phase; progress threads may run anywhere"
        ));
    }
    if s.pairs > 1 {
        let online = affinity::online();
        let placed = if !pin {
            String::new()
        } else if online >= 2 * s.pairs {
            format!(
                ", pair i's sending thread on CPU i and its server's on CPU {} - i",
                online - 1
            )
        } else {
            format!(
                ", every sending thread on CPU 0 and every server thread on CPU {}",
                online - 1
            )
        };
        report.notes.push(format!(
            "msgrate: {} sender/receiver pairs stream at once, each over endpoints of its own \
             and on threads of its own{placed}; each pair is timed on its own and the rate \
             is the sum of the pairs' rates, as osu_mbw_mr reports it",
            s.pairs
        ));
    }
    let mut unavailable = Vec::new();
    if !small.tests.is_empty() {
        report.results.extend(demo_phase(
            pin,
            a.xdp_attach.into(),
            1500,
            &kinds,
            &small,
            &a.out,
            &mut unavailable,
        )?);
    }
    if a.big_mtu != 0 && !big_tests.is_empty() {
        let big = Settings {
            tests: big_tests,
            ..s.clone()
        };
        let mut tried = vec![a.big_mtu];
        if a.big_mtu > 9000 {
            tried.push(9000);
        }
        for (i, &mtu) in tried.iter().enumerate() {
            let mut un = Vec::new();
            let r = demo_phase(pin, a.xdp_attach.into(), mtu, &kinds, &big, &a.out, &mut un);
            let last = i + 1 == tried.len();
            // Fall back to 9000 when an LLC transport cannot run at the
            // larger MTU (e.g. no AF_XDP multi-buffer).
            if !last && (r.is_err() || un.iter().any(|(k, _)| k.is_llc())) {
                let why = match &r {
                    Err(e) => format!("{e:#}"),
                    Ok(_) => un
                        .iter()
                        .map(|(k, w)| format!("{k}: {w}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                };
                say(
                    &a.out,
                    &format!("MTU {mtu} not usable ({why}); trying 9000"),
                );
                report
                    .notes
                    .push(format!("MTU {mtu} not usable ({why}); used 9000"));
                continue;
            }
            unavailable.extend(un);
            report.results.extend(r?);
            break;
        }
    }
    if s.tests.contains(&Test::Incast) {
        incast_phase(a, &s, &kinds, &mut report)?;
    }
    unavailable.dedup();
    report.unavailable = unavailable;
    report.results.sort_by_key(|r| (r.mtu, r.transport));
    emit(&mut report, &a.out)
}

/// The incast test on a bridge of its own: host 0 receives, the others send
/// 1 MiB messages (64 KiB with --quick) in windows of Q. Results go to the
/// entry of each transport at the incast MTU.
fn incast_phase(a: &DemoArgs, s: &Settings, kinds: &[Kind], report: &mut Report) -> Result<()> {
    let n = a.incast_senders;
    let mtu = a.incast_mtu;
    let bed = testbed::Bridged::new(n + 1, mtu).context("building the incast testbed")?;
    say(
        &a.out,
        &format!(
            "incast: {n} senders to one receiver through a bridge (namespaces {}..), MTU {mtu}",
            bed.hosts[0].ns.name()
        ),
    );
    report.notes.push(format!(
        "incast: {n} senders, each in its own namespace, stream to one receiver through a \
         Linux bridge at MTU {mtu} at the same time, one transport after the other (nothing \
         of one is left on the links while the next runs); goodput at the receiver, Jain's \
         fairness index of the bytes received from each sender when the first had finished"
    ));
    let shape = incast::Shape {
        size: if s.quick {
            64 << 10
        } else {
            (1 << 20).min(s.max_size)
        },
        messages: if s.quick { 16 } else { 64 },
        window: s.window,
        verify: s.verify,
    };
    for &k in kinds {
        let idx = match report
            .results
            .iter()
            .position(|r| r.transport == k && r.mtu == Some(mtu))
        {
            Some(i) => i,
            None => {
                report.results.push(driver::empty_result(k, Some(mtu)));
                report.results.len() - 1
            }
        };
        for _ in 0..s.rounds {
            match incast::measure(k, &bed, shape, a.xdp_attach.into()) {
                Ok((p, detail)) => {
                    if report.results[idx].detail.is_empty() {
                        report.results[idx].detail = detail;
                    }
                    say(
                        &a.out,
                        &format!(
                            "incast {k:<10} {:>7.2} Gbit/s, fairness {:.3} (shares {:.2}..{:.2}), {} retransmissions{}",
                            p.gbit_s,
                            p.jain_fairness,
                            p.min_share,
                            p.max_share,
                            p.retransmits,
                            p.cpu_busy
                                .map(|b| format!(", CPUs {:.0}% busy", b * 100.0))
                                .unwrap_or_default()
                        ),
                    );
                    report.results[idx].incast.push(p);
                }
                Err(e) => {
                    say(&a.out, &format!("incast {k}: {e:#}"));
                    report.results[idx]
                        .error
                        .get_or_insert(format!("incast: {e:#}"));
                    break;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measure(args: &[&str]) -> (Measure, Output) {
        let cli = Cli::try_parse_from(
            ["llc-perf", "client", "-I", "x", "02:00:00:00:00:01"]
                .iter()
                .chain(args),
        )
        .unwrap();
        match cli.cmd {
            Command::Client(a) => (a.measure, a.out),
            _ => unreachable!(),
        }
    }

    #[test]
    fn pairs_have_ports_and_cpus_of_their_own() {
        assert_eq!(pair_port(SERVER_PORT, 0), SERVER_PORT);
        assert_eq!(pair_port(SERVER_PORT, 1), SERVER_PORT + 2);
        // The last pair's server ports (tcp: one more) stay below the
        // clients' LLC ports.
        assert!(pair_port(SERVER_PORT, MAX_PAIRS - 1) + 1 < transports::CLIENT_PORT);
        assert_eq!(pair_cpus(0, 2, 4), (0, 3));
        assert_eq!(pair_cpus(1, 2, 4), (1, 2));
        assert_eq!(pair_cpus(1, 2, 2), (0, 1));
        let (m, out) = measure(&["--tests", "msgrate", "--pairs", "2"]);
        assert_eq!(settings(&m, &[], out.osu()).unwrap().pairs, 2);
        let (m, out) = measure(&["--pairs", "2"]);
        let e = settings(&m, &[Test::Latency], out.osu()).unwrap_err();
        assert!(e.to_string().contains("msgrate"), "{e}");
        let (m, out) = measure(&["--tests", "msgrate", "--pairs", "17"]);
        assert!(settings(&m, &[], out.osu()).is_err());
    }

    #[test]
    fn osu_format_uses_osu_window_and_sizes() {
        let (m, out) = measure(&["--format", "osu"]);
        assert!(out.osu() && !out.json());
        let s = settings(&m, &[Test::Latency], out.osu()).unwrap();
        assert_eq!(s.window, 64, "osu_bw's window");
        assert!(s.pow2_sizes);
        let (m, out) = measure(&[]);
        let s = settings(&m, &[Test::Latency], out.osu()).unwrap();
        assert_eq!(s.window, 16);
        assert!(!s.pow2_sizes);
        // An explicit window wins.
        let (m, out) = measure(&["--format", "osu", "-Q", "8"]);
        assert_eq!(settings(&m, &[Test::Latency], out.osu()).unwrap().window, 8);
        let (_, out) = measure(&["--format", "json"]);
        assert!(out.json());
        assert!(Cli::try_parse_from([
            "llc-perf", "client", "--json", "--format", "osu", "10.0.0.1"
        ])
        .is_err());
    }
}
