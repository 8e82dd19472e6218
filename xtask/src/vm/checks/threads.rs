//! Per-thread numbers against the guest's schedstat, and the probe-mode runs.

use super::common::*;
use std::collections::HashMap;

/// A workload thread's ground truth: the line every workload writes (`tracer-truth`).
pub(super) use tracer_truth::Truth;

/// Which workload wrote it (busy, spin, ...).
pub(super) fn kind(t: &Truth) -> &str {
    t.kind.as_deref().unwrap_or("workload")
}

pub(super) fn truths(step: &Step, c: &mut Check) -> Vec<Truth> {
    let mut out = Vec::new();
    for (name, text) in &step.parts {
        let Some(kind) = name.strip_prefix("truth") else {
            continue;
        };
        let kind = kind.trim_start_matches('-');
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let mut t = match Truth::parse(line) {
                Ok(t) => t,
                Err(e) => {
                    c.fail(format!("bad ground-truth line in {name} ({e}): {line}"));
                    continue;
                }
            };
            // steps.sh reads stopped threads (state T): their schedstat is final.
            if let Some(state) = &t.state {
                c.expect(state == "T", || {
                    format!(
                        "thread {} was in state {state}, not stopped, when its schedstat was read",
                        t.tid
                    )
                });
            }
            t.kind.get_or_insert_with(|| {
                if kind.is_empty() {
                    "workload".into()
                } else {
                    kind.into()
                }
            });
            out.push(t);
        }
    }
    if out.is_empty() {
        c.fail("the workload wrote no ground truth");
    }
    out
}

/// Each thread's clock-skip allowance (tests/vm/steps.sh `clock_skips`: how far the
/// kernel's stale switch clock can have moved schedstat's boundaries), by TID. Without
/// ftrace in the guest there is none, and that is said.
pub(super) fn clock_skips(step: &Step, c: &mut Check) -> HashMap<u64, u64> {
    let mut out = HashMap::new();
    let missing = step.part("clock-skips-missing");
    if !missing.trim().is_empty() {
        c.note(format!("no clock-skip allowance: {}", missing.trim()));
        return out;
    }
    let mut far_most = (0u64, 0u64);
    for line in step.part("clock-skips").lines() {
        let f: Vec<Option<u64>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
        match f[..] {
            [Some(tid), Some(near)] => {
                out.insert(tid, near);
            }
            [Some(tid), Some(near), Some(far)] => {
                out.insert(tid, near + far);
                if far > far_most.0 {
                    far_most = (far, tid);
                }
            }
            _ if line.trim().is_empty() => {}
            _ => c.fail(format!("bad clock-skip line: {line:?}")),
        }
    }
    if far_most.0 > 100_000 {
        c.note(format!(
            "clock-skip allowance for preemptions by a wakeup that showed no N (another CPU's, or a fork): up to {:.2} ms (tid {})",
            far_most.0 as f64 / 1e6,
            far_most.1
        ));
    }
    out
}

/// Each thread's run-queue waits as ftrace's own switch and wakeup events time them
/// (tests/vm/steps.sh `ftrace_waits`): TID -> (wait ns, waits). Empty where ftrace was
/// missing or its ring overran (then the events are not all there).
pub(super) fn ftrace_waits(step: &Step, c: &mut Check) -> HashMap<u64, (u64, u64)> {
    let mut out = HashMap::new();
    if !step.part("clock-skips-missing").trim().is_empty() {
        return out;
    }
    let overran = step
        .part("ftrace-overrun")
        .lines()
        .filter_map(|l| l.rsplit(':').next()?.trim().parse::<u64>().ok())
        .sum::<u64>();
    if overran > 0 {
        c.note(format!(
            "ftrace's ring overran ({overran} events): no event-timed waits"
        ));
        return out;
    }
    for line in step.part("ftrace-waits").lines() {
        let f: Vec<Option<u64>> = line.split_whitespace().map(|w| w.parse().ok()).collect();
        match f[..] {
            [Some(tid), Some(ns), Some(n)] => {
                out.insert(tid, (ns, n));
            }
            _ if line.trim().is_empty() => {}
            _ => c.fail(format!("bad ftrace-waits line: {line:?}")),
        }
    }
    out
}

pub(super) fn thread(doc: &Json, tid: u64) -> Option<&Json> {
    doc["threads"]
        .items()
        .iter()
        .find(|t| t["tid"].as_u64() == Some(tid))
}

/// Within BOUND, plus `per_event` for each of `events`.
pub(super) fn within_events(ours: u64, truth: u64, events: u64, per_event: f64) -> bool {
    BOUND.holds_plus(ours, truth, events as f64 * per_event)
}

