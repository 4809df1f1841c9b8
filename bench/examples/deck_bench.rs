//! The seeds' DECK benchmarks: ping-pong latency and bandwidth, 0 B to
//! 1 MiB, of DECK's mailboxes and, alternating with it over the same
//! connections in the same job, of the message layer underneath (what DECK
//! adds is the difference).
//!
//! - `deck_bench node`: one node of a two-node job started by deckrun;
//!   node 0 prints one JSON line per measurement.
//! - `deck_bench bed` (root): builds a two-host cluster on one Ethernet
//!   segment (testbed::Cluster) and runs the job over each backend
//!   (llc-xdp, llc-packet, tcp), alternating, then prints the table of
//!   docs/BENCHMARKS.md.
//!
//! `cargo build --release -p deck --bins && cargo build --release -p bench --example deck_bench && target/release/examples/deck_bench bed`

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use deck::{Deck, Msg};
use msg_layer::{Source, Tag};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run as a node of a deckrun job of two nodes.
    Node {
        /// Rounds of the whole sweep (the layers alternate in each).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Two nodes as threads of this process over a transport spec (a quick
    /// look, e.g. `tcp://127.0.0.1:0`).
    Local {
        /// The transport of both nodes.
        #[arg(default_value = "tcp://127.0.0.1:0")]
        spec: String,
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// Build a two-host bed and run the job over every backend (root).
    Bed {
        /// MTU of the bed's links.
        #[arg(long, default_value_t = 9000)]
        mtu: u32,
        /// Backends, in the order each repetition runs them.
        #[arg(long, value_delimiter = ',', default_value = "xdp,packet,tcp")]
        backends: Vec<String>,
        /// Times the backends run, alternating.
        #[arg(long, default_value_t = 2)]
        repeat: usize,
        /// Rounds inside each job.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
}

const SIZES: [usize; 11] = [
    0,
    8,
    64,
    512,
    4096,
    16384,
    65536,
    262_144,
    524_288,
    1 << 20,
    8,
];
const MSG_CONTEXT: u32 = 0x5151;

fn iterations(size: usize) -> usize {
    if size <= 4096 {
        2000
    } else {
        ((64usize << 20) / size).clamp(30, 1000)
    }
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Node { rounds } => node(Deck::init()?, rounds),
        Cmd::Local { spec, rounds } => {
            let spec: msg_layer::transport::TransportSpec = spec.parse()?;
            let nodes = Deck::in_process(&[spec.clone(), spec], Duration::from_secs(10))?;
            let hs: Vec<_> = nodes
                .into_iter()
                .map(|d| std::thread::spawn(move || node(d, rounds)))
                .collect();
            for h in hs {
                h.join().map_err(|_| anyhow::anyhow!("node panicked"))??;
            }
            Ok(())
        }
        Cmd::Bed {
            mtu,
            backends,
            repeat,
            rounds,
        } => bed(mtu, &backends, repeat, rounds),
    }
}

/// One-way time of `iters` ping-pongs of `size` bytes through DECK.
fn deck_pingpong(
    d: &Deck,
    me: &deck::Mailbox,
    other: &deck::Mailbox,
    size: usize,
    iters: usize,
) -> Result<Duration> {
    let mut out = Msg::new(size);
    out.pack_bytes(&vec![0x5a; size])?;
    let mut inb = Msg::new(size);
    d.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        if d.node() == 0 {
            other.post(&out)?;
            me.retrv(&mut inb)?;
        } else {
            me.retrv(&mut inb)?;
            other.post(&out)?;
        }
    }
    let el = t.elapsed();
    anyhow::ensure!(
        inb.datalen() == size,
        "received {} of {size} bytes",
        inb.datalen()
    );
    Ok(el / (2 * iters as u32))
}

/// The same through the message layer's tagged send and receive.
fn msg_pingpong(d: &Deck, size: usize, iters: usize) -> Result<Duration> {
    let ep = d
        .message_layer()
        .context("a job of one node has no message layer")?;
    let peer = d.peer_of(1 - d.node()).context("the other node")?;
    let data = Bytes::from(vec![0x5a; size]);
    let mut buf = vec![0u8; size];
    d.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        let recv = |buf: Vec<u8>| -> Result<Vec<u8>> {
            let r = ep.irecv(Source::Peer(peer), Tag::Is(1), MSG_CONTEXT, buf);
            let c = ep.wait(r)?;
            let mut b = c.data.context("receive without its buffer")?;
            b.resize(size, 0);
            Ok(b)
        };
        if d.node() == 0 {
            ep.wait(ep.isend(peer, 1, MSG_CONTEXT, data.clone()))?;
            buf = recv(buf)?;
        } else {
            buf = recv(buf)?;
            ep.wait(ep.isend(peer, 1, MSG_CONTEXT, data.clone()))?;
        }
    }
    Ok(t.elapsed() / (2 * iters as u32))
}

