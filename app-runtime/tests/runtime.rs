//! Two runtimes of one job over TCP on loopback: the pump routes a
//! message into the receiver's state, the waiter finds it there, a timeout
//! gives `None`, the background thread makes progress for an application
//! that does not call, and a peer's end is in the table with its cause.

use std::sync::Arc;
use std::time::Duration;

use app_runtime::{Api, Cx, Options, Ranks, Runtime};
use msg_layer::transport::TransportSpec;
use msg_layer::{Endpoint, Event};

const HANDLER: u16 = 0x7e57;

#[derive(Default)]
struct Inbox {
    got: Vec<(u32, Vec<u8>)>,
    ends: u32,
}

impl Api for Inbox {
    fn route(&mut self, cx: &mut Cx<'_>, ev: Event) {
        match ev {
            Event::Message(m) => {
                let from = cx.ranks().rank(m.peer).expect("a rank of the job");
                self.got.push((from, m.data().to_vec()));
                cx.recycle(m);
            }
            Event::PeerEnded { peer, .. } => {
                assert!(cx.ended(peer).is_some(), "noted before routing");
                self.ends += 1;
            }
            _ => {}
        }
    }
}

fn job() -> Vec<Arc<Runtime<Inbox>>> {
    let spec: TransportSpec = "tcp://127.0.0.1:0".parse().expect("spec");
    let eps: Vec<_> = (0..2)
        .map(|_| Endpoint::new(spec.open().expect("open"), msg_layer::Config::default()))
        .collect::<Result<_, _>>()
        .expect("endpoints");
    let addrs: Vec<_> = eps.iter().map(|e| e.local_addr()).collect();
    eps.into_iter()
        .enumerate()
        .map(|(i, ep)| {
            let ranks = Ranks::connect(&ep, i as u32, &addrs).expect("peers");
            Arc::new(
                Runtime::with_endpoint(ep, ranks, Inbox::default(), Options::default())
                    .expect("runtime"),
            )
        })
        .collect()
}

#[test]
fn a_message_reaches_the_state_and_an_end_the_table() {
    let rts = job();
    let (a, b) = (&rts[0], &rts[1]);
    let peer = a.ranks().peer(1).expect("rank 1");
    a.ep(0)
        .unwrap()
        .am_post(peer, HANDLER, &b"hello"[..])
        .expect("post");
    // The sender must make progress too: its background thread does.
    let _bg = a.start_background("test-bg").expect("thread");
    let got = b
        .wait_for(Some(Duration::from_secs(10)), |st| st.got.pop())
        .expect("no transport error");
    assert_eq!(got, Some((0, b"hello".to_vec())));
    let none = b
        .wait_for(Some(Duration::from_millis(20)), |st| st.got.pop())
        .expect("no transport error");
    assert_eq!(none, None, "nothing more came");
    assert!(
        a.background_rounds() > 0,
        "the background thread made rounds"
    );
    a.stop_background();
    a.ep(0)
        .unwrap()
        .close(Duration::from_secs(2))
        .expect("close");
    let ended = b
        .wait_for(Some(Duration::from_secs(20)), |st| {
            (st.ends > 0).then_some(())
        })
        .expect("no transport error");
    assert_eq!(ended, Some(()), "rank 0's end was routed");
    let cause = b.rank_ended(0).expect("rank 0 is in the table");
    assert!(app_runtime::peers::orderly(&cause), "{cause}");
    assert!(b.rank_ended(1).is_none());
}
