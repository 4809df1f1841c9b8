//! The link floor: 802.2 TEST round trips between two devices with no
//! protocol above them, the yardstick a transport's latency is measured
//! against ("how far above the link itself"). One side answers TEST
//! commands ([`answer_tests`]), the other times round trips
//! ([`round_trips`]); each runs on its own thread, in its host.
//!
//! With work given ([`answer_tests_with`], [`round_trips_with`]; e.g. a
//! [`LineToucher`]) each side also does it once per message it sends: what
//! the floor then gains, beside what the same work costs in a warm loop,
//! is what the platform charges that work between its frames.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use super::{Device, RxToken, TxToken};
use crate::rng::Rng;
use crate::time::Instant;
use crate::wire::llc::Command;
use crate::wire::{self, Addresses, Body};

/// Longest information field the floor sends and echoes: frames up to
/// 273 bytes, enough to match a small message's frame.
pub const MAX_INFO: usize = 256;

/// The information field of a TEST frame of the wanted kind (command or
/// response) for `sap`, if `frame` is one, copied into `out` (its first
/// [`MAX_INFO`] bytes); returns its length there.
fn test_info(
    frame: &[u8],
    sap: u8,
    want_response: bool,
    out: &mut [u8; MAX_INFO],
) -> Option<usize> {
    match wire::parse(frame, Some(sap)) {
        Ok(wire::Frame {
            body: Body::Test { response, info, .. },
            ..
        }) if response == want_response => {
            let n = info.len().min(MAX_INFO);
            out[..n].copy_from_slice(&info[..n]);
            Some(n)
        }
        _ => None,
    }
}

fn send<D: Device>(dev: &mut D, to: &Addresses, response: bool, info: &[u8]) -> io::Result<()> {
    let now = Instant::now();
    let tx = dev
        .transmit(now)
        .ok_or_else(|| io::Error::new(io::ErrorKind::WouldBlock, "no transmit slot"))?;
    tx.consume(|buf| {
        wire::emit_llc_control(buf, to, response, Command::Test { pf: false }, info)
            .expect("a TEST frame fits any MTU")
    });
    dev.flush(now)
}

/// Work standing in for a protocol's state per message: `lines` cache
/// lines, scattered over a buffer four times their size in a shuffled
/// order (as connection, queue and request state is scattered, and out of
/// a prefetcher's reach), each read and written once per [`Self::touch`].
/// Each line names the next, so the reads depend on each other as a
/// protocol's do (a connection found from the frame, its queue from the
/// connection...): the worst case, where no two misses overlap.
#[derive(Debug)]
pub struct LineToucher {
    /// Per line: the index of the next line's first word, then a counter.
    words: Vec<u64>,
    /// Index in `words` of the first line's first word.
    first: usize,
    lines: usize,
}

/// `u64` words per 64-byte cache line.
const WORDS_PER_LINE: usize = 8;

impl LineToucher {
    /// `lines` lines to touch per message (0: none).
    pub fn new(lines: usize) -> Self {
        let span = lines * 4;
        let mut rng = Rng::new(0x11e5 + lines as u64);
        // A shuffle of the span's lines; the first `lines` are touched.
        let mut pick: Vec<usize> = (0..span).collect();
        for i in (1..pick.len()).rev() {
            pick.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
        }
        pick.truncate(lines);
        // One extra line: the buffer need not start on a line boundary.
        let mut words = vec![0; (span + 1) * WORDS_PER_LINE];
        for (i, &l) in pick.iter().enumerate() {
            let next = pick[(i + 1) % lines];
            words[l * WORDS_PER_LINE] = (next * WORDS_PER_LINE) as u64;
        }
        LineToucher {
            words,
            first: pick.first().map_or(0, |&l| l * WORDS_PER_LINE),
            lines,
        }
    }

    /// Lines touched per call.
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// Read and write each line once, following the chain. Kept out of
    /// line so that the compiler cannot fold it into the loop around it.
    #[inline(never)]
    pub fn touch(&mut self) {
        let mut i = self.first;
        for _ in 0..self.lines {
            let next = self.words[i] as usize;
            self.words[i + 1] = self.words[i + 1].wrapping_add(1);
            i = next;
        }
    }
}

/// Answer every TEST command for `to.ssap` arriving on `dev` with a
/// response to `to` (busy-polling) until `stop` is set.
pub fn answer_tests<D: Device>(dev: &mut D, to: Addresses, stop: &AtomicBool) -> io::Result<()> {
    answer_tests_with(dev, to, stop, &mut || {})
}

