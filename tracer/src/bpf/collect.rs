//! Reading the kernel's aggregates: live threads, threads that died, histograms, drops.
//!
//! A snapshot is cumulative since the start of the window; interval reports are the
//! difference of two snapshots. Threads are keyed by (TID, generation): the generation
//! counts the deaths of that TID seen so far, so a recycled TID is a new row, never a
//! continuation of the dead thread.
use std::collections::{BTreeMap, HashMap};

use crate::model::targets::HistScope;
use anyhow::{Context as _, Result};
use aya::{
    maps::{MapData, RingBuf},
    Ebpf,
};
use tracer_common::{CpuState, ThreadStats, HAVE_RUN_DELAY};

use super::read;

mod exiting;
mod hists;
mod idle;
use crate::model::{
    options::RunqSource,
    snapshot::{HistSet, Snapshot, ThreadKey, ThreadRecord},
    thread_hist::ProcHists,
    window::{
        add_open_off_periods, close_slice_ended_in_read, first_seen_off_start, latest_switch_ins,
    },
};
use crate::sys::root::Root;
pub use exiting::{ExitWatch, EXIT_WAIT};
pub use idle::{IdleThreads, Members};

/// The log target of the reads taken again (`--verbose` shows it).
pub const READS: &str = "reads";
/// How many times the final read is taken again for threads that died unread while it
/// was taken (`Collector::died_unread`): a bound where threads die without pause.
const LATE_ROUNDS: u32 = 8;

/// Writes `name` into a kernel-style comm buffer (cut to fit, NUL-terminated).
fn set_comm(comm: &mut [u8], name: &str) {
    let b = name.as_bytes();
    let n = b.len().min(comm.len() - 1);
    comm.fill(0);
    comm[..n].copy_from_slice(&b[..n]);
}

/// Reads the maps; keeps the totals of threads that died.
pub struct Collector {
    ring: RingBuf<MapData>,
    hist_scope: HistScope,
    /// Deaths seen per TID: the generation of the TID's live thread.
    generations: HashMap<u32, u32>,
    exited: BTreeMap<ThreadKey, ThreadRecord>,
    /// Per-thread histograms harvested from threads that died (`-L`).
    exited_hists: BTreeMap<u32, HistSet>,
    /// Per-process histograms are folded from the threads' own (`Tracer::hist_in_task`):
    /// what the dead threads handed over, per process, until it dies.
    thread_hists: Option<ProcHists>,
    /// Each live thread's comm is read again from /proc at every snapshot (a rename or
    /// exec since its entry was made); `tracer serve` names processes itself, once, and
    /// the task iterator (task-storage modes) reads the name with the totals.
    proc_comms: bool,
    /// The histograms are read inside the consistency check, with the threads (see
    /// `snapshot`); false: once, before it.
    hists_with_threads: bool,
    /// TIDs whose scoped histograms still have to be harvested.
    dead_pending: Vec<u32>,
    /// Where the kernel keeps run-queue waits, so the wait before a slice still running
    /// can be found.
    runq: RunqSource,
    /// `RunqSource::RunDelay`: that wait is read from the thread's schedstat here.
    root: Root,
    /// Entries in the per-process/thread histogram map at the last snapshot (its
    /// occupancy, which `tracer serve` shows to prove it stays bounded).
    pub scoped_entries: usize,
    /// The window's opening (CLOCK_MONOTONIC ns).
    open_ns: u64,
    /// When every program was attached: a thread born after it had its first wakeup
    /// seen, so an entry (see [`exiting::born_in_window`]).
    attached_ns: u64,
    /// Which threads that never ran are listed, off-CPU all window.
    idle: IdleThreads,
    /// The live entries the last snapshot read (see [`exiting::LastLive`]).
    last_live: exiting::LastLive,
    /// Reads taken again because they skipped a live thread, and threads still missing
    /// after the last try (their earlier totals stand in, see `Snapshot::adopt_missing`).
    pub rereads: u64,
    pub still_missing: u64,
    /// Reads kept after the last try with a CPU's traced slice or accounting still
    /// changing across them: a slice or wait there may count in one interval's rows
    /// and the next interval's histograms.
    pub unsettled: u64,
    /// Each live thread's name as the last read found it in /proc, by TID with its
    /// entry's serial: a thread that leaves /proc between two reads keeps it.
    comms: HashMap<u32, (u64, [u8; 16])>,
    /// Where the traced set is kept (not system-wide): the final read waits for its
    /// threads that are exiting (see [`ExitWatch`]).
    pub exit_watch: Option<ExitWatch>,
    /// A `--cgroup` target's members now, to find the threads that left it.
    pub members: Option<Members>,
    /// Threads found alive outside the `--cgroup` target by the last read.
    pub left_target: usize,
    /// The threads of `idle` alive at the opening ([`idle::at_open`]), listed by a
    /// thread of its own: beside 5,000 threads the listing took 35 ms, which `-d` added
    /// to the window when it was part of the set-up.
    idle_at_open: idle::AtOpen,
}

