//! Types shared by the eBPF programs (`tracer-ebpf`) and user space (`tracer`).
//!
//! Every type is `#[repr(C)]` with explicit padding so that both sides agree on the
//! layout byte for byte; `const` assertions below pin the sizes.
#![no_std]

pub mod cgroup;
pub mod hist;
pub mod irq;
pub mod offcpu;
pub mod record;
pub mod runqlen;
pub mod slice;

/// Length of `task_struct::comm` (TASK_COMM_LEN).
pub const COMM_LEN: usize = 16;

/// Maximum number of perf counters read per slice in the sched_switch program.
pub const MAX_SLICE_COUNTERS: usize = 2;

/// Per-thread accumulators, keyed by TID in the `THREADS` map.
///
/// A thread's entry is removed at its final switch-out (TASK_DEAD) and its totals sent
/// to user space, so a recycled TID always starts from a fresh entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadStats {
    /// Total on-CPU time, ns.
    pub on_cpu_ns: u64,
    /// Completed on-CPU slices (switch-in .. switch-out).
    pub slices: u64,
    /// Switch-outs while blocking (prev_state not runnable).
    pub voluntary: u64,
    /// Switch-outs while still runnable (preempted).
    pub involuntary: u64,
    /// Total time runnable but waiting for a CPU, ns.
    pub runq_wait_ns: u64,
    /// Number of completed run-queue waits.
    pub runq_waits: u64,
    /// Total off-CPU time (switch-out to next switch-in), ns.
    pub off_cpu_ns: u64,
    /// Part of `off_cpu_ns` spent blocked (asleep).
    pub blocked_ns: u64,
    /// Part of `off_cpu_ns` spent preempted while runnable.
    pub preempted_ns: u64,
    /// Switch-ins on a different CPU than the previous one.
    pub migrations: u64,
    /// Counter deltas accumulated over this thread's slices (see `Accounting::n_counters`).
    pub counters: [u64; MAX_SLICE_COUNTERS],
    /// The scheduler's `se.sum_exec_runtime` at the last switch-out (0: unknown), the
    /// base of the next slice.
    pub last_sum_exec: u64,
    /// Without BTF: `sched_stat_runtime` deltas charged to the thread since its last
    /// switch-out, i.e. the current slice as the scheduler accounts it.
    pub pending_runtime: u64,
    /// Timestamp of the last switch-out (0: not yet seen off-CPU in this window).
    pub last_off_ns: u64,
    /// Timestamp the thread became runnable (0: not waiting), when neither task-local
    /// storage nor `run_delay` is in use.
    pub runnable_ns: u64,
    /// The scheduler's `sched_info.run_delay` at the last switch-out, the base of the
    /// next run-queue wait (valid when `flags` has [`HAVE_RUN_DELAY`]).
    pub last_run_delay: u64,
    /// Thread group (process) ID.
    pub tgid: u32,
    /// CPU of the last switch-in, or `u32::MAX`.
    pub last_cpu: u32,
    /// How the thread last left the CPU: [`OFF_BLOCKED`] or [`OFF_PREEMPTED`].
    pub off_state: u32,
    /// [`HAVE_RUN_DELAY`], [`HANDED_OVER`].
    pub flags: u32,
    pub comm: [u8; COMM_LEN],
    /// Unique per entry (CPU in the top 16 bits, a per-CPU count below), set when the
    /// entry is made: the thread's identity across snapshots, which its TID is not — a
    /// non-main thread that execs takes its leader's TID.
    pub serial: u64,
    /// The thread's cgroup v2 id at its last switch-out (0: not asked for, see
    /// `Accounting::thread_cgroup`, or not switched out yet): `tracer serve` charges the
    /// thread's time to the cgroup it ran in, even when it is gone before any read.
    pub cgroup_id: u64,
    /// The cgroup the thread's switch-outs showed before `cgroup_id` (0: none).
    pub cgroup_prev_id: u64,
    /// The thread's `on_cpu_ns` at its first switch-out in `cgroup_id`: the on-CPU time
    /// up to it was `cgroup_prev_id`'s. In a delta between two reads (user space), the
    /// part of the delta's `on_cpu_ns` that was `cgroup_prev_id`'s.
    pub cgroup_moved_at_ns: u64,
}

