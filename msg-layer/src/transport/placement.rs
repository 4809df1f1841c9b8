//! Placement of incoming messages straight into the buffers of the layer
//! above, so that a large message is written once, from the frame into its
//! final place, instead of into a reassembly buffer and then copied.
//!
//! A transport that reassembles messages from fragments (the LLC stack)
//! asks its [`Placement`] where a message goes when the message's first
//! fragment arrives first. The answer keeps a prefix (the layer above's own
//! header) in the delivered message and sends every byte after it to a
//! [`Sink`]; the message is then delivered as that prefix alone. Messages
//! whose first fragment is overtaken by a later one, single-frame messages,
//! and every message of a transport without placement (TCP reads into its
//! own buffers) are delivered whole as usual, and the layer above copies.
//!
//! These are the message layer's own types: the LLC transport adapts them
//! to the stack below without an allocation per message (the one
//! [`SharedSink::new`] makes is all there is).

use std::fmt;
use std::sync::Arc;

/// Where the body of a placed message is written.
pub trait Sink: Send + Sync + 'static {
    /// Write `data` at `offset` of the body (the message's byte `keep +
    /// offset`). Fragments arrive in any order, each byte once.
    fn write(&self, offset: usize, data: &[u8]);
}

/// A shared [`Sink`], as [`Placement::place`] returns it. Transports hold it
/// while the message arrives and drop it when it is complete or abandoned.
#[derive(Clone)]
pub struct SharedSink(Arc<dyn bridge::Bridged>);

impl SharedSink {
    /// Share `sink` (one allocation).
    pub fn new<S: Sink>(sink: S) -> Self {
        SharedSink(Arc::new(bridge::Adapt(sink)))
    }

    /// Write `data` at `offset` of the body.
    #[inline]
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.0.write(offset, data)
    }

    /// The same sink as the LLC stack's kind, without another allocation.
    pub(crate) fn into_llc(self) -> Arc<dyn llc_stack::proto::Sink> {
        self.0.into_llc()
    }
}

impl fmt::Debug for SharedSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedSink")
    }
}

/// Decides where incoming messages go.
pub trait Placement: Send {
    /// A message of `len` bytes starts with `first` (its first fragment).
    /// Return how many leading bytes stay in the delivered message and the
    /// sink for the rest, or `None` to deliver it whole as usual. `keep`
    /// must not exceed `len`.
    fn place(&mut self, len: usize, first: &[u8]) -> Option<(usize, SharedSink)>;
}

/// The one place that knows both sink traits. A [`SharedSink`] holds its
/// sink inside [`Adapt`], which implements both, so handing it to the LLC
/// stack is a pointer coercion.
mod bridge {
    use std::sync::Arc;

    /// A sink of either kind.
    pub trait Bridged: Send + Sync {
        fn write(&self, offset: usize, data: &[u8]);
        fn into_llc(self: Arc<Self>) -> Arc<dyn llc_stack::proto::Sink>;
    }

    /// A message-layer sink seen as either kind.
    pub struct Adapt<S>(pub S);

    impl<S: super::Sink> llc_stack::proto::Sink for Adapt<S> {
        #[inline]
        fn write(&self, offset: usize, data: &[u8]) {
            self.0.write(offset, data)
        }
    }

    impl<S: super::Sink> Bridged for Adapt<S> {
        #[inline]
        fn write(&self, offset: usize, data: &[u8]) {
            self.0.write(offset, data)
        }

        fn into_llc(self: Arc<Self>) -> Arc<dyn llc_stack::proto::Sink> {
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    struct Record(Mutex<Vec<(usize, Vec<u8>)>>);

    impl Sink for Arc<Record> {
        fn write(&self, offset: usize, data: &[u8]) {
            self.0.lock().unwrap().push((offset, data.to_vec()));
        }
    }

    #[test]
    fn both_views_write_to_the_same_sink() {
        let rec = Arc::new(Record(Mutex::new(Vec::new())));
        let s = SharedSink::new(rec.clone());
        s.write(3, b"ab");
        let llc = s.clone().into_llc();
        llc.write(0, b"c");
        drop((s, llc));
        assert_eq!(
            *rec.0.lock().unwrap(),
            vec![(3, b"ab".to_vec()), (0, b"c".to_vec())]
        );
        // Both handles dropped: only the test's reference is left.
        assert_eq!(Arc::strong_count(&rec), 1);
    }
}
