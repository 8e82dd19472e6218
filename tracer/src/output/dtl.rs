//! The text of `tracer dtl`: the vcpudispatch table, the DTL histograms, reasons, notes.
use crate::{
    model::hist::{self, HistSummary},
    pseries::{
        dtl::DtlReport,
        vcpudispatch::{self, DispatchCounters, VcpuReport},
    },
};

fn pctl(s: &HistSummary, which: fn(&HistSummary) -> Option<u64>) -> String {
    which(s).map_or_else(|| "-".into(), hist::human_ns)
}

/// The text report.
pub fn format_text(r: &DtlReport) -> String {
    let mut out = String::new();
    let window = r.window_ns.map_or_else(
        || "snapshot".to_string(),
        |w| format!("over {}", hist::human_ns(w)),
    );
    if !r.vcpus.is_empty() {
        out += &format!(
            "vCPU dispatch statistics ({}), {window}{}:\n",
            vcpudispatch::STATS_PATH,
            if r.window_ns.is_some() {
                ", counts in the window"
            } else {
                ", counts since enabling"
            }
        );
        out += &format_table(&r.vcpus, r.window_ns);
    }
    if let Some(d) = &r.dtl {
        if !out.is_empty() {
            out.push('\n');
        }
        out += &format!(
            "Dispatch Trace Log, {window}: {} entries from {} vCPUs, {} gaps (lost entries), timebase {} Hz, steal {}\n",
            d.entries,
            d.per_vcpu.len(),
            d.lost,
            d.timebase_hz,
            hist::human_ns(d.steal_ns)
        );
        if let Some((all, _)) = &r.hists {
            out.push('\n');
            out += &hist::format_bcc(
                "dispatch latency (enqueue_to_dispatch_time)",
                &all.dispatch,
                hist::Unit::Usecs,
            );
            out.push('\n');
            out += &hist::format_bcc(
                "ready_to_enqueue_time",
                &all.ready_to_enqueue,
                hist::Unit::Usecs,
            );
            out.push('\n');
            out += &hist::format_bcc(
                "waiting_to_ready_time",
                &all.waiting_to_ready,
                hist::Unit::Usecs,
            );
        }
        if !d.per_vcpu.is_empty() {
            out += &format!(
                "\n{:>6} {:>9} {:>5} {:>10} {:>10} {:>10} {:>10}\n",
                "CPU", "entries", "gaps", "disp p50", "disp p99", "disp max", "steal"
            );
            for v in &d.per_vcpu {
                out += &format!(
                    "{:>6} {:>9} {:>5} {:>10} {:>10} {:>10} {:>10}\n",
                    format!("cpu{}", v.cpu),
                    v.entries,
                    v.lost,
                    pctl(&v.dispatch_latency, |s| s.p50_ns),
                    pctl(&v.dispatch_latency, |s| s.p99_ns),
                    pctl(&v.dispatch_latency, |s| s.max_ns),
                    hist::human_ns(v.steal_ns)
                );
            }
        }
        for (title, m) in [
            ("dispatch reasons", &d.dispatch_reasons),
            ("preempt reasons", &d.preempt_reasons),
        ] {
            if m.is_empty() {
                continue;
            }
            out += &format!("\n{title}:\n");
            let mut v: Vec<_> = m.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            for (name, n) in v {
                out += &format!("  {name:<34} {n:>10}\n");
            }
        }
    }
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    if r.interrupted {
        out += "note: interrupted before the end of the window\n";
    }
    out
}

fn pct(r: Option<f64>) -> String {
    r.map_or_else(|| "-".into(), |r| format!("{:.1}", r * 100.0))
}

/// The per-vCPU table: window deltas and dispatch rate when there was a window, otherwise
/// the cumulative counters.
pub fn format_table(vcpus: &[VcpuReport], window_ns: Option<u64>) -> String {
    let mut s = String::new();
    let windowed = window_ns.is_some();
    s += &format!(
        "{:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>6}{}\n",
        "CPU",
        "total",
        "same_cpu",
        "same_chip",
        "diff_chip",
        "far_chip",
        "numa_home",
        "numa_rem",
        "numa_far",
        "home%",
        if windowed { "     disp/s" } else { "" }
    );
    let mut sum = DispatchCounters::default();
    let mut sum_rate = 0.0;
    let row = |label: &str, c: &DispatchCounters, rate: Option<f64>| {
        let a = c.to_array();
        format!(
            "{:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>6}{}\n",
            label,
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
            a[6],
            a[7],
            pct(c.home_ratio()),
            match rate {
                Some(r) => format!(" {r:>10.1}"),
                None if windowed => format!(" {:>10}", "-"),
                None => String::new(),
            }
        )
    };
    for v in vcpus {
        let c = if windowed {
            v.delta.unwrap_or_default()
        } else {
            v.counters
        };
        let rate = v.rates.map(|r| r.total_disp);
        sum = sum.add(&c);
        sum_rate += rate.unwrap_or(0.0);
        s += &row(&format!("cpu{}", v.cpu), &c, rate);
    }
    if vcpus.len() > 1 {
        s += &row("all", &sum, windowed.then_some(sum_rate));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pseries::{
        dtl::{decode::DtlEntry, raw_report, DtlAnalyzer},
        vcpudispatch::{vcpu_reports, DispatchCounters, VcpuCounters},
    };

    fn entry(d: u8, p: u8, e2d: u32, tb: u64) -> DtlEntry {
        DtlEntry {
            dispatch_reason: d,
            preempt_reason: p,
            processor_id: 0x1234,
            enqueue_to_dispatch_time: e2d,
            ready_to_enqueue_time: 512,
            waiting_to_ready_time: 1024,
            timebase: tb,
            fault_addr: 0xdead_beef,
            srr0: 0xc000_0000_0000_1000,
            srr1: 0x8000_0000_0000_1033,
        }
    }
    #[test]
    fn text_report_mentions_everything() {
        let mut an = DtlAnalyzer::new(512_000_000);
        an.feed(2, &[entry(3, 2, 5120, 1)], false);
        let r = raw_report(&an, None);
        let t = format_text(&r);
        for want in [
            "1 entries",
            "decrementer_interrupt",
            "H_CEDE",
            "usecs",
            "cpu2",
        ] {
            assert!(t.contains(want), "{want} missing in\n{t}");
        }
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["dtl"]["entries"], 1);
        assert_eq!(j["dtl"]["dispatch_latency"]["count"], 1);
    }
    #[test]
    fn table_has_a_row_per_cpu_and_a_total() {
        let after = [
            VcpuCounters {
                cpu: 0,
                counters: DispatchCounters::from_array([100, 0, 0, 0, 0, 50, 50, 0]),
            },
            VcpuCounters {
                cpu: 1,
                counters: DispatchCounters::from_array([100, 0, 0, 0, 0, 100, 0, 0]),
            },
        ];
        let before = [
            VcpuCounters {
                cpu: 0,
                counters: DispatchCounters::default(),
            },
            VcpuCounters {
                cpu: 1,
                counters: DispatchCounters::default(),
            },
        ];
        let v = vcpu_reports(Some(&before), &after, 1_000_000_000);
        let t = format_table(&v, Some(1_000_000_000));
        assert!(t.contains("cpu0"), "{t}");
        let all = t
            .lines()
            .find(|l| l.trim_start().starts_with("all"))
            .unwrap();
        assert!(all.contains("200") && all.contains("75.0"), "{all}");
    }
}
