//! Hardware counters on a PMU that counts: arm64's PMUv3 under qemu's `-cpu max` (the
//! x86_64 and POWER guests have none that counts). The exception-level regime the guest
//! booted in (EL1, or EL2 with VHE) comes from its own boot log, and decides what each
//! modifier must do (Documentation/arch/arm64/perf.rst).

use super::common::*;

/// Allowance per slice for the switch path the slices count and the thread's own
/// counter does not (see `slices`).
const SLICE_PATH_NS: f64 = 3.0 * PER_SLICE_NS;

/// `a` within `tracer_truth::COUNTER_SPLIT` (10%) of `b`.
fn close(a: f64, b: f64) -> bool {
    tracer_truth::COUNTER_SPLIT.holds(a, b)
}

/// A counter of the report by event name (the first, for repeated names).
fn counter<'a>(doc: &'a Json, event: &str) -> Option<&'a Json> {
    doc["counters"]["counters"]
        .items()
        .iter()
        .find(|e| e["event"].as_str() == Some(event))
}

fn value(doc: &Json, event: &str) -> Option<f64> {
    counter(doc, event).and_then(|e| e["value"].as_f64())
}

/// The regime the guest booted in, from its facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Regime {
    El1,
    Vhe,
}

impl Regime {
    fn of(g: &GuestOutput) -> Option<Regime> {
        let f = facts(g.step("facts-boot")?);
        match (fact(&f, "boot_el"), fact(&f, "vhe")) {
            ("EL1", _) => Some(Regime::El1),
            ("EL2", "yes") => Some(Regime::Vhe),
            _ => None,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Regime::El1 => "kernel at EL1",
            Regime::Vhe => "kernel at EL2, VHE",
        }
    }

    /// (modifier event, what its notice must say, whether it reads 0 with no guest).
    fn expected(self) -> [(&'static str, &'static str, bool); 3] {
        match self {
            Regime::El1 => [
                ("cycles:h", "selects no exception level", true),
                ("cycles:G", "selects no exception level", true),
                ("cycles:H", "has no effect", false),
            ],
            Regime::Vhe => [
                ("cycles:h", "selects no exception level", true),
                ("cycles:G", "only KVM guests", true),
                ("cycles:H", "only by KVM guests", false),
            ],
        }
    }
}

/// The report of a PMU step that must have run cleanly.
fn pmu_report<'a>(g: &'a GuestOutput, name: &str, c: &mut Check) -> Option<(&'a Step, Json)> {
    let step = need_step(g, name, c)?;
    if let Some(crash) = crashed(step) {
        c.fail(crash);
    }
    if !c.expect(step.rc == Some(0), || format!("exit status {:?}", step.rc)) {
        return None;
    }
    let doc = report(step, c)?;
    Some((step, doc))
}

/// `cycles`, `:u`, `:k` counted, `:u + :k` close to the unmodified count, an event qemu
/// does not implement said to be unsupported.
fn user_kernel(doc: &Json, c: &mut Check) {
    let get = |e: &str| value(doc, e).unwrap_or(0.0);
    for e in ["cycles", "cycles:u", "cycles:k"] {
        c.expect(get(e) > 0.0, || format!("{e} is {:?}", value(doc, e)));
    }
    let (all, u, k) = (get("cycles"), get("cycles:u"), get("cycles:k"));
    c.expect(close(u + k, all), || {
        format!(
            "cycles:u + cycles:k = {:.0} vs cycles {all:.0} ({:+.1}%, over 10%)",
            u + k,
            100.0 * (u + k - all) / all.max(1.0)
        )
    });
    // qemu's PMU implements no branch events: said to be unsupported, with a reason.
    let unsupported = |e: &Json| {
        e["supported"].as_bool() == Some(false)
            && e["value"].is_null()
            && e["reason"].as_str().is_some_and(|r| !r.is_empty())
    };
    let misses = counter(doc, "branch-misses");
    c.expect(misses.is_some_and(unsupported), || {
        format!(
            "branch-misses (not implemented by qemu's PMU) is not reported unsupported with a reason: {}",
            misses.map_or("absent".to_string(), Json::to_string)
        )
    });
    // Instructions count only when qemu counts time in instructions (-icount, the
    // checks' boots); either way never a silent zero.
    let insn = counter(doc, "instructions");
    let counted = insn.is_some_and(|i| i["supported"].as_bool() == Some(true))
        && value(doc, "instructions").is_some_and(|v| v > 0.0);
    c.expect(counted || insn.is_some_and(unsupported), || {
        format!(
            "instructions is neither counted nor reported unsupported with a reason: {}",
            insn.map_or("absent".to_string(), Json::to_string)
        )
    });
    c.note(format!(
        "cycles {all:.0} = user {:.1}% + kernel {:.1}% ({:+.2}%); instructions: {}; branch-misses: {}",
        100.0 * u / all.max(1.0),
        100.0 * k / all.max(1.0),
        100.0 * (u + k - all) / all.max(1.0),
        if counted {
            format!("{:.0}", value(doc, "instructions").unwrap_or(0.0))
        } else {
            insn.and_then(|i| i["reason"].as_str()).unwrap_or("?").to_string()
        },
        misses.and_then(|i| i["reason"].as_str()).unwrap_or("?")
    ));
}

