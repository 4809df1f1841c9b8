//! Ethernet framing.
/// Length of the Ethernet header (destination, source, length/type).
pub const HEADER_LEN: usize = 14;
/// EtherType of the jumbo form: LLC frames whose payload exceeds 1500 bytes.
pub const ETHERTYPE_JUMBO_LLC: u16 = 0x8870;
/// Largest value of the length/type field that is a length (IEEE 802.3).
pub const MAX_LENGTH_FIELD: u16 = 1500;
