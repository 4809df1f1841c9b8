//! Message bodies lent by the caller instead of copied: the layers with C
//! APIs (DECK, BMI) send a large message straight from the application's
//! buffer and learn from [`crate::Event::Released`] when the transport has
//! let go of it, so the call can return or the operation complete.

use bytes::Bytes;

use crate::ReleaseNotice;

/// The caller's bytes, held by the transport until acknowledged; dropping
/// the last reference drops `notice`, which reports the release.
struct Lent {
    ptr: *const u8,
    len: usize,
    _notice: ReleaseNotice,
}

// SAFETY: the bytes at `ptr` are only read, and `lend`'s contract keeps them
// valid and unchanged until this owner is dropped (its notice reports that),
// on whatever thread drops it.
unsafe impl Send for Lent {}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: valid for `len` bytes and unchanged while this owner lives
        // (`lend`'s contract).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// `len` bytes at `ptr` as a message body, without a copy; `notice` (from
/// [`crate::Endpoint::release_notice`]) reports when the transport let go.
///
/// # Safety
///
/// `ptr` must be valid for reads of `len` bytes (or `len` 0), and the bytes
/// must stay valid and unchanged until the release is reported.
pub unsafe fn lend(ptr: *const u8, len: usize, notice: ReleaseNotice) -> Bytes {
    Bytes::from_owner(Lent {
        ptr,
        len,
        _notice: notice,
    })
}
