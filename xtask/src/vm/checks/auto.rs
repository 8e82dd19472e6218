//! `tracer run` in auto mode: the mode it picks, histograms, counters.

use super::{common::*, threads::*};

pub(super) fn best_mode(o: &Offers) -> Mode {
    [Mode::TpBtf, Mode::RawTp, Mode::Tracepoint]
        .into_iter()
        .find(|m| m.needs(o).is_ok())
        .unwrap_or(Mode::Tracepoint)
}

pub(super) fn check_auto(g: &GuestOutput, o: &Offers) -> Vec<Verdict> {
    let mut a = Check::new("auto picks the best mode");
    let mut h = Check::new("histograms and run-queue latency");
    let mut k = Check::new("counters");
    let Some(step) = need_step(g, "auto-hist", &mut a) else {
        return vec![a.done(None)];
    };
    if step.rc != Some(0) {
        if let Some(crash) = crashed(step) {
            a.fail(crash);
        }
        a.fail(format!(
            "tracer run (auto) failed: exit status {:?}",
            step.rc
        ));
        return vec![a.done(Some(step))];
    }
    let Some(doc) = report(step, &mut a) else {
        return vec![a.done(Some(step))];
    };
    picked_mode(&doc, o, &mut a);

    // One worker: 4 ms of CPU, then 10 ms asleep (the histograms' check).
    let truth = truths(step, &mut h);
    if let Some(worker) = truth.iter().find(|t| t.tid != t.pid) {
        match thread(&doc, worker.tid) {
            Some(th) => check_histograms(th, &mut h),
            None => h.fail(format!("worker {} missing from the report", worker.tid)),
        }
    } else {
        h.fail("no worker thread in the ground truth");
    }

    counters(&doc, &mut k);
    vec![a.done(Some(step)), h.done(Some(step)), k.done(Some(step))]
}

