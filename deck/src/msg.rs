//! DECK messages: a buffer of fixed size with a data length and a cursor,
//! filled by typed packing and read back by typed unpacking, in the order
//! packed (the reader must know it, as in the seed).
//!
//! Data is packed in the host's byte order, as the seed's DECK did: a DECK
//! job runs on one kind of machine (as MPI jobs without data conversion do).
//! A message packed inside another (`DECK_MSG`) is its data length (8
//! bytes) followed by its data, so messages nest to any depth.

use crate::error::DeckError;
use crate::runtime::{RecvTarget, Taken};

/// The seed's data types (`DECK_CHAR`... in C).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum DataType {
    /// `char`.
    Char = 1,
    /// `short`.
    Short = 2,
    /// `int`.
    Int = 3,
    /// `long`.
    Long = 4,
    /// `float`.
    Float = 5,
    /// `double`.
    Double = 6,
    /// Raw bytes.
    Byte = 7,
    /// A DECK message packed inside another.
    Msg = 8,
}

impl DataType {
    /// The type of a C code, if it names one.
    pub fn from_code(code: i32) -> Option<DataType> {
        use DataType::*;
        Some(match code {
            1 => Char,
            2 => Short,
            3 => Int,
            4 => Long,
            5 => Float,
            6 => Double,
            7 => Byte,
            8 => Msg,
            _ => return None,
        })
    }

    /// Bytes per element (`None` for [`DataType::Msg`], whose elements
    /// carry their own length).
    pub fn elem_size(self) -> Option<usize> {
        use std::os::raw::{c_char, c_double, c_float, c_int, c_long, c_short};
        use DataType::*;
        Some(match self {
            Char => size_of::<c_char>(),
            Short => size_of::<c_short>(),
            Int => size_of::<c_int>(),
            Long => size_of::<c_long>(),
            Float => size_of::<c_float>(),
            Double => size_of::<c_double>(),
            Byte => 1,
            Msg => return None,
        })
    }
}

/// Bytes before a nested message's data: its length.
pub const NESTED_HEADER: usize = 8;

/// The packing rules on a buffer, its data length and its cursor (shared by
/// the Rust [`Msg`] and C's `deck_msg_t`). The cursor is where the next pack
/// writes and the next unpack reads.
pub(crate) struct Cursor<'a> {
    pub buf: &'a mut [u8],
    pub datalen: &'a mut usize,
    pub cursor: &'a mut usize,
}

impl Cursor<'_> {
    /// Append `bytes` at the cursor (the seed's pack: the data length grows
    /// by what is written).
    pub fn pack(&mut self, bytes: &[u8]) -> Result<(), DeckError> {
        let at = *self.cursor;
        let free = self.buf.len().saturating_sub(at);
        if bytes.len() > free {
            return Err(DeckError::MsgFull {
                needed: bytes.len(),
                free,
                size: self.buf.len(),
            });
        }
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        *self.cursor = at + bytes.len();
        *self.datalen = (*self.datalen).max(*self.cursor);
        Ok(())
    }

    /// Pack a nested message whose data is `data`.
    pub fn pack_nested(&mut self, data: &[u8]) -> Result<(), DeckError> {
        self.check_room(NESTED_HEADER + data.len())?;
        self.pack(&(data.len() as u64).to_ne_bytes())?;
        self.pack(data)
    }

    fn check_room(&self, n: usize) -> Result<(), DeckError> {
        let free = self.buf.len().saturating_sub(*self.cursor);
        if n > free {
            return Err(DeckError::MsgFull {
                needed: n,
                free,
                size: self.buf.len(),
            });
        }
        Ok(())
    }

    /// The next `n` bytes of data, advancing the cursor.
    pub fn unpack(&mut self, n: usize) -> Result<&[u8], DeckError> {
        let at = *self.cursor;
        let left = self.datalen.saturating_sub(at);
        if n > left {
            return Err(DeckError::MsgShort { needed: n, left });
        }
        *self.cursor = at + n;
        Ok(&self.buf[at..at + n])
    }

    /// The data of the nested message at the cursor, advancing past it.
    /// The cursor does not move when it fails.
    pub fn unpack_nested(&mut self) -> Result<&[u8], DeckError> {
        let start = *self.cursor;
        let len = self.unpack(NESTED_HEADER)?;
        let len = u64::from_ne_bytes(len.try_into().expect("8 bytes"));
        let left = self.datalen.saturating_sub(*self.cursor);
        match usize::try_from(len) {
            Ok(n) if n <= left => self.unpack(n),
            _ => {
                *self.cursor = start;
                Err(DeckError::MsgShort {
                    needed: usize::try_from(len).unwrap_or(usize::MAX),
                    left,
                })
            }
        }
    }

    /// Length of the nested message at the cursor, without moving.
    pub fn peek_nested_len(&self) -> Result<usize, DeckError> {
        let at = *self.cursor;
        let left = self.datalen.saturating_sub(at);
        if left < NESTED_HEADER {
            return Err(DeckError::MsgShort {
                needed: NESTED_HEADER,
                left,
            });
        }
        let len = u64::from_ne_bytes(self.buf[at..at + 8].try_into().expect("8 bytes"));
        Ok(usize::try_from(len).unwrap_or(usize::MAX))
    }
}

