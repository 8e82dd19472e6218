//! The switch-out's decisions tested on the host: a table row per probe mode, run-queue
//! source and window edge, and the rules for wakeups, waits and TID swaps.
use super::*;

const MS: u64 = 1_000_000;

fn seen(start: u64, now: u64) -> Facts {
    Facts {
        now,
        open: 100 * MS,
        start,
        running: UNKNOWN,
        ..Default::default()
    }
}

#[test]
fn a_wakeup_of_the_running_task_starts_no_wait() {
    // Woken from another task (or the idle task, 0): its wait starts.
    assert!(wakeup_starts_wait(139, 140));
    assert!(wakeup_starts_wait(139, 0));
    // Its own hrtimer in the interrupt it is running under: none starts.
    assert!(!wakeup_starts_wait(139, 139));
    // The arm64 sequence: preempted at 844 ms, back on at 856 ms, woken while
    // running at 860 ms. Stamping that wakeup loses the 12 ms wait; not stamping
    // keeps it.
    let (preempted, back_in, woken_running) = (844 * MS, 856 * MS, 860 * MS);
    assert_eq!(wait_from(woken_running, back_in), UNKNOWN);
    let runnable = if wakeup_starts_wait(139, 139) {
        woken_running
    } else {
        preempted
    };
    assert_eq!(wait_from(runnable, back_in), 12 * MS);
    // By `on_cpu`: the same task, on a CPU when woken, starts none; one off every
    // CPU (its switch-out done) starts one.
    assert!(!wakeup_starts_wait_on_cpu(1));
    assert!(wakeup_starts_wait_on_cpu(0));
}

