//! Latency heatmaps (Brendan Gregg's picture of how a distribution moves): x = time (one
//! column per interval report), y = power-of-two latency rows, colour = count. The grid is
//! built here once and drawn twice: as a standalone SVG (`tracer run -i 1s --heatmap
//! FILE.svg`, [`HeatmapSink`]) and in `tracer top`'s detail pane.
//!
//! The SVG is written by hand: it is a few hundred `<rect>`s with `<title>`s, and the
//! plotting crates (plotters, charming) either draw no per-cell hover titles or bring a
//! JavaScript runtime; a string of rects is smaller than either and easy to test.
use std::{fmt::Write as _, path::Path};

use tracer_common::hist::bucket_lower;
#[cfg(test)]
use tracer_common::hist::N_BUCKETS;

use crate::error::TracerError;
use crate::model::{
    hist::{human_ns, Histogram},
    snapshot::{HistKind, HistSet},
    words,
};
use crate::output::{report::Report, sink::Sink};
use crate::sys::files;

/// Rows: row `r` holds values in `[2^(r-1), 2^r)` ns, row 0 holds 0 ns. The log-linear
/// buckets never straddle a power of two, so each bucket lands whole in one row and the
/// rows add up exactly to the histogram.
pub const ROWS: usize = 65;

/// The row of histogram bucket `i`.
pub fn row_of_bucket(i: usize) -> usize {
    row_of_ns(bucket_lower(i))
}

/// The row of a value in ns.
pub fn row_of_ns(v: u64) -> usize {
    (64 - v.leading_zeros()) as usize
}

/// The smallest value of row `r` (ns).
pub fn row_low_ns(r: usize) -> u64 {
    match r {
        0 => 0,
        r => 1u64 << (r - 1).min(63),
    }
}

/// One interval's counts per row.
pub fn rows_of(h: &Histogram) -> [u64; ROWS] {
    let mut out = [0u64; ROWS];
    for (i, c) in h.nonzero() {
        let r = row_of_bucket(i);
        out[r] = out[r].saturating_add(c);
    }
    out
}

/// One column: an interval report's three histograms of the traced set as rows.
#[derive(Clone, Debug)]
pub struct Column {
    /// The report's interval number.
    pub interval: u64,
    /// End of the interval, HH:MM:SS local time.
    pub time: String,
    pub on_cpu: [u64; ROWS],
    pub runq: [u64; ROWS],
    pub off_cpu: [u64; ROWS],
}

impl Column {
    pub fn new(interval: u64, time: String, h: &HistSet) -> Column {
        Column {
            interval,
            time,
            on_cpu: rows_of(&h.on_cpu),
            runq: rows_of(&h.runq),
            off_cpu: rows_of(&h.off_cpu),
        }
    }

    pub fn get(&self, kind: HistKind) -> &[u64; ROWS] {
        match kind {
            HistKind::OnCpu => &self.on_cpu,
            HistKind::Runq => &self.runq,
            HistKind::OffCpu => &self.off_cpu,
        }
    }
}

/// The rows worth drawing for `kind`: the first to the last non-empty over all columns,
/// widened to at least `min` rows (upwards), None when every column is empty.
pub fn row_span(cols: &[Column], kind: HistKind, min: usize) -> Option<(usize, usize)> {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for c in cols {
        for (r, &n) in c.get(kind).iter().enumerate() {
            if n > 0 {
                lo = lo.min(r);
                hi = hi.max(r);
            }
        }
    }
    if lo == usize::MAX {
        return None;
    }
    let hi = hi.max((lo + min.max(1) - 1).min(ROWS - 1));
    Some((lo, hi))
}

/// The label of row `r`: its lower bound.
pub fn row_label(r: usize) -> String {
    human_ns(row_low_ns(r))
}

/// Colour of a count on a log scale from pale yellow (1) to dark red (`max`), as
/// Gregg's heatmaps colour them: a single outlier and a busy row both stay visible.
pub fn colour(count: u64, max: u64) -> (u8, u8, u8) {
    if count == 0 || max == 0 {
        return (255, 255, 255);
    }
    let f = if max <= 1 {
        1.0
    } else {
        ((count as f64).ln() / (max as f64).ln()).clamp(0.0, 1.0)
    };
    // Yellow (255,236,160) -> orange -> dark red (160,0,0).
    let lerp = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    (lerp(255.0, 160.0), lerp(236.0, 0.0), lerp(160.0, 0.0))
}

