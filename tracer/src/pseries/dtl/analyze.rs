//! Decoded entries into per-vCPU latency histograms, reason counts, steal and gaps.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    model::{
        hist::{HistSummary, Histogram},
        series::DtlVcpu,
    },
    pseries::dtl::decode::{dispatch_reason_name, preempt_reason_name, ticks_to_ns, DtlEntry},
};

/// The three latencies of one stream, in ns.
#[derive(Clone, Debug, Default)]
pub struct DtlHists {
    /// enqueue_to_dispatch_time: ready on the hypervisor's queue until running.
    pub dispatch: Histogram,
    pub ready_to_enqueue: Histogram,
    pub waiting_to_ready: Histogram,
}

impl DtlHists {
    fn merge(&mut self, o: &DtlHists) {
        self.dispatch.merge(&o.dispatch);
        self.ready_to_enqueue.merge(&o.ready_to_enqueue);
        self.waiting_to_ready.merge(&o.waiting_to_ready);
    }
}

#[derive(Clone, Debug, Default)]
struct Stream {
    last_tb: Option<u64>,
    entries: u64,
    lost: u64,
    steal_ns: u64,
    hists: DtlHists,
}

/// Accumulates decoded entries per vCPU.
#[derive(Clone, Debug)]
pub struct DtlAnalyzer {
    tb_hz: u64,
    streams: BTreeMap<u32, Stream>,
    dispatch_reasons: BTreeMap<String, u64>,
    preempt_reasons: BTreeMap<String, u64>,
}

impl DtlAnalyzer {
    pub fn new(tb_hz: u64) -> Self {
        DtlAnalyzer {
            tb_hz,
            streams: BTreeMap::new(),
            dispatch_reasons: BTreeMap::new(),
            preempt_reasons: BTreeMap::new(),
        }
    }

    /// Adds the entries of one read of `cpu-N`, in log order. `ring_full`: the read
    /// returned a whole ring or more on the live system (see the module docs on gaps).
    pub fn feed(&mut self, cpu: u32, entries: &[DtlEntry], ring_full: bool) {
        let tb = self.tb_hz;
        let s = self.streams.entry(cpu).or_default();
        if ring_full {
            s.lost = s.lost.saturating_add(1);
        }
        for e in entries {
            if s.last_tb.is_some_and(|last| e.timebase < last) {
                s.lost = s.lost.saturating_add(1);
            }
            s.last_tb = Some(e.timebase);
            s.entries = s.entries.saturating_add(1);
            let e2d = ticks_to_ns(u64::from(e.enqueue_to_dispatch_time), tb);
            let r2e = ticks_to_ns(u64::from(e.ready_to_enqueue_time), tb);
            s.hists.dispatch.record(e2d);
            s.hists.ready_to_enqueue.record(r2e);
            s.hists
                .waiting_to_ready
                .record(ticks_to_ns(u64::from(e.waiting_to_ready_time), tb));
            // The kernel's steal time on pseries.
            s.steal_ns = s.steal_ns.saturating_add(e2d.saturating_add(r2e));
            *self
                .dispatch_reasons
                .entry(dispatch_reason_name(e.dispatch_reason).into_owned())
                .or_default() += 1;
            *self
                .preempt_reasons
                .entry(preempt_reason_name(e.preempt_reason).into_owned())
                .or_default() += 1;
        }
    }

    /// All vCPUs' histograms merged.
    pub fn overall(&self) -> DtlHists {
        let mut all = DtlHists::default();
        for s in self.streams.values() {
            all.merge(&s.hists);
        }
        all
    }

    /// One vCPU's histograms.
    pub fn vcpu(&self, cpu: u32) -> Option<&DtlHists> {
        self.streams.get(&cpu).map(|s| &s.hists)
    }

    /// Each vCPU's histograms.
    pub fn per_vcpu(&self) -> BTreeMap<u32, DtlHists> {
        self.streams
            .iter()
            .map(|(&c, s)| (c, s.hists.clone()))
            .collect()
    }

