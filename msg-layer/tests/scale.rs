//! A server endpoint with a thousand connected peers, as the rank of a large
//! job or a file server of many clients is: what each idle connection costs
//! in memory, and that the busy peers' messages still flow while the rest
//! are silent.
//!
//! Memory is the heap held by connections once every peer exchanged a
//! message with the server and went quiet, counted by a global allocator:
//! the growth from the peers unconnected to the server to all connected,
//! divided by the connection ends (each connection has two, one in the
//! server and one in a peer, both counted; the peers first talked to
//! another endpoint, so their own first-use set-up is not counted). Nothing is left in flight, so this is
//! the state an idle connection keeps: its protocol state, its place in
//! the tables, and whatever buffers it holds on to.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use llc_stack::link::sim::{Sim, SimConfig};
use llc_stack::link::{Device, TxToken};
use llc_stack::rng::Rng;
use llc_stack::time::Instant;
use llc_stack::wire::MacAddr;
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint, PeerId, Source, Tag};

/// Bytes live on the heap.
struct Live;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter is a plain atomic.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Live = Live;

/// Peers connected to the server.
const PEERS: u16 = 1_000;
/// The most an idle connection may hold (issue 23's bound: 4 KiB beyond
/// buffers; this counts buffers too).
const IDLE_CONNECTION_LIMIT: i64 = 4096;

type SimEndpoint = Endpoint<LlcTransport<llc_stack::link::sim::SimPort>>;

const SERVER: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// An endpoint at `mac`. Its port first sends the server a frame (a stray
/// one the server drops), so that the switch knows where `mac` is and
/// nothing is flooded to a thousand ports, as hosts make themselves known
/// to a real switch.
fn open(sim: &Sim, mac: [u8; 6], seed: u64) -> SimEndpoint {
    let mut port = sim.port();
    let tx = port
        .transmit(Instant::from_nanos(0))
        .expect("a transmit slot");
    tx.consume(|buf| {
        buf[..6].copy_from_slice(&SERVER);
        buf[6..12].copy_from_slice(&mac);
        60
    });
    // Keepalives stay out of the way of a test that polls a thousand
    // endpoints one after another.
    let cfg = LlcConfig {
        keepalive_interval: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(600),
        ..LlcConfig::default()
    };
    let t = LlcTransport::new(port, MacAddr(mac), 7, cfg, Rng::new(seed));
    Endpoint::new(t, Config::default()).expect("endpoint")
}

/// Drive `a` and `b` until `a`'s request `r` completes.
fn complete(a: &SimEndpoint, b: &SimEndpoint, r: &msg_layer::Request, what: &str) -> Vec<u8> {
    for _ in 0..1_000_000 {
        if let Some(done) = a.test(r) {
            return done.expect(what).data.unwrap_or_default();
        }
        b.progress().expect("progress");
    }
    panic!("{what} never completed");
}

/// Every peer sends `server` a message and gets one back; then all go
/// quiet (every acknowledgement delivered). Returns each pair's ids (the
/// peer's for the server, the server's for the peer).
fn exchange(server: &SimEndpoint, peers: &[SimEndpoint]) -> Vec<(PeerId, PeerId)> {
    let mut ids = Vec::new();
    for (i, p) in peers.iter().enumerate() {
        let to_server = p.add_peer(&server.local_addr()).expect("add peer");
        let to_peer = server.add_peer(&p.local_addr()).expect("add peer");
        let tag = i as u32;
        let r = server.irecv(Source::Peer(to_peer), Tag::Is(tag), 0, vec![0; 8]);
        let s = p.isend(
            to_server,
            tag,
            0,
            bytes::Bytes::from(tag.to_le_bytes().to_vec()),
        );
        let got = complete(server, p, &r, "the server's receive");
        assert_eq!(got, tag.to_le_bytes(), "peer {i}'s message");
        complete(p, server, &s, "the peer's send");
        let r = p.irecv(Source::Peer(to_server), Tag::Is(tag), 0, vec![0; 8]);
        let s = server.isend(
            to_peer,
            tag,
            0,
            bytes::Bytes::from(tag.to_le_bytes().to_vec()),
        );
        assert_eq!(
            complete(p, server, &r, "the peer's receive"),
            tag.to_le_bytes()
        );
        complete(server, p, &s, "the server's send");
        ids.push((to_server, to_peer));
    }
    for p in peers {
        for _ in 0..8 {
            server.progress().expect("progress");
            p.progress().expect("progress");
        }
    }
    ids
}

