//! The off-CPU family (`tracer offcpu`): where traced threads wait, as stacks with the
//! time spent off-CPU.
//!
//! A program of its own on sched_switch (tp_btf, raw or classic tracepoint: one is
//! loaded), in an object of its own with the traced set's fork and exec followers:
//! `tracer run` neither loads it nor creates its maps. At switch-out the
//! leaving thread is `current`, so `bpf_get_stackid` takes its kernel and user stacks
//! as they are while it sleeps (or was preempted); at its switch-in the time away is
//! added to `OFFCPU` under (process, thread, user stack, kernel stack, state), as
//! libbpf-tools' offcputime does, with the state kept apart.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::bpf_ktime_get_ns,
    macros::{btf_tracepoint, raw_tracepoint, tracepoint},
    programs::{
        tracing::StackIdContext, BtfTracePointContext, RawTracePointContext, TracePointContext,
    },
};
use tracer_common::offcpu::{
    offdrop, OffKey, OffStart, OffVal, OffcpuConfig, StackCopy, WakeKey, WakeVal, Waker,
    COPY_HEADER, COPY_STACK, COPY_WAITER, COPY_WAKER, NO_WAKER, SPILL_ID, STACK_COLLISION,
    STACK_COPIED, STACK_COPY_LOST, STACK_EMPTY, STACK_FULL, STACK_NOT_TAKEN, STATE_BLOCKED,
    STATE_PREEMPTED,
};

use tracer_ebpf::{
    account,
    maps::TaskStorage,
    task::{
        config, current_from_arg, current_task, current_task_btf, leave_from_args, task_from_btf,
    },
    Leave, Task,
};

#[path = "offcpu_maps.rs"]
mod maps;
use maps::*;

#[inline(always)]
fn add_drop(idx: u32, n: u64) {
    if let Some(p) = OFFCPU_DROPS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot.
        unsafe { *p += n };
    }
}

/// A stack id, or the error as a negative number (collisions and a full map counted).
/// A stack whose bucket holds another goes to the spill map.
#[inline(always)]
fn stack_id<C: StackIdContext>(ctx: &C, user: bool) -> i32 {
    let flags = if user { BPF_F_USER_STACK as u64 } else { 0 };
    let got = match ctx.get_stackid(&OFFCPU_STACKS, flags) {
        Err(e) if e == STACK_COLLISION => ctx
            .get_stackid(&OFFCPU_SPILL, flags)
            // A full spill map loses the stack to the collision all the same.
            .map(|id| id | SPILL_ID as i64)
            .map_err(|_| STACK_COLLISION),
        r => r,
    };
    match got {
        Ok(id) => id as i32,
        Err(e) => {
            if e == STACK_COLLISION {
                add_drop(
                    if user {
                        offdrop::USTACK_COLLISION
                    } else {
                        offdrop::KSTACK_COLLISION
                    },
                    1,
                );
            } else if e == STACK_FULL {
                add_drop(offdrop::STACK_MAP_FULL, 1);
            }
            e
        }
    }
}

/// `current`'s (user, kernel) stack ids, each only where asked for. With `--unwind
/// dwarf` (`copy`: the storage of the task whose slot receives `current`'s stack, a
/// trusted BTF pointer) the user stack is copied there instead, and the id says so.
#[inline(always)]
fn stack_ids<C: StackIdContext>(
    ctx: &C,
    oc: &OffcpuConfig,
    copy: Option<(&TaskStorage<StackCopy>, *const u8)>,
) -> (i32, i32) {
    let user = match copy {
        Some((map, owner)) if oc.dwarf != 0 && oc.user_stacks != 0 => copy_stack(map, owner),
        _ if oc.user_stacks != 0 => stack_id(ctx, true),
        _ => STACK_NOT_TAKEN,
    };
    let kernel = if oc.kernel_stacks != 0 {
        stack_id(ctx, false)
    } else {
        STACK_NOT_TAKEN
    };
    (user, kernel)
}

/// `current`'s user stack copied into `owner`'s slot of `map`: [`STACK_COPIED`], or why not.
#[inline(always)]
fn copy_stack(map: &TaskStorage<StackCopy>, owner: *const u8) -> i32 {
    // SAFETY: `owner` is a trusted BTF task pointer (tp_btf argument or current).
    let Some(slot) = (unsafe { map.get_or_zero(owner) }) else {
        add_drop(offdrop::COPY_NO_SLOT, 1);
        return STACK_NOT_TAKEN;
    };
    let me = current_task_btf();
    if tracer_ebpf::copy::copy_user(me.ptr, slot, offcpu_config()) == 0 {
        return STACK_EMPTY;
    }
    STACK_COPIED
}

