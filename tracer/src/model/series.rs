//! Long-lived series for an exporter: totals and histograms per cgroup and per process,
//! fed with the deltas of successive snapshots so they only ever grow, with the number of
//! process series bounded and idle ones expired.
//!
//! Deltas, not snapshots: a thread's entry vanishes from the kernel when it dies and its
//! exit record is forgotten after it was counted, so a sum over a snapshot could go down;
//! a sum of non-negative deltas cannot. A process gets its own series the first time it
//! runs while there is room (`max_series`), keeps it while it runs, and loses it after
//! `expiry_ns` without activity; processes that found no room are summed in `other`.
//! Cgroup series are bounded the same way (`max_cgroups`): whoever may create cgroups
//! must not be able to grow every scrape without limit; the rest go to `cgroup="other"`.
use std::collections::BTreeMap;

use tracer_common::ThreadStats;

use crate::model::{hist::Histogram, snapshot::HistSet, words};
use crate::sys::cgroups::{Pressure, Throttling};

/// A series' labels beyond its own (`pod`, `container`, ...), as (name, value).
pub type Labels = Vec<(String, String)>;

/// A cgroup's throttling and pressure as the kernel counts them (since the cgroup was
/// made), kept from going down when the cgroup behind a series is made anew (new id,
/// counters from zero): then its new counts are added to what was shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCpu {
    /// None: the cgroup has no bandwidth figures (no cpu controller for it).
    pub throttling: Option<Throttling>,
    /// None: no PSI for it (cgroup v1 only, or PSI off).
    pub pressure: Option<Pressure>,
    last_throttling: Option<Throttling>,
    last_pressure: Option<Pressure>,
}

/// `total` grown by `now` over `last`; a fall means counting started again.
fn grow(total: &mut u64, last: Option<u64>, now: u64) {
    *total = total.saturating_add(match last {
        Some(l) if now >= l => now - l,
        _ => now,
    });
}

impl CgroupCpu {
    /// Takes a new reading (None: not readable now; the totals stay).
    pub fn update(&mut self, t: Option<Throttling>, p: Option<Pressure>) {
        if let Some(t) = t {
            let l = self.last_throttling;
            let tot = self.throttling.get_or_insert_with(Throttling::default);
            grow(&mut tot.periods, l.map(|l| l.periods), t.periods);
            grow(
                &mut tot.throttled_periods,
                l.map(|l| l.throttled_periods),
                t.throttled_periods,
            );
            grow(
                &mut tot.throttled_ns,
                l.map(|l| l.throttled_ns),
                t.throttled_ns,
            );
            self.last_throttling = Some(t);
        }
        if let Some(p) = p {
            let l = self.last_pressure;
            let tot = self.pressure.get_or_insert_with(Pressure::default);
            grow(&mut tot.some_ns, l.map(|l| l.some_ns), p.some_ns);
            if let Some(full) = p.full_ns {
                let mut f = tot.full_ns.unwrap_or(0);
                grow(&mut f, l.and_then(|l| l.full_ns), full);
                tot.full_ns = Some(f);
            }
            self.last_pressure = Some(p);
        }
    }
}

/// A delta's on-CPU time split at its thread's latest cgroup move: `(cgroup id, the
/// delta's part)` for the cgroup it left (if it moved during the interval and had run
/// there), then the delta with that part taken out. A thread moved more than once
/// between two reads has its earlier cgroups' time charged to the one it left last;
/// counts and waits go to the cgroup of its latest switch-out.
pub fn split_at_cgroup_move(d: &ThreadStats) -> (Option<(u64, ThreadStats)>, ThreadStats) {
    let before = d.cgroup_moved_at_ns.min(d.on_cpu_ns);
    if d.cgroup_prev_id == 0 || before == 0 {
        return (None, *d);
    }
    let mut left = ThreadStats::zeroed();
    left.tgid = d.tgid;
    left.comm = d.comm;
    left.on_cpu_ns = before;
    left.cgroup_id = d.cgroup_prev_id;
    let mut rest = *d;
    rest.on_cpu_ns -= before;
    rest.cgroup_moved_at_ns = 0;
    (Some((d.cgroup_prev_id, left)), rest)
}

