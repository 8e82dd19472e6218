//! `tracer serve`: a long-running exporter. The programs trace the whole machine with
//! per-process histograms; each scrape (and a tick in between, so memory stays bounded
//! without scrapes) reads the maps, turns the growth since the last read into per-cgroup
//! and per-process series ([`Book`]), and forgets what it counted: exit records, the
//! histograms of dead processes. Series only grow, the number of process series is
//! bounded, idle ones expire.
mod auth;
mod cgroups;
pub(crate) use cgroups::read_kube_names;
mod conns;
mod http;

pub use cgroups::{check_pattern, Patterns};

use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    os::fd::OwnedFd,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use crate::model::targets::{Filter, HistScope};
use anyhow::{anyhow, Context as _, Result};
use tokio::sync::{mpsc, oneshot};

use crate::{
    bpf::{
        cgroups::MkdirRing,
        collect::Collector,
        loader::{LoadOptions, Tracer},
    },
    cmd::session::{
        ends::{self, End, Ends, Inbox, Wake, Work},
        signals::{self, Signals},
    },
    model::{
        options::{ProbeMode, RunqFrom},
        series::{split_at_cgroup_move, Book, Exposition, Owner, ProgramStats},
        snapshot::{Snapshot, DROP_NAMES},
        words,
    },
    output::openmetrics,
    pseries::{dtl, hypervisor, vcpudispatch},
    sys::{clock::monotonic_ns, privileges, procfs, root::Root, selfstat, webconfig::WebConfig},
};

/// The default port: unassigned in the Prometheus exporter port registry (9100
/// node_exporter, 9435 ebpf_exporter, ...) when this was written.
pub const DEFAULT_PORT: u16 = 9871;

/// What `tracer serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// Serve on a non-loopback address without TLS and authentication.
    pub insecure_listen: bool,
    pub web_config: Option<PathBuf>,
    pub cgroup_depth: usize,
    pub max_series: usize,
    /// Most cgroup series; cgroups beyond it are summed as cgroup="other".
    pub max_cgroups: usize,
    pub expiry: Duration,
    /// Classic histogram bounds, ns (empty: powers of two from 1.024 µs to 17.2 s).
    pub bounds_ns: Vec<u64>,
    pub probe: ProbeMode,
    pub runq_from: RunqFrom,
    pub max_threads: u32,
    /// pseries: read the Dispatch Trace Log (enables the hypervisor's logging while it
    /// runs; `tracer dtl` cannot read it meanwhile).
    pub dtl: bool,
    /// Sample each CPU's run-queue length (`tracer_runqueue_length`).
    pub runqlen: bool,
    /// Which cgroups get series of their own (the rest: cgroup="other").
    pub patterns: Patterns,
    /// Where the kubelet writes pod and container logs (`pods/`, `containers/`): their
    /// names say the pods' names and namespaces and the containers' names.
    pub kubelet_logs: PathBuf,
}

/// Reads between scrapes so exit records and dead processes' histograms are collected
/// (and forgotten) even when nobody scrapes.
const TICK: Duration = Duration::from_secs(5);
/// Scrapes closer together than this share one read.
const FRESH: Duration = Duration::from_millis(100);

pub fn run(cfg: ServeConfig, root: Root) -> Result<i32> {
    let web = match &cfg.web_config {
        Some(p) => WebConfig::load(p)?,
        None => WebConfig::default(),
    };
    let tls = web.tls_acceptor()?;
    if !cfg.listen.ip().is_loopback()
        && !cfg.insecure_listen
        && (tls.is_none() || web.users.is_empty())
    {
        return Err(anyhow!(
            "--listen {} is reachable from other machines: process names and cgroup paths are \
             not for everyone to read. Give --web.config.file with tls_server_config and \
             basic_auth_users, or --insecure-listen to serve it anyway",
            cfg.listen
        ));
    }
    // Before anything is attached; and not on other machines: mounting debugfs there
    // would be a side effect for nothing.
    if cfg.dtl && !vcpudispatch::is_pseries(&root) {
        return Err(anyhow!(
            "--dtl: no Dispatch Trace Log here ({} is missing: not a pseries partition)",
            vcpudispatch::STATS_PATH
        ));
    }
    privileges::check()?;
    let rt = signals::runtime()?;
    rt.block_on(serve(cfg, root, web, tls))
}

