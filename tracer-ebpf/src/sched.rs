//! The scheduling family's entry points, as functions: each decodes its attach point's
//! arguments (tp_btf, raw tracepoint, classic tracepoint, perf's switch hooks) into
//! plain values and calls the shared accounting in `account`. The programs themselves
//! (`src/bin/sched.rs`) only name their attach points and call these.
use aya_ebpf::{
    helpers::bpf_get_current_task,
    programs::{BtfTracePointContext, RawTracePointContext, TracePointContext},
    EbpfContext as _,
};

#[cfg(feature = "record")]
use crate::record;
use crate::{
    account, maps,
    task::{
        config, current_from_arg, current_task, current_task_btf, leave_from_args, task_from_btf,
    },
    CommSrc, Leave, Task,
};

// ---------------------------------------------------------------- tp_btf and raw tracepoint
// Both give the tracepoint's arguments as an array of u64: sched_switch(bool preempt,
// prev, next, unsigned int prev_state), sched_wakeup(p), sched_process_fork(parent, child).

/// The arguments of a tp_btf or raw tracepoint program, each a u64 (a number or a
/// pointer).
pub trait Args {
    /// The arguments are BTF pointers (tp_btf), not plain numbers (raw_tp).
    const TRUSTED: bool;
    fn arg(&self, n: usize) -> u64;
    #[inline(always)]
    fn ptr(&self, n: usize) -> *const u8 {
        self.arg(n) as *const u8
    }
}

impl Args for BtfTracePointContext {
    const TRUSTED: bool = true;
    #[inline(always)]
    fn arg(&self, n: usize) -> u64 {
        BtfTracePointContext::arg(self, n)
    }
}

impl Args for RawTracePointContext {
    const TRUSTED: bool = false;
    #[inline(always)]
    fn arg(&self, n: usize) -> u64 {
        RawTracePointContext::arg(self, n)
    }
}

/// `current`, as trusted as the context's pointers.
#[cfg(feature = "record")]
#[inline(always)]
fn current<C: Args>() -> Task {
    if C::TRUSTED {
        current_task_btf()
    } else {
        current_task()
    }
}

/// `sched_switch(preempt, prev, next, prev_state)`. `REC`: the switch program of
/// `tracer record` / `tracer slow` (`*_rec_*`), which also streams events; `tracer run`
/// loads the one without, so the kernel's verifier never walks the record path at its
/// start-up (it cost ~50 ms there, even when skipped).
#[inline(always)]
pub fn switch<C: Args, const REC: bool>(ctx: &C) {
    on_switch::<REC>(ctx.arg(0), ctx.ptr(1), ctx.ptr(2), ctx.arg(3), C::TRUSTED);
}

#[inline(always)]
fn on_switch<const REC: bool>(
    preempt: u64,
    prev: *const u8,
    next: *const u8,
    prev_state: u64,
    trusted: bool,
) {
    // `prev` is `current`. A trusted argument gives its ids in two plain loads; without
    // one, `bpf_get_current_pid_tgid` beats two probe reads.
    let prev = if trusted {
        current_from_arg(prev)
    } else {
        current_task()
    };
    let next = task_from_btf(next, trusted);
    // One read of the flag (a record program streams only when asked to).
    #[cfg(feature = "record")]
    let rec = if REC { config().record.on } else { 0 };
    #[cfg(feature = "record")]
    if rec != 0 {
        // Before the accounting: a dying thread leaves the traced set there.
        record::switch(&prev, &next);
    }
    let now = account::switch(
        prev,
        leave_from_args(preempt & 0xff, prev_state as u32),
        next,
    );
    #[cfg(feature = "record")]
    if rec != 0 {
        // After it: the event carries the accounting's timestamps.
        record::switch_done(&prev, preempt & 0xff != 0, prev_state as u32, &next, now);
    }
    #[cfg(not(feature = "record"))]
    let _ = now;
}

/// `sched_wakeup(p)` (`new`: `sched_wakeup_new(p)`).
#[inline(always)]
pub fn wakeup<C: Args>(ctx: &C, new: bool) {
    let p = task_from_btf(ctx.ptr(0), C::TRUSTED);
    let at = account::wakeup(p, new);
    #[cfg(feature = "record")]
    if config().record.on != 0 {
        record::wakeup(&p, new, at);
    }
    #[cfg(not(feature = "record"))]
    let _ = at;
}

/// `sched_process_fork(parent, child)`.
#[inline(always)]
pub fn fork<C: Args>(ctx: &C) {
    let child = ctx.ptr(1);
    account::fork(current_task(), task_from_btf(child, C::TRUSTED));
}