/// tp_btf: `sched_switch(preempt, prev, next, prev_state)`, BTF pointers.
#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn offcpu_switch(ctx: BtfTracePointContext) -> u32 {
    let preempt: u64 = ctx.arg(0);
    let prev_state: u64 = ctx.arg(3);
    let next_ptr: *const u8 = ctx.arg(2);
    let next = task_from_btf(next_ptr, true).tid;
    let leave = leave_from_args(preempt & 0xff, prev_state as u32);
    // `prev` is `current`: its ids by two plain loads from the argument.
    let prev = current_from_arg(ctx.arg(1));
    let prev_ptr = prev.ptr;
    on_switch(&ctx, prev, leave, next, Some((prev_ptr, next_ptr)));
    0
}

/// Raw tracepoint: the same arguments as plain numbers (`next`'s TID by a probe read
/// at its BTF offset).
#[raw_tracepoint(tracepoint = "sched_switch")]
#[inline(always)]
pub fn offcpu_switch_raw(ctx: RawTracePointContext) -> i32 {
    let preempt: u64 = ctx.arg(0);
    let prev_state: u64 = ctx.arg(3);
    let next = task_from_btf(ctx.arg::<u64>(2) as *const u8, false).tid;
    let leave = leave_from_args(preempt & 0xff, prev_state as u32);
    on_switch(&ctx, current_task(), leave, next, None);
    0
}

/// Classic tracepoint (kernels without BTF): `prev_state` and `next_pid` from the
/// record, at offsets from its tracefs format.
#[tracepoint(category = "sched", name = "sched_switch")]
#[inline(always)]
pub fn offcpu_switch_tp(ctx: TracePointContext) -> u32 {
    let c = config();
    // SAFETY: offsets from the format file; read_at checks bounds.
    let state = if c.tp.switch_prev_state_size == 8 {
        unsafe { ctx.read_at::<u64>(c.tp.switch_prev_state as usize) }.unwrap_or(0)
    } else {
        unsafe { ctx.read_at::<u32>(c.tp.switch_prev_state as usize) }.unwrap_or(0) as u64
    };
    let leave = tracer_ebpf::task::leave_from_record(state);
    // SAFETY: as above.
    let next = unsafe { ctx.read_at::<u32>(c.tp.switch_next_pid as usize) }.unwrap_or(0);
    on_switch(&ctx, current_task(), leave, next, None);
    0
}

/// One switch, decoded: `prev` (`current`) left as `leave`, `next` is coming in; `btf`:
/// both as trusted BTF pointers (tp_btf), which `--unwind dwarf`'s task storage needs.
#[inline(always)]
fn on_switch<C: StackIdContext>(
    ctx: &C,
    prev: Task,
    leave: Leave,
    next: u32,
    btf: Option<(*const u8, *const u8)>,
) {
    let oc = offcpu_config();
    let now = unsafe { bpf_ktime_get_ns() };

    // Switch-out: `prev` is `current`, its stacks are the ones it leaves with.
    let state = match leave {
        Leave::Blocked => STATE_BLOCKED,
        Leave::Preempted => STATE_PREEMPTED,
        Leave::Dead => 0,
    };
    if prev.tid != 0 && account::member(&prev) {
        let run_ns = prev.sum_exec();
        // SAFETY: copied out at once.
        if let Some(s) = (unsafe { OFFCPU_START.get(prev.tid) }).copied() {
            // Its last switch-in was not reported (see `unseen_switch_in`).
            let _ = OFFCPU_START.remove(prev.tid);
            match tracer_common::offcpu::unseen_switch_in(s.ts_ns, s.run_ns, now, run_ns) {
                Some((d, back_in)) => {
                    add_drop(offdrop::UNSEEN_TIMED, 1);
                    add_period(&s, prev.tid, btf.map(|b| b.0), d, back_in);
                }
                None => add_drop(offdrop::UNSEEN_LOST, 1),
            }
        }
        if state & oc.states != 0 {
            let stacks = stack_ids(ctx, oc, btf.map(|b| (&USTACK_COPY, b.0)));
            let start = OffStart {
                ts_ns: now,
                tgid: prev.tgid,
                user_stack: stacks.0,
                kernel_stack: stacks.1,
                state,
                comm: tracer_ebpf::task::current_comm(),
                run_ns,
            };
            if OFFCPU_START.insert(prev.tid, start, 0).is_err() {
                add_drop(offdrop::START_FULL, 1);
            }
        }
    }

    // Switch-in: a thread coming back adds the time it was away.
    let tid = next;
    if tid == 0 {
        return;
    }
    // SAFETY: copied out at once.
    let Some(s) = (unsafe { OFFCPU_START.get(tid) }).copied() else {
        return;
    };
    let _ = OFFCPU_START.remove(tid);
    if now <= s.ts_ns {
        return;
    }
    add_period(&s, tid, btf.map(|b| b.1), now - s.ts_ns, now);
}

