//! perf-stat-grade event counting: parse perf's event syntax, open counters with
//! `perf_event_open(2)`, read them with their enabled/running times, scale multiplexed
//! values, and derive perf stat's figures ("CPUs utilized", GHz, IPC, rates, miss ratios).
//!
//! The syscall is made directly (a `#[repr(C)]` attribute, two ioctls and `read(2)`):
//! the whole interface the tracer needs is that small, the handles stay `&self`-usable and
//! plain `OwnedFd`s (the kernel programs' perf event array takes them as they are), and no
//! library default (such as excluding the kernel unless told otherwise) sits between perf's
//! modifier rules and the bits the kernel sees.
//!
//! Modifier rules follow current perf (6.12+): `u`, `k`, `h` exclude the privilege levels not
//! named; `G` / `H` exclude the host / the guest unless both are named; an event without
//! `G`/`H` excludes neither (older perf set `exclude_guest` by default; current perf only does
//! so for `perf kvm`). A letter given twice is rejected, as perf does.
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::error::TracerError;

/// `perf_event_attr.type` values (include/uapi/linux/perf_event.h).
const TYPE_HARDWARE: u32 = 0;
pub const TYPE_SOFTWARE: u32 = 1;
const TYPE_RAW: u32 = 4;

/// Software event configs that the derived figures look for.
const SW_CPU_CLOCK: u64 = 0;
const SW_TASK_CLOCK: u64 = 1;
const SW_CONTEXT_SWITCHES: u64 = 3;

/// Generic hardware event configs that the derived figures look for.
const HW_CYCLES: u64 = 0;
const HW_INSTRUCTIONS: u64 = 1;
const HW_CACHE_REFERENCES: u64 = 2;
const HW_CACHE_MISSES: u64 = 3;
const HW_BRANCHES: u64 = 4;
const HW_BRANCH_MISSES: u64 = 5;

/// perf's symbolic names (and aliases) with their type and config.
const SYMBOLS: &[(&str, u32, u64)] = &[
    ("cpu-clock", TYPE_SOFTWARE, SW_CPU_CLOCK),
    ("task-clock", TYPE_SOFTWARE, SW_TASK_CLOCK),
    ("page-faults", TYPE_SOFTWARE, 2),
    ("faults", TYPE_SOFTWARE, 2),
    ("context-switches", TYPE_SOFTWARE, SW_CONTEXT_SWITCHES),
    ("cs", TYPE_SOFTWARE, SW_CONTEXT_SWITCHES),
    ("cpu-migrations", TYPE_SOFTWARE, 4),
    ("migrations", TYPE_SOFTWARE, 4),
    ("minor-faults", TYPE_SOFTWARE, 5),
    ("major-faults", TYPE_SOFTWARE, 6),
    ("alignment-faults", TYPE_SOFTWARE, 7),
    ("emulation-faults", TYPE_SOFTWARE, 8),
    ("cycles", TYPE_HARDWARE, HW_CYCLES),
    ("cpu-cycles", TYPE_HARDWARE, HW_CYCLES),
    ("instructions", TYPE_HARDWARE, HW_INSTRUCTIONS),
    ("cache-references", TYPE_HARDWARE, HW_CACHE_REFERENCES),
    ("cache-misses", TYPE_HARDWARE, HW_CACHE_MISSES),
    ("branches", TYPE_HARDWARE, HW_BRANCHES),
    ("branch-instructions", TYPE_HARDWARE, HW_BRANCHES),
    ("branch-misses", TYPE_HARDWARE, HW_BRANCH_MISSES),
    ("bus-cycles", TYPE_HARDWARE, 6),
    ("stalled-cycles-frontend", TYPE_HARDWARE, 7),
    ("idle-cycles-frontend", TYPE_HARDWARE, 7),
    ("stalled-cycles-backend", TYPE_HARDWARE, 8),
    ("idle-cycles-backend", TYPE_HARDWARE, 8),
    ("ref-cycles", TYPE_HARDWARE, 9),
];

/// perf stat's default event list, in its order.
const DEFAULT_EVENTS: &[&str] = &[
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "cycles",
    "instructions",
    "branches",
    "branch-misses",
];

/// The perf_event_attr fields an event spec decides; the rest (disabled, inherit, read_format)
/// depend on the target and are set at open time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct AttrFields {
    pub type_: u32,
    pub config: u64,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    pub exclude_hv: bool,
    pub exclude_guest: bool,
    pub exclude_host: bool,
}

/// One event as the user named it, resolved to what the kernel is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Exactly as the user wrote it (surrounding blanks dropped): reports print this.
    pub name: String,
    attr: AttrFields,
}

impl EventSpec {
    fn is(&self, type_: u32, config: u64) -> bool {
        self.attr.type_ == type_ && self.attr.config == config
    }

    /// task-clock and cpu-clock count nanoseconds; perf prints them in msec.
    fn is_clock(&self) -> bool {
        self.is(TYPE_SOFTWARE, SW_TASK_CLOCK) || self.is(TYPE_SOFTWARE, SW_CPU_CLOCK)
    }
}

/// Parses one perf event: a symbolic name or alias, or `rNNNN` (hex raw config), optionally
/// followed by `:` and modifiers from `u k h G H`.
pub fn parse_event(s: &str) -> Result<EventSpec, TracerError> {
    let name = s.trim();
    let unknown = || TracerError::UnknownEvent(name.to_string());
    let (base, mods) = match name.split_once(':') {
        Some((base, mods)) => (base, Some(mods)),
        None => (name, None),
    };
    let (type_, config) = resolve_base(base).ok_or_else(unknown)?;
    let mut attr = AttrFields {
        type_,
        config,
        ..AttrFields::default()
    };
    if let Some(mods) = mods {
        apply_modifiers(&mut attr, mods).ok_or_else(unknown)?;
    }
    Ok(EventSpec {
        name: name.to_string(),
        attr,
    })
}

fn resolve_base(base: &str) -> Option<(u32, u64)> {
    if let Some(&(_, type_, config)) = SYMBOLS.iter().find(|(n, _, _)| *n == base) {
        return Some((type_, config));
    }
    let hex = base.strip_prefix('r')?;
    // perf's lexer takes `r` and hex digits only: no `0x`, no sign, no blanks.
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok().map(|c| (TYPE_RAW, c))
}

