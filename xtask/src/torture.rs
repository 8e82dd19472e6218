//! `cargo xtask torture`: a randomized differential harness. Each scenario, derived from
//! one seed, runs the `tracer-torture` workload (tests/src/bin/tracer-torture.rs: threads
//! that spin, sleep, block, change affinity, exit, fork, exec and change cgroups, each
//! writing its own schedstat/CLOCK_THREAD_CPUTIME_ID truth when it ends) under one target
//! mode × probe mode × interval setting, and checks the tracer's JSON against that truth
//! and against itself. A failure prints the seed and the exact command lines.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context, Result};

use crate::json::{self, Items, Json};

/// On-CPU: within 1% or 1 ms (whichever is larger) of the thread's own schedstat.
const ON_REL: f64 = 0.01;
const ON_ABS: f64 = 1e6;
/// A leader reaped by a non-main thread's exec runs its exit path after its last record.
const REAPED_LEADER_NS: f64 = 3e6;
/// Slices: schedstat's pcount ± (2 + 0.5%): a slice cut at the window's edges or at the
/// baseline read.
const SLICES_ABS: f64 = 2.0;
const SLICES_REL: f64 = 0.005;
/// After its last record a thread still exits: waking its joiner can get it preempted,
/// so the tracer may see up to two more slices and one more wait than the record holds
/// (on this 2-CPU VM, busy with other builds, such a wait took up to ~170 ms).
const EXIT_SLICES: f64 = 2.0;
const EXIT_WAIT_NS: f64 = 250e6;
/// Run-queue waits timed from wakeups exceed run_delay by at most one tick (CONFIG_HZ=250
/// here) per wait: see the clock-update skip in README "How it works".
const TICK_NS: f64 = 4e6;
/// The wakeup tracepoint fires after the enqueue that starts run_delay (by ~10 µs here
/// with pipe ping-pong): that much per wait may be missing from a wakeup-timed wait.
const WAKEUP_AFTER_ENQUEUE_NS: f64 = 25e3;

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
        // back on a second run of the same seed is printed (above) and named here, but
        // does not fail CI; one that comes back does. `cargo xtask torture` never retries.
        let again = env.run(seed)?;
        if again.violations.is_empty() {
            flaky.push(seed);
        }
        results.push(again);
    }
    if !flaky.is_empty() {
        println!(
            "torture: seeds {flaky:?} failed once and passed when run again (printed above; \
             reproduce with `cargo xtask torture --seed N`)"
        );
    }
    summarize(&results, t0.elapsed())
}

fn summarize(results: &[Outcome], took: Duration) -> Result<()> {
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

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// splitmix64, as in the workload.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0xd1b5_4a32_d192_ed03) ^ 0x2545_f491_4f6c_dd1d)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Target {
    System,
    Pid,
    Tid,
    Cgroup,
    Cmd,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::System => "system-wide",
            Target::Pid => "-p",
            Target::Tid => "-t",
            Target::Cgroup => "--cgroup",
            Target::Cmd => "-- CMD",
        }
    }
}

