//! The typed report: everything one report shows, computed once from a snapshot and the
//! options. Text, JSON and the outputs to come (OpenMetrics, Perfetto, a TUI) read it and
//! nothing else, so they cannot disagree. Its `Serialize` is the JSON schema the README
//! documents.
//!
//! Sections measured on upper floors (perf counters, the hypervisor's view) are typed
//! there: a report carries them as `S` (see `output::report::Sections`), so this floor
//! needs neither perf nor pseries.
use std::collections::BTreeMap;

use crate::model::targets::HistScope;
use serde::{ser::SerializeMap as _, Serialize, Serializer};

use crate::model::{
    hist::Unit,
    options::{RunqSource, SortKey},
    snapshot::{HistKind, HistSet, Snapshot, ThreadRecord},
};
use crate::sys::launch::{ChildCpu, ChildState};

pub use crate::model::drops::{drop_advice, drop_note, Drops};

/// Rows of the text thread table without `--top`: a screenful, as top and perf top show
/// (a 5 s system-wide run has hundreds of threads).
pub const DEFAULT_TEXT_TOP: usize = 20;

/// How to show it.
#[derive(Clone, Copy, Debug)]
pub struct ReportOptions {
    /// `--top N` as given: None (not given) shows [`DEFAULT_TEXT_TOP`] rows in text and
    /// every thread in JSON; `Some(0)` shows every thread.
    pub top: Option<usize>,
    /// Thread order (`--sort`).
    pub sort: SortKey,
    pub unit: Unit,
    pub hist_scope: HistScope,
}

/// Which output reads a list with a row limit: text defaults to a screenful, JSON (a
/// machine reads it) to everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Text,
    Json,
}

impl ReportOptions {
    /// Rows to show.
    pub fn shown(&self, view: View) -> usize {
        match self.top {
            None if view == View::Text => DEFAULT_TEXT_TOP,
            None | Some(0) => usize::MAX,
            Some(n) => n,
        }
    }
}

/// What a run is, known once its programs are attached: what every report repeats in
/// its header, and what a sink is given at the start.
#[derive(Clone, Debug, Serialize)]
pub struct RunHeader {
    /// What was traced: "all CPUs", "PID 42", "cgroup /x and the cgroups below".
    pub target: String,
    pub probe: String,
    /// How the switch programs attach (tp_btf, raw_tracepoint, tracepoint, fentry, kprobe).
    pub probe_attach: String,
    /// From the window's opening until the last program was attached: a thread that
    /// ended in that span, and what other threads did there, no program saw (the
    /// window opens first so that every slice seen begins inside it).
    pub attach_lag_ns: u64,
    /// Where run-queue waits come from: "run_delay" (the scheduler's
    /// `sched_info.run_delay`, read at switch-out) or "wakeup" (timed from the wakeup
    /// tracepoints).
    #[serde(serialize_with = "runq_name")]
    pub runq_source: RunqSource,
    /// Better probe modes that were refused, with why.
    pub probe_refused: Vec<Refusal>,
    /// The scheduler class in use when the run started, and delayed dequeue.
    pub scheduler: crate::model::scheduler::Scheduler,
    /// No target: the traced set is every thread (idle excluded).
    #[serde(skip)]
    pub system_wide: bool,
    /// Capacity of the kernel's per-thread map (`--max-threads`); 0 when the entries
    /// live in task-local storage, which has none.
    #[serde(skip)]
    pub max_threads: u32,
    /// Names of the per-slice counter events, in slot order.
    #[serde(skip)]
    pub slice_events: Vec<String>,
}

fn runq_name<S: Serializer>(r: &RunqSource, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(r.name())
}

/// A probe mode that was tried and refused.
#[derive(Clone, Debug, Serialize)]
pub struct Refusal {
    pub mode: String,
    pub reason: String,
}

/// The whole window, or one interval of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ReportKind {
    Total,
    /// 1-based.
    Interval {
        interval: u64,
    },
}

/// What "CPUs utilized" was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum UtilSource {
    /// perf's task-clock (its own definition of the figure).
    #[serde(rename = "task-clock")]
    TaskClock,
    /// The traced threads' on-CPU time from the kernel programs.
    #[serde(rename = "on_cpu")]
    OnCpu,
}

/// One CPU's share of the traced on-CPU time.
#[derive(Clone, Debug, Serialize)]
pub struct CpuRow {
    pub cpu: usize,
    pub on_cpu_ns: u64,
    pub utilization: f64,
    /// `--irq`: the interrupt time of the CPU.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub irq: Option<crate::model::irq::IrqShare>,
}

