//! Endpoints for processes without privileges, granted by the host's
//! endpoint service `llcd`.
//!
//! Opening a raw packet socket needs CAP_NET_RAW, which the users of a
//! cluster do not have. The service, installed once by root, runs per
//! network namespace and listens on the abstract `SOCK_SEQPACKET` socket
//! [`SERVICE_NAME`]. A process asks it for an endpoint on an interface;
//! the service checks who is asking (`SO_PEERCRED`, filled in by the
//! kernel) against its policy, claims a port for it (so a process cannot
//! take a port another holds), and hands back, with `SCM_RIGHTS`:
//! - a raw packet socket, not yet bound, whose classic BPF filter accepts
//!   only this interface's frames for this SAP and port (and the answers to
//!   this port's reachability probes), locked with `SO_LOCK_FILTER`: the
//!   process cannot widen it, so it receives only its own frames;
//! - the port's claim socket (the same-host path, [`super::local`]).
//!
//! The service answers the interface's link-level TEST and XID itself
//! (`AfPacket::open_link_responder`), unless an endpoint opened with
//! privileges does: the endpoints it grants never hold that role, so no
//! user can take the host's answers to other hosts' reachability probes.
//!
//! From then on the process runs the data path itself: it sets up its RX
//! ring and binds the socket; no privileged process, copy or hop is on the
//! data path. The process keeps its connection to the service open for the
//! endpoint's life: the service counts it against the user's limit until
//! it closes (the process exits, or is killed).
//!
//! The messages are one line of text each way (`llcd/1 packet ifname=eth0
//! sap=7c port=0`; `ok port=49152` with the descriptors, or `error ...`),
//! so an administrator can read them in a trace. docs/ARCHITECTURE.md,
//! "Ordinary users", explains the choice.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixDatagram;

use super::filter::granted_filter;
use super::interfaces;
use super::local::LocalPort;
use super::LinkError;
use crate::sys;
use crate::sys::xsk::{self, Provider, XskStep};
pub use crate::sys::xsk::{SocketSpec, UmemSpec};
pub use crate::sys::PeerCred;

/// The service's abstract socket name, in each network namespace.
pub const SERVICE_NAME: &str = "llc/llcd";

/// Version word that starts every request.
const PROTOCOL: &str = "llcd/1";

/// Longest request or reply.
pub const MAX_MESSAGE: usize = 1024;

/// The kind of endpoint a process asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A filtered, locked AF_PACKET socket.
    Packet,
    /// AF_XDP sockets steered by the interface's shared XDP program, which
    /// the service holds (further requests on the same connection:
    /// [`FollowUp`]).
    Xdp,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Packet => "packet",
            Kind::Xdp => "xdp",
        }
    }
}

/// What a process asks the service for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Packet or XDP.
    pub kind: Kind,
    /// Interface name.
    pub ifname: String,
    /// LLC SAP of the endpoint.
    pub sap: u8,
    /// Transport port (0: any free one).
    pub port: u16,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{PROTOCOL} {} ifname={} sap={:02x} port={}",
            self.kind.word(),
            self.ifname,
            self.sap,
            self.port
        )
    }
}

impl Request {
    /// Parse a request line. The error says what was wrong, for the reply.
    pub fn parse(line: &str) -> Result<Request, String> {
        let mut words = line.split_ascii_whitespace();
        let kind = match (words.next(), words.next()) {
            (Some(PROTOCOL), Some("packet")) => Kind::Packet,
            (Some(PROTOCOL), Some("xdp")) => Kind::Xdp,
            (Some(PROTOCOL), other) => {
                return Err(format!("unknown request {:?}", other.unwrap_or("")));
            }
            _ => {
                return Err(format!(
                    "not a {PROTOCOL} request (client and service of different versions?)"
                ))
            }
        };
        let (mut ifname, mut sap, mut port) = (None, None, None);
        for word in words {
            let (name, value) = word
                .split_once('=')
                .ok_or_else(|| format!("expected name=value, got {word:?}"))?;
            match name {
                "ifname" if valid_ifname(value) => ifname = Some(value.to_owned()),
                "ifname" => return Err(format!("invalid interface name {value:?}")),
                "sap" => {
                    sap = Some(
                        u8::from_str_radix(value, 16)
                            .map_err(|_| format!("invalid sap {value:?}"))?,
                    )
                }
                "port" => {
                    port = Some(
                        value
                            .parse()
                            .map_err(|_| format!("invalid port {value:?}"))?,
                    )
                }
                _ => return Err(format!("unknown field {name:?}")),
            }
        }
        match (ifname, sap, port) {
            (Some(ifname), Some(sap), Some(port)) => Ok(Request {
                kind,
                ifname,
                sap,
                port,
            }),
            _ => Err("a request needs ifname, sap and port".into()),
        }
    }
}

