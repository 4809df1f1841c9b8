//! Running the job: starts the processes, serves the bootstrap, watches
//! exits and signals, and stops everything when one node fails.
//!
//! One thread (the caller of [`run`]) owns the [`BootServer`] and the
//! process table; the bootstrap connections, the child waits, the output
//! pipes and the signal handler each have threads that only send
//! [`Event`]s to it.

use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use deck::boot::{BootNotice, BootServer, Incoming};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::forward::{self, Stream};

/// After ABORT, how long the nodes have to exit by themselves before
/// SIGTERM.
const ABORT_GRACE: Duration = Duration::from_secs(3);
/// After SIGTERM, how long before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(2);
/// After SIGKILL, how long deckrun waits for the exits before it gives up.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Once every process has exited, how long deckrun waits for output still
/// in the pipes (a stray grandchild could hold one open for ever).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// deckrun's status when it was interrupted (SIGINT, SIGTERM, SIGHUP)
/// before any node failed: 128 + SIGINT, as a shell reports Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;
/// deckrun's status when it stopped the job itself (a node never
/// connected, could not be started, or left a bootstrap round unfinished).
pub const EXIT_LAUNCHER: i32 = 1;

/// What the threads tell the owner of the job.
pub enum Event {
    /// A bootstrap connection read something.
    Boot(Incoming),
    /// A process (a local node, or the agent of a remote one) exited.
    Exited {
        node: u32,
        status: io::Result<ExitStatus>,
    },
    /// deckrun got SIGINT, SIGTERM or SIGHUP.
    Interrupted,
    /// An output pipe reached end of file.
    OutputDone,
}

/// One node to start.
pub struct NodeLaunch {
    pub node: u32,
    pub host: String,
    /// The node's program, or the agent that starts it on its host.
    pub command: Command,
    /// What the command is, for messages: the program or the agent.
    pub what: String,
}

/// A process of the job.
struct Proc {
    host: String,
    /// Process id and group id (each child leads a group of its own).
    pid: Option<u32>,
    running: bool,
}

/// Where the teardown is.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Running,
    /// ABORT sent; SIGTERM at `term_at`.
    Aborting {
        term_at: Instant,
    },
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Terminating {
        kill_at: Instant,
    },
    /// SIGKILL sent; deckrun gives up waiting at `give_up_at`.
    Killing {
        give_up_at: Instant,
    },
}

struct Job {
    server: BootServer,
    procs: Vec<Proc>,
    phase: Phase,
    /// deckrun's exit status once something failed.
    failure: Option<i32>,
    boot_deadline: Instant,
    boot_timeout: Duration,
    /// Output pipes not yet at end of file.
    pipes: usize,
}

/// Starts every node and runs the job to its end; returns deckrun's exit
/// status.
pub fn run(
    server: BootServer,
    nodes: Vec<NodeLaunch>,
    boot_timeout: Duration,
    tx: Sender<Event>,
    rx: Receiver<Event>,
) -> i32 {
    let start = Instant::now();
    let mut job = Job {
        server,
        procs: Vec::with_capacity(nodes.len()),
        phase: Phase::Running,
        failure: None,
        boot_deadline: start + boot_timeout,
        boot_timeout,
        pipes: 0,
    };
    for launch in nodes {
        let node = launch.node;
        match spawn(launch, &tx, &mut job.procs) {
            Ok(n) => job.pipes += n,
            Err(msg) => {
                job.fail(EXIT_LAUNCHER, node, &msg);
                break;
            }
        }
    }
    job.event_loop(&rx);
    // Output still in the pipes of processes that exited.
    let drain_until = Instant::now() + DRAIN_GRACE;
    while job.pipes > 0 {
        let left = drain_until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::OutputDone) => job.pipes -= 1,
            Ok(Event::Boot(i)) => drop(job.server.handle(i)),
            Ok(_) => {}
            Err(_) => {
                let pipes = job.pipes;
                tracing::debug!("{pipes} output pipes still open; not waiting for them");
                break;
            }
        }
    }
    job.failure.unwrap_or(0)
}

