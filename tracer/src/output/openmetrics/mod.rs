//! `tracer serve`'s exposition: the exporter's series as Prometheus metrics, encoded by
//! the official `prometheus-client` crate in the format the scraper asked for (OpenMetrics
//! text, or the classic 0.0.4 text that `promtool check metrics` and older scrapers read).
//!
//! Histograms go out with their kernel counts, never re-sampled: the classic `le` bounds
//! are powers of two of nanoseconds (1.024 µs, 2.048 µs, ... by default), which are edges
//! of the in-kernel log-linear buckets, so each `_bucket` sums whole kernel buckets.
use std::sync::{Arc, Mutex};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge, MetricType},
    registry::{Registry, Unit},
};
use tracer_common::hist::{bucket_upper, N_BUCKETS};

use crate::model::{
    hist::Histogram,
    series::{Exposition, Series},
};

/// The exposition formats a scraper can ask for (`Accept`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`: the default, what every scraper reads.
    Classic,
}

impl Format {
    /// Picks the format from an `Accept` header, as mature exporters negotiate.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Classic,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Classic => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Default classic bucket bounds: 2^10 ns (1.024 µs) to 2^34 ns (17.2 s).
pub fn default_bounds_ns() -> Vec<u64> {
    (10..=34).map(|k| 1u64 << k).collect()
}

/// Encodes everything in `x` as `format`.
pub fn encode(x: Arc<Mutex<Exposition>>, format: Format) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(View(x)));
    let mut out = String::new();
    match format {
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry)?,
        Format::Classic => {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)?
        }
    }
    Ok(out)
}

#[derive(Debug)]
struct View(Arc<Mutex<Exposition>>);

impl Collector for View {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // A poisoned lock means a panic elsewhere: encode what is there.
        let x = self.0.lock().unwrap_or_else(|e| e.into_inner());
        encode_all(&x, &mut enc)
    }
}

use crate::model::series::Labels;

mod machine;
use machine::{cpu_bandwidth, pseries, runqlen};

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    rows: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

/// Classic buckets from kernel buckets: `(le in seconds, count in (previous le, le])`,
/// then `+Inf`. A kernel bucket goes to the first bound at or above its largest value.
pub fn classic_buckets(h: &Histogram, bounds_ns: &[u64]) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = bounds_ns.iter().map(|&b| (secs(b), 0)).collect();
    out.push((f64::INFINITY, 0));
    for i in 0..N_BUCKETS {
        let c = h.bucket(i);
        if c == 0 {
            continue;
        }
        // Values in kernel bucket i are integers <= bucket_upper(i).
        let up = bucket_upper(i);
        let slot = bounds_ns.partition_point(|&b| b < up);
        out[slot].1 += c;
    }
    out
}

/// One histogram family over many series.
fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[(Labels, &Histogram)],
    bounds_ns: &[u64],
) -> Result<(), std::fmt::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, Some(&Unit::Seconds), MetricType::Histogram)?;
    for (labels, h) in rows {
        let buckets = classic_buckets(h, bounds_ns);
        m.encode_family(labels)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                secs(h.sum_ns),
                h.count(),
                &buckets,
                None,
            )?;
    }
    Ok(())
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A cgroup series' labels: `cgroup` and what its workload says (`pod`, `container`, ...).
fn cgroup_labels(x: &Exposition, name: &str) -> Labels {
    let mut l = labels(&[("cgroup", name)]);
    if let Some(w) = x.cgroup_labels.get(name) {
        l.extend(w.iter().cloned());
    }
    l
}

