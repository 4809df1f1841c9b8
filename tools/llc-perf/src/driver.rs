//! The client's sweeps: every test over every transport, interleaved point
//! by point (for each size, each round, each transport), so that the
//! transports see the same machine conditions and their ratios are fair.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use msg_layer::PeerId;
use serde::Serialize;

use crate::bench::{self, Compute};
use crate::transports::{Ep, Kind};

/// The tests.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Test {
    /// Ping-pong sweep (NetPIPE sizes): one-way latency.
    Latency,
    /// Stream with a window of outstanding isends.
    Bandwidth,
    /// Both directions at once.
    Bibw,
    /// Small messages per second (a stream of small messages).
    Msgrate,
    /// Os and Or at 8 B by the gap-minus-compute method.
    Overhead,
    /// isend, compute, wait: with the progress thread off and on.
    Overlap,
    /// N senders to one receiver through a bridge (demo only: it builds its
    /// own testbed of N+1 hosts).
    Incast,
}

/// What to measure and how long.
#[derive(Clone, Debug, Serialize)]
pub struct Settings {
    /// Tests, in order.
    pub tests: Vec<Test>,
    /// Interleaved repetitions of every point.
    pub rounds: usize,
    /// Outstanding isends in bandwidth tests.
    pub window: usize,
    /// Largest message of the sweeps.
    pub max_size: usize,
    /// Rough duration of one measurement of one point.
    pub target_ms: f64,
    /// Check every payload.
    pub verify: bool,
    /// Sweep powers of two only (the OSU micro-benchmarks' sizes) instead
    /// of NetPIPE's sizes around them.
    pub pow2_sizes: bool,
    /// Tiny sweeps (tests of the tool).
    pub quick: bool,
    /// Message size of the overlap test.
    pub overlap_bytes: usize,
    /// Sender/receiver pairs of the message-rate test, streaming at once,
    /// each over its own endpoints and on its own thread (osu_mbw_mr's
    /// pairs); the other tests use pair 0 alone.
    pub pairs: usize,
    /// CPU of each pair's sending thread, when the demo pins them (empty:
    /// they run where the measuring thread may).
    #[serde(skip)]
    pub pair_cpus: Vec<usize>,
    /// The demo's link floors again with each end doing this work per
    /// message (`--floor-work`; empty: not measured).
    #[serde(skip)]
    pub floor_work: Vec<crate::floor::FloorWork>,
}

/// The link floor with each end doing some work per message.
#[derive(Clone, Debug, Serialize)]
pub struct WorkedFloor {
    /// What each end did per message it sent.
    pub work: String,
    /// Median one-way time (µs), of three measurements.
    pub one_way_us: f64,
    /// Against the bare floor: the median of three differences, each
    /// against a bare floor measured just before (µs).
    pub above_bare_us: f64,
    /// The same work run back to back on one thread (µs per run).
    pub warm_us: f64,
}

/// One transport as the client sees it.
pub struct Link {
    /// Which.
    pub kind: Kind,
    /// The endpoint.
    pub ep: Ep,
    /// The server, as the endpoint knows it.
    pub peer: PeerId,
    /// A second endpoint for the overlap test when the main one is set up
    /// for a single thread (tcp/io_uring with cooperative task running).
    pub overlap: Option<(Ep, PeerId)>,
    /// The endpoints of pairs 1.. of the message-rate test (pair 0 is
    /// `ep`), each connected to its own server endpoint.
    pub pairs: Vec<(Ep, PeerId)>,
}

impl Link {
    /// Endpoint and server of every message-rate pair, pair 0 first.
    fn all_pairs(&self) -> impl Iterator<Item = (&Ep, PeerId)> {
        std::iter::once((&self.ep, self.peer)).chain(self.pairs.iter().map(|(e, p)| (e, *p)))
    }
}

/// A latency point.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyPoint {
    /// Message size.
    pub bytes: usize,
    /// Round trips measured (all rounds).
    pub reps: usize,
    /// Fastest one-way time.
    pub one_way_min_us: f64,
    /// Median one-way time (RTT/2).
    pub one_way_median_us: f64,
    /// Mean one-way time: what osu_latency reports.
    pub one_way_mean_us: f64,
    /// 99th percentile.
    pub one_way_p99_us: f64,
}

