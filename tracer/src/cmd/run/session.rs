//! A run's kernel side: the programs loaded and attached with the traced set seeded,
//! the per-slice and perf counters opened, the first hypervisor read.
use std::os::fd::OwnedFd;

use crate::model::targets::Filter;
use anyhow::{anyhow, Context as _, Result};
use aya::Ebpf;
use tracer_common::MAX_SLICE_COUNTERS;

use super::{hist_scope, RunConfig};
use crate::model::cgroup_cpu::CgroupCpuRead;
use crate::{
    bpf::collect::{Collector, IdleThreads},
    bpf::loader::{LoadOptions, Tracer},
    cmd::targets,
    error::TracerError,
    model::options::RunqSource,
    model::report::{Refusal, RunHeader},
    perf::{self, CounterTarget, Counters},
    pseries::hypervisor,
    sys::{nofile, procfs, root::Root},
};

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
    args: &RunConfig,
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
        let spec = perf::parse_event(name)?;
        match perf::open_per_cpu(&spec, &cpus) {
            Ok(fds) => out.push((name.clone(), fds)),
            Err(e) => notices.push(format!(
                "--slice-event {name}: not counted per slice ({e}); the rest of the run goes on"
            )),
        }
    }
    Ok(out)
}

pub(super) struct Session {
    pub tracer: Tracer,
    pub collector: Collector,
    pub counters: Option<Counters>,
    _slice_fds: Vec<SliceCounter>,
    /// What every report repeats: the probe, where waits come from, the traced set.
    pub header: RunHeader,
    pub hyp_before: Option<hypervisor::Snapshot>,
    /// A `--cgroup` target's CPU figures, and their read at the window's open.
    pub cgroup_cpu: Option<(super::cgroup_cpu::CgroupCpuSource, CgroupCpuRead)>,
    pub notices: Vec<String>,
    /// CLOCK_MONOTONIC when the window opened.
    pub t0: u64,
    /// From the window's open to the counters' enable: time task-clock cannot have seen.
    pub counters_lag_ns: u64,
}

