//! The Rust API over TCP loopback: a server and clients in one process,
//! each its own BMI instance. (The C tests run every call over LLC too.)

use std::time::Duration;

use bmi::{Bmi, BmiAddr, BmiError, Done, InitFlags, MethodKind, Posted};

const WAIT: Duration = Duration::from_secs(20);

fn server() -> (Bmi, String) {
    let s = Bmi::initialize(
        "bmi_tcp",
        Some("tcp://127.0.0.1:0"),
        InitFlags {
            server: true,
            ..InitFlags::default()
        },
    )
    .expect("server starts");
    let addr = s
        .method_limits(MethodKind::Tcp)
        .unwrap()
        .local_addr
        .expect("listening");
    (s, addr)
}

fn client() -> Bmi {
    Bmi::initialize("bmi_tcp", None, InitFlags::default()).expect("client starts")
}

/// Wait for a posted operation.
fn finish(b: &Bmi, p: Posted, ctx: i32) -> Done {
    match p {
        Posted::Now(d) => d,
        Posted::Pending(op) => b
            .test(op, ctx, WAIT)
            .expect("test")
            .unwrap_or_else(|| panic!("operation {op} did not complete in {WAIT:?}")),
    }
}

/// The server's next unexpected message.
fn next_request(s: &Bmi) -> bmi::Unexpected {
    let mut got = s.testunexpected(1, WAIT).expect("testunexpected");
    assert_eq!(got.len(), 1, "no unexpected message within {WAIT:?}");
    got.remove(0)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn request_reply_at_every_size_and_immediate_completion() {
    let (s, saddr) = server();
    let c = client();
    let sctx = s.open_context();
    let cctx = c.open_context();
    let to = c.addr_lookup(&saddr).unwrap();
    assert_eq!(c.addr_lookup(&saddr).unwrap(), to, "lookups are cached");
    for (round, size) in [
        0usize,
        1,
        100,
        10_000,
        16 << 10,
        (16 << 10) + 1,
        100_000,
        1 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let req = (size as u64).to_le_bytes().to_vec();
        let p = c.post_sendunexpected(to, req, 7, 1, cctx).unwrap();
        assert!(
            matches!(p, Posted::Now(_)),
            "a small unexpected send completes at once"
        );
        let u = next_request(&s);
        assert_eq!(u.tag, 7);
        let want = u64::from_le_bytes(u.result.as_ref().unwrap().data().try_into().unwrap());
        let reply_to: BmiAddr = u.addr;
        assert!(s
            .addr_rev_lookup(reply_to)
            .unwrap()
            .starts_with("127.0.0.1:"));
        s.unexpected_free(u);
        let data = pattern(want as usize, round as u8);
        let sp = s.post_send(reply_to, data.clone(), 8, 2, sctx).unwrap();
        let rp = c.post_recv(to, want, 8, 3, cctx).unwrap();
        let d = finish(&c, rp, cctx);
        assert_eq!(d.result, Ok(want), "size {size}");
        assert_eq!(d.user, 3);
        assert!(d.data.unwrap() == data, "size {size}: content");
        let sd = finish(&s, sp, sctx);
        assert_eq!(sd.result, Ok(want));
    }
    // A message already there when its receive is posted completes at once:
    // wait until the client's message layer holds it as unexpected.
    let back = s_peer(&s, &c, to, cctx);
    let p = s.post_send(back, vec![5u8; 64], 9, 0, sctx).unwrap();
    finish(&s, p, sctx);
    let held = |c: &Bmi| {
        c.counters()
            .iter()
            .any(|(k, v)| k == "bmi_tcp.msg.unexpected" && *v > 0)
    };
    let deadline = std::time::Instant::now() + WAIT;
    while !held(&c) {
        assert!(
            std::time::Instant::now() < deadline,
            "the message never arrived"
        );
        let _ = c.testcontext(1, cctx, Duration::from_millis(1)).unwrap();
    }
    match c.post_recv(to, 64, 9, 0, cctx).unwrap() {
        Posted::Now(d) => assert_eq!(d.data.unwrap(), vec![5u8; 64]),
        Posted::Pending(op) => panic!("operation {op}: the message was there already"),
    }
    assert!(c.stats().immediate > 0);
}

/// The server's handle for the client (learned from an unexpected message).
fn s_peer(s: &Bmi, c: &Bmi, to: BmiAddr, cctx: i32) -> BmiAddr {
    c.post_sendunexpected(to, vec![0u8; 8], 1, 0, cctx).unwrap();
    let u = next_request(s);
    let a = u.addr;
    s.unexpected_free(u);
    a
}

#[test]
fn order_per_peer_holds_across_sizes_and_kinds() {
    let (s, saddr) = server();
    let c = client();
    let sctx = s.open_context();
    let cctx = c.open_context();
    let to = c.addr_lookup(&saddr).unwrap();
    let back = s_peer(&s, &c, to, cctx);
    // 200 messages with one tag, sizes crossing the eager limit: received
    // in the order sent, whatever the protocol of each.
    let sizes: Vec<usize> = (0..200).map(|i| [10, 20_000, 300, 70_000][i % 4]).collect();
    let mut pending = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        if let Posted::Pending(op) = c.post_send(to, pattern(n, i as u8), 4, i, cctx).unwrap() {
            pending.push(op);
        }
    }
    for (i, &n) in sizes.iter().enumerate() {
        let d = finish(&s, s.post_recv(back, 100_000, 4, i, sctx).unwrap(), sctx);
        assert_eq!(d.result, Ok(n as u64), "message {i}");
        assert!(
            d.data.unwrap() == pattern(n, i as u8),
            "message {i}: content"
        );
    }
    for op in pending {
        assert!(c.test(op, cctx, WAIT).unwrap().unwrap().result.is_ok());
    }
}