/// Starts one node's process in a process group of its own, with threads
/// forwarding its output and waiting for its exit; returns the number of
/// pipes to wait for, or the message to stop the job with.
fn spawn(
    mut launch: NodeLaunch,
    tx: &Sender<Event>,
    procs: &mut Vec<Proc>,
) -> Result<usize, String> {
    let node = launch.node;
    // stdin: none (nodes run unattended; a remote shell must not wait
    // for the terminal). Own group: a Ctrl-C meant for deckrun does not
    // reach the nodes directly, deckrun stops them in order.
    let spawned = launch
        .command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            return Err(format!(
                "cannot start node {node} on {} ({}): {e}",
                launch.host, launch.what
            ))
        }
    };
    let pid = child.id();
    tracing::debug!(node, pid, host = %launch.host, "started");
    procs.push(Proc {
        host: launch.host,
        pid: Some(pid),
        running: true,
    });
    let mut pipes = 0;
    let outputs = [
        child
            .stdout
            .take()
            .map(|p| (Box::new(p) as Box<dyn io::Read + Send>, Stream::Stdout)),
        child
            .stderr
            .take()
            .map(|p| (Box::new(p) as Box<dyn io::Read + Send>, Stream::Stderr)),
    ];
    for (pipe, stream) in outputs.into_iter().flatten() {
        match forward::start(node, pipe, stream, tx.clone()) {
            Ok(()) => pipes += 1,
            Err(e) => tracing::warn!("node {node}: cannot forward its {stream:?}: {e}"),
        }
    }
    let tx = tx.clone();
    let waiter = thread::Builder::new()
        .name(format!("deckrun-wait-{node}"))
        .spawn(move || {
            let status = child.wait();
            let _ = tx.send(Event::Exited { node, status });
        });
    if let Err(e) = waiter {
        // Without a waiter the exit would go unnoticed: stop now.
        return Err(format!(
            "node {node}: cannot start a thread to wait for it: {e}"
        ));
    }
    Ok(pipes)
}

/// Writes one of deckrun's own lines to stderr (never panics: stderr may
/// be closed).
pub fn say(line: &str) {
    let _ = writeln!(io::stderr().lock(), "deckrun: {line}");
}

/// deckrun's exit status for a process's status: its code, or 128 + the
/// signal that killed it; None for success.
fn failure_code(status: &ExitStatus) -> Option<i32> {
    match (status.code(), status.signal()) {
        (Some(0), _) => None,
        (Some(c), _) => Some(c),
        (None, Some(sig)) => Some(128 + sig),
        (None, None) => Some(EXIT_LAUNCHER),
    }
}

