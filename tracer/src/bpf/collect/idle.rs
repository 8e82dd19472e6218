//! The traced threads a read has no slice for: those asleep all window (listed from
//! /proc), and those that left a `--cgroup` target, which the kernel's entries still
//! hold as they were at their last switch-out inside it.
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::snapshot::{ThreadKey, ThreadRecord};
use crate::model::window::never_ran;
use crate::sys::{birth::Births, procfs, root::Root};

/// The threads a read lists although no program saw them run: they were off-CPU all
/// window, which is what `--sort off-cpu` is for. A thread born since the opening has
/// an entry from its first wakeup, so only those alive at the opening are listed.
#[derive(Clone, Debug, Default)]
pub enum IdleThreads {
    /// None (`tracer serve`, whose series are per cgroup and process).
    #[default]
    None,
    /// The traced set's threads as seeded from /proc when the window opened.
    Seeded(HashSet<u32>),
    /// Every thread of the machine (system-wide), from /proc at each read.
    All,
}

/// A `--cgroup` target's threads now (its directory and, unless node-only, those below).
pub type Members = Box<dyn Fn() -> HashSet<u32> + Send>;

/// Which threads are alive outside the target now (`members`: None, not a cgroup
/// target). The programs do not time a move (they learn of it at the thread's next
/// switch-out), so such a thread's open off-CPU period, or its slice running now, is
/// not the target's to count up to the read: it is left at its last switch-out inside.
pub struct Left {
    members: Option<HashSet<u32>>,
    /// The TIDs found outside in this read.
    pub found: HashSet<u32>,
}

impl Left {
    pub fn read(members: Option<&Members>) -> Left {
        Left {
            members: members.map(|f| f()),
            found: HashSet::new(),
        }
    }

    /// Whether `tid` left the target (alive, not a member now).
    pub fn is_out(&self, root: &Root, tid: u32) -> bool {
        // Not listed, and alive and not exiting: an exiting thread leaves
        // cgroup.threads before its final switch (`cgroup_exit()`), and is no leaver
        // (torture seed 665069: one taken for a leaver lost its slice at the close).
        self.members
            .as_ref()
            .is_some_and(|m| !m.contains(&tid) && procfs::thread_alive_not_exiting(root, tid))
    }

    /// [`Left::is_out`], remembered in `found`.
    pub fn check(&mut self, root: &Root, tid: u32) -> bool {
        let out = self.is_out(root, tid);
        if out {
            self.found.insert(tid);
        }
        out
    }

    /// Ends the open off-CPU periods of the threads that left at their last switch-out
    /// (before [`crate::model::window::add_open_off_periods`]).
    pub fn close_open_periods(
        &mut self,
        root: &Root,
        threads: &mut BTreeMap<ThreadKey, ThreadRecord>,
    ) {
        if self.members.is_none() {
            return;
        }
        for r in threads.values_mut() {
            if !r.exited && r.folded == 0 && self.check(root, r.tid) {
                r.stats.last_off_ns = 0;
            }
        }
    }
}

/// Adds the threads of `idle` with no entry, no record and no slice on a CPU: alive (and
/// still in the target), they were off-CPU all window.
#[allow(clippy::too_many_arguments)]
pub fn add_never_ran(
    idle: &IdleThreads,
    root: &Root,
    open_ns: u64,
    generations: &HashMap<u32, u32>,
    threads: &mut BTreeMap<ThreadKey, ThreadRecord>,
    live: &HashMap<u32, ThreadKey>,
    on_cpu: &HashMap<u32, u64>,
    end: u64,
    left: &mut Left,
    births: &mut Births,
) {
    let candidates: Vec<(u32, u32)> = match idle {
        IdleThreads::None => return,
        IdleThreads::Seeded(set) => set.iter().map(|&t| (0, t)).collect(),
        IdleThreads::All => procfs::all_threads(root),
    };
    let seen: HashSet<u32> = threads.values().map(|r| r.tid).collect();
    // A thread started within a clock tick of the opening may have been born after
    // it (and then has an entry, or is about to): not listed.
    let tick = crate::sys::birth::precision_ns();
    for (tgid, tid) in candidates {
        if live.contains_key(&tid) || on_cpu.contains_key(&tid) || seen.contains(&tid) {
            continue;
        }
        if matches!(idle, IdleThreads::All)
            && births.get(root, tid).is_none_or(|b| b + tick > open_ns)
        {
            continue;
        }
        // Gone: it exited before the window. Moved out of a --cgroup target: when is
        // not known, so none of its sleep is claimed (counted in `left`).
        let Some(name) = procfs::comm(root, tid, tid) else {
            continue;
        };
        if left.check(root, tid) {
            continue;
        }
        let mut comm = [0u8; 16];
        super::set_comm(&mut comm, &name);
        let tgid = if tgid != 0 {
            tgid
        } else {
            procfs::tgid_of(root, tid).unwrap_or(0)
        };
        let key = (tid, generations.get(&tid).copied().unwrap_or(0));
        threads.insert(key, never_ran(tid, tgid, comm, open_ns, end));
    }
}
