//! The maps shared with user space: the traced set's (every family that follows a target
//! has them) and, with the `sched` feature, the scheduling family's (`sched`). Each is
//! compiled only into the objects whose features ask for it: a map the library declares
//! is in every object built with it, used or not.
use aya_ebpf::{
    macros::map,
    maps::{CgroupArray, HashMap, PerCpuArray},
};
use tracer_common::{drop, Tracked};

#[cfg(feature = "scheduling")]
mod sched;
mod task_storage;
#[cfg(feature = "scheduling")]
pub use sched::*;
pub use task_storage::TaskStorage;

/// The traced set (TID -> TGID) when a target is given; children join it at fork.
#[map]
pub static TRACKED: HashMap<u32, Tracked> = HashMap::with_max_entries(65536, 0);

/// `--cgroup DIR` (unless node only): DIR's fd at index 0, for
/// `bpf_current_task_under_cgroup` (the task is in DIR or below it).
#[map]
pub static CGROUP_TARGET: CgroupArray = CgroupArray::with_max_entries(1, 0);

/// Events that could not be recorded, by `tracer_common::drop` index.
#[map]
pub static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(drop::COUNT, 0);

#[inline(always)]
pub fn count_drop(idx: u32) {
    if let Some(p) = DROPS.get_ptr_mut(idx) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU.
        unsafe { *p += 1 };
    }
}
