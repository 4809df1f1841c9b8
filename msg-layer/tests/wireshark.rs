//! The Wireshark dissector (tools/wireshark/llc_stack.lua) against captures
//! the project's own PcapWriter writes: the transport's handshake, data with
//! loss and retransmission, SACK blocks, a RESET and corrupted frames over the
//! simulated link with injected faults, then message-layer packets (eager,
//! rendezvous, active message). tshark's field output is checked against the
//! frames as the stack's own parser reads them and against what was sent.
//!
//! Needs `tshark` (scripts/install-deps.sh installs it); without it the test
//! prints SKIPPED. `LLC_WIRESHARK_KEEP=DIR` keeps the captures in DIR.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use llc_stack::link::fault::{FaultConfig, FaultInjector};
use llc_stack::link::pcap::PcapWriter;
use llc_stack::link::sim::{Sim, SimConfig, SimPort};
use llc_stack::proto::{Config as StackConfig, ConnHandle, ConnectionError, Event};
use llc_stack::rng::Rng;
use llc_stack::wire::{self, AuthKey, Body, MacAddr, WireError};
use llc_stack::{Instant, Stack};
use msg_layer::transport::llc::{LlcConfig, LlcTransport};
use msg_layer::{Config, Endpoint, Select, Source, Space, Tag};

const MAC_A: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xa]);
const MAC_B: MacAddr = MacAddr([2, 0, 0, 0, 0, 0xb]);
const PORT_B: u16 = 9;
const CLOSED_PORT: u16 = 99;
const SEED: u64 = 25;

fn dissector() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/wireshark/llc_stack.lua")
}

/// tshark's version line, or why it cannot run.
fn tshark() -> Result<(), String> {
    match Command::new("tshark").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("tshark --version exited with {}", o.status)),
        Err(e) => Err(format!(
            "tshark is not installed ({e}); scripts/install-deps.sh installs it"
        )),
    }
}

