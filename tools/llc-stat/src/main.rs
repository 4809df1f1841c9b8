//! llc-stat: the live endpoints of the LLC stack on this host (llc-ping,
//! llc-xfer, llc-perf, MPI ranks over btl/llc, DECK nodes...) and their
//! connections, read from the statistics pages the endpoints publish
//! (`llc_stack::statpage`, under /dev/shm/llc-stack/). Reading maps each
//! page read-only and copies it under its seqlock: the endpoints are not
//! slowed and never wait for llc-stat.
#![deny(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use clap::Parser;
use llc_stack::statpage::{self, ConnSnapshot, Snapshot};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(
    name = "llc-stat",
    version,
    about = "List the live LLC stack endpoints of this host and their connections",
    after_help = "Examples:\n  llc-stat                 every endpoint, once\n  llc-stat -p 4242 --json  one process, as JSON\n  llc-stat --watch 1       a table refreshed every second (Ctrl-C ends it)\n\nEndpoints publish unless started with LLC_STAT=0; pages live in\n/dev/shm/llc-stack (LLC_STAT_DIR moves them, for publishers and llc-stat alike)."
)]
struct Args {
    /// Only the endpoints of this process.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pid: Option<u32>,
    /// Print JSON (one document; with --watch, one line per refresh).
    #[arg(long)]
    json: bool,
    /// Refresh every SECONDS until interrupted.
    #[arg(short = 'w', long, value_name = "SECONDS")]
    watch: Option<f64>,
    /// With --watch: stop after N refreshes.
    #[arg(short = 'c', long, value_name = "N", requires = "watch")]
    count: Option<u64>,
    /// Also list pages left by processes that died (shown as stale).
    #[arg(short = 'a', long)]
    all: bool,
    /// Directory of the pages (default: LLC_STAT_DIR or /dev/shm/llc-stack).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Remove the pages of processes that died (a killed process cannot remove its own),
    /// list nothing: for a resource manager's job epilog (scripts/slurm-epilog.sh).
    #[arg(long, conflicts_with_all = ["pid", "json", "watch", "all"])]
    remove_stale: bool,
}

/// One endpoint with what llc-stat adds from /proc.
struct Entry {
    snap: Snapshot,
    process: String,
    mpi_rank: Option<u32>,
}

