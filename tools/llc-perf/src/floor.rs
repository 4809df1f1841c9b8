//! The link floor of an LLC transport's pair: 802.2 TEST round trips
//! between the two hosts on the same device code (backend, XDP attach mode,
//! SAP) with no protocol above, measured just before the endpoints open,
//! so that the message layer's latency can be stated as what it adds to
//! the link itself (issue 23's "above the link floor").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use llc_stack::link::test_ping;
use llc_stack::wire::{Addresses, MacAddr};
use msg_layer::transport::llc::open_device;
use msg_layer::transport::spec::AttachMode;
use msg_layer::transport::TransportSpec;

use crate::affinity;
use crate::transports::{self, Kind, Open, SERVER_PORT};

/// A response not back within this long means the link lost it.
const STALL: Duration = Duration::from_secs(10);

/// Median one-way time (half the round trip) in µs of `rounds` TEST round
/// trips from host A to host B of `bed` over `k`'s device code; the two
/// ends on `cpus` (A's, B's) when given.
pub fn link_floor(
    k: Kind,
    bed: &testbed::TwoHosts,
    attach: AttachMode,
    rounds: usize,
    cpus: Option<(usize, usize)>,
) -> Result<f64> {
    let open = Open {
        ifname: &bed.b.ifname,
        ip: bed.b.ipv4.into(),
        server: true,
        port: SERVER_PORT,
        uring_coop: true,
        xdp_attach: attach,
        pair: 0,
    };
    let TransportSpec::Llc(spec) = transports::spec(k, &open) else {
        bail!("{k} is not an LLC transport");
    };
    let (backend, attach, sap) = (spec.backend, spec.attach, spec.config.sap);
    let (a, b) = (MacAddr(bed.a.mac), MacAddr(bed.b.mac));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let (b_if, b_stop) = (bed.b.ifname.clone(), stop.clone());
    let responder = bed.b.ns.spawn(move || -> Result<()> {
        if let Some((_, cpu)) = cpus {
            affinity::pin_current(&[cpu])?;
        }
        let (mut dev, _) = open_device(&b_if, backend, attach, sap, None)
            .with_context(|| format!("opening {k}'s link on {b_if}"))?;
        let _ = ready_tx.send(());
        let back = Addresses {
            dst: a,
            src: b,
            dsap: sap,
            ssap: sap,
        };
        test_ping::answer_tests(&mut dev, back, &b_stop).context("answering TEST")
    });
    let pinged = match ready_rx.recv_timeout(STALL) {
        Ok(()) => bed.a.ns.run(|| -> Result<Vec<Duration>> {
            if let Some((cpu, _)) = cpus {
                affinity::pin_current(&[cpu])?;
            }
            let (mut dev, _) = open_device(&bed.a.ifname, backend, attach, sap, None)
                .with_context(|| format!("opening {k}'s link on {}", bed.a.ifname))?;
            let to = Addresses {
                dst: b,
                src: a,
                dsap: sap,
                ssap: sap,
            };
            let r = test_ping::round_trips(&mut dev, to, rounds / 10, rounds, STALL)
                .context("TEST round trips");
            if cpus.is_some() {
                let _ = affinity::pin_current(&[]);
            }
            r
        }),
        Err(_) => Err(anyhow!("the TEST responder did not start")),
    };
    stop.store(true, Ordering::Relaxed);
    let answered = responder
        .join()
        .map_err(|_| anyhow!("the TEST responder panicked"))?;
    let mut rtts = pinged?;
    answered?;
    rtts.sort();
    let median = rtts.get(rtts.len() / 2).context("no round trip measured")?;
    Ok(median.as_secs_f64() * 1e6 / 2.0)
}
