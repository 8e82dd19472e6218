//! `tracer offcpu`: where the traced threads spent their time off-CPU, as stacks.
//!
//! The kernel sums off-CPU time per (thread, user stack, kernel stack, state); this
//! command loads that program, keeps the traced processes' mappings while they live (so
//! a process that exits still symbolizes), and at the end symbolizes every stack once and
//! prints folded stacks, a flame graph, JSON or the top stacks.
use std::{
    collections::{BTreeSet, HashMap},
    io::Write as _,
    path::PathBuf,
    time::Duration,
};

use anyhow::{Context as _, Result};
use aya::Ebpf;
use tracer_common::offcpu::{offdrop, OffcpuConfig, STATE_BLOCKED, STATE_PREEMPTED};

use crate::{
    bpf::stacks::{OffcpuLoad, OffcpuTracer},
    cmd::session::{
        self,
        ends::{self, End, Ends, Inbox, Wake, Work},
        signals,
    },
    cmd::targets,
    model::options::Unwind,
    model::stacks::{
        Missing, OffState, OffcpuDrops, OffcpuReport, OffcpuStack, StackPart, StateFilter,
        WakerStack,
    },
    model::targets::Targets,
    output::{flamegraph, folded, stacks as text},
    sys::{
        clock::monotonic_ns,
        launch::{self},
        privileges,
        root::Root,
        symbolize::Symbolizer,
        unwind::Unwinders,
    },
};

mod copies;
mod parts;
use copies::Copies;
use parts::{in_interrupt, Parts};

/// What `tracer offcpu` was asked for.
#[derive(Clone, Debug)]
pub struct OffcpuOptions {
    pub targets: Targets,
    pub duration: Option<Duration>,
    pub states: StateFilter,
    pub min: Duration,
    pub kernel_only: bool,
    pub user_only: bool,
    pub folded: bool,
    pub svg: Option<PathBuf>,
    pub json: bool,
    pub top: usize,
    pub max_threads: u32,
    pub stack_entries: u32,
    /// Attach mode (auto: tp-btf, else raw-tp, else tracepoint).
    pub probe: crate::model::options::ProbeMode,
    /// Join each blocked period with the thread that woke it.
    pub wakers: bool,
    /// How user stacks are walked.
    pub unwind: Unwind,
}

/// Bytes of the ring the stack copies travel through (`--unwind dwarf`): about 1300
/// periods of full copies between two reads, 20 ms apart.
const COPY_RING_BYTES: u32 = 16 << 20;

pub fn run(o: OffcpuOptions, root: Root) -> Result<i32> {
    // Opened before anything is traced: a bad path fails at once, not after the run.
    let svg = match &o.svg {
        Some(p) => Some(flamegraph::create(p).context("--svg")?),
        None => None,
    };
    let prepared = session::start::prepare(&o.targets, &root, None)?;
    let child = prepared.child();
    let tracer = match start(&o, &root, &prepared.before, child) {
        Ok(t) => t,
        Err(e) => return Err(prepared.abort(e)),
    };
    let rt = signals::runtime()?;
    // The handlers are in place before the command runs.
    let mut sigs = {
        let _in = rt.enter();
        signals::Signals::install()?
    };
    // Attached: from here on only what symbolizing needs.
    let mut notices = Vec::new();
    let child = prepared.go(
        privileges::Keep::Symbolization,
        &o.targets.command,
        &mut notices,
    )?;
    for n in notices {
        log::warn!("{n}");
    }
    rt.block_on(trace(o, &root, tracer, child, svg, &mut sigs))
}

