//! `tracer top`: a live terminal view of the run's interval reports. [`Top`] is the
//! view-model (plain data built from typed [`Report`](crate::output::report::Report)s,
//! changed by keys; `sample` holds one report as it shows it); `render` draws it as a
//! pure function, so ratatui's `TestBackend` golden-tests whole frames; `term` owns the
//! real terminal (raw mode, alternate screen, the key thread, restoring on every exit).
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::model::{
    snapshot::{HistKind, HistSet},
    words,
};
use crate::output::heatmap::{self, Column, ROWS};

pub mod keys;
pub mod render;
mod sample;
pub mod term;

pub use sample::{CpuView, Figures, ProcView, Sample, ThreadView};

/// Intervals kept for the heatmaps: three minutes at the default 1 s.
pub const HISTORY: usize = 180;

/// A table column; every one sorts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Col {
    Id,
    Comm,
    Cpu,
    Runq,
    P50,
    P99,
    Blocked,
    Preempted,
    Switches,
    Migrations,
}

impl Col {
    pub const ALL: [Col; 10] = [
        Col::Id,
        Col::Comm,
        Col::Cpu,
        Col::Runq,
        Col::P50,
        Col::P99,
        Col::Blocked,
        Col::Preempted,
        Col::Switches,
        Col::Migrations,
    ];

    /// The column's header.
    pub fn title(self) -> &'static str {
        match self {
            Col::Id => "PID",
            Col::Comm => "COMM",
            Col::Cpu => "CPU%",
            Col::Runq => "RQ/s",
            Col::P50 => "RQp50",
            Col::P99 => "RQp99",
            Col::Blocked => "BLK/s",
            Col::Preempted => "PRE/s",
            Col::Switches => "SW/s",
            Col::Migrations => "MIG/s",
        }
    }
}

/// What a row is: heatmap history and the selection follow it across re-sorts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// The whole traced set.
    All,
    Proc(u32),
    Thread(u32),
}

/// One interval of heatmap history: the run-queue rows of every row key (sparse).
#[derive(Clone, Debug)]
pub struct HistoryCol {
    pub all: Column,
    pub runq: BTreeMap<Key, Vec<(u8, u64)>>,
}

fn sparse(h: &HistSet) -> Vec<(u8, u64)> {
    heatmap::rows_of(&h.runq)
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(r, &n)| (r as u8, n))
        .collect()
}

/// A table line as drawn: a process or one of its threads.
#[derive(Clone, Debug)]
pub struct Line<'a> {
    pub key: Key,
    pub id: u32,
    pub comm: &'a str,
    /// A thread under its process.
    pub child: bool,
    /// A process: its thread count and whether they are shown.
    pub threads: usize,
    pub expanded: bool,
    pub exited: bool,
    pub f: &'a Figures,
}

/// What a key asks of the terminal side.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Redraw,
    Quit,
    /// Write the heatmap SVG of the history.
    Export,
}

/// The view-model: the latest sample, the history, and what the keys chose.
#[derive(Debug)]
pub struct Top {
    /// What the run traces ("all CPUs", "PID 42") and how (probe), for the title.
    pub title: String,
    pub latest: Option<Sample>,
    /// While frozen, the sample on screen; new ones still go to `latest` and the history.
    pub frozen: Option<Sample>,
    pub history: VecDeque<HistoryCol>,
    pub sort: Col,
    /// Smallest first.
    pub ascending: bool,
    pub filter: String,
    pub editing_filter: bool,
    pub expanded: BTreeSet<u32>,
    pub selected: Option<Key>,
    pub detail: bool,
    pub detail_kind: HistKind,
    pub color: bool,
    /// A one-line message in the footer (an export written, a filter being typed).
    pub status: Option<String>,
}

impl Top {
    pub fn new(title: String, color: bool) -> Top {
        Top {
            title: words::escape(&title),
            latest: None,
            frozen: None,
            history: VecDeque::new(),
            sort: Col::Cpu,
            ascending: false,
            filter: String::new(),
            editing_filter: false,
            expanded: BTreeSet::new(),
            selected: None,
            detail: true,
            detail_kind: HistKind::Runq,
            color,
            status: None,
        }
    }

    /// A new interval report.
    pub fn push(&mut self, s: Sample) {
        let mut runq = BTreeMap::new();
        runq.insert(Key::All, sparse(&s.all));
        for p in &s.procs {
            runq.insert(Key::Proc(p.pid), sparse(&p.f.hist));
            for t in &p.threads {
                runq.insert(Key::Thread(t.tid), sparse(&t.f.hist));
            }
        }
        self.history.push_back(HistoryCol {
            all: Column::new(s.interval, s.time.clone(), &s.all),
            runq,
        });
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        self.latest = Some(s);
    }

