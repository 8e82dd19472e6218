//! Reports: pure functions from collected numbers to text or JSON.
use serde_json::{json, Map, Value};
use tracer_common::scope;

use crate::model::options::SortKey;
use crate::{
    model::hist::{format_bcc, human_ns, Unit},
    model::snapshot::{HistSet, Snapshot, ThreadRecord, DROP_NAMES},
};

/// A section produced by another module (counters, hypervisor), already rendered both ways.
#[derive(Clone, Debug)]
pub struct Section {
    /// Top-level JSON key.
    pub key: &'static str,
    pub json: Value,
    pub text: String,
}

/// Everything one report shows.
#[derive(Clone, Debug)]
pub struct Report {
    /// "total" or "interval".
    pub kind: &'static str,
    /// 1-based interval number in interval mode.
    pub interval: Option<u64>,
    /// Wall-clock time at the end of the report's window (ns since the Unix epoch).
    pub time_unix_ns: u64,
    /// The same as HH:MM:SS in the local time zone, for the text interval header.
    pub local_time: String,
    /// No target: the traced set is every thread (idle excluded).
    pub system_wide: bool,
    pub duration_ns: u64,
    pub probe: String,
    /// How the switch programs attach (tp_btf, raw_tracepoint, tracepoint, fentry, kprobe).
    pub probe_attach: String,
    /// Where run-queue waits come from: "run_delay" (the scheduler's
    /// `sched_info.run_delay`, read at switch-out) or "wakeup" (timed from the wakeup
    /// tracepoints).
    pub runq_source: &'static str,
    /// Better probe modes that were refused, with why.
    pub probe_refused: Vec<(String, String)>,
    pub snapshot: Snapshot,
    /// Overrides the BPF-derived figure when task-clock was counted (perf's definition).
    pub cpus_utilized_task_clock: Option<f64>,
    /// Names of the per-slice counter events, in slot order.
    pub slice_events: Vec<String>,
    pub sections: Vec<Section>,
    pub notices: Vec<String>,
    /// Command line of `-- COMMAND` and what became of it.
    pub command: Option<(Vec<String>, crate::sys::launch::ChildState)>,
    /// Capacity of the kernel's per-thread map (`--max-threads`); 0 when the entries
    /// live in task-local storage, which has none.
    pub max_threads: u32,
    /// `--per-thread` perf counters by TID: (event, scaled value).
    pub thread_counters: std::collections::BTreeMap<u32, Vec<(String, Option<f64>)>>,
}

/// How to show it.
#[derive(Clone, Copy, Debug)]
pub struct ReportOptions {
    /// `--top N` as given: None (not given) shows [`DEFAULT_TEXT_TOP`] rows in text and
    /// every thread in JSON; `Some(0)` shows every thread.
    pub top: Option<usize>,
    /// Thread order (`--sort`).
    pub sort: SortKey,
    pub unit: Unit,
    /// One of `tracer_common::scope`.
    pub hist_scope: u32,
}

/// Rows of the text thread table without `--top`: a screenful, as top and perf top show
/// (a 5 s system-wide run has hundreds of threads).
pub const DEFAULT_TEXT_TOP: usize = 20;

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

impl ReportOptions {
    /// Rows to show: text defaults to a screenful, JSON to everything.
    fn shown(&self, json: bool) -> usize {
        match self.top {
            None if !json => DEFAULT_TEXT_TOP,
            None | Some(0) => usize::MAX,
            Some(n) => n,
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

/// C string from the kernel's fixed-size comm.
pub fn comm_str(c: &[u8]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..end]).into_owned()
}

impl Report {
    /// On-CPU time of the traced set divided by the window: "CPUs utilized" as perf stat
    /// defines it (task-clock / wall time), taken from task-clock when it was counted.
    pub fn cpus_utilized(&self) -> f64 {
        if let Some(v) = self.cpus_utilized_task_clock {
            return v;
        }
        if self.duration_ns == 0 {
            return 0.0;
        }
        self.snapshot.on_cpu_total_ns() as f64 / self.duration_ns as f64
    }

    /// What [`Report::cpus_utilized`] was computed from, for JSON.
    pub fn cpus_utilized_source(&self) -> &'static str {
        if self.cpus_utilized_task_clock.is_some() {
            "task-clock"
        } else {
            "on_cpu"
        }
    }

    /// The same, for the text header.
    fn cpus_utilized_label(&self) -> &'static str {
        match (self.cpus_utilized_task_clock.is_some(), self.system_wide) {
            (true, _) => "task-clock",
            (false, true) => "on-CPU time of all threads, idle excluded",
            (false, false) => "on-CPU time of the traced threads",
        }
    }

    fn share(&self, ns: u64) -> f64 {
        if self.duration_ns == 0 {
            0.0
        } else {
            ns as f64 / self.duration_ns as f64
        }
    }
}

