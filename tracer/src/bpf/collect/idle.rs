//! The traced threads a read has no slice for: those asleep all window (listed from
//! /proc), and those that left a `--cgroup` target, which the kernel's entries still
//! hold as they were at their last switch-out inside it.
use std::collections::{BTreeMap, HashMap, HashSet};

use crate::model::snapshot::{ThreadKey, ThreadRecord};
use crate::model::window::never_ran;
use crate::sys::{procfs, root::Root};

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

/// A thread alive at the opening that a read may list as off-CPU all window: its
/// process and name then.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub(super) tgid: u32,
    comm: [u8; 16],
}

/// The threads of `idle` alive now, listed once when the window opens (after the
/// programs attached): a thread born since has an entry from its first wakeup, so these
/// are all a read can find off-CPU all window. Listed at the opening, not at the read:
/// one asleep all window that dies between the close and the final read has no entry,
/// no death record and no /proc directory (torture seed 1002165, 2026-12-07: 1,032
/// threads of a crowd released at the close kept only the first interval's off-CPU
/// time). A thread born within a clock tick before the opening is listed too, where a
/// read's own walk of /proc could not tell it from one born after.
pub fn at_open(idle: &IdleThreads, root: &Root) -> HashMap<u32, Candidate> {
    let listed: Vec<(u32, u32)> = match idle {
        IdleThreads::None => return HashMap::new(),
        IdleThreads::Seeded(set) => set.iter().map(|&t| (0, t)).collect(),
        IdleThreads::All => procfs::all_threads(root),
    };
    listed
        .into_iter()
        .filter_map(|(tgid, tid)| {
            // Gone: it exited before the window (or since: its entry or death record
            // has it then).
            let name = procfs::comm(root, tid, tid)?;
            let mut comm = [0u8; 16];
            super::set_comm(&mut comm, &name);
            let tgid = if tgid != 0 {
                tgid
            } else {
                procfs::tgid_of(root, tid).unwrap_or(0)
            };
            Some((tid, Candidate { tgid, comm }))
        })
        .collect()
}

/// The threads alive at the opening ([`at_open`]), listed by a thread of its own.
pub struct AtOpen {
    listing: Option<std::thread::JoinHandle<HashMap<u32, Candidate>>>,
    listed: HashMap<u32, Candidate>,
}

impl AtOpen {
    pub fn list(idle: &IdleThreads, root: &Root) -> AtOpen {
        let (i, r) = (idle.clone(), root.clone());
        let spawned = std::thread::Builder::new()
            .name("idle-at-open".into())
            .spawn(move || at_open(&i, &r));
        match spawned {
            Ok(h) => AtOpen {
                listing: Some(h),
                listed: HashMap::new(),
            },
            Err(e) => {
                log::debug!("listing the threads alive at the opening in place: {e}");
                AtOpen {
                    listing: None,
                    listed: at_open(idle, root),
                }
            }
        }
    }

    /// The list, once it is done.
    pub fn get(&mut self) -> &mut HashMap<u32, Candidate> {
        if let Some(h) = self.listing.take() {
            match h.join() {
                Ok(m) => self.listed = m,
                Err(_) => log::warn!(
                    "listing the threads alive at the opening failed: those asleep all \
                     window are not listed"
                ),
            }
        }
        &mut self.listed
    }
}

/// Adds the threads alive at the opening ([`at_open`]) with no entry, no record and no
/// slice on a CPU that began inside the window: they were off-CPU all window. While the
/// window is open one gone from /proc is on its way out, its death record to come (it
/// ran to die); at the final read (`closed`) it died after the close. One moved out of a
/// `--cgroup` target is left out (when is not known, so none of its sleep is claimed;
/// counted in `left`).
#[allow(clippy::too_many_arguments)]
pub fn add_never_ran(
    candidates: &HashMap<u32, Candidate>,
    closed: bool,
    root: &Root,
    open_ns: u64,
    generations: &HashMap<u32, u32>,
    threads: &mut BTreeMap<ThreadKey, ThreadRecord>,
    live: &HashMap<u32, ThreadKey>,
    on_cpu: &HashMap<u32, u64>,
    end: u64,
    left: &mut Left,
) {
    let seen: HashSet<u32> = threads.values().map(|r| r.tid).collect();
    for (&tid, c) in candidates {
        // On a CPU since before the read's end: its slice is the read's to count. One
        // switched in after the close ran nothing inside the window (torture seed
        // 1002165: crowd threads woken just after the close kept only an earlier
        // interval's off-CPU time).
        let running = on_cpu.get(&tid).is_some_and(|&begun| begun < end);
        if live.contains_key(&tid) || running || seen.contains(&tid) {
            continue;
        }
        if !closed && !procfs::thread_exists(root, tid) {
            continue;
        }
        if left.check(root, tid) {
            continue;
        }
        // Its name now where it lives (another thread may have written it).
        let mut comm = c.comm;
        if let Some(name) = procfs::comm(root, tid, tid) {
            super::set_comm(&mut comm, &name);
        }
        let key = (tid, generations.get(&tid).copied().unwrap_or(0));
        threads.insert(key, never_ran(tid, c.tgid, comm, open_ns, end));
    }
}
