//! A scenario from its seed: target mode, probe mode, interval, window edge, workload
//! length, closed pipe.

use super::env::Env;

/// splitmix64, as in the workload.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03) ^ 0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(super) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

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

pub(super) struct Scenario {
    pub(super) seed: u64,
    pub(super) target: Target,
    pub(super) probe: String,
    pub(super) interval_ms: Option<u64>,
    pub(super) runq_schedstat: bool,
    /// The window closes while the workload's last threads end.
    pub(super) edge: bool,
    /// Signed offset of -d from the workload's length in edge scenarios (ms).
    pub(super) edge_jitter_ms: i64,
    pub(super) workload_ms: u64,
    /// Also run the tracer with a reader that closes the pipe early.
    pub(super) pipe_close: Option<bool>,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "target {}, probe {}, {}{}{}workload {} ms",
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

impl Env {
    pub(super) fn scenario(&self, seed: u64) -> Scenario {
        let mut r = Rng::new(seed);
        let mut targets = vec![Target::System, Target::Pid, Target::Tid, Target::Cmd];
        if self.cgroup2.is_some() {
            targets.push(Target::Cgroup);
        }
        // The first seeds walk the target modes in turn, so a short pass covers them all.
        let n = targets.len() as u64;
        let target = targets[(seed % n) as usize];
        let probe = self.probes[((seed / n) % self.probes.len() as u64) as usize].clone();
        let interval_ms = r.chance(40).then(|| r.range(1, 3) * 100);
        let runq_schedstat = probe != "tracepoint" && r.chance(20);
        let edge = r.chance(30);
        let edge_jitter_ms = r.range(0, 80) as i64 - 30;
        let workload_ms = r.range(400, 1200);
        let pipe_close = r.chance(20).then(|| r.chance(50));
        Scenario {
            seed,
            target,
            probe,
            interval_ms,
            runq_schedstat,
            edge,
            edge_jitter_ms,
            workload_ms,
            pipe_close,
        }
    }
}
