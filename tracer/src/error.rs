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
    /// Per-thread counters are opened for the threads traced once the programs are
    /// attached; they can all be gone by then while the process lives on in newer ones.
    #[error(
        "cannot count perf events for PID {pid}: {listed}, the thread(s) traced when the \
         programs were attached, exited before the counters were opened; PID {pid} lives on in {live}, \
         started since"
    )]
    ThreadsExited {
        pid: u32,
        listed: String,
        live: String,
    },
    #[error(
        "{what} {id} has already exited (a zombie its parent has not reaped): nothing to trace"
    )]
    AlreadyExited { what: &'static str, id: u32 },
    /// Every target thread exited after it was resolved and before the programs were
    /// attached (a hostile test pass: it read "nothing to count: the thread list is
    /// empty").
    #[error("{0} exited while the tracer started: nothing to trace")]
    GoneDuringStartUp(String),
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
    /// A file another user could have planted (a symlink or a file in /tmp).
    #[error("refusing to write {path}: {why}")]
    Unsafe { path: PathBuf, why: String },
    #[error(
        "tracepoint {event} has no field {field:?} on this kernel (its format differs; try --probe tp-btf)"
    )]
    NoSuchField { event: String, field: String },
    #[error("unknown event {0:?} (see `perf list`; raw events are written rNNNN)")]
    UnknownEvent(String),
    #[error("cgroup {path}: {why}")]
    Cgroup { path: PathBuf, why: String },
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
    /// A numeric option out of range; clap names the option and the value around it.
    #[error("{0}")]
    BadOption(String),
    /// The reader of standard output went away (EPIPE): the run ends quietly.
    #[error("standard output was closed")]
    OutputClosed,
    #[error("cannot write the report to standard output: {0}")]
    Output(std::io::Error),
    #[error(
        "the traced set has {wanted} threads but the per-thread maps hold {capacity}; \
         raise --max-threads (e.g. --max-threads {suggest})"
    )]
    TooManyThreads {
        wanted: usize,
        capacity: u32,
        suggest: u64,
    },
}

/// Whether `e` is about the target (gone, never there), not about how it is traced:
/// trying another probe mode would fail the same way.
pub fn about_the_target(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<TracerError>(),
            Some(
                TracerError::AlreadyExited { .. }
                    | TracerError::GoneDuringStartUp(_)
                    | TracerError::NoSuchProcess(_)
                    | TracerError::NoSuchThread(_)
                    | TracerError::ThreadsExited { .. }
            )
        )
    })
}

/// An error and its causes on one line, each cause once: messages here already end with
/// their source (`cannot read X: Permission denied`), which anyhow's `{:#}` would print
/// a second time, and aya shows an empty verifier log as an empty "Verifier output: ".
pub fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let mut t = cause.to_string();
        // aya appends ". Verifier output: " even when the log is empty.
        if let Some(i) = t.find(". Verifier output:") {
            if t[i + ". Verifier output:".len()..].trim().is_empty() {
                t.truncate(i);
            }
        }
        let t = t.trim().to_string();
        if !t.is_empty() && !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
    }
    parts.join(": ")
}

/// The exit status of a failed run: 2, except a command that could not be started,
/// which gets a shell's 127 (not found) or 126 (found, not executable), as `env`,
/// `nice`, `timeout` and `sudo` give: a script can tell the tracer's failure from the
/// command's.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    let start = e
        .chain()
        .find_map(|c| match c.downcast_ref::<TracerError>() {
            Some(TracerError::CommandStart { source, .. }) => Some(source.kind()),
            _ => None,
        });
    match start {
        Some(std::io::ErrorKind::NotFound) => 127,
        Some(std::io::ErrorKind::PermissionDenied) => 126,
        _ => 2,
    }
}

/// Whether the error (or any cause) is standard output closed by its reader.
pub fn is_output_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        matches!(
            c.downcast_ref::<TracerError>(),
            Some(TracerError::OutputClosed)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_printed_once() {
        let e: anyhow::Error = TracerError::CommandStart {
            command: "/nonexistent".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "command not found"),
        }
        .into();
        assert_eq!(
            one_line(&e),
            "cannot start \"/nonexistent\": command not found"
        );
        let e = anyhow::Error::from(TracerError::Read {
            path: "/x".into(),
            source: std::io::Error::from_raw_os_error(13),
        })
        .context("reading the targets");
        assert_eq!(
            one_line(&e),
            "reading the targets: cannot read /x: Permission denied (os error 13)"
        );
        // A cause not already in the message is kept.
        let e = anyhow::Error::from(std::io::Error::from_raw_os_error(2)).context("opening it");
        assert_eq!(
            one_line(&e),
            "opening it: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn a_target_gone_is_no_probe_modes_failure() {
        let gone = anyhow::Error::from(TracerError::AlreadyExited { what: "TID", id: 7 })
            .context("seeding the traced set");
        assert!(about_the_target(&gone));
        assert!(about_the_target(
            &TracerError::GoneDuringStartUp("PID 7".into()).into()
        ));
        assert!(!about_the_target(&anyhow::anyhow!("BTF: no such type")));
    }

    #[test]
    fn a_closed_pipe_is_recognized_through_context() {
        let e = anyhow::Error::from(TracerError::OutputClosed).context("printing");
        assert!(is_output_closed(&e));
        assert!(!is_output_closed(&anyhow::anyhow!("other")));
    }
}
