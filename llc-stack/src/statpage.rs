//! Live statistics of running endpoints, for `llc-stat`.
//!
//! An endpoint that publishes (see [`Stack::publish_stats`](crate::Stack::publish_stats))
//! owns one file of 64-bit words under [`DEFAULT_DIR`] (`/dev/shm/llc-stack/`),
//! named `<pid>.<n>.stat`: its address, its counters and drops by reason, and
//! one record per connection (peer, state, RTT and its variance, cwnd,
//! credit, bytes and messages each way, retransmissions). The process
//! rewrites it from its progress path at most every [`DEFAULT_INTERVAL`]
//! (and before it goes to sleep when something changed), so the frames'
//! path pays one clock comparison; a reader maps it read-only and copies it
//! under the page's seqlock, so it never sees half an update and never
//! slows the writer. The file is created whole (written under a temporary
//! name, then renamed) and removed when the endpoint closes; a process that
//! died leaves it behind, which readers recognise ([`Snapshot::alive`]) and
//! the next publisher of the host removes.
//!
//! Environment: `LLC_STAT=0` (or `off`) turns publishing off,
//! `LLC_STAT_DIR` moves the directory, `LLC_STAT_INTERVAL_MS` sets the
//! interval.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::proto::{ConnStats, DropStats, Endpoint, EndpointStats};
use crate::proto::{Connection, State};
use crate::sys::{ReadOnlyWords, SharedWords};
use crate::time::Instant;

/// Where pages live unless `LLC_STAT_DIR` says otherwise: tmpfs, private to
/// the host (and to a test host that mounts its own /dev/shm).
pub const DEFAULT_DIR: &str = "/dev/shm/llc-stack";

/// How often a busy endpoint rewrites its page: often enough for a
/// one-second `--watch`, rare enough to cost nothing measurable.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// Connections a page has room for; more are counted but not listed.
/// Pages are sparse files: room costs memory only once written.
pub const CAPACITY: usize = 1024;

const MAGIC: u64 = u64::from_le_bytes(*b"LLCSTAT\0");
/// Bumped whenever the layout below changes.
const LAYOUT: u64 = 1;

/// Header words.
mod h {
    pub const MAGIC: usize = 0;
    pub const LAYOUT: usize = 1;
    /// Seqlock: odd while the writer updates the page.
    pub const SEQ: usize = 2;
    pub const PID: usize = 3;
    /// The process's start time (clock ticks since boot, /proc/PID/stat
    /// field 22): tells a live owner from a reused pid.
    pub const START: usize = 4;
    pub const CAPACITY: usize = 5;
    pub const N_EP: usize = 6;
    pub const N_DROP: usize = 7;
    pub const N_CONN: usize = 8;
    pub const PUBLISHED_MS: usize = 9;
    pub const PUBLISHES: usize = 10;
    pub const CONNECTIONS: usize = 11;
    pub const MAC: usize = 12;
    pub const SAP: usize = 13;
    /// Bound port, or `u64::MAX` for none.
    pub const PORT: usize = 14;
    pub const MTU: usize = 15;
    pub const IFNAME: usize = 16;
    pub const IFNAME_WORDS: usize = 4;
    pub const LABEL: usize = 20;
    pub const LABEL_WORDS: usize = 8;
    pub const BACKEND: usize = 28;
    pub const BACKEND_WORDS: usize = 8;
    pub const WORDS: usize = 64;
}

const _: () = assert!(h::BACKEND + h::BACKEND_WORDS <= h::WORDS);

/// Endpoint counters, then drops by reason, from this word.
const EP_OFF: usize = h::WORDS;
const EP_WORDS: usize = 64;

/// Words of one connection record.
mod c {
    pub const PEER_MAC: usize = 0;
    pub const PEER_PORT: usize = 1;
    pub const LOCAL_PORT: usize = 2;
    pub const STATE: usize = 3;
    pub const INBOUND: usize = 4;
    pub const SRTT_NS: usize = 5;
    pub const RTTVAR_NS: usize = 6;
    pub const CWND: usize = 7;
    pub const SEND_CREDIT: usize = 8;
    pub const RECV_WINDOW: usize = 9;
    pub const IN_FLIGHT: usize = 10;
    pub const SEND_QUEUED: usize = 11;
    pub const FRAG_LEN: usize = 12;
    /// [`ConnStats::counters`](crate::proto::ConnStats::counters) from here.
    pub const COUNTERS: usize = 16;
    pub const WORDS: usize = 64;
}
const CONN_OFF: usize = EP_OFF + EP_WORDS;

