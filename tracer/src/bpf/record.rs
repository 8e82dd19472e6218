//! The event stream of `tracer record` and `tracer slow`: what the programs send through
//! the `EVENTS` ring buffer (configured here), its per-CPU counts. Decoding is
//! `model::events`, the writers `output::perfetto` and `output::slow`, the command loops
//! `cmd::record` and `cmd::slow`, which run inside `tracer run`'s session through
//! `cmd::run::hook`.
use anyhow::{anyhow, Result};
use tracer_common::Config;

use crate::{
    model::options::{ProbeMode, RunqSource},
    sys::root::Root,
};

/// What the programs stream through the `EVENTS` ring buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordLoad {
    /// Bits of `tracer_common::record::on`; 0: nothing, the ring buffer stays one page.
    pub on: u32,
    pub slow_min_ns: u64,
    /// Ring buffer size in bytes (a power of two, at least a page).
    pub buffer_bytes: u32,
}

/// Sets the record fields of the programs' configuration: what to stream, the threshold,
/// and the task offsets only these events read. Needs task pointers (tp-btf or raw-tp);
/// `tracer slow` needs waits timed from wakeups.
pub fn config(
    cfg: &mut Config,
    rec: &RecordLoad,
    mode: ProbeMode,
    runq: RunqSource,
    root: &Root,
) -> Result<()> {
    if !matches!(mode, ProbeMode::TpBtf | ProbeMode::RawTp) {
        return Err(anyhow!(
            "recording needs task pointers: probe mode tp-btf or raw-tp, not {}",
            mode.name()
        ));
    }
    if rec.on & (tracer_common::record::on::SLOW_RUNQ) != 0 && runq == RunqSource::RunDelay {
        return Err(anyhow!(
            "tracer slow times waits from wakeups: --runq-from schedstat does not apply"
        ));
    }
    let kbtf = crate::sys::btf::KernelBtf::from_file(&root.path(crate::sys::btf::VMLINUX_BTF))?;
    cfg.record.on = rec.on;
    cfg.record.slow_min_ns = rec.slow_min_ns;
    cfg.task.prio = kbtf.member_offset("task_struct", "prio")?;
    // The exec's path; without it the exec event still has the new comm.
    cfg.record.bprm_filename = kbtf.member_offset("linux_binprm", "filename").unwrap_or(0);
    // The CPU moved from task_struct into thread_info with THREAD_INFO_IN_TASK (5.16).
    cfg.task.cpu = if kbtf.has_member("task_struct", "cpu") {
        kbtf.member_offset("task_struct", "cpu")?
    } else {
        kbtf.member_offset("task_struct", "thread_info")
            .and_then(|o| Ok(o + kbtf.member_offset("thread_info", "cpu")?))
            .unwrap_or(0)
    };
    Ok(())
}

/// The programs only `tracer record` attaches: a task's creation, exit, comm change and
/// migration (exec rides on the exec program every mode has). `tracer run` and `tracer
/// slow` never attach them, so they cost nothing there.
pub fn task_programs(rec: &RecordLoad, mode: ProbeMode) -> Vec<(&'static str, &'static str)> {
    if rec.on & tracer_common::record::on::SCHED == 0 {
        return Vec::new();
    }
    match mode {
        ProbeMode::TpBtf => vec![
            ("rec_newtask_btf", "task_newtask"),
            ("rec_exit_btf", "sched_process_exit"),
            ("rec_rename_btf", "task_rename"),
            ("rec_migrate_btf", "sched_migrate_task"),
        ],
        ProbeMode::RawTp => vec![
            ("rec_newtask_raw", "task_newtask"),
            ("rec_exit_raw", "sched_process_exit"),
            ("rec_rename_raw", "task_rename"),
            ("rec_migrate_raw", "sched_migrate_task"),
        ],
        _ => Vec::new(),
    }
}

/// Per-CPU sums of the `REC_STATS` array: (events sent, events lost), indexed by CPU.
pub fn rec_stats(map: &aya::maps::Map) -> Result<(Vec<u64>, Vec<u64>)> {
    use tracer_common::record::stat;
    let arr: aya::maps::PerCpuArray<_, u64> = aya::maps::PerCpuArray::try_from(map)?;
    let sent = arr.get(&stat::SENT, 0)?.iter().copied().collect();
    let lost = arr.get(&stat::DROPPED, 0)?.iter().copied().collect();
    Ok((sent, lost))
}

/// The window's close (CLOCK_MONOTONIC ns) from the `WINDOW` map, 0 while it is open.
pub fn window_close(ebpf: &aya::Ebpf) -> Result<u64> {
    let map = ebpf
        .map("WINDOW")
        .ok_or_else(|| anyhow!("WINDOW map missing"))?;
    let arr: aya::maps::Array<_, tracer_common::Window> = aya::maps::Array::try_from(map)?;
    Ok(arr.get(&0, 0)?.close_ns)
}
