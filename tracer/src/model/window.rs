//! The window's edges in a read of the kernel's entries. The kernel settles a thread's
//! off-CPU period when the thread next leaves a CPU; a read adds what is still open, so
//! that each thread's on-CPU plus off-CPU time is its time inside the window: a thread
//! asleep at the close, or for the whole window, shows that sleep.
use std::collections::{BTreeMap, HashMap};

use tracer_common::ThreadStats;

use crate::model::snapshot::{ThreadKey, ThreadRecord};

/// Adds the off-CPU periods still open at `end` (the read, or the window's close).
/// `on_cpu`: the threads on a CPU now, with the start of their slice. A thread off-CPU
/// counts up to `end`; one on a CPU up to its switch-in, where the read's running part
/// takes over: each thread's on-CPU plus off-CPU is its time in the window at every
/// read, so no interval holds more than its length. (The kernel settles that period
/// when the slice ends, less what the scheduler credits to the slice: a later read that
/// shows less off-CPU takes the difference off its on-CPU, see `Snapshot::raise_to`.
/// Left to the kernel, a wait before a running slice went to the next interval: a
/// preempted busy thread read 4-5 ms above a 100 ms interval, 2026-12-06.)
pub fn add_open_off_periods(
    threads: &mut BTreeMap<ThreadKey, ThreadRecord>,
    on_cpu: &HashMap<u32, u64>,
    end: u64,
) {
    for r in threads.values_mut() {
        if r.exited || r.folded > 0 || r.stats.last_off_ns == 0 {
            continue;
        }
        let last = r.stats.last_off_ns;
        let upto = match on_cpu.get(&r.tid) {
            Some(&begun) => begun.min(end),
            None => end,
        };
        if upto > last {
            r.stats.add_off_cpu(upto - last);
        }
    }
}

/// Each thread's latest switch-in among the CPUs' records, `(tid, slice start)` with 0
/// for no thread. A thread runs on one CPU at a time, so where two records name it
/// the earlier is stale: a switch-out the kernel did not report (6.18 reports none
/// whose `prev` is one of PID 1's tokio threads). Only the latest may be its running
/// slice; counting the other too would put the time since its switch-in on-CPU and
/// off-CPU at once (a rule from reading torture seed 10's failure in CI, 2026-12-06).
pub fn latest_switch_ins(records: impl IntoIterator<Item = (u32, u64)>) -> HashMap<u32, u64> {
    let mut latest: HashMap<u32, u64> = HashMap::new();
    for (tid, begun) in records {
        if tid == 0 || begun <= 1 {
            continue;
        }
        let e = latest.entry(tid).or_insert(begun);
        *e = (*e).max(begun);
    }
    latest
}

/// A slice that began at `begun` and ended during the read (its CPU switched between
/// the two reads of the CPU states), counted up to `upto` from the CPU's record because
/// the thread's entry, read before its switch-out, lacks it. The entry's open off-CPU
/// period ended at `begun`: it is added now, and the next one is taken to start at
/// `upto`, so [`add_open_off_periods`] does not count the slice as off-CPU too (on-CPU
/// plus off-CPU stays the thread's time in the window; torture seed 10 once read a
/// 2.6 ms slice twice that way, 2026-12-05).
pub fn close_slice_ended_in_read(st: &mut ThreadStats, begun: u64, upto: u64) {
    if st.last_off_ns == 0 || st.last_off_ns >= begun {
        return;
    }
    st.add_off_cpu(begun - st.last_off_ns);
    st.last_off_ns = upto.max(begun);
}

/// Where the open off-CPU period of a thread found running with no entry in the read
/// starts. The read takes the entries before the CPUs' records, so a thread born in
/// between has its entry (from its first wakeup) in the kernel, not in the read. Born
/// after the opening (`born`, to a clock tick), it has waited `run_delay` since its
/// birth and not slept: its period starts there, never before the opening. Else it has
/// existed off-CPU since the opening. (Counting a newborn's from the opening put 222 ms
/// of off-CPU time on a 11 ms old process, which the next read's credit taking then
/// took off its on-CPU time: torture seed 991174, 13 ms lost, 2026-12-07.)
pub fn first_seen_off_start(
    open: u64,
    begun: u64,
    born: Option<u64>,
    run_delay: Option<u64>,
    tick: u64,
) -> u64 {
    match (born, run_delay) {
        (Some(b), Some(d)) if b.saturating_add(tick) > open => {
            begun.saturating_sub(d).clamp(open, begun.max(open))
        }
        _ => open,
    }
}

