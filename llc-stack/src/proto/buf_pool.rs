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

/// Buffers smaller than this are not kept: the allocator serves them from
/// its own free lists cheaply.
pub const MIN_CAPACITY: usize = 64 << 10;
/// At most this many buffers are kept...
pub const MAX_BUFFERS: usize = 32;
/// ...holding at most this many bytes together.
pub const MAX_BYTES: usize = 64 << 20;

/// A bounded set of spare message buffers.
#[derive(Debug, Default)]
pub struct BufPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

impl BufPool {
    /// Keep `buf` for a later message, or drop it (too small to matter, or
    /// the pool is full).
    pub fn put(&mut self, mut buf: Vec<u8>) {
        let cap = buf.capacity();
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

    /// A copy of `data` in a kept buffer if one fits, else in a new one.
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        match self.take(data.len()) {
            Some(mut buf) => {
                buf.extend_from_slice(data);
                buf
            }
            None => data.to_vec(),
        }
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
    fn keeps_only_what_is_worth_keeping() {
        let mut pool = BufPool::default();
        pool.put(vec![0u8; MIN_CAPACITY - 1]);
        assert!(pool.is_empty(), "small buffers are not kept");
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
