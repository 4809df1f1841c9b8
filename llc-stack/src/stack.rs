//! The I/O edge: drives a sans-IO [`Endpoint`] over a link [`Device`].
//!
//! One round of progress is [`Stack::poll_rx`] (due timers, then a burst of
//! received frames), the application's reaction to the endpoint's events,
//! then [`Stack::poll_tx`] (frames written straight into the device's transmit
//! buffers, one flush per burst). Taking events between the two halves lets a
//! reply carry the acknowledgement of the request it answers.
//!
//! Waiting busy-polls for a bounded spin and then sleeps in the device's
//! `wait` (poll(2) on the socket) until a frame or the next timer is due.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::link::{Device, RxToken, TxToken};
use crate::pace::{Pace, Pacer};
use crate::proto::{Config, Endpoint};
use crate::rng::Rng;
use crate::statpage::{self, PageInfo, Publisher};
use crate::time::Instant;
use crate::wire::MacAddr;

/// Default busy-poll budget before sleeping: long enough to cover a LAN
/// round trip, short enough not to burn a core when idle.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(200);

/// `cfg` with its credit windows kept within `dev`'s receive queue (7/8 of
/// it, leaving room for control frames), shared equally by the connections.
fn fit_to_device<D: Device>(dev: &D, mut cfg: Config) -> Config {
    if let Some(n) = dev.capabilities().rx_queue_frames {
        let limit = (n * 7 / 8).max(1) as u32;
        cfg.max_window_frames = cfg.max_window_frames.min(limit);
        cfg.min_window_frames = cfg.min_window_frames.min(cfg.max_window_frames);
        cfg.rx_budget_frames = Some(cfg.rx_budget_frames.map_or(limit, |b| b.min(limit)));
    }
    cfg
}

/// An endpoint bound to a device.
#[derive(Debug)]
pub struct Stack<D: Device> {
    dev: D,
    ep: Endpoint,
    burst: usize,
    spin: Duration,
    /// The live statistics page, when published (boxed: the frames' path
    /// reads only whether it is there and when it is due).
    publisher: Option<Box<Publisher>>,
}

impl<D: Device> Stack<D> {
    /// Bind a new endpoint for `mac` to `dev`.
    ///
    /// The credit windows are kept within the device's receive queue (7/8
    /// of it, leaving room for control frames), shared equally by the
    /// connections, so peers never send more frames than this end can hold.
    pub fn new(dev: D, cfg: Config, mac: MacAddr, rng: Rng) -> Self {
        let caps = dev.capabilities();
        let ep = Endpoint::new(fit_to_device(&dev, cfg), mac, caps.mtu, rng);
        Stack {
            burst: caps.max_burst.max(1),
            dev,
            ep,
            spin: DEFAULT_SPIN,
            publisher: None,
        }
    }

    /// Start over with a fresh endpoint for `cfg` on the same device and
    /// MAC, as if the stack had just been created with it: how a program
    /// changes a setting fixed at creation (the authentication key) after
    /// it published its address, before the endpoint carried anything.
    /// Refused, giving `cfg` back, while the endpoint has a connection
    /// (half-open ones included). Nothing of the old endpoint is kept: its
    /// counters, listening and bound ports and placement go with it (the
    /// caller sets them again); the statistics page, if published, shows
    /// the new one's counters.
    pub fn renew_endpoint(&mut self, cfg: Config, rng: Rng) -> Result<(), Box<Config>> {
        if self.ep.connection_count() > 0 {
            return Err(Box::new(cfg));
        }
        let mtu = self.dev.capabilities().mtu;
        self.ep = Endpoint::new(fit_to_device(&self.dev, cfg), self.ep.mac(), mtu, rng);
        Ok(())
    }

    /// Publish this endpoint's counters for `llc-stat` in a page under
    /// [`statpage::dir_from_env`] (see [`statpage`]) until the stack is
    /// dropped. Returns the page, or `None` when `LLC_STAT=0` turned
    /// publishing off. Failing to create the page (a read-only /dev/shm)
    /// is an error the caller may report and ignore: nothing else depends
    /// on it.
    pub fn publish_stats(&mut self, mut info: PageInfo) -> io::Result<Option<&std::path::Path>> {
        if !statpage::enabled_by_env() {
            return Ok(None);
        }
        let caps = self.dev.capabilities();
        info.backend = caps.backend;
        info.mtu = caps.mtu;
        let p = Publisher::create_in(
            &statpage::dir_from_env(),
            &info,
            statpage::interval_from_env(),
        )?;
        let p = self.publisher.insert(Box::new(p));
        p.publish(&self.ep, Instant::now());
        Ok(Some(p.path()))
    }

    /// Publish now if something moved since the last publication: called
    /// before sleeping, so an idle endpoint's page is current.
    fn flush_stats(&mut self, now: Instant) {
        if let Some(p) = &mut self.publisher {
            p.flush(&self.ep, now);
        }
    }

