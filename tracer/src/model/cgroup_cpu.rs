//! A `--cgroup` target's CPU bandwidth throttling and CPU pressure over the window, beside
//! its run-queue waits: whether a p99 is the quota's doing or contention is one look.
use serde::Serialize;

/// One read of the cgroup's cumulative figures (None: the kernel shows none: no
/// bandwidth lines in `cpu.stat`, no PSI).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCpuRead {
    /// `nr_periods`, `nr_throttled`, throttled time in ns.
    pub bandwidth: Option<(u64, u64, u64)>,
    /// PSI `cpu.pressure` totals in ns: `some`, and `full` where the kernel has it.
    pub pressure: Option<(u64, Option<u64>)>,
}

/// What the window saw of the cgroup's CPU limits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CgroupCpuReport {
    /// The cgroup, below its hierarchy's mount (escaped).
    pub cgroup: String,
    /// Enforcement periods with runnable tasks; 0 when no quota is in force.
    pub periods: Option<u64>,
    pub throttled_periods: Option<u64>,
    pub throttled_ns: Option<u64>,
    pub pressure_some_ns: Option<u64>,
    pub pressure_full_ns: Option<u64>,
}

/// The window's share: `to - from` of each figure both reads have (a counter that went
/// backwards, the cgroup removed and made again, gives None rather than a wrap).
pub fn delta(cgroup: String, from: &CgroupCpuRead, to: &CgroupCpuRead) -> CgroupCpuReport {
    let d = |a: u64, b: u64| b.checked_sub(a);
    let bw = match (from.bandwidth, to.bandwidth) {
        (Some(a), Some(b)) => (d(a.0, b.0), d(a.1, b.1), d(a.2, b.2)),
        _ => (None, None, None),
    };
    let (some, full) = match (from.pressure, to.pressure) {
        (Some(a), Some(b)) => (d(a.0, b.0), a.1.zip(b.1).and_then(|(x, y)| d(x, y))),
        _ => (None, None),
    };
    CgroupCpuReport {
        cgroup,
        periods: bw.0,
        throttled_periods: bw.1,
        throttled_ns: bw.2,
        pressure_some_ns: some,
        pressure_full_ns: full,
    }
}

impl CgroupCpuReport {
    /// Two lines for the text report.
    pub fn text(&self) -> String {
        let secs = |ns: u64| format!("{:.3}s", ns as f64 / 1e9);
        let mut out = format!("cgroup {}: ", self.cgroup);
        match (self.periods, self.throttled_periods, self.throttled_ns) {
            (Some(0), _, _) => out += "no CPU quota enforced in the window (0 periods)",
            (Some(p), Some(t), Some(ns)) => {
                out += &format!(
                    "throttled in {t} of {p} quota periods ({:.1}%), {} throttled",
                    100.0 * t as f64 / p as f64,
                    secs(ns)
                )
            }
            _ => out += "no CPU bandwidth figures (cpu.stat has none for it)",
        }
        out += "\n";
        match (self.pressure_some_ns, self.pressure_full_ns) {
            (Some(s), Some(f)) => {
                out += &format!("  CPU pressure: some {}, full {}\n", secs(s), secs(f))
            }
            (Some(s), None) => out += &format!("  CPU pressure: some {}\n", secs(s)),
            _ => out += "  CPU pressure: not available (no cpu.pressure for it)\n",
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_share_of_throttling_and_pressure() {
        let a = CgroupCpuRead {
            bandwidth: Some((100, 40, 3_000_000_000)),
            pressure: Some((5_000_000_000, Some(1_000_000_000))),
        };
        let b = CgroupCpuRead {
            bandwidth: Some((120, 55, 4_500_000_000)),
            pressure: Some((6_250_000_000, Some(1_500_000_000))),
        };
        let r = delta("/pod".into(), &a, &b);
        assert_eq!(
            (r.periods, r.throttled_periods, r.throttled_ns),
            (Some(20), Some(15), Some(1_500_000_000))
        );
        assert_eq!(
            (r.pressure_some_ns, r.pressure_full_ns),
            (Some(1_250_000_000), Some(500_000_000))
        );
        assert_eq!(
            r.text(),
            "cgroup /pod: throttled in 15 of 20 quota periods (75.0%), 1.500s throttled\n  \
             CPU pressure: some 1.250s, full 0.500s\n"
        );
        // Made again between the reads: no wrap-around.
        let back = delta("/pod".into(), &b, &a);
        assert_eq!((back.periods, back.pressure_some_ns), (None, None));
        let none = delta("/x".into(), &CgroupCpuRead::default(), &b);
        assert!(
            none.text().contains("no CPU bandwidth figures"),
            "{}",
            none.text()
        );
        assert!(none.text().contains("not available"));
        let idle = CgroupCpuRead {
            bandwidth: Some((7, 0, 0)),
            pressure: None,
        };
        assert!(delta("/y".into(), &idle, &idle)
            .text()
            .contains("no CPU quota enforced"));
    }
}
