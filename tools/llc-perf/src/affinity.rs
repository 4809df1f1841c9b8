//! CPU pinning for the demo: the client's measuring thread and the server's
//! threads on different CPUs, so two busy-polling partners never share a core
//! (on a loaded 2-core machine they otherwise did, and every one-way trip
//! waited for the spinning sender to give up its 200 µs spin and sleep).

use std::io;

/// Restrict the calling thread to `cpus` (all online CPUs when empty).
pub fn pin_current(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let all: Vec<usize> = if cpus.is_empty() {
        (0..online()).collect()
    } else {
        cpus.to_vec()
    };
    for &c in &all {
        // SAFETY: CPU_SET writes one bit of `set`, which lives on our stack;
        // `c` is below CPU_SETSIZE (checked by the caller's CPU count).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the
    // size passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPUs online.
pub fn online() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(libc::CPU_SETSIZE as usize)
}

/// The calling thread's current mask.
pub fn current() -> Option<libc::cpu_set_t> {
    // SAFETY: all-zero is a valid cpu_set_t; sched_getaffinity fills at most
    // the size passed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is writable and of that size.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    (r == 0).then_some(set)
}

/// Put back a mask from [`current`].
pub fn restore(mask: Option<libc::cpu_set_t>) -> io::Result<()> {
    let Some(set) = mask else { return Ok(()) };
    // SAFETY: as in `pin_current`.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
