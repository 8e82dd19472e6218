//! `tracer top`: the run's window with interval reports drawn live in the terminal. The
//! same validation, targets, session and loop as `tracer run` (through
//! [`run::run_with`]), with per-thread histograms on for the rows' percentiles and the
//! detail pane: the kernel runs the same programs as `tracer run -L -i 1s`.
use std::time::Duration;

use anyhow::{bail, Context as _, Result};

use super::run::{self, Frontend, RunConfig};
use crate::model::options::{ProbeMode, RunqFrom, SortKey};
use crate::model::targets::Targets;
use crate::output::tui::term::TuiSink;
use crate::sys::{files, root::Root};

/// What `tracer top` was asked to do.
#[derive(Debug, Clone)]
pub struct TopConfig {
    pub targets: Targets,
    pub interval: Duration,
    pub duration: Option<Duration>,
    pub probe: ProbeMode,
    pub runq_from: RunqFrom,
    pub max_threads: u32,
    /// Sample each CPU's run-queue length.
    pub runqlen: bool,
}

/// The title line's account of the traced set.
fn what(c: &TopConfig) -> String {
    if !c.targets.command.is_empty() {
        return c.targets.command.join(" ");
    }
    c.targets.describe()
}

pub fn run(c: TopConfig, root: Root) -> Result<i32> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        bail!("tracer top draws on a terminal: run it in one (for a pipe or a file, use tracer run -i 1s)");
    }
    // https://no-color.org: set and not empty.
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let sink = TuiSink::new(what(&c), color, tx);
    let cfg = RunConfig {
        targets: c.targets,
        duration: c.duration,
        interval: Some(c.interval),
        count: None,
        json: false,
        top: Some(0),
        sort: SortKey::OnCpu,
        per_process: false,
        per_thread_hist: true,
        millis: false,
        events: Vec::new(),
        per_thread: false,
        slice_events: Vec::new(),
        probe: c.probe,
        runq_from: c.runq_from,
        max_threads: c.max_threads,
        heatmap: None,
        hook: Default::default(),
        runqlen: c.runqlen,
        irq: false,
    };
    // The command's output would scribble over the screen: it goes to a file, named at
    // the end (and removed if the command wrote nothing). A private one: a random name
    // made with O_EXCL, mode 0600, in a directory only we can write (a predictable name
    // in /tmp let other users plant links there and read the output).
    let log = if cfg.targets.command.is_empty() {
        None
    } else {
        Some(
            files::create_private("top", ".log")
                .context("creating a file for the command's output")?,
        )
    };
    let (log_path, command_output) = match log {
        Some((p, f)) => (Some(p), Some(f)),
        None => (None, None),
    };
    let result = run::run_with(
        cfg,
        root,
        Frontend {
            sink: Box::new(sink),
            quit: Some(rx),
            banner: false,
            command_output,
        },
    );
    if let Some(p) = log_path {
        if std::fs::metadata(&p.path).is_ok_and(|m| m.len() > 0) {
            eprintln!(
                "tracer top: the command's output is in {}",
                p.path.display()
            );
        } else {
            p.remove();
        }
    }
    result
}
