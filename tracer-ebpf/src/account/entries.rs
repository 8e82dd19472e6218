//! Per-thread entries (task-local storage or the `THREADS` hash), their histograms and
//! counters, and the totals a thread hands over when it dies.
use aya_ebpf::bindings::{bpf_perf_event_value, BPF_F_CURRENT_CPU, BPF_NOEXIST};
use aya_ebpf::helpers::{bpf_get_smp_processor_id, bpf_perf_event_read_value};
use tracer_common::{
    drop, filter,
    hist::{bucket_index, pow2_bucket, slot, HistKey, ThreadHist, N_BUCKETS},
    scope, slice, CpuState, ExitRecord, ThreadStats, Tracked, HAVE_RUN_DELAY, MAX_SLICE_COUNTERS,
    TRACK_EXITING,
};

use crate::{
    maps::{
        count_drop, CPU_STATE, EXITED, HIST, HIST_SCOPED, SCRATCH, SERIAL, SLICE_COUNTER0,
        SLICE_COUNTER1, TASK_STATS, THREADS, TRACKED, WAKE_ASIDE, WINDOW,
    },
    task::config,
    CommSrc, Task,
};
/// Counts `v` in histogram `kind` of `id` (the traced set, a process or a thread), or
/// in the thread's own histograms `th` where those are kept (`hist_in_task`).
#[inline(always)]
pub(super) fn hist_add(kind: u32, id: u32, v: u64, th: *mut ThreadHist) {
    let c = config();
    if c.mode.hist_in_task != 0 {
        // (Decided by the configuration, not by `th`: the verifier then drops the hash
        // path below from the program.) A thread whose histograms could not be made
        // loses the value, counted as the hash map's would be.
        if th.is_null() {
            count_drop(drop::HIST_FULL);
        } else {
            // SAFETY: the task storage of the thread leaving; only its switch-outs
            // write it.
            let counts = unsafe { &mut (*th).counts };
            if let Some(k) = counts.get_mut(kind as usize) {
                if let Some(n) = k.get_mut(slot(v)) {
                    *n += 1;
                }
            }
        }
        return;
    }
    // A value's power of two (the bucket of its octave's largest value; values below
    // SUB keep their exact buckets): the same counts under power-of-two bounds, far
    // fewer keys per process (see `hist::pow2_bucket`).
    let b = if c.mode.hist_pow2 != 0 {
        pow2_bucket(v)
    } else {
        bucket_index(v)
    };
    if c.mode.hist_scope == scope::ALL {
        if let Some(p) = HIST.get_ptr_mut(kind * N_BUCKETS as u32 + b as u32) {
            // SAFETY: per-CPU slot.
            unsafe { *p += 1 };
        }
        return;
    }
    let key = HistKey {
        id,
        kind: kind as u16,
        bucket: b as u16,
    };
    match HIST_SCOPED.get_ptr_mut(key) {
        // SAFETY: per-CPU value.
        Some(p) => unsafe { *p += 1 },
        None => {
            if HIST_SCOPED.insert(key, 1, BPF_NOEXIST as u64).is_err() {
                // Another CPU may have inserted the same key meanwhile (EEXIST, seen
                // under process churn): count there; only a missing key is a loss.
                match HIST_SCOPED.get_ptr_mut(key) {
                    // SAFETY: per-CPU value.
                    Some(p) => unsafe { *p += 1 },
                    None => count_drop(drop::HIST_FULL),
                }
            }
        }
    }
}

/// The histograms of `t` (the thread leaving, `current`) in its own task storage, made
/// on first use; null where they are not kept there (see `hist_add`).
#[inline(always)]
pub(super) fn thread_hist(t: &Task) -> *mut ThreadHist {
    #[cfg(feature = "serve")]
    if config().mode.hist_in_task != 0 && in_storage(t) {
        // SAFETY: a trusted task pointer.
        return match unsafe { crate::maps::TASK_HIST.get_or_zero(t.ptr) } {
            Some(h) => {
                // SAFETY: as above. Its TID and TGID now (an exec may have changed the TID).
                unsafe {
                    (*h).tid = t.tid;
                    (*h).tgid = t.tgid;
                }
                h
            }
            None => core::ptr::null_mut(),
        };
    }
    let _ = t;
    core::ptr::null_mut()
}

