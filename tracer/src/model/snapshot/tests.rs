//! The arithmetic between reads on made-up snapshots: skipped threads, folding the
//! exited, an interval across a fold, a read never below the one before, the
//! iterator's records.
use super::*;

#[test]
fn a_read_skipped_the_live_threads_it_lacks_without_a_death_record() {
    let st = |serial: u64| {
        let mut s = ThreadStats::zeroed();
        s.serial = serial;
        s
    };
    let last: std::collections::HashMap<u64, u32> =
        [(1, 10), (2, 11), (3, 12), (4, 14)].into_iter().collect();
    // 1 and 2 live, 3 died (its record), 4 nowhere: one skipped.
    let live = vec![((10, 0), st(1)), ((11, 0), st(2)), ((13, 0), st(9))];
    let mut exited = BTreeMap::new();
    exited.insert(
        (12, 0),
        ThreadRecord {
            tid: 12,
            stats: st(3),
            exited: true,
            folded: 0,
            became: 0,
        },
    );
    assert_eq!(skipped(&last, &live, &exited), [14]);
    assert_eq!(skipped(&last, &live[..1], &exited), [11, 14]);
    assert!(skipped(&Default::default(), &[], &exited).is_empty());
}

fn record(tid: u32, on_cpu_ns: u64) -> Vec<u8> {
    let mut stats = ThreadStats::zeroed();
    stats.on_cpu_ns = on_cpu_ns;
    let r = ExitRecord {
        tid,
        became: 0,
        stats,
    };
    // SAFETY: plain data, viewed as its bytes.
    unsafe {
        std::slice::from_raw_parts(
            &r as *const ExitRecord as *const u8,
            std::mem::size_of::<ExitRecord>(),
        )
    }
    .to_vec()
}

fn exited(tid: u32, tgid: u32, on_cpu_ns: u64) -> ThreadRecord {
    let mut stats = ThreadStats::zeroed();
    stats.tgid = tgid;
    stats.on_cpu_ns = on_cpu_ns;
    stats.slices = 1;
    ThreadRecord {
        tid,
        stats,
        exited: true,
        folded: 0,
        became: 0,
    }
}

fn snapshot(threads: BTreeMap<ThreadKey, ThreadRecord>) -> Snapshot {
    Snapshot {
        at_ns: 0,
        threads,
        hist: HistSet::new(),
        scoped: BTreeMap::new(),
        drops: [0; drop::COUNT as usize],
        live_entries: 0,
        cpu_busy_ns: Vec::new(),
        recursion_misses: 0,
        threads_unread: 0,
    }
}

#[test]
fn folding_keeps_the_busiest_and_sums_the_rest_per_process() {
    let mut m = BTreeMap::new();
    for tid in 1..=10u32 {
        m.insert((tid, 0), exited(tid, 100 + tid % 2, tid as u64 * 10));
    }
    fold_exited(&mut m, 4);
    let singles: Vec<u32> = m
        .values()
        .filter(|r| r.folded == 0)
        .map(|r| r.tid)
        .collect();
    assert_eq!(singles, vec![7, 8, 9, 10], "the four busiest stay");
    let odd = &m[&(101, FOLDED_GEN)];
    let even = &m[&(100, FOLDED_GEN)];
    assert_eq!((odd.folded, odd.stats.on_cpu_ns), (3, 10 + 30 + 50));
    assert_eq!((even.folded, even.stats.on_cpu_ns), (3, 20 + 40 + 60));
    assert_eq!(odd.stats.slices, 3);
    assert_eq!(snapshot(m.clone()).thread_count(), 10);
    assert_eq!(
        snapshot(m).on_cpu_total_ns(),
        (1..=10).map(|t| t * 10).sum::<u64>()
    );
}

#[test]
fn an_interval_does_not_count_a_fold_as_new_work() {
    let mut m = BTreeMap::new();
    for tid in 1..=6u32 {
        m.insert((tid, 0), exited(tid, 100, 10));
    }
    let earlier = snapshot(m.clone());
    // One more thread exits, then the oldest fold.
    m.insert((7, 0), exited(7, 100, 25));
    fold_exited(&mut m, 2);
    let d = snapshot(m).delta(&earlier);
    assert_eq!(d.on_cpu_total_ns(), 25, "only thread 7 is new: {d:?}");
}

