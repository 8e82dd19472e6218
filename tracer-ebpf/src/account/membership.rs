//! The traced set: whether a thread is in it (`TRACKED`, or every thread, or the target
//! cgroup's), and how it follows forks and execs. Shared by the scheduling and off-CPU
//! families.
use tracer_common::{drop, filter, Tracked, TRACK_EXITING, TRACK_INHERIT};

use crate::{
    maps::{count_drop, CGROUP_TARGET, TRACKED},
    task::config,
    Task,
};
use aya_ebpf::helpers::bpf_get_current_cgroup_id;
/// Whether a thread is in the traced set, and its TGID when the set knows it.
#[inline(always)]
pub fn traced(t: &Task) -> Option<u32> {
    if t.tid == 0 {
        return None; // the idle task of every CPU
    }
    if config().mode.filter == filter::ALL {
        return Some(t.tgid);
    }
    // SAFETY: the value is copied out at once.
    unsafe { TRACKED.get(t.tid) }.map(|v| if t.tgid != 0 { t.tgid } else { v.tgid })
}

/// Where a switch-out finds `prev` in cgroup mode.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Member {
    Out,
    In,
    /// In, and not in the cache of members, which holds the members listed at the start
    /// and every child born inside (`fork`): it moved in (or back) since its last
    /// switch-out, at a time not known. (Or the cache was full: `drop::TRACKED_FULL`.)
    Joined,
}

/// Whether `current` is in the target cgroup, or below it unless `cgroup_node_only`.
#[inline(always)]
fn current_inside() -> bool {
    let c = config();
    if c.mode.cgroup_node_only != 0 {
        (unsafe { bpf_get_current_cgroup_id() }) == c.mode.cgroup_id
    } else {
        CGROUP_TARGET.current_task_under_cgroup(0).unwrap_or(false)
    }
}

/// cgroup mode: whether `current` (the thread leaving the CPU, `prev`) is in the
/// target cgroup (or below it unless `cgroup_node_only`), and whether it just came in
/// ([`Member`]). Asked at every switch-out, so a thread that moves out stops counting
/// at once; `TRACKED` follows, as the cache of members that the wakeup programs (which
/// see other tasks than `current`) read.
#[inline(always)]
pub(super) fn cgroup_member(prev: &Task) -> Member {
    if prev.tid == 0 {
        return Member::Out;
    }
    let inside = current_inside();
    // SAFETY: the flags are copied out at once.
    let flags = unsafe { TRACKED.get(prev.tid) }.map(|v| v.flags);
    let cached = flags.is_some();
    if inside && !cached {
        let v = Tracked {
            tgid: prev.tgid,
            flags: TRACK_INHERIT,
        };
        if TRACKED.insert(prev.tid, v, 0).is_err() {
            count_drop(drop::TRACKED_FULL);
        }
        return Member::Joined;
    } else if !inside && flags.is_some_and(|f| f & TRACK_EXITING == 0) {
        // An exiting thread stays until its final switch (`untrack_dead`).
        let _ = TRACKED.remove(prev.tid);
        // It left: what it does outside is not the target's, should it come back (a
        // hostile test pass, 2026-12-07: a spinner inside for 1.0 s of 3.5 read 2.2 s;
        // torture seed 1009034, classic tracepoints: 26 ms outside counted at its
        // return). Its slice back inside is then timed from its switch-in, as a
        // joiner's, with no sleep or wait before it (when it left is not known).
        #[cfg(feature = "scheduling")]
        super::entries::forget_outside(prev);
    }
    if inside {
        Member::In
    } else {
        Member::Out
    }
}

/// Whether `prev` (`current`) is in the traced set now, and in cgroup mode whether it
/// just came in.
#[inline(always)]
pub(super) fn member_state(prev: &Task) -> Member {
    if config().mode.filter == filter::CGROUP {
        cgroup_member(prev)
    } else if traced(prev).is_some() {
        Member::In
    } else {
        Member::Out
    }
}

/// Whether `prev` (`current`) is in the traced set now.
#[inline(always)]
pub fn member(prev: &Task) -> bool {
    member_state(prev) != Member::Out
}

/// A new thread or process: it joins the traced set when its parent's set inherits.
/// In cgroup mode, when its parent (`current`) is inside: the start lists the cgroup's
/// threads before it caches them, and a child of one born in between was missed by
/// both, then taken for a joiner (a hostile review, 2026-12-07).
#[inline(always)]
pub fn fork(parent: Task, child: Task) {
    let mode = config().mode.filter;
    if mode == filter::ALL {
        return;
    }
    if mode == filter::CGROUP {
        if current_inside() {
            let v = Tracked {
                tgid: child.tgid(),
                flags: TRACK_INHERIT,
            };
            if TRACKED.insert(child.tid, v, 0).is_err() {
                count_drop(drop::TRACKED_FULL);
            }
        }
        return;
    }
    // SAFETY: copied out at once.
    let p = match unsafe { TRACKED.get(parent.tid) }.copied() {
        Some(p) => p,
        // A thread of a process whose leader is in the set but which is not yet itself:
        // user space puts a target's leader in first and then lists its threads, so a
        // thread born in between is followed from its parent's process.
        // SAFETY: copied out at once.
        None => match unsafe { TRACKED.get(parent.tgid) }.copied() {
            Some(l) if l.tgid == parent.tgid && parent.tgid != 0 => l,
            _ => return,
        },
    };
    if p.flags & TRACK_INHERIT == 0 {
        return;
    }
    let v = Tracked {
        tgid: child.tgid(),
        flags: TRACK_INHERIT,
    };
    if TRACKED.insert(child.tid, v, 0).is_err() {
        count_drop(drop::TRACKED_FULL);
    }
}

/// An exec moved a thread from TID `old` to `new` (`de_thread()`): its place in the
/// traced set moves with it.
#[inline(always)]
pub fn follow_exec(old: u32, new: u32) {
    if config().mode.filter == filter::ALL {
        return;
    }
    // SAFETY: copied out at once.
    if let Some(v) = unsafe { TRACKED.get(old) }.copied() {
        if TRACKED.insert(new, v, 0).is_err() {
            count_drop(drop::TRACKED_FULL);
        }
        let _ = TRACKED.remove(old);
    }
}
