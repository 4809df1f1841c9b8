//! llc-xfer: moves a seeded pseudo-random byte stream through the reliable transport and
//! prints the SHA-256 of what it sent or received, so a test can compare both ends (the
//! QEMU tests run one end per VM). Not a benchmark: it prints no rates.
//!
//! ```text
//! llc-xfer --receive -I eth0 --bytes 16777216          # prints "llc-xfer: receiving on ..."
//! llc-xfer -I eth0 --bytes 16777216 02:4c:4c:00:00:02
//! ```
//! Both ends print `llc-xfer: <sent|received> N bytes in M messages, sha256 HEX`.
//!
//! By default an end has the interface's SAP to itself (AF_PACKET, every
//! port). With `--shared` it is one endpoint of several on the interface, as
//! MPI ranks of a node are: it claims its port (the receiver `--port`, the
//! sender any free one), receives only that port's frames, and `--backend`
//! picks AF_XDP (joining the interface's shared XDP program) or AF_PACKET.
//! Exit status 0 on success, 2 on any error (timeout, failed connection, byte count).
#![deny(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use clap::Parser;
use llc_stack::link::afpacket::AfPacketConfig;
use llc_stack::link::afxdp::AfXdpConfig;
use llc_stack::link::any::{self, Backend};
use llc_stack::proto::{Config, ConnHandle, Event, SendError};
use llc_stack::rng::Rng;
use llc_stack::wire::MacAddr;
use llc_stack::{Device, Instant, Stack};
use sha2::{Digest, Sha256};

/// Messages the sender keeps queued or unacknowledged: enough to keep the window full.
const SEND_AHEAD_MESSAGES: usize = 8;
/// Time for the last acknowledgements (receiver) or the close (sender) to get out.
const LINGER: Duration = Duration::from_millis(300);

#[derive(Parser, Debug)]
#[command(
    name = "llc-xfer",
    version,
    about = "bulk transfer through the reliable LLC transport, checked by SHA-256"
)]
struct Args {
    /// Interface to send and receive on.
    #[arg(short = 'I', long = "interface", value_name = "IFACE")]
    interface: String,
    /// Receive (accept one connection) instead of sending.
    #[arg(long, conflicts_with = "peer")]
    receive: bool,
    /// The receiver's MAC address (sender only).
    #[arg(value_name = "PEER_MAC", required_unless_present = "receive")]
    peer: Option<MacAddr>,
    /// Bytes to transfer; both ends must be given the same number.
    #[arg(long, default_value_t = 8 << 20)]
    bytes: usize,
    /// Bytes per message (the last one may be shorter).
    #[arg(long, default_value_t = 1 << 20)]
    message: usize,
    /// Seed of the pseudo-random payload.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Transport port.
    #[arg(long, default_value_t = 9)]
    port: u16,
    /// Seconds before giving up.
    #[arg(long, default_value_t = 300.0)]
    timeout: f64,
    /// Share the interface with other endpoints of this host: claim a port
    /// (the receiver's `--port`, any free one for the sender) and receive
    /// only its frames.
    #[arg(long)]
    shared: bool,
    /// Link backend (with `--shared`): auto, xdp or packet.
    #[arg(long, default_value = "packet", requires = "shared")]
    backend: Backend,
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("llc-xfer: {e:#}");
            std::process::exit(2);
        }
    }
}

fn run(args: &Args) -> Result<()> {
    ensure!(args.message > 0, "--message must be at least 1");
    let port = args
        .shared
        .then_some(if args.receive { args.port } else { 0 });
    let (backend, packet, xdp) = (
        if args.shared {
            args.backend
        } else {
            Backend::Packet
        },
        AfPacketConfig {
            port,
            ..AfPacketConfig::default()
        },
        AfXdpConfig {
            port,
            ..AfXdpConfig::default()
        },
    );
    let (dev, notes) = any::open(&args.interface, backend, packet, xdp)
        .with_context(|| format!("opening {} ({backend})", args.interface))?;
    for n in notes {
        eprintln!("llc-xfer: {n}");
    }
    let mac = dev.mac();
    let claimed = dev.port();
    let link = dev.capabilities().backend;
    // LLC_AUTH_KEY: per-job key material, as llc-ping reads it (docs/SECURITY.md).
    let auth_key = match std::env::var_os("LLC_AUTH_KEY") {
        None => None,
        Some(v) => {
            use std::os::unix::ffi::OsStrExt;
            ensure!(!v.is_empty(), "LLC_AUTH_KEY is set but empty");
            Some(llc_stack::wire::AuthKey::derive(v.as_bytes()))
        }
    };
    let cfg = Config {
        auth_key,
        ..Config::default()
    };
    let mut stack = Stack::new(dev, cfg, mac, Rng::from_entropy());
    if let Some(p) = claimed {
        // Sharing the interface: every connection leaves from our port.
        stack.endpoint_mut().bind(p);
    }
    // Live counters for llc-stat; without them (no /dev/shm) the transfer still works.
    let info = llc_stack::statpage::PageInfo {
        label: "llc-xfer".into(),
        ifname: args.interface.clone(),
        ..Default::default()
    };
    if let Err(e) = stack.publish_stats(info) {
        eprintln!("llc-xfer: llc-stat page not published: {e}");
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout);
    let (verb, messages, digest, conn) = match args.peer {
        None => {
            let (m, d) = receive(&mut stack, mac, &link, args, deadline)?;
            ("received", m, d, None)
        }
        Some(peer) => {
            let (m, d, conn) = send(&mut stack, peer, args, deadline)?;
            ("sent", m, d, Some(conn))
        }
    };
    // Printed before lingering: a test may stop the receiver as soon as the sender is done.
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "llc-xfer: {verb} {} bytes in {messages} messages, sha256 {hex}",
        args.bytes
    );
    std::io::stdout().flush()?;
    if let Some(conn) = conn {
        stack.endpoint_mut().close(conn);
    }
    // The last acknowledgements (receiver) or the close (sender) still have to get out.
    let _ = stack.run_until(Instant::now() + LINGER, |ep| {
        conn.is_some_and(|c| ep.connection(c).is_none())
            .then_some(())
    });
    Ok(())
}

