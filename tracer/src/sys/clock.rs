//! Clocks shared with the kernel programs.

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_BOOTTIME less CLOCK_MONOTONIC in ns (the time spent suspended since boot): what
/// moves a `bpf_ktime_get_ns` timestamp onto CLOCK_BOOTTIME, Perfetto's trace clock. Each
/// try reads it between two monotonic reads; the closest of a few is kept, so one
/// interrupted or preempted try (20 µs off seen in torture, 2026-12-06) does not count.
pub fn boot_offset_ns() -> u64 {
    let read = |id| {
        let ts = rustix::time::clock_gettime(id);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let mut best = (u64::MAX, 0);
    for _ in 0..8 {
        let a = read(rustix::time::ClockId::Monotonic);
        let boot = read(rustix::time::ClockId::Boottime);
        let b = read(rustix::time::ClockId::Monotonic);
        if b - a < best.0 {
            best = (b - a, boot.saturating_sub(a + (b - a) / 2));
        }
    }
    best.1
}
