//! The tracer's kernel side: per-thread on-CPU time, run-queue latency and off-CPU time,
//! with their histograms, computed at every context switch.
//!
//! Entry points are thin: they decode their attach point's arguments (tp_btf, raw
//! tracepoint or classic tracepoint) into plain values and call the shared accounting in
//! `account`. Task field offsets and tracepoint record offsets come from user space in
//! `CONFIG` (resolved from kernel BTF and tracefs at load time).
#![no_std]
#![no_main]
// `atomic_xadd` for the task-event counters (record.rs): bpfel's core lacks fetch_add.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod account;
mod cgroups;
mod maps;
mod offcpu;
mod record;

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_probe_read_kernel, generated::bpf_get_current_task_btf,
    },
    macros::{btf_tracepoint, fentry, kprobe, raw_tracepoint, tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, ProbeContext, RawTracePointContext, TracePointContext,
    },
};
use tracer_common::{Config, COMM_LEN};

/// Load-time configuration; user space overwrites it in `.rodata` before load.
#[no_mangle]
static CONFIG: Config = Config {
    cgroup_id: 0,
    filter: 0,
    hist_scope: 0,
    n_counters: 0,
    task_dead_mask: 0,
    task_pid_off: 0,
    task_tgid_off: 0,
    task_comm_off: 0,
    tp_switch_prev_state: 0,
    tp_switch_prev_state_size: 0,
    tp_switch_next_pid: 0,
    tp_switch_next_comm: 0,
    tp_wakeup_pid: 0,
    tp_fork_child_pid: 0,
    tp_dead_mask: 0,
    tp_blocked_mask: 0,
    task_state_off: 0,
    task_sum_exec_off: 0,
    tp_runtime_pid: 0,
    tp_runtime_val: 0,
    task_run_delay_off: 0,
    use_task_storage: 0,
    tp_exec_pid: 0,
    tp_exec_old_pid: 0,
    task_prev_sum_exec_off: 0,
    record: 0,
    task_prio_off: 0,
    task_cpu_off: 0,
    bprm_filename_off: 0,
    hist_pow2: 0,
    cgroup_node_only: 0,
    thread_cgroup: 0,
    task_signal_off: 0,
    signal_exec_task_off: 0,
    _pad0: 0,
    slow_min_ns: 0,
};

#[inline(always)]
fn config() -> &'static Config {
    // SAFETY: read through a volatile pointer so the compiler does not constant-fold the
    // placeholder values; the verifier sees the real, frozen `.rodata`.
    unsafe { core::ptr::read_volatile(&&CONFIG) }
}

/// A task as seen at an attach point: what the accounting needs to know about it.
#[derive(Clone, Copy)]
pub struct Task {
    pub tid: u32,
    /// 0 when not known yet: read from `ptr` only when needed.
    pub tgid: u32,
    /// The `task_struct`, when the attach point gives it (null otherwise: then `current`
    /// is read through `bpf_get_current_task`).
    pub ptr: *const u8,
    /// `ptr` is a BTF pointer the verifier trusts (tp_btf and fentry arguments,
    /// `bpf_get_current_task_btf`): fields are plain loads, not `bpf_probe_read_kernel`
    /// calls (about 12 ns each on the sched_switch path).
    pub trusted: bool,
    /// Where its comm can be read from, if anywhere.
    pub comm: CommSrc,
}

impl Task {
    /// The TGID, read from the task only when needed (new entries, fork), not per event.
    #[inline(always)]
    pub fn tgid(&self) -> u32 {
        if self.tgid != 0 || self.ptr.is_null() {
            self.tgid
        } else {
            self.field::<u32>(config().task_tgid_off).unwrap_or(0)
        }
    }

    /// A field at a BTF-resolved offset (`off` != 0). A task without a pointer is
    /// `current` (the task leaving the CPU).
    #[inline(always)]
    pub(crate) fn field<T: Copy>(&self, off: u32) -> Option<T> {
        if self.trusted {
            // SAFETY: the verifier checks the load against the task_struct BTF at this
            // (load-time constant) offset and makes it fault-safe.
            return Some(unsafe {
                core::ptr::read_volatile(self.ptr.add(off as usize) as *const T)
            });
        }
        let base = if self.ptr.is_null() {
            unsafe { bpf_get_current_task() as *const u8 }
        } else {
            self.ptr
        };
        // SAFETY: bpf_probe_read_kernel validates the address.
        unsafe { bpf_probe_read_kernel(base.add(off as usize) as *const T) }.ok()
    }

