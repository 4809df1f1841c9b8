//! The serving loop: one thread per client connection, the endpoints each
//! user holds, and the decision for each request.
//!
//! A connection carries one request. A granted endpoint is counted against
//! its user until the connection closes, which the kernel does when the
//! process exits or is killed, so a dead process's endpoints are released
//! without anyone cleaning up (the descriptors died with it: the port's
//! claim is free again and the socket is gone).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use llc_stack::link::grant::{self, Listener, PeerCred, Request, Session};
use llc_stack::LinkError;

use crate::policy::{Asker, Policy};
use crate::responder::Responders;
use crate::users;

/// Connections one user may have open beyond its endpoint limit (requests
/// being made), so that idle connections cannot pile up threads.
const SPARE_CONNECTIONS: usize = 16;

/// Totals since the service started, by outcome.
#[derive(Debug, Default)]
pub struct Totals {
    /// Endpoints granted.
    pub granted: AtomicU64,
    /// Requests refused by the policy (user, interface, limit).
    pub refused_policy: AtomicU64,
    /// Requests for a port another endpoint holds.
    pub refused_port_held: AtomicU64,
    /// Requests that failed otherwise (no such interface, malformed).
    pub failed: AtomicU64,
}

/// The service's shared state.
#[derive(Debug)]
pub struct Service {
    policy: Policy,
    /// Per uid: open connections and granted endpoints.
    users: Mutex<HashMap<u32, Held>>,
    totals: Totals,
    /// The link responders of the interfaces and SAPs served.
    responders: Responders,
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    connections: usize,
    endpoints: usize,
}

impl Service {
    /// A service applying `policy`.
    pub fn new(policy: Policy) -> Arc<Service> {
        Arc::new(Service {
            policy,
            users: Mutex::new(HashMap::new()),
            totals: Totals::default(),
            responders: Responders::default(),
        })
    }

    /// Serve `listener` until accepting fails.
    pub fn serve(self: &Arc<Self>, listener: Listener) -> io::Result<()> {
        loop {
            let (session, cred) = match listener.accept() {
                Ok(s) => s,
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::ECONNABORTED)
                    ) =>
                {
                    continue
                }
                // Out of descriptors or memory: the clients holding them
                // will go; a user must not be able to stop the service.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
                    ) =>
                {
                    tracing::warn!(error = %e, "cannot accept a client now");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !self.connect(cred.uid) {
                let _ = session.refuse(&format!(
                    "uid {} has too many connections to llcd open",
                    cred.uid
                ));
                self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name(format!("llcd-{}", cred.pid))
                .spawn(move || {
                    me.session(&session, cred);
                    me.disconnect(cred.uid);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no thread for a client");
                self.disconnect(cred.uid);
            }
        }
    }

    fn connect(&self, uid: u32) -> bool {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let held = users.entry(uid).or_default();
        if held.connections >= self.policy.max_endpoints_per_user + SPARE_CONNECTIONS {
            return false;
        }
        held.connections += 1;
        true
    }

    fn disconnect(&self, uid: u32) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = users.get_mut(&uid) {
            held.connections -= 1;
            if held.connections == 0 && held.endpoints == 0 {
                users.remove(&uid);
            }
        }
    }

    /// One client: its request, then, if granted, the endpoint's life.
    fn session(&self, session: &Session, cred: PeerCred) {
        let asker = users::lookup(cred.uid);
        let line = match session.next_request() {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(pid = cred.pid, error = %e, "client connection");
                return;
            }
        };
        if line.trim() == grant::STATUS_REQUEST {
            let _ = session.answer(&self.status_line(cred.uid));
            return;
        }
        let req = match Request::parse(&line) {
            Ok(r) => r,
            Err(why) => {
                self.totals.failed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(user = %asker.describe(), pid = cred.pid, %why, "malformed request");
                let _ = session.refuse(&why);
                return;
            }
        };
        let made = match self.decide(&asker, &req) {
            Ok(made) => made,
            Err(why) => {
                tracing::info!(
                    user = %asker.describe(), pid = cred.pid, ifname = %req.ifname,
                    port = req.port, %why, "refused"
                );
                let _ = session.refuse(&why);
                return;
            }
        };
        let port = made.port;
        if let Err(e) = session.grant(&made) {
            tracing::info!(pid = cred.pid, error = %e, "could not hand the endpoint over");
            self.release(cred.uid);
            return;
        }
        drop(made);
        self.totals.granted.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            user = %asker.describe(), pid = cred.pid, ifname = %req.ifname,
            sap = format!("{:#04x}", req.sap), port, "granted"
        );
        // The endpoint lives until the connection closes.
        while let Ok(Some(_)) = session.next_request() {
            let _ = session.refuse("one endpoint per connection: open another connection");
        }
        self.release(cred.uid);
        tracing::info!(user = %asker.describe(), pid = cred.pid, ifname = %req.ifname, port, "released");
    }

    /// Check `req` against the policy and the user's count, then make it.
    fn decide(&self, asker: &Asker, req: &Request) -> Result<grant::Made, String> {
        let policy = self
            .policy
            .admits(asker)
            .and_then(|()| self.policy.opens(&req.ifname));
        if let Err(why) = policy {
            self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
            return Err(why);
        }
        {
            let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
            let held = users.entry(asker.uid).or_default();
            if let Err(why) = self.policy.within_limit(asker, held.endpoints) {
                self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
                return Err(why);
            }
            held.endpoints += 1;
        }
        let made = grant::make(req).map_err(|e| {
            self.release(asker.uid);
            match e {
                LinkError::Busy { .. } => self
                    .totals
                    .refused_port_held
                    .fetch_add(1, Ordering::Relaxed),
                _ => self.totals.failed.fetch_add(1, Ordering::Relaxed),
            };
            e.to_string()
        })?;
        self.responders.ensure(&req.ifname, req.sap);
        Ok(made)
    }

    fn release(&self, uid: u32) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = users.get_mut(&uid) {
            held.endpoints = held.endpoints.saturating_sub(1);
        }
    }

    /// The status answer for `uid`: the totals, and the endpoints held by
    /// `uid` (by every user, for root).
    fn status_line(&self, uid: u32) -> String {
        let t = &self.totals;
        let mut line = format!(
            "granted={} refused_policy={} refused_port_held={} failed={}",
            t.granted.load(Ordering::Relaxed),
            t.refused_policy.load(Ordering::Relaxed),
            t.refused_port_held.load(Ordering::Relaxed),
            t.failed.load(Ordering::Relaxed),
        );
        let users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let mut held: Vec<_> = users
            .iter()
            .filter(|(u, h)| h.endpoints > 0 && (uid == 0 || **u == uid))
            .map(|(u, h)| format!("{u}:{}", h.endpoints))
            .collect();
        held.sort();
        line.push_str(&format!(" held={}", held.join(",")));
        line
    }
}