#[test]
fn a_later_read_never_shows_less_than_an_earlier_one() {
    let mut early = BTreeMap::new();
    let mut r = exited(7, 100, 100);
    r.exited = false;
    r.stats.serial = 42;
    early.insert((7, 0), r.clone());
    let earlier = snapshot(early);
    // The running slice counted before was never confirmed by the kernel.
    let mut later = BTreeMap::new();
    r.stats.on_cpu_ns = 80;
    later.insert((7, 0), r);
    let mut now = snapshot(later);
    now.raise_to(&earlier, HistScope::All);
    assert_eq!(now.threads[&(7, 0)].stats.on_cpu_ns, 100);
    assert_eq!(now.delta(&earlier).on_cpu_total_ns(), 0);
    assert_eq!(now.hist.on_cpu.sum_ns, 100, "sums follow the threads");
}

/// One read counted a waiting-then-running thread's off-CPU period up to its running
/// slice's switch-in; the kernel, settling the slice, gave 3 ns of that period to the
/// slice as the scheduler's credit. The later read keeps the off-CPU time shown and
/// takes the credit off its on-CPU time: on + off is the same time in the window.
#[test]
fn a_credit_the_kernel_gave_a_slice_after_a_read_is_not_counted_twice() {
    // The thread as the earlier read showed it, and as a later one reads it.
    let at = |on: u64, off: u64| {
        let mut r = exited(7, 100, on);
        r.exited = false;
        r.stats.serial = 42;
        r.stats.off_cpu_ns = off;
        r.stats.blocked_ns = off;
        snapshot(BTreeMap::from([((7, 0), r)]))
    };
    let earlier = at(50, 40);
    let mut now = at(63, 37);
    now.raise_to(&earlier, HistScope::All);
    let st = &now.threads[&(7, 0)].stats;
    assert_eq!((st.on_cpu_ns, st.off_cpu_ns), (60, 40));
    // Never below the earlier read's.
    let mut now = at(51, 20);
    now.raise_to(&earlier, HistScope::All);
    assert_eq!(now.threads[&(7, 0)].stats.on_cpu_ns, 50);
    // No more than a credit can be: 3 ms less off-CPU takes 1 ms of on-CPU.
    let ms = 1_000_000;
    let earlier = at(50 * ms, 40 * ms);
    let mut now = at(60 * ms, 37 * ms);
    now.raise_to(&earlier, HistScope::All);
    let st = &now.threads[&(7, 0)].stats;
    assert_eq!((st.on_cpu_ns, st.off_cpu_ns), (59 * ms, 40 * ms));
}

/// A PID 1 thread on 6.18 (no switch of it out is reported): one read counted its
/// running slice and the wait before it; the next found it off-CPU since the opening.
#[test]
fn an_unconfirmed_slice_kept_is_not_off_cpu_too_and_its_wait_stays_in_the_histogram() {
    let mut r = exited(7, 100, 0);
    r.exited = false;
    r.stats.serial = 42;
    r.stats.on_cpu_ns = 3;
    r.stats.runq_waits = 1;
    r.stats.runq_wait_ns = 2_000;
    let mut earlier = snapshot([((7, 0), r.clone())].into_iter().collect());
    earlier
        .hist
        .runq
        .add_bucket(tracer_common::hist::bucket_index(2_000), 1);
    // Later: no slice, no wait, blocked from the opening (10 ns ago) to the read.
    r.stats.on_cpu_ns = 0;
    r.stats.runq_waits = 0;
    r.stats.runq_wait_ns = 0;
    r.stats.off_cpu_ns = 10;
    r.stats.blocked_ns = 10;
    let mut other = exited(8, 100, 0);
    other.exited = false;
    other.stats.runq_waits = 4;
    let mut now = snapshot([((7, 0), r), ((8, 0), other)].into_iter().collect());
    now.hist
        .runq
        .add_bucket(tracer_common::hist::bucket_index(50_000), 4);
    now.raise_to(&earlier, HistScope::Process);
    let st = &now.threads[&(7, 0)].stats;
    assert_eq!((st.on_cpu_ns, st.off_cpu_ns, st.blocked_ns), (3, 7, 7));
    assert_eq!(st.runq_waits, 1);
    let waits: u64 = now.threads.values().map(|r| r.stats.runq_waits).sum();
    assert_eq!(now.hist.runq.count(), waits, "{:?}", now.hist.runq);
    assert_eq!(now.scoped[&100].runq.count(), 1);
}

