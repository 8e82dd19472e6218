//! Reading and showing the tracer's JSON rows (the window, the row fields, times in
//! ms): what every check shares, below all of them.

use crate::json::Json;

/// The window's opening (CLOCK_MONOTONIC ns, from the tracer's WINDOW map); it closes
/// `duration_ns` later (the tracer takes that end after detaching its programs).
#[derive(Clone, Copy)]
pub(super) struct WindowBounds {
    pub(super) open: u64,
}

pub(super) fn ms(ns: f64) -> String {
    // + 0.0: an empty sum is -0.0, which would print as "-0.000".
    format!("{:.3} ms", ns / 1e6 + 0.0)
}

pub(super) fn num(v: &Json, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

/// Row fields that interval documents split and the total sums.
pub(super) const ROW_FIELDS: &[&str] = &[
    "on_cpu_ns",
    "slices",
    "voluntary_switches",
    "involuntary_switches",
    "runq_wait_ns",
    "runq_waits",
    "off_cpu_ns",
    "blocked_ns",
    "preempted_ns",
    "migrations",
];

pub(super) fn rows_text(rows: &[&Json]) -> String {
    if rows.is_empty() {
        return "none".into();
    }
    rows.iter()
        .map(|r| {
            format!(
                "[tid {} pid {} comm {:?} on {} slices {} runq {} ({} waits) exited {}]",
                r["tid"].as_u64().unwrap_or(0),
                r["pid"].as_u64().unwrap_or(0),
                r["comm"].as_str().unwrap_or(""),
                ms(num(r, "on_cpu_ns")),
                num(r, "slices"),
                ms(num(r, "runq_wait_ns")),
                num(r, "runq_waits"),
                r["exited"].as_bool().unwrap_or(false)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}
