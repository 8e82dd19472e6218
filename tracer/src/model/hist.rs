//! User-space side of the in-kernel log-linear histograms.
//!
//! The kernel programs only count values (ns) into the buckets of
//! [`tracer_common::hist`]; everything that needs arithmetic beyond an increment
//! (merging per-CPU copies, interval deltas, percentiles, bcc-style output) lives here.
//! Nothing in this module panics or overflows on any input: counts and sums saturate.

use std::fmt::Write as _;

use serde::Serialize;
use tracer_common::hist::{bucket_index, bucket_lower, bucket_upper, N_BUCKETS};

/// Counts per log-linear bucket plus the exact sum of the recorded values.
///
/// Only the non-empty buckets are kept, by index: a thread's or a process's histogram
/// holds tens of them out of `N_BUCKETS` (1216). Dense vectors made each `tracer serve`
/// scrape of 1000 processes allocate and walk about 30 MB (three kinds of 9.7 KB each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    /// (bucket index, count > 0), sorted by index.
    buckets: Vec<(u16, u64)>,
    /// Sum of all recorded values, ns (saturating), for exact means.
    pub sum_ns: u64,
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// From one count per bucket (a dense map read); counts past `N_BUCKETS` (another
    /// build of the eBPF object) are ignored.
    pub fn from_counts(counts: Vec<u64>, sum_ns: u64) -> Self {
        let buckets = counts
            .iter()
            .take(N_BUCKETS)
            .enumerate()
            .filter(|&(_, &c)| c > 0)
            .map(|(i, &c)| (i as u16, c))
            .collect();
        Self { buckets, sum_ns }
    }

    /// Adds `n` events to bucket `idx`; out-of-range indices (corrupt keys) are ignored.
    pub fn add_bucket(&mut self, idx: usize, n: u64) {
        if idx >= N_BUCKETS || n == 0 {
            return;
        }
        match self
            .buckets
            .binary_search_by_key(&(idx as u16), |&(i, _)| i)
        {
            Ok(at) => self.buckets[at].1 = self.buckets[at].1.saturating_add(n),
            Err(at) => self.buckets.insert(at, (idx as u16, n)),
        }
    }

    /// Records one value, as the kernel would.
    pub fn record(&mut self, v_ns: u64) {
        self.add_bucket(bucket_index(v_ns), 1);
        self.sum_ns = self.sum_ns.saturating_add(v_ns);
    }

    /// Adds another histogram's counts and sum (saturating).
    pub fn merge(&mut self, other: &Histogram) {
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        if other.buckets.is_empty() {
            return;
        }
        if self.buckets.is_empty() {
            self.buckets = other.buckets.clone();
            return;
        }
        let (a, b) = (&self.buckets, &other.buckets);
        let mut out = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            match (a.get(i), b.get(j)) {
                (Some(&(x, c)), Some(&(y, d))) if x == y => {
                    out.push((x, c.saturating_add(d)));
                    i += 1;
                    j += 1;
                }
                (Some(&(x, c)), Some(&(y, _))) if x < y => {
                    out.push((x, c));
                    i += 1;
                }
                (Some(_), Some(&e)) | (None, Some(&e)) => {
                    out.push(e);
                    j += 1;
                }
                (Some(&e), None) => {
                    out.push(e);
                    i += 1;
                }
                (None, None) => unreachable!("the loop's condition"),
            }
        }
        self.buckets = out;
    }

    /// `self - earlier`, per bucket, for interval reports from cumulative maps.
    /// Saturates at zero so a reset or recycled map entry yields an empty interval
    /// rather than a huge bogus count.
    pub fn saturating_sub(&self, earlier: &Histogram) -> Histogram {
        let mut e = earlier.buckets.iter().peekable();
        let buckets = self
            .buckets
            .iter()
            .filter_map(|&(i, c)| {
                while e.next_if(|&&(x, _)| x < i).is_some() {}
                let then = e.next_if(|&&(x, _)| x == i).map_or(0, |&(_, d)| d);
                let d = c.saturating_sub(then);
                (d > 0).then_some((i, d))
            })
            .collect();
        Histogram {
            buckets,
            sum_ns: self.sum_ns.saturating_sub(earlier.sum_ns),
        }
    }

    /// Raises `self` so that no bucket is below `earlier`'s (an interval is the
    /// difference of two reads and cannot hold a negative count), without counting a
    /// value twice: a wait an earlier read counted as pending, estimated into one
    /// bucket, that this read has settled into another is one wait. The count is the
    /// larger of the two reads'; what the raise adds above it is taken back from the
    /// buckets where this read is above `earlier`, nearest first.
    pub fn raise_to(&mut self, earlier: &Histogram) {
        let target = self.count().max(earlier.count());
        let mut raised = Vec::new();
        for &(i, then) in &earlier.buckets {
            let now = self.bucket(i as usize);
            if then > now {
                self.add_bucket(i as usize, then - now);
                raised.push((i, then - now));
            }
        }
        let mut excess = self.count().saturating_sub(target);
        for (at, mut n) in raised {
            while excess > 0 && n > 0 {
                // The nearest bucket this read holds more in than `earlier` does.
                let Some(&(j, c)) = self
                    .buckets
                    .iter()
                    .filter(|&&(j, c)| c > earlier.bucket(j as usize))
                    .min_by_key(|&&(j, _)| j.abs_diff(at))
                else {
                    return;
                };
                let take = (c - earlier.bucket(j as usize)).min(excess).min(n);
                self.take_bucket(j as usize, take);
                excess -= take;
                n -= take;
            }
        }
    }

    /// Removes `n` events from bucket `idx` (saturating at empty).
    fn take_bucket(&mut self, idx: usize, n: u64) {
        if let Ok(at) = self
            .buckets
            .binary_search_by_key(&(idx as u16), |&(i, _)| i)
        {
            self.buckets[at].1 = self.buckets[at].1.saturating_sub(n);
            if self.buckets[at].1 == 0 {
                self.buckets.remove(at);
            }
        }
    }

    /// Number of recorded values (saturating).
    pub fn count(&self) -> u64 {
        self.iter().fold(0u64, |a, (_, c)| a.saturating_add(c))
    }

    pub fn is_empty(&self) -> bool {
        self.iter().all(|(_, c)| c == 0)
    }

    /// The value at rank `ceil(q/100 * count)` (at least rank 1), estimated as the
    /// midpoint of its bucket: exact below 64 ns, within half a sub-bucket (1.6%)
    /// above, and the lower bound for the open-ended last bucket. `q` is clamped to
    /// [0, 100]; `None` when empty or `q` is NaN.
    pub fn percentile(&self, q: f64) -> Option<u64> {
        if q.is_nan() {
            return None;
        }
        let total = self.count();
        if total == 0 {
            return None;
        }
        // q in millionths of the count: exact for q with up to four decimals (99.99),
        // where a float product such as 0.999 * 1000 could round up past the rank.
        let q_millionths = (q.clamp(0.0, 100.0) * 10_000.0).round() as u128;
        let rank = (q_millionths * u128::from(total)).div_ceil(1_000_000);
        let rank = rank.clamp(1, u128::from(total));
        let mut cum: u128 = 0;
        for (i, c) in self.iter() {
            cum += u128::from(c);
            if c > 0 && cum >= rank {
                return Some(bucket_estimate(i));
            }
        }
        self.max()
    }

    /// Estimate of the largest value: midpoint of the highest non-empty bucket (its
    /// lower bound for the open-ended last bucket).
    pub fn max(&self) -> Option<u64> {
        self.iter()
            .filter(|&(_, c)| c > 0)
            .last()
            .map(|(i, _)| bucket_estimate(i))
    }

    /// Count, sum, the usual percentiles and the non-empty buckets, for JSON output.
    pub fn summary(&self) -> HistSummary {
        HistSummary {
            count: self.count(),
            sum_ns: self.sum_ns,
            p50_ns: self.percentile(50.0),
            p90_ns: self.percentile(90.0),
            p99_ns: self.percentile(99.0),
            p999_ns: self.percentile(99.9),
            max_ns: self.max(),
            buckets: self
                .iter()
                .filter(|&(_, c)| c > 0)
                .map(|(i, count)| BucketCount {
                    le_ns: bucket_upper(i),
                    count,
                })
                .collect(),
        }
    }

    /// Folds the buckets into bcc's power-of-two rows in `unit`, from the `0 -> 1` row
    /// through the last non-empty one (bcc prints the empty rows in between too).
    ///
    /// Each bucket goes whole to the row holding its midpoint converted to `unit`
    /// (integer division, as bcc does). Unit boundaries (powers of two of us or ms) do
    /// not fall on bucket boundaries, so a bucket straddling one lands on one side: the
    /// misplaced values are within one sub-bucket (1/32, 3.1%) of the row boundary.
    pub fn log2_rows(&self, unit: Unit) -> Vec<Log2Row> {
        // Indexed by bcc slot; slot 0 stays empty (bcc puts 0 and 1 both in slot 1).
        let mut slots = [0u64; 66];
        for (i, c) in self.iter().filter(|&(_, c)| c > 0) {
            let s = bcc_slot(bucket_estimate(i) / unit.ns());
            slots[s] = slots[s].saturating_add(c);
        }
        let Some(last) = slots.iter().rposition(|&c| c > 0) else {
            return Vec::new();
        };
        (1..=last)
            .map(|k| {
                let (low, high) = slot_range(k);
                Log2Row {
                    low,
                    high,
                    count: slots[k],
                }
            })
            .collect()
    }

    /// Bucket `i`'s count.
    pub fn bucket(&self, i: usize) -> u64 {
        let Ok(i) = u16::try_from(i) else { return 0 };
        self.buckets
            .binary_search_by_key(&i, |&(x, _)| x)
            .map_or(0, |at| self.buckets[at].1)
    }

    /// (bucket index, count) of the non-empty buckets, by index.
    pub fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.buckets.iter().map(|&(i, c)| (i as usize, c))
    }

    fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.nonzero()
    }
}

