//! Events streamed to user space by `tracer record` and `tracer slow` through the
//! `EVENTS` ring buffer. Each starts with [`EventHead`] (timestamp, kind, CPU), so user
//! space reads the kind before the rest; sizes are pinned below.

/// `RecordConfig::on` bits. 0 (`tracer run`): the programs stream nothing, and the
/// verifier drops the record paths as dead code (`.rodata` is frozen).
pub mod on {
    /// Every switch and wakeup of the traced set (`tracer record`).
    pub const SCHED: u32 = 1;
    /// Run-queue waits of at least `RecordConfig::slow_min_ns` (`tracer slow`).
    pub const SLOW_RUNQ: u32 = 2;
    /// Blocked (off-CPU) periods of at least `RecordConfig::slow_min_ns` (`tracer slow --off-cpu`).
    pub const SLOW_OFF_CPU: u32 = 4;
}

/// `EventHead::kind`.
pub mod kind {
    pub const SWITCH: u32 = 1;
    pub const WAKEUP: u32 = 2;
    pub const WAKEUP_NEW: u32 = 3;
    pub const SLOW_RUNQ: u32 = 4;
    pub const SLOW_OFF_CPU: u32 = 5;
    /// [`TaskEvent`]s (`tracer record` only): a task created (`task_newtask`), an exec,
    /// an exit, a comm change (`task_rename`), a migration (`sched_migrate_task`).
    pub const NEWTASK: u32 = 6;
    pub const EXEC: u32 = 7;
    pub const EXIT: u32 = 8;
    pub const RENAME: u32 = 9;
    pub const MIGRATE: u32 = 10;
}

/// Bytes of an exec's filename kept in a [`TaskEvent`] (longer paths are cut, the
/// NUL included).
pub const FILENAME_LEN: usize = 128;

/// `SchedEvent::flags` of a switch: the previous task was preempted (still runnable).
pub const SWITCH_PREEMPT: u16 = 1;
/// `SchedEvent::flags` of a switch the programs did not see (the kernel skipped them,
/// see `drop::UNSEEN_SWITCH_IN`), put back: the task that left this CPU next (`tid`) was
/// not the one the last switch seen here put on it (`prev_tid`). Its time is estimated
/// from `tid`'s runtime in this slice (`sum_exec_runtime - prev_sum_exec_runtime`),
/// clamped to the time since that last switch; `prev_tid`'s state is not known (0).
pub const SWITCH_REPAIRED: u16 = 2;
/// `SchedEvent::flags`: the switch before this one on this CPU is in the stream (sent,
/// not lost), so `runtime` is the scheduler's runtime of the slice between the two.
pub const SWITCH_CHAINED: u16 = 4;
/// `SchedEvent::flags` of the first switch seen on a CPU: put in front of it, the switch
/// to the task that was running when the programs attached (`tid`), at the window's
/// opening or its switch-in if later (from its runtime in this slice), as the summary
/// counts that slice; `prev_tid` and its state are not known (0).
pub const SWITCH_START: u16 = 8;
/// `SchedEvent::runtime` when not known: the slice of the idle task, a runtime the
/// kernel does not keep, or 4.29 s and more.
pub const RUNTIME_UNKNOWN: u32 = u32::MAX;

/// `SlowEvent::how`: how the waiting thread became runnable.
pub mod how {
    pub const UNKNOWN: u32 = 0;
    /// Woken from sleep (`sched_wakeup`).
    pub const WAKEUP: u32 = 1;
    /// A new thread's first wakeup (`sched_wakeup_new`).
    pub const NEW: u32 = 2;
    /// Preempted while running: it stayed runnable.
    pub const PREEMPTED: u32 = 3;
    /// Off-CPU mode: the thread blocked (slept).
    pub const BLOCKED: u32 = 4;
}

/// `ThreadStats::flags`: the thread's last wakeup was `sched_wakeup_new` (set only while
/// `tracer slow` runs). A bit of its own: `HANDED_OVER` is 2.
pub const WOKEN_NEW: u32 = 4;
const _: () = assert!(WOKEN_NEW & (crate::HAVE_RUN_DELAY | crate::HANDED_OVER) == 0);