const CELL_H: usize = 12;
const LEFT: usize = 70;
const PANEL_GAP: usize = 60;
const TOP: usize = 40;

/// Text as XML character data: [`words::escape`] first (controls are not XML), then
/// the markup characters.
fn esc(s: &str) -> String {
    words::escape(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The three heatmaps (run-queue, on-CPU, off-CPU latency) of `cols` as one SVG
/// document: one panel each with axis labels and a colour scale; each non-empty cell is a
/// `<rect>` with `data-kind`, `data-interval`, `data-row`, `data-count` and a hover
/// `<title>` (count, bucket, time).
pub fn svg(title: &str, cols: &[Column]) -> String {
    let kinds = [HistKind::Runq, HistKind::OnCpu, HistKind::OffCpu];
    let spans: Vec<Option<(usize, usize)>> = kinds.iter().map(|&k| row_span(cols, k, 4)).collect();
    let panel_h = |s: &Option<(usize, usize)>| s.map_or(1, |(lo, hi)| hi - lo + 1) * CELL_H;
    // Cells as wide as 600 px allow, between 4 and 40 px.
    let cw = (600 / cols.len().max(1)).clamp(4, 40);
    let plot_w = cols.len().max(1) * cw;
    let width = (LEFT + plot_w + 170).max(640);
    let height: usize = TOP + spans.iter().map(|s| panel_h(s) + PANEL_GAP).sum::<usize>() + 10;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">
<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>
<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let mut y0 = TOP;
    for (k, &kind) in kinds.iter().enumerate() {
        let h = panel_h(&spans[k]);
        let _ = writeln!(
            o,
            r##"<g class="panel" data-kind="{key}">
<text x="{LEFT}" y="{ty}" font-weight="bold">{name} (count per interval)</text>
<rect x="{LEFT}" y="{y0}" width="{plot_w}" height="{h}" fill="#f4f4f4" stroke="#999"/>"##,
            key = kind.key(),
            name = esc(kind.title()),
            ty = y0 - 6,
        );
        let max = cols
            .iter()
            .flat_map(|c| c.get(kind).iter().copied())
            .max()
            .unwrap_or(0);
        match spans[k] {
            None => {
                let _ = writeln!(
                    o,
                    r##"<text x="{}" y="{}" fill="#666">no events</text>"##,
                    LEFT + 4,
                    y0 + 10
                );
            }
            Some((lo, hi)) => {
                // Y axis: the lower bound of each row, the smallest at the bottom.
                for r in lo..=hi {
                    let y = y0 + (hi - r) * CELL_H;
                    let _ = writeln!(
                        o,
                        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
                        LEFT - 4,
                        y + CELL_H - 2,
                        row_label(r)
                    );
                }
                for (x, c) in cols.iter().enumerate() {
                    for r in lo..=hi {
                        let n = c.get(kind)[r];
                        if n == 0 {
                            continue;
                        }
                        let (cr, cg, cb) = colour(n, max);
                        let hi_ns = row_low_ns(r + 1).saturating_sub(1);
                        let _ = writeln!(
                            o,
                            r##"<rect class="cell" x="{}" y="{}" width="{cw}" height="{CELL_H}" fill="#{cr:02x}{cg:02x}{cb:02x}" data-kind="{key}" data-interval="{iv}" data-row="{r}" data-count="{n}"><title>{n} in {} .. {} at {} (interval {iv})</title></rect>"##,
                            LEFT + x * cw,
                            y0 + (hi - r) * CELL_H,
                            row_label(r),
                            human_ns(hi_ns),
                            esc(&c.time),
                            key = kind.key(),
                            iv = c.interval,
                        );
                    }
                }
                // Colour scale beside the panel.
                let sx = LEFT + plot_w + 20;
                let _ = writeln!(o, r#"<text x="{sx}" y="{}">count</text>"#, y0 + 8);
                // Up to 8 steps from 1 to max on the same log scale, without repeats.
                let mut steps: Vec<u64> = (0..8u32)
                    .map(|s| ((max.max(1) as f64).powf(f64::from(s) / 7.0)).round() as u64)
                    .collect();
                steps.dedup();
                for (s, &v) in steps.iter().enumerate() {
                    let (cr, cg, cb) = colour(v, max);
                    let y = y0 + 14 + s * 10;
                    let _ = writeln!(
                        o,
                        r##"<rect class="scale" x="{sx}" y="{y}" width="14" height="10" fill="#{cr:02x}{cg:02x}{cb:02x}"/><text x="{}" y="{}">{v}</text>"##,
                        sx + 18,
                        y + 9
                    );
                }
            }
        }
        // X axis: the time of every few columns.
        let every = 70usize.div_ceil(cw);
        for (x, c) in cols.iter().enumerate().filter(|(x, _)| x % every == 0) {
            let _ = writeln!(
                o,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                LEFT + x * cw + cw / 2,
                y0 + h + 14,
                esc(&c.time)
            );
        }
        let _ = writeln!(
            o,
            r##"<text x="{}" y="{}" fill="#444">time (one column per interval); rows: latency, powers of two</text>
</g>"##,
            LEFT,
            y0 + h + 28
        );
        y0 += h + PANEL_GAP;
    }
    o.push_str("</svg>\n");
    o
}

/// Writes the heatmap SVG of the run's interval reports to a file when the run ends,
/// passing every report on to `inner`. Reads only what the reports hold: no kernel cost.
pub struct HeatmapSink {
    inner: Box<dyn Sink>,
    file: std::fs::File,
    path: std::path::PathBuf,
    cols: Vec<Column>,
}

impl HeatmapSink {
    /// Creates the file now, so a path that cannot be written fails before the run (and
    /// a link another user planted in /tmp is refused: [`files::create_output`]).
    pub fn create(inner: Box<dyn Sink>, path: &Path) -> Result<HeatmapSink, TracerError> {
        Ok(HeatmapSink {
            inner,
            file: files::create_output(path)?,
            path: path.to_path_buf(),
            cols: Vec::new(),
        })
    }
}

/// Writes `cols` as an SVG to `path`.
pub fn write_svg(path: &Path, title: &str, cols: &[Column]) -> Result<(), TracerError> {
    let mut f = files::create_output(path)?;
    write_file(&mut f, path, &svg(title, cols))
}

/// `text` into the file at `path`; an error names the file (not standard output).
fn write_file(f: &mut std::fs::File, path: &Path, text: &str) -> Result<(), TracerError> {
    use std::io::Write as _;
    f.write_all(text.as_bytes())
        .and_then(|_| f.flush())
        .map_err(|source| TracerError::Write {
            path: path.to_path_buf(),
            source,
        })
}

impl Sink for HeatmapSink {
    fn start(&mut self, header: &crate::model::report::RunHeader) -> Result<(), TracerError> {
        self.inner.start(header)
    }

    fn interval(&mut self, r: &Report) -> Result<(), TracerError> {
        self.cols.push(Column::new(
            r.interval().unwrap_or(0),
            r.local_time.clone(),
            &r.histograms,
        ));
        self.inner.interval(r)
    }

    fn total(&mut self, r: &Report) -> Result<(), TracerError> {
        let title = format!(
            "tracer: scheduling latency heatmaps, {} intervals of {}",
            self.cols.len(),
            human_ns(
                self.cols
                    .first()
                    .map_or(0, |_| r.duration_ns / self.cols.len() as u64)
            )
        );
        // The report first: a heatmap that cannot be written must not lose it.
        self.inner.total(r)?;
        write_file(&mut self.file, &self.path, &svg(&title, &self.cols))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_add_up_and_buckets_do_not_straddle() {
        for i in 0..N_BUCKETS {
            let lo = bucket_lower(i);
            let hi = tracer_common::hist::bucket_upper(i);
            if i + 1 < N_BUCKETS {
                assert_eq!(row_of_ns(lo), row_of_ns(hi), "bucket {i}");
            }
        }
        let mut h = Histogram::new();
        for v in [0, 1, 2, 3, 1000, 1023, 1024, 5_000_000, u64::MAX] {
            h.record(v);
        }
        let rows = rows_of(&h);
        assert_eq!(rows.iter().sum::<u64>(), h.count());
        assert_eq!(rows[0], 1);
        assert_eq!(rows[row_of_ns(1000)], 2);
        assert_eq!(rows[row_of_ns(1024)], 1);
    }

    #[test]
    fn svg_has_a_cell_per_non_empty_row() {
        let mut h = HistSet::new();
        h.runq.record(5_000);
        h.runq.record(5_100);
        h.off_cpu.record(1_000_000);
        let cols = vec![Column::new(1, "10:00:00".into(), &h)];
        let s = svg("t", &cols);
        assert_eq!(s.matches(r#"class="cell""#).count(), 2);
        assert!(s.contains(r#"data-kind="runq" data-interval="1" data-row="13" data-count="2""#));
        assert!(s.contains("no events"), "on-CPU is empty");
    }
}
