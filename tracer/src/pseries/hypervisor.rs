//! The "hypervisor" section of `tracer run`: when the host, not Linux, kept threads
//! from running.
//!
//! A [`Snapshot`] is taken at the start and at the end of the window. Everywhere it holds
//! the per-CPU `steal` column of /proc/stat (time a runnable vCPU waited for the host,
//! in USER_HZ ticks); on a pseries partition it also holds the vcpudispatch_stats
//! counters when they are enabled (the caller decides whether to enable them, with
//! [`crate::pseries::vcpudispatch::SettingsGuard`]).
use std::path::Path;

use serde::Serialize;

use crate::{
    error::TracerError,
    pseries::vcpudispatch::{self, StatsState, VcpuCounters, VcpuReport},
    sys::root::Root,
};

pub const PROC_STAT: &str = "/proc/stat";

/// One `cpuN` line's steal column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSteal {
    pub cpu: u32,
    /// USER_HZ ticks since boot.
    pub steal_ticks: u64,
}

/// Parses the per-CPU (`cpuN`) lines of /proc/stat; the aggregate `cpu` line and the
/// other lines are skipped. `steal` is the eighth number.
pub fn parse_proc_stat(text: &str, path: &Path) -> Result<Vec<CpuSteal>, TracerError> {
    let bad = |why: String| TracerError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    let mut out: Vec<CpuSteal> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut words = line.split_whitespace();
        let Some(first) = words.next() else { continue };
        let Some(num) = first.strip_prefix("cpu") else {
            continue;
        };
        if num.is_empty() {
            continue; // the all-CPU line
        }
        let digits = num.bytes().all(|b| b.is_ascii_digit());
        let cpu: u32 = num.parse().ok().filter(|_| digits).ok_or_else(|| {
            bad(format!(
                "line {}: bad CPU name {:?}",
                i + 1,
                vcpudispatch::excerpt(first)
            ))
        })?;
        let mut steal = None;
        for (k, w) in words.enumerate() {
            let v: u64 = w.parse().map_err(|_| {
                bad(format!(
                    "line {}: cpu{cpu} column {} is not a number: {:?}",
                    i + 1,
                    k + 1,
                    vcpudispatch::excerpt(w)
                ))
            })?;
            if k == 7 {
                steal = Some(v);
            }
        }
        let steal_ticks = steal.ok_or_else(|| {
            bad(format!(
                "line {}: cpu{cpu} has no steal column (fewer than 8 numbers)",
                i + 1
            ))
        })?;
        if out.iter().any(|c| c.cpu == cpu) {
            return Err(bad(format!("line {}: cpu{cpu} appears twice", i + 1)));
        }
        out.push(CpuSteal { cpu, steal_ticks });
    }
    if out.is_empty() {
        return Err(bad("no cpuN lines".into()));
    }
    out.sort_by_key(|c| c.cpu);
    Ok(out)
}

/// Ticks of /proc/stat per second (the kernel's AT_CLKTCK, what sysconf(_SC_CLK_TCK)
/// returns; 100 if unknown).
pub fn user_hz() -> u64 {
    Some(rustix::param::clock_ticks_per_second())
        .filter(|&v| v > 0)
        .unwrap_or(100)
}

/// The hypervisor's counters at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub steal: Vec<CpuSteal>,
    /// vcpudispatch_stats counters (pseries, when enabled).
    pub dispatch: Option<Vec<VcpuCounters>>,
    pub user_hz: u64,
    /// Why a source is missing.
    pub notes: Vec<String>,
}

impl Snapshot {
    /// Reads /proc/stat and, on pseries, vcpudispatch_stats if it is on.
    pub fn take(root: &Root) -> Result<Snapshot, TracerError> {
        let path = root.path(PROC_STAT);
        let text = vcpudispatch::read_text(&path)?;
        let steal = parse_proc_stat(&text, &path)?;
        let mut notes = Vec::new();
        let dispatch = if vcpudispatch::is_pseries(root) {
            match vcpudispatch::read_stats(root) {
                Ok(StatsState::On(v)) => Some(v),
                Ok(StatsState::Off) => {
                    notes.push(format!(
                        "{} is off: no dispatch view (`tracer dtl` enables it)",
                        vcpudispatch::STATS_PATH
                    ));
                    None
                }
                Err(e) => {
                    notes.push(e.to_string());
                    None
                }
            }
        } else {
            None
        };
        Ok(Snapshot {
            steal,
            dispatch,
            user_hz: user_hz(),
            notes,
        })
    }
}

/// Steal time of one CPU over the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CpuStealReport {
    pub cpu: u32,
    pub steal_ns: u64,
    /// Share of the window, 0..100 (None for an empty window).
    pub steal_percent: Option<f64>,
}

/// The hypervisor section.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HypervisorReport {
    /// `vcpudispatch_stats` when the dispatch view is present, else `steal`.
    pub source: &'static str,
    pub elapsed_ns: u64,
    pub user_hz: u64,
    pub cpus: Vec<CpuStealReport>,
    pub total_steal_ns: u64,
    /// Total steal over (window x CPUs shown).
    pub total_steal_percent: Option<f64>,
    /// pseries: per-vCPU dispatch counters over the window.
    pub dispatch: Option<Vec<VcpuReport>>,
    pub notes: Vec<String>,
}