/// The period `d` of thread `tid` that began at `s` and ended at `now`, added to the
/// sums (or sent with its stack copy: `task`, the thread as a trusted BTF pointer).
#[inline(always)]
fn add_period(s: &OffStart, tid: u32, task: Option<*const u8>, d: u64, now: u64) {
    let oc = offcpu_config();
    if d < oc.min_ns {
        return;
    }
    let mut key = OffKey {
        tgid: s.tgid,
        tid,
        user_stack: s.user_stack,
        kernel_stack: s.kernel_stack,
        state: s.state,
        _pad: 0,
    };
    if s.user_stack == STACK_COPIED {
        if let Some(task) = task {
            if send_copies(s, tid, task, d, now) {
                return;
            }
        }
        // The records could not go: the time stays, its user stack is lost (counted).
        add_drop(offdrop::COPY_LOST, 1);
        key.user_stack = STACK_COPY_LOST;
    }
    if oc.wakers != 0 {
        add_woken(key, &s.comm, d);
        return;
    }
    match OFFCPU.get_ptr_mut(key) {
        Some(v) => {
            // SAFETY: map value; a thread switches in on one CPU at a time, but two
            // threads may share a key only if they share a TID: never.
            unsafe {
                (*v).total_ns += d;
                (*v).count += 1;
                (*v).comm = s.comm;
            }
        }
        None => {
            let v = OffVal {
                total_ns: d,
                count: 1,
                comm: s.comm,
            };
            if OFFCPU.insert(key, v, BPF_NOEXIST as u64).is_err() {
                add_drop(offdrop::SUMS_FULL, 1);
                add_drop(offdrop::SUMS_FULL_NS, d);
            }
        }
    }
}

/// `--wakers`: the period `key` of `d` ns, joined with the waker its thread's
/// `sched_waking` left (none for a preempted period or a wakeup before the attach).
#[inline(always)]
fn add_woken(off: OffKey, comm: &[u8; 16], d: u64) {
    // SAFETY: copied out at once.
    let w = unsafe { WAKERS.get(off.tid) }.copied();
    if w.is_some() {
        let _ = WAKERS.remove(off.tid);
    }
    let w = w.unwrap_or_else(|| {
        let mut n = core::mem::MaybeUninit::<Waker>::uninit();
        // SAFETY: zeroed word by word (a zeroed comm is a memset the verifier walks byte
        // by byte), then every other field set.
        unsafe {
            tracer_ebpf::mem::zero(n.as_mut_ptr());
            let p = n.as_mut_ptr();
            (*p).tgid = NO_WAKER;
            (*p).tid = NO_WAKER;
            (*p).user_stack = STACK_NOT_TAKEN;
            (*p).kernel_stack = STACK_NOT_TAKEN;
            n.assume_init()
        }
    });
    let key = WakeKey {
        off,
        waker_tgid: w.tgid,
        waker_tid: w.tid,
        waker_user_stack: w.user_stack,
        waker_kernel_stack: w.kernel_stack,
    };
    match OFFWAKE.get_ptr_mut(key) {
        Some(v) => {
            // SAFETY: map value, written by the wakee's switch-in only (one CPU at a time).
            unsafe {
                (*v).total_ns += d;
                (*v).count += 1;
            }
        }
        None => {
            let v = WakeVal {
                total_ns: d,
                count: 1,
                comm: *comm,
                waker_comm: w.comm,
            };
            if OFFWAKE.insert(key, v, BPF_NOEXIST as u64).is_err() {
                add_drop(offdrop::SUMS_FULL, 1);
                add_drop(offdrop::SUMS_FULL_NS, d);
            }
        }
    }
}

