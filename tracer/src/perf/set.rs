//! Counter sets: open every event of a list for one target (a command with its
//! descendants, threads, CPUs, a cgroup), enable, disable and read them, sum the parts, and
//! scale the values for multiplexing. Events the machine cannot count are kept with their
//! reason, as perf stat's `<not supported>`; the others go on.
use std::collections::BTreeSet;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::event::EventSpec;
pub use super::sys::Reading;
use super::sys::{self, OpenMode, Who};
use crate::error::TracerError;

/// What to count: the three ways perf stat attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CounterTarget {
    /// A command started stopped before exec, counted with inherit=1 (it and everything it spawns), as perf stat does.
    Inherit { pid: u32 },
    /// Existing threads (-p PID expands to its threads, -t TID): (tgid, tid) pairs, no inherit.
    Threads(Vec<(u32, u32)>),
    /// System-wide: one counter per online CPU (pid -1), gives per-CPU utilization too
    /// (`procfs::online_cpus` lists them).
    Cpus(Vec<u32>),
    /// A cgroup v2 directory, counted per CPU with PERF_FLAG_PID_CGROUP as `perf stat -G`
    /// does: every task that runs in the cgroup during the window counts, including
    /// those that join after the start (per-thread counters would miss them).
    Cgroup {
        path: std::path::PathBuf,
        cpus: Vec<u32>,
    },
}

/// Where one descriptor counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// The inherited counter of a command (covers its descendants).
    Task(u32),
    Thread {
        tgid: u32,
        tid: u32,
    },
    Cpu(u32),
    /// The cgroup's tasks on this CPU.
    CgroupCpu(u32),
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Task(pid) => write!(f, "PID {pid} and its descendants"),
            Scope::Thread { tid, .. } => write!(f, "TID {tid}"),
            Scope::Cpu(cpu) => write!(f, "CPU {cpu}"),
            Scope::CgroupCpu(cpu) => write!(f, "the cgroup on CPU {cpu}"),
        }
    }
}

/// Readings add (a sum of parts) and subtract (an interval), saturating: a counter that
/// went backwards gives zero, not a wrap.
impl Reading {
    pub(super) fn add(self, o: Reading) -> Reading {
        Reading {
            value: self.value.saturating_add(o.value),
            enabled: self.enabled.saturating_add(o.enabled),
            running: self.running.saturating_add(o.running),
        }
    }

    pub(super) fn sub(self, o: Reading) -> Reading {
        Reading {
            value: self.value.saturating_sub(o.value),
            enabled: self.enabled.saturating_sub(o.enabled),
            running: self.running.saturating_sub(o.running),
        }
    }

    /// The multiplexing-corrected value, None if it never ran.
    pub fn scaled(&self) -> Option<f64> {
        scale(self.value, self.enabled, self.running)
    }
}

/// One event's readings: the sum perf prints and the per-thread / per-CPU parts.
#[derive(Debug, Clone, PartialEq)]
pub struct EventReading {
    pub spec: EventSpec,
    /// Why the machine cannot count it; None when it is counted.
    pub unsupported: Option<String>,
    /// Sum of the parts' raw values and times, scaled as one (perf's aggregation).
    pub total: Reading,
    pub parts: Vec<(Scope, Reading)>,
}

/// Everything read at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CounterSnapshot {
    pub events: Vec<EventReading>,
    /// Counted per CPU (pid -1): utilization is cpu-clock per CPU.
    pub system_wide: bool,
    /// The clocks run through idle: per CPU, or a cgroup hierarchy's root (which holds
    /// the idle tasks as perf counts them); their "CPUs utilized" is labelled so.
    pub idle_in_clocks: bool,
    /// The caller asked for the per-thread breakdown in reports.
    pub per_thread: bool,
}

