//! `tracer run`: validate, start the command held, load and attach, count, wait, report.
use std::{os::fd::OwnedFd, time::Duration};

use anyhow::{anyhow, Context as _, Result};
use aya::{maps::HashMap as BpfHashMap, Ebpf};
use tracer_common::{filter, scope, Tracked, MAX_SLICE_COUNTERS, TRACK_INHERIT};

use crate::{
    cli::RunArgs,
    collect::{Collector, Snapshot},
    counters::{self, CounterSnapshot, CounterTarget, Counters},
    error::TracerError,
    hist::Unit,
    hypervisor,
    launch::{self, Held},
    loader::{self, LoadOptions, Tracer},
    privileges, procfs,
    report::{self, Report, ReportOptions, Section},
    root::Root,
};

/// perf_event_attr.type of the software events (task-clock, context-switches, ...).
const PERF_TYPE_SOFTWARE: u32 = 1;

/// The traced set chosen on the command line.
struct Targets {
    /// (tid, Tracked) pairs to seed the in-kernel set with.
    seed: Vec<(u32, Tracked)>,
    filter: u32,
    cgroup_id: u64,
    counter_target: CounterTarget,
}

fn resolve_targets(args: &RunArgs, root: &Root, child: Option<u32>) -> Result<Targets> {
    let mut seed = Vec::new();
    let mut threads = Vec::new();
    for &pid in &args.pids {
        for tid in procfs::threads_of(root, pid)? {
            // New threads of the process join; so do its children in the tracepoint mode,
            // whose fork record cannot tell a thread from a process (see README).
            seed.push((
                tid,
                Tracked {
                    tgid: pid,
                    flags: TRACK_INHERIT,
                },
            ));
            threads.push((pid, tid));
        }
    }
    for &tid in &args.tids {
        let tgid = procfs::tgid_of(root, tid)?;
        seed.push((tid, Tracked { tgid, flags: 0 }));
        threads.push((tgid, tid));
    }
    let mut cgroup_id = 0;
    let mut filter = if seed.is_empty() && child.is_none() {
        filter::ALL
    } else {
        filter::TRACKED
    };
    if let Some(cg) = &args.cgroup {
        cgroup_id = procfs::cgroup_id(cg)?;
        for tid in procfs::cgroup_threads(cg)? {
            let tgid = procfs::tgid_of(root, tid).unwrap_or(0);
            seed.push((
                tid,
                Tracked {
                    tgid,
                    flags: TRACK_INHERIT,
                },
            ));
            threads.push((tgid, tid));
        }
        filter = filter::CGROUP;
    }
    if let Some(pid) = child {
        seed.push((
            pid,
            Tracked {
                tgid: pid,
                flags: TRACK_INHERIT,
            },
        ));
    }
    let counter_target = match (child, &args.cgroup) {
        (Some(pid), _) => CounterTarget::Inherit { pid },
        // Per CPU with the cgroup as filter (perf stat -G): tasks that join later count.
        (None, Some(cg)) => CounterTarget::Cgroup {
            path: cg.clone(),
            cpus: procfs::online_cpus(root)?,
        },
        (None, None) if filter == filter::ALL => CounterTarget::Cpus(procfs::online_cpus(root)?),
        (None, None) => CounterTarget::Threads(threads),
    };
    Ok(Targets {
        seed,
        filter,
        cgroup_id,
        counter_target,
    })
}

/// Puts per-CPU perf counter fds into a perf event array (BPF_MAP_UPDATE_ELEM), which
/// aya's user-space PerfEventArray does not offer for arbitrary events.
fn set_perf_array(ebpf: &Ebpf, map: &str, fds: &[(u32, OwnedFd)]) -> Result<()> {
    use std::os::fd::{AsFd as _, AsRawFd as _};
    let m = ebpf.map(map).ok_or_else(|| anyhow!("{map} missing"))?;
    let aya::maps::Map::PerfEventArray(data) = m else {
        return Err(anyhow!("{map} is not a perf event array"));
    };
    let map_fd = data.fd().as_fd().as_raw_fd();
    for (cpu, fd) in fds {
        let key: u32 = *cpu;
        let value: u32 = fd.as_raw_fd() as u32;
        // union bpf_attr for BPF_MAP_UPDATE_ELEM: map_fd, pad, key ptr, value ptr, flags.
        let mut attr = [0u64; 4];
        attr[0] = map_fd as u64;
        attr[1] = &key as *const u32 as u64;
        attr[2] = &value as *const u32 as u64;
        const BPF_MAP_UPDATE_ELEM: i64 = 2;
        // SAFETY: attr is a valid bpf_attr prefix for this command.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_UPDATE_ELEM,
                attr.as_ptr(),
                std::mem::size_of_val(&attr),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("storing the CPU {cpu} counter in {map}"));
        }
    }
    Ok(())
}

