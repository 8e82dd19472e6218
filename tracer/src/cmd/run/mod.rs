//! `tracer run`: validate, start the command held, load and attach, count, wait, report.
//!
//! `targets` resolves the traced set, `session` loads and attaches, `event_loop` waits
//! and reads, `report` turns readings into the typed report the sinks print.
use std::{path::PathBuf, time::Duration};

use crate::model::targets::HistScope;
use anyhow::{Context as _, Result};

use crate::model::options::{ProbeMode, RunqFrom, SortKey};
use crate::model::targets::Targets;
use crate::{
    cmd::session::{signals, start},
    output::heatmap::HeatmapSink,
    output::sink::{self, Sink},
    perf,
    sys::privileges,
    sys::root::Root,
};

mod cgroup_cpu;
mod event_loop;
pub mod hook;
mod report;
mod session;

/// What the command was asked to do, as the command line gave it (parsed and checked).
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// What is traced.
    pub targets: Targets,
    /// Stop after this long (e.g. 5s, 250ms, 2m); default: until Ctrl-C or COMMAND exits.
    pub duration: Option<Duration>,
    /// Print a report of the interval's deltas every DURATION (at least 10ms), then the totals.
    pub interval: Option<Duration>,
    /// Stop after N intervals (N >= 1).
    pub count: Option<u64>,
    /// One JSON document (JSON Lines in interval mode).
    pub json: bool,
    /// Threads listed: the first N in --sort order (text default 20; 0: all). JSON lists
    /// every thread unless --top is given.
    pub top: Option<usize>,
    /// Order of the thread list, largest first.
    pub sort: SortKey,
    /// Histograms per process.
    pub per_process: bool,
    /// Histograms per thread.
    pub per_thread_hist: bool,
    /// Histogram rows in milliseconds instead of microseconds.
    pub millis: bool,
    /// perf events to count beside the trace (perf syntax: task-clock,cycles:u,r1a8).
    pub events: Vec<String>,
    /// Count the events per thread and join them into the thread table.
    pub per_thread: bool,
    /// Events read in the kernel at every switch for per-thread, per-slice deltas (at most 2).
    pub slice_events: Vec<String>,
    /// Attach mode.
    pub probe: ProbeMode,
    /// Where run-queue waits come from.
    pub runq_from: RunqFrom,
    /// Capacity of the per-thread maps (the traced set; outside tp-btf mode the
    /// accumulators too).
    pub max_threads: u32,
    /// What `tracer record` / `tracer slow` add to the session (nothing for `run`).
    pub hook: hook::Hook,
    /// Write the latency heatmaps of the interval reports to this SVG file at the end.
    pub heatmap: Option<PathBuf>,
    /// Sample each CPU's run-queue length.
    pub runqlen: bool,
    /// Time hardirqs and softirqs.
    pub irq: bool,
}

/// Where a run's reports go and what else may end it: `tracer run` prints them on
/// standard output, `tracer top` draws them and ends the run on its quit key.
pub struct Frontend {
    pub sink: Box<dyn Sink>,
    /// A message (or the sender going away) ends the run as a signal does.
    pub quit: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
    /// bcc's "Tracing ... Hit Ctrl-C to end." on a terminal's stderr.
    pub banner: bool,
    /// Where COMMAND's output goes when the front end owns the terminal (else ours).
    pub command_output: Option<std::fs::File>,
}

pub fn run(args: RunConfig, root: Root) -> Result<i32> {
    let mut sink = sink::stdout_sink(args.json);
    if let Some(path) = &args.heatmap {
        sink = Box::new(
            HeatmapSink::create(sink, path)
                .with_context(|| format!("creating the heatmap file {}", path.display()))?,
        );
    }
    run_with(
        args,
        root,
        Frontend {
            sink,
            quit: None,
            banner: true,
            command_output: None,
        },
    )
}

/// Validates, starts the command held, loads, attaches and runs the window, reporting to
/// `front`: the one path `tracer run` and `tracer top` share.
pub fn run_with(args: RunConfig, root: Root, mut front: Frontend) -> Result<i32> {
    let event_specs = if args.events.is_empty() {
        perf::default_events()
    } else {
        perf::parse_events(&args.events)?
    };
    let prepared = start::prepare(&args.targets, &root, front.command_output.take())?;
    trace(&args, &root, prepared, &event_specs, front)
}

fn hist_scope(args: &RunConfig) -> HistScope {
    if args.per_thread_hist {
        HistScope::Thread
    } else if args.per_process {
        HistScope::Process
    } else {
        HistScope::All
    }
}

fn trace(
    args: &RunConfig,
    root: &Root,
    prepared: start::Prepared,
    event_specs: &[perf::EventSpec],
    front: Frontend,
) -> Result<i32> {
    let child = prepared.child();
    let mut session = match session::setup(args, root, &prepared.before, child, event_specs) {
        Ok(s) => s,
        Err(e) => return Err(prepared.abort(e)),
    };
    // The kernel log (/dev/kmsg, CAP_SYSLOG under dmesg_restrict) is read while it can be.
    if !args.events.is_empty() {
        crate::perf::exception_levels::detect();
    }
    let rt = signals::runtime()?;
    // The handlers are in place before the command runs.
    let mut sigs = {
        let _in = rt.enter();
        signals::Signals::install()?
    };
    let child_pid = prepared.go(
        privileges::Keep::Nothing,
        &args.targets.command,
        &mut session.notices,
    )?;
    rt.block_on(event_loop::event_loop(
        args, root, session, child_pid, front, &mut sigs,
    ))
}