/// perf's translation of modifier letters into exclude bits; None for an unknown, repeated
/// or missing letter.
fn apply_modifiers(attr: &mut AttrFields, mods: &str) -> Option<()> {
    if mods.is_empty() {
        return None;
    }
    let mut seen = BTreeSet::new();
    for c in mods.chars() {
        if !"ukhGH".contains(c) || !seen.insert(c) {
            return None;
        }
    }
    let (u, k, h) = (
        seen.contains(&'u'),
        seen.contains(&'k'),
        seen.contains(&'h'),
    );
    if u || k || h {
        // Naming any privilege level means "only these": the others are excluded.
        attr.exclude_user = !u;
        attr.exclude_kernel = !k;
        attr.exclude_hv = !h;
    }
    let (g, host) = (seen.contains(&'G'), seen.contains(&'H'));
    if g || host {
        attr.exclude_host = !host;
        attr.exclude_guest = !g;
    }
    Some(())
}

/// Parses a list as given to `-e` (already split at commas).
pub fn parse_events(list: &[String]) -> Result<Vec<EventSpec>, TracerError> {
    list.iter().map(|s| parse_event(s)).collect()
}

/// perf stat's default set, in perf's order.
pub fn default_events() -> Vec<EventSpec> {
    DEFAULT_EVENTS
        .iter()
        .filter_map(|n| parse_event(n).ok())
        .collect()
}

/// task-clock and cpu-clock: they count nanoseconds (perf prints them in msec).
pub fn is_clock(spec: &EventSpec) -> bool {
    spec.is_clock()
}

/// The perf_event_attr fields this spec sets (type, config, exclude_user/kernel/hv/guest/host),
/// testable without a syscall.
pub fn attr_fields(spec: &EventSpec) -> AttrFields {
    spec.attr
}

/// The kernel's `struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8, 136 bytes);
/// the bit fields are one `u64` (`flags`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
    config3: u64,
}

/// Bit positions in `PerfEventAttr::flags`.
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_INHERIT: u64 = 1 << 1;
const FLAG_EXCLUDE_USER: u64 = 1 << 4;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const FLAG_ENABLE_ON_EXEC: u64 = 1 << 12;
const FLAG_EXCLUDE_HOST: u64 = 1 << 19;
const FLAG_EXCLUDE_GUEST: u64 = 1 << 20;

/// PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING: value, enabled, running.
const READ_FORMAT: u64 = 1 | 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
/// `pid` is a cgroup directory fd: count the cgroup's tasks on `cpu` (perf stat -G).
const PERF_FLAG_PID_CGROUP: libc::c_ulong = 4;

/// `_IO('$', 0)` / `_IO('$', 1)`: the "no data" direction bit differs on these architectures.
#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
const IOC_NONE: u64 = 0x2000_0000;
#[cfg(not(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
)))]
const IOC_NONE: u64 = 0;
const PERF_EVENT_IOC_ENABLE: u64 = IOC_NONE | 0x2400;
const PERF_EVENT_IOC_DISABLE: u64 = IOC_NONE | 0x2401;

/// How the counter is opened besides the spec's own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpenMode {
    disabled: bool,
    inherit: bool,
    enable_on_exec: bool,
}

fn encode_attr(f: &AttrFields, mode: OpenMode) -> PerfEventAttr {
    let bit = |on: bool, b: u64| if on { b } else { 0 };
    PerfEventAttr {
        type_: f.type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: f.config,
        read_format: READ_FORMAT,
        flags: bit(mode.disabled, FLAG_DISABLED)
            | bit(mode.inherit, FLAG_INHERIT)
            | bit(mode.enable_on_exec, FLAG_ENABLE_ON_EXEC)
            | bit(f.exclude_user, FLAG_EXCLUDE_USER)
            | bit(f.exclude_kernel, FLAG_EXCLUDE_KERNEL)
            | bit(f.exclude_hv, FLAG_EXCLUDE_HV)
            | bit(f.exclude_host, FLAG_EXCLUDE_HOST)
            | bit(f.exclude_guest, FLAG_EXCLUDE_GUEST),
        ..PerfEventAttr::default()
    }
}

fn sys_perf_event_open(
    attr: &PerfEventAttr,
    pid: i32,
    cpu: i32,
    flags: libc::c_ulong,
) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr whose `size` is its own
    // size; the kernel only reads it (a size mismatch comes back as E2BIG, not a write
    // beyond it, since our size is a published PERF_ATTR_SIZE_VER).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr as *const PerfEventAttr,
            pid as libc::c_int,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC | flags,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ioctl_none(fd: &OwnedFd, request: u64) -> io::Result<()> {
    // SAFETY: ENABLE/DISABLE take no argument; the descriptor is open for our lifetime.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, 0) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// One `read(2)` of value, time_enabled, time_running. End of file (a pinned event in error
/// state) reads as never counted.
fn read_fd(fd: &OwnedFd) -> io::Result<Reading> {
    let mut buf = [0u64; 3];
    // SAFETY: `buf` is 24 writable bytes and the length passed is its size.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(&buf),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        // Enabled but never running: scales to "never counted", not to an exact 0.
        return Ok(Reading {
            value: 0,
            enabled: 1,
            running: 0,
        });
    }
    if n as usize != std::mem::size_of_val(&buf) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read of {n} bytes from a perf event"),
        ));
    }
    Ok(Reading {
        value: buf[0],
        enabled: buf[1],
        running: buf[2],
    })
}

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

/// One read of a counter (or a sum of reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

impl Reading {
    fn add(self, o: Reading) -> Reading {
        Reading {
            value: self.value.saturating_add(o.value),
            enabled: self.enabled.saturating_add(o.enabled),
            running: self.running.saturating_add(o.running),
        }
    }

