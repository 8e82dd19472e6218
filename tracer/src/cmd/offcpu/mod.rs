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
use tracer_common::offcpu::{
    offdrop, OffcpuConfig, STACK_COLLISION, STACK_COPIED, STACK_COPY_LOST, STACK_EMPTY, STACK_FULL,
    STACK_NOT_TAKEN, STATE_BLOCKED, STATE_PREEMPTED,
};

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
        Frame, Missing, OffState, OffcpuDrops, OffcpuReport, OffcpuStack, StackPart, StateFilter,
        WakerStack,
    },
    model::targets::Targets,
    output::{flamegraph, folded, stacks as text},
    sys::{
        clock::monotonic_ns,
        launch::{self},
        privileges,
        root::Root,
        symbolize::{base_name, SymFrame, Symbolizer},
        unwind::Unwinders,
    },
};

mod copies;
use copies::Copies;

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
        Err(e) => {
            prepared.abort();
            return Err(e);
        }
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
    next: tokio::time::Instant,
}

impl Mappings<'_> {
    fn read(&mut self) {
        self.known.extend(self.tracer.tgids_seen());
        for &tgid in &self.known {
            self.sym.remember(tgid);
        }
        if let Some(c) = self.copies.as_deref_mut() {
            c.drain(self.sym);
            self.known.extend(c.tgids());
        }
    }
}

impl Work<()> for Mappings<'_> {
    fn due(&self) -> tokio::time::Instant {
        self.next
    }

    fn wake(&mut self, _why: Wake<()>) -> Result<Option<End>> {
        if tokio::time::Instant::now() >= self.next {
            self.read();
            self.next = tokio::time::Instant::now() + self.poll;
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
        next: tokio::time::Instant::now(),
    };
    work.read();
    let ends = Ends::new(o.duration, child, &o.targets, root, false);
    let end = ends::run(signals, &ends, root, &[], Inbox::None, &mut work).await?;
    let mut known = std::mem::take(&mut work.known);
    let (child_state, targets_exited) = match end {
        End::CommandExited(st) => (Some(st), false),
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
        c.drain(&mut sym);
    }
    let report = build_report(
        &o,
        &tracer,
        copies.as_ref(),
        &sym,
        t1 - t0,
        target_text(&o, child),
    )?;
    if let Some(mut f) = svg {
        let mut buf = Vec::new();
        flamegraph::write_svg(&report, &mut buf).context("drawing the flame graph")?;
        f.write_all(&buf)
            .with_context(|| format!("writing {}", o.svg.as_ref().unwrap().display()))?;
    }
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
    Ok(match child_state {
        Some(st) => st.exit_code().unwrap_or(0),
        None => 0,
    })
}

fn missing(id: i32) -> Missing {
    match id {
        STACK_NOT_TAKEN => Missing::NotTaken,
        STACK_EMPTY => Missing::Empty,
        STACK_COLLISION => Missing::Collision,
        STACK_FULL => Missing::MapFull,
        STACK_COPY_LOST | STACK_COPIED => Missing::CopyLost,
        _ => Missing::Unreadable,
    }
}

fn frames(v: Vec<Vec<SymFrame>>) -> Vec<Frame> {
    v.into_iter()
        .flatten()
        .map(|f| Frame {
            name: f.name,
            inlined: f.inlined,
        })
        .collect()
}

/// Kernel frames that mean a wakeup ran in an interrupt, not in the task it
/// interrupted: x86's IRQ and system-vector entries, arm64's and powerpc's, softirqs run
/// on the way out of one, and the hrtimer interrupt every architecture has.
const INTERRUPT_FRAMES: &[&str] = &[
    "hrtimer_interrupt",
    "common_interrupt",
    "__irq_exit_rcu",
    "irq_exit_rcu",
    "handle_softirqs",
    "__do_softirq",
    "el1_interrupt",
    "el0_interrupt",
    "gic_handle_irq",
    "do_IRQ",
    "timer_interrupt",
];

/// Whether a waker's kernel stack ran in an interrupt.
fn in_interrupt(kernel: &[Frame]) -> bool {
    kernel.iter().any(|f| {
        INTERRUPT_FRAMES.contains(&f.name.as_str())
            || f.name.starts_with("asm_sysvec_")
            || f.name.starts_with("sysvec_")
    })
}

/// Stacks made into frames, each id once: kernel stacks by id, user stacks by process
/// and id, with what could not be symbolized and the binaries that cut stacks short.
struct Parts<'a> {
    sym: &'a Symbolizer,
    ips: &'a HashMap<u32, Vec<u64>>,
    /// Stacks unwound from copies that stop before a thread's first function.
    cut_copies: &'a std::collections::HashSet<u32>,
    kcache: HashMap<i32, StackPart>,
    ucache: HashMap<(u32, i32), (StackPart, Option<String>)>,
    unsymbolized: BTreeSet<(u32, String)>,
    truncated: BTreeSet<String>,
}

