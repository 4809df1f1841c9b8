use super::*;

#[test]
fn home_sets_are_spread_and_distinct() {
    for hosts in 1..20u32 {
        for t in 0..200u64 {
            let h = home_set(TaskId(t), hosts, 2);
            assert_eq!(h.len(), 2.min(hosts as usize));
            assert!(h.iter().all(|x| *x < hosts));
            if hosts > 1 {
                assert_ne!(h[0], h[1]);
            }
        }
    }
    // Every host is some task's home.
    let mut seen = HashSet::new();
    for t in 0..500u64 {
        seen.insert(home_set(TaskId(t), 16, 1)[0]);
    }
    assert_eq!(seen.len(), 16);
}

/// Nodes joined by per-pair FIFO queues; `step` moves one packet.
struct Net {
    nodes: Vec<Node>,
    wire: VecDeque<(HostId, HostId, Vec<u8>)>,
}

impl Net {
    fn new(n: u32, cfg: Config) -> Net {
        Net {
            nodes: (0..n).map(|h| Node::new(h, n, cfg.clone())).collect(),
            wire: VecDeque::new(),
        }
    }

    fn collect(&mut self) {
        for (h, n) in self.nodes.iter_mut().enumerate() {
            while let Some((to, b)) = n.poll_transmit() {
                self.wire.push_back((h as HostId, to, b));
            }
        }
    }

    /// Deliver everything (in global FIFO order).
    fn settle(&mut self) {
        self.collect();
        while let Some((from, to, b)) = self.wire.pop_front() {
            self.nodes[to as usize].receive(0, from, &b);
            self.collect();
        }
    }

    /// [`Net::settle`] with host `gone` failed: what goes to or from it is lost.
    fn settle_without(&mut self, gone: HostId) {
        self.collect();
        while let Some((from, to, b)) = self.wire.pop_front() {
            if from != gone && to != gone {
                self.nodes[to as usize].receive(0, from, &b);
            }
            self.collect();
        }
    }

    fn events(&mut self, h: usize) -> Vec<Event> {
        std::iter::from_fn(|| self.nodes[h].poll_event()).collect()
    }
}

/// A task whose home is not `avoid`.
fn task_homed_away(hosts: u32, avoid: &[HostId]) -> TaskId {
    (100..10_000)
        .map(TaskId)
        .find(|t| home_set(*t, hosts, 2).iter().all(|h| !avoid.contains(h)))
        .expect("such a task")
}

#[test]
fn a_stale_sender_learns_the_new_location_and_then_sends_direct() {
    let mut net = Net::new(8, Config::default());
    let a = TaskId(1);
    let b = task_homed_away(8, &[0, 1, 2]);
    net.nodes[0].spawn(a, vec![]).unwrap();
    net.nodes[1].spawn(b, vec![]).unwrap();
    net.settle();
    net.nodes[0].send(a, b, b"1".to_vec()).unwrap();
    net.settle();
    assert_eq!(net.nodes[0].location(b), Some(Loc { host: 1, fresh: 1 }));
    net.nodes[1].migrate(0, b, 2).unwrap();
    net.settle();
    // Host 0 still believes host 1: the message is forwarded once, and
    // host 2 tells host 0 where b is now.
    let before = net.nodes[1].stats().forwarded;
    net.nodes[0].send(a, b, b"2".to_vec()).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].stats().forwarded, before + 1);
    assert_eq!(net.nodes[0].location(b), Some(Loc { host: 2, fresh: 2 }));
    net.nodes[0].send(a, b, b"3".to_vec()).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].stats().forwarded, before + 1, "sent direct");
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| net.nodes[2].recv(b).unwrap())
        .map(|(_, p)| p)
        .collect();
    assert_eq!(got, vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
}

#[test]
fn the_home_holds_until_the_task_is_spawned() {
    let mut net = Net::new(8, Config::default());
    let a = TaskId(1);
    net.nodes[0].spawn(a, vec![]).unwrap();
    let b = task_homed_away(8, &[0, 3]);
    net.nodes[0].send(a, b, b"early".to_vec()).unwrap();
    net.settle();
    let held: usize = net.nodes.iter().map(Node::held_count).sum();
    assert_eq!(held, 1);
    net.nodes[3].spawn(b, vec![]).unwrap();
    net.settle();
    assert_eq!(net.nodes[3].recv(b).unwrap(), Some((a, b"early".to_vec())));
    assert_eq!(net.nodes.iter().map(Node::held_count).sum::<usize>(), 0);
}