struct Scenario {
    seed: u64,
    target: Target,
    probe: String,
    interval_ms: Option<u64>,
    runq_schedstat: bool,
    /// The window closes while the workload's last threads end.
    edge: bool,
    /// Signed offset of -d from the workload's length in edge scenarios (ms).
    edge_jitter_ms: i64,
    workload_ms: u64,
    /// Also run the tracer with a reader that closes the pipe early.
    pipe_close: Option<bool>,
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

struct Env {
    keep: bool,
    tracer: PathBuf,
    workload: PathBuf,
    probes: Vec<String>,
    /// cgroup v2 mount point, when there is one.
    cgroup2: Option<PathBuf>,
}

impl Env {
    fn new(tracer: &Path) -> Result<Env> {
        let target = crate::target_dir()?;
        let mut build = crate::cargo(None, "build", &target);
        build.args(["--package", "tracer-tests", "--bin", "tracer-torture"]);
        crate::cmd::run(&mut build).context("building the torture workload failed")?;
        let workload = target.join("debug/tracer-torture");
        let check = Command::new(tracer)
            .arg("check")
            .output()
            .context("cannot run `tracer check`")?;
        let text = String::from_utf8_lossy(&check.stdout);
        let probes: Vec<String> = ["tp-btf", "raw-tp", "tracepoint"]
            .iter()
            .filter(|p| {
                text.lines()
                    .any(|l| l.contains("[ok") && l.split_whitespace().nth(2) == Some(**p))
            })
            .map(|p| p.to_string())
            .collect();
        if probes.is_empty() {
            bail!("`tracer check` reports no working probe mode:\n{text}");
        }
        let cgroup2 = std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
            });
        if let Some(root) = &cgroup2 {
            remove_stale_scratch(root);
        }
        println!(
            "torture: probe modes {}; cgroup v2 {}",
            probes.join(", "),
            cgroup2
                .as_ref()
                .map_or("absent (no --cgroup scenarios)".into(), |p| p
                    .display()
                    .to_string())
        );
        Ok(Env {
            keep: false,
            tracer: tracer.to_path_buf(),
            workload,
            probes,
            cgroup2,
        })
    }

    fn scenario(&self, seed: u64) -> Scenario {
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

    fn run(&self, seed: u64) -> Result<Outcome> {
        let sc = self.scenario(seed);
        println!("torture: seed {seed}: {sc}");
        let t = Instant::now();
        // A scenario the harness itself could not run fails alone, with its command lines.
        let mut o = self.run_scenario(sc).unwrap_or_else(|e| {
            let mut o = Outcome::new(self.scenario(seed));
            o.violate(format!("harness: {e:#}"));
            o
        });
        if let Some(json) = o.scenario.pipe_close {
            let probe = o.scenario.probe.clone();
            self.closed_pipe(&probe, json, &mut o);
        }
        if o.violations.is_empty() {
            println!(
                "torture: seed {seed}: ok ({} workload threads, {} checks, {:.1} s)",
                o.threads,
                o.checks,
                t.elapsed().as_secs_f64()
            );
        } else {
            o.print_failure();
        }
        Ok(o)
    }

    fn run_scenario(&self, sc: Scenario) -> Result<Outcome> {
        let scratch = Scratch::new(self.cgroup2.as_deref(), sc.seed)?;
        let out = scratch.truth.to_str().context("temp path")?.to_string();
        let mut wargs: Vec<String> = vec![
            "run".into(),
            "--seed".into(),
            sc.seed.to_string(),
            "--out".into(),
            out.clone(),
            "--ms".into(),
            sc.workload_ms.to_string(),
        ];
        if let Some((cin, cout)) = &scratch.cgroups {
            wargs.extend([
                "--cg-in".into(),
                cin.display().to_string(),
                "--cg-out".into(),
                cout.display().to_string(),
            ]);
        }
        if sc.edge {
            wargs.push("--edge".into());
        }
        let go = sc.target != Target::Cmd;
        if go {
            wargs.push("--go".into());
        }
        let duration_ms = if sc.edge {
            (sc.workload_ms as i64 + sc.edge_jitter_ms) as u64
        } else if go {
            sc.workload_ms + 800
        } else {
            sc.workload_ms + 10_000
        };
        let mut targs: Vec<String> = vec![
            "run".into(),
            "--json".into(),
            "--probe".into(),
            sc.probe.clone(),
            "-d".into(),
            format!("{duration_ms}ms"),
        ];
        if let Some(i) = sc.interval_ms {
            targs.extend(["-i".into(), format!("{i}ms")]);
        }
        if sc.runq_schedstat {
            targs.extend(["--runq-from".into(), "schedstat".into()]);
        }

        let mut o = Outcome::new(sc);
        let mut workload: Option<Child> = None;
        let mut ready = (0u64, 0u64, 0u64);
        if go {
            let mut w = Command::new(&self.workload)
                .args(&wargs)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .context("cannot start the torture workload")?;
            let mut line = String::new();
            BufReader::new(w.stdout.take().context("stdout")?).read_line(&mut line)?;
            let f: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            if f.len() != 3 {
                let _ = w.kill();
                let _ = w.wait();
                bail!("the workload did not get ready (printed {line:?})");
            }
            ready = (f[0], f[1], f[2]);
            workload = Some(w);
            match o.scenario.target {
                Target::System => {}
                Target::Pid => targs.extend(["-p".into(), ready.0.to_string()]),
                Target::Tid => targs.extend([
                    "-t".into(),
                    ready.1.to_string(),
                    "-t".into(),
                    ready.2.to_string(),
                ]),
                Target::Cgroup => {
                    let (cin, _) = scratch.cgroups.as_ref().context("no cgroup")?;
                    targs.extend(["--cgroup".into(), cin.display().to_string()]);
                }
                Target::Cmd => unreachable!(),
            }
        } else {
            targs.push("--".into());
            targs.push(self.workload.display().to_string());
            targs.extend(wargs.iter().cloned());
        }
        let mut tracer = Command::new(&self.tracer);
        tracer.args(&targs);
        o.tracer_cmd = crate::cmd::describe(&tracer);
        o.workload_cmd = if go {
            format!(
                "{} {}   (started first; `go` on its stdin once the tracer has attached)",
                self.workload.display(),
                wargs.join(" ")
            )
        } else {
            "(the command after -- above)".into()
        };
        if let Some((cin, cout)) = &scratch.cgroups {
            o.workload_cmd.push_str(&format!(
                "\n  cgroups: mkdir -p {} {}",
                cin.display(),
                cout.display()
            ));
        }

        let mut child = tracer
            .stdout(Stdio::from(std::fs::File::create(&scratch.stdout)?))
            .stderr(Stdio::from(std::fs::File::create(&scratch.stderr)?))
            .stdin(Stdio::null())
            .spawn()
            .context("cannot start the tracer")?;
        // The tracer drops its capabilities right after opening the window; then its
        // WINDOW map tells when (CLOCK_MONOTONIC, the workload's clock).
        let mut attached = false;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            match cap_eff(child.id()) {
                Some(0) => {
                    attached = true;
                    break;
                }
                Some(_) => {}
                None => break,
            }
            if child.try_wait()?.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let opened = if attached {
            self.window_open(child.id())
        } else {
            None
        };
        if let Some(w) = &mut workload {
            if let Some(mut s) = w.stdin.take() {
                let _ = s.write_all(b"go\n");
            }
        }
        let limit = Duration::from_millis(duration_ms + 60_000);
        let status = wait_timeout(&mut child, limit);
        if let Some(mut w) = workload {
            wait_timeout(&mut w, Duration::from_secs(30));
        }
        // The workload may outlive a window that closed first.
        let done = wait_for_done(&scratch.truth, Duration::from_secs(30));
        let stdout = std::fs::read_to_string(&scratch.stdout).unwrap_or_default();
        let stderr = std::fs::read_to_string(&scratch.stderr).unwrap_or_default();
        match status {
            Some(s) if s.success() => {}
            Some(s) => o.violate(format!(
                "the tracer failed ({s}); stderr: {}",
                tail(&stderr)
            )),
            None => o.violate(format!(
                "the tracer did not end within {} s of -d; stderr: {}",
                limit.as_secs(),
                tail(&stderr)
            )),
        }
        if stderr.contains("panicked") {
            o.violate(format!("the tracer panicked: {}", tail(&stderr)));
        }
        if !done {
            o.violate("the workload did not finish (no `done` line in its truth file)".into());
        }
        if !attached {
            o.violate("the tracer never dropped its capabilities (never attached?)".into());
            return Ok(o);
        }
        let docs = json::lines(&stdout);
        let truth_text = read_truth(&scratch.truth)
            .trim_end_matches('\n')
            .to_string();
        let lines: Vec<Json> = json::lines(&truth_text);
        let w = match opened {
            Some(t0) => WindowBounds { open: t0 },
            None => {
                o.notes.push(
                    "could not read the window's opening: only upper bounds checked per thread"
                        .into(),
                );
                WindowBounds { open: u64::MAX / 2 }
            }
        };
        check(&mut o, &docs, &lines, w, ready);
        if self.keep && !o.violations.is_empty() {
            let kept =
                std::env::temp_dir().join(format!("tracer-torture-seed-{}", o.scenario.seed));
            let _ = std::fs::create_dir_all(&kept);
            let _ = std::fs::write(kept.join("tracer.jsonl"), &stdout);
            let _ = std::fs::write(kept.join("tracer.stderr"), &stderr);
            let _ = std::fs::write(kept.join("truth.jsonl"), &truth_text);
            o.notes.insert(
                0,
                format!(
                    "kept the tracer's output and the truth in {}",
                    kept.display()
                ),
            );
        }
        Ok(o)
    }

    /// `tracer run ... | head -c 100`: the reader goes away; the tracer must end quietly.
    fn closed_pipe(&self, probe: &str, json: bool, o: &mut Outcome) {
        let mut cmd = Command::new(&self.tracer);
        cmd.args(["run", "--probe", probe, "-d", "2s"]);
        // Interval reports keep writing after the reader has gone.
        if json {
            cmd.args(["--json", "-i", "100ms"]);
        } else {
            cmd.args(["-i", "200ms"]);
        }
        let shown = format!("{} | head -c 100", crate::cmd::describe(&cmd));
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            o.violate(format!("cannot start `{shown}`"));
            return;
        };
        let mut buf = [0u8; 100];
        if let Some(mut s) = child.stdout.take() {
            let _ = s.read_exact(&mut buf);
        }
        let status = wait_timeout(&mut child, Duration::from_secs(30));
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        o.checks += 1;
        // A closed stdout ends the run quietly with exit 141 (128 + SIGPIPE, README).
        let quiet = status.is_some_and(|s| s.success() || matches!(s.code(), None | Some(141)))
            && !err.contains("panicked");
        if !quiet {
            o.violate(format!(
                "closed pipe: `{shown}` ended with {} and stderr: {}",
                status.map_or("no exit within 30 s".into(), |s| s.to_string()),
                tail(&err)
            ));
        }
    }
}

