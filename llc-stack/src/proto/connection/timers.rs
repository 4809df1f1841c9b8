//! The timer table: retransmission (and SYN retry), delayed ACK,
//! keepalive and window probe, idle limit, tail-loss probe and RACK's
//! reordering timer. Deadlines are only stored here; the driver asks
//! [`Connection::poll_timeout`] and calls [`Connection::handle_timeout`].
//!
//! How far away the deadlines are is [`PathTiming`]'s: the RTT estimate,
//! the RTO's back-off and the tail-loss probes; [`Keepalive`] holds when
//! the peer was last heard.

use std::time::Duration;

use super::stats::ConnStats;
use super::{wire_ts, Connection, State};
use crate::proto::config::Config;
use crate::proto::error::ConnectionError;
use crate::proto::rtt::RttEstimator;
use crate::time::Instant;
use crate::wire::TransportHeader;

/// Timers, indexed into a table.
#[derive(Copy, Clone, Debug)]
pub(super) enum Timer {
    /// Retransmission (and SYN retry).
    Rto = 0,
    /// Delayed acknowledgement.
    Ack = 1,
    /// Keepalive probe, and window probe while the peer grants no credit.
    Probe = 2,
    /// Idle limit / half-open limit.
    Idle = 3,
    /// Tail-loss probe: the last frames of a burst went unanswered for a
    /// couple of round trips (no later frame can reveal their loss).
    Tail = 4,
    /// RACK's reordering timer: a frame sent before one already delivered
    /// becomes lost once it has been out for a round trip plus the
    /// reordering allowance, without waiting for a later acknowledgement.
    Reorder = 5,
}

pub(super) const TIMER_COUNT: usize = 6;

/// A timer not armed: the end of time. A deadline that saturates there
/// (an infinite timeout) never fires either way.
const UNARMED: u64 = u64::MAX;

/// The deadlines in nanoseconds, [`UNARMED`] for a timer not armed: the
/// next one is a plain minimum of integers (the endpoint asks after every
/// change), not a minimum over options, and arming one is one store.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timers([u64; TIMER_COUNT]);

impl Timers {
    pub(super) const NONE: Timers = Timers([UNARMED; TIMER_COUNT]);

    #[inline(always)]
    pub(super) fn get(&self, t: Timer) -> Option<Instant> {
        let n = self.0[t as usize];
        (n != UNARMED).then(|| Instant::from_nanos(n))
    }

    #[inline(always)]
    pub(super) fn set(&mut self, t: Timer, at: Option<Instant>) {
        self.0[t as usize] = at.map_or(UNARMED, Instant::as_nanos);
    }

    /// The earliest deadline armed.
    #[inline(always)]
    pub(super) fn next(&self) -> Option<Instant> {
        let t = self.0.iter().fold(UNARMED, |a, &b| a.min(b));
        (t != UNARMED).then(|| Instant::from_nanos(t))
    }
}

/// The path's round trip and the timeouts derived from it: the RTT
/// estimator, the retransmission timeout's back-off, the tail-loss probes
/// sent without a delivery, and the delay the peer announced it may hold
/// an acknowledgement. The timer table holds the deadlines; this decides
/// how far away they are.
#[derive(Debug)]
pub(super) struct PathTiming {
    rtt: RttEstimator,
    /// Retransmission timeouts in a row (each doubles the next).
    backoff: u32,
    /// Tail-loss probes sent since the last delivery; each waits twice as
    /// long as the one before.
    probes_in_a_row: u32,
    /// A tail-loss probe may send one retransmission beyond the congestion
    /// window (the frames that fill it may be lost too, and nothing would
    /// drain it before the RTO).
    probe_credit: bool,
    /// Longest the peer holds an acknowledgement of a frame that did not ask
    /// for one soon, as it announced in the handshake (zero: a peer that
    /// announced none, and is asked for every acknowledgement soon). In
    /// nanoseconds: the frames' path adds it to deadlines.
    peer_max_ack_delay_ns: u64,
    /// The same in whole microseconds, as the RTT samples take it (kept
    /// apart: a division on every acknowledgement otherwise).
    peer_max_ack_delay_us: u64,
}

