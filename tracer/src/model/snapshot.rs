//! What a read of the kernel's aggregates is, as plain data: threads keyed by (TID,
//! generation), histograms, drops; the arithmetic between reads (deltas, folding the
//! exited, never going down). No aya, no I/O: every output reads this.
use crate::model::targets::HistScope;
use std::collections::{BTreeMap, HashMap};

use tracer_common::{drop, ExitRecord, ThreadStats};

/// A thread: TID and how many earlier threads with that TID died in the window.
pub type ThreadKey = (u32, u32);

/// One thread's numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadRecord {
    pub tid: u32,
    pub stats: ThreadStats,
    /// It died during the window (its totals came through the ring buffer).
    pub exited: bool,
    /// 0 for one thread; else this row sums that many exited threads of process
    /// `stats.tgid` (key `(tgid, FOLDED_GEN)`, `tid` 0), folded to bound memory.
    pub folded: u32,
    /// Not 0: the thread exec'd from a non-main thread and went on as this TID (its
    /// leader's); the row holds its time until then (`exited` is set).
    pub became: u32,
}

/// Exited threads kept one by one. Past this (plus a quarter, so folding is amortized)
/// the least busy are folded into one row per process: a tracer left running for days
/// under thread churn keeps a bounded memory (~0.2 KiB per kept thread).
pub const EXITED_KEEP: usize = 16384;
/// The key generation of a process's folded row.
pub const FOLDED_GEN: u32 = u32::MAX;

/// `into += s`, the cumulative fields only.
fn add_stats(into: &mut ThreadStats, s: &ThreadStats) {
    into.on_cpu_ns += s.on_cpu_ns;
    into.slices += s.slices;
    into.voluntary += s.voluntary;
    into.involuntary += s.involuntary;
    into.runq_wait_ns += s.runq_wait_ns;
    into.runq_waits += s.runq_waits;
    into.off_cpu_ns += s.off_cpu_ns;
    into.blocked_ns += s.blocked_ns;
    into.preempted_ns += s.preempted_ns;
    into.migrations += s.migrations;
    for i in 0..into.counters.len() {
        into.counters[i] += s.counters[i];
    }
}

/// `into = max(into, s)`, the cumulative fields only.
fn max_stats(into: &mut ThreadStats, s: &ThreadStats) {
    into.on_cpu_ns = into.on_cpu_ns.max(s.on_cpu_ns);
    into.slices = into.slices.max(s.slices);
    into.voluntary = into.voluntary.max(s.voluntary);
    into.involuntary = into.involuntary.max(s.involuntary);
    into.runq_wait_ns = into.runq_wait_ns.max(s.runq_wait_ns);
    into.runq_waits = into.runq_waits.max(s.runq_waits);
    raise_off_cpu(into, s);
    into.migrations = into.migrations.max(s.migrations);
    for i in 0..into.counters.len() {
        into.counters[i] = into.counters[i].max(s.counters[i]);
    }
}

/// Off-CPU time raised to an earlier read's (`e`): the larger of the two totals, split
/// as this read splits it, moved only as far as keeps each part at or above the earlier
/// read's. Raising each part on its own counted a period twice where one read took an
/// open period for preempted and the next settled it as blocked (torture seed 420210: a
/// kernel thread 34.8 ms above the window, system-wide, its preempted time kept while
/// its blocked time took the period in again).
fn raise_off_cpu(into: &mut ThreadStats, e: &ThreadStats) {
    let off = into.off_cpu_ns.max(e.off_cpu_ns);
    // Each read's parts sum to its total, so the earlier's fit within the larger one.
    let most_blocked = off.saturating_sub(e.preempted_ns).max(e.blocked_ns);
    into.blocked_ns = into.blocked_ns.clamp(e.blocked_ns, most_blocked);
    into.preempted_ns = off.saturating_sub(into.blocked_ns).max(e.preempted_ns);
    into.off_cpu_ns = off.max(into.blocked_ns + into.preempted_ns);
}

