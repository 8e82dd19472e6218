//! Drawing [`Top`]: a pure function of the view-model into a ratatui frame (no terminal,
//! no clock), so a `TestBackend` frame is a golden file.
use ratatui::{
    buffer::Buffer,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line as TLine, Span},
    widgets::{Block, Borders, Cell, Paragraph, Row, Table, TableState},
    Frame,
};

// The footer comes from the key table the man page renders too.
use super::{keys::FOOTER, Col, Figures, Key, Line, Top};
use crate::model::{hist::human_ns, snapshot::HistKind};
use crate::output::heatmap::{self, ROWS};

/// Width of one CPU's bar cell.
const CPU_CELL: u16 = 28;
/// Lines of CPU bars at most (more CPUs: the rest is summarized).
const CPU_LINES: u16 = 4;
/// Height of the detail pane, borders included.
const DETAIL_H: u16 = 10;
/// Width of the heatmap's row labels.
const HEAT_LABEL: u16 = 8;
/// Density characters of heatmap cells, light to dark (ASCII: any terminal, any font).
const SHADES: &[u8] = b" .:-=+*#%@";

/// Lines the table gets in an area of `height` (what PageUp/PageDown move by).
pub fn table_height(top: &Top, area: Rect) -> usize {
    let [_, _, table, _, _] = areas(top, area);
    table.height.saturating_sub(1) as usize
}

/// A CPU's cell: 7 more with `--runqlen`'s " rq 2.0".
fn cpu_cell(top: &Top) -> u16 {
    let rq = top
        .shown()
        .is_some_and(|s| s.cpus.iter().any(|c| c.runqlen.is_some()));
    CPU_CELL + if rq { 7 } else { 0 }
}

fn cpu_lines(top: &Top, width: u16) -> u16 {
    let n = top.shown().map_or(0, |s| s.cpus.len()) as u16;
    let per = (width / cpu_cell(top)).max(1);
    n.div_ceil(per).min(CPU_LINES)
}

fn areas(top: &Top, area: Rect) -> [Rect; 5] {
    let detail = if top.detail && area.height >= 18 {
        DETAIL_H
    } else {
        0
    };
    Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(cpu_lines(top, area.width)),
        Constraint::Min(2),
        Constraint::Length(detail),
        Constraint::Length(1),
    ])
    .areas(area)
}

fn style(top: &Top, c: Color) -> Style {
    if top.color {
        Style::default().fg(c)
    } else {
        Style::default()
    }
}

/// Draws the whole screen.
pub fn draw(f: &mut Frame, top: &Top) {
    let [title, cpus, table, detail, footer] = areas(top, f.area());
    draw_title(f, top, title);
    draw_cpus(f, top, cpus);
    let lines = top.lines();
    let cursor = top.cursor(&lines);
    draw_table(f, top, table, &lines, cursor);
    if detail.height > 0 {
        let sel = cursor.map(|c| &lines[c]);
        draw_detail(f, top, detail, sel);
    }
    draw_footer(f, top, footer);
}

fn draw_title(f: &mut Frame, top: &Top, area: Rect) {
    let mut spans = vec![Span::styled(
        "tracer top",
        Style::default().add_modifier(Modifier::BOLD),
    )];
    match top.shown() {
        None => spans.push(Span::raw(format!(
            "  {}  waiting for the first interval...",
            top.title
        ))),
        Some(s) => {
            spans.push(Span::raw(format!(
                "  {} #{} {}  {:.2} CPUs  {} thr  {}",
                s.time,
                s.interval,
                human_ns(s.duration_ns),
                s.cpus_utilized,
                s.threads_total,
                top.title,
            )));
            if s.drops > 0 {
                spans.push(Span::styled(
                    format!("  drops {}", s.drops),
                    style(top, Color::Red),
                ));
            }
        }
    }
    if top.frozen.is_some() {
        spans.push(Span::styled(
            "  FROZEN",
            style(top, Color::Yellow).add_modifier(Modifier::REVERSED),
        ));
    }
    f.render_widget(Paragraph::new(TLine::from(spans)), area);
}

fn bar(frac: f64, width: usize) -> String {
    let n = ((frac.clamp(0.0, 1.0) * width as f64).round() as usize).min(width);
    format!("{}{}", "|".repeat(n), " ".repeat(width - n))
}