/// Representative value of bucket `i`: its midpoint, or its lower bound when the
/// bucket is the open-ended last one (a midpoint up to u64::MAX would be meaningless).
fn bucket_estimate(i: usize) -> u64 {
    let lo = bucket_lower(i);
    if i + 1 >= N_BUCKETS {
        return lo;
    }
    lo + (bucket_upper(i) - lo) / 2
}

/// bcc's slot for a value already in the display unit: `bpf_log2l`, i.e.
/// floor(log2(v)) + 1, with 0 sharing slot 1 with 1.
fn bcc_slot(v: u64) -> usize {
    if v <= 1 {
        1
    } else {
        (64 - v.leading_zeros()) as usize
    }
}

/// Inclusive bounds bcc prints for slot `k` >= 1: `2^(k-1) -> 2^k - 1`, except slot 1,
/// which holds 0 and 1 and is labelled `0 -> 1`.
fn slot_range(k: usize) -> (u64, u64) {
    if k <= 1 {
        return (0, 1);
    }
    let low = 1u64.checked_shl(k as u32 - 1).unwrap_or(u64::MAX);
    let high = 1u64
        .checked_shl(k as u32)
        .map_or(u64::MAX, |p| p.wrapping_sub(1));
    (low, high)
}

/// Histogram digest for JSON reports.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct HistSummary {
    pub count: u64,
    pub sum_ns: u64,
    pub p50_ns: Option<u64>,
    pub p90_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    pub max_ns: Option<u64>,
    /// Non-empty buckets only, in increasing order.
    pub buckets: Vec<BucketCount>,
}

