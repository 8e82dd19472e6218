//! The statistics file and the settings files: paths, parsing, reads, and the per-vCPU
//! report (counters, window deltas, rates).
use std::{fs, path::Path};

use serde::Serialize;

use crate::{error::TracerError, sys::root::Root};

/// The statistics file: `off`, or `cpuN` and eight counters per online vCPU.
pub const STATS_PATH: &str = "/proc/powerpc/vcpudispatch_stats";
/// How often per second each vCPU's log is processed (1..HZ, default 50).
pub const FREQ_PATH: &str = "/proc/powerpc/vcpudispatch_stats_freq";
/// The debugfs directory of the raw per-CPU logs (`cpu-N`) and the event mask.
pub const DTL_DIR: &str = "/sys/kernel/debug/powerpc/dtl";
/// debugfs event mask: 0x1 cede, 0x2 preempt, 0x4 partition memory faults.
pub const DTL_MASK_PATH: &str = "/sys/kernel/debug/powerpc/dtl/dtl_event_mask";
/// Where the original settings are kept while they are changed (see the module docs).
pub const STATE_PATH: &str = "/run/tracer/dtl-state";

/// The kernel's names of the eight counters, in file order.
pub const COUNTER_NAMES: [&str; 8] = [
    "total_disp",
    "same_cpu_disp",
    "same_chip_disp",
    "diff_chip_disp",
    "far_chip_disp",
    "numa_home_disp",
    "numa_remote_disp",
    "numa_far_disp",
];

/// One vCPU's eight counters, named as in the kernel (`struct vcpu_dispatch_data`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DispatchCounters {
    /// Dispatches since enabling (the first one only sets the baseline).
    pub total_disp: u64,
    /// On the same physical CPU (or an SMT sibling) as the previous dispatch.
    pub same_cpu_disp: u64,
    /// Another core of the same chip.
    pub same_chip_disp: u64,
    /// Another chip.
    pub diff_chip_disp: u64,
    /// Another socket or drawer.
    pub far_chip_disp: u64,
    /// In the vCPU's home node.
    pub numa_home_disp: u64,
    /// In a neighbouring node.
    pub numa_remote_disp: u64,
    /// In a farther node.
    pub numa_far_disp: u64,
}

impl DispatchCounters {
    pub fn from_array(a: [u64; 8]) -> Self {
        DispatchCounters {
            total_disp: a[0],
            same_cpu_disp: a[1],
            same_chip_disp: a[2],
            diff_chip_disp: a[3],
            far_chip_disp: a[4],
            numa_home_disp: a[5],
            numa_remote_disp: a[6],
            numa_far_disp: a[7],
        }
    }

    pub fn to_array(&self) -> [u64; 8] {
        [
            self.total_disp,
            self.same_cpu_disp,
            self.same_chip_disp,
            self.diff_chip_disp,
            self.far_chip_disp,
            self.numa_home_disp,
            self.numa_remote_disp,
            self.numa_far_disp,
        ]
    }

    /// Counts since `earlier`. Re-enabling restarts the counters at zero, so if any went
    /// backwards the later values are themselves the counts since that restart.
    pub fn delta(&self, earlier: &Self) -> Self {
        let (a, b) = (self.to_array(), earlier.to_array());
        if a.iter().zip(b.iter()).any(|(x, y)| x < y) {
            return *self;
        }
        let mut d = [0u64; 8];
        for i in 0..8 {
            d[i] = a[i] - b[i];
        }
        Self::from_array(d)
    }

    /// Element-wise sum (saturating), for the all-vCPU line.
    pub fn add(&self, other: &Self) -> Self {
        let (a, b) = (self.to_array(), other.to_array());
        let mut s = [0u64; 8];
        for i in 0..8 {
            s[i] = a[i].saturating_add(b[i]);
        }
        Self::from_array(s)
    }

    /// numa_home_disp / total_disp; None without dispatches.
    pub fn home_ratio(&self) -> Option<f64> {
        (self.total_disp > 0).then(|| self.numa_home_disp as f64 / self.total_disp as f64)
    }

    /// Per-second rates over a window; None for an empty window.
    pub fn rates(&self, window_ns: u64) -> Option<DispatchRates> {
        if window_ns == 0 {
            return None;
        }
        let secs = window_ns as f64 / 1e9;
        let r = self.to_array().map(|v| v as f64 / secs);
        Some(DispatchRates {
            total_disp: r[0],
            same_cpu_disp: r[1],
            same_chip_disp: r[2],
            diff_chip_disp: r[3],
            far_chip_disp: r[4],
            numa_home_disp: r[5],
            numa_remote_disp: r[6],
            numa_far_disp: r[7],
        })
    }
}

