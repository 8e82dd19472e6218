//! The "hypervisor" section of `tracer run` as text: steal per CPU and, on pseries, the
//! vcpudispatch table over the window.
use crate::{model::hist, output::dtl::format_table, pseries::hypervisor::HypervisorReport};

fn pct(p: Option<f64>) -> String {
    p.map_or_else(|| "-".into(), |p| format!("{p:.1}"))
}

fn cpus_word(n: usize) -> &'static str {
    crate::model::words::plural(n, "CPU", "CPUs")
}

/// The text section.
pub fn format_text(r: &HypervisorReport) -> String {
    let mut out = String::new();
    let window = hist::human_ns(r.elapsed_ns);
    if r.cpus.is_empty() {
        out += "hypervisor: no steal data\n";
    } else if r.total_steal_ns == 0 {
        let n = r.cpus.len();
        out += &format!(
            "hypervisor: no steal time on {n} {} over {window} (the host did not delay {})\n",
            cpus_word(n),
            if n == 1 { "it" } else { "them" }
        );
    } else {
        out += &format!(
            "hypervisor: steal time over {window} (/proc/stat; time runnable vCPUs waited for the host)\n"
        );
        out += &format!("{:>6} {:>10} {:>7}\n", "CPU", "steal", "steal%");
        for c in r.cpus.iter().filter(|c| c.steal_ns > 0) {
            out += &format!(
                "{:>6} {:>10} {:>7}\n",
                format!("cpu{}", c.cpu),
                hist::human_ns(c.steal_ns),
                pct(c.steal_percent)
            );
        }
        let idle = r.cpus.iter().filter(|c| c.steal_ns == 0).count();
        if idle > 0 {
            out += &format!("  ({idle} {} without steal not shown)\n", cpus_word(idle));
        }
        out += &format!(
            "{:>6} {:>10} {:>7}\n",
            "all",
            hist::human_ns(r.total_steal_ns),
            pct(r.total_steal_percent)
        );
    }
    if let Some(d) = &r.dispatch {
        out += &format!("hypervisor dispatches over {window} (vcpudispatch_stats):\n");
        out += &format_table(d, Some(r.elapsed_ns));
    }
    for n in &r.notes {
        out += &format!("note: {n}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pseries::{
        hypervisor::{report, tests::snap},
        vcpudispatch::{DispatchCounters, VcpuCounters},
    };

    #[test]
    fn steal_rows_and_words() {
        let b = snap(&[(0, 100), (1, 100), (2, 5)], 100);
        let a = snap(&[(0, 150), (1, 100), (2, 4)], 100);
        let text = format_text(&report(&b, &a, None, 1_000_000_000));
        assert!(
            text.contains("cpu0") && text.contains("500ms") && text.contains("50.0"),
            "{text}"
        );
        let only1 = report(&b, &a, Some(&[1, 7]), 1_000_000_000);
        assert!(
            format_text(&only1)
                .contains("no steal time on 1 CPU over 1.00s (the host did not delay it)"),
            "{}",
            format_text(&only1)
        );
        // One CPU with steal, one without: singular.
        let b2 = snap(&[(0, 100), (1, 100)], 100);
        let a2 = snap(&[(0, 150), (1, 100)], 100);
        let t2 = format_text(&report(&b2, &a2, None, 1_000_000_000));
        assert!(t2.contains("  (1 CPU without steal not shown)\n"), "{t2}");
    }

    #[test]
    fn dispatch_table_when_both_snapshots_have_it() {
        let mut b = snap(&[(0, 0)], 100);
        let mut a = snap(&[(0, 0)], 100);
        b.dispatch = Some(vec![VcpuCounters {
            cpu: 0,
            counters: DispatchCounters::from_array([10, 10, 0, 0, 0, 10, 0, 0]),
        }]);
        a.dispatch = Some(vec![VcpuCounters {
            cpu: 0,
            counters: DispatchCounters::from_array([30, 20, 10, 0, 0, 25, 5, 0]),
        }]);
        assert!(format_text(&report(&b, &a, None, 2_000_000_000)).contains("vcpudispatch_stats"));
    }
}
