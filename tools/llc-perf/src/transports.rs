//! The transports llc-perf measures, and how each side opens its endpoint.
//!
//! Every transport of one run coexists on the same interface: the two LLC
//! transports use different SAPs (the XDP program redirects only
//! [`XDP_SAP`] frames to its socket, the AF_PACKET socket filter keeps only
//! [`PACKET_SAP`] frames), the TCP ones different ports.
//!
//! The message-rate test with several pairs (`--pairs N`) opens N endpoints
//! per transport on each side, on the same interface: the server's endpoint
//! of pair i listens on the base port plus 2i (LLC port and tcp-uring's TCP
//! port; tcp's is one more, as for pair 0), the client's LLC endpoint of
//! pair i takes [`CLIENT_PORT`] plus i (see [`pair_port`]).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, Result};
use msg_layer::addr::{LlcAddr, MacAddr};
use msg_layer::transport::spec::{AttachMode, Backend, LlcSpec, TcpSpec};
use msg_layer::transport::{AnyTransport, TransportSpec};
use msg_layer::{Addr, Config, Endpoint};

/// An endpoint over whichever transport was chosen at run time.
pub type Ep = Endpoint<AnyTransport>;

/// SAP of the LLC-over-AF_XDP endpoints (the stack's default).
pub const XDP_SAP: u8 = 0x7C;
/// SAP of the LLC-over-AF_PACKET endpoints.
pub const PACKET_SAP: u8 = 0x78;
/// Port server endpoints listen on by default (LLC port; TCP port of
/// tcp-uring, plus one for tcp).
pub const SERVER_PORT: u16 = 5201;
/// LLC port of client endpoints.
pub const CLIENT_PORT: u16 = 5301;
/// Most sender/receiver pairs of the message-rate test: pair ports stay
/// below [`CLIENT_PORT`] with the default base port.
pub const MAX_PAIRS: usize = 16;

/// The server's base port of pair `pair`, given the base port of pair 0.
pub fn pair_port(base: u16, pair: usize) -> u16 {
    base.wrapping_add(2 * pair as u16)
}

/// A transport under test.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Kind {
    /// The LLC stack over AF_XDP.
    #[serde(rename = "llc-xdp")]
    LlcXdp,
    /// The LLC stack over AF_PACKET.
    #[serde(rename = "llc-packet")]
    LlcPacket,
    /// Kernel TCP over io_uring.
    #[serde(rename = "tcp-uring")]
    TcpUring,
    /// Kernel TCP over non-blocking sockets and epoll.
    #[serde(rename = "tcp")]
    Tcp,
}

impl Kind {
    /// All of them, in report order.
    pub const ALL: [Kind; 4] = [Kind::LlcXdp, Kind::LlcPacket, Kind::TcpUring, Kind::Tcp];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::LlcXdp => "llc-xdp",
            Kind::LlcPacket => "llc-packet",
            Kind::TcpUring => "tcp-uring",
            Kind::Tcp => "tcp",
        }
    }

    /// LLC or TCP?
    pub fn is_llc(self) -> bool {
        matches!(self, Kind::LlcXdp | Kind::LlcPacket)
    }

    fn sap(self) -> u8 {
        match self {
            Kind::LlcPacket => PACKET_SAP,
            _ => XDP_SAP,
        }
    }

    fn tcp_port(self, base: u16) -> u16 {
        match self {
            Kind::Tcp => base.wrapping_add(1),
            _ => base,
        }
    }

    /// Where the server of this transport listens, given the server's MAC
    /// (LLC) or IP (TCP).
    pub fn server_addr(self, mac: Option<MacAddr>, ip: Option<IpAddr>, port: u16) -> Result<Addr> {
        if self.is_llc() {
            let mac = mac.ok_or_else(|| {
                anyhow!(
                    "--transport {} needs the server's MAC address as PEER (e.g. 02:00:00:00:00:02)",
                    self.name()
                )
            })?;
            Ok(Addr::Llc(LlcAddr {
                mac,
                sap: self.sap(),
                port,
            }))
        } else {
            let ip = ip.ok_or_else(|| {
                anyhow!(
                    "--transport {} needs the server's IP address as PEER (e.g. 10.0.0.2)",
                    self.name()
                )
            })?;
            Ok(Addr::Tcp(SocketAddr::new(ip, self.tcp_port(port))))
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!("unknown transport {s:?}: expected llc-xdp, llc-packet, tcp-uring or tcp")
            })
    }
}