/// `--unwind dwarf`: the period `d` of thread `tid` (`task`) with its stack copy, and
/// with `--wakers` the copy of its waker's, sent as ring records (the waker's first, so
/// user space has it when the waiter's arrives). The waker's ids stay in `WAKERS` for
/// the sums: a record that cannot go leaves the period to them.
#[inline(always)]
fn send_copies(s: &OffStart, tid: u32, task: *const u8, d: u64, now: u64) -> bool {
    let oc = offcpu_config();
    if oc.wakers != 0 {
        // SAFETY: read at once.
        if let Some(w) = unsafe { WAKERS.get(tid) } {
            // SAFETY: `task` is tp_btf's trusted `next`.
            let Some(c) = (unsafe { WAKER_COPY.get_or_zero(task) }) else {
                return false;
            };
            // SAFETY: map value of a StackCopy.
            unsafe {
                if w.user_stack != STACK_COPIED {
                    (*c).head.len = 0;
                }
                (*c).head.kind = COPY_WAKER;
                (*c).head.total_ns = d;
                (*c).head.at_ns = now;
                (*c).head.tgid = s.tgid;
                (*c).head.tid = tid;
                (*c).head.owner_tgid = w.tgid;
                (*c).head.owner_tid = w.tid;
                (*c).head.kernel_stack = w.kernel_stack;
                (*c).head.user_stack = w.user_stack;
                (*c).head.state = s.state;
                set_comm(&mut (*c).head.comm, &w.comm);
            }
            if !output(c) {
                return false;
            }
        }
    }
    // SAFETY: as above.
    let Some(c) = (unsafe { USTACK_COPY.get(task, None) }) else {
        return false;
    };
    // SAFETY: map value of a StackCopy.
    unsafe {
        (*c).head.kind = COPY_WAITER;
        (*c).head.total_ns = d;
        (*c).head.at_ns = now;
        (*c).head.tgid = s.tgid;
        (*c).head.tid = tid;
        (*c).head.owner_tgid = s.tgid;
        (*c).head.owner_tid = tid;
        (*c).head.kernel_stack = s.kernel_stack;
        (*c).head.user_stack = STACK_COPIED;
        (*c).head.state = s.state;
        set_comm(&mut (*c).head.comm, &s.comm);
    }
    if !output(c) {
        return false;
    }
    if oc.wakers != 0 {
        // The waker's ids were sent with the records; nothing else takes them.
        let _ = WAKERS.remove(tid);
    }
    true
}

/// A name copied as two words: a plain array assignment here became a call to the
/// byte-loop `memmove` (both arrays sit at 8-byte offsets of 8-byte aligned structs).
#[inline(always)]
fn set_comm(dst: &mut [u8; 16], src: &[u8; 16]) {
    let (d, s) = (dst.as_mut_ptr() as *mut u64, src.as_ptr() as *const u64);
    // SAFETY: both are 16 bytes, 8-byte aligned (see above).
    unsafe {
        core::ptr::write_volatile(d, core::ptr::read_volatile(s));
        core::ptr::write_volatile(d.add(1), core::ptr::read_volatile(s.add(1)));
    }
}

/// One stack copy as a ring record: its header and the bytes of stack it holds.
#[inline(always)]
fn output(c: *mut StackCopy) -> bool {
    // SAFETY: map value of a StackCopy; `len` is bounded to the stack field.
    unsafe {
        let n = (*c).head.len as usize;
        let n = if n > COPY_STACK { COPY_STACK } else { n };
        let bytes = core::slice::from_raw_parts(c as *const u8, COPY_HEADER + n);
        USTACK_EVENTS.output::<[u8]>(bytes, 0).is_ok()
    }
}

/// `sched_waking(p)`, in the waker's context: a traced thread asleep (its switch-out
/// recorded as blocked) keeps `current`'s ids and stacks as its waker (`wakee_btf`: the
/// wakee as a trusted BTF pointer, whose slot takes `current`'s stack copy in dwarf mode).
#[inline(always)]
fn on_waking<C: StackIdContext>(ctx: &C, wakee: u32, wakee_btf: Option<*const u8>) {
    let oc = offcpu_config();
    if oc.wakers == 0 || wakee == 0 {
        return;
    }
    // SAFETY: read at once.
    match unsafe { OFFCPU_START.get(wakee) } {
        Some(s) if s.state == STATE_BLOCKED => {}
        _ => return,
    }
    let me = current_task();
    let stacks = stack_ids(ctx, oc, wakee_btf.map(|p| (&WAKER_COPY, p)));
    let w = Waker {
        tgid: me.tgid,
        tid: me.tid,
        user_stack: stacks.0,
        kernel_stack: stacks.1,
        comm: tracer_ebpf::task::current_comm(),
    };
    if WAKERS.insert(wakee, w, 0).is_err() {
        add_drop(offdrop::WAKERS_FULL, 1);
    }
}

