//! The cross-check of the BPF on-CPU figure against perf's task-clock: how far the two may
//! differ and still agree, and the notice that says which one to read when they do not.
use crate::model::words::plural;

/// What the BPF figures and task-clock each saw, for one comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct CrossCheck {
    /// BPF on-CPU time of the threads task-clock covers.
    pub bpf_ns: u64,
    pub task_clock_ns: f64,
    /// Threads task-clock does not cover (-p/-t: started after the counters were opened)
    /// and their BPF on-CPU time.
    pub missed_threads: usize,
    pub missed_ns: u64,
    /// Window time before the counters were enabled.
    pub lag_ns: u64,
    /// Threads both count that exited in the window: task-clock loses the end of each
    /// (its counters close in do_exit before the last switch; 60-90 us a process measured
    /// on this VM, `sh -c 'for i in $(seq 200); do /bin/true; done'`).
    pub exited_threads: usize,
    /// Slices of the threads both count: the scheduler charges each switch itself to the
    /// incoming thread, task-clock starts after it (perf's sched-in hook runs in
    /// finish_task_switch): 5-9.5 us a switch measured on this VM.
    pub slices: u64,
    pub cpus: usize,
    /// The report's window, and the largest on-CPU time of one thread (BPF): a thread
    /// cannot run longer than the window, nor all threads longer than window x CPUs.
    pub window_ns: u64,
    pub max_thread_ns: u64,
}

/// What task-clock may miss at one thread's exit.
const EXIT_ALLOWANCE_NS: f64 = 150_000.0;
/// What task-clock may miss at one switch-in.
const SWITCH_ALLOWANCE_NS: f64 = 20_000.0;

/// How far the two may differ and still agree: 2% or 2 ms, plus what the CPUs could
/// have run before the counters were enabled.
fn base_tolerance_ns(c: &CrossCheck) -> f64 {
    (0.02 * c.task_clock_ns).max(2e6) + c.lag_ns as f64 * c.cpus as f64
}

/// task-clock leaves out threads with more on-CPU time than the comparison's tolerance:
/// "CPUs utilized" is then the BPF figure, which has them all.
pub fn headline_from_bpf(c: &CrossCheck) -> bool {
    c.missed_ns as f64 > base_tolerance_ns(c)
}

/// [`base_tolerance_ns`] plus what task-clock misses at switches and exits.
fn cross_check_tolerance_ns(c: &CrossCheck) -> f64 {
    base_tolerance_ns(c)
        + c.exited_threads as f64 * EXIT_ALLOWANCE_NS
        + c.slices as f64 * SWITCH_ALLOWANCE_NS
}