/// The next `len` bytes of the seeded payload stream.
fn fill(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    for chunk in v.chunks_mut(8) {
        let x = rng.next_u64().to_le_bytes();
        chunk.copy_from_slice(&x[..chunk.len()]);
    }
    v
}

fn receive<D: Device>(
    stack: &mut Stack<D>,
    mac: MacAddr,
    link: &str,
    args: &Args,
    deadline: Instant,
) -> Result<(usize, Vec<u8>)> {
    stack.endpoint_mut().listen(args.port);
    println!(
        "llc-xfer: receiving on {} ({mac}), port {}, {link}",
        args.interface, args.port
    );
    let mut hasher = Sha256::new();
    let (mut got, mut messages) = (0usize, 0usize);
    let mut failure = None;
    let done = stack.run_until(deadline, |ep| {
        while let Some((_, ev)) = ep.poll_event() {
            match ev {
                Event::Message { data, .. } => {
                    hasher.update(&data);
                    got += data.len();
                    messages += 1;
                }
                Event::Closed(Some(e)) => {
                    failure = Some(e);
                    return Some(());
                }
                _ => {}
            }
        }
        (got >= args.bytes).then_some(())
    })?;
    if let Some(e) = failure {
        bail!("the connection failed after {got} bytes: {e}");
    }
    ensure!(
        done.is_some(),
        "timed out after {got} of {} bytes",
        args.bytes
    );
    ensure!(
        got == args.bytes,
        "received {got} bytes, expected {}",
        args.bytes
    );
    Ok((messages, hasher.finalize().to_vec()))
}

fn send<D: Device>(
    stack: &mut Stack<D>,
    peer: MacAddr,
    args: &Args,
    deadline: Instant,
) -> Result<(usize, Vec<u8>, ConnHandle)> {
    let conn = stack
        .endpoint_mut()
        .connect(Instant::now(), peer, args.port, None)?;
    println!(
        "llc-xfer: sending to {peer} port {} from port {}",
        args.port,
        stack
            .endpoint()
            .connection(conn)
            .map_or(0, |c| c.local_port())
    );
    std::io::stdout().flush()?;
    let mut rng = Rng::new(args.seed);
    let mut hasher = Sha256::new();
    let n = args.bytes.div_ceil(args.message);
    let (mut next, mut acked) = (0usize, 0usize);
    let mut pending: Option<Vec<u8>> = None;
    let mut failure = None;
    let done = stack.run_until(deadline, |ep| {
        while let Some((h, ev)) = ep.poll_event() {
            match ev {
                Event::Acked { .. } if h == conn => acked += 1,
                Event::Closed(e) if h == conn => {
                    failure = Some(e.map_or("closed by the peer".to_owned(), |e| e.to_string()));
                    return Some(());
                }
                _ => {}
            }
        }
        while next < n {
            let buffered = ep.connection(conn).map_or(0, |c| c.send_buffered());
            if buffered >= SEND_AHEAD_MESSAGES * args.message {
                break;
            }
            let m = pending.take().unwrap_or_else(|| {
                let len = args.message.min(args.bytes - next * args.message);
                let m = fill(&mut rng, len);
                hasher.update(&m);
                m
            });
            match ep.send(conn, m.clone()) {
                Ok(_) => next += 1,
                Err(SendError::BufferFull { .. }) => {
                    pending = Some(m);
                    break;
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    return Some(());
                }
            }
        }
        (acked == n).then_some(())
    })?;
    if let Some(e) = failure {
        bail!("the connection to {peer} failed after {acked} of {n} messages: {e}");
    }
    ensure!(
        done.is_some(),
        "timed out: {acked} of {n} messages acknowledged by {peer}"
    );
    Ok((n, hasher.finalize().to_vec(), conn))
}
