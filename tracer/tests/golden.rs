//! Golden files of the run report, text and JSON, from a fixed input: a change of layout
//! or of the documented JSON shows up as a diff of `tests/golden/`. After an intended
//! change, rewrite them with `UPDATE_GOLDEN=1 cargo test -p tracer --test golden` and
//! review the diff (hyperfine's export tests work the same way).
use std::{collections::BTreeMap, path::PathBuf};

use serde_json::Value;
use tracer::model::targets::HistScope;
use tracer::{
    model::{
        hist::Unit,
        options::{RunqSource, SortKey},
        report::{Command, Refusal, ReportKind, RunHeader},
        scheduler::Scheduler,
        snapshot::{HistSet, Snapshot, ThreadRecord, FOLDED_GEN},
    },
    output::{
        report::{Report, ReportInput, ReportOptions, Sections},
        sink::{JsonLinesSink, Sink, TextSink},
    },
    perf::{self, CounterSnapshot, EventReading, Reading, Scope},
    pseries::hypervisor::{CpuStealReport, HypervisorReport},
    sys::launch::{ChildCpu, ChildState},
};
use tracer_common::ThreadStats;

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
        idle_in_clocks: false,
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
            attach_lag_ns: 180_000,
            runq_source: if with_counters {
                RunqSource::RunDelay
            } else {
                RunqSource::ThreadEntry
            },
            probe_refused: vec![Refusal {
                mode: "fentry".into(),
                reason: "attach: EPERM".into(),
            }],
            scheduler: Scheduler {
                class: Some("EEVDF".into()),
                ext: None,
                ext_state: with_counters.then(|| "disabled".into()),
                ext_switch_all: None,
                delay_dequeue: Some(true),
                source: "BTF sched_entity, sched/features".into(),
            },
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
            cpu: Some(ChildCpu::new(12_000_000, 3_456_000)),
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
        hist_scope: HistScope::All,
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
                    hist_scope: HistScope::Process,
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
                    hist_scope: HistScope::Thread,
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
/// stored pretty (keys sorted) for review; the output must be the same document (keys in
/// the order printed, which a document's equality ignores).
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
        let want: Value = serde_json::from_str(&want).unwrap();
        let got: Value = serde_json::from_str(got).unwrap();
        assert_eq!(got, want, "{name}.json differs");
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

/// Names any user can give a thread (prctl) or a binary: window title and clipboard
/// (OSC 2, OSC 52), a row spoofed with CR/LF and a screen clear, a bidi override, an
/// unterminated OSC, bytes that are not UTF-8.
const HOSTILE: &[&[u8]] = &[
    b"\x1b]2;OWNED\x07",
    b"\x1b]52;c;cm0K\x07",
    b"ok\r\nfake 1 0\x1b[2J",
    "evil\u{202e}gpj.exe".as_bytes(),
    b"\x1b]0unterminated",
    b"w\xff\xfe\xc3",
    "csi\u{9b}31m\u{2066}".as_bytes(),
];

/// What no byte of a terminal or line-oriented output may be: a control other than
/// the newlines and tabs the format itself writes, a C1 control, a bidi override.
fn assert_inert(what: &str, out: &str) {
    for (i, c) in out.chars().enumerate() {
        let bad = (c.is_control() && c != '\n' && c != '\t')
            || ('\u{202a}'..='\u{202e}').contains(&c)
            || ('\u{2066}'..='\u{2069}').contains(&c);
        assert!(!bad, "{what}: {c:?} at char {i}:\n{out}");
    }
}