    /// The sample on screen.
    pub fn shown(&self) -> Option<&Sample> {
        self.frozen.as_ref().or(self.latest.as_ref())
    }

    fn matches(&self, id: u32, comm: &str) -> bool {
        if self.filter.is_empty() {
            return true;
        }
        let f = self.filter.to_lowercase();
        comm.to_lowercase().contains(&f) || id.to_string().starts_with(&f)
    }

    fn sort_value(&self, id: u32, comm: &str, f: &Figures) -> (f64, String) {
        let v = match self.sort {
            Col::Id => id as f64,
            Col::Comm => return (0.0, comm.to_string()),
            Col::Cpu => f.cpu_pct,
            Col::Runq => f.runq_ns_s,
            Col::P50 => f.runq_p50.map_or(-1.0, |v| v as f64),
            Col::P99 => f.runq_p99.map_or(-1.0, |v| v as f64),
            Col::Blocked => f.blocked_ns_s,
            Col::Preempted => f.preempted_ns_s,
            Col::Switches => f.switches_s,
            Col::Migrations => f.migrations_s,
        };
        (v, String::new())
    }

    fn order<T>(&self, v: &mut [T], key: impl Fn(&T) -> (u32, &str, &Figures)) {
        v.sort_by(|a, b| {
            let (ia, ca, fa) = key(a);
            let (ib, cb, fb) = key(b);
            let (va, sa) = self.sort_value(ia, ca, fa);
            let (vb, sb) = self.sort_value(ib, cb, fb);
            let o = va.total_cmp(&vb).then(sa.cmp(&sb));
            let o = if self.ascending { o } else { o.reverse() };
            // Ties: CPU% then ID, so equal rows do not swap between frames.
            o.then(fb.cpu_pct.total_cmp(&fa.cpu_pct)).then(ia.cmp(&ib))
        });
    }