fn start(
    o: &OffcpuOptions,
    root: &Root,
    before: &std::collections::BTreeSet<u32>,
    child: Option<u32>,
) -> Result<OffcpuTracer> {
    let plan = targets::plan(&o.targets, child)?;
    let states = match o.states {
        StateFilter::Blocked => STATE_BLOCKED,
        StateFilter::Preempted => STATE_PREEMPTED,
        StateFilter::All => STATE_BLOCKED | STATE_PREEMPTED,
    };
    let load = OffcpuLoad {
        filter: plan.filter,
        cgroup: plan.cgroup,
        max_threads: o.max_threads,
        cfg: OffcpuConfig {
            min_ns: o.min.as_nanos().min(u64::MAX as u128) as u64,
            states,
            kernel_stacks: (!o.user_only) as u32,
            user_stacks: (!o.kernel_only) as u32,
            wakers: o.wakers as u32,
            ..Default::default()
        },
        stack_entries: o.stack_entries,
        sum_entries: 65536,
        probe: o.probe,
        // Every thread, or a cgroup's: a record per period would be too many.
        unwind: match o.unwind {
            Unwind::Auto if o.targets.system_wide() || o.targets.cgroup.is_some() => Unwind::Fp,
            u => u,
        },
        copy_ring_bytes: COPY_RING_BYTES,
    };
    let mut fill = |ebpf: &mut Ebpf| -> Result<()> {
        targets::seed(ebpf, root, &o.targets, before, child, o.max_threads).map(|_| ())
    };
    OffcpuTracer::start(&load, root, &mut fill)
}

/// What was traced, for the report's title.
fn target_text(o: &OffcpuOptions, child: Option<u32>) -> String {
    if let Some(cg) = &o.targets.cgroup {
        return format!("cgroup {}", cg.display());
    }
    if let Some(pid) = child {
        return format!(
            "command {} (PID {pid})",
            launch::short_command(&o.targets.command, 200)
        );
    }
    let mut parts: Vec<String> = o.targets.pids.iter().map(|p| format!("PID {p}")).collect();
    parts.extend(o.targets.tids.iter().map(|t| format!("TID {t}")));
    if parts.is_empty() {
        "all threads".to_string()
    } else {
        parts.join(", ")
    }
}

/// The off-CPU run's part of the loop: the traced processes' mappings read while they
/// live, every 50 ms for a target (a process that lives and dies between two reads is
/// not symbolized), every 500 ms for everything.
/// With `--unwind dwarf` it also reads the stack copies, every 20 ms.
struct Mappings<'a> {
    tracer: &'a OffcpuTracer,
    sym: &'a mut Symbolizer,
    copies: Option<&'a mut Copies>,
    known: BTreeSet<u32>,
    poll: Duration,
    /// The next look at the mappings, and the next read (sooner: copies left unread).
    next_maps: tokio::time::Instant,
    next: tokio::time::Instant,
}

/// How long one read of the stack copies may go on before the run's end is checked.
const COPIES_BUDGET: Duration = Duration::from_millis(10);

impl Mappings<'_> {
    /// The processes' mappings, then the stack copies. Returns whether the copies
    /// waiting were all read.
    fn read(&mut self) -> bool {
        self.known.extend(self.tracer.tgids_seen());
        for &tgid in &self.known {
            self.sym.remember(tgid);
        }
        self.next_maps = tokio::time::Instant::now() + self.poll;
        self.read_copies()
    }

    fn read_copies(&mut self) -> bool {
        let Some(c) = self.copies.as_deref_mut() else {
            return true;
        };
        let emptied = c.drain(self.sym, Some(COPIES_BUDGET));
        self.known.extend(c.tgids());
        emptied
    }
}

impl Work<()> for Mappings<'_> {
    fn due(&self) -> tokio::time::Instant {
        self.next
    }

    fn wake(&mut self, _why: Wake<()>) -> Result<Option<End>> {
        let now = tokio::time::Instant::now();
        if now >= self.next {
            // Copies left in the ring are read on at once, once the run's end is checked
            // (a drain to the end ran a `-d 200ms` window to 1 s under load).
            let emptied = if now >= self.next_maps {
                self.read()
            } else {
                self.read_copies()
            };
            self.next = if emptied {
                self.next_maps
            } else {
                tokio::time::Instant::now()
            };
        }
        Ok(None)
    }
}

