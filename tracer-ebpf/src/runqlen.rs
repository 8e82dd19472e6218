//! `tracer run --runqlen`: each CPU's run-queue length sampled by a perf timer program
//! (see `tracer_common::runqlen`). The CPU's run queue is found through the interrupted
//! task (`current->se.cfs_rq->rq`: every task's `cfs_rq` is set on the CPU it is on,
//! the idle task's and other classes' included), so no per-CPU kernel symbol is needed.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel},
    macros::map,
    maps::PerCpuArray,
};
use tracer_common::runqlen::{self, Fields, Hist};

/// The offsets (from BTF), written by user space before load.
#[no_mangle]
static RUNQLEN_FIELDS: Fields = Fields::ZERO;

/// Each CPU's samples.
#[map]
pub static RUNQLEN: PerCpuArray<Hist> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn fields() -> &'static Fields {
    // SAFETY: as `config()`: a volatile read, so the placeholder is not folded.
    unsafe { core::ptr::read_volatile(&&RUNQLEN_FIELDS) }
}

#[inline(always)]
fn read<T>(base: u64, off: u32) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel validates the address.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }.ok()
}

/// One sample of this CPU's run queue.
#[inline(always)]
pub fn sample() {
    let f = fields();
    if f.task_cfs_rq == 0 || f.cfs_rq_rq == 0 {
        // Not loaded without them (user space refuses `--runqlen`).
        return;
    }
    // SAFETY: helpers without preconditions.
    let task = unsafe { bpf_get_current_task() };
    let running = bpf_get_current_pid_tgid() as u32 != 0;
    let Some(cfs_rq) = read::<u64>(task, f.task_cfs_rq) else {
        return;
    };
    let Some(rq) = read::<u64>(cfs_rq, f.cfs_rq_rq) else {
        return;
    };
    let Some(nr) = read::<u32>(rq, f.rq_nr_running) else {
        return;
    };
    let delayed = if f.rq_cfs_runnable != 0 {
        let queued = read::<u32>(rq, f.rq_cfs_queued).unwrap_or(0);
        let runnable = read::<u32>(rq, f.rq_cfs_runnable).unwrap_or(queued);
        queued.saturating_sub(runnable)
    } else if f.rq_cfs_delayed != 0 {
        read::<u32>(rq, f.rq_cfs_delayed).unwrap_or(0)
    } else {
        0
    };
    let n = runqlen::waiting(nr, delayed, running);
    let Some(h) = RUNQLEN.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot; the timer's program does not nest on a CPU.
    let h = unsafe { &mut *h };
    h.samples += 1;
    h.waiting += n as u64;
    let i = runqlen::slot(n);
    // Already below SLOTS; said again for the verifier, which checks the index here.
    if i < runqlen::SLOTS {
        h.slots[i] += 1;
    }
}
