//! Batched sends: frames written into one owned buffer, sent with one
//! `sendmmsg`.

use std::io;
use std::mem;

use bytes::Bytes;
use std::os::fd::{AsRawFd, BorrowedFd};

/// I/O vectors per frame: its start, its tail, the tail's trailer.
const IOV_PER_FRAME: usize = 3;

/// A batch of frames in one owned buffer, sent with one `sendmmsg`.
///
/// The I/O vectors and message headers are allocated once; `send` points
/// them at the pending frames just before the call, so they never hold a
/// pointer across a borrow of the buffer. A frame may end in a `tail` sent
/// from where it lies (scatter-gather: a second I/O vector), then in the
/// tail's trailer, written in the frame's buffer after its start (a third);
/// the batch holds a reference to the tail until the frame is sent.
pub(crate) struct FrameBatch {
    buf: Box<[u8]>,
    stride: usize,
    /// Three vectors per frame: its start in `buf`, its tail (if any), the
    /// tail's trailer in `buf` (if any).
    iov: Box<[libc::iovec]>,
    tails: Box<[Option<Bytes>]>,
    msgs: Box<[libc::mmsghdr]>,
    /// Frames written.
    count: usize,
    /// Frames already sent (a partial `sendmmsg` leaves the rest).
    sent: usize,
}

// SAFETY: the raw pointers in `iov` and `msgs` only ever point into this
// batch's own heap allocations and into the tails it holds (`Bytes`, which
// are Send), set in `commit_gather` and `send` and used during `send`.
unsafe impl Send for FrameBatch {}

impl FrameBatch {
    /// Room for `capacity` frames of up to `stride` bytes.
    pub fn new(capacity: usize, stride: usize) -> FrameBatch {
        let iov = (0..IOV_PER_FRAME * capacity)
            .map(|_| libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            })
            .collect();
        let msgs = (0..capacity)
            .map(|_| {
                // SAFETY: mmsghdr is plain old data; all-zero is valid (no
                // address, no control data, no I/O vector yet).
                let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        FrameBatch {
            buf: vec![0u8; capacity * stride].into_boxed_slice(),
            stride,
            iov,
            tails: (0..capacity).map(|_| None).collect(),
            msgs,
            count: 0,
            sent: 0,
        }
    }

    /// Frames written and not yet sent.
    pub fn pending(&self) -> usize {
        self.count - self.sent
    }

    /// Frames the batch holds.
    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Whether every buffer holds a frame not yet sent.
    pub fn is_full(&self) -> bool {
        self.count == self.capacity()
    }

    /// The next free frame buffer, if the batch has room.
    pub fn next(&mut self) -> Option<&mut [u8]> {
        if self.is_full() {
            return None;
        }
        let start = self.count * self.stride;
        Some(&mut self.buf[start..start + self.stride])
    }

    /// Keep the first `len` bytes of the buffer `next` returned as a frame,
    /// which goes on with `tail` (if any), sent from where it lies, then
    /// with the `trailer` bytes after those `len` in the buffer (only with
    /// a tail: a frame's tag that follows it).
    pub fn commit_gather(&mut self, len: usize, tail: Option<Bytes>, trailer: usize) {
        assert!(len + trailer <= self.stride && self.count < self.capacity());
        assert!(trailer == 0 || tail.is_some(), "a trailer follows a tail");
        let i = self.count;
        let iov = &mut self.iov[IOV_PER_FRAME * i..IOV_PER_FRAME * (i + 1)];
        iov[0].iov_len = len;
        // The trailer's address is set in `send`, as the start's.
        iov[2].iov_len = trailer;
        let parts = match tail {
            Some(t) if !t.is_empty() || trailer > 0 => {
                iov[1] = libc::iovec {
                    iov_base: t.as_ptr().cast_mut().cast(),
                    iov_len: t.len(),
                };
                self.tails[i] = Some(t);
                if trailer > 0 {
                    3
                } else {
                    2
                }
            }
            _ => 1,
        };
        self.msgs[i].msg_hdr.msg_iovlen = parts;
        self.count += 1;
    }

    /// Send the pending frames with one `sendmmsg`; returns how many went.
    pub fn send(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let n = self.pending();
        if n == 0 {
            return Ok(0);
        }
        // Point the vectors and headers at the pending frames.
        let base = self.buf.as_mut_ptr();
        for i in self.sent..self.count {
            let start = base.wrapping_add(i * self.stride);
            let iov = &mut self.iov[IOV_PER_FRAME * i..];
            iov[0].iov_base = start.cast();
            iov[2].iov_base = start.wrapping_add(iov[0].iov_len).cast();
        }
        let iov = self.iov.as_mut_ptr();
        for i in self.sent..self.count {
            self.msgs[i].msg_hdr.msg_iov = iov.wrapping_add(IOV_PER_FRAME * i);
        }
        let msgs = &mut self.msgs[self.sent..self.count];
        // SAFETY: `msgs` are valid message headers; each one's first iovec
        // points to `iov_len` bytes inside its frame's `stride` bytes of
        // `buf`, its second (when `msg_iovlen` is 2 or 3) to the bytes of the
        // tail held in `tails`, its third (when 3) to the trailer's bytes
        // right after the first's, within the same `stride` bytes
        // (`commit_gather` checked), all alive and not otherwise borrowed
        // during the call; the kernel only reads them and writes msg_len.
        let done = syscall!(sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT
        ))? as usize;
        for t in &mut self.tails[self.sent..self.sent + done] {
            *t = None;
        }
        self.sent += done;
        if self.sent == self.count {
            self.sent = 0;
            self.count = 0;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{FromRawFd, OwnedFd};

    /// A non-blocking pair of connected Unix datagram sockets: `sendmmsg`
    /// works on them as on a packet socket, without privileges.
    fn datagram_pair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a writable array of two ints.
        syscall!(socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr()
        ))
        .expect("socketpair");
        // SAFETY: both fds were just created and are owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    fn recv_one(fd: &OwnedFd) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` is writable for its length during the call.
        match syscall!(recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0)) {
            Ok(n) => {
                buf.truncate(n as usize);
                Some(buf)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("recv: {e}"),
        }
    }

