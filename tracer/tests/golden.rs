//! Golden files of the run report, text and JSON, from a fixed input: a change of layout
//! or of the documented JSON shows up as a diff of `tests/golden/`. After an intended
//! change, rewrite them with `UPDATE_GOLDEN=1 cargo test -p tracer --test golden` and
//! review the diff (hyperfine's export tests work the same way).
use std::{collections::BTreeMap, path::PathBuf};

use serde_json::Value;
use tracer::{
    model::{
        hist::Unit,
        options::{RunqSource, SortKey},
        report::{Command, Refusal, ReportKind, RunHeader},
        snapshot::{HistSet, Snapshot, ThreadRecord, FOLDED_GEN},
    },
    output::{
        report::{Report, ReportInput, ReportOptions, Sections},
        sink::{JsonLinesSink, Sink, TextSink},
    },
    perf::{self, CounterSnapshot, EventReading, Reading, Scope},
    pseries::hypervisor::{CpuStealReport, HypervisorReport},
    sys::launch::ChildState,
};
use tracer_common::{scope, ThreadStats};

const MS: u64 = 1_000_000;

fn thread(tid: u32, tgid: u32, comm: &[u8], on_ms: u64) -> ThreadRecord {
    let mut s = ThreadStats::zeroed();
    s.tgid = tgid;
    s.comm[..comm.len()].copy_from_slice(comm);
    s.on_cpu_ns = on_ms * MS;
    s.slices = on_ms + 2;
    s.voluntary = on_ms;
    s.involuntary = 2;
    s.runq_wait_ns = (30 - on_ms) * 10_000;
    s.runq_waits = on_ms + 1;
    s.off_cpu_ns = (40 - on_ms) * MS;
    s.blocked_ns = (30 - on_ms) * MS;
    s.preempted_ns = 10 * MS;
    s.migrations = on_ms % 4;
    s.counters = [on_ms * 1_000_000, on_ms * 3];
    ThreadRecord {
        tid,
        stats: s,
        exited: false,
        folded: 0,
        became: 0,
    }
}

fn hists(seed: u64) -> HistSet {
    let mut h = HistSet::new();
    for i in 0..20 {
        h.on_cpu.record((i + 1) * 37_000 * seed);
        h.runq.record((i % 7 + 1) * 3_100 * seed);
        h.off_cpu.record((i * i + 1) * 91_000 * seed);
    }
    h.on_cpu.sum_ns = 25 * MS * seed;
    h.runq.sum_ns = 900_000 * seed;
    h.off_cpu.sum_ns = 120 * MS * seed;
    h
}

/// A window of 50 ms on 2 CPUs: a busy thread, an exited one with a 15-character comm, a
/// comm with a control character, a folded row of 3 exited threads, a second process.
fn snapshot() -> Snapshot {
    let mut snap = Snapshot {
        at_ns: 123 * MS,
        ..Default::default()
    };
    let mut rows = vec![
        thread(12, 10, b"work", 21),
        thread(11, 10, b"apt-cache-helpr", 6),
        thread(13, 10, b"bad\tname", 2),
        thread(31, 30, b"other", 9),
    ];
    rows[1].exited = true;
    let mut folded = thread(0, 30, b"short", 4);
    folded.exited = true;
    folded.folded = 3;
    for r in rows.drain(..) {
        snap.threads.insert((r.tid, 0), r);
    }
    snap.threads.insert((30, FOLDED_GEN), folded);
    snap.hist = hists(1);
    snap.scoped.insert(10, hists(2));
    snap.scoped.insert(30, hists(3));
    snap.scoped.insert(12, hists(4));
    snap.scoped.insert(31, hists(5));
    snap.drops[0] = 7;
    snap.drops[6] = 2;
    snap.recursion_misses = 1;
    snap.live_entries = 3;
    snap.cpu_busy_ns = vec![30 * MS, 12 * MS];
    snap
}

fn reading(value: u64, enabled: u64, running: u64) -> Reading {
    Reading {
        value,
        enabled,
        running,
    }
}

/// task-clock and context-switches counted per thread on TIDs 11 and 12 (one of them
/// multiplexed), cycles not supported.
fn counter_snapshot() -> CounterSnapshot {
    let ev = |name: &str, parts: Vec<(Scope, Reading)>, unsupported: Option<&str>| {
        let total = parts.iter().fold(Reading::default(), |a, (_, r)| Reading {
            value: a.value + r.value,
            enabled: a.enabled + r.enabled,
            running: a.running + r.running,
        });
        EventReading {
            spec: perf::parse_event(name).unwrap(),
            unsupported: unsupported.map(str::to_string),
            total,
            parts,
        }
    };
    let t = |tid| Scope::Thread { tgid: 10, tid };
    CounterSnapshot {
        events: vec![
            ev(
                "task-clock",
                vec![
                    (t(11), reading(6 * MS, 50 * MS, 50 * MS)),
                    (t(12), reading(21 * MS, 50 * MS, 50 * MS)),
                ],
                None,
            ),
            ev(
                "context-switches",
                vec![
                    (t(11), reading(8, 50 * MS, 25 * MS)),
                    (t(12), reading(23, 50 * MS, 50 * MS)),
                ],
                None,
            ),
            ev("cycles", vec![], Some("no hardware counters")),
        ],
        system_wide: false,
        per_thread: true,
    }
}

