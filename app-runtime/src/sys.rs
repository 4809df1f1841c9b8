//! Every libc call of the runtime: the background thread's niceness and
//! the eventfd that wakes it.
#![allow(unsafe_code)]

/// The background thread's niceness. It helps a rank that computes and
/// must not take the core from it: where every core runs a rank (as MPI
/// jobs run), a helper at the rank's own priority preempts the rank at
/// each of its wake-ups, and the radix sort lost about a tenth of its speed
/// to it; at 19 it takes the time the scheduler can spare, and all of an
/// idle core (docs/BENCHMARKS.md, "The radix sort and the background
/// thread").
const BACKGROUND_NICE: libc::c_int = 19;

/// Give the calling thread [`BACKGROUND_NICE`]; where the system refuses,
/// it keeps its priority (and says so in the log).
pub(crate) fn lower_priority() {
    // SAFETY: gettid has no arguments and cannot fail; setpriority with
    // PRIO_PROCESS and a thread id changes only that thread's niceness.
    let rc = unsafe {
        libc::setpriority(
            libc::PRIO_PROCESS,
            libc::gettid() as libc::id_t,
            BACKGROUND_NICE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        tracing::debug!(%e, "background thread keeps its priority");
    }
}

/// An eventfd the background thread sleeps on beside the transports'
/// descriptors: stopping wakes it.
pub(crate) struct Wake(std::os::fd::OwnedFd);

impl Wake {
    pub(crate) fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd(2) with valid flags; it returns a new descriptor
        // or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        Ok(Wake(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }))
    }

    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }

    pub(crate) fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to our eventfd; a full
        // counter (EAGAIN) means it is signalled already.
        let _ = unsafe { libc::write(self.fd(), one.as_ptr().cast(), one.len()) };
    }

    pub(crate) fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer from our
        // non-blocking eventfd (EAGAIN when not signalled).
        let _ = unsafe { libc::read(self.fd(), buf.as_mut_ptr().cast(), buf.len()) };
    }
}
