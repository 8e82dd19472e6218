//! What a scenario found (violations by invariant class, notes, checks) and the summary of
//! a run, with the open bugs it knows of, if any.

use std::{fmt::Write as _, time::Duration};

use anyhow::{bail, Result};

use super::scenario::Scenario;

/// Notes printed with a failure (interval-internal disagreements can be many).
pub(super) const MAX_NOTES: usize = 6;

/// The invariant a violation breaks: what the summary groups by, and what a known open
/// bug is listed under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Class {
    /// The harness itself could not run the scenario.
    Harness,
    /// The tracer failed, hung or panicked.
    Tracer,
    /// The workload's own truth is incomplete.
    Truth,
    /// A thread of the target neither reported nor counted in `drops`.
    Missing,
    /// A row from outside the target, or with the wrong identity.
    Target,
    /// On-CPU time against the thread's schedstat.
    OnCpu,
    /// Slices against schedstat's pcount.
    Slices,
    /// Run-queue waits against run_delay.
    Runq,
    /// On- plus off-CPU time against the thread's time inside the window.
    Lifetime,
    /// A thread's name as the kernel has it.
    Name,
    /// A loss counted in `drops`.
    Drops,
    /// Anything above the window.
    Window,
    /// Sums and histograms within one document.
    Document,
    /// Interval documents adding up to the total.
    Intervals,
    /// The Perfetto trace against the run's own summary and window.
    Trace,
    /// The closed-pipe run.
    Pipe,
}

impl Class {
    pub(super) fn name(self) -> &'static str {
        match self {
            Class::Harness => "harness",
            Class::Tracer => "tracer-failed",
            Class::Truth => "workload-truth",
            Class::Missing => "thread-missing",
            Class::Target => "outside-target",
            Class::OnCpu => "on-cpu",
            Class::Slices => "slices",
            Class::Runq => "runq-wait",
            Class::Lifetime => "on+off=lifetime",
            Class::Name => "name",
            Class::Drops => "drops",
            Class::Window => "above-window",
            Class::Document => "document-sums",
            Class::Intervals => "intervals=total",
            Class::Trace => "trace=summary",
            Class::Pipe => "closed-pipe",
        }
    }
}

pub(super) struct Violation {
    pub(super) class: Class,
    pub(super) text: String,
}

/// An open bug the CI pass lets through: its seeds' violations of that class whose text
/// shows one of its symptoms (and only those) are listed in the summary with the reason
/// instead of failing. Another bug of the same class on the same seed still fails.
/// Never a rerun.
pub(super) struct Known {
    pub(super) class: Class,
    pub(super) seeds: &'static [u64],
    /// Substrings of the violation's text, one of which it must contain.
    pub(super) symptoms: &'static [&'static str],
    pub(super) reason: &'static str,
}

/// The symptom an exec from a non-main thread shows: its entity's name.
const EXEC_THREAD: &str = "exec from a non-main thread";

