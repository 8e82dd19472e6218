//! The tracer's total against the workload's truth, thread by thread, and the bounds that
//! allow for what the kernel's own accounting does.

use std::collections::{BTreeMap, BTreeSet};

use tracer_truth::{
    wakeup_wait_ceiling, wakeup_wait_floor, ON_CPU, TORTURE_RUNQ_FROM_SCHEDSTAT, TORTURE_SLICES,
};

use super::consistency::{doc_checks, interval_checks};
use super::lifetime::{born_when, joined, lifetime, names};
use super::moves::{counted_sleep, Kernel};
use super::report::{Class, Outcome};
use super::rows::{ms, num, rows_text, WindowBounds};
use super::scenario::Target;
use super::truth::build_entities;
use super::waits::waited;
use crate::json::{Items, Json};

// The bounds against the truth are tracer_truth's (on-CPU: ON_CPU, 1% or 1 ms; slices:
// TORTURE_SLICES, 0.5% + 2; waits: TORTURE_RUNQ_FROM_SCHEDSTAT and the wakeup floor and
// ceiling); what the harness adds for its own workload:

/// After its last record a thread still exits (the record's own formatting, the
/// runtime's teardown, `do_exit`): on a CPU shared with a thread that keeps waking up
/// (a pinned ping-pong), that tail is preempted again and again. Traces of failing
/// seeds (`--keep`) showed up to 5 more slices for a thread and 7 for a process (its
/// `exit_mm`), every one a preemption (prev_state R) and the last one its death, and
/// a last wait as long as the CPU stays busy (335 ms seen, seed 5). The record is the
/// only truth a thread leaves (no zombie to read), so these are the allowance: the
/// slices as seen, the wait no longer than the window had left after the record.
const EXIT_SLICES: f64 = tracer_truth::EXIT_SLICES as f64;
const EXIT_RUN_NS: f64 = tracer_truth::EXIT_RUN_NS;
/// Run-queue waits timed from wakeups exceed run_delay by at most one tick (CONFIG_HZ=250
/// here) per wait: see the clock-update skip in README "How it works".
const TICK_NS: f64 = 4e6;

/// The `drops` counters that stand for threads lost: a full traced-set or per-thread map,
/// task storage that could not be had, a lost exit record. (A program run the kernel
/// skipped, `recursion_misses`, says nothing of which thread: a thread asleep the whole
/// window is missing for another reason. Every counter above 0 fails anyway.)
pub(super) const THREAD_LOSSES: &[&str] = &[
    "threads_map_full",
    "tracked_map_full",
    "task_storage_failed",
    "exit_ringbuf_full",
];

/// Which side of its bounds `[lo, ..]` a figure that broke them is on, for the message
/// (a known open bug names the side it excuses, see `report::Known::symptoms`).
fn side(v: f64, lo: f64) -> &'static str {
    if v < lo {
        "below"
    } else {
        "above"
    }
}

