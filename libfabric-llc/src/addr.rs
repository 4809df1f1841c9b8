//! The provider's endpoint names: the stack's LLC endpoint address
//! (`[MAC]:PORT`, `[MAC%0xSAP]:PORT`) in a fixed 16-byte binary form, which
//! is what `fi_getname` returns and `fi_av_insert` takes
//! (`addr_format` FI_FORMAT_UNSPEC).
//!
//! Layout: MAC (6 bytes), SAP (1), form version (1, now 1), port
//! (2, little-endian), zeros (6). The version byte lets a later form be
//! told apart; a name with another version or non-zero padding is refused.

use msg_layer::addr::{LlcAddr, MacAddr};
use msg_layer::Addr;

/// Bytes of a name.
pub const NAME_LEN: usize = 16;
const VERSION: u8 = 1;
/// The stack's default SAP (a name at another SAP carries its own).
pub const DEFAULT_SAP: u8 = 0x7C;

/// An endpoint's name.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Name {
    pub mac: [u8; 6],
    pub sap: u8,
    pub port: u16,
}

impl Name {
    /// Port `port` on MAC `mac` at the default SAP.
    pub fn new(mac: [u8; 6], port: u16) -> Name {
        Name {
            mac,
            sap: DEFAULT_SAP,
            port,
        }
    }

    /// The binary form.
    pub fn to_bytes(self) -> [u8; NAME_LEN] {
        let mut b = [0u8; NAME_LEN];
        b[..6].copy_from_slice(&self.mac);
        b[6] = self.sap;
        b[7] = VERSION;
        b[8..10].copy_from_slice(&self.port.to_le_bytes());
        b
    }

    /// A name from its binary form; `None` when it is not one.
    pub fn from_bytes(b: &[u8]) -> Option<Name> {
        let b: &[u8; NAME_LEN] = b.try_into().ok()?;
        if b[7] != VERSION || b[10..].iter().any(|&x| x != 0) {
            return None;
        }
        Some(Name {
            mac: b[..6].try_into().ok()?,
            sap: b[6],
            port: u16::from_le_bytes([b[8], b[9]]),
        })
    }

    /// A MAC written `02:00:00:00:00:01`, with or without brackets.
    pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
        let s = s.trim_start_matches('[').trim_end_matches(']');
        s.parse::<MacAddr>().ok().map(|m| m.0)
    }

    /// The message layer's address.
    pub fn addr(self) -> Addr {
        Addr::Llc(LlcAddr {
            mac: MacAddr(self.mac),
            sap: self.sap,
            port: self.port,
        })
    }

    /// The name of a message-layer address (`None` for a TCP one).
    pub fn of(addr: &Addr) -> Option<Name> {
        match addr {
            Addr::Llc(a) => Some(Name {
                mac: a.mac.0,
                sap: a.sap,
                port: a.port,
            }),
            Addr::Tcp(_) => None,
        }
    }
}

impl std::fmt::Display for Name {
    /// The stack's address text (`fi_av_straddr`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_print_as_the_stack_addresses() {
        let n = Name::new([2, 0, 0, 0, 0, 1], 7);
        assert_eq!(Name::from_bytes(&n.to_bytes()), Some(n));
        assert_eq!(n.to_string(), "[02:00:00:00:00:01]:7");
        let other = Name { sap: 0x20, ..n };
        assert_eq!(other.to_string(), "[02:00:00:00:00:01%0x20]:7");
        assert_eq!(Name::of(&other.addr()), Some(other));
    }

    #[test]
    fn what_is_not_a_name_is_refused() {
        let mut b = Name::new([2, 0, 0, 0, 0, 1], 7).to_bytes();
        assert!(Name::from_bytes(&b[..15]).is_none());
        b[7] = 2;
        assert!(Name::from_bytes(&b).is_none());
        b[7] = 1;
        b[15] = 1;
        assert!(Name::from_bytes(&b).is_none());
        assert_eq!(
            Name::parse_mac("[02:00:00:00:00:09]"),
            Some([2, 0, 0, 0, 0, 9])
        );
        assert_eq!(Name::parse_mac("eth0"), None);
    }
}
