//! The naming service's table, sans I/O: the part of the job's names this
//! node is home to, and the lookups waiting for a name not bound yet.
//!
//! Names live spread over the job: a name's home is node
//! `fnv1a(name) % numnodes` ([`home_of`]); `create` binds there, `clone`
//! asks there (once: askers cache the answer). A lookup for a name not
//! bound yet waits at the home, bounded by the asker's wait, and is
//! answered when the name is bound. When a node fails, the homes drop its
//! bindings (its mailboxes are gone with it) and its waiting lookups.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::wire::{Name, NameOp};

/// The home node of `name` in a job of `numnodes`.
pub fn home_of(name: &str, numnodes: u32) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % u64::from(numnodes.max(1))) as u32
}

struct Parked {
    from: u32,
    req: u32,
    name: String,
    deadline: Instant,
}

/// The names this node is home to.
#[derive(Default)]
pub struct HomeTable {
    bound: HashMap<String, (u32, u32)>,
    parked: Vec<Parked>,
}

/// An answer to send: to node `to`, the packet.
pub type Answer = (u32, Name);

fn answer(to_req: &Name, op: NameOp, at: (u32, u32)) -> Name {
    Name {
        op,
        req: to_req.req,
        node: at.0,
        mbox: at.1,
        wait_ms: 0,
        name: to_req.name.clone(),
    }
}

impl HomeTable {
    /// Take a request from node `from`; push the answers it makes.
    pub fn handle(&mut self, from: u32, req: Name, now: Instant, out: &mut Vec<Answer>) {
        match req.op {
            NameOp::Bind => {
                if let Some(&at) = self.bound.get(&req.name) {
                    out.push((from, answer(&req, NameOp::Exists, at)));
                    return;
                }
                let at = (req.node, req.mbox);
                self.bound.insert(req.name.clone(), at);
                out.push((from, answer(&req, NameOp::Done, at)));
                let mut i = 0;
                while i < self.parked.len() {
                    if self.parked[i].name == req.name {
                        let p = self.parked.swap_remove(i);
                        let mut a = answer(&req, NameOp::Found, at);
                        a.req = p.req;
                        out.push((p.from, a));
                    } else {
                        i += 1;
                    }
                }
            }
            NameOp::Unbind => {
                if self.bound.get(&req.name) == Some(&(req.node, req.mbox)) {
                    self.bound.remove(&req.name);
                }
            }
            NameOp::Lookup => {
                if let Some(&at) = self.bound.get(&req.name) {
                    out.push((from, answer(&req, NameOp::Found, at)));
                } else if req.wait_ms == 0 {
                    out.push((from, answer(&req, NameOp::Missing, (0, 0))));
                } else {
                    self.parked.push(Parked {
                        from,
                        req: req.req,
                        name: req.name,
                        deadline: now + Duration::from_millis(req.wait_ms.into()),
                    });
                }
            }
            // Answers go to the asker, not here.
            NameOp::Done | NameOp::Exists | NameOp::Found | NameOp::Missing => {}
        }
    }

    /// Answer `Missing` to lookups whose wait is over.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<Answer>) {
        let mut i = 0;
        while i < self.parked.len() {
            if self.parked[i].deadline <= now {
                let p = self.parked.swap_remove(i);
                out.push((
                    p.from,
                    Name {
                        op: NameOp::Missing,
                        req: p.req,
                        node: 0,
                        mbox: 0,
                        wait_ms: 0,
                        name: p.name,
                    },
                ));
            } else {
                i += 1;
            }
        }
    }

    /// Lookups are waiting (the owner checks [`HomeTable::expire`]).
    pub fn has_parked(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Node `node` failed: its mailboxes and its lookups are gone.
    pub fn node_failed(&mut self, node: u32) {
        self.bound.retain(|_, at| at.0 != node);
        self.parked.retain(|p| p.from != node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: NameOp, req: u32, at: (u32, u32), wait_ms: u32, name: &str) -> Name {
        Name {
            op,
            req,
            node: at.0,
            mbox: at.1,
            wait_ms,
            name: name.into(),
        }
    }

    #[test]
    fn homes_spread_names_and_stay_in_range() {
        let homes: std::collections::HashSet<u32> =
            (0..64).map(|i| home_of(&format!("box{i}"), 4)).collect();
        assert_eq!(homes.len(), 4);
        assert_eq!(home_of("x", 1), 0);
    }

    #[test]
    fn bind_lookup_wait_and_expire() {
        let mut t = HomeTable::default();
        let now = Instant::now();
        let mut out = Vec::new();
        // A lookup before the bind waits; a second bind is refused.
        t.handle(2, req(NameOp::Lookup, 7, (0, 0), 1000, "a"), now, &mut out);
        assert!(out.is_empty() && t.has_parked());
        t.handle(1, req(NameOp::Bind, 1, (1, 5), 0, "a"), now, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].0, out[0].1.op), (1, NameOp::Done));
        assert_eq!((out[1].0, out[1].1.op, out[1].1.req), (2, NameOp::Found, 7));
        assert_eq!((out[1].1.node, out[1].1.mbox), (1, 5));
        out.clear();
        t.handle(3, req(NameOp::Bind, 2, (3, 1), 0, "a"), now, &mut out);
        assert_eq!(out[0].1.op, NameOp::Exists);
        // A lookup that never sees its name ends Missing at its deadline.
        out.clear();
        t.handle(2, req(NameOp::Lookup, 8, (0, 0), 10, "b"), now, &mut out);
        t.expire(now + Duration::from_millis(5), &mut out);
        assert!(out.is_empty());
        t.expire(now + Duration::from_millis(10), &mut out);
        assert_eq!(
            (out[0].0, out[0].1.op, out[0].1.req),
            (2, NameOp::Missing, 8)
        );
        // Unbind by another mailbox does nothing; by the owner frees the name.
        out.clear();
        t.handle(3, req(NameOp::Unbind, 0, (3, 1), 0, "a"), now, &mut out);
        t.handle(2, req(NameOp::Lookup, 9, (0, 0), 0, "a"), now, &mut out);
        assert_eq!(out[0].1.op, NameOp::Found);
        t.handle(1, req(NameOp::Unbind, 0, (1, 5), 0, "a"), now, &mut out);
        t.handle(2, req(NameOp::Lookup, 10, (0, 0), 0, "a"), now, &mut out);
        assert_eq!(out[1].1.op, NameOp::Missing);
    }

    #[test]
    fn a_failed_node_loses_its_names_and_lookups() {
        let mut t = HomeTable::default();
        let now = Instant::now();
        let mut out = Vec::new();
        t.handle(1, req(NameOp::Bind, 1, (1, 5), 0, "a"), now, &mut out);
        t.handle(1, req(NameOp::Lookup, 2, (0, 0), 1000, "b"), now, &mut out);
        t.node_failed(1);
        assert!(!t.has_parked());
        out.clear();
        t.handle(2, req(NameOp::Bind, 3, (2, 1), 0, "a"), now, &mut out);
        assert_eq!(out[0].1.op, NameOp::Done);
    }
}
