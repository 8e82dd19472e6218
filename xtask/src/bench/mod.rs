//! `cargo xtask bench`: what tracing the scheduler costs, measured in one run on one machine.
//!
//! Tools, each started fresh for every measured run: the tracer system-wide and with `-p` on
//! an unrelated busy process (a perl loop that sleeps 1 ms, ~1000 switches/s, started once
//! and kept for the whole run, so every tool and every baseline sees the same machine);
//! libbpf-tools `cpudist` + `runqlat` together (also with `-p`); one bpftrace process running
//! equivalents of the two; and the floor, `tracer floor`, an empty tp_btf sched_switch program
//! that only bumps a per-CPU counter.
//!
//! Loads: `perf bench sched pipe` pinned to CPU 0 (a pure context-switch storm: two
//! processes ping-ponging on one CPU) and `perf bench sched messaging -t` (160 threads
//! waking each other across both CPUs).
//!
//! Per load, the tools take turns, round-robin, so that all of them see the machine over the
//! same minutes: without, [calibration], tool 1, without, tool 2, without, ... for each round.
//! One "with" step starts the tool, times exec to attached, runs the load once with BPF
//! run-time statistics on (the in-kernel cost) and once with them off (the throughput, so
//! the statistics' own clock reads are not charged to the tool), then stops the tool. A
//! tool's "without" samples are the runs just before and just after each of its steps.
//!
//! The calibration: bpf_stats brackets every program run with two sched_clock() reads, and
//! an empty program (`r0 = 1; exit`, bpftrace's code for an empty sched_switch probe)
//! measures that bracket alone: ~45-56 ns per run on this VM, so most of the floor's figure.
//! The "net" figures subtract it per program run. It depends on what ran just before
//! (a classic tracepoint here, tp_btf for the floor), so nets of a few ns are noise.
//!
//! How each figure is measured:
//! - ns/switch: the tool's programs are the ids that appeared in `bpftool prog show --json`
//!   across its start and that the tool's processes hold as fds (/proc/PID/fdinfo), so other
//!   programs loaded meanwhile are ignored. Over the statistics-on load, the sum of
//!   run_time_ns of all of them divided by the run_cnt of its sched_switch program (for two
//!   processes, cpudist's; for bpftrace, its first sched_switch probe). Statistics come from
//!   BPF_ENABLE_STATS, a file descriptor the kernel drops on every exit (even SIGKILL), or
//!   when that fails from `kernel.bpf_stats_enabled`, restored on every exit path. Median of
//!   the runs.
//! - throughput: perf's own figure (pipe: ops/sec; messaging: messages/sec from its total
//!   time); loss = 1 - median(with) / median(without).
//! - CPU: the tool's utime+stime from /proc/PID/stat over both loads as % of one CPU (and the
//!   same from the threads' /proc/PID/task/*/schedstat, in ns, in the JSON).
//! - RSS: VmHWM from /proc/PID/status just before the tool is stopped (the peak since exec),
//!   summed over its processes; the maximum over runs.
//! - start-up: from spawn (fork+exec) until every process of the tool holds as many attach
//!   fds as in an untimed warm-up start (bpf_link, or perf_event for bpftrace's classic
//!   tracepoints) and its sched_switch program has run (run_cnt > 0 in its fdinfo), polled
//!   every 0.5 ms. Median of the runs.

use std::{
    fs,
    path::{Path, PathBuf},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};

mod inspect;
mod measure;
mod recorders;
mod report;
mod results;
mod serve;
mod stats;
mod system;
mod tools;
mod workloads;

use self::{
    inspect::loadavg,
    measure::{calibrate, step, Row},
    report::Report,
    system::{catch_signals, interrupted, read_stats_sysctl, sys, BpfStats, Proc},
    tools::{warm_up, Tool, BPFTRACE_SCRIPT},
    workloads::{strings, Config, Load},
};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A short run (2 alternations, small loads) to check the harness; not for quoting
    #[arg(long)]
    quick: bool,
    /// Where to write the JSON results [default: target/bench/bench.json]
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Benchmark this tracer binary instead of building one with `cargo xtask build --release`
    #[arg(long, value_name = "PATH")]
    tracer: Option<PathBuf>,
    /// Only the recorders: `tracer record` beside `perf sched record` on the pipe storm
    /// (throughput loss, bytes per switch, recorder CPU), about a minute
    #[arg(long)]
    record_only: bool,
    /// Only the `serve` row (tracer serve with ~1000 live processes, scraped every 1 s);
    /// its JSON goes to serve.json beside --out
    #[arg(long)]
    serve_only: bool,
    /// Live processes for the `serve` row
    #[arg(long, value_name = "N", default_value_t = serve::SERVE_PROCS)]
    serve_procs: usize,
    /// Also measure this tracer binary's default `run` (say, a build of the commit before
    /// a change) in the same rounds, as the row `tracer (baseline)`: a change's before
    /// and after side by side, on the same machine over the same minutes
    #[arg(long, value_name = "PATH")]
    baseline: Option<PathBuf>,
}

