//! Incast: N senders stream to one receiver at the same time through a
//! bridge, the pattern of a gather or of many ranks writing to one. It shows
//! what a transport does when the receiver's link and buffers are the
//! bottleneck: aggregate goodput, fairness between the senders, and the
//! retransmissions it took.
//!
//! Each transport in turn: the receiver (host 0) posts `window` receives per
//! sender (ANY_SOURCE) and tells every sender to start; each sender streams
//! its messages in windows of `window` isends. Goodput is the bytes received
//! over the time from the start signal to the last message. Fairness is taken
//! when the first sender has had everything received: the bytes received from
//! each sender by then, as Jain's index (1 = equal shares) and the smallest
//! and largest share relative to an equal one.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use msg_layer::addr::MacAddr;
use msg_layer::transport::spec::AttachMode;
use msg_layer::{PeerId, Request, Source, Tag};
use serde::Serialize;
use testbed::cpu::CpuBusy;
use testbed::Bridged;

use crate::proto::{pattern, pattern_byte, ACK, CTRL, DATA, READY};
use crate::transports::{self, Ep, Kind, Open, SERVER_PORT};

/// Longest wait for any one step (connecting, a window, the end).
const STEP: Duration = Duration::from_secs(30);

/// One incast measurement.
#[derive(Clone, Debug, Serialize)]
pub struct IncastPoint {
    /// Senders streaming at once.
    pub senders: usize,
    /// Message size.
    pub bytes: usize,
    /// Messages each sender sent.
    pub messages_per_sender: usize,
    /// Outstanding isends per sender.
    pub window: usize,
    /// Aggregate goodput at the receiver.
    pub gbit_s: f64,
    /// Jain's fairness index of the bytes received from each sender when
    /// the first one finished (1.0: equal shares).
    pub jain_fairness: f64,
    /// Smallest share by then, relative to an equal share.
    pub min_share: f64,
    /// Largest share by then, relative to an equal share.
    pub max_share: f64,
    /// Retransmissions summed over the senders (LLC; 0 for TCP, whose
    /// retransmissions the kernel does not report per socket here).
    pub retransmits: u64,
    /// Of them, after a retransmission timeout.
    pub timeouts: u64,
    /// Share of the machine's CPU time that was busy from the start
    /// signal to the last message (all CPUs, from /proc/stat; absent where
    /// it cannot be read): near 1.0, the pattern is bound by CPU time, not
    /// by waiting.
    pub cpu_busy: Option<f64>,
}

/// How one incast run is shaped.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Message size.
    pub size: usize,
    /// Messages per sender.
    pub messages: usize,
    /// Outstanding isends per sender.
    pub window: usize,
    /// Check every payload: each message carries its sender and number in
    /// its first 8 bytes and a pattern after them; the receiver checks the
    /// pattern and that every message arrived exactly once.
    pub verify: bool,
}

/// Message `i` of sender `index`: its number, then the pattern.
fn tagged(index: usize, i: usize, size: usize) -> Vec<u8> {
    let seq = ((index as u64) << 32) | i as u64;
    let mut v = pattern(seq, size.max(8));
    v[..8].copy_from_slice(&seq.to_le_bytes());
    v.truncate(size.max(8));
    v
}

/// Check a tagged message from sender `index`; returns its number.
fn check_tagged(index: usize, data: &[u8], size: usize) -> Result<u64> {
    if data.len() != size.max(8) {
        bail!("{} bytes arrived, {size} expected", data.len());
    }
    let seq = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    if (seq >> 32) as usize != index {
        bail!(
            "message {seq:#x} says sender {}, it came from sender {index}",
            seq >> 32
        );
    }
    if let Some(i) = (8..data.len()).find(|&i| data[i] != pattern_byte(seq, i)) {
        bail!("message {seq:#x} of sender {index} differs at byte {i}");
    }
    Ok(seq & 0xffff_ffff)
}

