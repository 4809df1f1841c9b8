//! DECK's part of running a job: the bootstrap server through which the
//! nodes learn their peers, and ABORT, the graceful step of the launcher's
//! teardown. The launcher (`launcher::Job`) starts and watches the
//! processes; this loop hears its events and the server's connections.

use std::time::{Duration, Instant};

use deck::boot::{BootNotice, BootServer, Incoming};
use launcher::status::EXIT_LAUNCHER;
use launcher::{Event, Job};

/// The job's owner: the bootstrap server and the time the nodes have to
/// connect to it.
struct Deck {
    server: BootServer,
    boot_deadline: Instant,
    boot_timeout: Duration,
}

/// Runs the started job to its end; returns deckrun's exit status.
pub fn run(
    mut job: Job<Incoming>,
    server: BootServer,
    boot_deadline: Instant,
    boot_timeout: Duration,
) -> i32 {
    let mut deck = Deck {
        server,
        boot_deadline,
        boot_timeout,
    };
    loop {
        let until = deck.deadline(&job);
        let Some(event) = job.next(until) else {
            break;
        };
        match event {
            Event::Owner(incoming) => {
                let notice = deck.server.handle(incoming);
                // Once every node has exited only the output is drained.
                if job.running() > 0 {
                    if let Some(notice) = notice {
                        log(notice);
                    }
                    deck.check_rounds(&mut job);
                }
            }
            Event::Exited { node, status } => {
                if !job.exit_failed(node, &status, |why| deck.server.abort(why)) {
                    deck.exited_well(&mut job, node);
                }
            }
            Event::Interrupted => job.interrupted(|why| deck.server.abort(why)),
            Event::Timeout => deck.boot_timed_out(&mut job),
            // The nodes' output is forwarded, never handed over.
            Event::Line { .. } => {}
        }
    }
    job.status()
}

fn log(notice: BootNotice) {
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

impl Deck {
    /// Nodes that run but have not connected yet.
    fn unconnected(&self, job: &Job<Incoming>) -> Vec<u32> {
        job.nodes()
            .into_iter()
            .filter(|&n| job.is_running(n) && !self.server.is_connected(n))
            .collect()
    }

    /// While the job runs and a node has not connected: the boot deadline.
    fn deadline(&self, job: &Job<Incoming>) -> Option<Instant> {
        if job.stopping() || self.unconnected(job).is_empty() {
            return None;
        }
        Some(self.boot_deadline)
    }

    fn boot_timed_out(&mut self, job: &mut Job<Incoming>) {
        if Instant::now() < self.boot_deadline {
            return;
        }
        let missing: Vec<String> = self
            .unconnected(job)
            .into_iter()
            .map(|n| format!("node {n} on {}", job.host(n).unwrap_or("?")))
            .collect();
        if missing.is_empty() {
            return;
        }
        let what = format!(
            "{} did not connect to deckrun within {:?} (does the program call deck_init?)",
            missing.join(", "),
            self.boot_timeout
        );
        job.say(&format!("{what}; stopping the job"));
        job.stop(EXIT_LAUNCHER, &what, |why| self.server.abort(why));
    }

    /// A node exited 0 while the job runs.
    fn exited_well(&mut self, job: &mut Job<Incoming>, node: u32) {
        tracing::debug!(node, "exited with status 0");
        if self.server.is_connected(node) && !self.server.is_finished(node) {
            let host = job.host(node).unwrap_or("?");
            job.say(&format!(
                "warning: node {node} on {host} exited without calling deck_done"
            ));
        }
        self.check_rounds(job);
    }

    /// A bootstrap round waits for a node that has exited: it can never
    /// complete, so the job cannot go on.
    fn check_rounds(&mut self, job: &mut Job<Incoming>) {
        if job.stopping() {
            return;
        }
        let stuck = job.nodes().into_iter().find_map(|n| {
            let gone = !job.is_running(n);
            gone.then(|| self.server.missing_card(n).map(|r| (n, r)))
                .flatten()
        });
        if let Some((node, round)) = stuck {
            let host = job.host(node).unwrap_or("?").to_owned();
            let what =
                format!("node {node} on {host} exited before bootstrap round {round} was complete");
            job.fail(EXIT_LAUNCHER, node, &what, |why| self.server.abort(why));
        }
    }
}
