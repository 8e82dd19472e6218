//! The traced set `tracer run` was given: seeds for the kernel's set, the filter, what
//! perf counts, and when the run ends with its targets.
use anyhow::Result;
use tracer_common::{filter, Tracked, TRACK_INHERIT};

use super::RunConfig;
use crate::perf::CounterTarget;
use crate::sys::{procfs, root::Root};

/// The traced set chosen on the command line.
pub(super) struct Targets {
    /// (tid, Tracked) pairs to seed the in-kernel set with.
    pub seed: Vec<(u32, Tracked)>,
    pub filter: u32,
    pub cgroup_id: u64,
    pub counter_target: CounterTarget,
}

pub(super) fn resolve_targets(
    args: &RunConfig,
    root: &Root,
    child: Option<u32>,
) -> Result<Targets> {
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

/// Why `--per-thread` gives no per-thread counts for this target, if it does not.
pub(super) fn per_thread_unavailable(t: &CounterTarget) -> Option<&'static str> {
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

/// What `tracer run` traces, for the banner: "all CPUs", "PID 42", "cgroup /x".
pub(super) fn target_text(args: &RunConfig) -> String {
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

/// The -p/-t targets to watch: the run ends with them (perf stat -p ends the same way).
/// A cgroup can gain tasks later: never watched. None: nothing to watch.
pub(super) fn watch_list(args: &RunConfig, root: &Root) -> Option<Vec<procfs::Watched>> {
    if args.cgroup.is_some() || (args.pids.is_empty() && args.tids.is_empty()) {
        return None;
    }
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
    Some(w)
}

/// Whether any -p/-t target (given at the start) still runs.
pub(super) fn targets_alive(root: &Root, watch: &[procfs::Watched]) -> bool {
    watch.iter().any(|w| procfs::still_alive(root, w))
}