impl CounterSnapshot {
    /// The counts between `earlier` and `self` (interval mode). Parts absent from `earlier`
    /// (threads that appeared) count from zero; times are subtracted too, so the scaling of
    /// the delta reflects the interval's own multiplexing.
    pub fn delta(&self, earlier: &CounterSnapshot) -> CounterSnapshot {
        let events = self
            .events
            .iter()
            .enumerate()
            .map(|(i, ev)| {
                // Same position first: an event may be listed twice.
                let before = earlier
                    .events
                    .get(i)
                    .filter(|e| e.spec == ev.spec)
                    .or_else(|| earlier.events.iter().find(|e| e.spec == ev.spec));
                let parts: Vec<(Scope, Reading)> = ev
                    .parts
                    .iter()
                    .map(|(scope, r)| {
                        let old = before
                            .and_then(|b| b.parts.iter().find(|(s, _)| s == scope))
                            .map(|(_, r)| *r)
                            .unwrap_or_default();
                        (*scope, r.sub(old))
                    })
                    .collect();
                let total = parts
                    .iter()
                    .fold(Reading::default(), |acc, (_, r)| acc.add(*r));
                EventReading {
                    spec: ev.spec.clone(),
                    unsupported: ev.unsupported.clone(),
                    total,
                    parts,
                }
            })
            .collect();
        CounterSnapshot {
            events,
            system_wide: self.system_wide,
            idle_in_clocks: self.idle_in_clocks,
            per_thread: self.per_thread,
        }
    }

    pub(super) fn find(&self, type_: u32, config: u32) -> Option<&EventReading> {
        self.events
            .iter()
            .find(|e| e.spec.is(type_, config) && e.unsupported.is_none())
    }

    pub(super) fn scaled(&self, type_: u32, config: u32) -> Option<f64> {
        self.find(type_, config).and_then(|e| e.total.scaled())
    }

    /// The clock that rates and utilization divide by: task-clock for tasks, cpu-clock first
    /// when counting per CPU (where it is what perf divides by).
    pub(super) fn clock(&self) -> Option<&EventReading> {
        let task = self.find(sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_TASK_CLOCK);
        let cpu = self.find(sys::PERF_TYPE_SOFTWARE, sys::PERF_COUNT_SW_CPU_CLOCK);
        if self.system_wide {
            cpu.or(task)
        } else {
            task.or(cpu)
        }
    }
}

/// value * enabled / running, None when running == 0 (never counted) except for a
/// counter that was never enabled and counted nothing: a task counter (or a cgroup's) is
/// enabled only while its task runs, so a thread that stayed asleep reads 0, 0, 0 and
/// counted exactly 0.
pub fn scale(raw: u64, enabled: u64, running: u64) -> Option<f64> {
    if running == 0 {
        return (enabled == 0 && raw == 0).then_some(0.0);
    }
    if enabled == running {
        return Some(raw as f64);
    }
    Some(raw as f64 * (enabled as f64 / running as f64))
}

/// One event's descriptors, or the reason it has none.
#[derive(Debug)]
struct OpenEvent {
    spec: EventSpec,
    fds: Vec<(Scope, OwnedFd)>,
    unsupported: Option<String>,
}

/// Open counters for one target.
#[derive(Debug)]
pub struct Counters {
    events: Vec<OpenEvent>,
    system_wide: bool,
    idle_in_clocks: bool,
    per_thread: bool,
}

/// How an open failure is handled.
enum Failure {
    /// The machine cannot count this event: note it, go on with the others.
    Unsupported(String),
    /// The thread is gone (ESRCH): skip it.
    Gone,
    Fatal(TracerError),
}

/// errnos after which perf stat prints `<not supported>` and goes on.
fn unsupported_reason(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::ENOENT => "ENOENT: this machine's PMU does not provide the event (hardware counters are usually absent in VMs)",
        libc::EOPNOTSUPP => "EOPNOTSUPP: the PMU cannot count the event as asked (no such counter, or no privilege-level filtering)",
        libc::EINVAL => "EINVAL: the kernel rejected the event's configuration for this PMU",
        libc::ENODEV => "ENODEV: no PMU for this event on this CPU",
        libc::ENXIO => "ENXIO: no PMU for this event",
        libc::ENOSYS => "ENOSYS: the kernel has no perf events",
        libc::EBUSY => "EBUSY: the PMU is held exclusively by another user",
        _ => return None,
    })
}

fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        _ => "error",
    }
}

