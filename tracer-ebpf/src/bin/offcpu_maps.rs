//! The off-CPU family's settings and maps (`offcpu.rs`'s programs use them).

use aya_ebpf::{
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf, StackTrace},
};
use tracer_common::offcpu::{
    offdrop, OffKey, OffStart, OffVal, OffcpuConfig, StackCopy, WakeKey, WakeVal, Waker,
};
use tracer_ebpf::maps::TaskStorage;

/// Settings of this program; user space overwrites them in `.rodata` before load.
#[no_mangle]
pub static OFFCPU_CONFIG: OffcpuConfig = OffcpuConfig {
    min_ns: 0,
    states: 0,
    kernel_stacks: 0,
    user_stacks: 0,
    wakers: 0,
    dwarf: 0,
    regs_len: 0,
    sp_off: 0,
    _pad: 0,
};

#[inline(always)]
pub fn offcpu_config() -> &'static OffcpuConfig {
    // SAFETY: volatile read, as `config()`: the verifier sees the frozen `.rodata`.
    unsafe { core::ptr::read_volatile(&&OFFCPU_CONFIG) }
}

// Created with one entry each; `tracer offcpu` sizes them at load.
#[map]
pub static OFFCPU_STACKS: StackTrace = StackTrace::with_max_entries(1, 0);
/// Stacks that collided in `OFFCPU_STACKS` (their ids carry [`tracer_common::offcpu::SPILL_ID`]): nearly empty,
/// so a second collision is rare, and a stack found here once is found here again.
#[map]
pub static OFFCPU_SPILL: StackTrace = StackTrace::with_max_entries(1, 0);
#[map]
pub static OFFCPU_START: HashMap<u32, OffStart> = HashMap::with_max_entries(1, 0);
#[map]
pub static OFFCPU: HashMap<OffKey, OffVal> = HashMap::with_max_entries(1, 0);
#[map]
pub static OFFCPU_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(offdrop::COUNT, 0);
// `--wakers`: who woke each blocked thread, and the sums joined with it.
#[map]
pub static WAKERS: HashMap<u32, Waker> = HashMap::with_max_entries(1, 0);
#[map]
pub static OFFWAKE: HashMap<WakeKey, WakeVal> = HashMap::with_max_entries(1, 0);
// `--unwind dwarf` (tp-btf only): each thread's stack copy from its switch-out, and the
// copy of its waker's from `sched_waking`, kept with the task; the records of the periods
// that pass `--min` (sized by user space; one page when off).
#[link_section = ".maps"]
#[no_mangle]
pub static USTACK_COPY: TaskStorage<StackCopy> = TaskStorage::new();
#[link_section = ".maps"]
#[no_mangle]
pub static WAKER_COPY: TaskStorage<StackCopy> = TaskStorage::new();
#[map]
pub static USTACK_EVENTS: RingBuf = RingBuf::with_byte_size(4096, 0);
