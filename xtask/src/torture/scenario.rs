//! A scenario from its seed: target mode, probe mode, interval, window edge, workload
//! length, closed pipe.

use tracer_truth::Rng;

/// Seeds of the short pass inside `cargo xtask test`: together they cover every target
/// mode, each probe mode, intervals, schedstat waits, window-edge exits, closed pipes and
/// every focus (`Focus`; `the_ci_seeds_cover_every_focus_and_target`). After them,
/// random seeds that once broke, each failing every run before its fix: 36917 and 36751
/// (a thread asleep at the close that died before the final read lost its off-CPU time
/// up to the close; 10 of 10 runs failed before, 0 of 10 after, 2026-12-06); 917296
/// (`-p` threads exiting at the close, preempted between leaving the PID hash and their
/// final switch, missing from the final read: 5 of 6 runs failed before, 0 of 10 after);
/// 917278 (a renamed thread that left /proc between the two final reads shown under the
/// name it was created with: 2 of 2 failed before, 0 of 3 after); and, failing in
/// most runs before their fix, 345355 (system-wide tp-btf threads exiting at the close
/// missing the same way: 3 of 4 failed before, 0 of 5 after) and 345292 (an interval's
/// histograms counting slices its threads did not show: 2 of 5 failed before, 4 of 8
/// with half the fix, 0 of 10 after). Then two `-p` targets of a crowd of ~2,100 sleeping
/// threads (`Scenario::crowd`), where a 5,000-thread process once failed with EMFILE and
/// reads were quadratic: 121 with a descriptor limit the tracer raises to its hard limit,
/// 516 with one it cannot (the default counters left out). Then 1004013 (`record -i`
/// beside a pinned SCHED_FIFO spinner holding exiting threads: an interval read went on
/// without them and the next interval showed their work, 3 of 10 runs failed before, 0
/// of 12 after) and 1005040 (system-wide classic tracepoints, a crowd released at the
/// close: 92 threads shown as PID 0, 0 of 5 after).
pub(super) const CI_SEEDS: &[u64] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 36917, 36751, 917296, 917278, 345355,
    345292, 235494, 121, 516, 1004013, 1005040,
];

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Target {
    System,
    Pid,
    Tid,
    Cgroup,
    Cmd,
}

impl Target {
    pub(super) fn name(self) -> &'static str {
        match self {
            Target::System => "system-wide",
            Target::Pid => "-p",
            Target::Tid => "-t",
            Target::Cgroup => "--cgroup",
            Target::Cmd => "-- CMD",
        }
    }
}

/// The part a scenario adds to the base workload (one a seed, so a failure names
/// its cause): threads and a child born while the tracer starts, threads asleep across
/// the window's edges, ping-pong partners pinned to one CPU and across two, processes of
/// tens of ms, names that are not UTF-8, a `--cgroup` whose processes are all in child
/// cgroups, a process leaving the `--cgroup`, and `tracer record` with its trace rebuilt.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Focus {
    Startup,
    Sleepers,
    Pinned,
    Short,
    Names,
    Nested,
    Leave,
    Record,
}

impl Focus {
    pub(super) fn name(self) -> &'static str {
        match self {
            Focus::Startup => "threads born during start-up",
            Focus::Sleepers => "asleep across the edges",
            Focus::Pinned => "pinned ping-pong",
            Focus::Short => "short-lived processes",
            Focus::Names => "non-UTF-8 names",
            Focus::Nested => "nested cgroups",
            Focus::Leave => "leaving the cgroup",
            Focus::Record => "record + rebuilt trace",
        }
    }

    /// The foci a target mode walks through, seed after seed.
    fn of(target: Target) -> &'static [Focus] {
        use Focus::*;
        match target {
            Target::System => &[Short, Record, Names, Sleepers, Pinned],
            Target::Pid => &[Startup, Startup, Sleepers, Record, Names, Short],
            Target::Tid => &[Names, Startup, Sleepers],
            Target::Cmd => &[Pinned, Short, Record, Names],
            Target::Cgroup => &[Nested, Leave, Startup, Sleepers, Short],
        }
    }
}

