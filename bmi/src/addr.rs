//! BMI's address strings and which method each belongs to.
//!
//! A listen address is a transport spec, as every API takes (where an
//! endpoint listens); a peer's address is the message layer's address
//! (whom it talks to), with no scheme, so the two never look alike:
//!
//! - `bmi_llc`: listen on `llc://IFACE?port=PORT[&OPTION=VALUE...]` with
//!   the message layer's LLC options (`backend=xdp|packet|auto`, `attach=`,
//!   ...); a peer is `[MAC]:PORT` (`[MAC%0xSAP]:PORT` at another SAP), what
//!   the message layer prints for an LLC endpoint.
//! - `bmi_tcp`: listen on `tcp://HOST:PORT`; a peer is `HOST:PORT`
//!   (`[IPv6]:PORT`). A host name is resolved when the address is first
//!   used (lookups are lazy), an IP literal at once.
//!
//! The form tells the method: a MAC in brackets is LLC, anything else TCP.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;

use msg_layer::addr::LlcAddr;
use msg_layer::transport::spec::TransportSpec;
use msg_layer::Addr;

use crate::error::BmiError;

/// A network method: one transport under BMI.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MethodKind {
    /// The LLC stack over raw Ethernet (AF_XDP or AF_PACKET).
    Llc,
    /// The message layer over kernel TCP.
    Tcp,
}

impl MethodKind {
    /// The method's name in a method list (`bmi_llc`, `bmi_tcp`).
    pub fn name(self) -> &'static str {
        match self {
            MethodKind::Llc => "bmi_llc",
            MethodKind::Tcp => "bmi_tcp",
        }
    }

    /// The method a name in a method list means.
    pub fn from_name(name: &str) -> Result<MethodKind, BmiError> {
        match name.trim() {
            "bmi_llc" => Ok(MethodKind::Llc),
            "bmi_tcp" => Ok(MethodKind::Tcp),
            other => Err(BmiError::UnknownMethod(other.to_string())),
        }
    }

    /// The method of a listen spec, by its scheme.
    pub fn of_spec(s: &str) -> Result<MethodKind, BmiError> {
        match s.split_once("://") {
            Some(("llc", _)) => Ok(MethodKind::Llc),
            Some(("tcp", _)) => Ok(MethodKind::Tcp),
            Some((scheme, _)) => Err(BmiError::UnknownMethod(format!("{scheme}://"))),
            None => Err(bad(
                s,
                "a listen address is a transport spec: llc://IFACE?port=PORT or tcp://HOST:PORT",
            )),
        }
    }
}

fn bad(addr: &str, reason: impl Into<String>) -> BmiError {
    BmiError::BadAddress {
        addr: addr.to_string(),
        reason: reason.into(),
    }
}

/// A peer's address as looked up: checked for form at once, resolved to a
/// transport address when first used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerName {
    /// An LLC endpoint.
    Llc(LlcAddr),
    /// A TCP endpoint, host not resolved yet.
    Tcp {
        /// Host name or IP literal.
        host: String,
        /// Port.
        port: u16,
    },
}

impl PeerName {
    /// Parse a peer address of either method: `[MAC]:PORT` (LLC) or
    /// `HOST:PORT` (TCP). A string with a scheme is a spec, or an address
    /// written as before version 4 of the vocabulary: refused with the form
    /// to write (an unknown scheme as an unknown method, as BMI does).
    pub fn parse(s: &str) -> Result<PeerName, BmiError> {
        if let Some((scheme, _)) = s.split_once("://") {
            if scheme != "llc" && scheme != "tcp" {
                return Err(BmiError::UnknownMethod(format!("{scheme}://")));
            }
            return Err(bad(
                s,
                "that is a listen spec's form; a peer's address is [MAC]:PORT (bmi_llc, e.g. [02:00:00:00:00:01]:3334) or HOST:PORT (bmi_tcp)",
            ));
        }
        if Addr::looks_llc(s) {
            return LlcAddr::from_str(s)
                .map(PeerName::Llc)
                .map_err(|e| bad(s, e.to_string()));
        }
        let (host, port) = split_host_port(s, s)?;
        if host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) || port == 0 {
            return Err(bad(
                s,
                "a peer needs a specific host and a port other than 0",
            ));
        }
        Ok(PeerName::Tcp { host, port })
    }

    /// The method of this address.
    pub fn method(&self) -> MethodKind {
        match self {
            PeerName::Llc(_) => MethodKind::Llc,
            PeerName::Tcp { .. } => MethodKind::Tcp,
        }
    }

    /// The transport address (resolving a host name, the first IPv4
    /// answer preferred).
    pub fn resolve(&self) -> Result<Addr, BmiError> {
        match self {
            PeerName::Llc(a) => Ok(Addr::Llc(*a)),
            PeerName::Tcp { host, port } => resolve(host, *port).map(Addr::Tcp),
        }
    }
}

fn resolve(host: &str, port: u16) -> Result<SocketAddr, BmiError> {
    let all: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| {
            bad(
                &format!("{host}:{port}"),
                format!("cannot resolve {host:?}: {e}"),
            )
        })?
        .collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .copied()
        .ok_or_else(|| {
            bad(
                &format!("{host}:{port}"),
                format!("{host:?} has no address"),
            )
        })
}

