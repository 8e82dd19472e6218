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
            // Never below the earlier read, never above either read.
            assert!(r.bucket(i) >= b && r.bucket(i) <= a.max(b));
        }
        assert_eq!(r.count(), h[0].count().max(h[1].count()));
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

#[test]
fn raising_to_an_earlier_read_counts_a_moved_value_once() {
    // A wait the earlier read counted as pending in bucket 5, settled into bucket 9.
    let mut earlier = Histogram::new();
    earlier.add_bucket(5, 3);
    let mut now = Histogram::new();
    now.add_bucket(5, 2);
    now.add_bucket(9, 2);
    now.raise_to(&earlier);
    assert_eq!((now.bucket(5), now.bucket(9), now.count()), (3, 1, 4));
    // Nothing moved: the per-bucket maximum, as before.
    let mut grown = Histogram::new();
    grown.add_bucket(5, 4);
    grown.raise_to(&earlier);
    assert_eq!((grown.bucket(5), grown.count()), (4, 4));
    // A read below the earlier one (a running slice never confirmed) keeps the earlier.
    let mut less = Histogram::new();
    less.add_bucket(5, 1);
    less.raise_to(&earlier);
    assert_eq!((less.bucket(5), less.count()), (3, 3));
}
