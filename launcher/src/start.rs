//! One process to start, and how it is started on its host: here, or on
//! another host through an rsh agent. Everything about the program that
//! can be wrong is checked before anything starts ([`resolve_program`],
//! [`check_remote_program`]), so a bad job starts no process.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::Error;

/// How a process is started on its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Here, as the launcher's child.
    Local,
    /// Through an rsh agent called like ssh, `PROGRAM [OPTIONS] HOST
    /// COMMAND...`: the agent joins the COMMAND words with spaces and has
    /// the host's shell run them, so every word is quoted, and the
    /// process's environment travels on that command line
    /// ([`remote_words`]).
    Agent {
        program: OsString,
        options: Vec<OsString>,
    },
}

impl Start {
    /// An agent given as one line, its program and options split on white
    /// space (`"ssh -x"`); None when the line is empty.
    pub fn agent(line: &str) -> Option<Start> {
        let mut words = line.split_whitespace().map(OsString::from);
        Some(Start::Agent {
            program: words.next()?,
            options: words.collect(),
        })
    }
}

/// What becomes of one of a process's output streams.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Forwarded to the launcher's stream of the same name, every line
    /// with the prefix `[N] ` (N: the process's node).
    Prefixed,
    /// Handed to the job's owner, line by line ([`crate::Event::Line`]).
    Lines,
    /// The launcher's own stream, shared as it is.
    Inherit,
}

/// One process of a job.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The process's number in the job (its `[N] ` prefix).
    pub node: u32,
    /// The host it runs on, for the agent and for messages.
    pub host: String,
    pub start: Start,
    /// The program: an absolute path works the same on every host.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Variables it gets on top of the environment it starts in (the
    /// launcher's for a local process, the remote login's otherwise).
    pub env: Vec<(String, OsString)>,
    /// The launcher's variables a local process must not inherit.
    pub env_remove: Vec<String>,
    /// Whether it gets a pipe on stdin ([`crate::Job::write_line`]); else
    /// its stdin is `/dev/null` (a remote shell must never wait for the
    /// terminal).
    pub stdin: bool,
    pub stdout: Output,
    pub stderr: Output,
}

impl Launch {
    /// `program` as node `node` on `host`: no arguments, no variables, no
    /// stdin, output forwarded with the `[N] ` prefix.
    pub fn new(
        node: u32,
        host: impl Into<String>,
        start: Start,
        program: impl Into<PathBuf>,
    ) -> Launch {
        Launch {
            node,
            host: host.into(),
            start,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            env_remove: Vec::new(),
            stdin: false,
            stdout: Output::Prefixed,
            stderr: Output::Prefixed,
        }
    }

    /// The command that starts the process, and what that command is for
    /// messages (the program, or "through AGENT").
    pub fn command(&self) -> (Command, String) {
        match &self.start {
            Start::Local => {
                let mut command = Command::new(&self.program);
                command.args(&self.args).envs(self.env.iter().cloned());
                for name in &self.env_remove {
                    command.env_remove(name);
                }
                (command, self.program.display().to_string())
            }
            Start::Agent { program, options } => {
                let mut command = Command::new(program);
                command.args(options).arg(&self.host).args(remote_words(
                    &self.env,
                    &self.program,
                    &self.args,
                ));
                let what = format!("through {}", program.to_string_lossy());
                (command, what)
            }
        }
    }
}

/// `word` quoted for a POSIX shell: the remote shell gets it back as it is.
pub fn shell_quote(word: &OsStr) -> OsString {
    let bytes = word.as_bytes();
    let plain = |b: &u8| b.is_ascii_alphanumeric() || b"/._-+=:,@%".contains(b);
    if !bytes.is_empty() && bytes.iter().all(plain) {
        return word.to_owned();
    }
    let mut out = Vec::with_capacity(bytes.len() + 2);
    out.push(b'\'');
    for &b in bytes {
        if b == b'\'' {
            out.extend_from_slice(b"'\\''");
        } else {
            out.push(b);
        }
    }
    out.push(b'\'');
    OsString::from_vec(out)
}

/// The remote command line: `env NAME=VALUE... PROGRAM ARGS...`, each word
/// quoted for the remote shell (the agent joins them with spaces and runs
/// them with `sh -c`).
pub fn remote_words(
    env: &[(String, OsString)],
    program: &Path,
    args: &[OsString],
) -> Vec<OsString> {
    let mut words = vec![OsString::from("env")];
    for (name, value) in env {
        let mut kv = OsString::from(format!("{name}="));
        kv.push(value);
        words.push(shell_quote(&kv));
    }
    words.push(shell_quote(program.as_os_str()));
    words.extend(args.iter().map(|a| shell_quote(a)));
    words
}

/// Whether `name` can be an environment variable's name on a remote
/// command line (letters, digits, `_`; no digit first).
pub fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .enumerate()
            .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()))
}