/// A per-slice counter: the event as written and its per-CPU fds.
type SliceCounter = (String, Vec<(u32, OwnedFd)>);

/// Opens the per-slice counters the kernel reads at each switch; unsupported ones are
/// skipped with a notice, not fatal.
fn open_slice_counters(
    args: &RunArgs,
    root: &Root,
    notices: &mut Vec<String>,
) -> Result<Vec<SliceCounter>> {
    if args.slice_events.len() > MAX_SLICE_COUNTERS {
        return Err(anyhow!(
            "at most {MAX_SLICE_COUNTERS} --slice-event counters are supported"
        ));
    }
    let cpus = procfs::online_cpus(root)?;
    let mut out = Vec::new();
    for name in &args.slice_events {
        let spec = counters::parse_event(name)?;
        match counters::open_per_cpu(&spec, &cpus) {
            Ok(fds) => out.push((name.clone(), fds)),
            Err(e) => notices.push(format!(
                "--slice-event {name}: not counted per slice ({e}); the rest of the run goes on"
            )),
        }
    }
    Ok(out)
}

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
}

pub fn run(args: RunArgs, root: Root) -> Result<i32> {
    if !args.command.is_empty() && (!args.pids.is_empty() || !args.tids.is_empty()) {
        return Err(anyhow!("give either -- COMMAND or -p/-t targets, not both"));
    }
    // Validate everything cheap before touching the kernel.
    for &pid in &args.pids {
        procfs::threads_of(&root, pid)?;
        if !procfs::watch_process(&root, pid).is_some_and(|w| procfs::still_alive(&root, &w)) {
            return Err(TracerError::AlreadyExited {
                what: "PID",
                id: pid,
            }
            .into());
        }
    }
    for &tid in &args.tids {
        procfs::tgid_of(&root, tid)?;
        if !procfs::watch_thread(&root, tid).is_some_and(|w| procfs::still_alive(&root, &w)) {
            return Err(TracerError::AlreadyExited {
                what: "TID",
                id: tid,
            }
            .into());
        }
    }
    let event_specs = if args.events.is_empty() {
        counters::default_events()
    } else {
        counters::parse_events(&args.events)?
    };
    privileges::check()?;
    loader::object()?;

    let held: Option<Held> = if args.command.is_empty() {
        None
    } else {
        let as_user = if args.as_root {
            None
        } else {
            privileges::sudo_user()
        };
        Some(launch::spawn_held(&args.command, as_user)?)
    };
    trace(&args, &root, held, &event_specs)
}

fn hist_scope(args: &RunArgs) -> u32 {
    if args.per_thread_hist {
        scope::THREAD
    } else if args.per_process {
        scope::PROCESS
    } else {
        scope::ALL
    }
}

struct Session {
    tracer: Tracer,
    collector: Collector,
    counters: Option<Counters>,
    _slice_fds: Vec<SliceCounter>,
    slice_events: Vec<String>,
    hyp_before: Option<hypervisor::Snapshot>,
    notices: Vec<String>,
    t0: u64,
    max_threads: u32,
    /// No target: every CPU, counted per CPU.
    system_wide: bool,
    /// From the window's open to the counters' enable: time task-clock cannot have seen.
    counters_lag_ns: u64,
}

