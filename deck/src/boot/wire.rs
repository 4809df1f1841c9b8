//! The bootstrap protocol's frames: their kinds, encoding and reading.

use super::*;

/// Kind bytes of the frames (see the module documentation).
pub(super) mod kind {
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
pub(super) enum ClientMsg {
    Hello { version: u16, job: u64, node: u32 },
    Card { round: u32, card: String },
    Finish,
    Unknown(u8),
}

/// A message from the launcher to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ServerMsg {
    Welcome { version: u16, numnodes: u32 },
    Reject { why: Rejection, detail: String },
    Cards { round: u32, cards: Vec<String> },
    Abort { reason: String },
    Finished,
    Key(KeyMaterial),
    Unknown(u8),
}

/// Reads the fields of one frame's body; never panics on short input.
pub(super) struct Fields<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Fields<'a> {
    pub(super) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Fields { bytes, what }
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.bytes.len() < n {
            return Err(ProtocolError::Truncated { what: self.what });
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    pub(super) fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub(super) fn u16(&mut self) -> Result<u16, ProtocolError> {
        self.array().map(u16::from_be_bytes)
    }

    pub(super) fn u32(&mut self) -> Result<u32, ProtocolError> {
        self.array().map(u32::from_be_bytes)
    }

    pub(super) fn u64(&mut self) -> Result<u64, ProtocolError> {
        self.array().map(u64::from_be_bytes)
    }

    pub(super) fn utf8(&self, bytes: &[u8]) -> Result<String, ProtocolError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| ProtocolError::NotUtf8 { what: self.what })
    }

    /// A `u32`-length-prefixed UTF-8 string.
    pub(super) fn string(&mut self) -> Result<String, ProtocolError> {
        let len = self.u32()? as usize;
        let bytes = self.take(len)?;
        self.utf8(bytes)
    }

    /// The rest of the body as UTF-8.
    pub(super) fn text(mut self) -> Result<String, ProtocolError> {
        let rest = self.take(self.bytes.len())?;
        self.utf8(rest)
    }

    pub(super) fn end(self) -> Result<(), ProtocolError> {
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
pub(super) struct FrameBuf(Vec<u8>);

impl FrameBuf {
    pub(super) fn new(kind: u8) -> Self {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0, 0, 0, 0, kind]);
        FrameBuf(v)
    }

    pub(super) fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(super) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(super) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(super) fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }

    pub(super) fn string(self, s: &str) -> Self {
        let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
        self.u32(len).bytes(s.as_bytes())
    }

    pub(super) fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.0.len() - 4).unwrap_or(u32::MAX);
        self.0[..4].copy_from_slice(&len.to_be_bytes());
        self.0
    }
}

/// `text` cut to at most `max` bytes at a character boundary.
pub(super) fn clip(text: &str, max: usize) -> &str {
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
    pub(super) fn name(&self) -> &'static str {
        match self {
            ClientMsg::Hello { .. } => "HELLO",
            ClientMsg::Card { .. } => "CARD",
            ClientMsg::Finish => "FINISH",
            ClientMsg::Unknown(_) => "a message of unknown kind",
        }
    }

    pub(super) fn emit(&self) -> Vec<u8> {
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

    pub(super) fn parse(kind: u8, body: &[u8]) -> Result<ClientMsg, ProtocolError> {
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
    pub(super) fn name(&self) -> &'static str {
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

    pub(super) fn emit(&self) -> Vec<u8> {
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

    pub(super) fn parse(kind: u8, body: &[u8]) -> Result<ServerMsg, ProtocolError> {
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
pub(super) enum ReadError {
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
    pub(super) fn into_boot(self, what: &'static str, timeout: Duration) -> BootError {
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

    pub(super) fn into_io(self) -> io::Error {
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
pub(super) struct FrameReader {
    buf: Vec<u8>,
    max: usize,
}

impl FrameReader {
    pub(super) fn new(max: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            max,
        }
    }

    /// The next frame's kind and body; `deadline` None waits for ever.
    pub(super) fn read(
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

    pub(super) fn read_server(
        &mut self,
        stream: &TcpStream,
        deadline: Option<Instant>,
    ) -> Result<ServerMsg, ReadError> {
        let (kind, body) = self.read(stream, deadline)?;
        ServerMsg::parse(kind, &body).map_err(ReadError::Protocol)
    }

    pub(super) fn read_client(
        &mut self,
        stream: &TcpStream,
        deadline: Option<Instant>,
    ) -> Result<ClientMsg, ReadError> {
        let (kind, body) = self.read(stream, deadline)?;
        ClientMsg::parse(kind, &body).map_err(ReadError::Protocol)
    }
}

/// Writes one frame, bounded by `timeout`.
pub(super) fn send(stream: &TcpStream, frame: &[u8], timeout: Duration) -> io::Result<()> {
    stream.set_write_timeout(Some(timeout.max(Duration::from_millis(1))))?;
    (&*stream).write_all(frame)
}

/// The longest frame a node accepts from the launcher in a job of `numnodes`.
pub(super) fn max_server_frame(numnodes: u32) -> usize {
    (9 + numnodes as usize * (4 + MAX_CARD)).max(2 * MAX_TEXT)
}

impl fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FrameReader({} bytes buffered)", self.buf.len())
    }
}
