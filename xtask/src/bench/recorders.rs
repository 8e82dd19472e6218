//! `tracer record -o FILE` beside `perf sched record -o FILE`: what writing every
//! scheduling event to a file costs. The BPF run-time figures of the main bench do not
//! apply to perf (its events are not BPF programs), so this compares what both have:
//! on the pipe storm (`perf bench sched pipe` pinned to CPU 0),
//! - throughput loss: 1 - median(ops/s with the recorder) / median(ops/s without), the
//!   "without" runs being the ones just before and after each recorder's run;
//! - bytes per switch: the file's size over the context switches of the whole machine
//!   (/proc/stat `ctxt`) from the recorder's start to its exit (both record every CPU);
//! - the recorder's CPU: its user and system ticks (/proc/PID/stat) during the load, as %
//!   of one CPU, and its whole life (start-up, load, shutdown: perf post-processes the file
//!   at exit) from xtask's cutime+cstime across its reaping.
//!
//! Each recorder is started fresh per run and counted as started once its file holds
//! something (tracer: the SystemInfo packet written at attach; perf: its header), plus a
//! settling pause.

use std::{
    fs,
    path::{Path, PathBuf},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

use super::{
    inspect::{children_ticks, clock_ticks, context_switches},
    stats::median,
    system::{interrupted, Proc},
    workloads::Load,
};

pub(super) struct Recorder {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    pub(super) argv: Vec<String>,
    pub(super) output: PathBuf,
}

#[derive(Default)]
pub(super) struct RecRow {
    pub(super) key: &'static str,
    pub(super) label: &'static str,
    with: Vec<f64>,
    without: Vec<f64>,
    bytes_per_switch: Vec<f64>,
    /// During the load, % of one CPU.
    user_pct: Vec<f64>,
    sys_pct: Vec<f64>,
    /// Whole life, seconds.
    life_cpu_s: Vec<f64>,
    bytes: Vec<u64>,
}

/// utime and stime (ticks) of a live process.
fn user_sys_ticks(pid: u32) -> Result<(u64, u64)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("odd /proc/PID/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok((
        f.get(11).context("short stat")?.parse()?,
        f.get(12).context("short stat")?.parse()?,
    ))
}

/// One run of `load` under `r`, appended to `row`.
fn step(r: &Recorder, load: &Load, row: &mut RecRow, logs: &Path) -> Result<()> {
    let _ = fs::remove_file(&r.output);
    let ctxt0 = context_switches()?;
    let mut p = Proc::spawn(r.key, &r.argv, logs)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::metadata(&r.output).map(|m| m.len()).unwrap_or(0) == 0 {
        p.check_alive()?;
        interrupted()?;
        ensure!(
            Instant::now() < deadline,
            "{} did not start writing {} within 30 s",
            r.label,
            r.output.display()
        );
        sleep(Duration::from_millis(10));
    }
    sleep(Duration::from_millis(300));
    p.check_alive()?;
    let (u0, s0) = user_sys_ticks(p.pid())?;
    let run = load.run(logs)?;
    let (u1, s1) = user_sys_ticks(p.pid())?;
    p.check_alive()?;
    let reaped0 = children_ticks()?;
    p.stop(Duration::from_secs(60))?;
    let life = children_ticks()?.saturating_sub(reaped0);
    let ctxt = context_switches()?.saturating_sub(ctxt0).max(1);
    let bytes = fs::metadata(&r.output)
        .with_context(|| format!("{} wrote no {}", r.label, r.output.display()))?
        .len();
    let secs = run.wall.as_secs_f64();
    row.with.push(run.rate);
    row.user_pct
        .push(100.0 * (u1 - u0) as f64 / clock_ticks() / secs);
    row.sys_pct
        .push(100.0 * (s1 - s0) as f64 / clock_ticks() / secs);
    row.life_cpu_s.push(life as f64 / clock_ticks());
    row.bytes.push(bytes);
    row.bytes_per_switch.push(bytes as f64 / ctxt as f64);
    Ok(())
}

