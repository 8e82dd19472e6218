//! What every tracing command does around loading its programs, in one place: before,
//! the targets checked, the user a command runs as settled, privileges and the eBPF
//! object checked, the command started held; after attaching, privileges locked to the
//! command's named set and the command let go.
use std::collections::BTreeSet;

use anyhow::{anyhow, Result};

use crate::{
    cmd::targets,
    error::TracerError,
    model::targets::Targets,
    sys::{
        launch::{self, Held},
        privileges, procfs,
        root::Root,
    },
};

/// The run before its programs load.
pub(crate) struct Prepared {
    /// What `-p`'s processes had started when the targets were resolved: left out (as
    /// perf's `-p` does); what they start from here on is traced.
    pub before: BTreeSet<u32>,
    held: Option<Held>,
}

/// Checks the targets and everything cheap before the kernel is touched, then starts
/// the command held (its output to `command_output`, if given).
pub(crate) fn prepare(
    t: &Targets,
    root: &Root,
    command_output: Option<std::fs::File>,
) -> Result<Prepared> {
    if !t.command.is_empty() && (!t.pids.is_empty() || !t.tids.is_empty()) {
        return Err(anyhow!("give either -- COMMAND or -p/-t targets, not both"));
    }
    // Who the command runs as is settled before anything is attached: a SUDO_UID that
    // cannot be honoured is an error, not a command run as root.
    let as_user = if t.command.is_empty() || t.as_root {
        None
    } else {
        privileges::sudo_user()?
    };
    for &pid in &t.pids {
        procfs::threads_of(root, pid)?;
        if !procfs::watch_process(root, pid).is_some_and(|w| procfs::still_alive(root, &w)) {
            return Err(TracerError::AlreadyExited {
                what: "PID",
                id: pid,
            }
            .into());
        }
    }
    for &tid in &t.tids {
        procfs::tgid_of(root, tid)?;
        if !procfs::watch_thread(root, tid).is_some_and(|w| procfs::still_alive(root, &w)) {
            return Err(TracerError::AlreadyExited {
                what: "TID",
                id: tid,
            }
            .into());
        }
    }
    let before = if t.pids.is_empty() {
        BTreeSet::new()
    } else {
        targets::descendants(root, &t.pids)
    };
    privileges::check()?;
    let held = if t.command.is_empty() {
        None
    } else {
        Some(launch::spawn_held(&t.command, as_user, command_output)?)
    };
    Ok(Prepared { before, held })
}

impl Prepared {
    /// The held command's PID.
    pub(crate) fn child(&self) -> Option<u32> {
        self.held.as_ref().map(|h| h.pid)
    }

    /// Loading failed with `e`: the held command is killed, never run untraced. When it
    /// had already ended (killed from outside while held), the error says so first:
    /// alone, "no such process: PID N" did not say it was the command.
    pub(crate) fn abort(self, e: anyhow::Error) -> anyhow::Error {
        match self.held.and_then(|h| {
            let pid = h.pid;
            h.abort().map(|st| (pid, st))
        }) {
            Some((pid, st)) => e.context(format!(
                "the command (PID {pid}) ended before it was started ({})",
                st.describe()
            )),
            None => e,
        }
    }

    /// Attached: privileges locked to `keep` (a failure is a notice, the run goes on),
    /// then the command let go. Returns its PID.
    pub(crate) fn go(
        self,
        keep: privileges::Keep,
        argv: &[String],
        notices: &mut Vec<String>,
    ) -> Result<Option<u32>> {
        if let Err(e) = privileges::after_attach(keep) {
            notices.push(format!("could not lock privileges after attaching: {e}"));
        }
        // Loading indexed the kernel's BTF and parsed the object and the attach-id stub
        // (several MiB, now free; aya's own parse of the BTF, where it still happens, more).
        crate::sys::heap::give_back();
        match self.held {
            Some(h) => Ok(Some(h.release(argv)?)),
            None => Ok(None),
        }
    }
}