    /// The scheduler's runtime `se.sum_exec_runtime`, or 0 when the offset is unknown.
    /// At switch-out `update_curr()` has already run for the task leaving.
    #[inline(always)]
    pub fn sum_exec(&self) -> u64 {
        match config().task_sum_exec_off {
            0 => 0,
            off => self.field::<u64>(off).unwrap_or(0),
        }
    }

    /// The runtime of the slice running now, from the scheduler (`sum_exec_runtime` less
    /// `prev_sum_exec_runtime`, its value at the switch-in), or None when not known.
    #[inline(always)]
    pub fn running_slice(&self) -> Option<u64> {
        let c = config();
        if c.task_prev_sum_exec_off == 0 || c.task_sum_exec_off == 0 {
            return None;
        }
        let prev = self.field::<u64>(c.task_prev_sum_exec_off)?;
        self.sum_exec().checked_sub(prev)
    }

    /// `sched_info.run_delay`, the task's total run-queue wait, or None when not
    /// configured. At sched_switch the scheduler has not yet added the wait that ends
    /// there (`sched_info_arrive()` runs after the tracepoint).
    #[inline(always)]
    pub fn run_delay(&self) -> Option<u64> {
        match config().task_run_delay_off {
            0 => None,
            off => self.field::<u64>(off),
        }
    }
}

#[derive(Clone, Copy)]
pub enum CommSrc {
    None,
    /// The task is `current`: `bpf_get_current_comm`.
    Current,
    /// `task_struct::comm` at this kernel address.
    Kernel(*const u8),
    /// The tracepoint record at this address.
    Record(*const u8),
}

impl CommSrc {
    #[inline(always)]
    pub(crate) fn read(self) -> [u8; COMM_LEN] {
        let p = match self {
            CommSrc::None => return [0; COMM_LEN],
            CommSrc::Current => return bpf_get_current_comm().unwrap_or([0; COMM_LEN]),
            CommSrc::Kernel(p) | CommSrc::Record(p) => p,
        };
        // SAFETY: bpf_probe_read_kernel validates the address.
        unsafe { bpf_probe_read_kernel(p as *const [u8; COMM_LEN]) }.unwrap_or([0; COMM_LEN])
    }
}

/// Decodes a `task_struct *` with the BTF offsets from `CONFIG`: one field read (the
/// TID) per event; the TGID and comm only when needed.
#[inline(always)]
pub(crate) fn task_from_btf(p: *const u8, trusted: bool) -> Task {
    let c = config();
    let mut t = Task {
        tid: 0,
        tgid: 0,
        ptr: p,
        trusted,
        comm: CommSrc::Kernel(unsafe { p.add(c.task_comm_off as usize) }),
    };
    t.tid = t.field::<u32>(c.task_pid_off).unwrap_or(0);
    t
}

/// The task leaving the CPU is `current`: its ids come from a helper, not a probe read.
#[inline(always)]
fn current_task() -> Task {
    let id = bpf_get_current_pid_tgid();
    Task {
        tid: id as u32,
        tgid: (id >> 32) as u32,
        ptr: core::ptr::null(),
        trusted: false,
        comm: CommSrc::Current,
    }
}

/// `current` as a trusted BTF pointer (tp_btf, fentry): ids from the helper, fields by
/// plain loads.
#[inline(always)]
pub(crate) fn current_task_btf() -> Task {
    let mut t = current_task();
    t.ptr = unsafe { bpf_get_current_task_btf() } as *const u8;
    t.trusted = true;
    t
}

/// How the previous task left the CPU.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Still runnable (preempted).
    Preempted,
    /// Blocked (voluntary switch).
    Blocked,
    /// Final switch-out of a dead task.
    Dead,
}

/// tp_btf / raw_tp: `sched_switch(bool preempt, prev, next, unsigned int prev_state)`.
/// `prev_state` became an argument in 5.18 (see `compat` in user space).
#[inline(always)]
pub(crate) fn leave_from_args(preempt: u64, prev_state: u32) -> Leave {
    if prev_state & config().task_dead_mask != 0 {
        Leave::Dead
    } else if preempt != 0 || prev_state == 0 {
        Leave::Preempted
    } else {
        Leave::Blocked
    }
}

// ---------------------------------------------------------------- tp_btf and raw tracepoint
// Both give the tracepoint's arguments as an array of u64: sched_switch(bool preempt,
// prev, next, unsigned int prev_state), sched_wakeup(p), sched_process_fork(parent, child).

