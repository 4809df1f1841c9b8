//! An in-memory Ethernet segment for deterministic tests.
//!
//! [`Sim::new`] makes a hub; every [`SimPort`] it hands out is a [`Device`].
//! A frame sent on one port reaches every other port after the configured
//! latency plus its serialisation time at the configured rate, in order.
//! Time is whatever the caller passes as `now`, so a test drives a virtual
//! clock and can jump straight to [`Sim::next_arrival`].

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use super::{Capabilities, Device, RxToken, TxToken};
use crate::time::Instant;

/// Properties of the simulated segment.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// MTU of every port.
    pub mtu: usize,
    /// One-way propagation and processing delay.
    pub latency: Duration,
    /// Line rate in bits per second (0: infinite).
    pub rate_bps: u64,
    /// Frames a port's receive queue holds; more are dropped like a NIC
    /// ring overflow would (counted in [`Sim::overflow_drops`]).
    pub rx_queue_frames: usize,
    /// A switch instead of a hub: a frame to a unicast address the segment
    /// has seen sending goes to that port only (others, and broadcasts,
    /// still go everywhere). A segment of hundreds of ports needs it, as a
    /// real cluster's does: on a hub every frame is every port's work.
    pub switched: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            mtu: 1500,
            latency: Duration::from_micros(5),
            rate_bps: 10_000_000_000,
            rx_queue_frames: 1 << 16,
            switched: false,
        }
    }
}

#[derive(Debug, Default)]
struct Port {
    /// Frames on their way: when each becomes receivable, and its bytes as
    /// the first `len` of a frame-sized buffer.
    rx: VecDeque<(Instant, Vec<u8>, usize)>,
    /// `rx.len()`, readable without the lock: an idle port's receive poll
    /// reads it and nothing else, as a driver reads a ring's producer index.
    queued: Arc<AtomicUsize>,
    /// When this port's transmitter is free again (serialisation).
    tx_free_at: Instant,
    /// Where the switch sent this port's last frame (a switched segment).
    route: Option<Route>,
}

#[derive(Debug)]
struct Segment {
    cfg: SimConfig,
    ports: Vec<Port>,
    overflow_drops: u64,
    delivered: u64,
    /// Frame buffers received and done with, for the next frames sent: the
    /// simulated wire allocates nothing per frame, so allocation counts of
    /// the stack above it are the stack's own. Every buffer is a port's
    /// transmit buffer's size (see [`SimPort::tx_buf`]).
    spare: Vec<Vec<u8>>,
    /// Where each source address was last seen (a switched segment).
    learned: rustc_hash::FxHashMap<[u8; 6], usize>,
    /// Changes of `learned` so far: a port's remembered [`Route`] holds
    /// while it is unchanged.
    learned_gen: u64,
    /// `cfg.latency` in nanoseconds, as a frame's arrival adds it.
    latency_ns: u64,
    /// Frame buffers made and not freed (ports' transmit buffers, frames
    /// queued, spares): the wire's own memory, which measurements of the
    /// stack's leave out ([`Sim::frame_buffer_bytes`]). Changed only where a
    /// buffer is made or freed, never per frame.
    frame_bufs: usize,
}

/// Most spare frame buffers a segment keeps.
const MAX_SPARE: usize = 256;
/// Most spare frame buffers a port keeps for itself: a received frame's
/// buffer goes back without taking the segment's lock, and moves to the
/// segment in batches (a one-way stream's receiver feeds its sender).
const PORT_SPARE: usize = 32;

impl Segment {
    /// A frame-sized buffer, reused when one is spare.
    fn spare_buf(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_else(|| {
            self.frame_bufs += 1;
            vec![0; frame_buf_len(self.cfg.mtu)]
        })
    }
}

impl Segment {
    /// Queue the first `len` bytes of `frame` for port `i`, receivable at
    /// `arrival`. Inlined into the transmit path, as it was written there.
    #[inline(always)]
    fn deliver(&mut self, i: usize, arrival: Instant, frame: Vec<u8>, len: usize) {
        let port = &mut self.ports[i];
        port.rx.push_back((arrival, frame, len));
        port.queued.fetch_add(1, Ordering::Release);
        self.delivered += 1;
    }

