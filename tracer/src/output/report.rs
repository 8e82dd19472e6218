//! The run's report as the outputs see it: the model's typed report with the sections
//! measured on the floors between (perf counters, the hypervisor's view), typed there.
use serde::Serialize;

use crate::perf::CounterReport;
use crate::pseries::hypervisor::HypervisorReport;

pub use crate::model::report::{ReportOptions, DEFAULT_TEXT_TOP};

/// Sections beside the scheduler's figures; each is a top-level JSON key when present.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sections {
    /// perf stat's figures for the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterReport>,
    /// Steal time and, on pseries, dispatch statistics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hypervisor: Option<HypervisorReport>,
    /// `tracer record`: what went into the trace and what was lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordSummary>,
    /// A `--cgroup` target's quota throttling and CPU pressure over the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_cpu: Option<crate::model::cgroup_cpu::CgroupCpuReport>,
    /// `--runqlen`: each CPU's run-queue length over the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runqlen: Option<Vec<crate::model::runqlen::RunqlenCpu>>,
    /// `--irq`: interrupt time over the window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub irq: Option<crate::model::irq::IrqReport>,
}

/// The trace `tracer record` wrote: events, bytes, and losses per CPU.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RecordSummary {
    pub output: String,
    pub switches: u64,
    pub wakeups: u64,
    /// New tasks, execs, exits, renames and migrations.
    pub task_events: u64,
    pub bytes: u64,
    pub packets: u64,
    pub bytes_per_event: f64,
    /// Events the ring buffer had no room for.
    pub lost: u64,
    pub lost_per_cpu: Vec<u64>,
    pub sent_per_cpu: Vec<u64>,
    pub read_per_cpu: Vec<u64>,
    pub undecodable: u64,
    /// Switches the kernel did not run the switch program for, put back estimated.
    pub gaps: u64,
    /// Of `switches`, those written at the window's close for the tasks still on a CPU
    /// then (the trace ends where the summary does; not events from the kernel).
    pub window_cuts: u64,
    /// Threads next to a gap (at most 1000).
    pub gap_tids: Vec<u32>,
    /// Per thread (by TID), how many ns in all the trace moved its switches and
    /// wakings from the tracepoints' timestamps to the scheduler's slice boundaries:
    /// each of its run-queue waits in the trace differs from the summary's by its share.
    pub placed_earlier_ns: std::collections::BTreeMap<u32, u64>,
}

impl RecordSummary {
    /// The summary's line in the text report.
    pub fn text(&self) -> String {
        format!(
            "Recorded {} switches, {} wakeups and {} task events to {} ({} bytes, {:.1} bytes/event); lost {} (ring buffer full), per CPU: {:?}",
            self.switches,
            self.wakeups,
            self.task_events,
            self.output,
            self.bytes,
            self.bytes_per_event,
            self.lost,
            self.lost_per_cpu
        )
    }
}