/// [`answer_tests`], doing `work` between each command and its response.
pub fn answer_tests_with<D: Device>(
    dev: &mut D,
    to: Addresses,
    stop: &AtomicBool,
    work: &mut impl FnMut(),
) -> io::Result<()> {
    let mut info = [0; MAX_INFO];
    while !stop.load(Ordering::Relaxed) {
        let Some(rx) = dev.receive(Instant::now()) else {
            continue;
        };
        if let Some(n) = rx.consume(|f| test_info(f, to.ssap, false, &mut info)) {
            work();
            send(dev, &to, true, &info[..n])?;
        }
    }
    Ok(())
}

/// `warmup` then `rounds` TEST round trips from `dev` to `to`, one at a
/// time (busy-polling); returns the measured round trips' times. Fails when
/// a response does not come within `stall`.
pub fn round_trips<D: Device>(
    dev: &mut D,
    to: Addresses,
    warmup: usize,
    rounds: usize,
    stall: Duration,
) -> io::Result<Vec<Duration>> {
    round_trips_with(dev, to, warmup, rounds, stall, 8, &mut || {})
}

/// [`round_trips`] with commands carrying `info_len` bytes of information
/// (8 to [`MAX_INFO`]; the first 8 number the round trip), doing `work`
/// before each command is sent: with the responder doing the same, each
/// one-way trip carries the work once.
pub fn round_trips_with<D: Device>(
    dev: &mut D,
    to: Addresses,
    warmup: usize,
    rounds: usize,
    stall: Duration,
    info_len: usize,
    work: &mut impl FnMut(),
) -> io::Result<Vec<Duration>> {
    let len = info_len.clamp(8, MAX_INFO);
    let mut rtts = Vec::with_capacity(rounds);
    let (mut info, mut back) = ([0; MAX_INFO], [0; MAX_INFO]);
    for seq in 0..(warmup + rounds) as u64 {
        info[..8].copy_from_slice(&seq.to_be_bytes());
        let start = StdInstant::now();
        work();
        send(dev, &to, false, &info[..len])?;
        loop {
            if let Some(rx) = dev.receive(Instant::now()) {
                let got = rx.consume(|f| test_info(f, to.dsap, true, &mut back));
                if got == Some(len) && back[..8] == info[..8] {
                    break;
                }
            }
            if start.elapsed() > stall {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no TEST response from {} within {stall:?}", to.dst),
                ));
            }
        }
        if seq >= warmup as u64 {
            rtts.push(start.elapsed());
        }
    }
    Ok(rtts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{Sim, SimConfig};
    use crate::wire::MacAddr;
    use std::sync::Arc;

    #[test]
    fn round_trips_are_answered_over_the_simulated_link() {
        let sim = Sim::new(SimConfig {
            latency: Duration::from_micros(20),
            ..Default::default()
        });
        let (mut a, mut b) = (sim.port(), sim.port());
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let back = Addresses {
            dst: ma,
            src: mb,
            dsap: 0x7c,
            ssap: 0x7c,
        };
        let responder = std::thread::spawn(move || answer_tests(&mut b, back, &s2));
        let to = Addresses {
            dst: mb,
            src: ma,
            dsap: 0x7c,
            ssap: 0x7c,
        };
        let rtts = round_trips(&mut a, to, 5, 50, Duration::from_secs(10)).unwrap();
        // Longer commands are echoed whole, with work done per message.
        let mut worked = 0;
        let long = round_trips_with(&mut a, to, 0, 10, Duration::from_secs(10), 112, &mut || {
            worked += 1
        })
        .unwrap();
        stop.store(true, Ordering::Relaxed);
        responder.join().unwrap().unwrap();
        assert_eq!(rtts.len(), 50);
        assert_eq!((long.len(), worked), (10, 10));
        // Two crossings of the simulated link's 20 µs each.
        assert!(
            rtts.iter().all(|t| *t >= Duration::from_micros(40)),
            "{rtts:?}"
        );
    }

    #[test]
    fn a_silent_peer_fails_with_a_timeout() {
        let sim = Sim::new(SimConfig::default());
        let (mut a, _b) = (sim.port(), sim.port());
        let to = Addresses {
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dsap: 0x7c,
            ssap: 0x7c,
        };
        let e = round_trips(&mut a, to, 0, 1, Duration::from_millis(20)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    #[test]
    fn a_line_toucher_writes_each_of_its_distinct_lines_once_per_touch() {
        let mut w = LineToucher::new(100);
        assert_eq!(w.lines(), 100);
        for _ in 0..3 {
            w.touch();
        }
        let counters: Vec<usize> = (0..w.words.len())
            .filter(|&i| i % WORDS_PER_LINE == 1 && w.words[i] != 0)
            .collect();
        assert_eq!(counters.len(), 100, "a counter in each of 100 lines");
        assert!(counters.iter().all(|&i| w.words[i] == 3));
        let mut none = LineToucher::new(0);
        none.touch();
        assert_eq!(none.lines(), 0);
    }
}
