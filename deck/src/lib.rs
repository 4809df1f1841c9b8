//! DECK over the LLC stack: the mailbox message-passing library of the
//! seeds (000, 001), with the reliability, flow control and progress of the
//! message layer underneath.

pub mod boot;