fn paranoid_now() -> String {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

fn classify(err: io::Error, spec: &EventSpec, scope: Scope) -> Failure {
    let errno = err.raw_os_error().unwrap_or(0);
    if let Some(reason) = unsupported_reason(errno) {
        return Failure::Unsupported(reason.to_string());
    }
    match errno {
        libc::ESRCH => Failure::Gone,
        libc::EACCES | libc::EPERM => {
            // perf_event_paranoid: 2 allows user-only per-task counting, 1 adds the kernel,
            // 0 adds per-CPU counting.
            let needed = match scope {
                Scope::Cpu(_) | Scope::CgroupCpu(_) => 0,
                _ if !spec.attr.exclude_kernel => 1,
                _ => 2,
            };
            Failure::Fatal(TracerError::PerfNotPermitted {
                event: spec.name.clone(),
                errno: errno_name(errno).to_string(),
                needed,
                paranoid: paranoid_now(),
            })
        }
        libc::EMFILE | libc::ENFILE => Failure::Fatal(TracerError::Perf {
            event: spec.name.clone(),
            what: format!(
                "opening for {scope} (one descriptor per event per thread or CPU; raise `ulimit -n`)"
            ),
            source: err,
        }),
        _ => Failure::Fatal(TracerError::Perf {
            event: spec.name.clone(),
            what: format!("opening for {scope}"),
            source: err,
        }),
    }
}

fn to_pid(id: u32) -> Option<i32> {
    i32::try_from(id).ok()
}

impl Counters {
    /// Opens every event for the target, disabled. An event the machine cannot count (ENOENT, EOPNOTSUPP,
    /// EINVAL for hw events in a VM...) is kept as unsupported with the reason; the others go on.
    /// EACCES/EPERM -> TracerError::PerfNotPermitted naming CAP_PERFMON and perf_event_paranoid.
    ///
    /// `Inherit` counters also get enable_on_exec, as perf stat's: counting starts at the
    /// command's exec even if `enable` is not called first. `per_thread` keeps the per-thread
    /// breakdown of a `Threads` target in reports; an inherited counter has no such breakdown.
    pub fn open(
        specs: &[EventSpec],
        target: &CounterTarget,
        per_thread: bool,
    ) -> Result<Counters, TracerError> {
        let scopes: Vec<Scope> = match target {
            CounterTarget::Inherit { pid } => vec![Scope::Task(*pid)],
            CounterTarget::Threads(list) => {
                let mut seen = BTreeSet::new();
                list.iter()
                    .filter(|(_, tid)| seen.insert(*tid))
                    .map(|&(tgid, tid)| Scope::Thread { tgid, tid })
                    .collect()
            }
            CounterTarget::Cpus(list) => {
                let set: BTreeSet<u32> = list.iter().copied().collect();
                set.into_iter().map(Scope::Cpu).collect()
            }
            CounterTarget::Cgroup { cpus, .. } => {
                let set: BTreeSet<u32> = cpus.iter().copied().collect();
                set.into_iter().map(Scope::CgroupCpu).collect()
            }
        };
        if scopes.is_empty() {
            return Err(TracerError::EmptyCounterTarget(match target {
                CounterTarget::Cpus(_) | CounterTarget::Cgroup { .. } => "CPU",
                _ => "thread",
            }));
        }
        // Held open while the events are opened: perf only needs it for the call.
        let cgroup_fd = match target {
            CounterTarget::Cgroup { path, .. } => Some(open_cgroup_dir(path)?),
            _ => None,
        };
        let mode = OpenMode {
            disabled: true,
            inherit: matches!(target, CounterTarget::Inherit { .. }),
            enable_on_exec: matches!(target, CounterTarget::Inherit { .. }),
        };
        let mut events = Vec::with_capacity(specs.len());
        // Threads that vanished while opening are not tried again for later events.
        let mut live = scopes;
        for spec in specs {
            let ev = open_event(spec, &live, mode, cgroup_fd.as_ref())?;
            if ev.unsupported.is_none() {
                if ev.fds.is_empty() {
                    return Err(match target {
                        CounterTarget::Inherit { pid } => TracerError::NoSuchProcess(*pid),
                        CounterTarget::Threads(list) => threads_gone(list),
                        CounterTarget::Cpus(_) | CounterTarget::Cgroup { .. } => {
                            TracerError::EmptyCounterTarget("CPU")
                        }
                    });
                }
                live = ev.fds.iter().map(|(s, _)| *s).collect();
            }
            events.push(ev);
        }
        Ok(Counters {
            events,
            system_wide: matches!(target, CounterTarget::Cpus(_)),
            idle_in_clocks: match target {
                CounterTarget::Cpus(_) => true,
                CounterTarget::Cgroup { path, .. } => crate::sys::cgroups::is_hierarchy_root(path),
                _ => false,
            },
            per_thread: per_thread && matches!(target, CounterTarget::Threads(_)),
        })
    }

    fn each_fd(
        &self,
        what: &str,
        f: impl Fn(&OwnedFd) -> io::Result<()>,
    ) -> Result<(), TracerError> {
        for ev in &self.events {
            for (scope, fd) in &ev.fds {
                f(fd).map_err(|source| TracerError::Perf {
                    event: ev.spec.name.clone(),
                    what: format!("{what} for {scope}"),
                    source,
                })?;
            }
        }
        Ok(())
    }

    pub fn enable(&self) -> Result<(), TracerError> {
        self.each_fd("enabling", sys::enable)
    }

    pub fn disable(&self) -> Result<(), TracerError> {
        self.each_fd("disabling", sys::disable)
    }

    /// Raw value, time_enabled, time_running per descriptor, summed per event.
    pub fn read(&self) -> Result<CounterSnapshot, TracerError> {
        let mut events = Vec::with_capacity(self.events.len());
        for ev in &self.events {
            let mut parts = Vec::with_capacity(ev.fds.len());
            let mut total = Reading::default();
            for (scope, fd) in &ev.fds {
                let r = sys::read(fd).map_err(|source| TracerError::Perf {
                    event: ev.spec.name.clone(),
                    what: format!("reading for {scope}"),
                    source,
                })?;
                total = total.add(r);
                parts.push((*scope, r));
            }
            events.push(EventReading {
                spec: ev.spec.clone(),
                unsupported: ev.unsupported.clone(),
                total,
                parts,
            });
        }
        Ok(CounterSnapshot {
            events,
            system_wide: self.system_wide,
            idle_in_clocks: self.idle_in_clocks,
            per_thread: self.per_thread,
        })
    }

    /// (event, reason) for notices.
    pub fn unsupported(&self) -> Vec<(String, String)> {
        self.events
            .iter()
            .filter_map(|e| {
                e.unsupported
                    .as_ref()
                    .map(|r| (e.spec.name.clone(), r.clone()))
            })
            .collect()
    }
}

/// Why no thread of a `Threads` target could be counted (every open said ESRCH). The
/// threads were read from /proc when the run started, before the programs were verified
/// (up to a second with raw-tp): a leader that started a worker and exited meanwhile is a
/// zombie perf_event_open refuses, while its process lives on. Then that is the error,
/// not "no such thread".
fn threads_gone(list: &[(u32, u32)]) -> TracerError {
    let listed: BTreeSet<u32> = list.iter().map(|t| t.1).collect();
    for &pid in list.iter().map(|(p, _)| p).collect::<BTreeSet<_>>() {
        let live: Vec<u32> = live_threads(pid)
            .into_iter()
            .filter(|t| !listed.contains(t))
            .collect();
        if !live.is_empty() {
            let tids = |v: &mut dyn Iterator<Item = u32>| {
                v.map(|t| format!("TID {t}")).collect::<Vec<_>>().join(", ")
            };
            return TracerError::ThreadsExited {
                pid,
                listed: tids(&mut list.iter().filter(|t| t.0 == pid).map(|t| t.1)),
                live: tids(&mut live.into_iter()),
            };
        }
    }
    match list {
        [(_, tid)] => TracerError::NoSuchThread(*tid),
        _ => TracerError::NoSuchProcess(list.first().map(|t| t.0).unwrap_or(0)),
    }
}

/// The threads of a process that have not exited (state neither Z nor X), from /proc:
/// perf counts the real kernel's tasks, so this reads the real /proc too.
fn live_threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out: Vec<u32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|tid| {
            // The state follows the comm, which may hold any byte, after its last ')'.
            let stat = std::fs::read(format!("/proc/{pid}/task/{tid}/stat")).unwrap_or_default();
            let state = stat
                .iter()
                .rposition(|&b| b == b')')
                .and_then(|i| stat.get(i + 2).copied());
            matches!(state, Some(s) if s != b'Z' && s != b'X')
        })
        .collect();
    out.sort_unstable();
    out
}