    /// The table's lines in order: processes sorted, their threads under them when
    /// expanded, the filter applied (a process shows when it or one of its threads
    /// matches).
    pub fn lines(&self) -> Vec<Line<'_>> {
        let Some(s) = self.shown() else {
            return Vec::new();
        };
        let mut procs: Vec<&ProcView> = s
            .procs
            .iter()
            .filter(|p| {
                self.matches(p.pid, &p.comm)
                    || p.threads.iter().any(|t| self.matches(t.tid, &t.comm))
            })
            .collect();
        self.order(&mut procs, |p| (p.pid, &p.comm, &p.f));
        let mut out = Vec::new();
        for p in procs {
            let expanded = self.expanded.contains(&p.pid);
            out.push(Line {
                key: Key::Proc(p.pid),
                id: p.pid,
                comm: &p.comm,
                child: false,
                threads: p.threads.len(),
                expanded,
                exited: p.threads.iter().all(|t| t.exited),
                f: &p.f,
            });
            if expanded {
                let proc_matches = self.matches(p.pid, &p.comm);
                let mut ts: Vec<&ThreadView> = p
                    .threads
                    .iter()
                    .filter(|t| proc_matches || self.matches(t.tid, &t.comm))
                    .collect();
                self.order(&mut ts, |t| (t.tid, &t.comm, &t.f));
                out.extend(ts.into_iter().map(|t| Line {
                    key: Key::Thread(t.tid),
                    id: t.tid,
                    comm: &t.comm,
                    child: true,
                    threads: 0,
                    expanded: false,
                    exited: t.exited,
                    f: &t.f,
                }));
            }
        }
        out
    }

    /// The index of the selected line (the first when none is, or it went away).
    pub fn cursor(&self, lines: &[Line]) -> Option<usize> {
        if lines.is_empty() {
            return None;
        }
        Some(
            self.selected
                .and_then(|k| lines.iter().position(|l| l.key == k))
                .unwrap_or(0),
        )
    }

    /// The run-queue heatmap columns of `key` with their times, oldest first. While
    /// frozen, the history stops at the frozen sample too.
    pub fn runq_history(&self, key: Key) -> Vec<(&str, [u64; ROWS])> {
        let last = self.frozen.as_ref().map_or(u64::MAX, |s| s.interval);
        self.history
            .iter()
            .filter(|c| c.all.interval <= last)
            .map(|c| {
                let mut rows = [0u64; ROWS];
                for &(r, n) in c.runq.get(&key).map(Vec::as_slice).unwrap_or(&[]) {
                    rows[r as usize] = n;
                }
                (c.all.time.as_str(), rows)
            })
            .collect()
    }

    /// Handles one key; `page` is the table's height in lines.
    pub fn key(&mut self, k: KeyEvent, page: usize) -> Action {
        if k.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(k.code, KeyCode::Char('c')) {
            return Action::Quit;
        }
        if self.editing_filter {
            match k.code {
                KeyCode::Enter => self.editing_filter = false,
                KeyCode::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if !ctrl => self.filter.push(c),
                _ => return Action::None,
            }
            return Action::Redraw;
        }
        // Other Ctrl chords did what their letter does (Ctrl-E wrote an SVG); the keys
        // are the plain ones the key table lists.
        if ctrl {
            return Action::None;
        }
        let lines = self.lines();
        let cur = self.cursor(&lines);
        let keys: Vec<Key> = lines.iter().map(|l| l.key).collect();
        let at = |i: usize| keys.get(i.min(keys.len().saturating_sub(1))).copied();
        let page = page.max(1);
        match k.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return Action::Quit,
            KeyCode::Up | KeyCode::Char('k') => {
                self.selected = cur.and_then(|c| at(c.saturating_sub(1)))
            }
            KeyCode::Down | KeyCode::Char('j') => self.selected = cur.and_then(|c| at(c + 1)),
            KeyCode::PageUp => self.selected = cur.and_then(|c| at(c.saturating_sub(page))),
            KeyCode::PageDown => self.selected = cur.and_then(|c| at(c + page)),
            KeyCode::Home | KeyCode::Char('g') => self.selected = at(0),
            KeyCode::End | KeyCode::Char('G') => self.selected = keys.last().copied(),
            KeyCode::Enter | KeyCode::Char(' ') | KeyCode::Right | KeyCode::Left => {
                let Some(line) = cur.map(|c| &lines[c]) else {
                    return Action::None;
                };
                let pid = match line.key {
                    Key::Proc(p) => p,
                    Key::Thread(_) => {
                        // On a thread: fold its process and select it.
                        let Some(p) = lines[..cur.unwrap_or(0)]
                            .iter()
                            .rev()
                            .find(|l| !l.child)
                            .map(|l| l.id)
                        else {
                            return Action::None;
                        };
                        if matches!(k.code, KeyCode::Right) {
                            return Action::None;
                        }
                        self.expanded.remove(&p);
                        self.selected = Some(Key::Proc(p));
                        return Action::Redraw;
                    }
                    Key::All => return Action::None,
                };
                let open = match k.code {
                    KeyCode::Right => true,
                    KeyCode::Left => false,
                    _ => !self.expanded.contains(&pid),
                };
                if open {
                    self.expanded.insert(pid);
                } else {
                    self.expanded.remove(&pid);
                }
                self.selected = Some(Key::Proc(pid));
            }
            KeyCode::Char('+') | KeyCode::Char('*') => {
                if let Some(s) = self.shown() {
                    let all: Vec<u32> = s.procs.iter().map(|p| p.pid).collect();
                    self.expanded.extend(all);
                }
            }
            KeyCode::Char('-') => self.expanded.clear(),
            KeyCode::Char('>') | KeyCode::Char('.') => {
                let i = Col::ALL.iter().position(|&c| c == self.sort).unwrap_or(0);
                self.sort = Col::ALL[(i + 1) % Col::ALL.len()];
            }
            KeyCode::Char('<') | KeyCode::Char(',') => {
                let i = Col::ALL.iter().position(|&c| c == self.sort).unwrap_or(0);
                self.sort = Col::ALL[(i + Col::ALL.len() - 1) % Col::ALL.len()];
            }
            KeyCode::Char('r') => self.ascending = !self.ascending,
            KeyCode::Char('/') => {
                self.editing_filter = true;
                self.filter.clear();
            }
            KeyCode::Esc => self.filter.clear(),
            KeyCode::Char('f') | KeyCode::Char('p') => {
                self.frozen = match self.frozen.take() {
                    Some(_) => None,
                    None => self.latest.clone(),
                };
            }
            KeyCode::Char('d') | KeyCode::Tab => self.detail = !self.detail,
            KeyCode::Char('h') => {
                self.detail_kind = match self.detail_kind {
                    HistKind::Runq => HistKind::OnCpu,
                    HistKind::OnCpu => HistKind::OffCpu,
                    HistKind::OffCpu => HistKind::Runq,
                }
            }
            KeyCode::Char('e') => return Action::Export,
            _ => return Action::None,
        }
        Action::Redraw
    }
}

#[cfg(test)]
mod tests;
