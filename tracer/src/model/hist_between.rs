//! The histogram as of the moment the threads were read, from two reads around it.
//!
//! The kernel counts an event in its histogram right after the thread's own totals, and
//! a snapshot takes its histogram sums from those totals. One read of the histogram
//! before the threads (`lower`) lacks the events that ended while the threads were read:
//! their time went into this snapshot, their count into the next, and an interval could
//! show a count with no time (seen: 38 slices that sum to 0 ns). A second read after the
//! threads (`upper`) holds them; the histogram that goes with the threads' totals lies
//! in between, with as many events as the threads show.
use crate::model::hist::Histogram;
use tracer_common::hist::N_BUCKETS;

/// `lower` plus as many of the events `upper` has in addition as make `count` (the
/// threads' number of events), taken from the lowest buckets up (which buckets those
/// few were is not known). Never below `lower` nor above `upper`: consecutive snapshots
/// read this way never go down, since each one's `upper` precedes the next one's `lower`.
pub fn between(lower: &Histogram, upper: &Histogram, count: u64) -> Histogram {
    let mut h = lower.clone();
    let mut need = count.saturating_sub(lower.count());
    for b in 0..N_BUCKETS {
        if need == 0 {
            break;
        }
        let more = upper.bucket(b).saturating_sub(lower.bucket(b)).min(need);
        if more > 0 {
            h.add_bucket(b, more);
            need -= more;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(v: &[u64]) -> Histogram {
        let mut h = Histogram::new();
        for &x in v {
            h.record(x);
        }
        h
    }

    #[test]
    fn takes_what_the_threads_show() {
        let lower = hist(&[100, 5_000]);
        let upper = hist(&[100, 5_000, 7, 9_000, 9_000]);
        let h = between(&lower, &upper, 4);
        assert_eq!(h.count(), 4);
        for b in 0..N_BUCKETS {
            assert!(lower.bucket(b) <= h.bucket(b) && h.bucket(b) <= upper.bucket(b));
        }
        // Fewer than `lower` (a thread's entry lost) or more than `upper`: the bounds.
        assert_eq!(between(&lower, &upper, 1).counts, lower.counts);
        assert_eq!(between(&lower, &upper, 99).counts, upper.counts);
    }

    /// Seed 11 (`-p`, -i 100ms): 38 slices ended between the histogram's read and the
    /// threads' at one snapshot; the next found no more slices. From `lower` alone the
    /// next interval counted 38 slices and 0 ns.
    #[test]
    fn an_interval_counts_only_events_whose_time_it_has() {
        let slices: Vec<u64> = (1..=440).map(|i| 10_000 + i * 37).collect();
        let (read_before, done_at_threads) = (&slices[..402], &slices[..]);
        // Snapshot 5: histogram read with 402 slices; the threads then show 440; read
        // again after them: all 440.
        let s5 = between(&hist(read_before), &hist(done_at_threads), 440);
        // Snapshot 6: nothing ran since; both reads and the threads agree on 440.
        let s6 = between(&hist(done_at_threads), &hist(done_at_threads), 440);
        let interval = s6.saturating_sub(&s5);
        assert_eq!(interval.count(), 0, "no slice ended in the interval");
        let old_way = hist(done_at_threads).saturating_sub(&hist(read_before));
        assert_eq!(
            old_way.count(),
            38,
            "the single read split them from their time"
        );
    }
}
