//! Command line: argument definitions, the small parsers they use, and dispatch.
use std::{path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::{error::TracerError, root::Root};

#[derive(Parser, Debug)]
#[command(
    name = "tracer",
    version,
    about = "Per-thread scheduling tracer: on-CPU time, run-queue latency and off-CPU histograms computed in the kernel"
)]
pub struct Cli {
    /// Treat DIR as `/` for every procfs, sysfs and debugfs path (fixtures, copied trees).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Trace threads and report their scheduling (needs CAP_BPF and CAP_PERFMON, or root).
    Run(RunArgs),
    /// Record every switch and wakeup into a Perfetto trace (ui.perfetto.dev), then report as `run`.
    Record(crate::cmd_record::RecordArgs),
    /// Print each run-queue wait (or --off-cpu blocked period) above --min as it ends.
    Slow(crate::cmd_slow::SlowArgs),
    /// pseries hypervisor dispatch statistics and Dispatch Trace Log.
    Dtl(DtlArgs),
    /// Check what this machine offers: BTF, tracefs, probe modes, perf events, DTL.
    Check(CheckArgs),
    /// Benchmark floor: attach an empty sched_switch program (for `cargo xtask bench`).
    #[command(hide = true)]
    Floor {
        /// How long to stay attached.
        #[arg(short = 'd', long, value_parser = parse_duration, default_value = "10s")]
        duration: Duration,
    },
}

/// How the programs attach to the scheduler.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeMode {
    /// The best mode that loads and attaches here.
    Auto,
    /// BTF-typed tracepoints (tp_btf): cheapest, needs kernel BTF.
    TpBtf,
    /// Raw tracepoints: no BTF needed for attaching.
    RawTp,
    /// Classic tracepoints, fields at offsets from tracefs format files.
    Tracepoint,
    /// perf's own context-switch hooks (perf_event_task_sched_in/out) via fentry or kprobe.
    PerfSched,
}

impl ProbeMode {
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Auto => "auto",
            ProbeMode::TpBtf => "tp-btf",
            ProbeMode::RawTp => "raw-tp",
            ProbeMode::Tracepoint => "tracepoint",
            ProbeMode::PerfSched => "perf-sched",
        }
    }
}

/// Where run-queue waits come from.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunqFrom {
    /// Wakeup (or preemption) to switch-in, timed by the tracer, as runqlat and `perf
    /// sched latency` do: includes the wakeup-preemption latency.
    Wakeup,
    /// The scheduler's own `sched_info.run_delay` (schedstat's second field): no wakeup
    /// programs, the cheapest; it leaves out the time between a wakeup that preempts and
    /// the switch, when the kernel skips its clock update (BTF modes only).
    Schedstat,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Trace this process and its threads (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace this thread only (repeatable).
    #[arg(short = 't', long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// Trace only tasks in this cgroup v2 directory (e.g. /sys/fs/cgroup/system.slice).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Stop after this long (e.g. 5s, 250ms, 2m); default: until Ctrl-C or COMMAND exits.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Print a report of the interval's deltas every DURATION (at least 10ms), then the totals.
    #[arg(short = 'i', long, value_name = "DURATION", value_parser = parse_interval)]
    pub interval: Option<Duration>,
    /// Stop after N intervals (N >= 1).
    #[arg(long, value_name = "N", requires = "interval", value_parser = parse_count)]
    pub count: Option<u64>,
    /// One JSON document (JSON Lines in interval mode).
    #[arg(long)]
    pub json: bool,
    /// Threads listed: the first N in --sort order (text default 20; 0: all). JSON lists
    /// every thread unless --top is given.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Order of the thread list, largest first.
    #[arg(long, value_enum, default_value_t = crate::report::SortKey::OnCpu)]
    pub sort: crate::report::SortKey,
    /// Histograms per process.
    #[arg(short = 'P', long = "per-process", conflicts_with = "per_thread_hist")]
    pub per_process: bool,
    /// Histograms per thread.
    #[arg(short = 'L', long = "per-thread-hist")]
    pub per_thread_hist: bool,
    /// Histogram rows in milliseconds instead of microseconds.
    #[arg(short = 'm', long)]
    pub millis: bool,
    /// perf events to count beside the trace (perf syntax: task-clock,cycles:u,r1a8).
    #[arg(
        short = 'e',
        long = "event",
        value_name = "LIST",
        value_delimiter = ','
    )]
    pub events: Vec<String>,
    /// Count the events per thread and join them into the thread table.
    #[arg(long)]
    pub per_thread: bool,
    /// Events read in the kernel at every switch for per-thread, per-slice deltas (at most 2).
    #[arg(long = "slice-event", value_name = "EVENT", value_delimiter = ',')]
    pub slice_events: Vec<String>,
    /// Attach mode.
    #[arg(long, value_enum, default_value_t = ProbeMode::Auto)]
    pub probe: ProbeMode,
    /// Where run-queue waits come from.
    #[arg(long, value_enum, default_value_t = RunqFrom::Wakeup)]
    pub runq_from: RunqFrom,
    /// Capacity of the per-thread maps (the traced set; outside tp-btf mode the
    /// accumulators too).
    #[arg(long, value_name = "N", default_value_t = 65536, value_parser = parse_max_threads)]
    pub max_threads: u32,
    /// Run COMMAND as root even when started through sudo.
    #[arg(long)]
    pub as_root: bool,
    /// Command to start and trace with everything it spawns.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
    /// What `tracer record` / `tracer slow` add to the session (nothing for `run`).
    #[arg(skip)]
    pub hook: crate::record::Hook,
}

