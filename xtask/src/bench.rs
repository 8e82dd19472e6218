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
    collections::{BTreeMap, BTreeSet, HashMap},
    fs, io,
    os::{
        fd::{FromRawFd, OwnedFd},
        unix::process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicI32, Ordering},
    thread::sleep,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::json::{self, Json};

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
}

const PACKAGES: [&str; 4] = ["libbpf-tools", "bpftrace", "linux-perf", "bpftool"];

/// The bpftrace equivalents of cpudist (on-CPU slice) and runqlat (run-queue latency).
const BPFTRACE_SCRIPT: &str = r#"// cpudist equivalent: on-CPU time of each slice, in microseconds
tracepoint:sched:sched_switch
{
	$start = @oncpu_start[args->prev_pid];
	if ($start) {
		@oncpu_us = hist((nsecs - $start) / 1000);
	}
	@oncpu_start[args->next_pid] = nsecs;
}

// runqlat equivalent: from wakeup (or preemption) to running, in microseconds
tracepoint:sched:sched_wakeup,
tracepoint:sched:sched_wakeup_new
{
	@qtime[args->pid] = nsecs;
}

tracepoint:sched:sched_switch
{
	if (args->prev_state == 0) {
		@qtime[args->prev_pid] = nsecs;
	}
	$q = @qtime[args->next_pid];
	if ($q) {
		@runq_us = hist((nsecs - $q) / 1000);
	}
	delete(@qtime[args->next_pid]);
}

END
{
	clear(@oncpu_start);
	clear(@qtime);
}
"#;

// ---------------------------------------------------------------------------------------
// The C library calls xtask needs (it has no libc crate; std links the C library anyway).

mod sys {
    extern "C" {
        pub fn signal(sig: i32, handler: usize) -> usize;
        pub fn kill(pid: i32, sig: i32) -> i32;
        pub fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
        pub fn getppid() -> i32;
        pub fn setpgid(pid: i32, pgid: i32) -> i32;
        pub fn sysconf(name: i32) -> i64;
        pub fn syscall(num: i64, ...) -> i64;
        pub fn setpriority(which: i32, who: u32, prio: i32) -> i32;
    }
    pub const PRIO_PROCESS: i32 = 0;
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub const SIGKILL: i32 = 9;
    pub const SIGTERM: i32 = 15;
    pub const PR_SET_PDEATHSIG: i32 = 1;
    pub const SC_CLK_TCK: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const BPF_ENABLE_STATS: i64 = 32;
    pub const BPF_STATS_RUN_TIME: u32 = 0;
    #[cfg(target_arch = "x86_64")]
    pub const SYS_BPF: Option<i64> = Some(321);
    #[cfg(any(target_arch = "aarch64", target_arch = "riscv64"))]
    pub const SYS_BPF: Option<i64> = Some(280);
    #[cfg(target_arch = "powerpc64")]
    pub const SYS_BPF: Option<i64> = Some(361);
    #[cfg(target_arch = "s390x")]
    pub const SYS_BPF: Option<i64> = Some(351);
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "powerpc64",
        target_arch = "s390x"
    )))]
    pub const SYS_BPF: Option<i64> = None;
}

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP only set a flag: every wait polls it and unwinds through the
/// guards below (children killed and reaped, BPF statistics restored).
fn catch_signals() {
    for sig in [sys::SIGINT, sys::SIGTERM, sys::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sys::signal(sig, on_signal as extern "C" fn(i32) as usize) };
    }
}

fn interrupted() -> Result<()> {
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => Ok(()),
        sig => {
            bail!("interrupted by signal {sig}: stopped every tool and load, restored bpf_stats")
        }
    }
}

// ---------------------------------------------------------------------------------------
// Children: always killed and reaped, whatever way the bench ends.

struct Proc {
    label: String,
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Proc {
    /// Starts `argv` with stdout and stderr in `logs/<label>.{out,err}`, as the leader of a
    /// new process group (so whatever it forks, like perf's pipe worker, is killed with it).
    /// The child gets SIGKILL if xtask dies without cleaning up (PR_SET_PDEATHSIG).
    fn spawn(label: &str, argv: &[String], logs: &Path) -> Result<Proc> {
        let file: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let out = logs.join(format!("{file}.out"));
        let err = logs.join(format!("{file}.err"));
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?)
            .stderr(fs::File::create(&err).with_context(|| format!("creating {}", err.display()))?);
        let parent = std::process::id() as i32;
        // SAFETY: setpgid, prctl and getppid are async-signal-safe; nothing here allocates.
        unsafe {
            cmd.pre_exec(move || {
                if sys::setpgid(0, 0) != 0
                    || sys::prctl(sys::PR_SET_PDEATHSIG, sys::SIGKILL as u64, 0, 0, 0) != 0
                    || sys::getppid() != parent
                {
                    return Err(io::Error::from_raw_os_error(sys::ESRCH));
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", argv.join(" ")))?;
        Ok(Proc {
            label: label.to_string(),
            child,
            out,
            err,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own, not yet reaped, child.
        unsafe { sys::kill(self.pid() as i32, sig) };
    }

    /// SIGKILL to the child's whole process group, then reaps the child. Only called while
    /// the child is unreaped, so its pid (the group id) cannot belong to anyone else yet.
    fn kill_group(&mut self) -> io::Result<ExitStatus> {
        // SAFETY: kill(2) of the process group our unreaped child leads.
        unsafe { sys::kill(-(self.pid() as i32), sys::SIGKILL) };
        let _ = self.child.kill();
        self.child.wait()
    }

    fn stderr_tail(&self) -> String {
        let s = fs::read_to_string(&self.err).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// Fails, with the tail of its stderr, if the process has already exited.
    fn check_alive(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!(
                "{} exited early ({st}); its stderr ({}) ends:\n{}",
                self.label,
                self.err.display(),
                self.stderr_tail()
            );
        }
        Ok(())
    }

    /// Waits for the process to finish on its own; a signal to xtask or the timeout kills it.
    fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st);
            }
            interrupted()?;
            ensure!(
                Instant::now() < end,
                "{} did not finish within {timeout:?}",
                self.label
            );
            sleep(Duration::from_millis(5));
        }
    }

    /// SIGINT (every tool here stops cleanly on it), then SIGKILL after `grace`; reaped.
    fn stop(&mut self, grace: Duration) -> Result<ExitStatus> {
        if let Some(st) = self.child.try_wait()? {
            return Ok(st);
        }
        self.signal(sys::SIGINT);
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st);
            }
            sleep(Duration::from_millis(5));
        }
        eprintln!(
            "xtask bench: {} ignored SIGINT for {grace:?}: killing it",
            self.label
        );
        Ok(self.kill_group()?)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.kill_group();
        }
    }
}