    /// Where a switched segment sends `frame` from port `me` (`None`:
    /// everywhere), learning its source address: the port's last route
    /// while no address was learnt since, else two table lookups.
    #[inline(always)]
    fn route(&mut self, frame: &[u8], me: usize) -> Option<usize> {
        let src: [u8; 6] = frame[6..12].try_into().expect("6 bytes");
        let dst: [u8; 6] = frame[..6].try_into().expect("6 bytes");
        if let Some(r) = self.ports[me].route {
            if r.gen == self.learned_gen && r.src == src && r.dst == dst {
                return r.to;
            }
        }
        if self.learned.get(&src) != Some(&me) {
            self.learned.insert(src, me);
            self.learned_gen += 1;
        }
        // A group address (lowest bit of the first byte) floods.
        let to = if dst[0] & 1 == 0 {
            self.learned.get(&dst).copied()
        } else {
            None
        };
        self.ports[me].route = Some(Route {
            gen: self.learned_gen,
            src,
            dst,
            to,
        });
        to
    }
}

/// The size of every frame buffer of a segment of `mtu`.
fn frame_buf_len(mtu: usize) -> usize {
    mtu + crate::wire::ethernet::HEADER_LEN
}

/// A simulated Ethernet segment (a hub).
#[derive(Clone, Debug)]
pub struct Sim {
    seg: Arc<Mutex<Segment>>,
}

impl Sim {
    /// A segment with no ports yet.
    pub fn new(cfg: SimConfig) -> Self {
        let latency_ns = u64::try_from(cfg.latency.as_nanos()).unwrap_or(u64::MAX);
        Sim {
            seg: Arc::new(Mutex::new(Segment {
                cfg,
                ports: Vec::new(),
                overflow_drops: 0,
                delivered: 0,
                spare: Vec::new(),
                learned: Default::default(),
                learned_gen: 0,
                latency_ns,
                frame_bufs: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Segment> {
        self.seg.lock()
    }

    /// Attach a new port.
    pub fn port(&self) -> SimPort {
        let mut seg = self.lock();
        let port = Port::default();
        let queued = port.queued.clone();
        seg.ports.push(port);
        let mtu = seg.cfg.mtu;
        seg.frame_bufs += 1;
        SimPort {
            queued,
            sim: self.clone(),
            index: seg.ports.len() - 1,
            tx_buf: vec![0; frame_buf_len(mtu)],
            spare: Vec::new(),
        }
    }

    /// Earliest time a queued frame becomes receivable on any port.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.lock()
            .ports
            .iter()
            .filter_map(|p| p.rx.front().map(|f| f.0))
            .min()
    }

    /// Frames dropped because a receive queue was full.
    pub fn overflow_drops(&self) -> u64 {
        self.lock().overflow_drops
    }

    /// Frames delivered into receive queues.
    pub fn delivered(&self) -> u64 {
        self.lock().delivered
    }

    /// Bytes of the frame buffers this wire made and has not freed while
    /// its ports live (their transmit buffers, queued frames, spares): the
    /// simulated wire's own memory, for measurements of what the stack
    /// above it holds to leave out.
    pub fn frame_buffer_bytes(&self) -> usize {
        let seg = self.lock();
        seg.frame_bufs * frame_buf_len(seg.cfg.mtu)
    }
}

/// A switched segment's decision for a frame from `src` to `dst`: learnt
/// `src`'s port, and the port it goes to (`None`: everywhere). Valid while
/// the segment's learned addresses are as they were (`gen`): a port sends
/// to one peer again and again, and two address comparisons cost less than
/// two table lookups.
#[derive(Clone, Copy, Debug)]
struct Route {
    gen: u64,
    src: [u8; 6],
    dst: [u8; 6],
    to: Option<usize>,
}

/// One port of a [`Sim`] segment.
#[derive(Debug)]
pub struct SimPort {
    /// This port's [`Port::queued`].
    queued: Arc<AtomicUsize>,
    sim: Sim,
    index: usize,
    /// Where the next frame is written. A frame sent goes to its (last)
    /// receiver in this very buffer, and a spare one takes its place: the
    /// frame is not copied.
    tx_buf: Vec<u8>,
    /// Buffers of frames this port received and read (see [`PORT_SPARE`]).
    spare: Vec<Vec<u8>>,
}

/// A received frame (the first `len` bytes of `frame`), owned; its buffer
/// goes back to the port once read.
#[derive(Debug)]
pub struct SimRx<'a> {
    frame: Vec<u8>,
    len: usize,
    port: &'a mut SimPort,
}

impl RxToken for SimRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        let r = f(&self.frame[..self.len]);
        let port = self.port;
        if port.spare.len() >= PORT_SPARE {
            let mut seg = port.sim.lock();
            let room = MAX_SPARE.saturating_sub(seg.spare.len());
            let excess = port.spare.len() - PORT_SPARE / 2;
            // What the segment has no room for is freed.
            seg.frame_bufs -= excess - excess.min(room);
            seg.spare
                .extend(port.spare.drain(PORT_SPARE / 2..).take(room));
            port.spare.truncate(PORT_SPARE / 2);
        }
        port.spare.push(self.frame);
        r
    }
}

/// A transmit slot on a [`SimPort`].
#[derive(Debug)]
pub struct SimTx<'a> {
    port: &'a mut SimPort,
    now: Instant,
}

