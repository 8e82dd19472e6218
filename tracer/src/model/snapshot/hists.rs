//! The histograms of a snapshot: which kind a kernel map key means, and the three of one
//! scope (the traced set, a process or a thread) with the arithmetic between reads.
use tracer_common::hist::{KIND_OFF_CPU, KIND_ON_CPU, KIND_RUNQ};

use crate::model::hist::Histogram;

/// What a histogram holds: the kernel's `tracer_common::hist::KIND_*`, as a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistKind {
    OnCpu,
    Runq,
    OffCpu,
}

impl HistKind {
    /// In the order of reports.
    pub const ALL: [HistKind; 3] = [HistKind::OnCpu, HistKind::Runq, HistKind::OffCpu];

    /// The kernel's kind number (a map key), None for one this build does not know.
    pub fn from_kernel(kind: u32) -> Option<HistKind> {
        match kind {
            KIND_ON_CPU => Some(HistKind::OnCpu),
            KIND_RUNQ => Some(HistKind::Runq),
            KIND_OFF_CPU => Some(HistKind::OffCpu),
            _ => None,
        }
    }

    /// The key in JSON (`histograms.on_cpu`, ...).
    pub fn key(self) -> &'static str {
        match self {
            HistKind::OnCpu => "on_cpu",
            HistKind::Runq => "runq",
            HistKind::OffCpu => "off_cpu",
        }
    }

    /// The title of its text block.
    pub fn title(self) -> &'static str {
        match self {
            HistKind::OnCpu => "on-CPU slice",
            HistKind::Runq => "run-queue latency",
            HistKind::OffCpu => "off-CPU time",
        }
    }
}

/// The three histograms of one scope.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistSet {
    pub on_cpu: Histogram,
    pub runq: Histogram,
    pub off_cpu: Histogram,
}

impl HistSet {
    pub fn new() -> Self {
        HistSet {
            on_cpu: Histogram::new(),
            runq: Histogram::new(),
            off_cpu: Histogram::new(),
        }
    }

    pub fn get(&self, kind: HistKind) -> &Histogram {
        match kind {
            HistKind::OnCpu => &self.on_cpu,
            HistKind::Runq => &self.runq,
            HistKind::OffCpu => &self.off_cpu,
        }
    }

    pub fn get_mut(&mut self, kind: HistKind) -> &mut Histogram {
        match kind {
            HistKind::OnCpu => &mut self.on_cpu,
            HistKind::Runq => &mut self.runq,
            HistKind::OffCpu => &mut self.off_cpu,
        }
    }

    /// The histogram of the kernel's kind number, None for one this build does not know.
    pub fn kind_mut(&mut self, kind: u32) -> Option<&mut Histogram> {
        HistKind::from_kernel(kind).map(|k| self.get_mut(k))
    }

    pub fn merge(&mut self, o: &HistSet) {
        self.on_cpu.merge(&o.on_cpu);
        self.runq.merge(&o.runq);
        self.off_cpu.merge(&o.off_cpu);
    }

    /// Per bucket, the larger of the two counts.
    pub(super) fn raise_to(&mut self, earlier: &HistSet) {
        for (h, e) in [
            (&mut self.on_cpu, &earlier.on_cpu),
            (&mut self.runq, &earlier.runq),
            (&mut self.off_cpu, &earlier.off_cpu),
        ] {
            h.raise_to(e);
        }
    }

    pub fn saturating_sub(&self, earlier: &HistSet) -> HistSet {
        HistSet {
            on_cpu: self.on_cpu.saturating_sub(&earlier.on_cpu),
            runq: self.runq.saturating_sub(&earlier.runq),
            off_cpu: self.off_cpu.saturating_sub(&earlier.off_cpu),
        }
    }

    /// Histogram sums come from the threads' exact totals (the kernel keeps counts only).
    pub(super) fn set_sums(&mut self, on_cpu: u64, runq: u64, off_cpu: u64) {
        self.on_cpu.sum_ns = on_cpu;
        self.runq.sum_ns = runq;
        self.off_cpu.sum_ns = off_cpu;
    }
}
