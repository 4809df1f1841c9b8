//! Both ends of a stream over the reliable transport alone (no message
//! layer): 1 MiB messages of one shared buffer, 8 MiB kept queued; shared
//! by `stream_goodput` and the message layer's `msg_stream_goodput`, which
//! measures its own layer against this in the same run.

use std::time::Duration;

use bytes::Bytes;
use llc_stack::proto::Event;
use llc_stack::wire::MacAddr;
use llc_stack::{Device, Instant, Stack};

/// Bytes per message.
pub const MSG: usize = 1 << 20;
/// The receiver's port.
pub const PORT: u16 = 9;
/// Bytes the sender keeps queued.
const QUEUED: usize = 8 * MSG;
const LIMIT: Duration = Duration::from_secs(120);

/// Listen on [`PORT`] and count message bytes until `total` arrived (each
/// message's buffer given back for the next one); returns the count.
pub fn receive<D: Device>(mut stack: Stack<D>, total: usize) -> usize {
    stack.set_spin(LIMIT);
    stack.endpoint_mut().listen(PORT);
    let mut got = 0usize;
    let _ = stack
        .run_until(Instant::now() + LIMIT, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                if let Event::Message { data, .. } = ev {
                    got += data.len();
                    // Done with it: the next message is reassembled there.
                    ep.recycle(data);
                }
            }
            (got >= total).then_some(())
        })
        .unwrap();
    let _ = stack.run_until(Instant::now() + Duration::from_millis(300), |_| None::<()>);
    got
}

/// Connect to `peer` and send `total` bytes in [`MSG`] messages; returns
/// the seconds from `connect` to the last acknowledgement and the
/// retransmissions.
pub fn send<D: Device>(mut stack: Stack<D>, peer: MacAddr, total: usize) -> (f64, u64) {
    stack.set_spin(LIMIT);
    // One buffer shared by every send: the transport's cost is measured,
    // not the application's allocation and copy of each message.
    let msg = Bytes::from(vec![0x5Au8; MSG]);
    let start = Instant::now();
    let conn = stack
        .endpoint_mut()
        .connect(start, peer, PORT, None)
        .unwrap();
    let n = total / MSG;
    let (mut next, mut acked) = (0usize, 0usize);
    let done = stack
        .run_until(start + LIMIT, |ep| {
            while let Some((_, ev)) = ep.poll_event() {
                if let Event::Acked { .. } = ev {
                    acked += 1;
                }
            }
            while next < n && ep.connection(conn).map_or(0, |c| c.send_buffered()) < QUEUED {
                ep.send(conn, msg.clone()).expect("send");
                next += 1;
            }
            (acked == n).then_some(())
        })
        .unwrap();
    assert!(done.is_some(), "timed out: {acked} of {n} acknowledged");
    let secs = (Instant::now() - start).as_secs_f64();
    let retrans = stack
        .endpoint()
        .connection_stats(conn)
        .map_or(0, |s| s.retransmits);
    (secs, retrans)
}
