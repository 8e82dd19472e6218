//! The tracer's kernel side: per-thread on-CPU time, run-queue latency and off-CPU time,
//! with their histograms, computed at every context switch.
//!
//! This library holds what the programs share: the task as they see it (`task`), the
//! accounting (`account`), the maps (`maps`, `record`, `cgroups`) and the entry points
//! as functions (`sched`). Each program family is an object of its own, a small bin in
//! `src/bin/` that names its attach points and calls into here: `sched` (run, top),
//! `record` (the same entry points with record's event stream: record, slow) and `serve`
//! (the same with serve's cgroup names), all three from `src/bin/sched_programs.rs`,
//! `offcpu` (off-CPU stacks) and `floor` (the
//! benchmark's empty program). An object holds only the maps its programs use, so a command creates only
//! its own: every map the library declares ends up in every object linked with it, used
//! or not (bpf-linker keeps exported symbols), so a family's modules are behind its
//! cargo feature and each object is built with its own (`required-features`).
#![no_std]
// `atomic_xadd` for the task-event counters (record.rs): bpfel's core lacks fetch_add.
#![allow(internal_features)]
#![cfg_attr(feature = "record", feature(core_intrinsics))]
// The pointers passed between these functions are kernel addresses (task_struct,
// tracepoint records), read through BPF helpers or loads the verifier checks against
// BTF: the verifier, not the caller, makes them safe, so marking the functions `unsafe`
// would say nothing.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

#[cfg(any(feature = "scheduling", feature = "offcpu"))]
pub mod account;
#[cfg(feature = "serve")]
pub mod cgroups;
#[cfg(feature = "offcpu")]
pub mod copy;
#[cfg(feature = "scheduling")]
pub mod irq;
#[cfg(any(feature = "scheduling", feature = "offcpu"))]
pub mod maps;
pub mod mem;
#[cfg(feature = "record")]
pub mod record;
#[cfg(feature = "scheduling")]
pub mod runqlen;
#[cfg(feature = "scheduling")]
pub mod sched;
#[cfg(any(feature = "scheduling", feature = "offcpu"))]
pub mod task;

#[cfg(any(feature = "scheduling", feature = "offcpu"))]
pub use task::{CommSrc, Leave, Task};

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
