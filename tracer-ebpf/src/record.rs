//! `tracer record` and `tracer slow`: events streamed to user space from the same
//! switch and wakeup programs `tracer run` uses, after their accounting has run (so a
//! slow wait is the very wait the accounting just timed). Everything here is behind
//! `RecordConfig::on`: with it 0 (`tracer run`) the frozen `.rodata` lets the verifier
//! drop these paths as dead code, and the ring buffer is created with one page.
use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes,
    },
    macros::map,
    maps::{PerCpuArray, RingBuf},
};
use tracer_common::{
    filter,
    record::{
        self, how, kind, on, rec_cpu, stat, EventHead, RecCpu, SchedEvent, SlowEvent, TaskEvent,
        RUNTIME_UNKNOWN, SWITCH_CHAINED, SWITCH_REPAIRED, SWITCH_START, WOKEN_NEW,
    },
    slice, COMM_LEN, OFF_BLOCKED, OFF_PREEMPTED,
};

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use crate::{
    account,
    maps::{CPU_STATE, WINDOW},
    task::config,
    Task,
};

/// `BPF_RB_NO_WAKEUP`: switches and wakeups do not wake the reader, which drains on a
/// timer: a wakeup per event would cost an irq_work each and, worse, make the reader
/// switch in and out (more events) all the time.
const NO_WAKEUP: u64 = 1;
/// `BPF_RB_FORCE_WAKEUP`, and `bpf_ringbuf_query`'s `BPF_RB_AVAIL_DATA` and
/// `BPF_RB_RING_SIZE`.
const FORCE_WAKEUP: u64 = 2;
const AVAIL_DATA: u64 = 0;
const RING_SIZE: u64 = 1;

