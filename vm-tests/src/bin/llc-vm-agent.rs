//! A minimal remote-exec agent for the QEMU test guests, standing in for ssh as Open MPI's
//! rsh agent (`--mca plm_rsh_agent llc-vm-agent`): the guests have no ssh.
//!
//! ```text
//! llc-vm-agent serve ADDR:PORT          run commands for whoever connects (a guest only)
//! llc-vm-agent [-opt...] HOST COMMAND...  run COMMAND on HOST, like `ssh HOST COMMAND...`
//! ```
//!
//! The client joins the COMMAND words with spaces, as ssh does, and the server runs the
//! result with `/bin/sh -c` (Open MPI quotes orted's arguments for a remote shell), with
//! stdin from `/dev/null`, in a process group of its own. The server relays the command's
//! stdout and stderr as they come and then its exit status (128 + signal when killed); the
//! client writes them to its own stdout and stderr and exits with that status, or 255 when
//! it cannot connect or the connection ends without a status (as ssh does). When the client
//! goes away (Open MPI kills its agents at the end of a job) the server sends the command's
//! process group SIGTERM, then SIGKILL 2 s later, as sshd hangs up a session. Leading words
//! starting with `-` (ssh's `-x`) are ignored. The port is [`DEFAULT_PORT`] unless
//! `LLC_VM_AGENT_PORT` says otherwise (on both sides).
//!
//! There is no authentication at all: anyone who reaches the port runs commands as the
//! server's user. It exists for test guests on a private virtual link and must never listen
//! on a host's network.
//!
//! Wire format: the client sends `LLCVMA1\n`, a big-endian u32 length and the command;
//! then only keeps the connection open. The server sends frames `kind: u8, len: u32 BE,
//! payload`: 1 stdout, 2 stderr, 3 exit status (i32 BE), 4 an error message (the command
//! could not be started; the client prints it and exits 255).
#![deny(unsafe_code)]

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// The port both sides use unless `LLC_VM_AGENT_PORT` is set.
const DEFAULT_PORT: u16 = 7727;
/// The request's first bytes.
const MAGIC: &[u8; 8] = b"LLCVMA1\n";
/// Longest command accepted.
const MAX_COMMAND: u32 = 1 << 20;
/// How long a server waits for a connection's request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client tries to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// After the command exited, how long output still held by its children is waited for.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Between SIGTERM and SIGKILL to a hung-up session's process group.
const KILL_GRACE: Duration = Duration::from_secs(2);

const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const EXIT: u8 = 3;
const ERROR: u8 = 4;

/// ssh's status for "the connection failed".
const CONNECTION_FAILED: u8 = 255;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = match std::env::var("LLC_VM_AGENT_PORT") {
        Ok(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                eprintln!("llc-vm-agent: LLC_VM_AGENT_PORT={p}: a port number expected");
                return ExitCode::from(CONNECTION_FAILED);
            }
        },
        Err(_) => DEFAULT_PORT,
    };
    if args.first().map(String::as_str) == Some("serve") {
        return match args.get(1) {
            Some(addr) if args.len() == 2 => serve(addr),
            _ => usage(),
        };
    }
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .skip_while(|a| a.starts_with('-'))
        .collect();
    match words.split_first() {
        Some((host, command)) if !command.is_empty() => client(host, port, &command.join(" ")),
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: llc-vm-agent serve ADDR:PORT\n       llc-vm-agent [-opt...] HOST COMMAND...");
    ExitCode::from(CONNECTION_FAILED)
}

// ---- client ----

fn client(host: &str, port: u16, command: &str) -> ExitCode {
    match run_remote(host, port, command) {
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("llc-vm-agent: {host}: {e}");
            ExitCode::from(CONNECTION_FAILED)
        }
    }
}

fn run_remote(host: &str, port: u16, command: &str) -> io::Result<u8> {
    let mut stream = connect(host, port)?;
    let mut request = MAGIC.to_vec();
    request.extend_from_slice(&(command.len() as u32).to_be_bytes());
    request.extend_from_slice(command.as_bytes());
    stream.write_all(&request)?;
    // The write side stays open: closing the connection is how the server learns that
    // this client is gone.
    let (mut out, mut err) = (io::stdout(), io::stderr());
    loop {
        let Some((kind, payload)) = read_frame(&mut stream)? else {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the command's exit status",
            ));
        };
        match kind {
            STDOUT => {
                out.write_all(&payload)?;
                out.flush()?;
            }
            STDERR => {
                err.write_all(&payload)?;
                err.flush()?;
            }
            EXIT => {
                let status = i32::from_be_bytes(payload.as_slice().try_into().map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "bad exit-status frame")
                })?);
                // A shell's view of it: 0..=255.
                return Ok(status.clamp(0, 255) as u8);
            }
            ERROR => {
                return Err(io::Error::other(format!(
                    "the server could not run the command: {}",
                    String::from_utf8_lossy(&payload)
                )))
            }
            k => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown frame kind {k}"),
                ))
            }
        }
    }
}

fn connect(host: &str, port: u16) -> io::Result<TcpStream> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        for addr in (host, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last = e,
            }
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        thread::sleep(Duration::from_millis(200));
    }
}

