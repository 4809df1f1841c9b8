//! The common path allocates nothing: 8-byte messages both ways between two
//! endpoints over the LLC stack on the simulated wire (which reuses its frame
//! buffers), counted by a global allocator on this thread once the endpoints
//! are warm. An allocation per message costs a malloc and a free (about 150
//! instructions of the ~11,000 a round trip takes) and, on a busy server,
//! contention in the allocator.
//!
//! Timers run on the real clock, so a rare event off the common path (a
//! tail-loss probe when the machine stalls the test, a list reaching a new
//! size the first time a timer fires) may allocate once inside the window:
//! the bound is one allocation per thousand round trips, where a single
//! allocation per message would make it thousands.

use std::time::Duration;

use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint, Event, PeerId, Source, Tag};
use testbed::alloc_count::{allocations, Counting};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Two endpoints over the LLC stack on a simulated wire with no delay, each
/// knowing the other: `(a, b, a's id at b, b's id at a)`. `pull`: messages
/// and active messages are taken with `poll_event` rather than callbacks.
fn pair(pull: bool) -> (Ep, Ep, PeerId, PeerId) {
    let sim = Sim::new(SimConfig {
        latency: Duration::ZERO,
        rate_bps: 0,
        ..SimConfig::default()
    });
    let open = |i: u8| {
        let t = LlcTransport::new(
            sim.port(),
            MacAddr([2, 0, 0, 0, 0, i]),
            7,
            LlcConfig::default(),
            Rng::new(u64::from(i)),
        );
        let ep = Endpoint::new(t, Config::default()).expect("endpoint");
        ep.set_pull_delivery(pull);
        ep
    };
    let (a, b) = (open(1), open(2));
    let pb = a.add_peer(&b.local_addr()).expect("add peer");
    let pa = b.add_peer(&a.local_addr()).expect("add peer");
    (a, b, pa, pb)
}

type Ep = Endpoint<LlcTransport<SimPort>>;

#[test]
fn eight_byte_round_trips_allocate_nothing_once_warm() {
    let (a, b, pa, pb) = pair(false);
    let msg = bytes::Bytes::from_static(&[0xa5; 8]);
    let mut served = b.irecv(Source::Peer(pa), Tag::Is(1), 0, vec![0; 8]);
    let mut abuf = vec![0u8; 8];
    let mut round_trips = |n: usize| {
        for i in 0..n {
            let r = a.irecv(Source::Peer(pb), Tag::Is(1), 0, std::mem::take(&mut abuf));
            let s = a.isend(pb, 1, 0, msg.clone());
            let mut spins = 0u64;
            abuf = loop {
                if let Some(done) = b.test(&served) {
                    let c = done.expect("b's receive");
                    let echo = b.isend(pa, 1, 0, msg.clone());
                    b.wait(echo).expect("b's send");
                    served = b.irecv(Source::Peer(pa), Tag::Is(1), 0, c.data.expect("buffer"));
                }
                if let Some(done) = a.test(&r) {
                    let data = done.expect("a's receive").data.expect("buffer");
                    assert_eq!(data, [0xa5; 8], "round trip {i}");
                    break data;
                }
                spins += 1;
                assert!(spins < 1_000_000, "round trip {i} never completed");
            };
            a.wait(s).expect("a's send");
        }
    };
    // Warm up: connections, tables and free lists reach their working size.
    round_trips(2_000);
    let n = 10_000;
    let count = allocations(|| round_trips(n));
    println!("{count} allocations in {n} round trips");
    assert!(
        count * 1_000 <= n as u64,
        "{count} allocations in {n} 8-byte round trips: the common path allocates"
    );
}

/// The same for active messages as the MPI BTL sends them: 8 bytes behind
/// a 16-byte prefix, the 8 bytes lent (`am_post_parts`, a descriptor's
/// fragment) or both parts copied (`am_post_copy`, the inline send), taken
/// pull-style and answered.
#[test]
fn active_message_round_trips_allocate_nothing_once_warm() {
    for copied in [false, true] {
        let (a, b, pa, pb) = pair(true);
        let prefix = [0x5a; 16];
        let body = bytes::Bytes::from_static(&[0xa5; 8]);
        let post = |ep: &Ep, to: PeerId| {
            if copied {
                ep.am_post_copy(to, 1, &prefix, &body)
            } else {
                ep.am_post_parts(to, 1, &prefix, body.clone())
            }
        };
        let arrived = |ep: &Ep| {
            ep.progress().expect("progress");
            match ep.poll_event() {
                Some(Event::Message(m)) => {
                    assert_eq!(&m.data()[..16], [0x5a; 16]);
                    assert_eq!(&m.data()[16..], [0xa5; 8]);
                    ep.recycle(m);
                    true
                }
                Some(other) => panic!("unexpected event {other:?}"),
                None => false,
            }
        };
        let round_trips = |n: usize| {
            for i in 0..n {
                post(&a, pb).expect("a's message");
                let mut spins = 0u64;
                loop {
                    if arrived(&b) {
                        post(&b, pa).expect("b's answer");
                    }
                    if arrived(&a) {
                        break;
                    }
                    spins += 1;
                    assert!(spins < 1_000_000, "round trip {i} never completed");
                }
            }
        };
        round_trips(2_000);
        let n = 10_000;
        let count = allocations(|| round_trips(n));
        println!("copied {copied}: {count} allocations in {n} round trips");
        assert!(
            count * 1_000 <= n as u64,
            "{count} allocations in {n} active-message round trips (copied {copied}): \
             the common path allocates"
        );
    }
}

/// The libfabric provider's small-message path: `fi_tinjectdata` one way,
/// a receive into caller memory the other, as libllc-fi.so makes them.
#[test]
fn injected_round_trips_into_caller_memory_allocate_nothing_once_warm() {
    use msg_layer::rma::{MemoryRegion, VecRegion};
    use msg_layer::{Select, Space};
    use std::sync::Arc;
    let (a, b, pa, pb) = pair(false);
    let msg = [0xa5u8; 8];
    let (adst, bdst): (Arc<dyn MemoryRegion>, Arc<dyn MemoryRegion>) = (
        Arc::new(VecRegion::new(vec![0; 8])),
        Arc::new(VecRegion::new(vec![0; 8])),
    );
    let sel = Select::Tagged { bits: 7, ignore: 0 };
    let round_trips = |n: usize| {
        for i in 0..n {
            let served = b.irecv_into(Source::Peer(pa), sel, bdst.clone());
            let r = a.irecv_into(Source::Peer(pb), sel, adst.clone());
            a.inject_to(pb, Space::Tagged(7), Some(i as u64), &msg)
                .expect("a's inject");
            let mut spins = 0u64;
            let mut echoed = false;
            loop {
                if !echoed {
                    if let Some(done) = b.test(&served) {
                        assert_eq!(done.expect("b's receive").status.data, Some(i as u64));
                        b.inject_to(pa, Space::Tagged(7), None, &msg)
                            .expect("b's inject");
                        echoed = true;
                    }
                }
                if let Some(done) = a.test(&r) {
                    assert!(echoed, "round trip {i}: a received before b answered");
                    assert_eq!(done.expect("a's receive").status.len, 8, "round trip {i}");
                    break;
                }
                spins += 1;
                assert!(spins < 1_000_000, "round trip {i} never completed");
            }
        }
    };
    round_trips(2_000);
    let n = 10_000;
    let count = allocations(|| round_trips(n));
    println!("{count} allocations in {n} round trips");
    assert!(
        count * 1_000 <= n as u64,
        "{count} allocations in {n} injected round trips: the common path allocates"
    );
}
