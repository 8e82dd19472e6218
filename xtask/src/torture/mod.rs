//! `cargo xtask torture`: a randomized differential harness. Each scenario, derived from
//! one seed, runs the `tracer-torture` workload (tests/src/bin/tracer-torture/: threads
//! that spin, sleep, block, change affinity, exit, fork, exec and change cgroups, each
//! writing its own schedstat/CLOCK_THREAD_CPUTIME_ID truth when it ends) under one target
//! mode × probe mode × interval setting, and checks the tracer's JSON against that truth
//! and against itself. A failure prints the seed and the exact command lines.

mod check;
mod consistency;
mod env;
mod report;
mod scenario;
mod scratch;
mod truth;

use std::{
    path::Path,
    time::{Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::Result;

use env::Env;
use report::summarize;

#[derive(clap::Args)]
pub struct TortureArgs {
    /// First scenario's seed (later ones: seed+1, ...); alone, reproduces that scenario
    #[arg(long)]
    seed: Option<u64>,
    /// Run scenarios for this long (default 5 unless --seed or --scenarios is given)
    #[arg(long)]
    minutes: Option<f64>,
    /// Run this many scenarios
    #[arg(long)]
    scenarios: Option<u64>,
    /// Keep each failing scenario's tracer output and workload truth in /tmp
    #[arg(long)]
    keep: bool,
}

/// Seeds of the short pass inside `cargo xtask test`: together they cover every target
/// mode, each probe mode, intervals, schedstat waits, window-edge exits and closed pipes.
const CI_SEEDS: &[u64] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];

pub fn torture(args: TortureArgs) -> Result<()> {
    let built = crate::build(false)?;
    let mut env = Env::new(&built.bin)?;
    env.keep = args.keep;
    let first = args.seed.unwrap_or_else(|| now_ns() % 1_000_000);
    let limit = match (args.scenarios, args.minutes, args.seed) {
        (Some(n), _, _) => Some(n),
        (None, None, Some(_)) => Some(1),
        _ => None,
    };
    let minutes = args.minutes.unwrap_or(5.0);
    let t0 = Instant::now();
    let mut results = Vec::new();
    let mut seed = first;
    while limit.map_or(t0.elapsed().as_secs_f64() < minutes * 60.0, |n| {
        (results.len() as u64) < n
    }) {
        results.push(env.run(seed)?);
        seed += 1;
    }
    summarize(&results, t0.elapsed())
}

/// More runs of a seed that failed, in the CI pass.
const RERUNS: usize = 2;

/// The short fixed-seed pass of `cargo xtask test`.
pub fn ci_pass(tracer: &Path) -> Result<()> {
    let env = Env::new(tracer)?;
    let t0 = Instant::now();
    let mut results = Vec::new();
    let mut flaky = Vec::new();
    for &seed in CI_SEEDS {
        let first = env.run(seed)?;
        if first.violations.is_empty() {
            results.push(first);
            continue;
        }
        // A seed fixes the scenario, not the interleaving: a violation that does not come
        // back on one of RERUNS more runs of the same seed is printed (above) and named
        // here, but does not fail CI; one that comes back every time does. (Seed 11 meets
        // the rare new-thread miss of classic-tracepoint mode the README names, about one
        // run in three on a quiet 2-CPU VM.) `cargo xtask torture` never retries.
        let mut last = first;
        for _ in 0..RERUNS {
            last = env.run(seed)?;
            if last.violations.is_empty() {
                flaky.push(seed);
                break;
            }
        }
        results.push(last);
    }
    if !flaky.is_empty() {
        println!(
            "torture: seeds {flaky:?} failed and then passed when run again (printed above; \
             reproduce with `cargo xtask torture --seed N`)"
        );
    }
    summarize(&results, t0.elapsed())
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