/// `trusted`: the arguments are BTF pointers (tp_btf), not plain numbers (raw_tp).
/// `REC`: the switch program of `tracer record` / `tracer slow` (`*_rec_*`), which also
/// streams events; `tracer run` loads the one without, so the kernel's verifier never
/// walks the record path at its start-up (it cost ~50 ms there, even when skipped).
#[inline(always)]
fn on_switch<const REC: bool>(preempt: u64, next: *const u8, prev_state: u64, trusted: bool) {
    let prev = if trusted {
        current_task_btf()
    } else {
        current_task()
    };
    let next = task_from_btf(next, trusted);
    // One read of the flag (a record program streams only when asked to).
    let rec = if REC { config().record } else { 0 };
    if rec != 0 {
        // Before the accounting: a dying thread leaves the traced set there.
        record::switch(&prev, &next);
    }
    account::switch(
        prev,
        leave_from_args(preempt & 0xff, prev_state as u32),
        next,
    );
    if rec != 0 {
        // After it: the event carries the accounting's timestamps.
        record::switch_done(&prev, preempt & 0xff != 0, prev_state as u32, &next);
    }
}

#[inline(always)]
fn on_wakeup(p: *const u8, trusted: bool, new: bool) {
    let p = task_from_btf(p, trusted);
    let at = account::wakeup(p, new);
    if config().record != 0 {
        record::wakeup(&p, new, at);
    }
}

#[inline(always)]
fn on_fork(child: *const u8, trusted: bool) {
    account::fork(current_task(), task_from_btf(child, trusted));
}

