//! Threads of the traced set caught between leaving the PID hash and their final switch.
//!
//! An exiting thread is unhashed (`release_task()` from `exit_notify()`) before its
//! final switch, where the switch program hands its totals to the ring buffer. In
//! between, the task iterator cannot find it and no death record has come, so a read
//! misses it. That moment is usually microseconds, but a thread preempted there waits
//! for a CPU as long as the CPU stays busy (tens of ms behind RT threads, torture seed
//! 917296, 2026-12-06: seven threads of a `-p` target missing). At the window's close
//! the final read waits for them: the traced set (`TRACKED`) lists them until their
//! final switch takes them out, and /proc no longer does. System-wide, where the task
//! iterator reads the threads, the exit program lists them there from
//! `sched_process_exit` on (torture seed 345355: up to 4 threads missing); the
//! `THREADS` hash of the other modes keeps an entry until the final switch anyway.
use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use aya::{maps::HashMap as BpfHashMap, Ebpf};
use tracer_common::Tracked;

use crate::sys::{procfs, root::Root};

/// How long the final read waits for threads between their unhashing and their final
/// switch: a CPU kept busy longer than this (an RT thread spinning) gives up, counted.
pub const EXIT_WAIT: Duration = Duration::from_secs(1);
/// The wait where the thread's whole process is gone from /proc.
const REAPED_WAIT: Duration = Duration::from_millis(20);

/// The traced set's exiting threads, for the final read.
#[derive(Debug, Default)]
pub struct ExitWatch {
    /// TIDs the traced set held that were already gone when the window opened (seeded
    /// from /proc, dead before the switch programs attached): no final switch will take
    /// them out, so they are not waited for.
    gone_at_open: HashSet<u32>,
    /// The traced set's size.
    cap: u32,
    /// Whether the next read waits (the final read while the programs are attached).
    armed: bool,
    /// When the armed read began waiting.
    since: Option<Instant>,
    /// Threads still between unhashing and final switch when the wait gave up.
    pub given_up: u64,
}

impl ExitWatch {
    /// Notes which of the traced set's TIDs (at most `cap`, `--max-threads`) are
    /// already gone; call once the window is open.
    pub fn new(ebpf: &Ebpf, root: &Root, cap: u32) -> Result<ExitWatch> {
        let gone_at_open = traced(ebpf, cap)?
            .into_iter()
            .map(|(tid, _)| tid)
            .filter(|&tid| !procfs::thread_exists(root, tid))
            .collect();
        Ok(ExitWatch {
            gone_at_open,
            cap,
            ..ExitWatch::default()
        })
    }

    /// Makes the next read wait for exiting threads (or not).
    pub fn arm(&mut self, on: bool) {
        self.armed = on;
        self.since = None;
    }

