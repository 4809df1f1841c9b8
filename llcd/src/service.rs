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

use std::os::fd::AsFd;

use llc_stack::link::grant::{self, FollowUp, Kind, Listener, PeerCred, Request, Session};
use llc_stack::LinkError;

use crate::policy::{Asker, Policy};
use crate::responder::Responders;
use crate::users;
use crate::xdp::{self, Programs};

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
    /// The interfaces' shared XDP programs and their pins.
    programs: Programs,
}

#[derive(Clone, Copy, Debug, Default)]
struct Held {
    connections: usize,
    endpoints: usize,
    /// Bytes of AF_XDP buffer pools registered for the user's endpoints.
    locked: u64,
}

impl Service {
    /// A service applying `policy`.
    pub fn new(policy: Policy) -> Arc<Service> {
        Arc::new(Service {
            policy,
            users: Mutex::new(HashMap::new()),
            totals: Totals::default(),
            responders: Responders::default(),
            programs: Programs::new(),
        })
    }

    /// Remove, every [`xdp::SWEEP_EVERY`], the pins of interfaces whose
    /// endpoints all ended (also those granted before a restart).
    pub fn sweep_in_background(self: &Arc<Self>) {
        let me = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("llcd-sweep".into())
            .spawn(move || loop {
                me.programs.sweep();
                std::thread::sleep(xdp::SWEEP_EVERY);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no thread to remove unused XDP pins");
        }
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
        if req.kind == Kind::Xdp {
            self.xdp_session(session, cred, &asker, &req);
            return;
        }
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
            self.release(cred.uid, 0);
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
        self.release(cred.uid, 0);
        tracing::info!(user = %asker.describe(), pid = cred.pid, ifname = %req.ifname, port, "released");
    }

    /// An AF_XDP endpoint: the grant (the port, a membership of the
    /// interface's program), then the endpoint's sockets and steering, then
    /// its life; everything of it is released when the connection closes.
    fn xdp_session(&self, session: &Session, cred: PeerCred, asker: &Asker, req: &Request) {
        let refuse = |why: &str| {
            tracing::info!(
                user = %asker.describe(), pid = cred.pid, ifname = %req.ifname,
                port = req.port, %why, "refused"
            );
            let _ = session.refuse(why);
        };
        if self.policy.max_locked_mib_per_user == 0 {
            self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
            return refuse(
                "AF_XDP is not served to users on this host (max_locked_mib_per_user = 0)",
            );
        }
        if let Err(why) = self.admit(asker, req) {
            return refuse(&why);
        }
        let granted = grant::make_claim(req)
            .map_err(|e| {
                self.count_failure(&e);
                e.to_string()
            })
            .and_then(|(claim, port)| {
                let program = self.programs.join(&req.ifname, req.sap).inspect_err(|_| {
                    self.totals.failed.fetch_add(1, Ordering::Relaxed);
                })?;
                Ok((claim, port, program))
            });
        let (claim, port, program) = match granted {
            Ok(g) => g,
            Err(why) => {
                self.release(asker.uid, 0);
                return refuse(&why);
            }
        };
        let ifindex = program.ifindex();
        let attached = program.attached().name();
        self.responders.ensure(&req.ifname, req.sap);
        let sent = program.holder_claims().and_then(|claims| {
            session.answer_with(
                &format!("port={port} attached={attached}"),
                &[claim.as_fd(), claims[0].as_fd()],
            )
        });
        drop(claim);
        let mut endpoint = xdp::Endpoint::new(program, &req.ifname, port);
        if let Err(e) = sent {
            tracing::info!(pid = cred.pid, error = %e, "could not hand the endpoint over");
        } else {
            self.totals.granted.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                user = %asker.describe(), pid = cred.pid, ifname = %req.ifname,
                sap = format!("{:#04x}", req.sap), port, attached, "AF_XDP endpoint granted"
            );
            self.serve_xdp(session, cred, asker, &mut endpoint);
        }
        let locked = endpoint.locked;
        drop(endpoint);
        self.programs.left(ifindex);
        self.release(asker.uid, locked);
        tracing::info!(user = %asker.describe(), pid = cred.pid, ifname = %req.ifname, port, "released");
    }

