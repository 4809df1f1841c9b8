//! The runtime over the message layer (TCP on this host, so no privileges
//! needed): tasks streaming while they migrate, messages to a task not yet
//! started, and a host that goes away.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use migrate::{Config, Event, RefuseReason, Runtime, TaskId};
use msg_layer::transport::TransportSpec;

const DEADLINE: Duration = Duration::from_secs(60);

fn job(n: usize, cfg: Config) -> Vec<Runtime> {
    let specs: Vec<TransportSpec> = (0..n)
        .map(|_| "tcp://127.0.0.1:0".parse().expect("spec"))
        .collect();
    Runtime::in_process(&specs, cfg).expect("runtimes")
}

fn msg(src: u64, dst: u64, k: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [src, dst, k] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend(std::iter::repeat_n(
        (src * 31 + k) as u8,
        (k % 200) as usize,
    ));
    v
}

/// Where each task is, from the runtimes' own lists.
fn where_is(rts: &[Runtime]) -> HashMap<TaskId, usize> {
    let mut m = HashMap::new();
    for (h, rt) in rts.iter().enumerate() {
        for t in rt.tasks() {
            m.insert(t, h);
        }
    }
    m
}

#[test]
fn tasks_stream_while_they_migrate() {
    let rts = job(3, Config::default());
    let tasks = 6u64;
    for t in 0..tasks {
        rts[(t % 3) as usize].spawn(TaskId(t), Vec::new()).unwrap();
    }
    let mut sent: HashMap<(u64, u64), u64> = HashMap::new();
    let mut got: HashMap<(u64, u64), u64> = HashMap::new();
    let mut migrations = 0;
    let read = |rts: &[Runtime], got: &mut HashMap<(u64, u64), u64>| {
        for (task, h) in where_is(rts) {
            while let Some((from, data)) = rts[h].try_recv(task).unwrap() {
                let k = u64::from_le_bytes(data[16..24].try_into().unwrap());
                assert_eq!(data, msg(from.0, task.0, k), "content");
                let last = got.entry((from.0, task.0)).or_insert(0);
                assert_eq!(k, *last + 1, "{from} -> {task}: order");
                *last = k;
            }
        }
    };
    for step in 0..600u64 {
        let at = where_is(&rts);
        for t in 0..tasks {
            let Some(&h) = at.get(&TaskId(t)) else {
                continue;
            };
            let dst = (t + 1 + step % 2) % tasks;
            let k = sent.get(&(t, dst)).copied().unwrap_or(0) + 1;
            rts[h].send(TaskId(t), TaskId(dst), msg(t, dst, k)).unwrap();
            sent.insert((t, dst), k);
        }
        if step % 20 == 5 {
            let t = TaskId(step % tasks);
            if let Some(&h) = at.get(&t) {
                let to = (h + 1 + (step as usize / 20) % 2) % 3;
                rts[h]
                    .migrate(t, to as u32, step.to_le_bytes().to_vec())
                    .unwrap();
                migrations += 1;
            }
        }
        for rt in &rts {
            rt.progress().unwrap();
        }
        if step % 3 == 0 {
            read(&rts, &mut got);
        }
    }
    let start = Instant::now();
    while got != sent {
        assert!(start.elapsed() < DEADLINE, "not all delivered");
        for rt in &rts {
            rt.progress().unwrap();
        }
        read(&rts, &mut got);
    }
    assert!(migrations >= 25);
    let forwarded: u64 = rts.iter().map(|r| r.stats().forwarded).sum();
    let arrived = rts
        .iter()
        .flat_map(|r| std::iter::from_fn(|| r.poll_event()))
        .filter(|e| matches!(e, Event::Arrived { .. }))
        .count();
    assert_eq!(arrived, migrations);
    println!("{migrations} migrations, {forwarded} forwarded");
}

