//! Endpoint addresses, printable and parsable, exchanged out of band (the
//! MPI modex, a name service, a command line).
//!
//! - LLC: interface MAC + LLC SAP + port, `llc://02:00:00:00:00:01/7`
//!   (default SAP) or `llc://02:00:00:00:00:01/7?sap=0x7c`.
//! - TCP: `tcp://10.0.0.1:7000` or `tcp://[fd00::1]:7000`.

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

/// Why an address did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// Not of the form `llc://MAC/PORT[?sap=0xNN]`.
    #[error("invalid endpoint address {0:?}: expected llc://MAC/PORT[?sap=0xNN] (e.g. llc://02:00:00:00:00:01/7) or tcp://IP:PORT")]
    Form(String),
    /// The MAC part is not a MAC.
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
        write!(f, "llc://{}/{}", self.mac, self.port)?;
        if self.sap != DEFAULT_SAP {
            write!(f, "?sap={:#04x}", self.sap)?;
        }
        Ok(())
    }
}

impl FromStr for LlcAddr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let form = || AddrError::Form(s.to_string());
        let part = |reason: String| AddrError::Part {
            addr: s.to_string(),
            reason,
        };
        let rest = s.strip_prefix("llc://").ok_or_else(form)?;
        let (main, query) = match rest.split_once('?') {
            Some((m, q)) => (m, Some(q)),
            None => (rest, None),
        };
        let (mac, port) = main.rsplit_once('/').ok_or_else(form)?;
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
        let sap = match query {
            None => DEFAULT_SAP,
            Some(q) => {
                let v = q.strip_prefix("sap=").ok_or_else(form)?;
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

/// Where an endpoint of any transport listens.
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
            Addr::Tcp(a) => write!(f, "tcp://{a}"),
        }
    }
}

impl FromStr for Addr {
    type Err = AddrError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with("llc://") {
            return s.parse().map(Addr::Llc);
        }
        let Some(rest) = s.strip_prefix("tcp://") else {
            return Err(AddrError::Form(s.to_string()));
        };
        rest.parse().map(Addr::Tcp).map_err(|_| AddrError::Part {
            addr: s.to_string(),
            reason: format!("{rest:?} is not IP:PORT (e.g. 10.0.0.1:7000 or [fd00::1]:7000)"),
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
            "llc://02:00:00:00:00:01/7",
            "tcp://10.0.0.1:7000",
            "tcp://[fd00::1]:7000",
        ] {
            let a: Addr = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
        assert!(matches!(
            "tcp://10.0.0.1".parse::<Addr>(),
            Err(AddrError::Part { .. })
        ));
        assert!(matches!(
            "udp://10.0.0.1:7".parse::<Addr>(),
            Err(AddrError::Form(_))
        ));
    }

    #[test]
    fn round_trips_and_errors() {
        let a: LlcAddr = "llc://02:00:00:00:00:01/7".parse().unwrap();
        assert_eq!(a.mac, MacAddr([2, 0, 0, 0, 0, 1]));
        assert_eq!((a.sap, a.port), (DEFAULT_SAP, 7));
        assert_eq!(a.to_string(), "llc://02:00:00:00:00:01/7");
        let b: LlcAddr = "llc://02:00:00:00:00:01/65535?sap=0x40".parse().unwrap();
        assert_eq!((b.sap, b.port), (0x40, 65535));
        assert_eq!(b.to_string().parse::<LlcAddr>().unwrap(), b);
        for bad in [
            "",
            "tcp://02:00:00:00:00:01/7",
            "llc://02:00:00:00:00:01",
            "llc://02:00:00:00:00/7",
            "llc://02:00:00:00:00:01/70000",
            "llc://01:00:00:00:00:01/7",
            "llc://02:00:00:00:00:01/7?sap=0x41",
            "llc://02:00:00:00:00:01/7?sap=0x00",
            "llc://02:00:00:00:00:01/7?port=3",
        ] {
            let e = bad.parse::<LlcAddr>().unwrap_err();
            assert!(
                e.to_string().contains("invalid endpoint address"),
                "{bad}: {e}"
            );
        }
    }
}
