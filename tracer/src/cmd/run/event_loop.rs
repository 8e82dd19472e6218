//! The run's window: wait for its end (a duration, a count of intervals, a signal, the
//! command or the targets exiting, a closed output) while reporting intervals, then the
//! final read and the totals. Every report goes to one [`Sink`].
use std::time::Duration;

use anyhow::{Context as _, Result};

use super::{
    hist_scope,
    report::{window_report, Mark},
    session::Session,
    Frontend, RunConfig,
};
use crate::{
    cmd::targets::{targets_alive, watch_list},
    error::TracerError,
    model::report::{Command, ReportKind},
    pseries::hypervisor,
    sys::launch,
    sys::root::Root,
};

/// What ends the run.
enum End {
    Duration,
    Count,
    Signal,
    CommandExited(launch::ChildState),
    /// Every -p/-t target exited (perf stat -p ends the same way).
    TargetsExited,
    /// An interval report could not be written (closed pipe, full disk).
    Output(TracerError),
    /// A streaming command's output failed (`tracer record` on a full disk): the report
    /// is printed, then the error; a command is stopped.
    StreamFailed,
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal) end the run with the final report.
/// SIGHUP ignored when the tracer started (under nohup) stays ignored; SIGINT and
/// SIGTERM are always caught, as before (a script's `tracer ... &` starts with SIGINT
/// ignored and is still stopped with `kill -INT`).
async fn wait_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut int, mut term) = (
        signal(SignalKind::interrupt()).ok(),
        signal(SignalKind::terminate()).ok(),
    );
    let mut hup = (!launch::ignored_at_start(libc::SIGHUP))
        .then(|| signal(SignalKind::hangup()).ok())
        .flatten();
    async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = recv(&mut int) => "SIGINT",
        _ = recv(&mut term) => "SIGTERM",
        _ = recv(&mut hup) => "SIGHUP",
    }
}

/// The banner of a run with no command, as bcc's tools print it: on stderr, and only on
/// a terminal, so pipes, JSON and tests see nothing.
fn show_life(args: &RunConfig) {
    use std::io::{IsTerminal as _, Write as _};
    if !args.targets.command.is_empty() || !std::io::stderr().is_terminal() {
        return;
    }
    let how_long = match args.duration {
        Some(d) => format!(" for {}", crate::model::hist::human_ns(d.as_nanos() as u64)),
        None => String::new(),
    };
    let stop = if args.duration.is_some() {
        "Hit Ctrl-C to end early."
    } else {
        "Hit Ctrl-C to end."
    };
    let _ = writeln!(
        std::io::stderr().lock(),
        "Tracing scheduling of {}{how_long}... {stop}",
        args.targets.describe()
    );
}

/// A read while the window is open, after `prev`.
fn read_interval(s: &mut Session, args: &RunConfig, root: &Root, prev: &Mark) -> Result<Mark> {
    let mut snap = s.collector.snapshot(&mut s.tracer.ebpf, true, 0)?;
    // A live thread the read missed (no death record) keeps its last totals.
    snap.adopt_missing(&prev.snap, hist_scope(args));
    snap.raise_to(&prev.snap, hist_scope(args));
    snap.recursion_misses = s.tracer.recursion_misses();
    let counters = match &s.counters {
        Some(c) => Some(c.read()?),
        None => None,
    };
    // The hypervisor's view of this interval (one read of /proc/stat).
    let hyp = prev
        .hyp
        .as_ref()
        .and_then(|_| hypervisor::Snapshot::take(root).ok());
    Ok(Mark {
        snap,
        counters,
        hyp,
    })
}

/// The last read, at the window's close `t1`: the programs stay attached through it,
/// cutting slices at the close, so a thread that dies meanwhile still hands over its
/// totals (detached, its task-local storage would go with it, uncounted).
fn read_final(
    s: &mut Session,
    args: &RunConfig,
    root: &Root,
    prev: &Mark,
    t1: u64,
) -> Result<Mark> {
    let counters = match &s.counters {
        Some(c) => {
            c.disable()?;
            Some(c.read()?)
        }
        None => None,
    };
    // A thread reaped just now makes its final switch a moment later: let it.
    std::thread::sleep(Duration::from_millis(5));
    let attached = s.collector.snapshot(&mut s.tracer.ebpf, true, t1)?;
    let misses = s.tracer.recursion_misses();
    s.tracer.detach();
    // Read again once nothing changes any more (the final records drained, slices cut
    // at the close settled), keeping the threads that died since without a record.
    let mut snap = s.collector.snapshot(&mut s.tracer.ebpf, true, t1)?;
    snap.adopt_missing(&attached, hist_scope(args));
    snap.adopt_missing(&prev.snap, hist_scope(args));
    snap.raise_to(&prev.snap, hist_scope(args));
    snap.at_ns = t1;
    snap.recursion_misses = misses;
    let hyp = s
        .hyp_before
        .as_ref()
        .and_then(|_| hypervisor::Snapshot::take(root).ok());
    Ok(Mark {
        snap,
        counters,
        hyp,
    })
}

