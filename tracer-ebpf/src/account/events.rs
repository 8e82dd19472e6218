//! Wakeups, execs and the scheduler's runtime records: what the accounting keeps
//! between two switches.
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use tracer_common::{drop, filter, slice, HANDED_OVER, HAVE_RUN_DELAY, REAPED_BY_EXEC};

use super::{entries::*, membership::*};
use crate::{
    maps::{count_drop, CPU_STATE, THREADS, TRACKED},
    Task,
};
/// `sched_stat_runtime`: runtime the scheduler charged to `pid` (tracepoint mode without
/// BTF). Kept in the thread's entry, not per CPU: `update_curr()` also runs for the
/// current task of a remote run queue (e.g. an enqueue there), on this CPU. A
/// `--cgroup` target keeps only its members' (`TRACKED`, as of their last switch-out):
/// a thread that left and came back ran outside meanwhile (a hostile test pass,
/// 2026-12-07; torture seed 1009034: 26 ms of it counted at its return); the slice in
/// which it came back is then timed by the clock from its switch-in.
#[inline(always)]
pub fn add_runtime(pid: u32, runtime: u64) {
    if pid == 0 {
        return;
    }
    // SAFETY: a presence test.
    if crate::task::config().mode.filter == filter::CGROUP && unsafe { TRACKED.get(pid) }.is_none()
    {
        return;
    }
    if let Some(s) = THREADS.get_ptr_mut(pid) {
        // SAFETY: map value; update_curr() for a task runs under its run queue's lock.
        unsafe { (*s).pending_runtime += runtime };
    }
}

/// One of our programs that run with interrupts on ran in `pid`'s slice, as classic
/// tracepoints (see `slice::RUNTIME_GAP`): a tick's `sched_stat_runtime` may be missing
/// from it, so that slice is timed by the clock.
#[inline(always)]
pub fn runtime_gap(pid: u32) {
    if let Some(s) = THREADS.get_ptr_mut(pid) {
        // SAFETY: map value.
        unsafe { (*s).pending_runtime |= slice::RUNTIME_GAP };
    }
}

