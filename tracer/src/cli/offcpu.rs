//! `tracer offcpu`'s options.
use std::{path::PathBuf, time::Duration};

use clap::{builder::PossibleValue, Args, ValueEnum};

use crate::{
    cli::TargetArgs,
    model::options::{ProbeMode, Unwind},
    model::stacks::StateFilter,
    sys::parse::{
        parse_duration, parse_max_threads, parse_stack_entries, parse_top, parse_window,
        DURATION_HELP,
    },
};

#[derive(Args, Debug, Clone)]
#[command(after_help = DURATION_HELP)]
pub struct OffcpuArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Stop after this long (above 0); default: until Ctrl-C or COMMAND exits.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_window, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Which off-CPU periods: blocked (asleep), preempted (runnable, waiting for a CPU), or all.
    #[arg(long, value_enum, default_value_t = StateFilter::All)]
    pub state: StateFilter,
    /// Leave out periods shorter than this (e.g. 1ms, 100us).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "1us")]
    pub min: Duration,
    /// Kernel stacks only (no user stacks taken).
    #[arg(long, conflicts_with = "user_only")]
    pub kernel_only: bool,
    /// User stacks only (no kernel stacks taken).
    #[arg(long)]
    pub user_only: bool,
    /// Folded stacks on standard output (`comm;user;kernel us`), for flamegraph.pl/inferno.
    #[arg(long, conflicts_with = "json")]
    pub folded: bool,
    /// Also write a flame graph SVG to FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// One JSON document.
    #[arg(long)]
    pub json: bool,
    /// Stacks in the text report (0: all).
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = parse_top, allow_negative_numbers = true)]
    pub top: usize,
    /// Capacity of the traced set and of the map of threads off-CPU now.
    #[arg(long, value_name = "N", default_value_t = 65536, value_parser = parse_max_threads)]
    pub max_threads: u32,
    /// Slots of the stack map (distinct user and kernel stacks); a spill map of a quarter
    /// as many (at least 1024) takes the stacks that collide in it.
    #[arg(long, value_name = "N", default_value_t = 16384, value_parser = parse_stack_entries)]
    pub stack_entries: u32,
    /// Attach mode: auto tries tp-btf, then raw-tp (both need kernel BTF and 5.18's
    /// prev_state), then the classic tracepoint (tracefs formats only); not perf-sched.
    #[arg(long, value_enum, default_value_t = ProbeMode::Auto)]
    pub probe: ProbeMode,
    /// Join each blocked period with the thread that woke it (its name and stacks at
    /// sched_waking), as offwaketime: folded `waiter frames;--;waker frames`.
    #[arg(long)]
    pub wakers: bool,
    /// How user stacks are walked: fp (the kernel follows frame pointers), dwarf (the
    /// kernel copies the stack top, 12 KiB, unwound here from .eh_frame: code without
    /// frame pointers such as Debian's libc keeps its callers), auto (dwarf for given
    /// processes, threads or a command, in tp-btf mode on x86_64 and arm64; else fp).
    #[arg(long, value_enum, default_value_t = Unwind::Auto)]
    pub unwind: Unwind,
}

impl ValueEnum for Unwind {
    fn value_variants<'a>() -> &'a [Self] {
        &Unwind::ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

impl ValueEnum for StateFilter {
    fn value_variants<'a>() -> &'a [Self] {
        &StateFilter::ALL
    }
    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            StateFilter::Blocked => "Asleep: a lock, I/O, a futex, a sleep",
            StateFilter::Preempted => "Preempted: runnable, waiting for a CPU",
            StateFilter::All => "Both",
        };
        Some(PossibleValue::new(self.name()).help(help))
    }
}

impl From<OffcpuArgs> for crate::cmd::offcpu::OffcpuOptions {
    fn from(a: OffcpuArgs) -> Self {
        Self {
            targets: a.target.into(),
            duration: a.duration,
            states: a.state,
            min: a.min,
            kernel_only: a.kernel_only,
            user_only: a.user_only,
            folded: a.folded,
            svg: a.svg,
            json: a.json,
            top: a.top,
            max_threads: a.max_threads,
            stack_entries: a.stack_entries,
            probe: a.probe,
            wakers: a.wakers,
            unwind: a.unwind,
        }
    }
}
