//! One-sided access to registered memory: `put` writes pieces into the
//! target's region and is acknowledged once (or refused with the reason);
//! `get` asks for a range and receives it in pieces.

use std::sync::Arc;

use bytes::Bytes;

use super::{Completion, Engine, GetDst, Out, ReqState, Status};
use crate::error::Error;
use crate::matching::PeerId;
use crate::rma::{MemoryRegion, RegionKey};
use crate::wire::{flags, Header, Kind, HEADER_LEN};

impl Engine {
    pub fn register(&mut self, region: Arc<dyn MemoryRegion>) -> RegionKey {
        let mut regions = self.regions.lock().expect("regions");
        loop {
            let k = self.rng.next_u64();
            if k != 0 && !regions.contains_key(&k) {
                regions.insert(k, region);
                return RegionKey(k);
            }
        }
    }

    pub fn deregister(&mut self, key: RegionKey) -> bool {
        self.regions
            .lock()
            .expect("regions")
            .remove(&key.0)
            .is_some()
    }

    pub fn put(&mut self, p: PeerId, key: RegionKey, offset: u64, data: Bytes) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status::one_sided(p, data.len());
        let r = self.new_req(ReqState::Put { status });
        let total = data.len() as u64;
        self.push_pieces(p, &data, |off, _, last| {
            let mut hdr = Header::new(Kind::Put);
            hdr.id = key.0;
            hdr.aux = r;
            hdr.offset = offset + off;
            hdr.len = total;
            if last {
                hdr.flags |= flags::LAST;
            }
            hdr
        });
        r
    }

    pub fn get(&mut self, p: PeerId, key: RegionKey, offset: u64, buf: Vec<u8>) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status::one_sided(p, buf.len());
        let len = buf.len() as u64;
        let r = self.new_req(ReqState::Get {
            buf,
            status,
            received: 0,
        });
        let mut hdr = Header::new(Kind::Get);
        hdr.id = key.0;
        hdr.aux = r;
        hdr.offset = offset;
        hdr.len = len;
        self.push(p, Out::control(hdr));
        r
    }

    /// A get whose reply goes straight into `dst` (its whole length), as
    /// the transport places it: no buffer of the engine's own and no copy
    /// at completion, which carries no data.
    pub fn get_into(
        &mut self,
        p: PeerId,
        key: RegionKey,
        offset: u64,
        dst: Arc<dyn MemoryRegion>,
    ) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let len = dst.len();
        let status = Status::one_sided(p, len);
        let r = self.new_req(ReqState::GetInto {
            dst: GetDst(dst.clone()),
            status,
        });
        self.gets.lock().expect("get destinations").insert(r, dst);
        let mut hdr = Header::new(Kind::Get);
        hdr.id = key.0;
        hdr.aux = r;
        hdr.offset = offset;
        hdr.len = len as u64;
        self.push(p, Out::control(hdr));
        r
    }

    /// The region `key` if `offset..offset + len` lies inside it.
    fn region_range(
        &self,
        key: u64,
        offset: u64,
        len: u64,
    ) -> Result<Arc<dyn MemoryRegion>, String> {
        let region = self
            .regions
            .lock()
            .expect("regions")
            .get(&key)
            .cloned()
            .ok_or_else(|| format!("no region with key {key:#x}"))?;
        let end = offset.checked_add(len).ok_or("range overflows")?;
        if end > region.len() as u64 {
            return Err(format!(
                "bytes {offset}..{end} lie outside the region of {} bytes",
                region.len()
            ));
        }
        Ok(region)
    }

    /// A piece of a peer's put: written, and acknowledged after the last
    /// piece (or at once, with the reason, when refused). A piece delivered
    /// as its header alone of a put that is not empty was placed: the
    /// transport wrote its bytes into the region as they arrived.
    pub(super) fn handle_put(&mut self, p: PeerId, hdr: &Header, packet: &[u8]) {
        let body = &packet[HEADER_LEN..];
        let res = self.region_range(hdr.id, hdr.offset, body.len() as u64);
        let refused = match &res {
            Ok(region) => {
                if body.is_empty() && hdr.len > 0 {
                    self.stats.put_pieces_placed += 1;
                } else {
                    region.write(hdr.offset as usize, body);
                    self.stats.put_bytes_copied += body.len() as u64;
                }
                false
            }
            Err(_) => true,
        };
        if hdr.flags & flags::LAST != 0 || refused {
            let mut ack = Header::new(Kind::PutAck);
            ack.aux = hdr.aux;
            if refused {
                ack.flags |= flags::REFUSED;
            }
            let body = res.err().map(Bytes::from).unwrap_or_default();
            self.push(p, Out::with_body(ack, body));
        }
    }

    /// The target wrote our put, or refused it.
    pub(super) fn handle_put_ack(&mut self, hdr: &Header, packet: &[u8]) {
        if let Some(ReqState::Put { .. }) = self.reqs.get(&hdr.aux) {
            let Some(ReqState::Put { status }) = self.reqs.remove(&hdr.aux) else {
                unreachable!("checked above")
            };
            let res = if hdr.flags & flags::REFUSED != 0 {
                Err(Error::RmaRefused(
                    String::from_utf8_lossy(&packet[HEADER_LEN..]).into_owned(),
                ))
            } else {
                Ok(Completion { status, data: None })
            };
            self.reqs.insert(hdr.aux, ReqState::Done(res));
        }
        // A second ack of a refused multi-packet put is ignored.
    }

    /// A peer reads our region: the data in pieces, or the refusal.
    pub(super) fn handle_get(&mut self, p: PeerId, hdr: &Header) {
        let mut reply = Header::new(Kind::GetReply);
        reply.aux = hdr.aux;
        let region = match self.region_range(hdr.id, hdr.offset, hdr.len) {
            Ok(r) => r,
            Err(why) => {
                reply.flags |= flags::REFUSED | flags::LAST;
                return self.push(p, Out::with_body(reply, Bytes::from(why)));
            }
        };
        let (at, len) = (hdr.offset as usize, hdr.len as usize);
        // Sent from the region itself where it lends its bytes (Open MPI's
        // registered memory, valid until its owner hears the get is done).
        let data = region.lend(at, len).unwrap_or_else(|| {
            let mut data = vec![0u8; len];
            region.read(at, &mut data);
            self.stats.get_bytes_copied += len as u64;
            Bytes::from(data)
        });
        self.push_pieces(p, &data, |off, n, last| {
            let mut h = reply;
            h.offset = off;
            h.len = n as u64;
            if last {
                h.flags |= flags::LAST;
            }
            h
        });
    }

    /// A piece of the data our get asked for, or its refusal.
    pub(super) fn handle_get_reply(&mut self, p: PeerId, hdr: &Header, packet: &[u8]) {
        if let Some(ReqState::GetInto { .. }) = self.reqs.get(&hdr.aux) {
            return self.handle_get_reply_into(p, hdr, packet);
        }
        let Some(ReqState::Get {
            buf,
            status,
            received,
        }) = self.reqs.get_mut(&hdr.aux)
        else {
            return self.bad_packet(&"get reply for no get");
        };
        let body = &packet[HEADER_LEN..];
        if status.source != p {
            return self.bad_packet(&"get reply from another peer");
        }
        if hdr.flags & flags::REFUSED != 0 {
            let why = String::from_utf8_lossy(body).into_owned();
            return self.finish(hdr.aux, Err(Error::RmaRefused(why)));
        }
        let off = hdr.offset as usize;
        if off.checked_add(body.len()).is_none_or(|e| e > buf.len()) {
            return self.bad_packet(&"get reply outside the buffer");
        }
        buf[off..off + body.len()].copy_from_slice(body);
        *received += body.len();
        if hdr.flags & flags::LAST != 0 {
            let Some(ReqState::Get { buf, status, .. }) = self.reqs.remove(&hdr.aux) else {
                unreachable!("matched above")
            };
            self.reqs.insert(
                hdr.aux,
                ReqState::Done(Ok(Completion {
                    status,
                    data: Some(buf),
                })),
            );
        }
    }

    /// A piece of a get into the caller's memory: placed by the transport
    /// (delivered as its header alone), or copied in here.
    fn handle_get_reply_into(&mut self, p: PeerId, hdr: &Header, packet: &[u8]) {
        let Some(ReqState::GetInto { dst, status }) = self.reqs.get(&hdr.aux) else {
            unreachable!("checked by the caller")
        };
        if status.source != p {
            return self.bad_packet(&"get reply from another peer");
        }
        let body = &packet[HEADER_LEN..];
        if hdr.flags & flags::REFUSED != 0 {
            let why = String::from_utf8_lossy(body).into_owned();
            self.gets.lock().expect("get destinations").remove(&hdr.aux);
            return self.finish(hdr.aux, Err(Error::RmaRefused(why)));
        }
        if body.is_empty() && hdr.len > 0 {
            self.stats.get_pieces_placed += 1;
        } else {
            let off = hdr.offset as usize;
            if off.checked_add(body.len()).is_none_or(|e| e > dst.0.len()) {
                return self.bad_packet(&"get reply outside the buffer");
            }
            dst.0.write(off, body);
        }
        if hdr.flags & flags::LAST != 0 {
            self.gets.lock().expect("get destinations").remove(&hdr.aux);
            let Some(ReqState::GetInto { status, .. }) = self.reqs.remove(&hdr.aux) else {
                unreachable!("matched above")
            };
            self.reqs.insert(
                hdr.aux,
                ReqState::Done(Ok(Completion { status, data: None })),
            );
        }
    }
}
