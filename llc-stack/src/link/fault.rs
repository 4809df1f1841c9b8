//! Fault injection middleware: wraps any [`Device`] and, on the receive path,
//! drops, duplicates, reorders, corrupts or delays frames, or cuts the link
//! for a while. Every decision comes from a seeded generator, so a failing
//! run is replayed from its seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{Capabilities, Device, RxToken};
use crate::rng::Rng;
use crate::time::Instant;

/// What to inject. Probabilities are per received frame.
#[derive(Clone, Debug, Default)]
pub struct FaultConfig {
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back by `reorder_delay`, letting later
    /// frames overtake it.
    pub reorder: f64,
    /// How long a reordered frame is held.
    pub reorder_delay: Duration,
    /// Probability one byte after the Ethernet header is flipped.
    pub corrupt: f64,
    /// Extra delay added to every frame.
    pub delay: Duration,
    /// Time windows `[start, end)` during which every frame is lost.
    pub partitions: Vec<(Instant, Instant)>,
}

/// What was injected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames passed through untouched.
    pub passed: u64,
    /// Frames dropped by `loss`.
    pub lost: u64,
    /// Frames dropped by a partition.
    pub partitioned: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames held back for reordering.
    pub reordered: u64,
    /// Frames with a flipped byte.
    pub corrupted: u64,
}

#[derive(Copy, Clone, Debug)]
struct Decision {
    lose: bool,
    duplicate: bool,
    reorder: bool,
    corrupt: Option<u64>,
}

/// The wrapper.
#[derive(Debug)]
pub struct FaultInjector<D> {
    inner: D,
    cfg: FaultConfig,
    rng: Rng,
    next: Option<Decision>,
    held: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    held_seq: u64,
    last_now: Instant,
    stats: FaultStats,
}

impl<D: Device> FaultInjector<D> {
    /// Wrap `inner`; decisions are drawn from a generator seeded with `seed`.
    pub fn new(inner: D, cfg: FaultConfig, seed: u64) -> Self {
        FaultInjector {
            inner,
            cfg,
            rng: Rng::new(seed),
            next: None,
            held: BinaryHeap::new(),
            held_seq: 0,
            last_now: Instant::ZERO,
            stats: FaultStats::default(),
        }
    }

    /// What was injected so far.
    pub fn stats(&self) -> &FaultStats {
        &self.stats
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably.
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    /// Change what is injected from now on.
    pub fn set_config(&mut self, cfg: FaultConfig) {
        self.cfg = cfg;
        self.next = None;
    }

    /// When the next held-back frame is released.
    pub fn next_release(&self) -> Option<Instant> {
        self.held.peek().map(|r| r.0 .0)
    }

    fn decide(&mut self) -> Decision {
        let c = &self.cfg;
        let lose = self.rng.chance(c.loss);
        let duplicate = self.rng.chance(c.duplicate);
        let reorder = self.rng.chance(c.reorder);
        let corrupt = if self.rng.chance(c.corrupt) {
            Some(self.rng.next_u64())
        } else {
            None
        };
        Decision {
            lose,
            duplicate,
            reorder,
            corrupt,
        }
    }

    fn hold(&mut self, at: Instant, frame: Vec<u8>) {
        self.held_seq += 1;
        self.held.push(Reverse((at, self.held_seq, frame)));
    }

    fn partitioned(&self, now: Instant) -> bool {
        self.cfg
            .partitions
            .iter()
            .any(|&(s, e)| s <= now && now < e)
    }
}

/// A frame from a [`FaultInjector`]: the inner device's own token when the
/// frame passes untouched, or a copy when it was altered or held.
pub enum FaultRx<T> {
    /// Untouched, zero-copy.
    Inner(T),
    /// Altered or released from the hold queue.
    Owned(Vec<u8>),
}

impl<T: RxToken> RxToken for FaultRx<T> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            FaultRx::Inner(t) => t.consume(f),
            FaultRx::Owned(v) => f(&v),
        }
    }
}

