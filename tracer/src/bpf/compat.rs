//! Every kernel quirk the tracer depends on, in one place, each naming the kernel change
//! behind it. Values that differ between kernels are resolved at run time (BTF, tracefs);
//! what is here are ABI constants and feature tests.
use crate::sys::btf::KernelBtf;

/// `TASK_DEAD` in `task_struct::__state`, as passed to the tp_btf/raw_tp `sched_switch`
/// `prev_state` argument. 0x80 since v4.14 ("sched/core: Remove TASK_ALL" renumbered the
/// states; before it TASK_DEAD was 0x40). The tracer needs 5.18+ for the BTF modes anyway.
pub const TASK_DEAD: u32 = 0x80;

/// The classic `sched_switch` tracepoint reports `prev_state` through
/// `__trace_sched_switch_state()`: a preempted task shows `TASK_REPORT_MAX` (0x100 since
/// v4.14 added TASK_REPORT_IDLE = 0x80), a blocked one a bit of `TASK_REPORT` (0x7f) or
/// TASK_REPORT_IDLE, a dying one `EXIT_DEAD` (0x10) or `EXIT_ZOMBIE` (0x20) from
/// `exit_state`.
pub const TP_STATE_BLOCKED_MASK: u32 = 0xff;
pub const TP_STATE_DEAD_MASK: u32 = 0x10 | 0x20;

/// The tp_btf/raw_tp `sched_switch` prototype gained `unsigned int prev_state` in v5.18
/// (commit fa2c3254d7cf "sched/tracing: Don't re-read p->state when emitting sched_switch
/// event"): `btf_trace_sched_switch` then has 5 parameters (the first is `void *__data`).
/// Before that the programs would have to re-read `prev->__state`, racy by design; those
/// kernels use the classic tracepoint mode instead.
pub fn sched_switch_has_prev_state(btf: &KernelBtf) -> bool {
    btf.typedef_proto_params("btf_trace_sched_switch")
        .is_some_and(|n| n >= 5)
}

/// Offsets of `task_struct::signal` and of the exec'ing thread in `signal_struct`, which
/// `de_thread()` sets before it kills the other threads: `group_exec_task` since v5.16
/// ("signal: Rename group_exit_task group_exec_task"),
/// `group_exit_task` before. (0, 0) when BTF lacks them.
pub fn exec_task_offsets(btf: &KernelBtf) -> (u32, u32) {
    let member = ["group_exec_task", "group_exit_task"]
        .into_iter()
        .find_map(|m| btf.member_offset("signal_struct", m).ok());
    match (btf.member_offset("task_struct", "signal"), member) {
        (Ok(s), Some(e)) => (s, e),
        _ => (0, 0),
    }
}

/// `task_struct::state` was renamed `__state` in v5.14 (commit 2f064a59a11f "sched: Change
/// task_struct::state"); perf-sched mode reads it directly since its hooks carry no state.
pub fn task_state_member(btf: &KernelBtf) -> &'static str {
    if btf.has_member("task_struct", "__state") {
        "__state"
    } else {
        "state"
    }
}

/// Offset of `task_struct::sched_info.run_delay`, the scheduler's total run-queue wait
/// of a task (schedstat's second field), or None without CONFIG_SCHED_INFO. It is kept
/// whenever the config is on since v5.14 (commit c5895d3f06cb "sched: Simplify
/// sched_info_on()"; before, only with schedstats or delay accounting enabled) — older
/// than the 5.18 the BTF modes need. `sched_info_arrive()` adds a wait in
/// `prepare_task_switch()`, after the sched_switch tracepoint and before perf's
/// sched-out hook, so the switch-out of a slice sees the wait that preceded it.
/// Since v6.12 ("sched/fair: Implement delayed dequeue", EEVDF) a thread that blocks
/// can stay queued; when the load balancer moves it asleep, the enqueue on the new CPU
/// stamps `last_queued`, and run_delay counts the rest of its sleep as waiting (seen on
/// 6.18: 81 ms of a sleeper's, torture seed 998066). Waits timed from wakeups are not
/// affected; `--runq-from schedstat` and the wait of an unseen wakeup
/// (`slice::unseen_wait`) are.
pub fn run_delay_offset(btf: &KernelBtf) -> Option<u32> {
    Some(
        btf.member_offset("task_struct", "sched_info").ok()?
            + btf.member_offset("sched_info", "run_delay").ok()?,
    )
}

/// Whether task-local storage may be created from sched_switch and sched_wakeup, where
/// the run queue lock is held with interrupts off. Since v6.4 (commit 08a7ce384e33 "bpf:
/// Use bpf_mem_cache_alloc/free in bpf_local_storage_elem", which added
/// `bpf_local_storage_map::selem_ma`) elements come from BPF's own per-CPU allocator,
/// which never sleeps or wakes anyone and fails cleanly (counted as
/// `task_storage_failed`). Before it they came from kmalloc with memcg charging, which
/// may wake a worker and so take a run queue lock: a Debian 6.1 guest hung in one of
/// three test runs with storage created there. Those kernels keep the `THREADS` hash.
pub fn task_storage_safe_in_scheduler(btf: &KernelBtf) -> bool {
    btf.has_member("bpf_local_storage_map", "selem_ma")
}