// ---------------------------------------------------------------------------------------
// BPF run-time statistics.

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

fn read_stats_sysctl() -> Result<String> {
    Ok(fs::read_to_string(STATS_SYSCTL)
        .with_context(|| format!("reading {STATS_SYSCTL}"))?
        .trim()
        .to_string())
}

/// Statistics on while this lives. Preferably through BPF_ENABLE_STATS: the kernel counts
/// the fd as one more user of the statistics and drops it however xtask ends, so the
/// sysctl is never touched; otherwise the sysctl is written and restored on drop.
enum BpfStats {
    Fd(#[allow(dead_code)] OwnedFd),
    Sysctl { restore: String },
    AlreadyOn,
}

impl BpfStats {
    fn on() -> Result<BpfStats> {
        if read_stats_sysctl()? == "1" {
            return Ok(BpfStats::AlreadyOn);
        }
        if let Some(nr) = sys::SYS_BPF {
            let attr: [u64; 1] = [sys::BPF_STATS_RUN_TIME as u64];
            // SAFETY: bpf(BPF_ENABLE_STATS, &attr, 4) reads the 4-byte `type` field only.
            let fd = unsafe { sys::syscall(nr, sys::BPF_ENABLE_STATS, attr.as_ptr(), 4i64) };
            if fd >= 0 {
                // SAFETY: the kernel just returned this fd to us and nothing else owns it.
                return Ok(BpfStats::Fd(unsafe { OwnedFd::from_raw_fd(fd as i32) }));
            }
        }
        let restore = read_stats_sysctl()?;
        fs::write(STATS_SYSCTL, "1").with_context(|| format!("writing 1 to {STATS_SYSCTL}"))?;
        Ok(BpfStats::Sysctl { restore })
    }

