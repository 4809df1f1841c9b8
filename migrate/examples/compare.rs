//! The seed's protocol against two baselines of its related work on the
//! simulator, under the same traffic, migrations and checks: forwarding
//! addresses only (Fowler) and locate-by-broadcast (Emerald, V). Prints a
//! markdown table (docs/BENCHMARKS.md).
//!
//! `cargo run --release -p migrate --example compare [SEEDS]`

use migrate::proto::{Config, Mode};
use migrate::sim::{run, SimConfig, SimReport};

fn main() {
    let seeds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    println!("{seeds} seeds each; tasks 64, 1,000 messages and 100 migrations per seed; all runs checked (exactly once, per-pair order, content, hop bound)\n");
    println!("| hosts | protocol | control msgs at start | control msgs per migration | forwarded per delivered message | max forwards of one message | ACK packets per delivered message | violations |");
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for hosts in [16u32, 64] {
        for (name, mode) in [
            ("seed 003 (home sets + freshness + LOCAL)", Mode::Seed),
            ("forwarding addresses only (Fowler)", Mode::Fowler),
            ("locate by broadcast (Emerald, V)", Mode::Broadcast),
        ] {
            let mut t = SimReport::default();
            let mut bad = 0;
            for seed in 0..seeds {
                let r = run(SimConfig {
                    seed,
                    hosts,
                    mode,
                    ..SimConfig::default()
                });
                bad += u64::from(!r.ok() || r.delivered != r.sent);
                t.sent += r.sent;
                t.delivered += r.delivered;
                t.migrations += r.migrations;
                t.forwarded += r.forwarded;
                t.control += r.control;
                t.control_after_start += r.control_after_start;
                t.max_hops = t.max_hops.max(r.max_hops);
                t.acks += r.acks;
            }
            println!(
                "| {hosts} | {name} | {:.1} | {:.2} | {:.3} | {} | {:.3} | {bad} |",
                (t.control - t.control_after_start) as f64 / seeds as f64,
                t.control_after_start as f64 / t.migrations as f64,
                t.forwarded as f64 / t.delivered as f64,
                t.max_hops,
                t.acks as f64 / t.delivered as f64
            );
        }
    }
    // What the acknowledgements cost as their delay grows: fewer, larger
    // ACK packets; retained messages wait longer for release.
    println!(
        "\nseed 003, 16 hosts: ACK delay (ack_every {})\n",
        Config::default().ack_every
    );
    println!("| ACK delay | ACK packets per delivered message | pairs acknowledged per ACK packet | acknowledgements piggybacked on INTERs | violations |");
    println!("|---:|---:|---:|---:|---:|");
    for delay_us in [250u64, 1_000, 4_000] {
        let (mut sent, mut acks, mut entries, mut piggy, mut bad) = (0, 0, 0, 0, 0);
        for seed in 0..seeds {
            let mut cfg = SimConfig {
                seed,
                ..SimConfig::default()
            };
            cfg.node.ack_delay_ns = delay_us * 1_000;
            let r = run(cfg);
            bad += u64::from(!r.ok() || r.delivered != r.sent);
            sent += r.delivered;
            acks += r.acks;
            entries += r.ack_entries;
            piggy += r.ack_piggybacked;
        }
        println!(
            "| {} ms | {:.3} | {:.2} | {:.0}% | {bad} |",
            delay_us as f64 / 1000.0,
            acks as f64 / sent as f64,
            entries as f64 / acks as f64,
            100.0 * piggy as f64 / (piggy + entries) as f64
        );
    }
}
