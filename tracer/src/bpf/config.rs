//! The programs' configuration for each probe mode, resolved at load time: field offsets
//! and checks from the kernel's BTF, or from tracefs format files in tracepoint mode, and
//! where run-queue waits come from. No offset is hard-coded.
use anyhow::{anyhow, Result};
use tracer_common::Config;

use crate::model::targets::{Filter, HistScope};

use crate::{
    bpf::compat,
    model::options::{ProbeMode, RunqFrom, RunqSource},
    sys::btf::VMLINUX_BTF,
    sys::{btf::KernelBtf, root::Root, tracefs},
};

/// Fills the task_struct offsets from kernel BTF (tp_btf and raw_tp modes).
pub(super) fn btf_config(cfg: &mut Config, kbtf: &KernelBtf) -> Result<()> {
    if !compat::sched_switch_has_prev_state(kbtf) {
        return Err(anyhow!(
            "this kernel's sched_switch tracepoint has no prev_state argument (before 5.18)"
        ));
    }
    cfg.task.pid = kbtf.member_offset("task_struct", "pid")?;
    cfg.task.tgid = kbtf.member_offset("task_struct", "tgid")?;
    cfg.task.comm = kbtf.member_offset("task_struct", "comm")?;
    // Absent without CONFIG_SMP: a wakeup then asks `current`'s TID.
    cfg.task.on_cpu = kbtf.member_offset("task_struct", "on_cpu").unwrap_or(0);
    cfg.task.dead_mask = compat::TASK_DEAD;
    cfg.task.sum_exec = sum_exec_offset(kbtf).unwrap_or(0);
    cfg.task.prev_sum_exec = prev_sum_exec_offset(kbtf).unwrap_or(0);
    (cfg.task.signal, cfg.task.signal_exec_task) = compat::exec_task_offsets(kbtf);
    Ok(())
}

/// `task_struct.se.sum_exec_runtime`: the scheduler's runtime, read at switch-out.
pub(super) fn sum_exec_offset(kbtf: &KernelBtf) -> Result<u32> {
    Ok(kbtf.member_offset("task_struct", "se")?
        + kbtf.member_offset("sched_entity", "sum_exec_runtime")?)
}

/// `task_struct.se.prev_sum_exec_runtime`: the runtime at the running slice's switch-in.
pub(super) fn prev_sum_exec_offset(kbtf: &KernelBtf) -> Result<u32> {
    Ok(kbtf.member_offset("task_struct", "se")?
        + kbtf.member_offset("sched_entity", "prev_sum_exec_runtime")?)
}

/// Decides where run-queue waits come from and sets `cfg` for it. Task-local storage
/// needs trusted task pointers in every program that touches it: tp_btf only (raw_tp
/// arguments are plain numbers; perf-sched may end up on kprobes), and a kernel whose
/// storage can be allocated from the scheduler (`storage_ok`).
pub(super) fn runq_source(
    mode: ProbeMode,
    from: RunqFrom,
    storage_ok: bool,
    cfg: &mut Config,
) -> Result<RunqSource> {
    Ok(match (from, mode) {
        (RunqFrom::Schedstat, ProbeMode::Tracepoint) => {
            return Err(anyhow!(
                "--runq-from schedstat needs task pointers (tp-btf, raw-tp or perf-sched mode)"
            ))
        }
        (RunqFrom::Schedstat, _) => RunqSource::RunDelay,
        (RunqFrom::Wakeup, ProbeMode::TpBtf) if storage_ok => {
            cfg.mode.use_task_storage = 1;
            RunqSource::TaskStorage
        }
        (RunqFrom::Wakeup, _) => RunqSource::ThreadEntry,
    })
}

/// Fills the record offsets from tracefs format files (classic tracepoint mode).
pub(super) fn tracefs_config(cfg: &mut Config, root: &Root) -> Result<()> {
    let dir = tracefs::tracefs_dir(root)?;
    let sw = tracefs::event_format(&dir, "sched", "sched_switch")?;
    let st = sw.field("prev_state")?;
    cfg.tp.switch_prev_state = st.offset;
    cfg.tp.switch_prev_state_size = st.size;
    cfg.tp.switch_next_pid = sw.field("next_pid")?.offset;
    cfg.tp.switch_next_comm = sw.field("next_comm")?.offset;
    let wk = tracefs::event_format(&dir, "sched", "sched_wakeup")?;
    cfg.tp.wakeup_pid = wk.field("pid")?.offset;
    let wn = tracefs::event_format(&dir, "sched", "sched_wakeup_new")?;
    if wn.field("pid")?.offset != cfg.tp.wakeup_pid {
        return Err(anyhow!(
            "sched_wakeup and sched_wakeup_new records differ in layout"
        ));
    }
    let ex = tracefs::event_format(&dir, "sched", "sched_process_exec")?;
    cfg.tp.exec_pid = ex.field("pid")?.offset;
    cfg.tp.exec_old_pid = ex.field("old_pid")?.offset;
    let fk = tracefs::event_format(&dir, "sched", "sched_process_fork")?;
    cfg.tp.fork_child_pid = fk.field("child_pid")?.offset;
    // Slices follow the scheduler's own accounting: with kernel BTF through
    // se.sum_exec_runtime, else through the sched_stat_runtime tracepoint.
    if let Ok(kbtf) = KernelBtf::from_file(&root.path(VMLINUX_BTF)) {
        cfg.task.sum_exec = sum_exec_offset(&kbtf).unwrap_or(0);
        cfg.task.prev_sum_exec = prev_sum_exec_offset(&kbtf).unwrap_or(0);
        (cfg.task.signal, cfg.task.signal_exec_task) = compat::exec_task_offsets(&kbtf);
        cfg.task.wait_base = compat::run_delay_offset(&kbtf).unwrap_or(0);
    }
    if cfg.task.sum_exec == 0 {
        if let Ok(rt) = tracefs::event_format(&dir, "sched", "sched_stat_runtime") {
            if let (Ok(pid), Ok(val)) = (rt.field("pid"), rt.field("runtime")) {
                if val.size == 8 {
                    cfg.tp.runtime_pid = pid.offset;
                    cfg.tp.runtime_val = val.offset;
                }
            }
        }
    }
    cfg.tp.dead_mask = compat::TP_STATE_DEAD_MASK;
    cfg.tp.blocked_mask = compat::TP_STATE_BLOCKED_MASK;
    Ok(())
}

/// The kernel ABI's value of a [`Filter`] (`tracer_common::filter`): only `bpf/` speaks it.
pub fn filter_abi(f: Filter) -> u32 {
    match f {
        Filter::All => tracer_common::filter::ALL,
        Filter::Traced => tracer_common::filter::TRACKED,
        Filter::Cgroup => tracer_common::filter::CGROUP,
    }
}

/// The kernel ABI's value of a [`HistScope`] (`tracer_common::scope`).
pub fn scope_abi(s: HistScope) -> u32 {
    match s {
        HistScope::All => tracer_common::scope::ALL,
        HistScope::Process => tracer_common::scope::PROCESS,
        HistScope::Thread => tracer_common::scope::THREAD,
    }
}
