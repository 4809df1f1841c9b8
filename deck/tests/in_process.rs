//! DECK's semantics on a job of several nodes in one process, over the
//! message layer's TCP transport on loopback (no privileges needed). The
//! same programs run over LLC between namespaces and hosts in tests/c.rs.

use std::thread;
use std::time::Duration;

use deck::{Deck, DeckError, Msg};
use msg_layer::transport::TransportSpec;

fn job(n: usize) -> Vec<Deck> {
    let specs: Vec<TransportSpec> = (0..n)
        .map(|_| "tcp://127.0.0.1:0".parse().expect("spec"))
        .collect();
    Deck::in_process(&specs, Duration::from_secs(3)).expect("job")
}

/// Run `f(deck)` on every node in a thread of its own; join them all.
fn run(n: usize, f: impl Fn(Deck) + Send + Sync + 'static) {
    let f = std::sync::Arc::new(f);
    let hs: Vec<_> = job(n)
        .into_iter()
        .map(|d| {
            let f = f.clone();
            thread::spawn(move || f(d))
        })
        .collect();
    for h in hs {
        h.join().expect("node panicked");
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn ring_of_four_passes_a_token_around_twice() {
    run(4, |d| {
        let me = d.node();
        let n = d.numnodes();
        let mine = d.create(&format!("ring{me}")).unwrap();
        let next = d.clone_mailbox(&format!("ring{}", (me + 1) % n)).unwrap();
        let mut m = Msg::new(64);
        if me == 0 {
            m.pack(&[0u64]).unwrap();
            next.post(&m).unwrap();
        }
        for lap in 0..2u64 {
            mine.retrv(&mut m).unwrap();
            let mut hops = [0u64];
            m.unpack(&mut hops).unwrap();
            assert_eq!(hops[0], lap * u64::from(n) + u64::from((me + n - 1) % n));
            if !(me == 0 && lap == 1) {
                m.clear();
                m.pack(&[hops[0] + 1]).unwrap();
                next.post(&m).unwrap();
            }
        }
        d.done().unwrap();
    });
}

#[test]
fn all_to_one_keeps_each_senders_order_and_content() {
    const PER: u64 = 1000;
    run(5, |d| {
        let me = d.node();
        if me == 0 {
            let mb = d.create("sink").unwrap();
            let mut next = vec![0u64; d.numnodes() as usize];
            let mut m = Msg::new(2048);
            for _ in 0..PER * 4 {
                mb.retrv(&mut m).unwrap();
                let mut hdr = [0u64; 2];
                m.unpack(&mut hdr).unwrap();
                let (from, seq) = (hdr[0] as usize, hdr[1]);
                assert_eq!(seq, next[from], "order from node {from}");
                next[from] += 1;
                let mut body = vec![0u8; m.datalen() - 16];
                m.unpack_bytes(&mut body).unwrap();
                assert_eq!(body, pattern(from as u64 * PER + seq, body.len()));
            }
            assert!(next[1..].iter().all(|&k| k == PER));
        } else {
            let mb = d.clone_mailbox("sink").unwrap();
            let mut m = Msg::new(2048);
            for seq in 0..PER {
                m.clear();
                m.pack(&[u64::from(me), seq]).unwrap();
                let len = (seq as usize * 7) % 2000;
                m.pack_bytes(&pattern(u64::from(me) * PER + seq, len))
                    .unwrap();
                mb.post(&m).unwrap();
            }
        }
        d.done().unwrap();
    });
}

#[test]
fn sizes_from_0_to_16_mib_arrive_byte_for_byte() {
    let sizes = [
        0usize,
        1,
        8,
        16 << 10,
        (16 << 10) + 1,
        100_000,
        1 << 20,
        16 << 20,
    ];
    run(2, move |d| {
        if d.node() == 0 {
            let mb = d.create("sizes").unwrap();
            let mut m = Msg::new(16 << 20);
            for (i, &len) in sizes.iter().enumerate() {
                mb.retrv(&mut m).unwrap();
                assert_eq!(m.datalen(), len);
                assert!(m.data() == pattern(i as u64, len).as_slice(), "size {len}");
            }
        } else {
            let mb = d.clone_mailbox("sizes").unwrap();
            for (i, &len) in sizes.iter().enumerate() {
                let mut m = Msg::new(len);
                m.pack_bytes(&pattern(i as u64, len)).unwrap();
                mb.post(&m).unwrap();
            }
        }
        d.done().unwrap();
    });
}

#[test]
fn a_message_too_large_stays_first_until_a_larger_message_takes_it() {
    run(2, |d| {
        if d.node() == 0 {
            let mb = d.create("big").unwrap();
            d.barrier().unwrap(); // both posted
            let mut small = Msg::new(100);
            for _ in 0..2 {
                let e = mb.retrv(&mut small).unwrap_err();
                assert_eq!(
                    e,
                    DeckError::MsgTooBig {
                        needed: 5000,
                        size: 100
                    }
                );
                assert_eq!(small.needed(), 5000);
            }
            let mut large = Msg::new(5000);
            mb.retrv(&mut large).unwrap();
            assert_eq!(large.data(), pattern(1, 5000).as_slice());
            mb.retrv(&mut small).unwrap();
            assert_eq!(small.data(), b"after");
            // The same with a large (rendezvous) message.
            d.barrier().unwrap();
            let e = mb.retrv(&mut large).unwrap_err();
            assert!(matches!(
                e,
                DeckError::MsgTooBig {
                    needed: 200_000,
                    ..
                }
            ));
            let mut huge = Msg::new(200_000);
            mb.retrv(&mut huge).unwrap();
            assert_eq!(huge.data(), pattern(2, 200_000).as_slice());
        } else {
            let mb = d.clone_mailbox("big").unwrap();
            let mut m = Msg::new(5000);
            m.pack_bytes(&pattern(1, 5000)).unwrap();
            mb.post(&m).unwrap();
            let mut m2 = Msg::new(16);
            m2.pack_bytes(b"after").unwrap();
            mb.post(&m2).unwrap();
            d.barrier().unwrap();
            // A large post returns when the owner has it: after its barrier.
            let mut m3 = Msg::new(200_000);
            m3.pack_bytes(&pattern(2, 200_000)).unwrap();
            d.barrier().unwrap();
            mb.post(&m3).unwrap();
        }
        d.done().unwrap();
    });
}

#[test]
fn errors_are_clear_and_lose_nothing() {
    run(2, |d| {
        let mut m = Msg::new(64);
        if d.node() == 0 {
            let mb = d.create("owned").unwrap();
            // Creating a name twice, anywhere.
            assert_eq!(
                d.create("owned").unwrap_err(),
                DeckError::Exists("owned".into())
            );
            d.barrier().unwrap(); // node 1 cloned
            d.barrier().unwrap(); // node 1 tried to create it too
            mb.retrv(&mut m).unwrap();
            assert_eq!(m.data(), b"one");
            mb.destroy().unwrap();
            d.barrier().unwrap(); // destroyed
            d.barrier().unwrap(); // node 1 saw it
                                  // The name is free again.
            let again = d.create("owned").unwrap();
            again.destroy().unwrap();
        } else {
            d.barrier().unwrap();
            let clone = d.clone_mailbox("owned").unwrap();
            assert!(!clone.is_owner());
            assert!(matches!(clone.retrv(&mut m), Err(DeckError::NotOwner(_))));
            assert_eq!(
                d.create("owned").unwrap_err(),
                DeckError::Exists("owned".into())
            );
            m.pack_bytes(b"one").unwrap();
            clone.post(&m).unwrap();
            d.barrier().unwrap();
            d.barrier().unwrap();
            // The owner told every node before the barrier's message.
            assert_eq!(
                clone.post(&m).unwrap_err(),
                DeckError::Destroyed("owned".into())
            );
            d.barrier().unwrap();
        }
        // A name that never appears.
        let t = std::time::Instant::now();
        let e = d.clone_mailbox(&format!("never{}", d.node())).unwrap_err();
        assert!(matches!(e, DeckError::NoSuchName { .. }), "{e}");
        assert!(t.elapsed() >= Duration::from_secs(3));
        d.done().unwrap();
    });
}

#[test]
fn a_clone_waits_for_a_name_created_later() {
    run(3, |d| {
        match d.node() {
            0 => {
                d.barrier().unwrap();
                // Nodes 1 and 2 are waiting for the name now (or soon).
                thread::sleep(Duration::from_millis(200));
                let mb = d.create("late").unwrap();
                let mut m = Msg::new(8);
                for _ in 0..2 {
                    mb.retrv(&mut m).unwrap();
                }
            }
            _ => {
                d.barrier().unwrap();
                let mb = d.clone_mailbox("late").unwrap();
                let mut m = Msg::new(8);
                m.pack(&[1u8]).unwrap();
                mb.post(&m).unwrap();
            }
        }
        d.done().unwrap();
    });
}

#[test]
fn threads_of_one_node_own_mailboxes_and_post_to_each_other() {
    let mut nodes = job(2);
    let d1 = nodes.pop().unwrap();
    let d0 = std::sync::Arc::new(nodes.pop().unwrap());
    let remote = thread::spawn(move || {
        let mb = d1.clone_mailbox("t1").unwrap();
        let mut m = Msg::new(16);
        for i in 0..100u32 {
            m.clear();
            m.pack(&[i]).unwrap();
            mb.post(&m).unwrap();
        }
        d1.done().unwrap();
    });
    // Two threads of node 0: one owns "t1" and takes 100 remote and 100
    // local messages; the other posts the local ones.
    let a = {
        let d0 = d0.clone();
        thread::spawn(move || {
            let mb = d0.create("t1").unwrap();
            let mut m = Msg::new(16);
            let (mut remote, mut local) = (0u32, 0u32);
            for _ in 0..200 {
                mb.retrv(&mut m).unwrap();
                let mut v = [0u32];
                m.unpack(&mut v).unwrap();
                if v[0] >= 1000 {
                    assert_eq!(v[0] - 1000, local);
                    local += 1;
                } else {
                    assert_eq!(v[0], remote);
                    remote += 1;
                }
            }
        })
    };
    let b = {
        let d0 = d0.clone();
        thread::spawn(move || {
            let mb = d0.clone_mailbox("t1").unwrap();
            let mut m = Msg::new(16);
            for i in 0..100u32 {
                m.clear();
                m.pack(&[1000 + i]).unwrap();
                mb.post(&m).unwrap();
            }
        })
    };
    a.join().unwrap();
    b.join().unwrap();
    let d0 = std::sync::Arc::try_unwrap(d0).ok().expect("threads done");
    d0.done().unwrap();
    remote.join().unwrap();
}