/// A bandwidth, bibw or message-rate point.
#[derive(Clone, Debug, Serialize)]
pub struct RatePoint {
    /// Message size.
    pub bytes: usize,
    /// Outstanding messages per window.
    pub window: usize,
    /// Messages timed (all rounds; both directions for bibw).
    pub messages: usize,
    /// Payload rate, median of rounds (of all pairs together).
    pub gbit_s: f64,
    /// Messages per second, median of rounds: for the message-rate test
    /// the sum of the pairs' rates, each pair timed on its own, as
    /// osu_mbw_mr adds them.
    pub msgs_per_s: f64,
    /// Sender/receiver pairs streaming at once (1 but for msgrate).
    pub pairs: usize,
    /// Message-rate test: each pair's messages per second in the round
    /// whose sum is the median (so that they add up to `msgs_per_s`),
    /// pair 0 first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_pair_msgs_per_s: Vec<f64>,
}

/// CPU overheads by the gap-minus-compute method.
#[derive(Clone, Debug, Serialize)]
pub struct OverheadPoint {
    /// Message size.
    pub bytes: usize,
    /// Time per message of a stream with no computation (sender side).
    pub send_gap_us: f64,
    /// Largest computation between sends that leaves the time per message unchanged.
    pub send_compute_us: f64,
    /// Os = gap - that computation.
    pub os_us: f64,
    /// Time per message of a received stream with no computation.
    pub recv_gap_us: f64,
    /// Largest computation between receives that leaves it unchanged.
    pub recv_compute_us: f64,
    /// Or = gap - that computation.
    pub or_us: f64,
}

/// Overlap of one send with computation.
#[derive(Clone, Debug, Serialize)]
pub struct OverlapPoint {
    /// Message size.
    pub bytes: usize,
    /// Progress thread running on the sender?
    pub progress_thread: bool,
    /// Plain transfer time (send to completion), median.
    pub transfer_us: f64,
    /// Computation between isend and wait (twice the transfer).
    pub compute_us: f64,
    /// Time left in wait after computing, median.
    pub wait_us: f64,
    /// 100 x (1 - wait / transfer), at least 0.
    pub overlap_pct: f64,
}

/// Everything measured over one transport on one link.
#[derive(Clone, Debug, Serialize)]
pub struct TransportResult {
    /// Which.
    pub transport: Kind,
    /// What the transport said it is (backend, mode).
    pub detail: String,
    /// The link's MTU, when known.
    pub mtu: Option<u32>,
    /// Ping-pong sweep.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub latency: Vec<LatencyPoint>,
    /// Stream sweep.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bandwidth: Vec<RatePoint>,
    /// Bidirectional sweep.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub bibw: Vec<RatePoint>,
    /// Small messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub msgrate: Vec<RatePoint>,
    /// Os and Or.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overhead: Vec<OverheadPoint>,
    /// Overlap, progress thread off and on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub overlap: Vec<OverlapPoint>,
    /// N senders to one receiver through a bridge.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub incast: Vec<crate::incast::IncastPoint>,
    /// LLC transports: the link floor of the same pair, median one-way time
    /// of 802.2 TEST round trips on the same device code with no protocol
    /// above (µs), measured before the endpoints opened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_floor_one_way_us: Option<f64>,
    /// The same floor measured again after the endpoints closed: with the
    /// first, it brackets the latency sweep.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_floor_after_one_way_us: Option<f64>,
    /// The floor again with each end doing some work per message
    /// (`--floor-work`), measured after the first floor.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub link_floor_worked: Vec<WorkedFloor>,
    /// Why measuring stopped early over this transport (the run goes on
    /// with the others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The client endpoint's counters after the run: the message layer's
    /// (`msg.*`) and the transport's (`link.*`: frames, retransmissions,
    /// drops by reason, RTT).
    pub counters: std::collections::BTreeMap<String, u64>,
}

