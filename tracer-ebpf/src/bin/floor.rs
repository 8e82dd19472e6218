//! The floor family: the cost floor for `cargo xtask bench` (`tracer floor`), a tp_btf
//! sched_switch program that only bumps a per-CPU counter. Its own object, so it loads
//! nothing else and nothing else loads it.
#![no_std]
#![no_main]

use aya_ebpf::{
    macros::{btf_tracepoint, map},
    maps::PerCpuArray,
    programs::BtfTracePointContext,
};

// The panic handler.
use tracer_ebpf as _;

/// Switches counted by `floor_switch`.
#[map]
pub static FLOOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[btf_tracepoint(function = "sched_switch")]
#[inline(always)]
pub fn floor_switch(_ctx: BtfTracePointContext) -> u32 {
    if let Some(p) = FLOOR.get_ptr_mut(0) {
        // SAFETY: per-CPU slot.
        unsafe { *p += 1 };
    }
    0
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
