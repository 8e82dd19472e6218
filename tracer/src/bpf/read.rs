//! The raw reads of the scheduling family's maps, each one place: the live threads'
//! entries, the per-CPU states, the histograms and the drop counters. What they mean
//! together (a consistent snapshot) is `collect`'s.
use std::{collections::BTreeMap, io::Read as _, os::fd::AsFd as _};

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
    let counts = percpu_sums(ebpf, "HIST", N_KINDS * N_BUCKETS as u32)?;
    let mut hist = HistSet::new();
    for (i, &n) in counts.iter().enumerate().filter(|(_, &n)| n != 0) {
        if let Some(h) = hist.kind_mut((i / N_BUCKETS) as u32) {
            h.add_bucket(i % N_BUCKETS, n);
        }
    }
    Ok(hist)
}

/// Keys `0..n` of the per-CPU u64 array `name`, each summed over the CPUs: in one call
/// ([`super::batch`]), or key by key where the kernel has no batch lookup.
fn percpu_sums(ebpf: &Ebpf, name: &str, n: u32) -> Result<Vec<u64>> {
    let map = ebpf
        .map(name)
        .with_context(|| format!("{name} map missing"))?;
    if let (aya::maps::Map::PerCpuArray(data), Ok(cpus)) = (map, aya::util::nr_cpus()) {
        match super::batch::percpu_u64_sums(data.fd().as_fd(), n, cpus) {
            Ok(v) => return Ok(v),
            Err(e) => log::debug!("{name}: no batch lookup ({e}); reading key by key"),
        }
    }
    let arr: PerCpuArray<_, u64> = PerCpuArray::try_from(map)?;
    (0..n).map(|k| Ok(arr.get(&k, 0)?.iter().sum())).collect()
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
    let mut drops = [0u64; drop::COUNT as usize];
    for (d, n) in drops
        .iter_mut()
        .zip(percpu_sums(ebpf, "DROPS", drop::COUNT)?)
    {
        *d = n;
    }
    Ok(drops)
}
