//! Test hosts for the LLC stack.