/// NetPIPE's sizes: 1, 2, 3, then p-3, p, p+3 around each power of two p.
pub fn netpipe_sizes(max: usize) -> Vec<usize> {
    let mut v = vec![1, 2, 3];
    let mut p = 4usize;
    while p <= max {
        for s in [p - 3, p, p + 3] {
            if s <= max && !v.contains(&s) {
                v.push(s);
            }
        }
        p *= 2;
    }
    v.sort_unstable();
    v
}

/// Powers of two from 1 to `max`.
pub fn pow2_sizes(max: usize) -> Vec<usize> {
    std::iter::successors(Some(1usize), |s| s.checked_mul(2))
        .take_while(|&s| s <= max)
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[v.len() / 2]
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// A progress bar that appears only once a sweep has run for a second.
struct Bar {
    bar: Option<ProgressBar>,
    started: Instant,
    shown: bool,
}

impl Bar {
    fn new(enabled: bool, len: usize, what: String) -> Bar {
        let bar = enabled.then(|| {
            let b = ProgressBar::with_draw_target(Some(len as u64), ProgressDrawTarget::hidden());
            b.set_style(
                ProgressStyle::with_template("{msg:>28} [{bar:30}] {pos}/{len} {elapsed}")
                    .expect("template")
                    .progress_chars("=> "),
            );
            b.set_message(what);
            b
        });
        Bar {
            bar,
            started: Instant::now(),
            shown: false,
        }
    }

    fn tick(&mut self) {
        if let Some(b) = &self.bar {
            b.inc(1);
            if !self.shown && self.started.elapsed() > Duration::from_secs(1) {
                b.set_draw_target(ProgressDrawTarget::stderr());
                self.shown = true;
            }
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// A result of `kind` with nothing measured yet.
pub fn empty_result(kind: Kind, mtu: Option<u32>) -> TransportResult {
    TransportResult {
        transport: kind,
        detail: String::new(),
        mtu,
        latency: vec![],
        bandwidth: vec![],
        bibw: vec![],
        msgrate: vec![],
        overhead: vec![],
        overlap: vec![],
        incast: vec![],
        link_floor_one_way_us: None,
        link_floor_after_one_way_us: None,
        link_floor_worked: vec![],
        error: None,
        counters: Default::default(),
    }
}

/// Run every test of `s` over `links`; `mtu` labels the results.
pub fn run(
    links: &[Link],
    s: &Settings,
    mtu: Option<u32>,
    progress: bool,
) -> Result<Vec<TransportResult>> {
    let mut out: Vec<TransportResult> = links
        .iter()
        .map(|l| TransportResult {
            detail: l.ep.transport_name(),
            ..empty_result(l.kind, mtu)
        })
        .collect();
    let target = Duration::from_secs_f64(s.target_ms / 1e3);
    let mut compute = None;
    for &t in &s.tests {
        match t {
            Test::Latency => {
                let sizes = if s.quick {
                    vec![1, 8, 1024, 65536]
                } else if s.pow2_sizes {
                    pow2_sizes(s.max_size)
                } else {
                    netpipe_sizes(s.max_size)
                };
                latency_sweep(links, &mut out, s, &sizes, target, progress)?;
            }
            Test::Bandwidth | Test::Bibw | Test::Msgrate => {
                let sizes = match (t, s.quick) {
                    (Test::Msgrate, true) => vec![8],
                    (Test::Msgrate, false) if !s.pow2_sizes => vec![1, 8, 64, 512],
                    (_, true) => vec![8, 4096, 1 << 20],
                    (_, false) => pow2_sizes(s.max_size),
                };
                rate_sweep(links, &mut out, s, t, &sizes, target, progress)?;
            }
            Test::Overhead => {
                let c = compute.get_or_insert_with(|| Compute::calibrate(32));
                for (i, l) in links.iter().enumerate() {
                    if out[i].error.is_some() {
                        continue;
                    }
                    match overhead(l, 8, c, target) {
                        Ok(p) => out[i].overhead.push(p),
                        Err(e) => failed(&mut out[i], format!("overhead: {e:#}")),
                    }
                }
            }
            Test::Overlap => {
                let c = compute.get_or_insert_with(|| Compute::calibrate(32));
                let reps = if s.quick { 5 } else { 30 };
                for (i, l) in links.iter().enumerate() {
                    for thread in [false, true] {
                        if out[i].error.is_some() {
                            continue;
                        }
                        match overlap(l, s.overlap_bytes, reps, thread, c) {
                            Ok(p) => out[i].overlap.push(p),
                            Err(e) => failed(&mut out[i], format!("overlap: {e:#}")),
                        }
                    }
                }
            }
            // Measured on a testbed of its own, not over these links.
            Test::Incast => {}
        }
    }
    for (r, l) in out.iter_mut().zip(links) {
        r.counters = l.ep.counters().into_iter().collect();
    }
    Ok(out)
}

/// Stop measuring over this transport; say why (the others go on).
fn failed(r: &mut TransportResult, why: String) {
    tracing::error!("{}: {why}; not measured further", r.transport);
    if r.error.is_none() {
        r.error = Some(why);
    }
}

fn latency_sweep(
    links: &[Link],
    out: &mut [TransportResult],
    s: &Settings,
    sizes: &[usize],
    target: Duration,
    progress: bool,
) -> Result<()> {
    let mut bar = Bar::new(
        progress,
        sizes.len() * s.rounds * links.len(),
        "latency".into(),
    );
    // Per transport: (size, one-way µs) of the last point, to size the next.
    let mut last: HashMap<Kind, (usize, f64)> = HashMap::new();
    let (min_reps, max_reps) = if s.quick { (3, 200) } else { (10, 100_000) };
    for &size in sizes {
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); links.len()];
        for _ in 0..s.rounds {
            for (i, l) in links.iter().enumerate() {
                if out[i].error.is_some() {
                    continue;
                }
                let (ps, pt) = last.get(&l.kind).copied().unwrap_or((1, 25.0));
                let est_rtt_us = 2.0 * pt * (size as f64 / ps as f64).max(1.0);
                let reps =
                    ((target.as_secs_f64() * 1e6 / est_rtt_us) as usize).clamp(min_reps, max_reps);
                let warm = (reps / 10).clamp(2, 100);
                let v = match bench::latency(&l.ep, l.peer, size, warm, reps, s.verify) {
                    Ok(v) => v,
                    Err(e) => {
                        failed(&mut out[i], format!("latency at {size} B: {e:#}"));
                        continue;
                    }
                };
                last.insert(l.kind, (size, median(&mut v.clone())));
                samples[i].extend(v);
                bar.tick();
            }
        }
        for (i, v) in samples.iter_mut().enumerate() {
            if v.is_empty() {
                continue;
            }
            out[i].latency.push(LatencyPoint {
                bytes: size,
                reps: v.len(),
                one_way_min_us: v.iter().copied().fold(f64::MAX, f64::min),
                one_way_mean_us: v.iter().sum::<f64>() / v.len() as f64,
                one_way_median_us: median(v),
                one_way_p99_us: quantile(v, 0.99),
            });
        }
    }
    Ok(())
}

fn rate_sweep(
    links: &[Link],
    out: &mut [TransportResult],
    s: &Settings,
    t: Test,
    sizes: &[usize],
    target: Duration,
    progress: bool,
) -> Result<()> {
    let window = if t == Test::Msgrate {
        s.window.max(64)
    } else {
        s.window
    };
    let what = format!("{t:?}").to_lowercase();
    let mut bar = Bar::new(progress, sizes.len() * s.rounds * links.len(), what.clone());
    let mut last: HashMap<Kind, (usize, f64)> = HashMap::new();
    let max_iters = if s.quick { 20 } else { 100_000 };
    let pairs = if t == Test::Msgrate { s.pairs } else { 1 };
    for &size in sizes {
        let mut gbit = vec![Vec::new(); links.len()];
        let mut rate = vec![Vec::new(); links.len()];
        // Per transport and round: each pair's rate.
        let mut per_pair: Vec<Vec<Vec<f64>>> = vec![Vec::new(); links.len()];
        let mut msgs = vec![0usize; links.len()];
        for _ in 0..s.rounds {
            for (i, l) in links.iter().enumerate() {
                if out[i].error.is_some() {
                    continue;
                }
                let (ps, pt) = last.get(&l.kind).copied().unwrap_or((1, 20.0));
                let est_us = pt * (size as f64 / ps as f64).max(1.0);
                let iters = ((target.as_secs_f64() * 1e6 / (est_us * window as f64)) as usize)
                    .clamp(2, max_iters);
                let r = match t {
                    Test::Bibw => {
                        bench::bibw(&l.ep, l.peer, size, iters, window, s.verify).map(|x| vec![x])
                    }
                    _ if pairs > 1 => streams(l, pairs, size, iters, window, s),
                    _ => bench::stream(&l.ep, l.peer, size, iters, window, s.verify, None)
                        .map(|x| vec![x]),
                };
                let runs = match r {
                    Ok(x) => x,
                    Err(e) => {
                        failed(&mut out[i], format!("{what} at {size} B: {e:#}"));
                        continue;
                    }
                };
                // Each pair timed on its own; the aggregate is the sum of
                // their rates (osu_mbw_mr's), the payload rate likewise.
                let (mut r_sum, mut slowest) = (0.0, 0.0f64);
                let mut each = Vec::with_capacity(runs.len());
                for &(el, n) in &runs {
                    let secs = el.as_secs_f64().max(1e-9);
                    slowest = slowest.max(secs * 1e6 / n as f64);
                    r_sum += n as f64 / secs;
                    each.push(n as f64 / secs);
                    msgs[i] += n;
                }
                per_pair[i].push(each);
                last.insert(l.kind, (size, slowest));
                gbit[i].push(r_sum * size as f64 * 8.0 / 1e9);
                rate[i].push(r_sum);
                bar.tick();
            }
        }
        for i in 0..links.len() {
            if gbit[i].is_empty() {
                continue;
            }
            // The round `median` picks for the aggregate.
            let mut order: Vec<usize> = (0..rate[i].len()).collect();
            order.sort_by(|&a, &b| rate[i][a].total_cmp(&rate[i][b]));
            let mid = order[order.len() / 2];
            let p = RatePoint {
                bytes: size,
                window,
                messages: msgs[i],
                gbit_s: median(&mut gbit[i]),
                msgs_per_s: median(&mut rate[i]),
                pairs,
                per_pair_msgs_per_s: if t == Test::Msgrate {
                    std::mem::take(&mut per_pair[i][mid])
                } else {
                    vec![]
                },
            };
            match t {
                Test::Bibw => out[i].bibw.push(p),
                Test::Msgrate => out[i].msgrate.push(p),
                _ => out[i].bandwidth.push(p),
            }
        }
    }
    Ok(())
}

/// The message-rate test over `pairs` pairs of `l` at once: one thread per
/// pair (on `s.pair_cpus[j]` when given), all starting their streams
/// together. Returns each pair's timed duration and messages, pair 0 first;
/// fails if any pair failed.
fn streams(
    l: &Link,
    pairs: usize,
    size: usize,
    iters: usize,
    window: usize,
    s: &Settings,
) -> Result<Vec<(Duration, usize)>> {
    if 1 + l.pairs.len() < pairs {
        bail!("{pairs} pairs asked, {} connected", 1 + l.pairs.len());
    }
    let gate = bench::Gate::new(pairs);
    let results: Vec<Result<(Duration, usize)>> = std::thread::scope(|scope| {
        let threads: Vec<_> = l
            .all_pairs()
            .take(pairs)
            .enumerate()
            .map(|(j, (ep, peer))| {
                let gate = &gate;
                let cpu = s.pair_cpus.get(j).copied();
                std::thread::Builder::new()
                    .name(format!("msgrate-pair-{j}"))
                    .spawn_scoped(scope, move || {
                        if let Some(c) = cpu {
                            if let Err(e) = crate::affinity::pin_current(&[c]) {
                                tracing::warn!("pinning pair {j} to CPU {c}: {e}");
                            }
                        }
                        let r = bench::stream(ep, peer, size, iters, window, s.verify, Some(gate))
                            .with_context(|| format!("pair {j}"));
                        if r.is_err() {
                            gate.abort();
                        }
                        r
                    })
                    .expect("spawning a pair's thread")
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow!("a pair's thread panicked")))
            })
            .collect()
    });
    results.into_iter().collect()
}