/// One non-empty bucket, Prometheus-style: values `<= le_ns` and above the previous
/// bucket's bound. The open-ended last bucket has `le_ns == u64::MAX`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct BucketCount {
    pub le_ns: u64,
    pub count: u64,
}

/// Display unit of the bcc-style log2 histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Usecs,
    Msecs,
}

impl Unit {
    /// Nanoseconds per unit.
    pub fn ns(self) -> u64 {
        match self {
            Unit::Usecs => 1_000,
            Unit::Msecs => 1_000_000,
        }
    }

    /// Column label bcc uses.
    pub fn label(self) -> &'static str {
        match self {
            Unit::Usecs => "usecs",
            Unit::Msecs => "msecs",
        }
    }
}

/// One bcc power-of-two row, bounds inclusive and in the row's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log2Row {
    pub low: u64,
    pub high: u64,
    pub count: u64,
}

/// bcc's row layout: narrow up to slot 32 (values below 2^32 units), wide beyond.
const BCC_NARROW_MAX_SLOT: usize = 32;
/// Bar width of bcc's narrow layout; the wide one uses half.
const STARS_MAX: u64 = 40;

/// Renders `h` the way bcc's runqlat/cpudist print a log2 histogram, so existing
/// habits and scripts keep working, followed by a percentile line bcc cannot give:
///
/// ```text
/// <title>
///      usecs               : count    distribution
///          0 -> 1          : 4        |****************************************|
///          2 -> 3          : 2        |********************                    |
///   p50 999ns  p90 2.98us  p99 2.98us  p99.9 2.98us  max 2.98us  (count 6)
/// ```
///
/// The title line is omitted when `title` is empty. An empty histogram gives the
/// single line `<title>: no events`. Every line ends with a newline.
pub fn format_bcc(title: &str, h: &Histogram, unit: Unit) -> String {
    let rows = h.log2_rows(unit);
    if rows.is_empty() {
        return if title.is_empty() {
            "no events\n".to_string()
        } else {
            format!("{title}: no events\n")
        };
    }
    let mut out = String::new();
    if !title.is_empty() {
        let _ = writeln!(out, "{title}");
    }
    // rows[j] is bcc slot j + 1.
    let narrow = rows.len() <= BCC_NARROW_MAX_SLOT;
    let (pad, label_w, num_w, stars) = if narrow {
        (5, 19, 10, STARS_MAX)
    } else {
        (15, 29, 20, STARS_MAX / 2)
    };
    let _ = writeln!(
        out,
        "{:pad$}{:<label_w$} : count    distribution",
        "",
        unit.label()
    );
    let peak = rows.iter().map(|r| r.count).max().unwrap_or(0).max(1);
    for r in &rows {
        let n = (u128::from(r.count) * u128::from(stars) / u128::from(peak)) as usize;
        let _ = writeln!(
            out,
            "{:>num_w$} -> {:<num_w$} : {:<8} |{:<bar_w$}|",
            r.low,
            r.high,
            r.count,
            "*".repeat(n),
            bar_w = stars as usize
        );
    }
    let p = |q| h.percentile(q).map_or_else(|| "-".to_string(), human_ns);
    let _ = writeln!(
        out,
        "  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}  (count {})",
        p(50.0),
        p(90.0),
        p(99.0),
        p(99.9),
        h.max().map_or_else(|| "-".to_string(), human_ns),
        h.count()
    );
    out
}

