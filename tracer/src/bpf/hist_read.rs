//! The kernel's histogram of the whole traced set (`HIST`), summed over the CPUs.
use anyhow::{Context as _, Result};
use aya::{maps::PerCpuArray, Ebpf};
use tracer_common::hist::{N_BUCKETS, N_KINDS};

use crate::model::snapshot::HistSet;

/// One read of `HIST`: counts only (the sums come from the threads' totals).
pub fn read_all(ebpf: &Ebpf) -> Result<HistSet> {
    let mut hist = HistSet::new();
    let arr: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map("HIST").context("HIST map missing")?)?;
    for kind in 0..N_KINDS {
        let h = hist.kind_mut(kind).expect("kind in range");
        for b in 0..N_BUCKETS {
            let idx = kind * N_BUCKETS as u32 + b as u32;
            let n: u64 = arr.get(&idx, 0)?.iter().sum();
            if n != 0 {
                h.add_bucket(b, n);
            }
        }
    }
    Ok(hist)
}
