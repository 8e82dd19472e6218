//! Ground truth for the tracer's numbers: one JSON line per workload thread with what the
//! kernel itself kept for it (schedstat's on-CPU time, run-queue delay and timeslices, and
//! the thread's own CPU clock), written by `tracer-workload` (tests/) and by the VM
//! guest's steps (tests/vm/steps.sh), and read by the end-to-end tests and `cargo xtask
//! vm-test`; how far each figure may be from it ([`bounds`]), for those two and `cargo
//! xtask torture`; and the torture harness's random generator ([`Rng`]), shared by the
//! harness and its workload. One definition each, so the readers cannot drift apart. A
//! crate of its own because xtask builds the tracer and so cannot depend on the tests'
//! library (which depends on the tracer).

pub mod bounds;
mod rng;
pub mod steal;
pub mod zombie;

pub use bounds::*;
pub use rng::Rng;
use serde::{Deserialize, Serialize};
pub use steal::{steal_ns, Steal};

/// One thread's ground truth. Written with `serde_json::to_string` (absent figures left
/// out) and read with [`Truth::parse`].
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Truth {
    pub tid: u64,
    pub pid: u64,
    /// schedstat: on-CPU ns.
    pub run_ns: u64,
    /// schedstat: run-queue delay (run_delay) ns.
    pub wait_ns: u64,
    /// schedstat: timeslices (pcount); tracer-workload writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slices: Option<u64>,
    /// CLOCK_THREAD_CPUTIME_ID at the thread's end; tracer-workload writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns: Option<u64>,
    /// Which workload wrote it (busy, spin, ...), when the writer names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The thread's state when its schedstat was read (steps.sh reads stopped threads: T).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
}

impl Truth {
    /// Parses one line; a missing tid, pid, run_ns or wait_ns is an error.
    pub fn parse(line: &str) -> Result<Truth, serde_json::Error> {
        serde_json::from_str(line)
    }
}

/// [`Bound::larger`]`(rel, abs_ns)`'s allowance from `truth`, for a one-off: a margin
/// that stays belongs in [`bounds`], named after its figure.
pub fn tolerance(truth: u64, rel: f64, abs_ns: f64) -> f64 {
    Bound::larger(rel, abs_ns).allowed(truth as f64)
}

/// Whether `ours` is within [`tolerance`] of `truth`.
pub fn within(ours: u64, truth: u64, rel: f64, abs_ns: f64) -> bool {
    Bound::larger(rel, abs_ns).holds_ns(ours, truth)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_or_absolute_whichever_allows_more() {
        assert!(within(101, 100, 0.01, 0.0));
        assert!(!within(102, 100, 0.01, 0.0));
        assert!(within(1_000_500, 1_000_000, 0.0001, 1000.0));
        assert!(!within(1_002_000, 1_000_000, 0.001, 1000.0));
        assert!(within(0, 500, 0.0, 500.0));
    }

    #[test]
    fn written_lines_read_back() {
        let t = Truth {
            tid: 7,
            pid: 6,
            run_ns: 100,
            wait_ns: 20,
            slices: Some(3),
            cpu_ns: Some(99),
            ..Truth::default()
        };
        let line = serde_json::to_string(&t).unwrap();
        assert!(!line.contains("kind"), "{line}");
        let back = Truth::parse(&line).unwrap();
        assert_eq!((back.tid, back.cpu_ns, back.kind), (7, Some(99), None));
    }

    #[test]
    fn lines_need_the_four_figures() {
        let t = Truth::parse(r#"{"tid":5,"pid":4,"run_ns":10,"wait_ns":2,"slices":3}"#).unwrap();
        assert_eq!(
            (t.tid, t.pid, t.run_ns, t.wait_ns, t.slices),
            (5, 4, 10, 2, Some(3))
        );
        assert_eq!(t.cpu_ns, None);
        assert!(Truth::parse(r#"{"tid":5,"pid":4,"run_ns":10}"#).is_err());
    }
}
