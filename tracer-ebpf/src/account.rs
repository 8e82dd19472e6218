//! The accounting shared by every attach mode.
//!
//! At a switch: the previous thread's slice is closed (on-CPU time, slice count,
//! voluntary/involuntary, off-CPU start, runnable again if preempted) together with
//! what ended when that slice began (its run-queue wait, off-CPU time, migration); the
//! next thread's slice is opened in per-CPU state.
//! The cost on the hot path: one per-CPU lookup, one entry lookup for the thread leaving
//! (task-local storage in tp_btf mode on 6.4+, else the `THREADS` hash), histogram slots
//! (array lookups in the default scope), in task-storage mode one more storage lookup
//! for the thread arriving (its wakeup time), and with a target one `TRACKED` lookup for
//! the next thread. Untraced threads cost the per-CPU
//! lookup and the filter lookup only.
use aya_ebpf::bindings::{bpf_perf_event_value, BPF_F_CURRENT_CPU, BPF_NOEXIST};
use aya_ebpf::helpers::{
    bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
    bpf_get_smp_processor_id, bpf_ktime_get_ns, bpf_perf_event_read_value,
};
use tracer_common::{
    drop, filter,
    hist::{bucket_index, msb, HistKey, KIND_OFF_CPU, KIND_ON_CPU, KIND_RUNQ, N_BUCKETS, SUB},
    scope, ExitRecord, ThreadStats, Tracked, HANDED_OVER, HAVE_RUN_DELAY, MAX_SLICE_COUNTERS,
    OFF_BLOCKED, OFF_PREEMPTED, REAPED_BY_EXEC, TRACK_INHERIT,
};

use tracer_common::slice;

use crate::{
    config,
    maps::{
        count_drop, CGROUP_TARGET, CPU_STATE, EXITED, HIST, HIST_SCOPED, SCRATCH, SERIAL,
        SLICE_COUNTER0, SLICE_COUNTER1, TASK_STATS, THREADS, TRACKED, WINDOW,
    },
    Leave, Task,
};

/// Whether a thread is in the traced set, and its TGID when the set knows it.
#[inline(always)]
pub(crate) fn traced(t: &Task) -> Option<u32> {
    if t.tid == 0 {
        return None; // the idle task of every CPU
    }
    if config().filter == filter::ALL {
        return Some(t.tgid);
    }
    // SAFETY: the value is copied out at once.
    unsafe { TRACKED.get(t.tid) }.map(|v| if t.tgid != 0 { t.tgid } else { v.tgid })
}

/// cgroup mode: whether `current` (the thread leaving the CPU, `prev`) is in the
/// target cgroup, or below it unless `cgroup_node_only`. Asked at every switch-out,
/// so a thread that moves out stops counting at once; `TRACKED` follows, as the cache
/// of members that the wakeup programs (which see other tasks than `current`) read.
#[inline(always)]
fn cgroup_member(prev: &Task) -> bool {
    let c = config();
    if prev.tid == 0 {
        return false;
    }
    let inside = if c.cgroup_node_only != 0 {
        (unsafe { bpf_get_current_cgroup_id() }) == c.cgroup_id
    } else {
        CGROUP_TARGET.current_task_under_cgroup(0).unwrap_or(false)
    };
    // SAFETY: the value is only tested for presence.
    let cached = unsafe { TRACKED.get(prev.tid) }.is_some();
    if inside && !cached {
        let v = Tracked {
            tgid: prev.tgid,
            flags: TRACK_INHERIT,
        };
        if TRACKED.insert(prev.tid, v, 0).is_err() {
            count_drop(drop::TRACKED_FULL);
        }
    } else if !inside && cached {
        let _ = TRACKED.remove(prev.tid);
    }
    inside
}

/// Whether `prev` (`current`) is in the traced set now.
#[inline(always)]
pub(crate) fn member(prev: &Task) -> bool {
    if config().filter == filter::CGROUP {
        cgroup_member(prev)
    } else {
        traced(prev).is_some()
    }
}

