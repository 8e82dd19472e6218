//! Ring-buffer records (`tracer_common::record`) to typed events.
use tracer_common::record::{
    how, kind, EventHead, SchedEvent, SlowEvent, TaskEvent, RUNTIME_UNKNOWN, SWITCH_CHAINED,
    SWITCH_PREEMPT, SWITCH_REPAIRED, SWITCH_START,
};

/// A context switch on `cpu`: `prev_tid` leaves, `next_tid` runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Switch {
    /// CLOCK_MONOTONIC ns: the accounting's timestamp of it.
    pub ts: u64,
    pub cpu: u32,
    pub prev_tid: u32,
    /// `prev->__state` as the tracepoint passed it (see [`ftrace_prev_state`]).
    pub prev_state: u32,
    /// The previous task was preempted (still runnable).
    pub preempt: bool,
    /// A switch the programs did not see, put back with an estimated time (see
    /// `tracer_common::record::SWITCH_REPAIRED`).
    pub repaired: bool,
    /// Put in front of a CPU's first switch: the task running when the programs
    /// attached, from the window's opening (`tracer_common::record::SWITCH_START`); or
    /// written at the window's close for the task still on a CPU then.
    pub edge: bool,
    /// The switch before it on this CPU is in the stream, so `runtime` is the slice
    /// between the two.
    pub chained: bool,
    /// The scheduler's runtime of the slice this switch ends (`prev_tid`'s).
    pub runtime: Option<u32>,
    pub next_tid: u32,
    pub next_tgid: u32,
    pub next_prio: i32,
    pub next_comm: String,
}

/// A task became runnable (`sched_wakeup` / `sched_wakeup_new`), seen on `cpu`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wakeup {
    /// CLOCK_MONOTONIC ns: the accounting's timestamp of it.
    pub ts: u64,
    pub cpu: u32,
    pub tid: u32,
    pub tgid: u32,
    /// The task running on `cpu` when it happened.
    pub waker_tid: u32,
    pub target_cpu: u32,
    pub prio: i32,
    pub comm: String,
    pub new: bool,
}

/// What happened to a task (`tracer record`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskChange {
    /// Created by `actor_tid` (`task_newtask`).
    New {
        clone_flags: u64,
    },
    /// Exec'd; `old_tid` is its TID before (a non-main thread takes the leader's).
    Exec {
        old_tid: u32,
        filename: String,
    },
    Exit,
    /// Its comm changed from `old_comm` to the event's `comm`.
    Rename {
        old_comm: String,
    },
    /// Moved from `orig_cpu` to `dest_cpu`.
    Migrate {
        orig_cpu: u32,
        dest_cpu: u32,
    },
}

/// A task event, seen on `cpu`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskEv {
    /// CLOCK_MONOTONIC ns.
    pub ts: u64,
    pub cpu: u32,
    pub tid: u32,
    pub tgid: u32,
    /// `current` when it happened (the parent of a new task).
    pub actor_tid: u32,
    pub prio: i32,
    /// `tid`'s comm (after a rename or exec: the new one).
    pub comm: String,
    pub change: TaskChange,
}

/// What a slow event measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlowKind {
    /// Runnable, waiting for a CPU.
    Runq,
    /// Blocked (`--off-cpu`).
    OffCpu,
}

/// How the thread became runnable (or left the CPU, off-CPU mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    Unknown,
    Wakeup,
    New,
    Preempted,
    Blocked,
}

impl How {
    pub fn name(self) -> &'static str {
        match self {
            How::Unknown => "unknown",
            How::Wakeup => "wakeup",
            How::New => "new",
            How::Preempted => "preempted",
            How::Blocked => "blocked",
        }
    }
}

/// A wait at or above `tracer slow --min`, sent when it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slow {
    /// CLOCK_MONOTONIC ns of the switch-in that ended the wait.
    pub ts_mono: u64,
    pub kind: SlowKind,
    pub cpu: u32,
    pub tid: u32,
    pub tgid: u32,
    pub comm: String,
    pub wait_ns: u64,
    pub how: How,
    pub prev_tid: u32,
    pub prev_comm: String,
    /// How long `prev_tid` had been on this CPU (0: not seen).
    pub prev_ran_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    Switch(Switch),
    Wakeup(Wakeup),
    Slow(Slow),
    Task(TaskEv),
}

