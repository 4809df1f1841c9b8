//! How a process's end maps to the launcher's own exit status, and how it
//! is told in words.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

/// The launcher's status when it was interrupted (SIGINT, SIGTERM, SIGHUP)
/// before any process failed: 128 + SIGINT, as a shell reports Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;
/// The launcher's status when it stopped the job itself (a process could
/// not be started, or its owner found the job cannot go on).
pub const EXIT_LAUNCHER: i32 = 1;

/// The launcher's exit status for a process's status: its code, or 128 +
/// the signal that killed it; None for success.
pub fn failure_code(status: &ExitStatus) -> Option<i32> {
    match (status.code(), status.signal()) {
        (Some(0), _) => None,
        (Some(c), _) => Some(c),
        (None, Some(sig)) => Some(128 + sig),
        (None, None) => Some(EXIT_LAUNCHER),
    }
}

/// How a process ended, in words: "exited with status 2", "was killed by
/// signal 9 (SIGKILL)".
pub fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("was killed by signal {sig} ({})", s.as_str()),
            Err(_) => format!("was killed by signal {sig}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}

/// "1 process", "3 processes".
pub(crate) fn processes(n: usize) -> String {
    if n == 1 {
        format!("{n} process")
    } else {
        format!("{n} processes")
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
        assert_eq!(processes(1), "1 process");
        assert_eq!(processes(3), "3 processes");
    }
}