impl PathTiming {
    /// No sample yet: the configured initial timeout.
    pub(super) fn new(cfg: &Config) -> Self {
        PathTiming {
            rtt: RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto),
            backoff: 0,
            probes_in_a_row: 0,
            probe_credit: false,
            peer_max_ack_delay_ns: 0,
            peer_max_ack_delay_us: 0,
        }
    }

    /// The RTT estimator (smoothed and latest samples).
    #[inline(always)]
    pub(super) fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }

    /// The retransmission timeout before back-off, in nanoseconds.
    #[inline(always)]
    pub(super) fn rto_nanos(&self) -> u64 {
        self.rtt.rto_nanos()
    }

    /// The retransmission timeout with the current back-off, in nanoseconds.
    #[inline(always)]
    pub(super) fn rto_backed_off_nanos(&self) -> u64 {
        self.rtt.rto_backed_off_nanos(self.backoff)
    }

    /// [`PathTiming::rto_backed_off_nanos`] as a `Duration`.
    pub(super) fn rto_backed_off(&self) -> Duration {
        self.rtt.rto_backed_off(self.backoff)
    }

    /// One more timeout in a row; returns how many now.
    pub(super) fn back_off(&mut self) -> u32 {
        self.backoff += 1;
        self.backoff
    }

    /// New data was acknowledged, or the handshake completed: the
    /// back-off ends.
    #[inline(always)]
    pub(super) fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Probe timeout after the last transmission: twice the smoothed RTT
    /// (the receiver acknowledges a burst's last frame at once, ACK_NOW) plus
    /// scheduling slack, far below the RTO floor; and no earlier than the
    /// RTT's own spread says an acknowledgement may still come (srtt + 4
    /// rttvar). A peer whose process shares its cores with many others
    /// answers late and irregularly; probing inside that spread only
    /// resends what arrived (spurious probes cost both ends a frame). Plus
    /// the delay the peer may hold an acknowledgement it was not asked for
    /// soon (its announced `max_ack_delay`, as QUIC's PTO adds it).
    pub(super) fn probe_timeout(&self) -> Duration {
        Duration::from_nanos(self.probe_timeout_nanos())
    }

    /// [`PathTiming::probe_timeout`] in nanoseconds (the per-frame path's).
    #[inline]
    pub(super) fn probe_timeout_nanos(&self) -> u64 {
        self.rtt.probe_base_nanos() + 50_000 + self.peer_max_ack_delay_ns
    }

    /// When the next tail-loss probe is due after a retransmission: the
    /// probe timeout, doubled for every probe already sent without a
    /// delivery since, and none once that reaches the RTO, which takes over
    /// (its back-off and retry bound decide a dead peer's fate). The RTO
    /// floor is fifty round trips on a LAN, so a lost probe (or its lost
    /// answer) gets a second chance well before it.
    pub(super) fn next_probe(&self, now: Instant) -> Option<Instant> {
        let wait = self.probe_timeout() * (1u32 << self.probes_in_a_row.min(16));
        (wait < self.rtt.rto()).then_some(now + wait)
    }

    /// A tail-loss probe is due: one repair may go beyond the window, and
    /// the next probe waits twice as long.
    pub(super) fn on_tail_probe(&mut self) {
        self.probe_credit = true;
        self.probes_in_a_row += 1;
    }

    /// A repair may go beyond the congestion window (a tail-loss probe).
    #[inline(always)]
    pub(super) fn has_probe_credit(&self) -> bool {
        self.probe_credit
    }

    /// A repair went out: the probe's allowance, if any, is used.
    #[inline(always)]
    pub(super) fn use_probe_credit(&mut self) {
        self.probe_credit = false;
    }

    /// A frame was delivered: the probes start again from one timeout.
    #[inline(always)]
    pub(super) fn on_delivery(&mut self) {
        self.probes_in_a_row = 0;
    }

    /// The peer announced `micros` as its `max_ack_delay` (0: none),
    /// bounded by `max` (our largest timeout) so that a hostile value
    /// cannot stall the tail-loss probe.
    pub(super) fn set_peer_max_ack_delay(&mut self, micros: u32, max: Duration) {
        // At most 2^32 microseconds: the nanoseconds fit a u64.
        let d = Duration::from_micros(u64::from(micros)).min(max);
        self.peer_max_ack_delay_ns = d.as_nanos() as u64;
        self.peer_max_ack_delay_us = d.as_micros() as u64;
    }

    /// The peer's announced longest acknowledgement delay (zero: none).
    pub(super) fn peer_max_ack_delay(&self) -> Duration {
        Duration::from_nanos(self.peer_max_ack_delay_ns)
    }

    /// The peer announced a delay: an acknowledgement nobody waits for
    /// may come that late.
    #[inline(always)]
    pub(super) fn peer_delays_acks(&self) -> bool {
        self.peer_max_ack_delay_ns != 0
    }

    /// An RTT sample from an ACK `h` that moved the cumulative point and
    /// echoes our timestamp `ecr` (not zero); `wts` is our wire clock now.
    /// The peer says in `h` how long it held the ACK. The counters
    /// in `stats` follow it (the smallest sample is also the congestion
    /// controller's queue reference).
    #[inline(always)]
    pub(super) fn sample(&mut self, wts: u32, ecr: u32, h: &TransportHeader, s: &mut ConnStats) {
        let rtt_us = wts.wrapping_sub(ecr);
        if rtt_us < 60_000_000 {
            // In nanoseconds, whole microseconds (as every sample).
            let min_before = s.min_rtt_ns;
            let ns = rtt_us as u64 * 1000;
            s.rtt_samples += 1;
            s.latest_rtt_ns = ns;
            s.min_rtt_ns = if s.min_rtt_ns == 0 {
                ns
            } else {
                s.min_rtt_ns.min(ns)
            };
            // The time the peer held the acknowledgement is not the
            // path's: take it out (at most the delay the peer
            // announced, as QUIC does, and not below the smallest
            // round trip seen before), so that a late acknowledgement
            // does not inflate the timeouts of every later frame.
            let held = u64::from(h.ack_delay.get()).min(self.peer_max_ack_delay_us) * 1000;
            let adjusted = if min_before == 0 || ns >= min_before + held {
                ns.saturating_sub(held)
            } else {
                ns
            };
            self.rtt.sample_nanos(adjusted);
            s.srtt_ns = self.rtt.srtt_nanos();
        }
    }
}

