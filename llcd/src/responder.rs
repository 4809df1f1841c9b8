//! The host's answers to link-level TEST and XID, among them other hosts'
//! reachability probes: one responder per interface and SAP the service
//! has granted endpoints on. The granted endpoints never hold that role
//! (their filters are locked without it), so no user can take it, and an
//! endpoint opened with privileges that holds it answers instead (the
//! responder then waits for the role to come free).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use llc_stack::link::afpacket::AfPacket;
use llc_stack::proto::Config;
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::{Instant, LinkError, Stack};

/// How often a responder whose role is held looks again.
const RETRY: Duration = Duration::from_secs(1);

/// The (interface, SAP) pairs that have a responder.
#[derive(Debug, Default)]
pub struct Responders(Mutex<HashSet<(String, u8)>>);

impl Responders {
    /// Make sure `sap` on `ifname` is answered: the first call opens the
    /// responder before it returns (so a granted endpoint's peers find the
    /// host answering from the start) and keeps it on a thread.
    pub fn ensure(&self, ifname: &str, sap: u8) {
        let key = (ifname.to_owned(), sap);
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if set.contains(&key) {
            return;
        }
        let first = AfPacket::open_link_responder(ifname, sap);
        let name = format!("llcd-link-{ifname}");
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(key.0, key.1, first));
        match spawned {
            Ok(_) => {
                set.insert((ifname.to_owned(), sap));
            }
            Err(e) => tracing::warn!(%ifname, error = %e, "no thread for the link responder"),
        }
    }
}

fn run(ifname: String, sap: u8, mut next: Result<Option<AfPacket>, LinkError>) {
    loop {
        match next {
            Ok(Some(dev)) => {
                tracing::info!(%ifname, sap = format!("{sap:#04x}"), "answering TEST and XID");
                if let Err(e) = serve(dev, sap) {
                    tracing::warn!(%ifname, error = %e, "link responder stopped");
                }
            }
            // An endpoint opened with privileges holds the role: it answers.
            Ok(None) => {}
            Err(LinkError::NoSuchInterface(_)) => {
                tracing::info!(%ifname, "interface gone: link responder ends");
                return;
            }
            Err(e) => tracing::warn!(%ifname, error = %e, "link responder"),
        }
        std::thread::sleep(RETRY);
        next = AfPacket::open_link_responder(&ifname, sap);
    }
}

/// Answer until the device fails.
fn serve(dev: AfPacket, sap: u8) -> std::io::Result<()> {
    let mac = MacAddr(dev.mac());
    let cfg = Config {
        sap,
        acked_events: false,
        ..Config::default()
    };
    let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
    loop {
        let now = Instant::now();
        stack.poll_rx(now);
        stack.poll_tx(now)?;
        stack.wait(now, Some(now + Duration::from_secs(1)))?;
    }
}