/// A dying thread's own histograms (`hist_in_task`) go to user space through the exit
/// ring, and its storage is freed: its process's totals keep them.
#[inline(always)]
pub(super) fn flush_hist(t: &Task) {
    #[cfg(feature = "serve")]
    if config().mode.hist_in_task != 0 && in_storage(t) {
        use crate::maps::TASK_HIST;
        // SAFETY: a trusted task pointer (`current`).
        if let Some(h) = unsafe { TASK_HIST.get(t.ptr, None) } {
            match EXITED.reserve::<ThreadHist>(0) {
                Some(mut e) => {
                    // SAFETY: the reservation holds one ThreadHist; `h` is task storage.
                    unsafe { core::ptr::copy_nonoverlapping(h, e.as_mut_ptr(), 1) };
                    e.submit(0);
                }
                None => count_drop(drop::EXIT_RINGBUF_FULL),
            }
            // SAFETY: as above.
            unsafe { TASK_HIST.delete(t.ptr) };
        }
    }
    let _ = t;
}

/// Whether `t`'s entry lives in task-local storage (tp_btf mode) rather than `THREADS`.
#[inline(always)]
pub(super) fn in_storage(t: &Task) -> bool {
    config().mode.use_task_storage != 0 && t.trusted
}

/// A number no other entry has: this CPU's count of entries made, with the CPU on top.
#[inline(always)]
pub(super) fn next_serial() -> u64 {
    let cpu = unsafe { bpf_get_smp_processor_id() } as u64;
    match SERIAL.get_ptr_mut(0) {
        Some(p) => {
            // SAFETY: per-CPU slot; the programs that make entries do not nest on a CPU.
            let n = unsafe { *p } + 1;
            unsafe { *p = n };
            (cpu << 48) | n
        }
        None => 0,
    }
}

/// The thread's entry if it has one (never created here).
#[inline(always)]
pub fn existing_entry(t: &Task) -> Option<*mut ThreadStats> {
    if in_storage(t) {
        // SAFETY: a trusted task pointer.
        unsafe { TASK_STATS.get(t.ptr, None) }
    } else {
        THREADS.get_ptr_mut(t.tid)
    }
}

/// The process of a thread with an entry in the `THREADS` hash (0: none). Off the hot
/// path: only a switch-out that disagrees with its CPU's record asks, in modes without
/// task addresses.
#[inline(always)]
pub(super) fn process_of(tid: u32) -> u32 {
    // SAFETY: map value, read once.
    unsafe { THREADS.get(tid) }.map_or(0, |s| s.tgid)
}

/// The thread's entry, created on first sight: in task-local storage (one pointer chase
/// from the task) in tp_btf mode, else in the `THREADS` hash. A new entry's off-CPU
/// time runs from `born` (a thread created in the window: `sched_wakeup_new`), else
/// from the window's opening: a thread first seen now has existed off-CPU since then,
/// so one asleep at the opening still has its on + off equal to its time in the window.
/// Task storage that cannot be had is counted as `lost` (none: the caller says).
#[inline(always)]
pub(super) fn thread_entry(
    t: &Task,
    tgid: u32,
    born: Option<u64>,
    lost: Option<u32>,
) -> Option<*mut ThreadStats> {
    if in_storage(t) {
        // SAFETY: a trusted task pointer.
        if let Some(p) = unsafe { TASK_STATS.get(t.ptr, None) } {
            return Some(p);
        }
    } else if let Some(p) = THREADS.get_ptr_mut(t.tid) {
        return Some(p);
    }
    // The new entry is built in a per-CPU scratch slot, not on the stack: 200 bytes there
    // pushed the switch program past the 512-byte combined stack the 6.1 verifier allows.
    let sp = SCRATCH.get_ptr_mut(0)?;
    // SAFETY: per-CPU slot, only this program on this CPU uses it until it returns.
    let s = unsafe {
        crate::mem::zero(sp);
        &mut *sp
    };
    s.last_cpu = u32::MAX;
    s.serial = next_serial();
    s.last_off_ns = match born {
        Some(t) => t,
        None => window().0,
    };
    s.tgid = if tgid != 0 { tgid } else { t.tgid() };
    // Already zero when there is no name to read (written, the zeroes were a `memset`).
    if !matches!(t.comm, CommSrc::None) {
        s.comm = t.comm.read();
    }
    if in_storage(t) {
        // SAFETY: as above; the kernel copies `s` into the new storage.
        let p = unsafe { TASK_STATS.get(t.ptr, Some(s)) };
        if p.is_none() {
            if let Some(idx) = lost {
                count_drop(idx);
            }
        }
        return p;
    }
    // By reference: the entry by value would be copied onto the 512-byte BPF stack.
    #[allow(clippy::needless_borrows_for_generic_args)]
    if THREADS.insert(t.tid, &*s, BPF_NOEXIST as u64).is_err() {
        // Either full, or another CPU created it in between: look again.
        let p = THREADS.get_ptr_mut(t.tid);
        if p.is_none() {
            count_drop(drop::THREADS_FULL);
        }
        return p;
    }
    THREADS.get_ptr_mut(t.tid)
}

