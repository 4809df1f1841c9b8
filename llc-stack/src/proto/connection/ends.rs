//! Who the two ends of a connection are on the wire, and how large a
//! fragment the link between them carries.

use crate::wire::transport::max_payload;
use crate::wire::{Addresses, FramePrefix, TransportHeader};

/// The two ends as frames name them: addresses, ports and cookies, the
/// frame prefix encoded from them, and the fragment size both ends' MTUs
/// allow. Fixed once the handshake told us the peer's cookie and MTU.
#[derive(Debug)]
pub(super) struct Ends {
    addr: Addresses,
    /// The start of every DATA and CLOSE frame: addresses, ports and
    /// cookies, encoded again when the peer's cookie is learnt.
    prefix: FramePrefix,
    local_port: u16,
    peer_port: u16,
    local_cookie: u32,
    /// 0 until the handshake told us.
    peer_cookie: u32,
    local_mtu: usize,
    /// Payload bytes per DATA frame.
    frag_len: usize,
}

impl Ends {
    /// Our end of a connection to `peer_port`, before the peer's cookie and
    /// MTU are known (the fragment size is our MTU's, less `trailer_len`).
    pub(super) fn new(
        addr: Addresses,
        local_port: u16,
        peer_port: u16,
        local_cookie: u32,
        local_mtu: usize,
        trailer_len: usize,
    ) -> Self {
        let mut ends = Ends {
            prefix: FramePrefix::new(&addr, &TransportHeader::default()),
            addr,
            local_port,
            peer_port,
            local_cookie,
            peer_cookie: 0,
            local_mtu,
            frag_len: 0,
        };
        ends.set_peer_cookie(0);
        ends.set_peer_mtu(0, trailer_len);
        ends
    }

    /// The peer's cookie is known: it goes into every frame's prefix.
    pub(super) fn set_peer_cookie(&mut self, cookie: u32) {
        self.peer_cookie = cookie;
        let h = TransportHeader {
            src_port: self.local_port.into(),
            dst_port: self.peer_port.into(),
            src_cookie: self.local_cookie.into(),
            dst_cookie: cookie.into(),
            ..Default::default()
        };
        self.prefix = FramePrefix::new(&self.addr, &h);
    }

    /// The smaller MTU of the two ends decides the fragment size, less a
    /// trailer of `trailer_len`; a peer that states none (0) is taken to
    /// have ours.
    pub(super) fn set_peer_mtu(&mut self, peer_mtu: usize, trailer_len: usize) {
        let mtu = if peer_mtu == 0 {
            self.local_mtu
        } else {
            peer_mtu.min(self.local_mtu)
        };
        self.frag_len = max_payload(mtu, 0).saturating_sub(trailer_len).max(1);
    }

    /// Addresses used on frames we send.
    #[inline(always)]
    pub(super) fn addr(&self) -> &Addresses {
        &self.addr
    }

    /// The encoded start of our DATA and CLOSE frames.
    #[inline(always)]
    pub(super) fn prefix(&self) -> &FramePrefix {
        &self.prefix
    }

    /// Our port.
    #[inline(always)]
    pub(super) fn local_port(&self) -> u16 {
        self.local_port
    }

    /// The peer's port.
    #[inline(always)]
    pub(super) fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// Our cookie for this connection.
    #[inline(always)]
    pub(super) fn local_cookie(&self) -> u32 {
        self.local_cookie
    }

    /// The peer's cookie (0 until the handshake told us).
    #[inline(always)]
    pub(super) fn peer_cookie(&self) -> u32 {
        self.peer_cookie
    }

    /// Our link's MTU, as the handshake announces it.
    pub(super) fn local_mtu(&self) -> usize {
        self.local_mtu
    }

    /// Payload bytes per DATA frame.
    #[inline(always)]
    pub(super) fn frag_len(&self) -> usize {
        self.frag_len
    }
}
