//! The protocol on the simulated network: 1,000 seeds of 16 hosts and 64
//! tasks with random traffic and migrations, every run checked for the
//! five properties and the hop bound; the two baselines under the same
//! checks; a host that fails. A failing seed prints how to replay it.

use migrate::proto::Mode;
use migrate::sim::{run, SimConfig, SimReport};

/// Seeds per CI run (`MIGRATE_SIM_SEEDS` changes it).
const SEEDS: u64 = 1000;

fn check(r: &SimReport, what: &str) {
    assert!(
        r.ok(),
        "{what}: seed {} violated the properties: {r:?}\nreplay: MIGRATE_SIM_SEED={} cargo test -p migrate --test sim replay -- --nocapture",
        r.seed,
        r.seed
    );
}

fn seeds() -> u64 {
    std::env::var("MIGRATE_SIM_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SEEDS)
}

#[test]
fn thousand_seeds_keep_the_five_properties() {
    let mut total = SimReport::default();
    for seed in 0..seeds() {
        let r = run(SimConfig {
            seed,
            ..SimConfig::default()
        });
        check(&r, "seed protocol");
        assert_eq!(r.delivered, r.sent, "seed {seed}: {r:?}");
        total.sent += r.sent;
        total.migrations += r.migrations;
        total.forwarded += r.forwarded;
        total.max_hops = total.max_hops.max(r.max_hops);
    }
    // The runs did what they are for: many migrations, messages forwarded.
    assert!(total.migrations >= 50 * seeds(), "{total:?}");
    assert!(total.forwarded > 0, "{total:?}");
    println!(
        "{} seeds: {} messages, {} migrations, {} forwarded, max hops {}",
        seeds(),
        total.sent,
        total.migrations,
        total.forwarded,
        total.max_hops
    );
}

#[test]
fn replay() {
    let Some(seed) = std::env::var("MIGRATE_SIM_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        println!("set MIGRATE_SIM_SEED=<seed> to replay one run");
        return;
    };
    let r = run(SimConfig {
        seed,
        ..SimConfig::default()
    });
    println!("{r:#?}");
    check(&r, "replay");
}

#[test]
fn baselines_keep_the_properties_too() {
    for mode in [Mode::Fowler, Mode::Broadcast] {
        for seed in 0..100 {
            let r = run(SimConfig {
                seed,
                mode,
                ..SimConfig::default()
            });
            check(&r, &format!("{mode:?}"));
            assert_eq!(r.delivered, r.sent);
        }
    }
}

/// Halfway through, the host forwarding or holding the most messages
/// between other hosts' tasks fails.
fn failing(seed: u64) -> SimConfig {
    SimConfig {
        seed,
        fail: Some(((seed % 16) as u32, 0.5)),
        fail_busiest: true,
        ..SimConfig::default()
    }
}

#[test]
fn a_failed_host_loses_only_its_tasks_and_senders_learn_it() {
    let (mut refused, mut through, mut runs_through) = (0, 0, 0);
    let (mut resent, mut copies, mut dropped) = (0, 0, 0);
    for seed in 0..100 {
        let r = run(failing(seed));
        // Strict: every message between surviving tasks delivered once and
        // in order (no gap for a surviving sender, nothing left
        // unacknowledged); only a failed sender's messages may be missing.
        check(&r, "host failure");
        // Refusals come within the wait after detection, plus delays.
        assert!(r.max_refusal_ns <= 2_000_000 + 1_000_000, "{r:?}");
        refused += r.refused;
        through += r.through_failed;
        runs_through += u64::from(r.through_failed > 0);
        resent += r.resent;
        copies += r.dropped_copies;
        dropped += r.dropped_with_host;
        assert!(r.through_failed == 0 || r.resent > 0, "{r:?}");
    }
    assert!(refused > 0, "no run sent to a lost task");
    // The failures hit messages in transit between survivors, which the
    // checks above found delivered.
    assert!(
        runs_through >= 50,
        "{runs_through} runs, {through} messages"
    );
    println!("100 failures: {through} messages between survivors were in transit through the failed host ({runs_through} runs), all delivered; {resent} resent, {copies} copies dropped by seq; {dropped} messages of failed senders dropped, {refused} refused");
}

#[test]
fn replay_failure() {
    let Some(seed) = std::env::var("MIGRATE_SIM_FAIL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    let r = run(failing(seed));
    println!("{r:#?}");
    check(&r, "replay");
}