/// What the idle limit and the keepalive go by: when we last heard from
/// the peer, and whether a PING (keepalive or window probe) is to go.
#[derive(Debug)]
pub(super) struct Keepalive {
    last_rx: Instant,
    ping_due: bool,
}

impl Keepalive {
    /// Heard from the peer at `now` (a new connection counts as heard).
    pub(super) fn new(now: Instant) -> Self {
        Keepalive {
            last_rx: now,
            ping_due: false,
        }
    }

    /// A frame from the peer arrived at `now`. The idle and keepalive
    /// deadlines follow it lazily (see `on_timer`).
    #[inline(always)]
    pub(super) fn heard(&mut self, now: Instant) {
        self.last_rx = now;
    }

    /// When we last heard from the peer.
    pub(super) fn last_heard(&self) -> Instant {
        self.last_rx
    }

    /// A PING is to go at the next chance.
    #[inline(always)]
    pub(super) fn ping_due(&self) -> bool {
        self.ping_due
    }

    /// Send a PING at the next chance.
    pub(super) fn request_ping(&mut self) {
        self.ping_due = true;
    }

    /// True once when a PING is due (it is being sent).
    #[inline(always)]
    pub(super) fn take_ping(&mut self) -> bool {
        std::mem::take(&mut self.ping_due)
    }
}

