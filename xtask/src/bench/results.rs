//! The JSON results file (`target/bench/bench.json`, schema `tracer-bench/1`), written from
//! `Serialize` structs: the field order here is the order in the file.

use std::{
    collections::BTreeMap,
    fs,
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;

use super::{
    inspect::{command_output, first_line},
    report::{Report, Target},
    stats::{round, spread, Spread},
    tools::BPFTRACE_SCRIPT,
};

#[derive(Serialize)]
struct Results<'a> {
    schema: &'static str,
    unix_time: u64,
    mode: &'static str,
    runs_per_tool_and_load: usize,
    nice: i32,
    elapsed_s: f64,
    machine: Machine,
    versions: Versions,
    bpf_stats: BpfStatsInfo,
    loads: Vec<LoadInfo>,
    tools: Vec<ToolInfo>,
    bpftrace_script: &'static str,
    method: Method,
    results: Vec<RowResult>,
    targets: Vec<Target>,
    /// `tracer serve` with ~1000 live processes and a 1 s scrape (see bench/serve.rs).
    serve: Option<&'a super::serve::ServeRow>,
}

#[derive(Serialize)]
struct Machine {
    kernel: String,
    cpus: usize,
    cpu_model: String,
    loadavg_before: String,
    loadavg_after: String,
}

#[derive(Serialize)]
struct Versions {
    tracer: String,
    tracer_binary: String,
    tree_head: String,
    tracer_sources_modified: String,
    bpftrace: String,
    libbpf_tools: String,
    perf: String,
    bpftool: String,
}

#[derive(Serialize)]
struct BpfStatsInfo {
    method: &'static str,
    overhead_ns_per_run: Vec<Overhead>,
    sysctl_before_and_after: String,
}

#[derive(Serialize)]
struct Overhead {
    load: &'static str,
    empty_program_bytes: u64,
    ns_per_run: Spread,
}

#[derive(Serialize)]
struct LoadInfo {
    key: &'static str,
    command: String,
    unit: &'static str,
}

#[derive(Serialize)]
struct ToolInfo {
    key: &'static str,
    label: &'static str,
    commands: Vec<String>,
    programs: Vec<ProgramCode>,
}

#[derive(Serialize)]
struct ProgramCode {
    program: String,
    xlated_insns: usize,
    calls: BTreeMap<String, usize>,
}

/// How each figure is measured, in words, so the file stands on its own.
#[derive(Serialize)]
struct Method {
    sequence: &'static str,
    ns_per_switch: &'static str,
    throughput: &'static str,
    user_cpu: &'static str,
    rss: &'static str,
    startup: &'static str,
    startup_cpu: &'static str,
    verified_insns: &'static str,
    net: &'static str,
    bpf_share_of_load_cpu: &'static str,
    other_cpus_busy: &'static str,
    priority: &'static str,
    minus_p_target: &'static str,
}