    /// Whether the read must be taken again: a thread of the traced set is not in /proc
    /// (a zombie still is) nor gone at the opening. Unlisted, its totals are missing;
    /// listed (an entry in the `THREADS` hash until the final switch), its name is the
    /// one its entry was made with, its parent's for a thread that renamed itself, where
    /// its death record has the name it died with (torture seed 991311, raw-tp,
    /// 2026-12-07). False once the wait is over, with the threads still out counted.
    pub fn read_again(&mut self, ebpf: &Ebpf, root: &Root) -> Result<bool> {
        if !self.armed {
            return Ok(false);
        }
        let out: Vec<(u32, u32)> = traced(ebpf, self.cap)?
            .into_iter()
            .filter(|(tid, _)| !self.gone_at_open.contains(tid))
            .filter(|&(tid, _)| !procfs::thread_exists(root, tid))
            .collect();
        if out.is_empty() {
            return Ok(false);
        }
        let since = *self.since.get_or_insert_with(|| {
            log::debug!("final read: waiting for exiting threads of the target: {out:?}");
            Instant::now()
        });
        // A thread of a process still there (its zombie leader, at least) is surely on
        // its way out; one whose whole process is gone may be a leader its parent
        // reaped before its final switch, or an entry left by a death the programs saw
        // no entry for: that gets a short wait.
        let limit = if out
            .iter()
            .any(|&(_, tgid)| tgid != 0 && procfs::thread_exists(root, tgid))
        {
            EXIT_WAIT
        } else {
            REAPED_WAIT
        };
        if since.elapsed() >= limit {
            log::debug!("(TID, TGID) {out:?}: no death record in {limit:?}");
            self.given_up += out.len() as u64;
            self.armed = false;
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(true)
    }

    /// Whether the next read waits (see [`ExitWatch::arm`]).
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// The traced set (see [`born_unread`]); empty when not armed (only the final read
    /// pays for the walk).
    pub fn traced_tids(&self, ebpf: &Ebpf) -> Result<Vec<u32>> {
        if !self.armed {
            return Ok(Vec::new());
        }
        Ok(traced(ebpf, self.cap)?
            .into_iter()
            .map(|(tid, _)| tid)
            .collect())
    }
}

/// The threads [`born_unread`] looks at: system-wide (`all`, at the final read) every
/// thread of the machine (the traced set then lists only the exiting ones); else the
/// traced set, at the armed read; none otherwise.
pub fn born_tids(
    watch: Option<&ExitWatch>,
    ebpf: &Ebpf,
    root: &Root,
    all: bool,
) -> Result<Vec<u32>> {
    if all {
        return Ok(procfs::all_threads(root)
            .into_iter()
            .map(|(_, t)| t)
            .collect());
    }
    match watch {
        Some(w) => w.traced_tids(ebpf),
        None => Ok(Vec::new()),
    }
}

/// How many of `tids` (the traced set, or every thread system-wide) born in the window
/// (`open` to `close`, 0: open) a read lacks (`seen`: the TIDs it has, with a death
/// record or a slice on a CPU). Such a thread has an entry from its first wakeup
/// (`sched_wakeup_new`), so the read passed over it, and a read before it that could
/// name it (`snapshot::skipped`) there may be none: torture seed 999061 (tp-btf `-p`,
/// 2026-12-07) lost a thread born 18 ms after the opening from the rows, its 227
/// slices in the histograms. Only the alive count (a thread gone is
/// [`ExitWatch::read_again`]'s), and only those surely born inside the window (by more
/// than /proc's clock tick): one born near the opening may have come before it, one
/// near the close after it (a `--cgroup` member then gets no entry).
pub fn born_unread(root: &Root, tids: &[u32], seen: &HashSet<u32>, window: (u64, u64)) -> usize {
    let (open, close) = window;
    count_born_unread(
        tids.iter().copied(),
        seen,
        |tid| crate::sys::birth::started_ns(root, tid),
        (open, if close == 0 { u64::MAX } else { close }),
        crate::sys::birth::precision_ns(),
    )
}

/// [`born_unread`] with `started` giving a thread's birth (None when gone).
fn count_born_unread(
    tids: impl Iterator<Item = u32>,
    seen: &HashSet<u32>,
    started: impl Fn(u32) -> Option<u64>,
    (open, close): (u64, u64),
    tick: u64,
) -> usize {
    tids.filter(|tid| !seen.contains(tid))
        .filter(|&tid| {
            started(tid)
                .is_some_and(|b| b > open.saturating_add(tick) && b.saturating_add(tick) < close)
        })
        .count()
}

/// The kernel's traced set as (TID, TGID; 0 where not yet known). A walk of a hash map
/// the programs delete from can start over (the kernel's next key after a deleted one
/// is the first): bounded.
fn traced(ebpf: &Ebpf, cap: u32) -> Result<Vec<(u32, u32)>> {
    let m: BpfHashMap<_, u32, Tracked> =
        BpfHashMap::try_from(ebpf.map("TRACKED").context("TRACKED missing")?)?;
    let mut seen = std::collections::HashMap::new();
    for e in m.iter().take(2 * cap as usize) {
        let (tid, v) = e?;
        seen.insert(tid, v.tgid);
    }
    Ok(seen.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// Opened at 100 ms, closed at 1100 ms.
    const WINDOW: (u64, u64) = (100 * MS, 1100 * MS);

    #[test]
    fn a_thread_born_in_the_window_and_missing_from_the_read_is_counted() {
        // Seed 999061's shape: the thread born at 118 ms (10 ms ticks), alive, not in
        // the read.
        let seen: HashSet<u32> = [1, 2].into();
        let born = |tid| match tid {
            1 | 2 => Some(50 * MS),
            3 => Some(118 * MS),
            _ => None,
        };
        let n = count_born_unread([1, 2, 3].into_iter(), &seen, born, WINDOW, 10 * MS);
        assert_eq!(n, 1);
        // The window still open (an interval's read).
        let open = (100 * MS, u64::MAX);
        assert_eq!(
            count_born_unread([1, 2, 3].into_iter(), &seen, born, open, 10 * MS),
            1
        );
    }

    #[test]
    fn threads_read_gone_or_born_near_the_opening_or_close_are_not() {
        let seen: HashSet<u32> = [1].into();
        let born = |tid| match tid {
            // In the read.
            1 => Some(150 * MS),
            // Born before the opening: asleep all window, it has no entry.
            2 => Some(10 * MS),
            // Within a tick of the opening: it may have been born before it.
            3 => Some(109 * MS),
            // Within a tick of the close, or after it.
            5 => Some(1091 * MS),
            6 => Some(1200 * MS),
            // Gone from /proc: `read_again` waits for its death record.
            _ => None,
        };
        let tids = [1, 2, 3, 4, 5, 6].into_iter();
        assert_eq!(count_born_unread(tids, &seen, born, WINDOW, 10 * MS), 0);
    }
}
