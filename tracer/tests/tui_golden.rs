//! Golden frames of `tracer top` (80x24, the smallest terminal it promises, and a wider
//! one) drawn by ratatui's `TestBackend` from fixed interval reports: the table, the
//! expanded threads, the detail pane's histogram and the run-queue heatmap. After an
//! intended change: `UPDATE_GOLDEN=1 cargo test -p tracer --test tui_golden`, review the
//! diff of `tests/golden/top_*.txt`.
use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::{backend::TestBackend, Terminal};
use tracer::model::targets::HistScope;
use tracer::{
    model::{
        hist::Unit,
        options::{RunqSource, SortKey},
        report::{ReportKind, RunHeader},
        snapshot::{HistSet, Snapshot, ThreadRecord},
    },
    output::{
        report::{Report, ReportInput, ReportOptions, Sections},
        tui::{render, Action, Col, Sample, Top},
    },
    pseries::hypervisor::{CpuStealReport, HypervisorReport},
};
use tracer_common::ThreadStats;

const MS: u64 = 1_000_000;

/// Thread `tid` of `tgid` in interval `i` (1-based): on-CPU and waits that grow with `i`
/// so the heatmap moves.
fn thread(tid: u32, tgid: u32, comm: &[u8], on_ms: u64, i: u64) -> (ThreadRecord, HistSet) {
    let mut s = ThreadStats::zeroed();
    s.tgid = tgid;
    s.comm[..comm.len()].copy_from_slice(comm);
    s.on_cpu_ns = on_ms * MS;
    s.slices = on_ms + 2;
    s.voluntary = on_ms * 3;
    s.involuntary = 5;
    s.runq_wait_ns = (tid as u64 % 7 + 1) * i * 3 * MS;
    s.runq_waits = 40;
    s.blocked_ns = (1000 - on_ms) * MS / 2;
    s.preempted_ns = (tid as u64 % 5) * MS;
    s.off_cpu_ns = s.blocked_ns + s.preempted_ns;
    s.migrations = tid as u64 % 3;
    let mut h = HistSet::new();
    for k in 0..40u64 {
        h.runq
            .record((k % 9 + 1) * 2_000 * i * (tid as u64 % 4 + 1));
        h.on_cpu.record((k + 1) * 150_000);
        h.off_cpu.record((k * k + 1) * 40_000);
    }
    (
        ThreadRecord {
            tid,
            stats: s,
            exited: false,
            folded: 0,
            became: 0,
        },
        h,
    )
}

fn report(i: u64) -> Report {
    report_of(
        i,
        &[
            (100, 100, b"postgres", 5),
            (101, 100, b"pg-worker", 420),
            (102, 100, b"pg-worker", 380),
            (200, 200, b"nginx", 90),
            (300, 300, b"kworker/0:1", 12),
        ],
    )
}

/// Interval `i` of threads (TID, PID, comm, on-CPU ms).
fn report_of(i: u64, threads: &[(u32, u32, &[u8], u64)]) -> Report {
    let mut snap = Snapshot {
        at_ns: i * 1000 * MS,
        ..Default::default()
    };
    let rows = threads
        .iter()
        .map(|&(tid, pid, comm, ms)| thread(tid, pid, comm, ms, i));
    for (r, h) in rows {
        snap.hist.merge(&h);
        snap.scoped.insert(r.tid, h);
        snap.threads.insert((r.tid, 0), r);
    }
    snap.cpu_busy_ns = vec![610 * MS, 297 * MS];
    Report::build(ReportInput {
        kind: ReportKind::Interval { interval: i },
        time_unix_ns: 1_764_519_725_000_000_000 + i * 1_000_000_000,
        local_time: format!("16:22:{:02}", 5 + i),
        duration_ns: 1000 * MS,
        run: RunHeader {
            target: "all CPUs".into(),
            probe: "tp-btf".into(),
            probe_attach: "tp_btf".into(),
            attach_lag_ns: 180_000,
            runq_source: RunqSource::ThreadEntry,
            probe_refused: vec![],
            scheduler: Default::default(),
            system_wide: true,
            max_threads: 0,
            slice_events: vec![],
        },
        snapshot: snap,
        cpus_utilized_task_clock: None,
        thread_counters: Default::default(),
        sections: Sections {
            counters: None,
            record: None,
            cgroup_cpu: None,
            runqlen: None,
            irq: None,
            hypervisor: Some(HypervisorReport {
                source: "/proc/stat",
                elapsed_ns: 1000 * MS,
                user_hz: 100,
                cpus: vec![
                    CpuStealReport {
                        cpu: 0,
                        steal_ns: 20 * MS,
                        steal_percent: Some(2.0),
                    },
                    CpuStealReport {
                        cpu: 1,
                        steal_ns: 0,
                        steal_percent: Some(0.0),
                    },
                ],
                total_steal_ns: 20 * MS,
                total_steal_percent: Some(1.0),
                dispatch: None,
                notes: vec![],
            }),
        },
        notices: vec![],
        command: None,
        options: ReportOptions {
            top: Some(0),
            sort: SortKey::OnCpu,
            unit: Unit::Usecs,
            hist_scope: HistScope::Thread,
        },
    })
}

fn top(intervals: u64) -> Top {
    let mut t = Top::new("all CPUs".into(), false);
    for i in 1..=intervals {
        t.push(Sample::from_report(&report(i)));
    }
    t
}