/// `ThreadStats::last_run_delay` holds a value read at a switch-out.
pub const HAVE_RUN_DELAY: u32 = 1;
/// An exec'ing non-main thread's totals were handed over at its first switch-out under
/// its leader's TID (after `exchange_tids()`): its `sched_process_exec` has nothing more
/// to hand over.
pub const HANDED_OVER: u32 = 2;

/// The thread blocked (slept) when it left the CPU.
pub const OFF_BLOCKED: u32 = 1;
/// The thread was preempted and stayed runnable.
pub const OFF_PREEMPTED: u32 = 2;

impl ThreadStats {
    /// Adds `d` of off-CPU time, as preempted or blocked by how the thread last left.
    #[inline(always)]
    pub fn add_off_cpu(&mut self, d: u64) {
        self.off_cpu_ns += d;
        if self.off_state == OFF_PREEMPTED {
            self.preempted_ns += d;
        } else {
            self.blocked_ns += d;
        }
    }

    /// The totals counted from zero again, the bases of the next slice, wait and
    /// off-CPU period kept: a thread going on under another TID after an exec.
    ///
    /// One volatile store per field: plain ones are merged by LLVM into a call to the
    /// eBPF build's byte-loop `memset`, which the verifier walks 96 times over.
    #[inline(always)]
    pub fn restart(&mut self) {
        #[inline(always)]
        fn zero(x: &mut u64) {
            // SAFETY: a store through a unique reference.
            unsafe { core::ptr::write_volatile(x, 0) }
        }
        zero(&mut self.on_cpu_ns);
        zero(&mut self.slices);
        zero(&mut self.voluntary);
        zero(&mut self.involuntary);
        zero(&mut self.runq_wait_ns);
        zero(&mut self.runq_waits);
        zero(&mut self.off_cpu_ns);
        zero(&mut self.blocked_ns);
        zero(&mut self.preempted_ns);
        zero(&mut self.migrations);
        for c in &mut self.counters {
            zero(c);
        }
    }

    pub const fn zeroed() -> Self {
        Self {
            on_cpu_ns: 0,
            slices: 0,
            voluntary: 0,
            involuntary: 0,
            runq_wait_ns: 0,
            runq_waits: 0,
            off_cpu_ns: 0,
            blocked_ns: 0,
            preempted_ns: 0,
            migrations: 0,
            counters: [0; MAX_SLICE_COUNTERS],
            last_sum_exec: 0,
            pending_runtime: 0,
            last_off_ns: 0,
            runnable_ns: 0,
            last_run_delay: 0,
            tgid: 0,
            last_cpu: u32::MAX,
            off_state: 0,
            flags: 0,
            comm: [0; COMM_LEN],
            serial: 0,
            cgroup_id: 0,
            cgroup_prev_id: 0,
            cgroup_moved_at_ns: 0,
        }
    }
}

/// A thread's final totals, sent through the `EXITED` ring buffer when it dies so the
/// `THREADS` entry can be freed at once (bounded map usage under thread churn), or its
/// totals under its TID when an exec from it ends that TID (`became`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitRecord {
    pub tid: u32,
    /// 0: the thread died. [`REAPED_BY_EXEC`]: it was a leader that another thread's
    /// exec ended. Else it exec'd from a non-main thread and goes on under this TID (its
    /// leader's): these are its totals under `tid`, until the exec.
    pub became: u32,
    pub stats: ThreadStats,
}

/// `ExitRecord::became` of a leader reaped by the exec of another of its threads
/// (`de_thread()`), which takes its TID.
pub const REAPED_BY_EXEC: u32 = u32::MAX;