/// An interface name the kernel could accept: 1 to 15 bytes, no `/`, no
/// white space (so it also fits the claim names and the request line).
fn valid_ifname(name: &str) -> bool {
    (1..16).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b'=')
}

/// What the service gave this process: the packet socket with its locked
/// filter, the port's claim and the session that keeps the grant counted.
#[derive(Debug)]
pub struct Grant {
    /// Raw packet socket, filtered and locked, not yet bound.
    pub packet: OwnedFd,
    /// The port's claim socket (bound to its abstract name).
    pub claim: UnixDatagram,
    /// The port the service claimed.
    pub port: u16,
    /// The connection to the service: open as long as the endpoint lives.
    pub session: OwnedFd,
}

impl Grant {
    /// The endpoint's claim, for the device that takes this grant.
    pub(crate) fn local_port(
        &self,
        ifname: &str,
        sap: u8,
        mac: [u8; 6],
        max_frame: usize,
    ) -> Result<LocalPort, LinkError> {
        granted_local_port(&self.claim, ifname, sap, self.port, mac, max_frame)
    }
}

/// A granted endpoint's claim of `port`, for its device (never the link
/// role: the service answers TEST and XID).
fn granted_local_port(
    claim: &UnixDatagram,
    ifname: &str,
    sap: u8,
    port: u16,
    mac: [u8; 6],
    max_frame: usize,
) -> Result<LocalPort, LinkError> {
    let claim = claim.try_clone().map_err(|source| LinkError::Io {
        context: "keeping the granted claim socket".into(),
        source,
    })?;
    LocalPort::from_claim(claim, ifname, sap, port, mac, max_frame, false)
}

/// Why the service could not be asked, as one line that says what to do.
fn no_service(ifname: &str, why: &str) -> LinkError {
    LinkError::NoService {
        iface: ifname.to_owned(),
        why: why.to_owned(),
    }
}

/// Whether this process must ask the service for packet sockets: it may
/// not create them itself (no CAP_NET_RAW).
pub fn needs_service() -> bool {
    sys::packet_socket()
        .is_err_and(|e| matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)))
}

/// Ask the service of this network namespace for an endpoint on `ifname`
/// with `sap` and `port` (0: any free one).
pub fn request(ifname: &str, sap: u8, port: u16) -> Result<Grant, LinkError> {
    let req = Request {
        kind: Kind::Packet,
        ifname: ifname.to_owned(),
        sap,
        port,
    };
    let (session, granted, mut fds) = open_session(&req)?;
    let port = granted.port;
    if fds.len() != 2 {
        return Err(no_service(
            ifname,
            &format!("llcd sent {} descriptors with a packet grant", fds.len()),
        ));
    }
    let claim = fds.pop().expect("counted");
    let packet = fds.pop().expect("counted");
    check_kind(packet.as_fd(), libc::AF_PACKET, libc::SOCK_RAW)
        .and_then(|()| check_kind(claim.as_fd(), libc::AF_UNIX, libc::SOCK_DGRAM))
        .map_err(|e| no_service(ifname, &format!("llcd sent a wrong descriptor: {e}")))?;
    Ok(Grant {
        packet,
        claim: UnixDatagram::from(claim),
        port,
        session,
    })
}