#[test]
fn errors_are_clear_and_leave_the_library_usable() {
    let (s, saddr) = server();
    let c = client();
    let sctx = s.open_context();
    let cctx = c.open_context();
    // Malformed addresses and unknown methods.
    assert!(matches!(
        c.addr_lookup("nohostport"),
        Err(BmiError::BadAddress { .. })
    ));
    assert!(matches!(
        c.addr_lookup("gm://host:1"),
        Err(BmiError::UnknownMethod(_))
    ));
    assert!(matches!(
        c.addr_lookup("[02:00:00:00:00:01]:7"),
        Err(BmiError::UnknownMethod(_))
    ));
    assert!(matches!(
        Bmi::initialize("bmi_gm", None, InitFlags::default()),
        Err(BmiError::UnknownMethod(_))
    ));
    let to = c.addr_lookup(&saddr).unwrap();
    // An unexpected message above the limit: refused at the sender...
    let limit = c.limits_of(to).unwrap().unexpected_limit as usize;
    assert!(matches!(
        c.post_sendunexpected(to, vec![0u8; limit + 1], 1, 0, cctx),
        Err(BmiError::UnexpectedTooLong { .. })
    ));
    // ...and reported at a receiver whose limit is lower than the sender's.
    s.set_unexpected_limit(MethodKind::Tcp, 100).unwrap();
    c.post_sendunexpected(to, vec![1u8; 101], 2, 0, cctx)
        .unwrap();
    let u = next_request(&s);
    assert_eq!(u.tag, 2);
    assert!(matches!(
        u.result,
        Err(BmiError::UnexpectedTooLong {
            len: 101,
            limit: 100
        })
    ));
    let back = u.addr;
    // A receive buffer smaller than the message: an error with the size;
    // the next message is intact.
    for n in [1000usize, 100_000] {
        c.post_send(to, pattern(n, 1), 3, 0, cctx).unwrap();
        c.post_send(to, pattern(10, 2), 3, 0, cctx).unwrap();
        let d = finish(&s, s.post_recv(back, 10, 3, 0, sctx).unwrap(), sctx);
        assert!(
            matches!(d.result, Err(BmiError::Truncated { len, expected: 10 }) if len == n as u64),
            "{:?}",
            d.result
        );
        let d = finish(&s, s.post_recv(back, 10, 3, 0, sctx).unwrap(), sctx);
        assert!(d.data.unwrap() == pattern(10, 2));
    }
    // Cancel a receive nobody sends to.
    let Posted::Pending(op) = s.post_recv(back, 10, 99, 0, sctx).unwrap() else {
        panic!("nothing was sent with tag 99")
    };
    s.cancel(op, sctx).unwrap();
    let d = s.test(op, sctx, WAIT).unwrap().unwrap();
    assert_eq!(d.result, Err(BmiError::Cancelled));
    assert!(
        s.test(op, sctx, Duration::ZERO).is_err(),
        "a finished operation is forgotten"
    );
    // Unknown contexts and addresses.
    assert!(s.post_recv(back, 1, 1, 0, 77).is_err());
    assert!(s.post_recv(12345, 1, 1, 0, sctx).is_err());
    // Dropping an address cancels its receives; the handle is gone after.
    let Posted::Pending(op) = s.post_recv(back, 10, 98, 0, sctx).unwrap() else {
        panic!("nothing was sent with tag 98")
    };
    s.drop_addr(back).unwrap();
    assert_eq!(
        s.test(op, sctx, WAIT).unwrap().unwrap().result,
        Err(BmiError::Cancelled)
    );
    assert!(matches!(
        s.post_recv(back, 1, 1, 0, sctx),
        Err(BmiError::UnknownAddress(_))
    ));
    // Still usable: a new message from the client makes a new handle.
    let again = s_peer(&s, &c, to, cctx);
    assert_ne!(again, back);
    c.post_send(to, pattern(10, 3), 5, 0, cctx).unwrap();
    let d = finish(&s, s.post_recv(again, 10, 5, 0, sctx).unwrap(), sctx);
    assert!(d.data.unwrap() == pattern(10, 3));
}

