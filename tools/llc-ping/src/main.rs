//! llc-ping: ping for IEEE 802.2 LLC.
//!
//! Link level (default): sends LLC TEST commands and times the peer's TEST
//! responses, as 802.2 requires every LLC to answer. `--reliable`: sends echo
//! messages through the full reliable transport to a `llc-ping --respond`.

mod stats;

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use llc_stack::link::afpacket::AfPacketConfig;
use llc_stack::link::afxdp::{AfXdpConfig, AttachMode, XdpMode};
use llc_stack::link::any::{self, AnyLink, Backend};
use llc_stack::link::fault::{FaultConfig, FaultInjector};
use llc_stack::link::grant;
use llc_stack::link::pcap::PcapWriter;
use llc_stack::link::{RxToken, TxToken};
use llc_stack::proto::{Config, ConnStats, EndpointStats, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, Addresses, AuthKey, Body, Command, MacAddr};
use llc_stack::{Device, Instant, Stack};

use stats::RttStats;

/// Which link backend to use (the command line's spelling of [`Backend`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// AF_XDP when it can be set up (zero-copy, then copy; native, then
    /// generic XDP), else AF_PACKET.
    Auto,
    /// AF_PACKET raw socket.
    Packet,
    /// AF_XDP socket with the project's XDP program.
    Xdp,
}

/// AF_XDP socket mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum XdpModeArg {
    /// Zero-copy if the driver offers it, else copy.
    Auto,
    /// Zero-copy only.
    Zerocopy,
    /// Copy only.
    Copy,
}

/// XDP hook.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum XdpAttachArg {
    /// Native if the driver has it, else generic.
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP only.
    Generic,
}

#[derive(Parser, Debug)]
#[command(
    name = "llc-ping",
    version,
    about = "ping over IEEE 802.2 LLC: TEST round trips, or echo through the reliable transport",
    after_help = "Examples:\n  llc-ping --respond -I eth0\n  llc-ping -I eth0 -c 5 02:00:00:00:00:02\n  llc-ping -I eth0 --reliable -c 1000 -i 0 -q 02:00:00:00:00:02\n\nEnvironment:\n  LLC_AUTH_KEY  per-job key material (any string, e.g. 64 random hex digits):\n                the reliable transport then authenticates every frame, and\n                both ends need the same value (docs/SECURITY.md)"
)]
struct Args {
    /// Interface to send and receive on.
    #[arg(short = 'I', long = "interface", value_name = "IFACE")]
    interface: String,
    /// Answer TEST commands and serve reliable echo until interrupted.
    #[arg(long, conflicts_with_all = ["reliable", "peer"])]
    respond: bool,
    /// Peer MAC address, e.g. 02:00:00:00:00:02.
    #[arg(value_name = "PEER_MAC", required_unless_present = "respond")]
    peer: Option<MacAddr>,
    /// Stop after COUNT round trips (default: until interrupted).
    #[arg(short = 'c', long, value_name = "COUNT")]
    count: Option<u64>,
    /// Payload bytes per ping (TEST information field, or echo message size).
    #[arg(short = 's', long, default_value_t = 56, value_name = "SIZE")]
    size: usize,
    /// Seconds between pings; 0 sends back-to-back and busy-polls.
    #[arg(short = 'i', long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
    /// Seconds to wait for each reply.
    #[arg(short = 'W', long, default_value_t = 1.0, value_name = "TIMEOUT")]
    timeout: f64,
    /// Echo through the reliable transport instead of link-level TEST.
    #[arg(long)]
    reliable: bool,
    /// Transport port of the echo service.
    #[arg(long, default_value_t = 7)]
    port: u16,
    /// Our LLC SAP (an individual, locally defined one by default).
    #[arg(long, default_value = "0x7c", value_parser = parse_sap)]
    sap: u8,
    /// Link backend.
    #[arg(long, value_enum, default_value_t = BackendArg::Auto)]
    backend: BackendArg,
    /// AF_XDP socket mode (with --backend xdp or auto).
    #[arg(long, value_enum, default_value_t = XdpModeArg::Auto)]
    xdp_mode: XdpModeArg,
    /// XDP attach mode (with --backend xdp or auto).
    #[arg(long, value_enum, default_value_t = XdpAttachArg::Auto)]
    xdp_attach: XdpAttachArg,
    /// RX queue for AF_XDP (default: every RX queue of the interface).
    #[arg(long, value_name = "QUEUE")]
    queue: Option<u32>,
    /// Print one JSON object with the results instead of text.
    #[arg(long)]
    json: bool,
    /// Only print the summary.
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Print the endpoint's and the connection's counters at the end
    /// (frames, retransmissions, drops by reason, RTT); with --json they are
    /// always in its `stats` object in reliable mode.
    #[arg(long)]
    stats: bool,
    /// Write every frame sent and received to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Drop this fraction of received frames (fault injection, 0..1).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    drop_chance: f64,
    /// Flip a byte in this fraction of received frames (fault injection, 0..1).
    #[arg(long, default_value_t = 0.0, value_name = "P")]
    corrupt_chance: f64,
    /// Seed of the fault injector.
    #[arg(long, default_value_t = 1)]
    fault_seed: u64,
}

