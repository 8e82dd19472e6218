//! The accounting decisions of a switch-out, as pure functions of plain numbers: the
//! eBPF side reads the facts (clock, window, per-CPU state, the task's scheduler fields,
//! its entry) and writes the results; what the facts mean is decided here, once, and
//! tested on the host (one table row per probe mode, run-queue source and window edge).
//!
//! `u64::MAX` stands for "not known" rather than `Option`: on the BPF side an `Option`'s
//! payload is undefined on `None`, and LLVM may read it anyway, which the verifier
//! rejects (an uninitialized register).

/// Not known.
pub const UNKNOWN: u64 = u64::MAX;

/// A bit of `pending_runtime`: one of our classic tracepoint programs that run with
/// interrupts on (`sched_process_exec`, `sched_process_fork`) ran in this slice. A tick
/// landing in it finds the per-CPU BPF guard taken (`bpf_prog_active`, shared by all
/// classic tracepoint and kprobe programs), so that tick's `sched_stat_runtime` run is
/// skipped: up to a tick of runtime lost, counted as a recursion miss only since Linux
/// 6.7 (vm-test, ppc64le 6.1: an exec'd thread 4 ms under schedstat). Such a slice is
/// timed by the clock where its switch-in was seen.
pub const RUNTIME_GAP: u64 = 1 << 63;

/// What is known when a traced thread leaves a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// This switch-out, CLOCK_MONOTONIC ns.
    pub now: u64,
    /// The window's opening and close (0: still open).
    pub open: u64,
    pub close: u64,
    /// Its switch-in as seen on this CPU; 0 when no program saw it (the switch before
    /// was not reported), `open` when it ran since before the programs attached.
    pub start: u64,
    /// The first switch on this CPU since the attach: it ran since before it.
    pub at_open: bool,
    /// The start of the thread's open off-CPU period (its last switch-out; 0: none):
    /// no slice of it began before that.
    pub last_off: u64,
    /// The scheduler's runtime of this slice (`sum_exec_runtime -
    /// prev_sum_exec_runtime`), or [`UNKNOWN`].
    pub running: u64,
    /// `sum_exec_runtime` now and at the thread's last switch-out (0: unknown).
    pub sum: u64,
    pub last_sum: u64,
    /// Without BTF: `sched_stat_runtime` deltas since the last switch-out, as
    /// [`runtime_deltas`] gives them.
    pub pending_runtime: u64,
}

/// The `sched_stat_runtime` deltas a slice counts, from the entry's sum (`pending`, with
/// [`RUNTIME_GAP`]): none where a tick's may be missing and the switch-in was seen
/// (`start` != 0), for the clock to time it.
#[inline(always)]
pub fn runtime_deltas(pending: u64, start: u64) -> u64 {
    if pending & RUNTIME_GAP != 0 && start != 0 {
        0
    } else {
        pending & !RUNTIME_GAP
    }
}

/// The slice, as [`slice`] decides it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// Whether there is a slice to count, and its length (ns on CPU).
    pub counted: bool,
    pub len: u64,
    /// Wall time from the switch-in to this switch-out (cut at the close), or
    /// [`UNKNOWN`] when the switch-in was not seen.
    pub wall: u64,
    /// When the slice began by the scheduler's account: the switch-in, or `len` before
    /// now when the switch-in was not seen (0: not known).
    pub begun: u64,
    /// The runtime the scheduler charged to the slice from before its switch-in (its
    /// clock update is skipped after a wakeup preemption): taken off the off-CPU time
    /// that ended at the switch-in, which by that account was on-CPU time.
    pub credit: u64,
    /// The other side of that credit: wall time after the switch-in that the
    /// scheduler did not charge (the thread that preempts it is charged from the
    /// wakeup; interrupts and steal are not run time). The thread's off-CPU time
    /// starts that much before this switch-out.
    pub gap: u64,
}

