//! One opener for every transport, from a spec: where an endpoint listens.
//!
//! A [`TransportSpec`] says which transport to open and how; it parses from
//! and prints as a URL-like string, so a command line, a configuration file
//! or an MCA parameter can carry it, and [`TransportSpec::open`] opens it as
//! an [`AnyTransport`]. Programs may build the typed spec directly instead
//! and set every knob of the transport's configuration.
//!
//! # Grammar
//! ```text
//! spec    = scheme "://" target [ "?" option *( "&" option ) ]
//! option  = name "=" value
//! scheme  = "llc" | "tcp" | "tcp-uring"        ("tcp+uring" is read as "tcp-uring")
//! target  = [ IFNAME ]                         (llc: the interface, e.g. eth0; none: as
//!                                                btl/llc picks, see below)
//!         | IP ":" PORT | "[" IPv6 "]" ":" PORT (tcp, tcp-uring: the address to bind)
//! ```
//! An LLC spec with no interface (`llc://`, `llc://?backend=xdp`) leaves the
//! choice to the stack, the same for every API: the host's up Ethernet
//! interfaces that can carry LLC (`transport::llc::select_interfaces`), the
//! process's local rank among its job's processes on the host choosing one
//! (`transport::llc::on_interface_for`; rank 0 when opened as it is). Where
//! an endpoint listens is a spec; whom it talks to is an address
//! (`crate::addr`: `[MAC]:PORT`, `IP:PORT`), which never has a scheme.
//!
//! Options of `llc://IFNAME`:
//! - `backend=auto|xdp|packet` (default auto): AF_XDP, AF_PACKET, or AF_XDP falling
//!   back to AF_PACKET (the fallback is said in [`AnyTransport::notes`](super::AnyTransport::notes));
//! - `attach=auto|native|generic` (default auto): the XDP program's hook;
//! - `port=N` (default 7): the endpoint's port on the interface, 0 for any free one;
//! - `exclusive=true|false` (default false): have the interface's SAP alone (see
//!   [`LlcTransport::open_exclusive`](super::llc::LlcTransport::open_exclusive)) instead of sharing it by port;
//! - `alone=true|false` (default false): the caller knows no other endpoint of
//!   its job opens the interface (one MPI rank per host), so that `auto` may
//!   take the backend that is faster for a single endpoint (implied by
//!   `exclusive`);
//! - `sap=0xNN` (default 0x7c): the LLC SAP;
//! - `idle_timeout_ms=N` (default 10000): a peer silent this long has failed;
//!   keepalives go out after a quarter of it (at most every second, at
//!   least every 10 ms) unless
//! - `keepalive_ms=N` (default 1000) says otherwise;
//! - `auth=env|off|later` (default env): where the frame authentication key
//!   comes from ([`KeySource`]). A spec never carries key material: it is
//!   printed and shown on command lines. Give a key in [`AUTH_KEY_ENV`]
//!   (`LLC_AUTH_KEY`), in [`LlcSpec::config`]'s `auth_key`, or later with
//!   [`crate::Endpoint::set_auth_key`].
//!
//! Options of `tcp://ADDR` and `tcp-uring://ADDR`:
//! - `busy_poll_us=N|off` (default 50): `SO_BUSY_POLL` on every connection;
//! - `idle_timeout_ms=N|off` (default 10000): keepalive and user timeout;
//! - `connect_timeout_ms=N` (default 10000);
//! - `tcp-uring` only: `coop_taskrun=true|false` (default false) and
//!   `ring_entries=N` (default 256) (see [`TcpConfig`]).
//!
//! Examples: `llc://eth0`, `llc://eth0?backend=xdp&attach=generic&port=0`,
//! `tcp://0.0.0.0:5201`, `tcp-uring://10.0.0.1:5201?coop_taskrun=true`.
//!
//! Printing writes the scheme, the target and the options that differ from
//! their defaults, in the order above, so a spec prints as it parses.
//! Knobs of [`LlcSpec::config`] and [`TcpSpec::config`] that the grammar has
//! no option for are not printed, and durations print in whole units.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