fn parse_sap(s: &str) -> Result<u8, String> {
    let v = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u8::from_str_radix(h, 16)
    } else {
        s.parse()
    }
    .map_err(|_| format!("invalid SAP {s:?}: expected a byte such as 0x7c"))?;
    wire::llc::validate_sap(v).map_err(|e| e.to_string())
}

/// The environment variable holding the job's authentication key material.
const AUTH_KEY_ENV: &str = "LLC_AUTH_KEY";

/// The transport configuration: our SAP, and the job's key when
/// `LLC_AUTH_KEY` is set (its bytes are hashed into a key, see
/// [`AuthKey::derive`]).
fn transport_config(args: &Args) -> Result<Config> {
    let auth_key = match std::env::var_os(AUTH_KEY_ENV) {
        None => None,
        Some(v) if v.is_empty() => bail!("{AUTH_KEY_ENV} is set but empty"),
        Some(v) => {
            use std::os::unix::ffi::OsStrExt;
            let key = AuthKey::derive(v.as_bytes());
            tracing::info!(fingerprint = %key.fingerprint(), "frame authentication on");
            Some(key)
        }
    };
    Ok(Config {
        sap: args.sap,
        auth_key,
        // An echo's reply tells the pinger all it needs; the responder
        // does not track its replies.
        acked_events: false,
        ..Config::default()
    })
}

/// The endpoint's and a connection's counters as a JSON object:
/// `{"endpoint": {..., "dropped": {...}}, "connection": {...} or null}`.
fn stats_json(ep: &EndpointStats, conn: Option<&ConnStats>) -> serde_json::Value {
    let mut e = serde_json::Map::new();
    for (k, v) in ep.counters() {
        e.insert(k.into(), v.into());
    }
    let mut d = serde_json::Map::new();
    for (k, v) in ep.dropped.counters() {
        d.insert(k.into(), v.into());
    }
    e.insert("dropped_total".into(), ep.dropped.total().into());
    e.insert("dropped".into(), d.into());
    let c = conn.map(|c| {
        c.counters()
            .iter()
            .map(|&(k, v)| (k.to_string(), serde_json::Value::from(v)))
            .collect::<serde_json::Map<_, _>>()
    });
    serde_json::json!({ "endpoint": e, "connection": c })
}

/// The counters for people: every endpoint counter, the drop reasons that
/// are not zero, every connection counter with RTTs in microseconds.
fn print_stats_text(ep: &EndpointStats, conn: Option<&ConnStats>) {
    let pairs = |it: &mut dyn Iterator<Item = String>| it.collect::<Vec<_>>().join(" ");
    println!(
        "endpoint: {}",
        pairs(&mut ep.counters().iter().map(|(k, v)| format!("{k}={v}")))
    );
    let drops: Vec<String> = ep
        .dropped
        .counters()
        .iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "endpoint dropped: {}{}",
        ep.dropped.total(),
        if drops.is_empty() {
            String::new()
        } else {
            format!(" ({})", drops.join(" "))
        }
    );
    if let Some(c) = conn {
        println!(
            "connection: {}",
            pairs(
                &mut c
                    .counters()
                    .iter()
                    .map(|&(k, v)| match k.strip_suffix("_ns") {
                        Some(base) => format!("{base}_us={:.2}", v as f64 / 1e3),
                        None => format!("{k}={v}"),
                    })
            )
        );
    }
}

/// Exit status when the peer never answered (as iputils ping).
const EXIT_NO_REPLY: i32 = 1;
/// Exit status on any other error.
const EXIT_ERROR: i32 = 2;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(&args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("llc-ping: {e:#}");
            std::process::exit(EXIT_ERROR);
        }
    }
}