/// One row of the thread table.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadRow {
    /// 0 for a folded row.
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub on_cpu_ns: u64,
    pub cpu_share: f64,
    pub slices: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub runq_wait_ns: u64,
    pub runq_waits: u64,
    pub off_cpu_ns: u64,
    pub blocked_ns: u64,
    pub preempted_ns: u64,
    pub migrations: u64,
    pub exited: bool,
    /// 0 for one thread; else this row sums that many exited threads of the process.
    #[serde(rename = "folded_threads", skip_serializing_if = "is_zero")]
    pub folded: u32,
    /// The thread exec'd from a non-main thread and went on under this TID (its
    /// leader's): this row is its time until the exec, that TID's row the rest (as the
    /// trace names them).
    #[serde(rename = "exec_as", skip_serializing_if = "is_zero")]
    pub became: u32,
    /// A leader that the exec of another of its threads ended (`de_thread()`): that
    /// thread goes on under this row's TID, in a row of its own.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reaped_by_exec: bool,
    /// `--slice-event` sums read in the kernel at every switch, in slot order.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_map")]
    pub slice_counters: Option<Vec<(String, u64)>>,
    /// `--per-thread` perf counts, in the event's reported unit (ms for clocks).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "opt_map")]
    pub counters: Option<Vec<(String, Option<f64>)>>,
    /// With `-L`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms: Option<HistSet>,
    /// `--irq`: the interrupt time that ran while the thread was on a CPU.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub irq: Option<crate::model::irq::IrqShare>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// (name, value) pairs as a JSON object; a name given twice keeps its last value.
fn opt_map<S: Serializer, V: Serialize>(
    v: &Option<Vec<(String, V)>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(pairs) => s.collect_map(pairs.iter().map(|(k, v)| (k, v))),
        None => s.serialize_none(),
    }
}

/// Every thread in `--sort` order, and the row limit each view applies.
#[derive(Clone, Debug)]
pub struct ThreadList {
    pub rows: Vec<ThreadRow>,
    pub options: ReportOptions,
}

impl ThreadList {
    /// The rows a view shows.
    pub fn shown(&self, view: View) -> &[ThreadRow] {
        &self.rows[..self.rows.len().min(self.options.shown(view))]
    }

    /// The rows a view leaves out.
    pub fn hidden(&self, view: View) -> &[ThreadRow] {
        &self.rows[self.shown(view).len()..]
    }
}

impl Serialize for ThreadList {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.shown(View::Json))
    }
}

/// One process (with `-P`): the comm of its main thread, or of the first thread seen.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessRow {
    pub pid: u32,
    pub comm: String,
    pub on_cpu_ns: u64,
    /// Threads seen, folded ones included.
    pub threads: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histograms: Option<HistSet>,
}

impl Serialize for HistSet {
    /// Each histogram as its summary (count, sum, percentiles, non-empty buckets).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(HistKind::ALL.len()))?;
        for k in HistKind::ALL {
            m.serialize_entry(k.key(), &self.get(k).summary())?;
        }
        m.end()
    }
}

/// The kernel's per-thread map.
#[derive(Clone, Debug, Serialize)]
pub struct Maps {
    pub threads_live: usize,
    /// None: entries in task-local storage, no capacity.
    pub threads_capacity: Option<u32>,
}

/// `-- COMMAND` and what became of it.
#[derive(Clone, Debug)]
pub struct Command {
    pub argv: Vec<String>,
    pub state: ChildState,
    /// Once reaped: its CPU time as the kernel counts it (`wait4`).
    pub cpu: Option<ChildCpu>,
}

impl Serialize for Command {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(5))?;
        m.serialize_entry("argv", &self.argv)?;
        m.serialize_entry("exit_code", &self.state.exit_code())?;
        m.serialize_entry("state", self.state.name())?;
        m.serialize_entry("user_ns", &self.cpu.map(|c| c.user_ns))?;
        m.serialize_entry("system_ns", &self.cpu.map(|c| c.system_ns))?;
        m.end()
    }
}

/// The layout of the JSON report: raised when a field changes meaning or shape, so a
/// reader (`tracer diff`) can refuse a report it would misread. 1: the first numbered
/// layout (reports without `schema` are from before).
pub const SCHEMA: u32 = 1;