/// One read took a thread's open off-CPU period for preempted (40 ns of it); the next
/// settled that period as blocked. The off-CPU total is the later read's, not the sum of
/// each part's larger figure (torture seed 420210, system-wide: 34.8 ms above the window).
#[test]
fn a_period_settled_as_another_state_is_counted_once() {
    let mut r = exited(7, 100, 0);
    r.exited = false;
    r.stats.serial = 42;
    r.stats.off_cpu_ns = 100;
    r.stats.blocked_ns = 60;
    r.stats.preempted_ns = 40;
    let earlier = snapshot([((7, 0), r.clone())].into_iter().collect());
    r.stats.off_cpu_ns = 150;
    r.stats.blocked_ns = 150;
    r.stats.preempted_ns = 0;
    let mut now = snapshot([((7, 0), r.clone())].into_iter().collect());
    now.raise_to(&earlier, HistScope::All);
    let st = &now.threads[&(7, 0)].stats;
    assert_eq!(
        (st.off_cpu_ns, st.blocked_ns, st.preempted_ns),
        (150, 110, 40)
    );
    let d = now.delta(&earlier);
    let st = &d.threads[&(7, 0)].stats;
    assert_eq!((st.off_cpu_ns, st.blocked_ns, st.preempted_ns), (50, 50, 0));
    // The other way round: an open blocked period settled shorter, then a preemption.
    r.stats.off_cpu_ns = 100;
    r.stats.blocked_ns = 100;
    r.stats.preempted_ns = 0;
    let earlier = snapshot([((7, 0), r.clone())].into_iter().collect());
    r.stats.off_cpu_ns = 110;
    r.stats.blocked_ns = 90;
    r.stats.preempted_ns = 20;
    let mut now = snapshot([((7, 0), r)].into_iter().collect());
    now.raise_to(&earlier, HistScope::All);
    let st = &now.threads[&(7, 0)].stats;
    assert_eq!(
        (st.off_cpu_ns, st.blocked_ns, st.preempted_ns),
        (110, 100, 10)
    );
}

#[test]
fn a_first_slice_read_before_its_entry_is_raised_by_key() {
    // The earlier read estimated a first slice still running (no entry, serial 0); by
    // this read the thread has its entry and the kernel confirmed less of that slice.
    let mut r = exited(7, 100, 100);
    r.exited = false;
    let earlier = snapshot([((7, 0), r.clone())].into_iter().collect());
    r.stats.serial = 42;
    r.stats.on_cpu_ns = 60;
    let mut now = snapshot([((7, 0), r.clone())].into_iter().collect());
    now.raise_to(&earlier, HistScope::All);
    assert_eq!(now.threads[&(7, 0)].stats.on_cpu_ns, 100);
    assert_eq!(now.hist.on_cpu.sum_ns, 100);
    // Another thread's row under a reused key (a different serial) is not raised.
    let mut other = exited(7, 100, 100);
    other.exited = false;
    other.stats.serial = 41;
    let earlier = snapshot([((7, 0), other)].into_iter().collect());
    let mut now = snapshot([((7, 0), r)].into_iter().collect());
    now.raise_to(&earlier, HistScope::All);
    assert_eq!(now.threads[&(7, 0)].stats.on_cpu_ns, 60);
}

#[test]
fn iterator_records_are_split_and_a_torn_tail_dropped() {
    let mut bytes = record(7, 100);
    bytes.extend(record(9, 250));
    bytes.extend(&record(11, 1)[..40]);
    let got = parse_records(&bytes);
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0, got[0].1.on_cpu_ns), (7, 100));
    assert_eq!((got[1].0, got[1].1.on_cpu_ns), (9, 250));
    assert!(parse_records(&[]).is_empty());
}