/// The counters as events per second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DispatchRates {
    pub total_disp: f64,
    pub same_cpu_disp: f64,
    pub same_chip_disp: f64,
    pub diff_chip_disp: f64,
    pub far_chip_disp: f64,
    pub numa_home_disp: f64,
    pub numa_remote_disp: f64,
    pub numa_far_disp: f64,
}

/// One line of the statistics file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VcpuCounters {
    pub cpu: u32,
    #[serde(flatten)]
    pub counters: DispatchCounters,
}

/// What the statistics file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsState {
    /// Statistics are disabled (the file reads `off`).
    Off,
    /// Enabled: one entry per online vCPU, sorted by CPU.
    On(Vec<VcpuCounters>),
}

/// A short, char-boundary-safe excerpt of a bad line for error messages.
pub(crate) fn excerpt(s: &str) -> String {
    let mut e: String = s.chars().take(48).collect();
    if e.len() < s.len() {
        e.push('…');
    }
    e
}

/// Parses the statistics file's text. `path` only names the file in errors.
pub fn parse_stats(text: &str, path: &Path) -> Result<StatsState, TracerError> {
    let bad = |why: String| TracerError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    if text.trim() == "off" {
        return Ok(StatsState::Off);
    }
    let mut out: Vec<VcpuCounters> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let cpu = words
            .next()
            .and_then(|w| w.strip_prefix("cpu"))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| {
                bad(format!(
                    "line {lineno}: expected `cpuN` and 8 counters, found {:?}",
                    excerpt(line)
                ))
            })?;
        let mut vals = [0u64; 8];
        let mut n = 0usize;
        for w in words {
            if n == 8 {
                return Err(bad(format!(
                    "line {lineno}: more than 8 counters in {:?}",
                    excerpt(line)
                )));
            }
            vals[n] = w.parse().map_err(|_| {
                bad(format!(
                    "line {lineno}: counter {} ({}) is not a number: {:?}",
                    n + 1,
                    COUNTER_NAMES[n],
                    excerpt(w)
                ))
            })?;
            n += 1;
        }
        if n != 8 {
            return Err(bad(format!(
                "line {lineno}: cpu{cpu} has {n} counters, expected 8"
            )));
        }
        if out.iter().any(|v| v.cpu == cpu) {
            return Err(bad(format!("line {lineno}: cpu{cpu} appears twice")));
        }
        out.push(VcpuCounters {
            cpu,
            counters: DispatchCounters::from_array(vals),
        });
    }
    if out.is_empty() {
        return Err(bad("empty: expected `off` or `cpuN` lines".into()));
    }
    out.sort_by_key(|v| v.cpu);
    Ok(StatsState::On(out))
}

/// True when this root looks like a pseries shared-processor partition.
pub fn is_pseries(root: &Root) -> bool {
    root.path(STATS_PATH).exists()
}

/// Reads and parses the statistics file; a missing file means "not pseries".
pub fn read_stats(root: &Root) -> Result<StatsState, TracerError> {
    let path = root.path(STATS_PATH);
    let bytes = fs::read(&path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            TracerError::NotPseries(path.clone())
        } else {
            TracerError::Read {
                path: path.clone(),
                source,
            }
        }
    })?;
    parse_stats(&String::from_utf8_lossy(&bytes), &path)
}

/// Reads `vcpudispatch_stats_freq`.
pub fn read_freq(root: &Root) -> Result<u32, TracerError> {
    let path = root.path(FREQ_PATH);
    let text = read_text(&path)?;
    text.trim().parse().map_err(|_| TracerError::Malformed {
        path,
        why: format!("expected a number, found {:?}", excerpt(text.trim())),
    })
}

/// Parses debugfs `dtl_event_mask` (`0x07`).
pub fn parse_dtl_mask(text: &str, path: &Path) -> Result<u32, TracerError> {
    crate::sys::parse::parse_u32_any_base(text.trim()).map_err(|_| TracerError::Malformed {
        path: path.to_path_buf(),
        why: format!(
            "expected a mask like 0x07, found {:?}",
            excerpt(text.trim())
        ),
    })
}