/// Switches, wakeups and slow waits for user space. Sized by `--buffer-size`.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Per CPU: events sent and events lost to a full ring buffer (`tracer_common::record::stat`).
#[map]
pub static REC_STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Per CPU: when the task running there switched in (the previous task's run time).
#[map]
pub static REC_CPU: PerCpuArray<RecCpu> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn bump(i: u32) {
    if let Some(p) = REC_STATS.get_ptr_mut(i) {
        // SAFETY: per-CPU slot; the programs that send events do not nest on a CPU.
        unsafe { *p += 1 };
    }
}

/// `bump` for the task-event programs: `task_newtask`, `sched_process_exit` and
/// `sched_process_exec` run where the task may be preempted, and a switch on this CPU
/// may send events between a plain load and store; one atomic add cannot be split.
/// (The switch and wakeup programs run with interrupts off: their plain `bump` is whole.)
#[inline(always)]
fn bump_atomic(i: u32) {
    if let Some(p) = REC_STATS.get_ptr_mut(i) {
        // SAFETY: a per-CPU u64 slot, suitably aligned. core has no `AtomicU64::fetch_add`
        // on bpfel (it declares load/store atomics only); the intrinsic lowers to BPF's
        // atomic add all the same.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(p, 1) };
    }
}

#[inline(always)]
fn head(ts_ns: u64, k: u32) -> EventHead {
    EventHead {
        ts_ns,
        kind: k,
        cpu: unsafe { bpf_get_smp_processor_id() },
    }
}

#[inline(always)]
fn prio(t: &Task) -> i16 {
    match config().task.prio {
        0 => 0,
        off => t.field::<i32>(off).unwrap_or(0) as i16,
    }
}

/// The task's comm: two plain loads from a trusted task pointer (tp_btf), else a probe
/// read.
#[inline(always)]
fn comm(t: &Task) -> [u8; COMM_LEN] {
    if t.trusted {
        if let Some(w) = t.field::<[u64; 2]>(config().task.comm) {
            // SAFETY: 16 plain bytes either way.
            return unsafe { core::mem::transmute::<[u64; 2], [u8; COMM_LEN]>(w) };
        }
    }
    t.comm.read()
}

/// A switch from `prev` to `next` (prev is `current`), before the accounting: whether
/// it is sent is decided here, where a dying thread is still in the traced set.
#[inline(always)]
pub fn switch(prev: &Task, next: &Task) {
    if config().record.on & on::SCHED == 0 {
        return;
    }
    let Some(rc) = REC_CPU.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU slot; switches on a CPU do not nest.
    let rc = unsafe { &mut *rc };
    let prev_traced = config().mode.filter == filter::ALL || account::traced(prev).is_some();
    let mut f = rc.flags & rec_cpu::SENT;
    rc.prev_last_sum = u64::MAX;
    if prev_traced && rc.last_ns != 0 && rc.running != prev.tid {
        // Only where a switch-in went unseen (or an exec swapped the TIDs): the base of
        // the slice a repaired switch-in begins (see `RecCpu::prev_last_sum`).
        if let Some(s) = account::existing_entry(prev) {
            // SAFETY: map value or task storage of the task running here.
            let l = unsafe { (*s).last_sum_exec };
            if l != 0 {
                rc.prev_last_sum = l;
            }
        }
    }
    if prev_traced {
        f |= rec_cpu::PREV_TRACED | rec_cpu::SEND;
    } else if account::traced(next).is_some() {
        f |= rec_cpu::SEND;
    }
    rc.flags = f;
}

/// The same switch after the accounting, which has just timed the wait that ends, and
/// stamped the switch `now` (0: it took no timestamp).
#[inline(always)]
pub fn switch_done(prev: &Task, preempt: bool, prev_state: u32, next: &Task, now: u64) {
    let r = config().record.on;
    if r & on::SCHED != 0 {
        sched_switch(prev, preempt, prev_state, next, now);
    }
    if r & (on::SLOW_RUNQ | on::SLOW_OFF_CPU) != 0 {
        slow(prev, next);
    }
}

/// The window's opening and close (0: open), CLOCK_MONOTONIC.
#[inline(always)]
fn window() -> (u64, u64) {
    match WINDOW.get(0) {
        Some(w) => (w.open_ns, w.close_ns),
        None => (0, 0),
    }
}

/// The scheduler's runtime of the slice `prev` ends now (see `SchedEvent::runtime`):
/// from `sum_in`, its runtime at the switch-in this CPU saw (`u64::MAX`: none).
#[inline(always)]
fn slice_runtime(prev: &Task, sum_in: u64) -> u32 {
    if prev.tid == 0 {
        return RUNTIME_UNKNOWN;
    }
    record::slice_runtime(
        prev.sum_exec(),
        sum_in,
        prev.running_slice().unwrap_or(u64::MAX),
    )
}

/// Queues one switch event; false when the ring buffer is full (counted).
#[inline(always)]
fn send_switch(ts: u64, prev_tid: u32, state: u32, flags: u16, runtime: u32, next: &Task) -> bool {
    bump(stat::SENT);
    match EVENTS.reserve::<SchedEvent>(0) {
        Some(mut e) => {
            let p = e.as_mut_ptr();
            // SAFETY: the reservation holds one SchedEvent; every field is written.
            unsafe {
                (*p).head = head(ts, kind::SWITCH);
                (*p).tid = next.tid;
                (*p).tgid = next.tgid();
                (*p).prev_tid = prev_tid;
                (*p).state = state;
                (*p).runtime = runtime;
                (*p).prio = prio(next);
                (*p).flags = flags;
                (*p).comm = comm(next);
            }
            e.submit(NO_WAKEUP);
            true
        }
        None => {
            bump(stat::DROPPED);
            false
        }
    }
}

/// `tracer record`: the switch, when it touches the traced set, stamped where the
/// accounting stamped it (its switch-in time of `next`, so a wait in the trace ends
/// where the summary's does), with the scheduler's runtime of the slice it ends. First,
/// at the first switch seen on this CPU, the switch to `prev` at the window's opening
/// (`SWITCH_START`); or, when `prev` is not the task the last switch seen on this CPU
/// put there, the switch to `prev` that the programs never saw, rebuilt
/// (`SWITCH_REPAIRED`). Nothing after the window's close.
#[inline(always)]
fn sched_switch(prev: &Task, preempt: bool, prev_state: u32, next: &Task, now: u64) {
    let Some(rc) = REC_CPU.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU slot; switches on a CPU do not nest.
    let rc = unsafe { &mut *rc };
    // The accounting's timestamp (one clock read a switch, not two): the switch-in of a
    // traced `next`, or the switch-out that closed `prev`'s slice.
    let now = if now != 0 {
        now
    } else {
        unsafe { bpf_ktime_get_ns() }
    };
    let (ts, unseen_wait) = match CPU_STATE.get(0) {
        Some(cs) if next.tid != 0 && cs.tid == next.tid && cs.traced != 0 => {
            (cs.slice_start_ns, cs.unseen_wait_ns)
        }
        Some(cs) => (now, cs.unseen_wait_ns),
        None => (now, 0),
    };
    let (open, close) = window();
    let f = rc.flags;
    let (last, was) = (rc.last_ns, rc.running);
    // The task switched in here last, under its TID then or, after an exec from a
    // non-main thread, under the leader's (the exec'd thread can run from its switch-in
    // to its exit in one slice: its runtime is from the switch-in, not from
    // `prev_sum_exec_runtime`, which the exit path's `sched_move_task()` resets).
    let same = last != 0
        && (was == prev.tid
            || slice::tid_swapped(
                was,
                rc.task,
                0,
                prev.tid,
                prev.tgid,
                if rc.task != 0 {
                    account::task_addr(prev)
                } else {
                    0
                },
                false,
            ));
    let sum_in = if same { rc.sum_in } else { rc.prev_last_sum };
    let runtime = slice_runtime(prev, sum_in);
    rc.last_ns = ts;
    rc.running = next.tid;
    rc.task = next.ptr as u64;
    rc.sum_in = if next.tid == 0 {
        u64::MAX
    } else {
        next.sum_exec()
    };
    rc.flags = 0;
    if close != 0 && ts > close {
        return;
    }
    let mut chained = f & rec_cpu::SENT != 0;
    if last == 0 {
        if f & rec_cpu::PREV_TRACED != 0 && prev.tid != 0 && open != 0 {
            // Running since before the programs attached: from the opening, or from
            // its switch-in when that came later, as the summary counts it.
            let since = if runtime != RUNTIME_UNKNOWN && ts > open && ts - open > runtime as u64 {
                ts - runtime as u64
            } else {
                open
            };
            chained = send_switch(since, 0, 0, SWITCH_START, RUNTIME_UNKNOWN, prev);
        }
    } else if was != prev.tid && !(same && was == prev.tgid && prev.tid != prev.tgid) {
        // (Not the old leader's final switch after an exec from another thread: it
        // leaves under that thread's TID, `de_thread()` having swapped them while it
        // ran, but the slice is the leader's; nothing to put back. Before, the whole
        // slice went to the other TID: 4 of ~365 runs of record_agreement's exec
        // workload. The summary does not count that slice, see `account::switch`.)
        // On the CPU since: its runtime in this slice, never before the last switch.
        let since = if runtime != RUNTIME_UNKNOWN && ts > last && (runtime as u64) < ts - last {
            ts - runtime as u64
        } else {
            last
        };
        if unseen_wait != 0 && since > unseen_wait {
            // Its wakeup went unseen too: the accounting took the wait from the
            // scheduler's `run_delay`; the waking goes back where that wait began.
            send_wakeup(since - unseen_wait, prev, false, 0);
        }
        chained = send_switch(since, was, 0, SWITCH_REPAIRED, RUNTIME_UNKNOWN, prev);
    } else if unseen_wait != 0 && last > unseen_wait {
        // Its switch-in was seen, its wakeup not: the accounting took the wait from the
        // scheduler's `run_delay`; the waking goes back where that wait began.
        send_wakeup(last - unseen_wait, prev, false, 0);
    }
    if f & rec_cpu::SEND == 0 {
        return;
    }
    let flags = preempt as u16 | if chained { SWITCH_CHAINED } else { 0 };
    if send_switch(ts, prev.tid, prev_state, flags, runtime, next) {
        rc.flags = rec_cpu::SENT;
    }
}
/// `tracer slow`: the wait of `next` that ends now, sent when at least the threshold.
#[inline(always)]
fn slow(prev: &Task, next: &Task) {
    let c = config();
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(rc) = REC_CPU.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: per-CPU slot.
    let rc = unsafe { &mut *rc };
    let ran = if rc.last_switch_ns != 0 && now > rc.last_switch_ns {
        now - rc.last_switch_ns
    } else {
        0
    };
    rc.last_switch_ns = now;
    if next.tid == 0 || account::traced(next).is_none() {
        return;
    }
    let Some(s) = account::existing_entry(next) else {
        return;
    };
    // SAFETY: map value or task storage of a thread switching in on this CPU.
    let s = unsafe { &*s };
    let (k, wait, how_) = if c.record.on & on::SLOW_RUNQ != 0 {
        let wait = if c.mode.use_task_storage != 0 {
            // Timed by the accounting at this switch-in (`switch_in_at`).
            match CPU_STATE.get(0) {
                Some(cs) if cs.tid == next.tid && cs.traced != 0 => cs.wait_ns,
                _ => u64::MAX,
            }
        } else {
            slice::wait_from(s.runnable_ns, now)
        };
        let h = if s.off_state == OFF_PREEMPTED {
            how::PREEMPTED
        } else if s.flags & WOKEN_NEW != 0 {
            how::NEW
        } else {
            how::WAKEUP
        };
        (kind::SLOW_RUNQ, wait, h)
    } else if s.off_state == OFF_BLOCKED && s.last_off_ns != 0 && now > s.last_off_ns {
        (kind::SLOW_OFF_CPU, now - s.last_off_ns, how::BLOCKED)
    } else {
        return;
    };
    if wait == u64::MAX || wait < c.record.slow_min_ns {
        return;
    }
    bump(stat::SENT);
    let Some(mut e) = EVENTS.reserve::<SlowEvent>(0) else {
        bump(stat::DROPPED);
        return;
    };
    let p = e.as_mut_ptr();
    // SAFETY: the reservation holds one SlowEvent; every field is written.
    unsafe {
        (*p).head = head(now, k);
        (*p).tid = next.tid;
        (*p).tgid = if s.tgid != 0 { s.tgid } else { next.tgid() };
        (*p).prev_tid = prev.tid;
        (*p).how = how_;
        (*p).wait_ns = wait;
        (*p).prev_ran_ns = ran;
        // Both names as they are now, as runqslower reads them (`next->comm`, and `prev`
        // is `current`): the entry's copy is from its creation, before any exec or
        // rename.
        (*p).comm = comm(next);
        (*p).prev_comm = crate::task::current_comm();
    }
    // Nor does a slow wait, unless the ring is a quarter full: the reader's wakeup
    // preempts what runs, and under a low `--min` that preemption is the next slow wait
    // (a hostile test: a spinner switched 160 times as often under `slow --min 1us`).
    // The reader drains every 100 ms.
    let flags = if EVENTS.query(AVAIL_DATA) > EVENTS.query(RING_SIZE) / 4 {
        FORCE_WAKEUP
    } else {
        NO_WAKEUP
    };
    e.submit(flags);
}

/// After the accounting of a wakeup of `p` (`new`: `sched_wakeup_new`).
#[inline(always)]
pub fn wakeup(p: &Task, new: bool, at: u64) {
    let c = config();
    if c.record.on == 0 || account::traced(p).is_none() {
        return;
    }
    if c.record.on & on::SLOW_RUNQ != 0 {
        if let Some(s) = account::existing_entry(p) {
            // SAFETY: map value or task storage; its wakeup runs under its pi_lock.
            let s = unsafe { &mut *s };
            if new {
                s.flags |= WOKEN_NEW;
            } else {
                s.flags &= !WOKEN_NEW;
            }
        }
    }
    if c.record.on & on::SCHED == 0 {
        return;
    }
    // The accounting's own timestamp of this wakeup (where its wait starts).
    let ts = if at != 0 {
        at
    } else {
        unsafe { bpf_ktime_get_ns() }
    };
    let (_, close) = window();
    if close != 0 && ts > close {
        return;
    }
    send_wakeup(ts, p, new, bpf_get_current_pid_tgid() as u32);
}

/// Queues one waking of `p` at `ts` by `waker` (0: not known).
#[inline(always)]
fn send_wakeup(ts: u64, p: &Task, new: bool, waker: u32) {
    bump(stat::SENT);
    let Some(mut e) = EVENTS.reserve::<SchedEvent>(0) else {
        bump(stat::DROPPED);
        return;
    };
    let ptr = e.as_mut_ptr();
    let cpu = unsafe { bpf_get_smp_processor_id() };
    let target = match config().task.cpu {
        0 => cpu,
        off => p.field::<u32>(off).unwrap_or(cpu),
    };
    // SAFETY: the reservation holds one SchedEvent; every field is written.
    unsafe {
        (*ptr).head = head(ts, if new { kind::WAKEUP_NEW } else { kind::WAKEUP });
        (*ptr).tid = p.tid;
        (*ptr).tgid = p.tgid();
        (*ptr).prev_tid = waker;
        (*ptr).state = target;
        (*ptr).runtime = 0;
        (*ptr).prio = prio(p);
        (*ptr).flags = 0;
        (*ptr).comm = comm(p);
    }
    e.submit(NO_WAKEUP);
}

// ---------------------------------------------------------------- task events
// Fork, exec, exit, rename and migration of the traced set (`tracer record` only). Their
// programs are attached only when recording; exec shares the program `tracer run` has,
// where the `RecordConfig::on` test is dead code with it 0.

/// Queues one task event; `fill` writes what the kind carries over zeroed fields.
#[inline(always)]
fn send_task(k: u32, t: &Task, fill: impl FnOnce(&mut TaskEvent)) {
    let ts = unsafe { bpf_ktime_get_ns() };
    let (_, close) = window();
    if close != 0 && ts > close {
        return;
    }
    bump_atomic(stat::SENT);
    let Some(mut e) = EVENTS.reserve::<TaskEvent>(0) else {
        bump_atomic(stat::DROPPED);
        return;
    };
    let p = e.as_mut_ptr();
    // SAFETY: the reservation holds one TaskEvent; the fixed fields are written here,
    // the rest zeroed first.
    unsafe {
        crate::mem::zero(p);
        (*p).head = head(ts, k);
        (*p).tid = t.tid;
        (*p).tgid = t.tgid();
        (*p).actor_tid = bpf_get_current_pid_tgid() as u32;
        (*p).comm = comm(t);
        fill(&mut *p);
    }
    e.submit(NO_WAKEUP);
}

#[inline(always)]
fn recording(t: &Task) -> bool {
    config().record.on & on::SCHED != 0 && account::traced(t).is_some()
}

/// `task_newtask(task, clone_flags)`: a task created by `current`, sent when the parent
/// is traced (the child joins the traced set only at `sched_process_fork`, after this).
#[inline(always)]
pub fn newtask(child: &Task, clone_flags: u64, parent: &Task) {
    if !recording(parent) {
        return;
    }
    send_task(kind::NEWTASK, child, |e| e.clone_flags = clone_flags);
}

/// `sched_process_exec(p, old_pid, bprm)`, after the accounting moved `old`'s entries
/// to `p`: the new comm is already in place (`begin_new_exec()` set it).
#[inline(always)]
pub fn exec(p: &Task, old: u32, bprm: *const u8) {
    if !recording(p) {
        return;
    }
    let off = config().record.bprm_filename;
    send_task(kind::EXEC, p, |e| {
        e.old = old;
        if off != 0 && !bprm.is_null() {
            // SAFETY: probe reads validate both addresses.
            unsafe {
                if let Ok(name) = bpf_probe_read_kernel(bprm.add(off as usize) as *const *const u8)
                {
                    let _ = bpf_probe_read_kernel_str_bytes(name, &mut e.filename);
                }
            }
        }
    });
}

/// `sched_process_exit(p, group_dead)`: `p` is `current`.
#[inline(always)]
pub fn exit(p: &Task) {
    if !recording(p) {
        return;
    }
    send_task(kind::EXIT, p, |e| e.prio = prio(p) as i32);
}

/// `task_rename(task, comm)`: runs before the new comm is copied in, so the task's comm
/// is the old one.
#[inline(always)]
pub fn rename(t: &Task, new_comm: *const u8) {
    if !recording(t) {
        return;
    }
    send_task(kind::RENAME, t, |e| {
        e.old_comm = e.comm;
        e.comm = crate::task::read_comm(new_comm);
    });
}

/// `sched_migrate_task(p, dest_cpu)`: runs before `set_task_cpu()` moves it, so the
/// task's CPU is the one it leaves.
#[inline(always)]
pub fn migrate(p: &Task, dest_cpu: u32) {
    if !recording(p) {
        return;
    }
    let c = config();
    let orig = match c.task.cpu {
        0 => u32::MAX,
        off => p.field::<u32>(off).unwrap_or(u32::MAX),
    };
    send_task(kind::MIGRATE, p, |e| {
        e.prio = prio(p) as i32;
        e.old = orig;
        e.dest_cpu = dest_cpu;
    });
}
