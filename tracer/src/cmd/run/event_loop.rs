//! The run's window: wait for its end (a duration, a count of intervals, a signal, the
//! command or the targets exiting, a closed output) while reporting intervals, then the
//! final read and the totals. Every report goes to one [`Sink`].
use std::time::Duration;

use anyhow::Result;
use tokio::time::Instant;

use super::{
    hist_scope,
    report::{window_report, Mark},
    session::Session,
    Frontend, RunConfig,
};
use crate::{
    cmd::session::{
        ends::{self, End, Ends, Inbox, Wake, Work},
        signals::Signals,
    },
    model::report::{Command, ReportKind},
    output::sink::Sink,
    pseries::hypervisor,
    sys::launch,
    sys::root::Root,
};

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
        crate::model::words::escape(args.targets.describe())
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
        cgroup_cpu: s.cgroup_cpu.as_ref().map(|c| c.0.read()),
        runqlen: read_runqlen(s)?,
        irq: read_irq(s)?,
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
    let cgroup_cpu = s.cgroup_cpu.as_ref().map(|c| c.0.read());
    let runqlen = read_runqlen(s)?;
    let irq = read_irq(s)?;
    // A thread unhashed just now makes its final switch a moment later: the traced
    // set's are waited for (`ExitWatch`); system-wide, a moment is allowed.
    match &mut s.collector.exit_watch {
        Some(w) => w.arm(true),
        None => std::thread::sleep(Duration::from_millis(5)),
    }
    // The final figures are this one read, taken attached: a second read after the
    // detach could only adopt from this one the threads that died in between, whose
    // task-local storage went with them, and their rows would then disagree with the
    // histograms by what the kernel settled for them in between (torture seed 36751,
    // about 1 run in 10: a count one above or below the threads' sum).
    let mut snap = s.collector.snapshot(&mut s.tracer.ebpf, true, t1)?;
    if let Some(w) = &mut s.collector.exit_watch {
        w.arm(false);
    }
    let misses = s.tracer.recursion_misses();
    s.tracer.detach();
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
        cgroup_cpu,
        runqlen,
        irq,
    })
}

/// `--irq`'s sums so far (None without it).
fn read_irq(s: &Session) -> Result<Option<crate::model::irq::IrqRead>> {
    if !s.tracer.irq {
        return Ok(None);
    }
    Ok(Some(crate::bpf::irq::read(&s.tracer.ebpf)?))
}

/// `--runqlen`'s samples so far (None without it).
fn read_runqlen(s: &Session) -> Result<Option<Vec<crate::model::runqlen::CpuSamples>>> {
    match s.tracer.runqlen_delayed_told {
        Some(_) => Ok(Some(crate::bpf::runqlen::read(&s.tracer.ebpf)?)),
        None => Ok(None),
    }
}

