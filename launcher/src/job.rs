//! A running job: its processes, what happens to them, and its teardown.
//!
//! The job's owner holds the [`Job`] and pulls [`Event`]s from it with
//! [`Job::next`]; threads (one per process waiting for its exit, one per
//! read output pipe, the owner's own through a [`Sink`], the signal
//! handler) only send to it. The launcher keeps the process table, the
//! exit status and the teardown's timers; the owner decides what an event
//! means for its job and, when the job cannot go on, calls [`Job::fail`]
//! or [`Job::stop`] with its graceful step (e.g. DECK's ABORT).
//!
//! The teardown: the processes the graceful step reached get
//! [`Graces::ask`] to exit by themselves, the others get SIGTERM at once;
//! SIGTERM to all after that grace, SIGKILL [`Graces::term`] later, and
//! [`Graces::kill_wait`] after that the launcher stops waiting. A second
//! interrupt skips to SIGKILL. Signals go to the process group each
//! process leads (it and whatever it started in its group: an agent's
//! chain of programs, or a shell's children).

use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::{ChildStdin, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::error::Error;
use crate::forward::{self, Sink as LineSink, Stream};
use crate::interrupt::{self, Registration};
use crate::start::{Launch, Output};
use crate::status::{self, EXIT_INTERRUPTED, EXIT_LAUNCHER};

/// The teardown's patience.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Graces {
    /// After the graceful step, how long the processes it reached have to
    /// exit by themselves before SIGTERM.
    pub ask: Duration,
    /// After SIGTERM, how long before SIGKILL.
    pub term: Duration,
    /// After SIGKILL, how long the launcher waits for the exits before it
    /// gives up.
    pub kill_wait: Duration,
    /// Once every process has exited, how long the launcher waits for
    /// output still in the pipes (a stray grandchild could hold one open
    /// for ever).
    pub drain: Duration,
}

impl Default for Graces {
    fn default() -> Graces {
        Graces {
            ask: Duration::from_secs(3),
            term: Duration::from_secs(2),
            kill_wait: Duration::from_secs(5),
            drain: Duration::from_secs(2),
        }
    }
}

/// What the job's owner hears of its job.
#[derive(Debug)]
pub enum Event<E> {
    /// One of the owner's own events, sent through its [`Sink`].
    Owner(E),
    /// A line of a process's output handed to the owner ([`Output::Lines`]),
    /// without its newline.
    Line {
        node: u32,
        stream: Stream,
        line: String,
    },
    /// A process (a local one, or the agent of a remote one) exited while
    /// the job ran: the owner judges it ([`Job::exit_failed`] is the usual
    /// judgement). Exits during the teardown are the launcher's.
    Exited {
        node: u32,
        status: io::Result<ExitStatus>,
    },
    /// The launcher got SIGINT, SIGTERM or SIGHUP ([`crate::catch_interrupts`])
    /// while the job ran; [`Job::interrupted`] is the usual answer.
    Interrupted,
    /// The owner's deadline passed with nothing else happening.
    Timeout,
}

/// What the threads send to the job.
enum Msg<E> {
    Owner(E),
    Line {
        node: u32,
        stream: Stream,
        line: String,
    },
    Exited {
        node: u32,
        status: io::Result<ExitStatus>,
    },
    Interrupted,
    /// An output pipe reached end of file.
    OutputDone,
}

/// Sends the owner's own events, and its own interrupts, to the job; any
/// thread may hold one.
pub struct Sink<E>(Sender<Msg<E>>);

impl<E> Clone for Sink<E> {
    fn clone(&self) -> Sink<E> {
        Sink(self.0.clone())
    }
}

impl<E> Sink<E> {
    /// Hands `event` to the job's owner as [`Event::Owner`].
    pub fn send(&self, event: E) {
        let _ = self.0.send(Msg::Owner(event));
    }

    /// Tells the job it was interrupted, as a signal would.
    pub fn interrupt(&self) {
        let _ = self.0.send(Msg::Interrupted);
    }
}

/// A process of the job.
struct Proc {
    node: u32,
    host: String,
    /// Process id and group id (each process leads a group of its own).
    pid: u32,
    running: bool,
    stdin: Option<ChildStdin>,
}

/// Where the teardown is.
#[derive(Clone, Copy, Debug)]
enum Phase {
    Running,
    /// The graceful step is done; SIGTERM at `term_at`.
    Asking {
        term_at: Instant,
    },
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Terminating {
        kill_at: Instant,
    },
    /// SIGKILL sent; the launcher gives up waiting at `give_up_at`.
    Killing {
        give_up_at: Instant,
    },
    /// Given up: whatever still runs is no longer waited for.
    Over,
}