/// Everything one report shows.
pub type Report = crate::model::report::Report<Sections>;
/// What it is built from.
pub type ReportInput = crate::model::report::ReportInput<Sections>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::targets::HistScope;
    use crate::model::{
        hist::Unit,
        options::{RunqSource, SortKey},
        report::{ReportKind, RunHeader},
        snapshot::{HistSet, Snapshot, ThreadRecord},
    };
    use crate::output::{json::to_json, text::format_text};
    use tracer_common::ThreadStats;

    fn sample() -> ReportInput {
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
                    became: 0,
                },
            );
        }
        snap.hist = HistSet::new();
        snap.hist.on_cpu.record(3_000_000);
        ReportInput {
            kind: ReportKind::Total,
            time_unix_ns: 1_764_519_725_123_456_789,
            local_time: "16:22:05".into(),
            duration_ns: 12_000_000,
            run: RunHeader {
                target: "all CPUs".into(),
                probe: "tp-btf".into(),
                probe_attach: "tp_btf".into(),
                attach_lag_ns: 180_000,
                runq_source: RunqSource::RunDelay,
                probe_refused: vec![],
                scheduler: Default::default(),
                system_wide: false,
                max_threads: 65536,
                slice_events: vec![],
            },
            snapshot: snap,
            cpus_utilized_task_clock: None,
            thread_counters: Default::default(),
            sections: Sections::default(),
            notices: vec![],
            command: None,
            options: OPTS,
        }
    }

    const OPTS: ReportOptions = ReportOptions {
        top: None,
        sort: SortKey::OnCpu,
        unit: Unit::Usecs,
        hist_scope: HistScope::All,
    };

    /// The report of `i` shown with `o`.
    fn with(i: &ReportInput, o: ReportOptions) -> Report {
        Report::build(ReportInput {
            options: o,
            ..i.clone()
        })
    }

    fn text(i: &ReportInput, o: ReportOptions) -> String {
        format_text(&with(i, o))
    }

    fn json(i: &ReportInput, o: ReportOptions) -> serde_json::Value {
        to_json(&with(i, o)).unwrap()
    }
    #[test]
    fn json_has_the_documented_fields() {
        let v = json(&sample(), OPTS);
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
        let t = text(&r, OPTS);
        let a = t.find("      12 ").unwrap();
        let b = t.find("      11 ").unwrap();
        assert!(a < b);
        assert!(t.contains("(exited)"));
        let t = text(
            &r,
            ReportOptions {
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
    fn many(n: u32) -> ReportInput {
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
                    became: 0,
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
        let t = text(&r, OPTS);
        let tids = table_tids(&t);
        assert_eq!(tids.len(), DEFAULT_TEXT_TOP);
        assert_eq!(tids[0], 129, "busiest first");
        // The 10 left out: 1..=10 ms = 55 ms.
        assert!(
            t.contains("  ... 10 more threads not shown (55.0ms on-CPU; --top 0 shows all, --sort orders)\n"),
            "{t}"
        );
        let all = text(
            &r,
            ReportOptions {
                top: Some(0),
                ..OPTS
            },
        );
        assert_eq!(table_tids(&all).len(), 30);
        assert!(!all.contains("not shown"));
        // JSON keeps every thread unless --top is given.
        let v = json(&r, OPTS);
        assert_eq!(v["threads"].as_array().unwrap().len(), 30);
        assert_eq!(v["threads_total"], 30);
        let v = json(
            &r,
            ReportOptions {
                top: Some(5),
                ..OPTS
            },
        );
        assert_eq!(v["threads"].as_array().unwrap().len(), 5);
        let v = json(
            &r,
            ReportOptions {
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
            table_tids(&text(&r, o(SortKey::OnCpu))),
            [103, 102, 101, 100]
        );
        assert_eq!(
            table_tids(&text(&r, o(SortKey::Runq))),
            [100, 101, 102, 103]
        );
        // Slices 0,1,2,0: ties broken by on-CPU time.
        assert_eq!(
            table_tids(&text(&r, o(SortKey::Slices))),
            [102, 101, 103, 100]
        );
        let v = json(&r, o(SortKey::Runq));
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
        r.run.slice_events = vec!["task-clock".into()];
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
        let t = text(&r, OPTS);
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
    fn interval_header_has_the_time_and_json_the_timestamp() {
        let mut r = sample();
        r.kind = ReportKind::Interval { interval: 3 };
        let t = text(&r, OPTS);
        assert!(
            t.starts_with("tracer interval 3 at 16:22:05: 0.012 s window"),
            "{t}"
        );
        let v = json(&r, OPTS);
        assert_eq!(v["time"], "2025-11-30T16:22:05.123Z");
        assert_eq!(v["interval"], 3);
    }

    #[test]
    fn headline_says_what_cpus_utilized_is() {
        let mut r = sample();
        assert!(
            text(&r, OPTS).contains("1.000 CPUs utilized (on-CPU time of the traced threads)\n")
        );
        assert_eq!(json(&r, OPTS)["cpus_utilized_source"], "on_cpu");
        r.run.system_wide = true;
        assert!(text(&r, OPTS)
            .contains("1.000 CPUs utilized (on-CPU time of all threads, idle excluded)\n"));
        r.run.system_wide = false;
        r.cpus_utilized_task_clock = Some(0.5);
        assert!(text(&r, OPTS).contains("0.500 CPUs utilized (task-clock)\n"));
        assert_eq!(json(&r, OPTS)["cpus_utilized_source"], "task-clock");
    }

    #[test]
    fn schedstat_mode_says_what_the_runq_histogram_holds() {
        let mut r = sample();
        r.snapshot.hist.runq.record(50_000);
        let t = text(&r, OPTS);
        assert!(
            t.contains("  run-queue waits: 1 of 6 slices began after a wait the scheduler clocked (run_delay grew);"),
            "{t}"
        );
        r.run.runq_source = RunqSource::ThreadEntry;
        assert!(!text(&r, OPTS).contains("run-queue waits:"));
    }

    #[test]
    fn drops_are_warned_about() {
        let mut r = sample();
        r.snapshot.drops[0] = 7;
        assert!(text(&r, OPTS).contains("threads_map_full=7"));
    }
}
