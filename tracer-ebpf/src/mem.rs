//! Zeroing and copying structs a word at a time, unrolled.
//!
//! `core::ptr::write_bytes` and `copy_nonoverlapping` of a map-sized struct became calls
//! to aya-ebpf's `memset`/`memcpy`, byte loops the verifier walks once per byte on every
//! path that reaches them: zeroing the 200-byte new entry was 35k of the default switch
//! program's 63.5k instructions processed on 6.18 (the verifier log, 2026-12-04). One
//! volatile 8-byte store per word is straight-line code LLVM cannot turn back into a call.

use core::mem::{align_of, size_of};
use core::ptr::{read_volatile, write_volatile};

/// The struct's size in words; a compile-time error for a type that is not whole words.
const fn words<T>() -> usize {
    assert!(size_of::<T>().is_multiple_of(8) && align_of::<T>() >= 8);
    size_of::<T>() / 8
}

/// Zeroes `*p`.
///
/// # Safety
/// `p` is valid for writes of a `T` and aligned.
#[inline(always)]
pub unsafe fn zero<T>(p: *mut T) {
    let n = const { words::<T>() };
    let w = p as *mut u64;
    let mut i = 0;
    while i < n {
        // SAFETY: `i` words into a `T` the caller owns.
        unsafe { write_volatile(w.add(i), 0) };
        i += 1;
    }
}

/// Copies `*src` to `*dst`.
///
/// # Safety
/// Both are valid and aligned for a `T` and do not overlap.
#[inline(always)]
pub unsafe fn copy<T>(src: *const T, dst: *mut T) {
    let n = const { words::<T>() };
    let (s, d) = (src as *const u64, dst as *mut u64);
    let mut i = 0;
    while i < n {
        // SAFETY: `i` words into two `T`s the caller names.
        unsafe { write_volatile(d.add(i), read_volatile(s.add(i))) };
        i += 1;
    }
}
