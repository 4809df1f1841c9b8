//! Wire formats: Ethernet, IEEE 802.2 LLC and the transport header.
pub mod ethernet;