async fn trace(
    o: OffcpuOptions,
    root: &Root,
    mut tracer: OffcpuTracer,
    child: Option<u32>,
    svg: Option<std::fs::File>,
    signals: &mut signals::Signals,
) -> Result<i32> {
    let t0 = monotonic_ns();
    let mut sym = Symbolizer::new();
    let wide = o.targets.system_wide();
    let mut copies = match (tracer.dwarf, tracer.take_copies()) {
        (Some(l), Some(ring)) => Some(Copies::new(ring, Unwinders::new(l))),
        _ => None,
    };
    let poll = match (&copies, wide) {
        (Some(_), _) => 20,
        (None, true) => 500,
        (None, false) => 50,
    };
    let mut work = Mappings {
        tracer: &tracer,
        sym: &mut sym,
        copies: copies.as_mut(),
        known: o.targets.pids.iter().copied().chain(child).collect(),
        poll: Duration::from_millis(poll),
        next_maps: tokio::time::Instant::now(),
        next: tokio::time::Instant::now(),
    };
    work.read();
    // `-d` counts from the window's start: the first read (every process's mappings,
    // system-wide) is inside it.
    let since = Duration::from_nanos(monotonic_ns().saturating_sub(t0));
    let left = o.duration.map(|d| d.saturating_sub(since));
    let ends = Ends::new(left, child, &o.targets, root, false);
    let end = ends::run(signals, &ends, root, &[], Inbox::None, &mut work).await?;
    let mut known = std::mem::take(&mut work.known);
    let (child_state, targets_exited) = match end {
        End::CommandExited(r) => (Some(r), false),
        End::TargetsExited => (None, true),
        _ => (None, false),
    };
    let t1 = monotonic_ns();
    tracer.detach();
    known.extend(tracer.tgids_seen());
    for &tgid in &known {
        sym.remember(tgid);
    }
    if let Some(c) = copies.as_mut() {
        c.drain(&mut sym, None);
    }
    let report = build_report(
        &o,
        &tracer,
        copies.as_ref(),
        &sym,
        t1 - t0,
        target_text(&o, child),
    )?;
    let mut out = Vec::new();
    if o.folded {
        folded::write(&report, &mut out)?;
    } else if o.json {
        text::write_json(&report, &mut out)?;
    } else {
        text::write_text(&report, o.top, &mut out)?;
        match (child_state, child) {
            (Some(st), _) => writeln!(out, "\ncommand: {}", st.describe())?,
            (None, Some(pid)) => writeln!(
                out,
                "\ncommand: still running (PID {pid}), no longer traced"
            )?,
            _ => {}
        }
        if targets_exited {
            writeln!(out, "\nall targets exited: the run ended with them")?;
        }
    }
    crate::output::stdout::emit_raw(&String::from_utf8_lossy(&out))?;
    // After the report: a flame graph that cannot be written must not lose it.
    if let Some(mut f) = svg {
        let mut buf = Vec::new();
        flamegraph::write_svg(&report, &mut buf).context("drawing the flame graph")?;
        f.write_all(&buf)
            .with_context(|| format!("writing {}", o.svg.as_ref().unwrap().display()))?;
    }
    Ok(match child_state {
        Some(r) => r.state.exit_code().unwrap_or(0),
        None => 0,
    })
}