/// What one look at the directory found.
struct Scan {
    entries: Vec<Entry>,
    /// Pages that could not be read, with why.
    errors: Vec<String>,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("llc-stat: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<()> {
    let dir = args.dir.clone().unwrap_or_else(statpage::dir_from_env);
    if args.remove_stale {
        statpage::remove_stale(&dir);
        return Ok(());
    }
    let Some(every) = args.watch else {
        let scan = scan(&dir, &args)?;
        check_pid(&args, &scan, &dir)?;
        let out = if args.json {
            serde_json::to_string_pretty(&to_json(&scan))? + "\n"
        } else {
            table(&scan, &dir)
        };
        std::io::stdout().write_all(out.as_bytes())?;
        return Ok(());
    };
    if !(every.is_finite() && every > 0.0) {
        bail!("--watch needs a positive number of seconds, not {every}");
    }
    let clear = !args.json && std::io::stdout().is_terminal();
    let mut shown = 0u64;
    loop {
        let scan = scan(&dir, &args)?;
        let out = if args.json {
            serde_json::to_string(&to_json(&scan))? + "\n"
        } else if clear {
            format!("\x1b[H\x1b[2J{}", table(&scan, &dir))
        } else {
            format!("--- {}\n{}", unix_ms(), table(&scan, &dir))
        };
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes())?;
        stdout.flush()?;
        shown += 1;
        if args.count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(every));
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn scan(dir: &std::path::Path, args: &Args) -> Result<Scan> {
    let pages = statpage::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut scan = Scan {
        entries: Vec::new(),
        errors: Vec::new(),
    };
    for page in pages {
        match page {
            Ok(snap) => {
                if args.pid.is_some_and(|p| p != snap.pid) || (!snap.alive && !args.all) {
                    continue;
                }
                let (process, mpi_rank) = describe(snap.pid, snap.alive);
                scan.entries.push(Entry {
                    snap,
                    process,
                    mpi_rank,
                });
            }
            // Another layout (a process built from another version), or
            // a page that cannot be opened: said, and the others still shown.
            Err(e) => scan.errors.push(e.to_string()),
        }
    }
    Ok(scan)
}

/// With -p: the process must have a live endpoint, else say why not.
fn check_pid(args: &Args, scan: &Scan, dir: &std::path::Path) -> Result<()> {
    let Some(pid) = args.pid else {
        return Ok(());
    };
    if scan.entries.iter().any(|e| e.snap.pid == pid) {
        return Ok(());
    }
    if statpage::process_start_time(pid).is_none() {
        bail!("no process {pid}");
    }
    bail!(
        "process {pid} has no live LLC endpoint in {} (it may use no LLC transport, \
         run with LLC_STAT=0, or publish to another LLC_STAT_DIR)",
        dir.display()
    )
}

/// The process name, and its MPI rank when Open MPI started it.
fn describe(pid: u32, alive: bool) -> (String, Option<u32>) {
    if !alive {
        return ("(exited)".into(), None);
    }
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    let rank = std::fs::read(format!("/proc/{pid}/environ"))
        .ok()
        .and_then(|env| {
            env.split(|&b| b == 0).find_map(|kv| {
                kv.strip_prefix(b"OMPI_COMM_WORLD_RANK=")
                    .and_then(|v| std::str::from_utf8(v).ok()?.parse().ok())
            })
        });
    (comm, rank)
}

fn mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn age_ms(s: &Snapshot) -> Option<u64> {
    (s.published_unix_ms > 0).then(|| unix_ms().saturating_sub(s.published_unix_ms))
}

fn counters(list: &[(&'static str, u64)]) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), json!(v)))
            .collect(),
    )
}

fn conn_json(c: &ConnSnapshot) -> Value {
    json!({
        "peer": mac(&c.peer_mac),
        "peer_port": c.peer_port,
        "local_port": c.local_port,
        "state": c.state,
        "inbound": c.inbound,
        "srtt_us": c.srtt_ns as f64 / 1000.0,
        "rttvar_us": c.rttvar_ns as f64 / 1000.0,
        "min_rtt_us": c.counter("min_rtt_ns") as f64 / 1000.0,
        "cwnd": c.cwnd,
        "send_credit": c.send_credit,
        "recv_window": c.recv_window,
        "in_flight": c.in_flight,
        "send_queued_bytes": c.send_queued,
        "fragment_len": c.fragment_len,
        "bytes_sent": c.counter("payload_bytes_sent"),
        "bytes_received": c.counter("payload_bytes_received"),
        "messages_sent": c.counter("messages_sent"),
        "messages_received": c.counter("messages_received"),
        "retransmits": c.counter("retransmits"),
        "spurious_retransmits": c.counter("spurious_timeouts"),
        "counters": counters(&c.counters),
    })
}

fn to_json(scan: &Scan) -> Value {
    let endpoints: Vec<Value> = scan
        .entries
        .iter()
        .map(|e| {
            let s = &e.snap;
            json!({
                "pid": s.pid,
                "process": e.process,
                "mpi_rank": e.mpi_rank,
                "alive": s.alive,
                "label": s.label,
                "interface": s.ifname,
                "backend": s.backend,
                "mac": mac(&s.mac),
                "sap": s.sap,
                "port": s.port,
                "mtu": s.mtu,
                "published_unix_ms": s.published_unix_ms,
                "age_ms": age_ms(s),
                "publishes": s.publishes,
                "page": s.path,
                "connection_count": s.connection_count,
                "counters": counters(&s.endpoint),
                "drops": counters(&s.drops),
                "connections": s.connections.iter().map(conn_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "endpoints": endpoints, "errors": scan.errors })
}

/// Columns of the connection lines.
const CONN_HEAD: [&str; 15] = [
    "PEER", "STATE", "RTT_US", "VAR_US", "CWND", "CREDIT", "WINDOW", "TX_BYTES", "RX_BYTES",
    "TX_MSGS", "RX_MSGS", "RETRANS", "SPURIOUS", "TIMEOUTS", "INFLIGHT",
];

fn table(scan: &Scan, dir: &std::path::Path) -> String {
    let mut out = String::new();
    if scan.entries.is_empty() {
        out += &format!("no live LLC endpoints in {}\n", dir.display());
    }
    for e in &scan.entries {
        let s = &e.snap;
        // The process, then what it is when that says more: its MPI rank,
        // and who opened the endpoint unless that is the process's name.
        let mut about = Vec::new();
        if let Some(r) = e.mpi_rank {
            about.push(format!("MPI rank {r}"));
        }
        if !s.label.is_empty() && s.label != e.process {
            about.push(s.label.clone());
        }
        let who = if about.is_empty() {
            e.process.clone()
        } else {
            format!("{} ({})", e.process, about.join(", "))
        };
        let port = s.port.map_or("-".into(), |p| p.to_string());
        let age = age_ms(s).map_or("never".into(), |a| format!("{:.1}s ago", a as f64 / 1000.0));
        let stale = if s.alive {
            ""
        } else {
            "  STALE (process gone)"
        };
        out += &format!(
            "pid {} {who}: {} {}/{port} sap {:#04x} mtu {} {}, updated {age}{stale}\n",
            s.pid,
            s.ifname,
            mac(&s.mac),
            s.sap,
            s.mtu,
            s.backend,
        );
        let drops: Vec<String> = s
            .drops
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out += &format!(
            "  frames rx {} tx {}, connections {}, accepted {}, resets sent {}, drops {}\n",
            s.counter("rx_frames"),
            s.counter("tx_frames"),
            s.connection_count,
            s.counter("accepted"),
            s.counter("resets_sent"),
            if drops.is_empty() {
                "0".into()
            } else {
                drops.join(", ")
            },
        );
        if s.connections.is_empty() {
            continue;
        }
        let rows: Vec<[String; 15]> = s
            .connections
            .iter()
            .map(|c| {
                [
                    format!("{}/{}", mac(&c.peer_mac), c.peer_port),
                    c.state.to_owned(),
                    format!("{:.1}", c.srtt_ns as f64 / 1000.0),
                    format!("{:.1}", c.rttvar_ns as f64 / 1000.0),
                    c.cwnd.to_string(),
                    c.send_credit.to_string(),
                    c.recv_window.to_string(),
                    c.counter("payload_bytes_sent").to_string(),
                    c.counter("payload_bytes_received").to_string(),
                    c.counter("messages_sent").to_string(),
                    c.counter("messages_received").to_string(),
                    c.counter("retransmits").to_string(),
                    c.counter("spurious_timeouts").to_string(),
                    c.counter("timeouts").to_string(),
                    c.in_flight.to_string(),
                ]
            })
            .collect();
        let mut width = CONN_HEAD.map(str::len);
        for r in &rows {
            for (w, cell) in width.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: Vec<&str>| -> String {
            let mut l = String::from("  ");
            for (i, (cell, w)) in cells.iter().zip(width).enumerate() {
                // Peer and state to the left, numbers to the right.
                if i < 2 {
                    l += &format!("{cell:<w$}  ");
                } else {
                    l += &format!("{cell:>w$}  ");
                }
            }
            l.trim_end().to_owned() + "\n"
        };
        out += &line(CONN_HEAD.to_vec());
        for r in &rows {
            out += &line(r.iter().map(String::as_str).collect());
        }
        if s.connection_count > s.connections.len() as u64 {
            out += &format!(
                "  ... and {} more connections\n",
                s.connection_count - s.connections.len() as u64
            );
        }
    }
    for e in &scan.errors {
        out += &format!("unreadable page: {e}\n");
    }
    out
}
