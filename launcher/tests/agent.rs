//! Processes started on the simulated hosts of a `testbed::Cluster`
//! through its rsh agent, as on other machines through ssh: the words and
//! the environment survive the remote shell, stdin and stdout are piped
//! through the agent, and the teardown reaches the process behind the
//! agent. Root only.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use launcher::{Event, Job, Launch, Output, Start};
use testbed::process::running;
use testbed::Cluster;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn processes_start_through_the_agent_and_stop_with_the_job() {
    testbed::require_root!();
    let cluster = Cluster::new(2, 1500).unwrap();
    let agent = Start::Agent {
        program: cluster.agent().into(),
        options: Vec::new(),
    };
    let mut job = Job::<Infallible>::new("test");
    for (node, host) in ["h0", "h1"].into_iter().enumerate() {
        let mut launch = Launch::new(node as u32, host, agent.clone(), "/bin/sh");
        launch.args = vec![
            "-c".into(),
            r#"echo "$(cat /proc/sys/kernel/hostname) $MSG"; read x; echo "got $x"; echo $$; exec sleep 60"#.into(),
        ];
        launch.env = vec![("MSG".into(), "it's \"$HOME\" a  b".into())];
        launch.stdin = true;
        launch.stdout = Output::Lines;
        job.spawn(launch).unwrap();
    }
    let deadline = Instant::now() + WAIT;
    let mut lines: Vec<Vec<String>> = vec![Vec::new(); 2];
    let mut pids = Vec::new();
    while pids.len() < 2 {
        match job.next(Some(deadline)) {
            Some(Event::Line { node, line, .. }) => {
                let n = node as usize;
                lines[n].push(line);
                match lines[n].len() {
                    1 => job.write_line(node, &format!("x  {node}")).unwrap(),
                    3 => pids.push(lines[n][2].parse::<u32>().unwrap()),
                    _ => {}
                }
            }
            other => panic!("{other:?} while waiting for the hosts: {lines:?}"),
        }
    }
    for (node, host) in ["h0", "h1"].into_iter().enumerate() {
        assert_eq!(
            lines[node][..2],
            [
                format!("{host} it's \"$HOME\" a  b"),
                format!("got x  {node}")
            ],
            "{lines:?}"
        );
    }
    // SIGTERM to the agents' groups ends the sleeps behind them.
    job.stop(0, "done", |_| Vec::new());
    while let Some(event) = job.next(None) {
        assert!(
            matches!(event, Event::Line { .. }),
            "{event:?} during the teardown"
        );
    }
    // Not the launcher's children: no event tells their end, poll /proc.
    let deadline = Instant::now() + WAIT;
    while pids.iter().any(|&p| running(p)) {
        assert!(Instant::now() < deadline, "still running: {pids:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(job.status(), 0);
}