const METHOD: Method = Method {
    sequence: "per load: a without run, then rounds; each round runs the empty-program calibration once and then every tool in turn: start tool; load with BPF stats on; load with stats off; stop tool; a without run. A tool's without samples are the runs just before and just after each of its steps",
    ns_per_switch: "programs = ids new in `bpftool prog show --json` across the tool's start that its processes hold as fds; sum of their run_time_ns deltas over the stats-on load / run_cnt delta of the tool's sched_switch program (cpudist's for cpudist+runqlat, the first sched_switch probe for bpftrace); median of runs. run_time_ns covers the program body only, not the attach mechanism (trampoline, or for bpftrace's classic tracepoints the perf trace-buffer fill)",
    throughput: "perf's own figure: pipe ops/sec, messaging messages/s = groups*20*20*loops / total time; loss = 1 - median(with, stats off) / median(without)",
    user_cpu: "utime+stime of the tool's processes (/proc/PID/stat, clock ticks) over both loads of each run / their wall time; user_cpu_pct_schedstat: same from /proc/PID/task/*/schedstat ns",
    rss: "VmHWM (/proc/PID/status) just before stopping, summed over the tool's processes; max over runs",
    startup: "spawn (fork+exec) to: every process holds as many bpf_link fds (perf_event fds for bpftrace) and programs as in an untimed warm-up start, and its sched_switch program has run_cnt > 0 in /proc/PID/fdinfo; polled every 0.5 ms with BPF stats on",
    startup_cpu: "the tool's processes' CPU time (user + system, /proc/PID/task/*/schedstat: the verifier's work is charged to the loading process) at the moment start-up ends; median of runs",
    verified_insns: "per program, the verifier's instructions processed (veristat's count) from /proc/PID/fdinfo verified_insns (5.16+)",
    net: "bpf_stats brackets every program run with two sched_clock() reads; an empty program (r0 = 1; exit, bpftrace's code for an empty sched_switch probe) measured the same way gives that overhead per run, and net_ns_per_switch = ns_per_switch - overhead * (all the tool's program runs / switches)",
    bpf_share_of_load_cpu: "(sum of the tool's run_time_ns - overhead * runs) / (the load's own CPU time in the stats-on run - the same): the throughput loss the programs alone explain, not disturbed by other work on the machine",
    other_cpus_busy: "per load run: busy ticks of /proc/stat (user+nice+system+irq+softirq+steal) minus the load's own CPU time (cutime+cstime of xtask once reaped), per second: what the tool, the -p target, xtask and everything else on the machine used meanwhile",
    priority: "xtask sets itself to nice -20 so the loads and tools it starts (inheriting it) are shielded from other work on the machine",
    minus_p_target: "a perl loop sleeping 1 ms (about 1000 switches/s), running for the whole bench, unrelated to the loads",
};

#[derive(Serialize)]
struct RowResult {
    load: &'static str,
    tool: String,
    tool_key: &'static str,
    ns_per_switch: Spread,
    net_ns_per_switch: f64,
    net_x_cpudist_runqlat: f64,
    bpf_share_of_load_cpu_pct: f64,
    x_floor: f64,
    x_cpudist_runqlat: f64,
    compared_with: &'static str,
    switch_program: String,
    switches_counted: u64,
    switches_per_proc_stat_ctxt: f64,
    programs: Vec<ProgramRuns>,
    throughput: Throughput,
    user_cpu_pct: f64,
    user_cpu_pct_schedstat: f64,
    cpu_measured_over_s: f64,
    peak_rss_mib: f64,
    rss_kib_samples: Vec<u64>,
    startup_ms: Spread,
    startup_cpu_ms: Spread,
    foreign_programs_ignored: Vec<String>,
}

#[derive(Serialize)]
struct ProgramRuns {
    program: String,
    runs: u64,
    run_time_ns: u64,
    ns_per_run: f64,
    runs_per_switch: f64,
    ns_per_switch: f64,
    /// The verifier's instructions processed (fdinfo `verified_insns`).
    verified_insns: Option<u64>,
}

#[derive(Serialize)]
struct Throughput {
    unit: &'static str,
    without: Spread,
    with: Spread,
    with_bpf_stats: Spread,
    loss_pct: f64,
    other_cpus_busy_without: Spread,
    other_cpus_busy_with: Spread,
}