// ---------------------------------------------------------------------------------------
// The run.

pub fn bench(args: BenchArgs) -> Result<()> {
    ensure!(
        crate::is_root()?,
        "the bench loads BPF programs and installs packages: run it as root (sudo -E cargo xtask bench)"
    );
    catch_signals();
    // Shield the loads and tools from whatever else runs on the machine: nice -20 for xtask
    // and, inherited, everything it starts.
    // SAFETY: setpriority(2) on ourselves.
    let niced = unsafe { sys::setpriority(sys::PRIO_PROCESS, 0, -20) } == 0;
    let clock = Instant::now();
    let out = args
        .out
        .unwrap_or_else(|| crate::workspace_root().join("target/bench/bench.json"));
    let logs = out.parent().unwrap_or(Path::new(".")).join("logs");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;

    let crate::provision::BenchTools {
        perf,
        bpftool,
        cpudist,
        runqlat,
        bpftrace,
        offcputime,
    } = crate::provision::bench()?;
    let tracer = match args.tracer {
        Some(t) => std::path::absolute(t)?,
        None => crate::build(true)?.bin,
    };
    ensure!(tracer.is_file(), "no tracer binary at {}", tracer.display());
    let baseline = args.baseline.map(std::path::absolute).transpose()?;
    if let Some(b) = &baseline {
        ensure!(b.is_file(), "no baseline tracer binary at {}", b.display());
    }
    interrupted()?;
    if args.serve_only {
        let row = serve::measure(&tracer, &bpftool, &logs, args.quick, args.serve_procs)?;
        serve::print(&row);
        let file = out.with_file_name("serve.json");
        let mut text = serde_json::to_string_pretty(&row)?;
        text.push('\n');
        fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
        println!("\nxtask bench: wrote {}", file.display());
        return Ok(());
    }

    let cfg = if args.quick {
        Config {
            runs: 2,
            pipe_loops: 30_000,
            msg_groups: 2,
            msg_loops: 50,
        }
    } else {
        Config {
            runs: 7,
            pipe_loops: 150_000,
            msg_groups: 4,
            msg_loops: 150,
        }
    };
    if args.record_only {
        let rows = record_rows(&perf, &tracer, &cfg, &logs, &out)?;
        println!(
            "\nxtask bench: wrote {} in {:.0} s",
            rows.display(),
            clock.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let stats_sysctl_before = read_stats_sysctl()?;
    let stats_method = BpfStats::on()?.method();
    let load_before = loadavg();

    // The unrelated busy process for the `-p` runs, alive for the whole bench.
    let mut waker = Proc::spawn(
        "waker",
        &strings(&["perl", "-e", "select(undef, undef, undef, 0.001) while 1"]),
        &logs,
    )?;
    sleep(Duration::from_millis(100));
    waker.check_alive()?;
    let target = waker.pid().to_string();

    let script = logs.join("cpudist_runqlat.bt");
    fs::write(&script, BPFTRACE_SCRIPT)?;
    let t = tracer.to_string_lossy().to_string();
    let s = |p: &Path| p.to_string_lossy().to_string();
    // `tracer run EXTRA...`, compared with the cpudist+runqlat row `versus`.
    let tracer_tool = |key, label, extra: &[&str], versus| Tool {
        key,
        label,
        procs: vec![(
            "tracer".into(),
            [t.as_str(), "run"]
                .iter()
                .chain(extra)
                .map(|a| a.to_string())
                .collect(),
        )],
        versus,
    };
    let mut tools = vec![
        Tool {
            key: "floor",
            label: "floor (empty tp_btf)",
            procs: vec![(
                "floor".into(),
                vec![t.clone(), "floor".into(), "-d".into(), "24h".into()],
            )],
            versus: "libbpf",
        },
        tracer_tool("tracer", "tracer", &[], "libbpf"),
        // Every switch and wakeup into a Perfetto trace (rewritten at each start).
        Tool {
            key: "tracer-record",
            label: "tracer record",
            procs: vec![(
                "tracer".into(),
                vec![
                    t.clone(),
                    "record".into(),
                    "-o".into(),
                    s(&logs.join("record.pftrace")),
                ],
            )],
            versus: "libbpf",
        },
        tracer_tool("tracer-p", "tracer -p", &["-p", &target], "libbpf-p"),
        tracer_tool(
            "tracer-schedstat",
            "tracer --runq-from schedstat",
            &["--runq-from", "schedstat"],
            "libbpf",
        ),
        // `--runqlen`: the default row plus the 99 Hz run-queue length sampler; its
        // runs are counted in the row's time per switch.
        tracer_tool(
            "tracer-runqlen",
            "tracer --runqlen",
            &["--runqlen"],
            "libbpf",
        ),
        // `--irq`: the default row plus the four interrupt programs; under these loads
        // (pipes, messaging) interrupts are few, so the row says what the mode costs a
        // switch when little interrupts, not its cost per interrupt.
        tracer_tool("tracer-irq", "tracer --irq", &["--irq"], "libbpf"),
        tracer_tool(
            "tracer-schedstat-p",
            "tracer --runq-from schedstat -p",
            &["--runq-from", "schedstat", "-p", &target],
            "libbpf-p",
        ),
        Tool {
            key: "libbpf",
            label: "cpudist+runqlat",
            procs: vec![
                ("cpudist".into(), vec![s(&cpudist)]),
                ("runqlat".into(), vec![s(&runqlat)]),
            ],
            versus: "libbpf",
        },
        Tool {
            key: "libbpf-p",
            label: "cpudist+runqlat -p",
            procs: vec![
                (
                    "cpudist".into(),
                    vec![s(&cpudist), "-p".into(), target.clone()],
                ),
                (
                    "runqlat".into(),
                    vec![s(&runqlat), "-p".into(), target.clone()],
                ),
            ],
            versus: "libbpf-p",
        },
        // Off-CPU stacks (`tracer offcpu`) beside libbpf-tools offcputime: stack walks
        // dominate both.
        Tool {
            key: "offcpu",
            label: "tracer offcpu",
            procs: vec![(
                "tracer".into(),
                vec![s(&tracer), "offcpu".into(), "-d".into(), "24h".into()],
            )],
            versus: "offcputime",
        },
        // `--wakers`: each blocked period joined with its waker's stacks (sched_waking).
        Tool {
            key: "offcpu-wakers",
            label: "tracer offcpu --wakers",
            procs: vec![(
                "tracer".into(),
                vec![
                    s(&tracer),
                    "offcpu".into(),
                    "--wakers".into(),
                    "-d".into(),
                    "24h".into(),
                ],
            )],
            versus: "offcputime",
        },
        // `--unwind dwarf` for every thread: registers and 12 KiB of stack copied at each
        // switch-out, a record per period past --min (here every period of the storm), so
        // this row's ns a switch is its cost a period; the storm overflows the ring (the
        // lost copies are counted by the tracer, their time kept).
        Tool {
            key: "offcpu-dwarf",
            label: "tracer offcpu --unwind dwarf",
            procs: vec![(
                "tracer".into(),
                vec![
                    s(&tracer),
                    "offcpu".into(),
                    "--unwind".into(),
                    "dwarf".into(),
                    "-d".into(),
                    "24h".into(),
                ],
            )],
            versus: "offcputime",
        },
        Tool {
            key: "offcputime",
            label: "offcputime",
            procs: vec![("offcputime".into(), vec![s(&offcputime)])],
            versus: "offcputime",
        },
        Tool {
            key: "bpftrace",
            label: "bpftrace cpudist+runqlat",
            procs: vec![("bpftrace".into(), vec![s(&bpftrace), s(&script)])],
            versus: "libbpf",
        },
    ];
    if let Some(b) = &baseline {
        // Right after the tracer's own row, so the two alternate closest.
        tools.insert(
            2,
            Tool {
                key: "tracer-baseline",
                label: "tracer (baseline)",
                procs: vec![("tracer".into(), vec![s(b), "run".into()])],
                versus: "libbpf",
            },
        );
    }
    let empty = Tool {
        key: "empty",
        label: "empty program (bpf_stats overhead)",
        procs: vec![(
            "empty".into(),
            vec![
                s(&bpftrace),
                "-e".into(),
                "tracepoint:sched:sched_switch { }".into(),
            ],
        )],
        versus: "libbpf",
    };
    let loads = [
        Load::pipe(&perf, cfg.pipe_loops),
        Load::messaging(&perf, cfg.msg_groups, cfg.msg_loops),
    ];

    let mut expects = Vec::new();
    for tool in &tools {
        eprintln!(
            "[{:6.1}s] warm-up start of {}",
            clock.elapsed().as_secs_f64(),
            tool.label
        );
        expects.push(warm_up(tool, &bpftool, &logs)?);
    }
    let empty_expect = warm_up(&empty, &bpftool, &logs)?;
    let mut rows = Vec::new();
    let mut overhead = Vec::new();
    for load in &loads {
        load.run(&logs)?; // warm-up, discarded
                          // Round-robin, so every tool (and the calibration) sees the same machine over the
                          // same minutes: without, [empty], tool 1, without, tool 2, without, ... per round.
        let mut load_rows: Vec<Row> = tools.iter().map(|t| Row::new(t, load)).collect();
        let (mut empty_ns, mut empty_bytes) = (Vec::new(), 0);
        let mut before = load.run(&logs)?;
        for i in 1..=cfg.runs {
            let (ns, bytes) = calibrate(&empty, &empty_expect, load, &bpftool, &logs)?;
            empty_ns.push(ns);
            empty_bytes = bytes;
            for ((tool, expect), row) in tools.iter().zip(&expects).zip(&mut load_rows) {
                let nsps = step(tool, expect, load, row, &bpftool, &logs)?;
                let after = load.run(&logs)?;
                // The without runs just before and just after this step.
                for w in [&before, &after] {
                    row.without.push(w.rate);
                    row.other_without.push(w.other_cpus);
                }
                eprintln!(
                    "[{:6.1}s] {:<9} {i}/{}: {:<24} {:7.1} ns/switch (empty program {:5.1} ns/run), start-up {:6.1} ms, with {:.0} / without {:.0} {}",
                    clock.elapsed().as_secs_f64(),
                    load.key,
                    cfg.runs,
                    tool.label,
                    nsps,
                    ns,
                    row.startup_ms.last().copied().unwrap_or(f64::NAN),
                    row.with.last().copied().unwrap_or(f64::NAN),
                    after.rate,
                    load.unit
                );
                before = after;
            }
        }
        overhead.push((load.key, empty_ns, empty_bytes));
        rows.extend(load_rows);
    }
    waker.stop(Duration::from_secs(2))?;
    eprintln!(
        "[{:6.1}s] tracer serve with ~1000 live processes",
        clock.elapsed().as_secs_f64()
    );
    let serve_row = serve::measure(&tracer, &bpftool, &logs, args.quick, args.serve_procs)?;
    let stats_sysctl_after = read_stats_sysctl()?;
    ensure!(
        stats_sysctl_after == stats_sysctl_before,
        "kernel.bpf_stats_enabled is {stats_sysctl_after}, was {stats_sysctl_before}"
    );

    let record_json = record_rows(&perf, &tracer, &cfg, &logs, &out)?;
    let report = Report {
        rows,
        tools: &tools,
        expects: &expects,
        loads: &loads,
        cfg: &cfg,
        quick: args.quick,
        tracer: &tracer,
        stats_method,
        overhead,
        niced,
        stats_sysctl: stats_sysctl_before,
        load_before,
        load_after: loadavg(),
        elapsed: clock.elapsed(),
        serve: Some(serve_row),
    };
    report.print();
    if let Some(r) = &report.serve {
        serve::print(r);
    }
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&out, report.json()).with_context(|| format!("writing {}", out.display()))?;
    println!(
        "\nxtask bench: wrote {} and {} in {:.0} s",
        out.display(),
        record_json.display(),
        report.elapsed.as_secs_f64()
    );
    Ok(())
}

/// `tracer record` and `perf sched record` on the pipe storm (see `recorders`); the
/// table is printed, the runs written to `record.json` beside `out`. Returns its path.
fn record_rows(
    perf: &Path,
    tracer: &Path,
    cfg: &Config,
    logs: &Path,
    out: &Path,
) -> Result<PathBuf> {
    let s = |p: &Path| p.to_string_lossy().to_string();
    let (tf, pf) = (logs.join("rec-tracer.pftrace"), logs.join("rec-perf.data"));
    let plain = logs.join("rec-tracer-plain.pftrace");
    let recs = [
        recorders::Recorder {
            key: "tracer-record",
            label: "tracer record -o FILE",
            argv: vec![s(tracer), "record".into(), "-o".into(), s(&tf)],
            output: tf,
        },
        // The same without compression (`--no-compress`): what the deflate costs and saves.
        recorders::Recorder {
            key: "tracer-record-plain",
            label: "tracer record --no-compress -o FILE",
            argv: vec![
                s(tracer),
                "record".into(),
                "--no-compress".into(),
                "-o".into(),
                s(&plain),
            ],
            output: plain,
        },
        recorders::Recorder {
            key: "perf-sched-record",
            label: "perf sched record -o FILE",
            argv: vec![
                s(perf),
                "sched".into(),
                "record".into(),
                "-o".into(),
                s(&pf),
            ],
            output: pf,
        },
    ];
    // About 2 s per run on the 2-vCPU VM: seconds per row.
    let load = Load::pipe(perf, cfg.pipe_loops * 2);
    let runs = cfg.runs.min(3);
    let rows = recorders::measure(&recs, &load, runs, logs)?;
    recorders::print(&rows, &load, runs);
    let path = out.with_file_name("record.json");
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&path, recorders::json(&rows, &load))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