pub(super) fn pct(ours: u64, truth: u64) -> f64 {
    if truth == 0 {
        0.0
    } else {
        100.0 * (ours as f64 - truth as f64) / truth as f64
    }
}

/// Per-thread on-CPU and run-queue time against schedstat, and the counts that must not
/// be zero for these workloads. (Without kernel BTF, the ppc64le guest, the waits are
/// bpf_ktime timestamps of the classic tracepoints: on the host's clock they came out
/// 13-46% below run_delay in some boots; counted in instructions, within 0.7%.)
fn compare_threads(
    doc: &Json,
    truth: &[Truth],
    skips: &HashMap<u64, u64>,
    events: &HashMap<u64, (u64, u64)>,
    c: &mut Check,
) {
    let mut worst_on: (f64, u64) = (0.0, 0);
    let mut worst_rq: (f64, u64) = (0.0, 0);
    let mut most_skip: (u64, u64) = (0, 0);
    for t in truth {
        let Some(th) = thread(doc, t.tid) else {
            c.fail(format!(
                "{} thread {} (pid {}) is missing from the report",
                kind(t),
                t.tid,
                t.pid
            ));
            continue;
        };
        let skip = skips.get(&t.tid).copied().unwrap_or(0);
        if skip > most_skip.0 {
            most_skip = (skip, t.tid);
        }
        let (on, rq) = compare_thread(th, t, skip, events.get(&t.tid).copied(), c);
        let e_on = pct(on, t.run_ns);
        if e_on.abs() >= worst_on.0.abs() {
            worst_on = (e_on, t.tid);
        }
        if t.wait_ns > 10_000_000 {
            let e = pct(rq, t.wait_ns);
            if e.abs() >= worst_rq.0.abs() {
                worst_rq = (e, t.tid);
            }
        }
    }
    c.note(format!(
        "{} threads: on-CPU worst {:+.2}% (tid {}), run-queue worst {:+.2}% (tid {})",
        truth.len(),
        worst_on.0,
        worst_on.1,
        worst_rq.0,
        worst_rq.1
    ));
    if most_skip.0 > 100_000 {
        c.note(format!(
            "clock-skip allowance up to {:.2} ms (tid {})",
            most_skip.0 as f64 / 1e6,
            most_skip.1
        ));
    }
    report_totals(doc, c);
}

/// Where a thread's run-queue wait is off its run_delay by more than the bounds and
/// the clock-skip allowances: whether the kernel's own switch and wakeup events time the
/// same waits as the tracer (within 2% + 20 us a wait). If they do, run_delay's
/// difference is the scheduler's clock (its reading at a switch can be older than the
/// switch, `rq_clock_skip_update`), not the tracer's; the check says so in a note.
fn by_events(rq: u64, t: &Truth, events: Option<(u64, u64)>, waits: u64, c: &mut Check) -> bool {
    let Some((ns, n)) = events else {
        return false;
    };
    let ok = BOUND.holds_plus(rq, ns, waits.max(n) as f64 * EVENT_WAIT_NS);
    if ok {
        c.note(format!(
            "tid {} ({}): run-queue wait {:.2} ms is {:+.2}% off run_delay, {:+.2}% off the \
             {n} waits ftrace's switch events time ({:.2} ms): the scheduler's clock",
            t.tid,
            kind(t),
            rq as f64 / 1e6,
            pct(rq, t.wait_ns),
            pct(rq, ns),
            ns as f64 / 1e6
        ));
    }
    ok
}

/// What a wait's two timestamps may differ between ftrace's event and the tracer's
/// program on the same tracepoint (each reads its clock at its own point of the probe).
const EVENT_WAIT_NS: f64 = 20_000.0;

/// The open bug of docs/testing.md#open-bugs: the busy workload's leader (it forks, execs
/// and spawns its workers in the window) reads 1.75-1.85 ms more run-queue wait than its
/// run_delay in about one x86_64 6.1 boot in three, in any probe mode (four times in 14
/// runs on 2026-12-04; none of the stale-clock columns covers it). Only that thread, that
/// sign and that size are excused; the check says so.
fn known_leader_excess(t: &Truth, rq: u64) -> bool {
    let excess = rq as f64 - t.wait_ns as f64;
    kind(t) == "busy" && t.tid == t.pid && (1.5e6..=2.2e6).contains(&excess)
}