/// What is running on one CPU right now (a `PERCPU_ARRAY` with one slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// Timestamp the current slice began (0: unknown).
    pub slice_start_ns: u64,
    /// Counter values at the start of the slice.
    pub counter_base: [u64; MAX_SLICE_COUNTERS],
    /// On-CPU time of traced threads on this CPU (completed slices): which CPUs the
    /// traced set used, and how much.
    pub busy_ns: u64,
    /// `sched_info.run_delay` of `tid` read at its switch-in, before the scheduler added
    /// the wait that just ended: the base for a thread seen for the first time.
    pub run_delay_in: u64,
    /// The run-queue wait that ended at this slice's switch-in, when its start was kept
    /// in task-local storage (`u64::MAX`: none or not known there).
    pub wait_ns: u64,
    /// TID running on this CPU (0: idle or untraced).
    pub tid: u32,
    /// 1 when `tid` is traced and its slice is being timed.
    pub traced: u32,
    /// The `task_struct` address of `tid` (0: not known, classic tracepoints): a task
    /// whose TID changed while it ran here (an exec from a non-main thread) is still
    /// recognised as the task this CPU switched to.
    pub task: u64,
    /// `se.sum_exec_runtime` of `tid` at its switch-in (`u64::MAX`: not read): the base
    /// of a thread's first slice.
    pub sum_in: u64,
    /// The wait the last switch-out took from `run_delay` because neither its wakeup nor
    /// its switch-in was seen (0: none): `tracer record` puts the waking back in the
    /// trace.
    pub unseen_wait_ns: u64,
    /// Odd while a switch program writes a traced thread's entry and the histograms on
    /// this CPU, even otherwise: user space keeps a read only where it is even and
    /// unchanged across the read (a program in flight, its vCPU stopped by the host,
    /// had counted a slice in the entry but not yet in the histogram).
    pub seq: u64,
}

/// The window, in `CLOCK_MONOTONIC` ns (the `WINDOW` map's one value), written by user
/// space: `open_ns` before the switch programs attach, so every slice they see begins
/// inside it; `close_ns` when the window ends (0: still open). After the close the
/// programs stay attached until the final read but cut slices at `close_ns` and start
/// no new ones, so threads that die meanwhile still hand over their totals.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub open_ns: u64,
    pub close_ns: u64,
}

/// Value of the `TRACKED` map: a thread in the traced set.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tracked {
    pub tgid: u32,
    /// [`TRACK_INHERIT`] when children (new threads and processes) join the set too.
    pub flags: u32,
}

/// Children of this thread are traced as well.
pub const TRACK_INHERIT: u32 = 1;
/// cgroup mode: the thread is past `sched_process_exit`. `cgroup_exit()` then takes it
/// out of its cgroup before its final switch; a switch-out in between keeps it in the
/// set, so the final read waits for its death record (see `account::exiting`).
pub const TRACK_EXITING: u32 = 2;

