//! `tracer diff` as text and JSON: pure functions of the typed [`Diff`]. Names come
//! from the reports (threads name themselves), so the text escapes them.
use crate::{
    model::{
        diff::{Change, Diff, Unit},
        hist::human_ns,
        words::escape,
    },
    output::json::terminal_safe,
};

/// The `--json` document, terminal-safe as the run's JSON is.
pub fn format_diff_json(d: &Diff) -> serde_json::Result<String> {
    Ok(terminal_safe(serde_json::to_string_pretty(
        &serde_json::to_value(d)?,
    )?))
}

fn value(unit: Unit, v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) => match unit {
            Unit::Ns => human_ns(v.max(0.0).round() as u64),
            Unit::Cpus => format!("{v:.3}"),
            Unit::Count | Unit::Counter if v.fract() == 0.0 => format!("{v:.0}"),
            Unit::Count | Unit::Counter => format!("{v:.3}"),
        },
    }
}

/// The change with its sign: `+1.20ms`, `-3`, `0`.
fn signed(c: &Change) -> String {
    let sign = if c.delta > 0.0 {
        "+"
    } else if c.delta < 0.0 {
        "-"
    } else {
        return "0".into();
    };
    format!("{sign}{}", value(c.unit, Some(c.delta.abs())))
}

fn pct(c: &Change) -> String {
    match c.pct {
        Some(p) => format!("{p:+.1}%"),
        None if c.a.is_none() && c.b.is_none() => "".into(),
        None if c.a.is_none() => "new".into(),
        None if c.b.is_none() => "gone".into(),
        None => "".into(),
    }
}

fn side_line(name: &str, s: &crate::model::diff::Side) -> String {
    format!(
        "{name}: {} ({}, {}, {} of {} threads listed){}\n",
        escape(&s.file),
        s.time,
        human_ns(s.duration_ns),
        s.threads,
        s.threads_total,
        s.scheduler
            .as_ref()
            .map_or(String::new(), |x| format!(", scheduler: {}", escape(x)))
    )
}

/// The text: both headers, the totals with the largest relative change first, then one
/// line per process and thread name, largest on-CPU change first.
pub fn format_diff_text(d: &Diff) -> String {
    let mut out = side_line("A", &d.a) + &side_line("B", &d.b);
    out += &format!("probe: {} (both)\n", escape(&d.probe));
    for n in &d.notes {
        out += &format!("  note: {}\n", escape(n));
    }
    out += &format!(
        "\n{:<22} {:>12} {:>12} {:>12} {:>9}\n",
        "TOTAL", "A", "B", "CHANGE", "%"
    );
    for c in &d.total {
        out += &format!(
            "{:<22} {:>12} {:>12} {:>12} {:>9}\n",
            escape(&c.metric),
            value(c.unit, c.a),
            value(c.unit, c.b),
            signed(c),
            pct(c)
        );
    }
    out += &format!(
        "\n{:<16} {:<16} {:>7} {:>10} {:>8} {:>10} {:>10} {:>10} {:>8} {:>6}\n",
        "PROCESS",
        "THREAD",
        "THREADS",
        "ON-CPU",
        "%",
        "RUNQ-WAIT",
        "RUNQ-P99",
        "OFF-CPU",
        "SLICES",
        "MIGR"
    );
    for g in &d.groups {
        let get = |m: &str| g.changes.iter().find(|c| c.metric == m);
        let delta = |m: &str| get(m).map_or("-".into(), signed);
        out += &format!(
            "{:<16} {:<16} {:>7} {:>10} {:>8} {:>10} {:>10} {:>10} {:>8} {:>6}\n",
            escape(&g.process),
            escape(&g.thread),
            format!("{}>{}", g.threads_a, g.threads_b),
            delta("on_cpu_ns"),
            get("on_cpu_ns").map_or(String::new(), pct),
            delta("runq_wait_ns"),
            delta("runq_p99_ns"),
            delta("off_cpu_ns"),
            delta("slices"),
            delta("migrations"),
        );
    }
    out
}
