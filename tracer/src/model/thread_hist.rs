//! Per-process histograms folded from the threads' own (`hist::ThreadHist`, `tracer
//! serve` in task-storage mode): the kernel counts each thread's values per power of two
//! in the thread's storage, and the process's histograms are their sum here, plus what
//! its dead threads handed over.
use std::collections::{BTreeMap, HashMap};

use tracer_common::hist::{slot_bucket, ThreadHist, N_KINDS, SLOTS};

use super::snapshot::HistSet;

/// Counts by kind and slot, as in `ThreadHist::counts`.
pub type Slots = [[u64; SLOTS]; N_KINDS as usize];

/// Slot counts per process (TGID).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcHists(HashMap<u32, Slots>);

impl ProcHists {
    /// Adds a thread's counts to its process's.
    pub fn add(&mut self, h: &ThreadHist) {
        let p = self
            .0
            .entry(h.tgid)
            .or_insert([[0; SLOTS]; N_KINDS as usize]);
        for (mine, theirs) in p.iter_mut().zip(h.counts.iter()) {
            for (a, b) in mine.iter_mut().zip(theirs.iter()) {
                *a = a.saturating_add(*b);
            }
        }
    }

    /// Adds every process of `other`.
    pub fn merge(&mut self, other: &ProcHists) {
        for (&tgid, counts) in &other.0 {
            self.add(&ThreadHist {
                tid: 0,
                tgid,
                counts: *counts,
            });
        }
    }

    /// Forgets the processes in `ids` (dead ones, whose growth was counted).
    pub fn forget(&mut self, ids: &std::collections::HashSet<u32>) {
        self.0.retain(|id, _| !ids.contains(id));
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each process's histograms at full resolution: a slot's counts in the bucket of
    /// its largest value (`hist::slot_bucket`), under the same power-of-two bounds.
    pub fn to_sets(&self) -> BTreeMap<u32, HistSet> {
        self.0
            .iter()
            .map(|(&tgid, counts)| {
                let mut set = HistSet::new();
                for (kind, slots) in counts.iter().enumerate() {
                    let Some(h) = set.kind_mut(kind as u32) else {
                        continue;
                    };
                    for (s, &n) in slots.iter().enumerate() {
                        h.add_bucket(slot_bucket(s), n);
                    }
                }
                (tgid, set)
            })
            .collect()
    }
}

/// Splits the `dump_hists` iterator's output (or an exit ring record) into records; a
/// torn tail is ignored.
pub fn parse(bytes: &[u8]) -> Vec<ThreadHist> {
    bytes
        .chunks_exact(std::mem::size_of::<ThreadHist>())
        .map(|c| {
            // SAFETY: ThreadHist is plain data of exactly this size; read unaligned.
            unsafe { std::ptr::read_unaligned(c.as_ptr() as *const ThreadHist) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::hist::{slot, KIND_OFF_CPU, KIND_ON_CPU, KIND_RUNQ};

    fn thread(tid: u32, tgid: u32, values: &[(u32, u64)]) -> ThreadHist {
        let mut h = ThreadHist {
            tid,
            tgid,
            ..ThreadHist::ZERO
        };
        for &(kind, v) in values {
            h.counts[kind as usize][slot(v)] += 1;
        }
        h
    }

    #[test]
    fn threads_fold_into_their_process_and_keep_every_count() {
        let a = thread(
            10,
            10,
            &[(KIND_ON_CPU, 1_500), (KIND_RUNQ, 40), (KIND_RUNQ, 3)],
        );
        let b = thread(11, 10, &[(KIND_ON_CPU, 1_600), (KIND_OFF_CPU, u64::MAX)]);
        let c = thread(20, 20, &[(KIND_OFF_CPU, 2_000_000)]);
        let mut bytes = Vec::new();
        for h in [&a, &b, &c] {
            // SAFETY: plain data, viewed as bytes.
            bytes.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    h as *const ThreadHist as *const u8,
                    std::mem::size_of::<ThreadHist>(),
                )
            });
        }
        bytes.extend_from_slice(&[1, 2, 3]); // a torn tail
        let mut p = ProcHists::default();
        for h in parse(&bytes) {
            p.add(&h);
        }
        let sets = p.to_sets();
        assert_eq!(sets.len(), 2);
        let ten = &sets[&10];
        assert_eq!(ten.on_cpu.count(), 2);
        assert_eq!(ten.runq.count(), 2);
        assert_eq!(ten.off_cpu.count(), 1);
        // 1,500 and 1,600 ns share the octave [1024, 2048): one bucket, at or below 2047.
        assert_eq!(ten.on_cpu.nonzero().count(), 1);
        assert_eq!(sets[&20].off_cpu.count(), 1);
        // Dead threads' counts (merged) add to the live ones'; a forgotten process goes.
        let mut dead = ProcHists::default();
        dead.add(&a);
        p.merge(&dead);
        assert_eq!(p.to_sets()[&10].runq.count(), 4);
        p.forget(&[10].into_iter().collect());
        assert_eq!(p.len(), 1);
    }
}
