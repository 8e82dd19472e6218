//! One measured step of a tool under a load, and the bpf_stats calibration.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::Duration,
};

use anyhow::{ensure, Result};

use super::{
    inspect::{
        bpftool_progs, context_switches, cpu_ticks, scan_fds, sched_by_thread, sched_grown,
        vm_hwm_kib, FdScan,
    },
    system::{interrupted, BpfStats, Proc},
    tools::{start_tool, Expect, Tool},
    workloads::Load,
};

#[derive(Default)]
pub(super) struct Row {
    pub(super) tool: String,
    pub(super) tool_key: &'static str,
    pub(super) versus: &'static str,
    pub(super) load: &'static str,
    pub(super) unit: &'static str,
    pub(super) without: Vec<f64>,
    pub(super) with: Vec<f64>,
    pub(super) with_stats: Vec<f64>,
    pub(super) other_without: Vec<f64>,
    pub(super) other_with: Vec<f64>,
    pub(super) ns_per_switch: Vec<f64>,
    pub(super) startup_ms: Vec<f64>,
    /// The tool's CPU time (user + system: the verifier's work is system time) from
    /// spawn to attached.
    pub(super) startup_cpu_ms: Vec<f64>,
    pub(super) rss_kib: Vec<u64>,
    pub(super) cpu_ticks: u64,
    pub(super) cpu_sched_ns: u64,
    pub(super) cpu_wall: f64,
    pub(super) switches: u64,
    pub(super) ctxt: u64,
    /// All programs' runs and run time, and the load's CPU ticks, over the statistics-on loads.
    pub(super) bpf_runs: u64,
    pub(super) bpf_ns: u64,
    pub(super) load_ticks: u64,
    /// Per program: (runs, run-time ns) summed over the statistics-on loads.
    pub(super) progs: BTreeMap<String, (u64, u64)>,
    /// Per program: the verifier's instructions processed (the last run's).
    pub(super) verified: BTreeMap<String, u64>,
    pub(super) switch_prog: String,
    pub(super) foreign: BTreeSet<String>,
}

impl Row {
    pub(super) fn new(tool: &Tool, load: &Load) -> Row {
        Row {
            tool: tool.label.to_string(),
            tool_key: tool.key,
            versus: tool.versus,
            load: load.key,
            unit: load.unit,
            ..Row::default()
        }
    }
}

/// One "with" step: start the tool (timing exec to attached), run the load with BPF
/// statistics on (in-kernel cost) and again with them off (throughput), stop the tool.
/// Returns the step's ns per switch.
pub(super) fn step(
    tool: &Tool,
    expect: &[Expect],
    load: &Load,
    row: &mut Row,
    bpftool: &Path,
    logs: &Path,
) -> Result<f64> {
    interrupted()?;
    let stats = BpfStats::on()?;
    let mut run = start_tool(tool, Some(expect), bpftool, logs)?;
    row.startup_ms.push(run.startup.as_secs_f64() * 1e3);
    row.startup_cpu_ms.push(run.startup_cpu_ns as f64 / 1e6);
    row.switch_prog = run.switch_name.clone();
    row.foreign.extend(run.foreign.iter().cloned());

    let pids: Vec<u32> = run.procs.iter().map(Proc::pid).collect();
    let scan =
        |pids: &[u32]| -> Result<Vec<FdScan>> { pids.iter().map(|&p| scan_fds(p)).collect() };
    let ticks = |pids: &[u32]| -> Result<u64> { pids.iter().map(|&p| cpu_ticks(p)).sum() };
    let sched = |pids: &[u32]| -> std::collections::BTreeMap<u32, u64> {
        pids.iter().flat_map(|&p| sched_by_thread(p)).collect()
    };

    // Statistics on: the in-kernel cost.
    let (t_a, s_a, c_a) = (ticks(&pids)?, sched(&pids), context_switches()?);
    let a = scan(&pids)?;
    let r1 = load.run(logs)?;
    let b = scan(&pids)?;
    let c_b = context_switches()?;
    drop(stats);
    // Statistics off: the throughput.
    let r2 = load.run(logs)?;
    let (t_b, s_b) = (ticks(&pids)?, sched(&pids));
    let rss: u64 = pids.iter().map(|&p| vm_hwm_kib(p)).sum::<Result<u64>>()?;
    for p in &mut run.procs {
        p.check_alive()?;
    }
    for p in &mut run.procs {
        p.stop(Duration::from_secs(20))?;
    }

    let delta = |idx: usize, id: u32| -> (u64, u64) {
        match (a[idx].progs.get(&id), b[idx].progs.get(&id)) {
            (Some(x), Some(y)) => (
                y.run_cnt.saturating_sub(x.run_cnt),
                y.run_time_ns.saturating_sub(x.run_time_ns),
            ),
            _ => (0, 0),
        }
    };
    let mut total_ns = 0;
    for (idx, id, name) in &run.progs {
        let (cnt, ns) = delta(*idx, *id);
        total_ns += ns;
        row.bpf_runs += cnt;
        row.bpf_ns += ns;
        let e = row.progs.entry(name.clone()).or_default();
        e.0 += cnt;
        e.1 += ns;
        if let Some(v) = b[*idx].progs.get(id).and_then(|p| p.verified_insns) {
            row.verified.insert(name.clone(), v);
        }
    }
    let (switches, _) = delta(0, run.switch_id);
    ensure!(
        switches > 0,
        "{}: its sched_switch program did not run during the load: are BPF statistics on?",
        tool.label
    );
    let nsps = total_ns as f64 / switches as f64;
    row.ns_per_switch.push(nsps);
    row.switches += switches;
    row.ctxt += c_b - c_a;
    row.with_stats.push(r1.rate);
    row.load_ticks += r1.own_ticks;
    row.with.push(r2.rate);
    row.other_with.push(r2.other_cpus);
    row.rss_kib.push(rss);
    row.cpu_ticks += t_b - t_a;
    row.cpu_sched_ns += sched_grown(&s_a, &s_b);
    row.cpu_wall += (r1.wall + r2.wall).as_secs_f64();
    Ok(nsps)
}

/// What bpf_stats itself adds to every program run (two sched_clock() reads and the
/// counter update): the ns/run of an empty program (`r0 = 1; exit`, which bpftrace makes of
/// an empty sched_switch probe) under the load. Returns (ns per run, the program's size).
pub(super) fn calibrate(
    tool: &Tool,
    expect: &[Expect],
    load: &Load,
    bpftool: &Path,
    logs: &Path,
) -> Result<(f64, u64)> {
    interrupted()?;
    let _stats = BpfStats::on()?;
    let mut run = start_tool(tool, Some(expect), bpftool, logs)?;
    let xlated = bpftool_progs(bpftool)?
        .get(&run.switch_id)
        .map_or(0, |m| m.xlated_bytes);
    let pid = run.procs[0].pid();
    let a = scan_fds(pid)?;
    load.run(logs)?;
    let b = scan_fds(pid)?;
    for p in &mut run.procs {
        p.stop(Duration::from_secs(20))?;
    }
    let (x, y) = (&a.progs[&run.switch_id], &b.progs[&run.switch_id]);
    let runs = y.run_cnt - x.run_cnt;
    ensure!(runs > 0, "the empty program did not run");
    Ok(((y.run_time_ns - x.run_time_ns) as f64 / runs as f64, xlated))
}
