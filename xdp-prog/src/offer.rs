//! Offering descriptors to other processes of the host, and taking them.
//!
//! The mechanism [`crate::shared::SharedProgram`] uses for its BPF link and
//! maps, made available to other shared kernel objects (the AF_XDP buffer
//! pools of `llc-stack`): a process *offers* some of its descriptors by
//! binding an abstract unix datagram socket named
//! `<prefix>member/<pid>/<fd>,<fd>,...`; another process of the same network
//! namespace (and PID namespace) lists the names in
//! `/proc/thread-self/net/unix` and takes duplicates with `pidfd_open` +
//! `pidfd_getfd`. The name disappears when the socket is closed, at the
//! latest when its process exits or is killed, so offers never go stale; a
//! process that dies between the listing and the taking yields `ESRCH` or
//! `EBADF`, and the taker moves on to the next offer.
//!
//! *Claims* are names of their own (`claim`): a second bind of the same
//! name fails with `EADDRINUSE`, atomically between processes, and the name
//! is freed with its holder.
//!
//! Taking needs `PTRACE_MODE_ATTACH_REALCREDS` over the offering process
//! (same user; `CAP_SYS_PTRACE` under Yama `ptrace_scope` >= 1): refused
//! takes give `EPERM`. What was taken must be verified by the taker (the
//! descriptor number may have been reused for something else by then).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use crate::sys;

/// Bind the abstract unix datagram socket `name`.
pub fn bind_abstract(name: &str) -> io::Result<UnixDatagram> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixDatagram::bind_addr(&addr)
}

/// Claim `name` (bind it); `Ok(None)` when a live process holds it. The claim
/// lasts as long as the returned socket.
pub fn claim(name: &str) -> io::Result<Option<UnixDatagram>> {
    match bind_abstract(name) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The name under which process `pid` offers descriptors `fds`.
pub fn offer_name(prefix: &str, pid: u32, fds: &[i32]) -> String {
    let fds: Vec<String> = fds.iter().map(i32::to_string).collect();
    format!("{prefix}member/{pid}/{}", fds.join(","))
}

/// Descriptors offered under a prefix while this value lives.
#[derive(Debug)]
pub struct Offer {
    _socket: UnixDatagram,
    name: String,
}

impl Offer {
    /// Offer `fds` (which must stay open while the offer lives) under
    /// `prefix`, for this process.
    pub fn new(prefix: &str, fds: &[BorrowedFd<'_>]) -> io::Result<Offer> {
        let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        let name = offer_name(prefix, std::process::id(), &raw);
        Ok(Offer {
            _socket: bind_abstract(&name)?,
            name,
        })
    }

    /// The abstract name (without the leading NUL).
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// One offer as its name describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offered {
    /// The offering process (in the caller's PID namespace).
    pub pid: i32,
    /// Its descriptor numbers, in the order offered.
    pub fds: Vec<i32>,
}

impl Offered {
    /// Parse a name offered under `prefix`.
    pub fn parse(prefix: &str, name: &str) -> Option<Offered> {
        let rest = name.strip_prefix(prefix)?.strip_prefix("member/")?;
        let (pid, fds) = rest.split_once('/')?;
        let pid: i32 = pid.parse().ok().filter(|&p| p > 0)?;
        let fds: Vec<i32> = fds
            .split(',')
            .map(|f| f.parse().ok().filter(|&f: &i32| f >= 0))
            .collect::<Option<_>>()?;
        Some(Offered { pid, fds })
    }

    /// Duplicates of every offered descriptor (close-on-exec), in order.
    /// `EPERM`: no ptrace access over the process; `ESRCH`/`EBADF`: it is
    /// gone or closed the descriptor.
    pub fn take(&self) -> io::Result<Vec<OwnedFd>> {
        let pidfd = sys::pidfd_open(self.pid)?;
        self.fds
            .iter()
            .map(|&fd| sys::pidfd_getfd(pidfd.as_fd(), fd))
            .collect()
    }
}

/// Every offer under `prefix` in the calling thread's network namespace, as
/// listed in `/proc/thread-self/net/unix` (abstract names show there with a
/// leading `@`). `thread-self`, not `self`: a thread may have entered
/// another network namespace with `setns`.
pub fn offers(prefix: &str) -> io::Result<Vec<Offered>> {
    let table = std::fs::read_to_string("/proc/thread-self/net/unix")?;
    Ok(table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix('@'))
        .filter_map(|name| Offered::parse(prefix, name))
        .collect())
}

/// How many abstract names under `prefix` are bound in the calling
/// thread's network namespace (claims, offers): a count of live holders.
pub fn count_names(prefix: &str) -> io::Result<usize> {
    let table = std::fs::read_to_string("/proc/thread-self/net/unix")?;
    Ok(table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix('@'))
        .filter(|name| name.starts_with(prefix))
        .count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_offers_are_listed_and_taken() {
        let prefix = format!("llc-test-offer/{}/", std::process::id());
        assert_eq!(
            Offered::parse(&prefix, &offer_name(&prefix, 42, &[3, 17])),
            Some(Offered {
                pid: 42,
                fds: vec![3, 17]
            })
        );
        assert_eq!(
            Offered::parse(&prefix, &format!("{prefix}member/0/3")),
            None
        );
        assert_eq!(
            Offered::parse(&prefix, &format!("{prefix}member/9/x")),
            None
        );
        let (a, b) = UnixDatagram::pair().unwrap();
        let offer = Offer::new(&prefix, &[a.as_fd(), b.as_fd()]).unwrap();
        let listed = offers(&prefix).unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].pid as u32, std::process::id());
        match listed[0].take() {
            // Taking from ourselves works where pidfd_getfd is allowed.
            Ok(fds) => assert_eq!(fds.len(), 2),
            Err(e) => eprintln!("pidfd_getfd refused here: {e}"),
        }
        let claimed = claim(&format!("{prefix}claim")).unwrap();
        assert!(claimed.is_some());
        assert!(claim(&format!("{prefix}claim")).unwrap().is_none());
        drop(offer);
        // Another test of this binary may fork a helper process at this
        // moment: the child holds a copy of every descriptor until its exec
        // closes them (close-on-exec), so the name may outlive the drop by
        // that long. Await its disappearance, bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !offers(&prefix).unwrap().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the offer is still listed 10 s after it was dropped"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
