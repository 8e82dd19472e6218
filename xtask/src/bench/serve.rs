//! The `serve` row: what `tracer serve` costs on a machine with ~1000 live processes,
//! scraped every second as Prometheus would.
//!
//! The load: one perl process forks `SERVE_PROCS` children that each sleep 100 ms in a
//! loop (~10 000 wakeups/s, every one a process the exporter keeps figures for). The
//! exporter is started on a free loopback port and warmed up with scrapes; then, over the
//! window, xtask GETs `/metrics` every second (a plain HTTP/1.0 request, timed) and
//! measures:
//! - CPU: the exporter's utime+stime (/proc/PID/stat) over the window, per second of wall
//!   time (1.0 = one CPU), split into user and system;
//! - RSS: VmRSS at the end and VmHWM (the peak since exec);
//! - ns/switch: as the other rows, from the programs the exporter holds as fds
//!   (/proc/PID/fdinfo run_time_ns, run_cnt; names from bpftool): the sum of all their
//!   run-time deltas over the window / the run-count delta of its sched_switch program.
//!   The exporter enables the statistics itself (a `BPF_ENABLE_STATS` fd, for its own
//!   `tracer_bpf_run_time_seconds_total`), so this includes their bracket (the calibration
//!   row's ~45-56 ns per run on this VM) like the other rows' gross figure;
//! - the same for `tracer run` (system-wide, defaults) on the same load right after, for
//!   the ratio the targets hold: serve at most 1.5x run's ns per switch, at most 5% of a
//!   CPU and a 50 ms median scrape at 1000 processes (issue 27).
use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::Path,
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use serde::Serialize;

use super::{
    inspect::{bpftool_progs, clock_ticks, is_switch_prog, scan_fds, vm_hwm_kib},
    stats::{median, print_table, round},
    system::{interrupted, BpfStats, Proc},
    workloads::strings,
};

/// Live processes of the load, by default.
pub(super) const SERVE_PROCS: usize = 1000;

/// The figures of the row, as written to the JSON.
#[derive(Serialize)]
pub(super) struct ServeRow {
    pub(super) processes: usize,
    pub(super) window_s: f64,
    pub(super) scrapes: usize,
    /// Exporter CPU per wall second, as a fraction of one CPU.
    pub(super) cpu_per_s: f64,
    pub(super) user_per_s: f64,
    pub(super) sys_per_s: f64,
    pub(super) rss_mib: f64,
    pub(super) hwm_mib: f64,
    pub(super) ns_per_switch: f64,
    pub(super) switches_per_s: f64,
    pub(super) scrape_ms_median: f64,
    pub(super) scrape_ms_max: f64,
    pub(super) body_kib: f64,
    /// Entries in the per-process histogram map at the end (capacity 65536), and the
    /// increments lost because it was full.
    pub(super) hist_map_entries: f64,
    pub(super) hist_map_full_drops: f64,
    /// Where the kernel keeps the per-process histograms (`tracer_map_entries`' label).
    pub(super) hist_map: &'static str,
    /// `tracer run` on the same load: ns per switch, and serve's as a multiple of it.
    pub(super) run_ns_per_switch: f64,
    pub(super) x_run: f64,
    pub(super) targets: Vec<ServeTarget>,
}

/// One target check of the row.
#[derive(Serialize)]
pub(super) struct ServeTarget {
    what: &'static str,
    value: f64,
    limit: f64,
    unit: &'static str,
    met: bool,
}

/// The row's targets (issue 27), from its figures.
fn targets(cpu_per_s: f64, x_run: f64, scrape_ms_median: f64) -> Vec<ServeTarget> {
    [
        ("ns/switch vs tracer run on the same load", x_run, 1.5, "x"),
        ("exporter CPU", cpu_per_s * 100.0, 5.0, "% of one CPU"),
        ("scrape median", scrape_ms_median, 50.0, "ms"),
    ]
    .into_iter()
    .map(|(what, value, limit, unit)| ServeTarget {
        what,
        value: round(value, 3),
        limit,
        unit,
        met: value <= limit,
    })
    .collect()
}

