//! Endpoints that share one interface: port claims and the same-host path.
//!
//! A host runs many endpoints (MPI ranks, DECK nodes, BMI clients) on one
//! NIC. They share the interface's MAC and the SAP; each owns one transport
//! port, and the kernel hands each only the frames for its port (a socket
//! filter for AF_PACKET, the shared XDP program for AF_XDP).
//!
//! # Claims
//! Ports are claimed through the kernel, so a claim can neither leak nor go
//! stale: an endpoint binds an abstract unix datagram socket named
//! `llc/<interface>/<SAP>/<port>`. The abstract namespace belongs to the
//! network namespace (as interface names do), a second bind of the same name
//! fails with `EADDRINUSE`, and the name is gone the moment its process exits
//! or is killed. The endpoint that also holds `llc/<interface>/<SAP>/link`
//! answers link-level TEST and XID commands (exactly one per interface and
//! SAP, so a TEST gets one answer); when it exits, another endpoint takes the
//! role over within about a second.
//!
//! # The same-host path
//! A frame to our own MAC would leave on the wire and never come back (a
//! bridge or switch does not send a frame out of the port it came in on). So
//! frames addressed to our own MAC go through the claim socket of the
//! destination port instead: one `sendto` per frame to
//! `llc/<interface>/<SAP>/<dst port>`, one `recv` per frame on the other
//! side. It is a correctness path, not a fast one: MPI jobs carry same-host
//! traffic over shared memory (btl/vader), and the message layer's own API
//! works between two processes of one host through it. A frame for a port
//! nobody holds is dropped and counted, as the wire would lose it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use super::LinkError;
use crate::time::Instant;
use crate::wire::ethernet::HEADER_LEN;
use crate::wire::llc::CONTROL_UI;

/// First port tried when any free port will do (as TCP's ephemeral range).
pub const EPHEMERAL_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;

/// Frame offset of the LLC control byte.
pub(crate) const CONTROL_OFFSET: usize = HEADER_LEN + 2;
/// Frame offset of the transport header's `dst_port` (big-endian).
pub(crate) const DST_PORT_OFFSET: usize = HEADER_LEN + 3 + 6;

/// Empty receive polls between looks at the same-host socket while no
/// same-host traffic was seen recently: a `recv` costs a syscall (about
/// 0.3 µs here), and the wire's frames must not pay it. Every 32nd poll cost
/// an AF_PACKET 8 B MPI round trip 7% (docs/BENCHMARKS.md, issue 18); every
/// 1024th is a syscall per 30-100 µs of busy-polling, and a first same-host
/// frame waits at most that long before the path turns hot.
const COLD_CHECK_EVERY: u32 = 1024;
/// Empty receive polls during which the same-host socket is looked at every
/// time after same-host traffic.
const HOT_POLLS: u32 = 100_000;
/// How often an endpoint without the link role tries to take it over.
const ROLE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
/// Socket buffer of the same-host socket: room for a credit window of
/// frames in flight between two endpoints of one host.
const LOCAL_SOCKET_BUFFER: usize = 8 << 20;

/// Counters of the same-host path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalStats {
    /// Frames received from endpoints of this host.
    pub rx_frames: u64,
    /// Frames sent to endpoints of this host.
    pub tx_frames: u64,
    /// Frames to our own MAC for a port no endpoint of this host holds, or
    /// that the destination's socket could not take (full): dropped.
    pub tx_dropped: u64,
}

/// One endpoint's claim of a port on (interface, SAP), and its same-host path.
#[derive(Debug)]
pub(crate) struct LocalPort {
    sock: UnixDatagram,
    port: u16,
    /// `llc/<interface>/<SAP>/`
    prefix: String,
    mac: [u8; 6],
    /// The link-role claim, when this endpoint answers TEST and XID.
    link_role: Option<UnixDatagram>,
    /// Set when the link role was taken after the claim.
    role_changed: bool,
    /// Whether this endpoint may take the link role: not when its socket
    /// filter was set, and locked, by the endpoint service (`link::grant`).
    role_allowed: bool,
    next_role_try: Instant,
    buf: Vec<u8>,
    idle_polls: u32,
    hot: u32,
    stats: LocalStats,
}

fn name_prefix(ifname: &str, sap: u8) -> String {
    format!("llc/{ifname}/{sap:02x}/")
}

fn bind_abstract(name: &str) -> io::Result<UnixDatagram> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixDatagram::bind_addr(&addr)
}