/// A device with the optional middleware the command line asked for, handed
/// to a job generic over the device type.
trait Job {
    fn run<D: Device>(self, dev: D, mac: MacAddr, backend: String) -> Result<i32>;
}

fn run(args: &Args) -> Result<i32> {
    if !(0.0..=1.0).contains(&args.drop_chance) || !(0.0..=1.0).contains(&args.corrupt_chance) {
        bail!("--drop-chance and --corrupt-chance take a probability between 0 and 1");
    }
    if args.interval < 0.0 || args.timeout <= 0.0 {
        bail!("-i must be >= 0 and -W > 0 seconds");
    }
    let min_size = if args.reliable { 8 } else { 0 };
    if args.size < min_size {
        bail!("-s must be at least {min_size} bytes in this mode");
    }
    let (link, notes) = open_link(args)?;
    for note in &notes {
        eprintln!("llc-ping: note: {note}");
    }
    // Dispatch once here, so the per-frame path is generic over the backend.
    let (mac, mtu, port) = (link.mac(), link.mtu(), link.port());
    match link {
        AnyLink::Packet(dev) => run_on(dev, mac, mtu, port, args),
        AnyLink::Xdp(dev) => run_on(dev, mac, mtu, port, args),
    }
}

/// `port`: the one port the link receives, when it has not the whole SAP
/// (opened by the endpoint service for a process without privileges).
fn run_on<D: Device>(
    dev: D,
    mac: MacAddr,
    mtu: usize,
    port: Option<u16>,
    args: &Args,
) -> Result<i32> {
    let backend = dev.capabilities().backend;
    let max_info = mtu.saturating_sub(wire::llc::HEADER_LEN);
    if !args.reliable && !args.respond && args.size > max_info {
        bail!(
            "-s {} does not fit a TEST frame on {} (MTU {mtu}): at most {max_info}",
            args.size,
            args.interface,
        );
    }
    if port.is_some() && !args.reliable && !args.respond && args.size < PROBE_INFO_MIN {
        bail!("-s must be at least {PROBE_INFO_MIN} bytes for TEST pings without privileges");
    }
    let job = PingJob { args, port };
    match &args.pcap {
        Some(path) => {
            let dev = PcapWriter::create(dev, path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            with_faults(dev, args, mac, backend, job)
        }
        None => with_faults(dev, args, mac, backend, job),
    }
}

fn with_faults<D: Device, J: Job>(
    dev: D,
    args: &Args,
    mac: MacAddr,
    backend: String,
    job: J,
) -> Result<i32> {
    if args.drop_chance > 0.0 || args.corrupt_chance > 0.0 {
        let faults = FaultConfig {
            loss: args.drop_chance,
            corrupt: args.corrupt_chance,
            ..Default::default()
        };
        job.run(
            FaultInjector::new(dev, faults, args.fault_seed),
            mac,
            backend,
        )
    } else {
        job.run(dev, mac, backend)
    }
}

/// Open the link the command line asks for ([`any::open`]). Returns it with
/// notes on what was not obtained and why (zero-copy refused, AF_XDP
/// unavailable...).
fn open_link(args: &Args) -> Result<(AnyLink, Vec<String>)> {
    // Without privileges the host's endpoint service opens the socket, for
    // one port: the responder's echo port (with the link role when no
    // endpoint of the host holds it, so it answers TEST too), any free
    // port for a pinger.
    let port = (args.respond && grant::needs_service()).then_some(args.port);
    let packet_cfg = AfPacketConfig {
        sap: args.sap,
        port,
        ..Default::default()
    };
    let xdp_cfg = AfXdpConfig {
        sap: args.sap,
        port,
        mode: match args.xdp_mode {
            XdpModeArg::Auto => XdpMode::Auto,
            XdpModeArg::Zerocopy => XdpMode::ZeroCopy,
            XdpModeArg::Copy => XdpMode::Copy,
        },
        attach: match args.xdp_attach {
            XdpAttachArg::Auto => AttachMode::Auto,
            XdpAttachArg::Native => AttachMode::Native,
            XdpAttachArg::Generic => AttachMode::Generic,
        },
        queue: args.queue,
        ..Default::default()
    };
    let backend = match args.backend {
        BackendArg::Auto => Backend::Auto,
        BackendArg::Packet => Backend::Packet,
        BackendArg::Xdp => Backend::Xdp,
    };
    Ok(any::open(&args.interface, backend, packet_cfg, xdp_cfg)?)
}

struct PingJob<'a> {
    args: &'a Args,
    /// The link's one port, if it has not the whole SAP.
    port: Option<u16>,
}