#[test]
fn a_message_waits_at_home_for_a_task_not_started_yet() {
    let rts = job(3, Config::default());
    rts[0].spawn(TaskId(1), Vec::new()).unwrap();
    rts[0]
        .send(TaskId(1), TaskId(77), b"early".to_vec())
        .unwrap();
    // Let it reach the home and wait there.
    let start = Instant::now();
    while rts.iter().map(|r| r.stats().held).sum::<u64>() == 0 {
        assert!(start.elapsed() < DEADLINE);
        for r in &rts {
            r.progress().unwrap();
        }
    }
    rts[2].spawn(TaskId(77), Vec::new()).unwrap();
    let got = loop {
        for r in &rts[..2] {
            r.progress().unwrap();
        }
        if let Some(m) = rts[2].try_recv(TaskId(77)).unwrap() {
            break m;
        }
        assert!(start.elapsed() < DEADLINE);
    };
    assert_eq!(got, (TaskId(1), b"early".to_vec()));
}

#[test]
fn senders_to_a_task_of_a_host_that_ended_are_told_in_bounded_time() {
    let cfg = Config {
        dead_wait_ns: 300_000_000,
        ..Config::default()
    };
    let mut rts = job(3, cfg);
    rts[0].spawn(TaskId(1), Vec::new()).unwrap();
    rts[2].spawn(TaskId(2), Vec::new()).unwrap();
    rts[0]
        .send(TaskId(1), TaskId(2), b"hello".to_vec())
        .unwrap();
    let start = Instant::now();
    let first = loop {
        for r in &rts[..2] {
            r.progress().unwrap();
        }
        if let Some(m) = rts[2].try_recv(TaskId(2)).unwrap() {
            break m;
        }
        assert!(start.elapsed() < DEADLINE);
    };
    assert_eq!(first.1, b"hello");
    // Task 2 answers, so host 0 knows where it is and talks to host 2
    // directly; then host 2 goes away with task 2.
    rts[2].send(TaskId(2), TaskId(1), b"hi".to_vec()).unwrap();
    let reply = loop {
        for r in &rts[1..] {
            r.progress().unwrap();
        }
        if let Some(m) = rts[0].try_recv(TaskId(1)).unwrap() {
            break m;
        }
        assert!(start.elapsed() < DEADLINE);
    };
    assert_eq!(reply, (TaskId(2), b"hi".to_vec()));
    let forwarded = rts[1].stats().forwarded;
    rts[0]
        .send(TaskId(1), TaskId(2), b"direct".to_vec())
        .unwrap();
    let direct = loop {
        rts[0].progress().unwrap();
        if let Some(m) = rts[2].try_recv(TaskId(2)).unwrap() {
            break m;
        }
        assert!(start.elapsed() < DEADLINE);
    };
    assert_eq!(direct.1, b"direct");
    assert_eq!(rts[1].stats().forwarded, forwarded, "sent direct");
    let gone = rts.pop().unwrap();
    gone.close(Duration::from_secs(5)).unwrap();
    drop(gone);
    // Host 0 learns its correspondent is gone.
    let lost = loop {
        rts[1].progress().unwrap();
        if let Some(e) = rts[0].poll_event() {
            break e;
        }
        assert!(start.elapsed() < DEADLINE, "host 0 never learned");
    };
    assert_eq!(
        lost,
        Event::PeerLost {
            task: TaskId(1),
            peer: TaskId(2)
        }
    );
    let sent_at = Instant::now();
    rts[0]
        .send(TaskId(1), TaskId(2), b"anyone?".to_vec())
        .unwrap();
    let ev = loop {
        rts[1].progress().unwrap();
        if let Some(e) = rts[0].poll_event() {
            break e;
        }
        assert!(sent_at.elapsed() < DEADLINE, "no refusal");
    };
    assert_eq!(
        ev,
        Event::Refused {
            task: TaskId(1),
            to: TaskId(2),
            seq: 3,
            reason: RefuseReason::TaskLost
        }
    );
    println!("refused after {:?}", sent_at.elapsed());
}