pub(super) fn check(
    o: &mut Outcome,
    docs: &[Json],
    lines: &[Json],
    w: WindowBounds,
    ready: (u64, u64, u64),
    kernel: &Kernel,
) {
    let moved = &kernel.moves;
    let Some(total) = docs
        .iter()
        .rev()
        .find(|d| d["kind"].as_str() == Some("total"))
    else {
        o.violate(
            Class::Tracer,
            format!(
                "no total document in the tracer's output ({} documents)",
                docs.len()
            ),
        );
        return;
    };
    let intervals: Vec<&Json> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("interval"))
        .collect();
    if o.scenario.interval_ms.is_some() && intervals.is_empty() {
        o.notes
            .push("no interval document (the run was shorter than one interval)".into());
    }

    // Each document on its own.
    for d in std::iter::once(total).chain(intervals.iter().copied()) {
        doc_checks(o, d, d["kind"].as_str() == Some("total"));
    }
    // A workload of a few hundred threads fits every map and ring: any loss is lost
    // accounting (`exit_ringbuf_full` once). `switch_in_unseen` is no
    // loss (the slice is placed by the scheduler's runtime), nor `wakeup_kept_aside` (the
    // wait is timed from the wakeup kept in a map); `switch_out_unseen` is one
    // of the task the kernel did not report leaving, which system-wide is rarely the
    // workload's (the per-thread checks against its truth would show it if it were).
    let system_wide = o.scenario.target == Target::System;
    if let Json::Object(m) = &total["drops"] {
        for (k, v) in m {
            if k == "switch_in_unseen"
                || k == "wakeup_kept_aside"
                || (system_wide && k == "switch_out_unseen")
            {
                continue;
            }
            let n = v.as_f64().unwrap_or(0.0);
            // Classic tracepoint programs share the kernel's per-CPU `bpf_prog_active`
            // with every kprobe and tracepoint program (`trace_call_bpf()`): a wakeup in
            // an interrupt while one of them runs on that CPU (our fork or exec program,
            // or another tool's) is skipped, and counted. Not a sizing loss; the
            // per-thread checks against the truth still hold the figures.
            if k == "recursion_misses" && o.scenario.probe == "tracepoint" {
                if n > 0.0 {
                    o.notes.push(format!(
                        "drops.recursion_misses = {n}: wakeups skipped by the kernel's shared \
                         recursion guard of classic tracepoint programs"
                    ));
                }
                continue;
            }
            o.expect(Class::Drops, n == 0.0, || {
                format!("drops.{k} = {n}: nothing should be lost in a workload this small")
            });
        }
    }
    // Against the workload's truth.
    let (entities, problems) = build_entities(lines, o.scenario.target, ready);
    // Intervals add up to the total, overall and per thread.
    if !intervals.is_empty() {
        let names: BTreeMap<(u64, u64), &str> = entities
            .iter()
            .flat_map(|e| e.keys.iter().map(|k| (*k, e.name.as_str())))
            .collect();
        // An exec from a non-main thread moves the thread to its leader's TID: interval
        // rows before the exec carry the old TID, the total only the new one (README).
        let aliases: BTreeMap<(u64, u64), (u64, u64)> = entities
            .iter()
            .filter(|e| e.keys.len() > 1)
            .flat_map(|e| e.keys[1..].iter().map(move |k| (*k, e.keys[0])))
            .collect();
        interval_checks(o, total, &intervals, &names, &aliases);
    }

    for p in problems {
        o.violate(Class::Truth, format!("workload truth: {p}"));
    }
    let tails = command_tails(o, total, &entities);
    o.threads = entities.len();
    let dur = num(total, "duration_ns");
    // What ended before the last program attached no program saw (`attach_lag_ns`).
    let attached = w.open.saturating_add(num(total, "attach_lag_ns") as u64);
    let close_min = w.open.saturating_add(dur as u64);
    let mut rows: BTreeMap<(u64, u64), Vec<&Json>> = BTreeMap::new();
    // A leader reaped by another thread's exec (`reaped_by_exec`: its final switch came
    // after `exchange_tids()`) shares its TID with the exec'd thread's later row, and
    // its exec history's truth counts the leader's own record (truth.rs): it is matched
    // there like the leader's row of an exec whose leader died first.
    for r in total["threads"].items() {
        rows.entry((
            r["tid"].as_u64().unwrap_or(0),
            r["pid"].as_u64().unwrap_or(0),
        ))
        .or_default()
        .push(r);
    }
    let workload_pids: BTreeSet<u64> = lines.iter().filter_map(|l| l["pid"].as_u64()).collect();
    let mut matched: BTreeSet<(u64, u64)> = BTreeSet::new();
    // Losses that can cost a thread its row; the others (a histogram full, a counter
    // read, a switch-out whose switch-in went unseen) lose none.
    let drops: f64 = match &total["drops"] {
        Json::Object(m) => m
            .iter()
            .filter(|(k, _)| THREAD_LOSSES.contains(&k.as_str()))
            .filter_map(|(_, v)| v.as_f64())
            .sum(),
        _ => 0.0,
    };
    let mut missing = Vec::new();
    let schedstat = o.scenario.runq_schedstat;
    for e in &entities {
        let mine: Vec<&Json> = e
            .keys
            .iter()
            .flat_map(|k| rows.get(k).cloned().unwrap_or_default())
            .collect();
        matched.extend(e.keys.iter().copied());
        // The window's time after the thread's last record: its exit tail's wait fits.
        let exit_wait_ns = close_min.saturating_sub(e.e_ns) as f64;
        if !e.expected {
            o.expect(Class::Target, mine.is_empty(), || {
                format!(
                    "{}: not a target, yet reported: {}",
                    e.name,
                    rows_text(&mine)
                )
            });
            continue;
        }
        let out_start = w.open.saturating_sub(e.b_ns) as f64;
        let out_end = e.e_ns.saturating_sub(close_min) as f64;
        let inside = out_start == 0.0 && out_end == 0.0;
        if mine.is_empty() {
            // Without the opening's time, presence is only required of -t targets.
            let lived_inside = e.b_ns < close_min && e.life.is_none_or(|l| l.1 > attached);
            if lived_inside && (w.open < u64::MAX / 2 || o.scenario.target == Target::Tid) {
                missing.push(format!(
                    "{}{} (truth: {})",
                    e.name,
                    born_when(e, w),
                    e.truth_text
                ));
            }
            continue;
        }
        let hi = e.hi_in(w.open);
        lifetime(o, e, &mine, w, close_min);
        joined(o, e, &mine, w, close_min);
        names(o, e, &mine);
        let sum = |k: &str| mine.iter().map(|r| num(r, k)).sum::<f64>();
        let (on, wait, slices) = (sum("on_cpu_ns"), sum("runq_wait_ns"), sum("slices"));
        let lo_run = e.lo.run - out_start - out_end;
        let tol = ON_CPU.allowed(e.lo.run);
        let alive = mine.iter().any(|r| r["exited"].as_bool() == Some(false));
        // Exited inside the window: what it ran after its last record counts too, at
        // most what the whole command ran after its records where the kernel says
        // (`-- CMD`), else the allowance. Born before the opening or not: a `-p`
        // crowd thread ran 3.1 ms past its record while 1,179 threads exited at once
        // (seed 3200026; an exit in a burst waits on the process's locks on-CPU).
        let exit_run = if out_end == 0.0 && !alive {
            tails.unwrap_or(EXIT_RUN_NS)
        } else {
            0.0
        };
        let (lo_b, hi_b) = (lo_run - tol, hi.run + tol + e.slack_ns + exit_run);
        let where_ = if inside && alive {
            "its last record is inside the window, yet its row says it had not exited \
             (its exit may follow the close; the recorded time is inside all the same)"
                .to_string()
        } else if inside {
            "lived inside the window".to_string()
        } else {
            format!(
                "{} before the window's latest opening, {} after its earliest close",
                ms(out_start),
                ms(out_end)
            )
        };
        o.expect(Class::OnCpu, on >= lo_b && on <= hi_b, || {
            format!(
                "{}: on-CPU {} {} [{}, {}] (schedstat {} .. {}; {}); rows: {}; truth: {}",
                e.name,
                ms(on),
                side(on, lo_b),
                ms(lo_b.max(0.0)),
                ms(hi_b),
                ms(e.lo.run),
                ms(hi.run),
                where_,
                rows_text(&mine),
                e.truth_text
            )
        });
        if inside {
            let (lo_s, hi_s) = TORTURE_SLICES
                .plus(e.slack_slices)
                .range(e.lo.slices, hi.slices);
            let hi_s = hi_s + EXIT_SLICES;
            o.expect(Class::Slices, slices >= lo_s && slices <= hi_s, || {
                format!(
                    "{}: slices {slices} {} [{lo_s:.0}, {hi_s:.0}] (schedstat pcount {} .. {}); rows: {}; truth: {}",
                    e.name,
                    side(slices, lo_s),
                    e.lo.slices,
                    hi.slices,
                    rows_text(&mine),
                    e.truth_text
                )
            });
        }
        if schedstat {
            // run_delay's growth is taken at switch-out: a thread still in its slice when
            // the window closes has its last wait unread, so the lower bound holds only
            // for threads inside the window.
            let (lo_w, hi_w) = TORTURE_RUNQ_FROM_SCHEDSTAT.range(e.lo.wait, hi.wait);
            let lo_w = if inside { lo_w } else { 0.0 };
            let hi_w = hi_w + e.slack_ns + exit_wait_ns;
            o.expect(Class::Runq, wait >= lo_w && wait <= hi_w, || {
                format!(
                    "{}: run-queue wait {} (--runq-from schedstat) {} [{}, {}] (run_delay {} .. {}); rows: {}; truth: {}",
                    e.name, ms(wait), side(wait, lo_w), ms(lo_w.max(0.0)), ms(hi_w), ms(e.lo.wait), ms(hi.wait), rows_text(&mine), e.truth_text
                )
            });
        } else if inside {
            // From the wakeup: at least 90% of run_delay less 25 µs a wait (the wakeup
            // tracepoint fires after the enqueue that starts run_delay), and at most run_delay
            // plus one tick per wait (the clock update `__schedule` skips after a
            // wakeup preemption leaves run_delay short by up to the time since the run
            // queue's clock was last updated). No floor for a thread born before every
            // program was attached: its first wakeup may be unseen (`attach_lag_ns`).
            // Less the sleep run_delay counted after the load balancer moved the thread
            // asleep (delayed dequeue, see `moves`), from the kernel's own events.
            let slept: u64 = e
                .keys
                .iter()
                .map(|k| counted_sleep(moved, k.0, e.b_ns, e.e_ns))
                .sum();
            o.moved_sleep_ns += slept;
            if slept > 0 {
                o.notes.push(format!(
                    "{}: run_delay counted {} of sleep after the thread was moved asleep (delayed dequeue); the wait floor is taken without it",
                    e.name,
                    ms(slept as f64)
                ));
            }
            // Or, where lower, the same waits as ftrace's tracepoints timed them (see
            // `waits`): run_delay can count a new thread's time before its first
            // wakeup, and a stop of the whole VM.
            let counted = e.lo.wait - slept as f64;
            let traced = match (&kernel.waits, e.keys.as_slice()) {
                (Some(w), [k]) => Some(waited(w, k.0, e.b_ns, e.e_ns)),
                _ => None,
            };
            let floor = |of: f64| {
                if e.b_ns >= attached {
                    wakeup_wait_floor(of, e.lo.slices)
                } else {
                    0.0
                }
            };
            let lo_w = floor(traced.map_or(counted, |(t, _)| counted.min(t as f64)));
            if let Some((t, n)) = traced.filter(|_| wait < floor(counted) && wait >= lo_w) {
                o.notes.push(format!(
                    "{}: run-queue wait {} under run_delay's floor {}, above ftrace's {}: ftrace timed its waits at {} ({n}), run_delay at {}",
                    e.name,
                    ms(wait),
                    ms(floor(counted)),
                    ms(lo_w.max(0.0)),
                    ms(t as f64),
                    ms(counted)
                ));
            }
            let hi_w = wakeup_wait_ceiling(hi.wait, hi.slices.max(slices), TICK_NS) + exit_wait_ns;
            o.expect(Class::Runq, wait >= lo_w && wait <= hi_w, || {
                format!(
                    "{}: run-queue wait {} (from wakeups) {} [{}, {}] (run_delay {} .. {}, {} slices; ftrace's waits {}; 90% of the lesser less 25 us a wait; {} per wait allowed for the clock skip, {} for the exit: the window's time after the last record); rows: {}; truth: {}",
                    e.name, ms(wait), side(wait, lo_w), ms(lo_w.max(0.0)), ms(hi_w), ms(e.lo.wait), ms(hi.wait), hi.slices,
                    traced.map_or("not measured".to_string(), |(t, n)| format!("{} ({n})", ms(t as f64))),
                    ms(TICK_NS), ms(exit_wait_ns), rows_text(&mine), e.truth_text
                )
            });
        }
    }
    if !missing.is_empty() {
        let msg = format!(
            "{} workload thread(s) that lived inside the window are not reported ({} thread losses counted in drops): {}",
            missing.len(),
            drops,
            missing.join(" | ")
        );
        if (missing.len() as f64) <= drops {
            o.notes.push(msg);
        } else {
            o.violate(Class::Missing, msg);
        }
    }
    // Rows of the workload's processes that match no thread of it; rows of anything
    // else in a targeted run.
    for (k, rs) in &rows {
        if matched.contains(k) {
            continue;
        }
        if workload_pids.contains(&k.1) {
            o.violate(
                Class::Target,
                format!(
                    "a row for TID {} PID {} that no workload thread recorded: {}",
                    k.0,
                    k.1,
                    rows_text(rs)
                ),
            );
        } else if let Some(e) = entities
            .iter()
            .find(|e| e.keys.iter().any(|x| x.0 == k.0))
            .filter(|_| k.1 == 0 || o.scenario.target != Target::System)
        {
            // The TID of a workload thread under another PID (e.g. 0): a row that lost
            // its identity.
            o.violate(
                Class::Target,
                format!(
                    "a row with the TID of {} but PID {}: {}",
                    e.name,
                    k.1,
                    rows_text(rs)
                ),
            );
        } else if o.scenario.target != Target::System {
            o.violate(
                Class::Target,
                format!(
                    "{} run reports TID {} PID {} outside the target: {}",
                    o.scenario.target.name(),
                    k.0,
                    k.1,
                    rows_text(rs)
                ),
            );
        }
    }
}