/// After [`max_stats`], where an earlier read's running slice kept `on_back` of on-CPU
/// time the kernel never confirmed: this read counted that time as off-CPU (the
/// thread's open period ran through it), so it comes off again, down to the earlier
/// read's figures. On-CPU plus off-CPU stays the thread's time in the window (torture
/// seed 10: a PID 1 thread whose switch-outs the kernel does not report read 3.2 ms
/// above the window).
fn take_off_cpu(into: &mut ThreadStats, earlier: &ThreadStats, on_back: u64) {
    let off = into
        .off_cpu_ns
        .saturating_sub(on_back)
        .max(earlier.off_cpu_ns);
    let mut take = into.off_cpu_ns - off;
    let blocked = into.blocked_ns.saturating_sub(take).max(earlier.blocked_ns);
    take -= into.blocked_ns - blocked;
    let preempted = into
        .preempted_ns
        .saturating_sub(take)
        .max(earlier.preempted_ns);
    into.blocked_ns = blocked;
    into.preempted_ns = preempted;
    into.off_cpu_ns = off.max(blocked + preempted);
}

/// After [`max_stats`], where an earlier read counted `off_back` more off-CPU time than
/// this one: it counted the period before a running slice up to the switch-in, and the
/// kernel, settling that period when the slice ended, gave the scheduler's credit to
/// the slice (its runtime from before the switch-in). That time comes off this read's
/// on-CPU, down to the earlier read's, so on-CPU plus off-CPU stays the thread's time in
/// the window.
/// At most [`MAX_CREDIT_NS`]: a credit is the runtime charged between a clock update
/// and the switch-in (microseconds; up to a tick where the update was skipped); more is
/// most likely an earlier read's off-CPU time the kernel does not have (a newborn
/// counted from the opening took 13 ms off a process, torture seed 991174; 3 ms in
/// seed 993174, 2026-12-07), and the totals' on-CPU time, which schedstat checks, comes
/// before one interval's on + off.
fn take_on_cpu(into: &mut ThreadStats, earlier: &ThreadStats, off_back: u64) {
    into.on_cpu_ns = into
        .on_cpu_ns
        .saturating_sub(off_back.min(MAX_CREDIT_NS))
        .max(earlier.on_cpu_ns);
}

/// The most of an earlier read's off-CPU time taken back from on-CPU time as the
/// scheduler's credit (see [`take_on_cpu`]); a larger credit (a skipped clock update at
/// HZ below 1000) leaves one interval's on + off that much above its length instead.
const MAX_CREDIT_NS: u64 = 1_000_000;

impl Snapshot {
    /// Every thread it lists by itself (not folded rows), as (TID, TGID, name).
    pub fn names(&self) -> Vec<(u32, u32, String)> {
        self.threads
            .values()
            .filter(|r| r.folded == 0 && r.tid != 0)
            .map(|r| {
                (
                    r.tid,
                    r.stats.tgid,
                    crate::model::words::from_comm(&r.stats.comm),
                )
            })
            .collect()
    }
}

/// Folds all but the `keep` busiest individual exited threads into one row per process.
pub fn fold_exited(exited: &mut BTreeMap<ThreadKey, ThreadRecord>, keep: usize) {
    let mut single: Vec<(u64, ThreadKey)> = exited
        .iter()
        .filter(|(k, _)| k.1 != FOLDED_GEN)
        .map(|(k, r)| (r.stats.on_cpu_ns, *k))
        .collect();
    if single.len() <= keep {
        return;
    }
    single.sort_unstable();
    let n = single.len() - keep;
    for (_, k) in single.into_iter().take(n) {
        let Some(r) = exited.remove(&k) else { continue };
        let tgid = r.stats.tgid;
        let row = exited.entry((tgid, FOLDED_GEN)).or_insert_with(|| {
            let mut stats = ThreadStats::zeroed();
            stats.tgid = tgid;
            stats.comm = r.stats.comm;
            ThreadRecord {
                tid: 0,
                stats,
                exited: true,
                folded: 0,
                became: 0,
            }
        });
        add_stats(&mut row.stats, &r.stats);
        if r.stats.cgroup_id != 0 {
            // `tracer serve` charges the row to its threads' latest cgroup (a sum
            // splits at no move).
            row.stats.cgroup_id = r.stats.cgroup_id;
        }
        row.folded += 1;
    }
}

mod hists;
pub use hists::{HistKind, HistSet};

