//! The scheduling family's maps. Sizes are defaults; user space may resize the hash
//! maps before load (`--max-threads`).
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, PerfEventArray, RingBuf},
};
use tracer_common::{
    hist::{HistKey, N_BUCKETS, N_KINDS},
    CpuState, ThreadStats, Window,
};

/// The window (see `tracer_common::Window`): its opening is the start of slices already
/// running when the programs attached; after its close nothing new is counted.
#[map]
pub static WINDOW: Array<Window> = Array::with_max_entries(1, 0);

/// The slice running on each CPU.
#[map]
pub static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Per-thread accumulators, keyed by TID; an entry lives while its thread does.
#[map]
pub static THREADS: HashMap<u32, ThreadStats> = HashMap::with_max_entries(65536, 0);

/// Final totals of threads that died, so their `THREADS` entries can go at once.
#[map]
pub static EXITED: RingBuf = RingBuf::with_byte_size(2 * 1024 * 1024, 0);

/// Histograms of the whole traced set: `kind * N_BUCKETS + bucket`.
#[map]
pub static HIST: PerCpuArray<u64> = PerCpuArray::with_max_entries(N_KINDS * N_BUCKETS as u32, 0);

/// Per-process or per-thread histograms (`-P`, `-L`). Preallocated: without, inserts
/// from sched_switch (IRQs off) fail while the allocator's per-CPU cache refills. User
/// space creates it with one entry when the scope is the whole traced set, since
/// preallocating it costs start-up time (~190 ms for 262144 entries on 2 CPUs).
#[map]
pub static HIST_SCOPED: PerCpuHashMap<HistKey, u64> = PerCpuHashMap::with_max_entries(65536, 0);

/// Per-CPU perf counters read at every switch of a traced thread (slice deltas).
#[map]
pub static SLICE_COUNTER0: PerfEventArray<u32> = PerfEventArray::new(0);
#[map]
pub static SLICE_COUNTER1: PerfEventArray<u32> = PerfEventArray::new(0);

/// Where a new per-thread entry is built before the kernel copies it in (off the stack).
#[map]
pub static SCRATCH: PerCpuArray<ThreadStats> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU count of entries made, for `ThreadStats::serial`.
#[map]
pub static SERIAL: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A BTF-defined map of type `BPF_MAP_TYPE_TASK_STORAGE` (29): a value hanging off each
/// `task_struct`, found by pointer rather than hashed by TID. The kernel needs its key
/// and value types in BTF, so it is declared the libbpf way (`.maps` section, fields
/// that encode type, key, value and flags); aya-ebpf 0.2 has no wrapper for it.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; 29],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    /// BPF_F_NO_PREALLOC, which local storage requires.
    map_flags: *const [i32; 1],
}

// SAFETY: the fields are placeholders the loader reads from BTF; never dereferenced.
unsafe impl<T> Sync for TaskStorage<T> {}

impl<T> Default for TaskStorage<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> TaskStorage<T> {
    pub const fn new() -> Self {
        TaskStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The task's value, created from `init` when it has none yet (and `init` is given).
    ///
    /// # Safety
    /// `task` must be a BTF task pointer the verifier trusts (tp_btf or fentry argument,
    /// `bpf_get_current_task_btf()`).
    #[inline(always)]
    pub unsafe fn get(&self, task: *const u8, init: Option<&mut T>) -> Option<*mut T> {
        let (v, flags) = match init {
            Some(v) => (v as *mut T as *mut core::ffi::c_void, 1u64),
            None => (core::ptr::null_mut(), 0),
        };
        let p = aya_ebpf::helpers::generated::bpf_task_storage_get(
            self as *const Self as *mut core::ffi::c_void,
            task as *mut _,
            v,
            flags,
        );
        if p.is_null() {
            None
        } else {
            Some(p as *mut T)
        }
    }

    /// The task's value, created zeroed when it has none yet.
    ///
    /// # Safety
    /// As for [`Self::get`].
    #[inline(always)]
    pub unsafe fn get_or_zero(&self, task: *const u8) -> Option<*mut T> {
        // A NULL value with BPF_LOCAL_STORAGE_GET_F_CREATE: the kernel zeroes it.
        let p = aya_ebpf::helpers::generated::bpf_task_storage_get(
            self as *const Self as *mut core::ffi::c_void,
            task as *mut _,
            core::ptr::null_mut(),
            1,
        );
        if p.is_null() {
            None
        } else {
            Some(p as *mut T)
        }
    }

    /// Frees the task's value.
    ///
    /// # Safety
    /// As for [`Self::get`].
    #[inline(always)]
    pub unsafe fn delete(&self, task: *const u8) {
        aya_ebpf::helpers::generated::bpf_task_storage_delete(
            self as *const Self as *mut core::ffi::c_void,
            task as *mut _,
        );
    }
}

/// Per-thread accumulators in tp_btf mode: found from the `task_struct` by one pointer
/// chase instead of a hash lookup by TID, never full, freed with the task. User space
/// reads them through the `dump_threads` task iterator.
#[link_section = ".maps"]
#[no_mangle]
pub static TASK_STATS: TaskStorage<ThreadStats> = TaskStorage::new();

/// Per-thread power-of-two histograms (`Accounting::hist_in_task`, `tracer serve`):
/// updated at the thread's switch-outs with no hash lookup, handed over through
/// `EXITED` when it dies, read with the `dump_hists` task iterator.
#[cfg(feature = "serve")]
#[link_section = ".maps"]
#[no_mangle]
pub static TASK_HIST: TaskStorage<tracer_common::hist::ThreadHist> = TaskStorage::new();
