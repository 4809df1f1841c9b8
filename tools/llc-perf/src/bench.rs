//! The tests: the client's timed side and the server's mirror of each.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use msg_layer::{Error, PeerId, Request, Source, Tag};

use crate::proto::{check, pattern, Cmd, ACK, CTRL, CTRL_MAX, DATA, READY};
use crate::transports::Ep;

/// Longest any single wait of a test may take before it is declared stuck.
pub const WAIT: Option<Duration> = Some(Duration::from_secs(30));

// ---------------------------------------------------------------- server

/// Serve clients on `ep` until `stop` is set: one command at a time.
pub fn serve(ep: &Ep, stop: &AtomicBool) {
    let post = || ep.irecv(Source::Any, Tag::Is(CTRL), 0, vec![0; CTRL_MAX]);
    let mut r = post();
    while !stop.load(Ordering::Relaxed) {
        match ep.wait_timeout(r, Some(Duration::from_millis(100))) {
            Err(Error::Timeout) => continue,
            Err(e) => {
                tracing::warn!("{}: waiting for a command: {e}", ep.transport_name());
                r = post();
            }
            Ok(c) => {
                r = post();
                let peer = c.status.source;
                let data = c.data.unwrap_or_default();
                let res = match Cmd::decode(&data) {
                    Ok(cmd) => serve_one(ep, peer, &cmd),
                    Err(e) => ready(ep, peer, &e),
                };
                if let Err(e) = res {
                    tracing::warn!("{}: serving a client: {e:#}", ep.transport_name());
                }
            }
        }
    }
}

fn ready(ep: &Ep, peer: PeerId, error: &str) -> Result<()> {
    ep.send(peer, READY, 0, error.as_bytes().to_vec(), WAIT)?;
    Ok(())
}

fn payload(verify: bool, seq: u64, fixed: &Bytes) -> Bytes {
    if verify {
        Bytes::from(pattern(seq, fixed.len()))
    } else {
        fixed.clone()
    }
}

fn verified(verify: bool, seq: u64, data: &[u8], size: usize) -> Result<()> {
    if verify {
        check(seq, data, size).map_err(|e| anyhow!("payload check failed: {e}"))?;
    }
    Ok(())
}

fn data_of(r: Result<msg_layer::Completion, Error>) -> Result<Vec<u8>> {
    Ok(r?.data.unwrap_or_default())
}

fn wait_all(ep: &Ep, reqs: &[Request]) -> Result<Vec<Vec<u8>>> {
    ep.wait_all(reqs, WAIT)?.into_iter().map(data_of).collect()
}

fn serve_one(ep: &Ep, p: PeerId, cmd: &Cmd) -> Result<()> {
    let from = Source::Peer(p);
    let recv = |size: usize| ep.irecv(from, Tag::Is(DATA), 0, vec![0; size]);
    match *cmd {
        Cmd::Hello => ready(ep, p, ""),
        Cmd::Latency { size, reps, verify } => {
            let mut r = recv(size);
            ready(ep, p, "")?;
            for i in 0..reps {
                let data = data_of(ep.wait_timeout(r, WAIT))?;
                if i + 1 < reps {
                    r = recv(size);
                }
                verified(verify, i as u64, &data, size)?;
                ep.send(p, DATA, 0, data, WAIT)?;
            }
            Ok(())
        }
        Cmd::Stream {
            size,
            iters,
            window,
            verify,
        } => {
            // The same buffers are posted again for every window, as OSU's
            // and NetPIPE's receivers do: fresh ones would cost page faults
            // and zeroing that no transport should be charged for.
            let post = |bufs: Vec<Vec<u8>>| {
                bufs.into_iter()
                    .map(|mut b| {
                        b.resize(size, 0);
                        ep.irecv(from, Tag::Is(DATA), 0, b)
                    })
                    .collect::<Vec<_>>()
            };
            let mut reqs = post(vec![Vec::new(); window]);
            ready(ep, p, "")?;
            for it in 0..iters {
                let got = wait_all(ep, &reqs)?;
                for (j, d) in got.iter().enumerate() {
                    verified(verify, (it * window + j) as u64, d, size)?;
                }
                if it + 1 < iters {
                    reqs = post(got);
                }
                ep.send(p, ACK, 0, vec![1u8], WAIT)?;
            }
            Ok(())
        }
        Cmd::Bibw {
            size,
            iters,
            window,
            verify,
        } => {
            ready(ep, p, "")?;
            bibw_window_loop(ep, p, size, iters, window, verify).map(|_| ())
        }
        Cmd::Sink { size, count } => {
            let mut r = recv(size);
            ready(ep, p, "")?;
            for i in 0..count {
                let mut buf = data_of(ep.wait_timeout(r, WAIT))?;
                if i + 1 < count {
                    buf.resize(size, 0);
                    r = ep.irecv(from, Tag::Is(DATA), 0, buf);
                }
            }
            ep.send(p, ACK, 0, vec![1u8], WAIT)?;
            Ok(())
        }
        Cmd::Source { size, count } => {
            ready(ep, p, "")?;
            let data = Bytes::from(vec![0x5a; size]);
            let mut inflight = VecDeque::new();
            for _ in 0..count {
                inflight.push_back(ep.isend(p, DATA, 0, data.clone()));
                if inflight.len() > 64 {
                    ep.wait_timeout(inflight.pop_front().expect("non-empty"), WAIT)?;
                }
            }
            for r in inflight {
                ep.wait_timeout(r, WAIT)?;
            }
            ep.recv(from, Tag::Is(ACK), 0, vec![0; 1], WAIT)?;
            Ok(())
        }
    }
}