impl TxToken for SimTx<'_> {
    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize {
        let n = f(&mut self.port.tx_buf).min(self.port.tx_buf.len());
        if n > 0 {
            let port = self.port;
            let mut seg = port.sim.lock();
            let (rate_bps, latency_ns, switched, rx_queue_frames) = (
                seg.cfg.rate_bps,
                seg.latency_ns,
                seg.cfg.switched,
                seg.cfg.rx_queue_frames,
            );
            let me = port.index;
            let start = seg.ports[me].tx_free_at.max(self.now);
            // Preamble, FCS and inter-frame gap add 24 bytes of line time.
            let done = match ((n as u64 + 24) * 8 * 1_000_000_000).checked_div(rate_bps) {
                Some(ns) => start.add_nanos(ns),
                None => start,
            };
            seg.ports[me].tx_free_at = done;
            let arrival = done.add_nanos(latency_ns);
            let to = if switched && n >= 12 {
                seg.route(&port.tx_buf, me)
            } else {
                None
            };
            // One receiver (a switched frame's port, or the other end of a
            // two-port wire) takes the transmit buffer without the walk.
            let single = match to {
                Some(i) => Some(i),
                None if seg.ports.len() == 2 => Some(1 - me),
                None => None,
            };
            if let Some(j) = single {
                if j != me {
                    if seg.ports[j].rx.len() >= rx_queue_frames {
                        seg.overflow_drops += 1;
                    } else {
                        let fresh = port.spare.pop().unwrap_or_else(|| seg.spare_buf());
                        let frame = std::mem::replace(&mut port.tx_buf, fresh);
                        seg.deliver(j, arrival, frame, n);
                    }
                }
                return n;
            }
            // Every receiver but the last gets a copy; the last one the
            // transmit buffer itself.
            let mut last = None;
            for i in 0..seg.ports.len() {
                if i == me {
                    continue;
                }
                if seg.ports[i].rx.len() >= rx_queue_frames {
                    seg.overflow_drops += 1;
                    continue;
                }
                if let Some(j) = last.replace(i) {
                    let mut copy = port.spare.pop().unwrap_or_else(|| seg.spare_buf());
                    copy[..n].copy_from_slice(&port.tx_buf[..n]);
                    seg.deliver(j, arrival, copy, n);
                }
            }
            if let Some(j) = last {
                let fresh = port.spare.pop().unwrap_or_else(|| seg.spare_buf());
                let frame = std::mem::replace(&mut port.tx_buf, fresh);
                seg.deliver(j, arrival, frame, n);
            }
        }
        n
    }
}

impl SimPort {
    /// Earliest time a frame queued for this port becomes receivable.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.sim.lock().ports[self.index].rx.front().map(|f| f.0)
    }
}

