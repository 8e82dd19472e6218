//! Clocks shared with the kernel programs.

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_BOOTTIME less CLOCK_MONOTONIC in ns (the time spent suspended since boot): what
/// moves a `bpf_ktime_get_ns` timestamp onto CLOCK_BOOTTIME, Perfetto's trace clock. Read
/// between two monotonic reads, so it is off by at most half the time the three take.
pub fn boot_offset_ns() -> u64 {
    let read = |id| {
        let ts = rustix::time::clock_gettime(id);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let a = read(rustix::time::ClockId::Monotonic);
    let boot = read(rustix::time::ClockId::Boottime);
    let b = read(rustix::time::ClockId::Monotonic);
    boot.saturating_sub(a + (b - a) / 2)
}
