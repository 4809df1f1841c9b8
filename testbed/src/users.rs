//! Ordinary user accounts for tests that check what a user without
//! privileges can do: jobs of two users at once, a hostile local user.
//!
//! An account is created once (`useradd --system`, no home directory, no
//! login shell) the first time a test asks for it, and kept: like an
//! installed package it costs nothing and later runs reuse it. Processes
//! run as the user through `setpriv`, which drops every capability with the
//! switch from root.

use std::path::Path;
use std::process::Command;

use crate::netns::{run_checked, HarnessError, IP_TIMEOUT};

/// An ordinary account of this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestUser {
    /// Login name.
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
}

impl TestUser {
    /// The account `name`, created if it does not exist yet (needs root).
    pub fn ensure(name: &str) -> Result<TestUser, HarnessError> {
        // Tests of one binary run in parallel and may ask for the same
        // account at once: one useradd at a time; and another process's
        // useradd may hold /etc/passwd's lock for a moment (bounded retries).
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut tries = 0;
        while id(name, "-u").is_err() {
            tries += 1;
            match run_checked(
                Command::new(useradd()).args([
                    "--system",
                    "--user-group",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    name,
                ]),
                IP_TIMEOUT,
            ) {
                Ok(_) => break,
                Err(e) if tries >= 5 => return Err(e),
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(200 * tries)),
            }
        }
        // The user runs this build's programs from the target directory,
        // with the test's working directory as its own.
        let mut places = vec![crate::cdylib::profile_dir()];
        places.extend(std::env::current_dir().ok());
        for place in places {
            let_users_reach(&place)?;
        }
        Ok(TestUser {
            name: name.to_owned(),
            uid: id(name, "-u")?,
            gid: id(name, "-g")?,
        })
    }

    /// The words that run a program as this user: `setpriv --reuid ...
    /// --init-groups`, to put before the program and its arguments. The
    /// environment is kept (set HOME and USER where they matter).
    pub fn setpriv_words(&self) -> Vec<String> {
        vec![
            "setpriv".into(),
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.gid),
            "--init-groups".into(),
        ]
    }

    /// `program` run as this user inside `ns` (from a root process:
    /// `ip netns exec` then `setpriv`); add arguments as usual.
    pub fn command_in(&self, ns: &crate::Netns, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let words = self.setpriv_words();
        let mut cmd = ns.command(&words[0]);
        cmd.args(&words[1..]).arg(program);
        cmd
    }
}

/// Let every user traverse the directories down to `path` (add `o+x` where a
/// directory lacks it, saying so): a checkout under a private directory
/// would otherwise hide this build's programs from the test accounts.
fn let_users_reach(path: &Path) -> Result<(), HarnessError> {
    use std::os::unix::fs::PermissionsExt;
    for dir in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if meta.is_dir() && mode & 0o001 == 0 {
            eprintln!(
                "testbed: letting ordinary users traverse {} (mode {:o} -> {:o}) for the tests that run as them",
                dir.display(),
                mode & 0o7777,
                (mode | 0o001) & 0o7777
            );
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o001)).map_err(
                |source| HarnessError::Io {
                    what: format!("letting users traverse {}", dir.display()),
                    source,
                },
            )?;
        }
    }
    Ok(())
}

fn useradd() -> &'static str {
    if Path::new("/usr/sbin/useradd").exists() {
        "/usr/sbin/useradd"
    } else {
        "useradd"
    }
}

fn id(name: &str, what: &str) -> Result<u32, HarnessError> {
    let out = run_checked(Command::new("id").args([what, name]), IP_TIMEOUT)?;
    out.trim()
        .parse()
        .map_err(|_| HarnessError::InvalidArgument(format!("id {what} {name} printed {out:?}")))
}
