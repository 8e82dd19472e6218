//! The accounting decisions of a switch-out, as pure functions of plain numbers: the
//! eBPF side reads the facts (clock, window, per-CPU state, the task's scheduler fields,
//! its entry) and writes the results; what the facts mean is decided here, once, and
//! tested on the host (one table row per probe mode, run-queue source and window edge).
//!
//! `u64::MAX` stands for "not known" rather than `Option`: on the BPF side an `Option`'s
//! payload is undefined on `None`, and LLVM may read it anyway, which the verifier
//! rejects (an uninitialized register).

/// Not known.
pub const UNKNOWN: u64 = u64::MAX;

/// What is known when a traced thread leaves a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// This switch-out, CLOCK_MONOTONIC ns.
    pub now: u64,
    /// The window's opening and close (0: still open).
    pub open: u64,
    pub close: u64,
    /// Its switch-in as seen on this CPU; 0 when no program saw it (the switch before
    /// was not reported), `open` when it ran since before the programs attached.
    pub start: u64,
    /// The first switch on this CPU since the attach: it ran since before it.
    pub at_open: bool,
    /// The scheduler's runtime of this slice (`sum_exec_runtime -
    /// prev_sum_exec_runtime`), or [`UNKNOWN`].
    pub running: u64,
    /// `sum_exec_runtime` now and at the thread's last switch-out (0: unknown).
    pub sum: u64,
    pub last_sum: u64,
    /// Without BTF: `sched_stat_runtime` deltas since the last switch-out.
    pub pending_runtime: u64,
}

/// The slice, as [`slice`] decides it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// Whether there is a slice to count, and its length (ns on CPU).
    pub counted: bool,
    pub len: u64,
    /// Wall time from the switch-in to this switch-out (cut at the close), or
    /// [`UNKNOWN`] when the switch-in was not seen.
    pub wall: u64,
    /// When the slice began by the scheduler's account: the switch-in, or `len` before
    /// now when the switch-in was not seen (0: not known).
    pub begun: u64,
    /// The runtime the scheduler charged to the slice from before its switch-in (its
    /// clock update is skipped after a wakeup preemption): taken off the off-CPU time
    /// that ended at the switch-in, which by that account was on-CPU time.
    pub credit: u64,
    /// The other side of that credit: wall time after the switch-in that the
    /// scheduler did not charge (the thread that preempts it is charged from the
    /// wakeup; interrupts and steal are not run time). The thread's off-CPU time
    /// starts that much before this switch-out.
    pub gap: u64,
}

/// A slice's length. By the scheduler's runtime where its base is known (schedstat
/// agrees with it); cut by the clock at the window's close, since the scheduler's figure
/// runs past it; a slice running at the attach counts from the later of the opening and
/// its switch-in; otherwise the scheduler's runtime of the slice, then the
/// `sched_stat_runtime` deltas, then the wall time.
#[inline(always)]
pub fn slice(f: &Facts) -> Slice {
    let cut = f.close != 0 && f.now > f.close;
    let end = if cut { f.close } else { f.now };
    let (counted, len) = if cut {
        (end > f.start, end.saturating_sub(f.start))
    } else if f.at_open {
        let since_open = f.now.saturating_sub(f.open);
        (
            true,
            if f.running < since_open {
                f.running
            } else {
                since_open
            },
        )
    } else if f.sum != 0 && f.last_sum != 0 && f.sum >= f.last_sum {
        (true, f.sum - f.last_sum)
    } else if f.start == 0 && f.running != UNKNOWN {
        (true, f.running)
    } else if f.pending_runtime != 0 {
        (true, f.pending_runtime)
    } else if f.start != 0 && f.now > f.start {
        (true, f.now - f.start)
    } else {
        (false, 0)
    };
    let wall = if f.at_open || f.start == 0 {
        UNKNOWN
    } else {
        end.saturating_sub(f.start)
    };
    let begun = if wall != UNKNOWN {
        f.start
    } else if counted {
        f.now.saturating_sub(len)
    } else {
        0
    };
    let (credit, gap) = if wall == UNKNOWN || !counted {
        (0, 0)
    } else {
        (len.saturating_sub(wall), wall.saturating_sub(len))
    };
    Slice {
        counted,
        len,
        wall,
        begun,
        credit,
        gap,
    }
}

/// The base of a slice's runtime (`Facts::last_sum`): the thread's `sum_exec_runtime`
/// at its last switch-out, or for its first slice the value read at its switch-in
/// (`sum_in`, [`UNKNOWN`] when not read). 0 means no base, so a new thread's 0 becomes 1
/// (its slice 1 ns short); an unknown stays unknown and no slice is taken from it.
/// Not `running`: `prev_sum_exec_runtime` is the fair class's alone (an RT task's is
/// its last fair pick's) and `set_next_task_fair` resets it without a switch. Not the
/// clock: it counts the hypervisor's steal, which the runtime leaves out.
#[inline(always)]
pub fn runtime_base(last_sum: u64, sum_in: u64) -> u64 {
    if last_sum != 0 {
        last_sum
    } else {
        sum_in | 1
    }
}

