//! Log-linear histogram buckets, computed identically in the kernel and in user space.
//!
//! Values below `SUB` land in exact buckets; above, each power of two is split into
//! `SUB` (32) equal sub-buckets, so a bucket is at most 1/32 (3.1%) of its lower bound
//! wide. Plain log2 buckets (bcc) are a factor of two wide and cannot give percentiles.

/// log2 of the number of sub-buckets per power of two.
pub const SUB_BITS: u32 = 5;
/// Sub-buckets per power of two.
pub const SUB: u64 = 1 << SUB_BITS;
/// Highest power of two with its own buckets; larger values land in the last bucket.
pub const MAX_MSB: u32 = 41;
/// Buckets per histogram.
pub const N_BUCKETS: usize = ((MAX_MSB - SUB_BITS + 2) as usize) << SUB_BITS;

/// Histogram kinds, in this order in the per-CPU array and in `HistKey::kind`.
pub const KIND_ON_CPU: u32 = 0;
pub const KIND_RUNQ: u32 = 1;
pub const KIND_OFF_CPU: u32 = 2;
pub const N_KINDS: u32 = 3;

/// Key of the per-process / per-thread histogram map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HistKey {
    /// TGID (per-process scope) or TID (per-thread scope).
    pub id: u32,
    pub kind: u16,
    pub bucket: u16,
}

/// Index of the most significant set bit; `v` must be non-zero. Branches only, no
/// loops, so the BPF verifier sees a short straight path.
#[inline(always)]
pub const fn msb(mut v: u64) -> u32 {
    let mut r = 0;
    if v >= 1 << 32 {
        v >>= 32;
        r += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        r += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        r += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        r += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        r += 2;
    }
    if v >= 1 << 1 {
        r += 1;
    }
    r
}

/// Bucket index of a value (ns).
#[inline(always)]
pub const fn bucket_index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let m = msb(v);
    if m > MAX_MSB {
        return N_BUCKETS - 1;
    }
    let shift = m - SUB_BITS;
    ((((shift + 1) as u64) << SUB_BITS) + ((v >> shift) & (SUB - 1))) as usize
}

/// Smallest value that lands in bucket `i`.
pub const fn bucket_lower(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let shift = (i >> SUB_BITS) - 1;
    (SUB + (i & (SUB - 1))) << shift
}

/// Largest value that lands in bucket `i` (inclusive); the last bucket is open-ended.
pub const fn bucket_upper(i: usize) -> u64 {
    if i + 1 >= N_BUCKETS {
        return u64::MAX;
    }
    bucket_lower(i + 1) - 1
}