/// A record that is not one of ours (short, or an unknown kind): a bug, reported.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("undecodable ring-buffer record ({len} bytes, kind {kind})")]
pub struct DecodeError {
    pub len: usize,
    pub kind: u32,
}

fn read<T: Copy>(b: &[u8]) -> Option<T> {
    (b.len() >= std::mem::size_of::<T>())
        // SAFETY: length checked; T is #[repr(C)] plain data valid for any bytes.
        .then(|| unsafe { std::ptr::read_unaligned(b.as_ptr() as *const T) })
}

/// The comm up to its first NUL (bytes that are not UTF-8 as `\xNN`).
pub fn comm_str(c: &[u8]) -> String {
    crate::model::words::from_comm(c)
}

/// Decodes one ring-buffer record.
pub fn decode(b: &[u8]) -> Result<Event, DecodeError> {
    let bad = |kind| DecodeError { len: b.len(), kind };
    let h: EventHead = read(b).ok_or(bad(0))?;
    match h.kind {
        kind::SWITCH => {
            let e: SchedEvent = read(b).ok_or(bad(h.kind))?;
            Ok(Event::Switch(Switch {
                ts: h.ts_ns,
                cpu: h.cpu,
                prev_tid: e.prev_tid,
                prev_state: e.state,
                preempt: e.flags & SWITCH_PREEMPT != 0,
                repaired: e.flags & SWITCH_REPAIRED != 0,
                edge: e.flags & SWITCH_START != 0,
                chained: e.flags & SWITCH_CHAINED != 0,
                runtime: (e.runtime != RUNTIME_UNKNOWN).then_some(e.runtime),
                next_tid: e.tid,
                next_tgid: e.tgid,
                next_prio: e.prio as i32,
                next_comm: comm_str(&e.comm),
            }))
        }
        kind::WAKEUP | kind::WAKEUP_NEW => {
            let e: SchedEvent = read(b).ok_or(bad(h.kind))?;
            Ok(Event::Wakeup(Wakeup {
                ts: h.ts_ns,
                cpu: h.cpu,
                tid: e.tid,
                tgid: e.tgid,
                waker_tid: e.prev_tid,
                target_cpu: e.state,
                prio: e.prio as i32,
                comm: comm_str(&e.comm),
                new: h.kind == kind::WAKEUP_NEW,
            }))
        }
        kind::SLOW_RUNQ | kind::SLOW_OFF_CPU => {
            let e: SlowEvent = read(b).ok_or(bad(h.kind))?;
            Ok(Event::Slow(Slow {
                ts_mono: h.ts_ns,
                kind: if h.kind == kind::SLOW_RUNQ {
                    SlowKind::Runq
                } else {
                    SlowKind::OffCpu
                },
                cpu: h.cpu,
                tid: e.tid,
                tgid: e.tgid,
                comm: comm_str(&e.comm),
                wait_ns: e.wait_ns,
                how: match e.how {
                    how::WAKEUP => How::Wakeup,
                    how::NEW => How::New,
                    how::PREEMPTED => How::Preempted,
                    how::BLOCKED => How::Blocked,
                    _ => How::Unknown,
                },
                prev_tid: e.prev_tid,
                prev_comm: comm_str(&e.prev_comm),
                prev_ran_ns: e.prev_ran_ns,
            }))
        }
        kind::NEWTASK..=kind::MIGRATE => {
            let e: TaskEvent = read(b).ok_or(bad(h.kind))?;
            let change = match h.kind {
                kind::NEWTASK => TaskChange::New {
                    clone_flags: e.clone_flags,
                },
                kind::EXEC => TaskChange::Exec {
                    old_tid: e.old,
                    filename: comm_str(&e.filename),
                },
                kind::EXIT => TaskChange::Exit,
                kind::RENAME => TaskChange::Rename {
                    old_comm: comm_str(&e.old_comm),
                },
                _ => TaskChange::Migrate {
                    orig_cpu: e.old,
                    dest_cpu: e.dest_cpu,
                },
            };
            Ok(Event::Task(TaskEv {
                ts: h.ts_ns,
                cpu: h.cpu,
                tid: e.tid,
                tgid: e.tgid,
                actor_tid: e.actor_tid,
                prio: e.prio,
                comm: comm_str(&e.comm),
                change,
            }))
        }
        k => Err(bad(k)),
    }
}

