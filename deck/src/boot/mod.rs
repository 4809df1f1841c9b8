//! The job's bootstrap: how a DECK process started by `deckrun` learns its
//! node number and its peers' addresses. A process started by a PMIx launcher
//! (`srun --mpi=pmix`, mpirun) learns the same from it instead ([`PmixJob`],
//! `pmix.rs`); the runtime takes deckrun's way when `DECK_BOOT` is set.
//!
//! `deckrun` starts every node with these variables ([`JobEnv::from_env`]
//! reads them): `DECK_NODE` (0..N-1), `DECK_NUMNODES` (N), `DECK_BOOT` (the
//! launcher's bootstrap server as a comma-separated `IP:PORT` list, tried in
//! order), `DECK_JOB` (the job's random 64-bit id, hex), `DECK_LOCAL_RANK`
//! and `DECK_TRANSPORT`: the transport spec the node opens, as every API of
//! the stack takes one (`llc://` by default: the interface btl/llc would
//! pick for the node's local rank; `llc://eth0?backend=xdp`;
//! `tcp://0.0.0.0:0`, where an unspecified IP means the address the
//! launcher is reached from).
//!
//! # Protocol
//!
//! One TCP connection per node to the launcher, open for the node's whole
//! life. Every message is a frame: a big-endian `u32` length of what
//! follows, a kind byte, then the body. Integers are big-endian; a *text* is
//! the rest of the body in UTF-8; a *string* is a `u32` length and UTF-8.
//!
//! | kind | name     | from   | body |
//! |------|----------|--------|------|
//! | 0x01 | HELLO    | node   | `"DECK"`, version `u16`, job `u64`, node `u32` |
//! | 0x02 | CARD     | node   | round `u32`, card text (at most [`MAX_CARD`] bytes) |
//! | 0x03 | FINISH   | node   | empty |
//! | 0x81 | WELCOME  | server | version `u16`, number of nodes `u32` |
//! | 0x82 | REJECT   | server | [`Rejection`] code `u8`, detail text |
//! | 0x83 | CARDS    | server | round `u32`, count `u32`, count strings |
//! | 0x84 | ABORT    | server | reason text |
//! | 0x85 | FINISHED | server | empty |
//! | 0x86 | KEY      | server | the job's key material, text (at most [`MAX_KEY`] bytes) |
//!
//! A node connects, says HELLO and waits for WELCOME (or REJECT, after which
//! the server closes: wrong job, node out of range, node already connected,
//! other version). A launcher that keys the job's frames sends KEY just
//! before WELCOME: the material every node derives the LLC transport's
//! authentication key from (docs/SECURITY.md); a node that got none keys
//! its frames from `LLC_AUTH_KEY`, or not at all. A round of the all-gather ([`Boot::exchange`]) is one CARD
//! per node; rounds are numbered from 0 and a node sends round `r + 1` only
//! after it got the CARDS of round `r`. When every node's CARD of a round is
//! in, every node gets the round's CARDS, cards in node order. FINISH
//! ([`BootHandle::finish`]) is answered with FINISHED; from then on the
//! node's exit is expected and it may close. The server sends ABORT when it
//! stops the job; a node that gets it, or loses the connection before
//! FINISH, exits ([`Boot::watch`]), so no node outlives its launcher even
//! when a remote shell does not pass signals on. Frames of unknown kind are
//! ignored, so a newer peer may add kinds.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// This process's node number, `0..DECK_NUMNODES`.
pub const ENV_NODE: &str = "DECK_NODE";
/// The number of nodes of the job.
pub const ENV_NUMNODES: &str = "DECK_NUMNODES";
/// The launcher's bootstrap server: `IP:PORT[,IP:PORT...]`, tried in order.
pub const ENV_BOOT: &str = "DECK_BOOT";
/// The job's id, a random 64-bit number in hex: tells jobs apart.
pub const ENV_JOB: &str = "DECK_JOB";
/// The transport spec the node opens (`msg_layer::transport::TransportSpec`).
/// Unset: `llc://`, each node on the interface btl/llc would pick (every up
/// Ethernet interface, the node's local rank choosing among them).
pub const ENV_TRANSPORT: &str = "DECK_TRANSPORT";
/// The transport of a node whose launcher named none.
pub const DEFAULT_TRANSPORT: &str = "llc://";
/// The node's index among the job's nodes on its host (0 when unset).
pub const ENV_LOCAL_RANK: &str = "DECK_LOCAL_RANK";