fn hists_json(h: &HistSet) -> Value {
    json!({
        "on_cpu": h.on_cpu.summary(),
        "runq": h.runq.summary(),
        "off_cpu": h.off_cpu.summary(),
    })
}

fn thread_json(r: &Report, t: &ThreadRecord, o: &ReportOptions) -> Value {
    let s = &t.stats;
    let mut m = Map::new();
    m.insert("tid".into(), json!(t.tid));
    m.insert("pid".into(), json!(s.tgid));
    m.insert("comm".into(), json!(comm_str(&s.comm)));
    m.insert("on_cpu_ns".into(), json!(s.on_cpu_ns));
    m.insert("cpu_share".into(), json!(r.share(s.on_cpu_ns)));
    m.insert("slices".into(), json!(s.slices));
    m.insert("voluntary_switches".into(), json!(s.voluntary));
    m.insert("involuntary_switches".into(), json!(s.involuntary));
    m.insert("runq_wait_ns".into(), json!(s.runq_wait_ns));
    m.insert("runq_waits".into(), json!(s.runq_waits));
    m.insert("off_cpu_ns".into(), json!(s.off_cpu_ns));
    m.insert("blocked_ns".into(), json!(s.blocked_ns));
    m.insert("preempted_ns".into(), json!(s.preempted_ns));
    m.insert("migrations".into(), json!(s.migrations));
    m.insert("exited".into(), json!(t.exited));
    if t.folded > 0 {
        m.insert("folded_threads".into(), json!(t.folded));
    }
    if !r.slice_events.is_empty() {
        let c: Map<String, Value> = r
            .slice_events
            .iter()
            .zip(s.counters.iter())
            .map(|(e, v)| (e.clone(), json!(v)))
            .collect();
        m.insert("slice_counters".into(), Value::Object(c));
    }
    if let Some(cs) = r.thread_counters.get(&t.tid) {
        let c: Map<String, Value> = cs.iter().map(|(e, v)| (e.clone(), json!(v))).collect();
        m.insert("counters".into(), Value::Object(c));
    }
    if o.hist_scope == scope::THREAD {
        if let Some(h) = r.snapshot.scoped.get(&t.tid) {
            m.insert("histograms".into(), hists_json(h));
        }
    }
    Value::Object(m)
}

/// Per-process rows: (pid, comm of the main thread or first seen, on-CPU ns, threads).
fn processes(s: &Snapshot) -> Vec<(u32, String, u64, usize)> {
    let mut by: std::collections::BTreeMap<u32, (String, u64, usize)> = Default::default();
    for t in s.threads.values() {
        let e = by.entry(t.stats.tgid).or_default();
        if e.0.is_empty() || t.tid == t.stats.tgid {
            e.0 = comm_str(&t.stats.comm);
        }
        e.1 += t.stats.on_cpu_ns;
        e.2 += (t.folded as usize).max(1);
    }
    let mut v: Vec<_> = by.into_iter().map(|(p, (c, n, k))| (p, c, n, k)).collect();
    v.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    v
}

/// The report as one JSON document (the schema is in the README).
pub fn to_json(r: &Report, o: &ReportOptions) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), json!(r.kind));
    if let Some(i) = r.interval {
        m.insert("interval".into(), json!(i));
    }
    m.insert("time".into(), json!(iso_utc(r.time_unix_ns)));
    m.insert("duration_ns".into(), json!(r.duration_ns));
    m.insert("probe".into(), json!(r.probe));
    m.insert("probe_attach".into(), json!(r.probe_attach));
    m.insert("runq_source".into(), json!(r.runq_source));
    m.insert(
        "probe_refused".into(),
        Value::Array(
            r.probe_refused
                .iter()
                .map(|(mode, why)| json!({"mode": mode, "reason": why}))
                .collect(),
        ),
    );
    m.insert("cpus_utilized".into(), json!(r.cpus_utilized()));
    m.insert(
        "cpus_utilized_source".into(),
        json!(r.cpus_utilized_source()),
    );
    m.insert("on_cpu_ns".into(), json!(r.snapshot.on_cpu_total_ns()));
    m.insert(
        "per_cpu".into(),
        Value::Array(
            r.snapshot
                .cpu_busy_ns
                .iter()
                .enumerate()
                .map(|(cpu, ns)| json!({"cpu": cpu, "on_cpu_ns": ns, "utilization": r.share(*ns)}))
                .collect(),
        ),
    );
    let threads = sorted_threads(&r.snapshot, o.sort);
    let shown = o.shown(true);
    m.insert(
        "threads".into(),
        Value::Array(
            threads
                .iter()
                .take(shown)
                .map(|t| thread_json(r, t, o))
                .collect(),
        ),
    );
    m.insert("threads_total".into(), json!(r.snapshot.thread_count()));
    m.insert("histograms".into(), hists_json(&r.snapshot.hist));
    if o.hist_scope == scope::PROCESS {
        let procs: Vec<Value> = processes(&r.snapshot)
            .into_iter()
            .map(|(pid, comm, on, n)| {
                let mut p = json!({"pid": pid, "comm": comm, "on_cpu_ns": on, "threads": n});
                if let Some(h) = r.snapshot.scoped.get(&pid) {
                    p["histograms"] = hists_json(h);
                }
                p
            })
            .collect();
        m.insert("processes".into(), Value::Array(procs));
    }
    let mut drops: Map<String, Value> = DROP_NAMES
        .iter()
        .zip(r.snapshot.drops.iter())
        .map(|(n, v)| (n.to_string(), json!(v)))
        .collect();
    drops.insert(
        "recursion_misses".into(),
        json!(r.snapshot.recursion_misses),
    );
    m.insert("drops".into(), Value::Object(drops));
    m.insert(
        "maps".into(),
        json!({
            "threads_live": r.snapshot.live_entries,
            // null: entries in task-local storage, no capacity.
            "threads_capacity": (r.max_threads != 0).then_some(r.max_threads),
        }),
    );
    for s in &r.sections {
        m.insert(s.key.into(), s.json.clone());
    }
    if let Some((argv, state)) = &r.command {
        m.insert(
            "command".into(),
            json!({"argv": argv, "exit_code": state.exit_code(), "state": state.name()}),
        );
    }
    m.insert("notices".into(), json!(r.notices));
    Value::Object(m)
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