/// Both sides of `bibw`: per window, `window` receives and `window` sends.
/// Returns when the warm-up window ended (the start of the timed part).
fn bibw_window_loop(
    ep: &Ep,
    p: PeerId,
    size: usize,
    iters: usize,
    window: usize,
    verify: bool,
) -> Result<Instant> {
    let fixed = Bytes::from(vec![0xa5; size]);
    let mut start = Instant::now();
    let mut bufs = vec![Vec::new(); window];
    for it in 0..iters {
        if it == 1 {
            start = Instant::now();
        }
        let mut reqs: Vec<Request> = bufs
            .drain(..)
            .map(|mut b| {
                b.resize(size, 0);
                ep.irecv(Source::Peer(p), Tag::Is(DATA), 0, b)
            })
            .collect();
        for j in 0..window {
            reqs.push(ep.isend(
                p,
                DATA,
                0,
                payload(verify, (it * window + j) as u64, &fixed),
            ));
        }
        let got = wait_all(ep, &reqs)?;
        for (j, d) in got.iter().take(window).enumerate() {
            verified(verify, (it * window + j) as u64, d, size)?;
        }
        // The receive buffers come back first; the sends carry none.
        bufs = got.into_iter().take(window).collect();
    }
    Ok(start)
}

// ---------------------------------------------------------------- client

/// A start line for the threads of a message-rate test with several pairs:
/// each passes once every pair's server is ready, so that the pairs stream
/// at the same time. A pair that fails before it gets there calls
/// [`Gate::abort`], and the others give up instead of waiting for it
/// (they also give up after [`WAIT`]).
pub struct Gate {
    parties: usize,
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    /// A gate for `parties` threads.
    pub fn new(parties: usize) -> Gate {
        Gate {
            parties,
            state: Mutex::new((0, false)),
            changed: Condvar::new(),
        }
    }

    /// Arrive and wait for the others.
    pub fn pass(&self) -> Result<()> {
        let limit = WAIT.expect("set");
        let mut st = self.state.lock().expect("gate");
        st.0 += 1;
        self.changed.notify_all();
        let (st, timeout) = self
            .changed
            .wait_timeout_while(st, limit, |(n, aborted)| *n < self.parties && !*aborted)
            .expect("gate");
        if st.1 {
            bail!("another pair failed before the start");
        }
        if timeout.timed_out() {
            bail!(
                "only {} of {} pairs were ready after {limit:?}",
                st.0,
                self.parties
            );
        }
        Ok(())
    }

    /// A pair will not come: let the others go (with an error).
    pub fn abort(&self) {
        self.state.lock().expect("gate").1 = true;
        self.changed.notify_all();
    }
}

/// Send `cmd` and wait for the server's READY.
pub fn command(ep: &Ep, p: PeerId, cmd: &Cmd, timeout: Duration) -> Result<()> {
    let r = ep.irecv(Source::Peer(p), Tag::Is(READY), 0, vec![0; CTRL_MAX]);
    ep.send(p, CTRL, 0, cmd.encode(), Some(timeout))
        .with_context(|| format!("sending a command to the server ({})", ep.transport_name()))?;
    let c = match ep.wait_timeout(r, Some(timeout)) {
        Ok(c) => c,
        Err(Error::Timeout) => {
            ep.cancel(r);
            bail!(
                "no llc-perf server answered within {timeout:?} ({}): is `llc-perf server` running on the peer with this transport?",
                ep.transport_name()
            );
        }
        Err(e) => {
            return Err(anyhow!("{e}")).context(format!("the server ({})", ep.transport_name()))
        }
    };
    let body = c.data.unwrap_or_default();
    if !body.is_empty() {
        bail!("the server refused: {}", String::from_utf8_lossy(&body));
    }
    Ok(())
}