/// Scratch cgroups of earlier torture runs that were interrupted (their driver, whose PID
/// is in the name, is gone): their processes are killed and the directories removed.
fn remove_stale_scratch(root: &Path) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("tracer-torture-")
            .and_then(|r| r.split('-').next())
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        drop(Scratch {
            truth: PathBuf::new(),
            stdout: PathBuf::new(),
            stderr: PathBuf::new(),
            parent: Some(e.path()),
            cgroups: Some((e.path().join("in"), e.path().join("out"))),
        });
    }
}

impl Env {
    /// When the tracer with this PID opened its window, read from its WINDOW map.
    fn window_open(&self, pid: u32) -> Option<u64> {
        let out = Command::new(&self.workload)
            .args(["window-open", "--pid", &pid.to_string()])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let v: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        (out.status.success() && v != 0).then_some(v)
    }
}

/// Effective capabilities of a process; None once it is gone.
fn cap_eff(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let v = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(v.trim(), 16).ok()
}

fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The workload's truth file as text: the lines after its 64-byte header (its first 8
/// bytes count the bytes used), up to the unused zeros.
fn read_truth(truth: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(truth) else {
        return String::new();
    };
    let mut head = [0u8; 64];
    if f.read_exact(&mut head).is_err() {
        return String::new();
    }
    let used = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    let mut body = Vec::new();
    let _ = f.take(used).read_to_end(&mut body);
    String::from_utf8_lossy(&body).replace('\0', "\n")
}