/// A job: processes started on hosts, watched until they have all ended.
/// Dropping it tears down whatever still runs (without a graceful step)
/// and waits for it.
pub struct Job<E> {
    /// Who speaks in the launcher's own lines (`NAME: ...` on stderr).
    name: String,
    graces: Graces,
    procs: Vec<Proc>,
    phase: Phase,
    /// The job's exit status once something stopped it.
    status: Option<i32>,
    /// Output pipes not yet at end of file.
    pipes: usize,
    /// Once nothing runs: until when output is drained.
    drain_until: Option<Instant>,
    tx: Sender<Msg<E>>,
    rx: Receiver<Msg<E>>,
    _interrupts: Registration,
}

impl<E: Send + 'static> Job<E> {
    /// An empty job whose launcher calls itself `name` in its messages.
    pub fn new(name: impl Into<String>) -> Job<E> {
        let (tx, rx) = mpsc::channel();
        let on_signal = Sink(tx.clone());
        Job {
            name: name.into(),
            graces: Graces::default(),
            procs: Vec::new(),
            phase: Phase::Running,
            status: None,
            pipes: 0,
            drain_until: None,
            tx,
            rx,
            _interrupts: interrupt::register(Box::new(move || on_signal.interrupt())),
        }
    }

    /// The same job with other graces for its teardown.
    pub fn with_graces(mut self, graces: Graces) -> Job<E> {
        self.graces = graces;
        self
    }

    /// Where the owner sends its own events from.
    pub fn sink(&self) -> Sink<E> {
        Sink(self.tx.clone())
    }

    /// Starts one process in a process group of its own, with threads
    /// reading its output and waiting for its exit. Its own group: a
    /// Ctrl-C meant for the launcher does not reach it directly, the
    /// launcher stops the job in order. On [`Error::Watch`] the process
    /// runs but its end would go unnoticed: stop the job.
    pub fn spawn(&mut self, launch: Launch) -> Result<(), Error> {
        let node = launch.node;
        if !matches!(self.phase, Phase::Running) {
            return Err(Error::Stopping { node });
        }
        let (mut command, what) = launch.command();
        let piped = |o: Output| match o {
            Output::Prefixed | Output::Lines => Stdio::piped(),
            Output::Inherit => Stdio::inherit(),
        };
        let spawned = command
            .stdin(if launch.stdin {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(piped(launch.stdout))
            .stderr(piped(launch.stderr))
            .process_group(0)
            .spawn();
        let mut child = spawned.map_err(|error| Error::Spawn {
            node,
            host: launch.host.clone(),
            what,
            error,
        })?;
        let pid = child.id();
        tracing::debug!(node, pid, host = %launch.host, "started");
        self.procs.push(Proc {
            node,
            host: launch.host,
            pid,
            running: true,
            stdin: child.stdin.take(),
        });
        let outputs = [
            child.stdout.take().map(|p| {
                let p: Box<dyn io::Read + Send> = Box::new(p);
                (p, Stream::Stdout, launch.stdout)
            }),
            child.stderr.take().map(|p| {
                let p: Box<dyn io::Read + Send> = Box::new(p);
                (p, Stream::Stderr, launch.stderr)
            }),
        ];
        for (pipe, stream, output) in outputs.into_iter().flatten() {
            let sink = match output {
                Output::Lines => {
                    let tx = self.tx.clone();
                    LineSink::Lines(Box::new(move |line| {
                        let _ = tx.send(Msg::Line { node, stream, line });
                    }))
                }
                Output::Prefixed => LineSink::Prefixed {
                    prefix: format!("[{node}] "),
                    to: stream,
                },
                // Not a pipe: the launcher's own stream.
                Output::Inherit => continue,
            };
            let tx = self.tx.clone();
            let done = move || drop(tx.send(Msg::OutputDone));
            match forward::start(format!("launcher-out-{node}"), pipe, sink, done) {
                Ok(()) => self.pipes += 1,
                Err(e) => tracing::warn!("node {node}: cannot read its {stream:?}: {e}"),
            }
        }
        let tx = self.tx.clone();
        thread::Builder::new()
            .name(format!("launcher-wait-{node}"))
            .spawn(move || {
                let status = child.wait();
                let _ = tx.send(Msg::Exited { node, status });
            })
            .map_err(|error| Error::Watch { node, error })?;
        Ok(())
    }
}

impl<E> Job<E> {
    /// The next event; None once every process has ended (or the launcher
    /// gave up on them) and their output is drained. `until`: when to
    /// return [`Event::Timeout`] if nothing happened, while the job runs
    /// (during the teardown the launcher keeps its own time). Waits
    /// without bound when `until` is None and processes run.
    pub fn next(&mut self, until: Option<Instant>) -> Option<Event<E>> {
        loop {
            let live = self.running();
            let deadline = if live == 0 {
                if self.pipes == 0 {
                    return None;
                }
                let drain = self.graces.drain;
                Some(
                    *self
                        .drain_until
                        .get_or_insert_with(|| Instant::now() + drain),
                )
            } else {
                match self.phase {
                    Phase::Running => until,
                    Phase::Asking { term_at } => Some(term_at),
                    Phase::Terminating { kill_at } => Some(kill_at),
                    Phase::Killing { give_up_at } => Some(give_up_at),
                    Phase::Over => None,
                }
            };
            let msg = match deadline {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(d) => self
                    .rx
                    .recv_timeout(d.saturating_duration_since(Instant::now())),
            };
            match msg {
                Ok(Msg::Owner(e)) => return Some(Event::Owner(e)),
                Ok(Msg::Line { node, stream, line }) => {
                    return Some(Event::Line { node, stream, line })
                }
                Ok(Msg::OutputDone) => self.pipes = self.pipes.saturating_sub(1),
                Ok(Msg::Exited { node, status }) => {
                    if let Some(event) = self.exited(node, status) {
                        return Some(event);
                    }
                }
                Ok(Msg::Interrupted) => match self.phase {
                    Phase::Running if live > 0 => return Some(Event::Interrupted),
                    // Interrupted again: no more patience.
                    Phase::Asking { .. } | Phase::Terminating { .. } if live > 0 => self.kill_all(),
                    _ => {}
                },
                Err(RecvTimeoutError::Timeout) if live == 0 => {
                    let pipes = self.pipes;
                    tracing::debug!("{pipes} output pipes still open; not waiting for them");
                    self.pipes = 0;
                    return None;
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(event) = self.on_deadline() {
                        return Some(event);
                    }
                }
                // Cannot happen while the job holds a sender.
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// The usual judgement of an [`Event::Exited`]: a process that failed
    /// (exited non-zero, was killed, could not be waited for) stops the job
    /// with its status (128 + N for signal N), after `ask` (see
    /// [`Job::stop`]). True when it failed.
    pub fn exit_failed(
        &mut self,
        node: u32,
        status: &io::Result<ExitStatus>,
        ask: impl FnOnce(&str) -> Vec<u32>,
    ) -> bool {
        let (code, how) = match status {
            Ok(s) => (status::failure_code(s), status::describe(s)),
            Err(e) => (
                Some(EXIT_LAUNCHER),
                format!("could not be waited for ({e})"),
            ),
        };
        let Some(code) = code else {
            return false;
        };
        let host = self.host(node).unwrap_or("?").to_owned();
        self.fail(code, node, &format!("node {node} on {host} {how}"), ask);
        true
    }

    /// Says `what` (about `node`), then stops the job with `code`.
    pub fn fail(&mut self, code: i32, node: u32, what: &str, ask: impl FnOnce(&str) -> Vec<u32>) {
        if !matches!(self.phase, Phase::Running) {
            return;
        }
        let others = self
            .procs
            .iter()
            .filter(|p| p.running && p.node != node)
            .count();
        if others == 0 {
            self.say(what);
        } else {
            let procs = status::processes(others);
            self.say(&format!("{what}; stopping the other {procs}"));
        }
        self.stop(code, what, ask);
    }

    /// The usual answer to [`Event::Interrupted`]: says so and stops the
    /// job with [`EXIT_INTERRUPTED`].
    pub fn interrupted(&mut self, ask: impl FnOnce(&str) -> Vec<u32>) {
        if !matches!(self.phase, Phase::Running) {
            return;
        }
        let procs = status::processes(self.running());
        self.say(&format!("interrupted; stopping the {procs}"));
        let reason = format!("{} was interrupted", self.name);
        self.stop(EXIT_INTERRUPTED, &reason, ask);
    }

    /// Starts the teardown, the job's status becoming `code` unless one
    /// is set: `ask(reason)` is the owner's graceful step (DECK's ABORT, a
    /// line on stdin...) and returns the nodes it reached, which get
    /// [`Graces::ask`] to exit by themselves; SIGTERM at once to the others.
    /// Nothing happens once the teardown has begun.
    pub fn stop(&mut self, code: i32, reason: &str, ask: impl FnOnce(&str) -> Vec<u32>) {
        if !matches!(self.phase, Phase::Running) {
            return;
        }
        self.status.get_or_insert(code);
        let told = ask(reason);
        let mut waiting = false;
        for p in self.procs.iter().filter(|p| p.running) {
            if told.contains(&p.node) {
                waiting = true;
            } else {
                signal(p, Signal::SIGTERM);
            }
        }
        let now = Instant::now();
        self.phase = if waiting {
            Phase::Asking {
                term_at: now + self.graces.ask,
            }
        } else {
            Phase::Terminating {
                kill_at: now + self.graces.term,
            }
        };
    }

    /// Writes `line` and a newline to the stdin pipe of `node`
    /// ([`Launch::stdin`]).
    pub fn write_line(&mut self, node: u32, line: &str) -> io::Result<()> {
        let stdin = self
            .procs
            .iter_mut()
            .find(|p| p.node == node)
            .and_then(|p| p.stdin.as_mut())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotConnected,
                    format!("node {node} has no stdin pipe"),
                )
            })?;
        writeln!(stdin, "{line}")?;
        stdin.flush()
    }

    /// Closes the stdin pipe of `node` (it reads end of file).
    pub fn close_stdin(&mut self, node: u32) {
        if let Some(p) = self.procs.iter_mut().find(|p| p.node == node) {
            p.stdin = None;
        }
    }

    /// The nodes started, in order.
    pub fn nodes(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.node).collect()
    }

    /// The host `node` was started on.
    pub fn host(&self, node: u32) -> Option<&str> {
        self.procs
            .iter()
            .find(|p| p.node == node)
            .map(|p| p.host.as_str())
    }

    /// Whether `node`'s process still runs (as far as the launcher waits
    /// for it).
    pub fn is_running(&self, node: u32) -> bool {
        !matches!(self.phase, Phase::Over) && self.procs.iter().any(|p| p.node == node && p.running)
    }

    /// How many processes still run (as far as the launcher waits for
    /// them).
    pub fn running(&self) -> usize {
        match self.phase {
            Phase::Over => 0,
            _ => self.procs.iter().filter(|p| p.running).count(),
        }
    }

    /// Whether the teardown has begun.
    pub fn stopping(&self) -> bool {
        !matches!(self.phase, Phase::Running)
    }

    /// The job's exit status: 0 unless something stopped it.
    pub fn status(&self) -> i32 {
        self.status.unwrap_or(0)
    }

    /// Writes one of the launcher's own lines to stderr, `NAME: line`
    /// (never panics: stderr may be closed).
    pub fn say(&self, line: &str) {
        let _ = writeln!(io::stderr().lock(), "{}: {line}", self.name);
    }

    /// Records an exit; the event for the owner, if it is one of its.
    fn exited(&mut self, node: u32, status: io::Result<ExitStatus>) -> Option<Event<E>> {
        let p = self.procs.iter_mut().find(|p| p.node == node)?;
        p.running = false;
        match self.phase {
            Phase::Running => Some(Event::Exited { node, status }),
            Phase::Over => None,
            _ => {
                tracing::debug!(node, ?status, "exited during the teardown");
                None
            }
        }
    }

    /// Acts on a passed deadline while processes run.
    fn on_deadline(&mut self) -> Option<Event<E>> {
        let now = Instant::now();
        match self.phase {
            Phase::Running => return Some(Event::Timeout),
            Phase::Asking { term_at } if now >= term_at => {
                for p in self.procs.iter().filter(|p| p.running) {
                    signal(p, Signal::SIGTERM);
                }
                self.phase = Phase::Terminating {
                    kill_at: now + self.graces.term,
                };
            }
            Phase::Terminating { kill_at } if now >= kill_at => self.kill_all(),
            Phase::Killing { give_up_at } if now >= give_up_at => {
                let left: Vec<String> = self
                    .procs
                    .iter()
                    .filter(|p| p.running)
                    .map(|p| format!("node {} (pid {})", p.node, p.pid))
                    .collect();
                self.say(&format!(
                    "still running {:?} after SIGKILL, not waiting any longer: {}",
                    self.graces.kill_wait,
                    left.join(", ")
                ));
                self.phase = Phase::Over;
            }
            _ => {}
        }
        None
    }

    fn kill_all(&mut self) {
        for p in self.procs.iter().filter(|p| p.running) {
            signal(p, Signal::SIGKILL);
        }
        self.phase = Phase::Killing {
            give_up_at: Instant::now() + self.graces.kill_wait,
        };
    }
}

impl<E> Drop for Job<E> {
    fn drop(&mut self) {
        if self.running() == 0 {
            return;
        }
        tracing::debug!(running = self.running(), "tearing down the job's rest");
        self.stop(EXIT_LAUNCHER, "the job's owner ended it", |_| Vec::new());
        while self.next(None).is_some() {}
    }
}

/// Signals the process group a process leads.
fn signal(p: &Proc, sig: Signal) {
    let Ok(pid) = i32::try_from(p.pid) else {
        return;
    };
    tracing::debug!(node = p.node, pid, %sig, "signalling process group");
    if let Err(e) = killpg(Pid::from_raw(pid), sig) {
        // ESRCH: it exited meanwhile.
        tracing::debug!(node = p.node, pid, "killpg: {e}");
    }
}