/// The common start of every event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHead {
    /// CLOCK_MONOTONIC, the accounting's clock: a switch and a wakeup carry the very
    /// timestamps the accounting took (user space moves them to CLOCK_BOOTTIME, what
    /// Perfetto reads).
    pub ts_ns: u64,
    /// One of [`kind`].
    pub kind: u32,
    pub cpu: u32,
}

/// A switch or a wakeup (`tracer record`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedEvent {
    pub head: EventHead,
    /// Switch: the next task; wakeup: the woken task.
    pub tid: u32,
    /// TGID of `tid`.
    pub tgid: u32,
    /// Switch: the previous task; wakeup: the task running when it happened (the waker,
    /// or whatever an interrupt interrupted).
    pub prev_tid: u32,
    /// Switch: the previous task's `__state` as the tracepoint passes it; wakeup: the
    /// woken task's CPU (its target).
    pub state: u32,
    /// Switch: the scheduler's runtime of the slice that ends here (ns,
    /// [`RUNTIME_UNKNOWN`] when not known; see [`slice_runtime`]). Its start is where the scheduler began charging it, earlier than the
    /// switch-in's timestamp when the kernel skipped its clock update then (after a
    /// wakeup preemption, `rq_clock_skip_update()`). Wakeup: 0.
    pub runtime: u32,
    /// `task_struct::prio` of `tid` (-1 ..= 139).
    pub prio: i16,
    /// [`SWITCH_PREEMPT`], [`SWITCH_REPAIRED`], [`SWITCH_CHAINED`], [`SWITCH_START`].
    pub flags: u16,
    /// `tid`'s comm.
    pub comm: [u8; crate::COMM_LEN],
}

/// A task's life and identity (`tracer record`): rare next to switches, so one roomy
/// layout serves all five kinds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskEvent {
    pub head: EventHead,
    /// The task it is about: the new task, the task that exec'd (its TID after exec),
    /// exited, was renamed or migrated.
    pub tid: u32,
    pub tgid: u32,
    /// `current` when it happened (the parent of a new task).
    pub actor_tid: u32,
    /// `task_struct::prio` of `tid` (exit, migrate).
    pub prio: i32,
    /// Exec: the TID before exec (differs when a non-main thread execs); migrate: the
    /// CPU it leaves.
    pub old: u32,
    /// Migrate: the CPU it goes to.
    pub dest_cpu: u32,
    /// New task: the clone flags.
    pub clone_flags: u64,
    /// `tid`'s comm; rename: the new comm.
    pub comm: [u8; crate::COMM_LEN],
    /// Rename: the comm before it.
    pub old_comm: [u8; crate::COMM_LEN],
    /// Exec: the filename passed to exec, NUL-terminated (cut at [`FILENAME_LEN`]).
    pub filename: [u8; FILENAME_LEN],
}

/// A wait at or above the threshold (`tracer slow`), sent as it ends at a switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlowEvent {
    pub head: EventHead,
    /// The thread that waited and now runs.
    pub tid: u32,
    pub tgid: u32,
    /// The task that ran on this CPU just before (not necessarily the cause).
    pub prev_tid: u32,
    /// One of [`how`].
    pub how: u32,
    pub wait_ns: u64,
    /// How long `prev_tid` had run on this CPU since its switch-in (0: not seen).
    pub prev_ran_ns: u64,
    pub comm: [u8; crate::COMM_LEN],
    pub prev_comm: [u8; crate::COMM_LEN],
}

/// Per-CPU record state (`REC_CPU`): the last switch seen on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecCpu {
    /// CLOCK_MONOTONIC of the last switch on this CPU (`tracer slow`; 0: none seen yet).
    pub last_switch_ns: u64,
    /// CLOCK_MONOTONIC of the last switch `tracer record` saw on this CPU (0: none yet).
    pub last_ns: u64,
    /// The task that switch put on the CPU.
    pub running: u32,
    /// [`rec_cpu`] bits.
    pub flags: u32,
    /// `sum_exec_runtime` of `running` at that switch (`u64::MAX`: not read): the base
    /// of the runtime its switch-out carries (see [`slice_runtime`]).
    pub sum_in: u64,
    /// The `task_struct` address of `running` (0: not known): a task whose TID changed
    /// while it ran here (an exec from a non-main thread) is still the one switched in.
    pub task: u64,
    /// When the task leaving is not `running` (its switch-in went unseen): its
    /// `sum_exec_runtime` at its last switch-out, from its entry, read before the
    /// accounting moves it (`u64::MAX`: not known). The base of the slice the repaired
    /// switch-in begins, as the summary's: `running_slice()` is no base there, the exit
    /// path's `sched_move_task()` restarts it.
    pub prev_last_sum: u64,
}