impl Connection {
    pub(super) fn on_timer(&mut self, now: Instant, t: Timer) {
        match t {
            Timer::Idle => match self.state {
                // Half-open: forget silently; the application never saw it.
                // A connection we opened whose SYN crossed the peer's
                // (`adopt_syn`): its user waits for it, so it fails as a
                // connection attempt does.
                State::SynReceived if self.handshake.attempts() > 0 => {
                    self.fail(ConnectionError::ConnectTimeout(self.handshake.attempts()))
                }
                State::SynReceived => {
                    self.state = State::Closed;
                    self.timers = Timers::NONE;
                }
                State::Established | State::Closing if now < self.idle_deadline() => {
                    // Heard from the peer since the deadline was set.
                    self.timers.set(Timer::Idle, Some(self.idle_deadline()));
                }
                _ => self.fail(ConnectionError::IdleTimeout(self.cfg.idle_timeout)),
            },
            Timer::Rto => {
                if self.state == State::SynSent {
                    let attempts = self.handshake.attempts();
                    if attempts > self.cfg.max_syn_retries {
                        self.fail(if self.cfg.auth_key.is_some() {
                            ConnectionError::AuthConnectTimeout(attempts)
                        } else {
                            ConnectionError::ConnectTimeout(attempts)
                        });
                    } else {
                        self.timing.back_off();
                        self.handshake.request();
                    }
                    return;
                }
                if self.snd.in_flight() == 0 {
                    return;
                }
                let backoff = self.timing.back_off();
                if backoff > self.cfg.max_retransmits {
                    self.fail(ConnectionError::RetransmitLimit(backoff - 1));
                    return;
                }
                self.stats.timeouts += 1;
                self.cc
                    .on_timeout(wire_ts(now), self.snd.nxt(), self.snd.flight());
                self.snd.mark_all_lost();
                self.timers
                    .set(Timer::Rto, Some(now + self.timing.rto_backed_off()));
            }
            Timer::Ack => {
                self.ack.on_timer();
            }
            Timer::Probe => {
                if matches!(self.state, State::Established | State::Closing) {
                    let due = self.alive.last_heard() + self.probe_interval();
                    if now < due {
                        // Heard from the peer since the deadline was set.
                        self.timers.set(Timer::Probe, Some(due));
                        return;
                    }
                    self.alive.request_ping();
                    self.timers
                        .set(Timer::Probe, Some(now + self.probe_interval()));
                }
            }
            Timer::Tail => self.tail_probe(),
            Timer::Reorder => {
                if matches!(self.state, State::Established | State::Closing) {
                    self.detect_losses(now);
                }
            }
        }
    }

    pub(super) fn rearm_idle(&mut self, now: Instant) {
        self.timers
            .set(Timer::Idle, Some(now + self.cfg.idle_timeout));
        if self.timers.get(Timer::Probe).is_some() {
            self.timers
                .set(Timer::Probe, Some(now + self.probe_interval()));
        }
    }

    /// When the connection fails for silence: an idle timeout after the
    /// last frame heard.
    fn idle_deadline(&self) -> Instant {
        self.alive.last_heard() + self.cfg.idle_timeout
    }

    pub(super) fn probe_interval(&self) -> Duration {
        if self.snd.blocked_by_credit() {
            self.timing.rto_backed_off()
        } else {
            self.cfg.keepalive_interval
        }
    }