/// What the BPF figures and task-clock each saw, for one comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossCheck {
    /// BPF on-CPU time of the threads task-clock covers.
    pub bpf_ns: u64,
    pub task_clock_ns: f64,
    /// Threads task-clock does not cover (-p/-t: started after the counters were opened)
    /// and their BPF on-CPU time.
    pub missed_threads: usize,
    pub missed_ns: u64,
    /// Window time before the counters were enabled.
    pub lag_ns: u64,
    /// Threads both count that exited in the window: task-clock loses the end of each
    /// (its counters close in do_exit before the last switch; 60-90 us a process measured
    /// on this VM, `sh -c 'for i in $(seq 200); do /bin/true; done'`).
    pub exited_threads: usize,
    /// Slices of the threads both count: the scheduler charges each switch itself to the
    /// incoming thread, task-clock starts after it (perf's sched-in hook runs in
    /// finish_task_switch): 5-9.5 us a switch measured on this VM.
    pub slices: u64,
    pub cpus: usize,
    /// The report's window, and the largest on-CPU time of one thread (BPF): a thread
    /// cannot run longer than the window, nor all threads longer than window x CPUs.
    pub window_ns: u64,
    pub max_thread_ns: u64,
}

/// What task-clock may miss at one thread's exit.
const EXIT_ALLOWANCE_NS: f64 = 150_000.0;
/// What task-clock may miss at one switch-in.
const SWITCH_ALLOWANCE_NS: f64 = 20_000.0;

/// How far the two may differ and still agree: 2% or 2 ms, plus what the CPUs could
/// have run before the counters were enabled.
fn base_tolerance_ns(c: &CrossCheck) -> f64 {
    (0.02 * c.task_clock_ns).max(2e6) + c.lag_ns as f64 * c.cpus as f64
}

/// task-clock leaves out threads with more on-CPU time than the comparison's tolerance:
/// "CPUs utilized" is then the BPF figure, which has them all.
pub fn headline_from_bpf(c: &CrossCheck) -> bool {
    c.missed_ns as f64 > base_tolerance_ns(c)
}

/// [`base_tolerance_ns`] plus what task-clock misses at switches and exits.
fn cross_check_tolerance_ns(c: &CrossCheck) -> f64 {
    base_tolerance_ns(c)
        + c.exited_threads as f64 * EXIT_ALLOWANCE_NS
        + c.slices as f64 * SWITCH_ALLOWANCE_NS
}