/// One thread against its schedstat: on-CPU and run-queue time, and the counts its
/// workload must produce. `skip`: its clock-skip allowance ([`clock_skips`]), on top of
/// the bounds for both. Returns (on_cpu_ns, runq_wait_ns).
fn compare_thread(
    th: &Json,
    t: &Truth,
    skip: u64,
    events: Option<(u64, u64)>,
    c: &mut Check,
) -> (u64, u64) {
    let num = |k: &str| th[k].as_u64();
    c.expect(num("pid") == Some(t.pid), || {
        format!(
            "tid {}: pid {} reported, the thread's pid is {}",
            t.tid, th["pid"], t.pid
        )
    });
    let on = num("on_cpu_ns").unwrap_or(0);
    let rq = num("runq_wait_ns").unwrap_or(0);
    let skip_ms = skip as f64 / 1e6;
    c.expect(BOUND.holds_plus(on, t.run_ns, skip as f64), || {
        format!(
            "tid {} ({}): on_cpu_ns {on} vs schedstat {} ({:+.2}%, over {}% + a clock skip of {skip_ms:.3} ms)",
            t.tid,
            kind(t),
            t.run_ns,
            pct(on, t.run_ns),
            TOLERANCE * 100.0
        )
    });
    let waits = num("runq_waits").unwrap_or(0);
    let per_waits = waits as f64 * PER_WAIT_NS;
    let by_schedstat = BOUND.holds_plus(rq, t.wait_ns, per_waits + skip as f64);
    let within = by_schedstat || by_events(rq, t, events, waits, c);
    if !within && known_leader_excess(t, rq) {
        c.note(format!(
            "KNOWN (docs/testing.md#open-bugs): tid {} (the busy workload's leader) waited \
             {:.2} ms more than its run_delay ({} waits), the unexplained 1.75-1.85 ms of \
             6.1 x86_64 guests",
            t.tid,
            (rq as f64 - t.wait_ns as f64) / 1e6,
            waits
        ));
    }
    c.expect(within || known_leader_excess(t, rq), || {
        // What ftrace's own switch and wakeup events timed: whether the tracer or the
        // scheduler's clock parted from the events.
        let by_ftrace = match events {
            Some((ns, n)) => format!(
                "; ftrace's events time {:.3} ms over {n} waits ({:+.2}% of them)",
                ns as f64 / 1e6,
                pct(rq, ns)
            ),
            None => "; no ftrace waits for it".to_string(),
        };
        format!(
            "tid {} ({}): runq_wait_ns {rq} vs schedstat run_delay {} ({:+.2}%, over {}% + {} us x {waits} waits + a clock skip of {skip_ms:.3} ms){by_ftrace}",
            t.tid,
            kind(t),
            t.wait_ns,
            pct(rq, t.wait_ns),
            TOLERANCE * 100.0,
            PER_WAIT_NS / 1e3
        )
    });
    c.expect(num("slices").unwrap_or(0) > 0, || {
        format!("tid {}: 0 slices", t.tid)
    });
    let worker = t.tid != t.pid;
    if worker && kind(t) == "spin" {
        c.expect(num("runq_waits").unwrap_or(0) > 0, || {
            format!("tid {} (spin, shares CPU 0): runq_waits 0", t.tid)
        });
        c.expect(num("involuntary_switches").unwrap_or(0) > 0, || {
            format!("tid {} (spin, shares CPU 0): involuntary_switches 0", t.tid)
        });
    }
    if worker && kind(t) == "busy" {
        c.expect(num("voluntary_switches").unwrap_or(0) > 0, || {
            format!("tid {} (busy-sleep): voluntary_switches 0", t.tid)
        });
    }
    (on, rq)
}

/// Nothing dropped, and the histograms of the traced set not empty. Recursion misses
/// are the kernel's, not the tracer's: it runs no program inside another on one CPU (a
/// wakeup from an interrupt that lands inside the wakeup program is missed, and
/// counted). They are shown, and the figures above must hold with them.
fn report_totals(doc: &Json, c: &mut Check) {
    if let Json::Object(drops) = &doc["drops"] {
        for (k, v) in drops {
            if k == "recursion_misses" {
                if v.as_u64().unwrap_or(0) > 0 {
                    c.note(format!(
                        "{v} events missed inside another program (recursion_misses)"
                    ));
                }
                continue;
            }
            c.expect(v.as_u64() == Some(0), || format!("drops.{k} = {v}"));
        }
    }
    for h in ["on_cpu", "runq", "off_cpu"] {
        c.expect(
            doc["histograms"][h]["count"].as_u64().unwrap_or(0) > 0,
            || format!("histograms.{h}.count is 0"),
        );
    }
}

/// How perf's switch hooks were attached during a perf-sched run, from the kprobe list
/// and ftrace's enabled functions the traced command saved.
fn perf_hook_attachment(step: &Step) -> Option<&'static str> {
    const HOOK: &str = "__perf_event_task_sched_in";
    if step.part("kprobes").contains(HOOK) {
        Some("kprobe")
    } else if step.part("ftrace").contains(HOOK) {
        Some("fentry")
    } else {
        None
    }
}

