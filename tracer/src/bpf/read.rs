//! The raw reads of the scheduling family's maps, each one place: the live threads'
//! entries, the per-CPU states, the histograms and the drop counters. What they mean
//! together (a consistent snapshot) is `collect`'s.
use std::{collections::BTreeMap, io::Read as _};

use anyhow::{Context as _, Result};
use aya::{
    maps::{HashMap as BpfHashMap, PerCpuArray, PerCpuHashMap},
    programs::Iter,
    Ebpf,
};
use tracer_common::{
    drop,
    hist::{HistKey, N_BUCKETS, N_KINDS},
    CpuState, ThreadStats,
};

use crate::model::{
    options::RunqSource,
    snapshot::{parse_records, HistSet},
};

/// The live threads' entries: from the `dump_threads` task iterator when they are in
/// task-local storage (a fresh iterator instance per call), else from `THREADS`.
pub fn live_threads(ebpf: &mut Ebpf, runq: RunqSource) -> Result<Vec<(u32, ThreadStats)>> {
    if runq != RunqSource::TaskStorage {
        let live: BpfHashMap<_, u32, ThreadStats> =
            BpfHashMap::try_from(ebpf.map("THREADS").context("THREADS map missing")?)?;
        return Ok(live.iter().filter_map(|item| item.ok()).collect());
    }
    Ok(parse_records(&run_iter(ebpf, "dump_threads")?))
}

/// Every live thread's own histograms (`Tracer::hist_in_task`), by the `dump_hists`
/// task iterator.
pub fn thread_hists(ebpf: &mut Ebpf) -> Result<Vec<tracer_common::hist::ThreadHist>> {
    Ok(crate::model::thread_hist::parse(&run_iter(
        ebpf,
        "dump_hists",
    )?))
}

/// Everything a task iterator writes, from a fresh instance.
fn run_iter(ebpf: &mut Ebpf, name: &str) -> Result<Vec<u8>> {
    let it: &mut Iter = ebpf
        .program_mut(name)
        .with_context(|| format!("{name} program missing"))?
        .try_into()?;
    let link_id = it.attach().with_context(|| format!("attaching {name}"))?;
    let link = it.take_link(link_id)?;
    let mut bytes = Vec::new();
    link.into_file()
        .with_context(|| format!("creating {name}"))?
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {name}"))?;
    Ok(bytes)
}

/// Every CPU's `CpuState`, in CPU order.
pub fn cpu_states(ebpf: &Ebpf) -> Result<Vec<CpuState>> {
    let m: PerCpuArray<_, CpuState> =
        PerCpuArray::try_from(ebpf.map("CPU_STATE").context("CPU_STATE map missing")?)?;
    Ok(m.get(&0, 0)?.iter().copied().collect())
}

/// The system-wide histograms (`HIST`), summed over the CPUs.
pub fn hist_all(ebpf: &Ebpf) -> Result<HistSet> {
    let arr: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map("HIST").context("HIST map missing")?)?;
    let mut hist = HistSet::new();
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

/// The per-thread or per-process histograms (`HIST_SCOPED`), by id, and the map's
/// entries (its occupancy).
pub fn hist_scoped(ebpf: &Ebpf) -> Result<(BTreeMap<u32, HistSet>, usize)> {
    let map: PerCpuHashMap<_, HistKey, u64> =
        PerCpuHashMap::try_from(ebpf.map("HIST_SCOPED").context("HIST_SCOPED map missing")?)?;
    let mut scoped: BTreeMap<u32, HistSet> = BTreeMap::new();
    let mut entries = 0;
    for item in map.iter() {
        let Ok((k, v)) = item else { continue };
        entries += 1;
        let n: u64 = v.iter().sum();
        let set = scoped.entry(k.id).or_default();
        if let Some(h) = set.kind_mut(k.kind as u32) {
            h.add_bucket(k.bucket as usize, n);
        }
    }
    Ok((scoped, entries))
}

/// The drop counters (`tracer_common::drop`), summed over the CPUs.
pub fn drops(ebpf: &Ebpf) -> Result<[u64; drop::COUNT as usize]> {
    let drops_map: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map("DROPS").context("DROPS map missing")?)?;
    let mut drops = [0u64; drop::COUNT as usize];
    for (i, d) in drops.iter_mut().enumerate() {
        *d = drops_map.get(&(i as u32), 0)?.iter().sum();
    }
    Ok(drops)
}
