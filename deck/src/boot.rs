//! The job's bootstrap: how a DECK process started by `deckrun` learns its
//! node number and its peers' addresses.
//!
//! `deckrun` starts every node with these variables ([`JobEnv::from_env`]
//! reads them): `DECK_NODE` (0..N-1), `DECK_NUMNODES` (N), `DECK_BOOT` (the
//! launcher's bootstrap server as a comma-separated `IP:PORT` list, tried in
//! order), `DECK_JOB` (the job's random 64-bit id, hex), `DECK_BACKEND`
//! (`auto`, `xdp`, `packet` or `tcp`) and, for LLC, `DECK_IFACE`.
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
/// The transport backend: one of [`BACKENDS`].
pub const ENV_BACKEND: &str = "DECK_BACKEND";
/// The Ethernet interface the hosts share (LLC backends).
pub const ENV_IFACE: &str = "DECK_IFACE";

/// The values `DECK_BACKEND` may take.
pub const BACKENDS: [&str; 4] = ["auto", "xdp", "packet", "tcp"];

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
    /// The transport backend, one of [`BACKENDS`].
    pub backend: String,
    /// The Ethernet interface, for LLC.
    pub iface: Option<String>,
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
            let var = [
                ENV_NODE,
                ENV_NUMNODES,
                ENV_BOOT,
                ENV_JOB,
                ENV_BACKEND,
                ENV_IFACE,
            ]
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
        let backend = match get(ENV_BACKEND) {
            None => "auto".to_owned(),
            Some(b) if BACKENDS.contains(&b.as_str()) => b,
            Some(b) => return Err(invalid(ENV_BACKEND, &b, &BACKENDS.join(", "))),
        };
        let iface = get(ENV_IFACE).filter(|i| !i.is_empty());
        Ok(Some(JobEnv {
            node,
            numnodes,
            boot,
            job,
            backend,
            iface,
        }))
    }
}

// ---------------------------------------------------------------------------
// Wire format

/// Kind bytes of the frames (see the module documentation).
mod kind {
    pub const HELLO: u8 = 0x01;
    pub const CARD: u8 = 0x02;
    pub const FINISH: u8 = 0x03;
    pub const WELCOME: u8 = 0x81;
    pub const REJECT: u8 = 0x82;
    pub const CARDS: u8 = 0x83;
    pub const ABORT: u8 = 0x84;
    pub const FINISHED: u8 = 0x85;
    pub const KEY: u8 = 0x86;
}

/// A message from a node to the launcher.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ClientMsg {
    Hello { version: u16, job: u64, node: u32 },
    Card { round: u32, card: String },
    Finish,
    Unknown(u8),
}

/// A message from the launcher to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ServerMsg {
    Welcome { version: u16, numnodes: u32 },
    Reject { why: Rejection, detail: String },
    Cards { round: u32, cards: Vec<String> },
    Abort { reason: String },
    Finished,
    Key(KeyMaterial),
    Unknown(u8),
}

/// Reads the fields of one frame's body; never panics on short input.
struct Fields<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Fields { bytes, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.bytes.len() < n {
            return Err(ProtocolError::Truncated { what: self.what });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u16(&mut self) -> Result<u16, ProtocolError> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32, ProtocolError> {
        self.array().map(u32::from_be_bytes)
    }

    fn u64(&mut self) -> Result<u64, ProtocolError> {
        self.array().map(u64::from_be_bytes)
    }

    fn utf8(&self, bytes: &[u8]) -> Result<String, ProtocolError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| ProtocolError::NotUtf8 { what: self.what })
    }

    /// A `u32`-length-prefixed UTF-8 string.
    fn string(&mut self) -> Result<String, ProtocolError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        self.utf8(bytes)
    }

    /// The rest of the body as UTF-8.
    fn text(mut self) -> Result<String, ProtocolError> {
        let rest = self.take(self.bytes.len())?;
        self.utf8(rest)
    }

    fn end(self) -> Result<(), ProtocolError> {
        match self.bytes.len() {
            0 => Ok(()),
            extra => Err(ProtocolError::Trailing {
                what: self.what,
                extra,
            }),
        }
    }
}

/// Builds one frame: length, kind, body.
struct FrameBuf(Vec<u8>);

impl FrameBuf {
    fn new(kind: u8) -> Self {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0, 0, 0, 0, kind]);
        FrameBuf(v)
    }

    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }

    fn string(self, s: &str) -> Self {
        let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
        self.u32(len).bytes(s.as_bytes())
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.0.len() - 4).unwrap_or(u32::MAX);
        self.0[..4].copy_from_slice(&len.to_be_bytes());
        self.0
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl ClientMsg {
    fn name(&self) -> &'static str {
        match self {
            ClientMsg::Hello { .. } => "HELLO",
            ClientMsg::Card { .. } => "CARD",
            ClientMsg::Finish => "FINISH",
            ClientMsg::Unknown(_) => "a message of unknown kind",
        }
    }

    fn emit(&self) -> Vec<u8> {
        match self {
            ClientMsg::Hello { version, job, node } => FrameBuf::new(kind::HELLO)
                .bytes(&MAGIC)
                .u16(*version)
                .u64(*job)
                .u32(*node),
            ClientMsg::Card { round, card } => {
                FrameBuf::new(kind::CARD).u32(*round).bytes(card.as_bytes())
            }
            ClientMsg::Finish => FrameBuf::new(kind::FINISH),
            ClientMsg::Unknown(k) => FrameBuf::new(*k),
        }
        .finish()
    }

    fn parse(kind: u8, body: &[u8]) -> Result<ClientMsg, ProtocolError> {
        match kind {
            kind::HELLO => {
                let mut f = Fields::new(body, "HELLO");
                let magic = f.array::<4>()?;
                if magic != MAGIC {
                    return Err(ProtocolError::BadMagic(magic));
                }
                let msg = ClientMsg::Hello {
                    version: f.u16()?,
                    job: f.u64()?,
                    node: f.u32()?,
                };
                f.end()?;
                Ok(msg)
            }
            kind::CARD => {
                let mut f = Fields::new(body, "CARD");
                let round = f.u32()?;
                if body.len() - 4 > MAX_CARD {
                    return Err(ProtocolError::CardTooLong {
                        len: body.len() - 4,
                    });
                }
                Ok(ClientMsg::Card {
                    round,
                    card: f.text()?,
                })
            }
            kind::FINISH => Fields::new(body, "FINISH")
                .end()
                .map(|()| ClientMsg::Finish),
            k => Ok(ClientMsg::Unknown(k)),
        }
    }
}