impl Collector {
    pub fn new(
        ebpf: &mut Ebpf,
        hist_scope: HistScope,
        runq: RunqSource,
        root: Root,
        (open_ns, attached_ns): (u64, u64),
        idle: IdleThreads,
    ) -> Result<Self> {
        let ring = RingBuf::try_from(
            ebpf.take_map("EXITED")
                .context("EXITED map missing from the eBPF object")?,
        )?;
        Ok(Collector {
            ring,
            hist_scope,
            generations: HashMap::new(),
            exited: BTreeMap::new(),
            exited_hists: BTreeMap::new(),
            thread_hists: None,
            // The task iterator (task-storage modes) gives each thread's name at the read.
            proc_comms: runq != RunqSource::TaskStorage,
            hists_with_threads: true,
            dead_pending: Vec::new(),
            last_live: exiting::LastLive::default(),
            rereads: 0,
            still_missing: 0,
            unsettled: 0,
            exit_watch: None,
            members: None,
            left_target: 0,
            idle_at_open: idle::AtOpen::list(&idle, &root),
            comms: HashMap::new(),
            runq,
            root,
            scoped_entries: 0,
            open_ns,
            attached_ns,
            idle,
        })
    }

    /// Folds the per-process histograms from the threads' own (see `thread_hists`).
    pub fn with_thread_hists(mut self, on: bool) -> Self {
        self.thread_hists = on.then(ProcHists::default);
        self
    }

    /// Keeps the comm each entry has instead of reading every live thread's from /proc
    /// at every snapshot (`tracer serve`, which reads each process's once).
    pub fn without_proc_comms(mut self) -> Self {
        self.proc_comms = false;
        self
    }

    /// Reads the histograms once per snapshot, before the threads (`tracer serve`): its
    /// counters are cumulative, so a slice that reaches the histograms a scrape after
    /// its thread is only late, and the per-process read is most of a scrape (at 1000
    /// processes the scrape went 21 -> 33 ms with it inside the retried read).
    pub fn with_hists_apart(mut self) -> Self {
        self.hists_with_threads = false;
        self
    }

