//! Message buffers handed back for reuse.
//!
//! A multi-fragment message is reassembled into a buffer of its own length,
//! which the layer above receives in [`Event::Message`](super::Event). For
//! large messages a fresh allocation is expensive: the allocator maps new
//! pages, the kernel faults and clears each of them, and freeing unmaps them
//! again (a quarter of the receiving core's time when streaming 1 MiB
//! messages over 65000-byte frames). A consumer that is done with a
//! delivered buffer gives it back through
//! [`Endpoint::recycle`](super::Endpoint::recycle), and the next large
//! message is reassembled into it.

/// Buffers at least this large are kept for large messages (at most
/// [`MAX_BUFFERS`] and [`MAX_BYTES`]); smaller ones join the small list.
pub const MIN_CAPACITY: usize = 64 << 10;
/// At most this many buffers are kept...
pub const MAX_BUFFERS: usize = 32;
/// ...holding at most this many bytes together.
pub const MAX_BYTES: usize = 64 << 20;

/// Small messages are copied into buffers of at least this capacity, and
/// buffers of capacity `SMALL_CAPACITY..MIN_CAPACITY` given back are kept
/// (at most [`MAX_SMALL`]): a small message then costs no allocation.
pub const SMALL_CAPACITY: usize = 512;
/// At most this many small buffers are kept.
pub const MAX_SMALL: usize = 64;

/// A bounded set of spare message buffers.
#[derive(Debug, Default)]
pub struct BufPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
    small: Vec<Vec<u8>>,
}

impl BufPool {
    /// Keep `buf` for a later message, or drop it (too small to matter, or
    /// the pool is full).
    #[inline]
    pub fn put(&mut self, mut buf: Vec<u8>) {
        let cap = buf.capacity();
        if (SMALL_CAPACITY..MIN_CAPACITY).contains(&cap) {
            if self.small.len() < MAX_SMALL {
                buf.clear();
                self.small.push(buf);
            }
            return;
        }
        if cap < MIN_CAPACITY || self.bufs.len() >= MAX_BUFFERS || self.bytes + cap > MAX_BYTES {
            return;
        }
        buf.clear();
        self.bytes += cap;
        self.bufs.push(buf);
    }

    /// A buffer of `len` zero bytes: a kept one that fits, else a new one.
    pub fn zeroed(&mut self, len: usize) -> Vec<u8> {
        match self.take(len) {
            Some(mut buf) => {
                buf.resize(len, 0);
                buf
            }
            None => vec![0u8; len],
        }
    }

    /// A copy of `data` in a kept buffer if one fits, else in a new one
    /// (of at least [`SMALL_CAPACITY`], so that it can be kept later).
    /// Inlined: every message delivered whole is copied here.
    #[inline(always)]
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        let mut buf = if data.len() <= SMALL_CAPACITY {
            self.small
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(SMALL_CAPACITY))
        } else {
            match self.take(data.len()) {
                Some(buf) => buf,
                None => return data.to_vec(),
            }
        };
        buf.extend_from_slice(data);
        buf
    }

    /// An empty kept buffer with room for `len` bytes, at most four times
    /// that (so small messages do not hold large buffers).
    fn take(&mut self, len: usize) -> Option<Vec<u8>> {
        if len < MIN_CAPACITY {
            return None;
        }
        let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() / 4 <= len;
        let buf = self.bufs.swap_remove(self.bufs.iter().position(fits)?);
        self.bytes -= buf.capacity();
        Some(buf)
    }

    /// Buffers kept.
    pub fn len(&self) -> usize {
        self.bufs.len()
    }

    /// True when no buffer is kept.
    pub fn is_empty(&self) -> bool {
        self.bufs.is_empty()
    }

    /// Bytes of capacity kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_a_buffer_that_fits_and_zeroes_it() {
        let mut pool = BufPool::default();
        let mut buf = pool.zeroed(1 << 20);
        assert!(pool.is_empty());
        buf.fill(0xAB);
        let ptr = buf.as_ptr();
        pool.put(buf);
        assert_eq!((pool.len(), pool.bytes()), (1, 1 << 20));
        let again = pool.zeroed(900 << 10);
        assert_eq!(again.as_ptr(), ptr, "the kept buffer is reused");
        assert_eq!(again.len(), 900 << 10);
        assert!(again.iter().all(|&b| b == 0), "reused buffers start zeroed");
        assert!(pool.is_empty());
    }

    #[test]
    fn copies_into_a_kept_buffer() {
        let mut pool = BufPool::default();
        pool.put(vec![7u8; 128 << 10]);
        let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let copy = pool.copy_of(&data);
        assert_eq!(copy, data);
        assert!(pool.is_empty());
    }

    #[test]
    fn small_messages_reuse_small_buffers() {
        let mut pool = BufPool::default();
        let first = pool.copy_of(b"eight by");
        assert_eq!(first, b"eight by");
        let ptr = first.as_ptr();
        pool.put(first);
        let again = pool.copy_of(&[3u8; 100]);
        assert_eq!(again.as_ptr(), ptr, "the small buffer is reused");
        assert_eq!(again, [3u8; 100]);
        pool.put(vec![0u8; 16]);
        for _ in 0..2 * MAX_SMALL {
            pool.put(Vec::with_capacity(SMALL_CAPACITY));
        }
        assert_eq!(pool.small.len(), MAX_SMALL, "bounded, tiny ones dropped");
        assert!(pool.is_empty(), "small buffers do not count as large ones");
    }

    #[test]
    fn keeps_only_what_is_worth_keeping() {
        let mut pool = BufPool::default();
        pool.put(vec![0u8; 100]);
        assert!(
            pool.is_empty() && pool.small.is_empty(),
            "tiny buffers are not kept"
        );
        pool.put(vec![0u8; 1 << 20]);
        // Too large for a small message: a fresh buffer instead.
        assert_eq!(pool.zeroed(MIN_CAPACITY).capacity(), MIN_CAPACITY);
        assert_eq!(pool.len(), 1);
        for _ in 0..2 * MAX_BUFFERS {
            pool.put(vec![0u8; 4 << 20]);
        }
        assert!(pool.len() <= MAX_BUFFERS && pool.bytes() <= MAX_BYTES);
    }
}
