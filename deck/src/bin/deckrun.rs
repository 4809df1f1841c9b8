//! deckrun: start a DECK job.
fn main() {}
