//! From readings to reports: the window between two [`Mark`]s (an interval) or since
//! the start (the totals), built once into the typed report every sink reads.
use std::collections::BTreeMap;

use super::{hist_scope, session::Session, RunConfig};
use crate::model::cgroup_cpu::{self, CgroupCpuRead};
use crate::model::runqlen::{self, CpuSamples};
use crate::{
    model::cross_check::{self, CrossCheck},
    model::report::{Command, ReportKind, ReportOptions},
    model::snapshot::{is_idle, Snapshot},
    output::report::{Report, ReportInput, Sections},
    perf::{self, CounterSnapshot},
    pseries::hypervisor,
    sys::procfs,
    sys::root::Root,
};

/// Readings at one moment: an interval report is the difference of two, the totals are
/// the last one against the start.
#[derive(Clone)]
pub(super) struct Mark {
    /// Cumulative since the window opened.
    pub snap: Snapshot,
    pub counters: Option<CounterSnapshot>,
    /// The last hypervisor read that succeeded.
    pub hyp: Option<hypervisor::Snapshot>,
    /// The `--cgroup` target's CPU figures.
    pub cgroup_cpu: Option<CgroupCpuRead>,
    /// `--runqlen`: each CPU's samples since the window opened.
    pub runqlen: Option<Vec<CpuSamples>>,
    /// `--irq`: the interrupt maps since load (the programs attach as the window opens).
    pub irq: Option<crate::model::irq::IrqRead>,
}

impl Mark {
    /// The window's open: nothing counted yet.
    pub fn start(s: &Session) -> Mark {
        Mark {
            snap: Snapshot {
                at_ns: s.t0,
                ..Default::default()
            },
            counters: None,
            hyp: s.hyp_before.clone(),
            cgroup_cpu: s.cgroup_cpu.as_ref().map(|c| c.1),
            runqlen: None,
            irq: None,
        }
    }
}

/// The counts between two counter reads; the first read counts from zero.
fn counter_delta(
    now: Option<&CounterSnapshot>,
    before: Option<&CounterSnapshot>,
) -> Option<CounterSnapshot> {
    match (now, before) {
        (Some(now), Some(before)) => Some(now.delta(before)),
        (Some(now), None) => Some(now.clone()),
        (None, _) => None,
    }
}

/// The report of the window `from`..`to`: an interval's deltas, or with
/// [`ReportKind::Total`] (`from` the start) the totals.
pub(super) fn window_report(
    s: &Session,
    args: &RunConfig,
    root: &Root,
    kind: ReportKind,
    (from, to): (&Mark, &Mark),
    command: Option<Command>,
) -> Report {
    let snapshot = match kind {
        ReportKind::Total => to.snap.clone(),
        ReportKind::Interval { .. } => to.snap.delta(&from.snap),
    };
    let duration_ns = to.snap.at_ns.saturating_sub(from.snap.at_ns);
    let hypervisor = hypervisor_report(
        args,
        from.hyp.as_ref(),
        to.hyp.as_ref(),
        &snapshot,
        duration_ns,
    );
    let cgroup_cpu = match (&s.cgroup_cpu, &from.cgroup_cpu, &to.cgroup_cpu) {
        (Some((src, _)), Some(a), Some(b)) => Some(cgroup_cpu::delta(src.name.clone(), a, b)),
        _ => None,
    };
    let runqlen = to
        .runqlen
        .as_deref()
        .map(|b| runqlen::delta(from.runqlen.as_deref(), b));
    let irq = to
        .irq
        .as_ref()
        .map(|b| crate::model::irq::delta(from.irq.as_ref(), b, s.tracer.on_cpu_includes_irq));
    build_report(
        s,
        root,
        Window {
            kind,
            snapshot,
            duration_ns,
            counters: counter_delta(to.counters.as_ref(), from.counters.as_ref()),
            hypervisor,
            cgroup_cpu,
            runqlen,
            irq,
            command,
            options: report_options(args),
        },
    )
}

/// How `args` asks reports to be shown.
pub(super) fn report_options(args: &RunConfig) -> ReportOptions {
    ReportOptions {
        top: args.top,
        sort: args.sort,
        unit: if args.millis {
            crate::model::hist::Unit::Msecs
        } else {
            crate::model::hist::Unit::Usecs
        },
        hist_scope: hist_scope(args),
    }
}

/// One report's measurements, before they are joined.
struct Window {
    kind: ReportKind,
    snapshot: Snapshot,
    duration_ns: u64,
    counters: Option<CounterSnapshot>,
    hypervisor: Option<hypervisor::HypervisorReport>,
    cgroup_cpu: Option<cgroup_cpu::CgroupCpuReport>,
    runqlen: Option<Vec<runqlen::RunqlenCpu>>,
    irq: Option<crate::model::irq::IrqReport>,
    command: Option<Command>,
    options: ReportOptions,
}