    #[test]
    fn frame_batch_sends_every_frame_once_in_order() {
        use std::os::fd::AsFd;
        let (tx, rx) = datagram_pair();
        let mut batch = FrameBatch::new(8, 100);
        let (mut written, mut sent, mut partial) = (0u32, 0usize, 0);
        let mut received = Vec::new();
        // Write far more than the peer queues, so sends come back partial or
        // with EAGAIN and the rest must go out later, in order.
        while written < 2000 {
            while let Some(buf) = batch.next() {
                let len = 4 + (written % 50) as usize;
                buf[..4].copy_from_slice(&written.to_be_bytes());
                batch.commit_gather(len, None, 0);
                written += 1;
            }
            assert!(batch.is_full());
            let pending = batch.pending();
            let n = match batch.send(tx.as_fd()) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => panic!("sendmmsg: {e}"),
            };
            sent += n;
            if n < pending {
                // The peer's queue is full: drain it (only then).
                partial += 1;
                while let Some(f) = recv_one(&rx) {
                    received.push(f);
                }
            }
        }
        while batch.pending() > 0 {
            while let Some(f) = recv_one(&rx) {
                received.push(f);
            }
            sent += batch.send(tx.as_fd()).unwrap_or(0);
        }
        while let Some(f) = recv_one(&rx) {
            received.push(f);
        }
        assert!(
            partial > 0,
            "the peer queue never filled; test proves nothing"
        );
        assert_eq!(sent, written as usize);
        assert_eq!(received.len(), written as usize);
        for (i, f) in received.iter().enumerate() {
            assert_eq!(f.len(), 4 + i % 50);
            assert_eq!(u32::from_be_bytes(f[..4].try_into().unwrap()), i as u32);
        }
    }

    /// Frames with a tail arrive as head then tail (then the trailer, if
    /// any), frames without one as before; a tail is let go once its frame
    /// is sent.
    #[test]
    fn frame_batch_sends_tails_from_where_they_lie() {
        use std::os::fd::AsFd;
        let (tx, rx) = datagram_pair();
        let mut batch = FrameBatch::new(4, 16);
        let tail = Bytes::from((0..200u8).collect::<Vec<u8>>());
        let trailer = |i: u8| if i == 3 { 4 } else { 0 };
        for i in 0..4u8 {
            let buf = batch.next().expect("room");
            buf[..2].copy_from_slice(&[0xAA, i]);
            buf[2..6].copy_from_slice(&[0xE0, 0xE1, 0xE2, 0xE3]);
            let t = (i % 2 == 1).then(|| tail.slice(usize::from(i)..100 + usize::from(i)));
            batch.commit_gather(2, t, trailer(i));
        }
        assert!(!tail.is_unique(), "the batch holds slices of the tail");
        assert_eq!(batch.send(tx.as_fd()).unwrap(), 4);
        assert!(tail.is_unique(), "sent frames let their tails go");
        for i in 0..4u8 {
            let f = recv_one(&rx).expect("a frame");
            assert_eq!(f[..2], [0xAA, i]);
            if i % 2 == 1 {
                assert_eq!(&f[2..102], &tail[usize::from(i)..100 + usize::from(i)]);
                assert_eq!(&f[102..], &[0xE0, 0xE1, 0xE2, 0xE3][..trailer(i)]);
            } else {
                assert_eq!(f.len(), 2);
            }
        }
    }
}
