//! The threads a read must not lose: death records (`Collector::drain`), live threads a
//! read lacks (`missing`), and those of the traced set caught between leaving the PID
//! hash and their final switch (`ExitWatch`).
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
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use aya::{maps::HashMap as BpfHashMap, Ebpf};
use tracer_common::{hist::ThreadHist, ExitRecord, ThreadStats, Tracked};

use crate::model::{
    snapshot::{fold_exited, skipped, ThreadKey, ThreadRecord, EXITED_KEEP},
    targets::HistScope,
    thread_hist,
};

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
        let set = traced(ebpf, self.cap)?;
        let out: Vec<(u32, u32)> = set
            .iter()
            .copied()
            .filter(|(tid, _)| !self.gone_at_open.contains(tid))
            .filter(|&(tid, _)| !procfs::thread_exists(root, tid))
            .collect();
        if self.since.is_none() {
            // What the wait decided from, for a run that lost an exiting thread anyway
            // (torture keeps the tracer's stderr with these on).
            log::debug!(
                target: super::READS,
                "final read: {} in the traced set, gone from /proc: {out:?}",
                set.len()
            );
        }
        if out.is_empty() {
            return Ok(false);
        }
        let since = *self.since.get_or_insert_with(Instant::now);
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
            log::debug!(target: super::READS, "(TID, TGID) {out:?}: no death record in {limit:?}");
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

    /// The traced set (see [`born_in_window`]); empty when not armed (only the final read
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

/// The threads [`born_in_window`] looks at: system-wide (`all`, at the final read) every
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

/// Of `tids` (the traced set, or every thread system-wide), those alive and surely born
/// inside the window: after every program was attached (`attached`) and before the
/// close (0: open). Such a thread had its first wakeup (`sched_wakeup_new`) seen, so an
/// entry, and a read that lacks it passed over it ([`unread`]). /proc gives births cut
/// down to its clock tick, so a birth read after `attached` is surely after it; one
/// read within a tick of the close may have come after it (a `--cgroup` member then
/// gets no entry). Torture seed 345355 (system-wide tp-btf `record`, 2026-12-07): a
/// thread born 11.8 ms after the opening, missing from the rows with nothing counted,
/// passed a check that wanted a whole tick after the opening.
pub fn born_in_window(root: &Root, tids: &[u32], (attached, close): (u64, u64)) -> Vec<u32> {
    let close = if close == 0 { u64::MAX } else { close };
    let tick = crate::sys::birth::precision_ns();
    tids.iter()
        .copied()
        .filter(|&tid| {
            inside(
                crate::sys::birth::started_ns(root, tid),
                (attached, close),
                tick,
            )
        })
        .collect()
}

/// How far a birth from /proc may lie after the true one: the boot-to-monotonic offset
/// is two clock reads apart (well under a microsecond; 1 ms of margin).
const BIRTH_SLACK_NS: u64 = 1_000_000;

/// Whether a birth read from /proc (None: gone), cut down to `tick`, is surely after
/// `attached` and before `close`.
fn inside(born: Option<u64>, (attached, close): (u64, u64), tick: u64) -> bool {
    born.is_some_and(|b| {
        b > attached.saturating_add(BIRTH_SLACK_NS) && b.saturating_add(tick) < close
    })
}

/// How many of `born` ([`born_in_window`]) a read lacks (`seen`: the TIDs it has, with a
/// death record or a slice on a CPU) while they are alive: a read before it that could
/// name them (`snapshot::skipped`) there may be none. Torture seed 999061 (tp-btf `-p`,
/// 2026-12-07) lost a thread born 18 ms after the opening from the rows, its 227
/// slices in the histograms. A thread gone since is [`ExitWatch::read_again`]'s.
pub fn unread(root: &Root, born: &[u32], seen: &HashSet<u32>) -> Vec<u32> {
    born.iter()
        .copied()
        .filter(|tid| !seen.contains(tid) && procfs::thread_exists(root, *tid))
        .collect()
}

/// The live threads a try of a read lacks (`last`: the serials and TIDs of the read
/// before; `live`, `exited`: this try's entries and death records; `on_cpu`: the TIDs
/// on a CPU):
/// those the read before had ([`skipped`]) and those born in the window ([`unread`]).
/// One the read before had that is gone from /proc is exiting, not missed: its death
/// record comes with its final switch, which an RT thread spinning on its CPU can hold
/// off for tens of ms (torture seed 1002123, pinned ping-pong: four such threads were
/// counted as live ones skipped, in an interval's read).
/// The third list: those the read before had that are exiting ([`Unhashed`]).
pub fn missing(
    root: &Root,
    last: &HashMap<u64, u32>,
    live: &[(ThreadKey, ThreadStats)],
    exited: &BTreeMap<ThreadKey, ThreadRecord>,
    on_cpu: impl Iterator<Item = u32>,
    born: &[u32],
) -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let (gone, out): (Vec<u32>, Vec<u32>) = skipped(last, live, exited)
        .into_iter()
        .partition(|&tid| procfs::thread_exists(root, tid));
    if born.is_empty() {
        return (gone, Vec::new(), out);
    }
    let seen: HashSet<u32> = live
        .iter()
        .map(|((tid, _), _)| *tid)
        .chain(exited.values().map(|r| r.tid))
        .chain(on_cpu)
        .collect();
    (gone, unread(root, born, &seen), out)
}