/// How a process ended, in words: "exited with status 2", "was killed by
/// signal 9 (SIGKILL)".
fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("was killed by signal {sig} ({})", s.as_str()),
            Err(_) => format!("was killed by signal {sig}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Job {
    fn running(&self) -> usize {
        self.procs.iter().filter(|p| p.running).count()
    }

    fn event_loop(&mut self, rx: &Receiver<Event>) {
        while self.running() > 0 {
            let event = match self.deadline() {
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            match event {
                Ok(Event::Boot(incoming)) => {
                    if let Some(notice) = self.server.handle(incoming) {
                        self.notice(notice);
                    }
                    self.check_rounds();
                }
                Ok(Event::Exited { node, status }) => self.exited(node, status),
                Ok(Event::Interrupted) => self.interrupted(),
                Ok(Event::OutputDone) => self.pipes -= 1,
                Err(RecvTimeoutError::Timeout) => {
                    if !self.on_deadline() {
                        return;
                    }
                }
                // Cannot happen while `run` holds a sender; nothing more
                // would ever arrive.
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// The next time something must happen without an event.
    fn deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => {
                let waiting = (0..self.procs.len() as u32)
                    .any(|n| self.procs[n as usize].running && !self.server.is_connected(n));
                waiting.then_some(self.boot_deadline)
            }
            Phase::Aborting { term_at } => Some(term_at),
            Phase::Terminating { kill_at } => Some(kill_at),
            Phase::Killing { give_up_at } => Some(give_up_at),
        }
    }

    /// Acts on a passed deadline; false: give up waiting.
    fn on_deadline(&mut self) -> bool {
        let now = Instant::now();
        match self.phase {
            Phase::Running => {
                if now < self.boot_deadline {
                    return true;
                }
                let missing: Vec<String> = (0..self.procs.len() as u32)
                    .filter(|&n| self.procs[n as usize].running && !self.server.is_connected(n))
                    .map(|n| format!("node {n} on {}", self.procs[n as usize].host))
                    .collect();
                if missing.is_empty() {
                    return true;
                }
                let what = format!(
                    "{} did not connect to deckrun within {:?} (does the program call deck_init?)",
                    missing.join(", "),
                    self.boot_timeout
                );
                say(&format!("{what}; stopping the job"));
                self.stop(EXIT_LAUNCHER, &what);
            }
            Phase::Aborting { term_at } if now >= term_at => {
                self.signal_all(Signal::SIGTERM);
                self.phase = Phase::Terminating {
                    kill_at: now + TERM_GRACE,
                };
            }
            Phase::Terminating { kill_at } if now >= kill_at => self.kill_all(),
            Phase::Killing { give_up_at } if now >= give_up_at => {
                let left: Vec<String> = self
                    .procs
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.running)
                    .map(|(n, p)| format!("node {n} (pid {})", p.pid.unwrap_or(0)))
                    .collect();
                say(&format!(
                    "still running {KILL_WAIT:?} after SIGKILL, not waiting any longer: {}",
                    left.join(", ")
                ));
                return false;
            }
            _ => {}
        }
        true
    }

    fn notice(&mut self, notice: BootNotice) {
        match notice {
            BootNotice::Connected { node, peer } => tracing::debug!(node, %peer, "connected"),
            BootNotice::RoundComplete { round } => tracing::debug!(round, "round complete"),
            BootNotice::Finished { node } => tracing::debug!(node, "finished"),
            BootNotice::Closed {
                node,
                finished,
                error,
            } => tracing::debug!(node, finished, ?error, "bootstrap connection closed"),
        }
    }

    fn exited(&mut self, node: u32, status: io::Result<ExitStatus>) {
        let Some(p) = self.procs.get_mut(node as usize) else {
            return;
        };
        p.running = false;
        let host = p.host.clone();
        if !matches!(self.phase, Phase::Running) {
            tracing::debug!(node, ?status, "exited during the teardown");
            return;
        }
        let (code, how) = match &status {
            Ok(s) => (failure_code(s), describe(s)),
            Err(e) => (
                Some(EXIT_LAUNCHER),
                format!("could not be waited for ({e})"),
            ),
        };
        match code {
            Some(code) => self.fail(code, node, &format!("node {node} on {host} {how}")),
            None => {
                tracing::debug!(node, "exited with status 0");
                if self.server.is_connected(node) && !self.server.is_finished(node) {
                    say(&format!(
                        "warning: node {node} on {host} exited without calling deck_done"
                    ));
                }
                self.check_rounds();
            }
        }
    }

    /// A bootstrap round waits for a node that has exited: it can never
    /// complete, so the job cannot go on.
    fn check_rounds(&mut self) {
        if !matches!(self.phase, Phase::Running) {
            return;
        }
        let stuck = (0..self.procs.len() as u32).find_map(|n| {
            let gone = !self.procs[n as usize].running;
            gone.then(|| self.server.missing_card(n).map(|r| (n, r)))
                .flatten()
        });
        if let Some((node, round)) = stuck {
            let host = self.procs[node as usize].host.clone();
            let what =
                format!("node {node} on {host} exited before bootstrap round {round} was complete");
            self.fail(EXIT_LAUNCHER, node, &what);
        }
    }

    /// Reports `what` (about `node`), then stops the job with `code`.
    fn fail(&mut self, code: i32, node: u32, what: &str) {
        if !matches!(self.phase, Phase::Running) {
            return;
        }
        let others = self
            .procs
            .iter()
            .enumerate()
            .filter(|&(n, p)| p.running && n != node as usize)
            .count();
        if others == 0 {
            say(what);
        } else {
            let procs = plural(others, "process", "processes");
            say(&format!("{what}; stopping the other {procs}"));
        }
        self.stop(code, what);
    }

    fn interrupted(&mut self) {
        match self.phase {
            Phase::Running => {
                let procs = plural(self.running(), "process", "processes");
                say(&format!("interrupted; stopping the {procs}"));
                self.stop(EXIT_INTERRUPTED, "deckrun was interrupted");
            }
            // Interrupted again: no more patience.
            Phase::Aborting { .. } | Phase::Terminating { .. } => self.kill_all(),
            Phase::Killing { .. } => {}
        }
    }

    /// ABORT to the connected nodes (they exit by themselves), SIGTERM at
    /// once to the processes no ABORT reaches.
    fn stop(&mut self, code: i32, reason: &str) {
        if !matches!(self.phase, Phase::Running) {
            return;
        }
        self.failure.get_or_insert(code);
        let told = self.server.abort(reason);
        let mut waiting = false;
        for (n, p) in self.procs.iter().enumerate() {
            if !p.running {
                continue;
            }
            if told.contains(&(n as u32)) {
                waiting = true;
            } else {
                signal(n, p, Signal::SIGTERM);
            }
        }
        let now = Instant::now();
        self.phase = if waiting {
            Phase::Aborting {
                term_at: now + ABORT_GRACE,
            }
        } else {
            Phase::Terminating {
                kill_at: now + TERM_GRACE,
            }
        };
    }

    fn signal_all(&self, sig: Signal) {
        for (n, p) in self.procs.iter().enumerate().filter(|(_, p)| p.running) {
            signal(n, p, sig);
        }
    }

    fn kill_all(&mut self) {
        self.signal_all(Signal::SIGKILL);
        self.phase = Phase::Killing {
            give_up_at: Instant::now() + KILL_WAIT,
        };
    }
}

/// Signals the process group a child leads (the child and whatever it
/// started in its group).
fn signal(node: usize, p: &Proc, sig: Signal) {
    let Some(pid) = p.pid.and_then(|pid| i32::try_from(pid).ok()) else {
        return;
    };
    tracing::debug!(node, pid, %sig, "signalling process group");
    if let Err(e) = killpg(Pid::from_raw(pid), sig) {
        // ESRCH: it exited meanwhile.
        tracing::debug!(node, pid, "killpg: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_exit_codes() {
        let exited = |c: i32| ExitStatus::from_raw(c << 8);
        assert_eq!(failure_code(&exited(0)), None);
        assert_eq!(failure_code(&exited(7)), Some(7));
        assert_eq!(failure_code(&ExitStatus::from_raw(9)), Some(137));
        assert_eq!(describe(&exited(2)), "exited with status 2");
        assert_eq!(
            describe(&ExitStatus::from_raw(9)),
            "was killed by signal 9 (SIGKILL)"
        );
    }
}
