//! Where a job's processes run: host lists, block placement, which host is
//! this one, and the route towards another (what its processes reach the
//! launcher at).

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::str::FromStr;

use crate::error::Error;

/// One host list entry: `NAME[:SLOTS]` (`[v6addr][:SLOTS]` for an IPv6
/// literal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub slots: Option<u32>,
}

impl FromStr for HostSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<HostSpec, Error> {
        let s = s.trim();
        let bad = |why| Error::HostSpec {
            spec: s.to_owned(),
            why,
        };
        let (name, slots) = if let Some(rest) = s.strip_prefix('[') {
            let (addr, after) = rest
                .split_once(']')
                .ok_or_else(|| bad("no ']' after the IPv6 address"))?;
            match after {
                "" => (addr, None),
                _ => match after.strip_prefix(':') {
                    Some(n) => (addr, Some(n)),
                    None => return Err(bad("expected ':SLOTS' after ']'")),
                },
            }
        } else {
            match s.rsplit_once(':') {
                Some((h, n)) if !h.contains(':') => (h, Some(n)),
                Some(_) => return Err(bad("write IPv6 addresses as [ADDR]:SLOTS")),
                None => (s, None),
            }
        };
        if name.is_empty() {
            return Err(bad("empty host name"));
        }
        let slots = match slots {
            None => None,
            Some(n) => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad("SLOTS must be a number above 0"))?,
            ),
        };
        Ok(HostSpec {
            name: name.to_owned(),
            slots,
        })
    }
}

impl fmt::Display for HostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.slots {
            Some(n) => write!(f, "{}:{n}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Block placement: process `i` runs on `hosts[place(..)[i]]`. Each host's
/// slots fill before the next host's; a host without `:SLOTS` has
/// ceil(n / hosts) of them. No hosts: all on host 0 (this one).
pub fn place(n: u32, hosts: &[HostSpec]) -> Result<Vec<usize>, Error> {
    if hosts.is_empty() {
        return Ok(vec![0; n as usize]);
    }
    let default = n.div_ceil(hosts.len() as u32).max(1);
    let slots: Vec<u32> = hosts.iter().map(|h| h.slots.unwrap_or(default)).collect();
    let total: u64 = slots.iter().map(|&s| u64::from(s)).sum();
    if total < u64::from(n) {
        let list: Vec<String> = hosts
            .iter()
            .zip(&slots)
            .map(|(h, s)| format!("{}:{s}", h.name))
            .collect();
        return Err(Error::Slots {
            n,
            total,
            list: list.join(","),
        });
    }
    let mut placement = Vec::with_capacity(n as usize);
    for (i, &s) in slots.iter().enumerate() {
        let left = n as usize - placement.len();
        placement.resize(placement.len() + left.min(s as usize), i);
    }
    Ok(placement)
}

/// This machine's hostname, as the kernel has it (empty if unreadable).
pub fn own_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// A host whose processes the launcher starts itself rather than through
/// an agent.
pub fn is_local(host: &str, hostname: &str) -> bool {
    host == "localhost" || host == "127.0.0.1" || (!hostname.is_empty() && host == hostname)
}

/// The IPv4 address `host` is reached at.
pub fn resolve_ipv4(host: &str) -> Result<Ipv4Addr, Error> {
    let addrs: Vec<SocketAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|source| Error::Resolve {
            host: host.to_owned(),
            source,
        })?
        .collect();
    addrs
        .iter()
        .find_map(|a| match a.ip() {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(_) => None,
        })
        .ok_or_else(|| Error::NoIpv4 {
            host: host.to_owned(),
        })
}

/// The local address the route to `dest` leaves from: what a process on
/// `dest` reaches the launcher at. Connecting a UDP socket only picks the
/// route, no packet is sent.
pub fn route_source(dest: Ipv4Addr) -> io::Result<IpAddr> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    socket.connect((dest, 9))?;
    Ok(socket.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(list: &str) -> Vec<HostSpec> {
        list.split(',').map(|h| h.parse().unwrap()).collect()
    }

    #[test]
    fn host_specs_parse() {
        assert_eq!(
            "h1:3".parse::<HostSpec>().unwrap(),
            HostSpec {
                name: "h1".into(),
                slots: Some(3)
            }
        );
        assert_eq!(
            "h1".parse::<HostSpec>().unwrap(),
            HostSpec {
                name: "h1".into(),
                slots: None
            }
        );
        assert_eq!(
            "[fe80::1]:2".parse::<HostSpec>().unwrap(),
            HostSpec {
                name: "fe80::1".into(),
                slots: Some(2)
            }
        );
        for bad in ["h1:0", "h1:x", ":2", "fe80::1", "[::1", "[::1]2"] {
            assert!(bad.parse::<HostSpec>().is_err(), "{bad}");
        }
        let e = "h1:0".parse::<HostSpec>().unwrap_err().to_string();
        assert_eq!(e, r#""h1:0": SLOTS must be a number above 0"#);
        assert_eq!("h1:3".parse::<HostSpec>().unwrap().to_string(), "h1:3");
    }

    #[test]
    fn block_placement_fills_hosts_in_order() {
        assert_eq!(place(3, &[]).unwrap(), [0, 0, 0]);
        assert_eq!(place(4, &hosts("a:2,b:2")).unwrap(), [0, 0, 1, 1]);
        assert_eq!(place(3, &hosts("a:2,b:2")).unwrap(), [0, 0, 1]);
        // Default slots: ceil(5 / 2) = 3 each.
        assert_eq!(place(5, &hosts("a,b")).unwrap(), [0, 0, 0, 1, 1]);
        assert_eq!(place(4, &hosts("a:1,b,c")).unwrap(), [0, 1, 1, 2]);
        let e = place(5, &hosts("a:2,b:2")).unwrap_err().to_string();
        assert!(
            e.contains("5 nodes but only 4 slots") && e.contains("a:2,b:2"),
            "{e}"
        );
    }

    #[test]
    fn local_hosts() {
        assert!(is_local("localhost", "n1"));
        assert!(is_local("127.0.0.1", "n1"));
        assert!(is_local("n1", "n1"));
        assert!(!is_local("n2", "n1"));
        assert!(!is_local("", ""));
    }

    #[test]
    fn loopback_resolves_and_routes_through_loopback() {
        let ip = resolve_ipv4("127.0.0.1").unwrap();
        assert_eq!(ip, Ipv4Addr::LOCALHOST);
        assert!(route_source(ip).unwrap().is_loopback());
        let e = resolve_ipv4("::1").unwrap_err();
        assert!(matches!(e, Error::NoIpv4 { .. }), "{e}");
    }
}