/// A document an XML parser takes whole, whose root is `<svg>`: a control byte or a bare
/// `<` or `&` in a name would make it no XML at all. Its text, for what it says.
fn assert_svg(what: &str, out: &str) -> String {
    // inferno's flame graph names its DTD.
    let opt = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc = roxmltree::Document::parse_with_options(out, opt)
        .unwrap_or_else(|e| panic!("{what} is not XML: {e}\n{out}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg", "{what}");
    doc.descendants()
        .filter_map(|n| n.text())
        .collect::<Vec<_>>()
        .join("\n")
}

fn hostile_snapshot() -> Snapshot {
    let mut snap = Snapshot {
        at_ns: 123 * MS,
        ..Default::default()
    };
    for (i, name) in HOSTILE.iter().enumerate() {
        let tid = 100 + i as u32;
        let mut r = thread(tid, 100, &name[..name.len().min(15)], 3 + i as u64);
        r.stats.tgid = 100;
        snap.threads.insert((tid, 0), r);
        snap.scoped.insert(tid, hists(1));
    }
    snap.hist = hists(1);
    snap.cpu_busy_ns = vec![30 * MS, 12 * MS];
    snap
}

#[test]
fn hostile_names_are_escaped_in_the_run_report() {
    let mut r = build(None, false, {
        ReportOptions {
            top: None,
            sort: SortKey::OnCpu,
            unit: Unit::Usecs,
            hist_scope: HistScope::Thread,
        }
    });
    // The same report with the hostile threads' rows and per-thread histograms, under a
    // sched_ext scheduler whose name is hostile too (a BPF program names it).
    let mut run = r.run.clone();
    run.scheduler.ext = Some("scx\x1b]2;OWNED\x07".into());
    run.scheduler.ext_switch_all = Some(true);
    let hostile = Report::build(ReportInput {
        kind: ReportKind::Total,
        time_unix_ns: 1_764_519_725_123_456_789,
        local_time: "16:22:05".into(),
        duration_ns: 50 * MS,
        run,
        snapshot: hostile_snapshot(),
        cpus_utilized_task_clock: None,
        thread_counters: BTreeMap::new(),
        sections: Sections::default(),
        notices: vec![],
        command: Some(Command {
            argv: vec!["sh".into(), "-c".into(), "printf '\x1b]2;x\x07'".into()],
            state: ChildState::Exited(0),
            cpu: None,
        }),
        options: ReportOptions {
            top: None,
            sort: SortKey::OnCpu,
            unit: Unit::Usecs,
            hist_scope: HistScope::Thread,
        },
    });
    r = hostile;
    let text = render(&r, false);
    assert_inert("run text", &text);
    assert!(text.contains("\\x1b]2;OWNED\\x07"), "{text}");
    assert!(text.contains("w\\xff\\xfe\\xc3"), "{text}");
    assert!(
        text.contains("sched_ext scx\\x1b]2;OWNED\\x07 for every"),
        "{text}"
    );
    check("hostile_run", &text, false);
    // JSON keeps the real characters, escaped its own way (C1 and bidi controls too,
    // which serde_json leaves raw); not UTF-8 as \xNN.
    let json = render(&r, true);
    assert!(json.contains("evil\\u202egpj.exe"), "{json}");
    assert!(json.contains("csi\\u009b31m\\u2066"), "{json}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(
        v.to_string().contains("evil\u{202e}gpj.exe"),
        "the same text once decoded"
    );
    assert_inert("run JSON", &json);
    assert!(json.contains("\\u001b]2;OWNED\\u0007"), "{json}");
    assert!(json.contains("w\\\\xff\\\\xfe\\\\xc3"), "{json}");
}

#[test]
fn hostile_names_are_escaped_in_slow_lines() {
    use tracer::model::events::{How, Slow, SlowKind};
    use tracer::output::slow;
    let mut out = slow::header(SlowKind::Runq) + "\n";
    for (i, name) in HOSTILE.iter().enumerate() {
        let s = Slow {
            ts_mono: 5,
            kind: SlowKind::Runq,
            cpu: 1,
            tid: 101 + i as u32,
            tgid: 100,
            comm: tracer::model::words::from_bytes(name),
            wait_ns: 12_345_678,
            how: How::Preempted,
            prev_tid: 7,
            prev_comm: tracer::model::words::from_bytes(HOSTILE[(i + 1) % HOSTILE.len()]),
            prev_ran_ns: 4_000_000,
        };
        // The time of day depends on the zone: not part of the golden file.
        let line = slow::text_line(&s, 0);
        out += &line[12..];
        out += "\n";
    }
    assert_inert("slow", &out);
    check("hostile_slow", &out, false);
}

fn hostile_offcpu() -> tracer::model::stacks::OffcpuReport {
    use tracer::model::stacks::{
        Frame, OffState, OffcpuDrops, OffcpuReport, OffcpuStack, StackPart, StateFilter,
    };
    let frames = |names: &[&str]| {
        StackPart::Frames(
            names
                .iter()
                .map(|n| Frame {
                    name: n.to_string(),
                    inlined: false,
                })
                .collect(),
        )
    };
    let stacks = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, name)| OffcpuStack {
            pid: 100,
            tid: 100 + i as u32,
            comm: tracer::model::words::from_bytes(name),
            state: OffState::Blocked,
            total_ns: (i as u64 + 1) * 1_000_000,
            count: 3,
            // Symbols come from the user's own binary: as hostile as its name.
            user: frames(&["main", "\x1b]2;OWNED\x07<&>\"sym;bol", "nanosleep"]),
            kernel: frames(&["entry_SYSCALL_64", "do_nanosleep", "schedule"]),
            user_truncated: (i == 0).then(|| "lib\x1b[2J.so".to_string()),
            // A waker as hostile as the waiter (`--wakers`).
            waker: (i == 1).then(|| tracer::model::stacks::WakerStack {
                pid: 200,
                tid: 201,
                comm: tracer::model::words::from_bytes(HOSTILE[0]),
                user: frames(&["main", "\x1b[2Jwrite_here"]),
                kernel: frames(&["try_to_wake_up", "pipe_write"]),
                interrupt: false,
            }),
        })
        .collect();
    OffcpuReport::new(
        50 * MS,
        "PID 100".into(),
        StateFilter::All,
        1000,
        stacks,
        // Switch-ins no event reported: three timed from the runtime, one lost.
        OffcpuDrops {
            switch_ins_unseen_timed: 3,
            switch_ins_unseen_lost: 1,
            ..OffcpuDrops::default()
        },
        vec!["user stacks of PID 100 (\x1b]2;OWNED\x07) are not symbolized".into()],
    )
    .with_probe("tracepoint")
}

