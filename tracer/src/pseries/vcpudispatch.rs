//! `/proc/powerpc/vcpudispatch_stats`: the pseries hypervisor's per-vCPU dispatch counters,
//! and crash-safe changes of the Dispatch Trace Log settings.
//!
//! The counters say where the hypervisor ran each virtual CPU: on the same physical CPU as
//! last time, elsewhere on the chip, on another chip or socket, and relative to the vCPU's
//! home node. They are cumulative since enabling, so useful numbers are deltas and rates.
//!
//! # Settings and the state file
//! `tracer dtl` may enable `vcpudispatch_stats`, change `vcpudispatch_stats_freq` and the
//! debugfs `dtl_event_mask`. Before it changes any of them it writes the original values
//! to [`STATE_PATH`] (`/run/tracer/dtl-state`, under `--root`), one `key value` per line:
//!
//! ```text
//! # tracer dtl: original DTL settings, restored at exit or by the next run if this one died
//! pid 4242
//! starttime 1234567
//! vcpudispatch_stats 0
//! vcpudispatch_stats_freq 50
//! dtl_event_mask 0x7
//! ```
//!
//! The values are restored, and the file removed, at normal exit, after SIGINT/SIGTERM
//! (the caller turns them into a normal exit) and on unwinding. After a crash or SIGKILL the
//! next `tracer dtl` finds the file, sees that the PID is gone (or reused: `starttime`, field
//! 22 of `/proc/PID/stat`, differs) and restores the settings before doing anything else.
//! While the writer is alive, a second run refuses to touch the settings.
use std::{
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

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
        if source.kind() == io::ErrorKind::NotFound {
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

/// Writes one setting; EBUSY becomes an explanation of who holds the DTL, EINVAL a
/// rejection with the valid range.
pub fn write_setting(root: &Root, abs: &str, value: &str) -> Result<(), TracerError> {
    let path = root.path(abs);
    let res = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{value}\n").as_bytes()));
    res.map_err(|source| match source.raw_os_error() {
        Some(libc::EBUSY) => TracerError::DtlBusy {
            path: path.clone(),
            hint: busy_hint(root),
        },
        Some(libc::EINVAL) => TracerError::Rejected {
            path: path.clone(),
            value: value.to_string(),
            why: if abs == FREQ_PATH {
                "the valid range is 1..HZ (the kernel's CONFIG_HZ, usually 100, 250 or 1000)".into()
            } else if abs == STATS_PATH {
                "only 0 and 1 are accepted".into()
            } else {
                "invalid value".into()
            },
        },
        _ => TracerError::Write {
            path: path.clone(),
            source,
        },
    })
}

/// Says which of the three mutually exclusive DTL consumers (debugfs DTL readers, perf's
/// `vpa_dtl` PMU, vcpudispatch_stats) is probably active, and what to do about it.
pub fn busy_hint(root: &Root) -> String {
    let mut found = Vec::new();
    if let Ok(StatsState::On(_)) = read_stats(root) {
        found.push(format!(
            "vcpudispatch_stats is enabled (stop the tool that enabled it, or `echo 0 > {STATS_PATH}`)"
        ));
    }
    let (readers, perfs) = scan_processes(root);
    for (pid, comm, file) in readers {
        found.push(format!(
            "PID {pid} ({comm}) reads the debugfs DTL {file} (stop it)"
        ));
    }
    for (pid, comm) in perfs {
        found.push(format!(
            "PID {pid} ({comm}) may be recording perf's vpa_dtl PMU (stop it)"
        ));
    }
    if found.is_empty() {
        format!(
            "only one of debugfs DTL readers ({DTL_DIR}/cpu-N), perf's vpa_dtl PMU and \
             vcpudispatch_stats can be active; look with `cat {STATS_PATH}`, \
             `fuser {DTL_DIR}/cpu-*` and `pgrep -a perf`, stop it and retry"
        )
    } else {
        format!("likely: {}", found.join("; "))
    }
}

/// (PID, comm, open DTL file) of debugfs DTL readers.
type Readers = Vec<(u32, String, String)>;
/// (PID, comm) of perf processes.
type Perfs = Vec<(u32, String)>;

/// Processes with a debugfs DTL file open, and processes named perf; bounded so a huge
/// /proc cannot stall the error path.
fn scan_processes(root: &Root) -> (Readers, Perfs) {
    let mut readers = Vec::new();
    let mut perfs = Vec::new();
    let Ok(dir) = fs::read_dir(root.path("/proc")) else {
        return (readers, perfs);
    };
    let me = std::process::id();
    for ent in dir.flatten().take(100_000) {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let comm = fs::read_to_string(ent.path().join("comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        if comm == "perf" {
            perfs.push((pid, comm.clone()));
        }
        if let Ok(fds) = fs::read_dir(ent.path().join("fd")) {
            for fd in fds.flatten().take(65_536) {
                if let Ok(target) = fs::read_link(fd.path()) {
                    let t = target.to_string_lossy();
                    if t.starts_with(&format!("{DTL_DIR}/cpu-")) {
                        readers.push((pid, comm.clone(), t.into_owned()));
                        break;
                    }
                }
            }
        }
    }
    (readers, perfs)
}

/// The original values of everything `tracer dtl` changed, and who changed them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedSettings {
    pub pid: u32,
    /// Start time of `pid` (clock ticks after boot), to tell a reused PID apart.
    pub starttime: Option<u64>,
    /// Whether vcpudispatch_stats was enabled before.
    pub stats_enabled: Option<bool>,
    pub freq: Option<u32>,
    pub dtl_mask: Option<u32>,
}

impl SavedSettings {
    pub fn is_empty(&self) -> bool {
        self.stats_enabled.is_none() && self.freq.is_none() && self.dtl_mask.is_none()
    }

    /// The state file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# tracer dtl: original DTL settings, restored at exit or by the next run if this one died\n",
        );
        s += &format!("pid {}\n", self.pid);
        if let Some(t) = self.starttime {
            s += &format!("starttime {t}\n");
        }
        if let Some(e) = self.stats_enabled {
            s += &format!("vcpudispatch_stats {}\n", u8::from(e));
        }
        if let Some(f) = self.freq {
            s += &format!("vcpudispatch_stats_freq {f}\n");
        }
        if let Some(m) = self.dtl_mask {
            s += &format!("dtl_event_mask {m:#x}\n");
        }
        s
    }

    /// Parses a state file; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, TracerError> {
        let bad = |why: String| TracerError::Malformed {
            path: path.to_path_buf(),
            why: format!("{why} (check the DTL settings by hand, then remove the file)"),
        };
        let mut s = SavedSettings::default();
        let mut have_pid = false;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, val) = line
                .split_once(' ')
                .map(|(k, v)| (k, v.trim()))
                .ok_or_else(|| bad(format!("line {}: expected `key value`", i + 1)))?;
            let num = || {
                crate::sys::parse::parse_u32_any_base(val)
                    .map_err(|_| bad(format!("line {}: bad value {:?}", i + 1, excerpt(val))))
            };
            match key {
                "pid" => {
                    s.pid = num()?;
                    have_pid = true;
                }
                "starttime" => {
                    s.starttime = Some(val.parse().map_err(|_| {
                        bad(format!("line {}: bad starttime {:?}", i + 1, excerpt(val)))
                    })?)
                }
                "vcpudispatch_stats" => {
                    s.stats_enabled = Some(match val {
                        "0" => false,
                        "1" => true,
                        _ => return Err(bad(format!("line {}: expected 0 or 1", i + 1))),
                    })
                }
                "vcpudispatch_stats_freq" => s.freq = Some(num()?),
                "dtl_event_mask" => s.dtl_mask = Some(num()?),
                _ => {
                    return Err(bad(format!(
                        "line {}: unknown key {:?}",
                        i + 1,
                        excerpt(key)
                    )))
                }
            }
        }
        if !have_pid {
            return Err(bad("no `pid` line".into()));
        }
        Ok(s)
    }
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` text.
pub fn parse_starttime(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn starttime_of(root: &Root, pid: u32) -> Option<u64> {
    fs::read_to_string(root.path(format!("/proc/{pid}/stat")))
        .ok()
        .and_then(|s| parse_starttime(&s))
}

/// Whether the process that wrote a state file still runs (same PID, same start time).
fn writer_alive(root: &Root, saved: &SavedSettings) -> bool {
    match fs::read_to_string(root.path(format!("/proc/{}/stat", saved.pid))) {
        Ok(stat) => match (saved.starttime, parse_starttime(&stat)) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        },
        Err(e) => e.kind() != io::ErrorKind::NotFound,
    }
}

/// Writes the saved values back (what is not recorded is left alone); tries them all and
/// returns the first error.
fn restore_values(root: &Root, s: &SavedSettings) -> Result<(), TracerError> {
    let mut first: Option<TracerError> = None;
    let mut keep = |r: Result<(), TracerError>| {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    };
    if let Some(m) = s.dtl_mask {
        keep(write_setting(root, DTL_MASK_PATH, &format!("{m:#x}")));
    }
    if let Some(f) = s.freq {
        keep(write_setting(root, FREQ_PATH, &f.to_string()));
    }
    if let Some(e) = s.stats_enabled {
        keep(write_setting(root, STATS_PATH, if e { "1" } else { "0" }));
    }
    first.map_or(Ok(()), Err)
}

/// What was restored on behalf of a run that died.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recovered {
    pub path: PathBuf,
    pub settings: SavedSettings,
}

impl Recovered {
    pub fn describe(&self) -> String {
        let s = &self.settings;
        let mut what = Vec::new();
        if let Some(e) = s.stats_enabled {
            what.push(format!("vcpudispatch_stats={}", u8::from(e)));
        }
        if let Some(f) = s.freq {
            what.push(format!("vcpudispatch_stats_freq={f}"));
        }
        if let Some(m) = s.dtl_mask {
            what.push(format!("dtl_event_mask={m:#x}"));
        }
        format!(
            "restored DTL settings left changed by a run that died (PID {}, {}): {}",
            s.pid,
            self.path.display(),
            if what.is_empty() {
                "nothing".into()
            } else {
                what.join(", ")
            }
        )
    }
}

/// Owns the DTL settings while they are changed; restores them on [`restore`] or drop.
///
/// [`restore`]: SettingsGuard::restore
#[derive(Debug)]
pub struct SettingsGuard {
    root: Root,
    path: PathBuf,
    saved: SavedSettings,
    /// True once our state file exists.
    written: bool,
}

impl SettingsGuard {
    /// Restores what a dead run left behind, then takes over. Fails while another live
    /// process holds the state file.
    pub fn acquire(root: &Root) -> Result<(Self, Option<Recovered>), TracerError> {
        let path = root.path(STATE_PATH);
        let recovered = recover_stale(root)?;
        let pid = std::process::id();
        let guard = SettingsGuard {
            root: root.clone(),
            path,
            saved: SavedSettings {
                pid,
                starttime: starttime_of(root, pid),
                ..Default::default()
            },
            written: false,
        };
        Ok((guard, recovered))
    }

    /// The state file this guard writes.
    pub fn state_path(&self) -> &Path {
        &self.path
    }

    /// Enables vcpudispatch_stats if it is off. Returns whether it was off.
    pub fn enable_stats(&mut self) -> Result<bool, TracerError> {
        if read_stats(&self.root)? != StatsState::Off {
            return Ok(false);
        }
        self.change(
            |s| s.stats_enabled.is_none(),
            |s| s.stats_enabled = Some(false),
            |s| s.stats_enabled = None,
            STATS_PATH,
            "1",
        )?;
        Ok(true)
    }

    /// Sets vcpudispatch_stats_freq (1..HZ; the kernel checks the upper bound).
    pub fn set_freq(&mut self, n: u32) -> Result<(), TracerError> {
        if n == 0 {
            return Err(TracerError::Rejected {
                path: self.root.path(FREQ_PATH),
                value: "0".into(),
                why: "the valid range is 1..HZ".into(),
            });
        }
        let old = read_freq(&self.root)?;
        if old == n {
            return Ok(());
        }
        self.change(
            |s| s.freq.is_none(),
            |s| s.freq = Some(old),
            |s| s.freq = None,
            FREQ_PATH,
            &n.to_string(),
        )
    }

    /// Sets debugfs dtl_event_mask (bits 0x1, 0x2, 0x4).
    pub fn set_dtl_mask(&mut self, mask: u32) -> Result<(), TracerError> {
        if mask == 0 || mask > 0x7 {
            return Err(TracerError::Rejected {
                path: self.root.path(DTL_MASK_PATH),
                value: format!("{mask:#x}"),
                why: "use a combination of 0x1 (cede), 0x2 (preempt) and 0x4 (faults)".into(),
            });
        }
        let old = read_dtl_mask(&self.root)?;
        if old == mask {
            return Ok(());
        }
        self.change(
            |s| s.dtl_mask.is_none(),
            |s| s.dtl_mask = Some(old),
            |s| s.dtl_mask = None,
            DTL_MASK_PATH,
            &format!("{mask:#x}"),
        )
    }

    /// Records the original (first change only), persists it, then writes the new value;
    /// a failed write forgets the record again so restoring cannot undo someone else's change.
    fn change(
        &mut self,
        unrecorded: impl Fn(&SavedSettings) -> bool,
        record: impl Fn(&mut SavedSettings),
        forget: impl Fn(&mut SavedSettings),
        abs: &str,
        value: &str,
    ) -> Result<(), TracerError> {
        let fresh = unrecorded(&self.saved);
        if fresh {
            record(&mut self.saved);
            if let Err(e) = self.persist() {
                forget(&mut self.saved);
                return Err(e);
            }
        }
        if let Err(e) = write_setting(&self.root, abs, value) {
            if fresh {
                forget(&mut self.saved);
                let _ = self.persist();
            }
            return Err(e);
        }
        Ok(())
    }

    /// Writes the state file: the first time by linking a complete temporary file into
    /// place (atomic and exclusive), later by renaming over it.
    fn persist(&mut self) -> Result<(), TracerError> {
        if self.saved.is_empty() && self.written {
            return self.remove_file();
        }
        let werr = |path: &Path, source| TracerError::Write {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
        }
        let tmp = self.path.with_extension(format!("tmp.{}", self.saved.pid));
        fs::write(&tmp, self.saved.to_text()).map_err(|e| werr(&tmp, e))?;
        let res = if self.written {
            fs::rename(&tmp, &self.path)
        } else {
            let r = fs::hard_link(&tmp, &self.path);
            let _ = fs::remove_file(&tmp);
            r
        };
        match res {
            Ok(()) => {
                self.written = true;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = fs::remove_file(&tmp);
                let pid = fs::read_to_string(&self.path)
                    .ok()
                    .and_then(|t| SavedSettings::parse(&t, &self.path).ok())
                    .map_or(0, |s| s.pid);
                Err(TracerError::SettingsHeld {
                    path: self.path.clone(),
                    pid,
                })
            }
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                Err(werr(&self.path, e))
            }
        }
    }

    fn remove_file(&mut self) -> Result<(), TracerError> {
        match fs::remove_file(&self.path) {
            Ok(()) => {
                self.written = false;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.written = false;
                Ok(())
            }
            Err(source) => Err(TracerError::Write {
                path: self.path.clone(),
                source,
            }),
        }
    }

    /// Puts every changed setting back and removes the state file (kept if a value could
    /// not be restored, so the next run retries).
    pub fn restore(&mut self) -> Result<(), TracerError> {
        if !self.written {
            return Ok(());
        }
        restore_values(&self.root, &self.saved)?;
        self.saved = SavedSettings {
            pid: self.saved.pid,
            starttime: self.saved.starttime,
            ..Default::default()
        };
        self.remove_file()
    }
}

impl Drop for SettingsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            log::warn!("could not restore the DTL settings: {e}");
        }
    }
}

/// Restores and removes a state file whose writer is gone. Fails if the writer still runs.
pub fn recover_stale(root: &Root) -> Result<Option<Recovered>, TracerError> {
    let path = root.path(STATE_PATH);
    let text = match fs::read(&path) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(TracerError::Read { path, source }),
    };
    let saved = SavedSettings::parse(&text, &path)?;
    if saved.pid != std::process::id() && writer_alive(root, &saved) {
        return Err(TracerError::SettingsHeld {
            path,
            pid: saved.pid,
        });
    }
    restore_values(root, &saved)?;
    fs::remove_file(&path).map_err(|source| TracerError::Write {
        path: path.clone(),
        source,
    })?;
    Ok(Some(Recovered {
        path,
        settings: saved,
    }))
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

fn pct(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.1}", r * 100.0))
}

/// The per-vCPU table: window deltas and dispatch rate when there was a window, otherwise
/// the cumulative counters.
pub fn format_table(vcpus: &[VcpuReport], window_ns: Option<u64>) -> String {
    let mut s = String::new();
    let windowed = window_ns.is_some();
    s += &format!(
        "{:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>6}{}\n",
        "CPU",
        "total",
        "same_cpu",
        "same_chip",
        "diff_chip",
        "far_chip",
        "numa_home",
        "numa_rem",
        "numa_far",
        "home%",
        if windowed { "     disp/s" } else { "" }
    );
    let mut sum = DispatchCounters::default();
    let mut sum_rate = 0.0;
    let row = |label: &str, c: &DispatchCounters, rate: Option<f64>| {
        let a = c.to_array();
        format!(
            "{:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>6}{}\n",
            label,
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
            a[6],
            a[7],
            pct(c.home_ratio()),
            match rate {
                Some(r) => format!(" {r:>10.1}"),
                None if windowed => format!(" {:>10}", "-"),
                None => String::new(),
            }
        )
    };
    for v in vcpus {
        let c = if windowed {
            v.delta.unwrap_or_default()
        } else {
            v.counters
        };
        let rate = v.rates.map(|r| r.total_disp);
        sum = sum.add(&c);
        sum_rate += rate.unwrap_or(0.0);
        s += &row(&format!("cpu{}", v.cpu), &c, rate);
    }
    if vcpus.len() > 1 {
        s += &row("all", &sum, windowed.then_some(sum_rate));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "cpu0 6839 4126 2683 30 0 6821 18 0\ncpu1 2515 1274 1229 12 0 2509 6 0\n";

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

    #[test]
    fn state_file_round_trips() {
        let s = SavedSettings {
            pid: 42,
            starttime: Some(7),
            stats_enabled: Some(false),
            freq: Some(50),
            dtl_mask: Some(7),
        };
        let p = Path::new("/run/tracer/dtl-state");
        assert_eq!(SavedSettings::parse(&s.to_text(), p).unwrap(), s);
        assert!(SavedSettings::parse("vcpudispatch_stats 0\n", p).is_err());
        assert!(SavedSettings::parse("pid 1\nbogus 2\n", p).is_err());
        assert!(SavedSettings::parse("pid 1\nvcpudispatch_stats 2\n", p).is_err());
    }

    #[test]
    fn starttime_is_field_22() {
        let stat = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(parse_starttime(stat), Some(98765));
        assert_eq!(parse_starttime("42 (x"), None);
    }

    #[test]
    fn table_has_a_row_per_cpu_and_a_total() {
        let after = [
            VcpuCounters {
                cpu: 0,
                counters: DispatchCounters::from_array([100, 0, 0, 0, 0, 50, 50, 0]),
            },
            VcpuCounters {
                cpu: 1,
                counters: DispatchCounters::from_array([100, 0, 0, 0, 0, 100, 0, 0]),
            },
        ];
        let before = [
            VcpuCounters {
                cpu: 0,
                counters: DispatchCounters::default(),
            },
            VcpuCounters {
                cpu: 1,
                counters: DispatchCounters::default(),
            },
        ];
        let v = vcpu_reports(Some(&before), &after, 1_000_000_000);
        let t = format_table(&v, Some(1_000_000_000));
        assert!(t.contains("cpu0"), "{t}");
        let all = t
            .lines()
            .find(|l| l.trim_start().starts_with("all"))
            .unwrap();
        assert!(all.contains("200") && all.contains("75.0"), "{all}");
    }
}