fn wait_for_done(truth: &Path, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if read_truth(truth).contains("\"ev\":\"done\"") {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// The panic message when there is one (the backtrace after it says little), else the
/// last lines.
fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    if let Some(i) = lines.iter().position(|l| l.contains("panicked")) {
        return lines[i..(i + 2).min(lines.len())].join(" ");
    }
    last_lines(s)
}

fn last_lines(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let t = lines[lines.len().saturating_sub(6)..].join(" | ");
    if t.is_empty() {
        "(empty)".into()
    } else {
        t
    }
}

/// Temporary files and the scratch cgroups of one scenario, removed when dropped (the
/// processes left in the cgroups are killed first).
struct Scratch {
    truth: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    parent: Option<PathBuf>,
    cgroups: Option<(PathBuf, PathBuf)>,
}

impl Scratch {
    fn new(cgroup2: Option<&Path>, seed: u64) -> Result<Scratch> {
        let base =
            std::env::temp_dir().join(format!("tracer-torture-{}-{seed}", std::process::id()));
        let f = |ext: &str| base.with_extension(ext);
        for e in ["truth", "out", "err"] {
            let _ = std::fs::remove_file(f(e));
        }
        let (parent, cgroups) = match cgroup2 {
            Some(root) => {
                let p = root.join(format!("tracer-torture-{}-{seed}", std::process::id()));
                let (cin, cout) = (p.join("in"), p.join("out"));
                std::fs::create_dir_all(&cin)
                    .and_then(|_| std::fs::create_dir_all(&cout))
                    .with_context(|| format!("cannot create scratch cgroups in {}", p.display()))?;
                (Some(p), Some((cin, cout)))
            }
            None => (None, None),
        };
        Ok(Scratch {
            truth: f("truth"),
            stdout: f("out"),
            stderr: f("err"),
            parent,
            cgroups,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in [&self.truth, &self.stdout, &self.stderr] {
            let _ = std::fs::remove_file(p);
        }
        if let (Some(p), Some((cin, cout))) = (&self.parent, &self.cgroups) {
            for cg in [cin, cout] {
                // Only processes this scenario started live here.
                let _ = std::fs::write(cg.join("cgroup.kill"), "1");
                for _ in 0..200 {
                    let empty = std::fs::read_to_string(cg.join("cgroup.procs"))
                        .map_or(true, |s| s.trim().is_empty());
                    if empty && std::fs::remove_dir(cg).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let _ = std::fs::remove_dir(p);
        }
    }
}

/// Notes printed with a failure (interval-internal disagreements can be many).
const MAX_NOTES: usize = 6;

struct Outcome {
    scenario: Scenario,
    tracer_cmd: String,
    workload_cmd: String,
    violations: Vec<String>,
    notes: Vec<String>,
    checks: usize,
    threads: usize,
}

impl Outcome {
    fn new(scenario: Scenario) -> Outcome {
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

    fn violate(&mut self, v: String) {
        self.violations.push(v);
    }

    /// Counts one check; records a violation when it does not hold.
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.violations.push(what());
        }
    }

    fn print_failure(&self) {
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

/// The window's opening (CLOCK_MONOTONIC ns, from the tracer's WINDOW map); it closes
/// `duration_ns` later (the tracer takes that end after detaching its programs).
#[derive(Clone, Copy)]
struct WindowBounds {
    open: u64,
}

/// Per-thread numbers: schedstat on-CPU, run_delay, slices.
#[derive(Clone, Copy, Default, Debug)]
struct Stat {
    run: f64,
    wait: f64,
    slices: f64,
}

impl Stat {
    fn of(l: &Json) -> Stat {
        let g = |k: &str| l[k].as_f64().unwrap_or(0.0);
        Stat {
            run: g("run_ns"),
            wait: g("wait_ns"),
            slices: g("slices"),
        }
    }
    fn minus(self, o: Stat) -> Stat {
        Stat {
            run: self.run - o.run,
            wait: self.wait - o.wait,
            slices: self.slices - o.slices,
        }
    }
    fn plus(self, o: Stat) -> Stat {
        Stat {
            run: self.run + o.run,
            wait: self.wait + o.wait,
            slices: self.slices + o.slices,
        }
    }
}

/// One thread of the workload, or the threads an exec joins into one task history.
struct Entity {
    name: String,
    keys: Vec<(u64, u64)>,
    /// What the tracer must have seen (before subtracting wall time outside the window).
    lo: Stat,
    /// The most it may have seen.
    hi: Stat,
    /// Wall time of the start of `lo` (birth or baseline) and of the last record.
    b_ns: u64,
    e_ns: u64,
    slack_ns: f64,
    slack_slices: f64,
    expected: bool,
    truth_text: String,
}

fn build_entities(
    lines: &[Json],
    target: Target,
    ready: (u64, u64, u64),
) -> (Vec<Entity>, Vec<String>) {
    let mut problems = Vec::new();
    let mut out = Vec::new();
    let key = |l: &Json| {
        (
            l["tid"].as_u64().unwrap_or(0),
            l["pid"].as_u64().unwrap_or(0),
        )
    };
    let ev = |l: &Json| l["ev"].as_str().unwrap_or("").to_string();
    let role = |l: &Json| l["role"].as_str().unwrap_or("").to_string();
    let t = |l: &Json| l["t_ns"].as_u64().unwrap_or(0);
    let born = |l: &Json| l["born_ns"].as_u64().unwrap_or(0);
    let cmd = target == Target::Cmd;

    // Exec histories.
    let mut groups: BTreeMap<String, Vec<&Json>> = BTreeMap::new();
    let mut plain: BTreeMap<(u64, u64), Vec<&Json>> = BTreeMap::new();
    for l in lines {
        match ev(l).as_str() {
            "start" | "done" => {}
            _ => match l["grp"].as_str() {
                Some(g) if !g.is_empty() => groups.entry(g.to_string()).or_default().push(l),
                _ => plain.entry(key(l)).or_default().push(l),
            },
        }
    }
    let expected_for = |role: &str| match target {
        Target::Tid => role == "main" || role == "resident",
        Target::Pid => role != "joiner",
        _ => true,
    };
    for (g, ls) in &groups {
        let find = |e: &str| ls.iter().find(|l| ev(l) == e).copied();
        let Some(fin) = find("end") else {
            problems.push(format!(
                "exec history {g}: no record after the exec: {}",
                show(ls)
            ));
            continue;
        };
        let pre = find("pre-exec");
        let leader = find("leader");
        let mut keys = vec![key(fin)];
        let mut total = Stat::of(fin);
        let mut slack_ns = 0.0;
        let mut slack_slices = 0.0;
        let name;
        if let Some(ld) = leader {
            if let Some(p) = pre {
                keys.push(key(p));
            }
            total = total.plus(Stat::of(ld));
            slack_ns = REAPED_LEADER_NS;
            slack_slices = 2.0;
            name = format!(
                "exec from a non-main thread (TID {} became {}, leader reaped)",
                pre.map_or(0, |p| key(p).0),
                key(fin).0
            );
        } else {
            name = format!("exec from the main thread (TID {})", key(fin).0);
        }
        out.push(Entity {
            name,
            keys,
            lo: total,
            hi: total,
            b_ns: born(fin),
            e_ns: t(fin),
            slack_ns,
            slack_slices,
            expected: expected_for("exec"),
            truth_text: show(ls),
        });
    }
    for (k, ls) in &plain {
        let find = |e: &str| ls.iter().find(|l| ev(l) == e).copied();
        let Some(fin) = find("end") else {
            problems.push(format!(
                "TID {} (PID {}): no final record: {}",
                k.0,
                k.1,
                show(ls)
            ));
            continue;
        };
        let r = role(fin);
        let f = Stat::of(fin);
        let mut lo = f;
        let mut hi = f;
        let mut b_ns = born(fin);
        if let Some(base) = find("base") {
            lo = f.minus(Stat::of(base));
            // Under -- CMD the time before the baseline is inside the window too.
            if !cmd {
                hi = lo;
            }
            b_ns = t(base);
        }
        if target == Target::Cgroup {
            if let Some(j) = find("join") {
                lo = f.minus(Stat::of(j));
                hi = lo;
                b_ns = t(j);
            }
            if let Some(lv) = find("leave") {
                // Traced while in the cgroup; whether it stays traced after leaving is
                // the tracer's choice (it keeps it, as the traced set inherits).
                lo = Stat::of(lv);
            }
        }
        let is_t = k.0 == ready.1 || k.0 == ready.2;
        out.push(Entity {
            name: format!("{r} TID {} (PID {})", k.0, k.1),
            keys: vec![*k],
            lo,
            hi,
            b_ns,
            e_ns: t(fin),
            slack_ns: 0.0,
            slack_slices: 0.0,
            expected: expected_for(&r) && (target != Target::Tid || is_t),
            truth_text: show(ls),
        });
    }
    (out, problems)
}

fn show(ls: &[&Json]) -> String {
    ls.iter()
        .map(|l| {
            format!(
                "{} tid {} run {} wait {} slices {}",
                l["ev"].as_str().unwrap_or(""),
                l["tid"].as_u64().unwrap_or(0),
                ms(l["run_ns"].as_f64().unwrap_or(0.0)),
                ms(l["wait_ns"].as_f64().unwrap_or(0.0)),
                l["slices"].as_u64().unwrap_or(0)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn ms(ns: f64) -> String {
    format!("{:.3} ms", ns / 1e6)
}

fn num(v: &Json, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

/// Row fields that interval documents split and the total sums.
const ROW_FIELDS: &[&str] = &[
    "on_cpu_ns",
    "slices",
    "voluntary_switches",
    "involuntary_switches",
    "runq_wait_ns",
    "runq_waits",
    "off_cpu_ns",
    "blocked_ns",
    "preempted_ns",
    "migrations",
];

fn check(o: &mut Outcome, docs: &[Json], lines: &[Json], w: WindowBounds, ready: (u64, u64, u64)) {
    let Some(total) = docs
        .iter()
        .rev()
        .find(|d| d["kind"].as_str() == Some("total"))
    else {
        o.violate(format!(
            "no total document in the tracer's output ({} documents)",
            docs.len()
        ));
        return;
    };
    let intervals: Vec<&Json> = docs
        .iter()
        .filter(|d| d["kind"].as_str() == Some("interval"))
        .collect();
    if o.scenario.interval_ms.is_some() && intervals.is_empty() {
        o.notes
            .push("no interval document (the run was shorter than one interval)".into());
    }

    // Each document on its own.
    for d in std::iter::once(total).chain(intervals.iter().copied()) {
        doc_checks(o, d, d["kind"].as_str() == Some("total"));
    }
    // Against the workload's truth.
    let (entities, problems) = build_entities(lines, o.scenario.target, ready);
    // Intervals add up to the total, overall and per thread.
    if !intervals.is_empty() {
        let names: BTreeMap<(u64, u64), &str> = entities
            .iter()
            .flat_map(|e| e.keys.iter().map(|k| (*k, e.name.as_str())))
            .collect();
        // An exec from a non-main thread moves the thread to its leader's TID: interval
        // rows before the exec carry the old TID, the total only the new one (README).
        let aliases: BTreeMap<(u64, u64), (u64, u64)> = entities
            .iter()
            .filter(|e| e.keys.len() > 1)
            .flat_map(|e| e.keys[1..].iter().map(move |k| (*k, e.keys[0])))
            .collect();
        interval_checks(o, total, &intervals, &names, &aliases);
    }

    for p in problems {
        o.violate(format!("workload truth: {p}"));
    }
    o.threads = entities.len();
    let dur = num(total, "duration_ns");
    let close_min = w.open.saturating_add(dur as u64);
    let mut rows: BTreeMap<(u64, u64), Vec<&Json>> = BTreeMap::new();
    for r in total["threads"].items() {
        rows.entry((
            r["tid"].as_u64().unwrap_or(0),
            r["pid"].as_u64().unwrap_or(0),
        ))
        .or_default()
        .push(r);
    }
    let workload_pids: BTreeSet<u64> = lines.iter().filter_map(|l| l["pid"].as_u64()).collect();
    let mut matched: BTreeSet<(u64, u64)> = BTreeSet::new();
    let drops: f64 = match &total["drops"] {
        Json::Object(m) => m.iter().filter_map(|(_, v)| v.as_f64()).sum(),
        _ => 0.0,
    };
    let mut missing = Vec::new();
    let schedstat = o.scenario.runq_schedstat;
    for e in &entities {
        let mine: Vec<&Json> = e
            .keys
            .iter()
            .flat_map(|k| rows.get(k).cloned().unwrap_or_default())
            .collect();
        matched.extend(e.keys.iter().copied());
        if !e.expected {
            o.expect(mine.is_empty(), || {
                format!(
                    "{}: not a target, yet reported: {}",
                    e.name,
                    rows_text(&mine)
                )
            });
            continue;
        }
        let out_start = w.open.saturating_sub(e.b_ns) as f64;
        let out_end = e.e_ns.saturating_sub(close_min) as f64;
        let inside = out_start == 0.0 && out_end == 0.0;
        if mine.is_empty() {
            // Without the opening's time, presence is only required of -t targets.
            if e.b_ns < close_min && (w.open < u64::MAX / 2 || o.scenario.target == Target::Tid) {
                missing.push(format!("{} (truth: {})", e.name, e.truth_text));
            }
            continue;
        }
        let sum = |k: &str| mine.iter().map(|r| num(r, k)).sum::<f64>();
        let (on, wait, slices) = (sum("on_cpu_ns"), sum("runq_wait_ns"), sum("slices"));
        let lo_run = e.lo.run - out_start - out_end;
        let tol = (ON_REL * e.lo.run).max(ON_ABS);
        let (lo_b, hi_b) = (lo_run - tol, e.hi.run + tol + e.slack_ns);
        let alive = mine.iter().any(|r| r["exited"].as_bool() == Some(false));
        let where_ = if inside && alive {
            "its last record is inside the window, yet its row says it had not exited \
             (its exit may follow the close; the recorded time is inside all the same)"
                .to_string()
        } else if inside {
            "lived inside the window".to_string()
        } else {
            format!(
                "{} before the window's latest opening, {} after its earliest close",
                ms(out_start),
                ms(out_end)
            )
        };
        o.expect(on >= lo_b && on <= hi_b, || {
            format!(
                "{}: on-CPU {} outside [{}, {}] (schedstat {} .. {}; {}); rows: {}; truth: {}",
                e.name,
                ms(on),
                ms(lo_b.max(0.0)),
                ms(hi_b),
                ms(e.lo.run),
                ms(e.hi.run),
                where_,
                rows_text(&mine),
                e.truth_text
            )
        });
        if inside {
            let st = SLICES_ABS + e.slack_slices;
            let (lo_s, hi_s) = (
                e.lo.slices * (1.0 - SLICES_REL) - st,
                e.hi.slices * (1.0 + SLICES_REL) + st + EXIT_SLICES,
            );
            o.expect(slices >= lo_s && slices <= hi_s, || {
                format!(
                    "{}: slices {slices} outside [{lo_s:.0}, {hi_s:.0}] (schedstat pcount {} .. {}); rows: {}; truth: {}",
                    e.name,
                    e.lo.slices,
                    e.hi.slices,
                    rows_text(&mine),
                    e.truth_text
                )
            });
        }
        if schedstat {
            // run_delay's growth is taken at switch-out: a thread still in its slice when
            // the window closes has its last wait unread, so the lower bound holds only
            // for threads inside the window.
            let lo_w = if inside {
                e.lo.wait * (1.0 - ON_REL) - ON_ABS
            } else {
                0.0
            };
            let (lo_w, hi_w) = (
                lo_w,
                e.hi.wait * (1.0 + ON_REL) + ON_ABS + e.slack_ns + EXIT_WAIT_NS,
            );
            o.expect(wait >= lo_w && wait <= hi_w, || {
                format!(
                    "{}: run-queue wait {} (--runq-from schedstat) outside [{}, {}] (run_delay {} .. {}); rows: {}; truth: {}",
                    e.name, ms(wait), ms(lo_w.max(0.0)), ms(hi_w), ms(e.lo.wait), ms(e.hi.wait), rows_text(&mine), e.truth_text
                )
            });
        } else if inside {
            // From the wakeup: at least 90% of run_delay less 25 µs a wait (the wakeup
            // tracepoint fires after the enqueue that starts run_delay), and at most run_delay
            // plus one tick per wait (the clock update `__schedule` skips after a
            // wakeup preemption leaves run_delay short by up to the time since the run
            // queue's clock was last updated).
            let lo_w = e.lo.wait * 0.9 - e.lo.slices * WAKEUP_AFTER_ENQUEUE_NS - ON_ABS;
            let hi_w = e.hi.wait * (1.0 + ON_REL)
                + e.hi.slices.max(slices) * TICK_NS
                + ON_ABS
                + EXIT_WAIT_NS;
            o.expect(wait >= lo_w && wait <= hi_w, || {
                format!(
                    "{}: run-queue wait {} (from wakeups) outside [{}, {}] (run_delay {} .. {}, {} slices; 90% of run_delay less 25 us a wait; {} per wait allowed for the clock skip, {} for the exit); rows: {}; truth: {}",
                    e.name, ms(wait), ms(lo_w.max(0.0)), ms(hi_w), ms(e.lo.wait), ms(e.hi.wait), e.hi.slices, ms(TICK_NS), ms(EXIT_WAIT_NS), rows_text(&mine), e.truth_text
                )
            });
        }
    }
    if !missing.is_empty() {
        let msg = format!(
            "{} workload thread(s) that ran inside the window are not reported ({} drops counted): {}",
            missing.len(),
            drops,
            missing.join(" | ")
        );
        if (missing.len() as f64) <= drops {
            o.notes.push(msg);
        } else {
            o.violate(msg);
        }
    }
    // Rows of the workload's processes that match no thread of it; rows of anything
    // else in a targeted run.
    for (k, rs) in &rows {
        if matched.contains(k) {
            continue;
        }
        if workload_pids.contains(&k.1) {
            o.violate(format!(
                "a row for TID {} PID {} that no workload thread recorded: {}",
                k.0,
                k.1,
                rows_text(rs)
            ));
        } else if let Some(e) = entities
            .iter()
            .find(|e| e.keys.iter().any(|x| x.0 == k.0))
            .filter(|_| k.1 == 0 || o.scenario.target != Target::System)
        {
            // The TID of a workload thread under another PID (e.g. 0): a row that lost
            // its identity.
            o.violate(format!(
                "a row with the TID of {} but PID {}: {}",
                e.name,
                k.1,
                rows_text(rs)
            ));
        } else if o.scenario.target != Target::System {
            o.violate(format!(
                "{} run reports TID {} PID {} outside the target: {}",
                o.scenario.target.name(),
                k.0,
                k.1,
                rows_text(rs)
            ));
        }
    }
}

fn rows_text(rows: &[&Json]) -> String {
    if rows.is_empty() {
        return "none".into();
    }
    rows.iter()
        .map(|r| {
            format!(
                "[tid {} pid {} comm {:?} on {} slices {} runq {} ({} waits) exited {}]",
                r["tid"].as_u64().unwrap_or(0),
                r["pid"].as_u64().unwrap_or(0),
                r["comm"].as_str().unwrap_or(""),
                ms(num(r, "on_cpu_ns")),
                num(r, "slices"),
                ms(num(r, "runq_wait_ns")),
                num(r, "runq_waits"),
                r["exited"].as_bool().unwrap_or(false)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Checks within one document: nothing above the window, and the thread table, the
/// per-CPU sums and the histograms agree. Interval documents read the thread table and
/// the histograms at slightly different moments, so there their agreement is a note.
fn doc_checks(o: &mut Outcome, d: &Json, is_total: bool) {
    let label = match d["interval"].as_u64() {
        Some(i) => format!("interval {i}"),
        None => "total".into(),
    };
    let dur = num(d, "duration_ns");
    let on = num(d, "on_cpu_ns");
    let threads = d["threads"].items();
    // A slice is accounted where it ends, so an interval may hold more than its length
    // (a slice that began in the previous one): above-the-window is a note there.
    let above = |o: &mut Outcome, ok: bool, msg: String| {
        if is_total {
            o.expect(ok, || msg);
        } else if !ok {
            o.notes.push(msg);
        }
    };
    for r in threads {
        let ron = num(r, "on_cpu_ns");
        above(
            o,
            ron <= dur,
            format!(
                "{label}: thread on-CPU {} above the {} window: {}",
                ms(ron),
                ms(dur),
                rows_text(&[r])
            ),
        );
        if is_total {
            let off = num(r, "off_cpu_ns");
            o.expect(ron + off <= dur + ON_ABS, || {
                format!(
                    "{label}: on-CPU {} + off-CPU {} = {} above the {} window: {}",
                    ms(ron),
                    ms(off),
                    ms(ron + off),
                    ms(dur),
                    rows_text(&[r])
                )
            });
        }
        let sw = num(r, "voluntary_switches") + num(r, "involuntary_switches");
        o.expect(sw == num(r, "slices"), || {
            format!(
                "{label}: voluntary + involuntary switches {sw} != slices {}: {}",
                num(r, "slices"),
                rows_text(&[r])
            )
        });
        let split = num(r, "blocked_ns") + num(r, "preempted_ns");
        o.expect(split == num(r, "off_cpu_ns"), || {
            format!(
                "{label}: blocked + preempted {} != off-CPU {}: {}",
                ms(split),
                ms(num(r, "off_cpu_ns")),
                rows_text(&[r])
            )
        });
    }
    let mut per_cpu_sum = 0.0;
    for c in d["per_cpu"].items() {
        let v = num(c, "on_cpu_ns");
        per_cpu_sum += v;
        above(
            o,
            v <= dur,
            format!(
                "{label}: CPU {} on-CPU sum {} above the {} window",
                num(c, "cpu"),
                ms(v),
                ms(dur)
            ),
        );
    }
    // Each CPU sums its slices capped at their wall time; the threads keep the
    // scheduler's credit for time before a woken thread ran (README, `per_cpu`): the
    // two totals agree within 1% + 2 ms.
    // Within an interval a running slice is counted per CPU in wall time but per
    // thread no further than the scheduler's runtime as of the read (which lags by up
    // to a tick): there a difference is a note.
    let on_total = num(d, "on_cpu_ns");
    if (per_cpu_sum - on_total).abs() > on_total * 0.01 + 2e6 {
        let msg = format!(
            "{label}: Σ per_cpu on_cpu_ns {} vs on_cpu_ns {} (beyond 1% + 2 ms)",
            ms(per_cpu_sum),
            ms(on_total)
        );
        if is_total {
            o.violate(msg);
        } else {
            o.notes.push(msg);
        }
    }
    o.checks += 1;
    // Every slice and every off-CPU period lasts a while: a count without a sum is wrong
    // whenever it was read.
    for name in ["on_cpu", "off_cpu"] {
        let hh = &d["histograms"][name];
        let (c, s) = (num(hh, "count"), num(hh, "sum_ns"));
        o.expect(c == 0.0 || s > 0.0, || {
            format!("{label}: histograms.{name} counts {c} periods that sum to {s} ns")
        });
    }
    let complete = d["threads_total"].as_f64() == Some(threads.len() as f64);
    if !complete {
        o.notes.push(format!(
            "{label}: {} of {} threads listed: whole-table sums not checked",
            threads.len(),
            num(d, "threads_total")
        ));
        return;
    }
    let sum = |k: &str| threads.iter().map(|r| num(r, k)).sum::<f64>();
    let h = &d["histograms"];
    let bucket_sum = |name: &str| {
        h[name]["buckets"]
            .items()
            .iter()
            .map(|b| num(b, "count"))
            .sum::<f64>()
    };
    let pairs: Vec<(String, f64, f64)> = vec![
        (
            "Σ threads' on_cpu_ns vs on_cpu_ns".into(),
            sum("on_cpu_ns"),
            on,
        ),
        (
            "histograms.on_cpu.count vs Σ slices".into(),
            num(&h["on_cpu"], "count"),
            sum("slices"),
        ),
        (
            "histograms.on_cpu.sum_ns vs on_cpu_ns".into(),
            num(&h["on_cpu"], "sum_ns"),
            on,
        ),
        (
            "histograms.runq.count vs Σ runq_waits".into(),
            num(&h["runq"], "count"),
            sum("runq_waits"),
        ),
        (
            "histograms.runq.sum_ns vs Σ runq_wait_ns".into(),
            num(&h["runq"], "sum_ns"),
            sum("runq_wait_ns"),
        ),
        (
            "histograms.off_cpu.sum_ns vs Σ off_cpu_ns".into(),
            num(&h["off_cpu"], "sum_ns"),
            sum("off_cpu_ns"),
        ),
        (
            "Σ on_cpu buckets vs histograms.on_cpu.count".into(),
            bucket_sum("on_cpu"),
            num(&h["on_cpu"], "count"),
        ),
        (
            "Σ runq buckets vs histograms.runq.count".into(),
            bucket_sum("runq"),
            num(&h["runq"], "count"),
        ),
    ];
    for (what, a, b) in pairs {
        let msg = || format!("{label}: {what}: {a} != {b} (difference {})", a - b);
        if is_total
            || what.starts_with("Σ threads")
            || what.starts_with('Σ') && what.contains("buckets")
        {
            o.expect(a == b, msg);
        } else if a != b {
            o.notes.push(msg());
        }
    }
}

/// Interval documents add up exactly to the total: durations, on-CPU, per-CPU, the
/// histograms, and every thread's row fields.
fn interval_checks(
    o: &mut Outcome,
    total: &Json,
    intervals: &[&Json],
    names: &BTreeMap<(u64, u64), &str>,
    aliases: &BTreeMap<(u64, u64), (u64, u64)>,
) {
    let sum_docs = |f: &dyn Fn(&Json) -> f64| intervals.iter().map(|d| f(d)).sum::<f64>();
    let overall: Vec<(&str, f64, f64)> = vec![
        (
            "duration_ns",
            sum_docs(&|d| num(d, "duration_ns")),
            num(total, "duration_ns"),
        ),
        (
            "on_cpu_ns",
            sum_docs(&|d| num(d, "on_cpu_ns")),
            num(total, "on_cpu_ns"),
        ),
        (
            "histograms.on_cpu.count",
            sum_docs(&|d| num(&d["histograms"]["on_cpu"], "count")),
            num(&total["histograms"]["on_cpu"], "count"),
        ),
        (
            "histograms.runq.count",
            sum_docs(&|d| num(&d["histograms"]["runq"], "count")),
            num(&total["histograms"]["runq"], "count"),
        ),
        (
            "histograms.off_cpu.count",
            sum_docs(&|d| num(&d["histograms"]["off_cpu"], "count")),
            num(&total["histograms"]["off_cpu"], "count"),
        ),
        (
            "histograms.on_cpu.sum_ns",
            sum_docs(&|d| num(&d["histograms"]["on_cpu"], "sum_ns")),
            num(&total["histograms"]["on_cpu"], "sum_ns"),
        ),
        (
            "histograms.runq.sum_ns",
            sum_docs(&|d| num(&d["histograms"]["runq"], "sum_ns")),
            num(&total["histograms"]["runq"], "sum_ns"),
        ),
        (
            "histograms.off_cpu.sum_ns",
            sum_docs(&|d| num(&d["histograms"]["off_cpu"], "sum_ns")),
            num(&total["histograms"]["off_cpu"], "sum_ns"),
        ),
    ];
    for (what, a, b) in overall {
        o.expect(a == b, || {
            format!(
                "intervals: Σ {what} over {} intervals {a} != total {b} (difference {})",
                intervals.len(),
                a - b
            )
        });
    }
    // A row whose process was not known yet when it was read (a thread seen only at a
    // wakeup or running, gone before the report) says PID 0: it is the same thread as the
    // TID's row with its PID.
    let mut pid_of: BTreeMap<u64, u64> = BTreeMap::new();
    for d in intervals.iter().copied().chain(std::iter::once(total)) {
        for r in d["threads"].items() {
            let pid = r["pid"].as_u64().unwrap_or(0);
            if pid != 0 {
                pid_of.insert(r["tid"].as_u64().unwrap_or(0), pid);
            }
        }
    }
    let per_thread = |d: &Json| {
        let mut m: BTreeMap<(u64, u64), Vec<f64>> = BTreeMap::new();
        for r in d["threads"].items() {
            let tid = r["tid"].as_u64().unwrap_or(0);
            let pid = match r["pid"].as_u64().unwrap_or(0) {
                0 => pid_of.get(&tid).copied().unwrap_or(0),
                p => p,
            };
            let k = (tid, pid);
            let k = aliases.get(&k).copied().unwrap_or(k);
            let e = m.entry(k).or_insert_with(|| vec![0.0; ROW_FIELDS.len()]);
            for (i, f) in ROW_FIELDS.iter().enumerate() {
                e[i] += num(r, f);
            }
        }
        m
    };
    let tot = per_thread(total);
    let mut acc: BTreeMap<(u64, u64), Vec<f64>> = BTreeMap::new();
    for d in intervals {
        for (k, v) in per_thread(d) {
            let e = acc.entry(k).or_insert_with(|| vec![0.0; ROW_FIELDS.len()]);
            for (a, b) in e.iter_mut().zip(v) {
                *a += b;
            }
        }
    }
    let zero = vec![0.0; ROW_FIELDS.len()];
    let keys: BTreeSet<&(u64, u64)> = tot.keys().chain(acc.keys()).collect();
    let mut bad = Vec::new();
    for k in keys {
        let (a, b) = (acc.get(k).unwrap_or(&zero), tot.get(k).unwrap_or(&zero));
        let diffs: Vec<String> = ROW_FIELDS
            .iter()
            .enumerate()
            .filter(|(i, _)| a[*i] != b[*i])
            .map(|(i, f)| format!("{f} Σ intervals {} vs total {}", a[i], b[i]))
            .collect();
        o.checks += 1;
        if !diffs.is_empty() {
            let who = names
                .get(k)
                .map_or(String::new(), |n| format!(" (workload: {n})"));
            bad.push(format!(
                "TID {} PID {}{who}: {}",
                k.0,
                k.1,
                diffs.join(", ")
            ));
        }
    }
    if !bad.is_empty() {
        o.violate(format!(
            "intervals: {} thread(s) whose intervals do not add up to the total: {}",
            bad.len(),
            bad.join(" | ")
        ));
    }
}