#[inline(always)]
fn hist_add(kind: u32, id: u32, v: u64) {
    let c = config();
    // A value's power of two (its first sub-bucket; values below SUB have exact buckets
    // and keep them): the same classic power-of-two buckets, far fewer keys per process.
    let b = if c.hist_pow2 != 0 && v >= SUB {
        bucket_index(1u64 << msb(v))
    } else {
        bucket_index(v)
    };
    if c.hist_scope == scope::ALL {
        if let Some(p) = HIST.get_ptr_mut(kind * N_BUCKETS as u32 + b as u32) {
            // SAFETY: per-CPU slot.
            unsafe { *p += 1 };
        }
        return;
    }
    let key = HistKey {
        id,
        kind: kind as u16,
        bucket: b as u16,
    };
    match HIST_SCOPED.get_ptr_mut(key) {
        // SAFETY: per-CPU value.
        Some(p) => unsafe { *p += 1 },
        None => {
            if HIST_SCOPED.insert(key, 1, BPF_NOEXIST as u64).is_err() {
                // Another CPU may have inserted the same key meanwhile (EEXIST, seen
                // under process churn): count there; only a missing key is a loss.
                match HIST_SCOPED.get_ptr_mut(key) {
                    // SAFETY: per-CPU value.
                    Some(p) => unsafe { *p += 1 },
                    None => count_drop(drop::HIST_FULL),
                }
            }
        }
    }
}

/// Whether `t`'s entry lives in task-local storage (tp_btf mode) rather than `THREADS`.
#[inline(always)]
fn in_storage(t: &Task) -> bool {
    config().use_task_storage != 0 && t.trusted
}

/// A number no other entry has: this CPU's count of entries made, with the CPU on top.
#[inline(always)]
fn next_serial() -> u64 {
    let cpu = unsafe { bpf_get_smp_processor_id() } as u64;
    match SERIAL.get_ptr_mut(0) {
        Some(p) => {
            // SAFETY: per-CPU slot; the programs that make entries do not nest on a CPU.
            let n = unsafe { *p } + 1;
            unsafe { *p = n };
            (cpu << 48) | n
        }
        None => 0,
    }
}

/// The thread's entry if it has one (never created here).
#[inline(always)]
pub(crate) fn existing_entry(t: &Task) -> Option<*mut ThreadStats> {
    if in_storage(t) {
        // SAFETY: a trusted task pointer.
        unsafe { TASK_STATS.get(t.ptr, None) }
    } else {
        THREADS.get_ptr_mut(t.tid)
    }
}

/// The thread's entry, created on first sight: in task-local storage (one pointer chase
/// from the task) in tp_btf mode, else in the `THREADS` hash. A new entry's off-CPU
/// time runs from `born` (a thread created in the window: `sched_wakeup_new`), else
/// from the window's opening: a thread first seen now has existed off-CPU since then,
/// so one asleep at the opening still has its on + off equal to its time in the window.
#[inline(always)]
fn thread_entry(t: &Task, tgid: u32, born: Option<u64>) -> Option<*mut ThreadStats> {
    if in_storage(t) {
        // SAFETY: a trusted task pointer.
        if let Some(p) = unsafe { TASK_STATS.get(t.ptr, None) } {
            return Some(p);
        }
    } else if let Some(p) = THREADS.get_ptr_mut(t.tid) {
        return Some(p);
    }
    // The new entry is built in a per-CPU scratch slot, not on the stack: 200 bytes there
    // pushed the switch program past the 512-byte combined stack the 6.1 verifier allows.
    let sp = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU slot, only this program on this CPU uses it until it returns.
    let s = unsafe {
        core::ptr::write_bytes(sp, 0, 1);
        &mut *sp
    };
    s.last_cpu = u32::MAX;
    s.serial = next_serial();
    s.last_off_ns = match born {
        Some(t) => t,
        None => window().0,
    };
    s.tgid = if tgid != 0 { tgid } else { t.tgid() };
    s.comm = t.comm.read();
    if in_storage(t) {
        // SAFETY: as above; the kernel copies `s` into the new storage.
        let p = unsafe { TASK_STATS.get(t.ptr, Some(s)) };
        if p.is_none() {
            count_drop(drop::STORAGE);
        }
        return p;
    }
    // By reference: the entry by value would be copied onto the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    if THREADS.insert(t.tid, &*s, BPF_NOEXIST as u64).is_err() {
        // Either full, or another CPU created it in between: look again.
        let p = THREADS.get_ptr_mut(t.tid);
        if p.is_none() {
            count_drop(drop::THREADS_FULL);
        }
        return p;
    }
    THREADS.get_ptr_mut(t.tid)
}