pub(super) struct Scenario {
    pub(super) seed: u64,
    pub(super) target: Target,
    pub(super) probe: String,
    pub(super) focus: Focus,
    /// Focus::Startup: ms after `ready` the thread starts and the child is forked.
    pub(super) startup_ms: (u64, u64),
    /// Focus::Short: how many processes.
    pub(super) short: u64,
    pub(super) interval_ms: Option<u64>,
    pub(super) runq_schedstat: bool,
    /// The window closes while the workload's last threads end.
    pub(super) edge: bool,
    /// Signed offset of -d from the workload's length in edge scenarios (ms).
    pub(super) edge_jitter_ms: i64,
    pub(super) workload_ms: u64,
    /// Also run the tracer with a reader that closes the pipe early.
    pub(super) pipe_close: Option<bool>,
    /// Threads of the workload asleep from before the window to its end (0: none).
    pub(super) crowd: u64,
    /// The tracer's descriptor limit (soft, hard), below what `-p`'s per-thread counters
    /// of a crowd need (a 5,000-thread `-p` once failed with EMFILE, 2026-12-07).
    pub(super) nofile: Option<(u64, u64)>,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let focus = match self.focus {
            Focus::Startup => format!(
                "{} (thread at +{} ms, child at +{} ms)",
                self.focus.name(),
                self.startup_ms.0,
                self.startup_ms.1
            ),
            Focus::Short => format!("{} ({})", self.focus.name(), self.short),
            f => f.name().to_string(),
        };
        write!(
            f,
            "target {}, probe {}, {focus}, {}{}{}workload {} ms",
            self.target.name(),
            self.probe,
            self.interval_ms
                .map_or(String::new(), |i| format!("-i {i}ms, ")),
            if self.runq_schedstat {
                "--runq-from schedstat, "
            } else {
                ""
            },
            if self.edge {
                format!(
                    "window closes at the exits (-d {:+} ms), ",
                    self.edge_jitter_ms
                )
            } else {
                String::new()
            },
            self.workload_ms
        )?;
        if self.crowd > 0 {
            write!(f, ", a crowd of {} sleeping threads", self.crowd)?;
        }
        if let Some((soft, hard)) = self.nofile {
            write!(f, ", descriptors limited to {soft}:{hard}")?;
        }
        if let Some(json) = self.pipe_close {
            write!(
                f,
                ", closed pipe ({})",
                if json {
                    "--json -i 100ms"
                } else {
                    "text -i 200ms"
                }
            )?;
        }
        Ok(())
    }
}

