//! SIGINT, SIGTERM and SIGHUP as events of the running jobs. A job's
//! processes lead process groups of their own, so a Ctrl-C meant for the
//! launcher does not reach them: the launcher stops them in order instead.
//! Signal handlers are the process's, so the jobs that want to hear of a
//! signal register here, each while it lives.

use std::process;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use crate::error::Error;
use crate::status::EXIT_INTERRUPTED;

type Notify = Box<dyn Fn() + Send>;

/// The living jobs, each with how to tell it.
static JOBS: Mutex<Vec<(u64, Notify)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// Whether the handler is in (the handler can be set once per process).
static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();

/// From now on SIGINT, SIGTERM and SIGHUP are [`crate::Event::Interrupted`]
/// of every running [`crate::Job`]; with no job running, one ends the
/// process with [`EXIT_INTERRUPTED`] (nothing of the launcher's is left to
/// stop). Calling it again does nothing.
pub fn catch_interrupts() -> Result<(), Error> {
    INSTALLED
        .get_or_init(|| ctrlc::set_handler(deliver).map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::Signals)
}

fn jobs() -> MutexGuard<'static, Vec<(u64, Notify)>> {
    JOBS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs on the handler's thread (not in the signal handler itself).
fn deliver() {
    let jobs = jobs();
    if jobs.is_empty() {
        process::exit(EXIT_INTERRUPTED);
    }
    for (_, notify) in jobs.iter() {
        notify();
    }
}

/// A job's place in the list; leaves it when dropped.
pub(crate) struct Registration(u64);

pub(crate) fn register(notify: Notify) -> Registration {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    jobs().push((id, notify));
    Registration(id)
}

impl Drop for Registration {
    fn drop(&mut self) {
        jobs().retain(|(id, _)| *id != self.0);
    }
}
