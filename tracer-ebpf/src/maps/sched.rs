//! The scheduling family's maps. Sizes are defaults; user space may resize the hash
//! maps before load (`--max-threads`).
use super::TaskStorage;
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

/// Wakeup times of threads whose task storage a wakeup could not create (see
/// `drop::WAKE_ASIDE`), by TID, until their switch-in takes them. Preallocated, so an
/// insert in an interrupt does not need the allocator that just failed.
#[map]
pub static WAKE_ASIDE: HashMap<u32, u64> = HashMap::with_max_entries(1024, 0);

/// Where a new per-thread entry is built before the kernel copies it in (off the stack).
#[map]
pub static SCRATCH: PerCpuArray<ThreadStats> = PerCpuArray::with_max_entries(1, 0);

/// Per-CPU count of entries made, for `ThreadStats::serial`.
#[map]
pub static SERIAL: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

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