/// ns per switch of `tracer run` (system-wide, defaults) over `window` seconds, with
/// the run-time statistics on for it (the exporter turned them on for itself).
fn run_ns_per_switch(tracer: &str, bpftool: &Path, logs: &Path, window: u64) -> Result<f64> {
    let _stats = BpfStats::on()?;
    let mut run = Proc::spawn(
        "serve-run",
        &strings(&[tracer, "run", "-d", &format!("{}s", window + 30)]),
        logs,
    )?;
    let start = Instant::now();
    let switch_ids: Vec<u32> = loop {
        run.check_alive()?;
        interrupted()?;
        let names = bpftool_progs(bpftool)?;
        let ids: Vec<u32> = scan_fds(run.pid())?
            .progs
            .keys()
            .copied()
            .filter(|id| names.get(id).is_some_and(|m| is_switch_prog(&m.name)))
            .collect();
        if !ids.is_empty() {
            break ids;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "tracer run never attached"
        );
        sleep(Duration::from_millis(100));
    };
    sleep(Duration::from_secs(2));
    let (t0, r0) = program_stats(run.pid(), &switch_ids)?;
    sleep(Duration::from_secs(window));
    let (t1, r1) = program_stats(run.pid(), &switch_ids)?;
    run.check_alive()?;
    run.stop(Duration::from_secs(10))?;
    let runs = r1.saturating_sub(r0);
    ensure!(runs > 0, "tracer run's sched_switch program did not run");
    Ok(t1.saturating_sub(t0) as f64 / runs as f64)
}

/// utime and stime, seconds.
fn user_sys(pid: u32) -> Result<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("odd /proc/PID/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t = |i: usize| -> Result<f64> {
        Ok(f.get(i).context("short stat")?.parse::<u64>()? as f64 / clock_ticks())
    };
    Ok((t(11)?, t(12)?))
}

fn vm_rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

/// One GET of `/metrics`: the whole response.
fn scrape(port: u16) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    ensure!(
        resp.starts_with(b"HTTP/1.0 200") || resp.starts_with(b"HTTP/1.1 200"),
        "GET /metrics: {}",
        String::from_utf8_lossy(&resp[..resp.len().min(80)])
    );
    Ok(String::from_utf8_lossy(&resp).into_owned())
}