/// Connect to the service, check it is root's, send `req` and read the
/// grant: the session, the port and the descriptors that came with it.
fn open_session(req: &Request) -> Result<(OwnedFd, Granted, Vec<OwnedFd>), LinkError> {
    let ifname = req.ifname.as_str();
    let session = sys::seqpacket_connect(SERVICE_NAME).map_err(|e| match e.raw_os_error() {
        Some(libc::ECONNREFUSED) | Some(libc::ENOENT) => {
            no_service(ifname, "no llcd service runs in this network namespace")
        }
        _ => no_service(ifname, &format!("cannot reach the llcd service: {e}")),
    })?;
    let cred = sys::peer_cred(session.as_fd()).map_err(|e| no_service(ifname, &e.to_string()))?;
    if cred.uid != 0 {
        // Anyone may bind an abstract name; only root's service is trusted.
        return Err(no_service(
            ifname,
            &format!(
                "the llcd socket is held by uid {} (pid {}), not by root: refusing it",
                cred.uid, cred.pid
            ),
        ));
    }
    let line = req.to_string();
    let io = |e: io::Error| no_service(ifname, &format!("talking to the llcd service: {e}"));
    sys::send_with_fds(session.as_fd(), line.as_bytes(), &[]).map_err(io)?;
    let mut buf = [0u8; MAX_MESSAGE];
    let (n, mut fds) = sys::recv_with_fds(session.as_fd(), &mut buf).map_err(io)?;
    let reply = String::from_utf8_lossy(&buf[..n]);
    if n == 0 {
        return Err(no_service(ifname, "the llcd service closed the connection"));
    }
    if let Some(why) = reply.strip_prefix("error ") {
        return Err(LinkError::Refused {
            iface: ifname.to_owned(),
            why: why.trim().to_owned(),
        });
    }
    let port = parse_ok(&reply)
        .ok_or_else(|| no_service(ifname, &format!("unexpected answer from llcd: {reply:?}")))?;
    Ok((session, port, std::mem::take(&mut fds)))
}

/// What a grant's answer says: the port, and for an XDP endpoint how the
/// interface's program is attached.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Granted {
    port: u16,
    attached: Option<String>,
}

/// `ok port=N` (`ok port=N attached=generic` for an XDP endpoint).
fn parse_ok(reply: &str) -> Option<Granted> {
    let mut words = reply.split_ascii_whitespace();
    if words.next()? != "ok" {
        return None;
    }
    let port = words.next()?.strip_prefix("port=")?.parse().ok()?;
    let attached = match words.next() {
        None => None,
        Some(w) => Some(w.strip_prefix("attached=")?.to_owned()),
    };
    words.next().is_none().then_some(Granted { port, attached })
}

/// What an XDP session asks after its grant (`llcd/1 xsk ...`,
/// `llcd/1 steer queue=Q`, `llcd/1 ready`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FollowUp {
    /// A socket of the shared pool as the spec says: the pool's first
    /// (with `umem`; the pool's memfd comes with the request) or a further
    /// one (a socket of the pool comes with the request). Answered with the
    /// bound socket.
    Socket(SocketSpec),
    /// Steer frames for the endpoint's port arriving on RX queue `queue`
    /// to the socket that comes with the request (one the service made in
    /// this session).
    Steer {
        /// RX queue.
        queue: u32,
    },
    /// Every queue is steered: steer the port to the endpoint. Answered
    /// with the claims the endpoint keeps.
    Ready,
}

impl fmt::Display for FollowUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FollowUp::Socket(s) => {
                write!(
                    f,
                    "{PROTOCOL} xsk queue={} rx={} tx={} flags={}",
                    s.queue, s.rx, s.tx, s.flags
                )?;
                if let Some(u) = &s.umem {
                    write!(
                        f,
                        " umem={},{},{},{},{}",
                        u.offset, u.len, u.chunk, u.fill, u.comp
                    )?;
                }
                Ok(())
            }
            FollowUp::Steer { queue } => write!(f, "{PROTOCOL} steer queue={queue}"),
            FollowUp::Ready => write!(f, "{PROTOCOL} ready"),
        }
    }
}