/// The `--slice-event` deltas of the slice ending, where its base is its own (`ours`:
/// this CPU saw its switch-in). After a switch-in not seen the base is another slice's,
/// and its deltas spanned many switches (a hostile test: task-clock 92 ms above on-CPU
/// time, context switches 15-21 above the slices, with 3-12 switch-ins unseen).
#[inline(always)]
pub(super) fn add_slice_counters(cs: &CpuState, s: &mut ThreadStats, ours: bool) {
    let n_counters = (config().mode.n_counters as usize).min(MAX_SLICE_COUNTERS);
    for i in 0..n_counters {
        if ours && cs.counter_base[i] != 0 {
            if let Some(v) = read_counter(i) {
                s.counters[i] += v.wrapping_sub(cs.counter_base[i]);
            }
        }
    }
}

/// The `--slice-event` counters at a slice's start, which its switch-out subtracts.
#[inline(always)]
pub(super) fn take_counter_base(cs: &mut CpuState) {
    let n_counters = (config().mode.n_counters as usize).min(MAX_SLICE_COUNTERS);
    for i in 0..n_counters {
        cs.counter_base[i] = read_counter(i).unwrap_or(0);
    }
}

#[inline(always)]
pub(super) fn read_counter(i: usize) -> Option<u64> {
    let map = if i == 0 {
        &SLICE_COUNTER0 as *const _ as *mut core::ffi::c_void
    } else {
        &SLICE_COUNTER1 as *const _ as *mut core::ffi::c_void
    };
    // Uninitialised: zeroing it became a byte-loop `memset` call the verifier walks on
    // every path; the helper writes the whole buffer (zeroes where it fails).
    let mut v = core::mem::MaybeUninit::<bpf_perf_event_value>::uninit();
    // SAFETY: the map is a perf event array; the buffer is ours (ARG_PTR_TO_UNINIT_MEM).
    let r = unsafe {
        bpf_perf_event_read_value(
            map,
            BPF_F_CURRENT_CPU,
            v.as_mut_ptr(),
            core::mem::size_of::<bpf_perf_event_value>() as u32,
        )
    };
    if r != 0 {
        count_drop(drop::COUNTER_READ);
        return None;
    }
    // SAFETY: filled by the helper, which returned 0.
    Some(unsafe { v.assume_init() }.counter)
}

/// The address of `current`'s task_struct (`prev`): from its BTF pointer, else one
/// helper call (only asked when a CPU's record and `prev` disagree).
#[inline(always)]
pub fn task_addr(prev: &Task) -> u64 {
    if prev.ptr.is_null() {
        unsafe { aya_ebpf::helpers::bpf_get_current_task() }
    } else {
        prev.ptr as u64
    }
}

/// The window's opening and close (0: open-ended), see `tracer_common::Window`.
#[inline(always)]
pub(super) fn window() -> (u64, u64) {
    match WINDOW.get(0) {
        Some(w) => (w.open_ns, w.close_ns),
        None => (0, 0),
    }
}

#[inline(always)]
pub(super) fn scoped_id(scope_: u32, tid: u32, tgid: u32) -> u32 {
    if scope_ == scope::PROCESS {
        tgid
    } else {
        tid
    }
}

