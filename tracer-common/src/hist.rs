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

/// Index of the most significant set bit (0 for 0 and 1). Without a single branch:
/// BPF has no count-leading-zeros and no conditional set, and each `if` here used to
/// double the paths the verifier walks through every histogram update (its result
/// bounds a shift, so the verifier keeps every value apart). Each step's
/// `(x + (2^k - 1)) >> k` is 1 exactly when `x`, below `2^k`, is non-zero.
#[inline(always)]
pub const fn msb(mut v: u64) -> u32 {
    let mut r = 0;
    let s = (((v >> 32) + 0xffff_ffff) >> 32) << 5;
    v >>= s;
    r += s;
    let s = (((v >> 16) + 0xffff) >> 16) << 4;
    v >>= s;
    r += s;
    let s = (((v >> 8) + 0xff) >> 8) << 3;
    v >>= s;
    r += s;
    let s = (((v >> 4) + 0xf) >> 4) << 2;
    v >>= s;
    r += s;
    let s = (((v >> 2) + 0x3) >> 2) << 1;
    v >>= s;
    r += s;
    r += (v >> 1) & 1;
    r as u32
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

/// Slots of a per-thread histogram ([`ThreadHist`]): every value below `SUB` in slot 0,
/// then one slot per power of two up to `MAX_MSB`, then the overflow. Enough for
/// exposition bounds that are powers of two of at least `SUB` ns (`tracer serve`'s):
/// each value then counts under the same bound as at full resolution.
pub const SLOTS: usize = (MAX_MSB - SUB_BITS + 2) as usize + 1;

/// The slot of a value (see [`SLOTS`]).
#[inline(always)]
pub const fn slot(v: u64) -> usize {
    if v < SUB {
        return 0;
    }
    let m = msb(v);
    if m > MAX_MSB {
        return SLOTS - 1;
    }
    (m - SUB_BITS + 1) as usize
}

/// The full-resolution bucket a slot's counts go to: that of the slot's largest value,
/// so each value counts under the first power-of-two bound at or above it (a value that
/// is itself a power of two, under the next one).
pub const fn slot_bucket(s: usize) -> usize {
    if s >= SLOTS - 1 {
        return N_BUCKETS - 1;
    }
    bucket_index((1u64 << (s as u32 + SUB_BITS)) - 1)
}

/// The bucket of `v`'s power of two at the same bounds (see [`slot_bucket`]): that of
/// the largest value with `v`'s highest bit, which is `v` below `SUB`.
#[inline(always)]
pub const fn pow2_bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    bucket_index(v | ((1u64 << msb(v)) - 1))
}

/// A thread's power-of-two histograms (`tracer serve` in task-storage mode): kept in
/// the task's own storage, so a switch updates them with no hash lookup; user space
/// folds them per process. A dying thread sends them through the exit ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadHist {
    pub tid: u32,
    pub tgid: u32,
    /// By kind ([`KIND_ON_CPU`], ...), then [`slot`].
    pub counts: [[u64; SLOTS]; N_KINDS as usize],
}

impl ThreadHist {
    pub const ZERO: ThreadHist = ThreadHist {
        tid: 0,
        tgid: 0,
        counts: [[0; SLOTS]; N_KINDS as usize],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msb_is_the_highest_set_bit() {
        assert_eq!(msb(0), 0);
        assert_eq!(msb(1), 0);
        for bit in 0..64 {
            let v = 1u64 << bit;
            assert_eq!(msb(v), bit, "2^{bit}");
            assert_eq!(msb(v | (v - 1)), bit, "2^{bit} with every bit below");
            if bit > 0 {
                assert_eq!(msb(v - 1), bit - 1, "2^{bit} - 1");
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            assert_eq!(msb(x), 63 - x.leading_zeros(), "{x:#x}");
        }
    }

    #[test]
    fn buckets_bound_their_values() {
        let mut x = 1u64;
        for _ in 0..200_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = x >> (x % 50);
            let b = bucket_index(v);
            assert!(b < N_BUCKETS);
            assert!(
                bucket_lower(b) <= v && v <= bucket_upper(b),
                "{v} in bucket {b}"
            );
        }
        for v in 0..SUB {
            assert_eq!(bucket_index(v), v as usize);
        }
    }

    #[test]
    fn slots_count_under_the_same_power_of_two_bounds() {
        // Bounds that are powers of two of SUB ns or more (serve's): a value counts
        // under the same bound from its slot, from its power-of-two bucket and, but at
        // an exact power of two (which goes one bound up), at full resolution, up to 2^MAX_MSB ns (37 minutes).
        let bounds: [u64; 38] = core::array::from_fn(|i| 1u64 << (i as u32 + SUB_BITS));
        let under = |b: usize| bounds.partition_point(|&x| x < bucket_upper(b));
        let mut x = 7u64;
        for i in 0..200_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = if i < 4096 { i } else { x >> (x % 64) };
            let s = slot(v);
            assert!(s < SLOTS);
            assert_eq!(
                under(slot_bucket(s)),
                under(pow2_bucket(v)),
                "{v} in slot {s}"
            );
            // (The top octave's last bucket is open-ended: all of it is above every bound.)
            if (!v.is_power_of_two() || v < SUB) && v < 1u64 << MAX_MSB {
                assert_eq!(under(slot_bucket(s)), under(bucket_index(v)), "{v}");
            }
        }
        assert_eq!(slot(u64::MAX), SLOTS - 1);
        assert_eq!(slot_bucket(SLOTS - 1), N_BUCKETS - 1);
    }
}