/// `sched_process_exec(p, old_pid, bprm)`: a non-main thread that execs takes the
/// leader's TID (`de_thread()`); the entries keyed by TID follow it.
#[inline(always)]
pub fn exec<C: Args>(ctx: &C) {
    on_exec(ctx.ptr(0), ctx.arg(1), ctx.ptr(2), C::TRUSTED);
}

#[inline(always)]
fn on_exec(p: *const u8, old: u64, bprm: *const u8, trusted: bool) {
    let t = task_from_btf(p, trusted);
    account::exec(&t, old as u32);
    #[cfg(feature = "record")]
    if config().record.on != 0 {
        record::exec(&t, old as u32, bprm);
    }
    #[cfg(not(feature = "record"))]
    let _ = bprm;
}

/// `sched_process_exit(p)`: `p` is `current` (system-wide in tp_btf mode, see
/// `account::exiting`).
#[inline(always)]
pub fn exiting() {
    account::exiting(&current_task_btf());
}

// Task events of `tracer record` (attached only when recording; see `record`).

/// `task_newtask(task, clone_flags)`.
#[cfg(feature = "record")]
#[inline(always)]
pub fn rec_newtask<C: Args>(ctx: &C) {
    record::newtask(
        &task_from_btf(ctx.ptr(0), C::TRUSTED),
        ctx.arg(1),
        &current::<C>(),
    );
}

/// `sched_process_exit(p)`: `p` is `current`.
#[cfg(feature = "record")]
#[inline(always)]
pub fn rec_exit<C: Args>() {
    let mut t = current::<C>();
    if !C::TRUSTED {
        t.ptr = unsafe { bpf_get_current_task() } as *const u8;
    }
    record::exit(&t);
}

/// `task_rename(task, comm)`.
#[cfg(feature = "record")]
#[inline(always)]
pub fn rec_rename<C: Args>(ctx: &C) {
    let comm = ctx.ptr(1);
    record::rename(&task_from_btf(ctx.ptr(0), C::TRUSTED), comm);
}

/// `sched_migrate_task(p, dest_cpu)`.
#[cfg(feature = "record")]
#[inline(always)]
pub fn rec_migrate<C: Args>(ctx: &C) {
    let dest = ctx.arg(1);
    record::migrate(&task_from_btf(ctx.ptr(0), C::TRUSTED), dest as u32);
}

// ---------------------------------------------------------------- classic tracepoint

#[inline(always)]
fn rec_u32(ctx: &TracePointContext, off: u32) -> u32 {
    // SAFETY: offsets come from the tracepoint's format file; read_at checks bounds.
    unsafe { ctx.read_at::<u32>(off as usize) }.unwrap_or(0)
}

/// A task known by its TID alone (a classic tracepoint's record).
#[inline(always)]
fn tid_only(tid: u32, comm: CommSrc) -> Task {
    Task {
        tid,
        tgid: 0,
        ptr: core::ptr::null(),
        trusted: false,
        comm,
    }
}

#[inline(always)]
pub fn switch_tp(ctx: &TracePointContext) {
    let c = config();
    let state = if c.tp.switch_prev_state_size == 8 {
        // SAFETY: as rec_u32.
        unsafe { ctx.read_at::<u64>(c.tp.switch_prev_state as usize) }.unwrap_or(0)
    } else {
        rec_u32(ctx, c.tp.switch_prev_state) as u64
    };
    let leave = crate::task::leave_from_record(state);
    let next = tid_only(
        rec_u32(ctx, c.tp.switch_next_pid),
        CommSrc::Record(unsafe { (ctx.as_ptr() as *const u8).add(c.tp.switch_next_comm as usize) }),
    );
    account::switch(current_task(), leave, next);
}

#[inline(always)]
pub fn wakeup_tp(ctx: &TracePointContext, new: bool) {
    let woken = tid_only(rec_u32(ctx, config().tp.wakeup_pid), CommSrc::None);
    let _ = account::wakeup(woken, new);
}

/// Without BTF the slice cannot be read from `se.sum_exec_runtime`; `sched_stat_runtime`
/// reports the same deltas from `update_curr()`, for the task running on this CPU.
#[inline(always)]
pub fn stat_runtime_tp(ctx: &TracePointContext) {
    let c = config();
    let pid = rec_u32(ctx, c.tp.runtime_pid);
    // SAFETY: offset from the format file; read_at checks bounds.
    let runtime = unsafe { ctx.read_at::<u64>(c.tp.runtime_val as usize) }.unwrap_or(0);
    account::add_runtime(pid, runtime);
}

#[inline(always)]
pub fn exec_tp(ctx: &TracePointContext) {
    let c = config();
    let t = tid_only(rec_u32(ctx, c.tp.exec_pid), CommSrc::None);
    account::exec(&t, rec_u32(ctx, c.tp.exec_old_pid));
    account::runtime_gap(t.tid);
}

