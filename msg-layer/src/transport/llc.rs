//! The LLC stack as a [`Transport`]: one endpoint (interface, SAP) listening
//! on one port, connections to peers' ports.
//!
//! Generic over the link device, so the same code runs over AF_XDP,
//! AF_PACKET ([`AnyLink`]) and the simulated link with fault injection used by
//! the deterministic tests.

use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use llc_stack::link::afpacket::AfPacketConfig;
use llc_stack::link::afxdp::{self, AfXdpConfig};
use llc_stack::link::any::{self, AnyLink, Sharing};
use llc_stack::link::test_ping;
use llc_stack::proto::{ConnHandle, Event};
use llc_stack::rng::Rng;
use llc_stack::statpage::PageInfo;
use llc_stack::wire::{Addresses, MacAddr};
use llc_stack::{Device, Instant, Stack};

use super::spec::{AttachMode, Backend, KeySource, LlcSpec};
use super::{
    ConnId, FailureCause, Placement, SendError, Transport, TransportError, TransportEvent,
};
use crate::addr::{Addr, LlcAddr};

pub use super::spec::{AuthKey, LlcConfig, AUTH_KEY_ENV, DEFAULT_PORT};

/// The key of [`AUTH_KEY_ENV`]: `None` when the variable is not set; an
/// error when it is set but empty (a job meant to be keyed must not run
/// unkeyed by mistake).
pub fn auth_key_from_env() -> Result<Option<AuthKey>, TransportError> {
    match std::env::var_os(AUTH_KEY_ENV) {
        None => Ok(None),
        Some(v) if v.is_empty() => Err(TransportError::Setup(format!(
            "{AUTH_KEY_ENV} is set but empty: unset it, or give the job's key material \
             (any string the job's processes share, e.g. 64 random hex digits)"
        ))),
        Some(v) => Ok(Some(AuthKey::derive(v.as_encoded_bytes()))),
    }
}

/// 32 bytes from the operating system's random source.
fn random_bytes() -> Result<[u8; 32], TransportError> {
    let mut b = [0u8; 32];
    rand::RngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut b)
        .map_err(|e| TransportError::Setup(format!("drawing a random key: {e}")))?;
    Ok(b)
}

/// Fresh key material for a job, as a launcher draws it: 32 bytes from
/// the operating system's random source, written as 64 hex digits (a value
/// [`AUTH_KEY_ENV`] may hold, so a tool can join the job with it). Every
/// process of the job derives the same key from it with
/// [`AuthKey::derive`].
pub fn random_key_material() -> Result<String, TransportError> {
    Ok(random_bytes()?.iter().map(|b| format!("{b:02x}")).collect())
}

/// The key an endpoint of `source` opens with, put into `cfg` (a key
/// already there wins). True when the endpoint is to wait for its key: it
/// then opens with a key nobody has, so it takes no frame until
/// [`Transport::set_auth_key`] gives it the job's.
fn resolve_key(cfg: &mut LlcConfig, source: KeySource) -> Result<bool, TransportError> {
    if cfg.auth_key.is_some() {
        return Ok(false);
    }
    match source {
        KeySource::Env => cfg.auth_key = auth_key_from_env()?,
        KeySource::Off => {}
        KeySource::Later => {
            cfg.auth_key = Some(AuthKey::from_bytes(random_bytes()?));
            return Ok(true);
        }
    }
    Ok(false)
}

/// `spec` with its interface chosen when it names none (`llc://`), as
/// btl/llc chooses: the `local_rank`-th (modulo their number) of the
/// host's interfaces that can carry LLC ([`select_interfaces`] with nothing
/// named). Every API (the message layer, DECK, BMI, the migrating tasks,
/// btl/llc) gets the same default this way. A spec that names its
/// interface is returned as it is.
pub fn on_interface_for(spec: &LlcSpec, local_rank: usize) -> Result<LlcSpec, TransportError> {
    if !spec.ifname.is_empty() {
        return Ok(spec.clone());
    }
    let names = select_interfaces(&[], &[])?;
    let mut s = spec.clone();
    s.ifname = names[local_rank % names.len()].clone();
    Ok(s)
}