/// The longest card a node may exchange, in bytes: a transport address
/// needs far less, and the bound keeps a round's answer small.
pub const MAX_CARD: usize = 4096;

/// The longest key material a KEY frame carries, in bytes.
pub const MAX_KEY: usize = 1024;

/// The job's key material as the launcher hands it to the nodes: its
/// `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyMaterial(String);

impl KeyMaterial {
    /// `material`, when it is not empty and at most [`MAX_KEY`] bytes.
    pub fn new(material: String) -> Option<KeyMaterial> {
        (!material.is_empty() && material.len() <= MAX_KEY).then_some(KeyMaterial(material))
    }

    /// The material's bytes, to derive the key from.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyMaterial({} bytes)", self.0.len())
    }
}

/// The largest job: keeps the size of a round's answer bounded.
pub const MAX_NODES: u32 = 65536;

/// Exit status of a node stopped by its watchdog: 128 + SIGTERM, as if
/// the launcher had terminated it.
pub const EXIT_ABORTED: i32 = 143;

/// How long a node should try to reach its launcher ([`Boot::connect`]):
/// long enough for a launcher still starting its other nodes.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The protocol version in HELLO and WELCOME.
pub const VERSION: u16 = 1;

/// First bytes of a HELLO: a stray client of another protocol is told apart.
const MAGIC: [u8; 4] = *b"DECK";

/// How long one connection attempt to one address of `DECK_BOOT` may take.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(2);

/// First and longest pause between rounds of connection attempts.
const RETRY_PAUSE: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(500));

/// How long the server waits for a new connection's HELLO.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Bound on one write of the server, so one stuck node cannot stall the
/// launcher for long.
const SERVER_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`BootHandle::finish`] waits for FINISHED.
const FINISH_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest frame a node sends: a CARD with a full card, with room to spare.
const MAX_CLIENT_FRAME: usize = 2 * MAX_CARD;

/// Longest ABORT reason or REJECT detail sent (longer ones are cut).
const MAX_TEXT: usize = 1024;