/// The cross-check line: whether the two figures agree, and where they cannot (threads
/// task-clock does not see), which one to read.
pub fn cross_check_notice(c: &CrossCheck) -> String {
    let (bpf, tc) = (c.bpf_ns as f64, c.task_clock_ns);
    let pct = if tc > 0.0 {
        format!(" ({:+.2}%)", 100.0 * (bpf - tc) / tc)
    } else {
        String::new()
    };
    let same = format!(
        "on-CPU time from the BPF programs {:.3} ms vs task-clock {:.3} ms{pct}",
        bpf / 1e6,
        tc / 1e6
    );
    let impossible = c.max_thread_ns > c.window_ns.saturating_add(1_000_000)
        || bpf > (c.window_ns as f64 * c.cpus as f64) * 1.01 + 1e6;
    let diff = (bpf - tc).abs();
    let verdict = if diff <= base_tolerance_ns(c) {
        "they agree".to_string()
    } else if bpf > tc && diff <= cross_check_tolerance_ns(c) {
        let per_switch =
            (diff - c.exited_threads as f64 * EXIT_ALLOWANCE_NS).max(0.0) / c.slices.max(1) as f64;
        let mut what = Vec::new();
        if c.slices > 0 {
            what.push(format!(
                "the context switch itself, which the scheduler charges to the incoming thread \
                 before perf starts its clock ({} switches, at most {:.1} us each)",
                c.slices,
                per_switch / 1e3
            ));
        }
        if c.exited_threads > 0 {
            what.push(format!(
                "the end of each of {} exited threads (task-clock stops in do_exit, before \
                 the last switch)",
                c.exited_threads
            ));
        }
        format!(
            "they agree once what task-clock does not see is allowed for: {}",
            what.join(", and ")
        )
    } else if impossible {
        "the BPF figures are wrong (a thread on CPU longer than the window, or more than \
         the CPUs could run): trust task-clock"
            .to_string()
    } else if bpf > tc {
        "task-clock is short (it starts when the counters are enabled and a thread's \
         counter stops at its exit); the BPF figure is the scheduler's own per-slice \
         runtime: trust it"
            .to_string()
    } else {
        "the BPF figure is short: events were lost (see drops), trust task-clock".to_string()
    };
    if c.missed_threads == 0 {
        return format!("cross-check: {same}: {verdict}");
    }
    let headline = if headline_from_bpf(c) {
        " (so the headline CPUs utilized is the BPF figure)"
    } else {
        ""
    };
    format!(
        "cross-check: task-clock counts the threads present at the start (as perf stat -p/-t); \
         {} {} that started later ({:.3} ms on-CPU) are in the BPF figures only{headline}; \
         for the threads both count: {same}: {verdict}",
        c.missed_threads,
        plural(c.missed_threads, "thread", "threads"),
        c.missed_ns as f64 / 1e6
    )
}

fn fmt_secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// The human-readable report.
pub fn format_text(r: &Report, o: &ReportOptions) -> String {
    let mut out = String::new();
    let head = match r.interval {
        Some(i) if !r.local_time.is_empty() => format!("interval {i} at {}", r.local_time),
        Some(i) => format!("interval {i}"),
        None => "total".to_string(),
    };
    out += &format!(
        "tracer {head}: {} window, probe {} ({}, waits from {}), {:.3} CPUs utilized ({})\n",
        fmt_secs(r.duration_ns),
        r.probe,
        r.probe_attach,
        if r.runq_source == "run_delay" {
            "sched_info.run_delay"
        } else {
            "wakeups"
        },
        r.cpus_utilized(),
        r.cpus_utilized_label()
    );
    for (mode, why) in &r.probe_refused {
        out += &format!("  (probe {mode} refused: {why})\n");
    }
    if r.snapshot.cpu_busy_ns.iter().any(|&ns| ns > 0) {
        let cpus: Vec<String> = r
            .snapshot
            .cpu_busy_ns
            .iter()
            .enumerate()
            .map(|(cpu, ns)| format!("cpu{cpu} {:.1}%", 100.0 * r.share(*ns)))
            .collect();
        out += &format!("  traced on-CPU time per CPU: {}\n", cpus.join("  "));
    }
    if r.runq_source == "run_delay" {
        out += &run_delay_line(r);
    }
    if let Some((argv, state)) = &r.command {
        let shown = crate::sys::launch::short_command(argv, crate::sys::launch::COMMAND_SHOWN);
        out += &format!("  command: {shown} ({})\n", state.describe());
    }
    out += "\n";

    let threads = sorted_threads(&r.snapshot, o.sort);
    let shown = o.shown(false);
    out += &thread_table(r, &threads, shown);
    out += "\n";
    out += &hist_block("", &r.snapshot.hist, o.unit);
    match o.hist_scope {
        scope::PROCESS => {
            for (pid, comm, _, _) in processes(&r.snapshot).iter().take(shown) {
                if let Some(h) = r.snapshot.scoped.get(pid) {
                    out += &hist_block(&format!("pid {pid} ({comm}) "), h, o.unit);
                }
            }
        }
        scope::THREAD => {
            for t in threads.iter().take(shown) {
                if let Some(h) = r.snapshot.scoped.get(&t.tid) {
                    let label = format!("tid {} ({}) ", t.tid, comm_str(&t.stats.comm));
                    out += &hist_block(&label, h, o.unit);
                }
            }
        }
        _ => {}
    }
    for s in &r.sections {
        if !s.text.is_empty() {
            out += "\n";
            out += &s.text;
            if !s.text.ends_with('\n') {
                out += "\n";
            }
        }
    }
    let mut drops: Vec<String> = DROP_NAMES
        .iter()
        .zip(r.snapshot.drops.iter())
        .filter(|(_, v)| **v > 0)
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    if r.snapshot.recursion_misses > 0 {
        drops.push(format!("recursion_misses={}", r.snapshot.recursion_misses));
    }
    if !drops.is_empty() {
        out += &format!(
            "\nWARNING: events lost in the kernel: {} (raise --max-threads, or see `tracer check`)\n",
            drops.join(" ")
        );
    }
    for n in &r.notices {
        out += &format!("note: {n}\n");
    }
    out
}