/// Everything read at one moment, cumulative since the window began.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// CLOCK_MONOTONIC of the read.
    pub at_ns: u64,
    pub threads: BTreeMap<ThreadKey, ThreadRecord>,
    /// The traced set as a whole.
    pub hist: HistSet,
    /// Per process (TGID) or per thread (TID) with `-P` / `-L`.
    pub scoped: BTreeMap<u32, HistSet>,
    /// By `tracer_common::drop` index.
    pub drops: [u64; drop::COUNT as usize],
    /// Entries in the kernel's per-thread map at the read (live threads only).
    pub live_entries: usize,
    /// On-CPU time of the traced set per CPU (index = CPU), still-running slices included.
    pub cpu_busy_ns: Vec<u64>,
    /// Program runs the kernel skipped (recursion protection), filled in by the caller.
    pub recursion_misses: u64,
    /// Live threads still missing from the kernel's entries after four reads, so far
    /// (their earlier totals stand in, where a read had them).
    pub threads_unread: u64,
}

/// Names of the drop counters, in index order, as shown in reports and JSON.
pub const DROP_NAMES: [&str; drop::COUNT as usize] = [
    "threads_map_full",
    "exit_ringbuf_full",
    "tracked_map_full",
    "hist_map_full",
    "counter_read_failed",
    "task_storage_failed",
    "switch_in_unseen",
    "switch_out_unseen",
    "wakeup_kept_aside",
];

fn sub_stats(a: &ThreadStats, b: &ThreadStats) -> ThreadStats {
    let mut d = *a;
    d.on_cpu_ns = a.on_cpu_ns.saturating_sub(b.on_cpu_ns);
    d.slices = a.slices.saturating_sub(b.slices);
    d.voluntary = a.voluntary.saturating_sub(b.voluntary);
    d.involuntary = a.involuntary.saturating_sub(b.involuntary);
    d.runq_wait_ns = a.runq_wait_ns.saturating_sub(b.runq_wait_ns);
    d.runq_waits = a.runq_waits.saturating_sub(b.runq_waits);
    d.off_cpu_ns = a.off_cpu_ns.saturating_sub(b.off_cpu_ns);
    d.blocked_ns = a.blocked_ns.saturating_sub(b.blocked_ns);
    d.preempted_ns = a.preempted_ns.saturating_sub(b.preempted_ns);
    d.migrations = a.migrations.saturating_sub(b.migrations);
    for i in 0..d.counters.len() {
        d.counters[i] = a.counters[i].saturating_sub(b.counters[i]);
    }
    // The part of this interval's on-CPU time from before the latest cgroup move (0
    // when it moved before `b`'s read).
    d.cgroup_moved_at_ns = a
        .cgroup_moved_at_ns
        .saturating_sub(b.on_cpu_ns)
        .min(d.on_cpu_ns);
    d
}

/// Nothing happened to the thread in the window (an entry made by a wakeup at its very end).
pub fn is_idle(s: &ThreadStats) -> bool {
    s.on_cpu_ns == 0 && s.slices == 0 && s.runq_waits == 0 && s.off_cpu_ns == 0
}

impl Snapshot {
    /// What happened between `earlier` and `self`; threads without activity are left out.
    pub fn delta(&self, earlier: &Snapshot) -> Snapshot {
        // Exited threads folded into their process's row since `earlier` are counted in
        // that row on the earlier side too, or the interval would show their whole
        // lifetime again.
        let mut earlier_folded: HashMap<u32, ThreadStats> = HashMap::new();
        for (k, e) in &earlier.threads {
            let now_folded = e.exited && e.folded == 0 && !self.threads.contains_key(k);
            if e.folded > 0 || now_folded {
                let f = earlier_folded
                    .entry(e.stats.tgid)
                    .or_insert_with(ThreadStats::zeroed);
                add_stats(f, &e.stats);
            }
        }
        // A thread is matched by its entry's serial, which survives the TID change of
        // an exec from a non-main thread; a row without one (a first slice still
        // running) by its key.
        let by_serial: HashMap<u64, &ThreadStats> = earlier
            .threads
            .values()
            .filter(|e| e.folded == 0 && e.stats.serial != 0)
            .map(|e| (e.stats.serial, &e.stats))
            .collect();
        let mut threads = BTreeMap::new();
        for (k, r) in &self.threads {
            let by_key = || {
                earlier
                    .threads
                    .get(k)
                    .map(|e| &e.stats)
                    .filter(|e| e.serial == 0 || e.serial == r.stats.serial)
            };
            let earlier_stats = if r.folded > 0 {
                earlier_folded.get(&r.stats.tgid)
            } else if r.stats.serial != 0 {
                by_serial.get(&r.stats.serial).copied().or_else(by_key)
            } else {
                by_key()
            };
            let stats = match earlier_stats {
                Some(e) => sub_stats(&r.stats, e),
                None => r.stats,
            };
            if !is_idle(&stats) {
                threads.insert(
                    *k,
                    ThreadRecord {
                        tid: r.tid,
                        stats,
                        exited: r.exited,
                        folded: r.folded,
                        became: r.became,
                    },
                );
            }
        }
        let mut scoped = BTreeMap::new();
        for (id, h) in &self.scoped {
            let d = match earlier.scoped.get(id) {
                Some(e) => h.saturating_sub(e),
                None => h.clone(),
            };
            scoped.insert(*id, d);
        }
        let mut drops = self.drops;
        for (d, e) in drops.iter_mut().zip(earlier.drops.iter()) {
            *d = d.saturating_sub(*e);
        }
        Snapshot {
            at_ns: self.at_ns,
            threads,
            hist: self.hist.saturating_sub(&earlier.hist),
            scoped,
            drops,
            live_entries: self.live_entries,
            cpu_busy_ns: self
                .cpu_busy_ns
                .iter()
                .enumerate()
                .map(|(i, v)| v.saturating_sub(earlier.cpu_busy_ns.get(i).copied().unwrap_or(0)))
                .collect(),
            recursion_misses: self
                .recursion_misses
                .saturating_sub(earlier.recursion_misses),
            threads_unread: self.threads_unread.saturating_sub(earlier.threads_unread),
        }
    }