/// The cgroup directory as perf_event_open's `pid` for PERF_FLAG_PID_CGROUP.
fn open_cgroup_dir(path: &std::path::Path) -> Result<OwnedFd, TracerError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(path)
        .map(OwnedFd::from)
        .map_err(|source| TracerError::Read {
            path: path.to_path_buf(),
            source,
        })
}

fn open_event(
    spec: &EventSpec,
    scopes: &[Scope],
    mode: OpenMode,
    cgroup: Option<&OwnedFd>,
) -> Result<OpenEvent, TracerError> {
    let attr = sys::encode_attr(&spec.attr, mode);
    let mut fds = Vec::with_capacity(scopes.len());
    for &scope in scopes {
        // A CPU beyond i32 is refused by the kernel (ENODEV/EINVAL) as any absent one.
        let on_cpu = |cpu| Some(to_pid(cpu).unwrap_or(i32::MAX));
        let (who, cpu) = match scope {
            // A PID beyond i32 cannot exist.
            Scope::Task(pid) | Scope::Thread { tid: pid, .. } => (to_pid(pid).map(Who::Task), None),
            Scope::Cpu(cpu) => (Some(Who::AnyTask), on_cpu(cpu)),
            Scope::CgroupCpu(cpu) => (cgroup.map(|fd| Who::Cgroup(fd.as_fd())), on_cpu(cpu)),
        };
        let result = match who {
            Some(who) => sys::open(&attr, who, cpu),
            None => Err(io::Error::from_raw_os_error(libc::ESRCH)),
        };
        match result.map_err(|e| classify(e, spec, scope)) {
            Ok(fd) => fds.push((scope, fd)),
            Err(Failure::Gone) => {}
            Err(Failure::Unsupported(reason)) => {
                let reason = match scope {
                    Scope::Cpu(cpu) | Scope::CgroupCpu(cpu) => format!("{reason} (CPU {cpu})"),
                    _ => reason,
                };
                return Ok(OpenEvent {
                    spec: spec.clone(),
                    fds: Vec::new(),
                    unsupported: Some(reason),
                });
            }
            Err(Failure::Fatal(e)) => return Err(e),
        }
    }
    Ok(OpenEvent {
        spec: spec.clone(),
        fds,
        unsupported: None,
    })
}