/// Measure `kind` on `bed`: host 0 receives, the others send. Returns the
/// figures and what the transport said it is.
pub fn measure(
    kind: Kind,
    bed: &Bridged,
    shape: Shape,
    xdp_attach: AttachMode,
) -> Result<(IncastPoint, String)> {
    let senders = bed.hosts.len() - 1;
    if senders == 0 || shape.window == 0 || shape.messages == 0 {
        bail!("incast needs at least one sender, one message and a window of one");
    }
    if shape.verify && shape.size < 8 {
        bail!("incast --verify needs messages of at least 8 bytes");
    }
    let rx = &bed.hosts[0];
    fn open(h: &testbed::Host, server: bool, xdp_attach: AttachMode) -> Open<'_> {
        Open {
            ifname: &h.ifname,
            ip: h.ipv4.into(),
            server,
            port: SERVER_PORT,
            uring_coop: true,
            xdp_attach,
            pair: 0,
        }
    }
    let o = open(rx, true, xdp_attach);
    let receiver = rx
        .ns
        .run(|| transports::open(kind, &o))
        .with_context(|| format!("{kind}: the receiver"))?;
    let detail = receiver.transport_name();
    let addr = kind.server_addr(Some(MacAddr(rx.mac)), Some(rx.ipv4.into()), SERVER_PORT)?;
    let recv = rx.ns.spawn(move || receive(&receiver, senders, shape));
    let mut sending = Vec::new();
    for (i, h) in bed.hosts.iter().enumerate().skip(1) {
        let o = open(h, false, xdp_attach);
        let ep =
            h.ns.run(|| transports::open(kind, &o))
                .with_context(|| format!("{kind}: sender {i}"))?;
        sending.push(h.ns.spawn(move || send(&ep, &addr, i, shape)));
    }
    let mut retransmits = 0;
    let mut timeouts = 0;
    let mut errors = Vec::new();
    for (i, t) in sending.into_iter().enumerate() {
        match t.join() {
            Ok(Ok((r, to))) => {
                retransmits += r;
                timeouts += to;
            }
            Ok(Err(e)) => errors.push(format!("sender {}: {e:#}", i + 1)),
            Err(_) => errors.push(format!("sender {} panicked", i + 1)),
        }
    }
    let got = recv
        .join()
        .map_err(|_| anyhow!("{kind}: the receiver panicked"))?;
    let (elapsed, shares, cpu_busy) = match (got, errors.is_empty()) {
        (Ok(g), true) => g,
        (Ok(_), false) => bail!("{kind}: {}", errors.join("; ")),
        (Err(e), _) => bail!("{kind}: receiver: {e:#}; {}", errors.join("; ")),
    };
    let total = (senders * shape.messages * shape.size) as f64;
    let (jain, min, max) = fairness(&shares);
    let point = IncastPoint {
        senders,
        bytes: shape.size,
        messages_per_sender: shape.messages,
        window: shape.window,
        gbit_s: total * 8.0 / elapsed.as_secs_f64() / 1e9,
        jain_fairness: jain,
        min_share: min,
        max_share: max,
        retransmits,
        timeouts,
        cpu_busy,
    };
    Ok((point, detail))
}

/// Jain's index of `x`, and its smallest and largest value relative to the mean.
pub fn fairness(x: &[u64]) -> (f64, f64, f64) {
    let n = x.len() as f64;
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let squares: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if sum == 0.0 || n == 0.0 {
        return (0.0, 0.0, 0.0);
    }
    let mean = sum / n;
    let min = x.iter().copied().min().unwrap_or(0) as f64 / mean;
    let max = x.iter().copied().max().unwrap_or(0) as f64 / mean;
    (sum * sum / (n * squares), min, max)
}

/// What the receiver measured: the time from the start signal to the
/// last message, the bytes received from each sender when the first one
/// had finished, and the CPUs' busy share meanwhile.
type Received = (Duration, Vec<u64>, Option<f64>);

