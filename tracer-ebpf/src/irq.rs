//! `tracer run --irq`: hardirq and softirq time per CPU, per vector and per thread (see
//! `tracer_common::irq`, which does the accounting). Loaded only when asked.
use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_NOEXIST},
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use tracer_common::irq::{IrqCpu, IrqThread};

/// Each CPU's interrupt time and the interrupt running on it now.
#[map]
pub static IRQ_CPU: PerCpuArray<IrqCpu> = PerCpuArray::with_max_entries(1, 0);

/// Interrupt time by the thread that was on the CPU. Not preallocated: entries exist
/// only for threads that took interrupts (a full map is counted, `thread_map_full`).
#[map]
pub static IRQ_THREADS: HashMap<u32, IrqThread> =
    HashMap::with_max_entries(65536, BPF_F_NO_PREALLOC);

#[inline(always)]
fn cpu() -> Option<&'static mut IrqCpu> {
    // SAFETY: this CPU's slot; a hardirq program can interrupt a softirq one, and they
    // touch disjoint fields until the exit, which runs after the interrupted entry.
    IRQ_CPU.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn now() -> u64 {
    // SAFETY: no preconditions.
    unsafe { bpf_ktime_get_ns() }
}

/// Charges `ns` of interrupt time to the thread on this CPU (the idle task's apart).
#[inline(always)]
fn charge(c: &mut IrqCpu, ns: u64, hard: bool) {
    let tid = bpf_get_current_pid_tgid() as u32;
    if tid == 0 {
        if hard {
            c.idle_hard_ns += ns;
        } else {
            c.idle_soft_ns += ns;
        }
        return;
    }
    if let Some(t) = IRQ_THREADS.get_ptr_mut(tid) {
        // SAFETY: the entry of the thread current on this CPU: no other CPU writes it.
        let t = unsafe { &mut *t };
        if hard {
            t.hard_ns += ns;
        } else {
            t.soft_ns += ns;
        }
        return;
    }
    let t = if hard {
        IrqThread {
            hard_ns: ns,
            soft_ns: 0,
        }
    } else {
        IrqThread {
            hard_ns: 0,
            soft_ns: ns,
        }
    };
    if IRQ_THREADS.insert(tid, t, BPF_NOEXIST as u64).is_err() {
        c.thread_map_full += 1;
    }
}

#[inline(always)]
pub fn hard_entry() {
    if let Some(c) = cpu() {
        c.hard_entry(now());
    }
}

#[inline(always)]
pub fn hard_exit() {
    if let Some(c) = cpu() {
        if let Some(ns) = c.hard_exit(now()) {
            charge(c, ns, true);
        }
    }
}

#[inline(always)]
pub fn soft_entry() {
    if let Some(c) = cpu() {
        c.soft_entry(now());
    }
}

#[inline(always)]
pub fn soft_exit(vec: u32) {
    if let Some(c) = cpu() {
        if let Some(ns) = c.soft_exit(vec, now()) {
            charge(c, ns, false);
        }
    }
}