impl FollowUp {
    /// Parse a follow-up line; the error says what was wrong.
    pub fn parse(line: &str) -> Result<FollowUp, String> {
        let mut words = line.split_ascii_whitespace();
        let verb = match (words.next(), words.next()) {
            (Some(PROTOCOL), Some(v)) => v,
            _ => return Err(format!("not a {PROTOCOL} request")),
        };
        let mut fields = std::collections::BTreeMap::new();
        for word in words {
            let (name, value) = word
                .split_once('=')
                .ok_or_else(|| format!("expected name=value, got {word:?}"))?;
            fields.insert(name, value);
        }
        let num = |name: &str| -> Result<u64, String> {
            fields
                .get(name)
                .ok_or_else(|| format!("{verb} needs {name}"))?
                .parse()
                .map_err(|_| format!("invalid {name}"))
        };
        let small = |name: &str| -> Result<u32, String> {
            u32::try_from(num(name)?).map_err(|_| format!("invalid {name}"))
        };
        let known = |names: &[&str]| match fields.keys().find(|k| !names.contains(k)) {
            Some(k) => Err(format!("unknown field {k:?}")),
            None => Ok(()),
        };
        match verb {
            "xsk" => {
                known(&["queue", "rx", "tx", "flags", "umem"])?;
                let umem = match fields.get("umem") {
                    None => None,
                    Some(v) => {
                        let n: Vec<u64> = v
                            .split(',')
                            .map(str::parse)
                            .collect::<Result<_, _>>()
                            .map_err(|_| "invalid umem".to_string())?;
                        let [offset, len, chunk, fill, comp] = n[..] else {
                            return Err("umem needs offset,len,chunk,fill,comp".into());
                        };
                        let small =
                            |v: u64| u32::try_from(v).map_err(|_| "invalid umem".to_string());
                        Some(UmemSpec {
                            offset,
                            len,
                            chunk: small(chunk)?,
                            fill: small(fill)?,
                            comp: small(comp)?,
                        })
                    }
                };
                let spec = SocketSpec {
                    queue: small("queue")?,
                    rx: small("rx")?,
                    tx: small("tx")?,
                    flags: u16::try_from(num("flags")?).map_err(|_| "invalid flags")?,
                    umem,
                };
                spec.check()?;
                Ok(FollowUp::Socket(spec))
            }
            "steer" => {
                known(&["queue"])?;
                Ok(FollowUp::Steer {
                    queue: small("queue")?,
                })
            }
            "ready" => {
                known(&[])?;
                Ok(FollowUp::Ready)
            }
            other => Err(format!("unknown request {other:?}")),
        }
    }
}

/// An AF_XDP endpoint the service granted: the port's claim, the session
/// through which the service makes the sockets and steers the port, and
/// the claims of the endpoint's slot and port in the shared program.
#[derive(Debug)]
pub struct XdpGrant {
    /// The port's claim socket (bound to its abstract name).
    pub claim: UnixDatagram,
    /// The port the service claimed.
    pub port: u16,
    /// How the interface's program is attached (`native` or `generic`).
    pub attached: String,
    ifname: String,
    session: OwnedFd,
    /// Claims in the shared program, kept for the endpoint's life so that
    /// they outlive a restart of the service.
    held: std::sync::Mutex<Vec<OwnedFd>>,
}

/// Ask the service of this network namespace for an AF_XDP endpoint on
/// `ifname` with `sap` and `port` (0: any free one). The sockets follow
/// ([`crate::sys::xsk::Provider`]), then [`XdpGrant::steer`] for each
/// queue and [`XdpGrant::ready`].
pub fn request_xdp(ifname: &str, sap: u8, port: u16) -> Result<XdpGrant, LinkError> {
    let req = Request {
        kind: Kind::Xdp,
        ifname: ifname.to_owned(),
        sap,
        port,
    };
    let (session, granted, mut fds) = open_session(&req)?;
    let wrong = |what: String| no_service(ifname, &format!("llcd sent {what}"));
    if fds.len() != 2 {
        return Err(wrong(format!(
            "{} descriptors with an XDP grant",
            fds.len()
        )));
    }
    let slot = fds.pop().expect("counted");
    let claim = fds.pop().expect("counted");
    for fd in [&claim, &slot] {
        check_kind(fd.as_fd(), libc::AF_UNIX, libc::SOCK_DGRAM)
            .map_err(|e| wrong(format!("a wrong descriptor: {e}")))?;
    }
    Ok(XdpGrant {
        claim: UnixDatagram::from(claim),
        port: granted.port,
        attached: granted.attached.unwrap_or_default(),
        ifname: ifname.to_owned(),
        session,
        held: std::sync::Mutex::new(vec![slot]),
    })
}

impl XdpGrant {
    /// The endpoint's claim, for the device that takes this grant.
    pub(crate) fn local_port(
        &self,
        sap: u8,
        mac: [u8; 6],
        max_frame: usize,
    ) -> Result<LocalPort, LinkError> {
        granted_local_port(&self.claim, &self.ifname, sap, self.port, mac, max_frame)
    }