/// The cross-check line: whether the two figures agree, and where they cannot (threads
/// task-clock does not see), which one to read.
pub fn cross_check_notice(c: &CrossCheck) -> String {
    let (bpf, tc) = (c.bpf_ns as f64, c.task_clock_ns);
    let pct = if tc > 0.0 {
        format!(" ({:+.2}%)", 100.0 * (bpf - tc) / tc)
    } else {
        String::new()
    };
    let same = format!(
        "on-CPU time from the BPF programs {:.3} ms vs task-clock {:.3} ms{pct}",
        bpf / 1e6,
        tc / 1e6
    );
    let impossible = c.max_thread_ns > c.window_ns.saturating_add(1_000_000)
        || bpf > (c.window_ns as f64 * c.cpus as f64) * 1.01 + 1e6;
    let diff = (bpf - tc).abs();
    let allowed = cross_check_tolerance_ns(c) > base_tolerance_ns(c);
    let verdict = if diff <= base_tolerance_ns(c) && diff <= 0.1 * tc.max(bpf) {
        "they agree".to_string()
    } else if bpf > tc && allowed && diff <= cross_check_tolerance_ns(c) {
        // Before "too little to compare": a short run of a thread that switches often
        // is far apart in proportion because of what task-clock does not see (+60%, 613
        // switches of 14 us, in CI on 2026-12-07).
        let per_switch =
            (diff - c.exited_threads as f64 * EXIT_ALLOWANCE_NS).max(0.0) / c.slices.max(1) as f64;
        let mut what = Vec::new();
        // The exits alone may account for it all: then the switches are not named
        // ("at most 0.0 us each" read as nonsense).
        if c.slices > 0 && (per_switch >= 50.0 || c.exited_threads == 0) {
            what.push(format!(
                "the context switch itself, which the scheduler charges to the incoming thread \
                 before perf starts its clock ({} switches, at most {:.1} us each)",
                c.slices,
                per_switch / 1e3
            ));
        }
        if c.exited_threads > 0 {
            what.push(format!(
                "the end of each of {} exited threads (task-clock stops in do_exit, before \
                 the last switch)",
                c.exited_threads
            ));
        }
        format!(
            "they agree once what task-clock does not see is allowed for: {}",
            what.join(", and ")
        )
    } else if diff <= base_tolerance_ns(c) {
        // Far apart in proportion, close in time: say how close counts here (a short
        // run's -100% once read "they agree").
        format!(
            "within this short run's tolerance of {:.3} ms (2 ms, and what the CPUs ran \
             between the counters' start and the programs' attach), too little to compare",
            base_tolerance_ns(c) / 1e6
        )
    } else if impossible {
        "the BPF figures are wrong (a thread on CPU longer than the window, or more than \
         the CPUs could run): trust task-clock"
            .to_string()
    } else if bpf > tc {
        "task-clock is short (it starts when the counters are enabled and a thread's \
         counter stops at its exit); the BPF figure is the scheduler's own per-slice \
         runtime: trust it"
            .to_string()
    } else {
        "the BPF figure is short: events were lost (see drops), trust task-clock".to_string()
    };
    if c.missed_threads == 0 {
        return format!("cross-check: {same}: {verdict}");
    }
    let headline = if headline_from_bpf(c) {
        " (so the headline CPUs utilized is the BPF figure)"
    } else {
        ""
    };
    format!(
        "cross-check: task-clock counts the threads present at the start (as perf stat -p/-t); \
         {} {} that started later ({:.3} ms on-CPU) are in the BPF figures only{headline}; \
         for the threads both count: {same}: {verdict}",
        c.missed_threads,
        plural(c.missed_threads, "thread", "threads"),
        c.missed_ns as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(bpf_ms: f64, tc_ms: f64) -> CrossCheck {
        CrossCheck {
            bpf_ns: (bpf_ms * 1e6) as u64,
            task_clock_ns: tc_ms * 1e6,
            missed_threads: 0,
            missed_ns: 0,
            lag_ns: 0,
            exited_threads: 0,
            slices: 0,
            cpus: 2,
            window_ns: 1_000_000_000,
            max_thread_ns: 0,
        }
    }

    #[test]
    fn cross_check_warns_only_where_it_means_something() {
        let n = cross_check_notice(&cc(909.202, 904.912));
        assert_eq!(
            n,
            "cross-check: on-CPU time from the BPF programs 909.202 ms vs task-clock 904.912 ms (+0.47%): they agree"
        );
        // Short runs: 2 ms either way, and what ran before the counters were enabled, is
        // within tolerance; far apart in proportion, that is said, not "they agree"
        // (-100% once read so: PID 1's threads, whose switches 6.18 does not report).
        let n = cross_check_notice(&cc(3.0, 1.5));
        assert!(n.ends_with("too little to compare"), "{n}");
        let n = cross_check_notice(&cc(0.0, 1.5));
        assert!(
            n.contains("(-100.00%): within this short run's tolerance of 2.000 ms"),
            "{n}"
        );
        assert!(cross_check_notice(&cc(10.0, 9.5)).ends_with("they agree"));
        let late = CrossCheck {
            lag_ns: 5_000_000,
            ..cc(100.0, 92.0)
        };
        assert!(cross_check_notice(&late).ends_with("they agree"));
        // A real gap says which figure to trust.
        let n = cross_check_notice(&cc(258.0, 100.0));
        assert!(n.contains("(+158.00%)") && n.ends_with("trust it"), "{n}");
        let n = cross_check_notice(&cc(60.0, 100.0));
        assert!(n.ends_with("trust task-clock"), "{n}");
        // 200 short processes: task-clock misses the end of each.
        let n = cross_check_notice(&CrossCheck {
            exited_threads: 202,
            ..cc(108.55, 96.51)
        });
        assert!(
            n.contains("(+12.48%): they agree once what task-clock does not see")
                && n.contains("the end of each of 202 exited threads"),
            "{n}"
        );
        // The exits explain it all, over many switches: the switches are not named at
        // "0.0 us each" (a hostile pass read "3790 switches, at most 0.0 us each").
        let n = cross_check_notice(&CrossCheck {
            exited_threads: 1000,
            slices: 3790,
            ..cc(30.0, 25.0)
        });
        assert!(
            n.contains("1000 exited threads") && !n.contains("switches"),
            "{n}"
        );
        // A thread that switches 600 times: ~9 us a switch.
        let n = cross_check_notice(&CrossCheck {
            slices: 596,
            ..cc(22.508, 16.885)
        });
        assert!(
            n.contains("(+33.30%): they agree once")
                && n.contains("(596 switches, at most 9.4 us each)"),
            "{n}"
        );
        // The same within a short run's tolerance: the switches explain it, which is
        // said rather than "too little to compare" (CI, 2026-12-07).
        let n = cross_check_notice(&CrossCheck {
            slices: 613,
            ..cc(23.083, 14.225)
        });
        assert!(
            n.contains("(+62.27%): they agree once") && n.contains("(613 switches"),
            "{n}"
        );
        // A BPF figure that cannot be (a thread on CPU longer than the window) is not
        // the one to trust, however much larger it is.
        let n = cross_check_notice(&CrossCheck {
            max_thread_ns: 566_000_000_000,
            ..cc(566_000.0, 1491.0)
        });
        assert!(
            n.contains("the BPF figures are wrong") && n.ends_with("trust task-clock"),
            "{n}"
        );
        let n = cross_check_notice(&cc(2500.0, 1000.0));
        assert!(
            n.ends_with("trust task-clock"),
            "more than 2 CPUs x 1 s: {n}"
        );
        // Threads task-clock never saw are named, and the comparison is on the others.
        let n = cross_check_notice(&CrossCheck {
            missed_threads: 3,
            missed_ns: 150_000_000,
            ..cc(100.5, 100.0)
        });
        assert!(
            n.contains("3 threads that started later (150.000 ms on-CPU) are in the BPF figures only (so the headline")
                && n.ends_with("(+0.50%): they agree"),
            "{n}"
        );
    }
}