pub use llc_stack::proto::Config as LlcConfig;
/// A job's frame authentication key (docs/SECURITY.md). Its `Debug` shows
/// a fingerprint, never the key.
pub use llc_stack::wire::AuthKey;

use super::tcp::TcpConfig;

/// Port an endpoint listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 7;

/// The variable a job's key material comes from when nothing else gives a
/// key: any non-empty string, the same on every process of the job, from
/// which each derives the key ([`AuthKey::derive`]).
pub const AUTH_KEY_ENV: &str = "LLC_AUTH_KEY";

/// Which link an LLC endpoint opens.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// AF_XDP when it can be set up, else AF_PACKET.
    #[default]
    Auto,
    /// AF_XDP only.
    Xdp,
    /// AF_PACKET only.
    Packet,
}

/// Where the XDP program of an AF_XDP link attaches.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum AttachMode {
    /// Native, and generic if the driver has no native XDP.
    #[default]
    Auto,
    /// Native (driver) XDP only.
    Native,
    /// Generic (skb) XDP only: works on every interface; on veth the faster
    /// mode for our frames, and the one that leaves TCP its segmentation
    /// offloads on the same link (docs/BENCHMARKS.md).
    Generic,
}

/// Where an LLC endpoint's frame authentication key comes from when
/// [`LlcSpec::config`] holds none (a key there is used as it is).
/// docs/SECURITY.md says what a key protects.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The key derived from `LLC_AUTH_KEY` when it is set (an error when
    /// set but empty); no key when it is not.
    #[default]
    Env,
    /// No key: frames are not authenticated, and authenticated ones are
    /// dropped, whatever the environment says.
    Off,
    /// The key comes after the endpoint opened and published its address
    /// (an MPI job's key, drawn by one rank and exchanged with the
    /// addresses): until [`crate::Endpoint::set_auth_key`] gives it, the
    /// endpoint takes no frame (it holds a key nobody has) and connects
    /// nowhere.
    Later,
}

/// A word that is not one of the choices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: expected {expected}")]
pub struct ChoiceError {
    /// What was given.
    pub value: String,
    /// The choices.
    pub expected: &'static str,
}