    fn sub(self, o: Reading) -> Reading {
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
            per_thread: self.per_thread,
        }
    }

    fn find(&self, type_: u32, config: u64) -> Option<&EventReading> {
        self.events
            .iter()
            .find(|e| e.spec.is(type_, config) && e.unsupported.is_none())
    }

    fn scaled(&self, type_: u32, config: u64) -> Option<f64> {
        self.find(type_, config).and_then(|e| e.total.scaled())
    }

    /// The clock that rates and utilization divide by: task-clock for tasks, cpu-clock first
    /// when counting per CPU (where it is what perf divides by).
    fn clock(&self) -> Option<&EventReading> {
        let task = self.find(TYPE_SOFTWARE, SW_TASK_CLOCK);
        let cpu = self.find(TYPE_SOFTWARE, SW_CPU_CLOCK);
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
                        CounterTarget::Threads(list) if list.len() == 1 => {
                            TracerError::NoSuchThread(list[0].1)
                        }
                        CounterTarget::Threads(list) => {
                            TracerError::NoSuchProcess(list.first().map(|t| t.0).unwrap_or(0))
                        }
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
        self.each_fd("enabling", |fd| ioctl_none(fd, PERF_EVENT_IOC_ENABLE))
    }

    pub fn disable(&self) -> Result<(), TracerError> {
        self.each_fd("disabling", |fd| ioctl_none(fd, PERF_EVENT_IOC_DISABLE))
    }

    /// Raw value, time_enabled, time_running per descriptor, summed per event.
    pub fn read(&self) -> Result<CounterSnapshot, TracerError> {
        let mut events = Vec::with_capacity(self.events.len());
        for ev in &self.events {
            let mut parts = Vec::with_capacity(ev.fds.len());
            let mut total = Reading::default();
            for (scope, fd) in &ev.fds {
                let r = read_fd(fd).map_err(|source| TracerError::Perf {
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
    let attr = encode_attr(&spec.attr, mode);
    let mut fds = Vec::with_capacity(scopes.len());
    for &scope in scopes {
        let mut flags = 0;
        let (pid, cpu) = match scope {
            Scope::Task(pid) | Scope::Thread { tid: pid, .. } => (to_pid(pid), -1),
            Scope::Cpu(cpu) => (Some(-1), to_pid(cpu).unwrap_or(i32::MAX)),
            Scope::CgroupCpu(cpu) => {
                flags = PERF_FLAG_PID_CGROUP;
                (
                    cgroup.map(|fd| fd.as_raw_fd()),
                    to_pid(cpu).unwrap_or(i32::MAX),
                )
            }
        };
        let result = match pid {
            Some(pid) => sys_perf_event_open(&attr, pid, cpu, flags),
            // A PID beyond i32 cannot exist.
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
    let mode = OpenMode {
        disabled: false,
        inherit: false,
        enable_on_exec: false,
    };
    let attr = encode_attr(&spec.attr, mode);
    let mut out = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let scope = Scope::Cpu(cpu);
        let result = match to_pid(cpu) {
            Some(c) => sys_perf_event_open(&attr, -1, c, 0),
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

/// What a clock counted per CPU measures: wall time of the CPUs, idle included (`perf
/// stat -a` calls it "CPUs utilized" and says 2.000 on an idle 2-CPU machine).
pub const SYSTEM_WIDE_CLOCK_UNIT: &str = "CPUs counted (idle included)";

/// One counter as reported (JSON and text).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CounterJson {
    /// As the user wrote it.
    pub event: String,
    /// Scaled for multiplexing; msec for task-clock/cpu-clock (as perf), a count otherwise.
    /// null when not supported or never counted (running 0).
    pub value: Option<f64>,
    /// "msec" for the clocks, "" for counts (perf's units).
    pub unit: String,
    pub supported: bool,
    /// Why it is not supported.
    pub reason: Option<String>,
    /// The unscaled sum of the raw counts.
    pub raw: u64,
    pub enabled_ns: u64,
    pub running_ns: u64,
    /// running / enabled in percent: always a number when the counter was enabled at all
    /// (100.0 when not multiplexed), null when unsupported or never enabled. The text output
    /// shows it only below 100%, as perf does.
    pub running_pct: Option<f64>,
}

/// A figure perf prints after `#` on an event's line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Derived {
    /// The event whose line it belongs to.
    pub event: String,
    /// Stable identifier: cpus-utilized, ghz, ipc, rate, branch-miss-pct, cache-miss-pct.
    pub name: String,
    /// In `unit`: rates are scaled to K/M/G as perf prints them, percentages are 0..100.
    pub value: f64,
    /// perf's label: "CPUs utilized", "GHz", "insn per cycle", "/sec", "K/sec", "M/sec",
    /// "G/sec", "of all branches", "of all cache refs".
    pub unit: String,
}

/// id (tid or CPU) -> (event, value in the event's reported unit), in event order.
pub type Breakdown = BTreeMap<u32, Vec<(String, Option<f64>)>>;

/// perf stat's report for one snapshot (or interval delta).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CounterReport {
    pub counters: Vec<CounterJson>,
    pub derived: Vec<Derived>,
    /// task-clock / elapsed (or the sum of cpu-clock / elapsed system-wide).
    pub cpus_utilized: Option<f64>,
    /// System-wide: cpu-clock per CPU / elapsed.
    pub per_cpu_utilization: Option<Vec<(u32, f64)>>,
    /// tid -> (event, value) with values in the counters' units; only when asked for with a
    /// Threads target.
    pub per_thread: Option<Breakdown>,
    /// System-wide: cpu -> (event, value), as `perf stat -a -A`.
    pub per_cpu: Option<Breakdown>,
    /// The wall-clock time the figures are divided by.
    pub elapsed_ns: u64,
    /// The clock event `cpus_utilized` divides (task-clock, or cpu-clock system-wide).
    pub utilization_event: Option<String>,
}

/// The value in the reported unit (msec for clocks).
fn display_value(spec: &EventSpec, r: &Reading) -> Option<f64> {
    let v = r.scaled()?;
    Some(if spec.is_clock() { v / 1e6 } else { v })
}

/// perf's K/M/G scaling of a per-second rate.
fn rate_unit(per_sec: f64) -> (f64, &'static str) {
    if per_sec >= 1e9 {
        (per_sec / 1e9, "G/sec")
    } else if per_sec >= 1e6 {
        (per_sec / 1e6, "M/sec")
    } else if per_sec >= 1e3 {
        (per_sec / 1e3, "K/sec")
    } else {
        (per_sec, "/sec")
    }
}

fn derived_for(snap: &CounterSnapshot, ev: &EventReading, elapsed_ns: u64) -> Option<Derived> {
    if ev.unsupported.is_some() {
        return None;
    }
    let value = ev.total.scaled()?;
    let clock_ns = snap.clock().and_then(|c| c.total.scaled());
    let make = |name: &str, value: f64, unit: &str| {
        Some(Derived {
            event: ev.spec.name.clone(),
            name: name.to_string(),
            value,
            unit: unit.to_string(),
        })
    };
    let ratio = |den: Option<f64>| den.filter(|d| *d > 0.0).map(|d| value / d);
    if ev.spec.is_clock() {
        if elapsed_ns == 0 {
            return None;
        }
        // Counted per CPU, the clocks run through idle: label it, so the report's
        // headline (traced threads' on-CPU time, idle excluded) is not contradicted.
        let unit = if snap.system_wide {
            SYSTEM_WIDE_CLOCK_UNIT
        } else {
            "CPUs utilized"
        };
        return make("cpus-utilized", value / elapsed_ns as f64, unit);
    }
    if ev.spec.is(TYPE_HARDWARE, HW_CYCLES) {
        return make("ghz", ratio(clock_ns)?, "GHz");
    }
    if ev.spec.is(TYPE_HARDWARE, HW_INSTRUCTIONS) {
        if let Some(ipc) = ratio(snap.scaled(TYPE_HARDWARE, HW_CYCLES)) {
            return make("ipc", ipc, "insn per cycle");
        }
    }
    if ev.spec.is(TYPE_HARDWARE, HW_BRANCH_MISSES) {
        if let Some(r) = ratio(snap.scaled(TYPE_HARDWARE, HW_BRANCHES)) {
            return make("branch-miss-pct", r * 100.0, "of all branches");
        }
    }
    if ev.spec.is(TYPE_HARDWARE, HW_CACHE_MISSES) {
        if let Some(r) = ratio(snap.scaled(TYPE_HARDWARE, HW_CACHE_REFERENCES)) {
            return make("cache-miss-pct", r * 100.0, "of all cache refs");
        }
    }
    // perf's rates are per second of the clock event (time on CPU), not of wall time.
    let per_sec = ratio(clock_ns.map(|ns| ns / 1e9))?;
    let (v, unit) = rate_unit(per_sec);
    make("rate", v, unit)
}

/// Builds perf stat's figures from a snapshot and the wall-clock time it covers.
pub fn report(snap: &CounterSnapshot, elapsed_ns: u64) -> CounterReport {
    let counters = snap
        .events
        .iter()
        .map(|ev| {
            let supported = ev.unsupported.is_none();
            let t = ev.total;
            CounterJson {
                event: ev.spec.name.clone(),
                value: if supported {
                    display_value(&ev.spec, &t)
                } else {
                    None
                },
                unit: if ev.spec.is_clock() { "msec" } else { "" }.to_string(),
                supported,
                reason: ev.unsupported.clone(),
                raw: t.value,
                enabled_ns: t.enabled,
                running_ns: t.running,
                running_pct: (supported && t.enabled > 0)
                    .then(|| t.running as f64 * 100.0 / t.enabled as f64),
            }
        })
        .collect();
    let derived = snap
        .events
        .iter()
        .filter_map(|ev| derived_for(snap, ev, elapsed_ns))
        .collect();
    let elapsed = (elapsed_ns > 0).then_some(elapsed_ns as f64);
    let cpus_utilized = snap
        .clock()
        .and_then(|c| c.total.scaled())
        .zip(elapsed)
        .map(|(ns, el)| ns / el);
    let per_cpu_utilization = if snap.system_wide {
        snap.clock().zip(elapsed).map(|(c, el)| {
            c.parts
                .iter()
                .filter_map(|(scope, r)| match scope {
                    Scope::Cpu(cpu) => r.scaled().map(|ns| (*cpu, ns / el)),
                    _ => None,
                })
                .collect()
        })
    } else {
        None
    };
    let breakdown = |want: bool, key: fn(&Scope) -> Option<u32>| {
        if !want {
            return None;
        }
        let mut ids = BTreeSet::new();
        for ev in &snap.events {
            ids.extend(ev.parts.iter().filter_map(|(s, _)| key(s)));
        }
        let map: Breakdown = ids
            .into_iter()
            .map(|id| {
                let row = snap
                    .events
                    .iter()
                    .map(|ev| {
                        let v = ev
                            .parts
                            .iter()
                            .find(|(s, _)| key(s) == Some(id))
                            .filter(|_| ev.unsupported.is_none())
                            .and_then(|(_, r)| display_value(&ev.spec, r));
                        (ev.spec.name.clone(), v)
                    })
                    .collect();
                (id, row)
            })
            .collect();
        Some(map)
    };
    let per_thread = breakdown(snap.per_thread, |s| match s {
        Scope::Thread { tid, .. } => Some(*tid),
        _ => None,
    });
    let per_cpu = breakdown(snap.system_wide, |s| match s {
        Scope::Cpu(c) => Some(*c),
        _ => None,
    });
    CounterReport {
        counters,
        derived,
        cpus_utilized,
        per_cpu_utilization,
        per_thread,
        per_cpu,
        elapsed_ns,
        utilization_event: snap.clock().map(|c| c.spec.name.clone()),
    }
}

/// The target's task-clock in ns (scaled), None if not counted.
pub fn task_clock_ns(snap: &CounterSnapshot) -> Option<f64> {
    snap.scaled(TYPE_SOFTWARE, SW_TASK_CLOCK)
}

/// The target's context switches (scaled), None if not counted.
pub fn context_switches(snap: &CounterSnapshot) -> Option<f64> {
    snap.scaled(TYPE_SOFTWARE, SW_CONTEXT_SWITCHES)
}

/// Digits grouped by thousands with commas, as perf prints under an English locale.
fn group_thousands(s: &str) -> String {
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let (sign, digits) = match int.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", int),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + digits.len() / 3);
    out.push_str(sign);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

fn value_text(c_value: Option<f64>, unit: &str, supported: bool) -> String {
    match (supported, c_value) {
        (false, _) => "<not supported>".to_string(),
        (true, None) => "<not counted>".to_string(),
        (true, Some(v)) if unit == "msec" => group_thousands(&format!("{v:.2}")),
        (true, Some(v)) => group_thousands(&format!("{v:.0}")),
    }
}

fn metric_text(d: &Derived) -> String {
    let body = match d.name.as_str() {
        "ipc" => format!("{:7.2}  {}", d.value, d.unit),
        "branch-miss-pct" | "cache-miss-pct" => format!("{:7.2}% {}", d.value, d.unit),
        _ => format!("{:8.3} {}", d.value, d.unit),
    };
    format!("# {body:<32}")
}

/// One perf-style line: value (18 wide), unit (4), name (32), `# metric`, `(pct%)`.
fn stat_line(
    prefix: &str,
    value: &str,
    unit: &str,
    name: &str,
    metric: Option<String>,
    pct: Option<f64>,
) -> String {
    let mut line = format!("{prefix}{value:>18} {unit:<4} {name:<32} ");
    match metric {
        Some(m) => line.push_str(&m),
        None => line.push_str(&" ".repeat(34)),
    }
    if let Some(p) = pct.filter(|p| *p < 100.0) {
        line.push_str(&format!("  ({p:.2}%)"));
    }
    line.truncate(line.trim_end().len());
    line
}

/// perf stat style text: `     1,234.56 msec task-clock   #    0.987 CPUs utilized`, `<not supported>      cycles:u`,
/// running percentage `(52.31%)` when multiplexed below 100%. Pure function returning a String.
/// System-wide reports add one line per CPU for the clock, per-thread reports one block per
/// thread; the elapsed time closes it as in perf.
pub fn format_text(r: &CounterReport) -> String {
    format_text_opts(r, true)
}

/// [`format_text`], leaving out the `<not supported>` lines when `unsupported` is false
/// (interval reports after the first: the machine's PMU does not change in between).
pub fn format_text_opts(r: &CounterReport, unsupported: bool) -> String {
    let mut out = String::new();
    let hidden = r.counters.iter().filter(|c| !c.supported).count();
    for c in r.counters.iter().filter(|c| unsupported || c.supported) {
        let metric = r
            .derived
            .iter()
            .find(|d| d.event == c.event)
            .map(metric_text);
        let value = value_text(c.value, &c.unit, c.supported);
        let pct = if c.supported && c.value.is_some() {
            c.running_pct
        } else {
            None
        };
        out.push_str(&stat_line("", &value, &c.unit, &c.event, metric, pct));
        out.push('\n');
    }
    if let (Some(util), Some(per_cpu)) = (&r.per_cpu_utilization, &r.per_cpu) {
        if let Some(clock) = &r.utilization_event {
            out.push('\n');
            for (cpu, u) in util {
                let ms = per_cpu
                    .get(cpu)
                    .and_then(|row| row.iter().find(|(n, _)| n == clock))
                    .and_then(|(_, v)| *v);
                let metric = format!("# {:<32}", format!("{u:8.3} {SYSTEM_WIDE_CLOCK_UNIT}"));
                let prefix = format!("{:<8}", format!("CPU{cpu}"));
                out.push_str(&stat_line(
                    &prefix,
                    &value_text(ms, "msec", true),
                    "msec",
                    clock,
                    Some(metric),
                    None,
                ));
                out.push('\n');
            }
        }
    }
    if let Some(threads) = &r.per_thread {
        for (tid, row) in threads {
            out.push('\n');
            for (name, v) in row {
                let c = r.counters.iter().find(|c| c.event == *name);
                let unit = c.map(|c| c.unit.as_str()).unwrap_or("");
                let supported = c.map(|c| c.supported).unwrap_or(true);
                let prefix = format!("{:<12}", format!("TID {tid}"));
                out.push_str(&stat_line(
                    &prefix,
                    &value_text(*v, unit, supported),
                    unit,
                    name,
                    None,
                    None,
                ));
                out.push('\n');
            }
        }
    }
    if !unsupported && hidden > 0 {
        out.push_str(&format!(
            "   ({hidden} not supported: see the first interval)\n"
        ));
    }
    if r.elapsed_ns > 0 {
        out.push('\n');
        out.push_str(&format!(
            "{:>18.9} seconds time elapsed\n",
            r.elapsed_ns as f64 / 1e9
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(s: &str) -> AttrFields {
        attr_fields(&parse_event(s).unwrap())
    }

    /// (modifiers, exclude_user, exclude_kernel, exclude_hv, exclude_guest, exclude_host)
    const MODIFIER_TABLE: &[(&str, bool, bool, bool, bool, bool)] = &[
        ("", false, false, false, false, false),
        (":u", false, true, true, false, false),
        (":k", true, false, true, false, false),
        (":h", true, true, false, false, false),
        (":uk", false, false, true, false, false),
        (":ku", false, false, true, false, false),
        (":uh", false, true, false, false, false),
        (":kh", true, false, false, false, false),
        (":ukh", false, false, false, false, false),
        (":G", false, false, false, false, true),
        (":H", false, false, false, true, false),
        (":GH", false, false, false, false, false),
        (":HG", false, false, false, false, false),
        (":uG", false, true, true, false, true),
        (":kH", true, false, true, true, false),
        (":ukGH", false, false, true, false, false),
    ];

    #[test]
    fn modifiers_set_exactly_the_right_exclude_bits() {
        for &(m, eu, ek, eh, eg, ehost) in MODIFIER_TABLE {
            for base in ["cycles", "task-clock", "r1a8"] {
                let f = fields(&format!("{base}{m}"));
                let want = (eu, ek, eh, eg, ehost);
                let got = (
                    f.exclude_user,
                    f.exclude_kernel,
                    f.exclude_hv,
                    f.exclude_guest,
                    f.exclude_host,
                );
                assert_eq!(got, want, "{base}{m}");
                // The encoded flags word carries exactly those bits besides the mode's own.
                let mode = OpenMode {
                    disabled: true,
                    inherit: false,
                    enable_on_exec: false,
                };
                let a = encode_attr(&f, mode);
                let mut bits = FLAG_DISABLED;
                for (on, b) in [
                    (eu, FLAG_EXCLUDE_USER),
                    (ek, FLAG_EXCLUDE_KERNEL),
                    (eh, FLAG_EXCLUDE_HV),
                    (eg, FLAG_EXCLUDE_GUEST),
                    (ehost, FLAG_EXCLUDE_HOST),
                ] {
                    if on {
                        bits |= b;
                    }
                }
                assert_eq!(a.flags, bits, "{base}{m}");
            }
        }
    }

    #[test]
    fn encoded_attr_layout_and_mode_bits() {
        assert_eq!(std::mem::size_of::<PerfEventAttr>(), 136);
        let f = fields("instructions:u");
        let a = encode_attr(
            &f,
            OpenMode {
                disabled: true,
                inherit: true,
                enable_on_exec: true,
            },
        );
        assert_eq!((a.type_, a.config, a.size, a.read_format), (0, 1, 136, 3));
        assert_eq!(
            a.flags,
            FLAG_DISABLED
                | FLAG_INHERIT
                | FLAG_ENABLE_ON_EXEC
                | FLAG_EXCLUDE_KERNEL
                | FLAG_EXCLUDE_HV
        );
        assert_eq!((FLAG_EXCLUDE_HOST, FLAG_EXCLUDE_GUEST), (1 << 19, 1 << 20));
        let a = encode_attr(
            &f,
            OpenMode {
                disabled: false,
                inherit: false,
                enable_on_exec: false,
            },
        );
        assert_eq!(a.flags, FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV);
        assert_eq!(PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_ENABLE + 1);
    }

    #[test]
    fn names_aliases_and_raw() {
        let cases: &[(&str, u32, u64)] = &[
            ("task-clock", 1, 1),
            ("cpu-clock", 1, 0),
            ("context-switches", 1, 3),
            ("cs", 1, 3),
            ("cpu-migrations", 1, 4),
            ("migrations", 1, 4),
            ("page-faults", 1, 2),
            ("faults", 1, 2),
            ("minor-faults", 1, 5),
            ("major-faults", 1, 6),
            ("alignment-faults", 1, 7),
            ("emulation-faults", 1, 8),
            ("cycles", 0, 0),
            ("cpu-cycles", 0, 0),
            ("instructions", 0, 1),
            ("cache-references", 0, 2),
            ("cache-misses", 0, 3),
            ("branches", 0, 4),
            ("branch-instructions", 0, 4),
            ("branch-misses", 0, 5),
            ("bus-cycles", 0, 6),
            ("stalled-cycles-frontend", 0, 7),
            ("stalled-cycles-backend", 0, 8),
            ("ref-cycles", 0, 9),
            ("r1a8", 4, 0x1a8),
            ("r0", 4, 0),
            ("rC0", 4, 0xc0),
            ("rffffffffffffffff", 4, u64::MAX),
        ];
        for &(s, t, c) in cases {
            let spec = parse_event(s).unwrap();
            assert_eq!((spec.attr.type_, spec.attr.config), (t, c), "{s}");
            assert_eq!(spec.name, s);
        }
        assert_eq!(parse_event(" cs:u ").unwrap().name, "cs:u");
    }

    #[test]
    fn unknown_names_and_modifiers_are_rejected() {
        for s in [
            "",
            "cycle",
            "Cycles",
            "r",
            "rxyz",
            "r0x1a",
            "r-1",
            "r1ffffffffffffffff",
            "task-clock:",
            "cycles:x",
            "cycles:p",
            "cycles:uu",
            "cycles:u:k",
            "cycles:U",
            ":u",
            "cycles :u",
            "cs:GG",
            "cs:ü",
        ] {
            match parse_event(s) {
                Err(TracerError::UnknownEvent(_)) => {}
                other => panic!("{s:?} gave {other:?}"),
            }
        }
        let list = vec!["cs".to_string(), "bogus".to_string()];
        assert!(matches!(parse_events(&list), Err(TracerError::UnknownEvent(n)) if n == "bogus"));
        assert_eq!(
            parse_events(&["cs".into(), "cycles:u".into()])
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn default_set_is_perfs() {
        let names: Vec<String> = default_events().into_iter().map(|e| e.name).collect();
        assert_eq!(names, DEFAULT_EVENTS);
    }

    #[test]
    fn scaling_with_multiplexing() {
        assert_eq!(scale(1000, 0, 0), None);
        assert_eq!(scale(0, 0, 0), Some(0.0), "a task that never ran counted 0");
        assert_eq!(scale(1000, 500, 0), None);
        assert_eq!(scale(1000, 500, 500), Some(1000.0));
        assert_eq!(scale(1000, 1000, 500), Some(2000.0));
        assert_eq!(scale(0, 1000, 500), Some(0.0));
        assert_eq!(scale(u64::MAX, u64::MAX, u64::MAX), Some(u64::MAX as f64));
    }

    fn ev(name: &str, parts: &[(Scope, Reading)], unsupported: Option<&str>) -> EventReading {
        let total = parts.iter().fold(Reading::default(), |a, (_, r)| a.add(*r));
        EventReading {
            spec: parse_event(name).unwrap(),
            unsupported: unsupported.map(str::to_string),
            total,
            parts: parts.to_vec(),
        }
    }

    fn r(value: u64, enabled: u64, running: u64) -> Reading {
        Reading {
            value,
            enabled,
            running,
        }
    }

    /// A synthetic one-second run of a process: 987.65 ms on CPU.
    fn synthetic() -> CounterSnapshot {
        let t = Scope::Task(42);
        CounterSnapshot {
            events: vec![
                ev(
                    "task-clock",
                    &[(t, r(987_654_321, 987_654_321, 987_654_321))],
                    None,
                ),
                ev("cs", &[(t, r(1234, 987_654_321, 987_654_321))], None),
                ev("cycles:u", &[], Some("ENOENT: test")),
                ev(
                    "instructions",
                    &[(t, r(1_500_000_000, 1_000_000, 500_000))],
                    None,
                ),
                // Enabled but never on the PMU (multiplexed out): never counted.
                ev("page-faults", &[(t, r(0, 1_000, 0))], None),
            ],
            system_wide: false,
            per_thread: false,
        }
    }

    #[test]
    fn report_figures_and_text_golden() {
        let rep = report(&synthetic(), 1_000_000_000);
        assert!((rep.cpus_utilized.unwrap() - 0.987654321).abs() < 1e-12);
        let cs = &rep.counters[1];
        assert_eq!((cs.value, cs.running_pct), (Some(1234.0), Some(100.0)));
        let cyc = &rep.counters[2];
        assert_eq!(
            (cyc.value, cyc.supported, cyc.running_pct),
            (None, false, None)
        );
        let insn = &rep.counters[3];
        assert_eq!((insn.value, insn.running_pct), (Some(3e9), Some(50.0)));
        let pf = &rep.counters[4];
        assert_eq!((pf.value, pf.running_pct), (None, Some(0.0)));
        let names: Vec<(&str, &str, &str)> = rep
            .derived
            .iter()
            .map(|d| (d.event.as_str(), d.name.as_str(), d.unit.as_str()))
            .collect();
        // Without cycles, instructions get a rate; perf's rates are per second of task-clock.
        assert_eq!(
            names,
            vec![
                ("task-clock", "cpus-utilized", "CPUs utilized"),
                ("cs", "rate", "K/sec"),
                ("instructions", "rate", "G/sec"),
            ]
        );
        assert!((rep.derived[1].value - 1234.0 / 0.987654321 / 1e3).abs() < 1e-9);
        let text = format_text(&rep);
        let want = concat!(
            "            987.65 msec task-clock                       #    0.988 CPUs utilized\n",
            "             1,234      cs                               #    1.249 K/sec\n",
            "   <not supported>      cycles:u\n",
            "     3,000,000,000      instructions                     #    3.037 G/sec                    (50.00%)\n",
            "     <not counted>      page-faults\n",
            "\n",
            "       1.000000000 seconds time elapsed\n",
        );
        assert_eq!(text, want);
    }

    #[test]
    fn hardware_ratios() {
        let t = Scope::Task(1);
        let full = |v| r(v, 10, 10);
        let snap = CounterSnapshot {
            events: vec![
                ev("task-clock", &[(t, full(2_000_000_000))], None),
                ev("cycles", &[(t, full(6_000_000_000))], None),
                ev("instructions", &[(t, full(9_000_000_000))], None),
                ev("branches", &[(t, full(1_000_000))], None),
                ev("branch-misses", &[(t, full(12_345))], None),
                ev("cache-references", &[(t, full(1000))], None),
                ev("cache-misses", &[(t, full(250))], None),
            ],
            system_wide: false,
            per_thread: false,
        };
        let rep = report(&snap, 1_000_000_000);
        let get = |n: &str| rep.derived.iter().find(|d| d.name == n).unwrap().value;
        assert!((get("ghz") - 3.0).abs() < 1e-12);
        assert!((get("ipc") - 1.5).abs() < 1e-12);
        assert!((get("branch-miss-pct") - 1.2345).abs() < 1e-9);
        assert!((get("cache-miss-pct") - 25.0).abs() < 1e-9);
        assert!((rep.cpus_utilized.unwrap() - 2.0).abs() < 1e-12);
        let text = format_text(&rep);
        assert!(
            text.contains(
                "     6,000,000,000      cycles                           #    3.000 GHz\n"
            ),
            "{text}"
        );
        assert!(text.contains("#    1.50  insn per cycle\n"), "{text}");
        assert!(text.contains("#    1.23% of all branches\n"), "{text}");
        assert!(text.contains("#   25.00% of all cache refs\n"), "{text}");
        assert!(text.contains("#  500.000 K/sec\n"), "{text}"); // 1M branches / 2 s
    }

    #[test]
    fn json_shape() {
        let rep = report(&synthetic(), 1_000_000_000);
        let v = serde_json::to_value(&rep).unwrap();
        assert_eq!(v["counters"][0]["event"], "task-clock");
        assert_eq!(v["counters"][0]["unit"], "msec");
        assert_eq!(v["counters"][0]["running_pct"], 100.0);
        assert_eq!(v["counters"][2]["value"], serde_json::Value::Null);
        assert_eq!(v["counters"][2]["supported"], false);
        assert_eq!(v["counters"][2]["reason"], "ENOENT: test");
        assert_eq!(v["derived"][0]["unit"], "CPUs utilized");
        assert_eq!(v["per_cpu_utilization"], serde_json::Value::Null);
        assert_eq!(v["elapsed_ns"], 1_000_000_000u64);
    }

    #[test]
    fn system_wide_and_per_thread_breakdowns() {
        let c = |n| Scope::Cpu(n);
        let snap = CounterSnapshot {
            events: vec![
                ev(
                    "cpu-clock",
                    &[
                        (c(0), r(500_000_000, 500_000_000, 500_000_000)),
                        (c(1), r(250_000_000, 500_000_000, 500_000_000)),
                    ],
                    None,
                ),
                ev("cs", &[(c(0), r(10, 1, 1)), (c(1), r(30, 1, 1))], None),
            ],
            system_wide: true,
            per_thread: false,
        };
        let rep = report(&snap, 500_000_000);
        assert_eq!(rep.per_cpu_utilization, Some(vec![(0, 1.0), (1, 0.5)]));
        assert_eq!(rep.utilization_event.as_deref(), Some("cpu-clock"));
        assert!((rep.cpus_utilized.unwrap() - 1.5).abs() < 1e-12);
        assert_eq!(
            rep.per_cpu.as_ref().unwrap()[&1],
            vec![("cpu-clock".into(), Some(250.0)), ("cs".into(), Some(30.0))]
        );
        let text = format_text(&rep);
        assert!(text.contains("\nCPU1                250.00 msec cpu-clock                        #    0.500 CPUs counted (idle included)\n"), "{text}");
        assert!(
            text.contains(
                "msec cpu-clock                        #    1.500 CPUs counted (idle included)\n"
            ),
            "{text}"
        );

        let th = |tid| Scope::Thread { tgid: 7, tid };
        let snap = CounterSnapshot {
            events: vec![
                ev(
                    "task-clock",
                    &[
                        (th(7), r(3_000_000, 3_000_000, 3_000_000)),
                        (th(8), r(0, 0, 0)),
                    ],
                    None,
                ),
                ev("cycles", &[], Some("ENOENT")),
            ],
            system_wide: false,
            per_thread: true,
        };
        let rep = report(&snap, 10_000_000);
        let pt = rep.per_thread.as_ref().unwrap();
        assert_eq!(
            pt[&7],
            vec![("task-clock".into(), Some(3.0)), ("cycles".into(), None)]
        );
        // A thread that never ran while counted: 0, not "never counted".
        assert_eq!(
            pt[&8],
            vec![("task-clock".into(), Some(0.0)), ("cycles".into(), None)]
        );
        let text = format_text(&rep);
        assert!(
            text.contains("TID 7                     3.00 msec task-clock\n"),
            "{text}"
        );
        assert!(
            text.contains("TID 7          <not supported>      cycles\n"),
            "{text}"
        );
    }

    #[test]
    fn delta_subtracts_per_part() {
        let th = |tid| Scope::Thread { tgid: 1, tid };
        let a = CounterSnapshot {
            events: vec![ev("cs", &[(th(1), r(10, 100, 50))], None)],
            system_wide: false,
            per_thread: true,
        };
        let b = CounterSnapshot {
            events: vec![ev(
                "cs",
                &[(th(1), r(25, 300, 150)), (th(2), r(4, 10, 10))],
                None,
            )],
            system_wide: false,
            per_thread: true,
        };
        let d = b.delta(&a);
        assert_eq!(
            d.events[0].parts,
            vec![(th(1), r(15, 200, 100)), (th(2), r(4, 10, 10))]
        );
        assert_eq!(d.events[0].total, r(19, 210, 110));
        assert_eq!(context_switches(&d), scale(19, 210, 110));
        // Counters that went backwards (a reset) give zero, not a wrap.
        assert_eq!(a.delta(&b).events[0].parts[0].1, r(0, 0, 0));
    }

    #[test]
    fn thousands() {
        assert_eq!(group_thousands("1234567.89"), "1,234,567.89");
        assert_eq!(group_thousands("123"), "123");
        assert_eq!(group_thousands("1000"), "1,000");
        assert_eq!(group_thousands("-1234"), "-1,234");
        assert_eq!(group_thousands("inf"), "inf");
    }

    // ---- live tests: this machine, as root ----

    /// Live counting needs root and the real kernel: under qemu-user (`cargo xtask
    /// cross-test` sets TRACER_UNDER_QEMU) perf_event_open reaches the host kernel, which
    /// counts the emulator, not the guest code.
    fn is_root() -> bool {
        if std::env::var_os("TRACER_UNDER_QEMU").is_some() {
            eprintln!("(under qemu-user: live perf counters are the host's)");
            return false;
        }
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    fn thread_cputime_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write to.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    fn spin(d: std::time::Duration) {
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < d {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }

    #[test]
    fn live_task_clock_matches_thread_cputime() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        use std::sync::mpsc;
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel();
        let (exit_tx, exit_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::gettid() } as u32);
            let _ = go_rx.recv();
            let t0 = thread_cputime_ns();
            spin(std::time::Duration::from_millis(200));
            let _ = done_tx.send(thread_cputime_ns() - t0);
            let _ = exit_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        let pid = std::process::id();
        let specs = parse_events(&["task-clock".into(), "cs".into()]).unwrap();
        let counters =
            Counters::open(&specs, &CounterTarget::Threads(vec![(pid, tid)]), true).unwrap();
        counters.enable().unwrap();
        go_tx.send(()).unwrap();
        let cputime = done_rx.recv().unwrap() as f64;
        counters.disable().unwrap();
        let snap = counters.read().unwrap();
        exit_tx.send(()).unwrap();
        worker.join().unwrap();
        let tc = task_clock_ns(&snap).unwrap();
        let err = (tc - cputime).abs() / cputime;
        eprintln!(
            "task-clock {tc} ns, CLOCK_THREAD_CPUTIME_ID {cputime} ns, diff {:.3}%",
            err * 100.0
        );
        assert!(err < 0.03, "task-clock {tc} vs thread cputime {cputime}");
        let rep = report(&snap, 1);
        assert!(rep.per_thread.as_ref().unwrap().contains_key(&tid));
    }

    fn has_hardware_pmu() -> bool {
        ["cpu", "cpu_core", "cpu_atom", "armv8_pmuv3_0"]
            .iter()
            .any(|p| {
                std::path::Path::new("/sys/bus/event_source/devices")
                    .join(p)
                    .exists()
            })
    }

    #[test]
    fn live_unsupported_hardware_event_does_not_fail_the_set() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let specs = parse_events(&["task-clock".into(), "cycles:u".into(), "cs".into()]).unwrap();
        let counters = Counters::open(
            &specs,
            &CounterTarget::Threads(vec![(std::process::id(), tid)]),
            false,
        )
        .unwrap();
        counters.enable().unwrap();
        spin(std::time::Duration::from_millis(20));
        counters.disable().unwrap();
        let snap = counters.read().unwrap();
        let rep = report(&snap, 20_000_000);
        assert!(rep.counters[0].value.unwrap() > 0.0);
        if has_hardware_pmu() {
            eprintln!("this machine has a hardware PMU: cycles:u is countable here");
            return;
        }
        let unsupported = counters.unsupported();
        assert_eq!(unsupported.len(), 1, "{unsupported:?}");
        assert_eq!(unsupported[0].0, "cycles:u");
        assert_eq!(
            (rep.counters[1].value, rep.counters[1].supported),
            (None, false)
        );
        assert!(format_text(&rep).contains("   <not supported>      cycles:u\n"));
        let spec = parse_event("cycles").unwrap();
        assert!(matches!(
            open_per_cpu(&spec, &[0]),
            Err(TracerError::EventNotSupported { .. })
        ));
    }

    #[test]
    fn live_cpus_cpu_clock_sums_to_ncpus_times_elapsed() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let cpus = crate::procfs::online_cpus(&crate::root::Root::default()).unwrap();
        let specs = parse_events(&["cpu-clock".into(), "cs".into()]).unwrap();
        let counters = Counters::open(&specs, &CounterTarget::Cpus(cpus.clone()), false).unwrap();
        let t0 = std::time::Instant::now();
        counters.enable().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        counters.disable().unwrap();
        let elapsed = t0.elapsed().as_nanos() as u64;
        let snap = counters.read().unwrap();
        let rep = report(&snap, elapsed);
        let per_cpu = rep.per_cpu_utilization.clone().unwrap();
        assert_eq!(per_cpu.iter().map(|(c, _)| *c).collect::<Vec<_>>(), cpus);
        let sum: f64 = per_cpu.iter().map(|(_, u)| u).sum();
        eprintln!("{}", format_text(&rep));
        let n = cpus.len() as f64;
        assert!(
            (sum - n).abs() / n < 0.05,
            "sum of per-CPU utilization {sum} for {n} CPUs"
        );
        assert!((rep.cpus_utilized.unwrap() - sum).abs() < 1e-9);
        // The same counters, opened enabled, for the kernel programs' perf event array.
        let fds = open_per_cpu(&parse_event("cpu-clock").unwrap(), &cpus).unwrap();
        assert_eq!(fds.len(), cpus.len());
    }

    #[test]
    fn live_inherit_counts_a_command_from_exec() {
        if !is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        use std::ffi::CString;
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for the two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        let (rd, wr) = (fds[0], fds[1]);
        let script = "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done; (i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done)";
        let args: Vec<CString> = ["/bin/sh", "-c", script]
            .iter()
            .map(|a| CString::new(*a).unwrap())
            .collect();
        let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        // SAFETY: the child only calls async-signal-safe functions (close, read, execv, _exit)
        // on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: see above; the child never returns into the test harness.
            unsafe {
                let mut b = [0u8; 1];
                libc::close(wr);
                libc::read(rd, b.as_mut_ptr().cast(), 1);
                libc::execv(argv[0], argv.as_ptr());
                libc::_exit(127);
            }
        }
        let pid = pid as u32;
        // SAFETY: the parent no longer needs the read end.
        unsafe { libc::close(rd) };
        let specs = parse_events(&["task-clock".into(), "cs".into()]).unwrap();
        let counters = Counters::open(&specs, &CounterTarget::Inherit { pid }, false).unwrap();
        // enable_on_exec starts the counting: no enable() here on purpose.
        // SAFETY: closing our write end lets the child exec.
        unsafe { libc::close(wr) };
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our child; status and ru are valid to write.
        let waited = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut ru) };
        assert_eq!(waited, pid as i32);
        let snap = counters.read().unwrap();
        let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
        let rusage_ns = tv(ru.ru_utime) + tv(ru.ru_stime);
        let tc = task_clock_ns(&snap).unwrap();
        eprintln!("inherit: task-clock {tc} ns, rusage {rusage_ns} ns");
        // rusage is tick-sampled at 1/HZ granularity: a loose bound only.
        assert!(
            tc > 0.0 && (tc - rusage_ns).abs() / rusage_ns.max(1.0) < 0.15,
            "{tc} vs {rusage_ns}"
        );
    }
}
