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

    /// Per bucket, the larger of `self`'s count and `earlier`'s.
    pub fn raise_to(&mut self, earlier: &Histogram) {
        for &(i, then) in &earlier.buckets {
            let now = self.bucket(i as usize);
            if then > now {
                self.add_bucket(i as usize, then - now);
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
mod tests {
    use super::*;
    use tracer_common::hist::{MAX_MSB, SUB};

    const LAST: usize = N_BUCKETS - 1;

    #[test]
    fn every_bucket_round_trips_and_buckets_are_contiguous() {
        assert_eq!(bucket_lower(0), 0);
        for i in 0..N_BUCKETS {
            let (lo, hi) = (bucket_lower(i), bucket_upper(i));
            assert!(lo <= hi, "bucket {i}");
            assert_eq!(bucket_index(lo), i, "lower of {i}");
            assert_eq!(bucket_index(hi), i, "upper of {i}");
            if i + 1 < N_BUCKETS {
                assert_eq!(bucket_lower(i + 1), hi + 1, "gap after {i}");
            }
        }
        assert_eq!(bucket_upper(LAST), u64::MAX);
    }

    #[test]
    fn bucket_edges() {
        for v in 0..SUB {
            assert_eq!(bucket_index(v), v as usize);
            assert_eq!(bucket_lower(v as usize), v);
            assert_eq!(bucket_upper(v as usize), v);
        }
        assert_eq!(bucket_index(31), 31);
        assert_eq!(bucket_index(32), 32);
        assert_eq!(bucket_index(63), 63);
        assert_eq!(bucket_index(64), 64);
        assert_eq!(bucket_index(65), 64);
        assert_eq!(bucket_index(66), 65);
        for p in 5..64u32 {
            let pow = 1u64 << p;
            if p <= MAX_MSB {
                let i = bucket_index(pow);
                assert_eq!(bucket_lower(i), pow, "2^{p} starts a bucket");
                assert_eq!(bucket_index(pow - 1), i - 1, "2^{p}-1");
                // Buckets at 2^5 are one value wide, from 2^6 on at least two.
                let next = if p > 5 { i } else { i + 1 };
                assert_eq!(bucket_index(pow + 1), next, "2^{p}+1");
                assert_eq!(i % SUB as usize, 0);
            } else {
                assert_eq!(bucket_index(pow - 1), LAST, "2^{p}-1");
                assert_eq!(bucket_index(pow), LAST, "2^{p}");
                assert_eq!(bucket_index(pow + 1), LAST, "2^{p}+1");
            }
        }
        assert_eq!(bucket_index(u64::MAX), LAST);
        let last_lo = bucket_lower(LAST);
        assert_eq!(bucket_index(last_lo), LAST);
        assert_eq!(bucket_index(last_lo - 1), LAST - 1);
        // Bucket width never exceeds 1/32 of its lower bound.
        for i in SUB as usize..LAST {
            assert!((bucket_upper(i) - bucket_lower(i) + 1) * SUB <= bucket_lower(i));
        }
    }

    #[test]
    fn estimates_are_exact_below_64_and_inside_the_bucket() {
        for v in 0..64 {
            assert_eq!(bucket_estimate(bucket_index(v)), v);
        }
        for i in 0..LAST {
            let m = bucket_estimate(i);
            assert!(bucket_lower(i) <= m && m <= bucket_upper(i));
        }
        assert_eq!(bucket_estimate(LAST), bucket_lower(LAST));
    }

    #[test]
    fn constructors_and_lengths() {
        let h = Histogram::new();
        assert_eq!(h, Histogram::default());
        assert!(h.is_empty());
        assert_eq!(h.count(), 0);
        let short = Histogram::from_counts(vec![0, 2], 2);
        assert_eq!((short.count(), short.bucket(1), short.bucket(0)), (2, 2, 0));
        assert_eq!(short.percentile(100.0), Some(1));
        let long = Histogram::from_counts(vec![1; N_BUCKETS + 10], 0);
        assert_eq!(
            long.count(),
            N_BUCKETS as u64,
            "counts past N_BUCKETS ignored"
        );
        assert_eq!(long.bucket(N_BUCKETS), 0);

        let mut h = Histogram::new();
        h.add_bucket(N_BUCKETS, 5);
        h.add_bucket(usize::MAX, 5);
        h.add_bucket(3, 0);
        assert!(h.is_empty());
        assert!(h.buckets.is_empty(), "no empty bucket is kept");
        h.add_bucket(LAST, u64::MAX);
        h.add_bucket(LAST, 1);
        assert_eq!(h.bucket(LAST), u64::MAX);
        h.add_bucket(0, 1);
        assert_eq!(h.count(), u64::MAX);
        assert!(h.percentile(50.0).is_some());
        // Kept by index whatever the order of the adds.
        let mut o = Histogram::new();
        for i in [700, 3, 1215, 3, 0, 64] {
            o.add_bucket(i, 1);
        }
        let idx: Vec<usize> = o.nonzero().map(|(i, _)| i).collect();
        assert_eq!(idx, [0, 3, 64, 700, 1215]);
        assert_eq!(o.bucket(3), 2);
    }

    /// The sparse operations against the dense definition, bucket by bucket.
    #[test]
    fn merge_sub_and_raise_agree_with_the_dense_arithmetic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..200 {
            let mut dense = [vec![0u64; N_BUCKETS], vec![0u64; N_BUCKETS]];
            let mut h = [Histogram::new(), Histogram::new()];
            for k in 0..2 {
                for _ in 0..(next() % 40) {
                    let (i, n) = ((next() % 80) as usize * 15, next() % 5);
                    dense[k][i] += n;
                    h[k].add_bucket(i, n);
                }
            }
            let mut m = h[0].clone();
            m.merge(&h[1]);
            let d = h[0].saturating_sub(&h[1]);
            let mut r = h[0].clone();
            r.raise_to(&h[1]);
            for (i, (&a, &b)) in dense[0].iter().zip(&dense[1]).enumerate() {
                assert_eq!(m.bucket(i), a + b);
                assert_eq!(d.bucket(i), a.saturating_sub(b));
                assert_eq!(r.bucket(i), a.max(b));
            }
            for x in [&m, &d, &r] {
                assert!(x.buckets.windows(2).all(|w| w[0].0 < w[1].0));
                assert!(x.buckets.iter().all(|&(_, c)| c > 0));
            }
        }
    }

    #[test]
    fn record_saturates_sum() {
        let mut h = Histogram::new();
        h.record(u64::MAX);
        h.record(u64::MAX);
        assert_eq!(h.sum_ns, u64::MAX);
        assert_eq!(h.bucket(LAST), 2);
        assert_eq!(h.max(), Some(bucket_lower(LAST)));
        assert_eq!(h.percentile(50.0), Some(bucket_lower(LAST)));
    }

    #[test]
    fn percentiles_of_a_single_value() {
        let mut h = Histogram::new();
        h.record(17);
        for q in [0.0, 1.0, 50.0, 99.9, 100.0, -5.0, 250.0, f64::INFINITY] {
            assert_eq!(h.percentile(q), Some(17), "q={q}");
        }
        assert_eq!(h.percentile(f64::NAN), None);
        assert_eq!(h.max(), Some(17));

        let mut h = Histogram::new();
        h.record(1_000_000);
        let est = h.percentile(50.0).unwrap_or(0);
        let i = bucket_index(1_000_000);
        assert!(bucket_lower(i) <= est && est <= bucket_upper(i));
        assert!(est.abs_diff(1_000_000) * 64 <= 1_000_000);
    }

    #[test]
    fn percentiles_all_equal_and_empty() {
        let mut h = Histogram::new();
        for _ in 0..1000 {
            h.record(42);
        }
        for q in [0.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            assert_eq!(h.percentile(q), Some(42));
        }
        let e = Histogram::new();
        assert_eq!(e.percentile(50.0), None);
        assert_eq!(e.max(), None);
        let s = e.summary();
        assert_eq!((s.count, s.p50_ns, s.max_ns), (0, None, None));
        assert!(s.buckets.is_empty());
    }

    #[test]
    fn percentile_ranks_are_exact() {
        // 10 exact values 1..=10: p50 is rank 5, p90 rank 9, p91 rank ceil(9.1) = 10.
        let mut h = Histogram::new();
        for v in 1..=10 {
            h.record(v);
        }
        assert_eq!(h.percentile(0.0), Some(1));
        assert_eq!(h.percentile(10.0), Some(1));
        assert_eq!(h.percentile(10.01), Some(2));
        assert_eq!(h.percentile(50.0), Some(5));
        assert_eq!(h.percentile(90.0), Some(9));
        assert_eq!(h.percentile(91.0), Some(10));
        assert_eq!(h.percentile(100.0), Some(10));
        // 1000 values: p99.9 is rank 999 exactly, not 1000 through float rounding.
        let mut h = Histogram::new();
        for v in 0..1000u64 {
            h.record(if v < 999 { 5 } else { 30 });
        }
        assert_eq!(h.percentile(99.9), Some(5));
        assert_eq!(h.percentile(99.91), Some(30));
    }

    #[test]
    fn percentiles_of_uniform_data() {
        let mut h = Histogram::new();
        let n = 100_000u64;
        for v in 1..=n {
            h.record(v);
        }
        assert_eq!(h.count(), n);
        assert_eq!(h.sum_ns, n * (n + 1) / 2);
        for (q, truth) in [
            (50.0, 50_000u64),
            (90.0, 90_000),
            (99.0, 99_000),
            (99.9, 99_900),
        ] {
            let est = h.percentile(q).unwrap_or(0);
            let err = est.abs_diff(truth) as f64 / truth as f64;
            assert!(err <= 0.032, "p{q}: {est} vs {truth} ({err})");
        }
        let max = h.max().unwrap_or(0);
        assert!(max.abs_diff(n) as f64 / n as f64 <= 0.032);
        let s = h.summary();
        assert_eq!(s.count, n);
        assert_eq!(s.p999_ns, h.percentile(99.9));
        assert_eq!(s.buckets.iter().map(|b| b.count).sum::<u64>(), n);
        assert!(s.buckets.windows(2).all(|w| w[0].le_ns < w[1].le_ns));
        assert_eq!(
            s.buckets.last().map(|b| b.le_ns),
            Some(bucket_upper(bucket_index(n)))
        );
    }

    #[test]
    fn summary_uses_inclusive_upper_bounds() {
        let mut h = Histogram::new();
        h.record(5);
        h.record(100);
        h.record(u64::MAX);
        let s = h.summary();
        let les: Vec<u64> = s.buckets.iter().map(|b| b.le_ns).collect();
        assert_eq!(les, vec![5, 101, u64::MAX]);
        let json = serde_json::to_string(&s).unwrap_or_default();
        assert!(json.contains("\"le_ns\":18446744073709551615"), "{json}");
    }

    #[test]
    fn merge_and_sub() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(10);
        a.record(1_000);
        b.record(1_000);
        b.record(u64::MAX);
        let mut m = a.clone();
        m.merge(&b);
        assert_eq!(m.count(), 4);
        assert_eq!(m.bucket(bucket_index(1_000)), 2);
        assert_eq!(m.sum_ns, u64::MAX);
        assert_eq!(m.saturating_sub(&a).buckets, b.buckets);
        // Earlier larger than later (reset map): zero, never wrap.
        let d = a.saturating_sub(&m);
        assert!(d.is_empty());
        assert_eq!(d.sum_ns, 0);
        // Interval of a cumulative histogram.
        let mut later = a.clone();
        later.record(7);
        let d = later.saturating_sub(&a);
        assert_eq!(d.count(), 1);
        assert_eq!(d.sum_ns, 7);
        assert_eq!(d.percentile(50.0), Some(7));
    }

    #[test]
    fn log2_rows_preserve_counts() {
        let mut h = Histogram::new();
        let mut x = 1u64;
        for _ in 0..5_000 {
            // Cheap LCG spread over many magnitudes.
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            h.record(x >> (x % 40 + 20));
        }
        h.record(0);
        h.record(u64::MAX);
        for unit in [Unit::Usecs, Unit::Msecs] {
            let rows = h.log2_rows(unit);
            assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), h.count());
            assert_eq!((rows[0].low, rows[0].high), (0, 1));
            for w in rows.windows(2) {
                assert_eq!(w[1].low, w[0].high + 1);
            }
            assert!(rows.last().is_some_and(|r| r.count > 0));
        }
        assert!(Histogram::new().log2_rows(Unit::Usecs).is_empty());
    }

    #[test]
    fn log2_rows_placement() {
        let row_of = |v_ns: u64, unit: Unit| {
            let mut h = Histogram::new();
            h.record(v_ns);
            let rows = h.log2_rows(unit);
            let r = rows.iter().find(|r| r.count > 0).copied();
            (r.map(|r| (r.low, r.high)), rows.len())
        };
        // bcc labels the row holding 0 and 1 "0 -> 1"; 1500 ns is 1 us.
        assert_eq!(row_of(1_500, Unit::Usecs), (Some((0, 1)), 1));
        assert_eq!(row_of(0, Unit::Usecs), (Some((0, 1)), 1));
        assert_eq!(row_of(999, Unit::Usecs), (Some((0, 1)), 1));
        assert_eq!(row_of(2_500, Unit::Usecs), (Some((2, 3)), 2));
        assert_eq!(row_of(5_000_000, Unit::Usecs), (Some((4096, 8191)), 13));
        assert_eq!(row_of(5_000_000, Unit::Msecs), (Some((4, 7)), 3));
        assert_eq!(row_of(300, Unit::Msecs), (Some((0, 1)), 1));
        // The open-ended bucket folds at its lower bound: 63 * 2^36 ns.
        let top_us = bucket_lower(LAST) / 1_000;
        let k = 64 - top_us.leading_zeros() as usize;
        assert_eq!(
            row_of(u64::MAX, Unit::Usecs),
            (Some((1 << (k - 1), (1 << k) - 1)), k)
        );
    }

    #[test]
    fn slot_helpers() {
        assert_eq!(bcc_slot(0), 1);
        assert_eq!(bcc_slot(1), 1);
        assert_eq!(bcc_slot(2), 2);
        assert_eq!(bcc_slot(3), 2);
        assert_eq!(bcc_slot(4), 3);
        assert_eq!(bcc_slot(u64::MAX), 64);
        assert_eq!(slot_range(1), (0, 1));
        assert_eq!(slot_range(2), (2, 3));
        assert_eq!(slot_range(13), (4096, 8191));
        assert_eq!(slot_range(64), (1 << 63, u64::MAX));
        assert_eq!(slot_range(65), (u64::MAX, u64::MAX));
    }

    #[test]
    fn format_bcc_golden() {
        let mut h = Histogram::new();
        for v in [0, 400, 999, 1_500] {
            h.record(v); // 0 -> 1 us
        }
        h.record(3_000); // 2 -> 3
        h.record(3_000);
        h.record(40_000); // 32 -> 63, leaving 4 -> 31 empty
        let expected = "\
runq latency
     usecs               : count    distribution
         0 -> 1          : 4        |****************************************|
         2 -> 3          : 2        |********************                    |
         4 -> 7          : 0        |                                        |
         8 -> 15         : 0        |                                        |
        16 -> 31         : 0        |                                        |
        32 -> 63         : 1        |**********                              |
  p50 1.49us  p90 40.4us  p99 40.4us  p99.9 40.4us  max 40.4us  (count 7)
";
        assert_eq!(format_bcc("runq latency", &h, Unit::Usecs), expected);

        let ms = format_bcc("", &h, Unit::Msecs);
        assert_eq!(
            ms,
            "     msecs               : count    distribution\n         0 -> 1          : 7        |****************************************|\n  p50 1.49us  p90 40.4us  p99 40.4us  p99.9 40.4us  max 40.4us  (count 7)\n"
        );
    }

    #[test]
    fn format_bcc_empty_and_wide() {
        let e = Histogram::new();
        assert_eq!(
            format_bcc("off-CPU", &e, Unit::Usecs),
            "off-CPU: no events\n"
        );
        assert_eq!(format_bcc("", &e, Unit::Msecs), "no events\n");

        // Beyond 2^32 units bcc switches to 20-wide numbers and a 20-star bar.
        let mut h = Histogram::new();
        h.record(u64::MAX);
        let out = format_bcc("", &h, Unit::Usecs);
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some("               usecs                         : count    distribution")
        );
        assert_eq!(
            lines.next(),
            Some("                   0 -> 1                    : 0        |                    |")
        );
        assert!(out.contains(": 1        |********************|"));
        assert_eq!(out.lines().count(), 1 + 33 + 1);
    }

    #[test]
    fn human_ns_formats() {
        let cases = [
            (0, "0ns"),
            (850, "850ns"),
            (999, "999ns"),
            (1_000, "1.00us"),
            (1_234, "1.23us"),
            (1_235, "1.24us"),
            (9_994, "9.99us"),
            (9_995, "10.0us"),
            (12_345, "12.3us"),
            (99_949, "99.9us"),
            (99_950, "100us"),
            (123_456, "123us"),
            (999_499, "999us"),
            (999_500, "1.00ms"),
            (4_560_000, "4.56ms"),
            (1_230_000_000, "1.23s"),
            (999_500_000_000, "1000s"),
            (4_000_000_000_000, "4000s"),
            (u64::MAX, "18446744074s"),
        ];
        for (ns, s) in cases {
            assert_eq!(human_ns(ns), s, "{ns}");
        }
    }
}