/// Whether fentry programs attach to kernel functions here, tried with `attach_detach`
/// (the hooks run only while a per-task perf event is open, so the moment attached is
/// harmless). A BPF trampoline on a kernel function needs ftrace direct calls
/// (CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS): x86_64 has them since v5.5, arm64 only
/// since v6.4 (commit 2aa6ac03516d "arm64: ftrace: Add direct call support"). Without
/// them the verifier loads the program and only the attach fails, with ENOTSUPP (524,
/// kernel-internal, so strerror has no name for it): the caller then uses kprobes.
pub fn fentry_attachable(attach_detach: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    /// The kernel's ENOTSUPP (include/linux/errno.h), not user space's ENOTSUP.
    const ENOTSUPP: i32 = 524;
    attach_detach().map_err(|e| {
        let unsupported = e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.raw_os_error() == Some(ENOTSUPP))
                || c.to_string().contains("os error 524")
        });
        if unsupported {
            e.context("fentry does not attach to kernel functions here (no ftrace direct calls: arm64 before 6.4)")
        } else {
            e
        }
    })
}

/// The perf context-switch hooks: `__perf_event_task_sched_out(prev, next)` and
/// `__perf_event_task_sched_in(prev, task)`. They only run while the `perf_sched_events`
/// static key is on, which any per-task perf event turns on (kernel/events/core.c,
/// `account_event()`), so perf-sched mode keeps a dummy per-task event open.
pub const PERF_SCHED_OUT: &str = "__perf_event_task_sched_out";
pub const PERF_SCHED_IN: &str = "__perf_event_task_sched_in";

/// The fair class is EEVDF since v6.6 (commit 147f3efaa241 "sched/fair: Implement an
/// EEVDF-like scheduling policy"), which gave `sched_entity` its `deadline` and `vlag`;
/// CFS before. EEVDF's features (`PLACE_LAG`, from commit 86bfbb7ce4f6 "sched/fair: Add
/// lag based placement" in the same series) tell it without BTF.
pub fn fair_class_is_eevdf(btf: &KernelBtf) -> bool {
    btf.has_member("sched_entity", "deadline") && btf.has_member("sched_entity", "vlag")
}

/// Delayed dequeue came in v6.12 (commit 152e11f6df29 "sched/fair: Implement delayed
/// dequeue", scheduler feature DELAY_DEQUEUE, on by default): a fair task that blocks
/// with negative lag stays on the run queue (`sched_entity::sched_delayed`) until it is
/// picked or woken. Without the field the kernel cannot delay a dequeue, whatever
/// debugfs says.
pub fn can_delay_dequeue(btf: &KernelBtf) -> bool {
    btf.has_member("sched_entity", "sched_delayed")
}

/// The scheduler features (`NO_` before those off) are in debugfs `sched/features`
/// since v5.13 (commit 8a99b6833c88 "sched: Move SCHED_DEBUG sysctl to debugfs"),
/// `sched_features` before; only with CONFIG_SCHED_DEBUG until v6.15 (commit
/// dd5bdaf2b72d "sched/debug: Make CONFIG_SCHED_DEBUG functionality unconditional").
pub const SCHED_FEATURES: [&str; 2] = [
    "/sys/kernel/debug/sched/features",
    "/sys/kernel/debug/sched_features",
];

/// sched_ext (v6.12, commit f0e1a0643a59 "sched_ext: Implement BPF extensible scheduler
/// class") says its state in `state` (prepping, enabling, enabled, disabling, disabled),
/// whether it runs every fair task in `switch_all`, and the loaded scheduler's name in
/// `root/ops` while one is loaded.
pub const SCHED_EXT_DIR: &str = "/sys/kernel/sched_ext";

/// `--runqlen`'s fields: the CPU's run queue through `current->se.cfs_rq->rq` (both
/// members exist only with CONFIG_FAIR_GROUP_SCHED, which every systemd distribution
/// enables), its `nr_running`, and how many of them sleep but stay queued since delayed
/// dequeue (v6.12, above): v6.14 counts them as `cfs_rq.h_nr_queued` less
/// `h_nr_runnable` ("sched/fair: Add new cfs_rq.h_nr_runnable", with
/// `h_nr_running` renamed `h_nr_queued`), v6.13 kept `h_nr_delayed` ("sched/eevdf: More
/// PELT vs DELAYED_DEQUEUE"), v6.12 none. The flag says whether delayed tasks are told
/// apart (false on 6.12: they count as waiting).
/// Whether the kernel keeps interrupt time out of tasks' runtime (and so out of
/// `sum_exec_runtime` and schedstat): `CONFIG_IRQ_TIME_ACCOUNTING` (2.6.37), whose
/// `struct rq` has `prev_irq_time`. Compiled in, it can still be off at boot (x86
/// turns it off with an unstable TSC), which BTF cannot tell.
pub fn irq_time_apart(btf: &KernelBtf) -> bool {
    btf.has_member("rq", "prev_irq_time")
}

pub fn runqlen_fields(
    btf: &KernelBtf,
) -> Result<(tracer_common::runqlen::Fields, bool), crate::error::TracerError> {
    let off = |s: &str, m: &str| btf.member_offset(s, m);
    let rq_cfs = off("rq", "cfs")?;
    let in_cfs = |m: &str| off("cfs_rq", m).ok().map(|o| rq_cfs + o).unwrap_or(0);
    let mut f = tracer_common::runqlen::Fields {
        task_cfs_rq: off("task_struct", "se")? + off("sched_entity", "cfs_rq")?,
        cfs_rq_rq: off("cfs_rq", "rq")?,
        rq_nr_running: off("rq", "nr_running")?,
        ..Default::default()
    };
    let told = match (in_cfs("h_nr_queued"), in_cfs("h_nr_runnable")) {
        (queued, runnable) if queued != 0 && runnable != 0 => {
            (f.rq_cfs_queued, f.rq_cfs_runnable) = (queued, runnable);
            true
        }
        _ if btf.has_member("cfs_rq", "h_nr_delayed") => {
            f.rq_cfs_delayed = in_cfs("h_nr_delayed");
            true
        }
        _ => !can_delay_dequeue(btf),
    };
    Ok((f, told))
}
