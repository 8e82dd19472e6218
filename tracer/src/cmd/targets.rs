//! The traced set, shared by every tracing command: the filter and cgroup the programs
//! are loaded with, the seed read from /proc once the programs that keep the set are
//! attached (so a thread born at any moment of start-up is either in the scan or joins
//! through the fork program), what perf counts, and when the run ends with its targets.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::model::targets::Filter;
use anyhow::{Context as _, Result};
use aya::{maps::HashMap as BpfHashMap, Ebpf};
use tracer_common::{Tracked, TRACK_INHERIT};

use crate::bpf::loader::CgroupTarget;
use crate::error::TracerError;
use crate::model::targets::Targets;
use crate::perf::CounterTarget;
use crate::sys::{procfs, root::Root};

/// How the programs select threads: their filter, and the cgroup with `Filter::Cgroup`.
pub(crate) struct Plan {
    pub filter: Filter,
    pub cgroup: Option<CgroupTarget>,
}

/// The filter for `t` (with `child`, a command started held). Checks the cgroup.
pub(crate) fn plan(t: &Targets, child: Option<u32>) -> Result<Plan> {
    if let Some(dir) = &t.cgroup {
        return Ok(Plan {
            filter: Filter::Cgroup,
            cgroup: Some(CgroupTarget {
                dir: dir.clone(),
                id: procfs::cgroup_id(dir)?,
                node_only: t.cgroup_node_only,
            }),
        });
    }
    let filter = if t.pids.is_empty() && t.tids.is_empty() && child.is_none() {
        Filter::All
    } else {
        Filter::Traced
    };
    Ok(Plan {
        filter,
        cgroup: None,
    })
}