/// Everything one report shows. `S`: the sections typed on upper floors.
#[derive(Clone, Debug, Serialize)]
pub struct Report<S> {
    /// [`SCHEMA`].
    pub schema: u32,
    #[serde(flatten)]
    pub kind: ReportKind,
    /// Wall-clock time at the end of the report's window (ns since the Unix epoch).
    #[serde(rename = "time", serialize_with = "iso")]
    pub time_unix_ns: u64,
    /// The same as HH:MM:SS in the local time zone, for the text interval header.
    #[serde(skip)]
    pub local_time: String,
    pub duration_ns: u64,
    #[serde(flatten)]
    pub run: RunHeader,
    /// On-CPU time of the traced set over the window: "CPUs utilized" as perf stat
    /// defines it (task-clock / wall time), from task-clock when it was counted.
    pub cpus_utilized: f64,
    pub cpus_utilized_source: UtilSource,
    pub on_cpu_ns: u64,
    pub per_cpu: Vec<CpuRow>,
    pub threads: ThreadList,
    /// Threads seen, folded ones included.
    pub threads_total: usize,
    pub histograms: HistSet,
    /// With `-P`, in on-CPU order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processes: Option<Vec<ProcessRow>>,
    pub drops: Drops,
    pub maps: Maps,
    #[serde(flatten)]
    pub sections: S,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Command>,
    pub notices: Vec<String>,
    /// The columns of the `--per-thread` counters, in event order.
    #[serde(skip)]
    pub thread_counter_events: Vec<String>,
    #[serde(skip)]
    pub options: ReportOptions,
}

fn iso<S: Serializer>(unix_ns: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&iso_utc(*unix_ns))
}

/// What a report is built from: a snapshot (or the difference of two) and what the run
/// knows besides.
#[derive(Clone, Debug)]
pub struct ReportInput<S> {
    pub kind: ReportKind,
    pub time_unix_ns: u64,
    pub local_time: String,
    pub duration_ns: u64,
    pub run: RunHeader,
    /// Idle threads already left out, TGIDs and comms filled in.
    pub snapshot: Snapshot,
    /// Overrides the BPF-derived figure when task-clock was counted (perf's definition).
    pub cpus_utilized_task_clock: Option<f64>,
    /// `--per-thread` perf counters by TID: (event, value in its reported unit).
    pub thread_counters: BTreeMap<u32, Vec<(String, Option<f64>)>>,
    pub sections: S,
    pub notices: Vec<String>,
    pub command: Option<Command>,
    pub options: ReportOptions,
}

impl SortKey {
    fn key(self, t: &ThreadRecord) -> u64 {
        let s = &t.stats;
        match self {
            SortKey::OnCpu => s.on_cpu_ns,
            SortKey::Runq => s.runq_wait_ns,
            SortKey::OffCpu => s.off_cpu_ns,
            SortKey::Slices => s.slices,
            SortKey::Migrations => s.migrations,
        }
    }
}

/// Threads in `--sort` order, largest first; ties by on-CPU time, then TID.
fn sorted_threads(s: &Snapshot, key: SortKey) -> Vec<&ThreadRecord> {
    let mut v: Vec<&ThreadRecord> = s.threads.values().collect();
    v.sort_by(|a, b| {
        key.key(b)
            .cmp(&key.key(a))
            .then(b.stats.on_cpu_ns.cmp(&a.stats.on_cpu_ns))
            .then(a.tid.cmp(&b.tid))
    });
    v
}

/// C string from the kernel's fixed-size comm (bytes that are not UTF-8 as `\xNN`).
pub fn comm_str(c: &[u8]) -> String {
    crate::model::words::from_comm(c)
}

/// Per-process rows, busiest first, ties by PID.
fn processes(s: &Snapshot) -> Vec<ProcessRow> {
    let mut by: BTreeMap<u32, (String, u64, usize)> = BTreeMap::new();
    for t in s.threads.values() {
        let e = by.entry(t.stats.tgid).or_default();
        if e.0.is_empty() || t.tid == t.stats.tgid {
            e.0 = comm_str(&t.stats.comm);
        }
        e.1 += t.stats.on_cpu_ns;
        e.2 += (t.folded as usize).max(1);
    }
    let mut v: Vec<ProcessRow> = by
        .into_iter()
        .map(|(pid, (comm, on_cpu_ns, threads))| ProcessRow {
            pid,
            comm,
            on_cpu_ns,
            threads,
            histograms: s.scoped.get(&pid).cloned(),
        })
        .collect();
    v.sort_by(|a, b| b.on_cpu_ns.cmp(&a.on_cpu_ns).then(a.pid.cmp(&b.pid)));
    v
}

