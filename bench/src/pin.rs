//! Pinning a benchmark's busy-polling threads to CPUs of their own.

/// Keep the calling thread on one CPU, so the two busy-polling sides do not
/// end up time-sharing a core (a round trip would then cost a time slice).
pub fn pin_to_cpu(cpu: usize) {
    // Online CPUs, not `available_parallelism` (which reports the calling
    // thread's affinity mask, inherited from an already pinned parent).
    // SAFETY: sysconf has no memory-safety preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    if cpus < 2 {
        return;
    }
    // SAFETY: cpu_set_t is plain data for which all-zero is the empty set;
    // CPU_SET writes inside it (cpu < CPU_SETSIZE) and sched_setaffinity
    // only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu % cpus, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        eprintln!(
            "could not pin to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Let the calling thread run on every online CPU again: threads inherit
/// their creator's affinity, so a thread meant to be scheduled freely,
/// started by a pinned one, would otherwise share its creator's CPU.
pub fn any_cpu() {
    // SAFETY: sysconf has no memory-safety preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    // SAFETY: as in `pin_to_cpu`: a zeroed cpu_set_t is the empty set,
    // CPU_SET writes inside it, sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..cpus.min(libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        eprintln!(
            "could not allow every CPU: {}",
            std::io::Error::last_os_error()
        );
    }
}