fn ticks_ns(ticks: u64, hz: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(hz.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Percent of `of_ns`, clamped to 0..100: tick granularity can overshoot a short window.
fn percent(ns: u64, of_ns: u128) -> Option<f64> {
    (of_ns > 0).then(|| (ns as f64 / of_ns as f64 * 100.0).clamp(0.0, 100.0))
}

/// The window between two snapshots, for `cpus` (all when None). CPUs missing from
/// either snapshot (hotplug) are left out; a counter that went backwards counts as 0.
pub fn report(
    before: &Snapshot,
    after: &Snapshot,
    cpus: Option<&[u32]>,
    elapsed_ns: u64,
) -> HypervisorReport {
    let wanted = |cpu: u32| cpus.is_none_or(|l| l.contains(&cpu));
    let hz = after.user_hz;
    let rows: Vec<CpuStealReport> = after
        .steal
        .iter()
        .filter(|a| wanted(a.cpu))
        .filter_map(|a| {
            let b = before.steal.iter().find(|b| b.cpu == a.cpu)?;
            let steal_ns = ticks_ns(a.steal_ticks.saturating_sub(b.steal_ticks), hz);
            Some(CpuStealReport {
                cpu: a.cpu,
                steal_ns,
                steal_percent: percent(steal_ns, u128::from(elapsed_ns)),
            })
        })
        .collect();
    let total: u64 = rows.iter().fold(0u64, |a, r| a.saturating_add(r.steal_ns));
    let dispatch = match (&before.dispatch, &after.dispatch) {
        (Some(b), Some(a)) => {
            let a: Vec<VcpuCounters> = a.iter().filter(|v| wanted(v.cpu)).copied().collect();
            Some(vcpudispatch::vcpu_reports(Some(b), &a, elapsed_ns))
        }
        _ => None,
    };
    let mut notes = after.notes.clone();
    if let Some(l) = cpus {
        let missing: Vec<String> = l
            .iter()
            .filter(|c| !rows.iter().any(|r| r.cpu == **c))
            .map(|c| c.to_string())
            .collect();
        if !missing.is_empty() {
            notes.push(format!(
                "no steal data for CPU {} (offline?)",
                missing.join(", ")
            ));
        }
    }
    HypervisorReport {
        source: if dispatch.is_some() {
            "vcpudispatch_stats"
        } else {
            "steal"
        },
        elapsed_ns,
        user_hz: hz,
        total_steal_percent: percent(total, u128::from(elapsed_ns) * rows.len() as u128),
        total_steal_ns: total,
        cpus: rows,
        dispatch,
        notes,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pseries::vcpudispatch::DispatchCounters;

    const STAT: &str = "cpu  10 0 10 100 0 0 0 7 0 0\n\
cpu0 5 0 5 50 0 0 0 3 0 0\n\
cpu1 5 0 5 50 0 0 0 4 0 0\n\
intr 12345 0 0\nctxt 999\nbtime 1700000000\n";

    /// A snapshot with these (CPU, steal ticks), for tests here and in `output`.
    pub(crate) fn snap(steal: &[(u32, u64)], hz: u64) -> Snapshot {
        Snapshot {
            steal: steal
                .iter()
                .map(|&(cpu, steal_ticks)| CpuSteal { cpu, steal_ticks })
                .collect(),
            dispatch: None,
            user_hz: hz,
            notes: vec![],
        }
    }

    #[test]
    fn parses_per_cpu_steal() {
        let p = Path::new("/proc/stat");
        let v = parse_proc_stat(STAT, p).unwrap();
        assert_eq!(
            v,
            vec![
                CpuSteal {
                    cpu: 0,
                    steal_ticks: 3
                },
                CpuSteal {
                    cpu: 1,
                    steal_ticks: 4
                }
            ]
        );
        for bad in [
            "",
            "cpu0 1 2 3\n",
            "cpu0 1 2 3 4 5 6 7 x\n",
            "cpuA 1 2 3 4 5 6 7 8\n",
            "cpu0 1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n",
        ] {
            let e = parse_proc_stat(bad, p).expect_err(bad).to_string();
            assert!(e.contains("/proc/stat"), "{e}");
        }
    }

    #[test]
    fn steal_over_the_window() {
        let b = snap(&[(0, 100), (1, 100), (2, 5)], 100);
        let a = snap(&[(0, 150), (1, 100), (2, 4)], 100);
        let r = report(&b, &a, None, 1_000_000_000);
        assert_eq!(r.cpus[0].steal_ns, 500_000_000);
        assert_eq!(r.cpus[0].steal_percent, Some(50.0));
        assert_eq!(r.cpus[2].steal_ns, 0, "backwards counts as 0");
        assert_eq!(r.total_steal_ns, 500_000_000);
        let t = r.total_steal_percent.unwrap();
        assert!((t - 50.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.source, "steal");

        let only1 = report(&b, &a, Some(&[1, 7]), 1_000_000_000);
        assert_eq!(only1.cpus.len(), 1);
        assert!(only1.notes.iter().any(|n| n.contains("CPU 7")));
        assert_eq!(report(&b, &a, None, 0).cpus[0].steal_percent, None);
    }

    #[test]
    fn dispatch_view_when_both_snapshots_have_it() {
        let mut b = snap(&[(0, 0)], 100);
        let mut a = snap(&[(0, 0)], 100);
        b.dispatch = Some(vec![VcpuCounters {
            cpu: 0,
            counters: DispatchCounters::from_array([10, 10, 0, 0, 0, 10, 0, 0]),
        }]);
        a.dispatch = Some(vec![VcpuCounters {
            cpu: 0,
            counters: DispatchCounters::from_array([30, 20, 10, 0, 0, 25, 5, 0]),
        }]);
        let r = report(&b, &a, None, 2_000_000_000);
        assert_eq!(r.source, "vcpudispatch_stats");
        let d = &r.dispatch.as_ref().unwrap()[0];
        assert_eq!(d.delta.unwrap().total_disp, 20);
        assert_eq!(d.rates.unwrap().total_disp, 10.0);
        assert_eq!(d.delta_home_ratio, Some(0.75));
    }
}
