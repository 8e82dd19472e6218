//! The scoped histograms (per process or thread): read from the kernel map, or folded
//! from each thread's own, and the kernel map kept bounded.
use std::collections::{BTreeMap, HashSet};

use anyhow::{Context as _, Result};
use aya::{maps::PerCpuHashMap, Ebpf};
use tracer_common::hist::HistKey;

use super::{read, Collector};
use crate::model::{snapshot::HistSet, targets::HistScope};

impl Collector {
    /// The traced set's histograms and the scoped ones, as the options keep them.
    pub(super) fn read_hists(
        &mut self,
        ebpf: &mut Ebpf,
    ) -> Result<(HistSet, BTreeMap<u32, HistSet>)> {
        Ok(if self.hist_scope == HistScope::All {
            (read::hist_all(ebpf)?, BTreeMap::new())
        } else if let Some(dead) = &self.thread_hists {
            // The live threads' own, plus what the dead ones handed over (drained
            // first by `snapshot`): a thread that dies during the read is in neither until the next
            // (a dip the reader's `raise_to` absorbs), never in both.
            let mut procs = dead.clone();
            let live = read::thread_hists(ebpf)?;
            self.scoped_entries = live.len();
            for h in &live {
                procs.add(h);
            }
            let scoped = procs.to_sets();
            let mut hist = HistSet::new();
            for set in scoped.values() {
                hist.merge(set);
            }
            (hist, scoped)
        } else {
            self.harvest_dead_hists(ebpf)?;
            let (mut scoped, entries) = read::hist_scoped(ebpf)?;
            self.scoped_entries = entries;
            for (id, h) in &self.exited_hists {
                scoped.entry(*id).or_default().merge(h);
            }
            let mut hist = HistSet::new();
            for set in scoped.values() {
                hist.merge(set);
            }
            (hist, scoped)
        })
    }

    /// `-L`: moves the histograms of dead threads out of the kernel map so it stays
    /// bounded under churn.
    pub(super) fn harvest_dead_hists(&mut self, ebpf: &mut Ebpf) -> Result<()> {
        if self.dead_pending.is_empty() {
            return Ok(());
        }
        let mut map: PerCpuHashMap<_, HistKey, u64> = PerCpuHashMap::try_from(
            ebpf.map_mut("HIST_SCOPED")
                .context("HIST_SCOPED map missing")?,
        )?;
        let dead: std::collections::HashSet<u32> = self.dead_pending.drain(..).collect();
        let keys: Vec<HistKey> = map
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| dead.contains(&k.id))
            .collect();
        for k in keys {
            if let Ok(v) = map.get(&k, 0) {
                let n: u64 = v.iter().sum();
                let set = self.exited_hists.entry(k.id).or_default();
                if let Some(h) = set.kind_mut(k.kind as u32) {
                    h.add_bucket(k.bucket as usize, n);
                }
            }
            let _ = map.remove(&k);
        }
        Ok(())
    }

    /// Removes the per-process histograms of `ids` (processes that died, whose growth was
    /// counted) from the kernel map, which would otherwise fill up under churn.
    pub fn forget_scoped(&mut self, ebpf: &mut Ebpf, ids: &HashSet<u32>) -> Result<usize> {
        if let Some(dead) = &mut self.thread_hists {
            // Their live threads' histograms went with the threads' storage.
            let n = dead.len();
            dead.forget(ids);
            return Ok(n - dead.len());
        }
        let mut map: PerCpuHashMap<_, HistKey, u64> = PerCpuHashMap::try_from(
            ebpf.map_mut("HIST_SCOPED")
                .context("HIST_SCOPED map missing")?,
        )?;
        let keys: Vec<HistKey> = map
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| ids.contains(&k.id))
            .collect();
        for k in &keys {
            let _ = map.remove(k);
        }
        Ok(keys.len())
    }
}