/// One row per case the switch program meets: (what, facts, expected slice).
#[test]
fn slice_table() {
    let rows: &[(&str, Facts, Slice)] = &[
        (
            "tp-btf/raw-tp: by sum_exec_runtime, the scheduler charged exactly the wall time",
            Facts {
                sum: 50 * MS,
                last_sum: 40 * MS,
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 10 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "wakeup preemption: charged 1 ms from before the switch-in (credit)",
            Facts {
                sum: 51 * MS,
                last_sum: 40 * MS,
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 11 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: MS,
                gap: 0,
            },
        ),
        (
            "preempted by a wakeup: charged only to the wakeup (gap)",
            Facts {
                sum: 48 * MS,
                last_sum: 40 * MS,
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 8 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 2 * MS,
            },
        ),
        (
            "cut at the window's close by the clock",
            Facts {
                close: 205 * MS,
                sum: 51 * MS,
                last_sum: 40 * MS,
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 5 * MS,
                wall: 5 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "running at the attach, switched in 4 ms after the opening",
            Facts {
                at_open: true,
                start: 100 * MS,
                running: 6 * MS,
                ..seen(0, 110 * MS)
            },
            Slice {
                counted: true,
                len: 6 * MS,
                wall: UNKNOWN,
                begun: 104 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "running at the attach, runtime not known: from the opening",
            Facts {
                at_open: true,
                start: 100 * MS,
                ..seen(0, 110 * MS)
            },
            Slice {
                counted: true,
                len: 10 * MS,
                wall: UNKNOWN,
                begun: 100 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "running at the attach by this CPU's record, but it left a CPU since: from there",
            Facts {
                at_open: true,
                start: 100 * MS,
                last_off: 107 * MS,
                ..seen(0, 110 * MS)
            },
            Slice {
                counted: true,
                len: 3 * MS,
                wall: UNKNOWN,
                begun: 107 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "switch-in not seen, first slice of the thread: the scheduler's runtime",
            Facts {
                running: 3 * MS,
                ..seen(0, 210 * MS)
            },
            Slice {
                counted: true,
                len: 3 * MS,
                wall: UNKNOWN,
                begun: 207 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "first slice of a thread, 4 ms of the hypervisor's steal in it: its runtime",
            Facts {
                sum: 36 * MS + 1,
                last_sum: runtime_base(0, 30 * MS),
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 6 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 4 * MS,
            },
        ),
        (
            "a new thread's first slice: from its runtime of 0 (1 ns short)",
            Facts {
                sum: 3 * MS + 1,
                last_sum: runtime_base(0, 0),
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 3 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 7 * MS,
            },
        ),
        (
            "first slice, the runtime at the switch-in not read: the wall time",
            Facts {
                sum: 3 * MS,
                last_sum: runtime_base(0, UNKNOWN),
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 10 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "classic tracepoints without BTF: sched_stat_runtime deltas",
            Facts {
                pending_runtime: 7 * MS,
                ..seen(200 * MS, 210 * MS)
            },
            Slice {
                counted: true,
                len: 7 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 3 * MS,
            },
        ),
        (
            "no scheduler figure at all: the wall time",
            seen(200 * MS, 210 * MS),
            Slice {
                counted: true,
                len: 10 * MS,
                wall: 10 * MS,
                begun: 200 * MS,
                credit: 0,
                gap: 0,
            },
        ),
        (
            "nothing known: no slice",
            seen(0, 210 * MS),
            Slice {
                counted: false,
                len: 0,
                wall: UNKNOWN,
                begun: 0,
                credit: 0,
                gap: 0,
            },
        ),
    ];
    for (what, f, want) in rows {
        assert_eq!(slice(f), *want, "{what}");
        let s = slice(f);
        if s.wall != UNKNOWN {
            // On the CPU by the scheduler's account plus what it did not charge is
            // the wall time, less what it charged from before.
            assert_eq!(s.len + s.gap, s.wall + s.credit, "{what}");
        }
    }
}

#[test]
fn a_slice_base_is_the_last_switch_out_else_the_switch_in() {
    assert_eq!(runtime_base(40 * MS, 30 * MS), 40 * MS);
    assert_eq!(runtime_base(0, 30 * MS), 30 * MS + 1);
    assert_eq!(runtime_base(0, 0), 1);
    assert_eq!(runtime_base(0, UNKNOWN), UNKNOWN);
}

#[test]
fn edges_off_cpu_and_waits() {
    assert_eq!(edge(5, 1, 0), Edge::Inside);
    assert_eq!(edge(5, 1, 4), Edge::Outside);
    assert_eq!(edge(0, 1, 4), Edge::Outside);
    assert_eq!(edge(3, 1, 4), Edge::Inside);
    // The close as a switch sees it: 0 until it has passed.
    assert_eq!(passed_close(0, 10), 0);
    assert_eq!(passed_close(4, 10), 4);
    assert_eq!(passed_close(10, 10), 0);
    assert_eq!(passed_close(11, 10), 0);
    assert_eq!(passed_close(1 << 62, (1 << 62) + 1), 1 << 62);
    assert_eq!(passed_close((1 << 62) + 1, 1 << 62), 0);
    assert_eq!(off_cpu(0, 10, 0), 0);
    assert_eq!(off_cpu(4, 10, 0), 6);
    assert_eq!(off_cpu(4, 10, 2), 4);
    assert_eq!(off_cpu(4, 10, 9), 0);
    assert_eq!(off_cpu(12, 10, 0), 0);
    assert_eq!(wait_from(0, 10), UNKNOWN);
    assert_eq!(wait_from(4, 10), 6);
    assert_eq!(wait_from(10, 10), UNKNOWN);
    assert_eq!(wait_by_run_delay(30, 20), 10);
    assert_eq!(wait_by_run_delay(20, 20), UNKNOWN);
    assert_eq!(wait_by_run_delay(30, UNKNOWN), UNKNOWN);
    // A wakeup stamps a wait's start only where none is in the entry.
    assert!(wakeup_stamps(0), "after a blocked switch-out");
    assert!(!wakeup_stamps(1_000), "queued since a preemption at 1000");
    assert!(
        !wakeup_stamps(2_000),
        "running elsewhere since a wait from 2000"
    );
    // A thread born in the window: its first wait from the zero it was born with,
    // whether or not the switch-in that ended it was seen.
    assert_eq!(wait_by_run_delay(4_530, RUN_DELAY_AT_BIRTH), 4_530);
}

#[test]
fn an_untimed_wait_after_blocking_is_the_schedulers() {
    // (timed, left blocked, run_delay now, base) -> wait
    let rows: &[(u64, bool, u64, u64, u64, &str)] = &[
        (5_000, true, 9_000, 1_000, 5_000, "timed from its wakeup"),
        (UNKNOWN, true, 9_000, 1_000, 8_000, "its wakeup unseen"),
        (
            UNKNOWN,
            false,
            9_000,
            1_000,
            UNKNOWN,
            "preempted: its start is kept",
        ),
        (UNKNOWN, true, 9_000, UNKNOWN, UNKNOWN, "no base read"),
        (
            UNKNOWN,
            true,
            1_000,
            1_000,
            UNKNOWN,
            "run_delay did not grow",
        ),
        (
            UNKNOWN,
            true,
            4_530,
            RUN_DELAY_AT_BIRTH,
            4_530,
            "born in the window",
        ),
    ];
    for &(timed, blocked, rd, base, want, why) in rows {
        assert_eq!(unseen_wait(timed, blocked, rd, base), want, "{why}");
    }
}

#[test]
fn on_plus_off_is_the_time_between_two_switch_outs() {
    // A thread leaves at 100 ms (charged 2 ms less than its wall time), sleeps, is
    // switched in at 150 ms with 1 ms of credit, and leaves at 160 ms.
    let first = slice(&Facts {
        sum: 18 * MS,
        last_sum: 10 * MS,
        ..seen(90 * MS, 100 * MS)
    });
    let last_off = 100 * MS - first.gap;
    let second = slice(&Facts {
        sum: 29 * MS,
        last_sum: 18 * MS,
        ..seen(150 * MS, 160 * MS)
    });
    let off = off_cpu(last_off, second.begun, second.credit);
    assert_eq!(first.len + off + second.len, 160 * MS - 90 * MS);
}
/// One row per way a switch-out can disagree with its CPU's record: only a TID swap
/// of one task is taken for one; classic tracepoints (no task address) recognise the
/// two halves of an exec's swap by the process.
#[test]
fn a_tid_swap_is_one_task_under_two_tids() {
    // (cpu tid, cpu task, cpu tgid, prev tid, prev tgid, prev task, dead) -> swapped
    let rows = [
        ((10, 0xa, 0, 10, 10, 0xa, false), false), // the same thread
        ((11, 0xa, 0, 10, 10, 0xa, false), true),  // exec'ing thread, swapped mid-slice
        ((10, 0xb, 0, 11, 10, 0xb, true), true),   // old leader's final switch
        ((11, 0xa, 0, 12, 10, 0xc, false), false), // a switch not seen: another task
        ((11, 0xa, 10, 10, 10, 0xc, false), false), // the address decides, not the process
        ((0, 0, 0, 10, 10, 0xa, false), false),    // nothing switched in here
        // Classic tracepoints: the old leader dies under the exec'ing thread's TID on
        // the CPU that switched it in as the leader.
        ((10, 0, 0, 11, 10, 0, true), true),
        ((10, 0, 10, 11, 10, 0, false), false), // not its death: a switch not seen
        ((12, 0, 0, 11, 10, 0, true), false),   // the CPU ran another thread
        ((10, 0, 0, 10, 10, 0, true), false),   // the leader itself dies
        // The exec'ing thread (11 of process 10) leaves under the leader's TID, alive
        // (preempted before `sched_process_exec`; torture seed 188684).
        ((11, 0, 10, 10, 10, 0, false), true),
        ((11, 0, 0, 10, 10, 0, false), false), // its process not known
        ((11, 0, 12, 10, 10, 0, false), false), // a thread of another process ran here
        ((11, 0, 10, 13, 10, 0, false), false), // a non-main thread of the process
        ((11, 0, 10, 10, 10, 0, true), false), // the leader's own death
    ];
    for ((ct, ck, cg, pt, pg, pk, dead), want) in rows {
        assert_eq!(
            tid_swapped(ct, ck, cg, pt, pg, pk, dead),
            want,
            "cpu {ct}/{ck:#x} (tgid {cg}), prev {pt} (tgid {pg})/{pk:#x}, dead {dead}"
        );
    }
}

#[test]
fn the_open_off_period_at_the_close_counts_up_to_it() {
    // Asleep from 100, the close at 500, the next slice (the thread's death) at 530.
    assert_eq!(open_off_at_close(100, 530, 500), 400);
    // The window still open, or the slice inside it: the kernel settles it as usual.
    assert_eq!(open_off_at_close(100, 530, 0), 0);
    assert_eq!(open_off_at_close(100, 450, 500), 0);
    // No open period, or one that began after the close.
    assert_eq!(open_off_at_close(0, 530, 500), 0);
    assert_eq!(open_off_at_close(510, 530, 500), 0);
    assert_eq!(open_off_at_close(500, 530, 500), 0);
}

#[test]
fn a_slice_whose_switch_in_was_not_seen_began_its_runtime_ago() {
    assert_eq!(began(510, 530, Some(3)), 510);
    // Seed 1005108's death after the close: the slice ran 3 of the 30 since 500.
    assert_eq!(began(0, 530, Some(3)), 527);
    assert_eq!(open_off_at_close(100, began(0, 530, Some(3)), 500), 400);
    // Runtime unknown, or more than the clock says: unknown (0), nothing settled.
    assert_eq!(began(0, 530, None), 0);
    assert_eq!(began(0, 530, Some(600)), 0);
    assert_eq!(open_off_at_close(100, began(0, 530, None), 500), 0);
}

#[test]
fn runtime_deltas_give_way_to_the_clock_where_a_tick_may_be_missing() {
    for (why, pending, start, want) in [
        ("all deltas seen", 6 * MS, 200 * MS, 6 * MS),
        (
            "a tick maybe missing: the clock times it",
            RUNTIME_GAP | (6 * MS),
            200 * MS,
            0,
        ),
        (
            "maybe missing, switch-in unseen: the deltas there are",
            RUNTIME_GAP | (6 * MS),
            0,
            6 * MS,
        ),
        (
            "maybe missing, no deltas, switch-in unseen: nothing",
            RUNTIME_GAP,
            0,
            0,
        ),
        ("no deltas", 0, 200 * MS, 0),
    ] {
        assert_eq!(runtime_deltas(pending, start), want, "{why}");
    }
    // Where the deltas give way, the slice is the wall time.
    let f = Facts {
        pending_runtime: runtime_deltas(RUNTIME_GAP | (6 * MS), 200 * MS),
        ..seen(200 * MS, 210 * MS)
    };
    assert_eq!(slice(&f).len, 10 * MS);
}

#[test]
fn a_reaped_leaders_final_slice_is_its_runtime_since_its_last_switch_out() {
    // (why, now, start, close, sum, last_sum, want)
    for (why, now, start, close, sum, last_sum, want) in [
        (
            "runtime known",
            20 * MS,
            10 * MS,
            0,
            57 * MS,
            50 * MS,
            7 * MS,
        ),
        (
            "runtime unknown: the wall time",
            20 * MS,
            10 * MS,
            0,
            57 * MS,
            0,
            10 * MS,
        ),
        (
            "runtime not grown: the wall time",
            20 * MS,
            10 * MS,
            0,
            50 * MS,
            50 * MS,
            10 * MS,
        ),
        (
            "cut at the close: the clock, not the runtime",
            20 * MS,
            10 * MS,
            15 * MS,
            53 * MS,
            50 * MS,
            5 * MS,
        ),
        (
            "the close after it: not cut",
            20 * MS,
            10 * MS,
            25 * MS,
            59 * MS,
            50 * MS,
            9 * MS,
        ),
    ] {
        assert_eq!(
            reaped_slice(now, start, close, sum, last_sum),
            want,
            "{why}"
        );
    }
}