/// Gap-minus-compute on one side: the gap with no computation, then the
/// largest computation (scanned up to twice the gap) that keeps the time
/// per message within 5% of it. Returns (gap, that computation).
fn gap_minus_compute(
    mut gap: impl FnMut(usize, Duration) -> Result<Duration>,
    target: Duration,
) -> Result<(Duration, Duration)> {
    let count = |per: Duration| {
        ((target.as_secs_f64() / per.as_secs_f64().max(1e-7)) as usize).clamp(50, 200_000)
    };
    let probe = gap(200, Duration::ZERO)?;
    let g0 = gap(count(probe), Duration::ZERO)?.min(gap(count(probe), Duration::ZERO)?);
    let mut best = Duration::ZERO;
    let mut over = 0;
    for k in 1..=16u32 {
        let c = g0 * k / 8;
        let t = gap(count(g0 + c), c)?;
        if t.as_secs_f64() <= g0.as_secs_f64() * 1.05 {
            best = c;
            over = 0;
        } else {
            over += 1;
            if over >= 2 {
                break;
            }
        }
    }
    Ok((g0, best))
}

fn overhead(l: &Link, size: usize, c: &mut Compute, target: Duration) -> Result<OverheadPoint> {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (sg, sc) = {
        let c = &mut *c;
        gap_minus_compute(|n, d| bench::send_gap(&l.ep, l.peer, size, n, c, d), target)?
    };
    let (rg, rc) = gap_minus_compute(|n, d| bench::recv_gap(&l.ep, l.peer, size, n, c, d), target)?;
    Ok(OverheadPoint {
        bytes: size,
        send_gap_us: us(sg),
        send_compute_us: us(sc),
        os_us: us(sg.saturating_sub(sc)),
        recv_gap_us: us(rg),
        recv_compute_us: us(rc),
        or_us: us(rg.saturating_sub(rc)),
    })
}

