//! Background processes for tests: start a server, wait (bounded) for the
//! line that says it is ready, and kill it when the guard drops, also when the
//! test panics.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::netns::{HarnessError, Netns};
use crate::sys;

/// A running child process, killed and reaped on drop.
#[derive(Debug)]
pub struct Background {
    child: Child,
    output: Arc<Mutex<String>>,
}

impl Background {
    /// Start `cmd` with stdout and stderr captured, and wait until a line of
    /// its stdout contains `ready` (at most `timeout`). On failure the error
    /// carries what the process printed.
    pub fn spawn(cmd: &mut Command, ready: &str, timeout: Duration) -> Result<Background, String> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("piped");
        let out = output.clone();
        let marker = ready.to_string();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let ready = line.contains(&marker);
                {
                    let mut o = out.lock().unwrap_or_else(|p| p.into_inner());
                    o.push_str(&line);
                    o.push('\n');
                }
                // After the line is recorded: `output()` right after `spawn`
                // returns must contain the ready line.
                if ready {
                    let _ = tx.send(());
                }
            }
        });
        let mut stderr = child.stderr.take().expect("piped");
        let err = output.clone();
        thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            err.lock().unwrap_or_else(|p| p.into_inner()).push_str(&s);
        });
        let mut bg = Background { child, output };
        match rx.recv_timeout(timeout) {
            Ok(()) => Ok(bg),
            Err(_) => {
                let _ = bg.child.kill();
                let _ = bg.child.wait();
                // Give the reader threads a moment to collect the last words.
                thread::sleep(Duration::from_millis(50));
                Err(format!(
                    "{cmd:?} did not print {ready:?} within {timeout:?}; it printed:\n{}",
                    bg.output()
                ))
            }
        }
    }

    /// Everything the process printed so far (stdout, then stderr once it closed).
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait at most `timeout` for the process to exit; its status, or
    /// `None` if it still runs. Its output is complete once this returns
    /// `Some` (the reader threads are given a moment to finish).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                // The pipes close with the process; the readers follow.
                let settle = std::time::Instant::now() + Duration::from_millis(500);
                while Arc::strong_count(&self.output) > 1 && std::time::Instant::now() < settle {
                    thread::sleep(Duration::from_millis(5));
                }
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kill the process with SIGKILL and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes the child that `cmd` starts die (SIGKILL) when the thread that spawns it exits, so
/// a test process that dies without unwinding (a second panic, SIGKILL) leaves no server or
/// VM behind. With `netns`, the child also enters that network namespace before it executes
/// its program (QEMU then opens its tap devices there).
pub fn die_with_parent(cmd: &mut Command, netns: Option<&Netns>) -> Result<(), HarnessError> {
    let fd = netns.map(Netns::handle).transpose()?;
    sys::child_dies_with_parent(cmd, fd);
    Ok(())
}

/// Whether process `pid` runs: a zombie (dead, not reaped yet) does not.
/// What tests wait on when they check that a job left nothing behind.
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}