    /// Nothing was delivered for a probe timeout: send one frame beyond the
    /// congestion window, so that its acknowledgement (with SACK) reveals
    /// what was lost, instead of waiting for the RTO (RACK-TLP, RFC 8985).
    /// The frame is the first repair already due, else the newest
    /// unacknowledged frame. Not a congestion signal.
    #[inline(never)]
    fn tail_probe(&mut self) {
        if !matches!(self.state, State::Established | State::Closing) {
            return;
        }
        if !self.snd.mark_probe_frame() {
            return;
        }
        self.timing.on_tail_probe();
        self.stats.tail_probes += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::super::harness::{deliver, events, header, messages, pattern, transmit_all, Pair};
    use super::super::Event;
    use super::*;
    use crate::proto::config::Config;
    use crate::wire::FrameType;

    fn rto_deadline(c: &Connection) -> Instant {
        c.timers.get(Timer::Rto).expect("a retransmission timer")
    }

    #[test]
    fn the_rto_retransmits_doubles_and_ends_the_connection() {
        let a = Config {
            max_retransmits: 3,
            ..Config::default()
        };
        let mut p = Pair::with(a, Config::default());
        let t0 = p.now;
        p.a.send(pattern(100, 1).into()).unwrap();
        let sent = transmit_all(&mut p.a, t0);
        assert_eq!(sent.len(), 1);
        let seq = header(&sent[0]).seq.get();
        // No round trip measured yet: the initial RTO.
        let rto = Config::default().initial_rto;
        assert_eq!(rto_deadline(&p.a) - t0, rto);
        // Each timeout resends the lost frame and waits twice as long.
        let mut deadline = rto_deadline(&p.a);
        for n in 1..=3u32 {
            p.advance_to(deadline);
            assert_eq!(p.a.stats().timeouts, n as u64);
            assert_eq!(p.a.timing.backoff, n);
            let again = transmit_all(&mut p.a, p.now);
            assert!(
                again.iter().any(|f| header(f).seq.get() == seq),
                "not resent"
            );
            let next = rto_deadline(&p.a);
            assert_eq!(next - deadline, rto * (1 << n));
            deadline = next;
        }
        assert!(p.a.stats().retransmits >= 3);
        // One timeout more than allowed: the connection fails, saying why.
        p.advance_to(deadline);
        assert_eq!(p.a.state(), State::Closed);
        assert_eq!(
            events(&mut p.a),
            [Event::Closed(Some(ConnectionError::RetransmitLimit(3)))]
        );
        assert_eq!(p.a.poll_timeout(), None);
    }

    #[test]
    fn an_acknowledgement_stops_the_rto() {
        let mut p = Pair::new();
        p.a.send(pattern(100, 1).into()).unwrap();
        for f in transmit_all(&mut p.a, p.now) {
            deliver(&mut p.b, p.now, &f);
        }
        assert!(p.a.timers.get(Timer::Rto).is_some());
        p.settle();
        assert_eq!(p.a.timers.get(Timer::Rto), None);
        assert_eq!(p.a.stats().timeouts, 0);
        assert_eq!(messages(&mut p.b).len(), 1);
    }

    #[test]
    fn a_silent_peer_is_probed_then_declared_gone() {
        let mut p = Pair::new();
        let cfg = Config::default();
        let heard = p.now;
        // B is gone: A's frames go nowhere.
        let mut pings = Vec::new();
        while p.a.state() != State::Closed {
            let t = p.a.poll_timeout().expect("a timer while open");
            p.advance_to(t);
            for f in transmit_all(&mut p.a, t) {
                if header(&f).frame_type() == FrameType::Ping {
                    pings.push(t);
                }
            }
        }
        assert_eq!(p.now, heard + cfg.idle_timeout);
        assert_eq!(
            events(&mut p.a),
            [Event::Closed(Some(ConnectionError::IdleTimeout(
                cfg.idle_timeout
            )))]
        );
        // A keepalive each interval before that.
        let expect: Vec<Instant> = (1..10u32)
            .map(|i| heard + cfg.keepalive_interval * i)
            .collect();
        assert_eq!(pings, expect);
    }

    #[test]
    fn answered_keepalives_keep_an_idle_connection_open() {
        let mut p = Pair::new();
        let cfg = Config::default();
        p.run_for(cfg.idle_timeout * 3, cfg.keepalive_interval / 2);
        assert_eq!(p.a.state(), State::Established);
        assert_eq!(p.b.state(), State::Established);
        assert!(events(&mut p.a).is_empty());
    }

    #[test]
    fn a_delayed_acknowledgement_goes_out_when_its_timer_fires() {
        let mut p = Pair::new();
        p.a.send(pattern(100, 1).into()).unwrap();
        p.a.send(pattern(100, 2).into()).unwrap();
        // Neither frame asks for an acknowledgement at once; the last one
        // asks for one soon.
        for f in transmit_all(&mut p.a, p.now) {
            deliver(&mut p.b, p.now, &f);
        }
        assert!(p.b.ack_pending());
        assert!(
            transmit_all(&mut p.b, p.now).is_empty(),
            "acknowledged at once"
        );
        let due = p.b.timers.get(Timer::Ack).expect("a delayed ACK");
        assert_eq!(due - p.now, Config::default().ack_soon_delay);
        p.advance_to(due);
        let acks = transmit_all(&mut p.b, p.now);
        assert_eq!(acks.len(), 1);
        assert_eq!(header(&acks[0]).frame_type(), FrameType::Ack);
        assert!(!p.b.ack_pending());
    }

    /// The message layer's configuration: sends complete when queued, so
    /// nothing waits for an acknowledgement unless a send says it does.
    fn no_acked_events() -> Config {
        Config {
            acked_events: false,
            ..Config::default()
        }
    }

    #[test]
    fn the_handshake_tells_each_end_the_peers_acknowledgement_delay() {
        let slow = Config {
            ack_delay: Duration::from_micros(700),
            ..Config::default()
        };
        let p = Pair::with(Config::default(), slow);
        assert_eq!(p.a.peer_max_ack_delay(), Duration::from_micros(700));
        assert_eq!(p.b.peer_max_ack_delay(), Config::default().ack_delay);
    }

    #[test]
    fn a_request_nobody_waits_on_is_acknowledged_by_a_reply_sent_late() {
        let mut p = Pair::with(no_acked_events(), no_acked_events());
        p.a.send(pattern(100, 1).into()).unwrap();
        let req = transmit_all(&mut p.a, p.now);
        assert_eq!(req.len(), 1);
        assert!(!header(&req[0]).has(crate::wire::transport::flags::ACK_SOON));
        deliver(&mut p.b, p.now, &req[0]);
        let due = p.b.timers.get(Timer::Ack).expect("a delayed ACK");
        assert_eq!(due - p.now, Config::default().ack_delay);
        // B's application answers 100 µs later (it waited for a core):
        // long past ACK_SOON's 10 µs, within the announced delay.
        p.advance_to(p.now + Duration::from_micros(100));
        assert!(transmit_all(&mut p.b, p.now).is_empty(), "a pure ACK");
        p.b.send(pattern(50, 2).into()).unwrap();
        let reply = transmit_all(&mut p.b, p.now);
        assert_eq!(reply.len(), 1, "the reply carries the acknowledgement");
        assert_eq!(header(&reply[0]).ack_delay.get(), 100);
        deliver(&mut p.a, p.now, &reply[0]);
        assert!(p.a.is_send_idle());
        assert_eq!(messages(&mut p.a), [pattern(50, 2)]);
        // A's round trip is the path's (zero here), not B's 100 µs.
        assert!(p.a.srtt() < Duration::from_micros(10), "{:?}", p.a.srtt());
    }

    #[test]
    fn an_awaited_send_asks_for_its_acknowledgement_soon() {
        let mut p = Pair::with(no_acked_events(), no_acked_events());
        p.a.send_parts_awaited(b"head", pattern(100, 1).into())
            .unwrap();
        let f = transmit_all(&mut p.a, p.now);
        assert!(header(&f[0]).has(crate::wire::transport::flags::ACK_SOON));
        deliver(&mut p.b, p.now, &f[0]);
        let due = p.b.timers.get(Timer::Ack).expect("a delayed ACK");
        assert_eq!(due - p.now, Config::default().ack_soon_delay);
        p.advance_to(due);
        let acks = transmit_all(&mut p.b, p.now);
        assert_eq!(acks.len(), 1);
        deliver(&mut p.a, p.now, &acks[0]);
        assert!(p.a.is_send_idle());
    }

    #[test]
    fn a_peer_that_announces_no_delay_is_asked_soon_and_probed_as_before() {
        let mut p = Pair::with(no_acked_events(), no_acked_events());
        // As a peer before the announcement: its SYN carried 0.
        p.a.set_peer_max_ack_delay(0);
        p.a.send(pattern(100, 1).into()).unwrap();
        let f = transmit_all(&mut p.a, p.now);
        assert!(header(&f[0]).has(crate::wire::transport::flags::ACK_SOON));
        let probe_after = p.a.timers.get(Timer::Tail).unwrap() - p.now;
        assert!(probe_after < Config::default().ack_delay, "{probe_after:?}");
    }

    #[test]
    fn the_tail_probe_waits_for_the_peers_announced_delay() {
        let mut p = Pair::with(no_acked_events(), no_acked_events());
        p.a.send(pattern(100, 1).into()).unwrap();
        let f = transmit_all(&mut p.a, p.now);
        let probe_after = p.a.timers.get(Timer::Tail).unwrap() - p.now;
        assert!(probe_after > Config::default().ack_delay, "{probe_after:?}");
        // B acknowledges when its timer fires: before A probes.
        deliver(&mut p.b, p.now, &f[0]);
        let due = p.b.timers.get(Timer::Ack).unwrap();
        p.advance_to(due);
        for ack in transmit_all(&mut p.b, p.now) {
            deliver(&mut p.a, p.now, &ack);
        }
        assert!(p.a.is_send_idle());
        assert_eq!(p.a.stats().retransmits, 0);
    }

    #[test]
    fn a_reported_delay_beyond_the_announced_one_stays_in_the_sample() {
        let mut p = Pair::with(no_acked_events(), no_acked_events());
        p.a.send(pattern(100, 1).into()).unwrap();
        let f = transmit_all(&mut p.a, p.now);
        deliver(&mut p.b, p.now, &f[0]);
        // B's process did not run for 2 ms: only the announced 250 µs of
        // it is B's choice, the rest is a late peer the timeouts must know.
        p.now += Duration::from_millis(2);
        p.b.ack.request_now();
        let ack = transmit_all(&mut p.b, p.now);
        assert_eq!(header(&ack[0]).ack_delay.get(), 2000);
        deliver(&mut p.a, p.now, &ack[0]);
        let expect = Duration::from_millis(2) - Config::default().ack_delay;
        assert_eq!(p.a.srtt(), expect);
    }
}
