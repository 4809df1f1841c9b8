//! CPU pinning for the demo: the client's measuring thread and the server's
//! threads on different CPUs, so two busy-polling partners never share a core
//! (on a loaded 2-core machine they otherwise did, and every one-way trip
//! waited for the spinning sender to give up its 200 µs spin and sleep).

use std::io;
use std::sync::OnceLock;

/// Restrict the calling thread to `cpus` (every CPU of [`cpus`] when empty).
pub fn pin_current(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let all = if cpus.is_empty() { self::cpus() } else { cpus };
    for &c in all {
        if c >= libc::CPU_SETSIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {c} is beyond what a cpu_set_t holds"),
            ));
        }
        // SAFETY: CPU_SET writes one bit of `set`, which lives on our stack;
        // `c` is below CPU_SETSIZE (checked above).
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

/// The CPUs this process may run on, in ascending order, as the thread that
/// first asked saw them. `main` asks before any thread is pinned: asked
/// later, from a pinned thread, the answer would be that thread's one CPU
/// (as `std::thread::available_parallelism` is), and a later phase of the
/// demo would pin client and server to the same core.
pub fn cpus() -> &'static [usize] {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    CPUS.get_or_init(|| {
        let from_mask = current().map(|set| {
            (0..libc::CPU_SETSIZE as usize)
                // SAFETY: CPU_ISSET reads one bit of a valid cpu_set_t.
                .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                .collect::<Vec<_>>()
        });
        match from_mask {
            Some(v) if !v.is_empty() => v,
            _ => vec![0],
        }
    })
}

/// How many CPUs this process may run on (see [`cpus`]).
pub fn online() -> usize {
    cpus().len()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mask_cpus(set: &libc::cpu_set_t) -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads one bit of a valid cpu_set_t.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
            .collect()
    }

    /// A thread pinned to one CPU and then unpinned gets every CPU back,
    /// and threads it spawns are not left on its CPU: the demo's second
    /// phase put client and server on one core when "every CPU" was read
    /// from the pinned thread's own mask.
    #[test]
    fn unpinning_a_pinned_thread_restores_every_cpu() {
        std::thread::spawn(|| {
            let all = cpus().to_vec();
            pin_current(&[all[0]]).unwrap();
            assert_eq!(mask_cpus(&current().unwrap()), vec![all[0]]);
            assert_eq!(
                cpus(),
                all.as_slice(),
                "the CPU list must not shrink with a pin"
            );
            pin_current(&[]).unwrap();
            assert_eq!(mask_cpus(&current().unwrap()), all);
        })
        .join()
        .unwrap();
    }
}