#[inline(always)]
fn read_counter(i: usize) -> Option<u64> {
    let map = if i == 0 {
        &SLICE_COUNTER0 as *const _ as *mut core::ffi::c_void
    } else {
        &SLICE_COUNTER1 as *const _ as *mut core::ffi::c_void
    };
    let mut v = bpf_perf_event_value {
        counter: 0,
        enabled: 0,
        running: 0,
    };
    // SAFETY: the map is a perf event array; the buffer is ours.
    let r = unsafe {
        bpf_perf_event_read_value(
            map,
            BPF_F_CURRENT_CPU,
            &mut v,
            core::mem::size_of::<bpf_perf_event_value>() as u32,
        )
    };
    if r != 0 {
        count_drop(drop::COUNTER_READ);
        return None;
    }
    Some(v.counter)
}

/// The address of `current`'s task_struct (`prev`): from its BTF pointer, else one
/// helper call (only asked when a CPU's record and `prev` disagree).
#[inline(always)]
fn task_addr(prev: &Task) -> u64 {
    if prev.ptr.is_null() {
        unsafe { aya_ebpf::helpers::bpf_get_current_task() }
    } else {
        prev.ptr as u64
    }
}

/// A context switch seen in one place (sched_switch): close `prev`, open `next`.
#[inline(always)]
pub fn switch(prev: Task, leave: Leave, next: Task) {
    let now = switch_out(prev, leave);
    switch_in_at(next, now);
}