#[test]
fn a_peer_that_ends_fails_pending_operations() {
    let (s, saddr) = server();
    let sctx = s.open_context();
    let back;
    {
        let c = client();
        let cctx = c.open_context();
        let to = c.addr_lookup(&saddr).unwrap();
        back = s_peer(&s, &c, to, cctx);
    }
    // The client finalized (dropped): the server's receive from it fails
    // with the peer's end, in bounded time.
    let p = s.post_recv(back, 10, 1, 0, sctx);
    let r = match p {
        Err(e) => Err(e),
        Ok(p) => finish(&s, p, sctx).result,
    };
    assert!(
        matches!(
            r,
            Err(BmiError::PeerClosed(_)) | Err(BmiError::PeerFailed { .. })
        ),
        "{r:?}"
    );
    // Later posts to it fail at once.
    assert!(s.post_send(back, vec![1u8], 1, 0, sctx).is_err());
    // A receive that was pending when the peer went.
    let c = client();
    let cctx = c.open_context();
    let to = c.addr_lookup(&saddr).unwrap();
    let back = s_peer(&s, &c, to, cctx);
    let Posted::Pending(op) = s.post_recv(back, 10, 1, 0, sctx).unwrap() else {
        panic!("nothing sent")
    };
    drop(c);
    let d = s
        .test(op, sctx, WAIT)
        .unwrap()
        .expect("fails within the wait");
    assert!(matches!(
        d.result,
        Err(BmiError::PeerClosed(_)) | Err(BmiError::PeerFailed { .. })
    ));
}

#[test]
fn what_a_client_sent_before_it_ended_is_still_received() {
    let (s, saddr) = server();
    let sctx = s.open_context();
    let c = client();
    let cctx = c.open_context();
    let to = c.addr_lookup(&saddr).unwrap();
    let back = s_peer(&s, &c, to, cctx);
    // A receive of another tag learns of the client's end.
    let Posted::Pending(watch) = s.post_recv(back, 8, 9, 0, sctx).unwrap() else {
        panic!("nothing was sent with tag 9")
    };
    let body = pattern(100, 3);
    finish(&c, c.post_send(to, body.clone(), 3, 0, cctx).unwrap(), cctx);
    drop(c);
    let d = s.test(watch, sctx, WAIT).unwrap().expect("the end is seen");
    assert!(matches!(d.result, Err(BmiError::PeerClosed(_))), "{d:?}");
    // The message it sent before it ended is the server's to receive.
    let d = finish(&s, s.post_recv(back, 100, 3, 0, sctx).unwrap(), sctx);
    assert_eq!(d.result, Ok(100));
    assert_eq!(d.data.as_deref(), Some(&body[..]));
    // Past it, receives from the client fail with its end.
    let r = match s.post_recv(back, 100, 3, 0, sctx) {
        Err(e) => Err(e),
        Ok(p) => finish(&s, p, sctx).result,
    };
    assert!(matches!(r, Err(BmiError::PeerClosed(_))), "{r:?}");
}

#[test]
fn testcontext_and_testsome_report_each_completion_once() {
    let (s, saddr) = server();
    let c = client();
    let sctx = s.open_context();
    let other = s.open_context();
    let cctx = c.open_context();
    let to = c.addr_lookup(&saddr).unwrap();
    let back = s_peer(&s, &c, to, cctx);
    let ops: Vec<i64> = (0..8)
        .map(
            |i| match s.post_recv(back, 100, 10 + i, i as usize, sctx).unwrap() {
                Posted::Pending(op) => op,
                Posted::Now(_) => panic!("nothing sent yet"),
            },
        )
        .collect();
    let Posted::Pending(elsewhere) = s.post_recv(back, 100, 50, 0, other).unwrap() else {
        panic!()
    };
    for i in (0..8).rev() {
        c.post_send(to, vec![i as u8; 10], 10 + i, 0, cctx).unwrap();
    }
    // testsome reports only the operations it is given, with their index.
    let mut first = std::collections::BTreeSet::new();
    while first.len() < 4 {
        let got = s.testsome(&ops[..4], sctx, WAIT).unwrap();
        assert!(!got.is_empty(), "testsome found nothing in {WAIT:?}");
        for (i, d) in got {
            assert_eq!(d.user, i);
            assert_eq!(d.data.unwrap(), vec![i as u8; 10]);
            assert!(first.insert(i), "operation {i} reported twice");
        }
    }
    // testcontext reports the rest, at most as many as asked each time.
    let mut rest = std::collections::BTreeSet::new();
    while rest.len() < 4 {
        let got = s.testcontext(3, sctx, WAIT).unwrap();
        assert!((1..=3).contains(&got.len()), "{} completions", got.len());
        for d in got {
            assert_eq!(d.data.unwrap(), vec![d.user as u8; 10]);
            assert!(rest.insert(d.user), "operation {} reported twice", d.user);
        }
    }
    assert_eq!(rest.into_iter().collect::<Vec<_>>(), vec![4, 5, 6, 7]);
    // The other context's operation is not in this one's.
    assert!(s.test(elsewhere, sctx, Duration::ZERO).is_err());
    s.close_context(other).unwrap();
    assert!(s.test(elsewhere, other, Duration::ZERO).is_err());
}
