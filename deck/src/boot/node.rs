//! The node side: a DECK process's connection to its launcher (HELLO, the
//! all-gather of cards, the watchdog that ends the node with the job).

use super::wire::*;
use super::*;

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

    pub(super) fn hello(
        stream: TcpStream,
        env: &JobEnv,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Boot, BootError> {
        pub(super) const WHAT: &str = "the answer to HELLO";
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
        pub(super) const WHAT: &str = "the other nodes' cards";
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
    pub(super) fn watch_with(self, on_end: impl FnOnce(WatchEnd) + Send + 'static) -> BootHandle {
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

pub(super) fn check_card(card: &str) -> Result<(), BootError> {
    if card.len() > MAX_CARD {
        return Err(BootError::CardTooLong { len: card.len() });
    }
    Ok(())
}

pub(super) fn check_cards(
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
pub(super) enum WatchEnd {
    /// ABORT, with the launcher's reason.
    Aborted(String),
    /// The connection ended before FINISH.
    Lost(io::Error),
}

pub(super) struct Shared {
    state: Mutex<WatchState>,
    cond: Condvar,
}

pub(super) struct WatchState {
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
pub(super) fn watchdog(
    stream: &TcpStream,
    reader: &mut FrameReader,
    shared: &Shared,
) -> Option<WatchEnd> {
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

    pub(super) fn write(&self, frame: &[u8], during: &'static str) -> Result<(), BootError> {
        let writer = self.writer.lock();
        let lost = |source| BootError::Lost { during, source };
        match &*writer {
            Ok(s) => send(s, frame, SERVER_WRITE_TIMEOUT).map_err(lost),
            Err(e) => Err(lost(io::Error::new(e.kind(), e.to_string()))),
        }
    }

    /// deck_done: tell the launcher this node finished; its exit is then expected. Idempotent.
    pub fn finish(&self) -> Result<(), BootError> {
        pub(super) const WHAT: &str = "FINISHED";
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
