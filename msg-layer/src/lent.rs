//! Message bodies lent by the caller instead of copied: the layers with C
//! APIs (DECK, BMI) send a large message straight from the application's
//! buffer and learn from [`crate::Event::Released`] when the transport has
//! let go of it, so the call can return or the operation complete.

use bytes::Bytes;

use crate::ReleaseNotice;

/// The caller's bytes, held by the transport until acknowledged; dropping
/// the last reference drops `guard` (a [`ReleaseNotice`], which reports the
/// release, or the lender's own).
struct Lent<G> {
    ptr: *const u8,
    len: usize,
    _guard: G,
}

// SAFETY: the bytes at `ptr` are only read, and `lend_guarded`'s contract
// keeps them valid and unchanged until this owner is dropped, on whatever
// thread drops it; the guard is `Send` itself.
unsafe impl<G: Send> Send for Lent<G> {}

impl<G> AsRef<[u8]> for Lent<G> {
    fn as_ref(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: valid for `len` bytes and unchanged while this owner lives
        // (`lend_guarded`'s contract).
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
    // SAFETY: the caller's contract, with the notice as the guard.
    unsafe { lend_guarded(ptr, len, notice) }
}

/// [`lend`] with a guard of the lender's own, dropped when the transport
/// (and every slice of the body) let go: a registered region that counts
/// what it has lent, for example.
///
/// # Safety
///
/// `ptr` must be valid for reads of `len` bytes (or `len` 0), and the bytes
/// must stay valid and unchanged until `guard` is dropped.
pub unsafe fn lend_guarded<G: Send + 'static>(ptr: *const u8, len: usize, guard: G) -> Bytes {
    Bytes::from_owner(Lent {
        ptr,
        len,
        _guard: guard,
    })
}