/// With `--runq-from schedstat` a wait is the growth of `sched_info.run_delay` over a
/// slice's start; where it did not grow (the scheduler skips its clock update after a
/// wakeup that preempts, so such waits read 0) there is no wait to record. Say how many
/// of the slices the histogram and RUNQ-WAIT hold, so its percentiles are not read as
/// those of every wait.
fn run_delay_line(r: &Report) -> String {
    let slices: u64 = r.snapshot.threads.values().map(|t| t.stats.slices).sum();
    let waits = r.snapshot.hist.runq.count();
    format!(
        "  run-queue waits: {waits} of {slices} slices began after a wait the scheduler clocked \
         (run_delay grew); the rest read 0 in run_delay and are not in the histogram \
         (--runq-from wakeup times every wait)\n"
    )
}

fn hist_block(label: &str, h: &HistSet, unit: Unit) -> String {
    let mut out = String::new();
    for (name, hh) in [
        ("on-CPU slice", &h.on_cpu),
        ("run-queue latency", &h.runq),
        ("off-CPU time", &h.off_cpu),
    ] {
        out += &format_bcc(&format!("{label}{name}"), hh, unit);
        out += "\n";
    }
    out
}

/// A comm as shown in the table: control characters (a comm is whatever the program
/// wrote with prctl) escaped so one row stays one line.
fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// A counter column: its header (event, with the unit when there is one) and how a value
/// is shown. Clocks (task-clock, cpu-clock) count ns: shown in ms as perf does.
struct CounterColumn {
    header: String,
    clock: bool,
}

impl CounterColumn {
    /// `prefix` tells the per-slice sums read in the kernel ("slice ") from perf's own
    /// per-thread counts ("").
    fn new(prefix: &str, event: &str) -> CounterColumn {
        let clock = crate::perf::parse_event(event)
            .map(|e| crate::perf::is_clock(&e))
            .unwrap_or(false);
        CounterColumn {
            header: if clock {
                format!("{prefix}{event} (ms)")
            } else {
                format!("{prefix}{event}")
            },
            clock,
        }
    }

    fn width(&self) -> usize {
        self.header.chars().count().max(10)
    }

    /// `v` in the event's own unit (ns for clocks, a count otherwise).
    fn cell(&self, v: Option<f64>) -> String {
        match v {
            None => "-".to_string(),
            Some(v) if self.clock => format!("{:.2}", v / 1e6),
            Some(v) => format!("{v:.0}"),
        }
    }
}

/// The thread table: every column labelled with its unit where values carry none, the
/// COMM column as wide as the longest name shown (never cut), and a line for the rows
/// `--top` left out.
fn thread_table(r: &Report, threads: &[&ThreadRecord], shown: usize) -> String {
    let rows: Vec<&&ThreadRecord> = threads.iter().take(shown).collect();
    let comm_of = |t: &ThreadRecord| {
        let mut comm = printable(&comm_str(&t.stats.comm));
        if t.folded > 0 {
            comm = format!("{} exited", t.folded);
        } else if t.exited {
            comm.push_str(" (exited)");
        }
        comm
    };
    let comms: Vec<String> = rows.iter().map(|t| comm_of(t)).collect();
    let cw = comms
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let slice_cols: Vec<CounterColumn> = r
        .slice_events
        .iter()
        .map(|e| CounterColumn::new("slice ", e))
        .collect();
    // Per-thread perf counters are already in the event's reported unit (ms for clocks).
    let counter_events: Vec<String> = r
        .thread_counters
        .values()
        .next()
        .map(|v| v.iter().map(|(e, _)| e.clone()).collect())
        .unwrap_or_default();
    let counter_cols: Vec<CounterColumn> = counter_events
        .iter()
        .map(|e| CounterColumn::new("", e))
        .collect();
    let mut out = format!(
        "{:>8} {:>8} {:<cw$} {:>10} {:>6} {:>8} {:>8} {:>8} {:>10} {:>10} {:>6}",
        "TID",
        "PID",
        "COMM",
        "ON-CPU",
        "%CPU",
        "SLICES",
        "VOL",
        "INVOL",
        "RUNQ-WAIT",
        "OFF-CPU",
        "MIGR"
    );
    for c in slice_cols.iter().chain(&counter_cols) {
        out += &format!(" {:>w$}", c.header, w = c.width());
    }
    out += "\n";
    for (t, comm) in rows.iter().zip(&comms) {
        let s = &t.stats;
        out += &format!(
            "{:>8} {:>8} {:<cw$} {:>10} {:>6.1} {:>8} {:>8} {:>8} {:>10} {:>10} {:>6}",
            if t.folded > 0 {
                "-".to_string()
            } else {
                t.tid.to_string()
            },
            s.tgid,
            comm,
            human_ns(s.on_cpu_ns),
            100.0 * r.share(s.on_cpu_ns),
            s.slices,
            s.voluntary,
            s.involuntary,
            human_ns(s.runq_wait_ns),
            human_ns(s.off_cpu_ns),
            s.migrations
        );
        for (c, v) in slice_cols.iter().zip(s.counters.iter()) {
            out += &format!(" {:>w$}", c.cell(Some(*v as f64)), w = c.width());
        }
        let vals = r.thread_counters.get(&t.tid);
        for (c, e) in counter_cols.iter().zip(&counter_events) {
            let v = vals
                .and_then(|v| v.iter().find(|(n, _)| n == e))
                .and_then(|(_, v)| *v)
                // Already in ms for clocks: back to the event's own unit.
                .map(|v| if c.clock { v * 1e6 } else { v });
            out += &format!(" {:>w$}", c.cell(v), w = c.width());
        }
        out += "\n";
    }
    if threads.len() > rows.len() {
        let hidden = threads.len() - rows.len();
        let on: u64 = threads[rows.len()..]
            .iter()
            .map(|t| t.stats.on_cpu_ns)
            .sum();
        out += &format!(
            "  ... {hidden} more {} not shown ({} on-CPU; --top 0 shows all, --sort orders)\n",
            plural(hidden, "thread", "threads"),
            human_ns(on)
        );
    }
    if threads.is_empty() {
        out += "  (no traced thread ran in this window)\n";
    }
    out
}