/// The interfaces an LLC endpoint may use on this host, in the kernel's
/// order: those named in `include` (each must exist and carry LLC), or, when
/// `include` is empty, every up Ethernet interface that is not loopback and
/// not a bridge or bond port; minus those named in `exclude`. The error
/// names what is wrong and what to do, for a user who set nothing.
pub fn select_interfaces(
    include: &[&str],
    exclude: &[&str],
) -> Result<Vec<String>, TransportError> {
    let all = llc_stack::link::interfaces::interfaces()
        .map_err(|e| TransportError::Setup(e.to_string()))?;
    let listing = || {
        all.iter()
            .map(|i| match i.unusable_because() {
                Some(why) => format!("{} ({why})", i.name),
                None => i.name.clone(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    for name in include.iter().chain(exclude) {
        if !all.iter().any(|i| i.name == *name) {
            return Err(TransportError::Setup(format!(
                "interface {name:?} does not exist on this host (interfaces here: {}); \
                 name one of those",
                listing()
            )));
        }
    }
    let mut chosen = Vec::new();
    for i in &all {
        let named = include.contains(&i.name.as_str());
        if !include.is_empty() && !named {
            continue;
        }
        if named {
            if let Some(why) = i.unusable_because() {
                return Err(TransportError::Setup(format!(
                    "interface {} cannot carry LLC: {why}{}",
                    i.name,
                    if why == "down" {
                        format!(" (bring it up with `ip link set {} up`)", i.name)
                    } else {
                        String::new()
                    }
                )));
            }
        } else if !i.carries_llc() {
            continue;
        }
        if !exclude.contains(&i.name.as_str()) {
            chosen.push(i.name.clone());
        }
    }
    if chosen.is_empty() {
        return Err(TransportError::Setup(format!(
            "no interface here can carry LLC (an up Ethernet interface that is not loopback \
             and not excluded; interfaces here: {}); bring one up or name one to include",
            listing()
        )));
    }
    Ok(chosen)
}

/// The LLC transport on a real interface, over AF_XDP or AF_PACKET: what
/// [`super::TransportSpec::open`] opens for `llc://`.
pub type LlcLinkTransport = LlcTransport<AnyLink>;

/// The LLC stack's totals that reports and the MPI component show.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LlcTotals {
    /// Frames the endpoint dropped (malformed, beyond the window, not for
    /// it...; the `dropped.*` counters summed).
    pub frames_dropped: u64,
    /// Frames retransmitted, over all connections.
    pub retransmits: u64,
    /// Of those, after a retransmission timeout.
    pub timeouts: u64,
    /// Timeouts found spurious afterwards (the originals had arrived).
    pub spurious_timeouts: u64,
    /// Tail-loss probes sent (each one of `retransmits`).
    pub tail_probes: u64,
    /// Loss episodes: fast recoveries entered on frames found lost.
    pub loss_episodes: u64,
    /// Frames the device or the kernel below it dropped before the
    /// endpoint saw them (a full RX ring or fill ring:
    /// `Device::kernel_drops`).
    pub device_drops: u64,
    /// Of `frames_dropped`, transport frames that failed authentication:
    /// no tag where a key is set, a wrong tag, or a tag where none is
    /// (`dropped.auth_missing`, `auth_failed`, `auth_unexpected`).
    pub auth_dropped: u64,
}

/// The LLC stack over link `D`.
#[derive(Debug)]
pub struct LlcTransport<D: Device> {
    stack: Stack<D>,
    addr: LlcAddr,
    notes: Vec<String>,
    /// Opened with [`KeySource::Later`], its key not yet set: it connects
    /// nowhere and takes no frame.
    key_pending: bool,
}

impl LlcTransport<AnyLink> {
    /// Open `backend` on interface `ifname` as the endpoint of `port` (0: any
    /// free port; [`Transport::local_addr`] then names the one taken). The
    /// interface may be shared with other endpoints of the host: each claims
    /// its port, the kernel hands it only that port's frames, and frames to
    /// endpoints of the same host take the same-host path
    /// (`llc_stack::link::local`). The notes (see [`LlcTransport::notes`])
    /// say what `auto` fell back from and why.
    pub fn open(
        ifname: &str,
        backend: Backend,
        port: u16,
        cfg: LlcConfig,
    ) -> Result<Self, TransportError> {
        Self::open_with_attach(ifname, backend, AttachMode::Auto, port, cfg)
    }

    /// [`LlcTransport::open`] with the XDP attach mode chosen. On veth,
    /// generic XDP is the faster of the two for our frames, and a native
    /// program makes the kernel take segmentation offloads away from every
    /// other user of the link (TCP included); see docs/BENCHMARKS.md.
    pub fn open_with_attach(
        ifname: &str,
        backend: Backend,
        attach: AttachMode,
        port: u16,
        cfg: LlcConfig,
    ) -> Result<Self, TransportError> {
        Self::open_link(
            ifname,
            backend,
            attach,
            Some(port),
            port,
            Sharing::Unknown,
            cfg,
        )
    }

    /// Open an endpoint that has the interface's SAP to itself (one
    /// endpoint per interface, as before interfaces were shared): its
    /// device receives every port's frames and answers TEST/XID, with no
    /// port filter and no same-host path. Another endpoint on the same
    /// interface and SAP would see its frames: use it only where the
    /// endpoint is alone (one MPI rank per NIC), as a baseline for what
    /// sharing costs.
    pub fn open_exclusive(
        ifname: &str,
        backend: Backend,
        attach: AttachMode,
        port: u16,
        cfg: LlcConfig,
    ) -> Result<Self, TransportError> {
        Self::open_link(ifname, backend, attach, None, port, Sharing::Alone, cfg)
    }

    /// Open what `spec` says ([`LlcTransport::open_exclusive`] when it is
    /// exclusive, else [`LlcTransport::open_with_attach`], telling `auto`
    /// when the endpoint is alone on the interface).
    /// Its key is [`LlcSpec::auth`]'s (see [`KeySource`]).
    pub fn open_spec(spec: &LlcSpec) -> Result<Self, TransportError> {
        if spec.ifname.is_empty() {
            return Self::open_spec(&on_interface_for(spec, 0)?);
        }
        let claim = (!spec.exclusive).then_some(spec.port);
        let mut cfg = spec.config.clone();
        let pending = resolve_key(&mut cfg, spec.auth)?;
        let mut t = Self::open_link(
            &spec.ifname,
            spec.backend,
            spec.attach,
            claim,
            spec.port,
            spec.sharing(),
            cfg,
        )?;
        t.key_pending = pending;
        match t.auth_fingerprint() {
            Some(f) => tracing::debug!(key = %f, "frames authenticated"),
            None if pending => tracing::debug!("waiting for the job's key"),
            None => tracing::debug!("frames not authenticated (no key)"),
        }
        Ok(t)
    }

    fn open_link(
        ifname: &str,
        backend: Backend,
        attach: AttachMode,
        claim: Option<u16>,
        port: u16,
        sharing: Sharing,
        cfg: LlcConfig,
    ) -> Result<Self, TransportError> {
        let (link, notes) = open_device(ifname, backend, attach, sharing, cfg.sap, claim)?;
        let mac = link.mac();
        let port = link.port().unwrap_or(port);
        let mut t = LlcTransport::new(link, mac, port, cfg, Rng::from_entropy());
        t.notes = notes;
        // Live counters for llc-stat; a host without /dev/shm loses only those.
        let info = PageInfo {
            label: "msg-layer".into(),
            ifname: ifname.into(),
            ..PageInfo::default()
        };
        if let Err(e) = t.stack.publish_stats(info) {
            tracing::warn!("llc-stat page not published: {e}");
        }
        Ok(t)
    }
}

/// The link device an LLC endpoint on `ifname` uses (the backend and XDP
/// attach mode chosen as the transport chooses them, `auto` knowing what
/// `sharing` says, frames of `sap`, transport port `claim` held if given).
/// Returns the link and what fell back.
fn open_device(
    ifname: &str,
    backend: Backend,
    attach: AttachMode,
    sharing: Sharing,
    sap: u8,
    claim: Option<u16>,
) -> Result<(AnyLink, Vec<String>), TransportError> {
    let backend = match backend {
        Backend::Auto => any::Backend::Auto,
        Backend::Xdp => any::Backend::Xdp,
        Backend::Packet => any::Backend::Packet,
    };
    let attach = match attach {
        AttachMode::Auto => afxdp::AttachMode::Auto,
        AttachMode::Native => afxdp::AttachMode::Native,
        AttachMode::Generic => afxdp::AttachMode::Generic,
    };
    let packet = AfPacketConfig {
        sap,
        port: claim,
        ..Default::default()
    };
    let xdp = AfXdpConfig {
        sap,
        port: claim,
        attach,
        ..Default::default()
    };
    any::open_shared(ifname, backend, sharing, packet, xdp)
        .map_err(|e| TransportError::Setup(e.to_string()))
}

/// The link floor of an endpoint's link: 802.2 TEST round trips on the
/// device an endpoint of this spec would use, with no protocol above
/// ([`llc_stack::link::test_ping`]), the yardstick of "how far above the
/// link itself" a message costs. One host answers, the other times.
impl LlcSpec {
    /// Answer every TEST command from `peer` on this spec's link until
    /// `stop` is set; `ready` runs once the link is open. `work` runs before
    /// each answer (nothing, for the bare floor; see
    /// [`test_ping::answer_tests_with`]).
    pub fn answer_link_tests(
        &self,
        peer: MacAddr,
        ready: impl FnOnce(),
        stop: &AtomicBool,
        work: &mut impl FnMut(),
    ) -> Result<(), TransportError> {
        let (mut dev, _) = self.open_bare()?;
        ready();
        let back = self.addresses(dev.mac(), peer);
        test_ping::answer_tests_with(&mut dev, back, stop, work)
            .map_err(|e| TransportError::io("answering TEST", &e))
    }

    /// `warmup` then `rounds` TEST round trips to `peer` on this spec's
    /// link, one at a time, each command carrying `info_len` bytes (8 to
    /// [`test_ping::MAX_INFO`]), doing `work` before each; the measured
    /// ones' times. Fails when an answer does not come within `stall`.
    pub fn link_round_trips(
        &self,
        peer: MacAddr,
        warmup: usize,
        rounds: usize,
        stall: Duration,
        info_len: usize,
        work: &mut impl FnMut(),
    ) -> Result<Vec<Duration>, TransportError> {
        let (mut dev, _) = self.open_bare()?;
        let to = self.addresses(dev.mac(), peer);
        test_ping::round_trips_with(&mut dev, to, warmup, rounds, stall, info_len, work)
            .map_err(|e| TransportError::io("TEST round trips", &e))
    }

    /// The link alone, no port held.
    fn open_bare(&self) -> Result<(AnyLink, Vec<String>), TransportError> {
        open_device(
            &self.ifname,
            self.backend,
            self.attach,
            self.sharing(),
            self.config.sap,
            None,
        )
    }

    /// What `auto` is told of the interface's other endpoints.
    fn sharing(&self) -> Sharing {
        if self.exclusive || self.alone {
            Sharing::Alone
        } else {
            Sharing::Unknown
        }
    }

    fn addresses(&self, us: MacAddr, peer: MacAddr) -> Addresses {
        let sap = self.config.sap;
        Addresses {
            dst: peer,
            src: us,
            dsap: sap,
            ssap: sap,
        }
    }
}

impl<D: Device> LlcTransport<D> {
    /// An endpoint for interface address `mac` over `dev` with port `port`:
    /// it accepts connections there and opens its own from there.
    pub fn new(
        dev: D,
        mac: llc_stack::wire::MacAddr,
        port: u16,
        mut cfg: LlcConfig,
        rng: Rng,
    ) -> Self {
        let sap = cfg.sap;
        // Sends complete when queued (the message layer's own protocol
        // acknowledges what needs it): per-message `Acked` events would be
        // taken only to be ignored.
        cfg.acked_events = false;
        let mut stack = Stack::new(dev, cfg, mac, rng);
        stack.endpoint_mut().bind(port);
        LlcTransport {
            stack,
            addr: LlcAddr { mac, sap, port },
            notes: Vec::new(),
            key_pending: false,
        }
    }

    /// What backend selection fell back from, and why.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The stack, for its statistics.
    pub fn stack(&self) -> &Stack<D> {
        &self.stack
    }

    /// Drops, retransmissions and timeouts so far.
    pub fn totals(&self) -> LlcTotals {
        let ep = self.stack.endpoint();
        let d = &ep.stats().dropped;
        let mut t = LlcTotals {
            frames_dropped: d.total(),
            auth_dropped: d.auth_missing + d.auth_failed + d.auth_unexpected,
            ..LlcTotals::default()
        };
        for (_, c) in ep.connection_stats_all() {
            t.retransmits += c.retransmits;
            t.timeouts += c.timeouts;
            t.spurious_timeouts += c.spurious_timeouts;
            t.tail_probes += c.tail_probes;
            t.loss_episodes += c.loss_episodes;
        }
        t.device_drops = self.stack.device().kernel_drops();
        t
    }

    /// Queue `head ++ body`; `awaited`: the caller waits for its release,
    /// so its last frame asks for a prompt acknowledgement.
    #[inline(always)]
    fn send_with(
        &mut self,
        conn: ConnId,
        head: &[u8],
        body: Bytes,
        awaited: bool,
    ) -> Result<(), SendError> {
        use llc_stack::proto::SendError as E;
        let ep = self.stack.endpoint_mut();
        let h = ConnHandle(conn);
        let r = if awaited {
            ep.send_parts_awaited(h, head, body)
        } else {
            ep.send_parts(h, head, body)
        };
        match r {
            Ok(_) => Ok(()),
            Err(E::BufferFull { .. }) => Err(SendError::WouldBlock),
            Err(E::Closed) => Err(SendError::Closed),
            Err(E::TooLong(len)) => Err(SendError::TooLong {
                len,
                max: ep.config().max_message_len,
            }),
        }
    }

    /// Hand the stack's events to `each`, in order; true if there were any.
    fn take_events(&mut self, mut each: impl FnMut(TransportEvent)) -> bool {
        let mut any = false;
        while let Some((h, ev)) = self.stack.endpoint_mut().poll_event() {
            any = true;
            let id = h.0;
            match ev {
                Event::Connected => {
                    let inbound = self.stack.endpoint().is_inbound(h).unwrap_or(false);
                    each(if inbound {
                        TransportEvent::Accepted(id)
                    } else {
                        TransportEvent::Connected(id)
                    });
                }
                Event::Message { data, .. } => each(TransportEvent::Message(id, data)),
                Event::Acked { .. } => {} // off (see `new`)
                Event::Closed(reason) => each(TransportEvent::Closed(
                    id,
                    reason.map(FailureCause::Connection),
                )),
            }
        }
        any
    }
}

impl<D: Device + Send + 'static> Transport for LlcTransport<D> {
    fn name(&self) -> String {
        format!("llc/{}", self.stack.device().capabilities().backend)
    }

    fn local_addr(&self) -> Addr {
        Addr::Llc(self.addr)
    }

    fn max_message_len(&self) -> usize {
        self.stack.endpoint().config().max_message_len
    }

    fn transmit_queued(&mut self) -> Result<bool, TransportError> {
        self.stack
            .poll_tx(Instant::now())
            .map_err(|e| TransportError::io("transmitting", &e))?;
        Ok(true)
    }

    /// One frame's payload less the bundle's own header: a bundle leaves in
    /// one frame.
    fn bundle_len(&self) -> usize {
        let ep = self.stack.endpoint();
        ep.frame_payload()
            .min(ep.config().max_message_len)
            .saturating_sub(crate::wire::HEADER_LEN)
    }

    fn frame_payload(&self) -> usize {
        self.stack.endpoint().frame_payload()
    }

    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError> {
        let bad = |reason: String| TransportError::Address {
            addr: to.to_string(),
            reason,
        };
        let Addr::Llc(a) = to else {
            return Err(bad("an LLC endpoint cannot reach a TCP address".into()));
        };
        if self.key_pending {
            return Err(bad(
                "this endpoint waits for its job's authentication key (set_auth_key) \
                 before it connects"
                    .into(),
            ));
        }
        if a.sap != self.addr.sap {
            return Err(bad(format!(
                "the peer uses SAP {:#04x} and this endpoint {:#04x}",
                a.sap, self.addr.sap
            )));
        }
        let ep = self.stack.endpoint_mut();
        match ep.connect(Instant::now(), a.mac, a.port, None) {
            Ok(h) => Ok(h.0),
            // The peer opened this connection first (from and to the same
            // ports): it is the one to send on.
            Err(llc_stack::proto::ConnectError::InUse {
                local,
                peer,
                remote,
            }) if ep
                .connection_between(peer, remote, local)
                .is_some_and(|h| ep.is_inbound(h) == Some(true)) =>
            {
                let h = ep.connection_between(peer, remote, local).expect("found");
                Ok(h.0)
            }
            Err(e) => Err(bad(e.to_string())),
        }
    }

    fn peers_accept(&self) -> bool {
        // Every endpoint listens on its bound port.
        true
    }

    /// A fresh stack endpoint on the same link and port, with `key`
    /// (`Stack::renew_endpoint`): refused once a connection exists, since
    /// its frames were (or were not) authenticated with the old key.
    fn set_auth_key(&mut self, key: AuthKey) -> Result<(), TransportError> {
        let mut cfg = self.stack.endpoint().config().clone();
        cfg.auth_key = Some(key);
        self.stack
            .renew_endpoint(cfg, Rng::from_entropy())
            .map_err(|_| {
                TransportError::Setup(
                    "the authentication key can be set only before the endpoint's first \
                     connection"
                        .into(),
                )
            })?;
        self.stack.endpoint_mut().bind(self.addr.port);
        self.key_pending = false;
        Ok(())
    }

    fn auth_fingerprint(&self) -> Option<String> {
        if self.key_pending {
            return None;
        }
        let cfg = self.stack.endpoint().config();
        cfg.auth_key.as_ref().map(AuthKey::fingerprint)
    }

    #[inline(always)]
    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        self.send_with(conn, head, body, false)
    }

    #[inline(always)]
    fn send_awaited(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        self.send_with(conn, head, body, true)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.stack.endpoint_mut().recycle(buf);
    }

    fn close(&mut self, conn: ConnId) {
        self.stack.endpoint_mut().close(ConnHandle(conn));
    }

    fn progress(&mut self, events: &mut Vec<TransportEvent>) -> Result<bool, TransportError> {
        self.progress_each(&mut Vec::new(), |ev| events.push(ev))
    }

    fn progress_each(
        &mut self,
        _scratch: &mut Vec<TransportEvent>,
        each: impl FnMut(TransportEvent),
    ) -> Result<bool, TransportError> {
        let now = Instant::now();
        // Transmit what the caller queued since the last call first, then
        // receive: replies the caller sends in reaction to these events then
        // carry the acknowledgements of what they answer.
        let tx = self
            .stack
            .poll_tx(now)
            .map_err(|e| TransportError::io("transmitting", &e))?;
        let rx = self.stack.poll_rx(now);
        let ev = self.take_events(each);
        Ok(tx + rx > 0 || ev)
    }

    /// The endpoint's counters, its drops by reason (`dropped.*`), the
    /// sums over its connections (`conn.*`) and the device's own (`device.*`:
    /// what the kernel dropped before the stack saw it).
    fn counters(&self) -> Vec<(String, u64)> {
        let ep = self.stack.endpoint();
        let st = ep.stats();
        let mut out: Vec<(String, u64)> = st
            .counters()
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        out.extend(
            st.dropped
                .counters()
                .iter()
                .map(|(k, v)| (format!("dropped.{k}"), *v)),
        );
        let mut sums: Vec<(String, u64)> = Vec::new();
        for (_, c) in ep.connection_stats_all() {
            for (k, v) in c.counters() {
                let key = format!("conn.{k}");
                match sums.iter_mut().find(|(n, _)| *n == key) {
                    // RTT figures are not summed: keep the largest.
                    Some((_, s)) if k.contains("rtt") => *s = (*s).max(v),
                    Some((_, s)) => *s += v,
                    None => sums.push((key, v)),
                }
            }
        }
        out.extend(sums);
        out.extend(
            self.stack
                .device()
                .counters()
                .into_iter()
                .map(|(k, v)| (format!("device.{k}"), v)),
        );
        out
    }

    fn set_placement(&mut self, placement: Box<dyn Placement>) {
        self.stack
            .endpoint_mut()
            .set_placement(Some(Box::new(StackPlacement(placement))));
    }

    fn flushed(&self) -> bool {
        self.stack.endpoint().quiescent()
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        self.stack.prepare_wait(Instant::now(), fds)
    }

    /// A link-level probe: a TEST command to the peer's MAC, answered by
    /// whichever endpoint of that interface answers TEST (PROTOCOL.md
    /// 3.13). Endpoints of this host (our own MAC) are reachable through
    /// the same-host path; another SAP or a TCP address never is.
    fn probe(&mut self, to: &Addr) -> Option<bool> {
        let Addr::Llc(a) = to else {
            return Some(false);
        };
        if a.sap != self.addr.sap {
            return Some(false);
        }
        let ep = self.stack.endpoint_mut();
        if a.mac == self.addr.mac || ep.probe_answered(a.mac) {
            return Some(true);
        }
        ep.probe(a.mac);
        None
    }

    fn probe_answered(&self, to: &Addr) -> bool {
        matches!(to, Addr::Llc(a) if self.stack.endpoint().probe_answered(a.mac))
    }
}

/// The message layer's placement as the stack's: the sink passes down as
/// it is (see [`super::placement`]), so a placed message costs no
/// allocation here.
struct StackPlacement(Box<dyn Placement>);

impl llc_stack::proto::Placement for StackPlacement {
    fn place(
        &mut self,
        len: usize,
        first: &[u8],
    ) -> Option<(usize, std::sync::Arc<dyn llc_stack::proto::Sink>)> {
        let (keep, sink) = self.0.place(len, first)?;
        Some((keep, sink.into_llc()))
    }
}

/// The real-link transport must be movable to a progress thread.
#[allow(dead_code)]
fn assert_transport<T: Transport>() {}
#[allow(dead_code)]
fn llc_over_any_link_is_a_transport() {
    assert_transport::<LlcTransport<AnyLink>>();
}