    /// The follow-up requests of a granted AF_XDP endpoint, until the
    /// connection closes.
    fn serve_xdp(&self, session: &Session, cred: PeerCred, asker: &Asker, ep: &mut xdp::Endpoint) {
        while let Ok(Some((line, fds))) = session.next_message() {
            let req = match FollowUp::parse(&line) {
                Ok(r) => r,
                Err(why) => {
                    let _ = session.refuse(&why);
                    continue;
                }
            };
            let bytes = match &req {
                FollowUp::Socket(spec) => spec.umem.map_or(0, |u| u.len),
                _ => 0,
            };
            if let Err(why) = self.reserve_locked(asker, bytes) {
                self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
                tracing::info!(user = %asker.describe(), pid = cred.pid, %why, "refused");
                let _ = session.refuse(&why);
                continue;
            }
            match ep.serve(&req, &fds) {
                Ok((line, out)) => {
                    let out: Vec<_> = out.iter().map(|f| f.as_fd()).collect();
                    let _ = session.answer_with(&line, &out);
                }
                Err(why) => {
                    self.release_locked(asker.uid, bytes);
                    tracing::debug!(user = %asker.describe(), pid = cred.pid, %line, %why, "request failed");
                    let _ = session.refuse(&why);
                }
            }
        }
    }

    fn reserve_locked(&self, asker: &Asker, bytes: u64) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let held = users.entry(asker.uid).or_default();
        self.policy.within_locked(asker, held.locked, bytes)?;
        held.locked += bytes;
        Ok(())
    }

    fn release_locked(&self, uid: u32, bytes: u64) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = users.get_mut(&uid) {
            held.locked = held.locked.saturating_sub(bytes);
        }
    }

    fn count_failure(&self, e: &LinkError) {
        match e {
            LinkError::Busy { .. } => self
                .totals
                .refused_port_held
                .fetch_add(1, Ordering::Relaxed),
            _ => self.totals.failed.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// The policy's and the user's count's say; counts the endpoint.
    fn admit(&self, asker: &Asker, req: &Request) -> Result<(), String> {
        let policy = self
            .policy
            .admits(asker)
            .and_then(|()| self.policy.opens(&req.ifname));
        if let Err(why) = policy {
            self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
            return Err(why);
        }
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let held = users.entry(asker.uid).or_default();
        if let Err(why) = self.policy.within_limit(asker, held.endpoints) {
            self.totals.refused_policy.fetch_add(1, Ordering::Relaxed);
            return Err(why);
        }
        held.endpoints += 1;
        Ok(())
    }

    /// Check `req` against the policy and the user's count, then make it.
    fn decide(&self, asker: &Asker, req: &Request) -> Result<grant::Made, String> {
        self.admit(asker, req)?;
        let made = grant::make(req).map_err(|e| {
            self.release(asker.uid, 0);
            self.count_failure(&e);
            e.to_string()
        })?;
        self.responders.ensure(&req.ifname, req.sap);
        Ok(made)
    }

    /// An endpoint of `uid` ended, with the `locked` bytes it registered.
    fn release(&self, uid: u32, locked: u64) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(held) = users.get_mut(&uid) {
            held.endpoints = held.endpoints.saturating_sub(1);
            held.locked = held.locked.saturating_sub(locked);
        }
    }

    /// The status answer for `uid`: the totals, and the endpoints held and
    /// the AF_XDP buffer memory pinned by `uid` (by every user, for root).
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
        let mut locked: Vec<_> = users
            .iter()
            .filter(|(u, h)| h.locked > 0 && (uid == 0 || **u == uid))
            .map(|(u, h)| format!("{u}:{}", h.locked.div_ceil(1 << 20)))
            .collect();
        locked.sort();
        line.push_str(&format!(" locked_mib={}", locked.join(",")));
        line
    }
}
