//! Jobs of local `sh` processes: what the owner hears, stdin pipes, the
//! teardown's order (graceful step, SIGTERM, SIGKILL), interrupts, and
//! the end of a dropped job. Every wait is bounded: the owner's waits by a
//! deadline, the teardown by its graces.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::time::{Duration, Instant};

use launcher::status::EXIT_INTERRUPTED;
use launcher::{Error, Event, Graces, Job, Launch, Output, Start, Stream};

/// Bound on every test's wait for an event.
const WAIT: Duration = Duration::from_secs(30);

/// `sh -c SCRIPT` as node `node`, here, its output handed back as lines.
fn sh(node: u32, script: &str) -> Launch {
    let mut launch = Launch::new(node, "here", Start::Local, "/bin/sh");
    launch.args = vec!["-c".into(), script.into()];
    launch.stdout = Output::Lines;
    launch.stderr = Output::Lines;
    launch
}

/// What a job said until its end.
#[derive(Default, Debug)]
struct Heard {
    lines: Vec<(u32, Stream, String)>,
    exits: BTreeMap<u32, i32>,
}

impl Heard {
    fn stdout(&self, node: u32) -> Vec<&str> {
        self.lines
            .iter()
            .filter(|(n, s, _)| *n == node && *s == Stream::Stdout)
            .map(|(_, _, l)| l.as_str())
            .collect()
    }
}

/// Runs the job to its end, judging exits the usual way (no graceful
/// step); panics if the job outlives [`WAIT`].
fn run_to_end(job: &mut Job<Infallible>) -> Heard {
    let mut heard = Heard::default();
    let deadline = Instant::now() + WAIT;
    while let Some(event) = job.next(Some(deadline)) {
        match event {
            Event::Line { node, stream, line } => heard.lines.push((node, stream, line)),
            Event::Exited { node, status } => {
                let code = status.as_ref().unwrap().code().unwrap_or(-1);
                heard.exits.insert(node, code);
                job.exit_failed(node, &status, |_| Vec::new());
            }
            Event::Interrupted => panic!("interrupted"),
            Event::Timeout => panic!("the job still runs after {WAIT:?}: {heard:?}"),
            Event::Owner(never) => match never {},
        }
    }
    heard
}

/// Waits (bounded) for a line of `node` and returns it, dropping other
/// nodes' lines: for jobs of one node ([`first_lines`] otherwise).
fn line_of(job: &mut Job<Infallible>, node: u32) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match job.next(Some(deadline)) {
            Some(Event::Line { node: n, line, .. }) if n == node => return line,
            Some(Event::Line { .. }) => {}
            other => panic!("waiting for a line of node {node}: {other:?}"),
        }
    }
}