#[inline(always)]
fn on_exec(p: *const u8, old: u64, bprm: *const u8, trusted: bool) {
    let t = task_from_btf(p, trusted);
    account::exec(&t, old as u32);
    if config().record != 0 {
        record::exec(&t, old as u32, bprm);
    }
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_btf(ctx: BtfTracePointContext) -> u32 {
    on_switch::<false>(ctx.arg(0), ctx.arg(2), ctx.arg(3), true);
    0
}

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch_rec_btf(ctx: BtfTracePointContext) -> u32 {
    on_switch::<true>(ctx.arg(0), ctx.arg(2), ctx.arg(3), true);
    0
}

#[btf_tracepoint(function = "sched_wakeup")]
pub fn sched_wakeup_btf(ctx: BtfTracePointContext) -> u32 {
    on_wakeup(ctx.arg(0), true, false);
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn sched_wakeup_new_btf(ctx: BtfTracePointContext) -> u32 {
    on_wakeup(ctx.arg(0), true, true);
    0
}

#[btf_tracepoint(function = "sched_process_fork")]
pub fn sched_fork_btf(ctx: BtfTracePointContext) -> u32 {
    on_fork(ctx.arg(1), true);
    0
}

/// `sched_process_exec(p, old_pid, bprm)`: a non-main thread that execs takes the
/// leader's TID (`de_thread()`); the entries keyed by TID follow it.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn sched_exec_btf(ctx: BtfTracePointContext) -> u32 {
    on_exec(ctx.arg(0), ctx.arg(1), ctx.arg(2), true);
    0
}

// Task events of `tracer record` (attached only when recording; see `record`).

#[btf_tracepoint(function = "task_newtask")]
pub fn rec_newtask_btf(ctx: BtfTracePointContext) -> u32 {
    record::newtask(
        &task_from_btf(ctx.arg(0), true),
        ctx.arg(1),
        &current_task_btf(),
    );
    0
}

#[btf_tracepoint(function = "sched_process_exit")]
pub fn rec_exit_btf(_ctx: BtfTracePointContext) -> u32 {
    record::exit(&current_task_btf());
    0
}

#[btf_tracepoint(function = "task_rename")]
pub fn rec_rename_btf(ctx: BtfTracePointContext) -> u32 {
    let comm: u64 = ctx.arg(1);
    record::rename(&task_from_btf(ctx.arg(0), true), comm as *const u8);
    0
}

#[btf_tracepoint(function = "sched_migrate_task")]
pub fn rec_migrate_btf(ctx: BtfTracePointContext) -> u32 {
    let dest: u64 = ctx.arg(1);
    record::migrate(&task_from_btf(ctx.arg(0), true), dest as u32);
    0
}

/// The cost floor for `cargo xtask bench`: a tp_btf sched_switch program that only
/// bumps a per-CPU counter. Not used by `tracer run`.
#[btf_tracepoint(function = "sched_switch")]
pub fn floor_switch(_ctx: BtfTracePointContext) -> u32 {
    if let Some(p) = maps::FLOOR.get_ptr_mut(0) {
        // SAFETY: per-CPU slot.
        unsafe { *p += 1 };
    }
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch_raw(ctx: RawTracePointContext) -> i32 {
    on_switch::<false>(ctx.arg(0), ctx.arg(2), ctx.arg(3), false);
    0
}

#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch_rec_raw(ctx: RawTracePointContext) -> i32 {
    on_switch::<true>(ctx.arg(0), ctx.arg(2), ctx.arg(3), false);
    0
}

#[raw_tracepoint(tracepoint = "sched_wakeup")]
pub fn sched_wakeup_raw(ctx: RawTracePointContext) -> i32 {
    on_wakeup(ctx.arg(0), false, false);
    0
}

#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
pub fn sched_wakeup_new_raw(ctx: RawTracePointContext) -> i32 {
    on_wakeup(ctx.arg(0), false, true);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_fork_raw(ctx: RawTracePointContext) -> i32 {
    on_fork(ctx.arg(1), false);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_exec_raw(ctx: RawTracePointContext) -> i32 {
    on_exec(ctx.arg(0), ctx.arg(1), ctx.arg(2), false);
    0
}

#[raw_tracepoint(tracepoint = "task_newtask")]
pub fn rec_newtask_raw(ctx: RawTracePointContext) -> i32 {
    record::newtask(
        &task_from_btf(ctx.arg(0), false),
        ctx.arg(1),
        &current_task(),
    );
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn rec_exit_raw(_ctx: RawTracePointContext) -> i32 {
    let mut t = current_task();
    t.ptr = unsafe { bpf_get_current_task() } as *const u8;
    record::exit(&t);
    0
}

#[raw_tracepoint(tracepoint = "task_rename")]
pub fn rec_rename_raw(ctx: RawTracePointContext) -> i32 {
    let comm: u64 = ctx.arg(1);
    record::rename(&task_from_btf(ctx.arg(0), false), comm as *const u8);
    0
}

#[raw_tracepoint(tracepoint = "sched_migrate_task")]
pub fn rec_migrate_raw(ctx: RawTracePointContext) -> i32 {
    let dest: u64 = ctx.arg(1);
    record::migrate(&task_from_btf(ctx.arg(0), false), dest as u32);
    0
}

// ---------------------------------------------------------------- classic tracepoint

#[inline(always)]
fn rec_u32(ctx: &TracePointContext, off: u32) -> u32 {
    // SAFETY: offsets come from the tracepoint's format file; read_at checks bounds.
    unsafe { ctx.read_at::<u32>(off as usize) }.unwrap_or(0)
}

#[tracepoint(category = "sched", name = "sched_switch")]
pub fn sched_switch_tp(ctx: TracePointContext) -> u32 {
    let c = config();
    let state = if c.tp_switch_prev_state_size == 8 {
        // SAFETY: as rec_u32.
        unsafe { ctx.read_at::<u64>(c.tp_switch_prev_state as usize) }.unwrap_or(0)
    } else {
        rec_u32(&ctx, c.tp_switch_prev_state) as u64
    };
    let leave = if state & c.tp_dead_mask as u64 != 0 {
        Leave::Dead
    } else if state & c.tp_blocked_mask as u64 != 0 {
        Leave::Blocked
    } else {
        Leave::Preempted
    };
    let next = Task {
        tid: rec_u32(&ctx, c.tp_switch_next_pid),
        tgid: 0,
        ptr: core::ptr::null(),
        trusted: false,
        comm: CommSrc::Record(unsafe {
            (ctx.as_ptr() as *const u8).add(c.tp_switch_next_comm as usize)
        }),
    };
    account::switch(current_task(), leave, next);
    0
}

#[inline(always)]
fn woken_from_record(ctx: &TracePointContext) -> Task {
    Task {
        tid: rec_u32(ctx, config().tp_wakeup_pid),
        tgid: 0,
        ptr: core::ptr::null(),
        trusted: false,
        comm: CommSrc::None,
    }
}

#[tracepoint(category = "sched", name = "sched_wakeup")]
pub fn sched_wakeup_tp(ctx: TracePointContext) -> u32 {
    let _ = account::wakeup(woken_from_record(&ctx), false);
    0
}

#[tracepoint(category = "sched", name = "sched_wakeup_new")]
pub fn sched_wakeup_new_tp(ctx: TracePointContext) -> u32 {
    let _ = account::wakeup(woken_from_record(&ctx), true);
    0
}

/// Without BTF the slice cannot be read from `se.sum_exec_runtime`; `sched_stat_runtime`
/// reports the same deltas from `update_curr()`, for the task running on this CPU.
#[tracepoint(category = "sched", name = "sched_stat_runtime")]
pub fn sched_stat_runtime_tp(ctx: TracePointContext) -> u32 {
    let c = config();
    let pid = rec_u32(&ctx, c.tp_runtime_pid);
    // SAFETY: offset from the format file; read_at checks bounds.
    let runtime = unsafe { ctx.read_at::<u64>(c.tp_runtime_val as usize) }.unwrap_or(0);
    account::add_runtime(pid, runtime);
    0
}

#[tracepoint(category = "sched", name = "sched_process_exec")]
pub fn sched_exec_tp(ctx: TracePointContext) -> u32 {
    let c = config();
    let t = Task {
        tid: rec_u32(&ctx, c.tp_exec_pid),
        tgid: 0,
        ptr: core::ptr::null(),
        trusted: false,
        comm: CommSrc::None,
    };
    account::exec(&t, rec_u32(&ctx, c.tp_exec_old_pid));
    0
}

#[tracepoint(category = "sched", name = "sched_process_fork")]
pub fn sched_fork_tp(ctx: TracePointContext) -> u32 {
    let child = Task {
        tid: rec_u32(&ctx, config().tp_fork_child_pid),
        tgid: 0,
        ptr: core::ptr::null(),
        trusted: false,
        comm: CommSrc::None,
    };
    account::fork(current_task(), child);
    0
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
fn perf_sched_out(trusted: bool) {
    let prev = perf_task(trusted);
    let c = config();
    let state = prev.field::<u32>(c.task_state_off).unwrap_or(0);
    let leave = if state & c.task_dead_mask != 0 {
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
fn perf_sched_in(trusted: bool) {
    account::switch_in(perf_task(trusted));
}

#[fentry(function = "__perf_event_task_sched_out")]
pub fn perf_sched_out_fentry(_ctx: FEntryContext) -> i32 {
    perf_sched_out(true);
    0
}

#[fentry(function = "__perf_event_task_sched_in")]
pub fn perf_sched_in_fentry(_ctx: FEntryContext) -> i32 {
    perf_sched_in(true);
    0
}

#[kprobe]
pub fn perf_sched_out_kprobe(_ctx: ProbeContext) -> u32 {
    perf_sched_out(false);
    0
}

#[kprobe]
pub fn perf_sched_in_kprobe(_ctx: ProbeContext) -> u32 {
    perf_sched_in(false);
    0
}

// ---------------------------------------------------------------- task iterator

/// `iter/task`: one `ExitRecord` (TID and totals) per task with an entry in `TASK_STATS`,
/// written to the iterator's seq_file. User space reads the live threads this way in
/// tp_btf mode, where the accumulators hang off the tasks instead of a hash map.
/// The context is `struct bpf_iter__task { struct bpf_iter_meta *meta; struct
/// task_struct *task; }` (task null on the final call); aya-ebpf 0.2 has no iterator
/// macro, so the section and signature are spelled out.
#[no_mangle]
#[link_section = "iter/task"]
pub fn dump_threads(ctx: *mut core::ffi::c_void) -> i32 {
    // SAFETY: the verifier types both context fields from the iterator's BTF prototype.
    let (meta, task) = unsafe {
        let c = ctx as *const [*const u8; 2];
        ((*c)[0], (*c)[1])
    };
    if task.is_null() {
        return 0;
    }
    let t = task_from_btf(task, true);
    // SAFETY: a trusted task pointer from the iterator.
    let Some(s) = (unsafe { maps::TASK_STATS.get(task, None) }) else {
        return 0;
    };
    let rec = tracer_common::ExitRecord {
        tid: t.tid,
        became: 0,
        // SAFETY: the task's storage, copied out.
        stats: unsafe { *s },
    };
    // SAFETY: `meta->seq` is the first field of `struct bpf_iter_meta`.
    unsafe {
        let seq = core::ptr::read_volatile(meta as *const *mut aya_ebpf::bindings::seq_file);
        aya_ebpf::helpers::generated::bpf_seq_write(
            seq,
            &rec as *const _ as *const core::ffi::c_void,
            core::mem::size_of::<tracer_common::ExitRecord>() as u32,
        );
    }
    0
}

use aya_ebpf::EbpfContext as _;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