impl Device for SimPort {
    type RxToken<'a> = SimRx<'a>;
    type TxToken<'a> = SimTx<'a>;

    /// The idle check is inlined into the caller: a busy-polling end asks
    /// far more often than frames arrive, and a call that only reads the
    /// counter would pay most of its cost saving and restoring registers.
    #[inline]
    fn receive(&mut self, now: Instant) -> Option<SimRx<'_>> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.receive_queued(now)
    }

    fn transmit(&mut self, now: Instant) -> Option<SimTx<'_>> {
        Some(SimTx { port: self, now })
    }

    fn flush(&mut self, _now: Instant) -> io::Result<()> {
        Ok(())
    }

    fn capabilities(&self) -> Capabilities {
        let seg = self.sim.lock();
        Capabilities {
            mtu: seg.cfg.mtu,
            max_burst: 32,
            backend: "sim".into(),
            rx_queue_frames: Some(seg.cfg.rx_queue_frames),
        }
    }
}

impl SimPort {
    /// [`Device::receive`] once the counter says frames are queued: the
    /// front one, if it has arrived by `now`. Always inlined: the driver's
    /// receive loop is its one caller.
    #[inline(always)]
    fn receive_queued(&mut self, now: Instant) -> Option<SimRx<'_>> {
        let mut seg = self.sim.lock();
        let rx = &mut seg.ports[self.index].rx;
        // Taken, and put back should it not have arrived yet: one look at
        // the queue's front instead of two.
        let (at, frame, len) = rx.pop_front()?;
        if at > now {
            rx.push_front((at, frame, len));
            return None;
        }
        // This port's own counter (the same as the segment's entry's).
        self.queued.fetch_sub(1, Ordering::Relaxed);
        drop(seg);
        Some(SimRx {
            frame,
            len,
            port: self,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_arrive_after_latency_in_order() {
        let sim = Sim::new(SimConfig {
            latency: Duration::from_micros(10),
            rate_bps: 0,
            ..Default::default()
        });
        let mut a = sim.port();
        let mut b = sim.port();
        let t0 = Instant::from_micros(100);
        for i in 1..=3u8 {
            a.transmit(t0).unwrap().consume(|buf| {
                buf[0] = i;
                60
            });
        }
        assert!(b.receive(t0).is_none());
        assert_eq!(sim.next_arrival(), Some(Instant::from_micros(110)));
        let t1 = Instant::from_micros(110);
        for i in 1..=3u8 {
            assert_eq!(b.receive(t1).unwrap().consume(|f| (f[0], f.len())), (i, 60));
        }
        assert!(a.receive(t1).is_none(), "no echo to the sender");
        // A cancelled transmission sends nothing.
        a.transmit(t1).unwrap().consume(|_| 0);
        assert_eq!(sim.next_arrival(), None);
    }

    #[test]
    fn a_switched_segment_sends_unicast_to_the_learned_port_only() {
        let sim = Sim::new(SimConfig {
            latency: Duration::ZERO,
            rate_bps: 0,
            switched: true,
            ..Default::default()
        });
        let mut ports: Vec<SimPort> = (0..3).map(|_| sim.port()).collect();
        let now = Instant::from_micros(1);
        let send = |p: &mut SimPort, dst: [u8; 6], src: [u8; 6]| {
            p.transmit(now).unwrap().consume(|buf| {
                buf[..6].copy_from_slice(&dst);
                buf[6..12].copy_from_slice(&src);
                60
            });
        };
        let (a, b, c) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]);
        // b is not known yet: the frame floods, and the segment learns a.
        send(&mut ports[0], b, a);
        assert_eq!(sim.delivered(), 2);
        send(&mut ports[1], a, b);
        assert_eq!(sim.delivered(), 3, "a is known: only its port");
        assert!(ports[0].receive(now).is_some());
        assert!(ports[0].receive(now).is_none());
        assert!(ports[2].receive(now).is_some(), "the flooded frame only");
        assert!(ports[2].receive(now).is_none());
        // A group address still floods.
        send(&mut ports[2], [0xff; 6], c);
        assert_eq!(sim.delivered(), 5);
    }
}
