//! The drop counters a report shows: what the kernel lost or placed, each with its
//! advice, so every output names a loss the same way.
use serde::{Serialize, Serializer};

use crate::model::snapshot::DROP_NAMES;

/// Events the kernel lost, by `tracer_common::drop` index, and program runs it skipped.
#[derive(Clone, Debug, Default)]
pub struct Drops {
    pub kernel: [u64; DROP_NAMES.len()],
    pub recursion_misses: u64,
    /// Live threads missing from four reads in a row (user space's count).
    pub threads_unread: u64,
}

impl Drops {
    /// Every counter by its name in reports.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DROP_NAMES
            .iter()
            .copied()
            .zip(self.kernel.iter().copied())
            .chain([
                ("recursion_misses", self.recursion_misses),
                ("threads_unread", self.threads_unread),
            ])
    }
}

/// What a drop counter means for the figures and what to do about it, for reports.
/// `None`: not a loss (the figures are whole; the counter says how they were placed).
pub fn drop_advice(name: &str) -> Option<&'static str> {
    Some(match name {
        "threads_map_full" | "tracked_map_full" => "raise --max-threads",
        "exit_ringbuf_full" => {
            "totals of threads that died were lost: fewer short-lived threads, or a shorter -i"
        }
        "hist_map_full" => "per-process histograms were full: fewer processes, or drop -P/-L",
        "counter_read_failed" => "per-slice counters failed: see `tracer check`",
        "task_storage_failed" => {
            "the kernel refused task storage (out of memory, or busy in a nested program): those slices or waits are not counted"
        }
        "switch_out_unseen" => {
            "the kernel switched tasks out without reporting it (their slices are not counted)"
        }
        "recursion_misses" => "the kernel skipped program runs",
        "threads_unread" => {
            "a live thread was missing from four reads of the kernel's entries: its totals are those of an earlier read, or missing"
        }
        _ => return None,
    })
}

/// Why a counter that is no loss (see [`drop_advice`]) lost nothing.
pub fn drop_note(name: &str) -> &'static str {
    match name {
        "wakeup_kept_aside" => {
            "wakeups whose task storage the kernel's allocator could not make in an interrupt, timed from a map aside, nothing lost"
        }
        _ => "placed by the scheduler's own runtime, nothing lost",
    }
}

impl Serialize for Drops {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.named())
    }
}