/// The counters, enabled. Out of descriptors, the soft limit is raised to the hard one
/// and they are opened again; still out, the default set (no `-e`) is left out with a
/// notice, since the BPF figures do not need it (a `-p` of a process of 5,000 threads
/// took 20,004 descriptors for its 4 software events, past this VM's 20,000).
fn open_counters(
    args: &RunConfig,
    specs: &[perf::EventSpec],
    target: &CounterTarget,
    notices: &mut Vec<String>,
) -> Result<Option<Counters>> {
    let out_of_fds = |e: &TracerError| matches!(e, TracerError::Perf { source, .. } if nofile::is_out_of_descriptors(source));
    let opened = match Counters::open(specs, target, args.per_thread) {
        Err(e) if out_of_fds(&e) && nofile::raise_to_hard() => {
            Counters::open(specs, target, args.per_thread)
        }
        r => r,
    };
    match opened {
        Ok(c) => {
            c.enable()?;
            Ok(Some(c))
        }
        Err(e) if out_of_fds(&e) && args.events.is_empty() => {
            notices.push(format!(
                "the default perf counters are left out ({e}); the BPF figures stand alone \
                 (-e with fewer events, or a higher `ulimit -Hn`, brings them back)"
            ));
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) fn setup(
    args: &RunConfig,
    root: &Root,
    before: &std::collections::BTreeSet<u32>,
    child: Option<u32>,
    event_specs: &[perf::EventSpec],
) -> Result<Session> {
    let plan = targets::plan(&args.targets, child)?;
    let mut notices = Vec::new();
    let slice = open_slice_counters(args, root, &mut notices)?;
    let scope_ = hist_scope(args);
    let opts = LoadOptions {
        probe: args.probe,
        filter: plan.filter,
        cgroup: plan.cgroup.clone(),
        hist_scope: scope_,
        n_counters: slice.len() as u32,
        max_threads: args.max_threads,
        runq_from: args.runq_from,
        record: args.hook.load(),
        hist_pow2: false,
        thread_cgroups: false,
        thread_hists: false,
        runqlen: args.runqlen,
        irq: args.irq,
    };
    let mut threads = Vec::new();
    // Kept aside, not returned from the seed: an error there would read as the probe
    // mode's and send the start to the next mode.
    let mut counters_failed = None;
    let mut seed = |ebpf: &mut Ebpf| -> Result<()> {
        threads = targets::seed(ebpf, root, &args.targets, before, child, args.max_threads)?;
        // Before the switch programs attach: a switch-in without its counters read a
        // base of 0, and the slice that followed went without its deltas (a pinned
        // spinner's first 0.7 s).
        counters_failed = slice.iter().enumerate().find_map(|(i, (_, fds))| {
            set_perf_array(ebpf, &format!("SLICE_COUNTER{i}"), fds).err()
        });
        Ok(())
    };
    let mut tracer = Tracer::start(&opts, root, &mut seed)?;
    if let Some(e) = counters_failed {
        return Err(e.context("--slice-event: the counters cannot be given to the programs"));
    }
    args.hook.attached(&mut tracer.ebpf)?;
    if tracer.runqlen_delayed_told == Some(false) {
        notices.push(
            "--runqlen: this kernel counts no tasks kept queued by delayed dequeue (6.12): \
             those asleep on a run queue count as waiting"
                .to_string(),
        );
    }
    let runq = tracer.runq;
    let t0 = tracer.opened_at();
    let opening = tracer.opening();
    let mut collector = Collector::new(
        &mut tracer.ebpf,
        scope_,
        runq,
        root.clone(),
        opening,
        if plan.filter == Filter::All {
            IdleThreads::All
        } else {
            IdleThreads::Seeded(threads.iter().map(|&(_, tid)| tid).collect())
        },
    )?;
    if let Some(cg) = &args.targets.cgroup {
        let (cg, node_only) = (cg.clone(), args.targets.cgroup_node_only);
        collector.members = Some(Box::new(move || targets::cgroup_members(&cg, node_only)));
    }
    if plan.filter != Filter::All || tracer.lists_exits {
        collector.exit_watch = Some(crate::bpf::collect::ExitWatch::new(
            &tracer.ebpf,
            root,
            args.max_threads,
        )?);
    }
    // Counted: the threads traced now, not those read before the programs were verified.
    let now = targets::tracked_now(&tracer.ebpf, root)?;
    let counted = if now.is_empty() { &threads } else { &now };
    let counter_target = targets::counter_target(&args.targets, child, plan.filter, counted, root)?;
    let counters = if args.events.is_empty() && !args.per_thread && event_specs.is_empty() {
        None
    } else {
        open_counters(args, event_specs, &counter_target, &mut notices)?
    };
    let counters_lag_ns = crate::sys::clock::monotonic_ns().saturating_sub(t0);
    if args.per_thread {
        if let Some(why) = targets::per_thread_unavailable(&counter_target) {
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
    let cgroup_cpu = args
        .targets
        .cgroup
        .as_deref()
        .and_then(|dir| super::cgroup_cpu::CgroupCpuSource::new(root, dir))
        .map(|c| {
            let first = c.read();
            (c, first)
        });
    let header = RunHeader {
        target: args.targets.describe(),
        probe: tracer.mode.name().to_string(),
        probe_attach: tracer.attach.to_string(),
        attach_lag_ns: tracer.attach_lag_ns(),
        runq_source: runq,
        probe_refused: tracer
            .refused
            .iter()
            .map(|(m, why)| Refusal {
                mode: m.name().to_string(),
                reason: why.clone(),
            })
            .collect(),
        scheduler: crate::bpf::scheduler::detect(root, tracer.sched_btf, &mut notices),
        system_wide: plan.filter == Filter::All,
        // Task-local storage has no capacity to run out of.
        max_threads: if runq == RunqSource::TaskStorage {
            0
        } else {
            args.max_threads
        },
        slice_events: slice.iter().map(|(n, _)| n.clone()).collect(),
    };
    Ok(Session {
        counters_lag_ns,
        tracer,
        collector,
        counters,
        _slice_fds: slice,
        header,
        hyp_before,
        cgroup_cpu,
        notices,
        t0,
    })
}