// Task states (include/linux/sched.h), stable since 4.14 for what we use.
const TASK_UNINTERRUPTIBLE: u32 = 0x2;
const TASK_REPORT: u32 = 0x7f;
const TASK_DEAD: u32 = 0x80;
const EXIT_DEAD: u32 = 0x10;
const TASK_NOLOAD: u32 = 0x400;
const TASK_IDLE: u32 = TASK_UNINTERRUPTIBLE | TASK_NOLOAD;
const TASK_RTLOCK_WAIT: u32 = 0x1000;
const TASK_REPORT_IDLE: u32 = TASK_REPORT + 1;
const TASK_REPORT_MAX: u32 = TASK_REPORT_IDLE << 1;

/// `prev_state` as the kernel's ftrace `sched_switch` record has it
/// (`__trace_sched_switch_state()`), which is what Perfetto decodes: one report bit, or
/// `TASK_REPORT_MAX` for a preempted task ("R+"). A dying task (`TASK_DEAD`, whose
/// `exit_state` the event does not carry) is reported as `EXIT_DEAD` ("X").
pub fn ftrace_prev_state(raw: u32, preempt: bool) -> i64 {
    if preempt {
        return TASK_REPORT_MAX as i64;
    }
    let state = if raw == TASK_IDLE {
        TASK_REPORT_IDLE
    } else if raw == TASK_RTLOCK_WAIT {
        TASK_UNINTERRUPTIBLE
    } else if raw & TASK_DEAD != 0 {
        EXIT_DEAD
    } else {
        raw & TASK_REPORT
    };
    // fls(): the highest bit set, as the one index the kernel reports.
    match 32 - state.leading_zeros() {
        0 => 0,
        i => 1i64 << (i - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T>(v: &T) -> Vec<u8> {
        // SAFETY: plain #[repr(C)] data.
        unsafe { std::slice::from_raw_parts(v as *const T as *const u8, std::mem::size_of::<T>()) }
            .to_vec()
    }

    #[test]
    fn switch_round_trip() {
        let mut e = SchedEvent {
            head: EventHead {
                ts_ns: 42,
                kind: kind::SWITCH,
                cpu: 1,
            },
            tid: 7,
            tgid: 5,
            prev_tid: 3,
            state: 1,
            runtime: 5000,
            prio: 120,
            flags: SWITCH_PREEMPT | SWITCH_CHAINED,
            comm: [0; 16],
        };
        e.comm[..4].copy_from_slice(b"work");
        let Event::Switch(s) = decode(&bytes(&e)).unwrap() else {
            panic!("not a switch")
        };
        assert_eq!(
            (s.ts, s.cpu, s.prev_tid, s.next_tid, s.next_tgid),
            (42, 1, 3, 7, 5)
        );
        assert!(s.preempt && s.chained && !s.repaired && !s.edge);
        assert_eq!(s.runtime, Some(5000));
        assert_eq!(s.next_comm, "work");
        assert_eq!(s.next_prio, 120);
    }

    #[test]
    fn short_or_unknown_records_are_errors() {
        assert!(decode(&[0u8; 4]).is_err());
        let h = EventHead {
            ts_ns: 1,
            kind: 99,
            cpu: 0,
        };
        assert_eq!(decode(&bytes(&h)).unwrap_err().kind, 99);
        let h = EventHead {
            ts_ns: 1,
            kind: kind::SWITCH,
            cpu: 0,
        };
        assert!(decode(&bytes(&h)).is_err(), "a head alone is too short");
    }

    #[test]
    fn prev_state_as_ftrace_reports_it() {
        assert_eq!(ftrace_prev_state(0, true), 0x100); // R+
        assert_eq!(ftrace_prev_state(0, false), 0); // R
        assert_eq!(ftrace_prev_state(1, false), 1); // S
        assert_eq!(ftrace_prev_state(2, false), 2); // D
        assert_eq!(ftrace_prev_state(TASK_IDLE, false), 0x80); // I
        assert_eq!(ftrace_prev_state(TASK_RTLOCK_WAIT, false), 2);
        assert_eq!(ftrace_prev_state(TASK_DEAD, false), 0x10); // X
        assert_eq!(ftrace_prev_state(0x40, false), 0x40); // P (parked)
        assert_eq!(ftrace_prev_state(0x1 | 0x100, false), 1); // wakekill bits ignored
    }
}