    /// One request and its answer: the words after `ok`, and descriptors.
    fn ask(&self, line: &str, fds: &[BorrowedFd<'_>]) -> Result<(String, Vec<OwnedFd>), LinkError> {
        let (reply, fds) = self
            .exchange(line, fds)
            .map_err(|e| no_service(&self.ifname, &format!("talking to the llcd service: {e}")))?;
        match reply.strip_prefix("error ") {
            Some(why) => Err(LinkError::Refused {
                iface: self.ifname.clone(),
                why: why.trim().to_owned(),
            }),
            None => Ok((reply, fds)),
        }
    }

    fn exchange(&self, line: &str, fds: &[BorrowedFd<'_>]) -> io::Result<(String, Vec<OwnedFd>)> {
        sys::send_with_fds(self.session.as_fd(), line.as_bytes(), fds)?;
        let mut buf = [0u8; MAX_MESSAGE];
        let (n, fds) = sys::recv_with_fds(self.session.as_fd(), &mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the llcd service closed the connection",
            ));
        }
        let reply = String::from_utf8_lossy(&buf[..n]).trim().to_owned();
        if let Some(rest) = reply.strip_prefix("ok") {
            return Ok((rest.trim().to_owned(), fds));
        }
        Ok((reply, fds))
    }

    /// A socket from the service: a refusal that names a kernel error
    /// (`error step=bind errno=16 ...`) comes back as that error, so the
    /// caller can tell a busy queue from a refusal.
    fn socket(
        &self,
        spec: &SocketSpec,
        fd: BorrowedFd<'_>,
    ) -> Result<OwnedFd, (XskStep, io::Error)> {
        let line = FollowUp::Socket(*spec).to_string();
        let (reply, mut fds) = self
            .exchange(&line, &[fd])
            .map_err(|e| (XskStep::Socket, e))?;
        if let Some(why) = reply.strip_prefix("error ") {
            return Err(parse_socket_error(why));
        }
        match (fds.pop(), fds.is_empty()) {
            (Some(fd), true) if check_kind(fd.as_fd(), libc::AF_XDP, libc::SOCK_RAW).is_ok() => {
                Ok(fd)
            }
            _ => Err((
                XskStep::Socket,
                io::Error::other("llcd answered a socket request without an AF_XDP socket"),
            )),
        }
    }

    /// Steer the port's frames arriving on RX queue `queue` to `xsk`.
    pub fn steer(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<(), LinkError> {
        self.ask(&FollowUp::Steer { queue }.to_string(), &[xsk])
            .map(drop)
    }

    /// Every queue is steered: the service steers the port here. The
    /// claims it sends are kept for the endpoint's life.
    pub fn ready(&self) -> Result<(), LinkError> {
        let (_, fds) = self.ask(&FollowUp::Ready.to_string(), &[])?;
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(fds);
        Ok(())
    }
}

impl Provider for XdpGrant {
    fn create(
        &self,
        spec: &SocketSpec,
        memfd: BorrowedFd<'_>,
    ) -> Result<OwnedFd, (XskStep, io::Error)> {
        self.socket(spec, memfd)
    }