/// Counter totals of a series (ns and counts, as the kernel keeps them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub on_cpu_ns: u64,
    pub runq_wait_ns: u64,
    pub runq_waits: u64,
    pub off_cpu_ns: u64,
    pub blocked_ns: u64,
    pub preempted_ns: u64,
    pub voluntary: u64,
    pub involuntary: u64,
    pub migrations: u64,
    pub slices: u64,
}

impl Totals {
    /// Adds one thread's growth since the previous read.
    pub fn add(&mut self, d: &ThreadStats) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.on_cpu_ns, d.on_cpu_ns);
        add(&mut self.runq_wait_ns, d.runq_wait_ns);
        add(&mut self.runq_waits, d.runq_waits);
        add(&mut self.off_cpu_ns, d.off_cpu_ns);
        add(&mut self.blocked_ns, d.blocked_ns);
        add(&mut self.preempted_ns, d.preempted_ns);
        add(&mut self.voluntary, d.voluntary);
        add(&mut self.involuntary, d.involuntary);
        add(&mut self.migrations, d.migrations);
        add(&mut self.slices, d.slices);
    }
}

/// One series: totals, histograms, and when it last grew.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub totals: Totals,
    pub hist: HistSet,
    /// CLOCK_MONOTONIC ns of the last growth (0: never).
    pub last_active_ns: u64,
}

impl Series {
    fn touch(&mut self, now_ns: u64) {
        self.last_active_ns = self.last_active_ns.max(now_ns);
    }
}

/// A process's own series.
#[derive(Clone, Debug)]
pub struct ProcessSeries {
    pub pid: u32,
    pub comm: String,
    /// Its cgroup label, as the cgroup series name it.
    pub cgroup: String,
    pub series: Series,
}

/// Every series the exporter shows.
#[derive(Clone, Debug)]
pub struct Book {
    pub cgroups: BTreeMap<String, Series>,
    /// By PID.
    pub processes: BTreeMap<u32, ProcessSeries>,
    /// Processes without a series of their own, summed.
    pub other: Series,
    /// Cgroups without a series of their own (`max_cgroups` reached), summed.
    pub other_cgroup: Series,
    /// Largest number of process series.
    pub max_series: usize,
    /// Largest number of cgroup series.
    pub max_cgroups: usize,
    pub expiry_ns: u64,
    /// Series removed after `expiry_ns` idle, since the start.
    pub expired: u64,
    /// Process deltas that went to `other` because `max_series` was reached.
    pub overflowed: u64,
    /// Cgroup deltas that went to `other_cgroup` because `max_cgroups` was reached.
    pub cgroups_overflowed: u64,
}

/// Who a delta belongs to.
#[derive(Clone, Copy, Debug)]
pub struct Owner<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub cgroup: &'a str,
}

impl Book {
    pub fn new(max_series: usize, max_cgroups: usize, expiry_ns: u64) -> Self {
        Book {
            cgroups: BTreeMap::new(),
            processes: BTreeMap::new(),
            other: Series::default(),
            other_cgroup: Series::default(),
            max_series,
            max_cgroups,
            expiry_ns,
            expired: 0,
            overflowed: 0,
            cgroups_overflowed: 0,
        }
    }

    /// The cgroup's series, created while there is room, else `other_cgroup`.
    fn cgroup(&mut self, label: &str, now_ns: u64) -> &mut Series {
        let s = if self.cgroups.contains_key(label) || self.cgroups.len() < self.max_cgroups {
            self.cgroups.entry(label.to_string()).or_default()
        } else {
            self.cgroups_overflowed += 1;
            &mut self.other_cgroup
        };
        s.touch(now_ns);
        s
    }