/// Reads debugfs `dtl_event_mask`.
pub fn read_dtl_mask(root: &Root) -> Result<u32, TracerError> {
    let path = root.path(DTL_MASK_PATH);
    let text = read_text(&path)?;
    parse_dtl_mask(&text, &path)
}

pub(crate) fn read_text(path: &Path) -> Result<String, TracerError> {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|source| TracerError::Read {
            path: path.to_path_buf(),
            source,
        })
}

/// One vCPU in a report: the counters at the end (cumulative since enabling), and over the
/// window when there was one.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VcpuReport {
    pub cpu: u32,
    #[serde(flatten)]
    pub counters: DispatchCounters,
    /// numa_home_disp / total_disp of the cumulative counters.
    pub home_ratio: Option<f64>,
    /// Counts over the window; None for a snapshot or a vCPU not online at the start.
    pub delta: Option<DispatchCounters>,
    pub delta_home_ratio: Option<f64>,
    /// The window's counts per second.
    pub rates: Option<DispatchRates>,
}

/// Builds the per-vCPU report from a snapshot (`before` None) or a window.
pub fn vcpu_reports(
    before: Option<&[VcpuCounters]>,
    after: &[VcpuCounters],
    window_ns: u64,
) -> Vec<VcpuReport> {
    after
        .iter()
        .map(|a| {
            let delta = before.and_then(|b| {
                b.iter()
                    .find(|x| x.cpu == a.cpu)
                    .map(|x| a.counters.delta(&x.counters))
            });
            VcpuReport {
                cpu: a.cpu,
                counters: a.counters,
                home_ratio: a.counters.home_ratio(),
                delta,
                delta_home_ratio: delta.and_then(|d| d.home_ratio()),
                rates: delta.and_then(|d| d.rates(window_ns)),
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The statistics file as the kernel documents it (tests here and in `output`).
    pub(crate) const DOC: &str =
        "cpu0 6839 4126 2683 30 0 6821 18 0\ncpu1 2515 1274 1229 12 0 2509 6 0\n";

    #[test]
    fn parses_the_documented_example() {
        let p = Path::new("/proc/powerpc/vcpudispatch_stats");
        let StatsState::On(v) = parse_stats(DOC, p).unwrap() else {
            panic!("expected counters")
        };
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].cpu, 0);
        assert_eq!(
            v[0].counters.to_array(),
            [6839, 4126, 2683, 30, 0, 6821, 18, 0]
        );
        let r = v[0].counters.home_ratio().unwrap();
        assert!((r - 6821.0 / 6839.0).abs() < 1e-12);
        assert_eq!(parse_stats("off\n", p).unwrap(), StatsState::Off);
    }

    #[test]
    fn rejects_garbage_naming_the_file() {
        let p = Path::new("/x/vcpudispatch_stats");
        for bad in [
            "",
            "on\n",
            "cpu0 1 2 3\n",
            "cpu0 1 2 3 4 5 6 7 8 9\n",
            "cpuX 1 2 3 4 5 6 7 8\n",
            "cpu 1 2 3 4 5 6 7 8\n",
            "cpu0 1 2 3 4 5 6 7 -8\n",
            "cpu0 1 2 3 4 5 6 7 8\ncpu0 1 2 3 4 5 6 7 8\n",
            "cpu0 1 2 3 4 5 6 7 99999999999999999999999\n",
            "off\ncpu0 1 2 3 4 5 6 7 8\n",
        ] {
            let e = parse_stats(bad, p).expect_err(bad).to_string();
            assert!(e.contains("/x/vcpudispatch_stats"), "{e}");
        }
    }

    #[test]
    fn deltas_rates_and_resets() {
        let a = DispatchCounters::from_array([10, 5, 5, 0, 0, 10, 0, 0]);
        let b = DispatchCounters::from_array([110, 55, 45, 10, 0, 100, 10, 0]);
        let d = b.delta(&a);
        assert_eq!(d.to_array(), [100, 50, 40, 10, 0, 90, 10, 0]);
        assert_eq!(d.home_ratio(), Some(0.9));
        let r = d.rates(2_000_000_000).unwrap();
        assert_eq!(r.total_disp, 50.0);
        assert!(d.rates(0).is_none());
        // re-enabled in between: the later counters are the delta
        assert_eq!(a.delta(&b), a);
        assert_eq!(DispatchCounters::default().home_ratio(), None);
    }
}