    fn join(
        &self,
        spec: &SocketSpec,
        pool: BorrowedFd<'_>,
    ) -> Result<OwnedFd, (XskStep, io::Error)> {
        self.socket(spec, pool)
    }
}

/// `step=S errno=N text`: the step and the kernel's error; any other
/// refusal is the service's own (policy, limit) and reads as permission
/// denied at the socket step.
fn parse_socket_error(why: &str) -> (XskStep, io::Error) {
    let mut words = why.split_ascii_whitespace();
    let step = words.next().and_then(|w| w.strip_prefix("step="));
    let errno = words
        .next()
        .and_then(|w| w.strip_prefix("errno="))
        .and_then(|n| n.parse().ok());
    let step = match step {
        Some("socket") => Some(XskStep::Socket),
        Some("rings") => Some(XskStep::Rings),
        Some("bind") => Some(XskStep::Bind),
        _ => None,
    };
    match (step, errno) {
        (Some(step), Some(errno)) => (step, io::Error::from_raw_os_error(errno)),
        _ => (
            XskStep::Socket,
            io::Error::new(io::ErrorKind::PermissionDenied, format!("llcd: {why}")),
        ),
    }
}

/// The service's side of a socket request: make the socket on `ifname`
/// (`fd` is the pool's memfd for a first socket, a socket of the pool for
/// a further one). The error is the refusal line's text
/// (`step=S errno=N ...` for the kernel's errors).
pub fn make_xsk(ifname: &str, spec: &SocketSpec, fd: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    let ifindex = interfaces::index(ifname).map_err(|e| e.to_string())?;
    let queues = interfaces::rx_queues(ifname).map_err(|e| e.to_string())?;
    if spec.queue >= queues {
        return Err(format!("{ifname} has no RX queue {}", spec.queue));
    }
    let (memfd, shared) = match spec.umem {
        Some(_) => (Some(fd), None),
        None => {
            check_kind(fd, libc::AF_XDP, libc::SOCK_RAW)
                .map_err(|e| format!("the pool's socket is not an AF_XDP socket: {e}"))?;
            (None, Some(fd))
        }
    };
    xsk::make_socket(ifindex, spec, memfd, shared).map_err(|(step, e)| {
        let step = match step {
            XskStep::Socket | XskStep::Join => "socket",
            XskStep::Rings => "rings",
            XskStep::Bind => "bind",
        };
        match e.raw_os_error() {
            Some(errno) => format!("step={step} errno={errno} {e}"),
            None => format!("{step}: {e}"),
        }
    })
}

/// The status request's line.
pub const STATUS_REQUEST: &str = "llcd/1 status";

/// Ask the service for its counters (`granted=N refused_policy=N ...`;
/// what one user sees is its own count, root sees every user's).
pub fn status() -> io::Result<String> {
    let fd = sys::seqpacket_connect(SERVICE_NAME)?;
    sys::send_with_fds(fd.as_fd(), STATUS_REQUEST.as_bytes(), &[])?;
    let mut buf = [0u8; MAX_MESSAGE];
    let (n, _) = sys::recv_with_fds(fd.as_fd(), &mut buf)?;
    let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
    reply
        .strip_prefix("ok ")
        .map(str::to_owned)
        .ok_or_else(|| io::Error::other(format!("unexpected answer from llcd: {reply:?}")))
}

/// Connect to the service of this network namespace and tell who holds
/// its socket (for diagnostics: `llcd` refusing to start twice, llc-stat).
pub fn probe_service() -> io::Result<PeerCred> {
    let fd = sys::seqpacket_connect(SERVICE_NAME)?;
    sys::peer_cred(fd.as_fd())
}

fn check_kind(fd: BorrowedFd<'_>, domain: i32, kind: i32) -> io::Result<()> {
    let (d, t) = sys::socket_kind(fd)?;
    if (d, t) == (domain, kind) {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "socket of domain {d} and type {t}"
        )))
    }
}

/// The service's side: the listening socket of [`SERVICE_NAME`].
#[derive(Debug)]
pub struct Listener(OwnedFd);

impl Listener {
    /// Bind [`SERVICE_NAME`] in the calling thread's network namespace.
    /// `AddrInUse` when another service (or anyone) holds it.
    pub fn bind() -> io::Result<Listener> {
        sys::seqpacket_listen(SERVICE_NAME, 128).map(Listener)
    }

    /// Wait for the next client; its credentials come with it.
    pub fn accept(&self) -> io::Result<(Session, PeerCred)> {
        let fd = sys::accept(self.0.as_fd())?;
        let cred = sys::peer_cred(fd.as_fd())?;
        Ok((Session(fd), cred))
    }
}

/// One client's connection, on the service's side.
#[derive(Debug)]
pub struct Session(OwnedFd);

impl Session {
    /// The next request line (`None`: the client closed the connection,
    /// or its process ended).
    pub fn next_request(&self) -> io::Result<Option<String>> {
        let mut buf = [0u8; MAX_MESSAGE];
        let (n, _ignored_fds) = sys::recv_with_fds(self.0.as_fd(), &mut buf)?;
        Ok((n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned()))
    }

    /// Refuse a request, with a reason the client shows its user.
    pub fn refuse(&self, why: &str) -> io::Result<()> {
        let line = format!("error {}", why.replace('\n', " "));
        sys::send_with_fds(self.0.as_fd(), line.as_bytes(), &[])
    }

    /// Answer a request that carries no descriptors (`ok ...`).
    pub fn answer(&self, line: &str) -> io::Result<()> {
        sys::send_with_fds(self.0.as_fd(), format!("ok {line}").as_bytes(), &[])
    }

    /// The next request with the descriptors it carries (`None`: the
    /// client closed the connection).
    pub fn next_message(&self) -> io::Result<Option<(String, Vec<OwnedFd>)>> {
        let mut buf = [0u8; MAX_MESSAGE];
        let (n, fds) = sys::recv_with_fds(self.0.as_fd(), &mut buf)?;
        Ok((n > 0).then(|| (String::from_utf8_lossy(&buf[..n]).into_owned(), fds)))
    }