#[test]
fn hostile_names_are_escaped_in_offcpu_text_folded_and_svg() {
    use tracer::output::{flamegraph, folded, stacks};
    let r = hostile_offcpu();
    let mut text = Vec::new();
    stacks::write_text(&r, 0, &mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert_inert("offcpu text", &text);
    check("hostile_offcpu", &text, false);
    let mut f = Vec::new();
    folded::write(&r, &mut f).unwrap();
    let f = String::from_utf8(f).unwrap();
    assert_inert("folded", &f);
    for line in f.lines() {
        // comm; 3 user frames; the truncation marker of the first; 3 kernel frames; the
        // second's waker: `--`, 2 kernel frames, `-`, 2 user frames, its comm.
        let frames = line.rsplit_once(' ').unwrap().0.split(';').count();
        assert!(frames == 7 || frames == 8 || frames == 7 + 7, "{line}");
    }
    check("hostile_folded", &f, false);
    let mut svg = Vec::new();
    flamegraph::write_svg(&r, &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert_inert("flame graph", &svg);
    assert_svg("flame graph", &svg);
    // `;` separates frames in the folded input: a name's own is shown as `:`.
    assert!(svg.contains("\\x1b]2:OWNED\\x07&lt;&amp;&gt;"), "{svg}");
}

#[test]
fn the_heatmap_svg_is_xml_whatever_its_text() {
    use tracer::output::heatmap::{svg, Column};
    let cols: Vec<Column> = (1..=3)
        .map(|i| Column::new(i, format!("16:22:0{i}\x1b]2;x\x07<"), &hists(i)))
        .collect();
    let s = svg("title \x1b]52;c;cm0K\x07 & <b>\u{202e}", &cols);
    assert_inert("heatmap", &s);
    assert!(
        s.contains("title \\x1b]52;c;cm0K\\x07 &amp; &lt;b&gt;\\u{202e}"),
        "{s}"
    );
    // Parsed, the title says what was asked for, escaped for a terminal only.
    let text = assert_svg("heatmap", &s);
    assert!(
        text.contains("title \\x1b]52;c;cm0K\\x07 & <b>\\u{202e}"),
        "{text}"
    );
    assert!(text.contains("16:22:01\\x1b]2;x\\x07<"), "{text}");
}