fn build_report(
    o: &OffcpuOptions,
    tracer: &OffcpuTracer,
    copies: Option<&Copies>,
    sym: &Symbolizer,
    window_ns: u64,
    target: String,
) -> Result<OffcpuReport> {
    let mut sums = tracer.sums()?;
    let ids: BTreeSet<u32> = sums
        .iter()
        .flat_map(|x| {
            let w = x.waker.map_or([-1, -1], |w| [w.user_stack, w.kernel_stack]);
            [x.key.user_stack, x.key.kernel_stack, w[0], w[1]]
        })
        .filter(|&id| id >= 0)
        .map(|id| id as u32)
        .collect();
    let mut ips = tracer.stacks(&ids)?;
    let mut kernel_ids = BTreeSet::new();
    if let Some(c) = copies {
        for x in c.sums() {
            let w = x.waker.map_or(-1, |w| w.kernel_stack);
            kernel_ids.extend([x.key.kernel_stack, w].into_iter().filter(|&i| i >= 0));
            sums.push(x);
        }
        ips.extend(tracer.stacks(&kernel_ids.into_iter().map(|i| i as u32).collect())?);
        ips.extend(c.stacks().map(|(k, v)| (k, v.clone())));
    }
    let no_cuts = Default::default();
    let mut parts = Parts {
        sym,
        ips: &ips,
        cut_copies: copies.map_or(&no_cuts, |c| &c.cut),
        kcache: HashMap::new(),
        ucache: HashMap::new(),
        unsymbolized: BTreeSet::new(),
        truncated: BTreeSet::new(),
    };
    let mut stacks = Vec::new();
    for x in &sums {
        let k = &x.key;
        let comm = crate::model::words::from_comm(&x.comm);
        let kernel = parts.kernel(k.kernel_stack);
        let (user, cut) = parts.user(k.tgid, k.user_stack, &comm);
        let waker = x.waker.map(|w| {
            let comm = crate::model::words::from_comm(&w.comm);
            let kernel = parts.kernel(w.kernel_stack);
            let interrupt = in_interrupt(kernel.frames());
            WakerStack {
                pid: w.tgid,
                tid: w.tid,
                user: if interrupt {
                    StackPart::Missing {
                        missing: Missing::NotTaken,
                    }
                } else {
                    parts.user(w.tgid, w.user_stack, &comm).0
                },
                kernel,
                comm,
                interrupt,
            }
        });
        stacks.push(OffcpuStack {
            pid: k.tgid,
            tid: k.tid,
            comm,
            state: if k.state == STATE_PREEMPTED {
                OffState::Preempted
            } else {
                OffState::Blocked
            },
            total_ns: x.total_ns,
            count: x.count,
            user,
            kernel,
            user_truncated: cut,
            waker,
        });
    }
    let (truncated, unsymbolized) = (parts.truncated, parts.unsymbolized);
    let d = tracer.drops()?;
    let drops = OffcpuDrops {
        kernel_stack_collisions: d[offdrop::KSTACK_COLLISION as usize],
        user_stack_collisions: d[offdrop::USTACK_COLLISION as usize],
        stack_map_full: d[offdrop::STACK_MAP_FULL as usize],
        start_map_full: d[offdrop::START_FULL as usize],
        sums_map_full: d[offdrop::SUMS_FULL as usize],
        sums_map_full_ns: d[offdrop::SUMS_FULL_NS as usize],
        wakers_map_full: d[offdrop::WAKERS_FULL as usize],
        copies_lost: d[offdrop::COPY_LOST as usize],
        copy_slots_failed: d[offdrop::COPY_NO_SLOT as usize],
        switch_ins_unseen_timed: d[offdrop::UNSEEN_TIMED as usize],
        switch_ins_unseen_lost: d[offdrop::UNSEEN_LOST as usize],
    };
    let mut notes = Vec::new();
    if let Some(c) = copies.filter(|c| c.malformed > 0) {
        notes.push(format!(
            "{} of {} stack copy records were malformed and skipped",
            c.malformed, c.records
        ));
    }
    let fp_hint = match (&tracer.fp_because, tracer.dwarf) {
        (_, Some(_)) => String::new(),
        (Some(why), None) => format!("; --unwind dwarf cannot help here: {why}"),
        (None, None) => "; or --unwind dwarf".to_string(),
    };
    for b in &truncated {
        notes.push(if let Some(b) = b.strip_prefix("dwarf:") {
            format!(
                "some user stacks unwound from copies end in {b} before a thread's first function: the copy's {} KiB ended, or the code has no unwind information",
                tracer_common::offcpu::COPY_STACK / 1024
            )
        } else if b.starts_with('[') {
            format!(
                "some user stacks end in {b} code (no file: JIT, or a process that exec'd since): likely truncated"
            )
        } else {
            format!(
                "user stacks of {b} are likely truncated: no frame pointers (rebuild with -fno-omit-frame-pointer / -C force-frame-pointers=yes{fp_hint})"
            )
        });
    }
    for (pid, comm) in &unsymbolized {
        notes.push(format!(
            "user stacks of PID {pid} ({comm}) are not symbolized: it exited before its mappings could be read"
        ));
    }
    if drops.kernel_stack_collisions + drops.user_stack_collisions + drops.stack_map_full > 0 {
        notes.push(format!(
            "some stacks were lost (shown as [.. stack lost ..]): raise --stack-entries (now {})",
            o.stack_entries
        ));
    }
    Ok(OffcpuReport::new(
        window_ns,
        target,
        o.states,
        o.min.as_nanos() as u64,
        stacks,
        drops,
        notes,
    )
    .with_probe(tracer.mode.name())
    .with_unwind(if tracer.dwarf.is_some() {
        "dwarf"
    } else {
        "fp"
    }))
}
