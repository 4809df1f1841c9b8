//! The link floor: 802.2 TEST round trips between two devices with no
//! protocol above them, the yardstick a transport's latency is measured
//! against ("how far above the link itself"). One side answers TEST
//! commands ([`answer_tests`]), the other times round trips
//! ([`round_trips`]); each runs on its own thread, in its host.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant as StdInstant};

use super::{Device, RxToken, TxToken};
use crate::time::Instant;
use crate::wire::llc::Command;
use crate::wire::{self, Addresses, Body};

/// The 8-byte information field of a TEST frame of the wanted kind
/// (command or response) for `sap`, if `frame` is one.
fn test_info(frame: &[u8], sap: u8, want_response: bool) -> Option<[u8; 8]> {
    match wire::parse(frame, Some(sap)) {
        Ok(wire::Frame {
            body: Body::Test { response, info, .. },
            ..
        }) if response == want_response => info.try_into().ok(),
        _ => None,
    }
}

fn send<D: Device>(dev: &mut D, to: &Addresses, response: bool, info: &[u8; 8]) -> io::Result<()> {
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

/// Answer every TEST command for `to.ssap` arriving on `dev` with a
/// response to `to` (busy-polling) until `stop` is set.
pub fn answer_tests<D: Device>(dev: &mut D, to: Addresses, stop: &AtomicBool) -> io::Result<()> {
    while !stop.load(Ordering::Relaxed) {
        let Some(rx) = dev.receive(Instant::now()) else {
            continue;
        };
        if let Some(info) = rx.consume(|f| test_info(f, to.ssap, false)) {
            send(dev, &to, true, &info)?;
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
    let mut rtts = Vec::with_capacity(rounds);
    for seq in 0..(warmup + rounds) as u64 {
        let info = seq.to_be_bytes();
        let start = StdInstant::now();
        send(dev, &to, false, &info)?;
        loop {
            if let Some(rx) = dev.receive(Instant::now()) {
                if rx.consume(|f| test_info(f, to.dsap, true)) == Some(info) {
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
        stop.store(true, Ordering::Relaxed);
        responder.join().unwrap().unwrap();
        assert_eq!(rtts.len(), 50);
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
}
