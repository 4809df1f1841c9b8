//! Messages on a byte stream: a 4-byte little-endian length, then the
//! message (`head ++ body`). Shared by both TCP transports; no I/O here.
//!
//! Send side: [`SendQueue`] keeps each queued message as a small owned header
//! (length prefix and `head`, plus a short body copied in) and the caller's
//! [`Bytes`] body, so the body is never copied; [`SendQueue::iovecs`] lists
//! the unsent bytes in order for one gather write and [`SendQueue::advance`]
//! consumes what the kernel took, partial writes included. Every buffer the
//! iovecs point at lives on the heap and stays put until the queue drops the
//! message, which is what lets io_uring hold the pointers while a send is in
//! flight.
//!
//! Receive side: [`RecvState`] reads into one per-connection buffer and cuts
//! whole messages out of it. A message above
//! [`TcpConfig::direct_recv_threshold`](super::TcpConfig::direct_recv_threshold)
//! that is not already complete gets its own `Vec` of the exact size, into
//! which the rest is received directly: large messages are copied once (the
//! part that shared the buffer) or not at all.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::Bytes;

/// Bytes of the length prefix.
pub(crate) const PREFIX_LEN: usize = 4;

/// Bodies up to this length are copied next to the header: one iovec
/// instead of two, and a copy that costs less than the entry.
const INLINE_BODY: usize = 256;

/// Most iovecs one gather write carries (the kernel takes up to 1024).
pub(crate) const MAX_IOVECS: usize = 64;

struct OutMsg {
    /// Length prefix, head, and the body when it is short.
    hdr: Vec<u8>,
    /// The caller's body (empty when inlined).
    body: Bytes,
}

impl OutMsg {
    fn len(&self) -> usize {
        self.hdr.len() + self.body.len()
    }
}

/// Messages queued on one connection, in order, with how much of the first
/// one the kernel has taken.
#[derive(Default)]
pub(crate) struct SendQueue {
    msgs: VecDeque<OutMsg>,
    /// Bytes of `msgs[0]` already written.
    offset: usize,
    /// Unsent bytes (prefixes included).
    bytes: usize,
}

impl std::fmt::Debug for SendQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendQueue")
            .field("messages", &self.msgs.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl SendQueue {
    /// Unsent bytes, prefixes included.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Append the message `head ++ body` (its length checked by the caller
    /// to fit the prefix).
    pub(crate) fn push(&mut self, head: &[u8], body: Bytes) {
        let len = head.len() + body.len();
        debug_assert!(len <= u32::MAX as usize);
        let inline = body.len() <= INLINE_BODY;
        let mut hdr =
            Vec::with_capacity(PREFIX_LEN + head.len() + if inline { body.len() } else { 0 });
        hdr.extend_from_slice(&(len as u32).to_le_bytes());
        hdr.extend_from_slice(head);
        let body = if inline {
            hdr.extend_from_slice(&body);
            Bytes::new()
        } else {
            body
        };
        let m = OutMsg { hdr, body };
        self.bytes += m.len();
        self.msgs.push_back(m);
    }

    /// Call `f` on each unsent piece in order, at most `max` of them.
    fn pieces<'a>(&'a self, max: usize, mut f: impl FnMut(&'a [u8])) {
        let mut skip = self.offset;
        let mut n = 0;
        for m in &self.msgs {
            for part in [&m.hdr[..], &m.body[..]] {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                f(&part[skip..]);
                skip = 0;
                n += 1;
                if n == max {
                    return;
                }
            }
        }
    }

    /// The unsent bytes as `IoSlice`s for a gather write, into `out` (at
    /// most its length, or [`MAX_IOVECS`]); returns how many.
    pub(crate) fn io_slices<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        self.pieces(out.len().min(MAX_IOVECS), |p| {
            out[n] = IoSlice::new(p);
            n += 1;
        });
        n
    }

    /// The unsent bytes as raw iovecs (at most [`MAX_IOVECS`]). They stay
    /// valid until `advance` or `clear` drops the messages they point into:
    /// pushing more messages does not move any queued byte.
    pub(crate) fn iovecs(&self, out: &mut Vec<libc::iovec>) {
        out.clear();
        self.pieces(MAX_IOVECS, |p| {
            out.push(libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
        });
    }

    /// The kernel took `n` more bytes: drop what was fully written.
    pub(crate) fn advance(&mut self, mut n: usize) {
        debug_assert!(n <= self.bytes);
        self.bytes -= n;
        while n > 0 {
            let first = self.msgs.front().expect("advance within the queue").len() - self.offset;
            if n < first {
                self.offset += n;
                return;
            }
            n -= first;
            self.offset = 0;
            self.msgs.pop_front();
        }
    }
}

/// A stream that broke the framing rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FramingError(pub String);

/// Where received bytes go and how whole messages come out.
pub(crate) struct RecvState {
    /// Per-connection buffer; `buf[start..end]` is received but not yet
    /// consumed.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// A large message being received into its own buffer, and how much of
    /// it has arrived.
    large: Option<(Vec<u8>, usize)>,
    max_message_len: usize,
    direct_threshold: usize,
}

impl std::fmt::Debug for RecvState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvState")
            .field("buffered", &(self.end - self.start))
            .field(
                "large",
                &self.large.as_ref().map(|(v, got)| (v.len(), *got)),
            )
            .finish()
    }
}