/// The receiver: learn the senders, start them, count what arrives.
fn receive(ep: &Ep, senders: usize, shape: Shape) -> Result<Received> {
    let mut peers: Vec<PeerId> = Vec::with_capacity(senders);
    let mut index: Vec<usize> = Vec::with_capacity(senders);
    while peers.len() < senders {
        let c = ep
            .recv(Source::Any, Tag::Is(CTRL), 0, vec![0; 16], Some(STEP))
            .context("waiting for the senders to say hello")?;
        let hello = c.data.unwrap_or_default();
        let i = hello
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .ok_or_else(|| anyhow!("a hello without the sender's index"))?;
        peers.push(c.status.source);
        index.push(i);
    }
    let mut seen: Vec<std::collections::HashSet<u64>> = vec![Default::default(); senders];
    let post = |buf: Vec<u8>| ep.irecv(Source::Any, Tag::Is(DATA), 0, buf);
    let expected = senders * shape.messages;
    let mut posted = expected.min(senders * shape.window);
    // Buffers written once before the start, as an application's reused
    // buffers are: a zeroed allocation's pages would be faulted in and
    // cleared by the first message's copy, inside the measured time.
    let mut reqs: Vec<Request> = (0..posted).map(|_| post(vec![0xee; shape.size])).collect();
    let start = Instant::now();
    let cpu = CpuBusy::start();
    let go: Vec<Request> = peers
        .iter()
        .map(|&p| ep.isend(p, READY, 0, Bytes::new()))
        .collect();
    let mut bytes = vec![0u64; senders];
    let mut count = vec![0usize; senders];
    let mut snapshot: Option<Vec<u64>> = None;
    let mut received = 0;
    while received < expected {
        let (i, res) = ep
            .wait_any(&reqs, Some(STEP))
            .with_context(|| format!("after {received} of {expected} messages"))?;
        let c = res?;
        let who = peers
            .iter()
            .position(|&p| p == c.status.source)
            .ok_or_else(|| anyhow!("a message from an unknown peer"))?;
        if shape.verify {
            let data = c.data.as_deref().unwrap_or_default();
            let n = check_tagged(index[who], data, shape.size)?;
            if !seen[who].insert(n) {
                bail!("message {n} of sender {} arrived twice", index[who]);
            }
        }
        bytes[who] += c.status.len as u64;
        count[who] += 1;
        received += 1;
        if count[who] == shape.messages && snapshot.is_none() {
            snapshot = Some(bytes.clone());
        }
        // Post the buffer again while messages are still to come.
        if posted < expected {
            let mut buf = c.data.unwrap_or_default();
            buf.resize(shape.size, 0);
            reqs[i] = post(buf);
            posted += 1;
        } else {
            // Completed and taken above: nothing left to wait for.
            let _completed = reqs.swap_remove(i);
        }
    }
    let elapsed = start.elapsed();
    let busy = cpu.share();
    if shape.verify {
        if let Some(who) = seen.iter().position(|s| s.len() != shape.messages) {
            bail!(
                "sender {}: {} distinct messages of {}",
                index[who],
                seen[who].len(),
                shape.messages
            );
        }
    }
    ep.wait_all(&go, Some(STEP))?;
    for &p in &peers {
        ep.send(p, ACK, 0, vec![1u8], Some(STEP))?;
    }
    // Stay until the senders have the ACKs: a sent message is only handed
    // to the transport, which must be there to retransmit it.
    ep.close(STEP).context("delivering the final ACKs")?;
    Ok((elapsed, snapshot.unwrap_or(bytes), busy))
}

/// One sender: say hello, wait for the start, stream, wait for the end.
/// Returns its retransmissions and timeouts.
fn send(ep: &Ep, to: &msg_layer::Addr, index: usize, shape: Shape) -> Result<(u64, u64)> {
    let p = ep.connect(to).map_err(|e| anyhow!("connecting: {e}"))?;
    let go = ep.irecv(Source::Peer(p), Tag::Is(READY), 0, vec![0; 16]);
    ep.send(
        p,
        CTRL,
        0,
        (index as u64).to_le_bytes().to_vec(),
        Some(STEP),
    )?;
    ep.wait_timeout(go, Some(STEP))
        .context("waiting for the start")?;
    let done = ep.irecv(Source::Peer(p), Tag::Is(ACK), 0, vec![0; 1]);
    let data = Bytes::from(vec![0xa5; shape.size]);
    let mut left = shape.messages;
    while left > 0 {
        let n = left.min(shape.window);
        let first = shape.messages - left;
        let reqs: Vec<Request> = (first..first + n)
            .map(|i| {
                let body = if shape.verify {
                    Bytes::from(tagged(index, i, shape.size))
                } else {
                    data.clone()
                };
                ep.isend(p, DATA, 0, body)
            })
            .collect();
        for r in ep.wait_all(&reqs, Some(STEP))? {
            r?;
        }
        left -= n;
    }
    ep.wait_timeout(done, Some(STEP))
        .context("waiting for the receiver to have everything")?;
    let c: std::collections::HashMap<String, u64> = ep.counters().into_iter().collect();
    let get = |k: &str| c.get(k).copied().unwrap_or(0);
    let _ = ep.close(Duration::from_secs(2));
    Ok((get("link.conn.retransmits"), get("link.conn.timeouts")))
}

#[cfg(test)]
mod tests {
    use super::fairness;

    #[test]
    fn tagged_messages_check_sender_and_content() {
        let m = super::tagged(3, 17, 4096);
        assert_eq!(super::check_tagged(3, &m, 4096).unwrap(), 17);
        assert!(super::check_tagged(2, &m, 4096).is_err(), "wrong sender");
        let mut bad = m.clone();
        bad[1000] ^= 1;
        assert!(super::check_tagged(3, &bad, 4096).is_err(), "corrupted");
        assert!(super::check_tagged(3, &m[..4000], 4096).is_err(), "short");
    }

    #[test]
    fn jain_index_of_equal_and_skewed_shares() {
        let (j, min, max) = fairness(&[10, 10, 10, 10]);
        assert!((j - 1.0).abs() < 1e-12 && min == 1.0 && max == 1.0);
        // One sender has everything: 1/n.
        let (j, min, max) = fairness(&[0, 0, 0, 40]);
        assert!((j - 0.25).abs() < 1e-12);
        assert_eq!((min, max), (0.0, 4.0));
        assert_eq!(fairness(&[]), (0.0, 0.0, 0.0));
    }
}
