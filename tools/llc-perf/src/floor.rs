//! The link floor of an LLC transport's pair: 802.2 TEST round trips
//! between the two hosts on the same device code (backend, XDP attach mode,
//! SAP) with no protocol above, measured just before the endpoints open,
//! so that the message layer's latency can be stated as what it adds to
//! the link itself (issue 23's "above the link floor").
//!
//! With [`FloorWork`] each end also does some work per message it sends:
//! what the floor gains then, beside what the same work costs in a warm
//! loop ([`FloorWork::warm_micros`]), is what this platform charges that
//! work between its frames (the kernel's per-frame path runs on the same
//! cores, between one message and the next).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use msg_layer::addr::MacAddr;
pub use msg_layer::transport::floor_work::FloorWork;
use msg_layer::transport::spec::{AttachMode, LlcSpec};
use msg_layer::transport::TransportSpec;

use crate::affinity;
use crate::transports::{self, Kind, Open, SERVER_PORT};

/// A response not back within this long means the link lost it.
const STALL: Duration = Duration::from_secs(10);

/// `k`'s link spec on `ifname` (as its server endpoint would open it).
fn link_spec(k: Kind, ifname: &str, attach: AttachMode) -> Result<LlcSpec> {
    let open = Open {
        ifname,
        ip: std::net::Ipv4Addr::UNSPECIFIED.into(),
        server: true,
        port: SERVER_PORT,
        uring_coop: true,
        xdp_attach: attach,
        pair: 0,
    };
    match transports::spec(k, &open) {
        TransportSpec::Llc(s) => Ok(s),
        _ => bail!("{k} is not an LLC transport"),
    }
}

/// Median one-way time (half the round trip) in µs of `rounds` TEST round
/// trips from host A to host B of `bed` over `k`'s device code; the two
/// ends on `cpus` (A's, B's) when given. Each end does `work` once per
/// message it sends.
pub fn link_floor(
    k: Kind,
    bed: &testbed::TwoHosts,
    attach: AttachMode,
    rounds: usize,
    cpus: Option<(usize, usize)>,
    work: FloorWork,
) -> Result<f64> {
    let (a_spec, b_spec) = (
        link_spec(k, &bed.a.ifname, attach)?,
        link_spec(k, &bed.b.ifname, attach)?,
    );
    let (a, b) = (MacAddr(bed.a.mac), MacAddr(bed.b.mac));
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let b_stop = stop.clone();
    let responder = bed.b.ns.spawn(move || -> Result<()> {
        if let Some((_, cpu)) = cpus {
            affinity::pin_current(&[cpu])?;
        }
        let mut work = work.make();
        b_spec
            .answer_link_tests(
                a,
                || {
                    let _ = ready_tx.send(());
                },
                &b_stop,
                &mut work,
            )
            .with_context(|| format!("answering TEST on {}", b_spec.ifname))
    });
    let pinged = match ready_rx.recv_timeout(STALL) {
        Ok(()) => bed.a.ns.run(|| -> Result<Vec<Duration>> {
            if let Some((cpu, _)) = cpus {
                affinity::pin_current(&[cpu])?;
            }
            let work_kind = work;
            let mut work = work.make();
            let r = a_spec
                .link_round_trips(
                    b,
                    rounds / 10,
                    rounds,
                    STALL,
                    work_kind.info_len(),
                    &mut work,
                )
                .with_context(|| format!("TEST round trips from {}", a_spec.ifname));
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