/// What became of the command when the run ended (None without one), and its CPU time
/// once reaped.
fn command_state(
    s: &mut Session,
    end: &End,
    child: Option<u32>,
) -> Option<(launch::ChildState, Option<launch::ChildCpu>)> {
    let reaped = |r: launch::Reaped| (r.state, Some(r.cpu));
    match end {
        End::CommandExited(r) => Some(reaped(*r)),
        End::Output(_) | End::TargetsExited => None,
        End::Failed => child.map(|pid| stop_command(s, pid)),
        End::Signal(_) | End::Quit | End::Duration | End::Count => child.map(|pid| {
            // Ctrl-C on a terminal reaches the command too: give it a moment to end, so
            // the header says what became of it rather than "still running".
            let mut state = None;
            if matches!(end, End::Signal(_) | End::Quit) {
                for _ in 0..20 {
                    state = launch::try_wait_exit(pid);
                    if state.is_some() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            state.map(reaped).unwrap_or_else(|| {
                s.notices.push(format!(
                    "the window ended before the command did; PID {pid} goes on untraced"
                ));
                (launch::ChildState::Running { pid }, None)
            })
        }),
    }
}

/// The run failed with the command still running: SIGTERM it, as `perf record` does
/// with its workload, and wait a second for it to end; one that does not goes on,
/// untraced, and the report says so.
fn stop_command(s: &mut Session, pid: u32) -> (launch::ChildState, Option<launch::ChildCpu>) {
    if let Some(r) = launch::try_wait_exit(pid) {
        return (r.state, Some(r.cpu));
    }
    // SAFETY: a signal to our own child, not reaped yet (the PID is still ours).
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    for _ in 0..100 {
        if let Some(r) = launch::try_wait_exit(pid) {
            s.notices.push(format!(
                "the run failed before the command ended: PID {pid} was sent SIGTERM"
            ));
            return (r.state, Some(r.cpu));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    s.notices.push(format!(
        "the run failed before the command ended: PID {pid} was sent SIGTERM, is still running and goes on untraced"
    ));
    (launch::ChildState::Running { pid }, None)
}

/// The run's part of the loop: interval reports when due, death records drained as
/// they come (and every `ends::CHECK` anyway), a streaming command's failure.
struct Intervals<'a> {
    args: &'a RunConfig,
    root: &'a Root,
    s: &'a mut Session,
    sink: &'a mut dyn Sink,
    prev: Mark,
    intervals: u64,
    next: Option<Instant>,
}

impl Work<()> for Intervals<'_> {
    fn due(&self) -> Instant {
        self.next
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
    }

    fn wake(&mut self, why: Wake<()>) -> Result<Option<End>> {
        match why {
            // top's quit key.
            Wake::Message(()) => return Ok(Some(End::Quit)),
            Wake::Readable(_) => {
                self.s.collector.drain();
                return Ok(None);
            }
            Wake::Tick => {}
        }
        self.s.collector.drain();
        if self.args.hook.should_stop() {
            return Ok(Some(End::Failed));
        }
        let (Some(next), Some(every)) = (self.next, self.args.interval) else {
            return Ok(None);
        };
        if Instant::now() < next {
            return Ok(None);
        }
        // Late ticks are not made up for: the next one comes a whole interval later.
        self.next = Some(next.max(Instant::now() - every) + every);
        if self.args.count.is_some_and(|n| self.intervals + 1 >= n) {
            // The last interval is the final read's, so the totals end where it does.
            return Ok(Some(End::Count));
        }
        let now = read_interval(self.s, self.args, self.root, &self.prev)?;
        let planned = self.s.tracer.planned_close();
        if planned != 0 && now.snap.at_ns >= planned {
            // A read that ended after the planned close (a late tick, a long read) would
            // end its interval past the window, and the intervals would sum to more than
            // the totals (torture seed 996392: 0.58 ms). The final read covers it, from
            // the last interval.
            return Ok(Some(End::Duration));
        }
        self.intervals += 1;
        let kind = ReportKind::Interval {
            interval: self.intervals,
        };
        let r = window_report(self.s, self.args, self.root, kind, (&self.prev, &now), None);
        if let Err(e) = self.sink.interval(&r) {
            return Ok(Some(End::Output(e)));
        }
        // A failed hypervisor read keeps the last good one as the base.
        let hyp = now.hyp.clone().or(self.prev.hyp.take());
        self.prev = Mark { hyp, ..now };
        drop(r);
        // A report of thousands of threads is freed here; its pages go back.
        crate::sys::heap::give_back();
        Ok(None)
    }
}

/// Waits for the run's end, reporting each interval to the front end's sink, then
/// reports the totals. Returns the command's exit code (0 without one).
pub(super) async fn event_loop(
    args: &RunConfig,
    root: &Root,
    mut s: Session,
    child: Option<u32>,
    front: Frontend,
    signals: &mut Signals,
) -> Result<i32> {
    let Frontend {
        mut sink,
        mut quit,
        banner,
        ..
    } = front;
    sink.start(&s.header)?;
    let exits = s.collector.exit_ring_watch()?;
    let start = Mark::start(&s);
    let ends = Ends::new(args.duration, child, &args.targets, root, true);
    if let Some(d) = args.duration {
        // The deadline's moment, in the programs' clock (Instant is CLOCK_MONOTONIC).
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let close = crate::sys::clock::monotonic_ns().saturating_add(d);
        s.tracer.plan_close(close)?;
    }
    if banner {
        show_life(args);
    }
    let mut work = Intervals {
        args,
        root,
        s: &mut s,
        sink: sink.as_mut(),
        prev: start.clone(),
        intervals: 0,
        next: args.interval.map(|i| Instant::now() + i),
    };
    let inbox = match quit.as_mut() {
        Some(q) => Inbox::Unbounded(q),
        None => Inbox::None,
    };
    let end = ends::run(signals, &ends, root, &[&exits], inbox, &mut work).await?;
    let Intervals {
        prev, intervals, ..
    } = work;

    // The window ends here.
    let t1 = s.tracer.close_window()?;
    if let End::Output(e) = end {
        // Nothing more can be shown: detach and end.
        s.tracer.detach();
        let _ = args.hook.finish(&mut s.tracer.ebpf, &[]);
        return Err(e.into());
    }
    let last = read_final(&mut s, args, root, &prev, t1)?;
    let (record, hook_notices) = args.hook.finish(&mut s.tracer.ebpf, &last.snap.names())?;
    if args.interval.is_some() && (matches!(end, End::Count) || t1 > prev.snap.at_ns) {
        // The rest of the window after the last tick (with --count, the last interval),
        // so the intervals add up to the totals.
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
    let command = state.map(|(state, cpu)| Command {
        argv: args.targets.command.clone(),
        state,
        cpu,
    });
    let mut r = window_report(&s, args, root, ReportKind::Total, (&start, &last), command);
    r.notices.extend(outlived_notice(&r));
    r.sections.record = record;
    r.notices.extend(hook_notices);
    if args.hook.report() {
        sink.total(&r)?;
    }
    if let Some(e) = args.hook.error() {
        return Err(e);
    }
    Ok(state.and_then(|s| s.0.exit_code()).unwrap_or(0))
}

/// Threads of the command's tree still alive when the command was reaped: children it
/// did not wait for, whose time the table has and the kernel's CPU time of the command
/// (wait4) has not. Said, so the header and the table do not silently disagree.
fn outlived_notice<S>(r: &crate::model::report::Report<S>) -> Option<String> {
    r.command.as_ref()?.cpu?;
    let live: Vec<&crate::model::report::ThreadRow> =
        r.threads.rows.iter().filter(|t| !t.exited).collect();
    let first = live.first()?;
    Some(format!(
        "{} traced thread(s) outlived the command (children it did not wait for, PID {} first): their time is in the table, not in the command's CPU time",
        live.len(),
        first.pid
    ))
}
