//! Every key of a per-CPU array of u64 in one `bpf()` call (`BPF_MAP_LOOKUP_BATCH`,
//! Linux 5.6), which aya 0.14 does not offer. The system-wide histograms are 3,648 keys:
//! read one by one they took 3,648 calls a snapshot. Keyed in the kernel rather than
//! one large value, so a histogram update there indexes no map value by the measured
//! time (an index the verifier must bound, which made it walk 4,884 more instructions of
//! the switch program; see docs/performance.md, 2026-12-04). Where the kernel refuses
//! the batch call, the caller reads key by key as before.
use std::os::fd::{AsRawFd as _, BorrowedFd};

/// The `batch` member of `union bpf_attr` (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;

/// The values of keys `0..n` of the per-CPU u64 array `fd`, each summed over the
/// `cpus` possible CPUs. An error where the kernel has no batch lookup for the map.
pub fn percpu_u64_sums(fd: BorrowedFd<'_>, n: u32, cpus: usize) -> std::io::Result<Vec<u64>> {
    let mut sums = vec![0u64; n as usize];
    let mut keys = vec![0u32; n as usize];
    let mut values = vec![0u64; n as usize * cpus];
    // The kernel's cursor: the key after the last one read (arrays: a u32).
    let (mut cursor, mut next) = (0u32, 0u32);
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &cursor as *const u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: n,
            map_fd: fd.as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: the buffers hold `n` keys and `n` per-CPU values (8 bytes a CPU, the
        // kernel's rounding of a u64), as `count` tells the kernel; they outlive the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>(),
            )
        };
        // ENOENT: the end of the map was reached; `count` says how many were read.
        let err = (r != 0).then(std::io::Error::last_os_error);
        if let Some(e) = &err {
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(err.unwrap_or_else(std::io::Error::last_os_error));
            }
        }
        let got = (attr.count as usize).min(n as usize);
        for (i, &k) in keys[..got].iter().enumerate() {
            if let Some(s) = sums.get_mut(k as usize) {
                *s += values[i * cpus..(i + 1) * cpus].iter().sum::<u64>();
            }
        }
        // An array's keys come in order from 0: all `n` read is the end too (without
        // this, one more call to hear ENOENT).
        if err.is_some() || got == 0 || got == n as usize {
            return Ok(sums);
        }
        cursor = next;
        first = false;
    }
}