#[test]
fn a_full_home_refuses_and_later_messages_still_arrive_in_order() {
    let cfg = Config {
        hold_bytes: 10,
        ..Config::default()
    };
    let mut net = Net::new(8, cfg);
    let a = TaskId(1);
    net.nodes[0].spawn(a, vec![]).unwrap();
    let b = task_homed_away(8, &[0, 3]);
    net.nodes[0].send(a, b, vec![1; 8]).unwrap();
    net.nodes[0].send(a, b, vec![2; 8]).unwrap(); // over the bound
    net.nodes[0].send(a, b, vec![3; 2]).unwrap();
    net.settle();
    assert_eq!(
        net.events(0),
        vec![Event::Refused {
            task: a,
            to: b,
            seq: 2,
            reason: RefuseReason::HomeFull
        }]
    );
    net.nodes[3].spawn(b, vec![]).unwrap();
    net.settle();
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| net.nodes[3].recv(b).unwrap())
        .map(|(_, p)| p)
        .collect();
    assert_eq!(got, vec![vec![1; 8], vec![3; 2]]);
}

#[test]
fn the_mailbox_and_the_resequencing_queue_travel_with_the_task() {
    let mut net = Net::new(3, Config::default());
    let (a, b) = (TaskId(1), TaskId(2));
    net.nodes[0].spawn(a, vec![]).unwrap();
    net.nodes[1].spawn(b, b"state".to_vec()).unwrap();
    net.settle();
    // Message 1 is delivered, 3 arrives ahead of 2 (hand-made reordering).
    net.nodes[0].send(a, b, b"1".to_vec()).unwrap();
    net.settle();
    net.nodes[0].send(a, b, b"2".to_vec()).unwrap();
    net.nodes[0].send(a, b, b"3".to_vec()).unwrap();
    net.collect();
    let two = net.wire.pop_front().unwrap();
    let three = net.wire.pop_front().unwrap();
    net.nodes[1].receive(0, three.0, &three.2);
    assert_eq!(net.nodes[1].queued(b), Some((1, 1)));
    net.nodes[1].migrate(0, b, 2).unwrap();
    // Message 2 reaches the old host after the task left.
    net.nodes[1].receive(0, two.0, &two.2);
    net.settle();
    assert_eq!(
        net.events(2),
        vec![Event::Arrived {
            task: b,
            app: b"state".to_vec(),
            started_ns: 0,
            migrations: 1
        }]
    );
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| net.nodes[2].recv(b).unwrap())
        .map(|(_, p)| p)
        .collect();
    assert_eq!(got, vec![b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]);
    assert_eq!(net.nodes[1].recv(b), Err(ProtoError::NotHere(b)));
}

#[test]
fn unacknowledged_messages_are_bounded_and_acks_release_them() {
    let cfg = Config {
        retain_bytes: 2 * (Inter::HEADER + 4),
        ..Config::default()
    };
    let mut net = Net::new(2, cfg);
    let (a, b) = (TaskId(1), TaskId(2));
    net.nodes[0].spawn(a, vec![]).unwrap();
    net.nodes[1].spawn(b, vec![]).unwrap();
    net.settle();
    net.nodes[0].send(a, b, vec![1; 4]).unwrap();
    net.nodes[0].send(a, b, vec![2; 4]).unwrap();
    let full = net.nodes[0].send(a, b, vec![3; 4]);
    assert!(matches!(full, Err(ProtoError::Unacked { .. })), "{full:?}");
    net.settle();
    // Delivered, but the ACK waits for its delay (batching).
    assert_eq!(net.nodes[0].unacked_count(), 2);
    let due = net.nodes[1].poll_timeout().expect("an ACK is due");
    net.nodes[1].handle_timeout(due);
    net.settle();
    assert_eq!(net.nodes[0].unacked_count(), 0);
    assert_eq!(net.nodes[1].stats().ack_sent, 1);
    assert_eq!(net.nodes[0].send(a, b, vec![3; 4]), Ok(3));
}

#[test]
fn a_message_held_at_a_home_that_fails_is_sent_again_and_arrives_once() {
    let mut net = Net::new(8, Config::default());
    let a = TaskId(1);
    net.nodes[0].spawn(a, vec![]).unwrap();
    let b = task_homed_away(8, &[0, 1]);
    let home = net.nodes[0].location(b).unwrap().host;
    net.nodes[0].send(a, b, b"early".to_vec()).unwrap();
    net.settle();
    assert_eq!(net.nodes[home as usize].held_count(), 1);
    // The home fails with the message; the others learn of it.
    for h in (0..8).filter(|h| *h != home) {
        net.nodes[h as usize].host_failed(1, home);
    }
    net.settle_without(home);
    net.nodes[1].spawn(b, vec![]).unwrap();
    net.settle_without(home);
    assert_eq!(net.nodes[1].recv(b).unwrap(), Some((a, b"early".to_vec())));
    assert_eq!(net.nodes[1].recv(b).unwrap(), None);
    assert_eq!(net.nodes[0].stats().resent, 1);
    assert!(net.events(1).is_empty(), "no gap");
}
