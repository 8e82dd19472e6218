//! One interval report as `tracer top` shows it: per process and thread, the figures of
//! the interval as rates per second and top's %CPU, and each CPU's bar.
use std::collections::BTreeMap;

use crate::model::{snapshot::HistSet, words};
use crate::output::report::Report;

/// A row's figures over one interval, per second of it where a rate.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// On-CPU time as top's %CPU: 100 is one CPU.
    pub cpu_pct: f64,
    /// Run-queue wait, ns per second.
    pub runq_ns_s: f64,
    pub runq_p50: Option<u64>,
    pub runq_p99: Option<u64>,
    /// Off-CPU time blocked (voluntary) and preempted, ns per second.
    pub blocked_ns_s: f64,
    pub preempted_ns_s: f64,
    pub switches_s: f64,
    pub migrations_s: f64,
    pub hist: HistSet,
}

/// One thread.
#[derive(Clone, Debug)]
pub struct ThreadView {
    pub tid: u32,
    pub comm: String,
    pub exited: bool,
    pub f: Figures,
}

/// One process and its threads.
#[derive(Clone, Debug)]
pub struct ProcView {
    pub pid: u32,
    pub comm: String,
    pub threads: Vec<ThreadView>,
    pub f: Figures,
}

/// One CPU's bar.
#[derive(Clone, Debug)]
pub struct CpuView {
    pub cpu: usize,
    /// Traced on-CPU share, 0..=1.
    pub util: f64,
    /// Steal, percent of the interval, when the hypervisor view was read.
    pub steal_pct: Option<f64>,
    /// `--runqlen`: the mean number of tasks waiting over the interval.
    pub runqlen: Option<f64>,
}

/// One interval report, as the view shows it.
#[derive(Clone, Debug)]
pub struct Sample {
    pub interval: u64,
    pub time: String,
    pub duration_ns: u64,
    pub cpus_utilized: f64,
    pub cpus: Vec<CpuView>,
    pub procs: Vec<ProcView>,
    pub threads_total: usize,
    pub drops: u64,
    pub all: HistSet,
}

/// Figures from the sums `[on-CPU, run-queue, blocked, preempted, switches, migrations]`.
fn figures(dur_s: f64, sums: [u64; 6], hist: HistSet) -> Figures {
    let [on, runq, blocked, preempted, sw, mig] = sums;
    let per_s = |v: u64| if dur_s > 0.0 { v as f64 / dur_s } else { 0.0 };
    Figures {
        cpu_pct: per_s(on) / 1e7,
        runq_ns_s: per_s(runq),
        runq_p50: hist.runq.percentile(50.0),
        runq_p99: hist.runq.percentile(99.0),
        blocked_ns_s: per_s(blocked),
        preempted_ns_s: per_s(preempted),
        switches_s: per_s(sw),
        migrations_s: per_s(mig),
        hist,
    }
}

impl Sample {
    /// The view of one report (its threads' histograms need the per-thread scope).
    pub fn from_report(r: &Report) -> Sample {
        let dur_s = r.duration_ns as f64 / 1e9;
        let mut by: BTreeMap<u32, Vec<ThreadView>> = BTreeMap::new();
        let mut sums: BTreeMap<u32, [u64; 6]> = BTreeMap::new();
        let mut hists: BTreeMap<u32, HistSet> = BTreeMap::new();
        for t in &r.threads.rows {
            let hist = t.histograms.clone().unwrap_or_default();
            let sw = t.voluntary_switches + t.involuntary_switches;
            let s = sums.entry(t.pid).or_default();
            for (a, b) in s.iter_mut().zip([
                t.on_cpu_ns,
                t.runq_wait_ns,
                t.blocked_ns,
                t.preempted_ns,
                sw,
                t.migrations,
            ]) {
                *a += b;
            }
            hists.entry(t.pid).or_default().merge(&hist);
            by.entry(t.pid).or_default().push(ThreadView {
                tid: t.tid,
                // Every cell the screen shows is text that cannot drive the terminal.
                comm: words::escape(&t.comm),
                exited: t.exited,
                f: figures(
                    dur_s,
                    [
                        t.on_cpu_ns,
                        t.runq_wait_ns,
                        t.blocked_ns,
                        t.preempted_ns,
                        sw,
                        t.migrations,
                    ],
                    hist,
                ),
            });
        }
        let procs = by
            .into_iter()
            .map(|(pid, threads)| {
                let s = sums[&pid];
                let comm = threads
                    .iter()
                    .find(|t| t.tid == pid)
                    .unwrap_or(&threads[0])
                    .comm
                    .clone();
                ProcView {
                    pid,
                    comm,
                    f: figures(dur_s, s, hists.remove(&pid).unwrap_or_default()),
                    threads,
                }
            })
            .collect();
        let steal: BTreeMap<usize, f64> = r
            .sections
            .hypervisor
            .as_ref()
            .map(|h| {
                h.cpus
                    .iter()
                    .filter_map(|c| Some((c.cpu as usize, c.steal_percent?)))
                    .collect()
            })
            .unwrap_or_default();
        let runqlen: BTreeMap<usize, f64> = r
            .sections
            .runqlen
            .iter()
            .flatten()
            .map(|c| (c.cpu as usize, c.mean_waiting))
            .collect();
        Sample {
            interval: r.interval().unwrap_or(0),
            time: r.local_time.clone(),
            duration_ns: r.duration_ns,
            cpus_utilized: r.cpus_utilized,
            cpus: r
                .per_cpu
                .iter()
                .map(|c| CpuView {
                    cpu: c.cpu,
                    util: c.utilization,
                    steal_pct: steal.get(&c.cpu).copied(),
                    runqlen: runqlen.get(&c.cpu).copied(),
                })
                .collect(),
            procs,
            threads_total: r.threads_total,
            drops: r.drops.named().map(|(_, n)| n).sum(),
            all: r.histograms.clone(),
        }
    }
}
