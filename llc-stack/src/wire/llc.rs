//! The IEEE 802.2 LLC header (type 1, connectionless).
//!
//! Three bytes: DSAP, SSAP, and an 8-bit U-format control field. Data travels in
//! UI frames. TEST and XID commands addressed to our SAP are answered as 802.2
//! requires, by the endpoint (see [`Endpoint::handle_frame`]).
//!
//! [`Endpoint::handle_frame`]: crate::proto::Endpoint::handle_frame
//!
//! SAP bit rules (ISO/IEC 8802-2 §5.3): in the DSAP the least significant bit is
//! I/G (0 individual, 1 group); in the SSAP it is C/R (0 command, 1 response).
//! The next bit marks who defines the address: 1 for addresses the IEEE/ISO
//! assigns (0x06 IP, 0x42 STP, 0xAA SNAP, 0xFE OSI), 0 for locally (user)
//! defined ones. Our default [`DEFAULT_SAP`] = 0x7C has both low bits clear: an
//! individual, locally defined SAP, not one of the well-known local values
//! (0x04/0x08/0x0C SNA, 0x80 XNS, 0xE0 IPX, 0xF0 NetBIOS, 0xF4/0xF8/0xFC IBM).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Length of the LLC header with an 8-bit control field.
pub const HEADER_LEN: usize = 3;
/// Default SAP: individual, locally defined.
pub const DEFAULT_SAP: u8 = 0x7C;
/// The null SAP (addresses the LLC itself).
pub const NULL_SAP: u8 = 0x00;
/// I/G bit of a DSAP: set for group addresses.
pub const SAP_GROUP_BIT: u8 = 0x01;
/// C/R bit of an SSAP: set on responses.
pub const SAP_RESPONSE_BIT: u8 = 0x01;
/// Set in SAPs defined by the IEEE/ISO, clear in locally defined ones.
pub const SAP_IEEE_DEFINED_BIT: u8 = 0x02;

/// Poll/final bit of a U-format control field.
pub const PF_BIT: u8 = 0x10;
/// Unnumbered information (our data frames).
pub const CONTROL_UI: u8 = 0x03;
/// TEST command or response (P/F clear).
pub const CONTROL_TEST: u8 = 0xE3;
/// XID command or response (P/F clear).
pub const CONTROL_XID: u8 = 0xAF;

/// XID information field format identifier for the IEEE basic format.
pub const XID_FORMAT_BASIC: u8 = 0x81;
/// XID "LLC types supported" value for type 1 (connectionless) only.
pub const XID_CLASS_1: u8 = 0x01;

/// The LLC header as it lies on the wire.
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct LlcHeader {
    /// Destination service access point.
    pub dsap: u8,
    /// Source service access point (low bit: response).
    pub ssap: u8,
    /// U-format control field.
    pub control: u8,
}

const _: () = assert!(std::mem::size_of::<LlcHeader>() == HEADER_LEN);

/// What an LLC control field says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Unnumbered information: our transport header follows.
    Ui,
    /// TEST, with the P/F bit.
    Test {
        /// Poll (on commands) or final (on responses) bit.
        pf: bool,
    },
    /// XID, with the P/F bit.
    Xid {
        /// Poll (on commands) or final (on responses) bit.
        pf: bool,
    },
    /// Anything else (I or S format, other U commands): not handled here.
    Unknown(u8),
}

impl LlcHeader {
    /// True when the SSAP's C/R bit marks a response.
    pub fn is_response(&self) -> bool {
        self.ssap & SAP_RESPONSE_BIT != 0
    }

    /// The SSAP without its C/R bit.
    pub fn source_sap(&self) -> u8 {
        self.ssap & !SAP_RESPONSE_BIT
    }

    /// Decode the control field.
    pub fn command(&self) -> Command {
        let pf = self.control & PF_BIT != 0;
        match self.control & !PF_BIT {
            CONTROL_UI if !pf => Command::Ui,
            CONTROL_TEST => Command::Test { pf },
            CONTROL_XID => Command::Xid { pf },
            _ => Command::Unknown(self.control),
        }
    }

    /// A header for `command` from `sap` to `dsap`.
    pub fn new(dsap: u8, sap: u8, response: bool, command: Command) -> Self {
        let control = match command {
            Command::Ui => CONTROL_UI,
            Command::Test { pf } => CONTROL_TEST | if pf { PF_BIT } else { 0 },
            Command::Xid { pf } => CONTROL_XID | if pf { PF_BIT } else { 0 },
            Command::Unknown(c) => c,
        };
        LlcHeader {
            dsap,
            ssap: (sap & !SAP_RESPONSE_BIT) | if response { SAP_RESPONSE_BIT } else { 0 },
            control,
        }
    }
}

/// Why a SAP cannot be ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SapError {
    /// Group SAPs address many receivers; a transport endpoint needs an individual one.
    #[error("SAP {0:#04x} is a group address (its low bit is set); use an individual SAP such as {DEFAULT_SAP:#04x}")]
    Group(u8),
    /// The null SAP belongs to the LLC itself.
    #[error("SAP 0x00 is the null SAP reserved for the LLC itself; use e.g. {DEFAULT_SAP:#04x}")]
    Null,
}

/// Check that `sap` can address our endpoint: individual and not null. SAPs
/// with the IEEE-defined bit set are accepted (a site may have reasons) but
/// are not the default.
pub fn validate_sap(sap: u8) -> Result<u8, SapError> {
    if sap == NULL_SAP {
        Err(SapError::Null)
    } else if sap & SAP_GROUP_BIT != 0 {
        Err(SapError::Group(sap))
    } else {
        Ok(sap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sap_is_individual_and_local() {
        assert_eq!(DEFAULT_SAP & SAP_GROUP_BIT, 0);
        assert_eq!(DEFAULT_SAP & SAP_IEEE_DEFINED_BIT, 0);
        assert_eq!(validate_sap(DEFAULT_SAP), Ok(DEFAULT_SAP));
        assert_eq!(validate_sap(0x7D), Err(SapError::Group(0x7D)));
        assert_eq!(validate_sap(0), Err(SapError::Null));
    }

    #[test]
    fn control_fields() {
        let h = LlcHeader::read_from_bytes(&[0x7C, 0x7C, 0x03][..]).unwrap();
        assert_eq!(h.command(), Command::Ui);
        assert!(!h.is_response());
        let h = LlcHeader::read_from_bytes(&[0x7C, 0x7D, 0xF3][..]).unwrap();
        assert_eq!(h.command(), Command::Test { pf: true });
        assert!(h.is_response());
        assert_eq!(h.source_sap(), 0x7C);
        let h = LlcHeader::read_from_bytes(&[0x7C, 0x7C, 0xBF][..]).unwrap();
        assert_eq!(h.command(), Command::Xid { pf: true });
        assert_eq!(
            LlcHeader::new(0x7C, 0x7C, true, Command::Test { pf: true }).as_bytes(),
            &[0x7C, 0x7D, 0xF3]
        );
        assert_eq!(
            LlcHeader::new(0x7C, 0x7C, false, Command::Ui).as_bytes(),
            &[0x7C, 0x7C, 0x03]
        );
        // UI with the P bit set and an I-format frame are unknown to us.
        assert_eq!(
            LlcHeader::read_from_bytes(&[0, 0, 0x13][..])
                .unwrap()
                .command(),
            Command::Unknown(0x13)
        );
        assert_eq!(
            LlcHeader::read_from_bytes(&[0, 0, 0x00][..])
                .unwrap()
                .command(),
            Command::Unknown(0x00)
        );
    }
}