    /// Per vCPU, what `tracer serve` exposes: the dispatch latency, entries and gaps.
    pub fn vcpus(&self) -> Vec<DtlVcpu> {
        self.streams
            .iter()
            .map(|(&cpu, s)| DtlVcpu {
                cpu,
                dispatch: s.hists.dispatch.clone(),
                entries: s.entries,
                gaps: s.lost,
            })
            .collect()
    }

    /// The JSON digest.
    pub fn summary(&self) -> DtlSummary {
        let all = self.overall();
        DtlSummary {
            timebase_hz: self.tb_hz,
            entries: self.streams.values().map(|s| s.entries).sum(),
            lost: self.streams.values().map(|s| s.lost).sum(),
            steal_ns: self
                .streams
                .values()
                .fold(0u64, |a, s| a.saturating_add(s.steal_ns)),
            dispatch_latency: all.dispatch.summary(),
            ready_to_enqueue: all.ready_to_enqueue.summary(),
            waiting_to_ready: all.waiting_to_ready.summary(),
            dispatch_reasons: self.dispatch_reasons.clone(),
            preempt_reasons: self.preempt_reasons.clone(),
            per_vcpu: self
                .streams
                .iter()
                .map(|(&cpu, s)| VcpuDtl {
                    cpu,
                    entries: s.entries,
                    lost: s.lost,
                    steal_ns: s.steal_ns,
                    dispatch_latency: s.hists.dispatch.summary(),
                    ready_to_enqueue: s.hists.ready_to_enqueue.summary(),
                    waiting_to_ready: s.hists.waiting_to_ready.summary(),
                })
                .collect(),
        }
    }
}

/// What the raw log showed, overall and per vCPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DtlSummary {
    pub timebase_hz: u64,
    pub entries: u64,
    /// Gaps where at least one entry was lost (a lower bound on lost entries).
    pub lost: u64,
    /// enqueue_to_dispatch + ready_to_enqueue summed: the kernel's pseries steal time.
    pub steal_ns: u64,
    /// enqueue_to_dispatch_time, ns.
    pub dispatch_latency: HistSummary,
    pub ready_to_enqueue: HistSummary,
    pub waiting_to_ready: HistSummary,
    pub dispatch_reasons: BTreeMap<String, u64>,
    pub preempt_reasons: BTreeMap<String, u64>,
    pub per_vcpu: Vec<VcpuDtl>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VcpuDtl {
    pub cpu: u32,
    pub entries: u64,
    pub lost: u64,
    pub steal_ns: u64,
    pub dispatch_latency: HistSummary,
    pub ready_to_enqueue: HistSummary,
    pub waiting_to_ready: HistSummary,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pseries::dtl::decode::tests::entry;

    #[test]
    fn analyzer_counts_reasons_latencies_and_gaps() {
        let mut an = DtlAnalyzer::new(512_000_000);
        // 512 ticks = 1 us; timebase goes back once (a gap)
        let es = [
            entry(3, 2, 512, 100),
            entry(7, 4, 1024, 200),
            entry(3, 2, 512, 150),
            entry(200, 200, 512, 300),
        ];
        an.feed(0, &es, false);
        an.feed(1, &[entry(1, 1, 0, 10)], true);
        an.feed(1, &[entry(5, 1, 0, 20)], false);
        let s = an.summary();
        assert_eq!(s.entries, 6);
        assert_eq!(s.lost, 2);
        assert_eq!(s.per_vcpu[0].lost, 1);
        assert_eq!(s.per_vcpu[1].lost, 1);
        assert_eq!(s.dispatch_reasons["decrementer_interrupt"], 2);
        assert_eq!(s.dispatch_reasons["firmware_internal_event"], 2);
        assert_eq!(s.dispatch_reasons["unknown_200"], 1);
        assert_eq!(s.preempt_reasons["H_CEDE"], 2);
        assert_eq!(s.preempt_reasons["unknown_200"], 1);
        assert_eq!(s.dispatch_latency.count, 6);
        assert_eq!(s.dispatch_latency.sum_ns, 1000 + 2000 + 1000 + 1000);
        // steal = e2d + r2e (512 ticks = 1000 ns each entry)
        assert_eq!(s.steal_ns, 5000 + 6 * 1000);
    }
}