impl Report<'_> {
    /// The results file's text: pretty-printed JSON.
    pub(super) fn json(&self) -> String {
        let mut text = serde_json::to_string_pretty(&self.results())
            .expect("the results hold only strings, numbers and maps with string keys");
        text.push('\n');
        text
    }

    fn results(&self) -> Results<'_> {
        let root = crate::workspace_root().to_string_lossy().to_string();
        let results = self.rows.iter().map(|r| {
            let s = self.summary(r);
            let programs = r
                .progs
                .iter()
                .map(|(name, &(runs, ns))| ProgramRuns {
                    program: name.clone(),
                    runs,
                    run_time_ns: ns,
                    ns_per_run: round(ns as f64 / runs.max(1) as f64, 2),
                    runs_per_switch: round(runs as f64 / r.switches as f64, 4),
                    ns_per_switch: round(ns as f64 / r.switches as f64, 2),
                    verified_insns: r.verified.get(name).copied(),
                })
                .collect();
            RowResult {
                load: r.load,
                tool: r.tool.clone(),
                tool_key: r.tool_key,
                ns_per_switch: spread(&r.ns_per_switch, 2),
                net_ns_per_switch: round(s.net_ns, 2),
                net_x_cpudist_runqlat: round(s.net_x_libbpf, 3),
                bpf_share_of_load_cpu_pct: round(s.bpf_share_pct, 2),
                x_floor: round(s.x_floor, 3),
                x_cpudist_runqlat: round(s.x_libbpf, 3),
                compared_with: r.versus,
                switch_program: r.switch_prog.clone(),
                switches_counted: r.switches,
                switches_per_proc_stat_ctxt: round(r.switches as f64 / r.ctxt.max(1) as f64, 4),
                programs,
                throughput: Throughput {
                    unit: r.unit,
                    without: spread(&r.without, 0),
                    with: spread(&r.with, 0),
                    with_bpf_stats: spread(&r.with_stats, 0),
                    loss_pct: round(s.loss_pct, 2),
                    other_cpus_busy_without: spread(&r.other_without, 3),
                    other_cpus_busy_with: spread(&r.other_with, 3),
                },
                user_cpu_pct: round(s.cpu_pct, 3),
                user_cpu_pct_schedstat: round(s.cpu_pct_schedstat, 3),
                cpu_measured_over_s: round(r.cpu_wall, 3),
                peak_rss_mib: round(s.rss_mib, 2),
                rss_kib_samples: r.rss_kib.clone(),
                startup_ms: spread(&r.startup_ms, 2),
                startup_cpu_ms: spread(&r.startup_cpu_ms, 2),
                foreign_programs_ignored: r.foreign.iter().cloned().collect(),
            }
        });
        let tools = self.tools.iter().zip(self.expects).map(|(t, e)| ToolInfo {
            key: t.key,
            label: t.label,
            commands: t.procs.iter().map(|(_, argv)| argv.join(" ")).collect(),
            programs: e
                .iter()
                .flat_map(|x| &x.code)
                .map(|c| ProgramCode {
                    program: c.program.clone(),
                    xlated_insns: c.insns,
                    calls: c.calls.clone(),
                })
                .collect(),
        });
        let cpu_model = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines().find_map(|l| {
                    l.strip_prefix("model name")?
                        .split_once(':')
                        .map(|x| x.1.trim().to_string())
                })
            })
            .unwrap_or_default();
        let tracer = self.tracer.to_string_lossy();
        Results {
            schema: "tracer-bench/1",
            unix_time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            mode: if self.quick { "quick" } else { "full" },
            runs_per_tool_and_load: self.cfg.runs,
            nice: if self.niced { -20 } else { 0 },
            elapsed_s: round(self.elapsed.as_secs_f64(), 1),
            machine: Machine {
                kernel: fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim()
                    .into(),
                cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
                cpu_model,
                loadavg_before: self.load_before.clone(),
                loadavg_after: self.load_after.clone(),
            },
            versions: Versions {
                tracer: first_line(&[&tracer, "--version"]),
                tracer_binary: tracer.to_string(),
                tree_head: first_line(&["git", "-C", &root, "rev-parse", "HEAD"]),
                tracer_sources_modified: command_output(&[
                    "git",
                    "-C",
                    &root,
                    "status",
                    "--porcelain",
                    "--",
                    "tracer",
                    "tracer-ebpf",
                    "tracer-common",
                ])
                .replace('\n', "; "),
                bpftrace: first_line(&["bpftrace", "--version"]),
                libbpf_tools: first_line(&["dpkg-query", "-W", "-f=${Version}", "libbpf-tools"]),
                perf: first_line(&["perf", "version"]),
                bpftool: first_line(&["bpftool", "version"]),
            },
            bpf_stats: BpfStatsInfo {
                method: self.stats_method,
                overhead_ns_per_run: self
                    .overhead
                    .iter()
                    .map(|(load, samples, xlated)| Overhead {
                        load,
                        empty_program_bytes: *xlated,
                        ns_per_run: spread(samples, 2),
                    })
                    .collect(),
                sysctl_before_and_after: self.stats_sysctl.clone(),
            },
            loads: self
                .loads
                .iter()
                .map(|l| LoadInfo {
                    key: l.key,
                    command: l.argv.join(" "),
                    unit: l.unit,
                })
                .collect(),
            tools: tools.collect(),
            bpftrace_script: BPFTRACE_SCRIPT,
            method: METHOD,
            results: results.collect(),
            targets: self.targets().into_iter().map(|t| t.1).collect(),
            serve: self.serve.as_ref(),
        }
    }
}
