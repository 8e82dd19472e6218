//! The loads: `perf bench sched pipe` and `perf bench sched messaging`.

use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    inspect::{busy_ticks, children_ticks, clock_ticks},
    system::Proc,
};

/// How many rounds and how large the loads are (`--quick`: small, to check the harness).
pub(super) struct Config {
    pub(super) runs: usize,
    pub(super) pipe_loops: u32,
    pub(super) msg_groups: u32,
    pub(super) msg_loops: u32,
}

pub(super) struct Load {
    pub(super) key: &'static str,
    pub(super) argv: Vec<String>,
    pub(super) unit: &'static str,
    /// messaging: messages per run (perf prints only the time); pipe prints ops/sec.
    pub(super) messages: Option<f64>,
}

pub(super) struct LoadRun {
    pub(super) rate: f64,
    pub(super) wall: Duration,
    /// CPUs kept busy by anything but the load itself meanwhile (the tool, the `-p` target,
    /// xtask, and whoever else uses the machine): busy ticks of /proc/stat minus the load's
    /// own (reaped, so in our cutime+cstime), per second.
    pub(super) other_cpus: f64,
    /// The load's own CPU time (user+system of its reaped processes), in clock ticks.
    pub(super) own_ticks: u64,
}

impl Load {
    pub(super) fn pipe(perf: &Path, loops: u32) -> Load {
        Load {
            key: "pipe",
            argv: strings(&["taskset", "-c", "0", &perf.to_string_lossy()])
                .into_iter()
                .chain(strings(&[
                    "bench",
                    "sched",
                    "pipe",
                    "-l",
                    &loops.to_string(),
                ]))
                .collect(),
            unit: "ops/s",
            messages: None,
        }
    }

    pub(super) fn messaging(perf: &Path, groups: u32, loops: u32) -> Load {
        Load {
            key: "messaging",
            argv: strings(&[
                &perf.to_string_lossy(),
                "bench",
                "sched",
                "messaging",
                "-t",
                "-g",
                &groups.to_string(),
                "-l",
                &loops.to_string(),
            ]),
            unit: "msgs/s",
            // 20 senders and 20 receivers per group; every sender sends `loops` messages to
            // every receiver of its group.
            messages: Some(f64::from(groups) * 20.0 * 20.0 * f64::from(loops)),
        }
    }

    pub(super) fn run(&self, logs: &Path) -> Result<LoadRun> {
        let (busy0, own0) = (busy_ticks()?, children_ticks()?);
        let t0 = Instant::now();
        let mut p = Proc::spawn(&format!("load-{}", self.key), &self.argv, logs)?;
        let st = p.wait(Duration::from_secs(300))?;
        let wall = t0.elapsed();
        let (busy1, own1) = (busy_ticks()?, children_ticks()?);
        let other = busy1.saturating_sub(busy0) as f64 - own1.saturating_sub(own0) as f64;
        let other_cpus = (other / clock_ticks() / wall.as_secs_f64()).max(0.0);
        let out =
            fs::read_to_string(&p.out).with_context(|| format!("reading {}", p.out.display()))?;
        ensure!(
            st.success(),
            "{} failed ({st}):\n{out}\n{}",
            self.argv.join(" "),
            p.stderr_tail()
        );
        let rate = match self.messages {
            None => out
                .lines()
                .find(|l| l.contains("ops/sec"))
                .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok()),
            Some(messages) => out
                .lines()
                .find_map(|l| l.trim().strip_prefix("Total time:"))
                .and_then(|l| l.split_whitespace().next()?.parse::<f64>().ok())
                .filter(|&s| s > 0.0)
                .map(|s| messages / s),
        }
        .with_context(|| {
            format!(
                "no throughput in the output of {}:\n{out}",
                self.argv.join(" ")
            )
        })?;
        Ok(LoadRun {
            rate,
            wall,
            other_cpus,
            own_ticks: own1.saturating_sub(own0),
        })
    }
}

pub(super) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
