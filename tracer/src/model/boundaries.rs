//! Where a trace puts a CPU's switches: at the scheduler's boundary between two slices,
//! so the slices in the trace are the runtimes the summary (and schedstat) count.
//!
//! The scheduler charges a slice from the run-queue clock of the `__schedule()` that
//! began it to that of the one that ended it. After a wakeup preemption the kernel skips
//! the clock update of the next `__schedule()` (`wakeup_preempt()` ->
//! `rq_clock_skip_update()`; an idle CPU woken from another CPU too): the boundary is
//! then the clock of the wakeup's enqueue, earlier than the switch's tracepoint, and the
//! time between is charged to the woken task, which the scheduler sees as running from
//! its wakeup (schedstat's `run_delay` grows by nothing). Each switch event carries the
//! runtime of the slice it ends, so a boundary is the next one less that runtime.
//!
//! That start is taken only where the clock was skipped, which the events do not say
//! outright; it is taken where the start falls in the first half of the time from the
//! next task's waking to its switch-in (closer to the waking than to the switch: a
//! wakeup preemption or an idle CPU's wakeup; measured here, within 0.25 us of the
//! waking or before it, where an unskipped wait to the tracepoint was 0.5 us and more),
//! or [`SKIP_MIN`] or more before the switch (a skip from another wakeup on that CPU,
//! 2-12 us here). Elsewhere the runtime and the wall time between two switches differ by
//! the jitter of where each timestamp is taken (within 0.1 us either way for 96 % of
//! them here), and taking the runtime's start there would carry the smallest such delay
//! of a whole chain back to every boundary of it: the trace's waits came out 11 %
//! shorter than the summary's for 1 us waits that way.

/// A runtime that starts this much or more before its switch's timestamp is a skipped
/// clock update, not jitter (see the module's comment): 0.3 % of the unskipped switches
/// measured here were that far off.
pub const SKIP_MIN: u64 = 1_000;

/// One switch of a CPU, in order, as the placement sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// Its timestamp (the accounting's, at the tracepoint).
    pub ts: u64,
    /// The scheduler's runtime of the slice this switch ends.
    pub runtime: Option<u32>,
    /// The switch before it on this CPU is in the stream: `runtime` is that of the slice
    /// between the two.
    pub chained: bool,
    /// Put back or put in front by the kernel (`SWITCH_REPAIRED`, `SWITCH_START`), or
    /// written at the window's close: its time is kept as it is.
    pub fixed: bool,
    /// The waking of the task switched in, since it last left a CPU (its timestamp).
    pub woken: Option<u64>,
}