    /// Set the busy-poll budget of the blocking helpers.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The endpoint, mutably (connect, send, poll_event...).
    pub fn endpoint_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.dev
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.dev
    }

    /// Run due timers, then receive up to a burst of frames into the
    /// endpoint. Returns the number of frames received.
    ///
    /// Timers are looked at before the frames: a received frame changes
    /// them, and finding the next deadline again then falls on the next
    /// pass (in a request-response exchange, an idle one) instead of
    /// delaying the frame's delivery to the application.
    pub fn poll_rx(&mut self, now: Instant) -> usize {
        if self.ep.poll_timeout().is_some_and(|t| t <= now) {
            self.ep.handle_timeout(now);
        }
        let mut n = 0;
        // The burst is at least one frame.
        while let Some(tok) = self.dev.receive(now) {
            let ep = &mut self.ep;
            tok.consume(|frame| ep.handle_frame(now, frame));
            n += 1;
            if n == self.burst {
                break;
            }
        }
        if n == 0 {
            // Idle: free what the last acknowledgements released, off the
            // path of the frames that carried them.
            self.ep.release_acked();
        }
        if let Some(p) = &mut self.publisher {
            // One comparison per pass; the page is rewritten once per interval.
            p.tick(&self.ep, now);
        }
        n
    }

    /// Transmit every frame the endpoint has ready (as far as the device
    /// takes them), then flush. Returns the number of frames sent.
    /// Inlined: a busy-polling driver asks far more often than it sends,
    /// and the question then costs no call into the frames' path.
    #[inline]
    pub fn poll_tx(&mut self, now: Instant) -> io::Result<usize> {
        if self.ep.wants_transmit() {
            return self.transmit_ready(now);
        }
        // Cheap when nothing is pending; also retries a kick the kernel deferred.
        self.dev.flush(now)?;
        Ok(0)
    }

    /// [`Stack::poll_tx`] once the endpoint wants to send.
    fn transmit_ready(&mut self, now: Instant) -> io::Result<usize> {
        let mut n = 0;
        loop {
            let Some(tok) = self.dev.transmit(now) else {
                break;
            };
            let ep = &mut self.ep;
            // A long payload goes from the message itself where the device
            // can send from several places (AF_PACKET), with or without a
            // key; others are handed the frame written whole, as their
            // `consume_gather` would copy it.
            let len = if <D::TxToken<'_> as TxToken>::GATHERS {
                tok.consume_gather(|buf| ep.poll_transmit_gather(now, buf).unwrap_or((0, None)))
            } else {
                tok.consume(|buf| ep.poll_transmit(now, buf).unwrap_or(0))
            };
            if len == 0 {
                break;
            }
            n += 1;
            if n % self.burst == 0 {
                self.dev.flush(now)?;
            }
            if !self.ep.wants_transmit() {
                break;
            }
        }
        // Cheap when nothing is pending; also retries a kick the kernel deferred.
        self.dev.flush(now)?;
        Ok(n)
    }

    /// `poll_rx` then `poll_tx`. Returns the frames moved.
    pub fn poll(&mut self, now: Instant) -> io::Result<usize> {
        let rx = self.poll_rx(now);
        Ok(rx + self.poll_tx(now)?)
    }

    /// Sleep in the device until a frame may be there, the endpoint's next
    /// timer, or `deadline`, whichever comes first.
    pub fn wait(&mut self, now: Instant, deadline: Option<Instant>) -> io::Result<()> {
        let until = match (self.ep.poll_timeout(), deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = until.map(|t| t.saturating_duration_since(now));
        if timeout == Some(Duration::ZERO) {
            return Ok(());
        }
        self.flush_stats(now);
        self.dev.wait(timeout)
    }

    /// Get ready for a sleep outside the stack (a progress thread polling
    /// without holding it): push the device's descriptors and return the
    /// longest sleep allowed by the device and the endpoint's timers;
    /// `Some(Duration::ZERO)` when there is work now.
    pub fn prepare_wait(&mut self, now: Instant, fds: &mut Vec<RawFd>) -> Option<Duration> {
        if self.ep.wants_transmit() {
            return Some(Duration::ZERO);
        }
        let timer = self
            .ep
            .poll_timeout()
            .map(|t| t.saturating_duration_since(now));
        self.flush_stats(now);
        match (self.dev.prepare_wait(fds), timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Make progress on the real clock until `f` returns `Some` or `deadline`
    /// passes (then `None`). Frames the caller queued go out first; then `f`
    /// runs after every receive half-round and may take events and send.
    /// When `f` is satisfied this returns at once, without the transmit half:
    /// whatever the caller sends next then carries the pending
    /// acknowledgement, and the next call transmits it first.
    /// Busy-polls for the spin budget after the last activity, then sleeps.
    pub fn run_until<T>(
        &mut self,
        deadline: Instant,
        mut f: impl FnMut(&mut Endpoint) -> Option<T>,
    ) -> io::Result<Option<T>> {
        let mut now = Instant::now();
        let mut pacer = Pacer::new(self.spin, now);
        // What the caller queued before this call (a request, or the reply
        // carrying the pending acknowledgement) leaves before anything else:
        // on a round trip's critical path nothing is worth a receive pass.
        // A link error is reported by the loop's transmit half, after the
        // receive half has run the timers (a link that stays down must still
        // end in the retry bound).
        let _ = self.poll_tx(now);
        loop {
            let rx = self.poll_rx(now);
            let done = f(&mut self.ep);
            if done.is_some() {
                return Ok(done);
            }
            let tx = self.poll_tx(now)?;
            if now >= deadline {
                return Ok(None);
            }
            if pacer.after_round(rx + tx > 0, now) == Pace::Sleep {
                self.wait(now, Some(deadline))?;
                pacer.woke(Instant::now());
            }
            now = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{Sim, SimConfig};
    use std::time::Duration;

    #[test]
    fn an_idle_receive_pass_frees_acknowledged_buffers() {
        let sim = Sim::new(SimConfig {
            latency: Duration::ZERO,
            ..Default::default()
        });
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let mut a = Stack::new(sim.port(), Config::default(), ma, Rng::new(1));
        let mut b = Stack::new(sim.port(), Config::default(), mb, Rng::new(2));
        b.endpoint_mut().listen(7);
        let mut now = Instant::ZERO;
        let c = a.endpoint_mut().connect(now, mb, 7, None).unwrap();
        let msg = bytes::Bytes::from(vec![7u8; 64]);
        a.endpoint_mut().send(c, msg.clone()).unwrap();
        let held = |a: &Stack<_>| a.endpoint().connection(c).unwrap().acked_held();
        // Step both ends until the pass in which A takes the acknowledgement.
        let mut acked_in_pass = None;
        for _ in 0..100 {
            now += Duration::from_micros(50);
            a.poll_tx(now).unwrap();
            b.poll_rx(now);
            while b.endpoint_mut().poll_event().is_some() {}
            b.poll_tx(now).unwrap();
            let n = a.poll_rx(now);
            if a.endpoint().connection_stats(c).unwrap().messages_acked == 1 {
                acked_in_pass = Some(n);
                break;
            }
        }
        assert_eq!(
            acked_in_pass,
            Some(1),
            "acknowledged in a pass with a frame"
        );
        assert_eq!(held(&a), 1, "kept off the acknowledgement's path");
        assert!(!msg.is_unique());
        assert_eq!(a.poll_rx(now), 0);
        assert_eq!(held(&a), 0, "freed by the idle pass");
        assert!(msg.is_unique());
    }

    /// An endpoint opened with a key nobody has takes none of a keyed
    /// peer's frames; renewed with the job's key, it accepts the peer's
    /// connection; with a connection it refuses to be renewed.
    #[test]
    fn a_renewed_endpoint_takes_the_new_key() {
        use crate::wire::AuthKey;
        let sim = Sim::new(SimConfig {
            latency: Duration::ZERO,
            ..Default::default()
        });
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let keyed = |k: &[u8]| Config {
            auth_key: Some(AuthKey::derive(k)),
            ..Config::default()
        };
        let mut a = Stack::new(sim.port(), keyed(b"job"), ma, Rng::new(1));
        let mut b = Stack::new(sim.port(), keyed(b"not yet known"), mb, Rng::new(2));
        b.endpoint_mut().listen(7);
        let mut now = Instant::ZERO;
        let c = a.endpoint_mut().connect(now, mb, 7, None).unwrap();
        let established = |a: &Stack<_>| {
            a.endpoint().connection(c).map(|x| x.state()) == Some(crate::proto::State::Established)
        };
        // Rounds of both ends, timers included, until A's connection is up.
        let rounds = |a: &mut Stack<_>, b: &mut Stack<_>, now: &mut Instant, n: usize| {
            for _ in 0..n {
                *now += Duration::from_millis(1);
                a.poll_tx(*now).unwrap();
                b.poll_rx(*now);
                b.poll_tx(*now).unwrap();
                a.poll_rx(*now);
                if established(a) {
                    break;
                }
            }
        };
        rounds(&mut a, &mut b, &mut now, 3);
        assert!(!established(&a));
        assert_eq!(b.endpoint().connection_count(), 0);
        assert!(b.endpoint().stats().dropped.auth_failed > 0);

        b.renew_endpoint(keyed(b"job"), Rng::new(3)).unwrap();
        b.endpoint_mut().listen(7);
        assert_eq!(
            b.endpoint().stats().dropped.auth_failed,
            0,
            "fresh counters"
        );
        // The SYN's retransmission reaches the renewed endpoint.
        rounds(&mut a, &mut b, &mut now, 5000);
        assert!(established(&a));
        assert_eq!(b.endpoint().connection_count(), 1);
        assert!(b.renew_endpoint(keyed(b"other"), Rng::new(4)).is_err());
    }
}