macro_rules! choices {
    ($t:ident, $expected:literal, $($v:ident = $s:literal),+) => {
        impl $t {
            /// The choices, as the spec and the tools spell them.
            pub const CHOICES: &'static str = $expected;
            /// The word for it.
            pub fn as_str(self) -> &'static str {
                match self { $($t::$v => $s),+ }
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl FromStr for $t {
            type Err = ChoiceError;
            fn from_str(s: &str) -> Result<Self, ChoiceError> {
                match s {
                    $($s => Ok($t::$v),)+
                    _ => Err(ChoiceError { value: s.to_string(), expected: $expected }),
                }
            }
        }
    };
}

choices!(
    Backend,
    "auto, xdp or packet",
    Auto = "auto",
    Xdp = "xdp",
    Packet = "packet"
);
choices!(
    KeySource,
    "env, off or later",
    Env = "env",
    Off = "off",
    Later = "later"
);
choices!(
    AttachMode,
    "auto, native or generic",
    Auto = "auto",
    Native = "native",
    Generic = "generic"
);

/// How to open an LLC endpoint.
#[derive(Clone, Debug)]
pub struct LlcSpec {
    /// The interface, e.g. `eth0`; empty: the stack picks, as btl/llc
    /// does (`transport::llc::on_interface_for`).
    pub ifname: String,
    /// AF_XDP, AF_PACKET or either.
    pub backend: Backend,
    /// The XDP program's hook (AF_XDP).
    pub attach: AttachMode,
    /// The endpoint's port (0: any free port;
    /// [`super::Transport::local_addr`] then names the one taken).
    pub port: u16,
    /// Have the interface's SAP alone ([`LlcTransport::open_exclusive`](super::llc::LlcTransport::open_exclusive)).
    pub exclusive: bool,
    /// No other endpoint of the job opens the interface (one MPI rank per
    /// host): `auto` may then take AF_PACKET where copy-mode AF_XDP chains
    /// jumbo frames ([`llc_stack::link::any::Sharing::Alone`]). Implied by
    /// `exclusive`.
    pub alone: bool,
    /// Where the frame authentication key comes from when `config` holds
    /// none.
    pub auth: KeySource,
    /// The stack's configuration (SAP, timeouts, buffers, a key...).
    pub config: LlcConfig,
}

impl LlcSpec {
    /// The defaults on `ifname`.
    pub fn new(ifname: impl Into<String>) -> Self {
        LlcSpec {
            ifname: ifname.into(),
            backend: Backend::Auto,
            attach: AttachMode::Auto,
            port: DEFAULT_PORT,
            exclusive: false,
            alone: false,
            auth: KeySource::Env,
            config: LlcConfig::default(),
        }
    }

    /// Fail peers silent for `idle`, with keepalives after a quarter of it
    /// (at most the default interval, at least 10 ms): what
    /// `idle_timeout_ms` does.
    pub fn set_idle_timeout(&mut self, idle: Duration) {
        self.config.idle_timeout = idle;
        self.config.keepalive_interval = implied_keepalive(idle);
    }
}

/// The keepalive interval `idle_timeout_ms` implies.
fn implied_keepalive(idle: Duration) -> Duration {
    LlcConfig::default()
        .keepalive_interval
        .min(idle / 4)
        .max(Duration::from_millis(10))
}

/// How to open a TCP endpoint (either implementation).
#[derive(Clone, Debug)]
pub struct TcpSpec {
    /// The address to bind and listen on (port 0: any free port).
    pub addr: SocketAddr,
    /// The transport's configuration.
    pub config: TcpConfig,
}

impl TcpSpec {
    /// The defaults at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        TcpSpec {
            addr,
            config: TcpConfig::default(),
        }
    }
}

/// Which transport to open, and how. See the module documentation for the
/// string form.
#[derive(Clone, Debug)]
pub enum TransportSpec {
    /// `llc://IFNAME`: the LLC stack over AF_XDP or AF_PACKET.
    Llc(LlcSpec),
    /// `tcp://ADDR`: kernel TCP over non-blocking sockets and epoll.
    Tcp(TcpSpec),
    /// `tcp-uring://ADDR`: kernel TCP over io_uring.
    TcpUring(TcpSpec),
}

/// Why a spec did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not of the form `SCHEME://TARGET[?OPTIONS]`.
    #[error("transport spec {spec:?}: expected SCHEME://TARGET[?NAME=VALUE&...], e.g. llc://eth0, tcp://0.0.0.0:5201 or tcp-uring://10.0.0.1:5201")]
    Form {
        /// The spec given.
        spec: String,
    },
    /// The scheme names no transport.
    #[error(
        "transport spec {spec:?}: unknown transport {scheme:?}: expected llc, tcp or tcp-uring"
    )]
    Scheme {
        /// The spec given.
        spec: String,
        /// Its scheme.
        scheme: String,
    },
    /// The interface or address is malformed.
    #[error("transport spec {spec:?}: {reason}")]
    Target {
        /// The spec given.
        spec: String,
        /// What is wrong, and what is expected.
        reason: String,
    },
    /// An option the transport does not have.
    #[error(
        "transport spec {spec:?}: unknown option {option:?} for {scheme}://: expected {allowed}"
    )]
    UnknownOption {
        /// The spec given.
        spec: String,
        /// The transport's scheme.
        scheme: &'static str,
        /// The option's name.
        option: String,
        /// The transport's options.
        allowed: &'static str,
    },
    /// An option's value is not one it takes.
    #[error("transport spec {spec:?}: option {option}={value:?}: expected {expected}")]
    BadValue {
        /// The spec given.
        spec: String,
        /// The option's name.
        option: String,
        /// Its value.
        value: String,
        /// What it takes.
        expected: String,
    },
    /// An option given twice.
    #[error("transport spec {spec:?}: option {option} is given twice")]
    Repeated {
        /// The spec given.
        spec: String,
        /// The option's name.
        option: String,
    },
}