impl ServerMsg {
    fn name(&self) -> &'static str {
        match self {
            ServerMsg::Welcome { .. } => "WELCOME",
            ServerMsg::Reject { .. } => "REJECT",
            ServerMsg::Cards { .. } => "CARDS",
            ServerMsg::Abort { .. } => "ABORT",
            ServerMsg::Finished => "FINISHED",
            ServerMsg::Key(_) => "KEY",
            ServerMsg::Unknown(_) => "a message of unknown kind",
        }
    }

    fn emit(&self) -> Vec<u8> {
        match self {
            ServerMsg::Welcome { version, numnodes } => {
                FrameBuf::new(kind::WELCOME).u16(*version).u32(*numnodes)
            }
            ServerMsg::Reject { why, detail } => FrameBuf::new(kind::REJECT)
                .bytes(&[why.code()])
                .bytes(clip(detail, MAX_TEXT).as_bytes()),
            ServerMsg::Cards { round, cards } => {
                let count = u32::try_from(cards.len()).unwrap_or(u32::MAX);
                cards
                    .iter()
                    .fold(FrameBuf::new(kind::CARDS).u32(*round).u32(count), |b, c| {
                        b.string(c)
                    })
            }
            ServerMsg::Abort { reason } => {
                FrameBuf::new(kind::ABORT).bytes(clip(reason, MAX_TEXT).as_bytes())
            }
            ServerMsg::Finished => FrameBuf::new(kind::FINISHED),
            ServerMsg::Key(m) => FrameBuf::new(kind::KEY).bytes(m.as_bytes()),
            ServerMsg::Unknown(k) => FrameBuf::new(*k),
        }
        .finish()
    }

    fn parse(kind: u8, body: &[u8]) -> Result<ServerMsg, ProtocolError> {
        match kind {
            kind::WELCOME => {
                let mut f = Fields::new(body, "WELCOME");
                let msg = ServerMsg::Welcome {
                    version: f.u16()?,
                    numnodes: f.u32()?,
                };
                f.end()?;
                Ok(msg)
            }
            kind::REJECT => {
                let mut f = Fields::new(body, "REJECT");
                let why = Rejection::from_code(f.array::<1>()?[0]);
                Ok(ServerMsg::Reject {
                    why,
                    detail: f.text()?,
                })
            }
            kind::CARDS => {
                let mut f = Fields::new(body, "CARDS");
                let round = f.u32()?;
                let count = f.u32()?;
                // Each card takes at least its 4-byte length: a bogus count
                // cannot make us allocate more than the frame's size.
                let mut cards = Vec::with_capacity((count as usize).min(body.len() / 4));
                for _ in 0..count {
                    cards.push(f.string()?);
                }
                f.end()?;
                Ok(ServerMsg::Cards { round, cards })
            }
            kind::ABORT => Ok(ServerMsg::Abort {
                reason: Fields::new(body, "ABORT").text()?,
            }),
            kind::FINISHED => Fields::new(body, "FINISHED")
                .end()
                .map(|()| ServerMsg::Finished),
            kind::KEY => {
                let text = Fields::new(body, "KEY").text()?;
                KeyMaterial::new(text)
                    .map(ServerMsg::Key)
                    .ok_or(ProtocolError::BadKey { len: body.len() })
            }
            k => Ok(ServerMsg::Unknown(k)),
        }
    }
}

/// Why no frame could be read.
#[derive(Debug)]
enum ReadError {
    /// The peer closed between frames.
    Eof,
    /// The deadline passed; what was read so far is kept for the next call.
    Timeout,
    /// The socket failed, or closed inside a frame.
    Io(io::Error),
    /// The frame is malformed.
    Protocol(ProtocolError),
}

impl ReadError {
    /// As a [`BootError`], for a node waiting for `what`.
    fn into_boot(self, what: &'static str, timeout: Duration) -> BootError {
        match self {
            ReadError::Eof => BootError::Lost {
                during: what,
                source: io::Error::new(io::ErrorKind::UnexpectedEof, "deckrun closed it"),
            },
            ReadError::Timeout => BootError::Timeout { what, timeout },
            ReadError::Io(source) => BootError::Lost {
                during: what,
                source,
            },
            ReadError::Protocol(e) => BootError::Protocol(e),
        }
    }

    fn into_io(self) -> io::Error {
        match self {
            ReadError::Eof => io::Error::new(io::ErrorKind::UnexpectedEof, "closed"),
            ReadError::Timeout => io::Error::new(io::ErrorKind::TimedOut, "timed out"),
            ReadError::Io(e) => e,
            ReadError::Protocol(e) => io::Error::new(io::ErrorKind::InvalidData, e),
        }
    }
}

/// Cuts a byte stream into frames; keeps a partial frame across timeouts,
/// so a timed-out read loses nothing.
struct FrameReader {
    buf: Vec<u8>,
    max: usize,
}

impl FrameReader {
    fn new(max: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            max,
        }
    }

    /// The next frame's kind and body; `deadline` None waits for ever.
    fn read(
        &mut self,
        stream: &TcpStream,
        deadline: Option<Instant>,
    ) -> Result<(u8, Vec<u8>), ReadError> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(head) = self.buf.first_chunk::<4>() {
                let len = u32::from_be_bytes(*head) as usize;
                if len == 0 || len > self.max {
                    return Err(ReadError::Protocol(ProtocolError::FrameLength {
                        len,
                        max: self.max,
                    }));
                }
                if self.buf.len() >= 4 + len {
                    let kind = self.buf[4];
                    let body = self.buf[5..4 + len].to_vec();
                    self.buf.drain(..4 + len);
                    return Ok((kind, body));
                }
            }
            let timeout = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => return Err(ReadError::Timeout),
                },
            };
            stream.set_read_timeout(timeout).map_err(ReadError::Io)?;
            match (&*stream).read(&mut chunk) {
                Ok(0) if self.buf.is_empty() => return Err(ReadError::Eof),
                Ok(0) => {
                    return Err(ReadError::Io(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "closed in the middle of a message",
                    )))
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    fn read_server(
        &mut self,
        stream: &TcpStream,
        deadline: Option<Instant>,
    ) -> Result<ServerMsg, ReadError> {
        let (kind, body) = self.read(stream, deadline)?;
        ServerMsg::parse(kind, &body).map_err(ReadError::Protocol)
    }

    fn read_client(
        &mut self,
        stream: &TcpStream,
        deadline: Option<Instant>,
    ) -> Result<ClientMsg, ReadError> {
        let (kind, body) = self.read(stream, deadline)?;
        ClientMsg::parse(kind, &body).map_err(ReadError::Protocol)
    }
}

/// Writes one frame, bounded by `timeout`.
fn send(stream: &TcpStream, frame: &[u8], timeout: Duration) -> io::Result<()> {
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    (&*stream).write_all(frame)
}

/// The longest frame a node accepts from the launcher in a job of `numnodes`.
fn max_server_frame(numnodes: u32) -> usize {
    (9 + numnodes as usize * (4 + MAX_CARD)).max(2 * MAX_TEXT)
}

// ---------------------------------------------------------------------------
// Node side

/// A node's connection to its launcher, from [`Boot::connect`] to
/// [`Boot::watch`].
#[derive(Debug)]
pub struct Boot {
    stream: TcpStream,
    reader: FrameReader,
    node: u32,
    numnodes: u32,
    round: u32,
    local_ip: IpAddr,
    /// The job's key material, when the launcher sent it (KEY).
    key: Option<KeyMaterial>,
}

impl fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FrameReader({} bytes buffered)", self.buf.len())
    }
}