/// Indices into the per-CPU `DROPS` array: events the programs could not record.
pub mod drop {
    /// `THREADS` was full: a thread's slice could not be recorded.
    pub const THREADS_FULL: u32 = 0;
    /// `EXITED` ring buffer was full: a dead thread's totals were lost.
    pub const EXIT_RINGBUF_FULL: u32 = 1;
    /// `TRACKED` was full: a new child could not be added to the traced set.
    pub const TRACKED_FULL: u32 = 2;
    /// Per-scope histogram map was full.
    pub const HIST_FULL: u32 = 3;
    /// `bpf_perf_event_read_value` failed for a slice counter.
    pub const COUNTER_READ: u32 = 4;
    /// Task-local storage could not be created (out of memory, or the CPU's storage
    /// lock was held by a program this one interrupted, `bpf_task_storage_trylock`) at
    /// a switch-out or a new thread's first wakeup, or a wakeup's time could not be
    /// kept aside either ([`WAKE_ASIDE`] full): a slice or a wait was not counted.
    pub const STORAGE: u32 = 5;
    /// Not a loss: a traced thread left a CPU whose switch-in to it no program saw,
    /// because the switch before it was never reported (see [`UNSEEN_SWITCH_OUT`]).
    /// Its slice, and the wait and off-CPU time that ended at its start, are placed by
    /// the scheduler's own runtime of the slice (`sum_exec_runtime -
    /// prev_sum_exec_runtime`), as if seen. Where the wakeup that began the wait went
    /// unseen too (on the 6.18 Firecracker guest a sleeper's hrtimer wakeup in the
    /// interrupt of a guest-agent thread, which then switched to it unseen: 1-2 times
    /// in 700 sleeps, ftrace showing the wakeup), the wait is what `sched_info.run_delay`
    /// grew by since the thread blocked (see [`crate::slice::unseen_wait`]).
    pub const UNSEEN_SWITCH_IN: u32 = 6;
    /// A traced task's slice that is lost: the kernel switched it out without the
    /// sched_switch tracepoint (seen on a 6.18 Firecracker guest kernel for the guest
    /// agent's threads, PID 1: ftrace's own sched_switch event never shows them as
    /// `prev` either), so no program saw it leave.
    pub const UNSEEN_SWITCH_OUT: u32 = 7;
    /// Not a loss: a wakeup could not create the woken thread's task storage, because
    /// BPF's per-CPU allocator had nothing free (`bpf_mem_alloc` refills from an
    /// irq_work, which cannot run inside the interrupt: hrtimer wakeups of threads asleep
    /// since before the window, under thread churn, 2026-12-06). The wakeup's time is
    /// kept aside (`WAKE_ASIDE`, by TID) and the wait timed from it at the switch-in.
    pub const WAKE_ASIDE: u32 = 8;
    pub const COUNT: u32 = 9;
}

/// Which threads are accounted.
pub mod filter {
    /// Every thread on the system (idle tasks excluded).
    pub const ALL: u32 = 0;
    /// Only threads in the `TRACKED` map.
    pub const TRACKED: u32 = 1;
    /// Threads in the cgroup v2 directory of `Accounting::cgroup_id` or below it (only in it
    /// with `Accounting::cgroup_node_only`), checked at every switch-out; `TRACKED` caches
    /// the members for the programs that see other tasks than `current` (wakeups).
    pub const CGROUP: u32 = 2;
}

/// Which histogram scope is kept.
pub mod scope {
    /// One set of histograms for the whole traced set (per-CPU array).
    pub const ALL: u32 = 0;
    /// Per process (keyed by TGID).
    pub const PROCESS: u32 = 1;
    /// Per thread (keyed by TID).
    pub const THREAD: u32 = 2;
}

/// Load-time configuration, written into the programs' `.rodata` before load.
///
/// Task field offsets come from kernel BTF and tracepoint field offsets from tracefs
/// format files, both resolved at run time; nothing here is a build-time constant.
/// Grouped by where the values come from; [`Config::ZERO`] is the placeholder the
/// programs are built with.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub mode: Accounting,
    pub task: TaskOffsets,
    pub tp: TracepointOffsets,
    pub record: RecordConfig,
}

impl Config {
    pub const ZERO: Config = Config {
        mode: Accounting::ZERO,
        task: TaskOffsets::ZERO,
        tp: TracepointOffsets::ZERO,
        record: RecordConfig::ZERO,
    };
}

