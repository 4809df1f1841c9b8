//! Active messages: not matched, no eager credit; the handler named in the
//! header consumes them on arrival (the endpoint runs it after its lock is
//! released).

use bytes::Bytes;

use super::{AmDelivery, Engine, Out, ReqState, Status};
use crate::error::Error;
use crate::matching::PeerId;
use crate::wire::{Header, Kind};

impl Engine {
    pub fn am_send(&mut self, p: PeerId, handler: u16, data: Bytes) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status::one_sided(p, data.len());
        let r = self.new_req(ReqState::Send {
            peer: p,
            rndv: None,
            status,
        });
        let mut out = Out::with_body(Self::am_header(handler), data);
        out.completes = Some(r);
        self.push(p, out);
        r
    }

    /// An active message with no request to take, of the message
    /// `prefix ++ body`, with `body` handed to the transport as it is (not
    /// copied behind the prefix): for callers (the MPI shim) that learn of
    /// failures from the failure callback and would otherwise have to
    /// collect one completion per message.
    pub fn am_post_parts(
        &mut self,
        p: PeerId,
        handler: u16,
        prefix: Bytes,
        body: Bytes,
        lent: bool,
    ) -> Result<(), Error> {
        if let Some(e) = self.peer_error(p) {
            return Err(e);
        }
        let mut out = Out::with_body(Self::am_header(handler), body);
        out.prefix = prefix;
        out.awaited = lent;
        self.push(p, out);
        Ok(())
    }

    fn am_header(handler: u16) -> Header {
        let mut hdr = Header::new(Kind::Am);
        hdr.am = handler;
        hdr
    }

    /// An active message arrived: for its handler.
    pub(super) fn arrive_am(&mut self, p: PeerId, hdr: &Header, packet: Vec<u8>) {
        self.stats.am_delivered += 1;
        self.am_deliveries.push(AmDelivery {
            handler: hdr.am,
            peer: p,
            packet,
        });
    }
}