impl Boot {
    /// Connects to the launcher and says HELLO: each address of
    /// `env.boot` in order, again and again (the launcher may still be
    /// starting) until `timeout`.
    pub fn connect(env: &JobEnv, timeout: Duration) -> Result<Boot, BootError> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut pause = RETRY_PAUSE.0;
        let mut last = io::Error::new(io::ErrorKind::TimedOut, "no attempt in the time allowed");
        loop {
            for addr in &env.boot {
                let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                    break;
                };
                if left.is_zero() {
                    break;
                }
                let stream = match TcpStream::connect_timeout(addr, left.min(CONNECT_ATTEMPT)) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(%addr, error = %e, "deck boot: connect failed");
                        last = e;
                        continue;
                    }
                };
                match Boot::hello(stream, env, deadline, timeout) {
                    Ok(boot) => return Ok(boot),
                    // It went away before answering: try again.
                    Err(BootError::Lost { source, .. }) => last = source,
                    Err(e) => return Err(e),
                }
            }
            if Instant::now() + pause >= deadline {
                return Err(BootError::Unreachable {
                    addrs: env.boot.clone(),
                    timeout,
                    source: last,
                });
            }
            // Back-off between rounds of attempts, not a synchronisation.
            thread::sleep(pause);
            pause = (pause * 2).min(RETRY_PAUSE.1);
        }
    }

    fn hello(
        stream: TcpStream,
        env: &JobEnv,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Boot, BootError> {
        const WHAT: &str = "the answer to HELLO";
        let lost = |source| BootError::Lost {
            during: WHAT,
            source,
        };
        stream.set_nodelay(true).map_err(lost)?;
        let local_ip = stream.local_addr().map_err(lost)?.ip();
        let hello = ClientMsg::Hello {
            version: VERSION,
            job: env.job,
            node: env.node,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        send(&stream, &hello.emit(), left).map_err(lost)?;
        let mut reader = FrameReader::new(max_server_frame(env.numnodes));
        let mut key = None;
        loop {
            let msg = reader
                .read_server(&stream, Some(deadline))
                .map_err(|e| e.into_boot(WHAT, timeout))?;
            match msg {
                ServerMsg::Welcome { numnodes, .. } if numnodes != env.numnodes => {
                    return Err(ProtocolError::NumNodes {
                        launcher: numnodes,
                        env: env.numnodes,
                    }
                    .into())
                }
                ServerMsg::Welcome { .. } => break,
                ServerMsg::Key(m) => key = Some(m),
                ServerMsg::Reject { why, detail } => {
                    return Err(BootError::Rejected {
                        node: env.node,
                        rejection: why,
                        detail,
                    })
                }
                ServerMsg::Abort { reason } => return Err(BootError::Aborted { reason }),
                ServerMsg::Unknown(_) => continue,
                other => {
                    return Err(ProtocolError::Unexpected {
                        expected: "WELCOME",
                        got: other.name(),
                    }
                    .into())
                }
            }
        }
        tracing::debug!(node = env.node, %local_ip, "deck boot: connected");
        Ok(Boot {
            stream,
            reader,
            node: env.node,
            numnodes: env.numnodes,
            round: 0,
            local_ip,
            key,
        })
    }

    /// The job's key material, when the launcher keys the job's frames.
    pub fn key_material(&self) -> Option<&KeyMaterial> {
        self.key.as_ref()
    }

    /// This node.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The number of nodes.
    pub fn numnodes(&self) -> u32 {
        self.numnodes
    }

    /// The local IP address of the connection to the launcher: the address this host reaches the launcher from (the library binds TCP transports there).
    pub fn local_ip(&self) -> std::net::IpAddr {
        self.local_ip
    }

    /// One all-gather round: every node's card, index = node.
    pub fn exchange(&mut self, card: &str, timeout: Duration) -> Result<Vec<String>, BootError> {
        const WHAT: &str = "the other nodes' cards";
        check_card(card)?;
        let deadline = Instant::now() + timeout;
        let round = self.round;
        let frame = ClientMsg::Card {
            round,
            card: card.to_owned(),
        }
        .emit();
        send(&self.stream, &frame, timeout).map_err(|source| BootError::Lost {
            during: "sending a card",
            source,
        })?;
        loop {
            let msg = self
                .reader
                .read_server(&self.stream, Some(deadline))
                .map_err(|e| e.into_boot(WHAT, timeout))?;
            match msg {
                ServerMsg::Cards { round: r, cards } => {
                    let cards = check_cards(round, r, cards, self.numnodes)?;
                    self.round += 1;
                    return Ok(cards);
                }
                ServerMsg::Abort { reason } => return Err(BootError::Aborted { reason }),
                ServerMsg::Unknown(_) => {}
                other => {
                    return Err(ProtocolError::Unexpected {
                        expected: "CARDS",
                        got: other.name(),
                    }
                    .into())
                }
            }
        }
    }

    /// Hand the connection to a watchdog thread (ABORT / lost launcher => exit the process as above).
    pub fn watch(self) -> BootHandle {
        let node = self.node;
        self.watch_with(move |end| {
            let msg = match end {
                WatchEnd::Aborted(reason) => {
                    format!("deck: node {node}: job aborted by deckrun: {reason}")
                }
                WatchEnd::Lost(e) => {
                    tracing::debug!("deck boot: connection to deckrun ended: {e}");
                    format!("deck: node {node}: lost the connection to deckrun; exiting")
                }
            };
            // Not eprintln!: stderr may be a pipe whose reader (deckrun) is gone.
            let _ = writeln!(io::stderr(), "{msg}");
            std::process::exit(EXIT_ABORTED);
        })
    }

    /// [`Boot::watch`] with what to do instead of exiting (tests).
    fn watch_with(self, on_end: impl FnOnce(WatchEnd) + Send + 'static) -> BootHandle {
        let shared = Arc::new(Shared {
            state: Mutex::new(WatchState {
                finish_sent: false,
                finished: false,
                cards: None,
                lost: None,
            }),
            cond: Condvar::new(),
        });
        let writer = self.stream.try_clone();
        let handle = BootHandle {
            shared: shared.clone(),
            writer: Mutex::new(writer),
            round: Mutex::new(self.round),
            node: self.node,
            numnodes: self.numnodes,
            local_ip: self.local_ip,
        };
        let Boot {
            stream, mut reader, ..
        } = self;
        let spawned = thread::Builder::new()
            .name("deck-boot-watch".into())
            .spawn(move || {
                let end = watchdog(&stream, &mut reader, &shared);
                if let Some(end) = end {
                    on_end(end);
                }
            });
        if let Err(e) = spawned {
            // Without a watchdog the node would not notice an abort: say so.
            tracing::warn!("deck boot: cannot start the watchdog thread: {e}");
        }
        handle
    }
}

fn check_card(card: &str) -> Result<(), BootError> {
    if card.len() > MAX_CARD {
        return Err(BootError::CardTooLong { len: card.len() });
    }
    Ok(())
}

fn check_cards(
    expected: u32,
    round: u32,
    cards: Vec<String>,
    numnodes: u32,
) -> Result<Vec<String>, ProtocolError> {
    if round != expected {
        return Err(ProtocolError::Round {
            got: round,
            expected,
        });
    }
    if cards.len() != numnodes as usize {
        return Err(ProtocolError::CardCount {
            round,
            got: cards.len(),
            numnodes,
        });
    }
    Ok(cards)
}

/// Why a watchdog ends its process.
#[derive(Debug)]
enum WatchEnd {
    /// ABORT, with the launcher's reason.
    Aborted(String),
    /// The connection ended before FINISH.
    Lost(io::Error),
}

struct Shared {
    state: Mutex<WatchState>,
    cond: Condvar,
}

struct WatchState {
    finish_sent: bool,
    /// FINISHED arrived.
    finished: bool,
    /// The last CARDS, for [`BootHandle::exchange`].
    cards: Option<(u32, Vec<String>)>,
    /// The connection ended (after FINISH; before it, the process exits).
    lost: Option<io::Error>,
}

/// Reads the launcher's messages until ABORT or the end of the
/// connection; returns what should end the process, if anything.
fn watchdog(stream: &TcpStream, reader: &mut FrameReader, shared: &Shared) -> Option<WatchEnd> {
    loop {
        let msg = reader.read_server(stream, None);
        let mut st = shared.state.lock();
        match msg {
            Ok(ServerMsg::Abort { reason }) => return Some(WatchEnd::Aborted(reason)),
            Ok(ServerMsg::Finished) => st.finished = true,
            Ok(ServerMsg::Cards { round, cards }) => st.cards = Some((round, cards)),
            Ok(ServerMsg::Unknown(_)) => continue,
            Ok(other) => tracing::warn!("deck boot: unexpected {} from deckrun", other.name()),
            Err(e) => {
                let e = e.into_io();
                if st.finish_sent {
                    tracing::debug!("deck boot: connection to deckrun ended after FINISH: {e}");
                    st.lost = Some(e);
                    shared.cond.notify_all();
                    return None;
                }
                return Some(WatchEnd::Lost(e));
            }
        }
        shared.cond.notify_all();
    }
}

/// The connection to the launcher after [`Boot::watch`]: a watchdog thread
/// reads it; this handle writes.
pub struct BootHandle {
    shared: Arc<Shared>,
    /// `Err` when the socket could not be duplicated: every call then fails.
    writer: Mutex<io::Result<TcpStream>>,
    round: Mutex<u32>,
    node: u32,
    numnodes: u32,
    local_ip: IpAddr,
}

impl fmt::Debug for BootHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootHandle")
            .field("node", &self.node)
            .field("numnodes", &self.numnodes)
            .finish_non_exhaustive()
    }
}