    fn method(&self) -> &'static str {
        match self {
            BpfStats::Fd(_) => "BPF_ENABLE_STATS fd (kernel.bpf_stats_enabled itself untouched)",
            BpfStats::Sysctl { .. } => "kernel.bpf_stats_enabled=1, restored afterwards",
            BpfStats::AlreadyOn => "kernel.bpf_stats_enabled was already 1 (left alone)",
        }
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let BpfStats::Sysctl { restore } = self {
            if let Err(e) = fs::write(STATS_SYSCTL, restore.as_bytes()) {
                eprintln!("xtask bench: cannot restore {STATS_SYSCTL} to {restore}: {e}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Programs: bpftool for identification and names, fdinfo for ownership and statistics.

#[derive(Clone, Debug)]
struct ProgMeta {
    name: String,
    kind: String,
    xlated_bytes: u64,
}

fn bpftool_progs(bpftool: &Path) -> Result<BTreeMap<u32, ProgMeta>> {
    let out = Command::new(bpftool)
        .args(["prog", "show", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", bpftool.display()))?;
    ensure!(
        out.status.success(),
        "bpftool prog show failed: {}",
        out.status
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let json =
        json::parse(&text).map_err(|e| anyhow!("parsing `bpftool prog show --json`: {e}"))?;
    let Json::Arr(items) = json else {
        bail!("`bpftool prog show --json` is not an array")
    };
    let mut progs = BTreeMap::new();
    for p in &items {
        let id = p.get("id").as_f64().context("a program without id")? as u32;
        let text = |k| p.get(k).as_str().unwrap_or("?").to_string();
        progs.insert(
            id,
            ProgMeta {
                name: text("name"),
                kind: text("type"),
                xlated_bytes: p.get("bytes_xlated").as_f64().unwrap_or(0.0) as u64,
            },
        );
    }
    Ok(progs)
}

#[derive(Clone, Debug, Default)]
struct FdProg {
    tag: String,
    run_cnt: u64,
    run_time_ns: u64,
}

/// What one process holds: its BPF programs (by id, with their statistics) and its attach
/// fds (BPF links; perf events, through which classic tracepoints attach).
#[derive(Clone, Debug, Default)]
struct FdScan {
    progs: BTreeMap<u32, FdProg>,
    links: usize,
    perf_events: usize,
}

fn scan_fds(pid: u32) -> Result<FdScan> {
    let mut scan = FdScan::default();
    let dir = format!("/proc/{pid}/fd");
    for entry in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        // fds come and go while we look: skip the ones that went.
        let Ok(entry) = entry else { continue };
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        match target.to_string_lossy().as_ref() {
            "anon_inode:bpf-prog" => {
                let info = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
                let Ok(info) = fs::read_to_string(info) else {
                    continue;
                };
                let field = |key: &str| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                        .map(str::trim)
                };
                let number = |key| field(key).and_then(|v| v.parse::<u64>().ok());
                let Some(id) = number("prog_id") else {
                    continue;
                };
                scan.progs.insert(
                    id as u32,
                    FdProg {
                        tag: field("prog_tag").unwrap_or_default().to_string(),
                        run_cnt: number("run_cnt").unwrap_or(0),
                        run_time_ns: number("run_time_ns").unwrap_or(0),
                    },
                );
            }
            "anon_inode:bpf_link" => scan.links += 1,
            "anon_inode:[perf_event]" => scan.perf_events += 1,
            _ => {}
        }
    }
    Ok(scan)
}

fn is_switch_prog(name: &str) -> bool {
    name.contains("switch") || name.contains("sched_sw")
}

// ---------------------------------------------------------------------------------------
// /proc figures.

fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("odd /proc/PID/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) of stat; `rest` starts at field 3.
    Ok(f.get(11).context("short stat")?.parse::<u64>()?
        + f.get(12).context("short stat")?.parse::<u64>()?)
}

/// On-CPU ns of all the process's live threads (schedstat is exact where stat has ticks).
fn sched_ns(pid: u32) -> u64 {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    dir.filter_map(|t| t.ok())
        .filter_map(|t| fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn vm_hwm_kib(pid: u32) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/PID/status")
}

fn context_switches() -> Result<u64> {
    let stat = fs::read_to_string("/proc/stat")?;
    stat.lines()
        .find_map(|l| l.strip_prefix("ctxt "))
        .and_then(|v| v.trim().parse().ok())
        .context("no ctxt line in /proc/stat")
}

/// Busy ticks of all CPUs: user, nice, system, irq, softirq and steal of /proc/stat.
fn busy_ticks() -> Result<u64> {
    let stat = fs::read_to_string("/proc/stat")?;
    let cpu = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .context("no cpu line in /proc/stat")?;
    let f: Vec<u64> = cpu
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    ensure!(f.len() >= 8, "short cpu line in /proc/stat");
    Ok(f[0] + f[1] + f[2] + f[5] + f[6] + f[7])
}

/// cutime+cstime of xtask: the CPU time of every child it has reaped.
fn children_ticks() -> Result<u64> {
    let stat = fs::read_to_string("/proc/self/stat")?;
    let rest = &stat[stat.rfind(')').context("odd /proc/self/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f.get(13).context("short stat")?.parse::<u64>()?
        + f.get(14).context("short stat")?.parse::<u64>()?)
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { sys::sysconf(sys::SC_CLK_TCK) }).max(1) as f64
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Packages and binaries.

fn installed(pkg: &str) -> bool {
    crate::apt::installed(pkg)
}

fn ensure_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES.into_iter().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("xtask bench: installing {}", missing.join(" "));
    crate::apt::Apt::new().install(&missing)?;
    let still: Vec<&str> = missing.into_iter().filter(|p| !installed(p)).collect();
    ensure!(still.is_empty(), "still not installed: {}", still.join(" "));
    Ok(())
}

/// An executable called `name` that `pkg` installed, else `name` on PATH.
fn binary(pkg: &str, name: &str) -> Result<PathBuf> {
    let listed = Command::new("dpkg")
        .args(["-L", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let suffix = format!("/{name}");
    if let Some(p) = listed
        .lines()
        .filter(|l| l.ends_with(&suffix))
        .map(PathBuf::from)
        .find(|p| p.is_file())
    {
        return Ok(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("no {name} (package {pkg}) found"))
}

/// A command's whole stdout, trimmed (empty when it fails).
fn command_output(argv: &[&str]) -> String {
    Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn first_line(argv: &[&str]) -> String {
    Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .ok()
        .map(|o| {
            let s = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&s)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Loads.

struct Load {
    key: &'static str,
    argv: Vec<String>,
    unit: &'static str,
    /// messaging: messages per run (perf prints only the time); pipe prints ops/sec.
    messages: Option<f64>,
}

struct LoadRun {
    rate: f64,
    wall: Duration,
    /// CPUs kept busy by anything but the load itself meanwhile (the tool, the `-p` target,
    /// xtask, and whoever else uses the machine): busy ticks of /proc/stat minus the load's
    /// own (reaped, so in our cutime+cstime), per second.
    other_cpus: f64,
    /// The load's own CPU time (user+system of its reaped processes), in clock ticks.
    own_ticks: u64,
}

impl Load {
    fn pipe(perf: &Path, loops: u32) -> Load {
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

    fn messaging(perf: &Path, groups: u32, loops: u32) -> Load {
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

    fn run(&self, logs: &Path) -> Result<LoadRun> {
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

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------------------
// Tools.

struct Tool {
    key: &'static str,
    label: &'static str,
    /// (process label, argv) for each process the tool runs.
    procs: Vec<(String, Vec<String>)>,
    /// The key of the cpudist+runqlat row this one is compared with.
    versus: &'static str,
}

/// What an untimed warm-up start showed about one of the tool's processes.
#[derive(Clone, Debug)]
struct Expect {
    /// Attach fds to wait for: bpf_link when the process uses any, else perf_event.
    links: usize,
    perf_events: usize,
    progs: usize,
    switch_tags: BTreeSet<String>,
    /// Per program: its translated size and the helpers (map operations among them) its
    /// code calls, from `bpftool prog dump xlated`: a static inventory, not run counts.
    code: Vec<Code>,
}

#[derive(Clone, Debug)]
struct Code {
    program: String,
    insns: usize,
    calls: BTreeMap<String, usize>,
}

fn inventory(bpftool: &Path, id: u32, program: &str) -> Result<Code> {
    let out = Command::new(bpftool)
        .args(["prog", "dump", "xlated", "id", &id.to_string()])
        .output()
        .with_context(|| format!("cannot run {}", bpftool.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut code = Code {
        program: program.to_string(),
        insns: 0,
        calls: BTreeMap::new(),
    };
    for line in text.lines() {
        let Some((n, insn)) = line.trim_start().split_once(": ") else {
            continue;
        };
        if n.is_empty() || !n.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        code.insns += 1;
        if let Some(callee) = insn.split_once(" call ").map(|x| x.1) {
            let name = callee.split(['#', ' ']).next().unwrap_or(callee);
            let name = if name.starts_with("pc") {
                "bpf-to-bpf call"
            } else {
                name
            };
            *code.calls.entry(name.to_string()).or_default() += 1;
        }
    }
    Ok(code)
}

/// One run of the tool, attached: its processes and their programs.
struct Running {
    procs: Vec<Proc>,
    /// (process index, program id, display name) of the tool's programs.
    progs: Vec<(usize, u32, String)>,
    /// The program id whose run_cnt counts the switches.
    switch_id: u32,
    switch_name: String,
    foreign: Vec<String>,
    startup: Duration,
}

fn start_tool(
    tool: &Tool,
    expect: Option<&[Expect]>,
    bpftool: &Path,
    logs: &Path,
) -> Result<Running> {
    let before: BTreeSet<u32> = bpftool_progs(bpftool)?.into_keys().collect();
    let t0 = Instant::now();
    let mut procs = Vec::new();
    for (label, argv) in &tool.procs {
        procs.push(Proc::spawn(label, argv, logs)?);
    }
    // Attached: see the module documentation. Without an expectation (the warm-up), any of
    // the process's programs having run is enough, and we then give it a second to finish.
    let deadline = t0 + Duration::from_secs(60);
    let startup = loop {
        let mut ready = true;
        for (i, p) in procs.iter_mut().enumerate() {
            p.check_alive()?;
            let scan = scan_fds(p.pid())?;
            let ran = |tags: Option<&BTreeSet<String>>| {
                scan.progs
                    .values()
                    .any(|f| f.run_cnt > 0 && tags.is_none_or(|t| t.contains(&f.tag)))
            };
            ready &= match expect {
                None => ran(None),
                Some(e) => {
                    let e = &e[i];
                    scan.progs.len() >= e.progs
                        && scan.links >= e.links
                        && scan.perf_events >= e.perf_events
                        && ran(Some(&e.switch_tags))
                }
            };
        }
        if ready {
            break t0.elapsed();
        }
        interrupted()?;
        ensure!(
            Instant::now() < deadline,
            "{} did not attach within a minute",
            tool.label
        );
        sleep(Duration::from_micros(500));
    };
    if expect.is_none() {
        sleep(Duration::from_secs(1));
    }

    let after = bpftool_progs(bpftool)?;
    let appeared: BTreeSet<u32> = after
        .keys()
        .copied()
        .filter(|id| !before.contains(id))
        .collect();
    let mut progs = Vec::new();
    let mut owned = BTreeSet::new();
    let mut switch = None;
    for (i, p) in procs.iter().enumerate() {
        let scan = scan_fds(p.pid())?;
        let mut seen: HashMap<String, usize> = HashMap::new();
        for id in scan.progs.keys().filter(|id| appeared.contains(id)) {
            owned.insert(*id);
            let meta = &after[id];
            let n = seen.entry(meta.name.clone()).or_default();
            *n += 1;
            let name = match *n {
                1 => format!("{}:{}", p.label, meta.name),
                n => format!("{}:{}#{n}", p.label, meta.name),
            };
            let is_switch = match expect {
                None => is_switch_prog(&meta.name),
                Some(e) => e[i].switch_tags.contains(&scan.progs[id].tag),
            };
            if is_switch && switch.is_none() && i == 0 {
                switch = Some((*id, name.clone()));
            }
            progs.push((i, *id, name));
        }
    }
    let foreign = appeared
        .iter()
        .filter(|id| !owned.contains(id))
        .map(|id| format!("{} ({}, id {id})", after[id].name, after[id].kind))
        .collect();
    let (switch_id, switch_name) = switch.with_context(|| {
        format!(
            "{}: no sched_switch program among its programs {:?}",
            tool.label,
            progs.iter().map(|p| &p.2).collect::<Vec<_>>()
        )
    })?;
    Ok(Running {
        procs,
        progs,
        switch_id,
        switch_name,
        foreign,
        startup,
    })
}

/// Starts the tool once, untimed, to learn what "attached" looks like for it.
fn warm_up(tool: &Tool, bpftool: &Path, logs: &Path) -> Result<Vec<Expect>> {
    let _stats = BpfStats::on()?;
    let mut run = start_tool(tool, None, bpftool, logs)?;
    let mut expect = Vec::new();
    for (i, p) in run.procs.iter().enumerate() {
        let scan = scan_fds(p.pid())?;
        let mine: Vec<&(usize, u32, String)> = run.progs.iter().filter(|x| x.0 == i).collect();
        let switch_tags: BTreeSet<String> = mine
            .iter()
            .filter(|x| is_switch_prog(x.2.split(':').nth(1).unwrap_or("")))
            .filter_map(|x| scan.progs.get(&x.1).map(|f| f.tag.clone()))
            .collect();
        ensure!(
            !switch_tags.is_empty(),
            "{}: no sched_switch program among {:?}",
            p.label,
            mine.iter().map(|x| &x.2).collect::<Vec<_>>()
        );
        let code = mine
            .iter()
            .map(|x| inventory(bpftool, x.1, &x.2))
            .collect::<Result<Vec<_>>>()?;
        expect.push(Expect {
            links: scan.links,
            perf_events: if scan.links > 0 { 0 } else { scan.perf_events },
            progs: mine.len(),
            switch_tags,
            code,
        });
    }
    if !run.foreign.is_empty() {
        eprintln!(
            "xtask bench: programs loaded by someone else meanwhile (ignored): {}",
            run.foreign.join(", ")
        );
    }
    for p in &mut run.procs {
        p.stop(Duration::from_secs(20))?;
    }
    Ok(expect)
}

// ---------------------------------------------------------------------------------------
// Measurement.

#[derive(Default)]
struct Row {
    tool: String,
    tool_key: &'static str,
    versus: &'static str,
    load: &'static str,
    unit: &'static str,
    without: Vec<f64>,
    with: Vec<f64>,
    with_stats: Vec<f64>,
    other_without: Vec<f64>,
    other_with: Vec<f64>,
    ns_per_switch: Vec<f64>,
    startup_ms: Vec<f64>,
    rss_kib: Vec<u64>,
    cpu_ticks: u64,
    cpu_sched_ns: u64,
    cpu_wall: f64,
    switches: u64,
    ctxt: u64,
    /// All programs' runs and run time, and the load's CPU ticks, over the statistics-on loads.
    bpf_runs: u64,
    bpf_ns: u64,
    load_ticks: u64,
    /// Per program: (runs, run-time ns) summed over the statistics-on loads.
    progs: BTreeMap<String, (u64, u64)>,
    switch_prog: String,
    foreign: BTreeSet<String>,
}

impl Row {
    fn new(tool: &Tool, load: &Load) -> Row {
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
fn step(
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
    row.switch_prog = run.switch_name.clone();
    row.foreign.extend(run.foreign.iter().cloned());

    let pids: Vec<u32> = run.procs.iter().map(Proc::pid).collect();
    let scan =
        |pids: &[u32]| -> Result<Vec<FdScan>> { pids.iter().map(|&p| scan_fds(p)).collect() };
    let ticks = |pids: &[u32]| -> Result<u64> { pids.iter().map(|&p| cpu_ticks(p)).sum() };
    let sched = |pids: &[u32]| -> u64 { pids.iter().map(|&p| sched_ns(p)).sum() };

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
    row.cpu_sched_ns += s_b - s_a;
    row.cpu_wall += (r1.wall + r2.wall).as_secs_f64();
    Ok(nsps)
}

/// What bpf_stats itself adds to every program run (two sched_clock() reads and the
/// counter update): the ns/run of an empty program (`r0 = 1; exit`, which bpftrace makes of
/// an empty sched_switch probe) under the load. Returns (ns per run, the program's size).
fn calibrate(
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

// ---------------------------------------------------------------------------------------
// The run.

struct Config {
    runs: usize,
    pipe_loops: u32,
    msg_groups: u32,
    msg_loops: u32,
}

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

    ensure_packages()?;
    let perf = binary("linux-perf", "perf")?;
    let bpftool = binary("bpftool", "bpftool")?;
    let cpudist = binary("libbpf-tools", "cpudist")?;
    let runqlat = binary("libbpf-tools", "runqlat")?;
    let bpftrace = binary("bpftrace", "bpftrace")?;
    let tracer = match args.tracer {
        Some(t) => std::path::absolute(t)?,
        None => crate::build(true)?.bin,
    };
    ensure!(tracer.is_file(), "no tracer binary at {}", tracer.display());
    interrupted()?;

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
    let tools = vec![
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
        tracer_tool("tracer-p", "tracer -p", &["-p", &target], "libbpf-p"),
        tracer_tool(
            "tracer-schedstat",
            "tracer --runq-from schedstat",
            &["--runq-from", "schedstat"],
            "libbpf",
        ),
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
        Tool {
            key: "bpftrace",
            label: "bpftrace cpudist+runqlat",
            procs: vec![("bpftrace".into(), vec![s(&bpftrace), s(&script)])],
            versus: "libbpf",
        },
    ];
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
    let stats_sysctl_after = read_stats_sysctl()?;
    ensure!(
        stats_sysctl_after == stats_sysctl_before,
        "kernel.bpf_stats_enabled is {stats_sysctl_after}, was {stats_sysctl_before}"
    );

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
    };
    report.print();
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&out, report.json().pretty())
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "\nxtask bench: wrote {} in {:.0} s",
        out.display(),
        report.elapsed.as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Summaries, table and JSON.

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

fn round(x: f64, digits: i32) -> f64 {
    let k = 10f64.powi(digits);
    (x * k).round() / k
}

fn spread(v: &[f64], digits: i32) -> Json {
    Json::obj(vec![
        ("median", Json::Num(round(median(v), digits))),
        ("min", Json::Num(round(min(v), digits))),
        ("max", Json::Num(round(max(v), digits))),
        (
            "samples",
            Json::Arr(v.iter().map(|&x| Json::Num(round(x, digits))).collect()),
        ),
    ])
}

struct Summary {
    ns: f64,
    /// Minus the bpf_stats overhead of each program run.
    net_ns: f64,
    net_x_libbpf: f64,
    /// The programs' net run time as % of the load's own CPU time: the throughput loss to
    /// expect from the programs alone, independent of the run-to-run noise.
    bpf_share_pct: f64,
    x_floor: f64,
    x_libbpf: f64,
    loss_pct: f64,
    cpu_pct: f64,
    cpu_pct_schedstat: f64,
    rss_mib: f64,
    startup_ms: f64,
}

struct Report<'a> {
    rows: Vec<Row>,
    tools: &'a [Tool],
    expects: &'a [Vec<Expect>],
    loads: &'a [Load],
    cfg: &'a Config,
    quick: bool,
    tracer: &'a Path,
    stats_method: &'static str,
    /// Per load: ns/run samples of the empty program, and its size in bytes.
    overhead: Vec<(&'static str, Vec<f64>, u64)>,
    niced: bool,
    stats_sysctl: String,
    load_before: String,
    load_after: String,
    elapsed: Duration,
}

impl Report<'_> {
    fn find(&self, load: &str, key: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.load == load && r.tool_key == key)
    }

    /// The bpf_stats overhead per program run under `load`, in ns.
    fn overhead(&self, load: &str) -> f64 {
        self.overhead
            .iter()
            .find(|o| o.0 == load)
            .map_or(0.0, |o| median(&o.1))
    }

    fn net_ns(&self, r: &Row) -> f64 {
        median(&r.ns_per_switch)
            - self.overhead(r.load) * r.bpf_runs as f64 / r.switches.max(1) as f64
    }

    fn summary(&self, r: &Row) -> Summary {
        let ns = median(&r.ns_per_switch);
        let net_ns = self.net_ns(r);
        let of = |key| {
            self.find(r.load, key)
                .map_or(f64::NAN, |o| ns / median(&o.ns_per_switch))
        };
        let net_of = |key| {
            self.find(r.load, key)
                .map_or(f64::NAN, |o| net_ns / self.net_ns(o))
        };
        let hz = clock_ticks();
        let stats_ns = self.overhead(r.load) * r.bpf_runs as f64;
        let load_ns = r.load_ticks as f64 / hz * 1e9;
        Summary {
            ns,
            net_ns,
            net_x_libbpf: net_of(r.versus),
            bpf_share_pct: (r.bpf_ns as f64 - stats_ns) / (load_ns - stats_ns) * 100.0,
            x_floor: of("floor"),
            x_libbpf: of(r.versus),
            loss_pct: (1.0 - median(&r.with) / median(&r.without)) * 100.0,
            cpu_pct: r.cpu_ticks as f64 / hz / r.cpu_wall * 100.0,
            cpu_pct_schedstat: r.cpu_sched_ns as f64 / 1e9 / r.cpu_wall * 100.0,
            rss_mib: r.rss_kib.iter().copied().max().unwrap_or(0) as f64 / 1024.0,
            startup_ms: median(&r.startup_ms),
        }
    }

    fn print(&self) {
        println!(
            "\nIn-kernel cost per sched_switch, throughput and footprint ({} run{}, medians; {})",
            self.cfg.runs,
            if self.cfg.runs == 1 { "" } else { "s" },
            if self.quick {
                "QUICK mode: not for quoting"
            } else {
                "full mode"
            }
        );
        let head = [
            "load",
            "tool",
            "ns/switch",
            "net",
            "x floor",
            "x cpudist+runqlat",
            "BPF % of load CPU",
            "tput loss %",
            "user CPU %",
            "(schedstat)",
            "RSS MiB",
            "start-up ms",
        ];
        let mut table = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
        for r in &self.rows {
            let s = self.summary(r);
            table.push(vec![
                r.load.to_string(),
                r.tool.clone(),
                format!("{:.1}", s.ns),
                format!("{:.1}", s.net_ns),
                format!("{:.2}", s.x_floor),
                format!("{:.2}", s.x_libbpf),
                format!("{:.1}", s.bpf_share_pct),
                format!("{:.1}", s.loss_pct),
                format!("{:.2}", s.cpu_pct),
                format!("{:.2}", s.cpu_pct_schedstat),
                format!("{:.1}", s.rss_mib),
                format!("{:.1}", s.startup_ms),
            ]);
        }
        print_table(&table);

        println!(
            "\nThroughput, median [min-max] over alternating runs (with = BPF statistics off)"
        );
        let mut table = vec![strings(&[
            "load",
            "tool",
            "without",
            "with",
            "with, stats on",
            "loss %",
            "other CPUs busy w/o | with",
        ])];
        for r in &self.rows {
            let f = |v: &[f64]| format!("{:.0} [{:.0}-{:.0}]", median(v), min(v), max(v));
            table.push(vec![
                r.load.to_string(),
                r.tool.clone(),
                f(&r.without),
                f(&r.with),
                f(&r.with_stats),
                format!("{:.1}", self.summary(r).loss_pct),
                format!(
                    "{:.2} | {:.2}",
                    median(&r.other_without),
                    median(&r.other_with)
                ),
            ]);
        }
        print_table(&table);

        println!("\nWhere the in-kernel time goes (sums over the statistics-on loads)");
        let mut table = vec![strings(&[
            "load",
            "tool",
            "program",
            "runs/switch",
            "ns/run",
            "ns/switch",
        ])];
        for r in &self.rows {
            for (name, &(runs, ns)) in &r.progs {
                table.push(vec![
                    r.load.to_string(),
                    r.tool.clone(),
                    name.clone(),
                    format!("{:.3}", runs as f64 / r.switches as f64),
                    if runs == 0 {
                        "-".into()
                    } else {
                        format!("{:.1}", ns as f64 / runs as f64)
                    },
                    format!("{:.1}", ns as f64 / r.switches as f64),
                ]);
            }
        }
        print_table(&table);

        println!();
        for (load, samples, xlated) in &self.overhead {
            println!(
                "bpf_stats overhead under {load}: an empty program ({xlated} bytes) measures {:.1} ns/run [{:.1}-{:.1}]; \"net\" subtracts it from every program run",
                median(samples),
                min(samples),
                max(samples)
            );
        }
        println!("\nWhat each program's code calls (static, from bpftool prog dump xlated; not run counts)");
        for (tool, expect) in self.tools.iter().zip(self.expects) {
            for c in expect.iter().flat_map(|e| &e.code) {
                let calls: Vec<String> = c.calls.iter().map(|(k, n)| format!("{n}x {k}")).collect();
                println!(
                    "  {:<24} {:<28} {:>5} insns: {}",
                    tool.label,
                    c.program,
                    c.insns,
                    calls.join(", ")
                );
            }
        }
        println!("\nTargets (tracer rows)");
        for t in self.targets() {
            println!("  {}", t.0);
        }
        println!(
            "\nmachine load average before/after: {} / {}",
            self.load_before, self.load_after
        );
        let foreign: BTreeSet<&String> = self.rows.iter().flat_map(|r| &r.foreign).collect();
        if !foreign.is_empty() {
            println!(
                "programs loaded by others during the runs (not counted): {}",
                foreign.into_iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }

    /// (text, JSON) of each target check on the tracer rows.
    fn targets(&self) -> Vec<(String, Json)> {
        let mut out = Vec::new();
        for r in self
            .rows
            .iter()
            .filter(|r| r.tool_key.starts_with("tracer"))
        {
            let s = self.summary(r);
            let checks: [(&str, f64, f64, &str); 8] = [
                ("ns/switch vs cpudist+runqlat", s.x_libbpf, 0.35, "x"),
                ("  net of bpf_stats overhead", s.net_x_libbpf, 0.35, "x"),
                ("ns/switch vs floor (aim)", s.x_floor, 3.0, "x"),
                ("throughput loss", s.loss_pct, 3.0, "%"),
                ("  BPF share of the load's CPU", s.bpf_share_pct, 3.0, "%"),
                ("user CPU", s.cpu_pct, 0.5, "% of one CPU"),
                ("peak RSS", s.rss_mib, 40.0, "MiB"),
                ("start-up", s.startup_ms, 100.0, "ms"),
            ];
            for (what, value, limit, unit) in checks {
                let met = value <= limit;
                out.push((
                    format!(
                        "{:<9} {:<10} {:<29} {:>8.2} {unit} (target <= {limit}): {}",
                        r.load,
                        r.tool,
                        what,
                        value,
                        if met { "met" } else { "MISSED" }
                    ),
                    Json::obj(vec![
                        ("load", Json::Str(r.load.into())),
                        ("tool", Json::Str(r.tool.clone())),
                        ("what", Json::Str(what.into())),
                        ("value", Json::Num(round(value, 3))),
                        ("limit", Json::Num(limit)),
                        ("unit", Json::Str(unit.into())),
                        ("met", Json::Bool(met)),
                    ]),
                ));
            }
        }
        out
    }

    fn json(&self) -> Json {
        let root = crate::workspace_root().to_string_lossy().to_string();
        let rows = self
            .rows
            .iter()
            .map(|r| {
                let s = self.summary(r);
                let progs = r
                    .progs
                    .iter()
                    .map(|(name, &(runs, ns))| {
                        Json::obj(vec![
                            ("program", Json::Str(name.clone())),
                            ("runs", Json::Num(runs as f64)),
                            ("run_time_ns", Json::Num(ns as f64)),
                            (
                                "ns_per_run",
                                Json::Num(round(ns as f64 / runs.max(1) as f64, 2)),
                            ),
                            (
                                "runs_per_switch",
                                Json::Num(round(runs as f64 / r.switches as f64, 4)),
                            ),
                            (
                                "ns_per_switch",
                                Json::Num(round(ns as f64 / r.switches as f64, 2)),
                            ),
                        ])
                    })
                    .collect();
                Json::obj(vec![
                    ("load", Json::Str(r.load.into())),
                    ("tool", Json::Str(r.tool.clone())),
                    ("tool_key", Json::Str(r.tool_key.into())),
                    ("ns_per_switch", spread(&r.ns_per_switch, 2)),
                    ("net_ns_per_switch", Json::Num(round(s.net_ns, 2))),
                    ("net_x_cpudist_runqlat", Json::Num(round(s.net_x_libbpf, 3))),
                    (
                        "bpf_share_of_load_cpu_pct",
                        Json::Num(round(s.bpf_share_pct, 2)),
                    ),
                    ("x_floor", Json::Num(round(s.x_floor, 3))),
                    ("x_cpudist_runqlat", Json::Num(round(s.x_libbpf, 3))),
                    ("compared_with", Json::Str(r.versus.into())),
                    ("switch_program", Json::Str(r.switch_prog.clone())),
                    ("switches_counted", Json::Num(r.switches as f64)),
                    (
                        "switches_per_proc_stat_ctxt",
                        Json::Num(round(r.switches as f64 / r.ctxt.max(1) as f64, 4)),
                    ),
                    ("programs", Json::Arr(progs)),
                    (
                        "throughput",
                        Json::obj(vec![
                            ("unit", Json::Str(r.unit.into())),
                            ("without", spread(&r.without, 0)),
                            ("with", spread(&r.with, 0)),
                            ("with_bpf_stats", spread(&r.with_stats, 0)),
                            ("loss_pct", Json::Num(round(s.loss_pct, 2))),
                            ("other_cpus_busy_without", spread(&r.other_without, 3)),
                            ("other_cpus_busy_with", spread(&r.other_with, 3)),
                        ]),
                    ),
                    ("user_cpu_pct", Json::Num(round(s.cpu_pct, 3))),
                    (
                        "user_cpu_pct_schedstat",
                        Json::Num(round(s.cpu_pct_schedstat, 3)),
                    ),
                    ("cpu_measured_over_s", Json::Num(round(r.cpu_wall, 3))),
                    ("peak_rss_mib", Json::Num(round(s.rss_mib, 2))),
                    (
                        "rss_kib_samples",
                        Json::Arr(r.rss_kib.iter().map(|&k| Json::Num(k as f64)).collect()),
                    ),
                    ("startup_ms", spread(&r.startup_ms, 2)),
                    (
                        "foreign_programs_ignored",
                        Json::Arr(r.foreign.iter().map(|f| Json::Str(f.clone())).collect()),
                    ),
                ])
            })
            .collect();
        let tools = self
            .tools
            .iter()
            .zip(self.expects)
            .map(|(t, e)| {
                Json::obj(vec![
                    ("key", Json::Str(t.key.into())),
                    ("label", Json::Str(t.label.into())),
                    (
                        "commands",
                        Json::Arr(
                            t.procs
                                .iter()
                                .map(|(_, argv)| Json::Str(argv.join(" ")))
                                .collect(),
                        ),
                    ),
                    (
                        "programs",
                        Json::Arr(
                            e.iter()
                                .flat_map(|x| &x.code)
                                .map(|c| {
                                    Json::obj(vec![
                                        ("program", Json::Str(c.program.clone())),
                                        ("xlated_insns", Json::Num(c.insns as f64)),
                                        (
                                            "calls",
                                            Json::Obj(
                                                c.calls
                                                    .iter()
                                                    .map(|(k, n)| (k.clone(), Json::Num(*n as f64)))
                                                    .collect(),
                                            ),
                                        ),
                                    ])
                                })
                                .collect(),
                        ),
                    ),
                ])
            })
            .collect();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
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
        Json::obj(vec![
            ("schema", Json::Str("tracer-bench/1".into())),
            ("unix_time", Json::Num(now as f64)),
            ("mode", Json::Str(if self.quick { "quick" } else { "full" }.into())),
            ("runs_per_tool_and_load", Json::Num(self.cfg.runs as f64)),
            ("nice", Json::Num(if self.niced { -20.0 } else { 0.0 })),
            ("elapsed_s", Json::Num(round(self.elapsed.as_secs_f64(), 1))),
            (
                "machine",
                Json::obj(vec![
                    (
                        "kernel",
                        Json::Str(fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().into()),
                    ),
                    (
                        "cpus",
                        Json::Num(std::thread::available_parallelism().map_or(0, |n| n.get()) as f64),
                    ),
                    ("cpu_model", Json::Str(cpu_model)),
                    ("loadavg_before", Json::Str(self.load_before.clone())),
                    ("loadavg_after", Json::Str(self.load_after.clone())),
                ]),
            ),
            (
                "versions",
                Json::obj(vec![
                    ("tracer", Json::Str(first_line(&[&self.tracer.to_string_lossy(), "--version"]))),
                    ("tracer_binary", Json::Str(self.tracer.to_string_lossy().into())),
                    ("tree_head", Json::Str(first_line(&["git", "-C", &root, "rev-parse", "HEAD"]))),
                    (
                        "tracer_sources_modified",
                        Json::Str(
                            command_output(&[
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
                        ),
                    ),
                    ("bpftrace", Json::Str(first_line(&["bpftrace", "--version"]))),
                    (
                        "libbpf_tools",
                        Json::Str(first_line(&["dpkg-query", "-W", "-f=${Version}", "libbpf-tools"])),
                    ),
                    ("perf", Json::Str(first_line(&["perf", "version"]))),
                    ("bpftool", Json::Str(first_line(&["bpftool", "version"]))),
                ]),
            ),
            (
                "bpf_stats",
                Json::obj(vec![
                    ("method", Json::Str(self.stats_method.into())),
                    (
                        "overhead_ns_per_run",
                        Json::Arr(
                            self.overhead
                                .iter()
                                .map(|(load, samples, xlated)| {
                                    Json::obj(vec![
                                        ("load", Json::Str(load.to_string())),
                                        ("empty_program_bytes", Json::Num(*xlated as f64)),
                                        ("ns_per_run", spread(samples, 2)),
                                    ])
                                })
                                .collect(),
                        ),
                    ),
                    ("sysctl_before_and_after", Json::Str(self.stats_sysctl.clone())),
                ]),
            ),
            (
                "loads",
                Json::Arr(
                    self.loads
                        .iter()
                        .map(|l| {
                            Json::obj(vec![
                                ("key", Json::Str(l.key.into())),
                                ("command", Json::Str(l.argv.join(" "))),
                                ("unit", Json::Str(l.unit.into())),
                            ])
                        })
                        .collect(),
                ),
            ),
            ("tools", Json::Arr(tools)),
            ("bpftrace_script", Json::Str(BPFTRACE_SCRIPT.into())),
            (
                "method",
                Json::obj(vec![
                    ("sequence", Json::Str("per load: a without run, then rounds; each round runs the empty-program calibration once and then every tool in turn: start tool; load with BPF stats on; load with stats off; stop tool; a without run. A tool's without samples are the runs just before and just after each of its steps".into())),
                    ("ns_per_switch", Json::Str("programs = ids new in `bpftool prog show --json` across the tool's start that its processes hold as fds; sum of their run_time_ns deltas over the stats-on load / run_cnt delta of the tool's sched_switch program (cpudist's for cpudist+runqlat, the first sched_switch probe for bpftrace); median of runs. run_time_ns covers the program body only, not the attach mechanism (trampoline, or for bpftrace's classic tracepoints the perf trace-buffer fill)".into())),
                    ("throughput", Json::Str("perf's own figure: pipe ops/sec, messaging messages/s = groups*20*20*loops / total time; loss = 1 - median(with, stats off) / median(without)".into())),
                    ("user_cpu", Json::Str("utime+stime of the tool's processes (/proc/PID/stat, clock ticks) over both loads of each run / their wall time; user_cpu_pct_schedstat: same from /proc/PID/task/*/schedstat ns".into())),
                    ("rss", Json::Str("VmHWM (/proc/PID/status) just before stopping, summed over the tool's processes; max over runs".into())),
                    ("startup", Json::Str("spawn (fork+exec) to: every process holds as many bpf_link fds (perf_event fds for bpftrace) and programs as in an untimed warm-up start, and its sched_switch program has run_cnt > 0 in /proc/PID/fdinfo; polled every 0.5 ms with BPF stats on".into())),
                    ("net", Json::Str("bpf_stats brackets every program run with two sched_clock() reads; an empty program (r0 = 1; exit, bpftrace's code for an empty sched_switch probe) measured the same way gives that overhead per run, and net_ns_per_switch = ns_per_switch - overhead * (all the tool's program runs / switches)".into())),
                    ("bpf_share_of_load_cpu", Json::Str("(sum of the tool's run_time_ns - overhead * runs) / (the load's own CPU time in the stats-on run - the same): the throughput loss the programs alone explain, not disturbed by other work on the machine".into())),
                    ("other_cpus_busy", Json::Str("per load run: busy ticks of /proc/stat (user+nice+system+irq+softirq+steal) minus the load's own CPU time (cutime+cstime of xtask once reaped), per second: what the tool, the -p target, xtask and everything else on the machine used meanwhile".into())),
                    ("priority", Json::Str("xtask sets itself to nice -20 so the loads and tools it starts (inheriting it) are shielded from other work on the machine".into())),
                    ("minus_p_target", Json::Str("a perl loop sleeping 1 ms (about 1000 switches/s), running for the whole bench, unrelated to the loads".into())),
                ]),
            ),
            ("results", Json::Arr(rows)),
            ("targets", Json::Arr(self.targets().into_iter().map(|t| t.1).collect())),
        ])
    }
}

fn print_table(rows: &[Vec<String>]) {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let width: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (i, r) in rows.iter().enumerate() {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                if c < 2 {
                    format!("{s:<w$}", w = width[c])
                } else {
                    format!("{s:>w$}", w = width[c])
                }
            })
            .collect();
        println!("  {}", line.join("  ").trim_end());
        if i == 0 {
            println!(
                "  {}",
                width
                    .iter()
                    .map(|&w| "-".repeat(w))
                    .collect::<Vec<_>>()
                    .join("  ")
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// A small JSON value: written for the results, parsed for bpftool.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn switch_program_names() {
        for n in [
            "sched_switch_btf",
            "floor_switch",
            "sched_switch",
            "handle_sched_sw",
        ] {
            assert!(is_switch_prog(n), "{n}");
        }
        assert!(!is_switch_prog("sched_wakeup_btf"));
    }
}