/// What the held command ran before its release, outside the window: its fork's return
/// and the read that holds it (under 0.1 ms in three probe modes, 2026-12-08).
const HELD_RUN_NS: f64 = 1e6;

/// `-- CMD`, once the tracer reaped the command: the kernel's CPU time of its whole tree
/// (`wait4`'s user + system, the scheduler's runtime to the microsecond). The report's
/// threads must sum to it, and what the command ran after its threads' last records
/// is that less their records (and what each exited thread ran after the kernel folded
/// its runtime in): the bound on any thread's exit tail (the main thread's, which
/// unmaps the process, once ran 4.5 ms past its record: seed 3000058).
fn command_tails(o: &mut Outcome, total: &Json, entities: &[super::truth::Entity]) -> Option<f64> {
    if o.scenario.target != Target::Cmd {
        return None;
    }
    let c = &total["command"];
    let cpu = c["user_ns"].as_f64()? + c["system_ns"].as_f64()?;
    let rows = total["threads"].items();
    let on: f64 = rows.iter().map(|r| num(r, "on_cpu_ns")).sum();
    // Each thread that exited ran a little after the kernel folded its runtime into
    // the command's (`EXIT_AFTER_RELEASE_NS`); a folded row stands for its threads.
    let exited: f64 = rows
        .iter()
        .filter(|r| r["exited"].as_bool() == Some(true))
        .map(|r| r["folded_threads"].as_f64().unwrap_or(1.0))
        .sum();
    let released = exited * tracer_truth::EXIT_AFTER_RELEASE_NS;
    let tol = ON_CPU.allowed(cpu);
    let (lo, hi) = (cpu - tol - HELD_RUN_NS, cpu + tol + released);
    o.expect(Class::OnCpu, on >= lo && on <= hi, || {
        format!(
            "the command's threads: on-CPU {} in all, {} [{}, {}] (the kernel's CPU time of the command, wait4: {}; {exited} exited threads)",
            ms(on),
            side(on, lo),
            ms(lo.max(0.0)),
            ms(hi),
            ms(cpu)
        )
    });
    let recorded: f64 = entities
        .iter()
        .filter(|e| e.expected)
        .map(|e| e.lo.run)
        .sum();
    Some((cpu - recorded).max(0.0) + released)
}