impl BootHandle {
    /// This node.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The number of nodes.
    pub fn numnodes(&self) -> u32 {
        self.numnodes
    }

    /// See [`Boot::local_ip`].
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    fn write(&self, frame: &[u8], during: &'static str) -> Result<(), BootError> {
        let writer = self.writer.lock();
        let lost = |source| BootError::Lost { during, source };
        match &*writer {
            Ok(s) => send(s, frame, SERVER_WRITE_TIMEOUT).map_err(lost),
            Err(e) => Err(lost(io::Error::new(e.kind(), e.to_string()))),
        }
    }

    /// deck_done: tell the launcher this node finished; its exit is then expected. Idempotent.
    pub fn finish(&self) -> Result<(), BootError> {
        const WHAT: &str = "FINISHED";
        let deadline = Instant::now() + FINISH_TIMEOUT;
        let mut st = self.shared.state.lock();
        if st.finished {
            return Ok(());
        }
        if !st.finish_sent {
            // Marked first: the watchdog must not exit the process when the
            // launcher closes right after reading FINISH.
            st.finish_sent = true;
            drop(st);
            self.write(&ClientMsg::Finish.emit(), "sending FINISH")?;
            st = self.shared.state.lock();
        }
        while !st.finished {
            if let Some(e) = &st.lost {
                return Err(BootError::Lost {
                    during: "waiting for FINISHED",
                    source: io::Error::new(e.kind(), e.to_string()),
                });
            }
            if self.shared.cond.wait_until(&mut st, deadline).timed_out() {
                return Err(BootError::Timeout {
                    what: WHAT,
                    timeout: FINISH_TIMEOUT,
                });
            }
        }
        Ok(())
    }