/// Why bootstrapping failed.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// A variable deckrun sets is missing.
    #[error(
        "{var} is not set (deckrun sets it with {ENV_BOOT}; start DECK programs with deckrun)"
    )]
    EnvMissing {
        /// The variable.
        var: &'static str,
    },
    /// A variable deckrun sets has a value this library cannot use.
    #[error("{var}={value:?} is not valid: expected {expected}")]
    EnvInvalid {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it should look like.
        expected: String,
    },
    /// No address of the launcher accepted a connection in time.
    #[error("cannot reach deckrun at {} within {timeout:?}: {source}", addr_list(.addrs))]
    Unreachable {
        /// The addresses tried, in order (`DECK_BOOT`).
        addrs: Vec<SocketAddr>,
        /// The time allowed.
        timeout: Duration,
        /// The last attempt's error.
        #[source]
        source: io::Error,
    },
    /// The launcher refused this node.
    #[error("deckrun refused node {node}: {rejection} ({detail})")]
    Rejected {
        /// This node.
        node: u32,
        /// Why.
        rejection: Rejection,
        /// The launcher's words.
        detail: String,
    },
    /// The launcher did not answer in time.
    #[error("timed out after {timeout:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
        /// The time allowed.
        timeout: Duration,
    },
    /// The launcher stopped the job.
    #[error("job aborted by deckrun: {reason}")]
    Aborted {
        /// The launcher's words.
        reason: String,
    },
    /// The connection to the launcher broke.
    #[error("lost the connection to deckrun while {during}: {source}")]
    Lost {
        /// What the node was doing.
        during: &'static str,
        /// The socket's error (`UnexpectedEof` when the launcher closed).
        #[source]
        source: io::Error,
    },
    /// A card longer than [`MAX_CARD`].
    #[error("a card of {len} bytes: at most {MAX_CARD} allowed")]
    CardTooLong {
        /// Its length.
        len: usize,
    },
    /// The peer broke the protocol.
    #[error("bootstrap protocol error: {0}")]
    Protocol(#[from] ProtocolError),
    /// The launcher's server could not listen.
    #[error("cannot start the bootstrap server: {0}")]
    Listen(#[source] io::Error),
    /// The PMIx launcher's server failed (the job was started by srun, mpirun, ...).
    #[error("PMIx bootstrap: {0}")]
    Pmix(#[from] pmix_boot::PmixError),
    /// Rank 0 could not draw the job's key.
    #[error("cannot draw the job's key: {0}")]
    Key(#[source] msg_layer::transport::TransportError),
}

/// A frame that breaks the protocol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Longer than the receiver accepts (or empty).
    #[error("a frame of {len} bytes (1..={max} allowed)")]
    FrameLength {
        /// The announced length.
        len: usize,
        /// The receiver's bound.
        max: usize,
    },
    /// The body ends before its fields do.
    #[error("truncated {what}")]
    Truncated {
        /// The message.
        what: &'static str,
    },
    /// The body goes on after its fields.
    #[error("{what} has {extra} bytes too many")]
    Trailing {
        /// The message.
        what: &'static str,
        /// How many.
        extra: usize,
    },
    /// A text that is not UTF-8.
    #[error("{what} carries text that is not UTF-8")]
    NotUtf8 {
        /// The message.
        what: &'static str,
    },
    /// A card longer than [`MAX_CARD`].
    #[error("a card of {len} bytes (at most {MAX_CARD})")]
    CardTooLong {
        /// Its length.
        len: usize,
    },
    /// KEY material empty or longer than [`MAX_KEY`].
    #[error("a KEY of {len} bytes (1 to {MAX_KEY})")]
    BadKey {
        /// Its length.
        len: usize,
    },
    /// A HELLO without the magic: not a DECK node.
    #[error("not a DECK bootstrap HELLO (first bytes {0:02x?})")]
    BadMagic([u8; 4]),
    /// A message that makes no sense at this point.
    #[error("expected {expected}, got {got}")]
    Unexpected {
        /// What could come.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
    /// A round's answer with the wrong number of cards.
    #[error("round {round} has {got} cards for {numnodes} nodes")]
    CardCount {
        /// The round.
        round: u32,
        /// Cards received.
        got: usize,
        /// Nodes in the job.
        numnodes: u32,
    },
    /// The launcher and the environment disagree on the job's size.
    #[error("deckrun runs {launcher} nodes but {ENV_NUMNODES} says {env}")]
    NumNodes {
        /// WELCOME's count.
        launcher: u32,
        /// `DECK_NUMNODES`.
        env: u32,
    },
    /// A CARD or CARDS of another round than the one under way.
    #[error("a card for round {got} when round {expected} was due")]
    Round {
        /// The round received.
        got: u32,
        /// The round due.
        expected: u32,
    },
}

/// Why the launcher refused a node's HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// The HELLO names another job: a stray process of an earlier run.
    WrongJob,
    /// The node number is not below the job's size.
    NodeOutOfRange,
    /// Another connection already said HELLO for this node.
    AlreadyConnected,
    /// The launcher speaks another version of the protocol.
    Version,
    /// A code this version does not know.
    Unknown(u8),
}

impl Rejection {
    fn code(self) -> u8 {
        match self {
            Rejection::WrongJob => 1,
            Rejection::NodeOutOfRange => 2,
            Rejection::AlreadyConnected => 3,
            Rejection::Version => 4,
            Rejection::Unknown(c) => c,
        }
    }

    fn from_code(code: u8) -> Rejection {
        match code {
            1 => Rejection::WrongJob,
            2 => Rejection::NodeOutOfRange,
            3 => Rejection::AlreadyConnected,
            4 => Rejection::Version,
            c => Rejection::Unknown(c),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::WrongJob => f.write_str("another job"),
            Rejection::NodeOutOfRange => f.write_str("node number out of range"),
            Rejection::AlreadyConnected => f.write_str("node already connected"),
            Rejection::Version => f.write_str("other protocol version"),
            Rejection::Unknown(c) => write!(f, "reason {c}"),
        }
    }
}

fn addr_list(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
    list.join(", ")
}

/// What deckrun told this process about its job.
#[derive(Clone, Debug)]
pub struct JobEnv {
    /// This process's node, `0..numnodes`.
    pub node: u32,
    /// The number of nodes.
    pub numnodes: u32,
    /// The launcher's bootstrap server, in the order to try.
    pub boot: Vec<SocketAddr>,
    /// The job's id.
    pub job: u64,
    /// The transport to open ([`ENV_TRANSPORT`]). An LLC spec that names
    /// no port has port 0 here: each node takes a free one (several nodes
    /// share a host's interface), where a spec's own default is 7.
    pub transport: msg_layer::transport::TransportSpec,
    /// The node's index among the job's nodes on its host.
    pub local_rank: u32,
}

impl JobEnv {
    /// Ok(None) when DECK_BOOT is not set: a process started on its own (a job of one node).
    pub fn from_env() -> Result<Option<JobEnv>, BootError> {
        let mut bad = None;
        let env = JobEnv::from_lookup(|var| match std::env::var_os(var) {
            None => None,
            Some(v) => match v.into_string() {
                Ok(s) => Some(s),
                Err(v) => {
                    bad.get_or_insert((var.to_owned(), v.to_string_lossy().into_owned()));
                    Some(String::new())
                }
            },
        });
        if let Some((var, value)) = bad {
            let var = [ENV_NODE, ENV_NUMNODES, ENV_BOOT, ENV_JOB, ENV_TRANSPORT]
                .into_iter()
                .find(|v| *v == var)
                .unwrap_or(ENV_BOOT);
            return Err(BootError::EnvInvalid {
                var,
                value,
                expected: "UTF-8 text".into(),
            });
        }
        env
    }

    /// [`JobEnv::from_env`] over any source of variables (tests, a saved
    /// environment).
    pub fn from_lookup(
        mut get: impl FnMut(&str) -> Option<String>,
    ) -> Result<Option<JobEnv>, BootError> {
        let Some(boot_s) = get(ENV_BOOT) else {
            return Ok(None);
        };
        let mut need = |var: &'static str| get(var).ok_or(BootError::EnvMissing { var });
        let invalid = |var: &'static str, value: &str, expected: &str| BootError::EnvInvalid {
            var,
            value: value.to_owned(),
            expected: expected.to_owned(),
        };

        let numnodes_s = need(ENV_NUMNODES)?;
        let numnodes = numnodes_s
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_NODES).contains(n))
            .ok_or_else(|| {
                invalid(
                    ENV_NUMNODES,
                    &numnodes_s,
                    &format!("a number of nodes, 1..={MAX_NODES}"),
                )
            })?;
        let node_s = need(ENV_NODE)?;
        let node = node_s
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| n < numnodes)
            .ok_or_else(|| {
                invalid(
                    ENV_NODE,
                    &node_s,
                    &format!("a node number below {ENV_NUMNODES}={numnodes}"),
                )
            })?;
        let job_s = need(ENV_JOB)?;
        let digits = job_s.trim();
        let digits = digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0X"))
            .unwrap_or(digits);
        let job = Some(digits)
            .filter(|d| (1..=16).contains(&d.len()))
            .and_then(|d| u64::from_str_radix(d, 16).ok())
            .ok_or_else(|| invalid(ENV_JOB, &job_s, "a job id of 1 to 16 hex digits"))?;
        let boot = boot_s
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(str::parse::<SocketAddr>)
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|list| !list.is_empty())
            .ok_or_else(|| {
                invalid(
                    ENV_BOOT,
                    &boot_s,
                    "a comma-separated list of IP:PORT, e.g. 10.0.0.1:4711",
                )
            })?;
        let transport = parse_transport(get(ENV_TRANSPORT))?;
        let local_rank = match get(ENV_LOCAL_RANK) {
            None => 0,
            Some(r) => r
                .parse()
                .map_err(|_| invalid(ENV_LOCAL_RANK, &r, "a number from 0"))?,
        };
        Ok(Some(JobEnv {
            node,
            numnodes,
            boot,
            job,
            transport,
            local_rank,
        }))
    }
}

/// The transport spec of `DECK_TRANSPORT`'s value (`llc://` when unset or empty). An LLC
/// spec that names no port gets port 0: each node takes a free one (several nodes share
/// a host's interface), where a spec's own default is 7.
pub(crate) fn parse_transport(
    value: Option<String>,
) -> Result<msg_layer::transport::TransportSpec, BootError> {
    let spec_s = value
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_TRANSPORT.to_owned());
    let mut transport = spec_s.parse().map_err(|e| BootError::EnvInvalid {
        var: ENV_TRANSPORT,
        value: spec_s.clone(),
        expected: format!(
            "a transport spec, e.g. llc://, llc://eth0?backend=xdp or tcp://0.0.0.0:0 ({e})"
        ),
    })?;
    if let msg_layer::transport::TransportSpec::Llc(l) = &mut transport {
        let query = spec_s.split_once('?').map_or("", |(_, q)| q);
        if !query.split('&').any(|o| o.starts_with("port=")) {
            l.port = 0;
        }
    }
    Ok(transport)
}

mod node;
mod pmix;
mod server;
mod wire;

pub use node::*;
pub use pmix::PmixJob;
pub use server::*;

#[cfg(test)]
mod tests;