    /// Answer `ok ...` with descriptors (at most four).
    pub fn answer_with(&self, line: &str, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let line = if line.is_empty() {
            "ok".to_owned()
        } else {
            format!("ok {line}")
        };
        sys::send_with_fds(self.0.as_fd(), line.as_bytes(), fds)
    }

    /// Grant `made`.
    pub fn grant(&self, made: &Made) -> io::Result<()> {
        let line = format!("ok port={}", made.port);
        let fds = [made.packet.as_fd(), made.claim.as_fd()];
        sys::send_with_fds(self.0.as_fd(), line.as_bytes(), &fds)
    }
}

impl AsFd for Session {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// What the service makes for one granted endpoint (it keeps nothing once
/// they are sent: the process owns them).
#[derive(Debug)]
pub struct Made {
    /// The filtered, locked packet socket.
    pub packet: OwnedFd,
    /// The claim socket of `port`.
    pub claim: UnixDatagram,
    /// The claimed port.
    pub port: u16,
}

/// Make what `req` asks for, in the calling thread's network namespace:
/// claim the port, create the packet socket, attach and lock the filter
/// ([`granted_filter`]). The service calls this after its policy allowed
/// the request.
pub fn make(req: &Request) -> Result<Made, LinkError> {
    make_claim(req).and_then(|(claim, port)| make_packet(req, claim, port))
}

/// The first step of every grant: the interface is there and up, and the
/// port is claimed (0: any free one).
pub fn make_claim(req: &Request) -> Result<(UnixDatagram, u16), LinkError> {
    interfaces::index(&req.ifname)?;
    if !interfaces::is_up(&req.ifname)? {
        return Err(LinkError::InterfaceDown(req.ifname.clone()));
    }
    LocalPort::claim_for(&req.ifname, req.sap, req.port)
}

fn make_packet(req: &Request, claim: UnixDatagram, port: u16) -> Result<Made, LinkError> {
    let ifindex = interfaces::index(&req.ifname)?;
    let io_err = |context: &str| {
        let context = format!("{context} on {}", req.ifname);
        move |source| LinkError::Io { context, source }
    };
    let packet = sys::packet_socket().map_err(io_err("creating a packet socket"))?;
    let filter = granted_filter(req.sap, port, false, ifindex);
    sys::attach_filter(packet.as_fd(), &filter)
        .map_err(io_err("attaching the endpoint's filter"))?;
    sys::lock_filter(packet.as_fd()).map_err(io_err("locking the endpoint's filter"))?;
    Ok(Made {
        packet,
        claim,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_print_and_parse_back() {
        let r = Request {
            kind: Kind::Packet,
            ifname: "eth0".into(),
            sap: 0x7c,
            port: 0,
        };
        assert_eq!(r.to_string(), "llcd/1 packet ifname=eth0 sap=7c port=0");
        assert_eq!(Request::parse(&r.to_string()), Ok(r));
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (line, says) in [
            ("", "not a llcd/1 request"),
            ("llcd/2 packet ifname=eth0 sap=7c port=0", "not a llcd/1"),
            ("llcd/1 raw ifname=eth0 sap=7c port=0", "unknown request"),
            (
                "llcd/1 packet ifname=eth0 sap=7c",
                "needs ifname, sap and port",
            ),
            (
                "llcd/1 packet ifname=../x sap=7c port=1",
                "invalid interface",
            ),
            ("llcd/1 packet ifname=eth0 sap=zz port=1", "invalid sap"),
            (
                "llcd/1 packet ifname=eth0 sap=7c port=70000",
                "invalid port",
            ),
            (
                "llcd/1 packet ifname=eth0 sap=7c port=1 uid=0",
                "unknown field",
            ),
        ] {
            let err = Request::parse(line).unwrap_err();
            assert!(err.contains(says), "{line:?}: {err}");
        }
    }

    #[test]
    fn replies_carry_the_port() {
        let port = |p| {
            Some(Granted {
                port: p,
                attached: None,
            })
        };
        assert_eq!(parse_ok("ok port=7"), port(7));
        assert_eq!(parse_ok("ok port=49152"), port(49152));
        assert_eq!(
            parse_ok("ok port=7 attached=generic"),
            Some(Granted {
                port: 7,
                attached: Some("generic".into())
            })
        );
        assert_eq!(parse_ok("ok port=7 role=1"), None);
        assert_eq!(parse_ok("error no"), None);
    }
}
