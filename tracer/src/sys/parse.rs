//! Parsers for the values users type: durations, counts, numbers in any base.
use std::time::Duration;

use crate::error::TracerError;

/// What a DURATION is, for the help of every option that takes one.
pub const DURATION_HELP: &str =
    "DURATION: a number and a unit: ns, us, ms, s (sec, secs), m (min) or h, \
     e.g. 5s, 250ms, 1.5m, 1e6us; a bare number is seconds (5 and `5 s` are 5s), as timeout(1) \
     and the bcc tools read it";

/// Parses a duration: `5s`, `250ms`, `1.5s`, `2m`, `1h`, `100us`, `10ns`, `1e6us`; a bare
/// number is seconds (as timeout(1), `perf stat -- sleep 5` and bcc's `runqlat 5`
/// read one), and a space may come before the unit. Rejects negative, non-finite and
/// absurd (over a year) values.
pub fn parse_duration(s: &str) -> Result<Duration, TracerError> {
    let bad = |why: &str| TracerError::BadDuration {
        input: s.to_string(),
        why: why.to_string(),
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(bad("empty"));
    }
    if t.starts_with('-') {
        return Err(bad("a duration cannot be negative"));
    }
    // Digits and dots, then an optional exponent (`1e9`, `2.5E-3`).
    let mut split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    if split > 0 {
        let rest = &t.as_bytes()[split..];
        if let [b'e' | b'E', tail @ ..] = rest {
            let sign = usize::from(matches!(tail.first(), Some(b'+' | b'-')));
            let digits = tail[sign..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count();
            if digits > 0 {
                split += 1 + sign + digits;
            }
        }
    }
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad("expected a number first, e.g. 5s"));
    }
    let v: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let scale_ns: f64 = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return Err(bad("unknown unit (use ns, us, ms, s, m or h)")),
    };
    let ns = v * scale_ns;
    if !ns.is_finite() || ns > 366.0 * 86400e9 {
        return Err(bad("too long (at most a year)"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// `-d` of a tracing command: a [`parse_duration`] above zero. A window of 0 is not a
/// trace of nothing but a few milliseconds of start-up; say what to give instead.
pub fn parse_window(s: &str) -> Result<Duration, TracerError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(TracerError::BadDuration {
            input: s.to_string(),
            why: "a window of 0 traces nothing; give one above 0 (e.g. -d 1s), or no -d to \
                  trace until Ctrl-C"
                .to_string(),
        });
    }
    Ok(d)
}

/// `--top N`: a whole number, 0 for all (a negative one is refused here, not taken for
/// an option).
pub fn parse_top(s: &str) -> Result<usize, TracerError> {
    s.trim().parse::<usize>().map_err(|_| {
        TracerError::BadOption(format!(
            "--top {s:?}: expected a whole number of rows (0: all)"
        ))
    })
}

/// Shortest `-i`: each report reads every map, and perf stat -I has the same floor.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// `-i`: a duration of at least [`MIN_INTERVAL`] (0 would be a busy loop; tokio refuses it).
pub fn parse_interval(s: &str) -> Result<Duration, TracerError> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(TracerError::BadOption(format!(
            "the interval must be at least {}ms",
            MIN_INTERVAL.as_millis()
        )));
    }
    Ok(d)
}

/// `--count`: a positive whole number.
pub fn parse_count(s: &str) -> Result<u64, TracerError> {
    let bad = |why: &str| TracerError::BadOption(why.to_string());
    match s.trim().parse::<u64>() {
        Ok(0) => Err(bad("at least 1 interval")),
        Ok(n) => Ok(n),
        Err(_) => Err(bad("expected a whole number of intervals, e.g. 5")),
    }
}

/// Largest `--max-threads`: the kernel's PID_MAX_LIMIT, more threads than can exist.
pub const MAX_THREADS_LIMIT: u32 = 4 * 1024 * 1024;

/// `--max-threads`: 1 ..= [`MAX_THREADS_LIMIT`].
pub fn parse_max_threads(s: &str) -> Result<u32, TracerError> {
    let bad = TracerError::BadOption;
    let range = || format!("expected a whole number from 1 to {MAX_THREADS_LIMIT}");
    match s.trim().parse::<u64>() {
        Ok(0) => Err(bad(format!(
            "the maps need room for at least 1 thread; {}",
            range()
        ))),
        Ok(n) if n > MAX_THREADS_LIMIT as u64 => Err(bad(format!(
            "more threads than Linux can have (PID_MAX_LIMIT {MAX_THREADS_LIMIT}); {}",
            range()
        ))),
        Ok(n) => Ok(n as u32),
        Err(_) => Err(bad(range())),
    }
}

/// Largest `--stack-entries`: a slot holds a 127-frame stack (~1 KiB), so this is
/// 4 GiB of kernel memory, and the map's ids stay below the spill map's mark (2^29).
pub const MAX_STACK_ENTRIES: u32 = 1 << 22;

/// `--stack-entries`: 1 ..= [`MAX_STACK_ENTRIES`] slots (its own words: it counts
/// stacks, not threads).
pub fn parse_stack_entries(s: &str) -> Result<u32, TracerError> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=MAX_STACK_ENTRIES as u64).contains(&n) => Ok(n as u32),
        _ => Err(TracerError::BadOption(format!(
            "expected a whole number of stack map slots from 1 to {MAX_STACK_ENTRIES}"
        ))),
    }
}

/// Parses `0x10`, `0o17`, `0b101` or decimal.
pub fn parse_u32_any_base(s: &str) -> Result<u32, TracerError> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else if let Some(o) = t.strip_prefix("0o") {
        u32::from_str_radix(o, 8)
    } else if let Some(b) = t.strip_prefix("0b") {
        u32::from_str_radix(b, 2)
    } else {
        t.parse()
    };
    r.map_err(|_| TracerError::BadNumber(s.to_string()))
}

/// `--buffer-size`: bytes with an optional K/M/G suffix, rounded up to a power of two
/// (the kernel requires it), from one page to 1 GiB.
pub fn parse_buffer_size(s: &str) -> Result<u32, TracerError> {
    let bad = |why: &str| TracerError::BadOption(format!("--buffer-size {s:?}: {why}"));
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        None => (t, 1u64),
        Some((i, _)) => (
            &t[..i],
            match t[i..].to_ascii_uppercase().as_str() {
                "K" | "KB" | "KIB" => 1 << 10,
                "M" | "MB" | "MIB" => 1 << 20,
                "G" | "GB" | "GIB" => 1 << 30,
                _ => return Err(bad("unknown unit (use K, M or G)")),
            },
        ),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| bad("expected a size such as 16M"))?;
    let bytes = n.checked_mul(mult).ok_or_else(|| bad("too large"))?;
    let page = 4096u64;
    if bytes < page {
        return Err(bad("at least one page (4K)"));
    }
    if bytes > 1 << 30 {
        return Err(bad("at most 1G"));
    }
    Ok(bytes.next_power_of_two() as u32)
}

#[cfg(test)]
mod buffer_size_tests {
    use super::*;

    #[test]
    fn buffer_sizes() {
        assert_eq!(parse_buffer_size("16M").unwrap(), 16 << 20);
        assert_eq!(parse_buffer_size("5000").unwrap(), 8192);
        assert_eq!(parse_buffer_size("1g").unwrap(), 1 << 30);
        for bad in ["", "0", "100", "2G", "12X", "-1M", "M"] {
            assert!(parse_buffer_size(bad).is_err(), "{bad}");
        }
    }
}