/// A thread became runnable: its run-queue wait starts now. `new`: it was just created
/// (`sched_wakeup_new`), so its time in the window starts now too. Returns the time
/// stamped (0: not traced), for the trace's wakeup event: read back from the entry it
/// could already be the switch-in's 0 when another CPU ran the thread meanwhile.
/// A wakeup of the thread running here stamps nothing (0, see
/// `slice::wakeup_starts_wait`), nor one of a thread already runnable
/// (`slice::wakeup_stamps`).
#[inline(always)]
pub fn wakeup(p: Task, new: bool) -> u64 {
    let Some(tgid) = traced(&p) else {
        return 0;
    };
    if !new && !starts_wait(&p) {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    // A woken thread's storage that cannot be made (see `drop::WAKE_ASIDE`) keeps its
    // wakeup aside; a new thread's birth time has nowhere else to go (counted).
    let lost = if new || !in_storage(&p) {
        Some(drop::STORAGE)
    } else {
        None
    };
    let Some(s) = thread_entry(&p, tgid, new.then_some(now), lost) else {
        if lost.is_none() {
            set_wake_aside(p.tid, now);
        }
        return now;
    };
    // SAFETY: map value or task storage.
    let s = unsafe { &mut *s };
    if !new && !slice::wakeup_stamps(s.runnable_ns) {
        // Already runnable: its wait began earlier (see `slice::wakeup_stamps`).
        return 0;
    }
    s.runnable_ns = now;
    if new && s.last_sum_exec == 0 {
        // It has not run: its first slice counts from a runtime of 0, in every probe
        // mode (classic tracepoints cannot read it at the switch-in).
        s.last_sum_exec = slice::runtime_base(0, 0);
    }
    if new && s.flags & HAVE_RUN_DELAY == 0 {
        // Nor waited: `sched_fork()` zeroes its `sched_info`, so where waits come
        // from `run_delay` its first one is known even when the switch-in that ends
        // it goes unseen (`drop::UNSEEN_SWITCH_IN`; a short process lost its first
        // wait that way, torture seed 8, raw-tp).
        s.last_run_delay = slice::RUN_DELAY_AT_BIRTH;
        s.flags |= HAVE_RUN_DELAY;
    }
    now
}

/// Whether this wakeup of `p` starts a run-queue wait: from its `on_cpu` where that is
/// a plain load (tp_btf), else from `current`'s TID.
#[inline(always)]
fn starts_wait(p: &Task) -> bool {
    let off = crate::task::config().task.on_cpu;
    if p.trusted && off != 0 {
        if let Some(on_cpu) = p.field::<i32>(off) {
            return slice::wakeup_starts_wait_on_cpu(on_cpu);
        }
    }
    slice::wakeup_starts_wait(p.tid, bpf_get_current_pid_tgid() as u32)
}

/// `sched_process_exec` of a thread that was not its process's leader: `de_thread()` gave
/// it the leader's TID (`new`) and reaps the old leader. The traced set and this CPU's
/// slice (the exec'ing thread is `current`) move from `old` to `new`. Its totals so far
/// go out under `old`, which ends here (or ended at its first switch-out under `new`,
/// see `hand_over`), and it goes on from zero under `new`: one convention with the
/// trace, which names every event with the TID it had then.
#[inline(always)]
pub fn exec(t: &Task, old: u32) {
    let new = t.tid;
    if new == old || new == 0 || old == 0 {
        return;
    }
    if let Some(cs) = CPU_STATE.get_ptr_mut(0) {
        // SAFETY: per-CPU state.
        let cs = unsafe { &mut *cs };
        if cs.tid == old {
            cs.tid = new;
        }
    }
    follow_exec(old, new);
    hand_over(t, old, new, 0);
}

/// The exec'ing thread `t` (`current`, now `new`, `old` before) hands its totals over
/// under `old` and goes on from zero under `new`; in the `THREADS` hash the old
/// leader's entry under `new` is handed over first (reaped by the exec). Once per exec:
/// `mark` (`HANDED_OVER` at a switch-out) says it was done before `sched_process_exec`.
#[inline(always)]
pub(super) fn hand_over(t: &Task, old: u32, new: u32, mark: u32) {
    if in_storage(t) {
        // The entry hangs off the task.
        if let Some(s) = existing_entry(t) {
            // SAFETY: the task's storage.
            let s = unsafe { &mut *s };
            if s.flags & HANDED_OVER != 0 {
                s.flags &= !HANDED_OVER;
                return;
            }
            flush_record_as(old, new, s);
            s.restart();
            s.serial = next_serial();
            s.flags |= mark;
        }
        return;
    }
    if let Some(leader) = THREADS.get_ptr_mut(new) {
        // SAFETY: map value.
        let leader = unsafe { &mut *leader };
        if leader.flags & HANDED_OVER != 0 {
            // The exec'ing thread's own entry, handed over at a switch-out.
            leader.flags &= !HANDED_OVER;
            return;
        }
        // The old leader has not made its final switch yet: hand its totals over now.
        flush_record_as(new, REAPED_BY_EXEC, leader);
        // Sent: the TID goes on from zero, never from the leader's totals again.
        let _ = THREADS.remove(new);
    }
    let Some(s) = THREADS.get_ptr_mut(old) else {
        return;
    };
    // SAFETY: map value.
    let s = unsafe { &mut *s };
    flush_record_as(old, new, s);
    s.restart();
    s.serial = next_serial();
    s.flags |= mark;
    // By reference: the entry by value would be copied onto the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    if THREADS.insert(new, &*s, 0).is_err() {
        count_drop(drop::THREADS_FULL);
    }
    let _ = THREADS.remove(old);
}