/// `SchedEvent::runtime` of a slice that ends now: `sum` (its `sum_exec_runtime` now)
/// less `sum_in` (read at the switch-in this CPU saw for it, `u64::MAX` when none was
/// seen), as the summary counts a slice; without that base, `running`
/// (`sum_exec_runtime - prev_sum_exec_runtime`, `u64::MAX` when not known), which only
/// the fair class keeps per slice: an RT task's spans every slice since its last fair
/// pick, so its switch-in could never be moved to where the scheduler began charging
/// it (a remote wakeup preemption skips the clock update: 10-15 us a slice here).
#[inline(always)]
pub fn slice_runtime(sum: u64, sum_in: u64, running: u64) -> u32 {
    let r = if sum_in != u64::MAX && sum != 0 && sum >= sum_in {
        sum - sum_in
    } else {
        running
    };
    if r < RUNTIME_UNKNOWN as u64 {
        r as u32
    } else {
        RUNTIME_UNKNOWN
    }
}

/// `RecCpu::flags`.
pub mod rec_cpu {
    /// The last switch on this CPU is in the stream (see `SWITCH_CHAINED`).
    pub const SENT: u32 = 1;
    /// The current switch is to be sent: decided before the accounting, where a dying
    /// thread still is in the traced set.
    pub const SEND: u32 = 2;
    /// The current switch's previous task is traced.
    pub const PREV_TRACED: u32 = 4;
}

/// Indices of the per-CPU `REC_STATS` array.
pub mod stat {
    /// Events the programs tried to send.
    pub const SENT: u32 = 0;
    /// Of those, lost because the ring buffer was full (reserve failed).
    pub const DROPPED: u32 = 1;
    pub const COUNT: u32 = 2;
}

const _: () = assert!(core::mem::size_of::<EventHead>() == 16);
const _: () = assert!(core::mem::size_of::<SchedEvent>() == 56);
const _: () = assert!(core::mem::size_of::<SlowEvent>() == 80);
const _: () = assert!(core::mem::size_of::<RecCpu>() == 48);
const _: () = assert!(core::mem::size_of::<TaskEvent>() == 208);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] plain data without implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::RecCpu {}
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: u64 = u64::MAX;

    #[test]
    fn a_slice_runtime_is_the_runtime_since_its_switch_in() {
        // (sum now, sum at the switch-in, sum - prev_sum_exec_runtime) -> runtime
        let rows: &[(u64, u64, u64, u32, &str)] = &[
            (5_000, 1_000, 4_000, 4_000, "fair task: both agree"),
            (
                5_000,
                1_000,
                3_000_000,
                4_000,
                "RT task: prev_sum is its last fair pick's",
            ),
            (
                5_000,
                1_000,
                1_500,
                4_000,
                "prev_sum reset mid-slice (set_next_task_fair)",
            ),
            (
                5_000,
                NONE,
                4_000,
                4_000,
                "switch-in not seen: the fair class's figure",
            ),
            (5_000, NONE, NONE, RUNTIME_UNKNOWN, "neither known"),
            (0, 0, NONE, RUNTIME_UNKNOWN, "no task pointer: nothing read"),
            (
                1_000,
                5_000,
                700,
                700,
                "runtime went back (another task's base): fallback",
            ),
            (
                1 << 33,
                1,
                NONE,
                RUNTIME_UNKNOWN,
                "4.29 s and more do not fit",
            ),
            (7, 7, 0, 0, "a slice of no runtime"),
        ];
        for &(sum, sum_in, running, want, why) in rows {
            assert_eq!(slice_runtime(sum, sum_in, running), want, "{why}");
        }
    }
}