/// What `:h`, `:G`, `:H` do in this regime, and that the report says so.
fn modifiers(doc: &Json, regime: Regime, c: &mut Check) {
    let notices: Vec<&str> = doc["notices"]
        .items()
        .iter()
        .filter_map(Json::as_str)
        .collect();
    let all = value(doc, "cycles").unwrap_or(0.0);
    let mut seen = Vec::new();
    for (event, says, zero) in regime.expected() {
        let v = value(doc, event);
        let notice = notices.iter().find(|n| n.starts_with(&format!("{event}:")));
        c.expect(notice.is_some_and(|n| n.contains(says)), || {
            format!(
                "no notice that {event} {says} ({}); notices: {notices:?}",
                regime.label()
            )
        });
        if zero {
            c.expect(v == Some(0.0), || {
                format!("{event} is {v:?}, expected 0 ({})", regime.label())
            });
        } else {
            c.expect(v.is_some_and(|v| close(v, all)), || {
                format!("{event} is {v:?}, expected within 10% of cycles {all:.0}")
            });
        }
        c.expect(
            !notices
                .iter()
                .any(|n| n.starts_with(event) && n.contains("without implementing")),
            || format!("{event}'s 0 is also blamed on the PMU"),
        );
        seen.push(format!("{event} {:.0}", v.unwrap_or(-1.0)));
    }
    c.note(format!("{}: {}", regime.label(), seen.join(", ")));
}

/// The checks of the `pmu-levels` step (both boots).
pub(super) fn check_levels(g: &GuestOutput, o: &Offers) -> Vec<Verdict> {
    if !o.arm_pmu {
        return Vec::new();
    }
    let mut c = Check::new("hardware counters: cycles, :u + :k, an unsupported event");
    let mut m = Check::new("exception-level modifiers");
    let Some((step, doc)) = pmu_report(g, "pmu-levels", &mut c) else {
        let step = g.step("pmu-levels");
        return vec![c.done(step)];
    };
    user_kernel(&doc, &mut c);
    match Regime::of(g) {
        Some(regime) => {
            m.name = format!("exception-level modifiers ({})", regime.label());
            modifiers(&doc, regime, &mut m);
        }
        None => m.fail("the guest's boot log names no exception level it started at"),
    }
    vec![c.done(Some(step)), m.done(Some(step))]
}

/// More `cycles` events than counters: each ran part of the time and is scaled.
fn multiplexing(g: &GuestOutput) -> Verdict {
    let mut c = Check::new("multiplexing: more cycles events than counters, scaled");
    let Some((step, doc)) = pmu_report(g, "pmu-multiplex", &mut c) else {
        return c.done(g.step("pmu-multiplex"));
    };
    let counters = doc["counters"]["counters"].items();
    let slots = g
        .step("facts-boot")
        .map(facts)
        .and_then(|f| fact(&f, "pmu_counters").parse::<usize>().ok());
    c.expect(slots.is_some_and(|n| counters.len() > n), || {
        format!(
            "{} events for {slots:?} counters: no reason to multiplex",
            counters.len()
        )
    });
    let pcts: Vec<f64> = counters
        .iter()
        .filter_map(|e| e["running_pct"].as_f64())
        .collect();
    let values: Vec<f64> = counters
        .iter()
        .filter_map(|e| e["value"].as_f64())
        .collect();
    c.expect(
        pcts.len() == counters.len() && values.len() == counters.len(),
        || "an event has no value or running_pct".into(),
    );
    c.expect(pcts.iter().all(|p| *p > 0.0 && *p < 100.0), || {
        format!("running_pct {pcts:?}: expected every event between 0 and 100%")
    });
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let spread = values
        .iter()
        .map(|v| (v - mean).abs() / mean.max(1.0))
        .fold(0.0, f64::max);
    c.expect(spread <= tracer_truth::MULTIPLEXED_SPREAD, || {
        format!(
            "scaled values {values:?} spread {:.1}% around their mean (over 15%)",
            100.0 * spread
        )
    });
    let (lo, hi) = pcts
        .iter()
        .fold((f64::MAX, 0.0f64), |(l, h), p| (l.min(*p), h.max(*p)));
    c.note(format!(
        "{} events on {} counters: running {lo:.1}-{hi:.1}%, scaled within {:.1}% of their mean",
        counters.len(),
        slots.unwrap_or(0),
        100.0 * spread
    ));
    c.done(Some(step))
}

