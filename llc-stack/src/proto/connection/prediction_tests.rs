//! Header prediction against the general path: two copies of the same
//! exchange, one with prediction off, must stay identical frame by frame
//! (every field of both ends, every frame sent, every event), through
//! loss, duplicates, reordering, timeouts, multi-fragment messages and a
//! closing receive window.

use std::collections::BTreeMap;
use std::time::Duration;

use super::harness::{deliver, pattern, transmit_all, Pair};
use super::{Connection, Event, NO_PREDICTION};
use crate::proto::config::Config;
use crate::rng::Rng;
use crate::wire::{self, Body};

/// Everything `c` holds, the reassembly map in key order (a hash map's
/// order differs between two maps of the same contents).
fn snapshot(c: &mut Connection) -> String {
    let asm = std::mem::take(c.rcv.assemblies_mut());
    let s = format!("{c:?} {:?}", asm.iter().collect::<BTreeMap<_, _>>());
    *c.rcv.assemblies_mut() = asm;
    s
}

/// True when `c` would take `frame` on the predicted path.
fn is_predicted(c: &Connection, frame: &[u8]) -> bool {
    match wire::parse(frame, None).expect("a well-formed frame").body {
        Body::Transport(tf) => c.predicted(&tf),
        _ => false,
    }
}

/// The exchange seeded by `seed`, run on two pairs in lock step: `fast`
/// with prediction, `slow` without. Returns how many frames were
/// predicted.
fn lock_step(seed: u64, steps: u32) -> usize {
    let mut rng = Rng::new(seed);
    let cfg = Config {
        acked_events: rng.chance(0.5),
        undelivered_limit_bytes: 64 << 10,
        ..Config::default()
    };
    let mut fast = Pair::with(cfg.clone(), cfg.clone());
    let mut slow = Pair::with(cfg.clone(), cfg);
    // Frames on the wire: (towards B, bytes).
    let mut wire: Vec<(bool, Vec<u8>)> = Vec::new();
    let mut predicted = 0;
    for step in 0..steps {
        for to_b in [true, false] {
            if rng.chance(0.4) {
                let n = match rng.below(10) {
                    0 => rng.below(5000) as usize,
                    _ => 1 + rng.below(200) as usize,
                };
                let data = pattern(n, step as u8);
                let sent = |p: &mut Pair| {
                    let c = if to_b { &mut p.a } else { &mut p.b };
                    c.send(data.clone().into())
                };
                assert_eq!(sent(&mut fast), sent(&mut slow), "seed {seed} step {step}");
            }
        }
        let frames = |p: &mut Pair| {
            let mut f: Vec<(bool, Vec<u8>)> = transmit_all(&mut p.a, p.now)
                .into_iter()
                .map(|b| (true, b))
                .collect();
            f.extend(
                transmit_all(&mut p.b, p.now)
                    .into_iter()
                    .map(|b| (false, b)),
            );
            f
        };
        let sent = frames(&mut fast);
        assert_eq!(sent, frames(&mut slow), "seed {seed} step {step}");
        wire.extend(sent);
        for (to_b, f) in std::mem::take(&mut wire) {
            let fate = rng.below(100);
            if fate < 2 {
                continue; // lost
            }
            if fate < 6 {
                wire.push((to_b, f)); // overtaken by later frames
                continue;
            }
            let copies = if fate < 8 { 2 } else { 1 };
            for _ in 0..copies {
                let mut snaps = Vec::new();
                for (p, on) in [(&mut fast, true), (&mut slow, false)] {
                    let c = if to_b { &mut p.b } else { &mut p.a };
                    predicted += (on && is_predicted(c, &f)) as usize;
                    NO_PREDICTION.with(|n| n.set(!on));
                    deliver(c, p.now, &f);
                    NO_PREDICTION.with(|n| n.set(false));
                    snaps.push(snapshot(c));
                }
                assert_eq!(snaps[0], snaps[1], "seed {seed} step {step}");
            }
        }
        // The application takes its messages, or some of them.
        if rng.chance(0.7) {
            for p in [&mut fast, &mut slow] {
                for c in [&mut p.a, &mut p.b] {
                    while let Some(e) = c.poll_event() {
                        if let Event::Message { data, .. } = e {
                            c.message_consumed(data.len());
                        }
                    }
                }
            }
        }
        let dt = Duration::from_micros(rng.below(400));
        for p in [&mut fast, &mut slow] {
            let t = p.now + dt;
            p.advance_to(t);
        }
        for (f, s) in [(&mut fast.a, &mut slow.a), (&mut fast.b, &mut slow.b)] {
            assert_eq!(snapshot(f), snapshot(s), "seed {seed} step {step}");
        }
    }
    predicted
}

#[test]
fn prediction_changes_nothing() {
    let mut predicted = 0;
    for seed in 1..=4 {
        predicted += lock_step(seed, 1000);
    }
    // The exchanges mostly run in the common case the prediction takes.
    assert!(predicted > 1500, "only {predicted} frames predicted");
}
