//! Task events as the ftrace events Perfetto defines for them.
use super::pb;
use crate::model::events::{TaskChange, TaskEv};

/// A task event as the ftrace event Perfetto defines for it (the kernel's own
/// tracepoint of the same name has the same fields).
pub(super) fn ftrace_event(ts: u64, t: &TaskEv) -> pb::FtraceEvent {
    let mut e = pb::FtraceEvent {
        timestamp: Some(ts),
        pid: Some(t.actor_tid),
        ..Default::default()
    };
    let (tid, comm) = (Some(t.tid as i32), Some(t.comm.clone()));
    match &t.change {
        TaskChange::New { clone_flags } => {
            e.task_newtask = Some(pb::TaskNewtask {
                pid: tid,
                comm,
                clone_flags: Some(*clone_flags),
            })
        }
        TaskChange::Rename { old_comm } => {
            e.task_rename = Some(pb::TaskRename {
                pid: tid,
                oldcomm: Some(old_comm.clone()),
                newcomm: comm,
            })
        }
        TaskChange::Exec { old_tid, filename } => {
            e.sched_process_exec = Some(pb::SchedProcessExec {
                filename: Some(filename.clone()),
                pid: tid,
                old_pid: Some(*old_tid as i32),
            })
        }
        TaskChange::Exit => {
            e.sched_process_exit = Some(pb::SchedProcessExit {
                comm,
                pid: tid,
                tgid: Some(t.tgid as i32),
                prio: Some(t.prio),
            })
        }
        TaskChange::Migrate { orig_cpu, dest_cpu } => {
            e.sched_migrate_task = Some(pb::SchedMigrateTask {
                comm,
                pid: tid,
                prio: Some(t.prio),
                orig_cpu: Some(*orig_cpu as i32),
                dest_cpu: Some(*dest_cpu as i32),
            })
        }
    }
    e
}