/// How an endpoint is opened.
#[derive(Clone, Debug)]
pub struct Open<'a> {
    /// The interface (LLC).
    pub ifname: &'a str,
    /// The local IP to bind (TCP): unspecified for a server listening on all.
    pub ip: IpAddr,
    /// Server (known ports) or client (LLC: its own port; TCP: any port).
    pub server: bool,
    /// The server's base port.
    pub port: u16,
    /// Cooperative task running on the io_uring ring: right when one
    /// thread drives the endpoint, wrong with a progress thread.
    pub uring_coop: bool,
    /// XDP attach mode (llc-xdp).
    pub xdp_attach: AttachMode,
    /// Which sender/receiver pair of the message-rate test this endpoint
    /// belongs to (0 for every other test): it picks the ports.
    pub pair: usize,
}

/// The spec of `kind`'s endpoint (printable as `llc://IFNAME?...` or
/// `tcp://IP:PORT?...`).
pub fn spec(kind: Kind, o: &Open<'_>) -> TransportSpec {
    match kind {
        Kind::LlcXdp | Kind::LlcPacket => {
            let mut s = LlcSpec {
                backend: if kind == Kind::LlcXdp {
                    Backend::Xdp
                } else {
                    Backend::Packet
                },
                attach: o.xdp_attach,
                port: if o.server {
                    pair_port(o.port, o.pair)
                } else {
                    CLIENT_PORT.wrapping_add(o.pair as u16)
                },
                ..LlcSpec::new(o.ifname)
            };
            s.config.sap = kind.sap();
            if let Some(key) = job_key() {
                s.config.auth_key = Some(key.clone());
            }
            TransportSpec::Llc(s)
        }
        Kind::TcpUring | Kind::Tcp => {
            let port = if o.server {
                kind.tcp_port(pair_port(o.port, o.pair))
            } else {
                0
            };
            let mut s = TcpSpec::new(SocketAddr::new(o.ip, port));
            s.config.uring_coop_taskrun = o.uring_coop;
            s.config.busy_poll = Some(Duration::from_micros(50));
            if kind == Kind::TcpUring {
                TransportSpec::TcpUring(s)
            } else {
                TransportSpec::Tcp(s)
            }
        }
    }
}

/// Environment variable with the job's key material, as llc-ping and
/// llc-xfer read it (docs/SECURITY.md).
pub const AUTH_KEY_ENV: &str = "LLC_AUTH_KEY";

/// The frame key derived from `LLC_AUTH_KEY` (read once; unset or empty:
/// none). Both sides of a run need the same value; the demo's server side
/// is this process, so it has it.
pub fn job_key() -> Option<&'static llc_stack::wire::AuthKey> {
    static KEY: OnceLock<Option<llc_stack::wire::AuthKey>> = OnceLock::new();
    KEY.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        let v = std::env::var_os(AUTH_KEY_ENV).filter(|v| !v.is_empty())?;
        let key = llc_stack::wire::AuthKey::derive(v.as_bytes());
        tracing::info!(fingerprint = %key.fingerprint(), "LLC frame authentication on");
        Some(key)
    })
    .as_ref()
}

/// Open `kind`'s transport and an endpoint on it. Call it inside the
/// namespace the endpoint belongs to.
pub fn open(kind: Kind, o: &Open<'_>) -> Result<Ep> {
    let spec = spec(kind, o);
    tracing::debug!(%spec, "{kind}: opening");
    let t = spec.open().map_err(|e| match kind {
        Kind::LlcXdp | Kind::LlcPacket => anyhow!("{kind} on {}: {e}", o.ifname),
        Kind::TcpUring | Kind::Tcp => anyhow!("{kind}: {e}"),
    })?;
    for n in t.notes() {
        tracing::info!("{kind}: {n}");
    }
    Endpoint::new(t, Config::default()).map_err(|e| anyhow!("{kind}: {e}"))
}

/// A peer given on the command line: a MAC (for LLC) or an IP (for TCP).
#[derive(Clone, Debug, Default)]
pub struct Peers {
    /// The server's MAC.
    pub mac: Option<MacAddr>,
    /// The server's IP.
    pub ip: Option<IpAddr>,
}

impl Peers {
    /// Sort the positional PEER arguments into a MAC and an IP.
    pub fn parse(args: &[String]) -> Result<Peers> {
        let mut p = Peers::default();
        for a in args {
            if let Ok(ip) = a.parse::<IpAddr>() {
                if p.ip.replace(ip).is_some() {
                    return Err(anyhow!("more than one IP address among the PEER arguments"));
                }
            } else if let Ok(mac) = a.parse::<MacAddr>() {
                if p.mac.replace(mac).is_some() {
                    return Err(anyhow!(
                        "more than one MAC address among the PEER arguments"
                    ));
                }
            } else {
                return Err(anyhow!(
                    "PEER {a:?} is neither a MAC address (02:00:00:00:00:02, for LLC) nor an IP address (10.0.0.2, for TCP)"
                ));
            }
        }
        Ok(p)
    }
}