const LLC_OPTIONS: &str =
    "backend, attach, port, exclusive, alone, sap, idle_timeout_ms, keepalive_ms or auth";
const TCP_OPTIONS: &str = "busy_poll_us, idle_timeout_ms or connect_timeout_ms";
const TCP_URING_OPTIONS: &str =
    "busy_poll_us, idle_timeout_ms, connect_timeout_ms, coop_taskrun or ring_entries";

/// Longest interface name Linux takes (`IFNAMSIZ` less the NUL).
const IFNAME_MAX: usize = 15;

impl TransportSpec {
    /// The scheme, as the string form spells it.
    pub fn scheme(&self) -> &'static str {
        match self {
            TransportSpec::Llc(_) => "llc",
            TransportSpec::Tcp(_) => "tcp",
            TransportSpec::TcpUring(_) => "tcp-uring",
        }
    }

    /// This spec with frames authenticated by `key` (put in
    /// [`LlcSpec::config`]): how an API above hands a configured key to
    /// whatever transport its user named. TCP has no frame authentication:
    /// its specs are returned unchanged.
    pub fn with_auth_key(mut self, key: AuthKey) -> Self {
        if let TransportSpec::Llc(l) = &mut self {
            l.config.auth_key = Some(key);
        }
        self
    }
}

impl fmt::Display for TransportSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut opts: Vec<(&str, String)> = Vec::new();
        match self {
            TransportSpec::Llc(s) => {
                write!(f, "llc://{}", s.ifname)?;
                let d = LlcSpec::new("");
                if s.backend != d.backend {
                    opts.push(("backend", s.backend.to_string()));
                }
                if s.attach != d.attach {
                    opts.push(("attach", s.attach.to_string()));
                }
                if s.port != d.port {
                    opts.push(("port", s.port.to_string()));
                }
                if s.exclusive {
                    opts.push(("exclusive", "true".into()));
                }
                if s.alone {
                    opts.push(("alone", "true".into()));
                }
                if s.config.sap != d.config.sap {
                    opts.push(("sap", format!("{:#04x}", s.config.sap)));
                }
                let idle = s.config.idle_timeout;
                if idle != d.config.idle_timeout {
                    opts.push(("idle_timeout_ms", idle.as_millis().to_string()));
                }
                if s.config.keepalive_interval != implied_keepalive(idle) {
                    opts.push((
                        "keepalive_ms",
                        s.config.keepalive_interval.as_millis().to_string(),
                    ));
                }
                if s.auth != d.auth {
                    opts.push(("auth", s.auth.to_string()));
                }
            }
            TransportSpec::Tcp(s) | TransportSpec::TcpUring(s) => {
                write!(f, "{}://{}", self.scheme(), s.addr)?;
                let (c, d) = (&s.config, TcpConfig::default());
                let ms = |t: Option<Duration>, unit: fn(Duration) -> u128| {
                    t.map_or("off".to_string(), |t| unit(t).to_string())
                };
                if c.busy_poll != d.busy_poll {
                    opts.push(("busy_poll_us", ms(c.busy_poll, |t| t.as_micros())));
                }
                if c.idle_timeout != d.idle_timeout {
                    opts.push(("idle_timeout_ms", ms(c.idle_timeout, |t| t.as_millis())));
                }
                if c.connect_timeout != d.connect_timeout {
                    opts.push((
                        "connect_timeout_ms",
                        c.connect_timeout.as_millis().to_string(),
                    ));
                }
                if matches!(self, TransportSpec::TcpUring(_)) {
                    if c.uring_coop_taskrun != d.uring_coop_taskrun {
                        opts.push(("coop_taskrun", c.uring_coop_taskrun.to_string()));
                    }
                    if c.ring_entries != d.ring_entries {
                        opts.push(("ring_entries", c.ring_entries.to_string()));
                    }
                }
            }
        }
        for (i, (k, v)) in opts.iter().enumerate() {
            write!(f, "{}{k}={v}", if i == 0 { '?' } else { '&' })?;
        }
        Ok(())
    }
}

