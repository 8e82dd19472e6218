//! What a scenario found (violations, notes, checks) and the summary of a run.

use std::{fmt::Write as _, time::Duration};

use anyhow::{bail, Result};

use super::scenario::Scenario;

/// Notes printed with a failure (interval-internal disagreements can be many).
pub(super) const MAX_NOTES: usize = 6;

pub(super) struct Outcome {
    pub(super) scenario: Scenario,
    pub(super) tracer_cmd: String,
    pub(super) workload_cmd: String,
    pub(super) violations: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) checks: usize,
    pub(super) threads: usize,
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
        }
    }

    pub(super) fn violate(&mut self, v: String) {
        self.violations.push(v);
    }

    /// Counts one check; records a violation when it does not hold.
    pub(super) fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.violations.push(what());
        }
    }

    pub(super) fn print_failure(&self) {
        let sc = &self.scenario;
        let mut s = String::new();
        let _ = writeln!(s, "torture: FAIL seed {}: {sc}", sc.seed);
        let _ = writeln!(s, "  reproduce: cargo xtask torture --seed {}", sc.seed);
        let _ = writeln!(s, "  tracer:   {}", self.tracer_cmd);
        let _ = writeln!(s, "  workload: {}", self.workload_cmd);
        for v in &self.violations {
            let _ = writeln!(s, "  - {v}");
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

pub(super) fn summarize(results: &[Outcome], took: Duration) -> Result<()> {
    let failed: Vec<&Outcome> = results
        .iter()
        .filter(|r| !r.violations.is_empty())
        .collect();
    let checks: usize = results.iter().map(|r| r.checks).sum();
    println!(
        "torture: {} scenarios, {} checks, {} scenarios failed, {:.0} s",
        results.len(),
        checks,
        failed.len(),
        took.as_secs_f64()
    );
    if !failed.is_empty() {
        println!("torture: failed seeds (reproduce each with `cargo xtask torture --seed N`):");
        for f in &failed {
            println!(
                "  {} ({} violations): {}",
                f.scenario.seed,
                f.violations.len(),
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