    /// The process's series, created while there is room; `None`: it goes to `other`.
    fn process(&mut self, o: Owner, now_ns: u64) -> Option<&mut Series> {
        if !self.processes.contains_key(&o.pid) {
            if self.processes.len() >= self.max_series {
                self.overflowed += 1;
                return None;
            }
            self.processes.insert(
                o.pid,
                ProcessSeries {
                    pid: o.pid,
                    comm: o.comm.to_string(),
                    cgroup: o.cgroup.to_string(),
                    series: Series::default(),
                },
            );
        }
        let p = self.processes.get_mut(&o.pid)?;
        // A recycled PID (or an exec) renames the series' process; its totals stay.
        if p.comm != o.comm {
            p.comm = o.comm.to_string();
        }
        p.series.touch(now_ns);
        Some(&mut p.series)
    }

    /// Adds a thread's growth to its process and cgroup.
    pub fn add_thread(&mut self, o: Owner, d: &ThreadStats, now_ns: u64) {
        self.cgroup(o.cgroup, now_ns).totals.add(d);
        match self.process(o, now_ns) {
            Some(s) => s.totals.add(d),
            None => {
                self.other.totals.add(d);
                self.other.touch(now_ns);
            }
        }
    }

    /// Adds a process's histogram growth to its process and cgroup.
    pub fn add_hist(&mut self, o: Owner, h: &HistSet, now_ns: u64) {
        if hist_is_empty(h) {
            return;
        }
        self.cgroup(o.cgroup, now_ns).hist.merge(h);
        match self.process(o, now_ns) {
            Some(s) => s.hist.merge(h),
            None => {
                self.other.hist.merge(h);
                self.other.touch(now_ns);
            }
        }
    }

    /// Removes series idle for longer than the expiry: processes that exited or went
    /// quiet (a process that runs again later starts a new series, which Prometheus
    /// reads as a counter reset), and cgroups that no longer exist (`cgroup_exists`: a
    /// cgroup that is still there keeps its series, so its totals never restart).
    /// Returns how many went.
    pub fn expire(&mut self, now_ns: u64, cgroup_exists: impl Fn(&str) -> bool) -> usize {
        let limit = now_ns.saturating_sub(self.expiry_ns);
        let before = self.processes.len() + self.cgroups.len();
        self.processes
            .retain(|_, p| p.series.last_active_ns >= limit);
        self.cgroups
            .retain(|name, s| s.last_active_ns >= limit || cgroup_exists(name));
        let gone = before - (self.processes.len() + self.cgroups.len());
        self.expired += gone as u64;
        gone
    }
}

/// A program's BPF run-time statistics.
#[derive(Clone, Debug, Default)]
pub struct ProgramStats {
    pub name: String,
    pub run_time_ns: u64,
    pub run_count: u64,
}

/// What the exporter shows at a scrape: the series and the machine- and self-level
/// figures beside them.
#[derive(Clone, Debug)]
pub struct Exposition {
    pub book: Book,
    /// Classic histogram bounds, ns.
    pub bounds_ns: Vec<u64>,
    pub probe: String,
    pub runq_source: String,
    /// Per CPU, cumulative (index = CPU).
    pub cpu_busy_ns: Vec<u64>,
    pub cpu_steal_ns: Vec<u64>,
    /// (kind, cumulative count).
    pub drops: Vec<(String, u64)>,
    pub programs: Vec<ProgramStats>,
    /// Live entries in the per-thread map.
    pub map_entries: usize,
    /// Entries in the per-process histogram map (one per process, kind and bucket), or
    /// the threads with histograms of their own (see `hist_map`).
    pub hist_entries: usize,
    /// Where the kernel keeps the per-process histograms: "hist_scoped" (a hash map of
    /// 65536 entries) or "task_hist" (each thread's task storage, one entry per thread).
    pub hist_map: &'static str,
    /// The tracer's own CPU time (user + system), seconds, and resident memory.
    pub self_cpu_s: f64,
    pub self_rss_bytes: u64,
    /// pseries with vcpudispatch_stats on: per vCPU, the hypervisor's eight dispatch
    /// counters in the kernel's order (`pseries::vcpudispatch::COUNTER_NAMES`).
    pub vcpu_dispatch: Vec<(u32, [u64; 8])>,
    /// pseries with `--dtl`: per vCPU, the Dispatch Trace Log read since the start.
    pub dtl: Vec<DtlVcpu>,
    /// Per cgroup series label: its workload's labels (`pod`, `container`, ...).
    pub cgroup_labels: BTreeMap<String, Labels>,
    /// Per cgroup series label: its throttling and pressure.
    pub cgroup_cpu: BTreeMap<String, CgroupCpu>,
    /// The machine's CPU pressure (`/proc/pressure/cpu`).
    pub host_pressure: Option<Pressure>,
    /// Thread deltas sent to `cgroup="other"` by `--cgroup-allow`/`--cgroup-deny`.
    pub cgroups_filtered: u64,
    /// cgroup ids with a known path, and walks of the cgroup tree since the start.
    pub cgroup_names: usize,
    pub cgroup_walks: u64,
    /// `--runqlen`: each CPU's samples since the start (empty without it).
    pub runqlen: Vec<crate::model::runqlen::CpuSamples>,
}