const fn page_words(capacity: usize) -> usize {
    CONN_OFF + capacity * c::WORDS
}

/// Names of the counters, in the order they are stored.
fn ep_names() -> Vec<&'static str> {
    EndpointStats::default()
        .counters()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}
fn drop_names() -> Vec<&'static str> {
    DropStats::default()
        .counters()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}
fn conn_names() -> Vec<&'static str> {
    ConnStats::default()
        .counters()
        .into_iter()
        .map(|(n, _)| n)
        .collect()
}

/// What a publisher says about itself beyond the endpoint's own state.
#[derive(Clone, Debug, Default)]
pub struct PageInfo {
    /// Who publishes (e.g. `llc-ping responder`, `msg-layer`); at most 64 bytes shown.
    pub label: String,
    /// The interface (at most 32 bytes shown).
    pub ifname: String,
    /// The link backend (`Stack::publish_stats` fills it from the device).
    pub backend: String,
    /// The link MTU (likewise).
    pub mtu: usize,
}

/// What can go wrong reading a page.
#[derive(Debug, thiserror::Error)]
pub enum StatError {
    /// The file could not be opened or mapped.
    #[error("{path}: {source}")]
    Io {
        /// The page.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Not a statistics page, or one of another layout version.
    #[error("{path}: not a statistics page of layout {LAYOUT} ({why})")]
    Format {
        /// The page.
        path: PathBuf,
        /// What did not match.
        why: String,
    },
    /// The writer kept updating while we read (it would have to publish
    /// continuously; a page is rewritten at most every few milliseconds).
    #[error("{path}: no consistent snapshot after {0} tries", READ_TRIES)]
    Busy {
        /// The page.
        path: PathBuf,
    },
}

const READ_TRIES: usize = 1000;

/// The page's directory: `LLC_STAT_DIR` or [`DEFAULT_DIR`].
pub fn dir_from_env() -> PathBuf {
    std::env::var_os("LLC_STAT_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// False when `LLC_STAT` is `0`, `off`, `no` or `false`.
pub fn enabled_by_env() -> bool {
    !matches!(
        std::env::var("LLC_STAT").as_deref().map(str::trim),
        Ok("0" | "off" | "no" | "false")
    )
}

/// `LLC_STAT_INTERVAL_MS` or [`DEFAULT_INTERVAL`].
pub fn interval_from_env() -> Duration {
    std::env::var("LLC_STAT_INTERVAL_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(DEFAULT_INTERVAL, Duration::from_millis)
}

/// The start time of process `pid` (field 22 of /proc/PID/stat), `None`
/// when there is no such process.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// One endpoint's page, written by its process.
pub struct Publisher {
    words: SharedWords,
    path: PathBuf,
    interval: Duration,
    due: Instant,
    /// Frames moved at the last publication: an unchanged count means
    /// there is nothing new to write before a sleep.
    published_activity: u64,
    publishes: u64,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("path", &self.path)
            .field("interval", &self.interval)
            .finish_non_exhaustive()
    }
}

/// Distinguishes the pages of one process.
static NEXT_PAGE: AtomicU32 = AtomicU32::new(0);

fn pack(words: &[AtomicU64], at: usize, n: usize, s: &str) {
    let bytes = s.as_bytes();
    for i in 0..n {
        let mut w = [0u8; 8];
        for (j, b) in w.iter_mut().enumerate() {
            *b = bytes.get(i * 8 + j).copied().unwrap_or(0);
        }
        words[at + i].store(u64::from_le_bytes(w), Ordering::Relaxed);
    }
}

fn unpack(words: &[u64], at: usize, n: usize) -> String {
    let bytes: Vec<u8> = words[at..at + n]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Publisher {
    /// Create this endpoint's page in `dir` (made if missing, open to every
    /// user like /tmp), removing the pages of processes that have died.
    pub fn create_in(dir: &Path, info: &PageInfo, interval: Duration) -> io::Result<Publisher> {
        if !dir.is_dir() {
            fs::create_dir_all(dir)?;
            // Sticky and writable by all: any user's endpoints publish here.
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o1777));
        }
        remove_stale(dir);
        let pid = std::process::id();
        // A fresh name, never an existing file: the directory is writable by
        // all, and following someone's symlink would write where they chose.
        let mut tries = 0;
        let (path, tmp, file) = loop {
            tries += 1;
            let n = NEXT_PAGE.fetch_add(1, Ordering::Relaxed);
            let tmp = dir.join(format!(".{pid}.{n}.tmp"));
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                // The owner's alone (root reads every page): the counters of
                // one user's jobs are not another user's business.
                .mode(0o600)
                .open(&tmp)
            {
                Ok(f) => break (dir.join(format!("{pid}.{n}.stat")), tmp, f),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 16 => continue,
                Err(e) => return Err(e),
            }
        };
        let built = (|| {
            file.set_len((page_words(CAPACITY) * 8) as u64)?;
            let words = SharedWords::map(&file)?;
            let w = words.words();
            let set = |i: usize, v: u64| w[i].store(v, Ordering::Relaxed);
            set(h::MAGIC, MAGIC);
            set(h::LAYOUT, LAYOUT);
            set(h::PID, pid as u64);
            set(h::START, process_start_time(pid).unwrap_or(0));
            set(h::CAPACITY, CAPACITY as u64);
            set(h::N_EP, ep_names().len() as u64);
            set(h::N_DROP, drop_names().len() as u64);
            set(h::N_CONN, conn_names().len() as u64);
            pack(w, h::IFNAME, h::IFNAME_WORDS, &info.ifname);
            pack(w, h::LABEL, h::LABEL_WORDS, &info.label);
            pack(w, h::BACKEND, h::BACKEND_WORDS, &info.backend);
            set(h::MTU, info.mtu as u64);
            fs::rename(&tmp, &path)?;
            Ok(words)
        })();
        let words = match built {
            Ok(w) => w,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        Ok(Publisher {
            words,
            path,
            interval,
            due: Instant::ZERO,
            published_activity: u64::MAX,
            publishes: 0,
        })
    }

    /// The page.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// When the next publication is due.
    #[inline]
    pub fn due(&self) -> Instant {
        self.due
    }

    /// Publish when the interval has passed since the last publication.
    #[inline]
    pub fn tick(&mut self, ep: &Endpoint, now: Instant) {
        if now >= self.due {
            self.publish(ep, now);
        }
    }

    /// Publish when frames moved since the last publication (the caller is
    /// about to sleep: what the page shows must not stay behind).
    pub fn flush(&mut self, ep: &Endpoint, now: Instant) {
        let s = ep.stats();
        if s.rx_frames + s.tx_frames != self.published_activity {
            self.publish(ep, now);
        }
    }

    /// Rewrite the page from the endpoint's current state.
    #[cold]
    pub fn publish(&mut self, ep: &Endpoint, now: Instant) {
        self.due = now + self.interval;
        self.publishes += 1;
        let w = self.words.words();
        let seq = w[h::SEQ].load(Ordering::Relaxed);
        w[h::SEQ].store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        let set = |i: usize, v: u64| w[i].store(v, Ordering::Relaxed);
        let unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        set(h::PUBLISHED_MS, unix_ms);
        set(h::PUBLISHES, self.publishes);
        set(h::MAC, mac_word(ep.mac().0));
        set(h::SAP, ep.sap() as u64);
        set(h::PORT, ep.bound_port().map_or(u64::MAX, u64::from));
        let stats = ep.stats();
        self.published_activity = stats.rx_frames + stats.tx_frames;
        let all = stats.counters().into_iter().chain(stats.dropped.counters());
        for (i, (_, v)) in (EP_OFF..).zip(all) {
            set(i, v);
        }
        let mut n = 0;
        for (handle, cs) in ep.connection_stats_all() {
            if n < CAPACITY {
                if let Some(conn) = ep.connection(handle) {
                    let base = CONN_OFF + n * c::WORDS;
                    let (peer_mac, _) = ep.peer(handle).unwrap_or_default();
                    write_conn(w, base, conn, cs, peer_mac.0, ep.is_inbound(handle));
                }
            }
            n += 1;
        }
        set(h::CONNECTIONS, n as u64);
        w[h::SEQ].store(seq.wrapping_add(2), Ordering::Release);
    }
}

fn mac_word(mac: [u8; 6]) -> u64 {
    mac.iter().fold(0u64, |acc, &b| (acc << 8) | b as u64)
}

fn write_conn(
    w: &[AtomicU64],
    base: usize,
    conn: &Connection,
    cs: &ConnStats,
    peer_mac: [u8; 6],
    inbound: Option<bool>,
) {
    let set = |i: usize, v: u64| w[base + i].store(v, Ordering::Relaxed);
    set(c::PEER_MAC, mac_word(peer_mac));
    set(c::PEER_PORT, conn.peer_port() as u64);
    set(c::LOCAL_PORT, conn.local_port() as u64);
    set(c::STATE, state_code(conn.state()));
    set(c::INBOUND, inbound.map_or(2, u64::from));
    set(c::SRTT_NS, conn.srtt().as_nanos() as u64);
    set(c::RTTVAR_NS, conn.rtt_var().as_nanos() as u64);
    set(c::CWND, conn.cwnd() as u64);
    set(c::SEND_CREDIT, conn.send_credit() as u64);
    set(c::RECV_WINDOW, conn.window_frames() as u64);
    set(c::IN_FLIGHT, conn.in_flight() as u64);
    set(c::SEND_QUEUED, conn.send_buffered() as u64);
    set(c::FRAG_LEN, conn.fragment_len() as u64);
    for (k, (_, v)) in cs.counters().into_iter().enumerate() {
        set(c::COUNTERS + k, v);
    }
}

fn state_code(s: State) -> u64 {
    match s {
        State::SynSent => 0,
        State::SynReceived => 1,
        State::Established => 2,
        State::Closing => 3,
        State::Closed => 4,
    }
}

fn state_name(code: u64) -> &'static str {
    match code {
        0 => "syn-sent",
        1 => "syn-received",
        2 => "established",
        3 => "closing",
        4 => "closed",
        _ => "unknown",
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Remove the pages in `dir` whose process has died (a killed process
/// cannot remove its own).
pub fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(pid) = page_pid(&path) else {
            continue;
        };
        if process_start_time(pid).is_none() {
            let _ = fs::remove_file(&path);
        }
    }
}

/// The pid a page's name (`<pid>.<n>.stat`, or a `.<pid>.<n>.tmp` being
/// made) carries.
fn page_pid(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let name = name.strip_prefix('.').unwrap_or(name);
    let (pid, rest) = name.split_once('.')?;
    (rest.ends_with(".stat") || rest.ends_with(".tmp"))
        .then(|| pid.parse().ok())
        .flatten()
}

/// One connection as its endpoint last published it.
#[derive(Clone, Debug, PartialEq)]
pub struct ConnSnapshot {
    /// Peer MAC.
    pub peer_mac: [u8; 6],
    /// Peer port.
    pub peer_port: u16,
    /// Our port.
    pub local_port: u16,
    /// `syn-sent`, `syn-received`, `established`, `closing` or `closed`.
    pub state: &'static str,
    /// Whether the peer opened it (`None`: unknown).
    pub inbound: Option<bool>,
    /// Smoothed RTT, ns (0 before the first sample).
    pub srtt_ns: u64,
    /// RTT mean deviation, ns.
    pub rttvar_ns: u64,
    /// Congestion window, frames.
    pub cwnd: u64,
    /// Frames the peer's credit still allows.
    pub send_credit: u64,
    /// Credit window we grant, frames.
    pub recv_window: u64,
    /// Frames in flight.
    pub in_flight: u64,
    /// Bytes queued or unacknowledged.
    pub send_queued: u64,
    /// Payload bytes per frame.
    pub fragment_len: u64,
    /// [`ConnStats::counters`] by name.
    pub counters: Vec<(&'static str, u64)>,
}

impl ConnSnapshot {
    /// The counter called `name` (0 when unknown).
    pub fn counter(&self, name: &str) -> u64 {
        lookup(&self.counters, name)
    }
}

fn lookup(list: &[(&'static str, u64)], name: &str) -> u64 {
    list.iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| *v)
}

/// One endpoint's page, copied consistently.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The page.
    pub path: PathBuf,
    /// The publishing process.
    pub pid: u32,
    /// Its start time (clock ticks since boot).
    pub start_time: u64,
    /// True when that process still runs (same pid, same start time).
    pub alive: bool,
    /// Who publishes.
    pub label: String,
    /// Interface.
    pub ifname: String,
    /// Link backend (e.g. `af_packet`, `af_xdp/copy/native`).
    pub backend: String,
    /// Interface MAC.
    pub mac: [u8; 6],
    /// SAP.
    pub sap: u8,
    /// Bound port.
    pub port: Option<u16>,
    /// Link MTU.
    pub mtu: u64,
    /// When the page was last written (ms since the Unix epoch; 0: never).
    pub published_unix_ms: u64,
    /// How many times it was written.
    pub publishes: u64,
    /// Connections the endpoint has (may exceed `connections.len()`).
    pub connection_count: u64,
    /// [`EndpointStats::counters`] by name.
    pub endpoint: Vec<(&'static str, u64)>,
    /// [`DropStats::counters`] by name.
    pub drops: Vec<(&'static str, u64)>,
    /// The connections listed.
    pub connections: Vec<ConnSnapshot>,
}

impl Snapshot {
    /// The endpoint counter called `name` (0 when unknown).
    pub fn counter(&self, name: &str) -> u64 {
        lookup(&self.endpoint, name)
    }
}

fn mac_bytes(w: u64) -> [u8; 6] {
    let b = w.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

/// Copy the page at `path` (a consistent snapshot under its seqlock).
pub fn read_page(path: &Path) -> Result<Snapshot, StatError> {
    let io_err = |source| StatError::Io {
        path: path.to_owned(),
        source,
    };
    let format = |why: String| StatError::Format {
        path: path.to_owned(),
        why,
    };
    let file = File::open(path).map_err(io_err)?;
    let words = ReadOnlyWords::map(&file).map_err(io_err)?;
    if words.len() < CONN_OFF {
        return Err(format(format!("{} words", words.len())));
    }
    let load = |i| words.load(i, Ordering::Relaxed);
    if load(h::MAGIC) != MAGIC {
        return Err(format("bad magic".into()));
    }
    if load(h::LAYOUT) != LAYOUT {
        return Err(format(format!("layout {}", load(h::LAYOUT))));
    }
    let (ep_n, drop_n, conn_n) = (ep_names(), drop_names(), conn_names());
    if load(h::N_EP) != ep_n.len() as u64
        || load(h::N_DROP) != drop_n.len() as u64
        || load(h::N_CONN) != conn_n.len() as u64
    {
        return Err(format("counter sets differ (another version)".into()));
    }
    let capacity = load(h::CAPACITY) as usize;
    if words.len() < page_words(capacity) {
        return Err(format(format!(
            "{} words for {capacity} connections",
            words.len()
        )));
    }
    for _ in 0..READ_TRIES {
        let seq = words.load(h::SEQ, Ordering::Acquire);
        if seq % 2 == 1 {
            std::hint::spin_loop();
            std::thread::yield_now();
            continue;
        }
        let listed = (load(h::CONNECTIONS) as usize).min(capacity);
        let copy: Vec<u64> = (0..CONN_OFF + listed * c::WORDS).map(load).collect();
        fence(Ordering::Acquire);
        if words.load(h::SEQ, Ordering::Relaxed) != seq {
            continue;
        }
        return Ok(decode(path, &copy, listed, &ep_n, &drop_n, &conn_n));
    }
    Err(StatError::Busy {
        path: path.to_owned(),
    })
}

fn decode(
    path: &Path,
    w: &[u64],
    listed: usize,
    ep_n: &[&'static str],
    drop_n: &[&'static str],
    conn_n: &[&'static str],
) -> Snapshot {
    let pid = w[h::PID] as u32;
    let start_time = w[h::START];
    let named = |names: &[&'static str], at: usize| -> Vec<(&'static str, u64)> {
        names
            .iter()
            .enumerate()
            .map(|(k, n)| (*n, w[at + k]))
            .collect()
    };
    let connections = (0..listed)
        .map(|i| {
            let b = CONN_OFF + i * c::WORDS;
            ConnSnapshot {
                peer_mac: mac_bytes(w[b + c::PEER_MAC]),
                peer_port: w[b + c::PEER_PORT] as u16,
                local_port: w[b + c::LOCAL_PORT] as u16,
                state: state_name(w[b + c::STATE]),
                inbound: match w[b + c::INBOUND] {
                    0 => Some(false),
                    1 => Some(true),
                    _ => None,
                },
                srtt_ns: w[b + c::SRTT_NS],
                rttvar_ns: w[b + c::RTTVAR_NS],
                cwnd: w[b + c::CWND],
                send_credit: w[b + c::SEND_CREDIT],
                recv_window: w[b + c::RECV_WINDOW],
                in_flight: w[b + c::IN_FLIGHT],
                send_queued: w[b + c::SEND_QUEUED],
                fragment_len: w[b + c::FRAG_LEN],
                counters: named(conn_n, b + c::COUNTERS),
            }
        })
        .collect();
    Snapshot {
        path: path.to_owned(),
        pid,
        start_time,
        alive: process_start_time(pid).is_some_and(|t| start_time == 0 || t == start_time),
        label: unpack(w, h::LABEL, h::LABEL_WORDS),
        ifname: unpack(w, h::IFNAME, h::IFNAME_WORDS),
        backend: unpack(w, h::BACKEND, h::BACKEND_WORDS),
        mac: mac_bytes(w[h::MAC]),
        sap: w[h::SAP] as u8,
        port: u16::try_from(w[h::PORT]).ok(),
        mtu: w[h::MTU],
        published_unix_ms: w[h::PUBLISHED_MS],
        publishes: w[h::PUBLISHES],
        connection_count: w[h::CONNECTIONS],
        endpoint: named(ep_n, EP_OFF),
        drops: named(drop_n, EP_OFF + ep_n.len()),
        connections,
    }
}

/// Every page in `dir`, in name order, with what went wrong for the ones
/// that could not be read. A missing directory means no endpoint.
pub fn read_dir(dir: &Path) -> io::Result<Vec<Result<Snapshot, StatError>>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "stat"))
        // Regular files only: not a FIFO or a symlink someone left there.
        .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file()))
        .collect();
    paths.sort_by_key(|p| (page_pid(p), p.clone()));
    Ok(paths
        .iter()
        .map(|p| read_page(p))
        .filter(|r| {
            // A page removed between listing and opening: its endpoint
            // closed. A page the reader may not open: another user's
            // endpoint, not the reader's to see.
            !matches!(r, Err(StatError::Io { source, .. })
                if matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::sim::{Sim, SimConfig};
    use crate::proto::Config;
    use crate::rng::Rng;
    use crate::wire::MacAddr;
    use crate::Stack;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "llc-statpage-{}-{}",
            std::process::id(),
            NEXT_PAGE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_page_shows_the_connections_and_follows_the_traffic() {
        let dir = scratch();
        let sim = Sim::new(SimConfig {
            latency: Duration::from_micros(20),
            ..Default::default()
        });
        let (ma, mb) = (MacAddr([2, 0, 0, 0, 0, 1]), MacAddr([2, 0, 0, 0, 0, 2]));
        let mut a = Stack::new(sim.port(), Config::default(), ma, Rng::new(1));
        let mut b = Stack::new(sim.port(), Config::default(), mb, Rng::new(2));
        b.endpoint_mut().listen(7);
        let info = PageInfo {
            label: "test client".into(),
            ifname: "sim0".into(),
            backend: "sim".into(),
            mtu: 1500,
        };
        let mut p = Publisher::create_in(&dir, &info, Duration::from_millis(1)).unwrap();
        let path = p.path().to_owned();
        assert!(path.starts_with(&dir));
        let mut now = Instant::ZERO;
        let conn = a.endpoint_mut().connect(now, mb, 7, None).unwrap();
        let step = |a: &mut Stack<_>, b: &mut Stack<_>, now: Instant| {
            a.poll(now).unwrap();
            b.poll_rx(now);
            while let Some((h, ev)) = b.endpoint_mut().poll_event() {
                if let crate::proto::Event::Message { data, .. } = ev {
                    b.endpoint_mut().send(h, data).unwrap();
                }
            }
            b.poll_tx(now).unwrap();
            a.poll_rx(now);
            while a.endpoint_mut().poll_event().is_some() {}
        };
        for _ in 0..20 {
            now += Duration::from_micros(50);
            step(&mut a, &mut b, now);
        }
        p.publish(a.endpoint(), now);
        let s0 = read_page(&path).unwrap();
        assert_eq!(s0.pid, std::process::id());
        assert!(s0.alive);
        assert_eq!(s0.label, "test client");
        assert_eq!(s0.ifname, "sim0");
        assert_eq!(s0.backend, "sim");
        assert_eq!(s0.mac, ma.0);
        assert_eq!(s0.mtu, 1500);
        assert_eq!(s0.connection_count, 1);
        let c0 = &s0.connections[0];
        assert_eq!(c0.peer_mac, mb.0);
        assert_eq!(c0.peer_port, 7);
        assert_eq!(c0.state, "established");
        assert_eq!(c0.inbound, Some(false));
        assert_eq!(c0.counter("messages_sent"), 0);
        for i in 0..5u8 {
            a.endpoint_mut().send(conn, vec![i; 100]).unwrap();
            for _ in 0..10 {
                now += Duration::from_micros(50);
                step(&mut a, &mut b, now);
            }
        }
        // Due: the interval passed since the first publication.
        let before = read_page(&path).unwrap().publishes;
        p.tick(a.endpoint(), now);
        let s1 = read_page(&path).unwrap();
        assert_eq!(s1.publishes, before + 1);
        // Not due again within the interval.
        p.tick(a.endpoint(), now + Duration::from_micros(999));
        assert_eq!(read_page(&path).unwrap().publishes, before + 1);
        let c1 = &s1.connections[0];
        assert_eq!(c1.counter("messages_sent"), 5);
        assert_eq!(c1.counter("payload_bytes_sent"), 500);
        assert_eq!(c1.counter("messages_received"), 5);
        assert_eq!(c1.counter("payload_bytes_received"), 500);
        assert!(c1.srtt_ns >= 40_000, "srtt {}", c1.srtt_ns);
        assert!(c1.cwnd > 0 && c1.recv_window > 0);
        assert!(s1.counter("tx_frames") > s0.counter("tx_frames"));
        // Nothing moved: a flush before a sleep writes nothing.
        p.flush(a.endpoint(), now);
        assert_eq!(read_page(&path).unwrap().publishes, before + 1);
        let listed = read_dir(&dir).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].as_ref().unwrap().path, path);
        drop(p);
        assert!(!path.exists(), "removed with its endpoint");
        assert!(read_dir(&dir).unwrap().is_empty());
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn pages_of_dead_processes_are_stale_and_removed() {
        let dir = scratch();
        let p = Publisher::create_in(&dir, &PageInfo::default(), DEFAULT_INTERVAL).unwrap();
        // A page as a killed process leaves it: copy ours under an unused pid.
        let dead = (1..u32::MAX)
            .map(|i| 4_000_000 - i)
            .find(|pid| process_start_time(*pid).is_none())
            .unwrap();
        let stale = dir.join(format!("{dead}.0.stat"));
        fs::copy(p.path(), &stale).unwrap();
        // Our own page read under the dead pid's name still names our pid:
        // rewrite the pid word as the dead process would have.
        let s = read_page(&stale).unwrap();
        assert!(s.alive, "the copy still names a live pid");
        {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&stale)
                .unwrap();
            let w = SharedWords::map(&f).unwrap();
            w.words()[h::PID].store(dead as u64, Ordering::Relaxed);
        }
        assert!(!read_page(&stale).unwrap().alive);
        let _q = Publisher::create_in(&dir, &PageInfo::default(), DEFAULT_INTERVAL).unwrap();
        assert!(!stale.exists(), "the next publisher removed it");
        assert!(p.path().exists());
        drop(p);
        drop(_q);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_layout_has_room_for_every_counter() {
        assert!(ep_names().len() + drop_names().len() <= EP_WORDS);
        assert!(c::COUNTERS + conn_names().len() <= c::WORDS);
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let dir = scratch();
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("1.0.stat");
        fs::write(&f, vec![0u8; 64]).unwrap();
        assert!(matches!(read_page(&f), Err(StatError::Format { .. })));
        fs::write(&f, vec![0u8; 4]).unwrap();
        assert!(matches!(read_page(&f), Err(StatError::Io { .. })));
        let _ = fs::remove_dir_all(&dir);
    }
}