/// The window's opening and close (0: open-ended), see `tracer_common::Window`.
#[inline(always)]
fn window() -> (u64, u64) {
    match WINDOW.get(0) {
        Some(w) => (w.open_ns, w.close_ns),
        None => (0, 0),
    }
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
            // The old leader's final switch: its last moments since the exec are not
            // counted; its totals go out under its own TID (in task storage the entry
            // hangs off the task; in the THREADS hash `hand_over` hands them over
            // (or did). Not `flush_dead`: the traced set's entry for that TID is the
            // exec'd thread's.
            if in_storage(&prev) {
                if let Some(s) = existing_entry(&prev) {
                    // SAFETY: task storage of the task leaving.
                    flush_record_as(cs.tid, REAPED_BY_EXEC, unsafe { &*s });
                    // SAFETY: a trusted task pointer (`current`).
                    unsafe { TASK_STATS.delete(prev.ptr) };
                }
            }
            cs.traced = 0;
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
    let cgroup_mode = c.filter == filter::CGROUP;
    if !at_open && cs.traced != 0 && cs.tid != prev.tid {
        // The task the last switch here put on this CPU left it by a switch the kernel
        // never reported (see `drop::UNSEEN_SWITCH_OUT`): its slice is lost.
        count_drop(drop::UNSEEN_SWITCH_OUT);
    }
    let (prev_traced, start) = if at_open {
        // First switch on this CPU since load: prev has run since before the programs
        // attached; its slice counts from the opening, written before they attached.
        (open != 0 && member(&prev), open)
    } else if cs.tid == prev.tid && prev.tid != 0 {
        // Its switch-in was seen. In cgroup mode `switch_in_at` timed every switch-in,
        // and membership is what it is now: a thread that joined the cgroup mid-slice
        // counts from the switch-in, one that left does not count.
        let traced_now = if cgroup_mode {
            cgroup_member(&prev)
        } else {
            cs.traced != 0
        };
        (traced_now, cs.slice_start_ns)
    } else if prev.tid != 0 && member(&prev) {
        // The switch-in was not seen under this TID (a program run the kernel skipped,
        // or a TID changed by exec): the slice's start is unknown (0). It is counted
        // from the scheduler's runtime where it can be, and the loss said.
        count_drop(drop::UNSEEN_SWITCH_IN);
        (true, 0)
    } else {
        (false, 0)
    };
    // The CPU is known from here on; switch_in sets the rest.
    cs.traced = 0;
    if cs.slice_start_ns == 0 {
        cs.slice_start_ns = 1;
    }
    if !prev_traced {
        // A slice not timed (begun after the window's close, its start unknown, or a
        // thread no longer in the traced set): a thread with an entry that dies in it
        // still hands over its totals.
        if leave == Leave::Dead && prev.tid != 0 {
            if let Some(s) = existing_entry(&prev) {
                // SAFETY: map value or task storage.
                flush_dead(&prev, unsafe { &mut *s });
            }
        }
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if slice::edge(start, open, close) == slice::Edge::Outside {
        // Began after the close (or before the opening): nothing of it is in the window.
        // Only a death still has to be handed over.
        if leave == Leave::Dead {
            if let Some(s) = existing_entry(&prev) {
                // SAFETY: map value or task storage.
                flush_dead(&prev, unsafe { &mut *s });
            }
        }
        return now;
    }
    let Some(s) = thread_entry(&prev, prev.tgid, None) else {
        return now;
    };
    // SAFETY: map value pointer; other CPUs only touch it when this thread runs there.
    let s = unsafe { &mut *s };
    s.tgid = prev.tgid;
    if s.comm[0] == 0 {
        // Made where no name was at hand (a classic fork or exec record): user space
        // reads /proc, which a thread dying at the window's close no longer has.
        s.comm = prev.comm.read();
    }
    if c.thread_cgroup != 0 {
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
    let id = scoped_id(c.hist_scope, prev.tid, prev.tgid);

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
    let wait = if c.use_task_storage != 0 {
        if seen_in {
            cs.wait_ns
        } else {
            slice::wait_from(s.runnable_ns, unseen_in)
        }
    } else if let Some(rd) = prev.run_delay() {
        let base = if s.flags & HAVE_RUN_DELAY != 0 {
            s.last_run_delay
        } else if seen_in {
            cs.run_delay_in
        } else {
            slice::UNKNOWN
        };
        s.last_run_delay = rd;
        s.flags |= HAVE_RUN_DELAY;
        slice::wait_by_run_delay(rd, base)
    } else {
        slice::wait_from(s.runnable_ns, start.max(unseen_in))
    };
    if wait != slice::UNKNOWN {
        s.runq_wait_ns += wait;
        s.runq_waits += 1;
        hist_add(KIND_RUNQ, id, wait);
    }
    let cpu = unsafe { bpf_get_smp_processor_id() };
    if s.last_cpu != u32::MAX && s.last_cpu != cpu {
        s.migrations += 1;
    }
    s.last_cpu = cpu;

    // The slice, its start and the scheduler's credit and gap (see `slice::slice`).
    let sl = slice::slice(&slice::Facts {
        now,
        open,
        close,
        start,
        at_open,
        running,
        sum,
        last_sum: s.last_sum_exec,
        pending_runtime: s.pending_runtime,
    });
    let (has_slice, slice) = (sl.counted, sl.len);
    s.last_sum_exec = sum;
    s.pending_runtime = 0;
    let d = slice::off_cpu(s.last_off_ns, sl.begun, sl.credit);
    if d != 0 {
        s.off_cpu_ns += d;
        if s.off_state == OFF_PREEMPTED {
            s.preempted_ns += d;
        } else {
            s.blocked_ns += d;
        }
        hist_add(KIND_OFF_CPU, id, d);
    }
    let gap = sl.gap;
    // The CPU's busy time is the slice as the scheduler charged it, as for the thread:
    // the per-CPU figures add up to the threads'. They never overlap on a CPU: after a
    // wakeup preemption the scheduler charges the woken thread from the wakeup, and the
    // thread it preempts only up to it (the boundary is one rq clock reading).
    cs.busy_ns += slice;
    if has_slice {
        s.on_cpu_ns += slice;
        s.slices += 1;
        hist_add(KIND_ON_CPU, id, slice);
    }
    let n_counters = (c.n_counters as usize).min(MAX_SLICE_COUNTERS);
    for i in 0..n_counters {
        if cs.counter_base[i] != 0 {
            if let Some(v) = read_counter(i) {
                s.counters[i] += v.wrapping_sub(cs.counter_base[i]);
            }
        }
    }
    s.last_off_ns = now - gap;
    s.runnable_ns = 0;
    match leave {
        Leave::Preempted => {
            s.involuntary += 1;
            s.off_state = OFF_PREEMPTED;
            if c.task_run_delay_off == 0 {
                s.runnable_ns = now;
            }
        }
        Leave::Blocked => {
            s.voluntary += 1;
            s.off_state = OFF_BLOCKED;
        }
        Leave::Dead => {
            s.voluntary += 1;
            flush_dead(&prev, s);
        }
    }
    now
}

/// Opens the slice of `next`, which is about to run (perf-sched: has just started).
#[inline(always)]
pub fn switch_in(next: Task) {
    switch_in_at(next, 0)
}

/// Only per-CPU state: which thread runs here since when. Its entry is touched when it
/// leaves (see `switch_out`).
#[inline(always)]
fn switch_in_at(next: Task, mut now: u64) {
    let Some(cs) = CPU_STATE.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU state.
    let cs = unsafe { &mut *cs };
    cs.tid = next.tid;
    cs.task = next.ptr as u64;
    cs.traced = 0;
    let c = config();
    if traced(&next).is_none() {
        if c.filter == filter::CGROUP && next.tid != 0 {
            // It may join the cgroup before it leaves the CPU (`cgroup_member`): its
            // slice then counts from here, so the start must be known.
            if now == 0 {
                now = unsafe { bpf_ktime_get_ns() };
            }
            cs.slice_start_ns = now;
            return;
        }
        // Untraced or idle: the CPU is known, so the next switch-out does not take this
        // thread for one that ran since before the window.
        if cs.slice_start_ns == 0 {
            cs.slice_start_ns = 1;
        }
        return;
    }
    if now == 0 {
        now = unsafe { bpf_ktime_get_ns() };
    }
    let (_, close) = window();
    if close != 0 && now > close {
        // The window has closed: no new slice is counted.
        cs.slice_start_ns = now;
        return;
    }
    cs.traced = 1;
    cs.slice_start_ns = now;
    cs.run_delay_in = if next.ptr.is_null() {
        u64::MAX
    } else {
        next.run_delay().unwrap_or(u64::MAX)
    };
    cs.wait_ns = u64::MAX;
    if in_storage(&next) {
        // The wait ends here; its start is in the task's storage (no hash lookup).
        // SAFETY: a trusted task pointer (tp_btf argument).
        if let Some(s) = unsafe { TASK_STATS.get(next.ptr, None) } {
            // SAFETY: the task's storage; only its own switches and wakeups touch it.
            let s = unsafe { &mut *s };
            if s.runnable_ns != 0 && now > s.runnable_ns {
                cs.wait_ns = now - s.runnable_ns;
            }
            s.runnable_ns = 0;
        }
    }
    let n_counters = (c.n_counters as usize).min(MAX_SLICE_COUNTERS);
    for i in 0..n_counters {
        cs.counter_base[i] = read_counter(i).unwrap_or(0);
    }
}

#[inline(always)]
fn scoped_id(scope_: u32, tid: u32, tgid: u32) -> u32 {
    if scope_ == scope::PROCESS {
        tgid
    } else {
        tid
    }
}

/// A thread's final switch-out: hand its totals to user space and free its entries, so
/// the maps stay bounded under churn and a recycled TID starts from nothing.
#[inline(always)]
fn flush_dead(t: &Task, s: &mut ThreadStats) {
    let tid = t.tid;
    // The dying thread is `current`: its comm now is the final one (after any exec).
    if let Ok(comm) = bpf_get_current_comm() {
        s.comm = comm;
    }
    flush_record(t, s);
    if in_storage(t) {
        // A zombie stays visible to the task iterator until reaped: its totals are in
        // the ring buffer now, so the iterator must not report them again.
        // SAFETY: a trusted task pointer (`current`).
        unsafe { TASK_STATS.delete(t.ptr) };
    } else {
        let _ = THREADS.remove(tid);
    }
    if config().filter != filter::ALL && !exec_takes_tid(t) {
        let _ = TRACKED.remove(tid);
    }
}

/// Whether the dying `t` (`current`) is a leader whose TID another of its threads is
/// about to take: `de_thread()` set `signal->group_exec_task` to the exec'ing thread
/// before killing the others. Its traced-set entry then stays for that thread, which
/// runs under this TID from `exchange_tids()` on, before `sched_process_exec` moves the
/// entry (its switches in between would not count). False when BTF gave no offsets.
#[inline(always)]
fn exec_takes_tid(t: &Task) -> bool {
    let c = config();
    if c.task_signal_off == 0 || c.signal_exec_task_off == 0 || t.tid != t.tgid() {
        return false;
    }
    let Some(sig) = t.field::<u64>(c.task_signal_off) else {
        return false;
    };
    if sig == 0 {
        return false;
    }
    // SAFETY: bpf_probe_read_kernel validates the address.
    let exec_task = unsafe {
        aya_ebpf::helpers::bpf_probe_read_kernel(
            (sig as *const u8).add(c.signal_exec_task_off as usize) as *const u64,
        )
    }
    .unwrap_or(0);
    exec_task != 0 && exec_task != task_addr(t)
}

/// Hands a dead thread's totals to user space through the ring buffer.
#[inline(always)]
fn flush_record(t: &Task, s: &ThreadStats) {
    flush_record_as(t.tid, 0, s)
}

/// Sends `s` as the totals of `tid` (which goes on as `became`, if not 0).
#[inline(always)]
fn flush_record_as(tid: u32, became: u32, s: &ThreadStats) {
    match EXITED.reserve::<ExitRecord>(0) {
        Some(mut e) => {
            // Written in place: an `ExitRecord` built on the stack first costs 208 bytes.
            let p = e.as_mut_ptr();
            // SAFETY: the reservation holds one ExitRecord; `s` is a map value.
            unsafe {
                (*p).tid = tid;
                (*p).became = became;
                core::ptr::copy_nonoverlapping(s as *const ThreadStats, &mut (*p).stats, 1);
            }
            e.submit(0);
        }
        None => count_drop(drop::EXIT_RINGBUF_FULL),
    }
}

/// `sched_stat_runtime`: runtime the scheduler charged to `pid` (tracepoint mode without
/// BTF). Kept in the thread's entry, not per CPU: `update_curr()` also runs for the
/// current task of a remote run queue (e.g. an enqueue there), on this CPU.
#[inline(always)]
pub fn add_runtime(pid: u32, runtime: u64) {
    if pid == 0 {
        return;
    }
    if let Some(s) = THREADS.get_ptr_mut(pid) {
        // SAFETY: map value; update_curr() for a task runs under its run queue's lock.
        unsafe { (*s).pending_runtime += runtime };
    }
}

/// A thread became runnable: its run-queue wait starts now. `new`: it was just created
/// (`sched_wakeup_new`), so its time in the window starts now too. Returns the time
/// stamped (0: not traced), for the trace's wakeup event: read back from the entry it
/// could already be the switch-in's 0 when another CPU ran the thread meanwhile.
/// A wakeup of the thread running here stamps nothing (0, see
/// `slice::wakeup_starts_wait`).
#[inline(always)]
pub fn wakeup(p: Task, new: bool) -> u64 {
    let Some(tgid) = traced(&p) else {
        return 0;
    };
    if !new && !slice::wakeup_starts_wait(p.tid, bpf_get_current_pid_tgid() as u32) {
        return 0;
    }
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(s) = thread_entry(&p, tgid, new.then_some(now)) {
        // SAFETY: map value or task storage.
        unsafe { (*s).runnable_ns = now };
    }
    now
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
    if config().filter != filter::ALL {
        // SAFETY: copied out at once.
        if let Some(v) = unsafe { TRACKED.get(old) }.copied() {
            if TRACKED.insert(new, v, 0).is_err() {
                count_drop(drop::TRACKED_FULL);
            }
            let _ = TRACKED.remove(old);
        }
    }
    hand_over(t, old, new, 0);
}

/// The exec'ing thread `t` (`current`, now `new`, `old` before) hands its totals over
/// under `old` and goes on from zero under `new`; in the `THREADS` hash the old
/// leader's entry under `new` is handed over first (reaped by the exec). Once per exec:
/// `mark` (`HANDED_OVER` at a switch-out) says it was done before `sched_process_exec`.
#[inline(always)]
fn hand_over(t: &Task, old: u32, new: u32, mark: u32) {
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

/// A new thread or process: it joins the traced set when its parent's set inherits.
#[inline(always)]
pub fn fork(parent: Task, child: Task) {
    if config().filter == filter::ALL {
        return;
    }
    // SAFETY: copied out at once.
    let Some(p) = (unsafe { TRACKED.get(parent.tid) }).copied() else {
        return;
    };
    if p.flags & TRACK_INHERIT == 0 {
        return;
    }
    let v = Tracked {
        tgid: child.tgid(),
        flags: TRACK_INHERIT,
    };
    if TRACKED.insert(child.tid, v, 0).is_err() {
        count_drop(drop::TRACKED_FULL);
    }
}
