//! `tracer diff`: two total reports of `tracer run --json` compared, as a pure function of
//! the two documents ([`doc::RunDoc`]), so every rule has a unit test. Threads are matched
//! by process name and thread name (TIDs and PIDs differ between runs), summed when a
//! process has several threads of one name.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{diff::doc::RunDoc, hist::Histogram};

pub mod doc;

/// Why two reports cannot be compared: figures that would mean different things.
pub fn comparable(a: &RunDoc, b: &RunDoc) -> Result<(), String> {
    if a.schema != b.schema {
        return Err(format!(
            "not comparable: different schemas (A is schema {}, B is schema {}): \
             rerun both with one tracer",
            a.schema, b.schema
        ));
    }
    if a.probe != b.probe {
        return Err(format!(
            "not comparable: different probe modes (A {}, B {}): pass the same --probe to both runs",
            a.probe, b.probe
        ));
    }
    if a.runq_source != b.runq_source {
        return Err(format!(
            "not comparable: different run-queue sources (A {}, B {}): pass the same --runq-from to both runs",
            a.runq_source, b.runq_source
        ));
    }
    Ok(())
}

/// How a figure is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Ns,
    Count,
    Cpus,
    /// A perf counter in its own unit (msec for the clocks).
    Counter,
}

/// One figure in both runs: `delta` = B − A, its sign the direction; `pct` relative to A
/// (None when A is 0).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    pub metric: String,
    pub unit: Unit,
    pub a: Option<f64>,
    pub b: Option<f64>,
    pub delta: f64,
    pub pct: Option<f64>,
}

impl Change {
    pub fn new(metric: &str, unit: Unit, a: Option<f64>, b: Option<f64>) -> Change {
        let (x, y) = (a.unwrap_or(0.0), b.unwrap_or(0.0));
        Change {
            metric: metric.to_string(),
            unit,
            a,
            b,
            delta: y - x,
            pct: (a.is_some() && x != 0.0).then(|| (y - x) / x * 100.0),
        }
    }
}

/// The threads of one process name and thread name, in both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupDiff {
    pub process: String,
    pub thread: String,
    /// Rows in each report (0: absent from it).
    pub threads_a: u64,
    pub threads_b: u64,
    /// on-CPU, run-queue wait (and its p50 and p99 when either report has `-L`
    /// histograms), off-CPU, slices, involuntary switches, migrations, waits, then the
    /// `--per-thread` counters by name.
    pub changes: Vec<Change>,
}

/// One side's header.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Side {
    pub file: String,
    pub time: String,
    pub duration_ns: u64,
    pub target: String,
    pub scheduler: Option<String>,
    /// Threads in the report's rows out of `threads_total` (`--top` cuts).
    pub threads: u64,
    pub threads_total: u64,
}

/// What `tracer diff` prints: its `Serialize` is the `--json` output.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diff {
    pub schema: u32,
    pub probe: String,
    pub a: Side,
    pub b: Side,
    /// The whole run's figures, largest relative change first.
    pub total: Vec<Change>,
    /// Largest on-CPU change first (by its size, either sign).
    pub groups: Vec<GroupDiff>,
    pub notes: Vec<String>,
}

#[derive(Default)]
struct Group {
    rows: u64,
    sums: [u64; 7],
    runq: Option<Histogram>,
    counters: BTreeMap<String, f64>,
}

/// The rows of one report by (process name, thread name). The process name is its
/// leader's comm (the row with `tid == pid`), else the thread's own.
fn groups(d: &RunDoc) -> BTreeMap<(String, String), Group> {
    let leaders: BTreeMap<u32, &str> = d
        .threads
        .iter()
        .filter(|t| t.tid == t.pid)
        .map(|t| (t.pid, t.comm.as_str()))
        .collect();
    let mut out: BTreeMap<(String, String), Group> = BTreeMap::new();
    for t in &d.threads {
        let process = leaders.get(&t.pid).copied().unwrap_or(&t.comm).to_string();
        let thread = if t.folded > 0 {
            format!("({} exited threads)", t.folded)
        } else {
            t.comm.clone()
        };
        let g = out.entry((process, thread)).or_default();
        g.rows += 1;
        let v = [
            t.on_cpu_ns,
            t.runq_wait_ns,
            t.off_cpu_ns,
            t.slices,
            t.involuntary_switches,
            t.migrations,
            t.runq_waits,
        ];
        for (s, x) in g.sums.iter_mut().zip(v) {
            *s = s.saturating_add(x);
        }
        if let Some(h) = t.histograms.as_ref().and_then(|h| h.runq.histogram().ok()) {
            g.runq.get_or_insert_with(Histogram::new).merge(&h);
        }
        for (k, v) in t.counters.iter().flatten() {
            *g.counters.entry(k.clone()).or_default() += v.unwrap_or(0.0);
        }
    }
    out
}