/// `HOST:PORT` or `[V6]:PORT` (`rest`, from the string `s`) into host and
/// port.
fn split_host_port(s: &str, rest: &str) -> Result<(String, u16), BmiError> {
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        v6.split_once("]:")
            .ok_or_else(|| bad(s, "expected [IPv6]:PORT"))?
    } else {
        rest.rsplit_once(':')
            .ok_or_else(|| bad(s, "expected HOST:PORT, or [MAC]:PORT for bmi_llc"))?
    };
    if host.is_empty() || host.contains(['/', '?', ' ', '[', ']']) {
        return Err(bad(s, format!("{host:?} is not a host name or IP address")));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| bad(s, format!("port {port:?} is not a number 0..=65535")))?;
    Ok((host.to_string(), port))
}

/// A listen address into the transport to open: a transport spec, as
/// every API takes (`llc://eth0?port=7`, `tcp://10.0.0.1:3334`; a TCP host
/// may be a name). An LLC spec names its port: clients are told it.
pub fn listen_spec(s: &str) -> Result<(MethodKind, TransportSpec), BmiError> {
    let kind = MethodKind::of_spec(s)?;
    let spec = match kind {
        MethodKind::Llc => {
            let rest = &s["llc://".len()..];
            let (main, query) = match rest.split_once('?') {
                Some((m, q)) => (m, Some(q)),
                None => (rest, None),
            };
            if main.contains('/') {
                return Err(bad(
                    s,
                    "a listen spec names its port as an option: llc://IFACE?port=PORT",
                ));
            }
            if !query.is_some_and(|q| q.split('&').any(|o| o.starts_with("port="))) {
                return Err(bad(
                    s,
                    "a listen spec names its port: llc://IFACE?port=PORT",
                ));
            }
            TransportSpec::from_str(s).map_err(|e| bad(s, e.to_string()))?
        }
        MethodKind::Tcp => {
            let (host, port) = split_host_port(s, &s["tcp://".len()..])?;
            let addr = resolve(&host, port)?;
            TransportSpec::from_str(&format!("tcp://{addr}")).map_err(|e| bad(s, e.to_string()))?
        }
    };
    Ok((kind, spec))
}

/// The local IP a TCP client should bind so that `to` can reach it back
/// (the source address of the route to `to`).
pub fn route_source(to: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(to).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_parse_and_bad_ones_say_why() {
        assert_eq!(
            PeerName::parse("[02:00:00:00:00:01]:7").unwrap().method(),
            MethodKind::Llc
        );
        assert_eq!(
            PeerName::parse("server:3334").unwrap(),
            PeerName::Tcp {
                host: "server".into(),
                port: 3334
            }
        );
        assert!(PeerName::parse("[::1]:5").is_ok());
        assert!(PeerName::parse("10.0.0.1:5").is_ok());
        for s in [
            "[02:00:00:00:00:01]",
            "[zz:00:00:00:00:01]:7",
            "[ff:ff:ff:ff:ff:ff]:7",
            "host",
            "host:99999",
            ":5",
            "0.0.0.0:5",
            "no-port",
            // Specs, and addresses in the old scheme form.
            "llc://02:00:00:00:00:01/7",
            "tcp://server:3334",
        ] {
            let e = PeerName::parse(s).unwrap_err();
            assert_eq!(e.code(), -libc::EADDRNOTAVAIL, "{s}: {e}");
        }
        assert!(PeerName::parse("tcp://server:3334")
            .unwrap_err()
            .to_string()
            .contains("HOST:PORT"));
        assert_eq!(
            PeerName::parse("gm://host:5").unwrap_err().code(),
            -libc::EPROTONOSUPPORT
        );
    }

    #[test]
    fn listen_addresses_are_transport_specs() {
        let (k, spec) = listen_spec("llc://eth0?port=9&backend=packet").unwrap();
        assert_eq!(k, MethodKind::Llc);
        assert_eq!(spec.to_string(), "llc://eth0?backend=packet&port=9");
        let (k, spec) = listen_spec("tcp://127.0.0.1:0").unwrap();
        assert_eq!(k, MethodKind::Tcp);
        assert_eq!(spec.to_string(), "tcp://127.0.0.1:0");
        assert!(listen_spec("llc://eth0").is_err());
        assert!(listen_spec("llc://eth0?backend=packet").is_err(), "no port");
        assert!(listen_spec("llc://eth0?port=7&colour=red").is_err());
        // The old shorthand, which looked like an address: refused, with the spec to write.
        let e = listen_spec("llc://eth0/9").unwrap_err();
        assert!(e.to_string().contains("llc://IFACE?port=PORT"), "{e}");
        assert!(listen_spec("[02:00:00:00:00:01]:7").is_err(), "an address");
        assert_eq!(
            MethodKind::from_name("bmi_gm").unwrap_err().code(),
            -libc::EPROTONOSUPPORT
        );
    }
}