/// What is accounted, and how: the command's options.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Accounting {
    /// cgroup v2 id to trace with [`filter::CGROUP`].
    pub cgroup_id: u64,
    /// One of [`filter`].
    pub filter: u32,
    /// One of [`scope`].
    pub hist_scope: u32,
    /// Number of slice counters in `SLICE_COUNTERS` (0..=MAX_SLICE_COUNTERS).
    pub n_counters: u32,
    /// 1: wakeup and preemption times are kept in task-local storage (`RUNNABLE`), read
    /// at switch-in (tp_btf mode: every program has trusted task pointers).
    pub use_task_storage: u32,
    /// 1: per-process/thread histograms count each value in the bucket of its power of
    /// two (`tracer serve`, whose classic bounds are powers of two and which keeps a
    /// histogram for every process: ~7x fewer `HIST_SCOPED` entries per process).
    pub hist_pow2: u32,
    /// `filter::CGROUP`: 1 traces the cgroup alone, 0 (default) it and every cgroup
    /// below it (`bpf_current_task_under_cgroup` against `CGROUP_TARGET`).
    pub cgroup_node_only: u32,
    /// 1: every switch-out writes the thread's cgroup v2 id into its entry
    /// (`ThreadStats::cgroup_id`; `tracer serve`). 0 for the other commands, whose
    /// programs the verifier then walks without the helper call.
    pub thread_cgroup: u32,
    /// 1: per-process histograms are kept per thread in task storage (`TASK_HIST`,
    /// `hist::ThreadHist`) and folded in user space, instead of in `HIST_SCOPED`: no
    /// hash lookup per switch (`tracer serve` in task-storage mode).
    pub hist_in_task: u32,
}

impl Accounting {
    pub const ZERO: Accounting = Accounting {
        cgroup_id: 0,
        filter: 0,
        hist_scope: 0,
        n_counters: 0,
        use_task_storage: 0,
        hist_pow2: 0,
        cgroup_node_only: 0,
        thread_cgroup: 0,
        hist_in_task: 0,
    };
}

/// Offsets in `struct task_struct` (and the structs it points to), from BTF; 0: unknown.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskOffsets {
    pub pid: u32,
    pub tgid: u32,
    pub comm: u32,
    /// `__state`, read by perf-sched mode whose hooks carry no state.
    pub state: u32,
    /// `se.sum_exec_runtime` (0: slices are timed with bpf_ktime_get_ns only).
    pub sum_exec: u32,
    /// `se.prev_sum_exec_runtime`: the runtime at the running slice's switch-in, so a
    /// slice begun before the programs attached is counted from the later of that
    /// switch-in and the window's opening.
    pub prev_sum_exec: u32,
    /// `sched_info.run_delay` (0: unknown, or a mode without task pointers): run-queue
    /// waits are then timed from the wakeup tracepoints.
    pub run_delay: u32,
    /// `sched_info.run_delay` read at a traced thread's blocked switch-out where waits
    /// come from the wakeups (0: unknown): the base of a wait whose wakeup and switch-in
    /// no program saw (see [`drop::UNSEEN_SWITCH_IN`] and [`slice::unseen_wait`]).
    pub wait_base: u32,
    /// `prio` and the task's CPU (`thread_info.cpu` or `task_struct::cpu`), read only
    /// when recording.
    pub prio: u32,
    pub cpu: u32,
    /// `task_struct::signal` and `signal_struct::group_exec_task`: a dying leader whose
    /// TID an exec from another thread takes keeps its traced-set entry for that thread.
    pub signal: u32,
    pub signal_exec_task: u32,
    /// Bits of the tp_btf/raw_tp `prev_state` argument meaning TASK_DEAD.
    pub dead_mask: u32,
    /// `task_struct::on_cpu` (0: not asked; CONFIG_SMP only): in tp_btf mode a wakeup
    /// tests it (a plain load) for whether it starts a wait (see
    /// [`slice::wakeup_starts_wait_on_cpu`]).
    pub on_cpu: u32,
}

impl TaskOffsets {
    pub const ZERO: TaskOffsets = TaskOffsets {
        pid: 0,
        tgid: 0,
        comm: 0,
        state: 0,
        sum_exec: 0,
        prev_sum_exec: 0,
        run_delay: 0,
        wait_base: 0,
        prio: 0,
        cpu: 0,
        signal: 0,
        signal_exec_task: 0,
        dead_mask: 0,
        on_cpu: 0,
    };
}