/// The program's absolute path, as mpirun does: a name without `/` is
/// looked up in `path` (PATH), a relative path is taken from `cwd`. The
/// same path is used on every host.
pub fn resolve_program(
    program: &OsStr,
    path: Option<&OsStr>,
    cwd: &Path,
) -> Result<PathBuf, Error> {
    let shown = || Path::new(program).display().to_string();
    if program.is_empty() {
        return Err(Error::EmptyProgram);
    }
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.as_bytes().contains(&b'/') {
        let p = cwd.join(program);
        if !p.exists() {
            return Err(Error::NoSuchFile { program: shown() });
        }
        if !executable(&p) {
            return Err(Error::NotExecutable { program: shown() });
        }
        return Ok(p);
    }
    let dirs = path.map(|p| std::env::split_paths(p).collect::<Vec<_>>());
    let found = dirs
        .iter()
        .flatten()
        .map(|d| cwd.join(d).join(program))
        .find(|p| executable(p));
    found.ok_or_else(|| Error::NotInPath { program: shown() })
}

/// Whether `program` can be started through an agent: the remote `env`
/// would take a path with `=` for one more variable.
pub fn check_remote_program(program: &Path) -> Result<(), Error> {
    if program.as_os_str().as_bytes().contains(&b'=') {
        return Err(Error::RemoteProgram {
            program: program.display().to_string(),
        });
    }
    Ok(())
}

/// A random 64-bit job id: tells this run's processes from stray ones of
/// another.
pub fn random_job_id() -> Result<u64, Error> {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(Error::JobId)?;
    Ok(u64::from_ne_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_words_survive_a_shell() {
        let words = [
            "plain",
            "with space",
            "it's",
            "$HOME",
            "`x`",
            "a\"b",
            "",
            "*",
            "x;y",
        ];
        let quoted: Vec<String> = words
            .iter()
            .map(|w| shell_quote(OsStr::new(w)).into_string().unwrap())
            .collect();
        assert_eq!(quoted[0], "plain");
        assert_eq!(quoted[2], r"'it'\''s'");
        // The shell splits the joined line back into the same words.
        let script = format!(
            "for w in {}; do printf '%s\\n' \"$w\"; done",
            quoted.join(" ")
        );
        let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
        let back: Vec<&str> = std::str::from_utf8(&out.stdout)
            .unwrap()
            .split_terminator('\n')
            .collect();
        assert_eq!(back, words);
    }

    #[test]
    fn remote_command_line() {
        let env = [
            ("DECK_NODE".to_string(), OsString::from("2")),
            ("MSG".to_string(), OsString::from("a b")),
        ];
        let words = remote_words(&env, Path::new("/bin/prog"), &["x y".into()]);
        assert_eq!(
            words,
            ["env", "DECK_NODE=2", "'MSG=a b'", "/bin/prog", "'x y'"].map(OsString::from)
        );
    }

    #[test]
    fn a_launch_is_started_here_or_through_the_agent() {
        let mut launch = Launch::new(3, "n2", Start::Local, "/bin/prog");
        launch.args = vec!["x y".into()];
        launch.env = vec![("MSG".into(), "a b".into())];
        launch.env_remove = vec!["GONE".into()];
        let (local, what) = launch.command();
        assert_eq!(what, "/bin/prog");
        assert_eq!(local.get_program(), "/bin/prog");
        assert_eq!(local.get_args().collect::<Vec<_>>(), ["x y"]);
        let envs: Vec<_> = local.get_envs().collect();
        assert!(envs.contains(&(OsStr::new("MSG"), Some(OsStr::new("a b")))));
        assert!(envs.contains(&(OsStr::new("GONE"), None)));

        launch.start = Start::agent(" ssh  -x ").unwrap();
        let (remote, what) = launch.command();
        assert_eq!(what, "through ssh");
        assert_eq!(remote.get_program(), "ssh");
        assert_eq!(
            remote.get_args().collect::<Vec<_>>(),
            ["-x", "n2", "env", "'MSG=a b'", "/bin/prog", "'x y'"]
        );
        // The environment travels on the command line only.
        assert_eq!(remote.get_envs().count(), 0);
        assert_eq!(Start::agent("  "), None);
    }

    #[test]
    fn variable_names() {
        for good in ["A", "_x", "A1_b"] {
            assert!(is_variable_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A=B", "Ä"] {
            assert!(!is_variable_name(bad), "{bad}");
        }
    }

    #[test]
    fn programs_resolve_to_absolute_paths() {
        let cwd = std::env::temp_dir();
        let path = OsString::from("/nonexistent:/bin:/usr/bin");
        let sh = resolve_program(OsStr::new("sh"), Some(&path), &cwd).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        let e = resolve_program(OsStr::new("no-such-prog-x"), Some(&path), &cwd).unwrap_err();
        assert!(e.to_string().contains("not found in PATH"), "{e}");
        let e = resolve_program(OsStr::new("./no-such-prog-x"), Some(&path), &cwd).unwrap_err();
        assert_eq!(e.to_string(), "program ./no-such-prog-x: no such file");
        // A plain file, removed again even if an assertion fails.
        struct Removed(PathBuf);
        impl Drop for Removed {
            fn drop(&mut self) {
                let _ = std::fs::remove_file(&self.0);
            }
        }
        let file = Removed(cwd.join(format!("launcher-test-{}", std::process::id())));
        std::fs::write(&file.0, "not a program").unwrap();
        let e = resolve_program(file.0.as_os_str(), None, &cwd).unwrap_err();
        assert!(e.to_string().contains("not an executable"), "{e}");
        assert!(check_remote_program(Path::new("/bin/a=b")).is_err());
        assert!(check_remote_program(Path::new("/bin/ab")).is_ok());
    }

    #[test]
    fn job_ids_differ() {
        assert_ne!(random_job_id().unwrap(), random_job_id().unwrap());
    }
}
