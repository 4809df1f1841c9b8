//! The control protocol between client and server, carried by the
//! endpoints under test themselves, separated from test traffic by tag.
//!
//! The client sends a [`Cmd`] (JSON text) with tag [`CTRL`]; the server
//! answers with tag [`READY`] (an empty body, or an error text) once it has
//! set up its side, then both run the test; the server serves its clients
//! one command at a time. Test data uses [`DATA`], acknowledgements [`ACK`].

use serde::{Deserialize, Serialize};

/// Test payloads.
pub const DATA: u32 = 1;
/// Acknowledgements of windows and streams.
pub const ACK: u32 = 2;
/// Commands, client to server.
pub const CTRL: u32 = 0x4354_524c;
/// The server's answer to a command.
pub const READY: u32 = CTRL + 1;
/// Longest command text.
pub const CTRL_MAX: usize = 4096;

/// What the server does next with the client that sent it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Cmd {
    /// Answer, nothing else (the client checks the server is there).
    Hello,
    /// Echo `reps` messages of `size` bytes.
    Latency {
        /// Bytes per message.
        size: usize,
        /// Round trips, warm-up included.
        reps: usize,
        /// Check every payload.
        verify: bool,
    },
    /// Receive `iters` windows of `window` messages, acknowledge each window.
    Stream {
        /// Bytes per message.
        size: usize,
        /// Windows.
        iters: usize,
        /// Messages per window.
        window: usize,
        /// Check every payload.
        verify: bool,
    },
    /// Per window, receive `window` messages while sending as many.
    Bibw {
        /// Bytes per message.
        size: usize,
        /// Windows.
        iters: usize,
        /// Messages per window and direction.
        window: usize,
        /// Check every payload.
        verify: bool,
    },
    /// Receive `count` messages as they come, then acknowledge once.
    Sink {
        /// Bytes per message.
        size: usize,
        /// Messages.
        count: usize,
    },
    /// Send `count` messages back to back, then wait for one acknowledgement.
    Source {
        /// Bytes per message.
        size: usize,
        /// Messages.
        count: usize,
    },
}

impl Cmd {
    /// The wire form.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("commands serialize")
    }

    /// Parse a received command.
    pub fn decode(b: &[u8]) -> Result<Cmd, String> {
        serde_json::from_slice(b).map_err(|e| format!("bad command: {e}"))
    }
}

/// The payload byte at `i` of message `seq` (verified runs).
#[inline]
pub fn pattern_byte(seq: u64, i: usize) -> u8 {
    (i as u64)
        .wrapping_mul(131)
        .wrapping_add(seq.wrapping_mul(7)) as u8
}

/// A verified payload: message `seq` of `size` bytes.
pub fn pattern(seq: u64, size: usize) -> Vec<u8> {
    (0..size).map(|i| pattern_byte(seq, i)).collect()
}

/// Check a verified payload; says where it differs.
pub fn check(seq: u64, data: &[u8], size: usize) -> Result<(), String> {
    if data.len() != size {
        return Err(format!(
            "message {seq}: {} bytes arrived, {size} expected",
            data.len()
        ));
    }
    match data
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != pattern_byte(seq, i))
    {
        None => Ok(()),
        Some((i, &b)) => Err(format!(
            "message {seq} of {size} bytes differs at byte {i}: {b:#04x} instead of {:#04x}",
            pattern_byte(seq, i)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip() {
        for c in [
            Cmd::Hello,
            Cmd::Latency {
                size: 8,
                reps: 10,
                verify: true,
            },
            Cmd::Sink { size: 1, count: 2 },
        ] {
            assert_eq!(Cmd::decode(&c.encode()).unwrap(), c);
        }
        assert!(Cmd::decode(b"{\"cmd\":\"nope\"}").is_err());
    }

    #[test]
    fn patterns_check() {
        let p = pattern(3, 100);
        assert!(check(3, &p, 100).is_ok());
        assert!(check(4, &p, 100).is_err());
        assert!(check(3, &p[..99], 100).is_err());
    }
}