pub use crate::model::words::plural;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::snapshot::ThreadRecord;
    use tracer_common::ThreadStats;

    fn sample() -> Report {
        let mut snap = Snapshot::default();
        for (tid, on) in [(11u32, 3_000_000u64), (12, 9_000_000)] {
            let mut s = ThreadStats::zeroed();
            s.tgid = 10;
            s.on_cpu_ns = on;
            s.slices = 3;
            s.voluntary = 2;
            s.involuntary = 1;
            s.comm[..4].copy_from_slice(b"work");
            snap.threads.insert(
                (tid, 0),
                ThreadRecord {
                    tid,
                    stats: s,
                    exited: tid == 11,
                    folded: 0,
                },
            );
        }
        snap.hist = HistSet::new();
        snap.hist.on_cpu.record(3_000_000);
        Report {
            kind: "total",
            interval: None,
            time_unix_ns: 1_764_519_725_123_456_789,
            local_time: "16:22:05".into(),
            system_wide: false,
            duration_ns: 12_000_000,
            probe: "tp-btf".into(),
            probe_attach: "tp_btf".into(),
            runq_source: "run_delay",
            probe_refused: vec![],
            snapshot: snap,
            cpus_utilized_task_clock: None,
            slice_events: vec![],
            sections: vec![],
            notices: vec![],
            command: None,
            max_threads: 65536,
            thread_counters: Default::default(),
        }
    }

    const OPTS: ReportOptions = ReportOptions {
        top: None,
        sort: SortKey::OnCpu,
        unit: Unit::Usecs,
        hist_scope: scope::ALL,
    };

    #[test]
    fn json_has_the_documented_fields() {
        let v = to_json(&sample(), &OPTS);
        assert_eq!(v["duration_ns"], 12_000_000);
        assert_eq!(v["probe"], "tp-btf");
        assert!((v["cpus_utilized"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        let t = &v["threads"][0];
        assert_eq!(t["tid"], 12, "busiest first");
        for k in [
            "tid",
            "pid",
            "comm",
            "on_cpu_ns",
            "slices",
            "voluntary_switches",
            "involuntary_switches",
            "runq_wait_ns",
            "runq_waits",
            "off_cpu_ns",
            "migrations",
        ] {
            assert!(t.get(k).is_some(), "thread field {k}");
        }
        assert_eq!(t["comm"], "work");
        for k in ["on_cpu", "runq", "off_cpu"] {
            assert!(v["histograms"][k]["count"].is_u64(), "{k}");
        }
        assert_eq!(v["histograms"]["on_cpu"]["count"], 1);
        assert_eq!(v["drops"]["threads_map_full"], 0);
    }

    #[test]
    fn text_lists_threads_busiest_first_and_honours_top() {
        let r = sample();
        let t = format_text(&r, &OPTS);
        let a = t.find("      12 ").unwrap();
        let b = t.find("      11 ").unwrap();
        assert!(a < b);
        assert!(t.contains("(exited)"));
        let t = format_text(
            &r,
            &ReportOptions {
                top: Some(1),
                ..OPTS
            },
        );
        assert!(!t.contains("      11 "));
        assert!(
            t.contains("... 1 more thread not shown (3.00ms on-CPU;"),
            "{t}"
        );
    }

    /// A report with `n` threads: TID 100+i, on-CPU (i+1) ms, run-queue wait (n-i) ms.
    fn many(n: u32) -> Report {
        let mut r = sample();
        r.snapshot.threads.clear();
        for i in 0..n {
            let mut s = ThreadStats::zeroed();
            s.tgid = 100;
            s.on_cpu_ns = u64::from(i + 1) * 1_000_000;
            s.runq_wait_ns = u64::from(n - i) * 1_000_000;
            s.slices = u64::from(i % 3);
            s.comm[..2].copy_from_slice(b"th");
            r.snapshot.threads.insert(
                (100 + i, 0),
                ThreadRecord {
                    tid: 100 + i,
                    stats: s,
                    exited: false,
                    folded: 0,
                },
            );
        }
        r.duration_ns = 1_000_000_000;
        r
    }

    fn table_tids(text: &str) -> Vec<u32> {
        text.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let tid = w.next()?.parse().ok()?;
                (w.next()? == "100").then_some(tid)
            })
            .collect()
    }

    #[test]
    fn text_shows_a_screenful_by_default_and_says_what_it_left_out() {
        let r = many(30);
        let t = format_text(&r, &OPTS);
        let tids = table_tids(&t);
        assert_eq!(tids.len(), DEFAULT_TEXT_TOP);
        assert_eq!(tids[0], 129, "busiest first");
        // The 10 left out: 1..=10 ms = 55 ms.
        assert!(
            t.contains("  ... 10 more threads not shown (55.0ms on-CPU; --top 0 shows all, --sort orders)\n"),
            "{t}"
        );
        let all = format_text(
            &r,
            &ReportOptions {
                top: Some(0),
                ..OPTS
            },
        );
        assert_eq!(table_tids(&all).len(), 30);
        assert!(!all.contains("not shown"));
        // JSON keeps every thread unless --top is given.
        let v = to_json(&r, &OPTS);
        assert_eq!(v["threads"].as_array().unwrap().len(), 30);
        assert_eq!(v["threads_total"], 30);
        let v = to_json(
            &r,
            &ReportOptions {
                top: Some(5),
                ..OPTS
            },
        );
        assert_eq!(v["threads"].as_array().unwrap().len(), 5);
        let v = to_json(
            &r,
            &ReportOptions {
                top: Some(0),
                ..OPTS
            },
        );
        assert_eq!(v["threads"].as_array().unwrap().len(), 30);
    }

    #[test]
    fn sort_orders_text_and_json() {
        let r = many(4);
        let o = |sort| ReportOptions {
            sort,
            top: Some(0),
            ..OPTS
        };
        assert_eq!(
            table_tids(&format_text(&r, &o(SortKey::OnCpu))),
            [103, 102, 101, 100]
        );
        assert_eq!(
            table_tids(&format_text(&r, &o(SortKey::Runq))),
            [100, 101, 102, 103]
        );
        // Slices 0,1,2,0: ties broken by on-CPU time.
        assert_eq!(
            table_tids(&format_text(&r, &o(SortKey::Slices))),
            [102, 101, 103, 100]
        );
        let v = to_json(&r, &o(SortKey::Runq));
        assert_eq!(v["threads"][0]["tid"], 100);
    }

    #[test]
    fn text_table_golden() {
        let mut r = sample();
        // A 15-character comm, exited: shown whole with the marker, the column widened.
        let t = r.snapshot.threads.get_mut(&(11, 0)).unwrap();
        t.stats.comm = [0; 16];
        t.stats.comm[..15].copy_from_slice(b"apt-cache-helpr");
        t.stats.counters[0] = 2_500_000;
        r.slice_events = vec!["task-clock".into()];
        r.thread_counters.insert(
            12,
            vec![
                ("task-clock".into(), Some(9.0)),
                ("context-switches".into(), Some(3.0)),
            ],
        );
        r.thread_counters.insert(
            11,
            vec![
                ("task-clock".into(), Some(0.0)),
                ("context-switches".into(), None),
            ],
        );
        let t = format_text(&r, &OPTS);
        let table: Vec<&str> = t
            .lines()
            .skip_while(|l| !l.starts_with("     TID"))
            .take(3)
            .collect();
        let want = [
            "     TID      PID COMM                         ON-CPU   %CPU   SLICES      VOL    INVOL  RUNQ-WAIT    OFF-CPU   MIGR slice task-clock (ms) task-clock (ms) context-switches",
            "      12       10 work                         9.00ms   75.0        3        2        1        0ns        0ns      0                  0.00            9.00                3",
            "      11       10 apt-cache-helpr (exited)     3.00ms   25.0        3        2        1        0ns        0ns      0                  2.50            0.00                -",
        ];
        assert_eq!(table, want, "{t}");
    }

    #[test]
    fn iso_times() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            iso_utc(1_764_519_725_123_456_789),
            "2025-11-30T16:22:05.123Z"
        );
        assert_eq!(iso_utc(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn interval_header_has_the_time_and_json_the_timestamp() {
        let mut r = sample();
        r.kind = "interval";
        r.interval = Some(3);
        let t = format_text(&r, &OPTS);
        assert!(
            t.starts_with("tracer interval 3 at 16:22:05: 0.012 s window"),
            "{t}"
        );
        let v = to_json(&r, &OPTS);
        assert_eq!(v["time"], "2025-11-30T16:22:05.123Z");
        assert_eq!(v["interval"], 3);
    }

    #[test]
    fn headline_says_what_cpus_utilized_is() {
        let mut r = sample();
        assert!(format_text(&r, &OPTS)
            .contains("1.000 CPUs utilized (on-CPU time of the traced threads)\n"));
        assert_eq!(to_json(&r, &OPTS)["cpus_utilized_source"], "on_cpu");
        r.system_wide = true;
        assert!(format_text(&r, &OPTS)
            .contains("1.000 CPUs utilized (on-CPU time of all threads, idle excluded)\n"));
        r.system_wide = false;
        r.cpus_utilized_task_clock = Some(0.5);
        assert!(format_text(&r, &OPTS).contains("0.500 CPUs utilized (task-clock)\n"));
        assert_eq!(to_json(&r, &OPTS)["cpus_utilized_source"], "task-clock");
    }

    fn cc(bpf_ms: f64, tc_ms: f64) -> CrossCheck {
        CrossCheck {
            bpf_ns: (bpf_ms * 1e6) as u64,
            task_clock_ns: tc_ms * 1e6,
            missed_threads: 0,
            missed_ns: 0,
            lag_ns: 0,
            exited_threads: 0,
            slices: 0,
            cpus: 2,
            window_ns: 1_000_000_000,
            max_thread_ns: 0,
        }
    }

    #[test]
    fn cross_check_warns_only_where_it_means_something() {
        let n = cross_check_notice(&cc(909.202, 904.912));
        assert_eq!(
            n,
            "cross-check: on-CPU time from the BPF programs 909.202 ms vs task-clock 904.912 ms (+0.47%): they agree"
        );
        // Short runs: 2 ms either way is agreement, and so is what ran before the
        // counters were enabled.
        assert!(cross_check_notice(&cc(3.0, 1.5)).ends_with("they agree"));
        let late = CrossCheck {
            lag_ns: 5_000_000,
            ..cc(100.0, 92.0)
        };
        assert!(cross_check_notice(&late).ends_with("they agree"));
        // A real gap says which figure to trust.
        let n = cross_check_notice(&cc(258.0, 100.0));
        assert!(n.contains("(+158.00%)") && n.ends_with("trust it"), "{n}");
        let n = cross_check_notice(&cc(60.0, 100.0));
        assert!(n.ends_with("trust task-clock"), "{n}");
        // 200 short processes: task-clock misses the end of each.
        let n = cross_check_notice(&CrossCheck {
            exited_threads: 202,
            ..cc(108.55, 96.51)
        });
        assert!(
            n.contains("(+12.48%): they agree once what task-clock does not see")
                && n.contains("the end of each of 202 exited threads"),
            "{n}"
        );
        // A thread that switches 600 times: ~9 us a switch.
        let n = cross_check_notice(&CrossCheck {
            slices: 596,
            ..cc(22.508, 16.885)
        });
        assert!(
            n.contains("(+33.30%): they agree once")
                && n.contains("(596 switches, at most 9.4 us each)"),
            "{n}"
        );
        // A BPF figure that cannot be (a thread on CPU longer than the window) is not
        // the one to trust, however much larger it is.
        let n = cross_check_notice(&CrossCheck {
            max_thread_ns: 566_000_000_000,
            ..cc(566_000.0, 1491.0)
        });
        assert!(
            n.contains("the BPF figures are wrong") && n.ends_with("trust task-clock"),
            "{n}"
        );
        let n = cross_check_notice(&cc(2500.0, 1000.0));
        assert!(
            n.ends_with("trust task-clock"),
            "more than 2 CPUs x 1 s: {n}"
        );
        // Threads task-clock never saw are named, and the comparison is on the others.
        let n = cross_check_notice(&CrossCheck {
            missed_threads: 3,
            missed_ns: 150_000_000,
            ..cc(100.5, 100.0)
        });
        assert!(
            n.contains("3 threads that started later (150.000 ms on-CPU) are in the BPF figures only (so the headline")
                && n.ends_with("(+0.50%): they agree"),
            "{n}"
        );
    }

    #[test]
    fn schedstat_mode_says_what_the_runq_histogram_holds() {
        let mut r = sample();
        r.snapshot.hist.runq.record(50_000);
        let t = format_text(&r, &OPTS);
        assert!(
            t.contains("  run-queue waits: 1 of 6 slices began after a wait the scheduler clocked (run_delay grew);"),
            "{t}"
        );
        r.runq_source = "wakeup";
        assert!(!format_text(&r, &OPTS).contains("run-queue waits:"));
    }

    #[test]
    fn drops_are_warned_about() {
        let mut r = sample();
        r.snapshot.drops[0] = 7;
        assert!(format_text(&r, &OPTS).contains("threads_map_full=7"));
    }
}