/// Waits (bounded) for the first line of each of `nodes`, in whatever
/// order they come.
fn first_lines(job: &mut Job<Infallible>, nodes: &[u32]) -> BTreeMap<u32, String> {
    let deadline = Instant::now() + WAIT;
    let mut got = BTreeMap::new();
    while got.len() < nodes.len() {
        match job.next(Some(deadline)) {
            Some(Event::Line { node, line, .. }) if nodes.contains(&node) => {
                got.entry(node).or_insert(line);
            }
            Some(Event::Line { .. }) => {}
            other => panic!("waiting for a line of each of {nodes:?}: {other:?} ({got:?})"),
        }
    }
    got
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn lines_and_stdin_pipes_reach_the_owner() {
    let mut job = Job::<Infallible>::new("test");
    for node in 0..2 {
        let mut launch = sh(node, r#"read x; echo "got $x from $N"; echo oops >&2"#);
        launch.env = vec![("N".into(), node.to_string().into())];
        launch.stdin = true;
        job.spawn(launch).unwrap();
    }
    assert_eq!(job.nodes(), [0, 1]);
    assert_eq!(job.host(1), Some("here"));
    job.write_line(0, "a b").unwrap();
    job.write_line(1, "c").unwrap();
    let heard = run_to_end(&mut job);
    assert_eq!(heard.stdout(0), ["got a b from 0"], "{heard:?}");
    assert_eq!(heard.stdout(1), ["got c from 1"], "{heard:?}");
    for node in 0..2 {
        assert!(heard
            .lines
            .contains(&(node, Stream::Stderr, "oops".to_owned())));
    }
    assert_eq!(heard.exits, BTreeMap::from([(0, 0), (1, 0)]));
    assert_eq!(job.status(), 0);
    assert!(!job.stopping());
    // A process without a pipe.
    let e = job.write_line(7, "x").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
}

#[test]
fn the_owners_deadline_passes_then_a_closed_stdin_ends_the_process() {
    let mut job = Job::<Infallible>::new("test");
    let mut launch = sh(0, "read x; echo read $?");
    launch.stdin = true;
    job.spawn(launch).unwrap();
    let soon = Instant::now() + Duration::from_millis(50);
    assert!(matches!(job.next(Some(soon)), Some(Event::Timeout)));
    assert!(job.is_running(0));
    job.close_stdin(0);
    let heard = run_to_end(&mut job);
    // `read` at end of file fails.
    assert_eq!(heard.stdout(0), ["read 1"]);
    assert!(!job.is_running(0));
}

#[test]
fn a_failure_stops_the_others_with_its_status() {
    let mut job = Job::<Infallible>::new("test");
    job.spawn(sh(0, "echo $$; exec sleep 60")).unwrap();
    let pid: u32 = line_of(&mut job, 0).parse().unwrap();
    job.spawn(sh(1, "exit 3")).unwrap();
    let start = Instant::now();
    let heard = run_to_end(&mut job);
    assert_eq!(job.status(), 3);
    assert!(job.stopping());
    // Node 0 got SIGTERM at once (the graceful step reached nobody): its
    // exit, during the teardown, is the launcher's.
    assert_eq!(heard.exits, BTreeMap::from([(1, 3)]));
    assert!(start.elapsed() < WAIT, "{:?}", start.elapsed());
    assert!(gone(pid));
}

#[test]
fn the_graceful_step_comes_first_then_sigterm_then_sigkill() {
    let graces = Graces {
        ask: Duration::from_millis(300),
        term: Duration::from_millis(300),
        ..Graces::default()
    };
    let mut job = Job::<Infallible>::new("test").with_graces(graces);
    // Node 0 ignores SIGTERM (and so does the sleep it becomes).
    job.spawn(sh(0, r#"trap "" TERM; echo $$; exec sleep 60"#))
        .unwrap();
    let mut polite = sh(1, r#"echo ready; read x; echo "asked to $x""#);
    polite.stdin = true;
    job.spawn(polite).unwrap();
    // The two nodes' first lines may come in either order.
    let first = first_lines(&mut job, &[0, 1]);
    let pid: u32 = first[&0].parse().unwrap();
    assert_eq!(first[&1], "ready");

    let start = Instant::now();
    job.write_line(1, "end").unwrap();
    let mut asked = None;
    job.stop(5, "the test is over", |reason| {
        asked = Some(reason.to_owned());
        vec![0, 1]
    });
    assert_eq!(asked.as_deref(), Some("the test is over"));
    let heard = run_to_end(&mut job);
    let took = start.elapsed();
    assert_eq!(heard.stdout(1), ["asked to end"], "{heard:?}");
    // Node 0 outlived the graceful step and SIGTERM: SIGKILL ended it.
    assert!(took >= graces.ask + graces.term, "{took:?}");
    assert!(took < WAIT, "{took:?}");
    assert!(gone(pid));
    assert_eq!(job.status(), 5);
}

#[test]
fn interrupts_stop_the_job_and_a_second_one_kills() {
    let graces = Graces {
        ask: Duration::from_secs(60),
        ..Graces::default()
    };
    let mut job = Job::<Infallible>::new("test").with_graces(graces);
    job.spawn(sh(0, r#"trap "" TERM; echo $$; exec sleep 60"#))
        .unwrap();
    let pid: u32 = line_of(&mut job, 0).parse().unwrap();
    let sink = job.sink();
    sink.interrupt();
    let deadline = Instant::now() + WAIT;
    assert!(matches!(job.next(Some(deadline)), Some(Event::Interrupted)));
    // As if the graceful step reached node 0: it would get a minute.
    job.interrupted(|reason| {
        assert_eq!(reason, "test was interrupted");
        vec![0]
    });
    let start = Instant::now();
    sink.interrupt();
    run_to_end(&mut job);
    assert!(start.elapsed() < WAIT, "{:?}", start.elapsed());
    assert!(gone(pid));
    assert_eq!(job.status(), EXIT_INTERRUPTED);
}

#[test]
fn dropping_the_job_tears_it_down() {
    let mut job = Job::<Infallible>::new("test");
    job.spawn(sh(0, "echo $$; exec sleep 60")).unwrap();
    let pid: u32 = line_of(&mut job, 0).parse().unwrap();
    assert!(!gone(pid));
    drop(job);
    assert!(gone(pid));
}

#[test]
fn a_program_that_cannot_start_is_an_error() {
    let mut job = Job::<Infallible>::new("test");
    let e = job
        .spawn(Launch::new(0, "here", Start::Local, "/nonexistent/prog"))
        .unwrap_err();
    assert!(matches!(e, Error::Spawn { node: 0, .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("cannot start node 0 on here (/nonexistent/prog): "),
        "{e}"
    );
    assert!(job.next(None).is_none(), "nothing runs");
}