/// A thread's final switch-out: hand its totals to user space and free its entries, so
/// the maps stay bounded under churn and a recycled TID starts from nothing.
#[inline(always)]
pub(super) fn flush_dead(t: &Task, s: &mut ThreadStats) {
    let tid = t.tid;
    // The dying thread is `current`: its comm now is the final one (after any exec).
    s.comm = crate::task::current_comm();
    flush_record(t, s);
    flush_hist(t);
    if in_storage(t) {
        // A zombie stays visible to the task iterator until reaped: its totals are in
        // the ring buffer now, so the iterator must not report them again.
        // SAFETY: a trusted task pointer (`current`).
        unsafe { TASK_STATS.delete(t.ptr) };
    } else {
        let _ = THREADS.remove(tid);
    }
    untrack_dead(t);
}

/// `sched_process_exit` system-wide with the entries in task storage: a thread with an
/// entry joins `TRACKED` (unused system-wide otherwise) until its final switch takes it
/// out (`untrack_dead`). `release_task()` unhashes a thread before that switch, where
/// its totals are handed over; a thread preempted in between is in no read (torture
/// seed 345355: up to 4 threads missing), and the final read waits for those listed
/// here and gone from /proc, as it does for a target's (`bpf::collect::exiting`).
/// Its name is taken again here, so its exit record names it as it died, not by the
/// name its entry was made with (its parent's, for a thread that renamed itself).
/// A `--cgroup` target's thread is marked instead: `cgroup_exit()` moves it out before
/// its final switch, and a switch-out in between took it out of the set, so no read
/// had it (torture seed 992149: a thread of 80 ms missing, no loss counted).
#[inline(always)]
pub fn exiting(t: &Task) {
    if !in_storage(t) {
        return;
    }
    if config().mode.filter == filter::CGROUP {
        if let Some(v) = TRACKED.get_ptr_mut(t.tid) {
            // SAFETY: map value.
            unsafe { (*v).flags |= TRACK_EXITING };
        }
        return;
    }
    if config().mode.filter != filter::ALL {
        return;
    }
    let Some(s) = existing_entry(t) else {
        return;
    };
    // SAFETY: the task storage of `current`, the task exiting.
    unsafe { (*s).comm = crate::task::current_comm() };
    let v = Tracked {
        tgid: t.tgid(),
        flags: 0,
    };
    if TRACKED.insert(t.tid, v, 0).is_err() {
        count_drop(drop::TRACKED_FULL);
    }
}

/// A dying thread leaves the traced set, with or without an entry (one whose slices
/// all fell outside the window has none): user space waits at the close for traced
/// threads that are gone from /proc and still listed. Not when the exec'ing thread
/// takes its TID.
#[inline(always)]
pub(super) fn untrack_dead(t: &Task) {
    if config().mode.filter == filter::ALL {
        // System-wide the set holds only threads in their exit path (see `exiting`);
        // a TID an exec'ing thread takes stays in /proc, so it is never waited for.
        if in_storage(t) {
            let _ = TRACKED.remove(t.tid);
        }
    } else if !exec_takes_tid(t) {
        let _ = TRACKED.remove(t.tid);
    }
}

/// Whether the dying `t` (`current`) is a leader whose TID another of its threads is
/// about to take: `de_thread()` set `signal->group_exec_task` to the exec'ing thread
/// before killing the others. Its traced-set entry then stays for that thread, which
/// runs under this TID from `exchange_tids()` on, before `sched_process_exec` moves the
/// entry (its switches in between would not count). False when BTF gave no offsets.
#[inline(always)]
pub(super) fn exec_takes_tid(t: &Task) -> bool {
    let c = config();
    if c.task.signal == 0 || c.task.signal_exec_task == 0 || t.tid != t.tgid() {
        return false;
    }
    let Some(sig) = t.field::<u64>(c.task.signal) else {
        return false;
    };
    if sig == 0 {
        return false;
    }
    // SAFETY: bpf_probe_read_kernel validates the address.
    let exec_task = unsafe {
        aya_ebpf::helpers::bpf_probe_read_kernel(
            (sig as *const u8).add(c.task.signal_exec_task as usize) as *const u64,
        )
    }
    .unwrap_or(0);
    exec_task != 0 && exec_task != task_addr(t)
}

/// Hands a dead thread's totals to user space through the ring buffer.
#[inline(always)]
pub(super) fn flush_record(t: &Task, s: &ThreadStats) {
    flush_record_as(t.tid, 0, s)
}