/// Every piece the loop keeps.
struct State {
    tracer: Tracer,
    collector: Collector,
    prev: Snapshot,
    /// PID to (comm, the cgroup label of its last thread delta), the comm read at
    /// first sight.
    procs: HashMap<u32, (String, String)>,
    /// Processes already gone at this read, by the name their threads' records gave:
    /// their histograms come with no name of their own (a process that started and
    /// ended between two scrapes was exported as `comm=""`).
    gone: HashMap<u32, String>,
    /// Thread cgroup ids to series labels, with each series' workload.
    workloads: cgroups::Workloads,
    root: Root,
    exposition: Arc<Mutex<Exposition>>,
    last_read: Instant,
    _stats_fd: Option<OwnedFd>,
    /// `--dtl`: the open debugfs logs and what was read from them.
    dtl: Option<(Vec<dtl::read::DtlFile>, dtl::analyze::DtlAnalyzer)>,
}

async fn serve(
    cfg: ServeConfig,
    root: Root,
    web: WebConfig,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<i32> {
    // The handlers first: a signal from here on stops the exporter cleanly.
    let mut signals = Signals::install()?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("listening on {}", cfg.listen))?;
    // The port the kernel chose for `--listen ADDR:0`.
    let listening = listener.local_addr().unwrap_or(cfg.listen);
    let bounds_ns = if cfg.bounds_ns.is_empty() {
        openmetrics::default_bounds_ns()
    } else {
        cfg.bounds_ns.clone()
    };
    let opts = LoadOptions {
        probe: cfg.probe,
        filter: Filter::All,
        cgroup: None,
        hist_scope: HistScope::Process,
        n_counters: 0,
        max_threads: cfg.max_threads,
        runq_from: cfg.runq_from,
        record: Default::default(),
        // Bounds that are all powers of two of ns (the default) need no more from the
        // kernel: 1 to 3 map entries per process and octave instead of up to 96, so the
        // map holds ~30x more processes before it is full.
        hist_pow2: bounds_ns.iter().all(|b| b.is_power_of_two()),
        thread_cgroups: true,
        // The same bounds from each thread's own histograms (task storage): no hash
        // lookup per switch, and a read that grows with the threads, not the buckets.
        thread_hists: bounds_ns.iter().all(|b| b.is_power_of_two())
            && bounds_ns.iter().all(|&b| b >= tracer_common::hist::SUB),
        runqlen: cfg.runqlen,
        irq: false,
    };
    let mut tracer = Tracer::start(&opts, &root, &mut |_| Ok(()))?;
    // Before the first walk of the tree: a cgroup made meanwhile is in one or the other.
    let ring = match MkdirRing::attach(&mut tracer.ebpf) {
        Ok(r) => Some(r),
        Err(e) => {
            log::warn!(
                "cgroups made and removed between two reads will be cgroup=\"unknown\" \
                 (counted as cgroup_unresolved): {e:#}"
            );
            None
        }
    };
    let workloads = cgroups::Workloads::new(
        &root,
        ring,
        cfg.cgroup_depth,
        &cfg.patterns,
        cfg.kubelet_logs.clone(),
        monotonic_ns(),
    )
    .map_err(|e| anyhow!("--cgroup-allow/--cgroup-deny: {e}"))?;
    // In-kernel cost for the self-monitoring series; needs CAP_SYS_ADMIN, so before the drop.
    let stats_fd = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
    // The debugfs logs are root's: opened before the drop, read through the fds after.
    let dtl = if cfg.dtl {
        dtl::read::ensure_debugfs(&root);
        let files = dtl::read::open_all(&root)?;
        let tb = dtl::read::read_timebase(&root)?;
        Some((files, dtl::analyze::DtlAnalyzer::new(tb)))
    } else {
        None
    };
    let opening = tracer.opening();
    let mut collector = Collector::new(
        &mut tracer.ebpf,
        HistScope::Process,
        tracer.runq,
        root.clone(),
        opening,
        Default::default(),
    )?
    .with_thread_hists(tracer.hist_in_task)
    .without_proc_comms()
    .with_hists_apart();
    let prev = collector.snapshot(&mut tracer.ebpf, true, 0)?;
    if let Err(e) = privileges::after_attach(privileges::Keep::Nothing) {
        log::warn!("could not lock privileges after attaching: {e}");
    }
    let exposition = Arc::new(Mutex::new(Exposition {
        book: Book::new(
            cfg.max_series,
            cfg.max_cgroups,
            cfg.expiry.as_nanos() as u64,
        ),
        bounds_ns,
        probe: tracer.mode.name().to_string(),
        runq_source: tracer.runq.name().to_string(),
        cpu_busy_ns: Vec::new(),
        cpu_steal_ns: Vec::new(),
        drops: Vec::new(),
        programs: Vec::new(),
        map_entries: 0,
        hist_entries: 0,
        hist_map: if tracer.hist_in_task {
            "task_hist"
        } else {
            "hist_scoped"
        },
        self_cpu_s: 0.0,
        self_rss_bytes: 0,
        vcpu_dispatch: Vec::new(),
        dtl: Vec::new(),
        cgroup_labels: Default::default(),
        cgroup_cpu: Default::default(),
        host_pressure: None,
        cgroups_filtered: 0,
        cgroup_names: 0,
        cgroup_walks: 0,
        runqlen: Vec::new(),
    }));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (tx, mut rx) = mpsc::channel::<oneshot::Sender<()>>(MAX_WAITING);
    let shared = http::Shared {
        refresh: tx,
        exposition: exposition.clone(),
        auth: Arc::new(auth::Auth::new(&web)),
        index: Arc::new(index_page(&cfg)),
    };
    let mut st = State {
        tracer,
        collector,
        prev,
        procs: HashMap::new(),
        gone: HashMap::new(),
        workloads,
        root,
        exposition,
        last_read: Instant::now(),
        _stats_fd: stats_fd,
        dtl,
    };
    st.read()?;
    let server = tokio::spawn(http::serve(listener, tls, shared));
    {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr().lock(),
            "Serving scheduling metrics of all CPUs at {scheme}://{}/metrics (probe {}). Hit Ctrl-C to end.",
            listening,
            st.tracer.mode.name()
        );
    }
    // Exit records are drained as they come, not every TICK: a burst of exits would
    // fill the ring between two reads.
    let exits = st.collector.exit_ring_watch()?;
    let made = match st.workloads.ring() {
        Some(r) => Some(r.watch()?),
        None => None,
    };
    let mut rings = vec![&exits];
    rings.extend(made.as_ref());
    let ends = Ends {
        deadline: None,
        child: None,
        watch: None,
        stdout: false,
    };
    let root = st.root.clone();
    let why = match ends::run(
        &mut signals,
        &ends,
        &root,
        &rings,
        Inbox::Bounded(&mut rx),
        &mut st,
    )
    .await?
    {
        End::Signal(sig) => sig,
        other => return Err(anyhow::anyhow!("the exporter stopped: {other:?}")),
    };
    server.abort();
    log::info!("{why}: stopping");
    st.tracer.detach();
    Ok(0)
}