fn node(d: Deck, rounds: usize) -> Result<()> {
    anyhow::ensure!(d.numnodes() == 2, "deck_bench runs on exactly two nodes");
    let me = d.create(&format!("pp{}", d.node()))?;
    let other = d.clone_mailbox(&format!("pp{}", 1 - d.node()))?;
    let transport = d.transport_name().to_string();
    for round in 0..rounds {
        for &size in &SIZES {
            let iters = iterations(size);
            // Warm both paths, then measure them back to back, the order
            // alternating by round.
            deck_pingpong(&d, &me, &other, size, iters / 10 + 1)?;
            msg_pingpong(&d, size, iters / 10 + 1)?;
            let (dk, ml) = if round % 2 == 0 {
                let a = deck_pingpong(&d, &me, &other, size, iters)?;
                (a, msg_pingpong(&d, size, iters)?)
            } else {
                let b = msg_pingpong(&d, size, iters)?;
                (deck_pingpong(&d, &me, &other, size, iters)?, b)
            };
            if d.node() == 0 {
                for (layer, t) in [("deck", dk), ("msg", ml)] {
                    println!(
                        "{{\"transport\":\"{transport}\",\"layer\":\"{layer}\",\"round\":{round},\"size\":{size},\"one_way_ns\":{}}}",
                        t.as_nanos()
                    );
                }
            }
        }
    }
    d.done()?;
    Ok(())
}

fn bed(mtu: u32, backends: &[String], repeat: usize, rounds: usize) -> Result<()> {
    if let Err(why) = testbed::check_privileges() {
        bail!("deck_bench bed builds network namespaces: {why}");
    }
    let exe = std::env::current_exe()?;
    let deckrun: PathBuf = exe
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("deckrun"))
        .context("locating deckrun")?;
    anyhow::ensure!(
        deckrun.exists(),
        "{} not found: cargo build --release -p deck --bins",
        deckrun.display()
    );
    let cluster = testbed::Cluster::new(2, mtu)?;
    // (backend, layer, size) -> one-way times (ns) of every round and run.
    let mut results: BTreeMap<(String, String, usize), Vec<u64>> = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for rep in 0..repeat {
        for b in backends {
            let mut cmd = cluster.command(0, &deckrun);
            cmd.args(["-n", "2", "--host", "h0,h1", "--rsh"])
                .arg(cluster.agent())
                .args(["--transport", &format!("llc://eth0?backend={b}")])
                .arg(&exe)
                .args(["node", "--rounds", &rounds.to_string()]);
            let out = testbed::run_bounded(&mut cmd, Duration::from_secs(600))?;
            if !out.success() {
                bail!("deck_bench over {b} failed:\n{out}");
            }
            for line in out.stdout.lines() {
                let Some(json) = line.strip_prefix("[0] ") else {
                    continue;
                };
                let v: serde_json::Value = serde_json::from_str(json)?;
                let size = v["size"].as_u64().context("size")? as usize;
                let layer = v["layer"].as_str().context("layer")?.to_string();
                let ns = v["one_way_ns"].as_u64().context("ns")?;
                names.insert(
                    b.clone(),
                    v["transport"].as_str().unwrap_or("?").to_string(),
                );
                results
                    .entry((b.clone(), layer, size))
                    .or_default()
                    .push(ns);
            }
            eprintln!("run {}/{repeat}: {b} done", rep + 1);
        }
    }
    println!("DECK ping-pong over a two-host bridge bed, MTU {mtu}; median of {} measurements each (DECK and the message layer alternate in the same job)", repeat * rounds);
    for b in backends {
        println!("\n{b}: {}", names.get(b).map_or("?", String::as_str));
        println!("| size | DECK one-way (us) | message layer (us) | DECK - msg (us) | DECK MB/s | msg MB/s | DECK/msg bandwidth |");
        println!("|---:|---:|---:|---:|---:|---:|---:|");
        let mut sizes: Vec<usize> = SIZES.to_vec();
        sizes.sort();
        sizes.dedup();
        for size in sizes {
            let med = |layer: &str| {
                let mut v = results
                    .get(&(b.clone(), layer.to_string(), size))
                    .cloned()
                    .unwrap_or_default();
                v.sort();
                v.get(v.len() / 2).copied()
            };
            let (Some(dk), Some(ml)) = (med("deck"), med("msg")) else {
                continue;
            };
            let mbs = |ns: u64| {
                if ns == 0 {
                    0.0
                } else {
                    size as f64 * 1e3 / ns as f64
                }
            };
            println!(
                "| {size} | {:.2} | {:.2} | {:+.2} | {:.1} | {:.1} | {:.3} |",
                dk as f64 / 1e3,
                ml as f64 / 1e3,
                (dk as f64 - ml as f64) / 1e3,
                mbs(dk),
                mbs(ml),
                if dk == 0 { 0.0 } else { ml as f64 / dk as f64 }
            );
        }
    }
    Ok(())
}