#[test]
fn a_thousand_idle_connections_cost_little_memory_and_do_not_stall_the_busy_ones() {
    let sim = Sim::new(SimConfig {
        latency: Duration::ZERO,
        rate_bps: 0,
        switched: true,
        ..SimConfig::default()
    });
    let server = open(&sim, SERVER, 1);
    let warm_up = open(&sim, [2, 0, 0, 0, 0, 2], 2);
    let peers: Vec<SimEndpoint> = (0..PEERS)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            open(&sim, [2, 0, 0, 1, hi, lo], 100 + u64::from(i))
        })
        .collect();
    let received = || {
        let c = server.counters().into_iter();
        c.filter(|(k, _)| *k == "link.rx_frames")
            .map(|(_, v)| v)
            .sum::<u64>()
    };
    let strays = u64::from(PEERS) + 1;
    for _ in 0..1_000 {
        if received() == strays {
            break;
        }
        server.progress().expect("progress");
    }
    assert_eq!(received(), strays, "every peer made itself known");
    // Each peer talks to another endpoint first, so that what a peer
    // endpoint sets up on its first message (its own tables, buffer pools)
    // is there before counting: what grows next is connections.
    exchange(&warm_up, &peers);
    // The simulated wire's frame buffers are the wire's, not the
    // connections': a thousand handshakes at once put thousands of frames
    // in flight, whose (frame-sized) buffers the wire keeps as spares.
    let wire_before = sim.frame_buffer_bytes() as i64;
    let before = LIVE.load(Ordering::Relaxed);
    let ids = exchange(&server, &peers);
    let after = LIVE.load(Ordering::Relaxed);
    let wire = sim.frame_buffer_bytes() as i64 - wire_before;
    let per_connection_end = (after - before - wire) / (2 * i64::from(PEERS));
    println!(
        "{PEERS} connections: {} bytes more on the heap, {wire} of them the simulated wire's \
         frame buffers, {per_connection_end} bytes per connection end",
        after - before
    );
    assert!(
        per_connection_end <= IDLE_CONNECTION_LIMIT,
        "an idle connection holds {per_connection_end} bytes (limit {IDLE_CONNECTION_LIMIT})"
    );

    // With all of them connected, the first and the last peer still talk
    // to the server, and a round of messages from every peer arrives.
    for (i, p) in [
        (0, &peers[0]),
        (PEERS as usize - 1, &peers[PEERS as usize - 1]),
    ] {
        let (to_server, to_peer) = ids[i];
        for round in 0..100u32 {
            let r = server.irecv(Source::Peer(to_peer), Tag::Is(round), 0, vec![0; 8]);
            let s = p.isend(
                to_server,
                round,
                0,
                bytes::Bytes::from(round.to_le_bytes().to_vec()),
            );
            assert_eq!(
                complete(&server, p, &r, "a busy peer's message"),
                round.to_le_bytes()
            );
            complete(p, &server, &s, "a busy peer's send");
        }
    }
    let recvs: Vec<_> = ids
        .iter()
        .map(|&(_, to_peer)| server.irecv(Source::Peer(to_peer), Tag::Is(7), 0, vec![0; 8]))
        .collect();
    for (p, &(to_server, _)) in peers.iter().zip(&ids) {
        let s = p.isend(to_server, 7, 0, bytes::Bytes::from_static(&[7; 8]));
        complete(p, &server, &s, "a peer's send");
    }
    for (i, r) in recvs.iter().enumerate() {
        let p = &peers[i];
        assert_eq!(complete(&server, p, r, "the server's receive"), [7; 8]);
    }
}