fn pcts(h: Option<&Histogram>) -> [Option<f64>; 2] {
    [50.0, 99.0].map(|q| h.and_then(|h| h.percentile(q)).map(|v| v as f64))
}

fn group_changes(a: Option<&Group>, b: Option<&Group>) -> Vec<Change> {
    let s = |g: Option<&Group>, i: usize| g.map(|g| g.sums[i] as f64);
    let (pa, pb) = (
        pcts(a.and_then(|g| g.runq.as_ref())),
        pcts(b.and_then(|g| g.runq.as_ref())),
    );
    let mut out = vec![
        Change::new("on_cpu_ns", Unit::Ns, s(a, 0), s(b, 0)),
        Change::new("runq_wait_ns", Unit::Ns, s(a, 1), s(b, 1)),
    ];
    if pa.iter().chain(&pb).any(Option::is_some) {
        out.push(Change::new("runq_p50_ns", Unit::Ns, pa[0], pb[0]));
        out.push(Change::new("runq_p99_ns", Unit::Ns, pa[1], pb[1]));
    }
    out.push(Change::new("off_cpu_ns", Unit::Ns, s(a, 2), s(b, 2)));
    out.push(Change::new("slices", Unit::Count, s(a, 3), s(b, 3)));
    out.push(Change::new(
        "involuntary_switches",
        Unit::Count,
        s(a, 4),
        s(b, 4),
    ));
    out.push(Change::new("migrations", Unit::Count, s(a, 5), s(b, 5)));
    out.push(Change::new("runq_waits", Unit::Count, s(a, 6), s(b, 6)));
    let mut names: Vec<&String> = a.iter().chain(&b).flat_map(|g| g.counters.keys()).collect();
    names.sort();
    names.dedup();
    for n in names {
        let c = |g: Option<&Group>| g.and_then(|g| g.counters.get(n).copied());
        out.push(Change::new(n, Unit::Counter, c(a), c(b)));
    }
    out
}

fn total_changes(a: &RunDoc, b: &RunDoc) -> Vec<Change> {
    let f = |d: &RunDoc, h: fn(&RunDoc) -> &doc::HistDoc, q: f64| {
        h(d).histogram()
            .ok()
            .and_then(|h| h.percentile(q))
            .map(|v| v as f64)
    };
    let runq: fn(&RunDoc) -> &doc::HistDoc = |d| &d.histograms.runq;
    let on: fn(&RunDoc) -> &doc::HistDoc = |d| &d.histograms.on_cpu;
    let off: fn(&RunDoc) -> &doc::HistDoc = |d| &d.histograms.off_cpu;
    let sum = |d: &RunDoc, k: fn(&doc::ThreadDoc) -> u64| {
        Some(d.threads.iter().map(k).fold(0u64, u64::saturating_add) as f64)
    };
    let mut out = vec![
        Change::new(
            "cpus_utilized",
            Unit::Cpus,
            Some(a.cpus_utilized),
            Some(b.cpus_utilized),
        ),
        Change::new(
            "on_cpu_ns",
            Unit::Ns,
            Some(a.on_cpu_ns as f64),
            Some(b.on_cpu_ns as f64),
        ),
        Change::new(
            "runq_wait_ns",
            Unit::Ns,
            Some(a.histograms.runq.sum_ns as f64),
            Some(b.histograms.runq.sum_ns as f64),
        ),
    ];
    for (name, q) in [
        ("runq_p50_ns", 50.0),
        ("runq_p90_ns", 90.0),
        ("runq_p99_ns", 99.0),
        ("runq_p999_ns", 99.9),
    ] {
        out.push(Change::new(name, Unit::Ns, f(a, runq, q), f(b, runq, q)));
    }
    out.push(Change::new(
        "on_cpu_p99_ns",
        Unit::Ns,
        f(a, on, 99.0),
        f(b, on, 99.0),
    ));
    out.push(Change::new(
        "off_cpu_ns",
        Unit::Ns,
        Some(a.histograms.off_cpu.sum_ns as f64),
        Some(b.histograms.off_cpu.sum_ns as f64),
    ));
    out.push(Change::new(
        "off_cpu_p99_ns",
        Unit::Ns,
        f(a, off, 99.0),
        f(b, off, 99.0),
    ));
    out.push(Change::new(
        "slices",
        Unit::Count,
        sum(a, |t| t.slices),
        sum(b, |t| t.slices),
    ));
    out.push(Change::new(
        "migrations",
        Unit::Count,
        sum(a, |t| t.migrations),
        sum(b, |t| t.migrations),
    ));
    let counters = |d: &RunDoc| -> BTreeMap<String, Option<f64>> {
        d.counters
            .iter()
            .flat_map(|c| &c.counters)
            .map(|c| (c.event.clone(), c.value))
            .collect()
    };
    let (ca, cb) = (counters(a), counters(b));
    let mut names: Vec<&String> = ca.keys().chain(cb.keys()).collect();
    names.sort();
    names.dedup();
    for n in names {
        let get = |m: &BTreeMap<String, Option<f64>>| m.get(n).copied().flatten();
        // An event counted in neither run (no PMU in a VM) has nothing to compare.
        if get(&ca).is_some() || get(&cb).is_some() {
            out.push(Change::new(n, Unit::Counter, get(&ca), get(&cb)));
        }
    }
    // Largest relative change first; figures new or gone in B (no percentage) after them.
    out.sort_by(|x, y| {
        let k = |c: &Change| c.pct.map(f64::abs);
        k(y).partial_cmp(&k(x)).unwrap_or(std::cmp::Ordering::Equal)
    });
    out
}