/// One vCPU's Dispatch Trace Log, cumulative.
#[derive(Clone, Debug, Default)]
pub struct DtlVcpu {
    pub cpu: u32,
    /// enqueue_to_dispatch_time: ready on the hypervisor's queue until dispatched, ns.
    pub dispatch: Histogram,
    pub entries: u64,
    /// Gaps where entries were lost (a lower bound on lost entries).
    pub gaps: u64,
}

fn hist_is_empty(h: &HistSet) -> bool {
    h.on_cpu.is_empty() && h.runq.is_empty() && h.off_cpu.is_empty()
}

/// The first `depth` components of a cgroup v2 path (`/system.slice/x.service/y` at
/// depth 2 is `/system.slice/x.service`): a systemd unit or a container, not each of
/// its sub-cgroups. Depth 0 is `/`. Bytes, as the kernel gives the path: a component
/// that is not UTF-8 is cut off below the depth like any other.
pub fn cgroup_prefix(path: &[u8], depth: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + 1);
    for part in path
        .trim_ascii_end()
        .split(|&b| b == b'/')
        .filter(|p| !p.is_empty())
        .take(depth)
    {
        out.push(b'/');
        out.extend_from_slice(part);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// The label of [`cgroup_prefix`], escaped ([`words::escape`]): a cgroup named with
/// bytes that are not UTF-8 (or with controls) gets a label of its own.
pub fn cgroup_label(path: &[u8], depth: usize) -> String {
    words::escape(cgroup_prefix(path, depth))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(on_cpu_ns: u64) -> ThreadStats {
        let mut s = ThreadStats::zeroed();
        s.on_cpu_ns = on_cpu_ns;
        s.slices = 1;
        s
    }

    fn owner(pid: u32) -> Owner<'static> {
        Owner {
            pid,
            comm: "w",
            cgroup: "/a",
        }
    }

    #[test]
    fn process_series_are_bounded_and_the_rest_is_other() {
        let mut b = Book::new(2, 10, 10);
        for pid in 1..=4 {
            b.add_thread(owner(pid), &stats(100), 1);
        }
        assert_eq!(b.processes.len(), 2);
        assert_eq!(b.other.totals.on_cpu_ns, 200);
        assert_eq!(b.cgroups["/a"].totals.on_cpu_ns, 400);
        assert_eq!(b.overflowed, 2);
        // An existing series keeps growing at the limit.
        b.add_thread(owner(1), &stats(5), 2);
        assert_eq!(b.processes[&1].series.totals.on_cpu_ns, 105);
    }

    #[test]
    fn idle_series_expire_and_make_room() {
        let mut b = Book::new(1, 10, 10);
        b.add_thread(owner(1), &stats(1), 100);
        assert_eq!(b.expire(105, |_| false), 0);
        assert_eq!(
            b.expire(111, |_| true),
            1,
            "the process; its cgroup is still there"
        );
        assert_eq!(b.expire(111, |_| false), 1, "the cgroup, removed");
        b.add_thread(owner(2), &stats(1), 112);
        assert!(b.processes.contains_key(&2));
        assert_eq!(b.expired, 2);
    }

    /// Issue 25 item 5: 1,500 cgroups made every scrape 141k lines.
    #[test]
    fn cgroup_series_are_bounded_and_the_rest_is_other() {
        let mut b = Book::new(100, 2, 10);
        for (pid, cg) in [(1, "/a"), (2, "/b"), (3, "/c"), (4, "/d"), (5, "/a")] {
            let o = Owner {
                pid,
                comm: "w",
                cgroup: cg,
            };
            b.add_thread(o, &stats(10), 1);
        }
        assert_eq!(b.cgroups.len(), 2);
        assert_eq!(b.cgroups["/a"].totals.on_cpu_ns, 20);
        assert_eq!(b.other_cgroup.totals.on_cpu_ns, 20);
        assert_eq!(b.cgroups_overflowed, 2);
        // Processes keep their own series (and their cgroup's name).
        assert_eq!(b.processes[&3].cgroup, "/c");
    }

    #[test]
    fn throttling_and_pressure_never_go_down_across_a_recreated_cgroup() {
        let t = |p, n, ns| Throttling {
            periods: p,
            throttled_periods: n,
            throttled_ns: ns,
        };
        let mut c = CgroupCpu::default();
        c.update(Some(t(10, 2, 500)), None);
        c.update(Some(t(15, 3, 900)), None);
        assert_eq!(c.throttling, Some(t(15, 3, 900)));
        // Made anew: its counters start at zero again.
        c.update(Some(t(4, 1, 100)), None);
        assert_eq!(c.throttling, Some(t(19, 4, 1000)));
        c.update(None, None);
        assert_eq!(c.throttling, Some(t(19, 4, 1000)), "unreadable: kept");
        let p = |s, f| Pressure {
            some_ns: s,
            full_ns: f,
        };
        c.update(None, Some(p(100, Some(10))));
        c.update(None, Some(p(150, Some(5))));
        assert_eq!(c.pressure, Some(p(150, Some(15))));
    }

    #[test]
    fn a_move_splits_the_on_cpu_time_of_the_interval() {
        let mut d = stats(10_000_000);
        d.cgroup_id = 7;
        d.cgroup_prev_id = 3;
        d.cgroup_moved_at_ns = 4_000_000;
        d.voluntary = 5;
        let (left, rest) = split_at_cgroup_move(&d);
        let (id, left) = left.expect("it moved in the interval");
        assert_eq!((id, left.on_cpu_ns, left.voluntary), (3, 4_000_000, 0));
        assert_eq!(
            (rest.on_cpu_ns, rest.voluntary, rest.cgroup_id),
            (6_000_000, 5, 7)
        );
        // Moved before the interval, or from no cgroup seen: nothing to split.
        d.cgroup_moved_at_ns = 0;
        assert!(split_at_cgroup_move(&d).0.is_none());
        d.cgroup_moved_at_ns = 4_000_000;
        d.cgroup_prev_id = 0;
        assert_eq!(split_at_cgroup_move(&d).1.on_cpu_ns, 10_000_000);
    }

    #[test]
    fn cgroup_labels_cut_at_depth() {
        assert_eq!(
            cgroup_label(b"/system.slice/x.service/y", 2),
            "/system.slice/x.service"
        );
        assert_eq!(cgroup_label(b"/", 2), "/");
        assert_eq!(cgroup_label(b"/user.slice", 0), "/");
        assert_eq!(cgroup_label(b"/a/b", 9), "/a/b");
        assert_eq!(cgroup_label(b"/a/b\n", 9), "/a/b");
        // Issue 24 item 11: names that are not UTF-8 got `unknown`.
        assert_eq!(cgroup_label(b"/hide\xff/x", 2), "/hide\\xff/x");
        assert_eq!(cgroup_label(b"/top/hide\xff\x1b]2;x\x07", 1), "/top");
        assert_eq!(
            cgroup_label(b"/top/hide\xff\x1b]2;x\x07", 2),
            "/top/hide\\xff\\x1b]2;x\\x07"
        );
    }
}
