//! `tracer record` scenarios: the Perfetto trace, decoded with Perfetto's official protos
//! and rebuilt per thread by tests/perfetto/rebuild.py (the inference the trace processor
//! makes), against the run's own summary and window. The trace and the
//! summary come from the same programs: per thread the trace's on-CPU time is the
//! summary's within the README's bound (1% or 1 ms, plus the machine's steal time: the
//! trace's slices are wall time), its switch-ins are the summary's slices and its waits
//! the summary's waits; no event lies outside the window; everything sent is in the file.

use std::{
    collections::BTreeSet,
    path::Path,
    process::{Command, Stdio},
};

use tracer_truth::TRACE_VS_SUMMARY;

use super::report::{Class, Outcome};
use super::rows::{ms, num, WindowBounds};
use super::truth::build_entities;
use crate::json::{Items, Json};

fn u(v: &Json) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

pub(super) fn check(
    o: &mut Outcome,
    python: &Path,
    trace: &Path,
    docs: &[Json],
    lines: &[Json],
    w: WindowBounds,
    (steal, boot_minus_mono, ready): (u64, i64, (u64, u64, u64)),
) {
    let Some(total) = docs
        .iter()
        .rev()
        .find(|d| d["kind"].as_str() == Some("total"))
    else {
        return;
    };
    let script = crate::workspace_root().join("tests/perfetto/rebuild.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(trace)
        .stderr(Stdio::piped())
        .output();
    let rb = match out {
        Ok(out) if out.status.success() => {
            match crate::json::lines(&String::from_utf8_lossy(&out.stdout)).pop() {
                Some(v) => v,
                None => {
                    o.violate(Class::Trace, "rebuild.py printed no JSON".into());
                    return;
                }
            }
        }
        Ok(out) => {
            o.violate(
                Class::Trace,
                format!(
                    "Perfetto's protos refused the trace {}: {}",
                    trace.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            );
            return;
        }
        Err(e) => {
            o.violate(
                Class::Harness,
                format!("cannot run {}: {e}", python.display()),
            );
            return;
        }
    };
    let rec = &total["record"];
    // Everything the programs sent was read or counted lost, and what was read is in the file.
    for (what, trace_n, summary_n) in [
        ("switches", u(&rb["switches"]), u(&rec["switches"])),
        ("wakeups", u(&rb["wakings"]), u(&rec["wakeups"])),
        ("bytes", u(&rb["bytes"]), u(&rec["bytes"])),
    ] {
        o.expect(Class::Trace, trace_n == summary_n, || {
            format!(
                "the trace holds {trace_n} {what}, the summary's record section says {summary_n}"
            )
        });
    }
    // Nothing outside the window (the trace's clock is CLOCK_BOOTTIME, the window's
    // CLOCK_MONOTONIC: the offset was read once, to within microseconds).
    if w.open < u64::MAX / 2 && u(&rb["switches"]) > 0.0 {
        let mono = |ts: f64| ts - boot_minus_mono as f64;
        let open = w.open as f64;
        let close = open + num(total, "duration_ns");
        let (first, last) = (mono(u(&rb["first_ts"])), mono(u(&rb["last_ts"])));
        const CLOCKS_NS: f64 = 20e3;
        o.expect(Class::Trace, first >= open - CLOCKS_NS, || {
            format!(
                "the trace's first switch is {} before the window opened",
                ms(open - first)
            )
        });
        o.expect(Class::Trace, last <= close + CLOCKS_NS, || {
            format!(
                "the trace's last switch is {} after the window closed",
                ms(last - close)
            )
        });
    }
    // Per thread, for the workload threads that lived inside the window and are not next
    // to a switch the kernel never ran the programs for (`record.gap_tids`: estimated).
    let gaps: BTreeSet<u64> = rec["gap_tids"]
        .items()
        .iter()
        .filter_map(|v| v.as_u64())
        .collect();
    let (entities, _) = build_entities(lines, o.scenario.target, ready);
    let close = w.open.saturating_add(num(total, "duration_ns") as u64);
    let rows = total["threads"].items();
    let mut compared = 0;
    for e in entities.iter().filter(|e| e.expected && e.keys.len() == 1) {
        let (tid, pid) = e.keys[0];
        let Some(life) = e.life else { continue };
        if gaps.contains(&tid) || life.0 < w.open || life.1 > close || w.open >= u64::MAX / 2 {
            continue;
        }
        let Some(row) = rows
            .iter()
            .find(|r| r["tid"].as_u64() == Some(tid) && r["pid"].as_u64() == Some(pid))
        else {
            continue;
        };
        let t = &rb["threads"][tid.to_string().as_str()];
        compared += 1;
        let (on_s, on_t) = (num(row, "on_cpu_ns"), u(&t["on_cpu_ns"]));
        let tol = TRACE_VS_SUMMARY.plus(steal as f64).allowed(on_s);
        o.expect(Class::Trace, (on_t - on_s).abs() <= tol, || {
            format!(
                "{}: on-CPU rebuilt from the trace {} vs the summary's {} ({:+.1}%; allowed ±{} \
                 with {} of steal)",
                e.name,
                ms(on_t),
                ms(on_s),
                100.0 * (on_t - on_s) / on_s.max(1.0),
                ms(tol),
                ms(steal as f64)
            )
        });
        let (sl_s, sl_t) = (num(row, "slices"), u(&t["switch_ins"]));
        o.expect(Class::Trace, sl_s == sl_t, || {
            format!(
                "{}: {sl_t} switch-ins in the trace, {sl_s} slices in the summary",
                e.name
            )
        });
        let (wn_s, wn_t) = (num(row, "runq_waits"), u(&t["runq_waits"]));
        let (ws, wt) = (num(row, "runq_wait_ns"), u(&t["runq_wait_ns"]));
        // The trace moves switches to the scheduler's slice boundaries, before the
        // tracepoints that time the summary's waits: each wait's end (or start) moves
        // with them, by the figure the tracer reports for the thread.
        let placed = rec["placed_earlier_ns"][tid.to_string().as_str()]
            .as_f64()
            .unwrap_or(0.0);
        let wtol = TRACE_VS_SUMMARY.allowed(ws) + placed;
        o.expect(Class::Trace, wn_s == wn_t && (wt - ws).abs() <= wtol, || {
            format!(
                "{}: run-queue waits in the trace {wn_t} ({}) vs the summary's {wn_s} ({}; allowed ±{}, \
                 of which {} for its switches placed at the scheduler's boundaries)",
                e.name,
                ms(wt),
                ms(ws),
                ms(wtol),
                ms(placed)
            )
        });
    }
    // An exec from a non-main thread: the summary and the trace put its time under the
    // same TIDs (one convention everywhere), TID by TID. The reaped
    // leader's switch is often one the programs did not see (a gap), whose slice the
    // kernel side puts back from the scheduler's runtime, as the summary counts it: the
    // same bound holds there.
    let mut execs = 0;
    for e in entities.iter().filter(|e| e.expected && e.keys.len() > 1) {
        if e.b_ns < w.open || e.e_ns > close {
            continue;
        }
        execs += 1;
        for &(tid, pid) in &e.keys {
            let on_s: f64 = rows
                .iter()
                .filter(|r| r["tid"].as_u64() == Some(tid) && r["pid"].as_u64() == Some(pid))
                .map(|r| num(r, "on_cpu_ns"))
                .sum();
            let on_t = u(&rb["threads"][tid.to_string().as_str()]["on_cpu_ns"]);
            let tol = TRACE_VS_SUMMARY.plus(steal as f64).allowed(on_s);
            o.expect(Class::Trace, (on_t - on_s).abs() <= tol, || {
                format!(
                    "{}: TID {tid} has {} on-CPU in the trace, {} in the summary (allowed ±{}): \
                     the two put the exec'd thread's time under different TIDs",
                    e.name,
                    ms(on_t),
                    ms(on_s),
                    ms(tol)
                )
            });
        }
    }
    o.notes.insert(
        0,
        format!(
            "trace: {} switches; {compared} threads and {execs} exec histories compared with \
             the summary ({} next to gaps left out)",
            u(&rb["switches"]),
            gaps.len()
        ),
    );
}
