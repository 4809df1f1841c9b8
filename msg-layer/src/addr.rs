//! Endpoint addresses, printable and parsable, exchanged out of band (the
//! MPI modex, a name service, a command line): whom an endpoint talks to.
//!
//! An address is written like a socket address, with no scheme, so that it
//! never looks like a transport spec (`llc://IFACE?...`, `tcp://IP:PORT`:
//! where an endpoint listens, `transport::spec`):
//!
//! - LLC: the interface's MAC in brackets, then the port,
//!   `[02:00:00:00:00:01]:7`; a SAP other than the default goes after the
//!   MAC as a zone does after an IPv6 address, `[02:00:00:00:00:01%0x7c]:7`.
//! - TCP: `10.0.0.1:7000` or `[fd00::1]:7000`.
//!
//! A MAC is six groups and never an IPv6 address, so the form tells the
//! transport.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

pub(crate) use llc_stack::wire::llc::validate_sap;
use llc_stack::wire::llc::DEFAULT_SAP;
/// An interface's MAC address, the first part of an [`LlcAddr`].
pub use llc_stack::wire::MacAddr;

/// Where an endpoint listens.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LlcAddr {
    /// Interface MAC.
    pub mac: MacAddr,
    /// LLC SAP.
    pub sap: u8,
    /// Transport port.
    pub port: u16,
}

/// What an address looks like, for error messages.
const FORMS: &str = "[MAC]:PORT for LLC (e.g. [02:00:00:00:00:01]:7, [MAC%0xSAP]:PORT at another SAP) or IP:PORT for TCP (10.0.0.1:7000, [fd00::1]:7000)";

/// Why an address did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// Not of an address's form.
    #[error("invalid endpoint address {0:?}: expected {FORMS}")]
    Form(String),
    /// A transport spec (`llc://...`, `tcp://...`) where an address was
    /// expected: the spec says where an endpoint listens, the address
    /// whom it talks to.
    #[error("invalid endpoint address {0:?}: that is a transport spec (where an endpoint listens) or an address's old form; an address is {FORMS}")]
    Spec(String),
    /// A part is wrong: the MAC, the SAP or the port.
    #[error("invalid endpoint address {addr:?}: {reason}")]
    Part {
        /// The whole address.
        addr: String,
        /// What was wrong.
        reason: String,
    },
}

impl LlcAddr {
    /// The address of port `port` on the interface with MAC `mac`, at the
    /// default SAP.
    pub fn new(mac: MacAddr, port: u16) -> Self {
        LlcAddr {
            mac,
            sap: DEFAULT_SAP,
            port,
        }
    }
}

impl fmt::Display for LlcAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.sap == DEFAULT_SAP {
            write!(f, "[{}]:{}", self.mac, self.port)
        } else {
            write!(f, "[{}%{:#04x}]:{}", self.mac, self.sap, self.port)
        }
    }
}

impl FromStr for LlcAddr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains("://") {
            return Err(AddrError::Spec(s.to_string()));
        }
        let form = || AddrError::Form(s.to_string());
        let part = |reason: String| AddrError::Part {
            addr: s.to_string(),
            reason,
        };
        let (inner, port) = s
            .strip_prefix('[')
            .and_then(|r| r.split_once("]:"))
            .ok_or_else(form)?;
        let (mac, sap) = match inner.split_once('%') {
            Some((m, sap)) => (m, Some(sap)),
            None => (inner, None),
        };
        let mac: MacAddr = mac
            .parse()
            .map_err(|e: llc_stack::wire::ethernet::ParseMacError| part(e.to_string()))?;
        if mac.is_group() {
            return Err(part(format!(
                "{mac} is a group address; an endpoint needs an individual MAC"
            )));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| part(format!("port {port:?} is not a number 0..=65535")))?;
        let sap = match sap {
            None => DEFAULT_SAP,
            Some(v) => {
                let n = match v.strip_prefix("0x") {
                    Some(h) => u8::from_str_radix(h, 16),
                    None => v.parse(),
                }
                .map_err(|_| part(format!("SAP {v:?} is not a byte")))?;
                validate_sap(n).map_err(|e| part(e.to_string()))?
            }
        };
        Ok(LlcAddr { mac, sap, port })
    }
}