/// Where captures go: a fresh scratch directory, or `LLC_WIRESHARK_KEEP`.
fn capture_dir(name: &str) -> (PathBuf, Option<Scratch>) {
    if let Ok(d) = std::env::var("LLC_WIRESHARK_KEEP") {
        let d = PathBuf::from(d);
        std::fs::create_dir_all(&d).unwrap();
        return (d, None);
    }
    let d = std::env::temp_dir().join(format!("llc-wireshark-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    (d.clone(), Some(Scratch(d)))
}

/// Removes its directory on drop, also when the test panics.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs tshark with the dissector over `pcap` and returns one map of
/// field -> value per frame (tab-separated `-T fields` output).
fn tshark_fields(
    pcap: &Path,
    fields: &[&str],
    filter: Option<&str>,
) -> Vec<BTreeMap<String, String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n")
        .arg("-X")
        .arg(format!("lua_script:{}", dissector().display()))
        .arg("-r")
        .arg(pcap)
        .args([
            "-T",
            "fields",
            "-E",
            "separator=\t",
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=,",
        ]);
    if let Some(f) = filter {
        cmd.args(["-Y", f]);
    }
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    // A Lua error in the dissector shows in stderr or as a malformed-packet
    // note; either is a failure of the dissector.
    assert!(
        !stderr.contains("Lua"),
        "tshark reported a Lua problem: {stderr}"
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            fields
                .iter()
                .zip(l.split('\t'))
                .filter(|(_, v)| !v.is_empty())
                .map(|(f, v)| (f.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The frames of a libpcap file (the classic format PcapWriter writes).
fn pcap_frames(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[0..4], &[0xd4, 0xc3, 0xb2, 0xa1], "little-endian pcap");
    let mut at = 24;
    let mut v = Vec::new();
    while at + 16 <= b.len() {
        let caplen = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        v.push(b[at + 16..at + 16 + caplen].to_vec());
        at += 16 + caplen;
    }
    v
}

type Node = Stack<PcapWriter<FaultInjector<SimPort>>>;
type Peer = Stack<FaultInjector<SimPort>>;

/// Node A (captured) and node B on a simulated segment with a virtual clock.
struct Bed {
    a: Node,
    b: Peer,
    now: Instant,
    events_a: Vec<(ConnHandle, Event)>,
    events_b: Vec<(ConnHandle, Event)>,
}

impl Bed {
    /// A (captured to `path`) and B on a simulated segment with MTU 9000.
    fn new(path: &Path, cfg: StackConfig, a_faults: FaultConfig, b_faults: FaultConfig) -> Bed {
        let sim = Sim::new(SimConfig {
            mtu: 9000,
            ..SimConfig::default()
        });
        let a = Stack::new(
            PcapWriter::create(FaultInjector::new(sim.port(), a_faults, SEED), path).unwrap(),
            cfg.clone(),
            MAC_A,
            Rng::new(SEED + 1),
        );
        let b = Stack::new(
            FaultInjector::new(sim.port(), b_faults, SEED + 2),
            cfg,
            MAC_B,
            Rng::new(SEED + 3),
        );
        Bed {
            a,
            b,
            now: Instant::from_millis(1),
            events_a: Vec::new(),
            events_b: Vec::new(),
        }
    }

    fn round(&mut self) {
        self.a.poll_rx(self.now);
        while let Some(ev) = self.a.endpoint_mut().poll_event() {
            self.events_a.push(ev);
        }
        self.a.poll_tx(self.now).unwrap();
        self.b.poll_rx(self.now);
        while let Some(ev) = self.b.endpoint_mut().poll_event() {
            self.events_b.push(ev);
        }
        self.b.poll_tx(self.now).unwrap();
    }

    fn advance(&mut self) -> bool {
        let next = [
            self.a.device().inner().inner().next_arrival(),
            self.b.device().inner().next_arrival(),
            self.a.endpoint_mut().poll_timeout(),
            self.b.endpoint_mut().poll_timeout(),
            self.a.device().inner().next_release(),
            self.b.device().next_release(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Runs until `done` holds; panics after `limit` of virtual time.
    fn run(&mut self, limit: Duration, what: &str, mut done: impl FnMut(&Bed) -> bool) {
        let end = self.now + limit;
        loop {
            self.round();
            if done(self) {
                return;
            }
            assert!(
                self.advance() && self.now <= end,
                "simulation: {what} did not happen"
            );
        }
    }
}

/// What the transport scenario sent, to check the dissector's output against.
struct Sent {
    /// Messages A sent to B: (msg_id, content).
    messages: Vec<(u32, Vec<u8>)>,
}

/// Writes the transport capture (taken at A, behind A's fault injector):
/// handshake, messages of one fragment (802.3 length form) and of several
/// jumbo fragments (EtherType 0x8870) while B loses 8% of what it receives
/// (retransmissions, SACK blocks) and A receives 4% of its frames corrupted,
/// then a connection to a port nobody listens on (RESET).
fn transport_capture(path: &Path) -> Sent {
    let a_faults = FaultConfig {
        corrupt: 0.04,
        ..FaultConfig::default()
    };
    let b_faults = FaultConfig {
        loss: 0.08,
        ..FaultConfig::default()
    };
    let mut bed = Bed::new(path, StackConfig::default(), a_faults, b_faults);
    bed.b.endpoint_mut().listen(PORT_B);
    let now = bed.now;
    let conn = bed
        .a
        .endpoint_mut()
        .connect(now, MAC_B, PORT_B, None)
        .unwrap();
    bed.run(Duration::from_secs(5), "handshake", |b| {
        b.events_a
            .iter()
            .any(|e| e.0 == conn && e.1 == Event::Connected)
    });
    let mut r = Rng::new(SEED + 4);
    let mut messages = Vec::new();
    for i in 0..60u32 {
        let len = match i % 6 {
            0 => 5,
            1 => 20_000, // three jumbo fragments
            2 => 1_400,  // one frame, PDU under 1500: length form
            _ => 200 + (r.below(1000) as usize),
        };
        let data: Vec<u8> = (0..len).map(|_| r.next_u32() as u8).collect();
        let id = bed.a.endpoint_mut().send(conn, data.clone()).unwrap();
        messages.push((id, data));
    }
    let want = messages.len();
    bed.run(Duration::from_secs(30), "delivery of every message", |b| {
        b.events_b
            .iter()
            .filter(|e| matches!(e.1, Event::Message { .. }))
            .count()
            == want
            && b.events_a
                .iter()
                .filter(|e| matches!(e.1, Event::Acked { .. }))
                .count()
                == want
    });
    let got: Vec<&Vec<u8>> = bed
        .events_b
        .iter()
        .filter_map(|e| match &e.1 {
            Event::Message { data, .. } => Some(data),
            _ => None,
        })
        .collect();
    for (m, g) in messages.iter().zip(&got) {
        assert!(m.1 == **g, "message {} arrived intact", m.0);
    }
    // A SYN to a port nobody listens on: B answers RESET.
    let now = bed.now;
    let refused = bed
        .a
        .endpoint_mut()
        .connect(now, MAC_B, CLOSED_PORT, None)
        .unwrap();
    bed.run(Duration::from_secs(10), "refusal", |b| {
        b.events_a.iter().any(|e| {
            e.0 == refused && e.1 == Event::Closed(Some(ConnectionError::Refused(CLOSED_PORT)))
        })
    });
    // Dropping A flushes its capture.
    drop(bed);
    Sent { messages }
}

/// The transport fields the test reads, in tshark's `-e` order.
const TRANSPORT_FIELDS: &[&str] = &[
    "frame.number",
    "eth.src",
    "eth.type",
    "eth.len",
    "llcstack.version",
    "llcstack.type",
    "llcstack.flags",
    "llcstack.sack_count",
    "llcstack.src_port",
    "llcstack.dst_port",
    "llcstack.src_cookie",
    "llcstack.dst_cookie",
    "llcstack.seq",
    "llcstack.ack",
    "llcstack.window_end",
    "llcstack.msg_id",
    "llcstack.msg_len",
    "llcstack.frag_off",
    "llcstack.payload_len",
    "llcstack.ack_delay",
    "llcstack.max_ack_delay",
    "llcstack.ts_val",
    "llcstack.ts_ecr",
    "llcstack.crc",
    "llcstack.crc.status",
    "llcstack.sack.start",
    "llcstack.sack.end",
    "llcstack.payload",
    "llcstack.retransmission_of",
    "llcstack.reassembled.length",
    "_ws.expert.message",
];

/// A numeric field as tshark prints it (decimal, or hex with `0x`).
fn num(row: &BTreeMap<String, String>, field: &str) -> Option<u64> {
    let v = row.get(field)?;
    Some(match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => v.parse().unwrap_or_else(|e| panic!("{field}={v}: {e}")),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn tshark_decodes_transport_frames() {
    if let Err(why) = tshark() {
        println!("SKIPPED tshark_decodes_transport_frames: {why}");
        return;
    }
    let (dir, _scratch) = capture_dir("transport");
    let pcap = dir.join("transport.pcap");
    let sent = transport_capture(&pcap);
    let frames = pcap_frames(&pcap);
    let rows = tshark_fields(&pcap, TRANSPORT_FIELDS, None);
    assert_eq!(rows.len(), frames.len(), "tshark shows every frame");

    let mut bad_crc = 0;
    let mut sack_frames = 0;
    let mut jumbo = 0;
    let mut length_form = 0;
    let mut resets = 0;
    let mut retransmissions = 0;
    let mut reassembled = BTreeSet::new();
    let mut data_frames = BTreeMap::new(); // frame number -> (seq, msg_id, frag_off)
    for (n, (frame, row)) in frames.iter().zip(&rows).enumerate() {
        let number = n as u64 + 1;
        assert_eq!(num(row, "frame.number"), Some(number));
        let ctx = format!("frame {number}: {row:?}");
        match wire::parse(frame, Some(wire::llc::DEFAULT_SAP)) {
            Ok(parsed) => {
                let Body::Transport(t) = parsed.body else {
                    assert!(!row.contains_key("llcstack.type"), "{ctx}");
                    continue;
                };
                let h = t.header;
                let expect: [(&str, u64); 19] = [
                    ("llcstack.version", h.version.into()),
                    ("llcstack.type", h.kind.into()),
                    ("llcstack.flags", h.flags.into()),
                    ("llcstack.sack_count", h.sack_count.into()),
                    ("llcstack.src_port", h.src_port.get().into()),
                    ("llcstack.dst_port", h.dst_port.get().into()),
                    ("llcstack.src_cookie", h.src_cookie.get().into()),
                    ("llcstack.dst_cookie", h.dst_cookie.get().into()),
                    ("llcstack.seq", h.seq.get().into()),
                    ("llcstack.ack", h.ack.get().into()),
                    ("llcstack.window_end", h.window_end.get().into()),
                    ("llcstack.msg_id", h.msg_id.get().into()),
                    ("llcstack.msg_len", h.msg_len.get().into()),
                    ("llcstack.frag_off", h.frag_off.get().into()),
                    ("llcstack.payload_len", h.payload_len.get().into()),
                    ("llcstack.ack_delay", h.ack_delay.get().into()),
                    ("llcstack.ts_val", h.ts_val.get().into()),
                    ("llcstack.ts_ecr", h.ts_ecr.get().into()),
                    ("llcstack.crc", h.crc.get().into()),
                ];
                for (field, want) in expect {
                    assert_eq!(num(row, field), Some(want), "{field} of {ctx}");
                }
                assert_eq!(num(row, "llcstack.crc.status"), Some(1), "good CRC, {ctx}");
                assert!(
                    !row.get("_ws.expert.message")
                        .is_some_and(|m| m.contains("CRC")),
                    "{ctx}"
                );
                let starts: Vec<String> =
                    t.sacks.iter().map(|s| s.start.get().to_string()).collect();
                let ends: Vec<String> = t.sacks.iter().map(|s| s.end.get().to_string()).collect();
                assert_eq!(
                    row.get("llcstack.sack.start").cloned().unwrap_or_default(),
                    starts.join(","),
                    "{ctx}"
                );
                assert_eq!(
                    row.get("llcstack.sack.end").cloned().unwrap_or_default(),
                    ends.join(","),
                    "{ctx}"
                );
                if !t.sacks.is_empty() {
                    sack_frames += 1;
                }
                assert_eq!(
                    row.get("llcstack.payload")
                        .cloned()
                        .unwrap_or_default()
                        .replace(':', ""),
                    hex(t.payload),
                    "{ctx}"
                );
                if frame.len() > 14 && frame[12..14] == [0x88, 0x70] {
                    jumbo += 1;
                } else {
                    length_form += 1;
                }
                let from_a = parsed.addr.src == MAC_A;
                match h.frame_type() {
                    wire::FrameType::Reset => {
                        assert!(!from_a, "B sends the RESET");
                        assert_eq!(h.src_port.get(), CLOSED_PORT);
                        resets += 1;
                    }
                    wire::FrameType::Data if from_a => {
                        // Against what was sent: the message's length and
                        // the fragment's bytes at its offset.
                        let (_, msg) = sent
                            .messages
                            .iter()
                            .find(|m| m.0 == h.msg_id.get())
                            .expect("a message A sent");
                        let off = h.frag_off.get() as usize;
                        assert_eq!(h.msg_len.get() as usize, msg.len(), "{ctx}");
                        assert!(msg[off..off + t.payload.len()] == *t.payload, "{ctx}");
                        data_frames.insert(number, (h.seq.get(), h.msg_id.get(), off));
                        if let Some(first) = num(row, "llcstack.retransmission_of") {
                            retransmissions += 1;
                            assert_eq!(
                                data_frames.get(&first),
                                Some(&(h.seq.get(), h.msg_id.get(), off)),
                                "a retransmission names the first transmission of its fragment: {ctx}"
                            );
                        }
                        if let Some(len) = num(row, "llcstack.reassembled.length") {
                            assert_eq!(len as usize, msg.len(), "{ctx}");
                            reassembled.insert(h.msg_id.get());
                        }
                    }
                    _ => {}
                }
            }
            Err(WireError::BadChecksum) => {
                bad_crc += 1;
                assert_eq!(num(row, "llcstack.crc.status"), Some(0), "bad CRC, {ctx}");
                assert!(
                    row.get("_ws.expert.message")
                        .is_some_and(|m| m.contains("Bad CRC32C")),
                    "expert warning, {ctx}"
                );
            }
            // Corruption elsewhere (SAP, control, version): the stack drops
            // the frame before its CRC; the dissector must not call it good.
            Err(_) => assert_ne!(num(row, "llcstack.crc.status"), Some(1), "{ctx}"),
        }
    }
    // Every retransmitted sequence number is marked, and only those.
    let mut seen = BTreeSet::new();
    let repeats = data_frames.values().filter(|v| !seen.insert(v.0)).count();
    assert_eq!(retransmissions, repeats, "retransmissions marked");
    let multi: BTreeSet<u32> = sent
        .messages
        .iter()
        .filter(|m| m.1.len() > 8941)
        .map(|m| m.0)
        .collect();
    assert!(
        multi.is_subset(&reassembled),
        "reassembled {reassembled:?} of {multi:?}"
    );
    // The scenario produced what it is meant to show.
    let hs: Vec<u64> = rows[..3]
        .iter()
        .map(|r| num(r, "llcstack.type").unwrap())
        .collect();
    assert_eq!(hs, [1, 2, 4], "handshake SYN, SYN-ACK, ACK");
    assert_eq!(
        num(&rows[0], "llcstack.dst_cookie"),
        Some(0),
        "SYN has no peer cookie"
    );
    assert_eq!(
        num(&rows[0], "llcstack.msg_len"),
        Some(9000),
        "SYN carries the MTU"
    );
    for (row, who) in [(&rows[0], "SYN"), (&rows[1], "SYN-ACK")] {
        assert_eq!(
            num(row, "llcstack.max_ack_delay"),
            Some(StackConfig::default().ack_delay.as_micros() as u64),
            "{who} announces its max ACK delay"
        );
    }
    println!(
        "{} frames: {length_form} length form, {jumbo} jumbo, {retransmissions} retransmissions, \
         {sack_frames} with SACK, {resets} RESET, {bad_crc} bad CRC",
        frames.len()
    );
    assert!(retransmissions > 0 && sack_frames > 0 && resets > 0 && bad_crc > 0);
    assert!(jumbo > 0 && length_form > 0);
}

/// With a job key every frame carries an authentication tag instead of a CRC
/// (PROTOCOL.md 3.3, 3.12): the dissector shows the tag, finds the CRC field
/// zero and calls the frame unverified (it has no key), not bad.
#[test]
fn tshark_shows_the_auth_tag_in_place_of_the_crc() {
    if let Err(why) = tshark() {
        println!("SKIPPED tshark_shows_the_auth_tag_in_place_of_the_crc: {why}");
        return;
    }
    let (dir, _scratch) = capture_dir("auth");
    let pcap = dir.join("auth.pcap");
    let cfg = StackConfig {
        auth_key: Some(AuthKey::derive(b"wireshark test job")),
        ..StackConfig::default()
    };
    let mut bed = Bed::new(&pcap, cfg, FaultConfig::default(), FaultConfig::default());
    bed.b.endpoint_mut().listen(PORT_B);
    let now = bed.now;
    let conn = bed
        .a
        .endpoint_mut()
        .connect(now, MAC_B, PORT_B, None)
        .unwrap();
    bed.run(Duration::from_secs(5), "handshake", |b| {
        b.events_a
            .iter()
            .any(|e| e.0 == conn && e.1 == Event::Connected)
    });
    for len in [5usize, 20_000] {
        bed.a.endpoint_mut().send(conn, vec![7u8; len]).unwrap();
    }
    bed.run(Duration::from_secs(5), "delivery", |b| {
        b.events_b
            .iter()
            .filter(|e| matches!(e.1, Event::Message { .. }))
            .count()
            == 2
    });
    drop(bed);
    let frames = pcap_frames(&pcap);
    let rows = tshark_fields(
        &pcap,
        &[
            "llcstack.flags.auth",
            "llcstack.crc.status",
            "llcstack.auth_tag",
        ],
        None,
    );
    assert_eq!(rows.len(), frames.len());
    assert!(frames.len() >= 6, "handshake and two messages");
    for (frame, row) in frames.iter().zip(&rows) {
        let Ok(parsed) = wire::parse(frame, Some(wire::llc::DEFAULT_SAP)) else {
            panic!("the stack accepts every frame of a clean link");
        };
        let Body::Transport(t) = parsed.body else {
            continue;
        };
        let tag = t.auth_tag.expect("every transport frame carries a tag");
        let ctx = format!("{row:?}");
        assert_eq!(
            row.get("llcstack.flags.auth").map(String::as_str),
            Some("1"),
            "{ctx}"
        );
        assert_eq!(t.header.crc.get(), 0, "{ctx}");
        assert_eq!(num(row, "llcstack.crc.status"), Some(2), "{ctx}");
        assert_eq!(
            row.get("llcstack.auth_tag").map(|t| t.replace(':', "")),
            Some(hex(tag)),
            "{ctx}"
        );
    }
}

type CapturedEndpoint = Endpoint<LlcTransport<PcapWriter<SimPort>>>;

/// Writes a capture (taken at A) of message-layer traffic from A to B over
/// the simulated link (MTU 1500): the Hello exchange, an eager message, a
/// rendezvous message (RTS, CTS, DATA of many fragments, DONE), an active
/// message, and an untagged eager message with remote data `0xfeed`.
/// Returns A's and B's addresses.
fn message_capture(path: &Path, eager: &[u8], rndv: &[u8], am: &[u8]) -> (String, String) {
    let sim = Sim::new(SimConfig::default());
    let cfg = Config {
        progress_thread: true,
        ..Config::default()
    };
    assert!(eager.len() <= cfg.eager_limit && rndv.len() > cfg.eager_limit);
    let dev = PcapWriter::create(sim.port(), path).unwrap();
    let a: CapturedEndpoint = Endpoint::new(
        LlcTransport::new(dev, MAC_A, 7, LlcConfig::default(), Rng::new(SEED)),
        cfg.clone(),
    )
    .unwrap();
    let b = Endpoint::new(
        LlcTransport::new(
            sim.port(),
            MAC_B,
            7,
            LlcConfig::default(),
            Rng::new(SEED + 1),
        ),
        cfg,
    )
    .unwrap();
    let got_am = Arc::new(Mutex::new(Vec::new()));
    let g = got_am.clone();
    b.set_am_handler(
        3,
        Box::new(move |_, data| g.lock().unwrap().push(data.to_vec())),
    );
    let pb = a.add_peer(&b.local_addr()).unwrap();
    let pa = b.add_peer(&a.local_addr()).unwrap();
    let wait = Some(Duration::from_secs(20));
    let r1 = b.irecv(Source::Peer(pa), Tag::Is(5), 17, vec![0; eager.len()]);
    let r2 = b.irecv(Source::Peer(pa), Tag::Is(6), 17, vec![0; rndv.len()]);
    let s1 = a.isend(pb, 5, 17, eager.to_vec());
    a.wait_timeout(s1, wait).unwrap();
    let s2 = a.isend(pb, 6, 17, rndv.to_vec());
    a.wait_timeout(s2, wait).unwrap();
    a.wait_timeout(a.am_send(pb, 3, am.to_vec()), wait).unwrap();
    assert_eq!(b.wait_timeout(r1, wait).unwrap().data.unwrap(), eager);
    assert!(b.wait_timeout(r2, wait).unwrap().data.unwrap() == rndv);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while got_am.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "active message arrives"
        );
        std::thread::yield_now();
    }
    assert_eq!(got_am.lock().unwrap()[0], am);
    let dst = Arc::new(msg_layer::rma::VecRegion::new(vec![0; 8]));
    let r3 = b.irecv_into(Source::Peer(pa), Select::Untagged, dst);
    let s3 = a.isend_to(pb, Space::Untagged, Some(0xfeed), b"fi"[..].into(), false);
    a.wait_timeout(s3, wait).unwrap();
    assert_eq!(b.wait_timeout(r3, wait).unwrap().status.data, Some(0xfeed));
    a.flush(wait).unwrap();
    b.flush(wait).unwrap();
    let addrs = (a.local_addr().to_string(), b.local_addr().to_string());
    // Dropping A flushes its capture.
    drop(a);
    drop(b);
    addrs
}

#[test]
fn tshark_decodes_message_layer_packets() {
    if let Err(why) = tshark() {
        println!("SKIPPED tshark_decodes_message_layer_packets: {why}");
        return;
    }
    let (dir, _scratch) = capture_dir("messages");
    let pcap = dir.join("messages.pcap");
    let mut r = Rng::new(SEED + 9);
    let eager: Vec<u8> = (0..100).map(|_| r.next_u32() as u8).collect();
    let rndv: Vec<u8> = (0..100_000).map(|_| r.next_u32() as u8).collect();
    let am: Vec<u8> = b"an active message for handler 3".to_vec();
    let (addr_a, addr_b) = message_capture(&pcap, &eager, &rndv, &am);
    let fields = [
        "eth.src",
        "llcstack.type",
        "llcstack.reassembled.length",
        "llcstack.retransmission_of",
        "llcmsg.kind",
        "llcmsg.flags",
        "llcmsg.flags.untagged",
        "llcmsg.flags.remote_data",
        "llcmsg.aux",
        "llcmsg.am",
        "llcmsg.tag",
        "llcmsg.context",
        "llcmsg.offset",
        "llcmsg.len",
        "llcmsg.address",
        "llcmsg.body",
    ];
    // First transmissions only: a retransmitted packet shows its header again.
    let rows = tshark_fields(
        &pcap,
        &fields,
        Some("llcmsg && !llcstack.retransmission_of"),
    );
    let a_mac = MAC_A.to_string();
    let from_a = |r: &BTreeMap<String, String>| r.get("eth.src") == Some(&a_mac);
    let kind = |r: &BTreeMap<String, String>| num(r, "llcmsg.kind").unwrap();
    let find = |k: u64, a: bool| -> Vec<&BTreeMap<String, String>> {
        rows.iter()
            .filter(|r| kind(r) == k && from_a(r) == a)
            .collect()
    };
    let body = |r: &BTreeMap<String, String>| {
        r.get("llcmsg.body")
            .cloned()
            .unwrap_or_default()
            .replace(':', "")
    };
    // Hello both ways, naming each side's address.
    let hello_a = find(1, true);
    let hello_b = find(1, false);
    assert_eq!(hello_a.len(), 1);
    assert_eq!(hello_a[0].get("llcmsg.address"), Some(&addr_a));
    assert_eq!(hello_b[0].get("llcmsg.address"), Some(&addr_b));
    // Eager: tag, context, length and the message itself.
    let untagged = |r: &&BTreeMap<String, String>| {
        r.get("llcmsg.flags.untagged").map(String::as_str) == Some("1")
    };
    let (fi, e): (Vec<_>, Vec<_>) = find(2, true).into_iter().partition(untagged);
    assert_eq!(e.len(), 1, "one tagged eager packet");
    assert_eq!(num(e[0], "llcmsg.tag"), Some(5));
    assert_eq!(num(e[0], "llcmsg.context"), Some(17));
    assert_eq!(num(e[0], "llcmsg.len"), Some(eager.len() as u64));
    assert_eq!(body(e[0]), hex(&eager));
    // Rendezvous: RTS from A, CTS from B, DATA reassembled from its
    // fragments holding the whole message, DONE from B.
    let rts = find(3, true);
    assert_eq!(rts.len(), 1, "one RTS");
    assert_eq!(num(rts[0], "llcmsg.tag"), Some(6));
    assert_eq!(num(rts[0], "llcmsg.context"), Some(17));
    assert_eq!(num(rts[0], "llcmsg.len"), Some(rndv.len() as u64));
    assert_eq!(find(4, false).len(), 1, "one CTS");
    let data: Vec<_> = find(5, true)
        .into_iter()
        .filter(|r| r.contains_key("llcstack.reassembled.length"))
        .collect();
    assert_eq!(data.len(), 1, "the DATA packet reassembled once");
    assert_eq!(
        num(data[0], "llcstack.reassembled.length"),
        Some(rndv.len() as u64 + 48)
    );
    assert_eq!(num(data[0], "llcmsg.offset"), Some(0));
    assert_eq!(num(data[0], "llcmsg.len"), Some(rndv.len() as u64));
    assert!(
        body(data[0]) == hex(&rndv),
        "reassembled body is the message"
    );
    assert_eq!(find(12, false).len(), 1, "one DONE");
    // The active message: handler id and payload.
    let a = find(6, true);
    assert_eq!(a.len(), 1, "one active message");
    assert_eq!(num(a[0], "llcmsg.am"), Some(3));
    assert_eq!(body(a[0]), hex(&am));
    // The untagged one, with its remote data in aux.
    assert_eq!(fi.len(), 1, "one untagged eager packet");
    assert_eq!(
        fi[0].get("llcmsg.flags.remote_data").map(String::as_str),
        Some("1")
    );
    assert_eq!(num(fi[0], "llcmsg.aux"), Some(0xfeed));
    assert_eq!(body(fi[0]), hex(b"fi"));
}

/// A burst of small sends with `coalesce` leaves as one `Bundle`: tshark
/// shows it with each packet inside (kind, tag, length, body), and the
/// Hello says the sender takes bundles.
#[test]
fn tshark_decodes_bundles() {
    if let Err(why) = tshark() {
        println!("SKIPPED tshark_decodes_bundles: {why}");
        return;
    }
    let (dir, _scratch) = capture_dir("bundles");
    let pcap = dir.join("bundles.pcap");
    let sim = Sim::new(SimConfig::default());
    let a: CapturedEndpoint = Endpoint::new(
        LlcTransport::new(
            PcapWriter::create(sim.port(), &pcap).unwrap(),
            MAC_A,
            7,
            LlcConfig::default(),
            Rng::new(SEED),
        ),
        Config {
            coalesce: true,
            ..Config::default()
        },
    )
    .unwrap();
    let b = Endpoint::new(
        LlcTransport::new(
            sim.port(),
            MAC_B,
            7,
            LlcConfig::default(),
            Rng::new(SEED + 1),
        ),
        Config::default(),
    )
    .unwrap();
    let pb = a.add_peer(&b.local_addr()).unwrap();
    let pa = b.add_peer(&a.local_addr()).unwrap();
    let wait = Some(Duration::from_secs(20));
    // Both ends make progress in turn until `done` (one thread, so the
    // burst below is posted with no progress of A's in between).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let pump = |done: &mut dyn FnMut() -> bool| {
        while !done() {
            assert!(std::time::Instant::now() < deadline, "timed out");
            a.progress().unwrap();
            b.progress().unwrap();
        }
    };
    // One message each way: both Hellos are in.
    let r = b.irecv(Source::Peer(pa), Tag::Is(0), 0, vec![0; 1]);
    let s = a.isend(pb, 0, 0, vec![1u8]);
    pump(&mut || b.test(&r).is_some());
    let r2 = a.irecv(Source::Peer(pb), Tag::Is(0), 0, vec![0; 1]);
    let s2 = b.isend(pa, 0, 0, vec![2u8]);
    pump(&mut || a.test(&r2).is_some());
    a.wait_timeout(s, wait).unwrap();
    b.wait_timeout(s2, wait).unwrap();
    // The burst: the first leaves at once, the other four wait for the
    // next round of A's progress and leave together.
    let bodies: Vec<Vec<u8>> = (0..5u8).map(|i| vec![0xb0 + i; 10 + i as usize]).collect();
    let recvs: Vec<_> = bodies
        .iter()
        .map(|d| b.irecv(Source::Peer(pa), Tag::Is(7), 0, vec![0; d.len()]))
        .collect();
    let sends: Vec<_> = bodies
        .iter()
        .map(|d| a.isend(pb, 7, 0, d.clone()))
        .collect();
    let mut got = vec![None; recvs.len()];
    pump(&mut || {
        for (i, r) in recvs.iter().enumerate() {
            if got[i].is_none() {
                got[i] = b.test(r).map(|c| c.unwrap().data.unwrap());
            }
        }
        got.iter().all(Option::is_some)
    });
    for (g, d) in got.iter().zip(&bodies) {
        assert_eq!(g.as_ref().unwrap(), d);
    }
    for s in a.wait_all(&sends, wait).unwrap() {
        s.unwrap();
    }
    assert_eq!(a.stats().bundles_sent, 1, "{:?}", a.stats());
    a.flush(wait).unwrap();
    b.flush(wait).unwrap();
    drop(a);
    drop(b);
    let rows = tshark_fields(
        &pcap,
        &[
            "eth.src",
            "llcmsg.kind",
            "llcmsg.flags.bundles",
            "llcmsg.tag",
            "llcmsg.len",
            "llcmsg.body",
        ],
        Some("llcmsg && !llcstack.retransmission_of"),
    );
    let a_mac = MAC_A.to_string();
    let hello = rows
        .iter()
        .find(|r| {
            r.get("eth.src") == Some(&a_mac)
                && r.get("llcmsg.kind").map(String::as_str) == Some("1")
        })
        .expect("A's Hello");
    assert_eq!(
        hello.get("llcmsg.flags.bundles").map(String::as_str),
        Some("1")
    );
    let bundle = rows
        .iter()
        .find(|r| r.get("llcmsg.kind").is_some_and(|k| k.starts_with("13,")))
        .expect("a Bundle in the capture");
    assert_eq!(bundle.get("llcmsg.kind").unwrap(), "13,2,2,2,2");
    // The bundle's own tag (0) and the four packets' tags; its count, then
    // each packet's length.
    assert_eq!(bundle.get("llcmsg.tag").unwrap(), "0,7,7,7,7");
    assert_eq!(bundle.get("llcmsg.len").unwrap(), "4,11,12,13,14");
    let body_hex: Vec<String> = bodies[1..]
        .iter()
        .map(|d| d.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    let shown = bundle.get("llcmsg.body").unwrap().replace(':', "");
    for h in &body_hex {
        assert!(shown.contains(h.as_str()), "{h} not in {shown}");
    }
}