/// The open bugs of the CI pass, each seen failing its seeds intermittently on
/// 2026-12-01 (issue 24, open). Every violation they let through is printed with the
/// reason; any other class, or the same class on another seed, fails the pass.
pub(super) const KNOWN: &[Known] = &[
    Known {
        class: Class::Slices,
        seeds: &[3, 13, 16],
        symptoms: &[EXEC_THREAD],
        reason: "exec from a non-main thread: after the exec some switches of the exec'd \
                 thread are not counted as slices (7-12 fewer than pcount, on-CPU agrees)",
    },
    Known {
        class: Class::Slices,
        seeds: &[5],
        symptoms: &["slices above ["],
        reason: "the exit tail of a thread among ~200: up to 11 slices after its last \
                 record (its stack and TLS teardown; EXIT_SLICES allows 8), seen once in \
                 9 runs",
    },
    Known {
        class: Class::Runq,
        seeds: &[16],
        symptoms: &[EXEC_THREAD],
        reason: "exec from a non-main thread: the exec'd thread's row under the leader's \
                 TID is sometimes missing (its waits with it)",
    },
    Known {
        class: Class::Window,
        seeds: &[16],
        symptoms: &["+ off-CPU"],
        reason: "exec from a non-main thread: a leader's on + off exceeds the window",
    },
    Known {
        class: Class::Trace,
        seeds: &[5, 13, 16],
        symptoms: &[
            "run-queue waits in the trace",
            "on-CPU rebuilt from the trace",
        ],
        reason: "one wait more in the trace than in the summary, raw-tp system-wide (5, \
                 seen again 2026-12-03); not yet explained: a thread's on-CPU rebuilt from \
                 the trace 1.4-2 ms above the summary's (13 futex +2.0%, 16 solo +2.4%, 5 \
                 pin-cross +8.6%; seen once each, 2026-12-01)",
    },
    Known {
        class: Class::Intervals,
        seeds: &[5, 10],
        symptoms: &["whose intervals do not add up"],
        reason: "system-wide: a thread of PID 1 this kernel never reports as a switch's \
                 prev (switch_in_unseen) has more off-CPU in its intervals than its total",
    },
    Known {
        class: Class::OnCpu,
        seeds: &[6, 10, 16],
        symptoms: &["above [", EXEC_THREAD],
        reason: "not yet explained: a thread's on-CPU 3-5 ms above its schedstat at its \
                 last record (6: a thread born during start-up, raw-tp; 10: a thread \
                 leaving the cgroup, system-wide); 16: the exec'd thread's row missing",
    },
    Known {
        class: Class::OnCpu,
        seeds: &[14],
        symptoms: &["chain TID"],
        reason: "not yet explained: a start-up chain thread of 1.2 ms on-CPU by its \
                 schedstat reported with 13.2 ms in 3 slices (classic tracepoints, \
                 --cgroup; once in 15 passes on 2026-12-03, 0 in 12 runs of seed 14 \
                 after)",
    },
    Known {
        class: Class::Lifetime,
        seeds: &[1, 4],
        symptoms: &["lived inside the window"],
        reason: "not yet explained: about 2% of one thread's life in the window is neither \
                 on- nor off-CPU (seed 4 main thread, nested --cgroup, window closing at \
                 the exits; seed 1 -p with threads born during start-up)",
    },
    Known {
        class: Class::Document,
        seeds: &[1, 5, 11, 15, 16],
        symptoms: &["histograms."],
        reason: "an interval's histogram is read before its threads: slices ending \
                 between the two reads count in one interval and sum in the next (11, 16; \
                 seen again 2026-12-03, once in 15 passes; reading HIST twice was tried \
                 and reverted, 5c528cc); a pending wait counted twice by the per-bucket \
                 maximum (1, 5: total runq count one above the waits; fixed 2026-12-06, \
                 086c4cf, kept here until seeds 1 and 5 have run clean); not yet explained: \
                 the total's on-CPU count one above the threads' slices with their on-CPU \
                 times equal (15, system-wide tp-btf, once in 53 runs of seed 15 on \
                 2026-12-04, 0 in 25 on the build before that day's eBPF changes)",
    },
];

pub(super) struct Outcome {
    pub(super) scenario: Scenario,
    pub(super) tracer_cmd: String,
    pub(super) workload_cmd: String,
    pub(super) violations: Vec<Violation>,
    pub(super) notes: Vec<String>,
    pub(super) checks: usize,
    pub(super) threads: usize,
    /// ftrace's scheduler events read for the scenario, and the sleep run_delay counted
    /// after moves of sleeping threads (`moves`), ns.
    pub(super) sched_events: usize,
    pub(super) moved_sleep_ns: u64,
}

impl Outcome {
    pub(super) fn new(scenario: Scenario) -> Outcome {
        Outcome {
            scenario,
            tracer_cmd: String::new(),
            workload_cmd: String::new(),
            violations: Vec::new(),
            notes: Vec::new(),
            checks: 0,
            threads: 0,
            sched_events: 0,
            moved_sleep_ns: 0,
        }
    }

    pub(super) fn violate(&mut self, class: Class, text: String) {
        self.violations.push(Violation { class, text });
    }