#[derive(Args, Debug, Clone)]
pub struct DtlArgs {
    /// Sample for this long (0: one snapshot); default until Ctrl-C.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Set vcpudispatch_stats_freq (1..HZ) for the run; restored afterwards.
    #[arg(long, value_name = "N")]
    pub dtl_freq: Option<u32>,
    /// Set debugfs dtl_event_mask (0x1 cede, 0x2 preempt, 0x4 faults); restored afterwards.
    #[arg(long, value_name = "MASK", value_parser = parse_u32_any_base)]
    pub dtl_mask: Option<u32>,
    /// Read the raw Dispatch Trace Log (debugfs) instead of only vcpudispatch_stats.
    #[arg(long)]
    pub raw: bool,
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Parses a duration: `5s`, `250ms`, `1.5s`, `2m`, `1h`, `100us`, `10ns`; a bare number
/// is seconds. Rejects negative, non-finite and absurd (over a year) values.
pub fn parse_duration(s: &str) -> Result<Duration, TracerError> {
    let bad = |why: &str| TracerError::BadDuration {
        input: s.to_string(),
        why: why.to_string(),
    };
    let t = s.trim();
    if t.is_empty() {
        return Err(bad("empty"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(bad("expected a number first, e.g. 5s"));
    }
    let v: f64 = num.parse().map_err(|_| bad("not a number"))?;
    let scale_ns: f64 = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1e9,
        "ms" => 1e6,
        "us" | "µs" => 1e3,
        "ns" => 1.0,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        _ => return Err(bad("unknown unit (use ns, us, ms, s, m or h)")),
    };
    let ns = v * scale_ns;
    if !ns.is_finite() || ns > 366.0 * 86400e9 {
        return Err(bad("too long"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// Shortest `-i`: each report reads every map, and perf stat -I has the same floor.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// `-i`: a duration of at least [`MIN_INTERVAL`] (0 would be a busy loop; tokio refuses it).
pub fn parse_interval(s: &str) -> Result<Duration, TracerError> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(TracerError::BadOption(format!(
            "the interval must be at least {}ms",
            MIN_INTERVAL.as_millis()
        )));
    }
    Ok(d)
}

/// `--count`: a positive whole number.
pub fn parse_count(s: &str) -> Result<u64, TracerError> {
    let bad = |why: &str| TracerError::BadOption(why.to_string());
    match s.trim().parse::<u64>() {
        Ok(0) => Err(bad("at least 1 interval")),
        Ok(n) => Ok(n),
        Err(_) => Err(bad("expected a whole number of intervals, e.g. 5")),
    }
}

/// Largest `--max-threads`: the kernel's PID_MAX_LIMIT, more threads than can exist.
pub const MAX_THREADS_LIMIT: u32 = 4 * 1024 * 1024;

/// `--max-threads`: 1 ..= [`MAX_THREADS_LIMIT`].
pub fn parse_max_threads(s: &str) -> Result<u32, TracerError> {
    let bad = TracerError::BadOption;
    let range = || format!("expected a whole number from 1 to {MAX_THREADS_LIMIT}");
    match s.trim().parse::<u64>() {
        Ok(0) => Err(bad(format!(
            "the maps need room for at least 1 thread; {}",
            range()
        ))),
        Ok(n) if n > MAX_THREADS_LIMIT as u64 => Err(bad(format!(
            "more threads than Linux can have (PID_MAX_LIMIT {MAX_THREADS_LIMIT}); {}",
            range()
        ))),
        Ok(n) => Ok(n as u32),
        Err(_) => Err(bad(range())),
    }
}

/// Writes one report and a newline to standard output and flushes it. A reader that went
/// away is [`TracerError::OutputClosed`] (the run then ends quietly, as `yes | head -1`
/// does); any other failure (a full disk, /dev/full) is [`TracerError::Output`]. Never
/// println!, which panics on both.
pub fn emit(text: &str) -> Result<(), TracerError> {
    emit_raw(&format!("{text}\n"))
}

/// [`emit`] without the newline.
pub fn emit_raw(text: &str) -> Result<(), TracerError> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => TracerError::OutputClosed,
            _ => TracerError::Output(e),
        })
}

/// Whether standard output is a pipe whose reader has gone (`tracer run | true`): the
/// run can end then rather than at its next report.
pub fn stdout_closed() -> bool {
    // SAFETY: fstat and poll on fd 1 with valid out pointers; a zero timeout.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(1, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return false;
        }
        let mut p = libc::pollfd {
            fd: 1,
            events: 0,
            revents: 0,
        };
        libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLERR != 0
    }
}

