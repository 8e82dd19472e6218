//! When a thread was born, on the clock the programs use (CLOCK_MONOTONIC): from
//! `/proc/PID/task/TID/stat` field 22, its start in clock ticks since boot (which counts
//! suspended time: CLOCK_BOOTTIME).
use crate::sys::root::Root;

/// The thread's start, CLOCK_MONOTONIC ns, to one clock tick (10 ms at USER_HZ 100);
/// None when it is gone.
pub fn started_ns(root: &Root, tid: u32) -> Option<u64> {
    let stat = crate::sys::procfs::thread_stat(root, tid)?;
    // "pid (comm) state ...": the name may hold ')' and spaces; field 22 is the 20th
    // after it.
    let rest = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
    let ticks: u64 = std::str::from_utf8(rest)
        .ok()?
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let boot_ns = ticks.saturating_mul(1_000_000_000) / user_hz();
    // Boot time to monotonic time: less the time the machine was suspended.
    let asleep = crate::sys::clock::boot_offset_ns();
    Some(boot_ns.saturating_sub(asleep))
}

/// How precise [`started_ns`] is: one clock tick (USER_HZ), in ns.
pub fn precision_ns() -> u64 {
    1_000_000_000 / user_hz()
}

fn user_hz() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}