fn build_report(s: &Session, root: &Root, w: Window) -> Report {
    let mut snapshot = w.snapshot;
    snapshot.threads.retain(|_, r| !is_idle(&r.stats));
    // Threads still on their first slice have no entry in the kernel yet (no TGID, no
    // comm); classic tracepoints give no comm for threads first seen at a wakeup.
    for r in snapshot.threads.values_mut() {
        if r.stats.tgid == 0 {
            r.stats.tgid = procfs::tgid_of(root, r.tid).unwrap_or(0);
        }
        if r.stats.comm[0] == 0 {
            // The kernel's bytes, as the maps hold them (escaped when shown).
            if let Some(b) = procfs::comm_bytes(root, r.stats.tgid, r.tid) {
                let n = b.len().min(r.stats.comm.len() - 1);
                r.stats.comm[..n].copy_from_slice(&b[..n]);
            }
        }
    }
    let mut task_clock_util = None;
    let mut thread_counters = BTreeMap::new();
    let mut notices = s.notices.clone();
    if s.collector.still_missing > 0 {
        notices.push(format!(
            "{} time(s) a live thread was missing from four reads of the kernel's entries \
             in a row: the totals of the read before stand \
             in for it, where one had it",
            s.collector.still_missing
        ));
    }
    if s.collector.unsettled > 0 && matches!(w.kind, ReportKind::Total) {
        // Once, at the end: under load system-wide most reads are, and the totals
        // are exact either way.
        notices.push(format!(
            "{} read(s) of the kernel's totals kept after four tries with a CPU's \
             accounting still changing: a slice or wait that ended during one may be in \
             its rows but only a later read's histograms",
            s.collector.unsettled
        ));
    }
    if s.collector.left_target > 0 {
        notices.push(format!(
            "{} thread(s) left the --cgroup target during the window: counted up to their \
             last switch-out inside it (the move itself is not timed)",
            s.collector.left_target
        ));
    }
    if let Some(n) = s.collector.exit_watch.as_ref().map(|w| w.given_up) {
        if n > 0 {
            notices.push(format!(
                "{n} exiting thread(s) had left /proc at the close and the kernel \
                 had handed over no final totals for them after a wait (up to {:?}): \
                 their totals are those of an earlier read, or missing",
                crate::bpf::collect::EXIT_WAIT
            ));
        }
    }
    let mut sections = Sections {
        counters: None,
        hypervisor: w.hypervisor,
        record: None,
        cgroup_cpu: w.cgroup_cpu,
        runqlen: w.runqlen,
        irq: w.irq,
    };
    if let Some(c) = &w.counters {
        let cr = perf::report(c, w.duration_ns);
        // (Or a cgroup hierarchy's root, which holds the idle tasks.)
        let system_wide = c.idle_in_clocks;
        // perf's per-CPU task-clock runs through idle too (perf stat -a says "2.000 CPUs
        // utilized" on an idle 2-CPU machine): system-wide, the headline figure is the
        // traced threads' on-CPU time from the kernel programs, idle excluded.
        if !system_wide {
            task_clock_util = cr.cpus_utilized;
        }
        if let Some(pt) = &cr.per_thread {
            thread_counters = pt.clone();
        }
        // Comparable only for a target: system-wide, task-clock counts idle too.
        if let Some(tc) = perf::task_clock_ns(c).filter(|_| !system_wide) {
            let cc = cross_check_input(c, &snapshot, w.duration_ns, tc, s, w.kind);
            // Threads that started after the counters were opened (-p/-t): task-clock
            // misses them, so the headline takes the BPF figure, which has them all.
            if cross_check::headline_from_bpf(&cc) {
                task_clock_util = None;
            }
            notices.push(cross_check::cross_check_notice(&cc));
        }
        // Modifiers that select nothing, or nothing different, on this machine (arm64's
        // exception levels): said, and their zeros need no other explanation.
        let levels = crate::perf::exception_levels::notices(
            cr.counters
                .iter()
                .filter(|c| c.supported)
                .map(|c| c.event.as_str()),
        );
        notices.extend(levels.iter().map(|(_, n)| n.clone()));
        notices.extend(zero_hardware_counts(&cr, &levels));
        sections.counters = Some(cr);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut report = Report::build(ReportInput {
        kind: w.kind,
        time_unix_ns: u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
        local_time: local_hms(now.as_secs()),
        duration_ns: w.duration_ns,
        run: s.header.clone(),
        snapshot,
        cpus_utilized_task_clock: task_clock_util,
        thread_counters,
        sections,
        notices,
        command: w.command,
        options: w.options,
    });
    join_irq(&mut report);
    report
}

/// `--irq`: each thread's and CPU's share into its row (0 where none ran).
fn join_irq(r: &mut Report) {
    let Some(irq) = &r.sections.irq else {
        return;
    };
    for row in r.threads.rows.iter_mut().filter(|t| t.folded == 0) {
        row.irq = Some(irq.threads.get(&row.tid).copied().unwrap_or_default());
    }
    for c in &mut r.per_cpu {
        c.irq = Some(irq.per_cpu.get(c.cpu).copied().unwrap_or_default());
    }
}

/// A hardware event that ran and counted exactly zero is more likely an event the PMU
/// accepts but does not implement (seen under QEMU's POWER PMU) than a real 0.
fn zero_hardware_counts(cr: &perf::CounterReport, explained: &[(String, String)]) -> Vec<String> {
    cr.counters
        .iter()
        .filter(|c| c.supported && c.value == Some(0.0) && c.running_ns > 0)
        .filter(|c| !explained.iter().any(|(e, _)| *e == c.event))
        .filter(|c| {
            perf::parse_event(&c.event)
                .map(|e| !e.is_software())
                .unwrap_or(false)
        })
        .map(|c| {
            format!(
                "{} counted 0 while running {:.1}% of the window: the PMU may accept it without implementing it",
                c.event,
                100.0 * c.running_ns as f64 / c.enabled_ns.max(1) as f64
            )
        })
        .collect()
}

/// The hypervisor's view between two snapshots, of the CPUs the traced set ran on in
/// `snap` (all CPUs system-wide).
fn hypervisor_report(
    args: &RunConfig,
    before: Option<&hypervisor::Snapshot>,
    after: Option<&hypervisor::Snapshot>,
    snap: &Snapshot,
    elapsed_ns: u64,
) -> Option<hypervisor::HypervisorReport> {
    let busy = snap.busy_cpus();
    let cpus = (!args.targets.system_wide()).then_some(busy.as_slice());
    Some(hypervisor::report(before?, after?, cpus, elapsed_ns))
}

/// What the BPF figures and task-clock each cover, for the cross-check notice.
fn cross_check_input(
    c: &CounterSnapshot,
    snapshot: &Snapshot,
    window_ns: u64,
    task_clock_ns: f64,
    s: &Session,
    kind: ReportKind,
) -> CrossCheck {
    // Per-thread counters (-p/-t) cover the TIDs they were opened on; inherited and
    // cgroup counters cover every thread the BPF side traces.
    let tids: Option<std::collections::BTreeSet<u32>> = c
        .events
        .iter()
        .find(|e| {
            e.parts
                .iter()
                .any(|(p, _)| matches!(p, perf::Scope::Thread { .. }))
        })
        .map(|e| {
            e.parts
                .iter()
                .filter_map(|(p, _)| match p {
                    perf::Scope::Thread { tid, .. } => Some(*tid),
                    _ => None,
                })
                .collect()
        });
    let (mut covered_ns, mut missed_ns, mut missed, mut exited) = (0u64, 0u64, 0usize, 0usize);
    let mut slices = 0;
    let mut max_thread_ns = 0;
    for t in snapshot.threads.values() {
        if t.folded == 0 {
            max_thread_ns = max_thread_ns.max(t.stats.on_cpu_ns);
        }
        if tids.as_ref().is_none_or(|set| set.contains(&t.tid)) {
            covered_ns += t.stats.on_cpu_ns;
            slices += t.stats.slices;
            if t.exited {
                exited += (t.folded as usize).max(1);
            }
        } else {
            missed_ns += t.stats.on_cpu_ns;
            missed += 1;
        }
    }
    CrossCheck {
        bpf_ns: covered_ns,
        task_clock_ns,
        missed_threads: missed,
        missed_ns,
        exited_threads: exited,
        slices,
        // Only the first report's window starts before the counters were enabled.
        lag_ns: if matches!(
            kind,
            ReportKind::Total | ReportKind::Interval { interval: 1 }
        ) {
            s.counters_lag_ns
        } else {
            0
        },
        cpus: snapshot.cpu_busy_ns.len().max(1),
        window_ns,
        max_thread_ns,
    }
}

/// Wall-clock time of day (local time zone) as HH:MM:SS, as runqlat -T prints it.
fn local_hms(unix_secs: u64) -> String {
    // time_t named by inference: musl deprecates the alias.
    let t = unix_secs.try_into().unwrap_or(0);
    // SAFETY: tm is plain data (integers and a pointer), so all-zero is valid.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r writes the tm it is given and reads only `t`.
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return String::new();
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}