/// Why `--per-thread` gives no per-thread counts for this target, if it does not.
fn per_thread_unavailable(t: &CounterTarget) -> Option<&'static str> {
    match t {
        CounterTarget::Threads(_) => None,
        CounterTarget::Inherit { .. } => Some(
            "a command's counters are inherited (one count for the command and everything it \
             spawns, as perf stat counts a command), which the kernel does not split per thread",
        ),
        CounterTarget::Cgroup { .. } => {
            Some("a cgroup is counted per CPU (as perf stat -G), not per thread")
        }
        CounterTarget::Cpus(_) => {
            Some("system-wide counters are per CPU (the report shows them per CPU)")
        }
    }
}

fn trace(
    args: &RunArgs,
    root: &Root,
    held: Option<Held>,
    event_specs: &[counters::EventSpec],
) -> Result<i32> {
    let child = held.as_ref().map(|h| h.pid);
    let session = match setup(args, root, child, event_specs) {
        Ok(s) => s,
        Err(e) => {
            if let Some(h) = held {
                h.abort();
            }
            return Err(e);
        }
    };
    let mut session = session;
    if let Err(e) = privileges::drop_all() {
        session
            .notices
            .push(format!("could not drop capabilities after attaching: {e}"));
    }
    let child_pid = match held {
        Some(h) => Some(h.release(&args.command)?),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the event loop")?;
    rt.block_on(event_loop(args, root, session, child_pid))
}

fn setup(
    args: &RunArgs,
    root: &Root,
    child: Option<u32>,
    event_specs: &[counters::EventSpec],
) -> Result<Session> {
    let targets = resolve_targets(args, root, child)?;
    // The seed goes into a map of --max-threads entries: more would fail in the kernel
    // with E2BIG, which reads as if no probe mode worked.
    if targets.seed.len() > args.max_threads as usize {
        return Err(TracerError::TooManyThreads {
            wanted: targets.seed.len(),
            capacity: args.max_threads,
            suggest: (2 * targets.seed.len() as u64)
                .next_power_of_two()
                .min(crate::cli::MAX_THREADS_LIMIT as u64),
        }
        .into());
    }
    let mut notices = Vec::new();
    let slice = open_slice_counters(args, root, &mut notices)?;
    let scope_ = hist_scope(args);
    let opts = LoadOptions {
        probe: args.probe,
        filter: targets.filter,
        cgroup_id: targets.cgroup_id,
        hist_scope: scope_,
        n_counters: slice.len() as u32,
        max_threads: args.max_threads,
        runq_from: args.runq_from,
        record: args.hook.load(),
    };
    let seed = |ebpf: &mut Ebpf| -> Result<()> {
        if targets.seed.is_empty() {
            return Ok(());
        }
        let mut m: BpfHashMap<_, u32, Tracked> =
            BpfHashMap::try_from(ebpf.map_mut("TRACKED").context("TRACKED missing")?)?;
        for (tid, t) in &targets.seed {
            m.insert(tid, t, 0)
                .with_context(|| format!("adding TID {tid} to the traced set"))?;
        }
        Ok(())
    };
    let mut tracer = Tracer::start(&opts, root, &seed)?;
    args.hook.attached(&mut tracer.ebpf)?;
    for (i, (_, fds)) in slice.iter().enumerate() {
        set_perf_array(&tracer.ebpf, &format!("SLICE_COUNTER{i}"), fds)?;
    }
    let runq = tracer.runq;
    let collector = Collector::new(&mut tracer.ebpf, scope_, runq, root.clone())?;
    let t0 = tracer.opened_at();
    let counters = if args.events.is_empty() && !args.per_thread && event_specs.is_empty() {
        None
    } else {
        let c = Counters::open(event_specs, &targets.counter_target, args.per_thread)?;
        c.enable()?;
        Some(c)
    };
    let counters_lag_ns = loader::monotonic_ns().saturating_sub(t0);
    if args.per_thread {
        if let Some(why) = per_thread_unavailable(&targets.counter_target) {
            notices.push(format!(
                "--per-thread: {why}; per-thread counts need -p PID or -t TID (perf stat --per-thread \
                 needs them too), or use --slice-event EVENT: per-thread deltas read in the kernel at \
                 every switch (`counters.per_thread` is null)"
            ));
        }
    }
    let hyp_before = match hypervisor::Snapshot::take(root) {
        Ok(s) => Some(s),
        Err(e) => {
            notices.push(format!("hypervisor view unavailable: {e}"));
            None
        }
    };
    Ok(Session {
        counters_lag_ns,
        slice_events: slice.iter().map(|(n, _)| n.clone()).collect(),
        tracer,
        collector,
        counters,
        _slice_fds: slice,
        hyp_before,
        notices,
        t0,
        // Task-local storage has no capacity to run out of.
        max_threads: if runq == crate::loader::RunqSource::TaskStorage {
            0
        } else {
            args.max_threads
        },
        system_wide: targets.filter == filter::ALL,
    })
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

/// What `tracer run` traces, for the banner: "all CPUs", "PID 42", "cgroup /x".
fn target_text(args: &RunArgs) -> String {
    if let Some(cg) = &args.cgroup {
        return format!("cgroup {}", cg.display());
    }
    let mut parts: Vec<String> = args.pids.iter().map(|p| format!("PID {p}")).collect();
    parts.extend(args.tids.iter().map(|t| format!("TID {t}")));
    if parts.is_empty() {
        "all CPUs".into()
    } else {
        parts.join(", ")
    }
}

/// The banner of a run with no command, as bcc's tools print it: on stderr, and only on
/// a terminal, so pipes, JSON and tests see nothing.
fn show_life(args: &RunArgs) {
    use std::io::{IsTerminal as _, Write as _};
    if !args.command.is_empty() || !std::io::stderr().is_terminal() {
        return;
    }
    let how_long = match args.duration {
        Some(d) => format!(" for {}", crate::hist::human_ns(d.as_nanos() as u64)),
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
        target_text(args)
    );
}

/// Whether any -p/-t target (given at the start) still runs.
fn targets_alive(root: &Root, watch: &[procfs::Watched]) -> bool {
    watch.iter().any(|w| procfs::still_alive(root, w))
}

async fn event_loop(
    args: &RunArgs,
    root: &Root,
    mut s: Session,
    child: Option<u32>,
) -> Result<i32> {
    let opts = ReportOptions {
        top: args.top,
        sort: args.sort,
        unit: if args.millis {
            Unit::Msecs
        } else {
            Unit::Usecs
        },
        hist_scope: hist_scope(args),
    };
    // SIGCHLD wakes us; waitpid(WNOHANG) reaps. No blocking thread, so the run ends at
    // --duration or a signal even while the command goes on.
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        .context("watching SIGCHLD")?;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    let mut drain = tokio::time::interval(Duration::from_millis(100));
    let mut tick = args.interval.map(|i| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + i, i);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut prev_snap = Snapshot {
        at_ns: s.t0,
        ..Default::default()
    };
    let mut prev_counters: Option<CounterSnapshot> = None;
    let mut prev_hyp = s.hyp_before.clone();
    let mut intervals = 0u64;
    let signal = wait_signal();
    tokio::pin!(signal);
    // -p/-t: the run ends with its targets. A cgroup can gain tasks later: never.
    let watch: Vec<procfs::Watched> = if args.cgroup.is_none() {
        let mut w: Vec<_> = args
            .pids
            .iter()
            .filter_map(|&p| procfs::watch_process(root, p))
            .collect();
        w.extend(
            args.tids
                .iter()
                .filter_map(|&t| procfs::watch_thread(root, t)),
        );
        w
    } else {
        Vec::new()
    };
    let watching = args.cgroup.is_none() && (!args.pids.is_empty() || !args.tids.is_empty());
    show_life(args);

    let end = loop {
        tokio::select! {
            _ = &mut signal => break End::Signal,
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => break End::Duration,
            _ = sigchld.recv(), if child.is_some() => {
                if let Some(code) = child.and_then(launch::try_wait_exit) {
                    break End::CommandExited(code);
                }
            }
            _ = async { match tick.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                intervals += 1;
                let mut snap = s.collector.snapshot(&mut s.tracer.ebpf, true, 0)?;
                // A live thread the read missed (no death record) keeps its last totals.
                snap.adopt_missing(&prev_snap, hist_scope(args));
                snap.raise_to(&prev_snap, hist_scope(args));
                snap.recursion_misses = s.tracer.recursion_misses();
                let delta = snap.delta(&prev_snap);
                let csnap = match &s.counters { Some(c) => Some(c.read()?), None => None };
                let cdelta = match (&csnap, &prev_counters) {
                    (Some(now), Some(before)) => Some(now.delta(before)),
                    (Some(now), None) => Some(now.clone()),
                    _ => None,
                };
                // The hypervisor's view of this interval (one read of /proc/stat).
                let hyp_now = prev_hyp.as_ref().and_then(|_| hypervisor::Snapshot::take(root).ok());
                let hyp = hypervisor_report(args, prev_hyp.as_ref(), hyp_now.as_ref(), &delta, snap.at_ns - prev_snap.at_ns);
                if hyp_now.is_some() {
                    prev_hyp = hyp_now;
                }
                let r = build_report(&s, "interval", Some(intervals), delta, snap.at_ns - prev_snap.at_ns, cdelta.as_ref(), hyp, None, root);
                if let Err(e) = print_report(&r, &opts, args.json) {
                    break End::Output(e);
                }
                prev_snap = snap;
                prev_counters = csnap;
                if args.count.is_some_and(|n| intervals >= n) {
                    break End::Count;
                }
            }
            _ = drain.tick() => {
                s.collector.drain();
                // A SIGCHLD that arrived before the handler was installed.
                if let Some(code) = child.and_then(launch::try_wait_exit) {
                    break End::CommandExited(code);
                }
                if watching && !targets_alive(root, &watch) {
                    break End::TargetsExited;
                }
                if crate::cli::stdout_closed() {
                    break End::Output(TracerError::OutputClosed);
                }
                if args.hook.should_stop() {
                    break End::Duration;
                }
            }
        }
    };

    // The window ends here. The programs stay attached through the final read, cutting
    // slices at the close: a thread that dies meanwhile still hands over its totals
    // (detached, its task-local storage would go with it, uncounted).
    let t1 = s.tracer.close_window()?;
    if let End::Output(e) = end {
        // Nothing more can be shown: detach and end.
        s.tracer.detach();
        let _ = args.hook.finish(&mut s.tracer.ebpf);
        return Err(e.into());
    }
    let csnap = match &s.counters {
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
    snap.adopt_missing(&prev_snap, hist_scope(args));
    snap.raise_to(&prev_snap, hist_scope(args));
    snap.at_ns = t1;
    snap.recursion_misses = misses;
    let (hook_sections, hook_notices) = args.hook.finish(&mut s.tracer.ebpf)?;
    let hyp_end = s
        .hyp_before
        .as_ref()
        .and_then(|_| hypervisor::Snapshot::take(root).ok());
    if args.interval.is_some() && !matches!(end, End::Count) && t1 > prev_snap.at_ns {
        // The rest of the window after the last tick, so the intervals add up to the totals.
        let cdelta = match (&csnap, &prev_counters) {
            (Some(now), Some(before)) => Some(now.delta(before)),
            (Some(now), None) => Some(now.clone()),
            _ => None,
        };
        let delta = snap.delta(&prev_snap);
        let hyp = hypervisor_report(
            args,
            prev_hyp.as_ref(),
            hyp_end.as_ref(),
            &delta,
            t1 - prev_snap.at_ns,
        );
        let r = build_report(
            &s,
            "interval",
            Some(intervals + 1),
            delta,
            t1 - prev_snap.at_ns,
            cdelta.as_ref(),
            hyp,
            None,
            root,
        );
        print_report(&r, &opts, args.json)?;
    }
    let state = match end {
        End::CommandExited(state) => Some(state),
        End::Output(_) => unreachable!("returned above"),
        End::TargetsExited => {
            s.notices
                .push("all targets exited: the run ended with them".to_string());
            None
        }
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
    };
    let exit_code = state.and_then(|s| s.exit_code());
    let hyp = hypervisor_report(
        args,
        s.hyp_before.as_ref(),
        hyp_end.as_ref(),
        &snap,
        t1 - s.t0,
    );
    let command = state.map(|st| (args.command.clone(), st));
    let mut r = build_report(
        &s,
        "total",
        None,
        snap,
        t1 - s.t0,
        csnap.as_ref(),
        hyp,
        command,
        root,
    );
    r.sections.extend(hook_sections);
    r.notices.extend(hook_notices);
    if args.hook.report() {
        print_report(&r, &opts, args.json)?;
    }
    Ok(exit_code.unwrap_or(0))
}

#[allow(clippy::too_many_arguments)]
fn build_report(
    s: &Session,
    kind: &'static str,
    interval: Option<u64>,
    mut snapshot: Snapshot,
    duration_ns: u64,
    counters: Option<&CounterSnapshot>,
    hyp: Option<hypervisor::HypervisorReport>,
    command: Option<(Vec<String>, launch::ChildState)>,
    root: &Root,
) -> Report {
    snapshot
        .threads
        .retain(|_, r| !crate::collect::is_idle(&r.stats));
    // Threads still on their first slice have no entry in the kernel yet (no TGID, no
    // comm); classic tracepoints give no comm for threads first seen at a wakeup.
    for r in snapshot.threads.values_mut() {
        if r.stats.tgid == 0 {
            r.stats.tgid = procfs::tgid_of(root, r.tid).unwrap_or(0);
        }
        if r.stats.comm[0] == 0 {
            if let Some(c) = procfs::comm(root, r.stats.tgid, r.tid) {
                let b = c.as_bytes();
                let n = b.len().min(r.stats.comm.len() - 1);
                r.stats.comm[..n].copy_from_slice(&b[..n]);
            }
        }
    }
    let mut sections = Vec::new();
    let mut task_clock_util = None;
    let mut thread_counters = std::collections::BTreeMap::new();
    let mut notices = s.notices.clone();
    if let Some(c) = counters {
        let cr = counters::report(c, duration_ns);
        // perf's per-CPU task-clock runs through idle too (perf stat -a says "2.000 CPUs
        // utilized" on an idle 2-CPU machine): system-wide, the headline figure is the
        // traced threads' on-CPU time from the kernel programs, idle excluded.
        if !s.system_wide {
            task_clock_util = cr.cpus_utilized;
        }
        if let Some(pt) = &cr.per_thread {
            thread_counters = pt.clone();
        }
        // Comparable only for a target: system-wide, task-clock counts idle too.
        if let Some(tc) = counters::task_clock_ns(c).filter(|_| !s.system_wide) {
            let cc = cross_check_input(c, &snapshot, duration_ns, tc, s, interval);
            // Threads that started after the counters were opened (-p/-t): task-clock
            // misses them, so the headline takes the BPF figure, which has them all.
            if report::headline_from_bpf(&cc) {
                task_clock_util = None;
            }
            notices.push(report::cross_check_notice(&cc));
        }
        // A hardware event that ran and counted exactly zero is more likely an event the
        // PMU accepts but does not implement (seen under QEMU's POWER PMU) than a real 0.
        for c in cr
            .counters
            .iter()
            .filter(|c| c.supported && c.value == Some(0.0) && c.running_ns > 0)
        {
            let hardware = counters::parse_event(&c.event)
                .map(|e| counters::attr_fields(&e).type_ != PERF_TYPE_SOFTWARE)
                .unwrap_or(false);
            if hardware {
                notices.push(format!(
                    "{} counted 0 while running {:.1}% of the window: the PMU may accept it without implementing it",
                    c.event,
                    100.0 * c.running_ns as f64 / c.enabled_ns.max(1) as f64
                ));
            }
        }
        // `<not supported>` is said once: in the first interval and in the totals.
        let unsupported = interval.is_none_or(|i| i == 1);
        sections.push(Section {
            key: "counters",
            json: serde_json::to_value(&cr).unwrap_or_default(),
            text: counters::format_text_opts(&cr, unsupported),
        });
    }
    if let Some(h) = hyp {
        sections.push(Section {
            key: "hypervisor",
            json: serde_json::to_value(&h).unwrap_or_default(),
            text: hypervisor::format_text(&h),
        });
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Report {
        kind,
        interval,
        time_unix_ns: u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
        local_time: local_hms(now.as_secs()),
        system_wide: s.system_wide,
        duration_ns,
        probe: s.tracer.mode.name().to_string(),
        probe_attach: s.tracer.attach.to_string(),
        runq_source: s.tracer.runq.name(),
        probe_refused: s
            .tracer
            .refused
            .iter()
            .map(|(m, why)| (m.name().to_string(), why.clone()))
            .collect(),
        snapshot,
        cpus_utilized_task_clock: task_clock_util,
        slice_events: s.slice_events.clone(),
        sections,
        notices,
        command,
        max_threads: s.max_threads,
        thread_counters,
    }
}

/// The hypervisor's view between two snapshots, of the CPUs the traced set ran on in
/// `snap` (all CPUs system-wide).
fn hypervisor_report(
    args: &RunArgs,
    before: Option<&hypervisor::Snapshot>,
    after: Option<&hypervisor::Snapshot>,
    snap: &Snapshot,
    elapsed_ns: u64,
) -> Option<hypervisor::HypervisorReport> {
    let busy = snap.busy_cpus();
    let cpus = (!args.pids.is_empty()
        || !args.tids.is_empty()
        || !args.command.is_empty()
        || args.cgroup.is_some())
    .then_some(busy.as_slice());
    Some(hypervisor::report(before?, after?, cpus, elapsed_ns))
}

/// What the BPF figures and task-clock each cover, for the cross-check notice.
fn cross_check_input(
    c: &CounterSnapshot,
    snapshot: &Snapshot,
    window_ns: u64,
    task_clock_ns: f64,
    s: &Session,
    interval: Option<u64>,
) -> report::CrossCheck {
    // Per-thread counters (-p/-t) cover the TIDs they were opened on; inherited and
    // cgroup counters cover every thread the BPF side traces.
    let tids: Option<std::collections::BTreeSet<u32>> = c
        .events
        .iter()
        .find(|e| {
            e.parts
                .iter()
                .any(|(p, _)| matches!(p, counters::Scope::Thread { .. }))
        })
        .map(|e| {
            e.parts
                .iter()
                .filter_map(|(p, _)| match p {
                    counters::Scope::Thread { tid, .. } => Some(*tid),
                    _ => None,
                })
                .collect()
        });
    let (mut covered_ns, mut missed_ns, mut missed, mut exited) = (0u64, 0u64, 0usize, 0usize);
    let mut slices = 0;
    let mut max_thread_ns = 0;
    for t in snapshot.threads.values() {
        if t.folded == 0 {
            max_thread_ns = max_thread_ns.max(t.stats.on_cpu_ns);
        }
        if tids.as_ref().is_none_or(|set| set.contains(&t.tid)) {
            covered_ns += t.stats.on_cpu_ns;
            slices += t.stats.slices;
            if t.exited {
                exited += (t.folded as usize).max(1);
            }
        } else {
            missed_ns += t.stats.on_cpu_ns;
            missed += 1;
        }
    }
    report::CrossCheck {
        bpf_ns: covered_ns,
        task_clock_ns,
        missed_threads: missed,
        missed_ns,
        exited_threads: exited,
        slices,
        // Only the first report's window starts before the counters were enabled.
        lag_ns: if interval.is_none_or(|i| i == 1) {
            s.counters_lag_ns
        } else {
            0
        },
        cpus: snapshot.cpu_busy_ns.len().max(1),
        window_ns,
        max_thread_ns,
    }
}

/// Wall-clock time of day (local time zone) as HH:MM:SS, as runqlat -T prints it.
fn local_hms(unix_secs: u64) -> String {
    let t = libc::time_t::try_from(unix_secs).unwrap_or(0);
    // SAFETY: localtime_r writes the zeroed tm it is given and reads only `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&t, &mut tm).is_null() };
    if !ok {
        return String::new();
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

fn print_report(r: &Report, o: &ReportOptions, json: bool) -> Result<(), TracerError> {
    if json {
        crate::cli::emit(&report::to_json(r, o).to_string())
    } else {
        crate::cli::emit(&report::format_text(r, o))
    }
}
