//! `llc-bed-login`: logins of an ordinary user into the simulated hosts of a
//! `testbed::Cluster`, standing in for sshd.
//!
//! An ordinary user cannot enter another network namespace, so a user's
//! rsh agent (the one Open MPI calls like ssh) cannot start a command on
//! another simulated host by itself. Instead the bed starts, as root, one
//! server per host inside the host (its namespaces, hostname, /dev/shm),
//! which then drops to the user and listens on a unix socket in the
//! cluster's directory:
//!
//! ```text
//! llc-bed-login serve SOCKET            # the host's login server, already the user
//! llc-bed-login connect SOCKET CMD...   # run `sh -c "CMD..."` there, as ssh would
//! ```
//!
//! The client hands its standard input, output and error to the server with
//! `SCM_RIGHTS`, so the remote command writes straight to them, and sends
//! its environment (the bed's agent always passed it on). It exits with the
//! command's status; when the client dies, the server kills the command's
//! process group. The server accepts only its own user (`SO_PEERCRED`).

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::socket::{
    getsockopt, recvmsg, sendmsg, sockopt::PeerCredentials, ControlMessage, ControlMessageOwned,
    MsgFlags,
};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match args.get(1).map(String::as_str) {
        Some("serve") if args.len() == 3 => serve(&args[2]),
        Some("connect") if args.len() >= 4 => connect(&args[2], &args[3..]),
        _ => {
            eprintln!("usage: llc-bed-login serve SOCKET | llc-bed-login connect SOCKET CMD...");
            255
        }
    };
    std::process::exit(code);
}

/// The request: the command line, then `NAME=VALUE` environment entries,
/// NUL-separated; the three standard descriptors ride along.
fn connect(socket: &str, words: &[String]) -> i32 {
    let mut stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("llc-bed-login: cannot reach the host's login server at {socket}: {e}");
            return 255;
        }
    };
    let mut msg = words.join(" ").into_bytes();
    for (k, v) in std::env::vars_os() {
        msg.push(0);
        msg.extend_from_slice(k.as_encoded_bytes());
        msg.push(b'=');
        msg.extend_from_slice(v.as_encoded_bytes());
    }
    let len = (msg.len() as u32).to_be_bytes();
    let fds = [0, 1, 2];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&len)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(std::io::Error::from)
    .and_then(|_| stream.write_all(&msg));
    if let Err(e) = sent {
        eprintln!("llc-bed-login: sending the command: {e}");
        return 255;
    }
    let mut status = [0u8; 4];
    match stream.read_exact(&mut status) {
        Ok(()) => i32::from_be_bytes(status),
        Err(e) => {
            eprintln!("llc-bed-login: the login server went away: {e}");
            255
        }
    }
}

fn serve(socket: &str) -> i32 {
    let _ = std::fs::remove_file(socket);
    let listener = match UnixListener::bind(socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("llc-bed-login: binding {socket}: {e}");
            return 255;
        }
    };
    // SAFETY: getuid() has no preconditions.
    let me = unsafe { libc::getuid() };
    println!("llc-bed-login: serving {socket} for uid {me}");
    let _ = std::io::stdout().flush();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        match getsockopt(&stream, PeerCredentials) {
            Ok(c) if c.uid() == me => {}
            _ => continue, // another user: no login
        }
        std::thread::spawn(move || session(stream));
    }
    0
}

fn session(mut stream: UnixStream) {
    let mut len = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; 3]);
    let fds: Vec<OwnedFd> = {
        let mut iov = [IoSliceMut::new(&mut len)];
        let Ok(msg) = recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) else {
            return;
        };
        let Ok(cmsgs) = msg.cmsgs() else { return };
        cmsgs
            .filter_map(|c| match c {
                ControlMessageOwned::ScmRights(fds) => Some(fds),
                _ => None,
            })
            .flatten()
            // SAFETY: the kernel just installed these descriptors for us;
            // each is owned once.
            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
            .collect()
    };
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    if fds.len() != 3 || stream.read_exact(&mut body).is_err() {
        return;
    }
    let mut parts = body.split(|&b| b == 0);
    let line = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(line).env_clear().process_group(0);
    for entry in parts {
        if let Some(eq) = entry.iter().position(|&b| b == b'=') {
            let (k, v) = (&entry[..eq], &entry[eq + 1..]);
            cmd.env(
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            );
        }
    }
    let mut fds = fds.into_iter();
    cmd.stdin(Stdio::from(fds.next().expect("3")))
        .stdout(Stdio::from(fds.next().expect("3")))
        .stderr(Stdio::from(fds.next().expect("3")));
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(_) => {
            let _ = stream.write_all(&127i32.to_be_bytes());
            return;
        }
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let code = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        }
        // The client sends nothing more: a read that returns 0 means it is gone.
        let mut b = [0u8; 1];
        if let Ok(0) = stream.read(&mut b) {
            // SAFETY: kill() takes no pointers; the group is the child's own.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
            let _ = child.wait();
            return;
        }
    };
    let _ = stream.write_all(&code.to_be_bytes());
}