fn side(file: &str, d: &RunDoc) -> Side {
    Side {
        file: file.to_string(),
        time: d.time.clone(),
        duration_ns: d.duration_ns,
        target: d.target.clone(),
        scheduler: d.scheduler.as_ref().map(|s| s.describe()),
        threads: d.threads.len() as u64,
        threads_total: d.threads_total,
    }
}

/// A compared with B. Call [`comparable`] first: this compares whatever it is given.
pub fn diff(file_a: &str, a: &RunDoc, file_b: &str, b: &RunDoc) -> Diff {
    let (ga, gb) = (groups(a), groups(b));
    let mut keys: Vec<&(String, String)> = ga.keys().chain(gb.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut groups: Vec<GroupDiff> = keys
        .into_iter()
        .map(|k| {
            let (x, y) = (ga.get(k), gb.get(k));
            GroupDiff {
                process: k.0.clone(),
                thread: k.1.clone(),
                threads_a: x.map_or(0, |g| g.rows),
                threads_b: y.map_or(0, |g| g.rows),
                changes: group_changes(x, y),
            }
        })
        .collect();
    // Largest on-CPU change first, then run-queue wait; ties by name (stable sort).
    let key = |g: &GroupDiff| (g.changes[0].delta.abs(), g.changes[1].delta.abs());
    groups.sort_by(|x, y| {
        key(y)
            .partial_cmp(&key(x))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut notes = Vec::new();
    if a.target != b.target {
        notes.push(format!(
            "the runs traced different sets: A {:?}, B {:?}",
            a.target, b.target
        ));
    }
    // Two `-d 10s` runs differ by a millisecond or so: only a real difference is noted.
    if a.duration_ns.abs_diff(b.duration_ns) > a.duration_ns.max(b.duration_ns) / 100 {
        notes.push(
            "the windows differ in length: compare cpus_utilized (time per wall time) rather than the sums"
                .to_string(),
        );
    }
    for (n, d) in [("A", a), ("B", b)] {
        if (d.threads.len() as u64) < d.threads_total {
            notes.push(format!(
                "{n} lists {} of its {} threads (--top): the others are absent from the rows",
                d.threads.len(),
                d.threads_total
            ));
        }
    }
    if a.scheduler != b.scheduler {
        let s = |d: &RunDoc| {
            d.scheduler
                .as_ref()
                .map_or("unknown".into(), |s| s.describe())
        };
        notes.push(format!("the scheduler differs: A {:?}, B {:?}", s(a), s(b)));
    }
    Diff {
        schema: a.schema,
        probe: a.probe.clone(),
        a: side(file_a, a),
        b: side(file_b, b),
        total: total_changes(a, b),
        groups,
        notes,
    }
}

#[cfg(test)]
mod tests;