impl Parts<'_> {
    fn kernel(&mut self, id: i32) -> StackPart {
        let (sym, ips) = (self.sym, self.ips);
        self.kcache
            .entry(id)
            .or_insert_with(|| match ips.get(&(id as u32)) {
                Some(a) if id >= 0 => {
                    StackPart::Frames(strip_tracing_frames(frames(sym.kernel(a))))
                }
                _ if id >= 0 => StackPart::Missing {
                    missing: Missing::Unreadable,
                },
                _ => StackPart::Missing {
                    missing: missing(id),
                },
            })
            .clone()
    }

    /// A user stack of process `tgid` (`comm` names it in a note if unsymbolized).
    fn user(&mut self, tgid: u32, id: i32, comm: &str) -> (StackPart, Option<String>) {
        let (sym, ips, cut_copies) = (self.sym, self.ips, self.cut_copies);
        let unsymbolized = &mut self.unsymbolized;
        let got = self
            .ucache
            .entry((tgid, id))
            .or_insert_with(|| match ips.get(&(id as u32)) {
                Some(a) if id >= 0 => {
                    if !sym.knows(tgid) {
                        unsymbolized.insert((tgid, comm.to_string()));
                    }
                    let per_ip = sym.user(tgid, a);
                    let cut = if id as u32 >= copies::FIRST_ID {
                        // Unwound from a copy: framehop says whether it reached the root.
                        cut_copies.contains(&(id as u32)).then(|| {
                            let f = a.last().and_then(|&ip| sym.file_of(tgid, ip - 1));
                            format!("dwarf:{}", base_name(f.unwrap_or("[unknown]")))
                        })
                    } else {
                        truncated_at(sym, tgid, a, &per_ip)
                    };
                    (StackPart::Frames(frames(per_ip)), cut)
                }
                _ if id >= 0 => (
                    StackPart::Missing {
                        missing: Missing::Unreadable,
                    },
                    None,
                ),
                _ => (
                    StackPart::Missing {
                        missing: missing(id),
                    },
                    None,
                ),
            })
            .clone();
        if let Some(b) = &got.1 {
            self.truncated.insert(b.clone());
        }
        got
    }
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
        ips.extend(c.stacks.iter().map(|(k, v)| (*k, v.clone())));
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

/// Where a complete user stack ends: the outermost call of a process's main thread or
/// of a new thread (glibc and musl).
const STACK_ROOTS: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_call_main",
    "__libc_start_main_impl",
    "start_thread",
    "clone",
    "clone3",
    "__clone",
    "__clone3",
    "thread_start",
    "start",
];

/// Whether a user stack was cut short, and the binary to blame. The kernel walks user
/// stacks by frame pointer: a function that keeps none hides its caller (and may send
/// the walk astray), and a walk that does not end in a thread's root call was lost.
/// `per_ip` is the symbolizer's frames per address (leaf first); the binary blamed holds
/// the first function without a frame pointer, else the outermost known frame.
fn truncated_at(
    sym: &Symbolizer,
    tgid: u32,
    ips: &[u64],
    per_ip: &[Vec<SymFrame>],
) -> Option<String> {
    let last = per_ip.last()?.last()?;
    let ends_at_root = STACK_ROOTS.contains(&last.name.as_str());
    // The outermost frame's own prologue does not matter: nothing above it is missing.
    let n = if ends_at_root {
        per_ip.len() - 1
    } else {
        per_ip.len()
    };
    for (i, frames) in per_ip.iter().enumerate().take(n) {
        if frames.last().and_then(|f| f.keeps_fp) == Some(false) {
            let addr = if i == 0 {
                ips[i]
            } else {
                ips[i].saturating_sub(1)
            };
            return Some(base_name(sym.file_of(tgid, addr).unwrap_or("[unknown]")).to_string());
        }
    }
    if ends_at_root {
        return None;
    }
    let file = ips
        .iter()
        .rev()
        .find_map(|&ip| sym.file_of(tgid, ip))
        .unwrap_or("[unknown]");
    Some(base_name(file).to_string())
}

/// The kernel frames of the tracing itself (the program, the tracepoint's call into it)
/// are not where the thread waited: everything up to the tracepoint's own frames is
/// dropped from the leaf end. (The program's address may be named after any nearby
/// kallsyms entry, so it is found through the frames that call it.)
fn strip_tracing_frames(mut f: Vec<Frame>) -> Vec<Frame> {
    let tracing = |n: &str| {
        n.starts_with("bpf_trace_run")
            || n.starts_with("__traceiter_")
            || n.starts_with("__bpf_trace_")
            || n.starts_with("perf_trace_")
    };
    if let Some(last) = f.iter().take(6).rposition(|fr| tracing(&fr.name)) {
        f.drain(..=last);
    }
    f
}