/// A slice's length. By the scheduler's runtime where its base is known (schedstat
/// agrees with it); cut by the clock at the window's close, since the scheduler's figure
/// runs past it; a slice running at the attach counts from the later of the opening and
/// its switch-in; otherwise the scheduler's runtime of the slice, then the
/// `sched_stat_runtime` deltas (see [`runtime_deltas`]), then the wall time.
#[inline(always)]
pub fn slice(f: &Facts) -> Slice {
    let cut = f.close != 0 && f.now > f.close;
    let end = if cut { f.close } else { f.now };
    let (counted, len) = if cut {
        (end > f.start, end.saturating_sub(f.start))
    } else if f.at_open {
        // From the opening, or from its last switch-out where the programs saw one:
        // the switch that put it on this CPU may be one the kernel did not report
        // (6.18 reports none whose `prev` is one of PID 1's tokio threads), so it
        // need not have run here since the attach. A candidate cause, not reproduced,
        // of the tracer's own thread 3.2 ms above the window in CI (torture seed 10,
        // classic tracepoints, 2026-12-06).
        let from = if f.last_off > f.open {
            f.last_off
        } else {
            f.open
        };
        let since_open = f.now.saturating_sub(from);
        (
            true,
            if f.running < since_open {
                f.running
            } else {
                since_open
            },
        )
    } else if f.sum != 0 && f.last_sum != 0 && f.sum >= f.last_sum {
        (true, f.sum - f.last_sum)
    } else if f.start == 0 && f.running != UNKNOWN {
        (true, f.running)
    } else if f.pending_runtime != 0 {
        (true, f.pending_runtime)
    } else if f.start != 0 && f.now > f.start {
        (true, f.now - f.start)
    } else {
        (false, 0)
    };
    let wall = if f.at_open || f.start == 0 {
        UNKNOWN
    } else {
        end.saturating_sub(f.start)
    };
    let begun = if wall != UNKNOWN {
        f.start
    } else if counted {
        f.now.saturating_sub(len)
    } else {
        0
    };
    let (credit, gap) = if wall == UNKNOWN || !counted {
        (0, 0)
    } else {
        (len.saturating_sub(wall), wall.saturating_sub(len))
    };
    Slice {
        counted,
        len,
        wall,
        begun,
        credit,
        gap,
    }
}

/// The base of a slice's runtime (`Facts::last_sum`): the thread's `sum_exec_runtime`
/// at its last switch-out, or for its first slice the value read at its switch-in
/// (`sum_in`, [`UNKNOWN`] when not read). 0 means no base, so a new thread's 0 becomes 1
/// (its slice 1 ns short); an unknown stays unknown and no slice is taken from it.
/// Not `running`: `prev_sum_exec_runtime` is the fair class's alone (an RT task's is
/// its last fair pick's) and `set_next_task_fair` resets it without a switch. Not the
/// clock: it counts the hypervisor's steal, which the runtime leaves out.
#[inline(always)]
pub fn runtime_base(last_sum: u64, sum_in: u64) -> u64 {
    if last_sum != 0 {
        last_sum
    } else {
        sum_in | 1
    }
}

/// Where a slice stands against the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// Inside it (or cut at its close): counted.
    Inside,
    /// Begun after its close, or before its opening with the close set: nothing of it
    /// is in the window.
    Outside,
}

/// The window's close as a switch sees it at `now`: the close once it has passed, else
/// 0 (still open). A close is set ahead of time (`-d`), and the accounting reads 0 as
/// "open": a slice whose switch-in went unseen (start 0) is [`Edge::Outside`] once the
/// window has closed, but counted from the scheduler's runtime before (torture seeds
/// 996030, 996080: a pinned RT thread 12-36 slices short while the close was set from
/// the start). Without a branch: one here splits the verifier's states on the whole
/// switch path after it (tp-btf's switch program +2,271 instructions).
#[inline(always)]
pub fn passed_close(close: u64, now: u64) -> u64 {
    // All ones where `close < now` (both below 2^63: ns since boot), else 0.
    let passed = (close.wrapping_sub(now) >> 63).wrapping_neg();
    close & passed
}