/// Round-robin over `runs` rounds: without, recorder 1, without, recorder 2, without...
pub(super) fn measure(
    recorders: &[Recorder],
    load: &Load,
    runs: usize,
    logs: &Path,
) -> Result<Vec<RecRow>> {
    let mut rows: Vec<RecRow> = recorders
        .iter()
        .map(|r| RecRow {
            key: r.key,
            label: r.label,
            ..Default::default()
        })
        .collect();
    load.run(logs)?; // warm-up, discarded
    let mut before = load.run(logs)?;
    for i in 1..=runs {
        for (r, row) in recorders.iter().zip(&mut rows) {
            step(r, load, row, logs)?;
            let after = load.run(logs)?;
            row.without.push(before.rate);
            row.without.push(after.rate);
            eprintln!(
                "record {i}/{runs}: {:<24} with {:.0} / without {:.0} {}, {:.1} bytes/switch, user {:.1}% sys {:.1}% of a CPU",
                r.label,
                row.with.last().copied().unwrap_or(f64::NAN),
                after.rate,
                load.unit,
                row.bytes_per_switch.last().copied().unwrap_or(f64::NAN),
                row.user_pct.last().copied().unwrap_or(f64::NAN),
                row.sys_pct.last().copied().unwrap_or(f64::NAN),
            );
            before = after;
        }
    }
    Ok(rows)
}

impl RecRow {
    fn loss_pct(&self) -> f64 {
        100.0 * (1.0 - median(&self.with) / median(&self.without))
    }
}

/// The table, medians of the runs.
pub(super) fn print(rows: &[RecRow], load: &Load, runs: usize) {
    println!(
        "\nRecording every scheduling event to a file, {} load ({} runs each; medians):",
        load.key, runs
    );
    let w = rows.iter().map(|r| r.label.len()).max().unwrap_or(0).max(8);
    println!(
        "{:<w$} {:>12} {:>12} {:>8} {:>12} {:>8} {:>8} {:>10}",
        "recorder", "with", "without", "loss", "bytes/switch", "user %", "sys %", "life CPU"
    );
    for r in rows {
        println!(
            "{:<w$} {:>12.0} {:>12.0} {:>7.1}% {:>12.1} {:>8.1} {:>8.1} {:>9.2}s",
            r.label,
            median(&r.with),
            median(&r.without),
            r.loss_pct(),
            median(&r.bytes_per_switch),
            median(&r.user_pct),
            median(&r.sys_pct),
            median(&r.life_cpu_s),
        );
    }
    // Issue 27's targets: at most half of perf's throughput loss, at most 8 bytes a switch.
    let perf = rows.iter().find(|r| r.key == "perf-sched-record");
    if let (Some(t), Some(p)) = (rows.iter().find(|r| r.key == "tracer-record"), perf) {
        println!("Targets (tracer record)");
        for (what, value, limit, unit) in [
            (
                "throughput loss vs perf sched record's",
                t.loss_pct() / p.loss_pct(),
                0.5,
                "x",
            ),
            ("bytes per switch", median(&t.bytes_per_switch), 8.0, "B"),
        ] {
            println!(
                "  {what:<42} {value:>8.2} {unit} (target <= {limit}): {}",
                if value <= limit { "met" } else { "MISSED" }
            );
        }
    }
}

/// The rows as JSON, every run kept.
pub(super) fn json(rows: &[RecRow], load: &Load) -> String {
    let v: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "key": r.key,
                "label": r.label,
                "load": load.key,
                "unit": load.unit,
                "with": r.with,
                "without": r.without,
                "loss_pct": r.loss_pct(),
                "bytes": r.bytes,
                "bytes_per_switch": r.bytes_per_switch,
                "user_pct": r.user_pct,
                "sys_pct": r.sys_pct,
                "life_cpu_s": r.life_cpu_s,
            })
        })
        .collect();
    serde_json::to_string_pretty(&v).unwrap_or_default()
}