impl LocalPort {
    /// Claim `port` (0: any free port of [`EPHEMERAL_PORTS`]) of `sap` on
    /// `ifname` for an endpoint whose interface has address `mac` and
    /// frames up to `max_frame` bytes. Tries to take the link role too.
    pub(crate) fn claim(
        ifname: &str,
        sap: u8,
        port: u16,
        mac: [u8; 6],
        max_frame: usize,
    ) -> Result<LocalPort, LinkError> {
        let (sock, port) = Self::claim_for(ifname, sap, port)?;
        let mut local = Self::from_claim(sock, ifname, sap, port, mac, max_frame, true)?;
        local.try_link_role();
        local.role_changed = false;
        tracing::debug!(%ifname, port, link_role = local.link_role.is_some(), "claimed a port");
        Ok(local)
    }

    /// The endpoint of claim `sock` (bound to `port`'s name already: by
    /// [`LocalPort::claim_for`], here or in the endpoint service). An
    /// endpoint whose filter the service set and locked (`link::grant`)
    /// never takes the link role (`role_allowed` false).
    pub(crate) fn from_claim(
        sock: UnixDatagram,
        ifname: &str,
        sap: u8,
        port: u16,
        mac: [u8; 6],
        max_frame: usize,
        role_allowed: bool,
    ) -> Result<LocalPort, LinkError> {
        let io_err = |context: &str| {
            let context = context.to_owned();
            move |source| LinkError::Io { context, source }
        };
        sock.set_nonblocking(true)
            .map_err(io_err("making the same-host socket non-blocking"))?;
        let buffers = crate::sys::set_send_buffer(sock.as_fd(), LOCAL_SOCKET_BUFFER)
            .and_then(|()| crate::sys::set_receive_buffer(sock.as_fd(), LOCAL_SOCKET_BUFFER));
        if let Err(e) = buffers {
            tracing::debug!(error = %e, "could not enlarge the same-host socket buffers");
        }
        Ok(LocalPort {
            sock,
            port,
            prefix: name_prefix(ifname, sap),
            mac,
            link_role: None,
            role_changed: false,
            role_allowed,
            next_role_try: Instant::now(),
            buf: vec![0; max_frame],
            idle_polls: 0,
            hot: 0,
            stats: LocalStats::default(),
        })
    }

    /// Claim `port` (0: any free one) of `sap` on `ifname` for someone
    /// else: the endpoint service, which hands the bound socket to the
    /// process it serves. Returns the socket and the port.
    pub(crate) fn claim_for(
        ifname: &str,
        sap: u8,
        port: u16,
    ) -> Result<(UnixDatagram, u16), LinkError> {
        let prefix = name_prefix(ifname, sap);
        if port == 0 {
            return Self::claim_any(ifname, &prefix);
        }
        match bind_abstract(&format!("{prefix}{port}")) {
            Ok(s) => Ok((s, port)),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Err(LinkError::Busy {
                iface: ifname.to_owned(),
                what: format!(
                    "port {port} of SAP {sap:#04x} is held by another endpoint of this host; \
                     choose another port, or port 0 for any free one"
                ),
            }),
            Err(e) => Err(LinkError::Io {
                context: format!("claiming port {port} on {ifname}"),
                source: e,
            }),
        }
    }

    fn claim_any(ifname: &str, prefix: &str) -> Result<(UnixDatagram, u16), LinkError> {
        let span = u32::from(EPHEMERAL_PORTS.end() - EPHEMERAL_PORTS.start()) + 1;
        // Start where this process's neighbours are unlikely to: endpoints
        // starting at once then rarely try the same port twice.
        let start = (std::process::id().wrapping_mul(2_654_435_761) >> 8) % span;
        for i in 0..span {
            let port = EPHEMERAL_PORTS.start() + ((start + i) % span) as u16;
            match bind_abstract(&format!("{prefix}{port}")) {
                Ok(s) => return Ok((s, port)),
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => continue,
                Err(e) => {
                    return Err(LinkError::Io {
                        context: format!("claiming a port on {ifname}"),
                        source: e,
                    })
                }
            }
        }
        Err(LinkError::Busy {
            iface: ifname.to_owned(),
            what: format!("every port of {EPHEMERAL_PORTS:?} is held by an endpoint of this host"),
        })
    }

    /// The link role's claim of `sap` on `ifname`, for someone else (the
    /// endpoint service), if nobody holds it.
    pub(crate) fn claim_link_role(ifname: &str, sap: u8) -> Option<UnixDatagram> {
        bind_abstract(&format!("{}link", name_prefix(ifname, sap))).ok()
    }

