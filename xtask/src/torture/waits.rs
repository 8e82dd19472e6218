//! Run-queue waits as the kernel's own tracepoints time them, from ftrace's events of a
//! scenario (the harness's instance, see `moves::Ledger`).
//!
//! `run_delay` can count time no tracepoint shows as waiting, and then the floor it sets
//! for the tracer's waits is above the truth:
//! - a new thread's wait from about its creation, before `sched_wakeup_new` (torture
//!   seed 1007234: run_delay 4.225 ms, ftrace's two waits 2.365 ms, the tracer's 2.363);
//! - a stop of the whole VM in a thread's first slice (seed 1005333: no event on either
//!   CPU for 1.1-1.5 ms, run_delay 1.569 ms, ftrace's waits 0.033 ms, the tracer's 0.030).
//!
//! These waits are timed as the tracer times them (README "How it works"): from the
//! wakeup, or the preempted switch-out, to the next switch-in; a wakeup of a thread that
//! runs or is already runnable starts nothing. The floor is the lesser of run_delay's
//! and these (`check`): never tighter than run_delay's, and lowered only by the kernel's
//! own record of the same waits, complete when ftrace's ring did not overrun.

use std::collections::BTreeMap;

use super::moves::Event;

/// Per TID, its waits as (start, end) in ns, in time order.
pub(super) type Waits = BTreeMap<u64, Vec<(u64, u64)>>;

#[derive(Clone, Copy)]
enum State {
    Running,
    Asleep,
    Runnable(u64),
}

/// The waits in events in time order. A thread first seen switching in has no wait (its
/// start is before the trace).
pub(super) fn waits(events: impl IntoIterator<Item = (u64, Event)>) -> Waits {
    let mut state: BTreeMap<u64, State> = BTreeMap::new();
    let mut out = Waits::new();
    for (ts, e) in events {
        match e {
            Event::Switch {
                prev,
                blocked,
                next,
            } => {
                let s = if blocked {
                    State::Asleep
                } else {
                    State::Runnable(ts)
                };
                state.insert(prev, s);
                if let Some(State::Runnable(from)) = state.insert(next, State::Running) {
                    if next != 0 {
                        out.entry(next).or_default().push((from, ts));
                    }
                }
            }
            Event::Wakeup(t) => match state.get(&t) {
                Some(State::Running | State::Runnable(_)) => {}
                Some(State::Asleep) | None => {
                    state.insert(t, State::Runnable(ts));
                }
            },
            Event::Waking(_) | Event::Migrate(_) => {}
        }
    }
    out
}

/// `tid`'s waits that ended in `(from, to]` (ns), and how many.
pub(super) fn waited(waits: &Waits, tid: u64, from: u64, to: u64) -> (u64, usize) {
    waits.get(&tid).map_or((0, 0), |v| {
        v.iter()
            .filter(|(_, e)| *e > from && *e <= to)
            .fold((0, 0), |(sum, n), (s, e)| (sum + (e - s), n + 1))
    })
}

#[cfg(test)]
mod tests {
    use super::super::moves::parse_line;
    use super::*;

    fn sw(prev: u64, blocked: bool, next: u64) -> Event {
        Event::Switch {
            prev,
            blocked,
            next,
        }
    }

    #[test]
    fn waits_run_from_the_wakeup_or_the_preemption_to_the_switch_in() {
        let w = waits([
            (10, sw(7, true, 8)),   // 7 sleeps
            (20, Event::Wakeup(7)), // its wait starts
            (25, Event::Wakeup(7)), // already runnable: nothing
            (30, sw(8, false, 7)),  // 8 preempted, 7 in: 7 waited 10
            (32, Event::Wakeup(7)), // a wakeup of the running thread: nothing
            (40, sw(7, true, 8)),   // 8 in: waited 10 from its preemption
            (50, Event::Wakeup(9)), // first seen at a wakeup (new or asleep before)
            (65, sw(8, true, 9)),
        ]);
        assert_eq!(w.get(&7), Some(&vec![(20, 30)]));
        assert_eq!(w.get(&8), Some(&vec![(30, 40)]));
        assert_eq!(w.get(&9), Some(&vec![(50, 65)]));
        assert_eq!(waited(&w, 7, 0, 100), (10, 1));
        assert_eq!(waited(&w, 7, 30, 100), (0, 0));
        assert_eq!(waited(&w, 42, 0, 100), (0, 0));
    }

    /// Torture seed 1007234: a new thread whose run_delay read 4.225 ms; the tracer's
    /// waits were 2.363 ms.
    const SEED_1007234: &str = "\
  tracer-torture-11340   [001] d..2. 77259.369098: sched_wakeup_new: comm=tracer-torture pid=11557 prio=120 target_cpu=000
  tracer-torture-11554   [000] d..2. 77259.370560: sched_switch: prev_comm=tracer-torture prev_pid=11554 prev_prio=120 prev_state=X ==> next_comm=tracer-torture next_pid=11557 next_prio=120
  tracer-torture-11557   [000] d..2. 77259.371169: sched_switch: prev_comm=tracer-torture prev_pid=11557 prev_prio=120 prev_state=R+ ==> next_comm=tracer-torture next_pid=11334 next_prio=120
     kworker/0:1-22693   [000] d..2. 77259.372072: sched_switch: prev_comm=kworker/0:1 prev_pid=22693 prev_prio=120 prev_state=I ==> next_comm=tracer-torture next_pid=11557 next_prio=120
  tracer-torture-11557   [000] d..2. 77259.372080: sched_switch: prev_comm=tracer-torture prev_pid=11557 prev_prio=120 prev_state=X ==> next_comm=tracer-torture next_pid=11485 next_prio=120
";

    #[test]
    fn a_new_threads_first_wait_starts_at_its_wakeup() {
        let w = waits(SEED_1007234.lines().filter_map(parse_line));
        assert_eq!(waited(&w, 11557, 0, u64::MAX), (2_365_000, 2));
    }

    #[test]
    fn a_thread_first_seen_switching_in_has_no_wait() {
        let w = waits([(5, sw(0, false, 3)), (9, sw(3, true, 0))]);
        assert!(w.is_empty());
    }

    #[test]
    fn the_switch_names_both_threads_whatever_the_comms() {
        let l = "  a [001] b ==>-12   [001] d..2. 5.000001: sched_switch: prev_comm=x next_pid=1 prev_pid=12 prev_prio=120 prev_state=R+ ==> next_comm= next_pid=3 next_pid=4 next_prio=120";
        assert_eq!(parse_line(l), Some((5_000_001_000, sw(12, false, 4))));
    }
}