/// Where a slice stands against the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// Inside it (or cut at its close): counted.
    Inside,
    /// Begun after its close, or before its opening with the close set: nothing of it
    /// is in the window.
    Outside,
}

#[inline(always)]
pub fn edge(start: u64, open: u64, close: u64) -> Edge {
    if close != 0 && (start >= close || start < open) {
        Edge::Outside
    } else {
        Edge::Inside
    }
}

/// The off-CPU time that ended when the slice began, `last_off` its start (0: none),
/// less the scheduler's credit to the slice.
#[inline(always)]
pub fn off_cpu(last_off: u64, begun: u64, credit: u64) -> u64 {
    if last_off != 0 && begun > last_off {
        (begun - last_off).saturating_sub(credit)
    } else {
        0
    }
}

/// A run-queue wait from its start (`runnable`, 0: not waiting) to `ran` (the slice's
/// start), or [`UNKNOWN`].
#[inline(always)]
pub fn wait_from(runnable: u64, ran: u64) -> u64 {
    if runnable != 0 && ran > runnable {
        ran - runnable
    } else {
        UNKNOWN
    }
}

/// Whether a `sched_wakeup` of `woken` starts a run-queue wait. Not when it is the task
/// running on the waking CPU (`current`): `try_to_wake_up()` then only sets it back to
/// TASK_RUNNING (its `p == current` path) and queues nothing, so no wait starts and the
/// scheduler's `run_delay` does not grow. It happens when a sleeper's own hrtimer fires
/// in the timer interrupt after `do_nanosleep()` set TASK_INTERRUPTIBLE and before
/// `schedule()` took it off the CPU (arm64 6.1 under qemu: ~1 slice in 12). Stamped, that
/// wakeup would replace the start of the wait that ended at this slice's switch-in with
/// a time after it, and the wait would be lost ([`wait_from`] gives [`UNKNOWN`]).
#[inline(always)]
pub fn wakeup_starts_wait(woken: u32, current: u32) -> bool {
    woken != current
}

/// [`wakeup_starts_wait`] from the woken task's `on_cpu` (tp_btf: a plain load, not a
/// helper call for `current`'s TID). A task still on a CPU, this one's `current` or
/// another's, is found on its run queue (`ttwu_runnable()`): nothing is queued, no wait
/// starts. A wakeup that queues it (`ttwu_do_activate()`) comes only after its CPU let
/// go of it: `try_to_wake_up()` and `sched_ttwu_pending()` wait for `on_cpu` to clear.
#[inline(always)]
pub fn wakeup_starts_wait_on_cpu(on_cpu: i32) -> bool {
    on_cpu == 0
}

/// Whether a `sched_wakeup` that starts a wait (see [`wakeup_starts_wait`]) stamps its
/// start, given the start the thread's entry holds (`runnable`, 0: none). Not when one
/// is there: the thread is already runnable, and `try_to_wake_up()` found it on a run
/// queue (`ttwu_runnable()` still fires `sched_wakeup`). Either it was preempted and is
/// queued (its wait began at that preemption, which a later stamp would cut short), or,
/// in the `THREADS`-hash modes, it is running on another CPU and the stamp is that of the
/// wait that ended at its switch-in, which its switch-out still has to time (a stamp from
/// inside the slice loses it: a short process's 7 waits of 8 slices, torture seed 8,
/// raw-tp). A switch-out clears it (and sets it again when preempted).
#[inline(always)]
pub fn wakeup_stamps(runnable: u64) -> bool {
    runnable == 0
}

/// A run-queue wait as the scheduler's `sched_info.run_delay` grew over it (`base`:
/// its value before, [`UNKNOWN`] when not known), or [`UNKNOWN`]. Where it did not grow
/// (its clock update is skipped after a wakeup that preempts) there is no wait.
#[inline(always)]
pub fn wait_by_run_delay(run_delay: u64, base: u64) -> u64 {
    if base != UNKNOWN && run_delay > base {
        run_delay - base
    } else {
        UNKNOWN
    }
}

/// The run-queue wait that ended at a slice's start: `timed` (from the wakeup or
/// preemption, [`UNKNOWN`] when no program saw its start); else, where the switch-in was
/// not seen either and the thread had blocked, what the scheduler's
/// `sched_info.run_delay` grew by since that switch-out (`base`, [`UNKNOWN`] when not
/// read): the kernel reported neither end of the wait (see `drop::UNSEEN_SWITCH_IN`).
/// A switch-in that was seen after an unseen wakeup keeps no wait: its thread was
/// running already (`try_to_wake_up()` on `current`, see [`wakeup_starts_wait`]).
#[inline(always)]
pub fn unseen_wait(
    timed: u64,
    switch_in_seen: bool,
    left_blocked: bool,
    run_delay: u64,
    base: u64,
) -> u64 {
    if timed != UNKNOWN || switch_in_seen || !left_blocked {
        timed
    } else {
        wait_by_run_delay(run_delay, base)
    }
}

