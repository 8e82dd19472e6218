//! A context switch: the slice of the thread leaving closed, with what ended when it
//! began (its run-queue wait, off-CPU time, migration), and the next one opened.
use aya_ebpf::helpers::{bpf_get_current_cgroup_id, bpf_get_smp_processor_id, bpf_ktime_get_ns};
use tracer_common::{
    drop, filter,
    hist::{ThreadHist, KIND_OFF_CPU, KIND_ON_CPU, KIND_RUNQ},
    slice, CpuState, ThreadStats, HANDED_OVER, HAVE_RUN_DELAY, OFF_BLOCKED, OFF_PREEMPTED,
    REAPED_BY_EXEC,
};

use super::{entries::*, events::hand_over, membership::*};
use crate::{
    maps::{count_drop, CPU_STATE, TASK_STATS},
    task::config,
    Leave, Task,
};
/// A context switch seen in one place (sched_switch): close `prev`, open `next`.
/// Returns the switch's timestamp, or 0 when neither side needed one (`tracer record`
/// stamps its event with it rather than read the clock again).
#[inline(always)]
pub fn switch(prev: Task, leave: Leave, next: Task) -> u64 {
    let now = switch_out(prev, leave);
    switch_in_at(next, now)
}

/// Closes the slice of `prev`, which is leaving the CPU, and settles everything about
/// the thread that ended when this slice began (its run-queue wait, its off-CPU time, a
/// migration): deferring those from switch-in means one `THREADS` lookup per switch.
/// Returns the timestamp taken, or 0 when none was needed.
#[inline(always)]
pub fn switch_out(prev: Task, leave: Leave) -> u64 {
    let Some(cs) = CPU_STATE.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: per-CPU state, only this CPU's switch programs touch it.
    let cs = unsafe { &mut *cs };
    let c = config();
    let (open, close) = window();
    if cs.traced != 0
        && cs.tid != prev.tid
        && slice::tid_swapped(
            cs.tid,
            cs.task,
            if cs.task == 0 && leave != Leave::Dead && prev.tid == prev.tgid {
                process_of(cs.tid)
            } else {
                0
            },
            prev.tid,
            prev.tgid,
            if cs.task != 0 { task_addr(&prev) } else { 0 },
            leave == Leave::Dead,
        )
    {
        // The task this CPU switched to, under another TID: an exec from a non-main
        // thread, `de_thread()` swapping the TIDs of the exec'ing thread and the old
        // leader (`exchange_tids()`) while it ran here.
        if leave == Leave::Dead {
            // The old leader's final switch: its totals, with this last slice (in task
            // storage the entry hangs off the task), go out under its own TID. In the
            // THREADS hash `hand_over` hands them over (or did), without the slice.
            // Not `flush_dead`: the traced set's entry for that TID is the exec'd
            // thread's.
            // Inside the bumps up to `traced`: a read in between would see the slice
            // both in the record and still running here.
            seq_bump(cs);
            if in_storage(&prev) {
                if let Some(s) = existing_entry(&prev) {
                    settle_reaped(&prev, cs, s);
                    // SAFETY: task storage of the task leaving.
                    flush_record_as(cs.tid, REAPED_BY_EXEC, unsafe { &*s });
                    flush_hist(&prev);
                    // SAFETY: a trusted task pointer (`current`).
                    unsafe { TASK_STATS.delete(prev.ptr) };
                }
            }
            cs.traced = 0;
            seq_bump(cs);
            return 0;
        }
        // The exec'ing thread, leaving before `sched_process_exec`: its TID changed
        // here, so its totals so far go out under the old one now, and this slice and
        // the next count under the new one, as the trace names them (by the TID a task
        // has when it leaves, see `record::sched_switch`).
        hand_over(&prev, cs.tid, prev.tid, HANDED_OVER);
        cs.tid = prev.tid;
    }
    // The slice began at a switch-in this CPU saw (not at the window's opening).
    let seen_in = cs.slice_start_ns > 1 && cs.tid == prev.tid && cs.traced != 0;
    let at_open = cs.slice_start_ns == 0;
    let cgroup_mode = c.mode.filter == filter::CGROUP;
    if !at_open && cs.traced != 0 && cs.tid != prev.tid {
        // The task the last switch here put on this CPU left it by a switch the kernel
        // never reported (see `drop::UNSEEN_SWITCH_OUT`): its slice is lost.
        count_drop(drop::UNSEEN_SWITCH_OUT);
    }
    let mut joined = false;
    let (prev_traced, start) = if at_open {
        // First switch on this CPU since load: prev has run since before the programs
        // attached; its slice counts from the opening, written before they attached.
        (open != 0 && member(&prev), open)
    } else if cs.tid == prev.tid && prev.tid != 0 {
        // Its switch-in was seen. In cgroup mode `switch_in_at` timed every switch-in,
        // and membership is what it is now: a thread that joined the cgroup mid-slice
        // counts from the switch-in, one that left does not count.
        let traced_now = if cgroup_mode {
            let member = cgroup_member(&prev);
            if member == Member::Out && cs.traced != 0 && leave != Leave::Dead {
                settle_leaver(&prev, cs, cs.slice_start_ns);
            }
            joined = member == Member::Joined;
            member != Member::Out
        } else {
            cs.traced != 0
        };
        (traced_now, cs.slice_start_ns)
    } else {
        // The switch-in was not seen under this TID (a program run the kernel skipped,
        // or a TID changed by exec): the slice's start is unknown (0). It is counted
        // from the scheduler's runtime where it can be, and the loss said.
        let m = if prev.tid != 0 {
            member_state(&prev)
        } else {
            Member::Out
        };
        joined = m == Member::Joined;
        if m != Member::Out {
            count_drop(drop::UNSEEN_SWITCH_IN);
        }
        (m != Member::Out, 0)
    };
    // The CPU is known from here on; switch_in sets the rest.
    cs.traced = 0;
    cs.unseen_wait_ns = 0;
    if cs.slice_start_ns == 0 {
        cs.slice_start_ns = 1;
    }
    if !prev_traced {
        // A slice not timed (begun after the window's close, its start unknown, or a
        // thread no longer in the traced set): a thread with an entry that dies in it
        // still hands over its totals.
        if leave == Leave::Dead && prev.tid != 0 {
            match existing_entry(&prev) {
                Some(s) => {
                    // SAFETY: map value or task storage.
                    let s = unsafe { &mut *s };
                    if member(&prev) {
                        settle_at_close(s, start, close);
                    }
                    flush_dead(&prev, s);
                }
                None => untrack_dead(&prev),
            }
        }
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    // From here the close is 0 until it has passed (see `slice::passed_close`).
    let close = slice::passed_close(close, now);
    if slice::edge(start, open, close) == slice::Edge::Outside {
        // Began after the close (or before the opening): nothing of it is in the window.
        // Only a death still has to be handed over. A switch-in not seen (start 0, the
        // close passed) began when the scheduler's runtime of the slice says: the sleep
        // before it is settled up to the close (torture seed 1005108: a thread asleep
        // from the opening, woken and dead after the close, kept 93% of its life).
        if leave == Leave::Dead {
            match existing_entry(&prev) {
                Some(s) => {
                    // SAFETY: map value or task storage.
                    let s = unsafe { &mut *s };
                    let began = slice::began(start, now, prev.running_slice());
                    settle_at_close(s, began, close);
                    flush_dead(&prev, s);
                }
                None => untrack_dead(&prev),
            }
        }
        return now;
    }
    // A thread that joined the cgroup has no sleep before this slice: when it came in
    // is not known, and before that it was not the target's.
    let born = if joined { Some(0) } else { None };
    let Some(s) = thread_entry(&prev, prev.tgid, born, Some(drop::STORAGE)) else {
        if leave == Leave::Dead {
            untrack_dead(&prev);
        }
        return now;
    };
    // SAFETY: map value pointer; other CPUs only touch it when this thread runs there.
    let s = unsafe { &mut *s };
    // From here to the end the entry and the histograms change (see `CpuState::seq`).
    seq_bump(cs);
    s.tgid = prev.tgid;
    if s.comm[0] == 0 {
        // Made where no name was at hand (a classic fork or exec record): user space
        // reads /proc, which a thread dying at the window's close no longer has.
        s.comm = prev.comm.read();
    }
    if c.mode.thread_cgroup != 0 {
        // `prev` is `current`: the cgroup it ran in (`tracer serve` only). A move shows
        // here first: the time before this slice was the previous cgroup's (a slice in
        // which it moved counts for the new one).
        let cg = unsafe { bpf_get_current_cgroup_id() };
        if cg != s.cgroup_id {
            s.cgroup_prev_id = s.cgroup_id;
            s.cgroup_moved_at_ns = s.on_cpu_ns;
            s.cgroup_id = cg;
        }
    }
    let id = scoped_id(c.mode.hist_scope, prev.tid, prev.tgid);
    let th = thread_hist(&prev);

    let sum = prev.sum_exec();
    // The slice as a flag and a plain number: an `Option` here leaves its payload
    // undefined on the `None` path, and LLVM may then read a register the verifier
    // deems uninitialized ("R5 !read_ok").
    let running = prev.running_slice().unwrap_or(u64::MAX);
    let unseen_in = if start == 0 && running != slice::UNKNOWN {
        now.saturating_sub(running)
    } else {
        0
    };
    // What ended when this slice began. The run-queue wait was timed at switch-in from
    // the wakeup (or preemption) time in task-local storage; or it is the scheduler's
    // own (`sched_info.run_delay` grew by it at this slice's start, `--runq-from
    // schedstat`, no wakeup programs); or it is timed from `runnable_ns` here.
    // A switch-in not seen (see `drop::UNSEEN_SWITCH_IN`) happened when the
    // scheduler's runtime of this slice says (`unseen_in`): the wait that ended
    // there is timed from the wakeup kept in the entry. (From `running`, not the
    // slice chosen below: the verifier then walks the two choices one after the
    // other, not every pair of them.)
    let wait = if c.mode.use_task_storage != 0 {
        if seen_in {
            cs.wait_ns
        } else {
            slice::wait_from(s.runnable_ns, unseen_in)
        }
    } else if let Some(rd) = prev.run_delay() {
        run_delay_wait(s, rd, cs.run_delay_in, seen_in)
    } else {
        slice::wait_from(s.runnable_ns, start.max(unseen_in))
    };
    // Where neither end of the wait was seen, the scheduler's own figure for it: the
    // growth of `run_delay` since the blocked switch-out whose value is the base. So
    // too where only the wakeup went unseen after a blocked switch-out (a thread taken
    // off its run queue runs again only after one; `slice::unseen_wait` asks): a
    // classic tracepoint program the kernel skipped (`recursion_misses`; torture seeds
    // 898136, 344936: a short process's wait 2-6 ms under run_delay).
    let wait = if wait == slice::UNKNOWN
        && (start == 0 || s.off_state == OFF_BLOCKED)
        && c.task.wait_base != 0
    {
        let rd = prev.field::<u64>(c.task.wait_base).unwrap_or(0);
        let base = if s.flags & HAVE_RUN_DELAY != 0 {
            s.last_run_delay
        } else {
            slice::UNKNOWN
        };
        let w = slice::unseen_wait(wait, s.off_state == OFF_BLOCKED, rd, base);
        if w != slice::UNKNOWN {
            cs.unseen_wait_ns = w;
        }
        w
    } else {
        wait
    };
    // With task storage, through memory, as `last_sum_exec` below: a choice between
    // known values kept in a register splits the verifier's states at every later use
    // (the fallback above cost tp_btf's program 2,000 instructions so; the THREADS
    // modes walk more with it, raw-tp 82k -> 102k).
    let wait = if c.mode.use_task_storage != 0 {
        cs.wait_ns = wait;
        // SAFETY: per-CPU state, this program's; switch_in sets it again for `next`.
        unsafe { core::ptr::read_volatile(&cs.wait_ns) }
    } else {
        wait
    };
    if wait != slice::UNKNOWN {
        s.runq_wait_ns += wait;
        s.runq_waits += 1;
        hist_add(KIND_RUNQ, id, wait, th);
    }
    let cpu = unsafe { bpf_get_smp_processor_id() };
    if s.last_cpu != u32::MAX && s.last_cpu != cpu {
        s.migrations += 1;
    }
    s.last_cpu = cpu;

    // A first slice here counts from the runtime read at its switch-in, where that was
    // this TID's on this CPU (its start timed there). Stored in the entry and read back,
    // not chosen in registers: a choice between known values would split the verifier's
    // states on every later comparison (raw-tp's record variant then passes its
    // 1M-instruction limit).
    if s.last_sum_exec == 0 && cs.tid == prev.tid && start > 1 {
        s.last_sum_exec = slice::runtime_base(0, cs.sum_in);
    }
    // SAFETY: map value or task storage.
    let last_sum = unsafe { core::ptr::read_volatile(&s.last_sum_exec) };
    // The slice, its start and the scheduler's credit and gap (see `slice::slice`).
    let sl = slice::slice(&slice::Facts {
        now,
        open,
        close,
        start,
        at_open,
        // Where the runtime is not known (classic tracepoints) it bounds a slice
        // running at the attach; with BTF the runtime does.
        last_off: if prev.trusted { 0 } else { s.last_off_ns },
        running,
        sum,
        last_sum,
        // Only classic tracepoints have deltas; `trusted` is a constant there, so the
        // BTF programs do not carry this.
        pending_runtime: if prev.trusted {
            s.pending_runtime
        } else {
            slice::runtime_deltas(s.pending_runtime, start)
        },
    });
    let (has_slice, slice) = (sl.counted, sl.len);
    s.last_sum_exec = sum;
    s.pending_runtime = 0;
    let d = slice::off_cpu(s.last_off_ns, sl.begun, sl.credit);
    if d != 0 {
        s.add_off_cpu(d);
        hist_add(KIND_OFF_CPU, id, d, th);
    }
    let gap = sl.gap;
    if has_slice {
        s.on_cpu_ns += slice;
        s.slices += 1;
        hist_add(KIND_ON_CPU, id, slice, th);
    }
    // The CPU's busy time is the slice as the scheduler charged it, as for the thread:
    // the per-CPU figures add up to the threads'. They never overlap on a CPU: after a
    // wakeup preemption the scheduler charges the woken thread from the wakeup, and the
    // thread it preempts only up to it (the boundary is one rq clock reading). Written
    // after the entry and the histograms: user space takes a read whose CPU records
    // kept their busy time for one where neither changed (`bpf/collect.rs`).
    cs.busy_ns += slice;
    add_slice_counters(cs, s, start > 1 && cs.tid == prev.tid);
    s.last_off_ns = now - gap;
    s.runnable_ns = 0;
    match leave {
        Leave::Preempted => {
            s.involuntary += 1;
            s.off_state = OFF_PREEMPTED;
            if c.task.run_delay == 0 {
                s.runnable_ns = now;
            }
        }
        Leave::Blocked => {
            s.voluntary += 1;
            s.off_state = OFF_BLOCKED;
            if c.task.wait_base != 0 {
                // The base of the next wait, should the kernel report neither its
                // wakeup nor its switch-in (see `slice::unseen_wait`).
                if let Some(rd) = prev.field::<u64>(c.task.wait_base) {
                    s.last_run_delay = rd;
                    s.flags |= HAVE_RUN_DELAY;
                }
            }
        }
        Leave::Dead => {
            s.voluntary += 1;
            flush_dead(&prev, s);
        }
    }
    seq_bump(cs);
    now
}

/// Moves this CPU's `seq` on by one: odd while a switch program writes a traced
/// thread's entry and the histograms, even when done (`bpf/collect.rs` keeps a read only
/// where it is even and unchanged across it). Volatile, so the two bumps never merge;
/// the entry's and histograms' stores stay between them as the compiler cannot tell
/// those map values from this one (`compiler_fence` does not lower to BPF). Not an
/// atomic: x86 keeps stores in order (a `lock` would cost every traced switch); a weakly
/// ordered CPU may show another CPU's writes out of order, which a read then misses.
#[inline(always)]
fn seq_bump(cs: &mut CpuState) {
    // SAFETY: per-CPU state, only this CPU's switch programs write it.
    unsafe {
        let n = core::ptr::read_volatile(&cs.seq);
        core::ptr::write_volatile(&mut cs.seq, n.wrapping_add(1));
    }
}

/// A thread that left a `--cgroup` target during this slice (a member at its switch-in,
/// not now): what ended when the slice began, its wait and its off-CPU time, was the
/// target's; the slice is not (the move is not timed, and a joiner's slice counts whole
/// from its switch-in). Nothing stays open after it: user space adds no off-CPU period
/// to a thread that left (torture seed 235494: a leaver's last 1.8 ms wait was lost).
// Not inlined: a call the configuration leaves dead costs the other modes nothing,
// where inlined code reshaped the shared path (tp-btf system-wide +555 instructions).
#[inline(never)]
fn settle_leaver(prev: &Task, cs: &mut CpuState, start: u64) {
    let Some(s) = existing_entry(prev) else {
        return;
    };
    // SAFETY: map value or task storage of the task leaving.
    let s = unsafe { &mut *s };
    seq_bump(cs);
    let c = config();
    let id = scoped_id(c.mode.hist_scope, prev.tid, prev.tgid);
    let th = thread_hist(prev);
    let wait = if let Some(rd) = prev.run_delay() {
        // `--runq-from schedstat`: its growth since the last switch-out (or since this
        // slice's switch-in read it), as at any switch-out. From the wakeup it was lost
        // in this mode, which stamps none (torture seed 997059: a leaver's last wait,
        // 3.9 ms).
        run_delay_wait(s, rd, cs.run_delay_in, true)
    } else if c.mode.use_task_storage != 0 {
        cs.wait_ns
    } else {
        slice::wait_from(s.runnable_ns, start)
    };
    count_before(s, id, th, wait, slice::off_cpu(s.last_off_ns, start, 0));
    // Volatile: two adjacent zero stores become a 16-byte `memset` call out of line.
    // SAFETY: fields of the entry in hand.
    unsafe {
        core::ptr::write_volatile(&mut s.last_off_ns, 0);
        core::ptr::write_volatile(&mut s.runnable_ns, 0);
    }
    // Should it come back, its waits outside are not the target's either (see
    // `membership::cgroup_member`).
    s.flags &= !HAVE_RUN_DELAY;
    seq_bump(cs);
}

/// The old leader's final slice, in which an exec from another thread of its process
/// swapped their TIDs (`de_thread()` waits for the leader's `exit_state`, set before
/// its final switch): with what ended when it began, counted under the TID the slice
/// began with (`cs.tid`, the entry's), as the trace shows it. Its slice can be long: a
/// leader running when the exec killed it runs on to its exit (2-6 ms seen).
// Not inlined: the configuration-dead call costs the other modes nothing.
#[inline(never)]
fn settle_reaped(prev: &Task, cs: &mut CpuState, s: *mut ThreadStats) {
    let (open, close) = window();
    let start = cs.slice_start_ns;
    if start <= 1 || cs.traced == 0 || slice::edge(start, open, close) == slice::Edge::Outside {
        // Its switch-in was not seen (or not timed), or it is outside the window.
        return;
    }
    // SAFETY: task storage of the task leaving, only this CPU's program touches it now.
    let s = unsafe { &mut *s };
    let now = unsafe { bpf_ktime_get_ns() };
    // By the scheduler's runtime since its last switch-out (the exit path's
    // `sched_move_task()` restarts `prev_sum_exec_runtime`, see `record::switch`), cut
    // at the close; the wall time where that base is not known. Not `slice::slice`:
    // its walk here cost the default program 1,300 verified instructions.
    let len = slice::reaped_slice(now, start, close, prev.sum_exec(), s.last_sum_exec);
    let c = config();
    let id = scoped_id(c.mode.hist_scope, cs.tid, prev.tgid);
    let th = thread_hist(prev);
    // Runtime charged from before the switch-in (see `slice::Slice::credit`) is not
    // off-CPU time too.
    let wall = now
        .min(if close != 0 { close } else { now })
        .saturating_sub(start);
    count_before(
        s,
        id,
        th,
        cs.wait_ns,
        slice::off_cpu(s.last_off_ns, start, len.saturating_sub(wall)),
    );
    s.on_cpu_ns += len;
    s.slices += 1;
    hist_add(KIND_ON_CPU, id, len, th);
    cs.busy_ns += len;
    s.voluntary += 1;
}

/// What ended when a slice began: its run-queue wait (`slice::UNKNOWN`: none) and the
/// off-CPU period before it (0: none).
#[inline(always)]
fn count_before(s: &mut ThreadStats, id: u32, th: *mut ThreadHist, wait: u64, off: u64) {
    if wait != slice::UNKNOWN {
        s.runq_wait_ns += wait;
        s.runq_waits += 1;
        hist_add(KIND_RUNQ, id, wait, th);
    }
    if off != 0 {
        s.add_off_cpu(off);
        hist_add(KIND_OFF_CPU, id, off, th);
    }
}

/// A thread asleep at the close that dies after it, before user space's final read:
/// the off-CPU period open at the close is the window's, as the read counts it for a
/// thread still alive then (`model::window`). Torture seeds 36604 and 36616 lost the
/// ~30 ms a main thread slept before a close this way (2026-12-06, under load).
#[inline(always)]
fn settle_at_close(s: &mut ThreadStats, start: u64, close: u64) {
    let d = slice::open_off_at_close(s.last_off_ns, start, close);
    if d != 0 {
        s.add_off_cpu(d);
        s.last_off_ns = close;
    }
}

/// Opens the slice of `next`, which is about to run (perf-sched: has just started).
#[inline(always)]
pub fn switch_in(next: Task) {
    switch_in_at(next, 0);
}

/// Only per-CPU state: which thread runs here since when. Its entry is touched when it
/// leaves (see `switch_out`). Returns `now`, read here if it was 0 and a start is kept.
#[inline(always)]
fn switch_in_at(next: Task, mut now: u64) -> u64 {
    let Some(cs) = CPU_STATE.get_ptr_mut(0) else {
        return now;
    };
    // SAFETY: per-CPU state.
    let cs = unsafe { &mut *cs };
    cs.tid = next.tid;
    cs.task = next.ptr as u64;
    cs.traced = 0;
    cs.sum_in = slice::UNKNOWN;
    let c = config();
    if traced(&next).is_none() {
        if c.mode.filter == filter::CGROUP && next.tid != 0 {
            // It may join the cgroup before it leaves the CPU (`cgroup_member`): its
            // slice then counts from here, so the start must be known.
            if now == 0 {
                now = unsafe { bpf_ktime_get_ns() };
            }
            cs.slice_start_ns = now;
            cs.sum_in = sum_in(&next);
            // And its `--slice-event` deltas too: the base of the CPU's last member
            // would charge it all that ran here since.
            take_counter_base(cs);
            return now;
        }
        // Untraced or idle: the CPU is known, so the next switch-out does not take this
        // thread for one that ran since before the window.
        if cs.slice_start_ns == 0 {
            cs.slice_start_ns = 1;
        }
        return now;
    }
    if now == 0 {
        now = unsafe { bpf_ktime_get_ns() };
    }
    let (_, close) = window();
    if close != 0 && now > close {
        // The window has closed: no new slice is counted.
        cs.slice_start_ns = now;
        return now;
    }
    cs.traced = 1;
    cs.slice_start_ns = now;
    cs.sum_in = sum_in(&next);
    cs.run_delay_in = if next.ptr.is_null() {
        u64::MAX
    } else {
        next.run_delay().unwrap_or(u64::MAX)
    };
    // Volatile: beside `run_delay_in`'s fallback, LLVM merged the two all-ones stores
    // into a `memset` call, a byte loop the verifier walks (see `crate::mem`).
    // SAFETY: a store through a unique reference.
    unsafe { core::ptr::write_volatile(&mut cs.wait_ns, u64::MAX) };
    if in_storage(&next) {
        // The wait ends here; its start is in the task's storage (no hash lookup).
        // SAFETY: a trusted task pointer (tp_btf argument).
        if let Some(s) = unsafe { TASK_STATS.get(next.ptr, None) } {
            // SAFETY: the task's storage; only its own switches and wakeups touch it.
            let s = unsafe { &mut *s };
            cs.wait_ns = slice::wait_from(s.runnable_ns, now);
            s.runnable_ns = 0;
        } else if let Some(at) = take_wake_aside(next.tid) {
            // Its wakeup could not make its storage; its switch-out will.
            cs.wait_ns = slice::wait_from(at, now);
        }
    }
    take_counter_base(cs);
    now
}

/// The runtime of `next` before this slice (see `CpuState::sum_in`). Without a pointer
/// (classic tracepoints) the task at hand would be `current`, the one leaving.
#[inline(always)]
fn sum_in(next: &Task) -> u64 {
    if next.ptr.is_null() || config().task.sum_exec == 0 {
        slice::UNKNOWN
    } else {
        next.sum_exec()
    }
}