impl<S> Report<S> {
    /// The report of `i`: rows sorted, shares and summaries computed, once.
    pub fn build(i: ReportInput<S>) -> Report<S> {
        let snap = &i.snapshot;
        let share = |ns: u64| {
            if i.duration_ns == 0 {
                0.0
            } else {
                ns as f64 / i.duration_ns as f64
            }
        };
        let on_cpu_ns = snap.on_cpu_total_ns();
        let (cpus_utilized, cpus_utilized_source) = match i.cpus_utilized_task_clock {
            Some(v) => (v, UtilSource::TaskClock),
            None => (share(on_cpu_ns), UtilSource::OnCpu),
        };
        let slice_events = &i.run.slice_events;
        let rows = sorted_threads(snap, i.options.sort)
            .into_iter()
            .map(|t| {
                let s = &t.stats;
                ThreadRow {
                    tid: t.tid,
                    pid: s.tgid,
                    comm: comm_str(&s.comm),
                    on_cpu_ns: s.on_cpu_ns,
                    cpu_share: share(s.on_cpu_ns),
                    slices: s.slices,
                    voluntary_switches: s.voluntary,
                    involuntary_switches: s.involuntary,
                    runq_wait_ns: s.runq_wait_ns,
                    runq_waits: s.runq_waits,
                    off_cpu_ns: s.off_cpu_ns,
                    blocked_ns: s.blocked_ns,
                    preempted_ns: s.preempted_ns,
                    migrations: s.migrations,
                    exited: t.exited,
                    folded: t.folded,
                    became: if t.became == tracer_common::REAPED_BY_EXEC {
                        0
                    } else {
                        t.became
                    },
                    reaped_by_exec: t.became == tracer_common::REAPED_BY_EXEC,
                    slice_counters: (!slice_events.is_empty()).then(|| {
                        slice_events
                            .iter()
                            .cloned()
                            .zip(s.counters.iter().copied())
                            .collect()
                    }),
                    counters: i.thread_counters.get(&t.tid).cloned(),
                    histograms: (i.options.hist_scope == HistScope::Thread)
                        .then(|| snap.scoped.get(&t.tid).cloned())
                        .flatten(),
                    irq: None,
                }
            })
            .collect();
        Report {
            schema: SCHEMA,
            kind: i.kind,
            time_unix_ns: i.time_unix_ns,
            local_time: i.local_time,
            duration_ns: i.duration_ns,
            cpus_utilized,
            cpus_utilized_source,
            on_cpu_ns,
            per_cpu: snap
                .cpu_busy_ns
                .iter()
                .enumerate()
                .map(|(cpu, &ns)| {
                    // The scheduler's charges, whose clock may run a few microseconds
                    // ahead of the window's on a CPU busy all of it.
                    let ns = ns.min(i.duration_ns);
                    CpuRow {
                        cpu,
                        on_cpu_ns: ns,
                        utilization: share(ns),
                        irq: None,
                    }
                })
                .collect(),
            threads: ThreadList {
                rows,
                options: i.options,
            },
            threads_total: snap.thread_count(),
            histograms: snap.hist.clone(),
            processes: (i.options.hist_scope == HistScope::Process).then(|| processes(snap)),
            drops: Drops {
                kernel: snap.drops,
                recursion_misses: snap.recursion_misses,
                threads_unread: snap.threads_unread,
            },
            maps: Maps {
                threads_live: snap.live_entries,
                threads_capacity: (i.run.max_threads != 0).then_some(i.run.max_threads),
            },
            thread_counter_events: i
                .thread_counters
                .values()
                .next()
                .map(|v| v.iter().map(|(e, _)| e.clone()).collect())
                .unwrap_or_default(),
            run: i.run,
            sections: i.sections,
            command: i.command,
            notices: i.notices,
            options: i.options,
        }
    }

    /// The interval number, None for the totals.
    pub fn interval(&self) -> Option<u64> {
        match self.kind {
            ReportKind::Total => None,
            ReportKind::Interval { interval } => Some(interval),
        }
    }
}

/// ns since the Unix epoch as ISO 8601 UTC with milliseconds: `2026-11-30T16:22:05.123Z`.
pub fn iso_utc(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let ms = unix_ns % 1_000_000_000 / 1_000_000;
    let (days, rem) = (secs / 86400, secs % 86400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso_utc(1_764_519_725_123_456_789),
            "2025-11-30T16:22:05.123Z"
        );
        assert_eq!(iso_utc(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }
}