/// Parses one spec, keeping it for the error messages.
struct Parser<'a> {
    spec: &'a str,
}

impl Parser<'_> {
    fn bad(&self, option: &str, value: &str, expected: impl Into<String>) -> SpecError {
        SpecError::BadValue {
            spec: self.spec.to_string(),
            option: option.to_string(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    fn number<N: FromStr>(&self, option: &str, value: &str, range: &str) -> Result<N, SpecError> {
        value
            .parse()
            .map_err(|_| self.bad(option, value, format!("a number {range}")))
    }

    fn millis(&self, option: &str, value: &str) -> Result<Duration, SpecError> {
        Ok(Duration::from_millis(self.number(
            option,
            value,
            "of milliseconds",
        )?))
    }

    fn optional(
        &self,
        option: &str,
        value: &str,
        unit: fn(u64) -> Duration,
        units: &str,
    ) -> Result<Option<Duration>, SpecError> {
        if value == "off" {
            return Ok(None);
        }
        value
            .parse()
            .map(|n| Some(unit(n)))
            .map_err(|_| self.bad(option, value, format!("a number of {units} or off")))
    }

    fn boolean(&self, option: &str, value: &str) -> Result<bool, SpecError> {
        match value {
            "true" | "1" => Ok(true),
            "false" | "0" => Ok(false),
            _ => Err(self.bad(option, value, "true or false (or 1 or 0)")),
        }
    }

    fn choice<T: FromStr<Err = ChoiceError>>(
        &self,
        option: &str,
        value: &str,
    ) -> Result<T, SpecError> {
        value
            .parse()
            .map_err(|e: ChoiceError| self.bad(option, value, e.expected))
    }

    /// The options, each name once.
    fn options<'q>(&self, query: Option<&'q str>) -> Result<Vec<(&'q str, &'q str)>, SpecError> {
        let mut out: Vec<(&str, &str)> = Vec::new();
        for opt in query.into_iter().flat_map(|q| q.split('&')) {
            let Some((name, value)) = opt.split_once('=') else {
                return Err(self.bad(opt, "", "NAME=VALUE"));
            };
            if out.iter().any(|(n, _)| *n == name) {
                return Err(SpecError::Repeated {
                    spec: self.spec.to_string(),
                    option: name.to_string(),
                });
            }
            out.push((name, value));
        }
        Ok(out)
    }

    fn unknown(&self, scheme: &'static str, option: &str, allowed: &'static str) -> SpecError {
        SpecError::UnknownOption {
            spec: self.spec.to_string(),
            scheme,
            option: option.to_string(),
            allowed,
        }
    }

    fn target(&self, reason: String) -> SpecError {
        SpecError::Target {
            spec: self.spec.to_string(),
            reason,
        }
    }

    fn llc(&self, ifname: &str, query: Option<&str>) -> Result<LlcSpec, SpecError> {
        if ifname.len() > IFNAME_MAX
            || ifname
                .chars()
                .any(|c| c == '/' || c.is_whitespace() || c.is_control())
        {
            return Err(self.target(format!(
                "{ifname:?} is not an interface name (at most {IFNAME_MAX} bytes, no '/' or spaces)"
            )));
        }
        let mut s = LlcSpec::new(ifname);
        let mut keepalive = None;
        for (name, value) in self.options(query)? {
            match name {
                "backend" => s.backend = self.choice(name, value)?,
                "attach" => s.attach = self.choice(name, value)?,
                "port" => s.port = self.number(name, value, "0..=65535")?,
                "exclusive" => s.exclusive = self.boolean(name, value)?,
                "alone" => s.alone = self.boolean(name, value)?,
                "sap" => {
                    let sap = match value.strip_prefix("0x") {
                        Some(h) => u8::from_str_radix(h, 16).ok(),
                        None => value.parse().ok(),
                    };
                    s.config.sap = sap
                        .and_then(|n| crate::addr::validate_sap(n).ok())
                        .ok_or_else(|| {
                            self.bad(
                                name,
                                value,
                                "an individual SAP byte other than 0 (even, e.g. 0x7c)",
                            )
                        })?;
                }
                "idle_timeout_ms" => s.set_idle_timeout(self.millis(name, value)?),
                "keepalive_ms" => keepalive = Some(self.millis(name, value)?),
                "auth" => s.auth = self.choice(name, value)?,
                _ => return Err(self.unknown("llc", name, LLC_OPTIONS)),
            }
        }
        if let Some(k) = keepalive {
            s.config.keepalive_interval = k;
        }
        Ok(s)
    }

    fn tcp(&self, uring: bool, addr: &str, query: Option<&str>) -> Result<TcpSpec, SpecError> {
        let addr: SocketAddr = addr.parse().map_err(|_| {
            self.target(format!(
                "{addr:?} is not IP:PORT (e.g. 0.0.0.0:5201 or [fd00::1]:5201)"
            ))
        })?;
        let mut s = TcpSpec::new(addr);
        let (scheme, allowed) = if uring {
            ("tcp-uring", TCP_URING_OPTIONS)
        } else {
            ("tcp", TCP_OPTIONS)
        };
        for (name, value) in self.options(query)? {
            let c = &mut s.config;
            match name {
                "busy_poll_us" => {
                    c.busy_poll = self.optional(name, value, Duration::from_micros, "µs")?
                }
                "idle_timeout_ms" => {
                    c.idle_timeout = self.optional(name, value, Duration::from_millis, "ms")?
                }
                "connect_timeout_ms" => c.connect_timeout = self.millis(name, value)?,
                "coop_taskrun" if uring => c.uring_coop_taskrun = self.boolean(name, value)?,
                "ring_entries" if uring => {
                    c.ring_entries = self.number(name, value, "1..=4294967295")?;
                    if c.ring_entries == 0 {
                        return Err(self.bad(name, value, "a number 1..=4294967295"));
                    }
                }
                _ => return Err(self.unknown(scheme, name, allowed)),
            }
        }
        Ok(s)
    }
}

impl FromStr for TransportSpec {
    type Err = SpecError;
    fn from_str(spec: &str) -> Result<Self, SpecError> {
        let p = Parser { spec };
        let (scheme, rest) = spec.split_once("://").ok_or_else(|| SpecError::Form {
            spec: spec.to_string(),
        })?;
        let (target, query) = match rest.split_once('?') {
            Some((t, q)) => (t, Some(q)),
            None => (rest, None),
        };
        match scheme {
            "llc" => p.llc(target, query).map(TransportSpec::Llc),
            "tcp" => p.tcp(false, target, query).map(TransportSpec::Tcp),
            "tcp-uring" | "tcp+uring" => p.tcp(true, target, query).map(TransportSpec::TcpUring),
            _ => Err(SpecError::Scheme {
                spec: spec.to_string(),
                scheme: scheme.to_string(),
            }),
        }
    }
}

impl From<LlcSpec> for TransportSpec {
    fn from(s: LlcSpec) -> Self {
        TransportSpec::Llc(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> TransportSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn llc(s: &str) -> LlcSpec {
        match parse(s) {
            TransportSpec::Llc(l) => l,
            other => panic!("{s}: {other:?}"),
        }
    }

    fn tcp(s: &str) -> TcpSpec {
        match parse(s) {
            TransportSpec::Tcp(t) | TransportSpec::TcpUring(t) => t,
            other => panic!("{s}: {other:?}"),
        }
    }

    #[test]
    fn round_trips() {
        for s in [
            "llc://eth0",
            "llc://eth0?backend=xdp&attach=generic&port=0",
            "llc://llc0?backend=packet&port=5301&exclusive=true&sap=0x78",
            "llc://eth0?alone=true",
            "llc://eth0?idle_timeout_ms=2000",
            "llc://eth0?idle_timeout_ms=2000&keepalive_ms=100",
            "llc://eth0?keepalive_ms=300",
            "llc://eth0?auth=later",
            "llc://eth0?port=0&auth=off",
            "tcp://0.0.0.0:5201",
            "tcp://[fd00::1]:5201?busy_poll_us=off&idle_timeout_ms=off",
            "tcp://10.0.0.1:0?busy_poll_us=20&idle_timeout_ms=500&connect_timeout_ms=1000",
            "tcp-uring://10.0.0.1:5201",
            "tcp-uring://10.0.0.1:5201?coop_taskrun=true&ring_entries=64",
        ] {
            let spec = parse(s);
            assert_eq!(spec.to_string(), s);
            assert_eq!(parse(&spec.to_string()).to_string(), s);
        }
        // The alias prints as the canonical scheme; defaults given are not
        // printed.
        assert_eq!(
            parse("tcp+uring://10.0.0.1:1?busy_poll_us=50").to_string(),
            "tcp-uring://10.0.0.1:1"
        );
        assert_eq!(
            parse("llc://eth0?backend=auto&port=7&exclusive=0&sap=124").to_string(),
            "llc://eth0"
        );
    }

    #[test]
    fn no_interface_leaves_the_choice_to_the_stack() {
        for s in ["llc://", "llc://?backend=xdp&port=0"] {
            let l = llc(s);
            assert_eq!(l.ifname, "", "{s}");
            assert_eq!(parse(s).to_string(), s, "prints back");
        }
    }

    #[test]
    fn defaults() {
        let l = llc("llc://eth0");
        assert_eq!(l.ifname, "eth0");
        assert_eq!(
            (l.backend, l.attach, l.port, l.exclusive),
            (Backend::Auto, AttachMode::Auto, DEFAULT_PORT, false)
        );
        let d = LlcConfig::default();
        assert_eq!(l.config.sap, d.sap);
        assert_eq!(l.config.idle_timeout, d.idle_timeout);
        assert_eq!(l.config.keepalive_interval, d.keepalive_interval);
        let t = tcp("tcp://0.0.0.0:5201");
        assert_eq!(t.addr, "0.0.0.0:5201".parse().unwrap());
        let d = TcpConfig::default();
        assert_eq!(t.config.busy_poll, d.busy_poll);
        assert_eq!(t.config.uring_coop_taskrun, d.uring_coop_taskrun);
        assert!(matches!(
            parse("tcp-uring://[::]:1"),
            TransportSpec::TcpUring(_)
        ));
    }

    #[test]
    fn options_set_their_fields() {
        let l = llc("llc://eth0?backend=packet&attach=native&port=0&exclusive=1&sap=0x40");
        assert_eq!(
            (l.backend, l.attach, l.port, l.exclusive, l.config.sap),
            (Backend::Packet, AttachMode::Native, 0, true, 0x40)
        );
        // What the MPI shim does with its idle timeout.
        let l = llc("llc://eth0?idle_timeout_ms=200");
        assert_eq!(l.config.idle_timeout, Duration::from_millis(200));
        assert_eq!(l.config.keepalive_interval, Duration::from_millis(50));
        let l = llc("llc://eth0?idle_timeout_ms=20");
        assert_eq!(l.config.keepalive_interval, Duration::from_millis(10));
        // An explicit keepalive wins, in either order.
        for s in [
            "llc://eth0?keepalive_ms=7&idle_timeout_ms=200",
            "llc://eth0?idle_timeout_ms=200&keepalive_ms=7",
        ] {
            assert_eq!(llc(s).config.keepalive_interval, Duration::from_millis(7));
        }
        assert_eq!(llc("llc://eth0").auth, KeySource::Env);
        assert_eq!(llc("llc://eth0?auth=later").auth, KeySource::Later);
        let t = tcp("tcp-uring://1.2.3.4:5?coop_taskrun=true&busy_poll_us=off&ring_entries=8");
        assert!(t.config.uring_coop_taskrun);
        assert_eq!((t.config.busy_poll, t.config.ring_entries), (None, 8));
    }

    #[test]
    fn errors_say_what_is_wrong_and_what_is_allowed() {
        for (bad, says) in [
            ("eth0", "expected SCHEME://TARGET"),
            ("", "expected SCHEME://TARGET"),
            (
                "udp://1.2.3.4:5",
                "unknown transport \"udp\": expected llc, tcp or tcp-uring",
            ),
            ("llc://a/b", "is not an interface name"),
            ("llc://a_very_long_ifname", "at most 15 bytes"),
            (
                "llc://eth0?speed=10",
                "unknown option \"speed\" for llc://: expected backend, attach, port",
            ),
            (
                "llc://eth0?backend=dpdk",
                "backend=\"dpdk\": expected auto, xdp or packet",
            ),
            (
                "llc://eth0?attach=offload",
                "attach=\"offload\": expected auto, native or generic",
            ),
            (
                "llc://eth0?port=70000",
                "port=\"70000\": expected a number 0..=65535",
            ),
            ("llc://eth0?port=", "port=\"\": expected a number"),
            (
                "llc://eth0?exclusive=yes",
                "exclusive=\"yes\": expected true or false",
            ),
            (
                "llc://eth0?sap=0x41",
                "sap=\"0x41\": expected an individual SAP",
            ),
            ("llc://eth0?sap=0", "sap=\"0\": expected an individual SAP"),
            ("llc://eth0?sap=0x100", "sap=\"0x100\""),
            (
                "llc://eth0?idle_timeout_ms=1s",
                "expected a number of milliseconds",
            ),
            (
                "llc://eth0?keepalive_ms=-1",
                "expected a number of milliseconds",
            ),
            (
                "llc://eth0?auth=0f1e2d3c",
                "auth=\"0f1e2d3c\": expected env, off or later",
            ),
            ("llc://eth0?port", "option port=\"\": expected NAME=VALUE"),
            ("llc://eth0?port=1&port=2", "option port is given twice"),
            ("tcp://10.0.0.1", "\"10.0.0.1\" is not IP:PORT"),
            ("tcp://eth0", "is not IP:PORT"),
            (
                "tcp://1.2.3.4:5?coop_taskrun=true",
                "unknown option \"coop_taskrun\" for tcp://",
            ),
            (
                "tcp://1.2.3.4:5?ring_entries=8",
                "unknown option \"ring_entries\" for tcp://",
            ),
            (
                "tcp://1.2.3.4:5?backend=xdp",
                "expected busy_poll_us, idle_timeout_ms",
            ),
            (
                "tcp-uring://1.2.3.4:5?busy_poll_us=fast",
                "expected a number of µs or off",
            ),
            (
                "tcp-uring://1.2.3.4:5?idle_timeout_ms=x",
                "expected a number of ms or off",
            ),
            (
                "tcp-uring://1.2.3.4:5?connect_timeout_ms=off",
                "number of milliseconds",
            ),
            (
                "tcp-uring://1.2.3.4:5?ring_entries=0",
                "ring_entries=\"0\": expected a number 1..",
            ),
            (
                "tcp-uring://1.2.3.4:5?coop_taskrun=on",
                "expected true or false",
            ),
            (
                "tcp-uring://1.2.3.4:5?port=1",
                "for tcp-uring://: expected busy_poll_us",
            ),
        ] {
            let e = bad.parse::<TransportSpec>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.starts_with(&format!("transport spec {bad:?}")), "{e}");
        }
    }

    #[test]
    fn choices_print_as_they_parse() {
        for b in [Backend::Auto, Backend::Xdp, Backend::Packet] {
            assert_eq!(b.to_string().parse::<Backend>(), Ok(b));
        }
        for a in [AttachMode::Auto, AttachMode::Native, AttachMode::Generic] {
            assert_eq!(a.to_string().parse::<AttachMode>(), Ok(a));
        }
        assert_eq!(
            "XDP".parse::<Backend>().unwrap_err().to_string(),
            "\"XDP\": expected auto, xdp or packet"
        );
    }
}