/// A duration with three significant digits in the largest unit that keeps it at or
/// above 1: "850ns", "12.3us", "4.56ms", "1.23s". Seconds stop at three digits'
/// precision only up to 999 s; longer durations print whole seconds ("4000s").
pub fn human_ns(ns: u64) -> String {
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    const UNITS: [(u128, &str); 3] = [(1_000, "us"), (1_000_000, "ms"), (1_000_000_000, "s")];
    let ns = u128::from(ns);
    for (k, &(div, name)) in UNITS.iter().enumerate() {
        // Rounded at 2, 1, then 0 decimals; the first that stays below 1000 has three
        // significant digits. Rounding up to 1000 moves on to the next unit.
        let r2 = (ns * 100 + div / 2) / div;
        if r2 < 1_000 {
            return format!("{}.{:02}{name}", r2 / 100, r2 % 100);
        }
        let r1 = (ns * 10 + div / 2) / div;
        if r1 < 1_000 {
            return format!("{}.{}{name}", r1 / 10, r1 % 10);
        }
        let r0 = (ns + div / 2) / div;
        if r0 < 1_000 || k + 1 == UNITS.len() {
            return format!("{r0}{name}");
        }
    }
    // Unreachable: the seconds unit always returns.
    format!("{ns}ns")
}

#[cfg(test)]
mod tests;