/// The serials (with TIDs) of the live entries the last snapshot read: one of them a read
/// lacks, with no death record either, was skipped by that read, or is exiting. Less
/// those whose death record has come: `exited` may lose it (`tracer serve` forgets its
/// records after each scrape; past `EXITED_KEEP` one is folded into its process's row),
/// and a thread read live that died during the read is in both. Kept, such a serial
/// looked exiting to the next read, which waited [`UNHASHED_WAIT`] for it.
#[derive(Debug, Default)]
pub struct LastLive {
    live: HashMap<u64, u32>,
    /// Serials of the records drained since the last [`LastLive::set`].
    dead: HashSet<u64>,
}

impl LastLive {
    /// The live entries a read took: (serial, TID); serial 0 is none.
    pub fn set(&mut self, live: impl Iterator<Item = (u64, u32)>) {
        let dead = std::mem::take(&mut self.dead);
        self.live = live.filter(|(s, _)| *s != 0 && !dead.contains(s)).collect();
    }

    /// A death record of the entry `serial` was drained.
    pub fn died(&mut self, serial: u64) {
        self.live.remove(&serial);
        self.dead.insert(serial);
    }

    pub fn get(&self) -> &HashMap<u64, u32> {
        &self.live
    }
}

/// How long any read waits for threads the read before had that are now between their
/// unhashing and their final switch ([`missing`]'s third list).
pub const UNHASHED_WAIT: Duration = Duration::from_millis(250);

/// A read's wait for the threads the read before had that are exiting: unreachable
/// until their final switch hands over their totals, their work since that read would
/// show in the next interval (torture seed 1004013, `record -i 300ms` beside a pinned
/// SCHED_FIFO spinner that held an exiting thread for 36 ms: 35.9 ms on-CPU in an
/// interval of 11.9 ms). The final read waits for the traced set's too ([`ExitWatch`]).
#[derive(Debug, Default)]
pub struct Unhashed {
    since: Option<Instant>,
    over: bool,
}

