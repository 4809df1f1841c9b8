//! Wrap-safe 32-bit sequence numbers, compared in one place.

use std::fmt;

/// A frame sequence number. Comparisons treat the space as a circle: `a < b`
/// when `b` is less than 2^31 ahead of `a`. Windows are far smaller than that.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// Signed distance from `other` to `self`.
    #[inline]
    pub fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    /// `self < other` on the circle.
    #[inline]
    pub fn lt(self, other: Seq) -> bool {
        self.diff(other) < 0
    }
    /// `self <= other` on the circle.
    #[inline]
    pub fn le(self, other: Seq) -> bool {
        self.diff(other) <= 0
    }
    /// The number `n` places ahead.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub fn add(self, n: u32) -> Seq {
        Seq(self.0.wrapping_add(n))
    }
    /// The later of two.
    #[inline]
    pub fn max(self, other: Seq) -> Seq {
        if self.lt(other) {
            other
        } else {
            self
        }
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let a = Seq(u32::MAX - 1);
        let b = a.add(5);
        assert_eq!(b, Seq(3));
        assert!(a.lt(b) && !b.lt(a) && a.le(a));
        assert_eq!(b.diff(a), 5);
        assert_eq!(a.diff(b), -5);
        assert_eq!(a.max(b), b);
    }
}