    /// Takes the live threads of `earlier` that this snapshot lacks. A live thread does
    /// not vanish without a death record: read after the programs were detached, a
    /// snapshot misses threads that died since (their task-local storage went with
    /// them); and the kernel's task iterator (seen on 6.18 under load) or a hash map
    /// walk during deletes can skip one. `earlier` has its totals until the next read.
    pub fn adopt_missing(&mut self, earlier: &Snapshot, hist_scope: HistScope) {
        let serials: std::collections::HashSet<u64> =
            self.threads.values().map(|r| r.stats.serial).collect();
        for (k, r) in &earlier.threads {
            let known = if r.stats.serial != 0 {
                serials.contains(&r.stats.serial)
            } else {
                self.threads.contains_key(k)
            };
            if !r.exited && !known {
                let mut key = *k;
                while self.threads.contains_key(&key) {
                    key.1 += 1;
                }
                self.threads.insert(key, r.clone());
            }
        }
        self.set_hist_sums(hist_scope);
    }

    /// Cumulative figures do not go down between two reads of one run, or an interval
    /// would have to take back what an earlier one showed and the intervals would no
    /// longer add up to the totals. A read can show less than the one before where the
    /// earlier one counted a running slice the kernel then never confirmed (a CPU record
    /// gone stale through a switch the programs did not see): that one keeps it.
    pub fn raise_to(&mut self, earlier: &Snapshot, hist_scope: HistScope) {
        let by_serial: HashMap<u64, &ThreadStats> = earlier
            .threads
            .values()
            .filter(|e| e.folded == 0 && e.stats.serial != 0)
            .map(|e| (e.stats.serial, &e.stats))
            .collect();
        let mut waits_kept = Vec::new();
        for (k, r) in self.threads.iter_mut() {
            if r.folded > 0 {
                continue;
            }
            // As in `delta`: by serial, else by key where the earlier row had no serial
            // yet (its first slice was still running), or the row would not be raised
            // while the interval still subtracts it.
            let by_key = || {
                earlier
                    .threads
                    .get(k)
                    .filter(|e| e.folded == 0)
                    .map(|e| &e.stats)
                    .filter(|e| e.serial == 0 || e.serial == r.stats.serial)
            };
            let e = match r.stats.serial {
                0 => by_key(),
                s => by_serial.get(&s).copied().or_else(by_key),
            };
            if let Some(e) = e {
                let on_back = e.on_cpu_ns.saturating_sub(r.stats.on_cpu_ns);
                let off_back = e.off_cpu_ns.saturating_sub(r.stats.off_cpu_ns);
                let waits_back = e.runq_waits.saturating_sub(r.stats.runq_waits);
                let wait_ns_back = e.runq_wait_ns.saturating_sub(r.stats.runq_wait_ns);
                max_stats(&mut r.stats, e);
                take_off_cpu(&mut r.stats, e, on_back);
                take_on_cpu(&mut r.stats, e, off_back);
                if waits_back > 0 {
                    waits_kept.push((r.tid, r.stats.tgid, waits_back, wait_ns_back));
                }
            }
        }
        // The waits kept go into the histograms too, or their counts fall below the
        // threads' (torture seed 10: one wait of a PID 1 thread, system-wide).
        for (tid, tgid, n, ns) in waits_kept {
            let b = tracer_common::hist::bucket_index(ns / n);
            self.hist.runq.add_bucket(b, n);
            let scoped = match hist_scope {
                HistScope::Process => Some(tgid),
                HistScope::Thread => Some(tid),
                _ => None,
            };
            if let Some(id) = scoped {
                self.scoped.entry(id).or_default().runq.add_bucket(b, n);
            }
        }
        for (i, v) in self.cpu_busy_ns.iter_mut().enumerate() {
            *v = (*v).max(earlier.cpu_busy_ns.get(i).copied().unwrap_or(0));
        }
        self.hist.raise_to(&earlier.hist);
        for (id, h) in &earlier.scoped {
            self.scoped.entry(*id).or_default().raise_to(h);
        }
        for (d, e) in self.drops.iter_mut().zip(earlier.drops.iter()) {
            *d = (*d).max(*e);
        }
        self.set_hist_sums(hist_scope);
    }