/// Every (labels, series) pair of one scope.
fn scoped(x: &Exposition) -> [(&'static str, Vec<(Labels, &Series)>); 2] {
    let mut cg: Vec<(Labels, &Series)> = x
        .book
        .cgroups
        .iter()
        .map(|(name, s)| (cgroup_labels(x, name), s))
        .collect();
    if x.book.other_cgroup.last_active_ns > 0 {
        cg.push((labels(&[("cgroup", "other")]), &x.book.other_cgroup));
    }
    let mut pr: Vec<(Labels, &Series)> = x
        .book
        .processes
        .values()
        .map(|p| {
            let pid = p.pid.to_string();
            let mut l = labels(&[("pid", &pid), ("comm", &p.comm)]);
            l.extend(cgroup_labels(x, &p.cgroup));
            (l, &p.series)
        })
        .collect();
    if x.book.other.last_active_ns > 0 {
        pr.push((
            labels(&[("pid", "other"), ("comm", "other"), ("cgroup", "other")]),
            &x.book.other,
        ));
    }
    [("cgroup", cg), ("process", pr)]
}

fn encode_all(x: &Exposition, enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let s = Some(&Unit::Seconds);
    gauge(
        enc,
        "tracer_info",
        "The tracer: version, probe mode and where run-queue waits come from (always 1)",
        None,
        &[(
            labels(&[
                ("version", env!("CARGO_PKG_VERSION")),
                ("probe", &x.probe),
                ("runq_source", &x.runq_source),
            ]),
            1.0,
        )],
    )?;
    for (scope, rows) in scoped(x) {
        let each = |f: &dyn Fn(&Series) -> f64| -> Vec<(Labels, f64)> {
            rows.iter().map(|(l, s)| (l.clone(), f(s))).collect()
        };
        counter(
            enc,
            &format!("tracer_{scope}_on_cpu"),
            &format!("Time on a CPU per {scope}, summed over its threads"),
            s,
            &each(&|s| secs(s.totals.on_cpu_ns)),
        )?;
        counter(
            enc,
            &format!("tracer_{scope}_runq_wait"),
            &format!("Time runnable but waiting for a CPU per {scope} (wakeup or preemption to switch-in)"),
            s,
            &each(&|s| secs(s.totals.runq_wait_ns)),
        )?;
        let mut off = Vec::new();
        let mut switches = Vec::new();
        for (l, sr) in &rows {
            for (state, v) in [
                ("blocked", sr.totals.blocked_ns),
                ("preempted", sr.totals.preempted_ns),
            ] {
                let mut l = l.clone();
                l.push(("state".into(), state.into()));
                off.push((l, secs(v)));
            }
            for (kind, v) in [
                ("voluntary", sr.totals.voluntary),
                ("involuntary", sr.totals.involuntary),
            ] {
                let mut l = l.clone();
                l.push(("kind".into(), kind.into()));
                switches.push((l, v as f64));
            }
        }
        counter(
            enc,
            &format!("tracer_{scope}_off_cpu"),
            &format!(
                "Time off the CPU per {scope}: blocked (asleep) or preempted (runnable, waiting)"
            ),
            s,
            &off,
        )?;
        counter(
            enc,
            &format!("tracer_{scope}_context_switches"),
            &format!("Switches out per {scope}: voluntary (blocking) or involuntary (preempted)"),
            None,
            &switches,
        )?;
        counter(
            enc,
            &format!("tracer_{scope}_migrations"),
            &format!("Switch-ins on another CPU than the previous one per {scope}"),
            None,
            &each(&|s| s.totals.migrations as f64),
        )?;
        for (name, help, pick) in [
            (
                "runq_latency",
                "Run-queue latency: runnable (woken, new or preempted) until it runs",
                (|s: &Series| &s.hist.runq) as fn(&Series) -> &Histogram,
            ),
            (
                "on_cpu_slice",
                "On-CPU slices: switch-in to switch-out",
                |s: &Series| &s.hist.on_cpu,
            ),
            (
                // Not `off_cpu`: OpenMetrics names the `off_cpu_seconds_total` counter's
                // family `off_cpu_seconds`, and a family is declared once.
                "off_cpu_period",
                "Off-CPU periods: switch-out to the next switch-in",
                |s: &Series| &s.hist.off_cpu,
            ),
        ] {
            let hrows: Vec<(Labels, &Histogram)> =
                rows.iter().map(|(l, s)| (l.clone(), pick(s))).collect();
            histogram(
                enc,
                &format!("tracer_{scope}_{name}"),
                &format!("{help}, per {scope}"),
                &hrows,
                &x.bounds_ns,
            )?;
        }
    }
    let per_cpu = |v: &[u64]| -> Vec<(Labels, f64)> {
        v.iter()
            .enumerate()
            .map(|(cpu, ns)| (labels(&[("cpu", &cpu.to_string())]), secs(*ns)))
            .collect()
    };
    counter(
        enc,
        "tracer_cpu_busy",
        "Time each CPU ran threads (idle excluded)",
        s,
        &per_cpu(&x.cpu_busy_ns),
    )?;
    counter(
        enc,
        "tracer_cpu_steal",
        "Time the hypervisor kept each vCPU from running (steal, /proc/stat)",
        s,
        &per_cpu(&x.cpu_steal_ns),
    )?;
    pseries(x, enc)?;
    cpu_bandwidth(x, enc)?;
    runqlen(x, enc)?;
    let drops: Vec<(Labels, f64)> = x
        .drops
        .iter()
        .map(|(kind, n)| (labels(&[("kind", kind)]), *n as f64))
        .collect();
    counter(
        enc,
        "tracer_drops",
        "Events the kernel programs could not record, by kind",
        None,
        &drops,
    )?;
    let progs: Vec<(Labels, f64)> = x
        .programs
        .iter()
        .map(|p| (labels(&[("program", &p.name)]), secs(p.run_time_ns)))
        .collect();
    counter(
        enc,
        "tracer_bpf_run_time",
        "Time the kernel spent in each of the tracer's programs (BPF run-time statistics)",
        s,
        &progs,
    )?;
    let runs: Vec<(Labels, f64)> = x
        .programs
        .iter()
        .map(|p| (labels(&[("program", &p.name)]), p.run_count as f64))
        .collect();
    counter(
        enc,
        "tracer_bpf_runs",
        "Runs of each of the tracer's programs",
        None,
        &runs,
    )?;
    gauge(
        enc,
        "tracer_map_entries",
        "Entries in the kernel maps that grow with the machine: per-thread totals (live \
         threads) and per-process histograms (hist_scoped: one per process, kind and \
         bucket; task_hist: one per live thread)",
        None,
        &[
            (labels(&[("map", "threads")]), x.map_entries as f64),
            (labels(&[("map", x.hist_map)]), x.hist_entries as f64),
        ],
    )?;
    gauge(
        enc,
        "tracer_series",
        "Series kept, by scope (bounded by --max-cgroups and --max-series)",
        None,
        &[
            (labels(&[("scope", "cgroup")]), x.book.cgroups.len() as f64),
            (
                labels(&[("scope", "process")]),
                x.book.processes.len() as f64,
            ),
        ],
    )?;
    counter(
        enc,
        "tracer_series_expired",
        "Series removed after --expiry without activity",
        None,
        &[(Labels::new(), x.book.expired as f64)],
    )?;
    counter(
        enc,
        "tracer_series_overflow",
        "Process deltas summed into pid=\"other\" because --max-series was reached",
        None,
        &[(Labels::new(), x.book.overflowed as f64)],
    )?;
    counter(
        enc,
        "tracer_cgroup_series_overflow",
        "Cgroup deltas summed into cgroup=\"other\" because --max-cgroups was reached",
        None,
        &[(Labels::new(), x.book.cgroups_overflowed as f64)],
    )?;
    counter(
        enc,
        "tracer_cgroup_series_filtered",
        "Cgroup deltas summed into cgroup=\"other\" by --cgroup-allow/--cgroup-deny",
        None,
        &[(Labels::new(), x.cgroups_filtered as f64)],
    )?;
    gauge(
        enc,
        "tracer_known_cgroup_ids",
        "cgroup ids whose path the exporter knows (from walks of the tree and the \
         kernel's cgroup_mkdir events)",
        None,
        &[(Labels::new(), x.cgroup_names as f64)],
    )?;
    counter(
        enc,
        "tracer_cgroup_walks",
        "Walks of the cgroup v2 tree (at the start, and when an id nobody named turns up)",
        None,
        &[(Labels::new(), x.cgroup_walks as f64)],
    )?;
    counter(
        enc,
        "process_cpu",
        "The tracer's own user and system CPU time",
        s,
        &[(Labels::new(), x.self_cpu_s)],
    )?;
    gauge(
        enc,
        "process_resident_memory",
        "The tracer's own resident memory",
        Some(&Unit::Bytes),
        &[(Labels::new(), x.self_rss_bytes as f64)],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::series::{Book, Owner};

    fn exposition() -> Exposition {
        let mut book = Book::new(10, 10, u64::MAX);
        let mut d = tracer_common::ThreadStats::zeroed();
        d.on_cpu_ns = 1_500_000_000;
        d.voluntary = 3;
        let o = Owner {
            pid: 42,
            comm: "w\"x",
            cgroup: "/system.slice/a.service",
        };
        book.add_thread(o, &d, 1);
        let mut h = crate::model::snapshot::HistSet::new();
        h.runq.record(1500);
        h.runq.record(3_000_000);
        book.add_hist(o, &h, 1);
        Exposition {
            book,
            bounds_ns: default_bounds_ns(),
            probe: "tp-btf".into(),
            runq_source: "wakeup".into(),
            cpu_busy_ns: vec![5, 6],
            cpu_steal_ns: vec![0, 0],
            drops: vec![("ring_full".into(), 0)],
            programs: Vec::new(),
            map_entries: 3,
            hist_entries: 2,
            hist_map: "hist_scoped",
            self_cpu_s: 0.5,
            self_rss_bytes: 1 << 20,
            vcpu_dispatch: Vec::new(),
            dtl: Vec::new(),
            cgroup_labels: Default::default(),
            cgroup_cpu: Default::default(),
            host_pressure: None,
            cgroups_filtered: 0,
            cgroup_names: 0,
            cgroup_walks: 0,
            runqlen: Vec::new(),
        }
    }

    #[test]
    fn both_formats_name_units_and_escape_labels() {
        let x = Arc::new(Mutex::new(exposition()));
        let om = encode(x.clone(), Format::OpenMetrics).unwrap();
        assert!(
            om.contains("# TYPE tracer_process_on_cpu_seconds counter"),
            "{om}"
        );
        assert!(om.contains(
            "tracer_process_on_cpu_seconds_total{pid=\"42\",comm=\"w\\\"x\",cgroup=\"/system.slice/a.service\"} 1.5"
        ), "{om}");
        assert!(om.ends_with("# EOF\n"));
        let classic = encode(x.clone(), Format::Classic).unwrap();
        assert!(
            classic.contains("# TYPE tracer_process_on_cpu_seconds_total counter"),
            "{classic}"
        );
        assert!(!classic.contains("# EOF"));
    }

    /// A family declared twice is an invalid exposition (the off-CPU counter and
    /// histogram once shared `tracer_process_off_cpu_seconds` in OpenMetrics).
    #[test]
    fn each_family_is_declared_once_in_both_formats() {
        let x = Arc::new(Mutex::new(exposition()));
        for f in [Format::OpenMetrics, Format::Classic] {
            let text = encode(x.clone(), f).unwrap();
            let mut seen = std::collections::HashSet::new();
            for l in text.lines().filter(|l| l.starts_with("# TYPE ")) {
                let name = l.split_whitespace().nth(2).unwrap();
                assert!(
                    seen.insert(name.to_string()),
                    "{name} declared twice:\n{text}"
                );
            }
            assert!(
                seen.contains("tracer_process_off_cpu_period_seconds"),
                "{text}"
            );
        }
    }

    #[test]
    fn classic_buckets_hold_whole_kernel_buckets() {
        let mut h = Histogram::new();
        h.record(1023); // below 2^10 ns
        h.record(1024); // at 2^10: above the first bound
        h.record(5_000_000_000_000); // beyond the last bound
        let b = classic_buckets(&h, &default_bounds_ns());
        assert_eq!(b[0], (1.024e-6, 1));
        assert_eq!(b[1].1, 1);
        assert_eq!(b.last().unwrap(), &(f64::INFINITY, 1));
        assert_eq!(b.iter().map(|x| x.1).sum::<u64>(), 3);
    }

    /// The pseries families of an exposition, in the classic text.
    fn pseries_lines(x: Exposition) -> Vec<String> {
        let text = encode(Arc::new(Mutex::new(x)), Format::Classic).unwrap();
        text.lines()
            .filter(|l| l.contains("tracer_vcpu_") || l.contains("tracer_dtl_"))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn pseries_dispatch_counters_and_dtl_latency_from_fixtures() {
        use crate::pseries::{
            dtl::{analyze::DtlAnalyzer, decode::tests::entry},
            vcpudispatch::{parse_stats, stats::tests::DOC, StatsState, STATS_PATH},
        };
        // Absent files, absent families.
        assert!(pseries_lines(exposition()).is_empty());
        let StatsState::On(v) = parse_stats(DOC, std::path::Path::new(STATS_PATH)).unwrap() else {
            panic!("the fixture has counters")
        };
        let mut x = exposition();
        x.vcpu_dispatch = v.iter().map(|c| (c.cpu, c.counters.to_array())).collect();
        // 512 MHz timebase: 512 ticks = 1 us, 1024 = 2 us; vCPU 1 read a full ring once.
        let mut an = DtlAnalyzer::new(512_000_000);
        an.feed(0, &[entry(3, 2, 512, 100), entry(3, 2, 1024, 200)], false);
        an.feed(1, &[entry(3, 2, 512, 100)], true);
        x.dtl = an.vcpus();
        let got = pseries_lines(x);
        // The golden file, checked by hand against the fixtures: DOC's counters (cpu0 6839
        // 4126 2683 30 0 6821 18 0) split into three families; 1 us in the (1.024 us]
        // bucket, 2 us in (2.048 us]; entries 2 and 1; one gap on vCPU 1.
        let want: Vec<&str> = include_str!("../../../tests/golden/serve_pseries.txt")
            .lines()
            .collect();
        assert_eq!(got, want, "got:\n{}", got.join("\n"));
    }
}