/// Per-slice cycles summed in the kernel against each thread's own cycles counter.
fn slices(g: &GuestOutput) -> Verdict {
    let mut c = Check::new("per-slice cycles (--slice-event) vs per-thread counters");
    let Some((step, doc)) = pmu_report(g, "pmu-slices", &mut c) else {
        return c.done(g.step("pmu-slices"));
    };
    let mut compared = Vec::new();
    for th in doc["threads"].items() {
        let slice = th["slice_counters"]["cycles"].as_f64();
        let own = th["counters"]["cycles"].as_f64();
        let (tid, n) = (&th["tid"], th["slices"].as_u64().unwrap_or(0));
        let on_ns = th["on_cpu_ns"].as_f64().unwrap_or(0.0);
        let (Some(s), Some(o)) = (slice, own) else {
            continue;
        };
        if o < 1e6 || on_ns <= 0.0 {
            continue;
        }
        // The slices run from one switch tracepoint to the next, the thread's counter
        // from perf's sched-in hook to its sched-out hook: the switch path between them
        // is counted by the slices only. It is slow under emulation, where qemu's cycles
        // follow the clock, and arm64 under TCG runs 2-3x slower than x86_64 (the steps'
        // times): three times task-clock's allowance per slice, in this thread's cycles
        // (measured: +2.2% to +12.8%, 160-525 us a slice, on a busy 2-CPU host).
        let allowance = TOLERANCE * o + n as f64 * SLICE_PATH_NS * (o / on_ns);
        c.expect(s >= o * (1.0 - TOLERANCE) && s - o <= allowance, || {
            format!(
                "tid {tid}: slices sum to {s:.0} cycles, its counter {o:.0} ({:+.1}%; allowed -{}% .. +{:.0} = {}% + {} us x {n} slices)",
                100.0 * (s - o) / o,
                TOLERANCE * 100.0,
                allowance,
                TOLERANCE * 100.0,
                SLICE_PATH_NS / 1e3
            )
        });
        compared.push(format!(
            "{:+.2}% over {n} slices ({:.0} cycles a slice)",
            100.0 * (s - o) / o,
            (s - o) / n.max(1) as f64
        ));
    }
    c.expect(compared.len() >= 2, || {
        format!(
            "{} busy threads with both figures; expected the 2 workers",
            compared.len()
        )
    });
    c.note(format!("per thread: {}", compared.join(", ")));
    c.done(Some(step))
}

/// Every hardware-counter check of a boot that ran all steps.
pub(super) fn check_pmu(g: &GuestOutput, o: &Offers) -> Vec<Verdict> {
    if !o.arm_pmu {
        return Vec::new();
    }
    let mut v = check_levels(g, o);
    v.push(multiplexing(g));
    v.push(slices(g));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::protocol;

    /// A guest that booted at `el` and ran pmu-levels, with the report's notices.
    fn guest(el: &str, vhe: &str, notices: &[&str], h: u64) -> GuestOutput {
        let counters = [
            ("cycles", 1000.0),
            ("cycles:u", 300.0),
            ("cycles:k", 699.0),
            ("cycles:h", h as f64),
            ("cycles:G", 0.0),
            ("cycles:H", 1001.0),
        ]
        .iter()
        .map(|(e, v)| format!(r#"{{"event":"{e}","value":{v},"supported":true,"reason":null}}"#))
        .chain([
            r#"{"event":"instructions","value":null,"supported":false,"reason":"ENOENT"}"#
                .to_string(),
            r#"{"event":"branch-misses","value":null,"supported":false,"reason":"ENOENT"}"#
                .to_string(),
        ])
        .collect::<Vec<_>>()
        .join(",");
        let notices = notices
            .iter()
            .map(|n| format!("{n:?}"))
            .collect::<Vec<_>>()
            .join(",");
        protocol::parse(&format!(
            "@@vmtest begin facts-boot\n@@vmtest part stdout\nboot_el={el}\nvhe={vhe}\n\
             @@vmtest end facts-boot rc=0 t0=1 t1=2\n\
             @@vmtest begin pmu-levels\n@@vmtest part stdout\n\
             {{\"counters\":{{\"counters\":[{counters}]}},\"notices\":[{notices}]}}\n\
             @@vmtest end pmu-levels rc=0 t0=2 t1=3\n@@vmtest done\n"
        ))
    }

    fn offers() -> Offers {
        Offers::from_config("CONFIG_ARM_PMU=y\nCONFIG_HW_PERF_EVENTS=y\n")
    }

    #[test]
    fn modifiers_are_checked_against_the_regime_the_guest_booted_in() {
        let el1 = [
            "cycles:h: `:h` selects no exception level where code runs",
            "cycles:G: `:G` selects no exception level where code runs",
            "cycles:H: `:H` has no effect on this machine",
        ];
        let v = check_levels(&guest("EL1", "no", &el1, 0), &offers());
        assert!(v.iter().all(|v| v.pass), "{v:#?}");
        // The same notices do not fit a VHE boot, where :G counts guests.
        let v = check_levels(&guest("EL2", "yes", &el1, 0), &offers());
        assert!(!v[1].pass && v[1].name.contains("VHE"), "{v:#?}");
        // A :h that counted, or a notice missing, fails.
        assert!(!check_levels(&guest("EL1", "no", &el1, 5), &offers())[1].pass);
        assert!(!check_levels(&guest("EL1", "no", &el1[..2], 0), &offers())[1].pass);
        // No PMU in the config: nothing to check (the steps do not run either).
        assert!(check_levels(&guest("EL1", "no", &el1, 0), &Offers::from_config("")).is_empty());
    }
}