/// One frame, or `None` at a clean end of the stream.
fn read_frame(r: &mut impl Read) -> io::Result<Option<(u8, Vec<u8>)>> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    r.read_exact(&mut head[1..])?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some((head[0], payload)))
}

fn write_frame(w: &mut impl Write, kind: u8, payload: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(5 + payload.len());
    frame.push(kind);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    w.write_all(&frame)
}

// ---- server ----

fn serve(addr: &str) -> ExitCode {
    let listener = match TcpListener::bind(addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("llc-vm-agent: cannot listen on {addr}: {e}");
            return ExitCode::from(CONNECTION_FAILED);
        }
    };
    eprintln!("llc-vm-agent: serving on {addr}");
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let peer = stream
                    .peer_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_default();
                let spawned = thread::Builder::new()
                    .name("session".into())
                    .spawn(move || {
                        if let Err(e) = session(stream) {
                            eprintln!("llc-vm-agent: session of {peer}: {e}");
                        }
                    });
                if let Err(e) = spawned {
                    eprintln!("llc-vm-agent: cannot start a session thread: {e}");
                }
            }
            Err(e) => eprintln!("llc-vm-agent: accept: {e}"),
        }
    }
    ExitCode::SUCCESS
}

/// What a session's threads report to it.
enum Event {
    Output(u8, Vec<u8>),
    OutputClosed,
    Exited(i32),
}

fn session(mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut magic = [0u8; 8];
    stream.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a client"));
    }
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len);
    if len > MAX_COMMAND {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "command too long",
        ));
    }
    let mut command = vec![0u8; len as usize];
    stream.read_exact(&mut command)?;
    stream.set_read_timeout(None)?;
    let command = String::from_utf8_lossy(&command).into_owned();

    let mut child = match Command::new("/bin/sh")
        .arg("-c")
        .arg(&command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            write_frame(&mut stream, ERROR, format!("/bin/sh: {e}").as_bytes())?;
            return Ok(());
        }
    };
    let pgid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    relay(child.stdout.take(), STDOUT, tx.clone());
    relay(child.stderr.take(), STDERR, tx.clone());

    // The client sends nothing more: a read returning means it is gone, and the session's
    // processes are hung up like sshd's.
    let finished = Arc::new(AtomicBool::new(false));
    {
        let mut watch = stream.try_clone()?;
        let finished = Arc::clone(&finished);
        thread::spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                match watch.read(&mut buf) {
                    Ok(n) if n > 0 => continue,
                    _ => break,
                }
            }
            if !finished.load(Ordering::SeqCst) {
                hang_up(pgid, &finished);
            }
        });
    }
    waiter(child, tx);

    let mut open_outputs = 2;
    let mut exit = None;
    let mut drain_deadline: Option<Instant> = None;
    while open_outputs > 0 || exit.is_none() {
        let event = match drain_deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(ev) => ev,
                    // Children of the command still hold its output: stop waiting for it.
                    Err(_) => break,
                }
            }
            None => match rx.recv() {
                Ok(ev) => ev,
                Err(_) => break,
            },
        };
        match event {
            Event::Output(kind, data) => write_frame(&mut stream, kind, &data)?,
            Event::OutputClosed => open_outputs -= 1,
            Event::Exited(status) => {
                exit = Some(status);
                drain_deadline = Some(Instant::now() + DRAIN_GRACE);
            }
        }
    }
    finished.store(true, Ordering::SeqCst);
    let status = exit.unwrap_or(CONNECTION_FAILED as i32);
    write_frame(&mut stream, EXIT, &status.to_be_bytes())?;
    stream.flush()?;
    let _ = stream.shutdown(Shutdown::Write);
    Ok(())
}

/// Forwards one of the command's output pipes as frames of `kind`.
fn relay(pipe: Option<impl Read + Send + 'static>, kind: u8, tx: mpsc::Sender<Event>) {
    let Some(mut pipe) = pipe else {
        let _ = tx.send(Event::OutputClosed);
        return;
    };
    thread::spawn(move || {
        let mut buf = vec![0u8; 16384];
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(Event::Output(kind, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = tx.send(Event::OutputClosed);
    });
}

/// Waits for the command and reports its status (128 + signal when a signal ended it).
fn waiter(mut child: Child, tx: mpsc::Sender<Event>) {
    thread::spawn(move || {
        let status = match child.wait() {
            Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
            Err(_) => CONNECTION_FAILED as i32,
        };
        let _ = tx.send(Event::Exited(status));
    });
}

/// SIGTERM to the session's process group, SIGKILL after [`KILL_GRACE`] unless the session
/// finished meanwhile.
fn hang_up(pgid: i32, finished: &AtomicBool) {
    signal_group(pgid, libc::SIGTERM);
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline {
        if finished.load(Ordering::SeqCst) {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    signal_group(pgid, libc::SIGKILL);
}

#[allow(unsafe_code)]
fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: kill(2) takes plain integers and has no memory effects in this process.
    unsafe {
        libc::kill(-pgid, signal);
    }
}
