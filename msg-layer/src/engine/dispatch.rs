//! Incoming packets: decode the header, find the peer of the connection,
//! take the credit it carries, and hand the packet to its protocol.

use super::{ConnRole, Engine};
use crate::matching::PeerId;
use crate::transport::ConnId;
use crate::wire::{bundle_items, DecodeError, Header, Kind, HEADER_LEN};

impl Engine {
    pub(super) fn handle_packet(&mut self, c: ConnId, packet: Vec<u8>) {
        let hdr = match Header::decode(&packet) {
            Ok(h) => h,
            Err(e @ (DecodeError::Short(_) | DecodeError::UnknownKind(_))) => {
                return self.bad_packet(&e)
            }
        };
        let p = match self.last_conn {
            Some((last, p)) if last == c => p,
            _ => match self.by_conn.get(&c) {
                Some(ConnRole::Peer(p)) => {
                    let p = *p;
                    self.last_conn = Some((c, p));
                    p
                }
                Some(ConnRole::Unidentified) if hdr.kind == Kind::Hello => {
                    return self.handle_hello(c, &hdr, &packet[HEADER_LEN..]);
                }
                _ => return self.bad_packet(&format!("{:?} before Hello", hdr.kind)),
            },
        };
        self.handle_from(p, &hdr, packet);
    }

    /// A packet from peer `p` (its connection's, or our own loopback's),
    /// its header decoded: the credit it returns taken, then its protocol.
    #[inline(always)]
    pub(super) fn handle_from(&mut self, p: PeerId, hdr: &Header, packet: Vec<u8>) {
        let hdr = *hdr;
        self.peers[p as usize].credit += hdr.credit as u64;
        match hdr.kind {
            // peers
            Kind::Hello => self.handle_hello_answer(p, &hdr),
            Kind::Credit => {}
            // point-to-point
            Kind::Eager => self.arrive_eager(p, &hdr, packet),
            Kind::Rts => self.arrive_rts(p, &hdr),
            Kind::Cts => self.handle_cts(p, &hdr),
            Kind::Data => self.handle_data(p, &hdr, &packet),
            Kind::Done => self.handle_done(p, &hdr),
            // active messages
            Kind::Am => self.arrive_am(p, &hdr, packet),
            // RMA
            Kind::Put => self.handle_put(p, &hdr, &packet),
            Kind::PutAck => self.handle_put_ack(&hdr, &packet),
            Kind::Get => self.handle_get(p, &hdr),
            Kind::GetReply => self.handle_get_reply(p, &hdr, &packet),
            Kind::Bundle => self.arrive_bundle(p, packet),
        }
    }

    /// Small packets that queued behind each other at the sender: each is
    /// handled as if it had come alone, in order. A bundle may hold only
    /// `Eager` and `Am` packets; anything else in it, or a cut one, is
    /// counted as malformed and ends the bundle there (what came before it
    /// stands: the sender's order is kept).
    fn arrive_bundle(&mut self, p: PeerId, packet: Vec<u8>) {
        for item in bundle_items(&packet[HEADER_LEN..]) {
            let Ok(item) = item else {
                self.bad_packet(&"bundle cut short");
                break;
            };
            let sub = match Header::decode(item) {
                Ok(h) if matches!(h.kind, Kind::Eager | Kind::Am) => h,
                Ok(h) => {
                    self.bad_packet(&format!("{:?} inside a bundle", h.kind));
                    break;
                }
                Err(e) => {
                    self.bad_packet(&e);
                    break;
                }
            };
            let own = item.to_vec();
            match sub.kind {
                Kind::Eager => self.arrive_eager(p, &sub, own),
                _ => self.arrive_am(p, &sub, own),
            }
        }
        self.spent.push(packet);
    }
}