    /// Counts one check; records a violation when it does not hold.
    pub(super) fn expect(&mut self, class: Class, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.violate(class, what());
        }
    }

    /// The classes broken, each once, in order.
    pub(super) fn classes(&self) -> Vec<Class> {
        let mut c: Vec<Class> = self.violations.iter().map(|v| v.class).collect();
        c.sort();
        c.dedup();
        c
    }

    /// The known bug every violation of this scenario belongs to, if they all do.
    fn known<'a>(&self, known: &'a [Known]) -> Vec<&'a Known> {
        let mine = |v: &Violation| {
            known.iter().find(|k| {
                k.class == v.class
                    && k.seeds.contains(&self.scenario.seed)
                    && k.symptoms.iter().any(|sym| v.text.contains(sym))
            })
        };
        if self.violations.is_empty() || !self.violations.iter().all(|v| mine(v).is_some()) {
            return Vec::new();
        }
        let mut ks: Vec<&Known> = self.violations.iter().filter_map(mine).collect();
        ks.dedup_by_key(|k| k.class);
        ks
    }

    pub(super) fn print_failure(&self) {
        let sc = &self.scenario;
        let mut s = String::new();
        let _ = writeln!(s, "torture: FAIL seed {}: {sc}", sc.seed);
        let _ = writeln!(s, "  reproduce: cargo xtask torture --seed {}", sc.seed);
        let _ = writeln!(s, "  tracer:   {}", self.tracer_cmd);
        let _ = writeln!(s, "  workload: {}", self.workload_cmd);
        for v in &self.violations {
            let _ = writeln!(s, "  - [{}] {}", v.class.name(), v.text);
        }
        for n in self.notes.iter().take(MAX_NOTES) {
            let _ = writeln!(s, "  note: {n}");
        }
        if self.notes.len() > MAX_NOTES {
            let _ = writeln!(s, "  ({} more notes)", self.notes.len() - MAX_NOTES);
        }
        print!("{s}");
    }
}

/// Prints the summary; fails when a scenario broke an invariant that no entry of `known`
/// names for its seed.
pub(super) fn summarize(results: &[Outcome], took: Duration, known: &[Known]) -> Result<()> {
    let broken: Vec<&Outcome> = results
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    let (excused, failed): (Vec<&Outcome>, Vec<&Outcome>) =
        broken.into_iter().partition(|r| !r.known(known).is_empty());
    let checks: usize = results.iter().map(|r| r.checks).sum();
    println!(
        "torture: {} scenarios, {} checks, {} failed, {} known open bugs, {:.0} s",
        results.len(),
        checks,
        failed.len(),
        excused.len(),
        took.as_secs_f64()
    );
    for r in &excused {
        for k in r.known(known) {
            println!(
                "torture: known open bug, seed {} [{}]: {}",
                r.scenario.seed,
                k.class.name(),
                k.reason
            );
        }
    }
    if !failed.is_empty() {
        println!("torture: failed seeds (reproduce each with `cargo xtask torture --seed N`):");
        for f in &failed {
            let classes: Vec<&str> = f.classes().iter().map(|c| c.name()).collect();
            println!(
                "  {} ({} violations: {}): {}",
                f.scenario.seed,
                f.violations.len(),
                classes.join(", "),
                f.scenario
            );
        }
        bail!(
            "{} of {} torture scenarios failed",
            failed.len(),
            results.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torture::scenario::tests::scenario;

    fn outcome(seed: u64, classes: &[Class]) -> Outcome {
        let mut o = Outcome::new(scenario(seed));
        for c in classes {
            o.violate(*c, format!("{} broke", c.name()));
        }
        o
    }

    const OPEN: &[Known] = &[Known {
        class: Class::Missing,
        seeds: &[11],
        symptoms: &["broke"],
        reason: "a test reason",
    }];

    #[test]
    fn any_violation_fails_the_run() {
        let r = [outcome(1, &[]), outcome(2, &[Class::OnCpu])];
        assert!(summarize(&r, Duration::ZERO, KNOWN).is_err());
        assert!(summarize(&r[..1], Duration::ZERO, KNOWN).is_ok());
    }

    #[test]
    fn a_known_bug_excuses_only_its_class_on_its_seeds() {
        assert!(summarize(&[outcome(11, &[Class::Missing])], Duration::ZERO, OPEN).is_ok());
        // Another class on the same seed, or the same class on another seed, fails.
        let mixed = outcome(11, &[Class::Missing, Class::OnCpu]);
        assert!(summarize(&[mixed], Duration::ZERO, OPEN).is_err());
        assert!(summarize(&[outcome(12, &[Class::Missing])], Duration::ZERO, OPEN).is_err());
    }

    #[test]
    fn a_known_bug_excuses_only_its_symptoms() {
        let mut o = outcome(11, &[]);
        o.violate(Class::Missing, "thread-missing: another bug".into());
        assert!(summarize(&[o], Duration::ZERO, OPEN).is_err());
        // Every KNOWN entry names at least one symptom (an empty list excuses nothing).
        assert!(KNOWN.iter().all(|k| !k.symptoms.is_empty()));
    }
}
