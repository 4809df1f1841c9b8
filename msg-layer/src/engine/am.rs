//! Active messages: not matched, no eager credit; the handler named in the
//! header consumes them on arrival (the endpoint runs it after its lock is
//! released).

use bytes::Bytes;

use super::{AmDelivery, Completion, Engine, Out, Outlet, ReqState, Status};
use crate::error::Error;
use crate::matching::PeerId;
use crate::wire::{Header, Kind};

impl Engine {
    /// [`Engine::am_send`], handed to `o` at once when the peer's queue
    /// would do just that ([`Engine::am_now`]).
    pub fn am_send_via<O: Outlet + ?Sized>(
        &mut self,
        o: Option<&mut O>,
        p: PeerId,
        handler: u16,
        data: Bytes,
    ) -> u64 {
        if o.is_some_and(|o| self.am_now(o, p, handler, &[], &data, false)) {
            let status = Status::one_sided(p, data.len());
            return self.new_req(ReqState::Done(Ok(Completion { status, data: None })));
        }
        self.am_send(p, handler, data)
    }

    /// [`Engine::am_post_parts`], handed to `o` at once when the peer's
    /// queue would do just that ([`Engine::am_now`]); `prefix` is copied
    /// only if the message has to wait in the queue. Always inlined, like
    /// [`Engine::am_now`]: outlined, the send paid the calls and a libc
    /// `memset` for its head.
    #[inline(always)]
    pub fn am_post_via<O: Outlet + ?Sized>(
        &mut self,
        o: Option<&mut O>,
        p: PeerId,
        handler: u16,
        prefix: &[u8],
        body: Bytes,
        lent: bool,
    ) -> Result<(), Error> {
        if o.is_some_and(|o| self.am_now(o, p, handler, prefix, &body, lent)) {
            return Ok(());
        }
        let prefix = if prefix.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(prefix)
        };
        self.am_post_parts(p, handler, prefix, body, lent)
    }

    /// Hand the active message `prefix ++ body` to `o` now, as
    /// [`Engine::transmit`] would hand it from the peer's queue
    /// ([`Engine::send_now`]; an active message uses no credit). False
    /// otherwise: the caller then queues it.
    #[inline(always)]
    fn am_now<O: Outlet + ?Sized>(
        &mut self,
        o: &mut O,
        p: PeerId,
        handler: u16,
        prefix: &[u8],
        body: &Bytes,
        lent: bool,
    ) -> bool {
        self.send_now(o, p, Self::am_header(handler), prefix, body, lent, 0)
    }

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
