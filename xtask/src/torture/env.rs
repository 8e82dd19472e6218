//! Running one scenario: the tracer and the workload, started in order, waited for with
//! limits, and the closed-pipe run.

use std::{
    io::{BufRead, BufReader, Read, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::check::check;
use super::moves::{Kernel, Ledger};
use super::report::{Class, Outcome};
use super::rows::WindowBounds;
use super::scenario::{plan, Focus, Scenario, Target};
use super::scratch::{remove_stale_scratch, Scratch};
use super::trace;
use super::truth::{read_truth, reap_recording_zombie, wait_for_done};
use crate::json::{self, Json};

pub(super) struct Env {
    pub(super) keep: bool,
    pub(super) tracer: PathBuf,
    pub(super) workload: PathBuf,
    pub(super) probes: Vec<String>,
    /// cgroup v2 mount point, when there is one.
    pub(super) cgroup2: Option<PathBuf>,
    /// A python with Perfetto's protos, for the traces of `tracer record` scenarios.
    pub(super) python: PathBuf,
    /// CLOCK_BOOTTIME (the trace's clock) less CLOCK_MONOTONIC (the window's), ns.
    pub(super) boot_minus_mono: i64,
    /// ftrace's events of each scenario, for the sleep run_delay counts (`moves`), or
    /// why there are none.
    pub(super) moves: Result<Ledger, String>,
}

impl Env {
    pub(super) fn scenario(&self, seed: u64) -> Scenario {
        plan(seed, &self.probes, self.cgroup2.is_some())
    }

    pub(super) fn new(tracer: &Path) -> Result<Env> {
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
        let python = crate::provision::torture()?;
        let clocks = Command::new(&workload)
            .arg("clocks")
            .output()
            .context("cannot run `tracer-torture clocks`")?;
        let boot_minus_mono: i64 = String::from_utf8_lossy(&clocks.stdout)
            .trim()
            .parse()
            .with_context(|| {
                format!(
                    "`tracer-torture clocks` printed {:?}",
                    String::from_utf8_lossy(&clocks.stdout)
                )
            })?;
        let moves = Ledger::open(std::process::id());
        println!(
            "torture: run_delay's count of moved sleepers (delayed dequeue): {}",
            match &moves {
                Ok(_) => "from ftrace's events in an instance of its own".to_string(),
                Err(e) => format!("not measured ({e}): the wait floor is run_delay's"),
            }
        );
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
            python,
            boot_minus_mono,
            moves,
        })
    }

    pub(super) fn run(&self, seed: u64) -> Result<Outcome> {
        let sc = self.scenario(seed);
        println!("torture: seed {seed}: {sc}");
        let t = Instant::now();
        // A scenario the harness itself could not run fails alone, with its command lines.
        let mut o = self.run_scenario(sc).unwrap_or_else(|e| {
            let mut o = Outcome::new(self.scenario(seed));
            o.violate(Class::Harness, format!("harness: {e:#}"));
            o
        });
        if let Some(json) = o.scenario.pipe_close {
            let probe = o.scenario.probe.clone();
            self.closed_pipe(&probe, json, &mut o);
        }
        if o.violations.is_empty() {
            let moved = match o.moved_sleep_ns {
                0 => String::new(),
                n => format!(
                    ", {:.2} ms of it moved sleep run_delay counted",
                    n as f64 / 1e6
                ),
            };
            println!(
                "torture: seed {seed}: ok ({} workload threads, {} checks, {} scheduler events{moved}, {:.1} s)",
                o.threads,
                o.checks,
                o.sched_events,
                t.elapsed().as_secs_f64()
            );
        } else {
            o.print_failure();
        }
        Ok(o)
    }

    pub(super) fn run_scenario(&self, sc: Scenario) -> Result<Outcome> {
        let scratch = Scratch::new(self.cgroup2.as_deref(), sc.seed, sc.focus == Focus::Nested)?;
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
        if let Some(cg) = &scratch.cgroups {
            wargs.extend([
                "--cg-in".into(),
                cg.work.display().to_string(),
                "--cg-out".into(),
                cg.out.display().to_string(),
            ]);
        }
        if sc.edge {
            wargs.push("--edge".into());
        }
        match sc.focus {
            Focus::Startup => wargs.extend([
                "--startup".into(),
                format!("{},{}", sc.startup_ms.0, sc.startup_ms.1),
            ]),
            Focus::Sleepers => wargs.push("--sleepers".into()),
            Focus::Pinned => wargs.push("--pinned".into()),
            // Ping-pong across CPUs (item 5) and an exec from a non-main thread (item 8).
            Focus::Record => wargs.extend(["--pinned".into(), "--exec-thread".into()]),
            Focus::Short => wargs.extend(["--short".into(), sc.short.to_string()]),
            Focus::Names => wargs.push("--names".into()),
            Focus::Leave => wargs.push("--leave".into()),
            Focus::Nested => {}
        }
        if sc.crowd > 0 {
            wargs.extend(["--crowd".into(), sc.crowd.to_string()]);
        }
        let go = sc.target != Target::Cmd;
        if go {
            wargs.push("--go".into());
        }
        let duration_ms = if sc.edge {
            (sc.workload_ms as i64 + sc.edge_jitter_ms) as u64
        } else if sc.focus == Focus::Sleepers {
            // The workload outlives the window (its sleepers wait for it to close): the
            // window closes a little after the work.
            sc.workload_ms + 300
        } else if go {
            sc.workload_ms + 800
        } else {
            sc.workload_ms + 10_000
        };
        let mut targs: Vec<String> = if sc.focus == Focus::Record {
            vec![
                "record".into(),
                "-o".into(),
                scratch.trace.display().to_string(),
            ]
        } else {
            vec!["run".into()]
        };
        targs.extend([
            "--json".into(),
            "--probe".into(),
            sc.probe.clone(),
            "-d".into(),
            format!("{duration_ms}ms"),
        ]);
        if let Some(i) = sc.interval_ms {
            targs.extend(["-i".into(), format!("{i}ms")]);
        }
        if sc.runq_schedstat {
            targs.extend(["--runq-from".into(), "schedstat".into()]);
        }

        let mut o = Outcome::new(sc);
        // Read only what this scenario recorded: a start that failed leaves the last
        // scenario's events in the buffer.
        let ledger = self.moves.as_ref().ok().filter(|l| match l.start() {
            Ok(()) => true,
            Err(e) => {
                o.notes.push(format!("ftrace not started: {e}"));
                false
            }
        });
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
                    let cg = scratch.cgroups.as_ref().context("no cgroup")?;
                    targs.extend(["--cgroup".into(), cg.target.display().to_string()]);
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
        if let Some(limit) = o.scenario.nofile {
            limit_nofile(&mut tracer, limit);
        }
        o.tracer_cmd = crate::cmd::describe(&tracer);
        // The reads' own account (taken again, waits for exiting threads) goes to the
        // kept stderr: what a failure that does not reproduce leaves to go on.
        tracer.env("RUST_LOG", "warn,reads=debug");
        if let Some((soft, hard)) = o.scenario.nofile {
            o.tracer_cmd = format!("prlimit --nofile={soft}:{hard} {}", o.tracer_cmd);
        }
        o.workload_cmd = if go {
            format!(
                "{} {}   (started first; `go` on its stdin once the tracer has attached)",
                self.workload.display(),
                wargs.join(" ")
            )
        } else {
            "(the command after -- above)".into()
        };
        if let Some(cg) = &scratch.cgroups {
            o.workload_cmd.push_str(&format!(
                "\n  cgroups: mkdir -p {} {}",
                cg.work.display(),
                cg.out.display()
            ));
        }
        let steal0 = tracer_truth::Steal::start();

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
        // The workload's stdin stays open until the tracer has ended: its end (EOF) tells
        // the sleepers of `--sleepers` that the window has closed.
        let mut stdin = workload.as_mut().and_then(|w| w.stdin.take());
        if let Some(s) = &mut stdin {
            let _ = s.write_all(b"go\n");
            let _ = s.flush();
        }
        let limit = Duration::from_millis(duration_ms + 60_000);
        let status = wait_timeout(&mut child, limit);
        let steal = steal0.allowance_ns() as u64;
        drop(stdin);
        let zombie = workload
            .as_mut()
            .and_then(|w| reap_recording_zombie(w, Duration::from_secs(30)));
        // The workload may outlive a window that closed first.
        let done = wait_for_done(&scratch.truth, Duration::from_secs(30));
        let mut sched_trace = Vec::new();
        let kernel = match ledger.map(|l| l.read()) {
            Some(Ok((k, n, text))) => {
                o.sched_events = n;
                sched_trace = text;
                k
            }
            Some(Err(e)) => {
                o.notes.push(format!(
                    "ftrace's waits and run_delay's count of moved sleepers not measured: {e}"
                ));
                Kernel::default()
            }
            None => Kernel::default(),
        };
        let stdout = std::fs::read_to_string(&scratch.stdout).unwrap_or_default();
        let stderr = std::fs::read_to_string(&scratch.stderr).unwrap_or_default();
        match status {
            Some(s) if s.success() => {}
            Some(s) => o.violate(
                Class::Tracer,
                format!("the tracer failed ({s}); stderr: {}", tail(&stderr)),
            ),
            None => o.violate(
                Class::Tracer,
                format!(
                    "the tracer did not end within {} s of -d; stderr: {}",
                    limit.as_secs(),
                    tail(&stderr)
                ),
            ),
        }
        if stderr.contains("panicked") {
            o.violate(
                Class::Tracer,
                format!("the tracer panicked: {}", tail(&stderr)),
            );
        }
        if !done {
            o.violate(
                Class::Harness,
                "the workload did not finish (no `done` line in its truth file)".into(),
            );
        }
        if !attached {
            o.violate(
                Class::Tracer,
                "the tracer never dropped its capabilities (never attached?)".into(),
            );
            return Ok(o);
        }
        let docs = json::lines(&stdout);
        let mut truth_text = read_truth(&scratch.truth)
            .trim_end_matches('\n')
            .to_string();
        if let Some(z) = zombie {
            truth_text.push('\n');
            truth_text.push_str(&z);
        }
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
        check(&mut o, &docs, &lines, w, ready, &kernel);
        if o.scenario.focus == Focus::Record && status.is_some_and(|s| s.success()) {
            let ctx = (steal, self.boot_minus_mono, ready);
            trace::check(&mut o, &self.python, &scratch.trace, &docs, &lines, w, ctx);
        }
        if self.keep && !o.violations.is_empty() {
            let kept =
                std::env::temp_dir().join(format!("tracer-torture-seed-{}", o.scenario.seed));
            let _ = std::fs::create_dir_all(&kept);
            let _ = std::fs::write(kept.join("tracer.jsonl"), &stdout);
            let _ = std::fs::write(kept.join("tracer.stderr"), &stderr);
            let _ = std::fs::write(kept.join("truth.jsonl"), &truth_text);
            // The trace of a record scenario too: its switches explain most failures.
            let _ = std::fs::copy(&scratch.trace, kept.join("trace.pftrace"));
            // And ftrace's own scheduler events of the scenario, as the kernel saw it.
            if !sched_trace.is_empty() {
                let _ = std::fs::write(kept.join("sched.trace"), &sched_trace);
            }
            o.notes.insert(
                0,
                format!(
                    "kept the tracer's output, the truth, ftrace's scheduler events (and a \
                     record scenario's trace) in {}",
                    kept.display()
                ),
            );
        }
        Ok(o)
    }

    /// `tracer run ... | head -c 100`: the reader goes away; the tracer must end quietly.
    pub(super) fn closed_pipe(&self, probe: &str, json: bool, o: &mut Outcome) {
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
            o.violate(Class::Harness, format!("cannot start `{shown}`"));
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
            o.violate(
                Class::Pipe,
                format!(
                    "closed pipe: `{shown}` ended with {} and stderr: {}",
                    status.map_or("no exit within 30 s".into(), |s| s.to_string()),
                    tail(&err)
                ),
            );
        }
    }
}