/// A thread of the traced set that the programs never saw run in the window: off-CPU
/// (asleep) from the opening to `end`.
pub fn never_ran(tid: u32, tgid: u32, comm: [u8; 16], open: u64, end: u64) -> ThreadRecord {
    let mut stats = ThreadStats::zeroed();
    stats.tgid = tgid;
    stats.comm = comm;
    stats.off_state = tracer_common::OFF_BLOCKED;
    stats.add_off_cpu(end.saturating_sub(open));
    ThreadRecord {
        tid,
        stats,
        exited: false,
        folded: 0,
        became: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracer_common::OFF_PREEMPTED;

    fn rec(tid: u32, last_off: u64, state: u32) -> ThreadRecord {
        let mut stats = ThreadStats::zeroed();
        stats.last_off_ns = last_off;
        stats.off_state = state;
        stats.off_cpu_ns = 5;
        stats.blocked_ns = 5;
        ThreadRecord {
            tid,
            stats,
            exited: false,
            folded: 0,
            became: 0,
        }
    }

    #[test]
    fn open_periods_count_up_to_the_read_or_the_slice() {
        let mut t = BTreeMap::new();
        t.insert((1, 0), rec(1, 100, tracer_common::OFF_BLOCKED));
        t.insert((2, 0), rec(2, 100, OFF_PREEMPTED));
        t.insert((3, 0), rec(3, 100, tracer_common::OFF_BLOCKED));
        let mut dead = rec(4, 100, tracer_common::OFF_BLOCKED);
        dead.exited = true;
        t.insert((4, 0), dead);
        let on_cpu = HashMap::from([(3, 150)]);
        add_open_off_periods(&mut t, &on_cpu, 200);
        assert_eq!(t[&(1, 0)].stats.off_cpu_ns, 105);
        assert_eq!(t[&(1, 0)].stats.blocked_ns, 105);
        assert_eq!(t[&(2, 0)].stats.preempted_ns, 100);
        assert_eq!(t[&(2, 0)].stats.off_cpu_ns, 105);
        // On a CPU: up to its switch-in (150), where its running part begins.
        assert_eq!(t[&(3, 0)].stats.off_cpu_ns, 55);
        // Dead: its record has everything.
        assert_eq!(t[&(4, 0)].stats.off_cpu_ns, 5);
    }

    #[test]
    fn a_thread_named_by_two_cpus_runs_where_it_switched_in_last() {
        let latest = latest_switch_ins([(7, 500), (0, 900), (7, 300), (8, 1), (9, 40)]);
        assert_eq!(latest, HashMap::from([(7, 500), (9, 40)]));
    }

    #[test]
    fn a_period_that_ended_after_the_read_is_not_counted_twice() {
        let mut t = BTreeMap::new();
        t.insert((1, 0), rec(1, 300, tracer_common::OFF_BLOCKED));
        add_open_off_periods(&mut t, &HashMap::new(), 200);
        assert_eq!(t[&(1, 0)].stats.off_cpu_ns, 5);
    }

    /// A slice that ended during the read is on-CPU once: its thread's time in the
    /// window is on-CPU plus off-CPU, whether the window is open or closed.
    #[test]
    fn a_slice_that_ended_in_the_read_is_not_off_cpu_too() {
        let mut t = BTreeMap::new();
        let mut r = rec(1, 100, tracer_common::OFF_BLOCKED);
        r.stats.off_cpu_ns = 0;
        r.stats.blocked_ns = 0;
        // Off since 100, ran from 150, switched out during the read that began at 180.
        r.stats.on_cpu_ns += 180 - 150;
        close_slice_ended_in_read(&mut r.stats, 150, 180);
        t.insert((1, 0), r);
        add_open_off_periods(&mut t, &HashMap::new(), 200);
        let st = &t[&(1, 0)].stats;
        assert_eq!(st.on_cpu_ns + st.off_cpu_ns, 200 - 100);
        assert_eq!(st.off_cpu_ns, 50 + 20);
        // An entry that already has the slice (it left before the entry was read) and
        // one with no open period are left alone.
        let mut st = rec(1, 160, tracer_common::OFF_BLOCKED).stats;
        close_slice_ended_in_read(&mut st, 150, 180);
        assert_eq!((st.off_cpu_ns, st.last_off_ns), (5, 160));
        let mut st = rec(1, 0, tracer_common::OFF_BLOCKED).stats;
        close_slice_ended_in_read(&mut st, 150, 180);
        assert_eq!((st.off_cpu_ns, st.last_off_ns), (5, 0));
    }

    #[test]
    fn a_newborn_found_running_waited_since_its_birth_only() {
        // Born at 1,000 (the opening at 500), waited 30, running since 1,050.
        assert_eq!(
            first_seen_off_start(500, 1_050, Some(1_000), Some(30), 10),
            1_020
        );
        // Born within a tick before the opening: never before the opening.
        assert_eq!(
            first_seen_off_start(500, 1_050, Some(495), Some(900), 10),
            500
        );
        // Born long before: asleep since the opening, whatever its waits.
        assert_eq!(
            first_seen_off_start(500, 1_050, Some(100), Some(30), 10),
            500
        );
        // Unknown birth or waits: the opening.
        assert_eq!(first_seen_off_start(500, 1_050, None, Some(30), 10), 500);
        assert_eq!(first_seen_off_start(500, 1_050, Some(1_000), None, 10), 500);
    }

    #[test]
    fn a_thread_that_never_ran_was_off_cpu_all_window() {
        let r = never_ran(7, 6, [b'a'; 16], 1_000, 3_000);
        assert_eq!(r.stats.off_cpu_ns, 2_000);
        assert_eq!(r.stats.blocked_ns, 2_000);
        assert_eq!(r.stats.on_cpu_ns, 0);
        assert_eq!(r.stats.tgid, 6);
    }
}