/// Exit code when standard output was closed by its reader: 128+SIGPIPE, what a shell
/// reports for a tool SIGPIPE ended (`yes | head -1` under `set -o pipefail`).
pub const EXIT_OUTPUT_CLOSED: i32 = 128 + libc::SIGPIPE;

/// Parses `0x10`, `0o17`, `0b101` or decimal.
pub fn parse_u32_any_base(s: &str) -> Result<u32, TracerError> {
    let t = s.trim();
    let r = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(h, 16)
    } else if let Some(o) = t.strip_prefix("0o") {
        u32::from_str_radix(o, 8)
    } else if let Some(b) = t.strip_prefix("0b") {
        u32::from_str_radix(b, 2)
    } else {
        t.parse()
    };
    r.map_err(|_| TracerError::BadNumber(s.to_string()))
}

/// Parses the command line, runs it and returns the exit code. Errors are printed with
/// their context chain; never a panic for bad input.
pub fn main() -> i32 {
    crate::launch::note_inherited_state();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    let cli = Cli::parse();
    let root = cli.root.clone().map(Root::new).unwrap_or_default();
    let result = match cli.command {
        Command::Run(args) => crate::run::run(args, root),
        Command::Record(args) => crate::cmd_record::run(args, root),
        Command::Slow(args) => crate::cmd_slow::run(args, root),
        Command::Dtl(args) => crate::dtl::run(&args, &root),
        Command::Check(args) => crate::check::run(&args, &root),
        Command::Floor { duration } => crate::loader::run_floor(duration),
    };
    match result {
        Ok(code) => code,
        Err(e) if crate::error::is_output_closed(&e) => EXIT_OUTPUT_CLOSED,
        Err(e) => {
            use std::io::Write as _;
            // Not eprintln!: a closed stderr must not turn an error into a panic.
            let _ = writeln!(
                std::io::stderr().lock(),
                "tracer: error: {}",
                crate::error::one_line(&e)
            );
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "s", "-1s", "5x", "1..2s", "1e9999", "99999999h", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn numeric_options_are_validated() {
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("1ms").is_err());
        assert_eq!(parse_interval("10ms").unwrap(), MIN_INTERVAL);
        assert!(parse_count("0").is_err());
        assert!(parse_count("-1").is_err());
        assert_eq!(parse_count("3").unwrap(), 3);
        assert!(parse_max_threads("0").is_err());
        assert!(parse_max_threads("4294967296").is_err());
        assert!(parse_max_threads("4194305").is_err());
        assert_eq!(parse_max_threads("4194304").unwrap(), MAX_THREADS_LIMIT);
        let e = parse_max_threads("0").unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        // Through clap, as a user types them.
        for bad in [
            &["tracer", "run", "-i", "0s", "--count", "1"][..],
            &["tracer", "run", "-i", "1s", "--count", "0"],
            &["tracer", "run", "--max-threads", "0"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        assert!(Cli::try_parse_from(["tracer", "run", "-d", "0"]).is_ok());
    }

    #[test]
    fn numbers_in_any_base() {
        assert_eq!(parse_u32_any_base("0x7").unwrap(), 7);
        assert_eq!(parse_u32_any_base("12").unwrap(), 12);
        assert_eq!(parse_u32_any_base("0b11").unwrap(), 3);
        assert!(parse_u32_any_base("0xzz").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