/// `sched_info.run_delay` of a task just created: `sched_fork()` zeroes `sched_info`.
/// The base of a new thread's first wait where waits come from `run_delay`.
pub const RUN_DELAY_AT_BIRTH: u64 = 0;

/// Whether the thread leaving a CPU is the task the last switch there put on it, under
/// another TID: an exec from a non-main thread, `de_thread()` swapping the TIDs of the
/// exec'ing thread and the old leader (`exchange_tids()`) while it ran. `cpu_tid`,
/// `cpu_task`: the CPU's record (the TID and task address at the switch-in; address 0
/// when the attach point gives none, classic tracepoints). `prev_task`: the address of
/// the task leaving (only compared when `cpu_task` is known). Without addresses only the
/// old leader's final switch is recognised, by its process: the CPU ran the leader
/// (`cpu_tid` is the TGID of the thread leaving) and a non-main thread of that process
/// dies there, which without a lost switch is the old leader under its new TID.
pub fn tid_swapped(
    cpu_tid: u32,
    cpu_task: u64,
    prev_tid: u32,
    prev_tgid: u32,
    prev_task: u64,
    dead: bool,
) -> bool {
    if cpu_tid == 0 || cpu_tid == prev_tid {
        return false;
    }
    if cpu_task != 0 {
        return cpu_task == prev_task;
    }
    dead && cpu_tid == prev_tgid && prev_tid != prev_tgid
}

#[cfg(test)]
mod tests {
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
    fn a_wait_with_neither_end_seen_is_the_schedulers() {
        // (timed, switch-in seen, left blocked, run_delay now, base) -> wait
        let rows: &[(u64, bool, bool, u64, u64, u64, &str)] = &[
            (
                5_000,
                false,
                true,
                9_000,
                1_000,
                5_000,
                "timed from its wakeup",
            ),
            (
                UNKNOWN,
                false,
                true,
                9_000,
                1_000,
                8_000,
                "wakeup and switch-in unseen",
            ),
            (
                UNKNOWN,
                true,
                true,
                9_000,
                1_000,
                UNKNOWN,
                "switch-in seen: no wait",
            ),
            (
                UNKNOWN,
                false,
                false,
                9_000,
                1_000,
                UNKNOWN,
                "preempted: its start is kept",
            ),
            (
                UNKNOWN,
                false,
                true,
                9_000,
                UNKNOWN,
                UNKNOWN,
                "no base read",
            ),
            (
                UNKNOWN,
                false,
                true,
                1_000,
                1_000,
                UNKNOWN,
                "run_delay did not grow",
            ),
            (
                UNKNOWN,
                false,
                true,
                4_530,
                RUN_DELAY_AT_BIRTH,
                4_530,
                "born in the window",
            ),
        ];
        for &(timed, seen, blocked, rd, base, want, why) in rows {
            assert_eq!(unseen_wait(timed, seen, blocked, rd, base), want, "{why}");
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
    /// old leader's final switch by its process.
    #[test]
    fn a_tid_swap_is_one_task_under_two_tids() {
        // (cpu tid, cpu task, prev tid, prev tgid, prev task, dead) -> swapped
        let rows = [
            ((10, 0xa, 10, 10, 0xa, false), false), // the same thread
            ((11, 0xa, 10, 10, 0xa, false), true),  // exec'ing thread, swapped mid-slice
            ((10, 0xb, 11, 10, 0xb, true), true),   // old leader's final switch
            ((11, 0xa, 12, 10, 0xc, false), false), // a switch not seen: another task
            ((0, 0, 10, 10, 0xa, false), false),    // nothing switched in here
            // Classic tracepoints: the old leader dies under the exec'ing thread's TID on
            // the CPU that switched it in as the leader.
            ((10, 0, 11, 10, 0, true), true),
            ((10, 0, 11, 10, 0, false), false), // not its death: a switch not seen
            ((12, 0, 11, 10, 0, true), false),  // the CPU ran another thread
            ((10, 0, 10, 10, 0, true), false),  // the leader itself dies
        ];
        for ((ct, ck, pt, pg, pk, dead), want) in rows {
            assert_eq!(
                tid_swapped(ct, ck, pt, pg, pk, dead),
                want,
                "cpu {ct}/{ck:#x}, prev {pt} (tgid {pg})/{pk:#x}, dead {dead}"
            );
        }
    }
}