impl Unhashed {
    /// Whether to take the read again (after a millisecond) for `out`.
    pub fn again(&mut self, out: &[u32]) -> bool {
        if out.is_empty() || self.over {
            return false;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() >= UNHASHED_WAIT {
            log::debug!(target: super::READS, "exiting {out:?}: no record in {UNHASHED_WAIT:?}");
            self.over = true;
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
        true
    }
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

impl super::Collector {
    /// Takes the death records out of the ring buffer (call often: it is bounded).
    pub fn drain(&mut self) {
        self.drain_with(|_| {});
    }

    /// Whether a thread the read lacks (`live`: its entries) died since the read's
    /// drain: its record comes now, and the read, its histograms and per-CPU states
    /// taken before that final switch, must be taken again. The traced set lists an
    /// exiting thread until that switch (`ExitWatch`), but one that makes it between
    /// the drain and the walk of the set is in neither (torture seed 1005108, `--
    /// CMD` with a crowd released one thread at a time at the close: a thread of 810
    /// ms kept the read before's row; the same shape as seed 1004193's three threads).
    pub fn died_unread(&mut self, live: &[(ThreadKey, ThreadStats)]) -> bool {
        let mut late = Vec::new();
        self.drain_with(|tid| late.push(tid));
        let read: HashSet<u32> = live.iter().map(|((tid, _), _)| *tid).collect();
        let again = late.iter().any(|tid| !read.contains(tid));
        if again {
            log::debug!(target: super::READS, "final read: again for {late:?}, dead unread");
        }
        again
    }

    /// Logs the rows the final read takes from the read before: threads it lacks with no
    /// death record (exiting, their final switch not yet made).
    pub(super) fn log_left(&self, live: &[(ThreadKey, ThreadStats)]) {
        if log::log_enabled!(target: super::READS, log::Level::Debug) {
            let left = skipped(self.last_live.get(), live, &self.exited);
            log::debug!(target: super::READS, "final read: without entry or record: {left:?}");
        }
    }

    /// [`Self::drain`], telling `seen` each record's TID.
    fn drain_with(&mut self, mut seen: impl FnMut(u32)) {
        while let Some(item) = self.ring.next() {
            if item.len() == std::mem::size_of::<ThreadHist>() {
                // A dying thread's own histograms: its process keeps them.
                if let Some(dead) = &mut self.thread_hists {
                    for h in thread_hist::parse(&item) {
                        dead.add(&h);
                    }
                }
                continue;
            }
            if item.len() < std::mem::size_of::<ExitRecord>() {
                continue;
            }
            // SAFETY: the kernel wrote an ExitRecord; read unaligned from the ring.
            let mut rec: ExitRecord =
                unsafe { std::ptr::read_unaligned(item.as_ptr() as *const ExitRecord) };
            // It ran (to die): not one that could be off-CPU all window, even once its
            // record is folded into its process's row.
            let listed = self.idle_at_open.get().remove(&rec.tid);
            if rec.stats.tgid == 0 {
                // An entry only a classic wakeup made (no TGID in its fields), for a
                // thread whose only slice began after the close: the listing at the
                // opening knows its process, and /proc no longer does (torture seed
                // 1005040, system-wide classic tracepoints: 92 threads of a crowd
                // released at the close reported as PID 0).
                rec.stats.tgid = listed.map_or(0, |c| c.tgid);
            }
            seen(rec.tid);
            self.last_live.died(rec.stats.serial);
            let gen = self.generations.entry(rec.tid).or_insert(0);
            self.exited.insert(
                (rec.tid, *gen),
                ThreadRecord {
                    tid: rec.tid,
                    stats: rec.stats,
                    exited: true,
                    folded: 0,
                    became: rec.became,
                },
            );
            *gen += 1;
            if self.hist_scope == HistScope::Thread {
                self.dead_pending.push(rec.tid);
            }
        }
        if self.exited.len() > EXITED_KEEP + EXITED_KEEP / 4 {
            fold_exited(&mut self.exited, EXITED_KEEP);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    /// Attached at 100.5 ms, closed at 1100 ms; /proc's tick of 10 ms.
    const WINDOW: (u64, u64) = (100 * MS + MS / 2, 1100 * MS);
    const TICK: u64 = 10 * MS;

    #[test]
    fn a_dead_entry_is_not_kept_as_live_for_the_next_read() {
        let mut last = LastLive::default();
        last.set([(1, 10), (2, 20), (0, 30)].into_iter());
        assert_eq!(last.get().len(), 2, "serial 0 is no entry");
        // Between reads: 1's record drained.
        last.died(1);
        assert_eq!(last.get().keys().collect::<Vec<_>>(), [&2]);
        // A read took 2 live, and 2's record came during it (tracer serve then forgets
        // the record): the next read must not take 2 for an exiting thread.
        last.died(2);
        last.set([(2, 20), (3, 31)].into_iter());
        assert_eq!(last.get().keys().collect::<Vec<_>>(), [&3]);
        // The records drained before a read count for that read only.
        last.set([(2, 20)].into_iter());
        assert_eq!(last.get().keys().collect::<Vec<_>>(), [&2]);
    }

    #[test]
    fn a_thread_born_in_the_window_counts() {
        // Seed 999061's shape: born at 118 ms.
        assert!(inside(Some(118 * MS), WINDOW, TICK));
        // Seed 345355's: born 11.8 ms after the opening, read as 110 ms (cut down).
        assert!(inside(Some(110 * MS), WINDOW, TICK));
        // The window still open (an interval's read).
        assert!(inside(Some(118 * MS), (WINDOW.0, u64::MAX), TICK));
    }

    #[test]
    fn threads_gone_or_born_before_near_or_after_the_edges_do_not() {
        // Born before the opening: asleep all window, it has no entry.
        assert!(!inside(Some(10 * MS), WINDOW, TICK));
        // Read as born before the programs were attached, or within the margin after:
        // its first wakeup may have come before them.
        assert!(!inside(Some(100 * MS), WINDOW, TICK));
        assert!(!inside(Some(101 * MS), WINDOW, TICK));
        // Within a tick of the close, or after it.
        assert!(!inside(Some(1091 * MS), WINDOW, TICK));
        assert!(!inside(Some(1200 * MS), WINDOW, TICK));
        // Gone from /proc: `read_again` waits for its death record.
        assert!(!inside(None, WINDOW, TICK));
    }

    #[test]
    fn a_live_thread_born_in_the_window_missing_from_the_read_is_unread() {
        // This thread is alive; a TID past pid_max is not.
        let root = Root::default();
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let gone = 1 << 23;
        assert_eq!(unread(&root, &[me, gone], &HashSet::new()), [me]);
        assert!(unread(&root, &[me, gone], &[me].into()).is_empty());
    }
}