/// Whom an endpoint of any transport talks to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Addr {
    /// The LLC stack.
    Llc(LlcAddr),
    /// TCP.
    Tcp(SocketAddr),
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Llc(a) => a.fmt(f),
            Addr::Tcp(a) => a.fmt(f),
        }
    }
}

impl Addr {
    /// True when `s` has an LLC address's form (a MAC in brackets), so
    /// that a caller knows the transport before parsing.
    pub fn looks_llc(s: &str) -> bool {
        s.strip_prefix('[')
            .and_then(|r| r.split_once(']'))
            .is_some_and(|(inner, _)| {
                let mac = inner.split_once('%').map_or(inner, |(m, _)| m);
                mac.len() == 17 && mac.bytes().filter(|&b| b == b':').count() == 5
            })
    }
}

impl FromStr for Addr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains("://") {
            return Err(AddrError::Spec(s.to_string()));
        }
        if Addr::looks_llc(s) {
            return s.parse().map(Addr::Llc);
        }
        s.parse().map(Addr::Tcp).map_err(|_| {
            if s.contains(':') {
                AddrError::Part {
                    addr: s.to_string(),
                    reason: format!("{s:?} is not IP:PORT (e.g. 10.0.0.1:7000 or [fd00::1]:7000) nor [MAC]:PORT"),
                }
            } else {
                AddrError::Form(s.to_string())
            }
        })
    }
}

impl From<LlcAddr> for Addr {
    fn from(a: LlcAddr) -> Self {
        Addr::Llc(a)
    }
}

impl From<SocketAddr> for Addr {
    fn from(a: SocketAddr) -> Self {
        Addr::Tcp(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_transport_round_trips() {
        for s in [
            "[02:00:00:00:00:01]:7",
            "[02:00:00:00:00:01%0x40]:7",
            "10.0.0.1:7000",
            "[fd00::1]:7000",
        ] {
            let a: Addr = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
        assert!(matches!(
            "[02:00:00:00:00:01]:7".parse::<Addr>(),
            Ok(Addr::Llc(_))
        ));
        assert!(matches!(
            "10.0.0.1".parse::<Addr>(),
            Err(AddrError::Form(_))
        ));
        assert!(matches!(
            "10.0.0.1:x".parse::<Addr>(),
            Err(AddrError::Part { .. })
        ));
        // Specs, and the old scheme forms, are refused with the forms to use.
        for spec in [
            "tcp://10.0.0.1:7000",
            "llc://02:00:00:00:00:01/7",
            "llc://eth0?port=7",
        ] {
            let e = spec.parse::<Addr>().unwrap_err();
            assert!(matches!(e, AddrError::Spec(_)), "{spec}: {e}");
            assert!(e.to_string().contains("[MAC]:PORT"), "{e}");
        }
    }

    #[test]
    fn round_trips_and_errors() {
        let a: LlcAddr = "[02:00:00:00:00:01]:7".parse().unwrap();
        assert_eq!(a.mac, MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!((a.sap, a.port), (DEFAULT_SAP, 7));
        assert_eq!(a.to_string(), "[02:00:00:00:00:01]:7");
        assert_eq!(LlcAddr::new(a.mac, 7), a);
        let b: LlcAddr = "[02:00:00:00:00:01%0x40]:65535".parse().unwrap();
        assert_eq!((b.sap, b.port), (0x40, 65535));
        assert_eq!(b.to_string().parse::<LlcAddr>().unwrap(), b);
        for bad in [
            "",
            "02:00:00:00:00:01:7",
            "[02:00:00:00:00:01]",
            "[02:00:00:00:00]:7",
            "[02:00:00:00:00:01]:70000",
            "[01:00:00:00:00:01]:7",
            "[02:00:00:00:00:01%0x41]:7",
            "[02:00:00:00:00:01%0x00]:7",
            "llc://02:00:00:00:00:01/7",
        ] {
            let e = bad.parse::<LlcAddr>().unwrap_err();
            assert!(
                e.to_string().contains("invalid endpoint address"),
                "{bad}: {e}"
            );
        }
    }
}