/// A sample's value from the exposition (`name{labels}` as printed).
fn value(body: &str, key: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// (total run time of the exporter's programs, runs of its sched_switch program).
fn program_stats(pid: u32, switch_ids: &[u32]) -> Result<(u64, u64)> {
    let scan = scan_fds(pid)?;
    let time = scan.progs.values().map(|p| p.run_time_ns).sum();
    let runs = switch_ids
        .iter()
        .filter_map(|id| scan.progs.get(id))
        .map(|p| p.run_cnt)
        .sum();
    Ok((time, runs))
}

/// Runs the row: `quick` shortens the window.
pub(super) fn measure(
    tracer: &Path,
    bpftool: &Path,
    logs: &Path,
    quick: bool,
    procs: usize,
) -> Result<ServeRow> {
    let (warm, window) = if quick { (3, 8) } else { (5, 20) };
    let mut load = Proc::spawn(
        "serve-load",
        &strings(&[
            "perl",
            "-e",
            &format!(
                "for (1..{procs}) {{ fork or do {{ select(undef, undef, undef, 0.1) while 1 }} }} sleep"
            ),
        ]),
        logs,
    )?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let t = tracer.to_string_lossy().to_string();
    let mut serve = Proc::spawn(
        "serve",
        &strings(&[&t, "serve", "--listen", &format!("127.0.0.1:{port}")]),
        logs,
    )?;
    let start = Instant::now();
    while scrape(port).is_err() {
        serve.check_alive()?;
        load.check_alive()?;
        interrupted()?;
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "tracer serve never answered on port {port}"
        );
        sleep(Duration::from_millis(100));
    }
    let pid = serve.pid();
    let names = bpftool_progs(bpftool)?;
    let switch_ids: Vec<u32> = scan_fds(pid)?
        .progs
        .keys()
        .copied()
        .filter(|id| names.get(id).is_some_and(|m| is_switch_prog(&m.name)))
        .collect();
    ensure!(
        !switch_ids.is_empty(),
        "tracer serve holds no sched_switch program"
    );
    for _ in 0..warm {
        sleep(Duration::from_secs(1));
        scrape(port)?;
        interrupted()?;
    }
    let live = count_group(load.pid());
    let (u0, s0) = user_sys(pid)?;
    let (bt0, br0) = program_stats(pid, &switch_ids)?;
    let t0 = Instant::now();
    let mut times = Vec::new();
    let mut body = String::new();
    for i in 1..=window {
        let next = t0 + Duration::from_secs(i);
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            sleep(d);
        }
        let t = Instant::now();
        body = scrape(port)?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        interrupted()?;
    }
    let secs = t0.elapsed().as_secs_f64();
    let (u1, s1) = user_sys(pid)?;
    let (bt1, br1) = program_stats(pid, &switch_ids)?;
    let rss = vm_rss_kib(pid)? as f64 / 1024.0;
    let hwm = vm_hwm_kib(pid)? as f64 / 1024.0;
    serve.check_alive()?;
    serve.stop(Duration::from_secs(5))?;
    let run_ns = run_ns_per_switch(&t, bpftool, logs, window)?;
    load.kill_group()?;
    let runs = br1.saturating_sub(br0);
    ensure!(runs > 0, "the sched_switch program did not run");
    let ns_per_switch = bt1.saturating_sub(bt0) as f64 / runs as f64;
    let cpu_per_s = (u1 - u0 + s1 - s0) / secs;
    let hist_map = if body.contains("tracer_map_entries{map=\"task_hist\"}") {
        "task_hist"
    } else {
        "hist_scoped"
    };
    Ok(ServeRow {
        processes: live,
        window_s: round(secs, 2),
        scrapes: times.len(),
        cpu_per_s: round(cpu_per_s, 4),
        user_per_s: round((u1 - u0) / secs, 4),
        sys_per_s: round((s1 - s0) / secs, 4),
        rss_mib: round(rss, 1),
        hwm_mib: round(hwm, 1),
        ns_per_switch: round(ns_per_switch, 1),
        switches_per_s: round(runs as f64 / secs, 0),
        scrape_ms_median: round(median(&times), 2),
        scrape_ms_max: round(times.iter().copied().fold(0.0, f64::max), 2),
        body_kib: round(body.len() as f64 / 1024.0, 1),
        hist_map_entries: value(&body, &format!("tracer_map_entries{{map=\"{hist_map}\"}}")),
        hist_map_full_drops: value(&body, "tracer_drops_total{kind=\"hist_map_full\"}"),
        hist_map,
        run_ns_per_switch: round(run_ns, 1),
        x_run: round(ns_per_switch / run_ns, 3),
        targets: targets(cpu_per_s, ns_per_switch / run_ns, median(&times)),
    })
}

/// Processes in the process group `pgid` (the load's leader and its children).
fn count_group(pgid: u32) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().nth(2)?.parse::<u32>().ok())
                == Some(pgid)
        })
        .count()
}

pub(super) fn print(r: &ServeRow) {
    println!(
        "\ntracer serve with {} live processes (load and its leader; each child wakes every 100 ms), /metrics GET every 1 s for {} s:",
        r.processes, r.window_s
    );
    print_table(&[
        strings(&[
            "CPU/s",
            "user/s",
            "sys/s",
            "RSS MiB",
            "peak MiB",
            "ns/switch",
            "switches/s",
            "scrape ms (median, max)",
            "body KiB",
            "run ns/switch",
            "x run",
            "hist map entries",
            "hist_map_full drops",
        ]),
        vec![
            format!("{:.2}%", r.cpu_per_s * 100.0),
            format!("{:.2}%", r.user_per_s * 100.0),
            format!("{:.2}%", r.sys_per_s * 100.0),
            format!("{:.1}", r.rss_mib),
            format!("{:.1}", r.hwm_mib),
            format!("{:.1}", r.ns_per_switch),
            format!("{:.0}", r.switches_per_s),
            format!("{:.1}, {:.1}", r.scrape_ms_median, r.scrape_ms_max),
            format!("{:.1}", r.body_kib),
            format!("{:.1}", r.run_ns_per_switch),
            format!("{:.2}", r.x_run),
            format!("{} ({})", r.hist_map_entries, r.hist_map),
            format!("{}", r.hist_map_full_drops),
        ],
    ]);
    println!("Targets (serve row)");
    for t in &r.targets {
        println!(
            "  {:<42} {:>8.2} {} (target <= {}): {}",
            t.what,
            t.value,
            t.unit,
            t.limit,
            if t.met { "met" } else { "MISSED" }
        );
    }
}