fn overlap(
    l: &Link,
    size: usize,
    reps: usize,
    thread: bool,
    c: &mut Compute,
) -> Result<OverlapPoint> {
    let (ep, peer) = match (&l.overlap, thread) {
        (Some((ep, p)), true) => (ep, *p),
        _ => (&l.ep, l.peer),
    };
    let res = bench::overlap(ep, peer, size, reps, c, &|on| {
        // The progress thread may run on any CPU (a pinned measuring thread
        // would otherwise hand it its own core).
        if on && thread {
            let mask = crate::affinity::current();
            let _ = crate::affinity::pin_current(&[]);
            let r = ep.set_progress_thread(true);
            let _ = crate::affinity::restore(mask);
            r
        } else {
            ep.set_progress_thread(false)
        }
    });
    ep.set_progress_thread(false)?;
    let (tx, work, wait) = res?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    Ok(OverlapPoint {
        bytes: size,
        progress_thread: thread,
        transfer_us: us(tx),
        compute_us: us(work),
        wait_us: us(wait),
        overlap_pct: (100.0 * (1.0 - wait.as_secs_f64() / tx.as_secs_f64())).max(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netpipe_sizes_surround_powers_of_two() {
        let v = netpipe_sizes(64);
        assert_eq!(
            v,
            vec![1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 19, 29, 32, 35, 61, 64]
        );
        assert_eq!(*netpipe_sizes(4 << 20).last().unwrap(), 4 << 20);
        assert_eq!(pow2_sizes(8), vec![1, 2, 4, 8]);
    }
}