#[inline(always)]
pub fn edge(start: u64, open: u64, close: u64) -> Edge {
    if close != 0 && (start >= close || start < open) {
        Edge::Outside
    } else {
        Edge::Inside
    }
}

/// The off-CPU time that ended when the slice began, `last_off` its start (0: none),
/// less the scheduler's credit to the slice.
#[inline(always)]
pub fn off_cpu(last_off: u64, begun: u64, credit: u64) -> u64 {
    if last_off != 0 && begun > last_off {
        (begun - last_off).saturating_sub(credit)
    } else {
        0
    }
}

/// The final slice of a leader an exec reaped (`de_thread()` swapped its TID mid-slice),
/// begun at `start` inside the window and ending `now`: the runtime since its last
/// switch-out (`last_sum`, 0: unknown) where known, else the wall time; a slice
/// running at the `close` (0: open) is the wall time up to it, as [`slice`] and user
/// space's read cut one.
#[inline(always)]
pub fn reaped_slice(now: u64, start: u64, close: u64, sum: u64, last_sum: u64) -> u64 {
    if close != 0 && now > close {
        close.saturating_sub(start)
    } else if last_sum != 0 && sum > last_sum {
        sum - last_sum
    } else {
        now.saturating_sub(start)
    }
}

/// The off-CPU period open at the window's `close` (0: still open) of a thread whose
/// next slice `began` after it, `last_off` the period's start (0: none): the part up to
/// the close. The kernel settles it only when that thread dies before user space's
/// final read; alive, it is added by the read (`model::window` in the tracer).
#[inline(always)]
pub fn open_off_at_close(last_off: u64, began: u64, close: u64) -> u64 {
    if close != 0 && began > close && last_off != 0 && last_off < close {
        close - last_off
    } else {
        0
    }
}

/// Where a slice began: `start`, or for a switch-in not seen (0) `now` less the
/// scheduler's runtime of the slice (`running`; None: unknown, 0).
#[inline(always)]
pub fn began(start: u64, now: u64, running: Option<u64>) -> u64 {
    if start != 0 {
        start
    } else {
        now.saturating_sub(running.unwrap_or(now))
    }
}

/// A run-queue wait from its start (`runnable`, 0: not waiting) to `ran` (the slice's
/// start), or [`UNKNOWN`].
#[inline(always)]
pub fn wait_from(runnable: u64, ran: u64) -> u64 {
    if runnable != 0 && ran > runnable {
        ran - runnable
    } else {
        UNKNOWN
    }
}

/// Whether a `sched_wakeup` of `woken` starts a run-queue wait. Not when it is the task
/// running on the waking CPU (`current`): `try_to_wake_up()` then only sets it back to
/// TASK_RUNNING (its `p == current` path) and queues nothing, so no wait starts and the
/// scheduler's `run_delay` does not grow. It happens when a sleeper's own hrtimer fires
/// in the timer interrupt after `do_nanosleep()` set TASK_INTERRUPTIBLE and before
/// `schedule()` took it off the CPU (arm64 6.1 under qemu: ~1 slice in 12). Stamped, that
/// wakeup would replace the start of the wait that ended at this slice's switch-in with
/// a time after it, and the wait would be lost ([`wait_from`] gives [`UNKNOWN`]).
#[inline(always)]
pub fn wakeup_starts_wait(woken: u32, current: u32) -> bool {
    woken != current
}

/// [`wakeup_starts_wait`] from the woken task's `on_cpu` (tp_btf: a plain load, not a
/// helper call for `current`'s TID). A task still on a CPU, this one's `current` or
/// another's, is found on its run queue (`ttwu_runnable()`): nothing is queued, no wait
/// starts. A wakeup that queues it (`ttwu_do_activate()`) comes only after its CPU let
/// go of it: `try_to_wake_up()` and `sched_ttwu_pending()` wait for `on_cpu` to clear.
#[inline(always)]
pub fn wakeup_starts_wait_on_cpu(on_cpu: i32) -> bool {
    on_cpu == 0
}