    /// The claimed port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Whether this endpoint answers link-level TEST and XID.
    pub(crate) fn has_link_role(&self) -> bool {
        self.link_role.is_some()
    }

    /// Take the link role if nobody holds it.
    fn try_link_role(&mut self) {
        self.next_role_try = Instant::now() + ROLE_RETRY;
        if let Ok(s) = bind_abstract(&format!("{}link", self.prefix)) {
            if s.set_nonblocking(true).is_ok() {
                self.link_role = Some(s);
                self.role_changed = true;
            }
        }
    }

    /// Whether this endpoint took the link role over since the last call
    /// (its filter must then let TEST and XID in).
    pub(crate) fn take_role_change(&mut self) -> bool {
        std::mem::take(&mut self.role_changed)
    }

    /// Counters.
    pub(crate) fn stats(&self) -> LocalStats {
        self.stats
    }

    /// Whether `frame` is addressed to this host's MAC, and so must take
    /// the same-host path.
    #[inline]
    pub(crate) fn is_local(&self, frame: &[u8]) -> bool {
        frame.len() >= 6 && frame[..6] == self.mac
    }

    /// Deliver a frame addressed to our own MAC to the endpoint of this
    /// host it names: its transport port, or the link-role holder for
    /// TEST/XID. Never blocks; what cannot be delivered is dropped and
    /// counted.
    pub(crate) fn send(&mut self, frame: &[u8]) {
        let to = match (
            frame.get(CONTROL_OFFSET),
            frame.get(DST_PORT_OFFSET..DST_PORT_OFFSET + 2),
        ) {
            (Some(&CONTROL_UI), Some(p)) => {
                format!("{}{}", self.prefix, u16::from_be_bytes([p[0], p[1]]))
            }
            (Some(_), _) => format!("{}link", self.prefix),
            (None, _) => {
                self.stats.tx_dropped += 1;
                return;
            }
        };
        let sent = SocketAddr::from_abstract_name(to.as_bytes())
            .and_then(|addr| self.sock.send_to_addr(frame, &addr));
        match sent {
            Ok(_) => {
                self.stats.tx_frames += 1;
                self.hot = HOT_POLLS;
            }
            Err(e) => {
                tracing::trace!(to, error = %e, "same-host frame dropped");
                self.stats.tx_dropped += 1;
            }
        }
    }

    /// A frame from an endpoint of this host, if one is waiting: looked for
    /// on every call while same-host traffic is recent, on every
    /// [`COLD_CHECK_EVERY`]th call otherwise, and always when `force`.
    /// Returns its length; the bytes are [`LocalPort::frame`].
    #[inline]
    pub(crate) fn poll(&mut self, force: bool) -> Option<usize> {
        if !force && self.hot == 0 {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if !self.idle_polls.is_multiple_of(COLD_CHECK_EVERY) {
                return None;
            }
        }
        self.poll_slow()
    }

    #[cold]
    fn poll_slow(&mut self) -> Option<usize> {
        let mut got = None;
        for sock in std::iter::once(&self.sock).chain(self.link_role.as_ref()) {
            match sock.recv(&mut self.buf) {
                Ok(n) => {
                    got = Some(n);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => tracing::debug!(error = %e, "same-host socket"),
            }
        }
        match got {
            Some(n) => {
                self.stats.rx_frames += 1;
                self.hot = HOT_POLLS;
                Some(n)
            }
            None => {
                self.hot = self.hot.saturating_sub(1);
                if self.role_allowed
                    && self.link_role.is_none()
                    && Instant::now() >= self.next_role_try
                {
                    self.try_link_role();
                }
                None
            }
        }
    }

    /// The frame [`LocalPort::poll`] returned the length of.
    #[inline]
    pub(crate) fn frame(&self, len: usize) -> &[u8] {
        &self.buf[..len.min(self.buf.len())]
    }

    /// Descriptors whose readability means a same-host frame may be ready.
    pub(crate) fn push_fds(&self, fds: &mut Vec<RawFd>) {
        fds.push(self.sock.as_raw_fd());
        if let Some(s) = &self.link_role {
            fds.push(s.as_raw_fd());
        }
    }

    /// After a sleep: look at the socket on the next poll.
    pub(crate) fn woke(&mut self) {
        self.hot = self.hot.max(1);
    }
}
