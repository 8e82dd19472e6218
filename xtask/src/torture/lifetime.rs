//! Per-thread invariants: a thread's on- plus off-CPU time covers its time
//! inside the window, and its row names it as the kernel does.

use tracer_truth::{EXIT_SLEEP_NS, ON_CPU};

use super::report::{Class, Outcome};
use super::rows::{ms, num, rows_text, WindowBounds};
use super::truth::Entity;
use crate::json::Json;

/// Per thread, on-CPU + off-CPU = its time inside the window: from the later of the
/// opening and its birth to the earlier of the close and its exit. The workload knows a
/// part of that for sure (from its first instruction, or its join, to its last record, or
/// its leave): on + off must cover it, within the one tolerance (1% or 1 ms). Above it,
/// on + off is bounded by the window (`doc_checks`).
pub(super) fn lifetime(o: &mut Outcome, e: &Entity, rows: &[&Json], w: WindowBounds, close: u64) {
    let Some((born, end)) = e.life else {
        return;
    };
    if w.open >= u64::MAX / 2 {
        return;
    }
    let (from, to) = (born.max(w.open), end.min(close));
    if to <= from {
        return;
    }
    let inside = to - from;
    let on: f64 = rows.iter().map(|r| num(r, "on_cpu_ns")).sum();
    let off: f64 = rows.iter().map(|r| num(r, "off_cpu_ns")).sum();
    let tol = ON_CPU.allowed(inside as f64);
    o.expect(Class::Lifetime, on + off >= inside as f64 - tol, || {
        format!(
            "{}: on-CPU {} + off-CPU {} = {}, {:.1}% of the {} it lived inside the window \
             (from {} to {}; at least {} expected): its other time is neither on- nor \
             off-CPU; rows: {}; truth: {}",
            e.name,
            ms(on),
            ms(off),
            ms(on + off),
            100.0 * (on + off) / inside as f64,
            ms(inside as f64),
            if born > w.open {
                "its birth"
            } else {
                "the opening"
            },
            if end < close {
                "its last record"
            } else {
                "the close"
            },
            ms(inside as f64 - tol),
            rows_text(rows),
            e.truth_text
        )
    });
}

/// A `--cgroup` joiner that stays counts from the switch-in of the slice in which it
/// moved, which began after its `pre-join` record: on- plus off-CPU cannot exceed the
/// time from there (or the opening) to its last record (or the close), and its exit
/// tail after that record (`hi` above `lo`: its zombie's run and wait, and at most
/// `EXIT_SLEEP_NS` asleep). A joiner was
/// once charged the time from the opening as a sleep, while it ran outside (a hostile
/// test, 2026-12-07).
pub(super) fn joined(o: &mut Outcome, e: &Entity, rows: &[&Json], w: WindowBounds, close: u64) {
    let Some(after) = e.joined_after else {
        return;
    };
    if w.open >= u64::MAX / 2 {
        return;
    }
    let from = after.max(w.open);
    let tail = if e.e_ns < close {
        (e.hi.run + e.hi.wait - e.lo.run - e.lo.wait).max(0.0) + EXIT_SLEEP_NS
    } else {
        0.0
    };
    let span = e.e_ns.min(close).saturating_sub(from) as f64 + tail;
    let on: f64 = rows.iter().map(|r| num(r, "on_cpu_ns")).sum();
    let off: f64 = rows.iter().map(|r| num(r, "off_cpu_ns")).sum();
    let tol = ON_CPU.allowed(span);
    o.expect(Class::Lifetime, on + off <= span + tol, || {
        format!(
            "{}: on-CPU {} + off-CPU {} = {}, above the {} from {} to its end (at most \
             {} expected, its exit tail included): time from before its move into the \
             cgroup is counted; rows: {}; truth: {}",
            e.name,
            ms(on),
            ms(off),
            ms(on + off),
            ms(span),
            if after > w.open {
                "its last record before its move"
            } else {
                "the opening"
            },
            ms(span + tol),
            rows_text(rows),
            e.truth_text
        )
    });
}

/// A thread that named itself (prctl) is shown by that name: exactly when the name is
/// UTF-8 (control bytes and all; JSON escapes them), and when it is not, as its UTF-8
/// beginning followed by some rendering of the rest.
pub(super) fn names(o: &mut Outcome, e: &Entity, rows: &[&Json]) {
    let Some(want) = &e.comm else {
        return;
    };
    let comms: Vec<&str> = rows.iter().filter_map(|r| r["comm"].as_str()).collect();
    match std::str::from_utf8(want) {
        Ok(exact) => o.expect(Class::Name, comms.contains(&exact), || {
            format!(
                "{}: named itself {exact:?}, shown as {comms:?}; rows: {}",
                e.name,
                rows_text(rows)
            )
        }),
        Err(bad) => {
            let head = String::from_utf8_lossy(&want[..bad.valid_up_to()]).into_owned();
            let ok = !comms.is_empty()
                && comms
                    .iter()
                    .all(|c| c.starts_with(head.as_str()) && c.len() > head.len());
            o.expect(Class::Name, ok, || {
                format!(
                    "{}: named itself {:?} (not UTF-8), shown as {comms:?}: expected {head:?} \
                     and then the rest rendered; rows: {}",
                    e.name,
                    String::from_utf8_lossy(want),
                    rows_text(rows)
                )
            })
        }
    }
}

/// For a missing thread: when it was born against the opening (a thread born while the
/// tracer started is what `-p` loses).
pub(super) fn born_when(e: &Entity, w: WindowBounds) -> String {
    match e.life {
        Some((born, _)) if w.open < u64::MAX / 2 && born < w.open => format!(
            ", born {} before the window opened",
            ms((w.open - born) as f64)
        ),
        Some((born, _)) if w.open < u64::MAX / 2 => {
            format!(", born {} after the opening", ms((born - w.open) as f64))
        }
        _ => String::new(),
    }
}