    /// Histogram sums from the threads' exact totals (the kernel keeps counts only).
    pub(crate) fn set_hist_sums(&mut self, hist_scope: HistScope) {
        let (on, rq, off) = self.threads.values().fold((0, 0, 0), |a, r| {
            (
                a.0 + r.stats.on_cpu_ns,
                a.1 + r.stats.runq_wait_ns,
                a.2 + r.stats.off_cpu_ns,
            )
        });
        self.hist.set_sums(on, rq, off);
        let mut sums: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
        for r in self.threads.values() {
            let id = if hist_scope == HistScope::Process {
                r.stats.tgid
            } else {
                r.tid
            };
            let e = sums.entry(id).or_default();
            e.0 += r.stats.on_cpu_ns;
            e.1 += r.stats.runq_wait_ns;
            e.2 += r.stats.off_cpu_ns;
        }
        for (id, set) in self.scoped.iter_mut() {
            let s = sums.get(id).copied().unwrap_or_default();
            set.set_sums(s.0, s.1, s.2);
        }
    }

    /// Threads seen, counting those folded into per-process rows.
    pub fn thread_count(&self) -> usize {
        self.threads
            .values()
            .map(|r| (r.folded as usize).max(1))
            .sum()
    }

    /// Sum of on-CPU time over the traced threads.
    pub fn on_cpu_total_ns(&self) -> u64 {
        self.threads.values().map(|r| r.stats.on_cpu_ns).sum()
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum::<u64>() + self.recursion_misses + self.threads_unread
    }

    /// CPUs the traced set ran on in this window.
    pub fn busy_cpus(&self) -> Vec<u32> {
        self.cpu_busy_ns
            .iter()
            .enumerate()
            .filter(|(_, &ns)| ns > 0)
            .map(|(i, _)| i as u32)
            .collect()
    }
}

/// How many of the entries live at the last read (`last`, by serial) a read lacks with
/// no death record either: a read that skipped them.
pub fn skipped(
    last: &std::collections::HashMap<u64, u32>,
    live: &[(ThreadKey, ThreadStats)],
    exited: &BTreeMap<ThreadKey, ThreadRecord>,
) -> Vec<u32> {
    if last.is_empty() {
        return Vec::new();
    }
    let seen: std::collections::HashSet<u64> = live
        .iter()
        .map(|(_, st)| st.serial)
        .chain(exited.values().map(|r| r.stats.serial))
        .collect();
    let mut tids: Vec<u32> = last
        .iter()
        .filter(|(s, _)| !seen.contains(s))
        .map(|(_, &tid)| tid)
        .collect();
    tids.sort_unstable();
    tids
}

/// Splits the iterator's output into (TID, totals); a torn tail is ignored.
pub fn parse_records(bytes: &[u8]) -> Vec<(u32, ThreadStats)> {
    bytes
        .chunks_exact(std::mem::size_of::<ExitRecord>())
        .map(|c| {
            // SAFETY: ExitRecord is plain data of exactly this size; read unaligned.
            let r: ExitRecord =
                unsafe { std::ptr::read_unaligned(c.as_ptr() as *const ExitRecord) };
            (r.tid, r.stats)
        })
        .collect()
}

#[cfg(test)]
mod tests;
