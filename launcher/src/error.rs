//! What can go wrong before or while starting a job; the messages are the
//! ones its user reads (after the launcher's name).

use std::io;

/// An error of the launcher.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host list entry that is not `NAME[:SLOTS]`.
    #[error("{spec:?}: {why}")]
    HostSpec { spec: String, why: &'static str },
    /// More processes than the hosts have slots.
    #[error("{n} nodes but only {total} slots on the hosts ({list}); give more hosts or slots")]
    Slots { n: u32, total: u64, list: String },
    #[error("cannot resolve host {host}")]
    Resolve {
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("host {host} has no IPv4 address")]
    NoIpv4 { host: String },
    #[error("PROGRAM is empty")]
    EmptyProgram,
    #[error("program {program}: no such file")]
    NoSuchFile { program: String },
    #[error("program {program}: not an executable file")]
    NotExecutable { program: String },
    #[error("program {program}: not found in PATH")]
    NotInPath { program: String },
    /// The remote `env` would take such a path for one more variable.
    #[error("program {program}: a path with '=' cannot be started on other hosts")]
    RemoteProgram { program: String },
    #[error("cannot read /dev/urandom for the job id")]
    JobId(#[source] io::Error),
    /// A process could not be started (`what`: its program, or the agent).
    #[error("cannot start node {node} on {host} ({what}): {error}")]
    Spawn {
        node: u32,
        host: String,
        what: String,
        error: io::Error,
    },
    /// A process was started but its exit could not be watched: the job
    /// must stop, or the exit would go unnoticed.
    #[error("node {node}: cannot start a thread to wait for it: {error}")]
    Watch { node: u32, error: io::Error },
    /// A process was to be started in a job that is being torn down.
    #[error("node {node}: the job is stopping, nothing more is started")]
    Stopping { node: u32 },
    #[error("cannot install the signal handler: {0}")]
    Signals(String),
}
