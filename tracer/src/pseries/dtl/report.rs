//! What `tracer dtl` reports (serialized as its JSON): vcpudispatch counters and the
//! raw log's digest.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    error::TracerError,
    pseries::{
        dtl::{
            analyze::{DtlAnalyzer, DtlHists, DtlSummary},
            read::{check_complete, open_all, read_available, read_timebase},
        },
        vcpudispatch::{self, StatsState, VcpuCounters, VcpuReport},
    },
    sys::root::Root,
};

/// Everything `tracer dtl` prints.
#[derive(Clone, Debug, Serialize)]
pub struct DtlReport {
    /// `vcpudispatch_stats` or `raw`.
    pub mode: &'static str,
    /// Whether vcpudispatch_stats had counters to show.
    pub stats_enabled: bool,
    /// Length of the sampled window; None for a snapshot.
    pub window_ns: Option<u64>,
    /// Ended early by SIGINT/SIGTERM.
    pub interrupted: bool,
    pub vcpus: Vec<VcpuReport>,
    pub dtl: Option<DtlSummary>,
    pub notes: Vec<String>,
    /// Overall and per-vCPU histograms for the text report.
    #[serde(skip)]
    pub hists: Option<(DtlHists, BTreeMap<u32, DtlHists>)>,
}

fn stats_vcpus(state: &StatsState) -> &[VcpuCounters] {
    match state {
        StatsState::On(v) => v,
        StatsState::Off => &[],
    }
}

/// A read-only snapshot: the counters as they are and, with `raw`, what the log files
/// hold now. Changes no setting; what `--duration 0` does without --dtl-freq/--dtl-mask.
pub fn snapshot(root: &Root, raw: bool) -> Result<DtlReport, TracerError> {
    let state = vcpudispatch::read_stats(root)?;
    let mut report = base_report(raw, &state, None, &state);
    if raw {
        let tb = read_timebase(root)?;
        let mut files = open_all(root)?;
        let mut an = DtlAnalyzer::new(tb);
        read_available(&mut files, &mut an, root.is_live())?;
        check_complete(&files)?;
        attach_dtl(&mut report, &an);
    }
    Ok(report)
}

/// The report's frame: the counters' rows (deltas over a window) and the notes.
pub fn base_report(
    raw: bool,
    before: &StatsState,
    window_ns: Option<u64>,
    after: &StatsState,
) -> DtlReport {
    let enabled = matches!(after, StatsState::On(_));
    let mut notes = Vec::new();
    if !enabled && !raw {
        notes.push(
            "vcpudispatch_stats is off; sample a window (e.g. --duration 5s) to enable it for that time"
                .to_string(),
        );
    }
    let before = window_ns.map(|_| stats_vcpus(before));
    DtlReport {
        mode: if raw { "raw" } else { "vcpudispatch_stats" },
        stats_enabled: enabled,
        window_ns,
        interrupted: false,
        vcpus: vcpudispatch::vcpu_reports(before, stats_vcpus(after), window_ns.unwrap_or(0)),
        dtl: None,
        notes,
        hists: None,
    }
}

/// A raw-mode report of what `an` has seen (no vcpudispatch counters).
pub fn raw_report(an: &DtlAnalyzer, window_ns: Option<u64>) -> DtlReport {
    let mut r = base_report(true, &StatsState::Off, None, &StatsState::Off);
    r.window_ns = window_ns;
    attach_dtl(&mut r, an);
    r
}

/// Adds what `an` saw: the JSON digest and the histograms for the text.
pub fn attach_dtl(report: &mut DtlReport, an: &DtlAnalyzer) {
    report.dtl = Some(an.summary());
    report.hists = Some((an.overall(), an.per_vcpu()));
}