/// The scenario of a seed, given the probe modes that work and whether cgroup v2 is there.
pub(super) fn plan(seed: u64, probes: &[String], cgroup2: bool) -> Scenario {
    let mut r = Rng::scrambled(seed);
    let mut targets = vec![Target::System, Target::Pid, Target::Tid, Target::Cmd];
    if cgroup2 {
        targets.push(Target::Cgroup);
    }
    // The first seeds walk the target modes in turn, so a short pass covers them all,
    // and each target walks its foci.
    let n = targets.len() as u64;
    let target = targets[(seed % n) as usize];
    let mut probe = probes[((seed / n) % probes.len() as u64) as usize].clone();
    let foci = Focus::of(target);
    let focus = foci[((seed / n) % foci.len() as u64) as usize];
    let interval_ms = r.chance(40).then(|| r.range(1, 3) * 100);
    let runq_schedstat = probe != "tracepoint" && r.chance(20);
    let edge = r.chance(30);
    let edge_jitter_ms = r.range(0, 80) as i64 - 30;
    let workload_ms = r.range(400, 1200);
    let pipe_close = r.chance(20).then(|| r.chance(50));
    // The foci draw from their own generator: the draws above stay the seed's.
    let mut x = Rng::scrambled(seed ^ 0x2424_2424);
    // `tracer record` needs task pointers (tp-btf or raw-tp), and the trace has no
    // wakeups to time waits from with --runq-from schedstat.
    let runq_schedstat = runq_schedstat && focus != Focus::Record;
    if focus == Focus::Record && probe == "tracepoint" {
        if let Some(p) = probes.iter().find(|p| *p != "tracepoint") {
            probe = p.clone();
        }
    }
    // raw-tp verifies its switch program for ~0.8 s: births up to 1 s fall inside.
    let late = if probe == "raw-tp" { 1000 } else { 350 };
    let startup_ms = (x.range(50, 350), x.range(50, late));
    let short = x.range(10, 30);
    // Scale and limits draw from a third generator, for the same reason.
    let mut z = Rng::scrambled(seed ^ 0x3131_3131);
    let crowd = if z.chance(12) { z.range(300, 2500) } else { 0 };
    let nofile = (crowd > 0 && target == Target::Pid && z.chance(60)).then(|| {
        // Room for the tracer's own maps and programs, not for 4 counters a thread;
        // half the time a hard limit above it, which the tracer raises its soft one to.
        let soft = crowd / 2;
        (soft, if z.chance(50) { soft } else { 4 * crowd + 1024 })
    });
    Scenario {
        seed,
        target,
        probe,
        focus,
        startup_ms,
        short,
        interval_ms,
        runq_schedstat,
        edge,
        edge_jitter_ms,
        workload_ms,
        pipe_close,
        crowd,
        nofile,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A seed's scenario on a machine with every probe mode and cgroup v2.
    pub(crate) fn scenario(seed: u64) -> Scenario {
        let probes: Vec<String> = ["tp-btf", "raw-tp", "tracepoint"]
            .iter()
            .map(|p| p.to_string())
            .collect();
        plan(seed, &probes, true)
    }

    #[test]
    fn a_seed_fixes_the_scenario() {
        assert_eq!(scenario(77).to_string(), scenario(77).to_string());
        assert_ne!(scenario(77).to_string(), scenario(78).to_string());
    }

    #[test]
    fn the_ci_seeds_cover_every_focus_and_target() {
        let ci: Vec<Scenario> = CI_SEEDS.iter().map(|&s| scenario(s)).collect();
        for f in [
            Focus::Startup,
            Focus::Sleepers,
            Focus::Pinned,
            Focus::Short,
            Focus::Names,
            Focus::Nested,
            Focus::Leave,
            Focus::Record,
        ] {
            assert!(ci.iter().any(|s| s.focus == f), "no CI seed for {f:?}");
        }
        // The start-up race where raw-tp verifies longest, under -p.
        assert!(ci
            .iter()
            .any(|s| s.focus == Focus::Startup && s.target == Target::Pid && s.probe == "raw-tp"));
        assert!(ci
            .iter()
            .all(|s| s.focus != Focus::Record || s.probe != "tracepoint"));
        // The trace past the window with -p (item 5), a sleeping process system-wide.
        assert!(ci
            .iter()
            .any(|s| s.focus == Focus::Record && s.target == Target::Pid));
        assert!(ci
            .iter()
            .any(|s| s.focus == Focus::Sleepers && s.target == Target::System));
        // A crowd system-wide, and under -p with both kinds of descriptor limit.
        assert!(ci.iter().any(|s| s.crowd > 0 && s.target == Target::System));
        assert!(ci.iter().any(|s| s.nofile.is_some_and(|(a, b)| a < b)));
        assert!(ci.iter().any(|s| s.nofile.is_some_and(|(a, b)| a == b)));
    }

    #[test]
    fn crowds_and_descriptor_limits_come_with_some_seeds() {
        let all: Vec<Scenario> = (1..2000).map(scenario).collect();
        let crowds = all.iter().filter(|s| s.crowd > 0).count();
        assert!(
            (150..330).contains(&crowds),
            "{crowds} crowds in 1999 seeds"
        );
        assert!(all.iter().any(|s| s.nofile.is_some_and(|(a, b)| a == b)));
        assert!(all.iter().any(|s| s.nofile.is_some_and(|(a, b)| a < b)));
        assert!(all
            .iter()
            .all(|s| s.nofile.is_none() || (s.crowd > 0 && s.target == Target::Pid)));
    }
}
