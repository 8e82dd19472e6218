//! The human-readable report: a pure function of the typed [`Report`].
use crate::model::targets::HistScope;

use crate::model::{
    hist::{format_bcc, human_ns, Unit},
    options::RunqSource,
    report::{drop_advice, drop_note, ReportKind, ThreadRow, UtilSource, View},
    snapshot::{HistKind, HistSet},
    words::{self, plural},
};
use crate::output::report::Report;
use crate::perf;
use crate::sys::launch;

fn fmt_secs(ns: u64) -> String {
    format!("{:.3} s", ns as f64 / 1e9)
}

/// What "CPUs utilized" was computed from, for the header.
fn cpus_utilized_label(r: &Report) -> &'static str {
    match (r.cpus_utilized_source, r.run.system_wide) {
        (UtilSource::TaskClock, _) => "task-clock",
        (UtilSource::OnCpu, true) => "on-CPU time of all threads, idle excluded",
        (UtilSource::OnCpu, false) => "on-CPU time of the traced threads",
    }
}

/// The human-readable report.
pub fn format_text(r: &Report) -> String {
    let o = &r.options;
    let mut out = String::new();
    let head = match r.kind {
        ReportKind::Interval { interval } if !r.local_time.is_empty() => {
            format!("interval {interval} at {}", r.local_time)
        }
        ReportKind::Interval { interval } => format!("interval {interval}"),
        ReportKind::Total => "total".to_string(),
    };
    let run_delay = r.run.runq_source == RunqSource::RunDelay;
    out += &format!(
        "tracer {head}: {} window, probe {} ({}, waits from {}), {:.3} CPUs utilized ({})\n",
        fmt_secs(r.duration_ns),
        r.run.probe,
        r.run.probe_attach,
        if run_delay {
            "sched_info.run_delay"
        } else {
            "wakeups"
        },
        r.cpus_utilized,
        cpus_utilized_label(r)
    );
    for x in &r.run.probe_refused {
        out += &format!("  (probe {} refused: {})\n", x.mode, x.reason);
    }
    // sched_ext names come from the BPF scheduler that was loaded: escaped.
    out += &format!(
        "  scheduler: {}\n",
        words::escape(r.run.scheduler.describe())
    );
    if r.per_cpu.iter().any(|c| c.on_cpu_ns > 0) {
        let cpus: Vec<String> = r
            .per_cpu
            .iter()
            .map(|c| format!("cpu{} {:.1}%", c.cpu, 100.0 * c.utilization))
            .collect();
        out += &format!("  traced on-CPU time per CPU: {}\n", cpus.join("  "));
    }
    if run_delay {
        out += &run_delay_line(r);
    }
    if let Some(c) = &r.command {
        let shown = launch::short_command(&c.argv, launch::COMMAND_SHOWN);
        let cpu = c
            .cpu
            .map_or(String::new(), |c| format!(", {}", c.describe()));
        out += &format!(
            "  command: {} ({}{cpu})\n",
            words::escape(&shown),
            c.state.describe()
        );
    } else if !r.run.system_wide {
        out += &format!("  traced: {}\n", words::escape(&r.run.target));
    }
    out += "\n";

    out += &thread_table(r);
    out += "\n";
    out += &hist_block("", &r.histograms, o.unit);
    let shown = o.shown(View::Text);
    match o.hist_scope {
        HistScope::Process => {
            for p in r.processes.iter().flatten().take(shown) {
                if let Some(h) = &p.histograms {
                    out += &hist_block(
                        &format!("pid {} ({}) ", p.pid, words::escape(&p.comm)),
                        h,
                        o.unit,
                    );
                }
            }
        }
        HistScope::Thread => {
            for t in r.threads.shown(View::Text) {
                if let Some(h) = &t.histograms {
                    let label = format!("tid {} ({}) ", t.tid, words::escape(&t.comm));
                    out += &hist_block(&label, h, o.unit);
                }
            }
        }
        _ => {}
    }
    // `<not supported>` is said once: in the first interval and in the totals.
    let unsupported = matches!(
        r.kind,
        ReportKind::Total | ReportKind::Interval { interval: 1 }
    );
    let sections = [
        r.sections
            .counters
            .as_ref()
            .map(|c| crate::output::counters::format_text_opts(c, unsupported)),
        r.sections
            .hypervisor
            .as_ref()
            .map(crate::output::hypervisor::format_text),
        r.sections.record.as_ref().map(|s| s.text()),
        r.sections.cgroup_cpu.as_ref().map(|c| c.text()),
        r.sections
            .runqlen
            .as_deref()
            .map(crate::model::runqlen::text),
        r.sections.irq.as_ref().map(|i| irq_text(r, i)),
    ];
    for text in sections.iter().flatten().filter(|t| !t.is_empty()) {
        out += "\n";
        out += text;
        if !text.ends_with('\n') {
            out += "\n";
        }
    }
    let mut warned = false;
    for (n, v) in r.drops.named().filter(|(_, v)| *v > 0) {
        match drop_advice(n) {
            Some(advice) => {
                if !warned {
                    out += "\n";
                    warned = true;
                }
                out += &format!("WARNING: events lost in the kernel: {n}={v} ({advice})\n");
            }
            None => out += &format!("note: {n}={v}: {}\n", drop_note(n)),
        }
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
    let slices: u64 = r.threads.rows.iter().map(|t| t.slices).sum();
    let waits = r.histograms.runq.count();
    format!(
        "  run-queue waits: {waits} of {slices} slices began after a wait the scheduler clocked \
         (run_delay grew); the rest read 0 in run_delay and are not in the histogram \
         (--runq-from wakeup times every wait)\n"
    )
}

fn hist_block(label: &str, h: &HistSet, unit: Unit) -> String {
    let mut out = String::new();
    for k in HistKind::ALL {
        out += &format_bcc(&format!("{label}{}", k.title()), h.get(k), unit);
        out += "\n";
    }
    out
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
        let clock = perf::parse_event(event)
            .map(|e| perf::is_clock(&e))
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
fn thread_table(r: &Report) -> String {
    let rows = r.threads.shown(View::Text);
    let comm_of = |t: &ThreadRow| {
        // A comm is whatever the program wrote with prctl: escaped, one row one line.
        let mut comm = words::escape(&t.comm);
        if t.folded > 0 {
            comm = format!("{} exited", t.folded);
        } else if t.reaped_by_exec {
            comm.push_str(" (reaped by exec)");
        } else if t.became != 0 {
            comm.push_str(&format!(" (exec'd as {})", t.became));
        } else if t.exited {
            comm.push_str(" (exited)");
        }
        comm
    };
    let comms: Vec<String> = rows.iter().map(comm_of).collect();
    let cw = comms
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0)
        .max(16);
    let slice_cols: Vec<CounterColumn> = r
        .run
        .slice_events
        .iter()
        .map(|e| CounterColumn::new("slice ", e))
        .collect();
    // Per-thread perf counters are already in the event's reported unit (ms for clocks).
    let counter_cols: Vec<CounterColumn> = r
        .thread_counter_events
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
        out += &format!(
            "{:>8} {:>8} {:<cw$} {:>10} {:>6.1} {:>8} {:>8} {:>8} {:>10} {:>10} {:>6}",
            if t.folded > 0 {
                "-".to_string()
            } else {
                t.tid.to_string()
            },
            t.pid,
            comm,
            human_ns(t.on_cpu_ns),
            100.0 * t.cpu_share,
            t.slices,
            t.voluntary_switches,
            t.involuntary_switches,
            human_ns(t.runq_wait_ns),
            human_ns(t.off_cpu_ns),
            t.migrations
        );
        let slice_vals = t.slice_counters.iter().flatten().map(|(_, v)| *v);
        for (c, v) in slice_cols.iter().zip(slice_vals) {
            out += &format!(" {:>w$}", c.cell(Some(v as f64)), w = c.width());
        }
        for (c, e) in counter_cols.iter().zip(&r.thread_counter_events) {
            let v = t
                .counters
                .as_ref()
                .and_then(|v| v.iter().find(|(n, _)| n == e))
                .and_then(|(_, v)| *v)
                // Already in ms for clocks: back to the event's own unit.
                .map(|v| if c.clock { v * 1e6 } else { v });
            out += &format!(" {:>w$}", c.cell(v), w = c.width());
        }
        out += "\n";
    }
    let hidden_rows = r.threads.hidden(View::Text);
    if !hidden_rows.is_empty() {
        let hidden = hidden_rows.len();
        let on: u64 = hidden_rows.iter().map(|t| t.on_cpu_ns).sum();
        out += &format!(
            "  ... {hidden} more {} not shown ({} on-CPU; --top 0 shows all, --sort orders)\n",
            plural(hidden, "thread", "threads"),
            human_ns(on)
        );
    }
    if r.threads.rows.is_empty() {
        out += "  (no traced thread ran in this window)\n";
    }
    out
}

/// `--irq`'s section, with the threads interrupted most (names escaped).
fn irq_text(r: &Report, irq: &crate::model::irq::IrqReport) -> String {
    let mut out = crate::model::irq::text(irq);
    let mut rows: Vec<_> = r
        .threads
        .rows
        .iter()
        .filter_map(|t| Some((t, t.irq?)))
        .filter(|(_, s)| s.irq_ns + s.softirq_ns > 0)
        .collect();
    rows.sort_by_key(|(_, s)| std::cmp::Reverse(s.irq_ns + s.softirq_ns));
    if !rows.is_empty() {
        let shown: Vec<String> = rows
            .iter()
            .take(5)
            .map(|(t, s)| {
                format!(
                    "{} ({}) {:.3}+{:.3}",
                    words::escape(&t.comm),
                    t.tid,
                    s.irq_ns as f64 / 1e6,
                    s.softirq_ns as f64 / 1e6
                )
            })
            .collect();
        out += &format!(
            "  threads interrupted most (hardirq+softirq ms): {}\n",
            shown.join(", ")
        );
    }
    out
}