/// One-way times (µs) of `reps` ping-pongs of `size` bytes after `warm`.
pub fn latency(
    ep: &Ep,
    p: PeerId,
    size: usize,
    warm: usize,
    reps: usize,
    verify: bool,
) -> Result<Vec<f64>> {
    let total = warm + reps;
    command(
        ep,
        p,
        &Cmd::Latency {
            size,
            reps: total,
            verify,
        },
        WAIT.expect("set"),
    )?;
    let fixed = Bytes::from(vec![0xa5; size]);
    let mut buf = vec![0u8; size];
    let mut out = Vec::with_capacity(reps);
    for i in 0..total {
        let data = payload(verify, i as u64, &fixed);
        let t0 = Instant::now();
        let r = ep.irecv(Source::Peer(p), Tag::Is(DATA), 0, buf);
        ep.send(p, DATA, 0, data, WAIT)?;
        let got = data_of(ep.wait_timeout(r, WAIT))?;
        let dt = t0.elapsed();
        verified(verify, i as u64, &got, size)?;
        buf = got;
        buf.resize(size, 0);
        if i >= warm {
            out.push(dt.as_secs_f64() * 1e6 / 2.0);
        }
    }
    Ok(out)
}

/// Stream `iters` windows of `window` messages (one warm-up window first);
/// returns the timed duration and the messages it covered. With `start`,
/// the first window leaves only when every party of that gate (the other
/// pairs of a message-rate test) has its server ready too.
pub fn stream(
    ep: &Ep,
    p: PeerId,
    size: usize,
    iters: usize,
    window: usize,
    verify: bool,
    start: Option<&Gate>,
) -> Result<(Duration, usize)> {
    let total = iters + 1;
    command(
        ep,
        p,
        &Cmd::Stream {
            size,
            iters: total,
            window,
            verify,
        },
        WAIT.expect("set"),
    )?;
    if let Some(g) = start {
        g.pass()?;
    }
    let fixed = Bytes::from(vec![0xa5; size]);
    let mut start = Instant::now();
    for it in 0..total {
        if it == 1 {
            start = Instant::now();
        }
        let ack = ep.irecv(Source::Peer(p), Tag::Is(ACK), 0, vec![0; 1]);
        let reqs: Vec<Request> = (0..window)
            .map(|j| {
                ep.isend(
                    p,
                    DATA,
                    0,
                    payload(verify, (it * window + j) as u64, &fixed),
                )
            })
            .collect();
        wait_all(ep, &reqs)?;
        ep.wait_timeout(ack, WAIT)?;
    }
    Ok((start.elapsed(), iters * window))
}

/// Bidirectional stream; returns the timed duration and the messages (both
/// directions) it covered.
pub fn bibw(
    ep: &Ep,
    p: PeerId,
    size: usize,
    iters: usize,
    window: usize,
    verify: bool,
) -> Result<(Duration, usize)> {
    let total = iters + 1;
    command(
        ep,
        p,
        &Cmd::Bibw {
            size,
            iters: total,
            window,
            verify,
        },
        WAIT.expect("set"),
    )?;
    let start = bibw_window_loop(ep, p, size, total, window, verify)?;
    Ok((start.elapsed(), 2 * iters * window))
}

/// Time per message of a stream of `count` sends with `compute` between them
/// (the sender's side of the gap-minus-compute method).
pub fn send_gap(
    ep: &Ep,
    p: PeerId,
    size: usize,
    count: usize,
    c: &mut Compute,
    compute: Duration,
) -> Result<Duration> {
    let warm = (count / 10).max(2);
    command(
        ep,
        p,
        &Cmd::Sink {
            size,
            count: warm + count,
        },
        WAIT.expect("set"),
    )?;
    let data = Bytes::from(vec![0xa5; size]);
    let ack = ep.irecv(Source::Peer(p), Tag::Is(ACK), 0, vec![0; 1]);
    let mut start = Instant::now();
    for i in 0..warm + count {
        if i == warm {
            start = Instant::now();
        }
        let r = ep.isend(p, DATA, 0, data.clone());
        c.run(compute);
        ep.wait_timeout(r, WAIT)?;
    }
    ep.wait_timeout(ack, WAIT)?;
    Ok(start.elapsed() / count as u32)
}

