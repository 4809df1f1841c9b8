//! The server side: `deckrun`'s bootstrap server, which admits the
//! nodes, gathers and hands out their cards, and ends the job.

use super::wire::*;
use super::*;

/// Something a connection of the [`BootServer`] read, for the thread that
/// owns the server to pass to [`BootServer::handle`].
pub struct Incoming(IncomingKind);

pub(super) enum IncomingKind {
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
pub(super) struct NodeConn {
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

    pub(super) fn is_current(&self, node: u32, conn: u64) -> bool {
        self.nodes
            .get(node as usize)
            .and_then(|n| n.conn.as_ref())
            .is_some_and(|(c, _)| *c == conn)
    }

    pub(super) fn hello(
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

    pub(super) fn card(&mut self, node: u32, round: u32, card: String) -> Option<BootNotice> {
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

    pub(super) fn send_to(&mut self, node: u32, frame: &[u8]) -> bool {
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

pub(super) fn accept_loop<F>(
    listener: TcpListener,
    job: u64,
    numnodes: u32,
    sink: Arc<F>,
    stop: &AtomicBool,
) where
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
pub(super) fn serve_conn<F: Fn(Incoming)>(
    stream: TcpStream,
    conn: u64,
    job: u64,
    numnodes: u32,
    sink: &F,
) {
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
