//! Summaries of samples (median, extremes, rounding, the JSON spread) and the printed
//! table layout, shared by every table and file of the bench.

use serde::Serialize;

pub(super) fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub(super) fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::min)
}

pub(super) fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

pub(super) fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

/// Median, extremes and every sample, rounded to `digits` decimals. NaN (no samples) is
/// written as null.
#[derive(Serialize)]
pub(super) struct Spread {
    median: f64,
    min: f64,
    max: f64,
    samples: Vec<f64>,
}

pub(super) fn spread(v: &[f64], digits: i32) -> Spread {
    Spread {
        median: round(median(v), digits),
        min: round(min(v), digits),
        max: round(max(v), digits),
        samples: v.iter().map(|&x| round(x, digits)).collect(),
    }
}

pub(super) fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                if c < 2 {
                    format!("{s:<w$}", w = width[c])
                } else {
                    format!("{s:>w$}", w = width[c])
                }
            })
            .collect();
        println!("  {}", line.join("  ").trim_end());
        if i == 0 {
            println!(
                "  {}",
                width
                    .iter()
                    .map(|&w| "-".repeat(w))
                    .collect::<Vec<_>>()
                    .join("  ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn spreads_round_and_write_no_samples_as_null() {
        // to_string, not to_value: the file keeps the struct's field order.
        assert_eq!(
            serde_json::to_string(&spread(&[1.04, 2.0, 4.0], 1)).unwrap(),
            r#"{"median":2.0,"min":1.0,"max":4.0,"samples":[1.0,2.0,4.0]}"#
        );
        assert_eq!(
            serde_json::to_string(&spread(&[], 1)).unwrap(),
            r#"{"median":null,"min":null,"max":null,"samples":[]}"#
        );
    }
}