fn draw_cpus(f: &mut Frame, top: &Top, area: Rect) {
    let Some(s) = top.shown() else { return };
    let per = (area.width / cpu_cell(top)).max(1) as usize;
    let shown = per * area.height as usize;
    let mut lines = Vec::new();
    for chunk in s.cpus.chunks(per).take(area.height as usize) {
        let mut spans = Vec::new();
        for c in chunk {
            let steal = c
                .steal_pct
                .map_or("  -".to_string(), |p| format!("{p:>3.0}"));
            let colour = if c.util > 0.8 {
                Color::Red
            } else if c.util > 0.4 {
                Color::Yellow
            } else {
                Color::Green
            };
            spans.push(Span::raw(format!("{:>3}[", c.cpu)));
            spans.push(Span::styled(bar(c.util, 12), style(top, colour)));
            spans.push(Span::raw(format!("]{:>4.0}% st{steal} ", 100.0 * c.util)));
            if let Some(rq) = c.runqlen {
                spans.push(Span::raw(format!("rq{rq:>4.1} ")));
            }
        }
        lines.push(TLine::from(spans));
    }
    if s.cpus.len() > shown {
        if let Some(last) = lines.last_mut() {
            last.spans
                .push(Span::raw(format!("+{} CPUs", s.cpus.len() - shown)));
        }
    }
    f.render_widget(Paragraph::new(lines), area);
}

fn ns_s(v: f64) -> String {
    if v <= 0.0 {
        "0".into()
    } else {
        human_ns(v.round() as u64)
    }
}

fn opt_ns(v: Option<u64>) -> String {
    v.map_or("-".into(), human_ns)
}