/// Every process's parent, from /proc/PID/stat (bytes: a name is not always UTF-8).
fn parents(root: &Root) -> Vec<(u32, u32)> {
    let Ok(rd) = std::fs::read_dir(root.path("/proc")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read(root.path(format!("/proc/{pid}/stat"))).ok()?;
            // "pid (comm) state ppid ...": the name may hold ')' and spaces.
            let rest = &stat[stat.iter().rposition(|&b| b == b')')? + 1..];
            let ppid = std::str::from_utf8(rest)
                .ok()?
                .split_ascii_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// The processes below `pids` (children, their children, ...) alive now.
pub(crate) fn descendants(root: &Root, pids: &[u32]) -> BTreeSet<u32> {
    let table = parents(root);
    let mut out: BTreeSet<u32> = BTreeSet::new();
    let mut frontier: Vec<u32> = pids.to_vec();
    while let Some(p) = frontier.pop() {
        for &(pid, ppid) in &table {
            if ppid == p && !pids.contains(&pid) && out.insert(pid) {
                frontier.push(pid);
            }
        }
    }
    out
}

/// Where the kubelet's log directories name pods and containers (as `serve
/// --kubelet-logs` reads them).
const KUBELET_LOGS: &str = "/var/log";

/// `--pod`/`--container`: the workload's own cgroup v2 directory becomes the `--cgroup`
/// target (its sub-cgroups included). One line when none or more than one matches.
pub(crate) fn resolve_workload(t: &mut Targets, root: &Root) -> Result<()> {
    if t.cgroup_node_only && t.cgroup.is_none() && t.workload.is_none() {
        return Err(anyhow::anyhow!(
            "--cgroup-node-only needs --cgroup, --pod or --container"
        ));
    }
    let Some(q) = &t.workload else {
        return Ok(());
    };
    let mount = procfs::cgroup2_mount(root).ok_or_else(|| {
        anyhow::anyhow!("{}: no cgroup v2 hierarchy is mounted here", q.describe())
    })?;
    let names = crate::cmd::serve::read_kube_names(Path::new(KUBELET_LOGS));
    let mut found: Vec<PathBuf> = cgroup_dirs(&mount, false)
        .into_iter()
        .filter(|dir| {
            use std::os::unix::ffi::OsStrExt as _;
            let rel = dir.strip_prefix(&mount).unwrap_or(dir);
            q.is(rel.as_os_str().as_bytes(), &names)
        })
        .collect();
    found.sort();
    match found.len() {
        1 => {
            use std::os::unix::ffi::OsStrExt as _;
            let dir = found.pop().unwrap_or_default();
            let rel = dir.strip_prefix(&mount).unwrap_or(&dir);
            let path = [b"/", rel.as_os_str().as_bytes()].concat();
            let w = crate::model::workload::identify(&path, 0);
            t.workload_labels = crate::model::workload::labels(&w, &names, |s: &str| {
                crate::model::words::escape(s)
            });
            t.cgroup = Some(dir);
            Ok(())
        }
        0 => Err(anyhow::anyhow!(
            "{}: no such workload's cgroup under {} (ids as docker ps or crictl ps show them, \
             at least {} hex digits; names from the kubelet's {KUBELET_LOGS}/pods and /containers)",
            q.describe(),
            mount.display(),
            crate::model::workload::MIN_ID_PREFIX
        )),
        n => Err(anyhow::anyhow!(
            "{} matches {n} workloads: {}{}: give more of the id",
            q.describe(),
            found
                .iter()
                .take(3)
                .map(|p| {
                    use std::os::unix::ffi::OsStrExt as _;
                    crate::model::words::escape(p.as_os_str().as_bytes())
                })
                .collect::<Vec<_>>()
                .join(", "),
            if n > 3 { ", ..." } else { "" }
        )),
    }
}

/// The cgroup directories whose tasks are traced: `dir`, and unless `node_only` every
/// directory below it (cgroupfs has no symlinks to follow).
/// The threads in a `--cgroup` target now: in `dir` and, unless `node_only`, below it.
pub fn cgroup_members(dir: &Path, node_only: bool) -> std::collections::HashSet<u32> {
    cgroup_dirs(dir, node_only)
        .iter()
        .filter_map(|d| procfs::cgroup_threads(d).ok())
        .flatten()
        .collect()
}

fn cgroup_dirs(dir: &Path, node_only: bool) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    let mut i = 0;
    while !node_only && i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// Fills the kernel's traced set (`TRACKED`) from /proc and returns its threads as
/// (TGID, TID). Called with the fork and exec programs attached and the switch programs
/// not yet, so nothing born meanwhile is missed and nothing is counted before the window.
/// `-p` processes come with the children they started since `before` was taken (their
/// descendants when the targets were resolved, which `-p`, as perf's, leaves out).
pub(crate) fn seed(
    ebpf: &mut Ebpf,
    root: &Root,
    t: &Targets,
    before: &BTreeSet<u32>,
    child: Option<u32>,
    max_threads: u32,
) -> Result<Vec<(u32, u32)>> {
    let mut seed: Vec<(u32, Tracked)> = Vec::new();
    let mut threads = Vec::new();
    let mut set = TracedSet::open(ebpf)?;
    for &pid in &t.pids {
        set.insert_leader(pid)?;
        let tids = procfs::threads_of(root, pid).map_err(|e| match e {
            TracerError::NoSuchProcess(_) => TracerError::AlreadyExited {
                what: "PID",
                id: pid,
            },
            e => e,
        })?;
        // A zombie leader whose other threads run: nothing left to trace or count.
        for tid in tids
            .into_iter()
            .filter(|&t| procfs::thread_alive(root, pid, t))
        {
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
    if !t.pids.is_empty() {
        for pid in descendants(root, &t.pids).difference(before) {
            set.insert_leader(*pid)?;
            // Gone since: it did nothing in the window.
            let Ok(tids) = procfs::threads_of(root, *pid) else {
                continue;
            };
            for tid in tids {
                seed.push((
                    tid,
                    Tracked {
                        tgid: *pid,
                        flags: TRACK_INHERIT,
                    },
                ));
                threads.push((*pid, tid));
            }
        }
    }
    for &tid in &t.tids {
        let tgid = procfs::tgid_of(root, tid).map_err(|e| match e {
            TracerError::NoSuchThread(_) => TracerError::AlreadyExited {
                what: "TID",
                id: tid,
            },
            e => e,
        })?;
        seed.push((tid, Tracked { tgid, flags: 0 }));
        threads.push((tgid, tid));
    }
    if let Some(cg) = &t.cgroup {
        // A cache for the wakeup programs: membership itself is asked of the kernel at
        // every switch-out.
        for dir in cgroup_dirs(cg, t.cgroup_node_only) {
            // A directory removed meanwhile has no tasks left.
            let Ok(tids) = procfs::cgroup_threads(&dir) else {
                continue;
            };
            for tid in tids {
                let Ok(tgid) = procfs::tgid_of(root, tid) else {
                    continue; // exited since
                };
                seed.push((
                    tid,
                    Tracked {
                        tgid,
                        flags: TRACK_INHERIT,
                    },
                ));
                threads.push((tgid, tid));
            }
        }
    }
    if let Some(pid) = child {
        seed.push((
            pid,
            Tracked {
                tgid: pid,
                flags: TRACK_INHERIT,
            },
        ));
        threads.push((pid, pid));
    }
    // More than the map holds would fail in the kernel with E2BIG, which reads as if no
    // probe mode worked.
    if seed.len() > max_threads as usize {
        return Err(TracerError::TooManyThreads {
            wanted: seed.len(),
            capacity: max_threads,
            suggest: (2 * seed.len() as u64)
                .next_power_of_two()
                .min(crate::sys::parse::MAX_THREADS_LIMIT as u64),
        }
        .into());
    }
    for (tid, v) in &seed {
        set.insert(*tid, *v)?;
    }
    Ok(threads)
}

/// The kernel's traced set (`TRACKED`) as the seeding writes it.
struct TracedSet<'a>(BpfHashMap<&'a mut aya::maps::MapData, u32, Tracked>);

impl<'a> TracedSet<'a> {
    fn open(ebpf: &'a mut Ebpf) -> Result<Self> {
        Ok(TracedSet(BpfHashMap::try_from(
            ebpf.map_mut("TRACKED").context("TRACKED missing")?,
        )?))
    }

    /// A process's leader, put in before its threads are listed: the fork program
    /// follows a thread born in between from this entry (its parent, not yet in the
    /// set, is of that process). A zombie leader's entry stays unused.
    fn insert_leader(&mut self, pid: u32) -> Result<()> {
        let v = Tracked {
            tgid: pid,
            flags: TRACK_INHERIT,
        };
        self.insert(pid, v)
    }

    fn insert(&mut self, tid: u32, v: Tracked) -> Result<()> {
        self.0
            .insert(tid, v, 0)
            .with_context(|| format!("adding TID {tid} to the traced set"))
    }
}

/// The threads the trace follows now (those seeded plus those the fork program added
/// since), still alive: the counters of a `-p`/`-t` target are opened for these once the
/// programs are attached, so a worker born during start-up is counted and a leader that
/// exited meanwhile is not asked for.
pub(crate) fn tracked_now(ebpf: &Ebpf, root: &Root) -> Result<Vec<(u32, u32)>> {
    let m: BpfHashMap<_, u32, Tracked> =
        BpfHashMap::try_from(ebpf.map("TRACKED").context("TRACKED missing")?)?;
    let mut out: Vec<(u32, u32)> = m
        .iter()
        .filter_map(|e| e.ok())
        // Classic tracepoints' sched_process_fork carries no TGID: the entry says 0
        // until the thread's first switch-out, so /proc says which process it is.
        .filter_map(|(tid, v)| match v.tgid {
            0 => procfs::tgid_of(root, tid).ok().map(|tgid| (tgid, tid)),
            tgid => Some((tgid, tid)),
        })
        .filter(|&(tgid, tid)| procfs::thread_alive(root, tgid, tid))
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// What perf counts beside the trace: the command (inherited, as perf stat counts one),
/// the cgroup per CPU (perf stat -G), every CPU, or the seeded threads.
pub(crate) fn counter_target(
    t: &Targets,
    child: Option<u32>,
    filter_: Filter,
    threads: &[(u32, u32)],
    root: &Root,
) -> Result<CounterTarget> {
    Ok(match (child, &t.cgroup) {
        (Some(pid), _) => CounterTarget::Inherit { pid },
        // Per CPU with the cgroup as filter (perf stat -G): tasks that join later count.
        (None, Some(cg)) => CounterTarget::Cgroup {
            path: cg.clone(),
            cpus: procfs::online_cpus(root)?,
        },
        (None, None) if filter_ == Filter::All => CounterTarget::Cpus(procfs::online_cpus(root)?),
        (None, None) if threads.is_empty() => {
            let named: Vec<String> = (t.pids.iter().map(|p| format!("PID {p}")))
                .chain(t.tids.iter().map(|t| format!("TID {t}")))
                .collect();
            return Err(crate::error::TracerError::GoneDuringStartUp(named.join(", ")).into());
        }
        (None, None) => CounterTarget::Threads(threads.to_vec()),
    })
}

/// Why `--per-thread` gives no per-thread counts for this target, if it does not.
pub(crate) fn per_thread_unavailable(t: &CounterTarget) -> Option<&'static str> {
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

/// The -p/-t targets to watch: the run ends with them (perf stat -p ends the same way).
/// A cgroup can gain tasks later: never watched. None: nothing to watch.
pub(crate) fn watch_list(t: &Targets, root: &Root) -> Option<Vec<procfs::Watched>> {
    if t.cgroup.is_some() || (t.pids.is_empty() && t.tids.is_empty()) {
        return None;
    }
    let mut w: Vec<_> = t
        .pids
        .iter()
        .filter_map(|&p| procfs::watch_process(root, p))
        .collect();
    w.extend(t.tids.iter().filter_map(|&t| procfs::watch_thread(root, t)));
    Some(w)
}

/// Whether any -p/-t target (given at the start) still runs.
pub(crate) fn targets_alive(root: &Root, watch: &[procfs::Watched]) -> bool {
    watch.iter().any(|w| procfs::still_alive(root, w))
}
