//! Command line: argument definitions, the small parsers they use, and dispatch.
use std::{path::PathBuf, time::Duration};

use clap::{builder::PossibleValue, Args, Parser, Subcommand, ValueEnum};

use crate::{
    model::options::{ProbeMode, RunqFrom, SortKey},
    output::stdout::EXIT_OUTPUT_CLOSED,
    sys::parse::{
        parse_count, parse_duration, parse_interval, parse_max_threads, parse_top,
        parse_u32_any_base, parse_window, DURATION_HELP,
    },
    sys::root::Root,
};

/// `--version`: what a bug report needs to name the build, on one line as rustc's
/// (values from build.rs; the hash is the first 12 hex digits of the SHA-256 of the eBPF
/// objects one after the other).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TRACER_GIT_COMMIT"),
    ", bpf object sha256:",
    env!("TRACER_BPF_SHA256"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "tracer",
    version,
    long_version = LONG_VERSION,
    about = "Per-thread scheduling tracer: on-CPU time, run-queue latency and off-CPU histograms computed in the kernel"
)]
pub struct Cli {
    /// Treat DIR as `/` for every procfs, sysfs and debugfs path (fixtures, copied trees).
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Print each start-up stage (BTF, object, each program's verification with its
    /// instruction count, attach) with its wall and CPU time, and each read of the
    /// kernel's entries taken again because it missed a live thread, to stderr.
    #[arg(short, long, global = true)]
    pub verbose: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Trace threads and report their scheduling (needs CAP_BPF and CAP_PERFMON, or root).
    Run(RunArgs),
    /// Record every switch and wakeup into a Perfetto trace (ui.perfetto.dev), then report as `run`.
    Record(record::RecordArgs),
    /// Print each run-queue wait (or --off-cpu blocked period) above --min as it ends.
    Slow(record::SlowArgs),
    /// Live terminal view: per-process/thread rows, histograms, a run-queue latency heatmap.
    Top(TopArgs),
    /// pseries hypervisor dispatch statistics and Dispatch Trace Log.
    Dtl(DtlArgs),
    /// Check what this machine offers: BTF, tracefs, probe modes, perf events, DTL.
    Check(CheckArgs),
    /// Off-CPU stacks: where threads blocked or were preempted, and for how long.
    Offcpu(offcpu::OffcpuArgs),
    /// Compare two `tracer run --json` reports by process and thread name, largest change first.
    Diff(DiffArgs),
    /// Export scheduling metrics for Prometheus, continuously (on /metrics: Prometheus text format, OpenMetrics when the scraper asks for it).
    Serve(ServeArgs),
    /// Benchmark floor: attach an empty sched_switch program (for `cargo xtask bench`).
    #[command(hide = true)]
    Floor {
        /// How long to stay attached.
        #[arg(short = 'd', long, value_parser = parse_duration, default_value = "10s")]
        duration: Duration,
    },
    /// Man pages and shell completions from these definitions (for `cargo xtask install`).
    #[command(name = "__generate", hide = true)]
    Generate {
        #[command(subcommand)]
        what: crate::cli::generate::What,
    },
}

/// The option words of the model's enums, with the help clap shows for each (the model
/// itself knows no clap).
impl ValueEnum for ProbeMode {
    fn value_variants<'a>() -> &'a [Self] {
        &ProbeMode::ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            ProbeMode::Auto => "The best mode that loads and attaches here",
            ProbeMode::TpBtf => "BTF-typed tracepoints (tp_btf): cheapest, needs kernel BTF",
            ProbeMode::RawTp => "Raw tracepoints: no BTF needed for attaching",
            ProbeMode::Tracepoint => "Classic tracepoints, fields at offsets from tracefs format files",
            ProbeMode::PerfSched => {
                "perf's own context-switch hooks (perf_event_task_sched_in/out) via fentry or kprobe"
            }
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

impl ValueEnum for RunqFrom {
    fn value_variants<'a>() -> &'a [Self] {
        &RunqFrom::ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            RunqFrom::Wakeup => {
                "Wakeup (or preemption) to switch-in, timed by the tracer, as runqlat and `perf sched latency` do: includes the wakeup-preemption latency"
            }
            RunqFrom::Schedstat => {
                "The scheduler's own `sched_info.run_delay` (schedstat's second field): no wakeup programs, the cheapest; it leaves out the time between a wakeup that preempts and the switch, when the kernel skips its clock update, and from Linux 6.12 (delayed dequeue) counts as waiting the sleep of a thread the load balancer moved while it slept (BTF modes only)"
            }
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

impl ValueEnum for SortKey {
    fn value_variants<'a>() -> &'a [Self] {
        &SortKey::ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            SortKey::OnCpu => "On-CPU time",
            SortKey::Runq => "Run-queue wait",
            SortKey::OffCpu => "Off-CPU time",
            SortKey::Slices => "Number of on-CPU slices",
            SortKey::Migrations => "CPU migrations",
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

/// What to trace, shared by every tracing command: processes, threads, a cgroup, or a
/// command started here (none of them: the whole machine).
#[derive(Args, Debug, Clone)]
pub struct TargetArgs {
    /// Trace this process and its threads (repeatable).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Trace this thread only (repeatable).
    #[arg(short = 't', long = "tid", value_name = "TID")]
    pub tids: Vec<u32>,
    /// Trace only tasks in this cgroup v2 directory and the cgroups below it
    /// (e.g. /sys/fs/cgroup/system.slice); not with -p/-t (a thread is in one cgroup:
    /// say which you mean).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pids", "tids"])]
    pub cgroup: Option<PathBuf>,
    /// Trace this Kubernetes pod (its UID, or its name or NAMESPACE/NAME as the kubelet's
    /// /var/log/pods says): its cgroup and everything below, as --cgroup.
    #[arg(long, value_name = "UID|NAME", conflicts_with_all = ["pids", "tids", "cgroup", "container"])]
    pub pod: Option<String>,
    /// Trace this container (its id or a prefix of 4+ hex digits, as docker ps and crictl
    /// ps show it, or its name under the kubelet's /var/log/containers), as --cgroup.
    #[arg(long, value_name = "ID|NAME", conflicts_with_all = ["pids", "tids", "cgroup"])]
    pub container: Option<String>,
    /// With --cgroup: only tasks directly in PATH, not in the cgroups below it (perf's
    /// cgroup counters, -e, always count the cgroups below too).
    #[arg(long)]
    pub cgroup_node_only: bool,
    /// Run COMMAND as root even when started through sudo.
    #[arg(long)]
    pub as_root: bool,
    /// Command to start and trace with everything it spawns.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// The numbers in the order given, each once (`-p 7 -p 7` names PID 7 once).
fn once_each(v: Vec<u32>) -> Vec<u32> {
    let mut seen = std::collections::HashSet::new();
    v.into_iter().filter(|x| seen.insert(*x)).collect()
}

impl From<TargetArgs> for crate::model::targets::Targets {
    fn from(a: TargetArgs) -> Self {
        Self {
            pids: once_each(a.pids),
            tids: once_each(a.tids),
            cgroup: a.cgroup,
            cgroup_node_only: a.cgroup_node_only,
            workload: match (a.pod, a.container) {
                (Some(p), _) => Some(crate::model::workload::WorkloadQuery::Pod(p)),
                (None, Some(c)) => Some(crate::model::workload::WorkloadQuery::Container(c)),
                (None, None) => None,
            },
            workload_labels: Vec::new(),
            as_root: a.as_root,
            command: a.command,
        }
    }
}

/// How the programs attach and size their maps, shared by run, top and serve.
#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
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
}

#[derive(Args, Debug, Clone)]
#[command(after_help = DURATION_HELP)]
pub struct RunArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Stop after this long (e.g. 5s, 250ms, 2m; above 0); default: until Ctrl-C or
    /// COMMAND exits.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_window, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Print a report of the interval's deltas every DURATION (at least 10ms), then the totals.
    #[arg(short = 'i', long, value_name = "DURATION", value_parser = parse_interval, allow_hyphen_values = true)]
    pub interval: Option<Duration>,
    /// Stop after N intervals (N >= 1).
    #[arg(long, value_name = "N", requires = "interval", value_parser = parse_count)]
    pub count: Option<u64>,
    /// One JSON document (JSON Lines in interval mode).
    #[arg(long)]
    pub json: bool,
    /// Threads listed: the first N in --sort order (text default 20; 0: all). JSON lists
    /// every thread unless --top is given.
    #[arg(long, value_name = "N", value_parser = parse_top, allow_negative_numbers = true)]
    pub top: Option<usize>,
    /// Order of the thread list, largest first.
    #[arg(long, value_enum, default_value_t = SortKey::OnCpu)]
    pub sort: SortKey,
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
    /// With -p or -t each thread is counted, one descriptor per event per thread: out
    /// of descriptors, the soft `ulimit -n` is raised to the hard one (as perf does),
    /// and the default set is left out with a notice rather than fail the run.
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
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Write run-queue, on-CPU and off-CPU latency heatmaps of the intervals (x: time,
    /// y: latency, colour: count) to FILE as SVG when the run ends (needs -i).
    #[arg(long, value_name = "FILE", requires = "interval")]
    pub heatmap: Option<PathBuf>,
    /// Sample each CPU's run-queue length at 99 Hz: tasks waiting for the CPU (not the
    /// running one), as a histogram and a mean per CPU.
    #[arg(long)]
    pub runqlen: bool,
    /// Time hardirqs and softirqs on each CPU, by softirq vector, and by the thread they
    /// interrupted (each thread's irq_ns and softirq_ns).
    #[arg(long)]
    pub irq: bool,
}

#[derive(Args, Debug, Clone)]
#[command(after_help = DURATION_HELP)]
pub struct TopArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Refresh every DURATION (at least 10ms).
    #[arg(short = 'i', long, value_name = "DURATION", value_parser = parse_interval, default_value = "1s", allow_hyphen_values = true)]
    pub interval: Duration,
    /// Stop after this long (above 0); default: until q, Ctrl-C or COMMAND exits.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_window, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Sample each CPU's run-queue length at 99 Hz: its mean number of tasks waiting
    /// beside the CPU's bar (rq).
    #[arg(long)]
    pub runqlen: bool,
}

impl From<TopArgs> for crate::cmd::top::TopConfig {
    fn from(a: TopArgs) -> Self {
        Self {
            targets: a.target.into(),
            interval: a.interval,
            duration: a.duration,
            probe: a.probe.probe,
            runq_from: a.probe.runq_from,
            max_threads: a.probe.max_threads,
            runqlen: a.runqlen,
        }
    }
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address and port to serve /metrics on. Loopback by default; another address needs
    /// --web.config.file with TLS and users, or --insecure-listen.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = std::net::SocketAddr::from(([127, 0, 0, 1], crate::cmd::serve::DEFAULT_PORT)))]
    pub listen: std::net::SocketAddr,
    /// Serve a non-loopback --listen address without TLS and authentication.
    #[arg(long)]
    pub insecure_listen: bool,
    /// TLS and basic-auth users, as Prometheus exporters read them (tls_server_config,
    /// basic_auth_users with bcrypt hashes).
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Cgroup series at this depth of the cgroup v2 path (2: /system.slice/x.service).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub cgroup_depth: usize,
    /// Most process series; processes beyond it are summed as pid="other".
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = parse_max_series)]
    pub max_series: usize,
    /// Most cgroup series; cgroups beyond it are summed as cgroup="other" (each costs
    /// about as much memory and scrape time as a process series).
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = parse_max_series)]
    pub max_cgroups: usize,
    /// A process series without activity for this long goes away.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub expiry: Duration,
    /// Classic histogram bucket bounds (e.g. 10us,100us,1ms,10ms,100ms,1s); default:
    /// powers of two of nanoseconds from 1.024us to 17.2s, edges of the kernel's buckets.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_duration)]
    pub buckets: Vec<Duration>,
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// pseries: also serve the Dispatch Trace Log's dispatch latency per vCPU (turns the
    /// hypervisor's logging on while serving; `tracer dtl` cannot read it meanwhile).
    #[arg(long)]
    pub dtl: bool,
    /// Also serve each CPU's run-queue length, sampled at 99 Hz, as a histogram of the
    /// tasks waiting (tracer_runqueue_length; `_sum / _count` is the mean).
    #[arg(long)]
    pub runqlen: bool,
    /// Only cgroups whose series path matches this glob get series of their own
    /// (repeatable; `*` within a path component, `**` across; e.g. '/kubepods.slice/**');
    /// the rest are summed as cgroup="other".
    #[arg(long, value_name = "GLOB", value_parser = crate::cmd::serve::check_pattern)]
    pub cgroup_allow: Vec<String>,
    /// Cgroups whose series path matches this glob are summed as cgroup="other"
    /// (repeatable; wins over --cgroup-allow).
    #[arg(long, value_name = "GLOB", value_parser = crate::cmd::serve::check_pattern)]
    pub cgroup_deny: Vec<String>,
    /// Where the kubelet writes pod logs: DIR/pods/NAMESPACE_POD_UID and
    /// DIR/containers/POD_NAMESPACE_CONTAINER-ID.log name pods and containers.
    #[arg(long, value_name = "DIR", default_value = "/var/log")]
    pub kubelet_logs: PathBuf,
}

/// `--max-series`: 1 ..= 100000 (each process series holds three histograms).
fn parse_max_series(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err("expected a whole number from 1 to 100000".into()),
    }
}

impl TryFrom<ServeArgs> for crate::cmd::serve::ServeConfig {
    type Error = String;
    fn try_from(a: ServeArgs) -> Result<Self, String> {
        let mut bounds: Vec<u64> = a.buckets.iter().map(|d| d.as_nanos() as u64).collect();
        if bounds.contains(&0) {
            return Err("--buckets: bounds must be above 0".into());
        }
        bounds.sort_unstable();
        bounds.dedup();
        Ok(Self {
            listen: a.listen,
            insecure_listen: a.insecure_listen,
            web_config: a.web_config,
            cgroup_depth: a.cgroup_depth,
            max_series: a.max_series,
            max_cgroups: a.max_cgroups,
            expiry: a.expiry,
            bounds_ns: bounds,
            probe: a.probe.probe,
            runq_from: a.probe.runq_from,
            max_threads: a.probe.max_threads,
            dtl: a.dtl,
            runqlen: a.runqlen,
            patterns: crate::cmd::serve::Patterns {
                allow: a.cgroup_allow,
                deny: a.cgroup_deny,
            },
            kubelet_logs: a.kubelet_logs,
        })
    }
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

#[derive(Args, Debug, Clone)]
pub struct DiffArgs {
    /// The earlier report (`tracer run --json > A.json`; with `-i`, its last line, the total).
    #[arg(value_name = "A.json")]
    pub a: PathBuf,
    /// The later report, compared with A: changes are B - A.
    #[arg(value_name = "B.json")]
    pub b: PathBuf,
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
}

impl From<DiffArgs> for crate::cmd::diff::DiffConfig {
    fn from(a: DiffArgs) -> Self {
        Self {
            a: a.a,
            b: a.b,
            json: a.json,
        }
    }
}

impl From<DtlArgs> for crate::cmd::dtl::DtlConfig {
    fn from(a: DtlArgs) -> Self {
        Self {
            duration: a.duration,
            dtl_freq: a.dtl_freq,
            dtl_mask: a.dtl_mask,
            raw: a.raw,
            json: a.json,
        }
    }
}

impl From<CheckArgs> for crate::cmd::check::CheckConfig {
    fn from(a: CheckArgs) -> Self {
        Self { json: a.json }
    }
}

impl From<RunArgs> for crate::cmd::run::RunConfig {
    fn from(a: RunArgs) -> Self {
        Self {
            targets: a.target.into(),
            duration: a.duration,
            interval: a.interval,
            count: a.count,
            json: a.json,
            top: a.top,
            sort: a.sort,
            per_process: a.per_process,
            per_thread_hist: a.per_thread_hist,
            millis: a.millis,
            events: a.events,
            per_thread: a.per_thread,
            slice_events: a.slice_events,
            probe: a.probe.probe,
            runq_from: a.probe.runq_from,
            max_threads: a.probe.max_threads,
            hook: Default::default(),
            heatmap: a.heatmap,
            runqlen: a.runqlen,
            irq: a.irq,
        }
    }
}

pub mod generate;
pub mod man;
pub mod offcpu;
pub mod record;

/// Warnings (RUST_LOG to see more); `--verbose` adds the start-up stages, written as
/// plain lines, and the reads of the kernel's entries taken again.
fn init_log(verbose: bool) {
    use std::io::Write as _;
    let filter = if verbose {
        "warn,startup=info,reads=info"
    } else {
        "warn"
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter))
        .format(|buf, r| {
            if r.target() == crate::sys::startup::TARGET {
                writeln!(buf, "start-up: {}", r.args())
            } else {
                writeln!(buf, "[{:<5} {}] {}", r.level(), r.target(), r.args())
            }
        })
        .init();
}

/// Parses the command line, runs it and returns the exit code. Errors are printed with
/// their context chain; never a panic for bad input.
pub fn main() -> i32 {
    crate::sys::launch::note_inherited_state();
    crate::sys::startup::begin();
    let cli = Cli::parse();
    init_log(cli.verbose);
    let root = cli.root.clone().map(Root::new).unwrap_or_default();
    use crate::cmd::resolve_workload as resolve;
    let result = match cli.command {
        Command::Run(args) => {
            let mut c: crate::cmd::run::RunConfig = args.into();
            resolve(&mut c.targets, &root).and_then(|()| crate::cmd::run::run(c, root))
        }
        Command::Record(args) => {
            let mut c: crate::cmd::record::RecordConfig = args.into();
            resolve(&mut c.run.targets, &root).and_then(|()| crate::cmd::record::run(c, root))
        }
        Command::Slow(args) => {
            let mut c: crate::cmd::slow::SlowConfig = args.into();
            resolve(&mut c.run.targets, &root).and_then(|()| crate::cmd::slow::run(c, root))
        }
        Command::Top(args) => {
            let mut c: crate::cmd::top::TopConfig = args.into();
            resolve(&mut c.targets, &root).and_then(|()| crate::cmd::top::run(c, root))
        }
        Command::Dtl(args) => crate::cmd::dtl::run(&args.into(), &root),
        Command::Check(args) => crate::cmd::check::run(&args.into(), &root),
        Command::Offcpu(args) => {
            let mut c: crate::cmd::offcpu::OffcpuOptions = args.into();
            resolve(&mut c.targets, &root).and_then(|()| crate::cmd::offcpu::run(c, root))
        }
        Command::Diff(args) => crate::cmd::diff::run(&args.into()),
        Command::Serve(args) => match crate::cmd::serve::ServeConfig::try_from(args) {
            Ok(c) => crate::cmd::serve::run(c, root),
            Err(e) => Err(anyhow::anyhow!(e)),
        },
        Command::Floor { duration } => crate::cmd::floor::run_floor(duration),
        Command::Generate { what } => crate::cli::generate::run(what),
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
                error_for_terminal(&e)
            );
            crate::error::exit_code(&e)
        }
    }
}

/// [`crate::error::one_line`] made safe for a terminal: the paths and names an error quotes come from
/// the user or the kernel (a cgroup directory anyone may have named), so each line is
/// escaped as reports escape names; the line breaks an error means to make stay.
fn error_for_terminal(e: &anyhow::Error) -> String {
    crate::error::one_line(e)
        .split('\n')
        .map(crate::model::words::escape)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests;
