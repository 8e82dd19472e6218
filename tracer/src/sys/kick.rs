//! A thread of ours put on each CPU once, right after the programs attach. The switch
//! to it tells the programs which thread ran there since before the window (its slice
//! counts from the opening). On a CPU where nothing else switches, a lone spinner pinned
//! there, no read would know that thread until its next switch: an interval showed it
//! off-CPU, a later one with all of it at once (a hostile test pass, 2026-12-07: 0 ns,
//! then 704 ms in a 99 ms interval).

/// Spawns the thread, which visits `cpus` in turn and ends. Best effort: a CPU this
/// process may not run on (a cpuset) is skipped, and without CAP_SYS_NICE the visit
/// waits for the fair class to give it the CPU (within a slice) rather than preempt.
pub fn kick_cpus(cpus: Vec<u32>) {
    let spawned = std::thread::Builder::new()
        .name("tracer-kick".into())
        .spawn(move || {
            // SCHED_FIFO at the lowest priority preempts any fair-class thread at once.
            // Zeroed, then the priority: musl's `sched_param` has more fields than glibc's.
            // SAFETY: a plain C struct, all zero is valid.
            let mut p: libc::sched_param = unsafe { std::mem::zeroed() };
            p.sched_priority = 1;
            // SAFETY: sets this thread's own policy from a valid parameter.
            let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
            for cpu in cpus {
                let mut set = rustix::thread::CpuSet::new();
                set.set(cpu as usize);
                // Returns with this thread running on `cpu`: the switch there is done.
                if let Err(e) = rustix::thread::sched_setaffinity(None, &set) {
                    log::debug!("visiting CPU {cpu}: {e}");
                }
            }
        });
    if let Err(e) = spawned {
        log::debug!("no thread to visit the CPUs: {e}");
    }
}
