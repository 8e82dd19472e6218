//! `tracer record` and `tracer slow`: their options, and the `tracer run` session each
//! runs inside.
use std::{path::PathBuf, time::Duration};

use clap::{Args, FromArgMatches as _};

use crate::{
    cli::{RunArgs, TargetArgs},
    cmd::{record::RecordConfig, run::RunConfig, slow::SlowConfig},
    model::options::ProbeMode,
    sys::parse::{parse_buffer_size, parse_duration, parse_window, DURATION_HELP},
};

#[derive(Args, Debug, Clone)]
#[command(after_help = DURATION_HELP)]
pub struct RecordArgs {
    /// Where the Perfetto trace goes (open it in ui.perfetto.dev). `-` (or /dev/stdout):
    /// standard output, and the report goes to standard error; a FIFO waits, saying so,
    /// for a reader; a terminal is refused.
    #[arg(
        short = 'o',
        long,
        value_name = "FILE",
        default_value = "trace.pftrace"
    )]
    pub output: PathBuf,
    /// Size of the kernel ring buffer the events pass through (e.g. 16M; a power of two).
    #[arg(long, value_name = "BYTES", default_value = "16M", value_parser = parse_buffer_size)]
    pub buffer_size: u32,
    /// Write the packets uncompressed. By default each flush's packets are deflated into
    /// one packet (`compressed_packets`, as Perfetto's own recorder writes them), which
    /// ui.perfetto.dev and trace_processor read; a reader of the raw protos must expand them.
    #[arg(long)]
    pub no_compress: bool,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Args, Debug, Clone)]
#[command(
    after_help = "The previous task is the one that ran on that CPU just before the waiting thread: \
                  not necessarily the cause of the wait (runqslower -P shows the same).\n\n\
                  DURATION: a number and a unit: ns, us, ms, s (sec, secs), m (min) or h; a bare \
                  number is seconds (5 and `5 s` are 5s)."
)]
pub struct SlowArgs {
    /// Shortest wait shown (runqslower's default is 10ms too).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration)]
    pub min: Duration,
    /// Blocked (sleeping) periods instead of run-queue waits.
    #[arg(long)]
    pub off_cpu: bool,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Stop after this long (above 0); default: until Ctrl-C or COMMAND exits.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_window, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Attach mode (tp-btf or raw-tp: the events need task pointers).
    #[arg(long, value_enum, default_value_t = ProbeMode::Auto)]
    pub probe: ProbeMode,
    /// Size of the kernel ring buffer the events pass through.
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_buffer_size)]
    pub buffer_size: u32,
}

/// `tracer run`'s options at their defaults (the session `tracer slow` runs inside).
fn default_run_args() -> RunArgs {
    let cmd = <RunArgs as Args>::augment_args(clap::Command::new("slow"));
    let m = cmd
        .try_get_matches_from(["slow"])
        .expect("run's options all have defaults");
    RunArgs::from_arg_matches(&m).expect("run's options all have defaults")
}

impl From<RecordArgs> for RecordConfig {
    fn from(a: RecordArgs) -> Self {
        RecordConfig {
            output: a.output,
            buffer_size: a.buffer_size,
            compress: !a.no_compress,
            run: a.run.into(),
        }
    }
}

impl From<SlowArgs> for SlowConfig {
    fn from(a: SlowArgs) -> Self {
        let mut run: RunConfig = default_run_args().into();
        run.targets = a.target.into();
        run.duration = a.duration;
        run.probe = a.probe;
        SlowConfig {
            min: a.min,
            off_cpu: a.off_cpu,
            json: a.json,
            buffer_size: a.buffer_size,
            run,
        }
    }
}
