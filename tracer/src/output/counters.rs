//! perf stat's text for counters: `     1,234.56 msec task-clock   #    0.987 CPUs
//! utilized`, `<not supported>` and `<not counted>` lines, the running percentage when
//! multiplexed, per-CPU and per-thread blocks, and the elapsed time that closes it.
use crate::perf::derived::{CounterReport, Derived, SYSTEM_WIDE_CLOCK_UNIT};

/// Digits grouped by thousands with commas, as perf prints under an English locale.
fn group_thousands(s: &str) -> String {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let (sign, digits) = match int.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", int),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + digits.len() / 3);
    out.push_str(sign);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

fn value_text(c_value: Option<f64>, unit: &str, supported: bool) -> String {
    match (supported, c_value) {
        (false, _) => "<not supported>".to_string(),
        (true, None) => "<not counted>".to_string(),
        (true, Some(v)) if unit == "msec" => group_thousands(&format!("{v:.2}")),
        (true, Some(v)) => group_thousands(&format!("{v:.0}")),
    }
}

fn metric_text(d: &Derived) -> String {
    let body = match d.name.as_str() {
        "ipc" => format!("{:7.2}  {}", d.value, d.unit),
        "branch-miss-pct" | "cache-miss-pct" => format!("{:7.2}% {}", d.value, d.unit),
        _ => format!("{:8.3} {}", d.value, d.unit),
    };
    format!("# {body:<32}")
}

/// One perf-style line: value (18 wide), unit (4), name (32), `# metric`, `(pct%)`.
fn stat_line(
    prefix: &str,
    value: &str,
    unit: &str,
    name: &str,
    metric: Option<String>,
    pct: Option<f64>,
) -> String {
    let mut line = format!("{prefix}{value:>18} {unit:<4} {name:<32} ");
    match metric {
        Some(m) => line.push_str(&m),
        None => line.push_str(&" ".repeat(34)),
    }
    if let Some(p) = pct.filter(|p| *p < 100.0) {
        line.push_str(&format!("  ({p:.2}%)"));
    }
    line.truncate(line.trim_end().len());
    line
}

/// perf stat style text: `     1,234.56 msec task-clock   #    0.987 CPUs utilized`, `<not supported>      cycles:u`,
/// running percentage `(52.31%)` when multiplexed below 100%. Pure function returning a String.
/// System-wide reports add one line per CPU for the clock, per-thread reports one block per
/// thread; the elapsed time closes it as in perf.
pub fn format_text(r: &CounterReport) -> String {
    format_text_opts(r, true)
}

/// [`format_text`], leaving out the `<not supported>` lines when `unsupported` is false
/// (interval reports after the first: the machine's PMU does not change in between).
pub fn format_text_opts(r: &CounterReport, unsupported: bool) -> String {
    let mut out = String::new();
    let hidden = r.counters.iter().filter(|c| !c.supported).count();
    for c in r.counters.iter().filter(|c| unsupported || c.supported) {
        let metric = r
            .derived
            .iter()
            .find(|d| d.event == c.event)
            .map(metric_text);
        let value = value_text(c.value, &c.unit, c.supported);
        let pct = if c.supported && c.value.is_some() {
            c.running_pct
        } else {
            None
        };
        out.push_str(&stat_line("", &value, &c.unit, &c.event, metric, pct));
        out.push('\n');
    }
    if let (Some(util), Some(per_cpu)) = (&r.per_cpu_utilization, &r.per_cpu) {
        if let Some(clock) = &r.utilization_event {
            out.push('\n');
            for (cpu, u) in util {
                let ms = per_cpu
                    .get(cpu)
                    .and_then(|row| row.iter().find(|(n, _)| n == clock))
                    .and_then(|(_, v)| *v);
                let metric = format!("# {:<32}", format!("{u:8.3} {SYSTEM_WIDE_CLOCK_UNIT}"));
                let prefix = format!("{:<8}", format!("CPU{cpu}"));
                out.push_str(&stat_line(
                    &prefix,
                    &value_text(ms, "msec", true),
                    "msec",
                    clock,
                    Some(metric),
                    None,
                ));
                out.push('\n');
            }
        }
    }
    if let Some(threads) = &r.per_thread {
        for (tid, row) in threads {
            out.push('\n');
            for (name, v) in row {
                let c = r.counters.iter().find(|c| c.event == *name);
                let unit = c.map(|c| c.unit.as_str()).unwrap_or("");
                let supported = c.map(|c| c.supported).unwrap_or(true);
                let prefix = format!("{:<12}", format!("TID {tid}"));
                out.push_str(&stat_line(
                    &prefix,
                    &value_text(*v, unit, supported),
                    unit,
                    name,
                    None,
                    None,
                ));
                out.push('\n');
            }
        }
    }
    if !unsupported && hidden > 0 {
        out.push_str(&format!(
            "   ({hidden} not supported: see the first interval)\n"
        ));
    }
    if r.elapsed_ns > 0 {
        out.push('\n');
        out.push_str(&format!(
            "{:>18.9} seconds time elapsed\n",
            r.elapsed_ns as f64 / 1e9
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::derived::fixtures::*;
    use crate::perf::report;

    #[test]
    fn text_golden() {
        let text = format_text(&report(&synthetic(), 1_000_000_000));
        let want = concat!(
            "            987.65 msec task-clock                       #    0.988 CPUs utilized\n",
            "             1,234      cs                               #    1.249 K/sec\n",
            "   <not supported>      cycles:u\n",
            "     3,000,000,000      instructions                     #    3.037 G/sec                    (50.00%)\n",
            "     <not counted>      page-faults\n",
            "\n",
            "       1.000000000 seconds time elapsed\n",
        );
        assert_eq!(text, want);
        // Later intervals say `<not supported>` once, as a count.
        let text = format_text_opts(&report(&synthetic(), 1_000_000_000), false);
        assert!(!text.contains("cycles:u"), "{text}");
        assert!(
            text.contains("   (1 not supported: see the first interval)\n"),
            "{text}"
        );
    }

    #[test]
    fn hardware_ratio_lines() {
        let text = format_text(&report(&hardware(), 1_000_000_000));
        assert!(
            text.contains(
                "     6,000,000,000      cycles                           #    3.000 GHz\n"
            ),
            "{text}"
        );
        assert!(text.contains("#    1.50  insn per cycle\n"), "{text}");
        assert!(text.contains("#    1.23% of all branches\n"), "{text}");
        assert!(text.contains("#   25.00% of all cache refs\n"), "{text}");
        assert!(text.contains("#  500.000 K/sec\n"), "{text}"); // 1M branches / 2 s
    }

    #[test]
    fn system_wide_and_per_thread_blocks() {
        let text = format_text(&report(&system_wide(), 500_000_000));
        assert!(text.contains("\nCPU1                250.00 msec cpu-clock                        #    0.500 CPUs counted (idle included)\n"), "{text}");
        assert!(
            text.contains(
                "msec cpu-clock                        #    1.500 CPUs counted (idle included)\n"
            ),
            "{text}"
        );
        let text = format_text(&report(&per_thread(), 10_000_000));
        assert!(
            text.contains("TID 7                     3.00 msec task-clock\n"),
            "{text}"
        );
        assert!(
            text.contains("TID 7          <not supported>      cycles\n"),
            "{text}"
        );
    }

    #[test]
    fn thousands() {
        assert_eq!(group_thousands("1234567.89"), "1,234,567.89");
        assert_eq!(group_thousands("123"), "123");
        assert_eq!(group_thousands("1000"), "1,000");
        assert_eq!(group_thousands("-1234"), "-1,234");
        assert_eq!(group_thousands("inf"), "inf");
    }
}