/// Sends `s` as the totals of `tid` (which goes on as `became`, if not 0).
#[inline(always)]
pub(super) fn flush_record_as(tid: u32, became: u32, s: &ThreadStats) {
    match EXITED.reserve::<ExitRecord>(0) {
        Some(mut e) => {
            // Written in place: an `ExitRecord` built on the stack first costs 208 bytes.
            let p = e.as_mut_ptr();
            // SAFETY: the reservation holds one ExitRecord; `s` is a map value.
            unsafe {
                (*p).tid = tid;
                (*p).became = became;
                crate::mem::copy(s as *const ThreadStats, &mut (*p).stats);
            }
            e.submit(0);
        }
        None => count_drop(drop::EXIT_RINGBUF_FULL),
    }
}

/// A wakeup of `tid` at `now` whose task storage could not be made (see
/// `drop::WAKE_ASIDE`): kept by TID for its switch-in. An earlier time kept stays (the
/// wait began then); a full map loses the wait, counted.
// Not inlined: the wakeup programs' common path does not carry it.
#[inline(never)]
pub(super) fn set_wake_aside(tid: u32, now: u64) {
    if WAKE_ASIDE.insert(tid, now, BPF_NOEXIST as u64).is_ok() {
        count_drop(drop::WAKE_ASIDE);
    } else if WAKE_ASIDE.get_ptr(tid).is_none() {
        count_drop(drop::STORAGE);
    }
}

/// A `--cgroup` thread seen leaving the target (its first switch-out outside): its
/// runtime base and runtime records go, so a slice back inside is timed from its
/// switch-in (`sched_stat_runtime` keeps none while it is out, `add_runtime`). Its open
/// sleep and its run_delay base go too, unless this slice began inside: then
/// `switch::settle_leaver` counts what ended at its switch-in and drops them itself.
#[inline(always)]
pub(super) fn forget_outside(t: &Task) {
    let Some(s) = existing_entry(t) else {
        return;
    };
    let settles = CPU_STATE
        .get_ptr(0)
        // SAFETY: per-CPU state, copied from at once.
        .is_some_and(|cs| unsafe { (*cs).traced != 0 && (*cs).tid == t.tid });
    // Volatile: adjacent zero stores become a `memset` call (see `crate::mem`).
    // SAFETY: map value or task storage of the task leaving the CPU.
    unsafe {
        core::ptr::write_volatile(&mut (*s).pending_runtime, 0);
        core::ptr::write_volatile(&mut (*s).last_sum_exec, 0);
        if !settles {
            core::ptr::write_volatile(&mut (*s).last_off_ns, 0);
            core::ptr::write_volatile(&mut (*s).runnable_ns, 0);
            (*s).flags &= !HAVE_RUN_DELAY;
        }
    }
}

/// The wakeup time kept aside for `tid` (see [`set_wake_aside`]), taken out.
#[inline(always)]
pub(super) fn take_wake_aside(tid: u32) -> Option<u64> {
    // SAFETY: copied out at once.
    let at = unsafe { WAKE_ASIDE.get(tid) }.copied()?;
    let _ = WAKE_ASIDE.remove(tid);
    Some(at)
}

/// `--runq-from schedstat`: the wait that ended at this slice's start, as `run_delay`
/// (`rd`, read now) grew since the thread's last switch-out read it, or else since
/// `read_in` (read at the switch-in, if this CPU saw it: `seen_in`). `rd` becomes the
/// base of the next. (`seen_in` is a flag, not a base the caller picks first: that
/// verified in 1,700 more instructions in tp-btf's switch program, 8,700 fewer in
/// raw-tp's; this order keeps both within 1,000 of the inline code it replaced.)
#[inline(always)]
pub(super) fn run_delay_wait(s: &mut ThreadStats, rd: u64, read_in: u64, seen_in: bool) -> u64 {
    let base = if s.flags & HAVE_RUN_DELAY != 0 {
        s.last_run_delay
    } else if seen_in {
        read_in
    } else {
        slice::UNKNOWN
    };
    s.last_run_delay = rd;
    s.flags |= HAVE_RUN_DELAY;
    slice::wait_by_run_delay(rd, base)
}