impl Job for PingJob<'_> {
    fn run<D: Device>(self, dev: D, mac: MacAddr, backend: String) -> Result<i32> {
        let args = self.args;
        let stop = Arc::new(AtomicBool::new(false));
        {
            let stop = stop.clone();
            ctrlc::set_handler(move || stop.store(true, Ordering::Relaxed))
                .context("cannot install the signal handler")?;
        }
        if args.respond {
            return respond(dev, mac, &backend, args, &stop);
        }
        let peer = args.peer.expect("clap requires PEER_MAC without --respond");
        if peer.is_group() {
            bail!("{peer} is a group address: llc-ping needs one peer's individual MAC");
        }
        let mode = if args.reliable { "reliable" } else { "test" };
        if !args.json {
            println!(
                "LLC-PING {peer} via {} ({backend}), SAP {:#04x}: {} data bytes, {}",
                args.interface,
                args.sap,
                args.size,
                if args.reliable {
                    format!("reliable echo to port {}", args.port)
                } else {
                    "TEST".into()
                }
            );
        }
        let started = Instant::now();
        let (st, extra) = if args.reliable {
            ping_reliable(dev, mac, peer, self.port, args, &stop)?
        } else {
            let mut dev = dev;
            let st = ping_test(&mut dev, mac, peer, self.port, args, &stop)?;
            (st, None)
        };
        let elapsed_ms = (Instant::now() - started).as_secs_f64() * 1e3;
        let summary = st.summary(
            peer.to_string(),
            args.interface.clone(),
            mode,
            backend,
            args.size,
            elapsed_ms,
        );
        if args.json {
            let mut v = serde_json::to_value(&summary)?;
            if let Some(extra) = extra {
                v["stats"] = extra;
            }
            println!("{v}");
        } else {
            summary.print_text();
        }
        if st.received == 0 {
            eprintln!(
                "llc-ping: peer {peer} does not answer on {} ({} sent, no reply within {} s each)",
                args.interface, st.transmitted, args.timeout
            );
            return Ok(EXIT_NO_REPLY);
        }
        Ok(0)
    }
}

fn spin_budget(args: &Args) -> Duration {
    if args.interval == 0.0 {
        // Back-to-back: never sleep while a reply is due.
        Duration::from_secs_f64(args.timeout)
    } else {
        llc_stack::stack::DEFAULT_SPIN
    }
}