fn hypervisor_section() -> HypervisorReport {
    HypervisorReport {
        source: "steal",
        elapsed_ns: 50 * MS,
        user_hz: 100,
        cpus: vec![
            CpuStealReport {
                cpu: 0,
                steal_ns: 10 * MS,
                steal_percent: Some(20.0),
            },
            CpuStealReport {
                cpu: 1,
                steal_ns: 0,
                steal_percent: Some(0.0),
            },
        ],
        total_steal_ns: 10 * MS,
        total_steal_percent: Some(10.0),
        dispatch: None,
        notes: vec!["vcpudispatch_stats: not a pseries machine".into()],
    }
}

/// The report of the fixed input, shown with `options`.
fn build(interval: Option<u64>, with_counters: bool, options: ReportOptions) -> Report {
    let duration_ns = 50 * MS;
    let mut sections = Sections::default();
    let mut thread_counters = BTreeMap::new();
    let mut task_clock = None;
    if with_counters {
        let cr = perf::report(&counter_snapshot(), duration_ns);
        thread_counters = cr.per_thread.clone().unwrap();
        task_clock = cr.cpus_utilized;
        sections.counters = Some(cr);
    }
    sections.hypervisor = Some(hypervisor_section());
    Report::build(ReportInput {
        kind: match interval {
            Some(interval) => ReportKind::Interval { interval },
            None => ReportKind::Total,
        },
        time_unix_ns: 1_764_519_725_123_456_789,
        local_time: "16:22:05".into(),
        duration_ns,
        run: RunHeader {
            target: if with_counters {
                "PID 10".into()
            } else {
                "all CPUs".into()
            },
            probe: "tp-btf".into(),
            probe_attach: "tp_btf".into(),
            runq_source: if with_counters {
                RunqSource::RunDelay
            } else {
                RunqSource::ThreadEntry
            },
            probe_refused: vec![Refusal {
                mode: "fentry".into(),
                reason: "attach: EPERM".into(),
            }],
            system_wide: !with_counters,
            max_threads: if with_counters { 65536 } else { 0 },
            slice_events: if with_counters {
                vec!["task-clock".into(), "context-switches".into()]
            } else {
                vec![]
            },
        },
        snapshot: snapshot(),
        cpus_utilized_task_clock: task_clock,
        thread_counters,
        sections,
        notices: vec!["cross-check: they agree".into()],
        command: with_counters.then(|| Command {
            argv: vec!["sh".into(), "-c".into(), "true".into()],
            state: ChildState::Exited(3),
        }),
        options,
    })
}

/// The total with counters and a command; an interval, system-wide, per process in ms;
/// a per-thread view sorted by run-queue wait.
fn cases() -> Vec<(&'static str, Report)> {
    let opts = ReportOptions {
        top: None,
        sort: SortKey::OnCpu,
        unit: Unit::Usecs,
        hist_scope: scope::ALL,
    };
    vec![
        ("total", build(None, true, opts)),
        (
            "interval_process",
            build(
                Some(3),
                false,
                ReportOptions {
                    unit: Unit::Msecs,
                    hist_scope: scope::PROCESS,
                    ..opts
                },
            ),
        ),
        (
            "thread_top2_runq",
            build(
                Some(2),
                true,
                ReportOptions {
                    top: Some(2),
                    sort: SortKey::Runq,
                    hist_scope: scope::THREAD,
                    ..opts
                },
            ),
        ),
    ]
}

/// What the run prints for one report: through the sink `tracer run` writes with.
fn render(r: &Report, json: bool) -> String {
    let mut out = Vec::new();
    let mut sink: Box<dyn Sink + '_> = if json {
        Box::new(JsonLinesSink::new(&mut out))
    } else {
        Box::new(TextSink::new(&mut out))
    };
    match r.kind {
        ReportKind::Total => sink.total(r).unwrap(),
        ReportKind::Interval { .. } => sink.interval(r).unwrap(),
    }
    drop(sink);
    String::from_utf8(out).unwrap()
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares with the golden file, or rewrites it under UPDATE_GOLDEN=1. JSON goldens are
/// stored pretty for review; the output must be the compact line of the same document
/// (sorted keys, as printed).
fn check(name: &str, got: &str, json: bool) {
    let path = golden_dir().join(format!("{name}.{}", if json { "json" } else { "txt" }));
    let stored = if json {
        let v: Value = serde_json::from_str(got).expect("valid JSON");
        format!("{}\n", serde_json::to_string_pretty(&v).unwrap())
    } else {
        got.to_string()
    };
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, &stored).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    if json {
        let v: Value = serde_json::from_str(&want).unwrap();
        assert_eq!(got, format!("{v}\n"), "{name}.json differs");
    } else {
        assert_eq!(got, want, "{name}.txt differs");
    }
}

#[test]
fn text_reports_match_the_golden_files() {
    for (name, r) in cases() {
        check(name, &render(&r, false), false);
    }
}

#[test]
fn json_reports_match_the_golden_files() {
    for (name, r) in cases() {
        let line = render(&r, true);
        assert_eq!(line.matches('\n').count(), 1, "one JSON line per report");
        check(name, &line, true);
    }
}