impl<D: Device> Device for FaultInjector<D> {
    type RxToken<'a>
        = FaultRx<D::RxToken<'a>>
    where
        Self: 'a;
    type TxToken<'a>
        = D::TxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>> {
        self.last_now = now;
        if self.next_release().is_some_and(|t| t <= now) {
            let Reverse((_, _, frame)) = self.held.pop().expect("peeked");
            return Some(FaultRx::Owned(frame));
        }
        loop {
            // Decide before asking the inner device, so that a frame passing
            // untouched is lent without a copy.
            let d = match self.next {
                Some(d) => d,
                None => {
                    let d = self.decide();
                    self.next = Some(d);
                    d
                }
            };
            let touch = d.lose
                || d.duplicate
                || d.reorder
                || d.corrupt.is_some()
                || !self.cfg.delay.is_zero()
                || self.partitioned(now);
            if !touch {
                let tok = self.inner.receive(now)?;
                self.next = None;
                self.stats.passed += 1;
                return Some(FaultRx::Inner(tok));
            }
            let mut frame = self.inner.receive(now)?.consume(|f| f.to_vec());
            self.next = None;
            if self.partitioned(now) {
                self.stats.partitioned += 1;
                continue;
            }
            if d.lose {
                self.stats.lost += 1;
                continue;
            }
            if let Some(r) = d.corrupt {
                let hdr = crate::wire::ethernet::HEADER_LEN;
                if frame.len() > hdr {
                    let at = hdr + (r % (frame.len() - hdr) as u64) as usize;
                    frame[at] ^= 1 << ((r >> 32) % 8);
                    self.stats.corrupted += 1;
                }
            }
            let release = now + self.cfg.delay;
            if d.duplicate {
                self.stats.duplicated += 1;
                self.hold(release, frame.clone());
            }
            if d.reorder {
                self.stats.reordered += 1;
                self.hold(release + self.cfg.reorder_delay, frame);
                continue;
            }
            if release > now {
                self.hold(release, frame);
                continue;
            }
            return Some(FaultRx::Owned(frame));
        }
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        self.inner.transmit(now)
    }

    fn flush(&mut self, now: Instant) -> io::Result<()> {
        self.inner.flush(now)
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        // Held frames become due without any wake-up from the inner device.
        let until_release = self
            .next_release()
            .map(|t| t.saturating_duration_since(Instant::now().max(self.last_now)));
        let t = match (timeout, until_release) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.inner.wait(t)
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        let until_release = self
            .next_release()
            .map(|t| t.saturating_duration_since(Instant::now().max(self.last_now)));
        match (self.inner.prepare_wait(fds), until_release) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = self.inner.capabilities();
        c.backend = format!("{}+faults", c.backend);
        c
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.inner.counters()
    }

    fn kernel_drops(&self) -> u64 {
        self.inner.kernel_drops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{Sim, SimConfig};
    use crate::link::TxToken;

    fn send(port: &mut impl Device, now: Instant, tag: u8) {
        port.transmit(now).unwrap().consume(|b| {
            b[..60].fill(tag);
            60
        });
    }

    #[test]
    fn loss_and_duplicates_follow_the_seed() {
        let run = |seed| {
            let sim = Sim::new(SimConfig {
                latency: Duration::ZERO,
                rate_bps: 0,
                ..Default::default()
            });
            let mut a = sim.port();
            let mut b = FaultInjector::new(
                sim.port(),
                FaultConfig {
                    loss: 0.3,
                    duplicate: 0.2,
                    ..Default::default()
                },
                seed,
            );
            let now = Instant::ZERO;
            let mut got = Vec::new();
            for i in 0..200u8 {
                send(&mut a, now, i);
                while let Some(t) = b.receive(now) {
                    got.push(t.consume(|f| f[0]));
                }
            }
            (got, b.stats().clone())
        };
        let (g1, s1) = run(1);
        let (g2, s2) = run(1);
        assert_eq!(g1, g2);
        assert_eq!(s1, s2);
        assert!(s1.lost > 30 && s1.lost < 90, "{s1:?}");
        assert!(s1.duplicated > 10, "{s1:?}");
        assert_eq!(g1.len() as u64, 200 - s1.lost + s1.duplicated);
        assert_ne!(run(2).0, g1);
    }

    #[test]
    fn reorder_corrupt_and_partition() {
        let sim = Sim::new(SimConfig {
            latency: Duration::ZERO,
            rate_bps: 0,
            ..Default::default()
        });
        let mut a = sim.port();
        let mut b = FaultInjector::new(
            sim.port(),
            FaultConfig {
                reorder: 1.0,
                reorder_delay: Duration::from_micros(10),
                ..Default::default()
            },
            3,
        );
        send(&mut a, Instant::ZERO, 1);
        assert!(b.receive(Instant::ZERO).is_none(), "held back");
        assert_eq!(b.next_release(), Some(Instant::from_micros(10)));
        assert_eq!(
            b.receive(Instant::from_micros(10))
                .unwrap()
                .consume(|f| f[0]),
            1
        );

        b.set_config(FaultConfig {
            corrupt: 1.0,
            ..Default::default()
        });
        send(&mut a, Instant::ZERO, 7);
        let f = b.receive(Instant::ZERO).unwrap().consume(|f| f.to_vec());
        assert_eq!(
            f.iter().filter(|&&x| x != 7).count(),
            1,
            "exactly one byte flipped"
        );

        b.set_config(FaultConfig {
            partitions: vec![(Instant::from_micros(5), Instant::from_micros(8))],
            ..Default::default()
        });
        send(&mut a, Instant::from_micros(6), 9);
        assert!(b.receive(Instant::from_micros(6)).is_none());
        send(&mut a, Instant::from_micros(8), 9);
        assert!(b.receive(Instant::from_micros(8)).is_some());
        assert_eq!(b.stats().partitioned, 1);
    }
}
