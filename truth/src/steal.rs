//! The hypervisor's steal time as the kernel counts it. The scheduler's runtime
//! (schedstat, `CLOCK_THREAD_CPUTIME_ID`, cgroup usage, the tracer's slices) leaves it
//! out where the kernel accounts it (`CONFIG_PARAVIRT_TIME_ACCOUNTING`); clocks
//! (task-clock, the wall time of a cut slice, a trace's timestamps) count it. A
//! comparison of the two allows what the kernel says was stolen meanwhile.

/// `/proc/stat` counts in USER_HZ ticks, 100 a second on every Linux ABI.
pub const TICK_NS: u64 = 10_000_000;

/// Steal time of all CPUs since boot (ns, in whole ticks).
pub fn steal_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_steal_ticks(&s) * TICK_NS
}

/// The aggregate `cpu` line's eighth figure (steal), in ticks.
fn parse_steal_ticks(stat: &str) -> u64 {
    stat.lines()
        .next()
        .filter(|l| l.starts_with("cpu "))
        .and_then(|l| l.split_whitespace().nth(8)?.parse().ok())
        .unwrap_or(0)
}

/// Steal time from [`Steal::start`] on.
#[derive(Clone, Copy, Debug)]
pub struct Steal {
    start: u64,
}

impl Steal {
    pub fn start() -> Steal {
        Steal { start: steal_ns() }
    }

    /// What was stolen since the start, plus one tick for the truncation of the two
    /// readings where the machine has ever had steal (0 where it has none).
    pub fn allowance_ns(&self) -> f64 {
        allowance(self.start, steal_ns())
    }
}

fn allowance(start: u64, now: u64) -> f64 {
    if now == 0 {
        0.0
    } else {
        (now.saturating_sub(start) + TICK_NS) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_the_eighth_figure_of_the_cpu_line() {
        let stat = "cpu  4361185 946789 1198728 2812201 14822 0 18678 23385 0 0\n\
                    cpu0 2156169 456639 637570 1408941 8435 0 8195 11452 0 0\n";
        assert_eq!(parse_steal_ticks(stat), 23385);
        assert_eq!(parse_steal_ticks("intr 5\n"), 0);
        assert_eq!(parse_steal_ticks(""), 0);
    }

    #[test]
    fn no_steal_allows_nothing_and_any_steal_one_tick_more() {
        assert_eq!(allowance(0, 0), 0.0);
        assert_eq!(allowance(5 * TICK_NS, 5 * TICK_NS), TICK_NS as f64);
        assert_eq!(allowance(5 * TICK_NS, 8 * TICK_NS), 4.0 * TICK_NS as f64);
    }
}
