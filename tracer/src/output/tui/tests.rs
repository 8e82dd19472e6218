use super::*;

fn thread(tid: u32, comm: &str, cpu: f64) -> ThreadView {
    ThreadView {
        tid,
        comm: comm.into(),
        exited: false,
        f: Figures {
            cpu_pct: cpu,
            ..Default::default()
        },
    }
}

pub(super) fn sample(interval: u64) -> Sample {
    let proc_ = |pid, comm: &str, threads: Vec<ThreadView>| ProcView {
        pid,
        comm: comm.into(),
        f: Figures {
            cpu_pct: threads.iter().map(|t| t.f.cpu_pct).sum(),
            ..Default::default()
        },
        threads,
    };
    Sample {
        interval,
        time: format!("10:00:{interval:02}"),
        duration_ns: 1_000_000_000,
        cpus_utilized: 0.5,
        cpus: vec![],
        procs: vec![
            proc_(
                10,
                "db",
                vec![thread(10, "db", 1.0), thread(11, "db-io", 30.0)],
            ),
            proc_(20, "web", vec![thread(20, "web", 5.0)]),
        ],
        threads_total: 3,
        drops: 0,
        all: HistSet::new(),
    }
}

fn key(t: &mut Top, code: KeyCode) -> Action {
    t.key(KeyEvent::new(code, KeyModifiers::NONE), 10)
}

fn ids(t: &Top) -> Vec<u32> {
    t.lines().iter().map(|l| l.id).collect()
}

#[test]
fn keys_sort_expand_filter_freeze_and_quit() {
    let mut t = Top::new("x".into(), false);
    t.push(sample(1));
    assert_eq!(ids(&t), [10, 20], "CPU% largest first");
    key(&mut t, KeyCode::Char('r'));
    assert_eq!(ids(&t), [20, 10]);
    key(&mut t, KeyCode::Char('r'));
    key(&mut t, KeyCode::Enter);
    assert_eq!(ids(&t), [10, 11, 10, 20], "threads under their process");
    key(&mut t, KeyCode::Down);
    assert_eq!(t.selected, Some(Key::Thread(11)));
    // Re-sorting keeps the selected row selected.
    key(&mut t, KeyCode::Char('<'));
    key(&mut t, KeyCode::Char('<'));
    assert_eq!(t.sort, Col::Id);
    assert_eq!(ids(&t), [20, 10, 11, 10]);
    assert_eq!(t.cursor(&t.lines()), Some(2));
    // Filter: typed keys go to the filter, not to commands.
    key(&mut t, KeyCode::Char('/'));
    for c in "io".chars() {
        key(&mut t, KeyCode::Char(c));
    }
    key(&mut t, KeyCode::Enter);
    assert_eq!(
        ids(&t),
        [10, 11],
        "the process of the matching thread, and that thread"
    );
    key(&mut t, KeyCode::Esc);
    assert_eq!(ids(&t).len(), 4);
    // Frozen: a new interval goes to the history, not on screen.
    key(&mut t, KeyCode::Char('f'));
    t.push(sample(2));
    assert_eq!(t.shown().unwrap().interval, 1);
    assert_eq!(t.runq_history(Key::All).len(), 1);
    key(&mut t, KeyCode::Char('f'));
    assert_eq!(t.shown().unwrap().interval, 2);
    assert_eq!(t.runq_history(Key::All).len(), 2);
    assert_eq!(key(&mut t, KeyCode::Char('e')), Action::Export);
    assert_eq!(key(&mut t, KeyCode::Char('q')), Action::Quit);
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    t.editing_filter = true;
    assert_eq!(
        t.key(ctrl_c, 10),
        Action::Quit,
        "even while typing a filter"
    );
}

#[test]
fn history_is_bounded() {
    let mut t = Top::new("x".into(), false);
    for i in 0..(HISTORY as u64 + 20) {
        t.push(sample(i));
    }
    assert_eq!(t.history.len(), HISTORY);
    assert_eq!(t.history.front().unwrap().all.interval, 20);
}