/// A mode the kernel lacks something for must be refused, naming what is missing.
pub(super) fn expect_refusal(step: &Step, missing: &str, c: &mut Check) {
    if let Some(crash) = crashed(step) {
        c.fail(crash);
        return;
    }
    let err = step.stderr();
    c.expect(step.rc != Some(0), || {
        "exited 0 without a report".to_string()
    });
    let said = err
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if c.expect(err.to_lowercase().contains(&missing.to_lowercase()), || {
        format!("the refusal does not say that {missing} is missing: {said:?}")
    }) {
        c.note(format!("refused: {}", err.trim().replace('\n', " / ")));
    }
}

pub(super) fn check_mode(g: &GuestOutput, mode: Mode, o: &Offers) -> Verdict {
    let mut c = Check::new(format!("run {}", mode.label()));
    let Some(step) = need_step(g, mode.step(), &mut c) else {
        return c.done(None);
    };
    let needs = mode.needs(o);
    if step.rc != Some(0) {
        match needs {
            Ok(()) => {
                if let Some(crash) = crashed(step) {
                    c.fail(crash);
                }
                c.fail(format!(
                    "failed (exit status {:?}) although the kernel offers what it needs",
                    step.rc
                ));
            }
            Err(missing) => expect_refusal(step, missing, &mut c),
        }
        return c.done(Some(step));
    }
    if let Err(missing) = needs {
        c.note(format!("works although the kernel lacks {missing}"));
    }
    let Some(doc) = report(step, &mut c) else {
        return c.done(Some(step));
    };
    c.expect(doc["probe"].as_str() == Some(mode.probe()), || {
        format!("reports probe {} instead of {}", doc["probe"], mode.probe())
    });
    if matches!(mode, Mode::PerfSched | Mode::PerfSchedKprobe) {
        let want = if mode == Mode::PerfSched && o.fentry {
            "fentry"
        } else {
            "kprobe"
        };
        match perf_hook_attachment(step) {
            Some(got) if got == want => c.note(format!("hooks attached via {got}")),
            Some(got) => c.fail(format!(
                "perf's switch hooks attached via {got}, expected {want}{}",
                if mode == Mode::PerfSchedKprobe {
                    " (the tracer offers no way yet to ask for kprobes over fentry; steps.sh asks with TRACER_PERF_SCHED_ATTACH=kprobe)"
                } else {
                    ""
                }
            )),
            None => c.fail(
                "neither the kprobe list nor ftrace's enabled functions show perf's switch hooks during the run",
            ),
        }
    }
    if mode == Mode::TpBtf {
        check_thread_entries(g, &doc, &mut c);
    }
    let truth = truths(step, &mut c);
    let skips = clock_skips(step, &mut c);
    let events = ftrace_waits(step, &mut c);
    compare_threads(&doc, &truth, &skips, &events, &mut c);
    c.done(Some(step))
}

/// `major.minor` of a kernel release (`6.12.117+deb12-amd64`).
pub(super) fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-', '+']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Where tp-btf keeps its per-thread entries: in task-local storage from 6.4 on (where
/// the kernel allocates it safely under the run queue lock), else in the THREADS hash.
/// The report says which: `maps.threads_capacity` is null for task storage.
fn check_thread_entries(g: &GuestOutput, doc: &Json, c: &mut Check) {
    let release = g
        .step("facts-boot")
        .map(|s| fact(&facts(s), "release").to_string())
        .unwrap_or_default();
    let Some(version) = kernel_version(&release) else {
        c.fail(format!(
            "cannot read the guest's kernel version from {release:?}"
        ));
        return;
    };
    let Json::Object(maps) = &doc["maps"] else {
        c.fail("the report has no maps object");
        return;
    };
    let Some((_, capacity)) = maps.iter().find(|(k, _)| *k == "threads_capacity") else {
        c.fail("the report has no maps.threads_capacity");
        return;
    };
    let storage = capacity.is_null();
    let want = version >= (6, 4);
    if c.expect(storage == want, || {
        format!(
            "per-thread entries in {} on {release} (maps.threads_capacity {capacity}); expected {}",
            if storage {
                "task-local storage"
            } else {
                "the THREADS hash"
            },
            if want {
                "task-local storage (6.4+)"
            } else {
                "the THREADS hash (before 6.4)"
            }
        )
    }) {
        c.note(if storage {
            "entries in task-local storage"
        } else {
            "entries in the THREADS hash (task storage needs 6.4)"
        });
    }
}