fn rate(v: f64) -> String {
    if v >= 9999.5 {
        format!("{:.0}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

fn cells(l: &Line) -> Vec<String> {
    let f: &Figures = l.f;
    let id = if l.child {
        format!("  {}", l.id)
    } else if l.threads > 1 {
        format!("{}{}", if l.expanded { "-" } else { "+" }, l.id)
    } else {
        format!(" {}", l.id)
    };
    let comm = if l.exited {
        format!("{} (x)", l.comm)
    } else {
        l.comm.to_string()
    };
    vec![
        id,
        comm,
        format!("{:.1}", f.cpu_pct),
        ns_s(f.runq_ns_s),
        opt_ns(f.runq_p50),
        opt_ns(f.runq_p99),
        ns_s(f.blocked_ns_s),
        ns_s(f.preempted_ns_s),
        rate(f.switches_s),
        rate(f.migrations_s),
    ]
}

/// Each column's width in `Col::ALL`'s order: a whole comm (15 bytes) at least for COMM,
/// which takes the rest; times are at most 6 cells ("12.3ms"), titles with their sort
/// mark too ("MIG/sv"). All ten fit 80 columns.
const COL_WIDTHS: [u16; 10] = [8, 15, 6, 6, 6, 6, 6, 6, 5, 6];

/// How many of the leading columns fit `width` whole: the rightmost go first, so a narrow
/// terminal keeps PID, COMM and CPU% (cropped, if it must) rather than squeezing every
/// column to nothing. One cell is the highlight symbol, one the space between columns.
pub fn shown_columns(width: u16) -> usize {
    let mut used = 1u16;
    let mut n = 0;
    for (i, w) in COL_WIDTHS.iter().enumerate() {
        let need = w + u16::from(i > 0);
        if n >= 3 && used + need > width {
            break;
        }
        used = used.saturating_add(need);
        n += 1;
    }
    n
}

fn draw_table(f: &mut Frame, top: &Top, area: Rect, lines: &[Line], cursor: Option<usize>) {
    let n = shown_columns(area.width);
    let widths = COL_WIDTHS[..n].iter().enumerate().map(|(i, &w)| {
        if Col::ALL[i] == Col::Comm {
            Constraint::Fill(1)
        } else {
            Constraint::Length(w)
        }
    });
    let header = Row::new(Col::ALL[..n].iter().map(|&c| {
        let mark = if c != top.sort {
            ""
        } else if top.ascending {
            "^"
        } else {
            "v"
        };
        let t = format!("{}{mark}", c.title());
        let st = if c == top.sort {
            Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        };
        Cell::from(t).style(st)
    }));
    let rows = lines.iter().map(|l| {
        let st = if l.child {
            style(top, Color::Cyan)
        } else {
            Style::default()
        };
        let mut c = cells(l);
        c.truncate(n);
        Row::new(c).style(st)
    });
    let highlight = if top.color {
        Style::default().bg(Color::Blue).fg(Color::White)
    } else {
        Style::default().add_modifier(Modifier::REVERSED)
    };
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(highlight)
        .highlight_symbol(">")
        .highlight_spacing(ratatui::widgets::HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(cursor);
    f.render_stateful_widget(table, area, &mut state);
    if lines.is_empty() {
        let msg = if top.shown().is_some() && !top.filter.is_empty() {
            format!("no thread matches \"{}\"", top.filter)
        } else if top.shown().is_some() {
            "no thread ran in this interval".into()
        } else {
            String::new()
        };
        if area.height > 1 {
            let r = Rect {
                y: area.y + 1,
                height: 1,
                ..area
            };
            f.render_widget(Paragraph::new(msg), r);
        }
    }
}

/// `rows` (one count per heatmap row) folded by 2, 4, ... until `lo..=hi` fits `n`
/// lines: (lowest row of each group, counts per column), top line first.
fn fold(lo: usize, hi: usize, n: usize) -> (usize, Vec<usize>) {
    let span = hi - lo + 1;
    let mut k = 1;
    while span.div_ceil(k) > n.max(1) {
        k *= 2;
    }
    let groups = span.div_ceil(k);
    (k, (0..groups).rev().map(|g| lo + g * k).collect())
}

fn sum_rows(rows: &[u64; ROWS], from: usize, k: usize) -> u64 {
    rows[from..(from + k).min(ROWS)].iter().sum()
}

fn span_of(cols: &[[u64; ROWS]]) -> Option<(usize, usize)> {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for c in cols {
        for (r, &n) in c.iter().enumerate() {
            if n > 0 {
                lo = lo.min(r);
                hi = hi.max(r);
            }
        }
    }
    (lo != usize::MAX).then_some((lo, hi))
}

fn detail_label(top: &Top, sel: Option<&Line>) -> (Key, String) {
    match sel {
        Some(l) if l.child => (l.key, format!("TID {} {}", l.id, l.comm)),
        Some(l) => (l.key, format!("PID {} {}", l.id, l.comm)),
        None => (
            Key::All,
            if top.shown().is_some() {
                "all threads".into()
            } else {
                String::new()
            },
        ),
    }
}

fn short(kind: HistKind) -> &'static str {
    match kind {
        HistKind::Runq => "run-queue",
        HistKind::OnCpu => "on-CPU",
        HistKind::OffCpu => "off-CPU",
    }
}

fn draw_detail(f: &mut Frame, top: &Top, area: Rect, sel: Option<&Line>) {
    let (key, label) = detail_label(top, sel);
    let [left, right] =
        Layout::horizontal([Constraint::Length(36), Constraint::Fill(1)]).areas(area);
    let kind = top.detail_kind;
    let hist = match (sel, top.shown()) {
        (Some(l), _) => Some(l.f.hist.get(kind)),
        (None, Some(s)) => Some(s.all.get(kind)),
        _ => None,
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {label}: {} ", short(kind)));
    let inner = block.inner(left);
    f.render_widget(block, left);
    let mut out: Vec<TLine> = Vec::new();
    if let Some(h) = hist {
        out.push(TLine::from(format!(
            "n {} p50 {} p99 {}",
            h.count(),
            opt_ns(h.percentile(50.0)),
            opt_ns(h.percentile(99.0))
        )));
        let rows = heatmap::rows_of(h);
        if let Some((lo, hi)) = span_of(&[rows]) {
            let (k, starts) = fold(lo, hi, inner.height.saturating_sub(1) as usize);
            let max = starts
                .iter()
                .map(|&s| sum_rows(&rows, s, k))
                .max()
                .unwrap_or(1)
                .max(1);
            let bw = inner.width.saturating_sub(16) as usize;
            for s in starts {
                let n = sum_rows(&rows, s, k);
                let b = (n as usize * bw).div_ceil(max as usize).min(bw);
                out.push(TLine::from(vec![
                    Span::raw(format!("{:>7} ", heatmap::row_label(s))),
                    Span::styled("#".repeat(b), style(top, Color::Green)),
                    Span::raw(format!("{}{n:>7}", " ".repeat(bw - b + 1))),
                ]));
            }
        }
    }
    f.render_widget(Paragraph::new(out), inner);

    let hist = top.runq_history(key);
    let inner = Block::default().borders(Borders::ALL).inner(right);
    // The columns that fit, newest last; the title says the time they span.
    let fit = inner.width.saturating_sub(HEAT_LABEL) as usize;
    let hist = &hist[hist.len().saturating_sub(fit)..];
    let span = match (hist.first(), hist.last()) {
        (Some(a), Some(b)) if hist.len() > 1 => format!("{}..{}", a.0, b.0),
        (Some(a), _) => a.0.to_string(),
        _ => String::new(),
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" run-queue heatmap {span} "));
    f.render_widget(block, right);
    let cols: Vec<[u64; ROWS]> = hist.iter().map(|c| c.1).collect();
    draw_heatmap(f.buffer_mut(), top, inner, &cols);
}

/// Heatmap cells into `area`: the latest column at the right edge (time scrolls left),
/// a label column on the left, rows folded to fit.
fn draw_heatmap(buf: &mut Buffer, top: &Top, area: Rect, cols: &[[u64; ROWS]]) {
    const LABEL: u16 = HEAT_LABEL;
    if area.width <= LABEL || area.height == 0 {
        return;
    }
    let w = (area.width - LABEL) as usize;
    let cols = &cols[cols.len().saturating_sub(w)..];
    let x0 = area.x + LABEL + (w - cols.len()) as u16;
    let Some((lo, hi)) = span_of(cols) else {
        buf.set_string(area.x, area.y, "no run-queue waits", Style::default());
        return;
    };
    let (k, starts) = fold(lo, hi, area.height as usize);
    let max = cols
        .iter()
        .flat_map(|c| starts.iter().map(move |&s| sum_rows(c, s, k)))
        .max()
        .unwrap_or(1);
    for (y, &s) in starts.iter().enumerate() {
        let yy = area.y + y as u16;
        buf.set_string(
            area.x,
            yy,
            format!("{:>7} ", heatmap::row_label(s)),
            Style::default(),
        );
        for (x, c) in cols.iter().enumerate() {
            let n = sum_rows(c, s, k);
            let level = if n == 0 {
                0
            } else if max <= 1 {
                SHADES.len() - 1
            } else {
                let f = (n as f64).ln() / (max as f64).ln();
                1 + (f * (SHADES.len() - 2) as f64).round() as usize
            };
            let ch = SHADES[level.min(SHADES.len() - 1)] as char;
            let mut st = Style::default();
            if top.color && n > 0 {
                let (r, g, b) = heatmap::colour(n, max);
                st = st.fg(Color::Rgb(r, g, b));
            }
            buf.set_string(x0 + x as u16, yy, ch.to_string(), st);
        }
    }
}

fn draw_footer(f: &mut Frame, top: &Top, area: Rect) {
    let text = if top.editing_filter {
        format!(
            "filter (comm or PID, enter to keep, esc to clear): {}_",
            top.filter
        )
    } else if let Some(s) = &top.status {
        s.clone()
    } else if !top.filter.is_empty() {
        format!("filter \"{}\" (esc clears)  {}", top.filter, *FOOTER)
    } else if Col::ALL
        .iter()
        .position(|&c| c == top.sort)
        .is_some_and(|i| i >= shown_columns(area.width))
    {
        // The sorted column is off a narrow screen: say what the order is.
        let dir = if top.ascending { "^" } else { "v" };
        format!("sorted by {}{dir}  {}", top.sort.title(), *FOOTER)
    } else {
        FOOTER.clone()
    };
    f.render_widget(
        Paragraph::new(text).style(Style::default().add_modifier(Modifier::REVERSED)),
        area,
    );
}

/// A buffer as text, one line per row, trailing spaces cut: what a golden file holds.
pub fn buffer_text(buf: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut line = String::new();
        for x in 0..buf.area.width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
