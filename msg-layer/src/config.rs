//! Tunables of the message layer, with the reasoning behind each default.

use std::time::Duration;

use crate::wire::HEADER_LEN;

/// Eager credit every sender may use towards a peer before that peer's
/// `Hello` states its window: part of the protocol, so a sender may start
/// at once and a receiver knows the worst case before it has spoken.
pub const INITIAL_CREDIT: u32 = 64 << 10;

/// Settings of one endpoint.
#[derive(Clone, Debug)]
pub struct Config {
    /// Messages up to this many bytes go eagerly (payload with the
    /// envelope); longer ones by rendezvous (announce, wait for the matching
    /// receive, then move the data straight to its buffer). The default is
    /// where the sweep in docs/BENCHMARKS.md found the two protocols' costs
    /// cross.
    pub eager_limit: usize,
    /// Eager credit in bytes this endpoint grants each peer: the most of
    /// that peer's unexpected messages (payload plus header, and a header per
    /// rendezvous announcement) it ever buffers. Memory for unexpected
    /// messages is bounded by this times the number of peers; a sender that
    /// has used its credit waits for the receiver to match, never drops.
    pub eager_window: u32,
    /// Rendezvous data (and a put's) moves in transport messages of about
    /// this size, so the receiver places one piece while the next is on the
    /// wire. Over a transport that cuts messages into frames, a piece is
    /// made whole frames with its header ([`fit_to_frames`]).
    pub rndv_chunk: usize,
    /// Busy-poll this long after the last activity before sleeping in
    /// poll(2) (waiters and the progress thread alike).
    pub spin: Duration,
    /// Longest single sleep, so a waiter re-checks its deadline.
    pub max_sleep: Duration,
    /// Run a progress thread, so that rendezvous transfers, RMA and active
    /// messages advance while the application computes.
    pub progress_thread: bool,
    /// Hold a small message (up to [`crate::wire::BUNDLE_ITEM_MAX`] bytes
    /// with its header) to a peer that a message already left for since the
    /// last round of progress, so that a burst of them (a window of
    /// `isend`s) leaves in one `Bundle` at the next round: one frame for
    /// many messages, on both ends. The first message of a burst, and the
    /// first to each peer, leave at once. Off by default: a held message
    /// waits for the caller's next call that makes progress (`wait`,
    /// `test`, `progress`, a post that leaves at once) or for
    /// [`crate::Endpoint::send_held`], so a caller that turns it on calls
    /// one of those, or has a timer that does (the MPI shim does both).
    pub coalesce: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            eager_limit: 16 << 10,
            eager_window: 4 << 20,
            rndv_chunk: 256 << 10,
            spin: Duration::from_micros(200),
            max_sleep: Duration::from_millis(50),
            progress_thread: false,
            coalesce: false,
        }
    }
}

/// The rendezvous piece nearest below `chunk` that fills whole frames of
/// `frame_payload` bytes with its header (at least one frame's worth):
/// 256 KiB pieces at MTU 65000 were four full frames and a fifth of 2.4 KB,
/// a short frame per piece paying a whole frame's path. `frame_payload` 0
/// (a byte stream) leaves `chunk` as it is.
pub fn fit_to_frames(chunk: usize, frame_payload: usize) -> usize {
    if frame_payload <= HEADER_LEN {
        return chunk;
    }
    let frames = ((chunk + HEADER_LEN) / frame_payload).max(1);
    frames * frame_payload - HEADER_LEN
}

/// A setting that cannot work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid message-layer setting: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Check that the settings can work together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.eager_limit + HEADER_LEN > INITIAL_CREDIT as usize {
            return Err(ConfigError(format!(
                "eager_limit {} exceeds the initial credit every peer grants ({} bytes with the header)",
                self.eager_limit, INITIAL_CREDIT
            )));
        }
        if self.eager_window < INITIAL_CREDIT {
            return Err(ConfigError(format!(
                "eager_window {} is below the protocol's initial credit {INITIAL_CREDIT}",
                self.eager_window
            )));
        }
        if self.rndv_chunk == 0 {
            return Err(ConfigError("rndv_chunk must be at least 1 byte".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_fill_whole_frames() {
        // MTU 65000 (64,941 bytes a frame): four whole frames, not five.
        let chunk = fit_to_frames(256 << 10, 64_941);
        assert_eq!(chunk + HEADER_LEN, 4 * 64_941);
        // MTU 9000 and 1500 alike, never above the asked size.
        for fp in [8_941, 1_441, 1_000] {
            let chunk = fit_to_frames(256 << 10, fp);
            assert_eq!((chunk + HEADER_LEN) % fp, 0, "{fp}");
            assert!(
                chunk <= 256 << 10 && chunk + HEADER_LEN + fp > 256 << 10,
                "{fp}"
            );
        }
        // A frame larger than the piece: one frame's worth.
        assert_eq!(fit_to_frames(1_000, 8_941), 8_941 - HEADER_LEN);
        // A byte stream, or a frame too small to matter: unchanged.
        assert_eq!(fit_to_frames(256 << 10, 0), 256 << 10);
        assert_eq!(fit_to_frames(256 << 10, HEADER_LEN), 256 << 10);
    }
}