/// auto: the first of tp-btf, raw-tp, tracepoint the kernel offers, and why not the others.
fn picked_mode(doc: &Json, o: &Offers, a: &mut Check) {
    let best = best_mode(o);
    let probe = doc["probe"].as_str().unwrap_or("");
    a.expect(probe == best.probe(), || {
        format!("picked {probe}, expected {}", best.probe())
    });
    let refused = doc["probe_refused"].items();
    for m in [Mode::TpBtf, Mode::RawTp, Mode::Tracepoint] {
        if m == best {
            break;
        }
        let missing = m.needs(o).err().unwrap_or("?");
        let why = refused
            .iter()
            .find(|r| r["mode"].as_str() == Some(m.probe()))
            .and_then(|r| r["reason"].as_str());
        match why {
            Some(w) => {
                a.expect(w.to_lowercase().contains(&missing.to_lowercase()), || {
                    format!(
                        "says {} was refused because {w:?}, which does not name {missing}",
                        m.probe()
                    )
                });
            }
            None => a.fail(format!(
                "probe_refused does not say why {} was not used",
                m.probe()
            )),
        }
    }
    a.expect(
        refused.len()
            == [Mode::TpBtf, Mode::RawTp, Mode::Tracepoint]
                .iter()
                .position(|m| *m == best)
                .unwrap_or(0),
        || {
            format!(
                "probe_refused lists more than the better modes: {}",
                doc["probe_refused"]
            )
        },
    );
    a.note(format!(
        "picked {probe}{}",
        if refused.is_empty() {
            String::new()
        } else {
            format!(
                "; refused {}",
                refused
                    .iter()
                    .map(|r| format!(
                        "{} ({})",
                        r["mode"].as_str().unwrap_or("?"),
                        r["reason"].as_str().unwrap_or("?")
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
}

/// Counters: every event counted, or said to be unsupported with a reason; never a 0
/// standing in for "cannot count"; task-clock agreeing with the threads' on-CPU time.
fn counters(doc: &Json, k: &mut Check) {
    let counters = doc["counters"]["counters"].items();
    k.expect(!counters.is_empty(), || "the report has no counters".into());
    let mut unsupported = Vec::new();
    for e in counters {
        let name = e["event"].as_str().unwrap_or("?");
        match e["supported"].as_bool() {
            Some(true) => {
                k.expect(e["value"].as_f64().is_some(), || {
                    format!("{name}: supported but no value")
                });
                k.expect(e["running_pct"].as_f64().is_some(), || {
                    format!("{name}: no running_pct")
                });
            }
            Some(false) => {
                k.expect(e["value"].is_null(), || {
                    format!("{name}: unsupported but value {}", e["value"])
                });
                k.expect(
                    e["reason"].as_str().is_some_and(|r| !r.trim().is_empty()),
                    || format!("{name}: unsupported without a reason"),
                );
                unsupported.push(name);
            }
            None => k.fail(format!("{name}: no `supported` field")),
        }
    }
    let value = |n: &str| {
        counters
            .iter()
            .find(|e| e["event"].as_str() == Some(n))
            .and_then(|e| e["value"].as_f64())
    };
    match value("task-clock") {
        Some(ms) => {
            let threads = doc["threads"].items();
            let on: u64 = threads.iter().filter_map(|t| t["on_cpu_ns"].as_u64()).sum();
            let slices: u64 = threads.iter().filter_map(|t| t["slices"].as_u64()).sum();
            let tc = (ms * 1e6) as u64;
            if k.expect(within_events(on, tc, slices, PER_SLICE_NS), || {
                format!(
                    "task-clock {ms:.3} ms vs the threads' on-CPU sum {:.3} ms ({:+.2}%, over {}% + {} us x {slices} slices)",
                    on as f64 / 1e6,
                    pct(on, tc),
                    TOLERANCE * 100.0,
                    PER_SLICE_NS / 1e3
                )
            }) {
                k.note(format!("task-clock {ms:.1} ms, threads' on-CPU {:+.2}% of it", pct(on, tc)));
            }
        }
        None => k.fail("task-clock was not counted"),
    }
    k.expect(value("context-switches").unwrap_or(0.0) > 0.0, || {
        "context-switches is 0".into()
    });
    zero_hardware_counts(doc, value("task-clock").unwrap_or(0.0), k);
    k.note(format!(
        "not supported here: {}",
        if unsupported.is_empty() {
            "none".to_string()
        } else {
            unsupported.join(", ")
        }
    ));
}

/// A hardware event the PMU accepts but never counts (QEMU's POWER PMU counts cycles
/// and instructions only) reads 0 over half a second of busy CPU: that zero stands in
/// for "not counted" and must be said as such, not shown as a count.
fn zero_hardware_counts(doc: &Json, cpu_ms: f64, k: &mut Check) {
    let counters = doc["counters"]["counters"].items();
    let notices = doc["notices"].items();
    for e in counters {
        let name = e["event"].as_str().unwrap_or("?");
        let hardware = [
            "cycles",
            "instructions",
            "branches",
            "branch-misses",
            "cache-references",
            "cache-misses",
        ]
        .contains(&name.split(':').next().unwrap_or(name));
        if hardware
            && e["supported"].as_bool() == Some(true)
            && e["value"].as_f64() == Some(0.0)
            && cpu_ms > 100.0
        {
            let explained = notices
                .iter()
                .filter_map(Json::as_str)
                .any(|n| n.contains(name));
            k.expect(explained, || {
                format!(
                    "{name}: reported as a count of 0 over {cpu_ms:.0} ms of CPU, with no notice that the PMU does not count it"
                )
            });
        }
    }
}

fn check_histograms(th: &Json, c: &mut Check) {
    let hs = &th["histograms"];
    let p50 = |k: &str| hs[k]["p50_ns"].as_f64().unwrap_or(0.0);
    let (on, off) = (p50("on_cpu"), p50("off_cpu"));
    // A slice is the 4 ms of spinning plus the way out of and into nanosleep, as the
    // scheduler accounts it (se.sum_exec_runtime, or sched_stat_runtime without BTF):
    // tracer_truth::SPIN_P50_EMULATED says how much more under emulation.
    // A percentile is reported as its bucket's upper edge: the median lies somewhere in
    // that bucket, which holds it when the bucket meets the expected range.
    let b = tracer_common::hist::bucket_index(on as u64);
    let lowest = tracer_common::hist::bucket_lower(b) as f64;
    let r = tracer_truth::SPIN_P50_EMULATED;
    c.expect(
        r.contains(on, 4e6)
            || r.contains(lowest, 4e6)
            || (lowest < 4e6 * r.low && on > 4e6 * r.high),
        || {
            format!(
                "on-CPU p50 {on} ns (its bucket from {lowest} ns), expected ~4 ms (3.92-4.70 ms)"
            )
        },
    );
    // nanosleep overshoots by the timer slack (50 us by default).
    c.expect(tracer_truth::SLEEP_P50.contains(off, 10e6), || {
        format!("off-CPU p50 {off} ns, expected ~10 ms (9.8-10.4 ms)")
    });
    for k in ["on_cpu", "runq", "off_cpu"] {
        let s = &hs[k];
        let g = |f: &str| s[f].as_u64().unwrap_or(0);
        c.expect(
            g("p50_ns") <= g("p99_ns") && g("p99_ns") <= g("max_ns"),
            || format!("{k}: percentiles out of order: {s}"),
        );
        let n: u64 = s["buckets"]
            .items()
            .iter()
            .filter_map(|b| b["count"].as_u64())
            .sum();
        c.expect(n == g("count"), || {
            format!("{k}: buckets add up to {n}, count is {}", g("count"))
        });
    }
    let num = |k: &str| th[k].as_u64();
    c.expect(hs["on_cpu"]["count"].as_u64() == num("slices"), || {
        format!(
            "on_cpu count {} != slices {:?}",
            hs["on_cpu"]["count"],
            num("slices")
        )
    });
    c.expect(hs["runq"]["count"].as_u64() == num("runq_waits"), || {
        format!(
            "runq count {} != runq_waits {:?}",
            hs["runq"]["count"],
            num("runq_waits")
        )
    });
    c.expect(th["exited"].as_bool() == Some(true), || {
        "the worker is not marked exited".into()
    });
    // No comparison with the worker's own schedstat line here: the thread ran its exit
    // path after reading it (slow under emulation); the probe-mode runs compare against
    // stopped threads instead.
    c.note(format!(
        "worker on-CPU p50 {:.3} ms, off-CPU p50 {:.3} ms, run-queue p50 {:.1} us over {} waits",
        on / 1e6,
        off / 1e6,
        p50("runq") / 1e3,
        hs["runq"]["count"]
    ));
}
