//! The scheduling family's programs, the body of two objects (see `sched.rs` and
//! `record.rs` and `serve.rs` beside it): each names its attach point and calls
//! `tracer_ebpf::sched` (or `cgroups`), where the arguments are decoded. Record's and
//! serve's own are compiled with their feature only.

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, kprobe, perf_event, raw_tracepoint, tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, PerfEventContext, ProbeContext, RawTracePointContext,
        TracePointContext,
    },
};
#[cfg(feature = "serve")]
use tracer_ebpf::cgroups;
use tracer_ebpf::sched;

type Btf = BtfTracePointContext;
type Raw = RawTracePointContext;

// ---------------------------------------------------------------- tp_btf

#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn sched_switch_btf(ctx: BtfTracePointContext) -> u32 {
    sched::switch::<Btf, false>(&ctx);
    0
}

/// The switch program of `tracer record` / `tracer slow`, which also streams events.
#[cfg(feature = "record")]
#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn sched_switch_rec_btf(ctx: BtfTracePointContext) -> u32 {
    sched::switch::<Btf, true>(&ctx);
    0
}

#[btf_tracepoint(function = "sched_wakeup")]
#[inline(always)]
pub fn sched_wakeup_btf(ctx: BtfTracePointContext) -> u32 {
    sched::wakeup(&ctx, false);
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
#[inline(always)]
pub fn sched_wakeup_new_btf(ctx: BtfTracePointContext) -> u32 {
    sched::wakeup(&ctx, true);
    0
}

#[btf_tracepoint(function = "sched_process_fork")]
#[inline(always)]
pub fn sched_fork_btf(ctx: BtfTracePointContext) -> u32 {
    sched::fork(&ctx);
    0
}

#[btf_tracepoint(function = "sched_process_exec")]
#[inline(always)]
pub fn sched_exec_btf(ctx: BtfTracePointContext) -> u32 {
    sched::exec(&ctx);
    0
}

/// System-wide: the threads between their exit and their final switch, for the final
/// read (see `account::exiting`).
#[btf_tracepoint(function = "sched_process_exit")]
#[inline(always)]
pub fn sched_exit_btf(_ctx: BtfTracePointContext) -> u32 {
    sched::exiting();
    0
}

// Task events of `tracer record` (attached only when recording).

#[cfg(feature = "record")]
#[btf_tracepoint(function = "task_newtask")]
#[inline(always)]
pub fn rec_newtask_btf(ctx: BtfTracePointContext) -> u32 {
    sched::rec_newtask(&ctx);
    0
}

#[cfg(feature = "record")]
#[btf_tracepoint(function = "sched_process_exit")]
#[inline(always)]
pub fn rec_exit_btf(_ctx: BtfTracePointContext) -> u32 {
    sched::rec_exit::<Btf>();
    0
}

#[cfg(feature = "record")]
#[btf_tracepoint(function = "task_rename")]
#[inline(always)]
pub fn rec_rename_btf(ctx: BtfTracePointContext) -> u32 {
    sched::rec_rename(&ctx);
    0
}

#[cfg(feature = "record")]
#[btf_tracepoint(function = "sched_migrate_task")]
#[inline(always)]
pub fn rec_migrate_btf(ctx: BtfTracePointContext) -> u32 {
    sched::rec_migrate(&ctx);
    0
}

// ---------------------------------------------------------------- perf timer

/// `--runqlen`: this CPU's run-queue length, at 99 Hz (any probe mode).
#[perf_event]
#[inline(always)]
pub fn runqlen_sample(_ctx: PerfEventContext) -> u32 {
    tracer_ebpf::runqlen::sample();
    0
}

// ---------------------------------------------------------------- interrupts

// `--irq` (run, record): raw tracepoints in every probe mode. Their arguments are
// the tracepoints' prototypes (irq_handler_entry(int irq, struct irqaction *),
// softirq_entry(unsigned int vec_nr)), the same since raw tracepoints exist (4.17).

#[raw_tracepoint(tracepoint = "irq_handler_entry")]
#[inline(always)]
pub fn irq_hard_entry(_ctx: RawTracePointContext) -> i32 {
    tracer_ebpf::irq::hard_entry();
    0
}

#[raw_tracepoint(tracepoint = "irq_handler_exit")]
#[inline(always)]
pub fn irq_hard_exit(_ctx: RawTracePointContext) -> i32 {
    tracer_ebpf::irq::hard_exit();
    0
}

#[raw_tracepoint(tracepoint = "softirq_entry")]
#[inline(always)]
pub fn irq_soft_entry(_ctx: RawTracePointContext) -> i32 {
    tracer_ebpf::irq::soft_entry();
    0
}

#[raw_tracepoint(tracepoint = "softirq_exit")]
#[inline(always)]
pub fn irq_soft_exit(ctx: RawTracePointContext) -> i32 {
    tracer_ebpf::irq::soft_exit(ctx.arg::<u64>(0) as u32);
    0
}

// ---------------------------------------------------------------- raw tracepoint

#[raw_tracepoint(tracepoint = "sched_switch")]
#[inline(always)]
pub fn sched_switch_raw(ctx: RawTracePointContext) -> i32 {
    sched::switch::<Raw, false>(&ctx);
    0
}

#[cfg(feature = "record")]
#[raw_tracepoint(tracepoint = "sched_switch")]
#[inline(always)]
pub fn sched_switch_rec_raw(ctx: RawTracePointContext) -> i32 {
    sched::switch::<Raw, true>(&ctx);
    0
}

#[raw_tracepoint(tracepoint = "sched_wakeup")]
#[inline(always)]
pub fn sched_wakeup_raw(ctx: RawTracePointContext) -> i32 {
    sched::wakeup(&ctx, false);
    0
}

#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
#[inline(always)]
pub fn sched_wakeup_new_raw(ctx: RawTracePointContext) -> i32 {
    sched::wakeup(&ctx, true);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_fork")]
#[inline(always)]
pub fn sched_fork_raw(ctx: RawTracePointContext) -> i32 {
    sched::fork(&ctx);
    0
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
#[inline(always)]
pub fn sched_exec_raw(ctx: RawTracePointContext) -> i32 {
    sched::exec(&ctx);
    0
}

#[cfg(feature = "record")]
#[raw_tracepoint(tracepoint = "task_newtask")]
#[inline(always)]
pub fn rec_newtask_raw(ctx: RawTracePointContext) -> i32 {
    sched::rec_newtask(&ctx);
    0
}

#[cfg(feature = "record")]
#[raw_tracepoint(tracepoint = "sched_process_exit")]
#[inline(always)]
pub fn rec_exit_raw(_ctx: RawTracePointContext) -> i32 {
    sched::rec_exit::<Raw>();
    0
}

#[cfg(feature = "record")]
#[raw_tracepoint(tracepoint = "task_rename")]
#[inline(always)]
pub fn rec_rename_raw(ctx: RawTracePointContext) -> i32 {
    sched::rec_rename(&ctx);
    0
}

#[cfg(feature = "record")]
#[raw_tracepoint(tracepoint = "sched_migrate_task")]
#[inline(always)]
pub fn rec_migrate_raw(ctx: RawTracePointContext) -> i32 {
    sched::rec_migrate(&ctx);
    0
}

// ---------------------------------------------------------------- classic tracepoint

#[tracepoint(category = "sched", name = "sched_switch")]
#[inline(always)]
pub fn sched_switch_tp(ctx: TracePointContext) -> u32 {
    sched::switch_tp(&ctx);
    0
}

#[tracepoint(category = "sched", name = "sched_wakeup")]
#[inline(always)]
pub fn sched_wakeup_tp(ctx: TracePointContext) -> u32 {
    sched::wakeup_tp(&ctx, false);
    0
}

#[tracepoint(category = "sched", name = "sched_wakeup_new")]
#[inline(always)]
pub fn sched_wakeup_new_tp(ctx: TracePointContext) -> u32 {
    sched::wakeup_tp(&ctx, true);
    0
}

#[tracepoint(category = "sched", name = "sched_stat_runtime")]
#[inline(always)]
pub fn sched_stat_runtime_tp(ctx: TracePointContext) -> u32 {
    sched::stat_runtime_tp(&ctx);
    0
}

#[tracepoint(category = "sched", name = "sched_process_exec")]
#[inline(always)]
pub fn sched_exec_tp(ctx: TracePointContext) -> u32 {
    sched::exec_tp(&ctx);
    0
}

#[tracepoint(category = "sched", name = "sched_process_fork")]
#[inline(always)]
pub fn sched_fork_tp(ctx: TracePointContext) -> u32 {
    sched::fork_tp(&ctx);
    0
}

/// `tracer serve`'s cgroup names (see `tracer_ebpf::cgroups`).
#[cfg(feature = "serve")]
#[tracepoint(category = "cgroup", name = "cgroup_mkdir")]
#[inline(always)]
pub fn cgroup_mkdir_tp(ctx: TracePointContext) -> u32 {
    cgroups::mkdir(&ctx);
    0
}

// ---------------------------------------------------------------- perf-sched

#[fentry(function = "__perf_event_task_sched_out")]
#[inline(always)]
pub fn perf_sched_out_fentry(_ctx: FEntryContext) -> i32 {
    sched::perf_sched_out(true);
    0
}

#[fentry(function = "__perf_event_task_sched_in")]
#[inline(always)]
pub fn perf_sched_in_fentry(_ctx: FEntryContext) -> i32 {
    sched::perf_sched_in(true);
    0
}

#[kprobe]
#[inline(always)]
pub fn perf_sched_out_kprobe(_ctx: ProbeContext) -> u32 {
    sched::perf_sched_out(false);
    0
}

#[kprobe]
#[inline(always)]
pub fn perf_sched_in_kprobe(_ctx: ProbeContext) -> u32 {
    sched::perf_sched_in(false);
    0
}

// ---------------------------------------------------------------- task iterator

/// `iter/task` (see `sched::dump_threads`): aya-ebpf 0.2 has no iterator macro, so the
/// section and signature are spelled out.
#[no_mangle]
#[link_section = "iter/task"]
pub fn dump_threads(ctx: *mut core::ffi::c_void) -> i32 {
    sched::dump_threads(ctx);
    0
}

/// `iter/task` over the per-thread histograms (see `sched::dump_hists`).
#[cfg(feature = "serve")]
#[no_mangle]
#[link_section = "iter/task"]
pub fn dump_hists(ctx: *mut core::ffi::c_void) -> i32 {
    sched::dump_hists(ctx);
    0
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