fn press(t: &mut Top, keys: &str) {
    for c in keys.chars() {
        let code = match c {
            '\n' => KeyCode::Enter,
            'J' => KeyCode::Down,
            c => KeyCode::Char(c),
        };
        let a = t.key(KeyEvent::new(code, KeyModifiers::NONE), 10);
        assert_ne!(a, Action::Quit, "{c:?}");
    }
}

fn frame(t: &Top, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| render::draw(f, t)).unwrap();
    render::buffer_text(term.backend().buffer())
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn check(name: &str, got: &str) {
    let path = golden_dir().join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(got, want, "frame {name} differs from {}", path.display());
}

#[test]
fn table_in_80x24() {
    check("top_table_80x24", &frame(&top(1), 80, 24));
}

#[test]
fn expanded_sorted_by_runq_with_a_thread_selected() {
    let mut t = top(12);
    // The busiest process first: expand it, sort by run-queue wait, select a thread.
    press(&mut t, "\n>J");
    let f = frame(&t, 80, 24);
    assert!(f.contains("RQ/sv"), "sorted by RQ/s:\n{f}");
    assert!(f.contains(" TID "), "a thread's detail pane:\n{f}");
    check("top_expanded_runq_80x24", &f);
}

#[test]
fn off_cpu_histogram_frozen_and_filtered_wide() {
    let mut t = top(30);
    press(&mut t, "hhf/ngi\n");
    // Frozen: a new interval changes nothing on screen.
    let before = frame(&t, 120, 40);
    t.push(Sample::from_report(&report(31)));
    assert_eq!(before, frame(&t, 120, 40));
    assert!(before.contains("FROZEN") && before.contains("nginx") && !before.contains("postgres"));
    check("top_offcpu_frozen_120x40", &before);
}

#[test]
fn no_color_frame_has_no_colours() {
    let t = top(3);
    let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
    term.draw(|f| render::draw(f, &t)).unwrap();
    let buf = term.backend().buffer();
    for cell in buf.content() {
        assert_eq!(cell.fg, ratatui::style::Color::Reset);
        assert_eq!(cell.bg, ratatui::style::Color::Reset);
    }
}

#[test]
fn tiny_and_odd_terminals_draw_without_panicking() {
    let mut t = top(5);
    press(&mut t, "\nJ");
    for (w, h) in [
        (1, 1),
        (10, 3),
        (20, 5),
        (40, 10),
        (79, 17),
        (80, 18),
        (300, 100),
    ] {
        let f = frame(&t, w, h);
        assert_eq!(f.lines().count(), h as usize);
    }
    // No report yet: the title says so.
    let empty = Top::new("PID 1".into(), false);
    assert!(frame(&empty, 80, 24).contains("waiting for the first interval"));
}

/// Issue 25: names any user can give a thread reached the terminal (an OSC 2 set the
/// pane title, OSC 52 the clipboard): every cell, the detail pane's title included,
/// shows them escaped.
#[test]
fn hostile_names_are_escaped_in_every_cell() {
    let threads: &[(u32, u32, &[u8], u64)] = &[
        (100, 100, b"\x1b]2;OWNED\x07", 300),
        (101, 100, b"\x1b]52;c;cm0K\x07", 200),
        (200, 200, b"ok\r\nfake\x1b[2J", 100),
        (300, 300, "evil\u{202e}gpj".as_bytes(), 50),
        (400, 400, b"w\xff\xfe\xc2\x9b", 20),
    ];
    let mut t = Top::new("PID 100 \x1b]0;title".into(), false);
    for i in 1..=3 {
        t.push(Sample::from_report(&report_of(i, threads)));
    }
    // Expanded, the first thread selected: its name is in the detail pane's title too.
    press(&mut t, "\nJ");
    let f = frame(&t, 80, 24);
    for c in f.chars() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{c:?} on screen:\n{f}"
        );
    }
    assert!(f.contains("\\x1b]2;OWNED\\x07"), "{f}");
    check("top_hostile_80x24", &f);
}

/// A hostile pass ran `top` in a 50-column tmux pane: every column was squeezed and PID
/// and COMM vanished. Narrow terminals drop the rightmost columns instead.
#[test]
fn narrow_terminals_keep_pid_comm_and_cpu() {
    let t = top(2);
    for w in [30u16, 40, 50, 60, 70, 79] {
        let f = frame(&t, w, 12);
        let header = f.lines().find(|l| l.contains("CPU%")).unwrap_or("");
        assert!(
            header.contains(" PID ") && header.contains("COMM"),
            "{w} columns:\n{f}"
        );
        for name in ["postgres", "nginx"] {
            assert!(f.contains(name), "{w} columns, {name}:\n{f}");
        }
    }
    assert_eq!(render::shown_columns(80), 10, "80 columns show them all");
    // Sorted by a column off the screen: the footer says so.
    let mut sorted = top(2);
    press(&mut sorted, "<<<");
    assert_eq!(sorted.sort, Col::Migrations);
    assert!(frame(&sorted, 50, 12).contains("sorted by MIG/s"));
    assert!(!frame(&sorted, 80, 12).contains("sorted by"));
    check("top_table_50x12", &frame(&t, 50, 12));
}