/// Whether a `sched_wakeup` that starts a wait (see [`wakeup_starts_wait`]) stamps its
/// start, given the start the thread's entry holds (`runnable`, 0: none). Not when one
/// is there: the thread is already runnable, and `try_to_wake_up()` found it on a run
/// queue (`ttwu_runnable()` still fires `sched_wakeup`). Either it was preempted and is
/// queued (its wait began at that preemption, which a later stamp would cut short), or,
/// in the `THREADS`-hash modes, it is running on another CPU and the stamp is that of the
/// wait that ended at its switch-in, which its switch-out still has to time (a stamp from
/// inside the slice loses it: a short process's 7 waits of 8 slices, torture seed 8,
/// raw-tp). A switch-out clears it (and sets it again when preempted).
#[inline(always)]
pub fn wakeup_stamps(runnable: u64) -> bool {
    runnable == 0
}

/// A run-queue wait as the scheduler's `sched_info.run_delay` grew over it (`base`:
/// its value before, [`UNKNOWN`] when not known), or [`UNKNOWN`]. Where it did not grow
/// (its clock update is skipped after a wakeup that preempts) there is no wait.
#[inline(always)]
pub fn wait_by_run_delay(run_delay: u64, base: u64) -> u64 {
    if base != UNKNOWN && run_delay > base {
        run_delay - base
    } else {
        UNKNOWN
    }
}

/// The run-queue wait that ended at a slice's start: `timed` (from the wakeup or
/// preemption, [`UNKNOWN`] when no program saw its start); else, where the thread had
/// blocked, what the scheduler's `sched_info.run_delay` grew by since that switch-out
/// (`base`, [`UNKNOWN`] when not read). A thread taken off its run queue runs again only
/// after a wakeup, so an untimed wait after a blocked switch-out is a wakeup no program
/// saw: the kernel reported neither end of the wait (see `drop::UNSEEN_SWITCH_IN`), or
/// skipped the wakeup program's run (`recursion_misses`), whether or not the switch-in
/// was seen. After a preemption the start is always kept.
#[inline(always)]
pub fn unseen_wait(timed: u64, left_blocked: bool, run_delay: u64, base: u64) -> u64 {
    if timed != UNKNOWN || !left_blocked {
        timed
    } else {
        wait_by_run_delay(run_delay, base)
    }
}

/// `sched_info.run_delay` of a task just created: `sched_fork()` zeroes `sched_info`.
/// The base of a new thread's first wait where waits come from `run_delay`.
pub const RUN_DELAY_AT_BIRTH: u64 = 0;

/// Whether the thread leaving a CPU is the task the last switch there put on it, under
/// another TID: an exec from a non-main thread, `de_thread()` swapping the TIDs of the
/// exec'ing thread and the old leader (`exchange_tids()`) while it ran. `cpu_tid`,
/// `cpu_task`: the CPU's record (the TID and task address at the switch-in; address 0
/// when the attach point gives none, classic tracepoints). `prev_task`: the address of
/// the task leaving (only compared when `cpu_task` is known). Without addresses the
/// process decides, which without a lost switch is only ever an exec: the old leader's
/// final switch under the exec'ing thread's TID (the CPU ran the leader, `cpu_tid` is
/// the TGID of the dying non-main thread), and the exec'ing thread leaving under the
/// leader's TID before `sched_process_exec` moved the CPU's record (a thread of the
/// process, `cpu_tgid`, ran here and its leader leaves alive; 0: not known).
pub fn tid_swapped(
    cpu_tid: u32,
    cpu_task: u64,
    cpu_tgid: u32,
    prev_tid: u32,
    prev_tgid: u32,
    prev_task: u64,
    dead: bool,
) -> bool {
    if cpu_tid == 0 || cpu_tid == prev_tid {
        return false;
    }
    if cpu_task != 0 {
        return cpu_task == prev_task;
    }
    if dead {
        cpu_tid == prev_tgid && prev_tid != prev_tgid
    } else {
        cpu_tgid != 0 && cpu_tgid == prev_tgid && prev_tid == prev_tgid
    }
}

#[cfg(test)]
mod tests;