#[btf_tracepoint(function = "sched_waking")]
#[inline(always)]
pub fn offcpu_waking(ctx: BtfTracePointContext) -> u32 {
    let p: *const u8 = ctx.arg(0);
    on_waking(&ctx, task_from_btf(p, true).tid, Some(p));
    0
}

#[raw_tracepoint(tracepoint = "sched_waking")]
#[inline(always)]
pub fn offcpu_waking_raw(ctx: RawTracePointContext) -> i32 {
    on_waking(
        &ctx,
        task_from_btf(ctx.arg::<u64>(0) as *const u8, false).tid,
        None,
    );
    0
}

/// `sched_waking`'s record has `sched_wakeup`'s layout (one event class).
#[tracepoint(category = "sched", name = "sched_waking")]
#[inline(always)]
pub fn offcpu_waking_tp(ctx: TracePointContext) -> u32 {
    // SAFETY: offset from the format file; read_at checks bounds.
    let pid = unsafe { ctx.read_at::<u32>(config().tp.wakeup_pid as usize) }.unwrap_or(0);
    on_waking(&ctx, pid, None);
    0
}

// The traced set's followers, as the scheduling family's (same names), without its
// accounting: only `TRACKED` follows a fork or an exec here.

#[btf_tracepoint(function = "sched_process_fork")]
#[inline(always)]
pub fn sched_fork_btf(ctx: BtfTracePointContext) -> u32 {
    account::fork(current_task(), task_from_btf(ctx.arg(1), true));
    0
}

/// `sched_process_exec(p, old_pid, bprm)`: a non-main thread that execs takes the
/// leader's TID (`de_thread()`); its place in the traced set follows it.
#[btf_tracepoint(function = "sched_process_exec")]
#[inline(always)]
pub fn sched_exec_btf(ctx: BtfTracePointContext) -> u32 {
    let new = task_from_btf(ctx.arg(0), true).tid;
    let old: u64 = ctx.arg(1);
    follow_exec(new, old as u32);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_fork")]
#[inline(always)]
pub fn sched_fork_raw(ctx: RawTracePointContext) -> i32 {
    account::fork(
        current_task(),
        task_from_btf(ctx.arg::<u64>(1) as *const u8, false),
    );
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
#[inline(always)]
pub fn sched_exec_raw(ctx: RawTracePointContext) -> i32 {
    let new = task_from_btf(ctx.arg::<u64>(0) as *const u8, false).tid;
    follow_exec(new, ctx.arg::<u64>(1) as u32);
    0
}

#[tracepoint(category = "sched", name = "sched_process_fork")]
#[inline(always)]
pub fn sched_fork_tp(ctx: TracePointContext) -> u32 {
    // SAFETY: offset from the format file; read_at checks bounds.
    let child = unsafe { ctx.read_at::<u32>(config().tp.fork_child_pid as usize) }.unwrap_or(0);
    // Known by its TID alone, as the record gives it.
    let t = Task {
        tid: child,
        tgid: 0,
        ptr: core::ptr::null(),
        trusted: false,
        comm: tracer_ebpf::CommSrc::None,
    };
    account::fork(current_task(), t);
    0
}

#[tracepoint(category = "sched", name = "sched_process_exec")]
#[inline(always)]
pub fn sched_exec_tp(ctx: TracePointContext) -> u32 {
    let c = config();
    // SAFETY: as above.
    let new = unsafe { ctx.read_at::<u32>(c.tp.exec_pid as usize) }.unwrap_or(0);
    let old = unsafe { ctx.read_at::<u32>(c.tp.exec_old_pid as usize) }.unwrap_or(0);
    follow_exec(new, old);
    0
}

#[inline(always)]
fn follow_exec(new: u32, old: u32) {
    if new != old && new != 0 && old != 0 {
        account::follow_exec(old, new);
    }
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