/// Per-CPU counters (pid -1, one per CPU, enabled) for the kernel programs' perf event array, which reads
/// them at every context switch with bpf_perf_event_read_value. Unsupported -> Err with the reason.
pub fn open_per_cpu(spec: &EventSpec, cpus: &[u32]) -> Result<Vec<(u32, OwnedFd)>, TracerError> {
    if cpus.is_empty() {
        return Err(TracerError::EmptyCounterTarget("CPU"));
    }
    let attr = sys::encode_attr(&spec.attr, OpenMode::ENABLED);
    let mut out = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let scope = Scope::Cpu(cpu);
        let result = match to_pid(cpu) {
            Some(c) => sys::open(&attr, Who::AnyTask, Some(c)),
            None => Err(io::Error::from_raw_os_error(libc::ENODEV)),
        };
        match result.map_err(|e| classify(e, spec, scope)) {
            Ok(fd) => out.push((cpu, fd)),
            Err(Failure::Unsupported(reason)) => {
                return Err(TracerError::EventNotSupported {
                    event: spec.name.clone(),
                    reason: format!("{reason} (CPU {cpu})"),
                })
            }
            Err(Failure::Gone) => {
                return Err(TracerError::Perf {
                    event: spec.name.clone(),
                    what: format!("opening for {scope}"),
                    source: io::Error::from_raw_os_error(libc::ESRCH),
                })
            }
            Err(Failure::Fatal(e)) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