/// Time per message of receiving `count` messages with `compute` after each
/// (the receiver's side).
pub fn recv_gap(
    ep: &Ep,
    p: PeerId,
    size: usize,
    count: usize,
    c: &mut Compute,
    compute: Duration,
) -> Result<Duration> {
    let warm = (count / 10).max(2);
    let total = warm + count;
    let post = || ep.irecv(Source::Peer(p), Tag::Is(DATA), 0, vec![0; size]);
    let mut r = post();
    command(
        ep,
        p,
        &Cmd::Source { size, count: total },
        WAIT.expect("set"),
    )?;
    let mut start = Instant::now();
    for i in 0..total {
        ep.wait_timeout(r, WAIT)?;
        if i + 1 < total {
            r = post();
        }
        if i + 1 == warm {
            start = Instant::now();
        }
        c.run(compute);
    }
    let el = start.elapsed();
    ep.send(p, ACK, 0, vec![1u8], WAIT)?;
    Ok(el / count as u32)
}

/// Overlap of one `size`-byte send with computation: (plain transfer time,
/// compute time, time left in `wait` after computing), medians of `reps`.
/// The plain transfer is timed with `thread(false)`, the overlapped part
/// after `thread(true)` (which starts the progress thread, or not).
pub fn overlap(
    ep: &Ep,
    p: PeerId,
    size: usize,
    reps: usize,
    c: &mut Compute,
    thread: &dyn Fn(bool) -> Result<(), Error>,
) -> Result<(Duration, Duration, Duration)> {
    thread(false)?;
    command(
        ep,
        p,
        &Cmd::Stream {
            size,
            iters: 2 * reps + 2,
            window: 1,
            verify: false,
        },
        WAIT.expect("set"),
    )?;
    let data = Bytes::from(vec![0xa5; size]);
    let ack = || ep.recv(Source::Peer(p), Tag::Is(ACK), 0, vec![0; 1], WAIT);
    let mut plain = Vec::new();
    for i in 0..reps + 1 {
        let t0 = Instant::now();
        ep.send(p, DATA, 0, data.clone(), WAIT)?;
        if i > 0 {
            plain.push(t0.elapsed());
        }
        ack()?;
    }
    plain.sort();
    let t_x = plain[plain.len() / 2];
    let work = t_x * 2;
    thread(true)?;
    let mut waited = Vec::new();
    for i in 0..reps + 1 {
        let r = ep.isend(p, DATA, 0, data.clone());
        c.run(work);
        let t0 = Instant::now();
        ep.wait_timeout(r, WAIT)?;
        if i > 0 {
            waited.push(t0.elapsed());
        }
        ack()?;
    }
    waited.sort();
    Ok((t_x, work, waited[waited.len() / 2]))
}

// ---------------------------------------------------------------- compute

/// A calibrated compute kernel: a dot product streaming over two buffers
/// larger than the caches, so it competes for memory as real work does.
pub struct Compute {
    a: Vec<f64>,
    b: Vec<f64>,
    ns_per_elem: f64,
    pos: usize,
    /// Keeps the result alive.
    pub sink: f64,
}

impl Compute {
    /// Two buffers of `mib` MiB each, and the kernel's speed measured.
    pub fn calibrate(mib: usize) -> Compute {
        let n = (mib << 20) / 8;
        let a: Vec<f64> = (0..n).map(|i| (i % 97) as f64 * 0.5).collect();
        let b: Vec<f64> = (0..n).map(|i| (i % 89) as f64 * 0.25).collect();
        let mut c = Compute {
            a,
            b,
            ns_per_elem: 1.0,
            pos: 0,
            sink: 0.0,
        };
        let mut best = f64::MAX;
        for _ in 0..3 {
            let t0 = Instant::now();
            c.elems(n);
            best = best.min(t0.elapsed().as_nanos() as f64 / n as f64);
        }
        c.ns_per_elem = best.max(0.01);
        c
    }

    fn elems(&mut self, mut n: usize) {
        let mut s = 0.0;
        while n > 0 {
            let k = n.min(self.a.len() - self.pos);
            let (x, y) = (
                &self.a[self.pos..self.pos + k],
                &self.b[self.pos..self.pos + k],
            );
            s += x.iter().zip(y).map(|(p, q)| p * q).sum::<f64>();
            self.pos = (self.pos + k) % self.a.len();
            n -= k;
        }
        self.sink += std::hint::black_box(s);
    }

    /// Compute for about `d`.
    pub fn run(&mut self, d: Duration) {
        if !d.is_zero() {
            self.elems((d.as_nanos() as f64 / self.ns_per_elem) as usize);
        }
    }
}