/// Numbers that pack as their bytes in the host's order.
pub trait Packable: zerocopy::IntoBytes + zerocopy::FromBytes + zerocopy::Immutable + Copy {}
impl Packable for u8 {}
impl Packable for i8 {}
impl Packable for u16 {}
impl Packable for i16 {}
impl Packable for u32 {}
impl Packable for i32 {}
impl Packable for u64 {}
impl Packable for i64 {}
impl Packable for f32 {}
impl Packable for f64 {}

/// A DECK message (Rust API): `size` bytes of room, `datalen` of them data.
#[derive(Clone, Debug)]
pub struct Msg {
    buf: Box<[u8]>,
    datalen: usize,
    cursor: usize,
    needed: usize,
}

impl Msg {
    /// An empty message with room for `size` bytes.
    pub fn new(size: usize) -> Msg {
        Msg {
            buf: vec![0; size].into_boxed_slice(),
            datalen: 0,
            cursor: 0,
            needed: 0,
        }
    }

    /// Its room in bytes.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// Bytes of data.
    pub fn datalen(&self) -> usize {
        self.datalen
    }

    /// The data (what a post sends).
    pub fn data(&self) -> &[u8] {
        &self.buf[..self.datalen]
    }

    /// Where the cursor is.
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// After a retrieve failed with [`DeckError::MsgTooBig`]: the size
    /// the waiting message needs (0 otherwise).
    pub fn needed(&self) -> usize {
        self.needed
    }

    fn cur(&mut self) -> Cursor<'_> {
        Cursor {
            buf: &mut self.buf,
            datalen: &mut self.datalen,
            cursor: &mut self.cursor,
        }
    }

    /// Pack numbers at the cursor.
    pub fn pack<T: Packable>(&mut self, data: &[T]) -> Result<(), DeckError> {
        self.cur().pack(data.as_bytes())
    }

    /// Pack raw bytes at the cursor.
    pub fn pack_bytes(&mut self, data: &[u8]) -> Result<(), DeckError> {
        self.cur().pack(data)
    }

    /// Pack `inner` (its data) at the cursor: a nested message.
    pub fn pack_msg(&mut self, inner: &Msg) -> Result<(), DeckError> {
        self.cur().pack_nested(inner.data())
    }

    /// Unpack numbers at the cursor into `out`.
    pub fn unpack<T: Packable>(&mut self, out: &mut [T]) -> Result<(), DeckError> {
        let n = std::mem::size_of_val(out);
        let mut cur = self.cur();
        let bytes = cur.unpack(n)?;
        out.as_mut_bytes().copy_from_slice(bytes);
        Ok(())
    }

    /// Unpack `out.len()` raw bytes at the cursor.
    pub fn unpack_bytes(&mut self, out: &mut [u8]) -> Result<(), DeckError> {
        let mut cur = self.cur();
        let bytes = cur.unpack(out.len())?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    /// Unpack the nested message at the cursor into `inner` (replacing its
    /// data; its cursor goes to the start). Fails, moving nothing, when
    /// `inner` is too small.
    pub fn unpack_msg(&mut self, inner: &mut Msg) -> Result<(), DeckError> {
        let len = self.cur().peek_nested_len()?;
        if len > inner.size() {
            return Err(DeckError::MsgTooBig {
                needed: len,
                size: inner.size(),
            });
        }
        let mut cur = self.cur();
        let data = cur.unpack_nested()?;
        inner.buf[..len].copy_from_slice(data);
        inner.datalen = len;
        inner.cursor = 0;
        Ok(())
    }

    /// Empty it for reuse (the seed's `deck_msg_clear`).
    pub fn clear(&mut self) {
        self.datalen = 0;
        self.cursor = 0;
        self.needed = 0;
    }

    /// Cursor back to the start, to read it again (`deck_msg_reset`).
    pub fn reset(&mut self) {
        self.cursor = 0;
    }

    /// A message of `datalen` bytes now fills it: ready to unpack.
    pub(crate) fn set_received(&mut self, datalen: usize) {
        self.datalen = datalen;
        self.cursor = 0;
        self.needed = 0;
    }
}

