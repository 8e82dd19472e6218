//! Domain errors: what went wrong in terms a user can act on.
use std::path::PathBuf;

use thiserror::Error;

#[derive(Error, Debug)]
pub enum TracerError {
    #[error("invalid duration {input:?}: {why}")]
    BadDuration { input: String, why: String },
    #[error("invalid number {0:?}")]
    BadNumber(String),
    #[error(
        "not privileged enough: tracing needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, or root); \
         try `sudo tracer ...`"
    )]
    NotPrivileged,
    #[error("no such process: PID {0} does not exist")]
    NoSuchProcess(u32),
    #[error("no such thread: TID {0} does not exist")]
    NoSuchThread(u32),
    #[error("cannot start {command:?}: {source}")]
    CommandStart {
        command: String,
        source: std::io::Error,
    },
    #[error("kernel BTF not available at {0} (the tp-btf, raw-tp and perf-sched modes read task_struct offsets from it; try --probe tracepoint)")]
    NoBtf(PathBuf),
    #[error("tracefs is not available: {0}")]
    NoTracefs(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed {path}: {why}")]
    Malformed { path: PathBuf, why: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "tracepoint {event} has no field {field:?} on this kernel (its format differs; try --probe tp-btf)"
    )]
    NoSuchField { event: String, field: String },
    #[error("unknown event {0:?} (see `perf list`; raw events are written rNNNN)")]
    UnknownEvent(String),
    #[error("cgroup {path}: {why}")]
    Cgroup { path: PathBuf, why: String },
    #[error("the eBPF object is not embedded in this build; build with `cargo xtask build`")]
    NoEbpfObject,
    #[error("not a pseries partition: {0} not found")]
    NotPseries(PathBuf),
    #[error("{path}: busy (EBUSY): another Dispatch Trace Log consumer is active; {hint}")]
    DtlBusy { path: PathBuf, hint: String },
    #[error("{path}: the kernel rejected {value:?}: {why}")]
    Rejected {
        path: PathBuf,
        value: String,
        why: String,
    },
    #[error("another tracer (PID {pid}) is changing the DTL settings (state file {path}); wait for it to exit")]
    SettingsHeld { path: PathBuf, pid: u32 },
    #[error(
        "not permitted to count perf event {event:?} ({errno}): counting needs CAP_PERFMON (or \
         CAP_SYS_ADMIN, or root) or kernel.perf_event_paranoid <= {needed} (it is {paranoid}), \
         and ptrace access to the target; try `sudo tracer ...`"
    )]
    PerfNotPermitted {
        event: String,
        errno: String,
        needed: i32,
        paranoid: String,
    },
    #[error("perf event {event:?} is not supported on this machine: {reason}")]
    EventNotSupported { event: String, reason: String },
    #[error("perf event {event:?}: {what}: {source}")]
    Perf {
        event: String,
        what: String,
        source: std::io::Error,
    },
    #[error("nothing to count: the {0} list is empty")]
    EmptyCounterTarget(&'static str),
}