/// What became of the command when the run ended (None without one).
fn command_state(s: &mut Session, end: &End, child: Option<u32>) -> Option<launch::ChildState> {
    match end {
        End::CommandExited(state) => Some(*state),
        End::Output(_) | End::TargetsExited => None,
        End::StreamFailed => child.map(|pid| stop_command(s, pid)),
        End::Signal | End::Duration | End::Count => child.map(|pid| {
            // Ctrl-C on a terminal reaches the command too: give it a moment to end, so
            // the header says what became of it rather than "still running".
            let mut state = None;
            if matches!(end, End::Signal) {
                for _ in 0..20 {
                    state = launch::try_wait_exit(pid);
                    if state.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            state.unwrap_or_else(|| {
                s.notices.push(format!(
                    "the window ended before the command did; PID {pid} goes on untraced"
                ));
                launch::ChildState::Running { pid }
            })
        }),
    }
}

/// The run failed with the command still running: SIGTERM it, as `perf record` does
/// with its workload, and wait a second for it to end; one that does not goes on,
/// untraced, and the report says so.
fn stop_command(s: &mut Session, pid: u32) -> launch::ChildState {
    if let Some(state) = launch::try_wait_exit(pid) {
        return state;
    }
    // SAFETY: a signal to our own child, not reaped yet (the PID is still ours).
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    for _ in 0..100 {
        if let Some(state) = launch::try_wait_exit(pid) {
            s.notices.push(format!(
                "the run failed before the command ended: PID {pid} was sent SIGTERM"
            ));
            return state;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    s.notices.push(format!(
        "the run failed before the command ended: PID {pid} was sent SIGTERM, is still running and goes on untraced"
    ));
    launch::ChildState::Running { pid }
}

/// Waits for the run's end, reporting each interval to the front end's sink, then
/// reports the totals. Returns the command's exit code (0 without one).
pub(super) async fn event_loop(
    args: &RunConfig,
    root: &Root,
    mut s: Session,
    child: Option<u32>,
    front: Frontend,
) -> Result<i32> {
    let Frontend {
        mut sink,
        mut quit,
        banner,
        ..
    } = front;
    sink.start(&s.header)?;
    // SIGCHLD wakes us; waitpid(WNOHANG) reaps. No blocking thread, so the run ends at
    // --duration or a signal even while the command goes on.
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        .context("watching SIGCHLD")?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut drain = tokio::time::interval(Duration::from_millis(100));
    let exits = s.collector.exit_ring_watch()?;
    let mut tick = args.interval.map(|i| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + i, i);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let start = Mark::start(&s);
    let mut prev = start.clone();
    let mut intervals = 0u64;
    let signal = wait_signal();
    tokio::pin!(signal);
    let watch = watch_list(&args.targets, root);
    if banner {
        show_life(args);
    }

    let end = loop {
        tokio::select! {
            _ = &mut signal => break End::Signal,
            _ = async { match quit.as_mut() { Some(q) => { q.recv().await; } None => std::future::pending().await } } => break End::Signal,
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => break End::Duration,
            _ = sigchld.recv(), if child.is_some() => {
                if let Some(code) = child.and_then(launch::try_wait_exit) {
                    break End::CommandExited(code);
                }
            }
            _ = async { match tick.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                intervals += 1;
                let now = read_interval(&mut s, args, root, &prev)?;
                let kind = ReportKind::Interval { interval: intervals };
                let r = window_report(&s, args, root, kind, (&prev, &now), None);
                if let Err(e) = sink.interval(&r) {
                    break End::Output(e);
                }
                // A failed hypervisor read keeps the last good one as the base.
                prev = Mark { hyp: now.hyp.or(prev.hyp), ..now };
                if args.count.is_some_and(|n| intervals >= n) {
                    break End::Count;
                }
            }
            ready = exits.readable() => {
                if let Ok(mut guard) = ready {
                    guard.clear_ready();
                }
                s.collector.drain();
            }
            _ = drain.tick() => {
                s.collector.drain();
                // A SIGCHLD that arrived before the handler was installed.
                if let Some(code) = child.and_then(launch::try_wait_exit) {
                    break End::CommandExited(code);
                }
                if watch.as_ref().is_some_and(|w| !targets_alive(root, w)) {
                    break End::TargetsExited;
                }
                if crate::output::stdout::stdout_closed() {
                    break End::Output(TracerError::OutputClosed);
                }
                if args.hook.should_stop() {
                    break End::StreamFailed;
                }
            }
        }
    };

    // The window ends here.
    let t1 = s.tracer.close_window()?;
    if let End::Output(e) = end {
        // Nothing more can be shown: detach and end.
        s.tracer.detach();
        let _ = args.hook.finish(&mut s.tracer.ebpf);
        return Err(e.into());
    }
    let last = read_final(&mut s, args, root, &prev, t1)?;
    let (record, hook_notices) = args.hook.finish(&mut s.tracer.ebpf)?;
    if args.interval.is_some() && !matches!(end, End::Count) && t1 > prev.snap.at_ns {
        // The rest of the window after the last tick, so the intervals add up to the totals.
        let kind = ReportKind::Interval {
            interval: intervals + 1,
        };
        let r = window_report(&s, args, root, kind, (&prev, &last), None);
        sink.interval(&r)?;
    }
    if matches!(end, End::TargetsExited) {
        s.notices
            .push("all targets exited: the run ended with them".to_string());
    }
    let state = command_state(&mut s, &end, child);
    let command = state.map(|state| Command {
        argv: args.targets.command.clone(),
        state,
    });
    let mut r = window_report(&s, args, root, ReportKind::Total, (&start, &last), command);
    r.sections.record = record;
    r.notices.extend(hook_notices);
    if args.hook.report() {
        sink.total(&r)?;
    }
    if let Some(e) = args.hook.error() {
        return Err(e);
    }
    Ok(state.and_then(|s| s.exit_code()).unwrap_or(0))
}