use zerocopy::IntoBytes;

impl RecvTarget for Msg {
    fn size(&self) -> usize {
        self.buf.len()
    }

    fn buffer(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    fn received(&mut self, len: usize) {
        self.set_received(len);
    }

    fn set_needed(&mut self, needed: usize) {
        self.needed = needed;
    }

    fn take_buffer(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf).into_vec()
    }

    fn restore_buffer(&mut self, buf: Vec<u8>, from: Taken) {
        let (buf, len) = refill(buf, from);
        self.buf = buf;
        self.set_received(len);
    }
}

/// Make a buffer a receive gave back (`buf`, cut to the message's length)
/// whole again: `size` bytes, the message at the start. Returns it and the
/// message's length.
pub(crate) fn refill(mut buf: Vec<u8>, from: Taken) -> (Box<[u8]>, usize) {
    let len = buf.len();
    if buf.as_ptr() == from.ptr && buf.capacity() == from.size && len <= from.size {
        // SAFETY: the message layer gives a receive its own buffer back
        // (cut to the message's length, never reallocated), so this is the
        // allocation `take_buffer` made from a boxed slice of `size`
        // initialized bytes; cutting a Vec<u8> short leaves its bytes
        // initialized, and every byte value is a valid u8.
        unsafe { buf.set_len(from.size) };
    } else {
        // Not ours (or lost): a fresh buffer of the right size.
        buf.resize(from.size.max(len), 0);
    }
    (buf.into_boxed_slice(), len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_and_unpack_round_trip_in_order() {
        let mut m = Msg::new(64);
        m.pack(b"L").unwrap();
        m.pack(&[42i64]).unwrap();
        m.pack(&[1.5f32, 2.5]).unwrap();
        m.pack_bytes(b"GPPD!\0").unwrap();
        assert_eq!(m.datalen(), 1 + 8 + 8 + 6);
        m.reset();
        let (mut c, mut l, mut f, mut s) = ([0u8], [0i64], [0f32; 2], [0u8; 6]);
        m.unpack(&mut c).unwrap();
        m.unpack(&mut l).unwrap();
        m.unpack(&mut f).unwrap();
        m.unpack_bytes(&mut s).unwrap();
        assert_eq!((c[0], l[0], f, &s), (b'L', 42, [1.5, 2.5], b"GPPD!\0"));
        assert!(matches!(
            m.unpack(&mut c),
            Err(DeckError::MsgShort { needed: 1, left: 0 })
        ));
    }

    #[test]
    fn packing_past_size_fails_and_changes_nothing() {
        let mut m = Msg::new(10);
        m.pack(&[7u64]).unwrap();
        let e = m.pack(&[1u32]).unwrap_err();
        assert_eq!(
            e,
            DeckError::MsgFull {
                needed: 4,
                free: 2,
                size: 10
            }
        );
        assert_eq!((m.datalen(), m.cursor()), (8, 8));
    }

    #[test]
    fn messages_nest_three_deep() {
        let mut inner = Msg::new(16);
        inner.pack(&[3u32]).unwrap();
        let mut middle = Msg::new(64);
        middle.pack(&[2u32]).unwrap();
        middle.pack_msg(&inner).unwrap();
        let mut outer = Msg::new(128);
        outer.pack(&[1u32]).unwrap();
        outer.pack_msg(&middle).unwrap();
        outer.pack(&[9u32]).unwrap();
        outer.reset();
        let mut x = [0u32];
        outer.unpack(&mut x).unwrap();
        assert_eq!(x[0], 1);
        let mut m2 = Msg::new(64);
        let mut small = Msg::new(4);
        assert!(matches!(
            outer.unpack_msg(&mut small),
            Err(DeckError::MsgTooBig { .. })
        ));
        outer.unpack_msg(&mut m2).unwrap();
        m2.unpack(&mut x).unwrap();
        assert_eq!(x[0], 2);
        let mut m3 = Msg::new(16);
        m2.unpack_msg(&mut m3).unwrap();
        m3.unpack(&mut x).unwrap();
        assert_eq!(x[0], 3);
        outer.unpack(&mut x).unwrap();
        assert_eq!(x[0], 9);
    }

    #[test]
    fn a_corrupt_nested_length_is_refused_without_moving() {
        let mut m = Msg::new(32);
        m.pack(&[1000u64]).unwrap();
        m.pack(&[1u8; 4]).unwrap();
        m.reset();
        let mut inner = Msg::new(2000);
        assert!(matches!(
            m.unpack_msg(&mut inner),
            Err(DeckError::MsgShort { .. })
        ));
        assert_eq!(m.cursor(), 0);
    }
}
