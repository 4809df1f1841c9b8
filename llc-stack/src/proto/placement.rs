//! Placement of incoming messages straight into the buffers of the layer
//! above, so a large message is written once, from the frame into its final
//! place, instead of into a reassembly buffer and then copied.
//!
//! When the first fragment (offset 0) of a multi-fragment message arrives
//! first, the endpoint asks its [`Placement`] where the message goes. The
//! answer keeps a prefix (the layer above's own header) in the delivered
//! message and sends every byte after it to a [`Sink`]; the message is then
//! delivered as that prefix alone. Messages whose first fragment is
//! overtaken by a later one, and single-frame messages, are reassembled as
//! usual.

use std::sync::Arc;

/// Where the body of a placed message is written.
pub trait Sink: Send + Sync {
    /// Write `data` at `offset` of the body (the message's byte `keep +
    /// offset`). Fragments arrive in any order, each byte once.
    fn write(&self, offset: usize, data: &[u8]);
}

/// Decides where incoming messages go.
pub trait Placement: Send {
    /// A message of `len` bytes starts with `first` (its first fragment).
    /// Return how many leading bytes stay in the delivered message and the
    /// sink for the rest, or `None` to reassemble it as usual. `keep` must
    /// not exceed `len`.
    fn place(&mut self, len: usize, first: &[u8]) -> Option<(usize, Arc<dyn Sink>)>;
}