/// The boundaries of `points` (one CPU's switches, in order). `before`: the timestamp of
/// the switch written before `points[0]` on this CPU, if any. The last point stays at
/// its timestamp (its successor is not known yet).
///
/// A boundary moves to the start of the runtime of the slice after it when that start
/// is in the first half of the next task's wait or [`SKIP_MIN`] before the switch (see
/// the module's comment), and never
/// later than its own timestamp. Not where the next switch is not chained (an event lost
/// or not sent: an untraced slice in between), where the runtime is unknown (the idle
/// task's), or where it would put the boundary before the previous switch's timestamp
/// (a runtime the kernel does not keep per slice, e.g. a real-time task's
/// `prev_sum_exec_runtime`).
pub fn place(points: &[Point], before: Option<u64>) -> Vec<u64> {
    let mut at: Vec<u64> = points.iter().map(|p| p.ts).collect();
    for k in (0..points.len().saturating_sub(1)).rev() {
        let (p, next) = (points[k], points[k + 1]);
        if p.fixed || !next.chained {
            continue;
        }
        let Some(r) = next.runtime else {
            continue;
        };
        let Some(start) = at[k + 1].checked_sub(r as u64) else {
            continue;
        };
        let floor = if k > 0 {
            Some(points[k - 1].ts)
        } else {
            before
        };
        if floor.is_none_or(|f| start < f) || start >= p.ts {
            continue;
        }
        // Halfway from the waking to the switch.
        let near_waking = p.woken.is_some_and(|w| {
            let w = w.min(p.ts);
            start < w + (p.ts - w) / 2
        });
        if near_waking || p.ts - start >= SKIP_MIN {
            at[k] = start;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(ts: u64, runtime: Option<u32>, woken: Option<u64>) -> Point {
        Point {
            ts,
            runtime,
            chained: true,
            fixed: false,
            woken,
        }
    }

    #[test]
    fn a_skipped_clock_update_moves_the_boundary_to_the_runtimes_start() {
        // Idle until 100; the task woken at 92 is charged from 90 (its enqueue), runs
        // until 200, then idle again.
        let p = [
            pt(50, Some(10), None),
            pt(100, None, Some(92)),
            pt(200, Some(110), None),
            pt(300, None, None),
        ];
        assert_eq!(place(&p, Some(0)), vec![50, 90, 200, 300]);
    }

    #[test]
    fn chains_of_skips_carry_back() {
        // Two tasks handing over on one CPU, each woken by the other, every clock update
        // skipped: charged 95..125, 125..155, 155..190; woken at 96, 126, 156.
        let p = [
            pt(100, None, Some(96)),
            pt(130, Some(30), Some(126)),
            pt(160, Some(30), Some(156)),
            pt(190, Some(35), None),
        ];
        assert_eq!(place(&p, Some(90)), vec![95, 125, 155, 190]);
    }

    #[test]
    fn jitter_and_steal_leave_the_boundary_at_its_timestamp() {
        // Woken at 100, switched in at 200: a runtime that starts 20 before the switch
        // is where the timestamps were taken, not a skipped clock.
        let p = [pt(200, None, Some(100)), pt(300, Some(120), None)];
        assert_eq!(place(&p, Some(0)), vec![200, 300]);
        // A runtime shorter than the wall time (steal).
        let p = [pt(200, None, Some(100)), pt(300, Some(50), None)];
        assert_eq!(place(&p, Some(0)), vec![200, 300]);
        // A task switched in without a waking (it was preempted), jitter again.
        let p = [pt(200, None, None), pt(300, Some(150), None)];
        assert_eq!(place(&p, Some(0)), vec![200, 300]);
    }

    #[test]
    fn a_skip_far_from_the_waking_is_taken_when_it_is_large() {
        // Woken at 10_000, switched in at 50_000, charged from 47_000 (another wakeup
        // on that CPU skipped the clock update); or preempted, no waking.
        let p = [
            pt(50_000, None, Some(10_000)),
            pt(60_000, Some(13_000), None),
        ];
        assert_eq!(place(&p, Some(0)), vec![47_000, 60_000]);
        let p = [pt(50_000, None, None), pt(60_000, Some(13_000), None)];
        assert_eq!(place(&p, Some(0)), vec![47_000, 60_000]);
        // 999 ns is jitter.
        let p = [
            pt(50_000, None, Some(10_000)),
            pt(60_000, Some(10_999), None),
        ];
        assert_eq!(place(&p, Some(0)), vec![50_000, 60_000]);
    }

    #[test]
    fn chains_break_where_the_runtime_cannot_be_this_slices() {
        let w = Some(60);
        // Not chained (a lost or unsent switch in between).
        let mut p = [pt(100, None, w), pt(200, Some(150), None)];
        p[1].chained = false;
        assert_eq!(place(&p, Some(0)), vec![100, 200]);
        // Unknown (the idle task's slice).
        let p = [pt(100, None, w), pt(200, None, None)];
        assert_eq!(place(&p, Some(0)), vec![100, 200]);
        // Before the previous switch (a real-time task's stale prev_sum_exec_runtime).
        let p = [
            pt(50, None, None),
            pt(100, None, w),
            pt(200, Some(180), None),
        ];
        assert_eq!(place(&p, None), vec![50, 100, 200]);
        // The first point with nothing written before it on this CPU: no floor.
        let p = [pt(100, None, w), pt(200, Some(150), None)];
        assert_eq!(place(&p, None), vec![100, 200]);
        // A point already placed (repaired, start, cut) stays.
        let mut p = [
            pt(50, None, None),
            pt(100, None, w),
            pt(200, Some(140), None),
        ];
        p[1].fixed = true;
        assert_eq!(place(&p, None), vec![50, 100, 200]);
    }
}