/// The exporter's part of the loop: a read every TICK, a fresher one for a scrape that
/// asks, death records drained as they come.
impl Work<oneshot::Sender<()>> for State {
    fn due(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.last_read + TICK)
    }

    fn wake(&mut self, why: Wake<oneshot::Sender<()>>) -> Result<Option<End>> {
        match why {
            Wake::Message(reply) => {
                if self.last_read.elapsed() >= FRESH {
                    if let Err(e) = self.read() {
                        log::warn!("reading the maps: {e:#}");
                    }
                }
                let _ = reply.send(());
            }
            // The exit ring, then the cgroup_mkdir ring (when cgroups are labelled).
            Wake::Readable(0) => self.collector.drain(),
            Wake::Readable(_) => self.workloads.drain(monotonic_ns()),
            Wake::Tick => {
                if self.last_read.elapsed() >= TICK {
                    if let Err(e) = self.read() {
                        log::warn!("reading the maps: {e:#}");
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Scrapes waiting for a read at once; more wait for room.
const MAX_WAITING: usize = 64;

impl State {
    /// One read: growth since the last read into the series, then forget what was counted.
    fn read(&mut self) -> Result<()> {
        let ebpf = &mut self.tracer.ebpf;
        let mut snap = self.collector.snapshot(ebpf, true, 0)?;
        let read_keys: HashSet<_> = snap.threads.keys().copied().collect();
        // Processes with a thread read alive now need no look in /proc to be known
        // alive: at 10,000 processes those looks were the largest part of a read.
        let alive: HashSet<u32> = snap
            .threads
            .values()
            .filter(|r| !r.exited && r.stats.tgid != 0)
            .map(|r| r.stats.tgid)
            .collect();
        snap.adopt_missing(&self.prev, HistScope::Process);
        snap.raise_to(&self.prev, HistScope::Process);
        // The per-process histograms' growth is taken below, only for processes whose
        // histograms changed: a dense copy of every process's three histograms (29 KiB
        // each) at every read was a third of the exporter's peak memory.
        let scoped = std::mem::take(&mut snap.scoped);
        let prev_scoped = std::mem::take(&mut self.prev.scoped);
        let delta = snap.delta(&self.prev);
        snap.scoped = scoped;
        let now = snap.at_ns;
        let expo = self.exposition.clone();
        let mut x = expo.lock().unwrap_or_else(|e| e.into_inner());
        self.workloads.begin_read(now);
        self.gone.clear();
        // Each process's cgroup for its histograms: that of its threads' latest records
        // (every histogram count comes with a switch-out of one of them).
        let mut proc_cgroup: HashMap<u32, (u64, u64)> = HashMap::new();
        for r in snap.threads.values() {
            let e = proc_cgroup.entry(r.stats.tgid).or_insert((0, 0));
            if r.stats.cgroup_id != 0 && r.stats.last_off_ns >= e.1 {
                *e = (r.stats.cgroup_id, r.stats.last_off_ns);
            }
        }
        for r in delta.threads.values() {
            let pid = match r.stats.tgid {
                0 => procfs::tgid_of(&self.root, r.tid).unwrap_or(r.tid),
                p => p,
            };
            // Its time before a move in the interval goes to the cgroup it left.
            let (left, rest) = split_at_cgroup_move(&r.stats);
            for (id, d) in left
                .iter()
                .map(|(id, d)| (*id, d))
                .chain([(rest.cgroup_id, &rest)])
            {
                let cgroup = self.workloads.label(id, pid, now);
                let comm = self.process(pid, &d.comm, &cgroup);
                x.book.add_thread(
                    Owner {
                        pid,
                        comm: &comm,
                        cgroup: &cgroup,
                    },
                    d,
                    now,
                );
            }
        }
        drop(delta);
        for (&pid, h) in &snap.scoped {
            let grown = match prev_scoped.get(&pid) {
                Some(e) if e == h => continue,
                Some(e) => h.saturating_sub(e),
                None => h.clone(),
            };
            let cgroup = match (proc_cgroup.get(&pid), self.procs.get(&pid)) {
                (Some(&(id, _)), _) if id != 0 => self.workloads.label(id, pid, now),
                (_, Some((_, label))) => label.clone(),
                _ => self.workloads.label(0, pid, now),
            };
            let comm = self.process(pid, &[0u8; 16], &cgroup);
            x.book.add_hist(
                Owner {
                    pid,
                    comm: &comm,
                    cgroup: &cgroup,
                },
                &grown,
                now,
            );
        }
        drop(prev_scoped);
        // Forget what is counted and cannot grow any more: exit records, threads carried
        // over from an earlier read that are gone, dead processes' histograms.
        self.collector.forget_exited();
        let root = &self.root;
        snap.threads.retain(|k, r| {
            !r.exited && (read_keys.contains(k) || procfs::thread_exists(root, r.tid))
        });
        let dead: HashSet<u32> = snap
            .scoped
            .keys()
            .copied()
            .filter(|&pid| !alive.contains(&pid) && !procfs::thread_exists(root, pid))
            .collect();
        if !dead.is_empty() {
            self.collector.forget_scoped(&mut self.tracer.ebpf, &dead)?;
            snap.scoped.retain(|pid, _| !dead.contains(pid));
        }
        let w = &self.workloads;
        x.book.expire(now, |label| w.exists(label));
        self.workloads
            .prune(&x.book.cgroups, now.saturating_sub(x.book.expiry_ns));
        let live: HashSet<u32> = x.book.processes.keys().copied().collect();
        self.procs.retain(|pid, _| {
            live.contains(pid) || alive.contains(pid) || procfs::thread_exists(root, *pid)
        });
        self.publish(&snap, &mut x);
        drop(x);
        self.prev = snap;
        self.last_read = Instant::now();
        // The churn test checks that the resident size stays flat.
        crate::sys::heap::give_back();
        Ok(())
    }

    /// A process's comm, read once (escaped: names are chosen by whoever runs the
    /// process, and end up on terminals, curl and promtool, as well as in Prometheus),
    /// and the cgroup label of its latest delta remembered.
    fn process(&mut self, pid: u32, thread_comm: &[u8], cgroup: &str) -> String {
        if let Some(p) = self.procs.get_mut(&pid) {
            if p.1 != cgroup {
                p.1 = cgroup.to_string();
            }
            return p.0.clone();
        }
        let comm = match procfs::comm_bytes(&self.root, pid, pid) {
            Some(c) => words::escape(c),
            None if thread_comm.first().is_none_or(|&b| b == 0) => {
                self.gone.get(&pid).cloned().unwrap_or_default()
            }
            None => words::escape(words::from_comm(thread_comm)),
        };
        // A process that is already gone is not cached: its PID may come back.
        if procfs::thread_exists(&self.root, pid) {
            self.procs.insert(pid, (comm.clone(), cgroup.to_string()));
        } else if !comm.is_empty() {
            self.gone.entry(pid).or_insert_with(|| comm.clone());
        }
        comm
    }

    /// Copies the figures the endpoint shows.
    fn publish(&mut self, snap: &Snapshot, x: &mut Exposition) {
        let steal = hypervisor::Snapshot::take(&self.root).ok();
        let programs = self
            .tracer
            .ebpf
            .programs()
            .filter_map(|(name, p)| {
                let info = p.info().ok()?;
                Some(ProgramStats {
                    name: name.to_string(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                    run_count: info.run_count(),
                })
            })
            .filter(|p| p.run_count > 0 || p.run_time_ns > 0)
            .collect();
        let (cpu_s, rss) = selfstat::usage(&self.root).unwrap_or((0.0, 0));
        x.cpu_busy_ns = snap.cpu_busy_ns.clone();
        if self.tracer.runqlen_delayed_told.is_some() {
            match crate::bpf::runqlen::read(&self.tracer.ebpf) {
                Ok(r) => x.runqlen = r,
                Err(e) => log::warn!("reading the run-queue length samples: {e}"),
            }
        }
        if let Some(s) = steal {
            let ns_per_tick = 1_000_000_000 / s.user_hz.max(1);
            let n = s
                .steal
                .iter()
                .map(|c| c.cpu as usize + 1)
                .max()
                .unwrap_or(0);
            let mut v = vec![0u64; n];
            for c in &s.steal {
                v[c.cpu as usize] = c.steal_ticks.saturating_mul(ns_per_tick);
            }
            x.cpu_steal_ns = v;
            x.vcpu_dispatch = s
                .dispatch
                .iter()
                .flatten()
                .map(|c| (c.cpu, c.counters.to_array()))
                .collect();
        }
        if let Some((files, an)) = &mut self.dtl {
            if let Err(e) = dtl::read::read_available(files, an, true) {
                log::warn!("reading the Dispatch Trace Log: {e}");
            }
            x.dtl = an.vcpus();
        }
        x.drops = DROP_NAMES
            .iter()
            .zip(snap.drops.iter())
            .map(|(n, v)| (n.to_string(), *v))
            .collect();
        // Time no cgroup could be named for (it went to cgroup="unknown"), and new
        // cgroups the kernel's ring had no room for.
        let w = &mut self.workloads;
        w.events_lost = crate::bpf::cgroups::lost(&self.tracer.ebpf);
        x.drops.push(("threads_unread".into(), snap.threads_unread));
        x.drops.push(("cgroup_unresolved".into(), w.unresolved));
        x.drops.push(("cgroup_events_lost".into(), w.events_lost));
        let (labels, cpu) = w.publish();
        x.cgroup_labels = labels;
        x.cgroup_cpu = cpu;
        x.host_pressure = crate::sys::cgroups::host_pressure(&self.root);
        x.cgroups_filtered = w.filtered;
        x.cgroup_names = w.names_known();
        x.cgroup_walks = w.walks();
        x.programs = programs;
        x.map_entries = snap.live_entries;
        x.hist_entries = self.collector.scoped_entries;
        x.self_cpu_s = cpu_s;
        x.self_rss_bytes = rss;
    }
}

fn index_page(cfg: &ServeConfig) -> String {
    format!(
        "<!doctype html><html><head><title>tracer</title></head><body>\
         <h1>tracer {}</h1><p>Scheduling metrics computed in the kernel: on-CPU time, \
         run-queue latency and off-CPU time per cgroup (depth {}) and per process (at most \
         {} series; idle ones expire after {} s), per-CPU busy and steal time, and the \
         tracer's own cost.</p><p><a href=\"/metrics\">/metrics</a></p></body></html>\n",
        env!("CARGO_PKG_VERSION"),
        cfg.cgroup_depth,
        cfg.max_series,
        cfg.expiry.as_secs()
    )
}