/// Offsets in the classic tracepoint records, from tracefs `format` files (classic
/// tracepoint mode only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracepointOffsets {
    pub switch_prev_state: u32,
    /// Size in bytes of `prev_state` in the record (8 for `long`).
    pub switch_prev_state_size: u32,
    pub switch_next_pid: u32,
    pub switch_next_comm: u32,
    pub wakeup_pid: u32,
    pub fork_child_pid: u32,
    /// `prev_state` bits meaning the task is dead (EXIT_DEAD|EXIT_ZOMBIE).
    pub dead_mask: u32,
    /// `prev_state` bits meaning the task blocked (TASK_REPORT).
    pub blocked_mask: u32,
    /// `pid` and `runtime` in `sched_stat_runtime`, whose deltas are the scheduler's
    /// own accounting (0: not used).
    pub runtime_pid: u32,
    pub runtime_val: u32,
    /// `sched_process_exec`: `pid` (the TID after exec) and `old_pid` (before: a
    /// non-main thread that execs takes the leader's TID).
    pub exec_pid: u32,
    pub exec_old_pid: u32,
}

impl TracepointOffsets {
    pub const ZERO: TracepointOffsets = TracepointOffsets {
        switch_prev_state: 0,
        switch_prev_state_size: 0,
        switch_next_pid: 0,
        switch_next_comm: 0,
        wakeup_pid: 0,
        fork_child_pid: 0,
        dead_mask: 0,
        blocked_mask: 0,
        runtime_pid: 0,
        runtime_val: 0,
        exec_pid: 0,
        exec_old_pid: 0,
    };
}

/// `tracer record` and `tracer slow`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordConfig {
    /// `tracer slow`: the shortest wait sent, ns.
    pub slow_min_ns: u64,
    /// What is streamed through `EVENTS`: bits of [`record::on`] (0 for `tracer run`).
    pub on: u32,
    /// Offset of `linux_binprm::filename` (the exec's path, recorded only).
    pub bprm_filename: u32,
}

impl RecordConfig {
    pub const ZERO: RecordConfig = RecordConfig {
        slow_min_ns: 0,
        on: 0,
        bprm_filename: 0,
    };
}

// Layout checks: both sides depend on these sizes.
const _: () = assert!(core::mem::size_of::<ThreadStats>() == 200);
const _: () = assert!(core::mem::size_of::<ExitRecord>() == 208);
const _: () = assert!(core::mem::size_of::<hist::ThreadHist>() == 944);
const _: () = assert!(core::mem::size_of::<CpuState>() == 88);
const _: () = assert!(core::mem::size_of::<Tracked>() == 8);
const _: () = assert!(core::mem::size_of::<Window>() == 16);
const _: () = assert!(core::mem::size_of::<Config>() == 160);
const _: () = assert!(core::mem::size_of::<hist::HistKey>() == 8);
const _: () = assert!(core::mem::size_of::<cgroup::MkdirEvent>() == 24 + cgroup::PATH_LEN);
const _: () = assert!(core::mem::size_of::<cgroup::MkdirFields>() == 16);
const _: () = assert!(core::mem::size_of::<runqlen::Fields>() == 24);
const _: () = assert!(core::mem::size_of::<runqlen::Hist>() == 16 + 8 * runqlen::SLOTS);
const _: () = assert!(core::mem::size_of::<irq::IrqCpu>() == 64 + 16 * irq::VECS);
const _: () = assert!(core::mem::size_of::<irq::IrqThread>() == 16);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all are #[repr(C)] plain data without implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::ThreadStats {}
    unsafe impl aya::Pod for super::ExitRecord {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::Tracked {}
    unsafe impl aya::Pod for super::Window {}
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::Accounting {}
    unsafe impl aya::Pod for super::TaskOffsets {}
    unsafe impl aya::Pod for super::TracepointOffsets {}
    unsafe impl aya::Pod for super::RecordConfig {}
    unsafe impl aya::Pod for super::hist::HistKey {}
    unsafe impl aya::Pod for super::cgroup::MkdirEvent {}
    unsafe impl aya::Pod for super::cgroup::MkdirFields {}
    unsafe impl aya::Pod for super::runqlen::Fields {}
    unsafe impl aya::Pod for super::runqlen::Hist {}
    unsafe impl aya::Pod for super::irq::IrqCpu {}
    unsafe impl aya::Pod for super::irq::IrqThread {}
}