impl RecvState {
    /// A receive buffer of `buf_len` bytes. Messages longer than
    /// `direct_threshold` are received into their own buffer unless they
    /// arrived whole with others; longer than `max_message_len` is an error.
    pub(crate) fn new(buf_len: usize, direct_threshold: usize, max_message_len: usize) -> Self {
        // A message up to the threshold must fit in the buffer with its prefix.
        let buf_len = buf_len.max(direct_threshold + PREFIX_LEN).max(4096);
        RecvState {
            buf: vec![0; buf_len],
            start: 0,
            end: 0,
            large: None,
            max_message_len,
            direct_threshold,
        }
    }

    /// Where the next receive should write. Never empty. The region stays
    /// valid (and unmoved) until the next `commit`.
    pub(crate) fn spare(&mut self) -> &mut [u8] {
        match &mut self.large {
            Some((v, got)) => &mut v[*got..],
            None => &mut self.buf[self.end..],
        }
    }

    /// True when no bytes of a message are pending: the stream is between
    /// messages.
    pub(crate) fn at_boundary(&self) -> bool {
        self.large.is_none() && self.start == self.end
    }

    /// What is pending, for error messages.
    pub(crate) fn pending(&self) -> String {
        match &self.large {
            Some((v, got)) => format!("{got} of a {}-byte message", v.len()),
            None => format!("{} bytes of a message", self.end - self.start),
        }
    }

    /// `n` bytes arrived where `spare` pointed: append the whole messages
    /// that completed to `out`.
    pub(crate) fn commit(
        &mut self,
        n: usize,
        out: &mut impl FnMut(Vec<u8>),
    ) -> Result<(), FramingError> {
        if let Some((v, got)) = &mut self.large {
            *got += n;
            debug_assert!(*got <= v.len());
            if *got < v.len() {
                return Ok(());
            }
            let (v, _) = self.large.take().expect("large message present");
            out(v);
            return Ok(());
        }
        self.end += n;
        debug_assert!(self.end <= self.buf.len());
        loop {
            let avail = self.end - self.start;
            if avail < PREFIX_LEN {
                break;
            }
            let p = &self.buf[self.start..self.start + PREFIX_LEN];
            let len = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
            if len > self.max_message_len {
                return Err(FramingError(format!(
                    "the peer announced a message of {len} bytes, above the limit of {}",
                    self.max_message_len
                )));
            }
            let body = self.start + PREFIX_LEN;
            if avail - PREFIX_LEN >= len {
                out(self.buf[body..body + len].to_vec());
                self.start = body + len;
                continue;
            }
            if len > self.direct_threshold {
                // Receive the rest straight into the message's own buffer.
                let mut v = vec![0; len];
                let have = self.end - body;
                v[..have].copy_from_slice(&self.buf[body..self.end]);
                self.large = Some((v, have));
                self.start = 0;
                self.end = 0;
                return Ok(());
            }
            break;
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < self.buf.len() / 4 || !self.fits_in_place() {
            // Move the partial message (at most the threshold) to the front.
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        Ok(())
    }

    /// Can the partial message at `start` complete without moving?
    fn fits_in_place(&self) -> bool {
        let avail = self.end - self.start;
        if avail < PREFIX_LEN {
            return self.buf.len() - self.start >= PREFIX_LEN;
        }
        let p = &self.buf[self.start..self.start + PREFIX_LEN];
        let len = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
        self.buf.len() - self.start >= PREFIX_LEN + len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_all(msgs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
        let mut q = SendQueue::default();
        for (h, b) in msgs {
            q.push(h, Bytes::from(b.clone()));
        }
        let mut wire = Vec::new();
        while !q.is_empty() {
            let mut arr = [IoSlice::new(&[]); 4];
            let k = q.io_slices(&mut arr);
            let sl = &arr[..k];
            // Write at most 7 bytes at a time: partial writes everywhere.
            let mut n = 0;
            for s in sl {
                let take = s.len().min(7 - n);
                wire.extend_from_slice(&s[..take]);
                n += take;
                if n == 7 {
                    break;
                }
            }
            q.advance(n);
        }
        assert_eq!(q.bytes(), 0);
        wire
    }

    #[test]
    fn round_trip_with_partial_writes_and_reads() {
        let msgs: Vec<(Vec<u8>, Vec<u8>)> = [0usize, 1, 5, 255, 256, 257, 1000, 5000, 70_000, 3]
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let data: Vec<u8> = (0..n).map(|j| (i * 31 + j * 7) as u8).collect();
                let split = (i * 13) % (n + 1);
                (data[..split].to_vec(), data[split..].to_vec())
            })
            .collect();
        let wire = frame_all(&msgs);
        for chunk in [1usize, 3, 4096, 100_000] {
            let mut r = RecvState::new(4096, 2048, 1 << 20);
            let mut got = Vec::new();
            let mut pos = 0;
            while pos < wire.len() {
                let spare = r.spare();
                let n = spare.len().min(chunk).min(wire.len() - pos);
                spare[..n].copy_from_slice(&wire[pos..pos + n]);
                pos += n;
                r.commit(n, &mut |m| got.push(m)).unwrap();
            }
            assert!(r.at_boundary());
            let want: Vec<Vec<u8>> = msgs
                .iter()
                .map(|(h, b)| [&h[..], &b[..]].concat())
                .collect();
            assert_eq!(got, want, "chunk {chunk}");
        }
    }

    #[test]
    fn too_long_is_an_error() {
        let mut r = RecvState::new(4096, 2048, 100);
        let spare = r.spare();
        spare[..4].copy_from_slice(&101u32.to_le_bytes());
        assert!(r.commit(4, &mut |_| {}).is_err());
    }
}