#[inline(always)]
pub fn fork_tp(ctx: &TracePointContext) {
    let child = tid_only(rec_u32(ctx, config().tp.fork_child_pid), CommSrc::None);
    let parent = current_task();
    let tid = parent.tid;
    account::fork(parent, child);
    account::runtime_gap(tid);
}

// ---------------------------------------------------------------- perf-sched
// perf's own context-switch hooks, `__perf_event_task_sched_out(prev, next)` (before the
// switch, current = prev) and `__perf_event_task_sched_in(prev, task)` (after it,
// current = task). They carry no prev_state: read `prev->__state` (BTF offset).

/// `trusted`: fentry (BTF pointers), else kprobe (probe reads).
#[inline(always)]
fn perf_task(trusted: bool) -> Task {
    if trusted {
        current_task_btf()
    } else {
        let mut t = current_task();
        t.ptr = unsafe { bpf_get_current_task() } as *const u8;
        t
    }
}

/// At `__perf_event_task_sched_out` the task leaving is still `current`.
#[inline(always)]
pub fn perf_sched_out(trusted: bool) {
    let prev = perf_task(trusted);
    let c = config();
    let state = prev.field::<u32>(c.task.state).unwrap_or(0);
    let leave = if state & c.task.dead_mask != 0 {
        Leave::Dead
    } else if state == 0 {
        Leave::Preempted
    } else {
        Leave::Blocked
    };
    account::switch_out(prev, leave);
}

/// At `__perf_event_task_sched_in` the task arriving is `current`.
#[inline(always)]
pub fn perf_sched_in(trusted: bool) {
    account::switch_in(perf_task(trusted));
}

// ---------------------------------------------------------------- task iterator

/// `iter/task`: one `ExitRecord` (TID and totals) per task with an entry in `TASK_STATS`,
/// written to the iterator's seq_file. User space reads the live threads this way in
/// tp_btf mode, where the accumulators hang off the tasks instead of a hash map.
/// The context is `struct bpf_iter__task { struct bpf_iter_meta *meta; struct
/// task_struct *task; }` (task null on the final call).
#[inline(always)]
pub fn dump_threads(ctx: *mut core::ffi::c_void) {
    // SAFETY: the verifier types both context fields from the iterator's BTF prototype.
    let (meta, task) = unsafe {
        let c = ctx as *const [*const u8; 2];
        ((*c)[0], (*c)[1])
    };
    if task.is_null() {
        return;
    }
    let t = task_from_btf(task, true);
    // SAFETY: a trusted task pointer from the iterator.
    let Some(s) = (unsafe { maps::TASK_STATS.get(task, None) }) else {
        return;
    };
    let mut rec = tracer_common::ExitRecord {
        tid: t.tid,
        became: 0,
        // SAFETY: the task's storage, copied out.
        stats: unsafe { *s },
    };
    // Its name now, with its totals in one read: the entry's is its name when the
    // entry was made, and /proc, read after, no longer has a thread that exits in
    // between (torture seed 940035: a thread shown by the name it renamed itself from).
    rec.stats.comm = t.comm.read();
    // SAFETY: `meta->seq` is the first field of `struct bpf_iter_meta`.
    unsafe {
        let seq = core::ptr::read_volatile(meta as *const *mut aya_ebpf::bindings::seq_file);
        aya_ebpf::helpers::generated::bpf_seq_write(
            seq,
            &rec as *const _ as *const core::ffi::c_void,
            core::mem::size_of::<tracer_common::ExitRecord>() as u32,
        );
    }
}

/// `iter/task`: each task's `ThreadHist` where it has one (`tracer serve` with
/// `hist_in_task`), under its TID and TGID now.
#[cfg(feature = "serve")]
#[inline(always)]
pub fn dump_hists(ctx: *mut core::ffi::c_void) {
    // SAFETY: as in `dump_threads`.
    let (meta, task) = unsafe {
        let c = ctx as *const [*const u8; 2];
        ((*c)[0], (*c)[1])
    };
    if task.is_null() {
        return;
    }
    // SAFETY: a trusted task pointer from the iterator.
    let Some(h) = (unsafe { maps::TASK_HIST.get(task, None) }) else {
        return;
    };
    // SAFETY: `meta->seq` is the first field of `struct bpf_iter_meta`; `h` is the
    // task's storage, written straight from there.
    unsafe {
        let seq = core::ptr::read_volatile(meta as *const *mut aya_ebpf::bindings::seq_file);
        aya_ebpf::helpers::generated::bpf_seq_write(
            seq,
            h as *const core::ffi::c_void,
            core::mem::size_of::<tracer_common::hist::ThreadHist>() as u32,
        );
    }
}