impl Env {
    /// When the tracer with this PID opened its window, read from its WINDOW map.
    pub(super) fn window_open(&self, pid: u32) -> Option<u64> {
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
pub(super) fn cap_eff(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let v = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(v.trim(), 16).ok()
}

pub(super) fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
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

/// The panic message when there is one (the backtrace after it says little), else the
/// last lines.
pub(super) fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    if let Some(i) = lines.iter().position(|l| l.contains("panicked")) {
        return lines[i..(i + 2).min(lines.len())].join(" ");
    }
    last_lines(s)
}

pub(super) fn last_lines(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let t = lines[lines.len().saturating_sub(6)..].join(" | ");
    if t.is_empty() {
        "(empty)".into()
    } else {
        t
    }
}

/// Runs `cmd` with RLIMIT_NOFILE at `(soft, hard)`.
fn limit_nofile(cmd: &mut Command, (soft, hard): (u64, u64)) {
    use std::os::unix::process::CommandExt as _;
    extern "C" {
        fn setrlimit(resource: i32, rlim: *const [u64; 2]) -> i32;
    }
    /// RLIMIT_NOFILE on x86-64, arm64 and ppc64le.
    const RLIMIT_NOFILE: i32 = 7;
    // SAFETY: setrlimit is async-signal-safe and reads two u64 from a live array.
    unsafe {
        cmd.pre_exec(move || {
            if setrlimit(RLIMIT_NOFILE, &[soft, hard]) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