    /// One more all-gather round after [`Boot::watch`] (see
    /// [`Boot::exchange`]); rounds go on from where the [`Boot`] left off.
    /// Calls are serialised.
    pub fn exchange(&self, card: &str, timeout: Duration) -> Result<Vec<String>, BootError> {
        check_card(card)?;
        let deadline = Instant::now() + timeout;
        let mut next = self.round.lock();
        let round = *next;
        let frame = ClientMsg::Card {
            round,
            card: card.to_owned(),
        }
        .emit();
        self.write(&frame, "sending a card")?;
        let mut st = self.shared.state.lock();
        loop {
            if let Some((r, _)) = &st.cards {
                let r = *r;
                let (_, cards) = st.cards.take().unwrap_or_default();
                let cards = check_cards(round, r, cards, self.numnodes)?;
                *next += 1;
                return Ok(cards);
            }
            if let Some(e) = &st.lost {
                return Err(BootError::Lost {
                    during: "waiting for the other nodes' cards",
                    source: io::Error::new(e.kind(), e.to_string()),
                });
            }
            if self.shared.cond.wait_until(&mut st, deadline).timed_out() {
                return Err(BootError::Timeout {
                    what: "the other nodes' cards",
                    timeout,
                });
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Launcher side

/// Something a connection of the [`BootServer`] read, for the thread that
/// owns the server to pass to [`BootServer::handle`].
pub struct Incoming(IncomingKind);

enum IncomingKind {
    /// A node said HELLO with this job's id.
    Hello {
        conn: u64,
        node: u32,
        stream: TcpStream,
        peer: SocketAddr,
    },
    Message {
        conn: u64,
        node: u32,
        msg: ClientMsg,
    },
    Closed {
        conn: u64,
        node: u32,
        error: Option<io::Error>,
    },
}

impl fmt::Debug for Incoming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            IncomingKind::Hello { node, peer, .. } => write!(f, "Hello(node {node} from {peer})"),
            IncomingKind::Message { node, msg, .. } => write!(f, "{}(node {node})", msg.name()),
            IncomingKind::Closed { node, error, .. } => write!(f, "Closed(node {node}, {error:?})"),
        }
    }
}

/// What [`BootServer::handle`] saw happen.
#[derive(Debug)]
pub enum BootNotice {
    /// A node of this job connected.
    Connected {
        /// The node.
        node: u32,
        /// Where from.
        peer: SocketAddr,
    },
    /// Every node's card of a round is in, and every connected node was sent
    /// the round's cards.
    RoundComplete {
        /// The round.
        round: u32,
    },
    /// A node said FINISH: its exit is expected.
    Finished {
        /// The node.
        node: u32,
    },
    /// A node's connection ended.
    Closed {
        /// The node.
        node: u32,
        /// Whether it had said FINISH.
        finished: bool,
        /// The socket's or the protocol's error; None for a plain close.
        error: Option<io::Error>,
    },
}

#[derive(Default)]
struct NodeConn {
    /// The connection's id and write side while it is open.
    conn: Option<(u64, TcpStream)>,
    /// It said HELLO once (a node connects once).
    connected: bool,
    /// Its next round.
    round: u32,
    finished: bool,
}

/// The launcher's bootstrap server: accepts the nodes' connections on
/// `0.0.0.0`, runs the all-gather rounds, sends ABORT.
///
/// A thread accepts and one thread per connection reads; they hand what
/// they read to `sink` (see [`BootServer::start`]). The node table and the
/// rounds belong to the thread that calls [`BootServer::handle`], which is
/// also the only one that writes to the nodes.
pub struct BootServer {
    port: u16,
    nodes: Vec<NodeConn>,
    /// Cards of the rounds under way, by round; index = node.
    rounds: BTreeMap<u32, Vec<Option<String>>>,
    /// Set by [`BootServer::abort`]: later HELLOs get ABORT.
    aborted: Option<String>,
    /// Sent to every node that says HELLO ([`BootServer::set_key`]).
    key: Option<KeyMaterial>,
    stop: Arc<AtomicBool>,
}

impl fmt::Debug for BootServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootServer")
            .field("port", &self.port)
            .field("numnodes", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

impl BootServer {
    /// Listens on `0.0.0.0:0` for the `numnodes` nodes of job `job`. Every
    /// [`Incoming`] goes to `sink` (from the server's threads), which passes
    /// it to the owner's [`BootServer::handle`], usually through a channel.
    pub fn start<F>(job: u64, numnodes: u32, sink: F) -> Result<BootServer, BootError>
    where
        F: Fn(Incoming) + Send + Sync + 'static,
    {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(BootError::Listen)?;
        let port = listener.local_addr().map_err(BootError::Listen)?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let sink = Arc::new(sink);
        let stop2 = stop.clone();
        thread::Builder::new()
            .name("deck-boot-accept".into())
            .spawn(move || accept_loop(listener, job, numnodes, sink, &stop2))
            .map_err(BootError::Listen)?;
        tracing::debug!(port, numnodes, "deck boot: server listening");
        Ok(BootServer {
            port,
            nodes: (0..numnodes).map(|_| NodeConn::default()).collect(),
            rounds: BTreeMap::new(),
            aborted: None,
            key: None,
            stop,
        })
    }

    /// Hand `key` to every node that says HELLO from now on (KEY, before
    /// WELCOME): set it before the nodes start.
    pub fn set_key(&mut self, key: KeyMaterial) {
        self.key = Some(key);
    }

    /// The TCP port the server listens on (every address of the host).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether `node` said HELLO (it may have closed since).
    pub fn is_connected(&self, node: u32) -> bool {
        self.nodes.get(node as usize).is_some_and(|n| n.connected)
    }

    /// Whether `node` said FINISH.
    pub fn is_finished(&self, node: u32) -> bool {
        self.nodes.get(node as usize).is_some_and(|n| n.finished)
    }

    /// The round some node waits in that still lacks `node`'s card: if
    /// `node` is gone, that round can never complete.
    pub fn missing_card(&self, node: u32) -> Option<u32> {
        self.rounds
            .iter()
            .find(|(_, cards)| cards.get(node as usize).is_some_and(Option::is_none))
            .map(|(&round, _)| round)
    }

    /// Acts on what a connection read: answers HELLO, collects cards and
    /// sends each round's answer, acknowledges FINISH.
    #[must_use]
    pub fn handle(&mut self, incoming: Incoming) -> Option<BootNotice> {
        match incoming.0 {
            IncomingKind::Hello {
                conn,
                node,
                stream,
                peer,
            } => self.hello(conn, node, stream, peer),
            IncomingKind::Message { conn, node, msg } => {
                if !self.is_current(node, conn) {
                    return None;
                }
                match msg {
                    ClientMsg::Card { round, card } => self.card(node, round, card),
                    ClientMsg::Finish => {
                        self.nodes[node as usize].finished = true;
                        self.send_to(node, &ServerMsg::Finished.emit());
                        Some(BootNotice::Finished { node })
                    }
                    ClientMsg::Hello { .. } => {
                        tracing::warn!("deck boot: node {node} said HELLO twice; ignored");
                        None
                    }
                    ClientMsg::Unknown(k) => {
                        tracing::debug!("deck boot: node {node} sent kind {k:#04x}; ignored");
                        None
                    }
                }
            }
            IncomingKind::Closed { conn, node, error } => {
                if !self.is_current(node, conn) {
                    return None;
                }
                let n = &mut self.nodes[node as usize];
                n.conn = None;
                Some(BootNotice::Closed {
                    node,
                    finished: n.finished,
                    error,
                })
            }
        }
    }

    fn is_current(&self, node: u32, conn: u64) -> bool {
        self.nodes
            .get(node as usize)
            .and_then(|n| n.conn.as_ref())
            .is_some_and(|(c, _)| *c == conn)
    }

    fn hello(
        &mut self,
        conn: u64,
        node: u32,
        stream: TcpStream,
        peer: SocketAddr,
    ) -> Option<BootNotice> {
        let numnodes = self.nodes.len() as u32;
        let n = &mut self.nodes[node as usize];
        if let Some(reason) = &self.aborted {
            let _ = send(
                &stream,
                &ServerMsg::Abort {
                    reason: reason.clone(),
                }
                .emit(),
                SERVER_WRITE_TIMEOUT,
            );
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
        if n.connected {
            tracing::warn!("deck boot: a second connection for node {node} from {peer}; refused");
            let reject = ServerMsg::Reject {
                why: Rejection::AlreadyConnected,
                detail: format!("node {node} is already connected"),
            };
            let _ = send(&stream, &reject.emit(), SERVER_WRITE_TIMEOUT);
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
        let welcome = ServerMsg::Welcome {
            version: VERSION,
            numnodes,
        };
        let mut frames = self
            .key
            .as_ref()
            .map(|k| ServerMsg::Key(k.clone()).emit())
            .unwrap_or_default();
        frames.extend(welcome.emit());
        if let Err(e) = send(&stream, &frames, SERVER_WRITE_TIMEOUT) {
            tracing::warn!("deck boot: cannot answer node {node} at {peer}: {e}");
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        }
        n.connected = true;
        n.conn = Some((conn, stream));
        Some(BootNotice::Connected { node, peer })
    }

    fn card(&mut self, node: u32, round: u32, card: String) -> Option<BootNotice> {
        let numnodes = self.nodes.len();
        let n = &mut self.nodes[node as usize];
        if round != n.round {
            let e = ProtocolError::Round {
                got: round,
                expected: n.round,
            };
            tracing::warn!("deck boot: node {node}: {e}; closing its connection");
            if let Some((_, s)) = n.conn.take() {
                let _ = s.shutdown(Shutdown::Both);
            }
            return Some(BootNotice::Closed {
                node,
                finished: n.finished,
                error: Some(io::Error::new(io::ErrorKind::InvalidData, e)),
            });
        }
        n.round += 1;
        let cards = self
            .rounds
            .entry(round)
            .or_insert_with(|| vec![None; numnodes]);
        cards[node as usize] = Some(card);
        if cards.iter().any(Option::is_none) {
            return None;
        }
        let cards = self.rounds.remove(&round).unwrap_or_default();
        let cards = cards.into_iter().map(Option::unwrap_or_default).collect();
        let frame = ServerMsg::Cards { round, cards }.emit();
        for node in 0..numnodes as u32 {
            self.send_to(node, &frame);
        }
        Some(BootNotice::RoundComplete { round })
    }

    fn send_to(&mut self, node: u32, frame: &[u8]) -> bool {
        let Some((_, stream)) = &self.nodes[node as usize].conn else {
            return false;
        };
        match send(stream, frame, SERVER_WRITE_TIMEOUT) {
            Ok(()) => true,
            Err(e) => {
                // Its reader thread reports the end of the connection.
                tracing::debug!("deck boot: writing to node {node}: {e}");
                false
            }
        }
    }

    /// Sends ABORT with `reason` to every node still connected, and to any
    /// that connects later; returns the nodes told.
    pub fn abort(&mut self, reason: &str) -> Vec<u32> {
        self.aborted = Some(reason.to_owned());
        let frame = ServerMsg::Abort {
            reason: reason.to_owned(),
        }
        .emit();
        (0..self.nodes.len() as u32)
            .filter(|&node| self.send_to(node, &frame))
            .collect()
    }
}

impl Drop for BootServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(
            &SocketAddr::from((Ipv4Addr::LOCALHOST, self.port)),
            Duration::from_secs(1),
        );
        for n in &mut self.nodes {
            if let Some((_, s)) = n.conn.take() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn accept_loop<F>(listener: TcpListener, job: u64, numnodes: u32, sink: Arc<F>, stop: &AtomicBool)
where
    F: Fn(Incoming) + Send + Sync + 'static,
{
    static NEXT_CONN: AtomicU64 = AtomicU64::new(0);
    let mut pause = Duration::from_millis(1);
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // E.g. out of descriptors: do not spin.
                tracing::warn!("deck boot: accept: {e}");
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
                continue;
            }
        };
        pause = Duration::from_millis(1);
        let conn = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
        let sink = sink.clone();
        let spawned = thread::Builder::new()
            .name("deck-boot-conn".into())
            .spawn(move || serve_conn(stream, conn, job, numnodes, &*sink));
        if let Err(e) = spawned {
            tracing::warn!("deck boot: cannot start a connection thread: {e}");
        }
    }
}

/// Checks a new connection's HELLO, then forwards everything it says.
fn serve_conn<F: Fn(Incoming)>(stream: TcpStream, conn: u64, job: u64, numnodes: u32, sink: &F) {
    let peer = match stream.peer_addr() {
        Ok(p) => p,
        Err(_) => return,
    };
    let _ = stream.set_nodelay(true);
    let mut reader = FrameReader::new(MAX_CLIENT_FRAME);
    let hello = reader.read_client(&stream, Some(Instant::now() + HELLO_TIMEOUT));
    let reject = |why: Rejection, detail: String| {
        tracing::warn!("deck boot: connection from {peer} refused: {detail}");
        let msg = ServerMsg::Reject { why, detail };
        let _ = send(&stream, &msg.emit(), SERVER_WRITE_TIMEOUT);
        let _ = stream.shutdown(Shutdown::Both);
    };
    let node = match hello {
        Ok(ClientMsg::Hello { version, .. }) if version != VERSION => {
            return reject(
                Rejection::Version,
                format!("protocol version {version}, this deckrun speaks {VERSION}"),
            )
        }
        Ok(ClientMsg::Hello { job: j, .. }) if j != job => {
            return reject(
                Rejection::WrongJob,
                format!(
                    "job {j:016x} is not this job ({job:016x}): a stray process of another run?"
                ),
            )
        }
        Ok(ClientMsg::Hello { node, .. }) if node >= numnodes => {
            return reject(
                Rejection::NodeOutOfRange,
                format!("node {node} in a job of {numnodes} nodes"),
            )
        }
        Ok(ClientMsg::Hello { node, .. }) => node,
        Ok(other) => {
            tracing::warn!(
                "deck boot: connection from {peer} began with {} instead of HELLO; closed",
                other.name()
            );
            return;
        }
        Err(e) => {
            tracing::warn!(
                "deck boot: connection from {peer} did not say HELLO: {}; closed",
                e.into_io()
            );
            return;
        }
    };
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    sink(Incoming(IncomingKind::Hello {
        conn,
        node,
        stream: writer,
        peer,
    }));
    loop {
        match reader.read_client(&stream, None) {
            Ok(msg) => sink(Incoming(IncomingKind::Message { conn, node, msg })),
            Err(e) => {
                let error = match e {
                    ReadError::Eof => None,
                    e => Some(e.into_io()),
                };
                sink(Incoming(IncomingKind::Closed { conn, node, error }));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::mpsc;

    const T: Duration = Duration::from_secs(10);

    fn env_of(vars: &[(&str, &str)]) -> Result<Option<JobEnv>, BootError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        JobEnv::from_lookup(|k| map.get(k).cloned())
    }

    fn full_env() -> Vec<(&'static str, &'static str)> {
        vec![
            (ENV_NODE, "2"),
            (ENV_NUMNODES, "4"),
            (ENV_BOOT, "127.0.0.1:4711, 10.0.0.1:4711"),
            (ENV_JOB, "00c0ffee12345678"),
            (ENV_BACKEND, "tcp"),
        ]
    }

    #[test]
    fn env_is_parsed() {
        assert!(env_of(&[]).unwrap().is_none());
        let env = env_of(&full_env()).unwrap().unwrap();
        assert_eq!((env.node, env.numnodes), (2, 4));
        assert_eq!(env.job, 0x00c0_ffee_1234_5678);
        assert_eq!(
            env.boot,
            vec![
                "127.0.0.1:4711".parse::<SocketAddr>().unwrap(),
                "10.0.0.1:4711".parse().unwrap()
            ]
        );
        assert_eq!(env.backend, "tcp");
        assert_eq!(env.iface, None);
        let mut vars = full_env();
        vars.push((ENV_IFACE, "eth0"));
        vars.retain(|(k, _)| *k != ENV_BACKEND);
        let env = env_of(&vars).unwrap().unwrap();
        assert_eq!(env.backend, "auto");
        assert_eq!(env.iface.as_deref(), Some("eth0"));
    }

    #[test]
    fn bad_env_names_the_variable_and_value() {
        for (var, value, expect) in [
            (ENV_NODE, "4", "below DECK_NUMNODES=4"),
            (ENV_NUMNODES, "0", "1..="),
            (ENV_JOB, "xyz", "hex"),
            (ENV_JOB, "12345678123456789", "hex"),
            (ENV_BOOT, "localhost:1", "IP:PORT"),
            (ENV_BOOT, ",", "IP:PORT"),
            (ENV_BACKEND, "rdma", "auto, xdp, packet, tcp"),
        ] {
            let mut vars = full_env();
            vars.retain(|(k, _)| *k != var);
            vars.push((var, value));
            let e = env_of(&vars).unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(e, BootError::EnvInvalid { var: v, .. } if v == var),
                "{text}"
            );
            assert!(text.contains(var) && text.contains(value), "{text}");
            assert!(text.contains(expect), "{text}");
        }
        let mut vars = full_env();
        vars.retain(|(k, _)| *k != ENV_JOB);
        let e = env_of(&vars).unwrap_err();
        assert!(matches!(e, BootError::EnvMissing { var: ENV_JOB }), "{e}");
    }

    #[test]
    fn client_frames_from_literal_bytes() {
        #[rustfmt::skip]
        let hello = [
            0, 0, 0, 19, 0x01, b'D', b'E', b'C', b'K', 0, 1,
            0, 0, 0, 0, 0, 0, 0x12, 0x34, 0, 0, 0, 3,
        ];
        let msg = ClientMsg::Hello {
            version: 1,
            job: 0x1234,
            node: 3,
        };
        assert_eq!(msg.emit(), hello);
        assert_eq!(ClientMsg::parse(hello[4], &hello[5..]), Ok(msg));

        let card = [0, 0, 0, 7, 0x02, 0, 0, 0, 9, b'a', b'b'];
        let msg = ClientMsg::Card {
            round: 9,
            card: "ab".into(),
        };
        assert_eq!(msg.emit(), card);
        assert_eq!(ClientMsg::parse(card[4], &card[5..]), Ok(msg));
        assert_eq!(ClientMsg::Finish.emit(), [0, 0, 0, 1, 0x03]);

        assert_eq!(
            ClientMsg::parse(0x42, &[1, 2]),
            Ok(ClientMsg::Unknown(0x42))
        );
        assert_eq!(
            ClientMsg::parse(0x01, b"HTTP/1.1 2"),
            Err(ProtocolError::BadMagic(*b"HTTP"))
        );
        assert_eq!(
            ClientMsg::parse(0x01, &hello[5..20]),
            Err(ProtocolError::Truncated { what: "HELLO" })
        );
        assert_eq!(
            ClientMsg::parse(0x03, &[0]),
            Err(ProtocolError::Trailing {
                what: "FINISH",
                extra: 1
            })
        );
        assert_eq!(
            ClientMsg::parse(0x02, &[0, 0, 0, 0, 0xff]),
            Err(ProtocolError::NotUtf8 { what: "CARD" })
        );
        let long = vec![b'x'; 4 + MAX_CARD + 1];
        assert_eq!(
            ClientMsg::parse(0x02, &long),
            Err(ProtocolError::CardTooLong { len: MAX_CARD + 1 })
        );
    }

    #[test]
    fn server_frames_from_literal_bytes() {
        #[rustfmt::skip]
        let cards = [
            0, 0, 0, 20, 0x83, 0, 0, 0, 1, 0, 0, 0, 2,
            0, 0, 0, 1, b'x', 0, 0, 0, 2, b'y', b'z',
        ];
        let msg = ServerMsg::Cards {
            round: 1,
            cards: vec!["x".into(), "yz".into()],
        };
        assert_eq!(msg.emit(), cards);
        assert_eq!(ServerMsg::parse(cards[4], &cards[5..]), Ok(msg));
        // A count larger than the body: an error, not a huge allocation.
        assert_eq!(
            ServerMsg::parse(0x83, &[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]),
            Err(ProtocolError::Truncated { what: "CARDS" })
        );

        let welcome = [0, 0, 0, 7, 0x81, 0, 1, 0, 0, 0, 4];
        let msg = ServerMsg::Welcome {
            version: 1,
            numnodes: 4,
        };
        assert_eq!(msg.emit(), welcome);
        assert_eq!(ServerMsg::parse(welcome[4], &welcome[5..]), Ok(msg));

        let reject = [0, 0, 0, 4, 0x82, 1, b'n', b'o'];
        let msg = ServerMsg::Reject {
            why: Rejection::WrongJob,
            detail: "no".into(),
        };
        assert_eq!(msg.emit(), reject);
        assert_eq!(ServerMsg::parse(reject[4], &reject[5..]), Ok(msg));
        assert_eq!(
            ServerMsg::parse(0x82, &[77]),
            Ok(ServerMsg::Reject {
                why: Rejection::Unknown(77),
                detail: String::new()
            })
        );

        let abort = [0, 0, 0, 3, 0x84, b'o', b'k'];
        let msg = ServerMsg::Abort {
            reason: "ok".into(),
        };
        assert_eq!(msg.emit(), abort);
        assert_eq!(ServerMsg::parse(abort[4], &abort[5..]), Ok(msg));
        assert_eq!(ServerMsg::Finished.emit(), [0, 0, 0, 1, 0x85]);
        let key = [0, 0, 0, 3, 0x86, b'k', b'1'];
        let msg = ServerMsg::Key(KeyMaterial::new("k1".into()).unwrap());
        assert_eq!(msg.emit(), key);
        assert_eq!(ServerMsg::parse(key[4], &key[5..]), Ok(msg));
        assert_eq!(
            ServerMsg::parse(0x86, &[]),
            Err(ProtocolError::BadKey { len: 0 })
        );
        assert_eq!(
            format!("{:?}", KeyMaterial::new("secret".into()).unwrap()),
            "KeyMaterial(6 bytes)"
        );
        assert_eq!(ServerMsg::parse(0x99, &[]), Ok(ServerMsg::Unknown(0x99)));
    }

    #[test]
    fn clip_keeps_whole_characters() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("abc", 10), "abc");
    }

    /// A server on loopback whose owner thread runs until dropped; notices
    /// come out of the returned channel.
    struct TestServer {
        port: u16,
        notices: mpsc::Receiver<String>,
        /// Notices received but not yet expected.
        backlog: std::cell::RefCell<Vec<String>>,
        abort: mpsc::Sender<String>,
    }

    fn test_server(job: u64, numnodes: u32) -> TestServer {
        let (tx, rx) = mpsc::channel::<Incoming>();
        let mut server = BootServer::start(job, numnodes, move |i| {
            let _ = tx.send(i);
        })
        .unwrap();
        let port = server.port();
        let (ntx, nrx) = mpsc::channel();
        let (atx, arx) = mpsc::channel::<String>();
        // The server's owner: ends (dropping the server) when the test
        // drops its TestServer, whose abort sender then disconnects.
        thread::spawn(move || loop {
            match arx.try_recv() {
                Ok(reason) => {
                    let told = server.abort(&reason);
                    let _ = ntx.send(format!("told {told:?}"));
                }
                Err(mpsc::TryRecvError::Disconnected) => return,
                Err(mpsc::TryRecvError::Empty) => {}
            }
            let Ok(i) = rx.recv_timeout(Duration::from_millis(5)) else {
                continue;
            };
            let text = match server.handle(i) {
                None => continue,
                Some(BootNotice::Connected { node, .. }) => format!("connected {node}"),
                Some(BootNotice::RoundComplete { round }) => format!("round {round}"),
                Some(BootNotice::Finished { node }) => format!("finished {node}"),
                Some(BootNotice::Closed { node, finished, .. }) => {
                    format!("closed {node} {finished}")
                }
            };
            let _ = ntx.send(text);
        });
        TestServer {
            port,
            notices: nrx,
            backlog: Default::default(),
            abort: atx,
        }
    }

    impl TestServer {
        fn env(&self, job: u64, node: u32, numnodes: u32) -> JobEnv {
            JobEnv {
                node,
                numnodes,
                boot: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))],
                job,
                backend: "tcp".into(),
                iface: None,
            }
        }

        /// Waits (bounded) for a notice; others seen meanwhile are kept
        /// for later calls, so notices may be expected in any order.
        fn expect(&self, want: &str) {
            let mut seen = self.backlog.borrow_mut();
            if let Some(i) = seen.iter().position(|n| n == want) {
                seen.remove(i);
                return;
            }
            let deadline = Instant::now() + T;
            while Instant::now() < deadline {
                match self.notices.recv_timeout(Duration::from_millis(100)) {
                    Ok(n) if n == want => return,
                    Ok(n) => seen.push(n),
                    Err(_) => {}
                }
            }
            panic!("no notice {want:?} within {T:?}; saw {seen:?}");
        }
    }

    #[test]
    fn rounds_gather_every_card_in_node_order() {
        const N: u32 = 3;
        let server = test_server(7, N);
        let clients: Vec<_> = (0..N)
            .map(|node| {
                let env = server.env(7, node, N);
                thread::spawn(move || {
                    let mut boot = Boot::connect(&env, T).unwrap();
                    assert!(boot.local_ip().is_loopback());
                    let r0 = boot.exchange(&format!("card{node}"), T).unwrap();
                    let r1 = boot.exchange(&format!("again{node}"), T).unwrap();
                    let handle = boot.watch_with(|end| panic!("watchdog ended: {end:?}"));
                    let r2 = handle.exchange(&"z".repeat(node as usize), T).unwrap();
                    handle.finish().unwrap();
                    handle.finish().unwrap();
                    (r0, r1, r2)
                })
            })
            .collect();
        for c in clients {
            let (r0, r1, r2) = c.join().unwrap();
            assert_eq!(r0, ["card0", "card1", "card2"]);
            assert_eq!(r1, ["again0", "again1", "again2"]);
            assert_eq!(r2, ["", "z", "zz"]);
        }
        server.expect("round 2");
        for node in 0..N {
            server.expect(&format!("finished {node}"));
        }
    }

    #[test]
    fn wrong_job_and_duplicate_node_are_refused() {
        let server = test_server(1, 2);
        let e = Boot::connect(&server.env(2, 0, 2), T).unwrap_err();
        assert!(
            matches!(
                e,
                BootError::Rejected {
                    rejection: Rejection::WrongJob,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("0000000000000002"), "{e}");
        let _first = Boot::connect(&server.env(1, 1, 2), T).unwrap();
        server.expect("connected 1");
        let e = Boot::connect(&server.env(1, 1, 2), T).unwrap_err();
        assert!(
            matches!(
                e,
                BootError::Rejected {
                    rejection: Rejection::AlreadyConnected,
                    ..
                }
            ),
            "{e}"
        );
        let e = Boot::connect(&server.env(1, 0, 3), T).unwrap_err();
        assert!(
            matches!(e, BootError::Protocol(ProtocolError::NumNodes { .. })),
            "{e}"
        );
    }

    #[test]
    fn abort_reaches_the_watchdog() {
        let server = test_server(3, 2);
        let (tx, rx) = mpsc::channel();
        let mut boots: Vec<_> = (0..2)
            .map(|n| Boot::connect(&server.env(3, n, 2), T).unwrap())
            .collect();
        let b1 = boots.pop().unwrap();
        let b0 = boots.pop().unwrap();
        server.expect("connected 0");
        server.expect("connected 1");
        let _h0 = b0.watch_with(move |end| {
            let _ = tx.send(format!("{end:?}"));
        });
        server.abort.send("node 9 failed".into()).unwrap();
        let end = rx.recv_timeout(T).unwrap();
        assert!(end.contains("Aborted(\"node 9 failed\")"), "{end}");
        // Before watch(), the abort surfaces as an error of the call waiting.
        let mut b1 = b1;
        let e = b1.exchange("c", T).unwrap_err();
        assert!(matches!(e, BootError::Aborted { ref reason } if reason == "node 9 failed"));
        // A node connecting after the abort is told at once.
        let e = Boot::connect(&server.env(3, 1, 2), T).unwrap_err();
        assert!(matches!(e, BootError::Aborted { .. }), "{e}");
    }

    #[test]
    fn lost_launcher_ends_the_watchdog_unless_finished() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        // A fake launcher: answers HELLO, then acknowledges FINISH when the
        // test says so, then closes.
        let fake = thread::spawn(move || {
            let mut closed = Vec::new();
            for finish in [false, true] {
                let (s, _) = listener.accept().unwrap();
                let mut r = FrameReader::new(MAX_CLIENT_FRAME);
                let deadline = Some(Instant::now() + T);
                assert!(matches!(
                    r.read_client(&s, deadline).unwrap(),
                    ClientMsg::Hello { .. }
                ));
                let welcome = ServerMsg::Welcome {
                    version: VERSION,
                    numnodes: 1,
                };
                send(&s, &welcome.emit(), T).unwrap();
                if finish {
                    assert_eq!(r.read_client(&s, deadline).unwrap(), ClientMsg::Finish);
                    send(&s, &ServerMsg::Finished.emit(), T).unwrap();
                }
                s.shutdown(Shutdown::Both).unwrap();
                closed.push(s);
            }
        });
        let env = JobEnv {
            node: 0,
            numnodes: 1,
            boot: vec![addr],
            job: 5,
            backend: "tcp".into(),
            iface: None,
        };
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        let _h = Boot::connect(&env, T)
            .unwrap()
            .watch_with(move |end| tx.send(format!("{end:?}")).unwrap());
        let end = rx.recv_timeout(T).unwrap();
        assert!(end.starts_with("Lost"), "{end}");

        let h = Boot::connect(&env, T)
            .unwrap()
            .watch_with(move |end| tx2.send(format!("{end:?}")).unwrap());
        h.finish().unwrap();
        fake.join().unwrap();
        // The close after FINISH is no reason to exit: the watchdog ended
        // quietly (its sender is gone without a message).
        assert_eq!(
            rx.recv_timeout(T),
            Err(mpsc::RecvTimeoutError::Disconnected)
        );
    }

    #[test]
    fn unreachable_launcher_names_the_addresses() {
        // A port nobody listens on: bind, note it, close.
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let env = JobEnv {
            node: 0,
            numnodes: 1,
            boot: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, port))],
            job: 1,
            backend: "tcp".into(),
            iface: None,
        };
        let start = Instant::now();
        let e = Boot::connect(&env, Duration::from_millis(300)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(matches!(e, BootError::Unreachable { .. }), "{e}");
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    }

    #[test]
    fn card_too_long_is_refused_locally() {
        let server = test_server(4, 1);
        let mut boot = Boot::connect(&server.env(4, 0, 1), T).unwrap();
        let e = boot.exchange(&"x".repeat(MAX_CARD + 1), T).unwrap_err();
        assert!(matches!(e, BootError::CardTooLong { .. }), "{e}");
        assert_eq!(
            boot.exchange(&"x".repeat(MAX_CARD), T).unwrap(),
            ["x".repeat(MAX_CARD)]
        );
    }
}