/// Sleep until the next ping is due (this paces the sender; it does not
/// synchronise with anything).
fn pace(args: &Args, sent_at: Instant, stop: &AtomicBool) {
    if args.interval == 0.0 {
        return;
    }
    let due = sent_at + Duration::from_secs_f64(args.interval);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= due {
            break;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}

const TEST_MAGIC: &[u8; 4] = b"LLCP";

/// Shortest TEST information field of a link that receives one port only:
/// the probe prefix (`proto::PROBE_MAGIC` and the port), which its socket
/// filter needs to let the answer in, and the sequence number.
const PROBE_INFO_MIN: usize = 10;

/// `port`: the link's one port (the TEST answers' information field must
/// then start with the probe prefix of that port, see [`PROBE_INFO_MIN`]).
fn ping_test<D: Device>(
    dev: &mut D,
    mac: MacAddr,
    peer: MacAddr,
    port: Option<u16>,
    args: &Args,
    stop: &AtomicBool,
) -> Result<RttStats> {
    let addr = Addresses {
        dst: peer,
        src: mac,
        dsap: args.sap,
        ssap: args.sap,
    };
    let mut info = vec![0u8; args.size];
    for (i, b) in info.iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut st = RttStats::default();
    let spin = spin_budget(args);
    let timeout = Duration::from_secs_f64(args.timeout);
    let mut seq: u32 = 0;
    // The tag before the sequence number: the probe prefix of our port, or
    // our own magic (then only when the field is long enough).
    let (magic, tagged) = match port {
        Some(p) => {
            let mut m = llc_stack::proto::PROBE_MAGIC.to_vec();
            m.extend_from_slice(&p.to_be_bytes());
            (m, true)
        }
        None => (TEST_MAGIC.to_vec(), info.len() >= 8),
    };
    let at = magic.len();
    while args.count.is_none_or(|c| st.transmitted < c) && !stop.load(Ordering::Relaxed) {
        seq = seq.wrapping_add(1);
        // The information field carries a tag and the sequence number when it
        // is long enough; shorter probes are matched by arrival alone.
        if tagged {
            info[..at].copy_from_slice(&magic);
            info[at..at + 4].copy_from_slice(&seq.to_be_bytes());
        }
        let sent_at = Instant::now();
        let tok = dev
            .transmit(sent_at)
            .context("the link has no transmit buffer free")?;
        let n = tok.consume(|buf| {
            wire::emit_llc_control(buf, &addr, false, Command::Test { pf: true }, &info)
                .unwrap_or(0)
        });
        if n == 0 {
            bail!("cannot build a TEST frame of {} bytes", info.len());
        }
        dev.flush(sent_at)
            .context("sending the TEST frame failed")?;
        st.transmitted += 1;
        let deadline = sent_at + timeout;
        let mut idle_since = sent_at;
        let mut got = None;
        loop {
            let now = Instant::now();
            if let Some(tok) = dev.receive(now) {
                let hit = tok.consume(|f| match wire::parse(f, Some(args.sap)) {
                    Ok(wire::Frame {
                        addr: a,
                        body:
                            Body::Test {
                                response: true,
                                info: i,
                                ..
                            },
                    }) if a.src == peer => {
                        !tagged
                            || (i.len() >= at + 4
                                && i[..at] == magic[..]
                                && i[at..at + 4] == seq.to_be_bytes())
                    }
                    _ => false,
                });
                if hit {
                    got = Some(Instant::now());
                    break;
                }
                idle_since = now;
                continue;
            }
            if now >= deadline || stop.load(Ordering::Relaxed) {
                break;
            }
            if now - idle_since > spin {
                dev.wait(Some((deadline - now).min(Duration::from_millis(100))))?;
            }
        }
        match got {
            Some(t) => {
                let rtt = t - sent_at;
                st.record(rtt.as_nanos() as u64);
                if !args.quiet && !args.json {
                    println!(
                        "{} bytes from {peer}: seq={seq} time={:.2} µs",
                        info.len() + wire::llc::HEADER_LEN,
                        rtt.as_nanos() as f64 / 1000.0
                    );
                }
            }
            None if !stop.load(Ordering::Relaxed) && !args.quiet && !args.json => {
                println!(
                    "no answer from {peer} for seq={seq} within {} s",
                    args.timeout
                );
            }
            None => {}
        }
        pace(args, sent_at, stop);
    }
    Ok(st)
}

fn ping_reliable<D: Device>(
    dev: D,
    mac: MacAddr,
    peer: MacAddr,
    port: Option<u16>,
    args: &Args,
    stop: &AtomicBool,
) -> Result<(RttStats, Option<serde_json::Value>)> {
    let cfg = transport_config(args)?;
    let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
    stack.set_spin(spin_budget(args));
    publish_stats(&mut stack, "llc-ping", args);
    if let Some(p) = port {
        // The link receives this port only: connect from it.
        stack.endpoint_mut().bind(p);
    }
    let now = Instant::now();
    let conn = stack.endpoint_mut().connect(now, peer, args.port, None)?;
    // The handshake has its own bounded retries; it ends in Connected or Closed.
    let connect_deadline = now + Duration::from_secs(30);
    let outcome = stack.run_until(connect_deadline, |ep| {
        while let Some((h, ev)) = ep.poll_event() {
            match ev {
                Event::Connected if h == conn => return Some(Ok(())),
                Event::Closed(Some(e)) if h == conn => return Some(Err(e)),
                _ => {}
            }
        }
        if stop.load(Ordering::Relaxed) {
            return Some(Ok(()));
        }
        None
    })?;
    match outcome {
        Some(Ok(())) => {}
        Some(Err(e)) => bail!(
            "cannot reach the echo service at {peer} port {}: {e}",
            args.port
        ),
        None => bail!("peer {peer} does not answer the connection request"),
    }
    let mut st = RttStats::default();
    let timeout = Duration::from_secs_f64(args.timeout);
    let mut msg = vec![0u8; args.size];
    for (i, b) in msg.iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    let mut seq: u64 = 0;
    let mut failure = None;
    while args.count.is_none_or(|c| st.transmitted < c) && !stop.load(Ordering::Relaxed) {
        seq += 1;
        msg[..8].copy_from_slice(&seq.to_be_bytes());
        // The message's buffer is made before the clock starts, as the
        // TEST probe's is: the round trip times the transport.
        let out = msg.clone();
        let sent_at = Instant::now();
        stack.endpoint_mut().send(conn, out)?;
        // Out at once, stamped with the send time just read.
        stack.poll_tx(sent_at)?;
        st.transmitted += 1;
        let expect = &msg;
        let reply = stack.run_until(sent_at + timeout, |ep| {
            while let Some((h, ev)) = ep.poll_event() {
                match ev {
                    Event::Message { data, .. } if h == conn && data[..] == expect[..] => {
                        return Some(Ok(Instant::now()));
                    }
                    Event::Closed(Some(e)) if h == conn => return Some(Err(e)),
                    _ => {}
                }
            }
            None
        })?;
        match reply {
            Some(Ok(t)) => {
                let rtt = t - sent_at;
                st.record(rtt.as_nanos() as u64);
                if !args.quiet && !args.json {
                    println!(
                        "{} bytes from {peer}: seq={seq} time={:.2} µs",
                        args.size,
                        rtt.as_nanos() as f64 / 1000.0
                    );
                }
            }
            Some(Err(e)) => {
                failure = Some(e);
                break;
            }
            None => {
                if !args.quiet && !args.json {
                    println!(
                        "no echo from {peer} for seq={seq} within {} s",
                        args.timeout
                    );
                }
            }
        }
        pace(args, sent_at, stop);
    }
    let ep = stack.endpoint();
    let extra = stats_json(ep.stats(), ep.connection_stats(conn));
    if args.stats && !args.json {
        print_stats_text(ep.stats(), ep.connection_stats(conn));
    }
    stack.endpoint_mut().close(conn);
    let _ = stack.run_until(Instant::now() + Duration::from_millis(200), |ep| {
        ep.connection(conn).is_none().then_some(())
    });
    if let Some(e) = failure {
        bail!("the connection to {peer} failed: {e}");
    }
    Ok((st, Some(extra)))
}

/// Live counters for llc-stat; without them (no /dev/shm) ping still works.
fn publish_stats<D: Device>(stack: &mut Stack<D>, label: &str, args: &Args) {
    let info = llc_stack::statpage::PageInfo {
        label: label.into(),
        ifname: args.interface.clone(),
        ..Default::default()
    };
    if let Err(e) = stack.publish_stats(info) {
        tracing::warn!("llc-stat page not published: {e}");
    }
}

fn respond<D: Device>(
    dev: D,
    mac: MacAddr,
    backend: &str,
    args: &Args,
    stop: &AtomicBool,
) -> Result<i32> {
    let cfg = transport_config(args)?;
    let auth = match &cfg.auth_key {
        Some(k) => format!(", frames authenticated (key {})", k.fingerprint()),
        None => String::new(),
    };
    let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
    stack.endpoint_mut().listen(args.port);
    publish_stats(
        &mut stack,
        &format!("llc-ping responder, port {}", args.port),
        args,
    );
    // Tests and scripts wait for this line before they start pinging.
    println!(
        "llc-ping: responding on {} ({mac}, {backend}), SAP {:#04x}, echo port {}{auth}",
        args.interface, args.sap, args.port
    );
    std::io::stdout().flush()?;
    let mut idle_since = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let rx = stack.poll_rx(now);
        while let Some((h, ev)) = stack.endpoint_mut().poll_event() {
            match ev {
                Event::Message { data, .. } => {
                    if let Err(e) = stack.endpoint_mut().send(h, data) {
                        tracing::warn!("echo on connection {h:?} failed: {e}");
                    }
                }
                Event::Connected => {
                    tracing::info!(peer = ?stack.endpoint().peer(h), "connection opened")
                }
                Event::Closed(reason) => tracing::info!(?reason, "connection ended"),
                Event::Acked { .. } => {}
            }
        }
        let tx = stack.poll_tx(now)?;
        if rx + tx > 0 {
            idle_since = now;
        } else if now - idle_since > llc_stack::stack::DEFAULT_SPIN {
            stack.wait(now, Some(now + Duration::from_millis(100)))?;
            idle_since = Instant::now();
        }
    }
    if args.stats {
        print_stats_text(stack.endpoint().stats(), None);
    }
    Ok(0)
}