    /// A descriptor that polls readable when death records wait in the ring buffer:
    /// the event loops drain on it, not on a timer, so a burst of exits does not fill
    /// the ring between two ticks (a loss there is a dead thread's whole totals).
    /// (Inside the tokio runtime.)
    pub fn exit_ring_watch(&self) -> Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
        use std::os::fd::AsFd as _;
        let fd = self
            .ring
            .as_fd()
            .try_clone_to_owned()
            .context("watching the exit records")?;
        // SAFETY: the AsyncFd owns `fd`, a duplicate that stays open until it is dropped.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }
        .map_err(|e| anyhow::anyhow!("watching the exit records: {e}"))
    }

    /// The run-queue wait that ended when the slice running on a CPU began: the kernel
    /// settles it only when the thread leaves the CPU.
    fn pending_wait(&self, cs: &CpuState, st: &ThreadStats, begun: u64) -> Option<u64> {
        match self.runq {
            RunqSource::TaskStorage => (cs.wait_ns != u64::MAX).then_some(cs.wait_ns),
            RunqSource::ThreadEntry => Some(tracer_common::slice::wait_from(st.runnable_ns, begun))
                .filter(|&w| w != tracer_common::slice::UNKNOWN),
            RunqSource::RunDelay => {
                let base = if st.flags & HAVE_RUN_DELAY != 0 {
                    st.last_run_delay
                } else {
                    cs.run_delay_in
                };
                let now = crate::sys::procfs::schedstat(&self.root, cs.tid, cs.tid)
                    .ok()?
                    .wait_ns;
                (base != u64::MAX && now > base).then(|| now - base)
            }
        }
    }

    /// A cumulative snapshot. With `partial_slices`, time of slices still running on each
    /// CPU is added to their threads (the window's end cuts them).
    /// `close_ns`: the window's close (0: still open).
    pub fn snapshot(
        &mut self,
        ebpf: &mut Ebpf,
        partial_slices: bool,
        close_ns: u64,
    ) -> Result<Snapshot> {
        self.drain();
        // The histograms, the threads and the slices running on the CPUs, read
        // consistently: a slice the kernel closes while they are read is in the entries
        // or not, and in the histograms or not, depending on timing. Read again while a
        // traced slice changed across the read (after the window's close none starts,
        // so this ends); past a few tries, a slice that ended during the read is counted
        // here only when its thread's entry shows no switch-out since it began, and no
        // further than the read's start. Histograms first: a slice settled after them
        // is missing from them in this snapshot (and in the next), never counted twice
        // (kernel and pending); inside the check, or an interval whose threads did
        // nothing could show slices the interval before had (torture seed 345292).
        // `tracer serve` reads them once, before (`with_hists_apart`).
        let cpu_states = read::cpu_states;
        let traced_slice = |cs: &CpuState| (cs.traced != 0).then_some((cs.tid, cs.slice_start_ns));
        let (mut tries, mut late, mut unhashed) = (0, 0, exiting::Unhashed::default());
        let apart = if self.hists_with_threads {
            None
        } else {
            Some(self.read_hists(ebpf)?)
        };
        // At the final read, the threads born in the window (a read that lacks one of
        // them, alive, is taken again): found once, their births do not change.
        let all = close_ns != 0 && matches!(self.idle, IdleThreads::All);
        // Those alive at the opening were not born in it: their births are not read.
        let at_open = self.idle_at_open.get();
        let tids: Vec<u32> = exiting::born_tids(self.exit_watch.as_ref(), ebpf, &self.root, all)?
            .into_iter()
            .filter(|t| !at_open.contains_key(t))
            .collect();
        let born = exiting::born_in_window(&self.root, &tids, (self.attached_ns, close_ns));
        let (live, before, after, read_start, after_at, inside) = loop {
            tries += 1;
            let read_start = crate::sys::clock::monotonic_ns();
            let before = cpu_states(ebpf)?;
            let inside = if self.hists_with_threads {
                Some(self.read_hists(ebpf)?)
            } else {
                None
            };
            let live: Vec<(ThreadKey, ThreadStats)> = read::live_threads(ebpf, self.runq)?
                .into_iter()
                .map(|(tid, st)| ((tid, self.generations.get(&tid).copied().unwrap_or(0)), st))
                .collect();
            // Threads that died while the live ones were read: their final totals.
            self.drain();
            // A slice running when the CPUs are read ran until just before: the read's
            // time. Taken after, it counted a preemption of the tracer as the slice's
            // (torture seed 1003066: an interval of 211.6 ms on-CPU, 102 ms in its life).
            let after_at = crate::sys::clock::monotonic_ns();
            let after = cpu_states(ebpf)?;
            let stable = before
                .iter()
                .zip(after.iter())
                // A whole traced slice can begin and end between the two reads, with
                // an untraced thread on the CPU at both: its time on the CPU tells. A
                // program in flight across the read (its vCPU stopped by the host) had
                // written part of an entry and its histograms: `seq` is odd or moved
                // (torture seed 919526: a slice in the rows, not in the histogram).
                .all(|(b, a)| {
                    traced_slice(b) == traced_slice(a)
                        && b.busy_ns == a.busy_ns
                        && b.seq == a.seq
                        && b.seq % 2 == 0
                });
            let on_cpu = after.iter().filter(|cs| cs.traced != 0).map(|cs| cs.tid);
            let (gone, unread, out) = exiting::missing(
                &self.root,
                self.last_live.get(),
                &live,
                &self.exited,
                on_cpu,
                &born,
            );
            let missed = gone.len() + unread.len();
            if (stable && missed == 0) || tries >= 4 {
                if unhashed.again(&out) {
                    tries = 0;
                    continue;
                }
                if let Some(w) = &mut self.exit_watch {
                    if w.read_again(ebpf, &self.root)? {
                        tries = 0;
                        continue;
                    }
                }
                let armed = self.exit_watch.as_ref().is_some_and(|w| w.armed());
                if armed && late < LATE_ROUNDS && self.died_unread(&live) {
                    late += 1;
                    tries = 0;
                    continue;
                }
                if missed > 0 {
                    self.still_missing += missed as u64;
                }
                if !stable {
                    self.unsettled += 1;
                }
                break (live, before, after, read_start, after_at, inside);
            }
            if missed > 0 {
                // A walk of the entries (the task iterator, or a hash map walk during
                // deletes) passed over a live thread: its totals are in the kernel.
                self.rereads += 1;
                log::info!(
                    target: READS,
                    "read again: {missed} live thread(s) missing (try {tries}; read before: \
                     {gone:?}, born in the window: {unread:?})"
                );
            }
        };
        // One of the two is read (`hists_with_threads`).
        let (mut hist, mut scoped) = inside.or(apart).unwrap_or_default();
        if close_ns != 0 {
            self.log_left(&live);
        }
        self.last_live
            .set(live.iter().map(|((tid, _), st)| (st.serial, *tid)));
        let at_ns = after_at;
        // Slices still running are cut at the window's close, or at this read.
        let end = if close_ns != 0 {
            close_ns.min(at_ns)
        } else {
            at_ns
        };
        let mut threads = self.exited.clone();
        let mut live_by_tid: HashMap<u32, ThreadKey> = HashMap::new();
        let mut live_entries = 0;
        let mut comms = HashMap::new();
        for (mut key, mut stats) in live {
            live_entries += 1;
            if stats.tgid == 0 {
                // A classic wakeup's entry: /proc may lose the thread before the report
                // (torture seed 1005040: a crowd thread released at the close, PID 0).
                stats.tgid = self.idle_at_open.get().get(&key.0).map_or(0, |c| c.tgid);
            }
            if let Some(e) = threads.get(&key) {
                if e.stats.serial == stats.serial {
                    // It died during the read: `exited` has its final totals.
                    continue;
                }
                // Another thread with this TID died during the read (an old leader
                // reaped by an exec from another thread): this one is the TID's next
                // generation.
                key = (key.0, self.generations.get(&key.0).copied().unwrap_or(0));
            }
            // The comm now, not at the entry's creation (an exec since, a rename); for a
            // thread gone from /proc since it was read, the name an earlier read found.
            if self.proc_comms {
                match crate::sys::procfs::comm(&self.root, key.0, key.0) {
                    Some(c) => set_comm(&mut stats.comm, &c),
                    None => {
                        if let Some(&(_, c)) =
                            self.comms.get(&key.0).filter(|(s, _)| *s == stats.serial)
                        {
                            stats.comm = c;
                        }
                    }
                }
                comms.insert(key.0, (stats.serial, stats.comm));
            }
            live_by_tid.insert(key.0, key);
            threads.insert(
                key,
                ThreadRecord {
                    tid: key.0,
                    stats,
                    exited: false,
                    folded: 0,
                    became: 0,
                },
            );
        }
        if self.proc_comms {
            self.comms = comms;
        }
        // A record is a running slice only where it is its thread's latest switch-in
        // (`latest_switch_ins`: the others are stale).
        let latest = latest_switch_ins(after.iter().map(|cs| (cs.tid, cs.slice_start_ns)));
        let running = |cs: &CpuState| cs.traced != 0 && cs.slice_start_ns > 1;
        let current = |cs: &CpuState| latest.get(&cs.tid) == Some(&cs.slice_start_ns);
        let mut left = idle::Left::read(self.members.as_ref());
        // Per CPU the kernel's sum and the running slice come from one read: exact.
        let cpu_busy_ns: Vec<u64> = after
            .iter()
            .enumerate()
            .map(|(cpu, cs)| {
                let open = partial_slices
                    && running(cs)
                    && current(cs)
                    && cs.slice_start_ns < end
                    && crate::sys::procfs::may_be_running_on(&self.root, cs.tid, cpu as u32)
                    && !left.is_out(&self.root, cs.tid);
                cs.busy_ns + if open { end - cs.slice_start_ns } else { 0 }
            })
            .collect();
        // (CPU, its state, how far the slice may be counted, whether it may have ended).
        let mut slices: Vec<(usize, CpuState, u64, bool)> = Vec::new();
        if partial_slices {
            for (cpu, (b, a)) in before.iter().zip(after.iter()).enumerate() {
                if traced_slice(b) != traced_slice(a) && running(b) && b.slice_start_ns < end {
                    slices.push((cpu, *b, read_start.min(end), true));
                }
                if running(a) && current(a) && a.slice_start_ns < end {
                    slices.push((cpu, *a, end, false));
                }
            }
        }
        // Run-queue waits that ended at a running slice's switch-in: (tid, tgid, ns).
        let mut pending: Vec<(u32, u32, u64)> = Vec::new();
        let mut settled = std::collections::HashSet::new();
        // The threads whose running slice this read counted, with its start: their
        // open off-CPU period ends there (the others' runs up to the read).
        let mut counted_running: HashMap<u32, u64> = HashMap::new();
        for (cpu, cs, upto, may_have_ended) in slices {
            let begun = cs.slice_start_ns;
            if upto <= begun || left.check(&self.root, cs.tid) {
                continue;
            }
            // The CPU's record says this thread runs there; the kernel says whether it
            // can: a switch the programs did not see (`switch_in_unseen`, seen on 6.18
            // right after switches to one thread of PID 1) leaves a stale record, whose
            // time is not this thread's.
            if !may_have_ended
                && !crate::sys::procfs::may_be_running_on(&self.root, cs.tid, cpu as u32)
            {
                continue;
            }
            if may_have_ended {
                // It ended during the read: count it only if the entry read lacks it.
                match live_by_tid.get(&cs.tid).and_then(|k| threads.get(k)) {
                    Some(r) if r.stats.last_off_ns < begun => {}
                    Some(_) => continue,
                    // No live entry: it died (its record has it) or was created by
                    // this very switch-out after the read (the next read has it).
                    None => continue,
                }
            }
            let key = *live_by_tid.entry(cs.tid).or_insert_with(|| {
                let key = (cs.tid, self.generations.get(&cs.tid).copied().unwrap_or(0));
                // Switched in during the window and not out since: no entry yet. Its
                // process and name now, while it lives (a report may come after it).
                let mut stats = ThreadStats::zeroed();
                stats.last_cpu = cpu as u32;
                // Off-CPU since the opening, or since its birth when it was born in
                // the window (its entry came after the read of the entries).
                let tick = crate::sys::birth::precision_ns();
                let born = crate::sys::birth::started_ns(&self.root, cs.tid);
                let waited = born
                    .filter(|b| b + tick > self.open_ns)
                    .and_then(|_| crate::sys::procfs::schedstat(&self.root, cs.tid, cs.tid).ok())
                    .map(|s| s.wait_ns);
                stats.last_off_ns = first_seen_off_start(self.open_ns, begun, born, waited, tick);
                stats.tgid = crate::sys::procfs::tgid_of(&self.root, cs.tid).unwrap_or(0);
                if let Some(c) = crate::sys::procfs::comm(&self.root, cs.tid, cs.tid) {
                    set_comm(&mut stats.comm, &c);
                }
                threads.insert(
                    key,
                    ThreadRecord {
                        tid: cs.tid,
                        stats,
                        exited: false,
                        folded: 0,
                        became: 0,
                    },
                );
                key
            });
            let Some(r) = threads.get_mut(&key) else {
                continue;
            };
            if r.exited {
                continue;
            }
            let st = &mut r.stats;
            // With BTF (the runtime's base known), by the clock, as the kernel cuts
            // slices at the close: a thread's time then grows between two reads by no
            // more than the time between them. The scheduler's runtime, which the kernel
            // counts when the slice ends, lags by up to a tick in /proc
            // (`sum_exec_runtime` moves at `update_curr()`), and an interval after a
            // lagging read showed a busy thread at 104.7% of a CPU. Where the runtime
            // then comes in below this (steal, IRQ time), `raise_to` keeps what a read
            // showed. Classic tracepoints keep the kernel's runtime deltas: a switch the
            // kernel skipped there (`recursion_misses`) leaves a stale CPU record, whose
            // clock time is no thread's (torture seed 980185: a burst thread 6.3 ms above
            // schedstat).
            let elapsed = upto - begun;
            st.on_cpu_ns += if st.last_sum_exec != 0 || close_ns != 0 {
                elapsed
            } else {
                match tracer_common::slice::runtime_deltas(st.pending_runtime, 1) {
                    0 => elapsed,
                    deltas => deltas.min(elapsed),
                }
            };
            if may_have_ended {
                close_slice_ended_in_read(st, begun, upto);
            } else {
                counted_running.insert(cs.tid, begun);
            }
            // A thread that switched out and in again during the read: what ended at
            // its second switch-in is left to the kernel (the next read has it).
            if !settled.insert(cs.tid) {
                continue;
            }
            if let Some(d) = self.pending_wait(&cs, st, begun) {
                st.runq_wait_ns += d;
                st.runq_waits += 1;
                pending.push((cs.tid, st.tgid, d));
            }
            // The off-CPU time that ended at this slice's switch-in is settled when it
            // leaves (less the scheduler's credit to the slice, known only then).
            if st.last_cpu != u32::MAX && st.last_cpu != cpu as u32 {
                st.migrations += 1;
            }
        }

        // Off-CPU periods still open, and threads of the target that never ran (not
        // those a CPU's record names).
        left.close_open_periods(&self.root, &mut threads);
        add_open_off_periods(&mut threads, &counted_running, end);
        idle::add_never_ran(
            self.idle_at_open.get(),
            close_ns != 0,
            &self.root,
            self.open_ns,
            &self.generations,
            &mut threads,
            &live_by_tid,
            &latest,
            end,
            &mut left,
        );
        self.left_target = left.found.len();

        for (tid, tgid, d) in pending {
            let b = tracer_common::hist::bucket_index(d);
            let pick = |set: &mut HistSet| set.runq.add_bucket(b, 1);
            pick(&mut hist);
            match self.hist_scope {
                HistScope::Process => pick(scoped.entry(tgid).or_default()),
                HistScope::Thread => pick(scoped.entry(tid).or_default()),
                _ => {}
            }
        }
        let drops = read::drops(ebpf)?;
        let mut snap = Snapshot {
            at_ns,
            threads,
            hist,
            scoped,
            drops,
            live_entries,
            cpu_busy_ns,
            recursion_misses: 0,
            threads_unread: self.still_missing,
        };
        snap.set_hist_sums(self.hist_scope);
        Ok(snap)
    }

    /// Forgets the threads that died, once a long-lived reader (`tracer serve`) has
    /// counted them: its memory stays flat under churn. Their TIDs' generations go too.
    pub fn forget_exited(&mut self) {
        self.exited.clear();
        self.exited_hists.clear();
        self.generations.clear();
    }

    /// Threads with an entry in the kernel right now (bounded-usage checks).
    pub fn live_entries(ebpf: &mut Ebpf, runq: RunqSource) -> Result<usize> {
        Ok(read::live_threads(ebpf, runq)?.len())
    }
}
