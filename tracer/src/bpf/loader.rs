//! Loading and attaching the kernel programs in one of the probe modes.
//!
//! Only the programs the chosen mode needs are loaded (verification is the expensive
//! part of start-up). `auto` tries the modes best first and keeps the reason each better
//! one was refused, so the report can say why it runs in the mode it does.
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::{
    programs::{BtfTracePoint, FEntry, Iter, KProbe, RawTracePoint, TracePoint},
    Btf, Ebpf,
};
use tracer_common::{Config, Window};

use crate::{
    bpf::{
        compat, config,
        object::{new_loader, Family},
    },
    model::options::{ProbeMode, RunqFrom, RunqSource},
    sys::btf::KernelBtf,
    sys::clock::monotonic_ns,
    sys::root::Root,
};

/// Where the kernel describes its own types.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// `--cgroup DIR`: the directory's cgroup v2 id, and whether only DIR itself counts
/// (else DIR and every cgroup below it, the default).
#[derive(Clone, Debug)]
pub struct CgroupTarget {
    pub dir: std::path::PathBuf,
    pub id: u64,
    pub node_only: bool,
}

impl CgroupTarget {
    /// The programs' view of it: the id, and DIR's fd in `CGROUP_TARGET` for
    /// `bpf_current_task_under_cgroup` when its descendants count too.
    pub(crate) fn configure(&self, cfg: &mut Config) {
        cfg.cgroup_id = self.id;
        cfg.cgroup_node_only = self.node_only as u32;
    }

    pub(crate) fn store(&self, ebpf: &mut Ebpf) -> Result<()> {
        if self.node_only {
            return Ok(());
        }
        use std::os::fd::AsRawFd as _;
        let dir = std::fs::File::open(&self.dir)
            .with_context(|| format!("opening the cgroup {}", self.dir.display()))?;
        let mut m: aya::maps::CgroupArray<_> = aya::maps::CgroupArray::try_from(
            ebpf.map_mut("CGROUP_TARGET")
                .context("CGROUP_TARGET map missing")?,
        )?;
        m.set(0, dir.as_raw_fd(), 0)
            .with_context(|| format!("storing the cgroup {}", self.dir.display()))?;
        Ok(())
    }
}

/// Programs that keep the traced set as tasks are born and exec: attached before the
/// set is read from /proc (see [`Tracer::start`]).
pub(crate) fn keeps_traced_set(name: &str) -> bool {
    name.starts_with("sched_fork_") || name.starts_with("sched_exec_")
}

/// What user space decides before load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub probe: ProbeMode,
    /// One of `tracer_common::filter`.
    pub filter: u32,
    /// With `filter::CGROUP`.
    pub cgroup: Option<CgroupTarget>,
    /// One of `tracer_common::scope`.
    pub hist_scope: u32,
    pub n_counters: u32,
    pub max_threads: u32,
    pub runq_from: RunqFrom,
    /// Events streamed by `tracer record` / `tracer slow` (nothing for `tracer run`).
    pub record: crate::bpf::record::RecordLoad,
    /// Per-scope histograms at power-of-two resolution (`tracer serve`, see `Config`).
    pub hist_pow2: bool,
    /// Each thread's cgroup id at every switch-out, and the `cgroup_mkdir` program
    /// configured for [`crate::bpf::cgroups`] (`tracer serve`).
    pub thread_cgroups: bool,
}

/// Loaded and attached programs with their maps.
pub struct Tracer {
    pub ebpf: Ebpf,
    /// The mode in use.
    pub mode: ProbeMode,
    /// Better modes that were tried first, with the reason each was refused.
    pub refused: Vec<(ProbeMode, String)>,
    /// How the switch programs are attached, e.g. "tp_btf", "fentry", "kprobe".
    pub attach: &'static str,
    /// Where run-queue waits come from in this mode.
    pub runq: RunqSource,
    programs: Vec<&'static str>,
    /// perf-sched mode: the per-task perf event that keeps perf's switch hooks on.
    _sched_hook_event: Option<std::os::fd::OwnedFd>,
    /// The window's opening and close (0: open), CLOCK_MONOTONIC ns.
    t0: u64,
    t1: u64,
}

/// Programs of each mode: (program name, attach target). The wakeup programs only time
/// run-queue waits when the scheduler's own `run_delay` cannot be read.
fn programs_of(
    mode: ProbeMode,
    with_fork: bool,
    with_wakeup: bool,
) -> Vec<(&'static str, &'static str)> {
    let mut v = match mode {
        ProbeMode::TpBtf => vec![
            ("sched_switch_btf", "sched_switch"),
            ("sched_wakeup_btf", "sched_wakeup"),
            ("sched_wakeup_new_btf", "sched_wakeup_new"),
        ],
        ProbeMode::RawTp => vec![
            ("sched_switch_raw", "sched_switch"),
            ("sched_wakeup_raw", "sched_wakeup"),
            ("sched_wakeup_new_raw", "sched_wakeup_new"),
        ],
        ProbeMode::Tracepoint => vec![
            ("sched_switch_tp", "sched_switch"),
            ("sched_wakeup_tp", "sched_wakeup"),
            ("sched_wakeup_new_tp", "sched_wakeup_new"),
        ],
        ProbeMode::PerfSched | ProbeMode::Auto => vec![],
    };
    if !with_wakeup {
        // Waits come from run_delay; a new thread's wakeup still starts its time in
        // the window (and is rare enough to cost nothing).
        v.retain(|(name, _)| {
            !name.starts_with("sched_wakeup") || name.starts_with("sched_wakeup_new")
        });
    }
    // A non-main thread that execs takes its leader's TID: every mode follows it.
    v.push(match mode {
        ProbeMode::TpBtf => ("sched_exec_btf", "sched_process_exec"),
        ProbeMode::RawTp => ("sched_exec_raw", "sched_process_exec"),
        _ => ("sched_exec_tp", "sched_process_exec"),
    });
    if with_fork {
        v.push(match mode {
            ProbeMode::TpBtf => ("sched_fork_btf", "sched_process_fork"),
            ProbeMode::RawTp => ("sched_fork_raw", "sched_process_fork"),
            _ => ("sched_fork_tp", "sched_process_fork"),
        });
    }
    v
}

impl Tracer {
    /// Loads the programs for `opts.probe` (trying modes in order for `auto`), attaches
    /// the ones that keep the traced set (fork, exec), lets `seed` fill the set (from
    /// /proc: a thread born at any moment is then either in that scan or joins through
    /// the fork program), opens the window and attaches the rest.
    pub fn start(
        opts: &LoadOptions,
        root: &Root,
        seed: &mut dyn FnMut(&mut Ebpf) -> Result<()>,
    ) -> Result<Tracer> {
        let modes: &[ProbeMode] = match opts.probe {
            ProbeMode::Auto => &[ProbeMode::TpBtf, ProbeMode::RawTp, ProbeMode::Tracepoint],
            m => std::slice::from_ref(match m {
                ProbeMode::TpBtf => &ProbeMode::TpBtf,
                ProbeMode::RawTp => &ProbeMode::RawTp,
                ProbeMode::Tracepoint => &ProbeMode::Tracepoint,
                _ => &ProbeMode::PerfSched,
            }),
        };
        let mut refused = Vec::new();
        for &mode in modes {
            match Self::try_mode(mode, opts, root, seed) {
                Ok(mut t) => {
                    t.refused = refused;
                    return Ok(t);
                }
                Err(e) if opts.probe == ProbeMode::Auto => {
                    log::info!("probe mode {} refused: {e:#}", mode.name());
                    refused.push((mode, crate::error::one_line(&e)));
                }
                Err(e) => {
                    return Err(e.context(format!("probe mode {} does not work here", mode.name())))
                }
            }
        }
        let why: Vec<String> = refused
            .iter()
            .map(|(m, e)| format!("{}: {e}", m.name()))
            .collect();
        Err(anyhow!(
            "no probe mode works on this kernel:\n  {}",
            why.join("\n  ")
        ))
    }

    fn try_mode(
        mode: ProbeMode,
        opts: &LoadOptions,
        root: &Root,
        seed: &mut dyn FnMut(&mut Ebpf) -> Result<()>,
    ) -> Result<Tracer> {
        let mut cfg = Config {
            filter: opts.filter,
            hist_scope: opts.hist_scope,
            n_counters: opts.n_counters,
            hist_pow2: opts.hist_pow2 as u32,
            thread_cgroup: opts.thread_cgroups as u32,
            ..Default::default()
        };
        let mkdir_fields = if opts.thread_cgroups {
            crate::bpf::cgroups::mkdir_fields(root)?
        } else {
            Default::default()
        };
        if let Some(cg) = &opts.cgroup {
            cg.configure(&mut cfg);
        }
        let with_fork = opts.filter != tracer_common::filter::ALL;
        let t = std::time::Instant::now();
        let mut sched_hook_event = None;
        let mut storage_ok = false;
        match mode {
            ProbeMode::TpBtf | ProbeMode::RawTp | ProbeMode::PerfSched => {
                let kbtf = KernelBtf::from_file(&root.path(VMLINUX_BTF))?;
                config::btf_config(&mut cfg, &kbtf)?;
                storage_ok = compat::task_storage_safe_in_scheduler(&kbtf);
                if opts.runq_from == RunqFrom::Schedstat {
                    cfg.task_run_delay_off = compat::run_delay_offset(&kbtf).ok_or_else(|| {
                        anyhow!("--runq-from schedstat: task_struct has no sched_info (CONFIG_SCHED_INFO off)")
                    })?;
                }
                if mode == ProbeMode::PerfSched {
                    cfg.task_state_off =
                        kbtf.member_offset("task_struct", compat::task_state_member(&kbtf))?;
                }
                log::debug!("{}: offsets from BTF after {:?}", mode.name(), t.elapsed());
            }
            ProbeMode::Tracepoint => config::tracefs_config(&mut cfg, root)?,
            ProbeMode::Auto => unreachable!("auto is expanded by start()"),
        }
        let runq = config::runq_source(mode, opts.runq_from, storage_ok, &mut cfg)?;
        if opts.record.on != 0 {
            crate::bpf::record::config(&mut cfg, &opts.record, mode, runq, root)?;
        }
        if mode == ProbeMode::PerfSched {
            sched_hook_event = Some(perf_sched_hook_event()?);
        }
        // aya's loader parses kernel BTF itself; it is dropped before the parse the
        // BTF-attached programs need, so the two never sit in memory together.
        let mut ebpf = {
            let mut loader = new_loader();
            log::debug!("{}: loader ready after {:?}", mode.name(), t.elapsed());
            loader
                .override_global("CONFIG", &cfg, true)
                .override_global("CGROUP_MKDIR_FIELDS", &mkdir_fields, true)
                .map_max_entries(
                    "CGROUP_EVENTS",
                    crate::bpf::cgroups::ring_bytes(opts.thread_cgroups),
                )
                .map_max_entries(
                    "THREADS",
                    // Unused when the entries live in task-local storage.
                    if runq == RunqSource::TaskStorage {
                        1
                    } else {
                        opts.max_threads
                    },
                )
                // Maps the chosen options do not use are created with one entry.
                .map_max_entries("TRACKED", if with_fork { opts.max_threads } else { 1 })
                .map_max_entries("EVENTS", opts.record.buffer_bytes.max(4096))
                .map_max_entries(
                    "HIST_SCOPED",
                    if opts.hist_scope == tracer_common::scope::ALL {
                        1
                    } else {
                        65536
                    },
                )
                .load(Family::Sched.object()?)
                .context("loading the eBPF object")?
        };
        log::debug!("{}: maps created after {:?}", mode.name(), t.elapsed());
        let kernel_btf = match mode {
            ProbeMode::TpBtf | ProbeMode::PerfSched => {
                Some(Btf::from_sys_fs().context("parsing kernel BTF")?)
            }
            _ => None,
        };
        let progs = if mode == ProbeMode::PerfSched {
            perf_sched_programs(
                &mut ebpf,
                kernel_btf.as_ref(),
                with_fork,
                cfg.task_run_delay_off == 0,
                root,
            )?
        } else {
            let mut progs = programs_of(mode, with_fork, cfg.task_run_delay_off == 0);
            if cfg.tp_runtime_val != 0 {
                progs.push(("sched_stat_runtime_tp", "sched_stat_runtime"));
            }
            if opts.record.on != 0 {
                // The switch program that also streams events (see the eBPF side's
                // `on_switch`): `tracer run` never has the verifier walk that path.
                for p in progs.iter_mut() {
                    p.0 = match p.0 {
                        "sched_switch_btf" => "sched_switch_rec_btf",
                        "sched_switch_raw" => "sched_switch_rec_raw",
                        other => other,
                    };
                }
            }
            progs.extend(crate::bpf::record::task_programs(&opts.record, mode));
            for (name, target) in &progs {
                let t = std::time::Instant::now();
                load_program(&mut ebpf, mode, name, target, kernel_btf.as_ref())
                    .with_context(|| format!("loading {name}"))?;
                let insns = ebpf
                    .program(name)
                    .and_then(|p| p.info().ok())
                    .and_then(|i| i.verified_instruction_count());
                log::debug!(
                    "{name}: verified in {:?}, {} instructions processed",
                    t.elapsed(),
                    insns.map_or("?".to_string(), |n| n.to_string())
                );
            }
            if runq == RunqSource::TaskStorage {
                // Attached per snapshot, not here; stays loaded after detach() so the
                // final report can still read the threads.
                let it: &mut Iter = ebpf
                    .program_mut("dump_threads")
                    .ok_or_else(|| anyhow!("program dump_threads missing"))?
                    .try_into()?;
                it.load(
                    "task",
                    kernel_btf
                        .as_ref()
                        .ok_or_else(|| anyhow!("kernel BTF needed"))?,
                )
                .context("loading dump_threads (task iterator)")?;
            }
            progs
        };
        log::debug!("{}: programs verified after {:?}", mode.name(), t.elapsed());
        if let Some(cg) = &opts.cgroup {
            cg.store(&mut ebpf)?;
        }
        let (tracking, rest): (Vec<_>, Vec<_>) =
            progs.iter().partition(|(name, _)| keeps_traced_set(name));
        let attach = |ebpf: &mut Ebpf, list: &[&(&'static str, &'static str)]| -> Result<()> {
            for (name, target) in list {
                attach_program(ebpf, name, target)
                    .with_context(|| format!("attaching {name} to {target}"))?;
            }
            Ok(())
        };
        attach(&mut ebpf, &tracking)?;
        seed(&mut ebpf)?;
        // The window opens before the switch programs attach: every slice they see
        // begins inside it (a slice running at attach counts from here).
        let t0 = write_window(&mut ebpf, monotonic_ns(), 0)?;
        attach(&mut ebpf, &rest)?;
        log::debug!("{}: attached after {:?}", mode.name(), t.elapsed());
        Ok(Tracer {
            ebpf,
            mode,
            refused: Vec::new(),
            attach: attach_kind(mode, &progs),
            runq,
            programs: progs.iter().map(|(n, _)| *n).collect(),
            _sched_hook_event: sched_hook_event,
            t0,
            t1: 0,
        })
    }

    /// When the window opened (CLOCK_MONOTONIC ns): just before the programs attached.
    pub fn opened_at(&self) -> u64 {
        self.t0
    }

    /// Closes the window now: the programs stay attached, so threads that die before
    /// the final read still hand over their totals, but they cut running slices here
    /// and count nothing after. Returns the close (CLOCK_MONOTONIC ns); idempotent.
    pub fn close_window(&mut self) -> Result<u64> {
        if self.t1 == 0 {
            self.t1 = write_window(&mut self.ebpf, self.t0, monotonic_ns())?;
        }
        Ok(self.t1)
    }

    /// When the window closed, 0 while it is open.
    pub fn closed_at(&self) -> u64 {
        self.t1
    }

    /// Runs of our programs the kernel skipped because one was already running on the
    /// CPU (`recursion_misses` in the programs' fdinfo, 5.12+): events lost before any
    /// of our code ran.
    pub fn recursion_misses(&self) -> u64 {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        self.programs
            .iter()
            .filter_map(|name| {
                let fd = match self.ebpf.program(name)? {
                    aya::programs::Program::BtfTracePoint(p) => p.fd().ok()?.as_fd().as_raw_fd(),
                    aya::programs::Program::RawTracePoint(p) => p.fd().ok()?.as_fd().as_raw_fd(),
                    aya::programs::Program::TracePoint(p) => p.fd().ok()?.as_fd().as_raw_fd(),
                    aya::programs::Program::FEntry(p) => p.fd().ok()?.as_fd().as_raw_fd(),
                    aya::programs::Program::KProbe(p) => p.fd().ok()?.as_fd().as_raw_fd(),
                    _ => return None,
                };
                let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
                let n = info
                    .lines()
                    .find_map(|l| l.strip_prefix("recursion_misses:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())?;
                if n > 0 {
                    log::debug!("{name}: {n} runs the kernel skipped (recursion_misses)");
                }
                Some(n)
            })
            .sum()
    }

    /// Detaches and unloads every program; the maps stay readable.
    pub fn detach(&mut self) {
        // Each detach waits out an RCU grace period (classic tracepoints: ~0.2 s each
        // under load); done side by side, they wait for about one.
        let names = std::mem::take(&mut self.programs);
        std::thread::scope(|scope| {
            for (name, p) in self.ebpf.programs_mut() {
                if !names.contains(&name) {
                    continue;
                }
                scope.spawn(move || {
                    let r = match p {
                        aya::programs::Program::BtfTracePoint(p) => p.unload(),
                        aya::programs::Program::RawTracePoint(p) => p.unload(),
                        aya::programs::Program::TracePoint(p) => p.unload(),
                        aya::programs::Program::FEntry(p) => p.unload(),
                        aya::programs::Program::KProbe(p) => p.unload(),
                        _ => Ok(()),
                    };
                    if let Err(e) = r {
                        log::warn!("unloading {name}: {e}");
                    }
                });
            }
        });
    }
}

/// Writes the `WINDOW` map; returns `close` or, when 0, `open`.
fn write_window(ebpf: &mut Ebpf, open: u64, close: u64) -> Result<u64> {
    let mut w: aya::maps::Array<_, Window> =
        aya::maps::Array::try_from(ebpf.map_mut("WINDOW").context("WINDOW map missing")?)?;
    w.set(
        0,
        Window {
            open_ns: open,
            close_ns: close,
        },
        0,
    )
    .context("writing the window")?;
    Ok(if close != 0 { close } else { open })
}

/// The attach mechanism of the switch programs, for the report.
fn attach_kind(mode: ProbeMode, progs: &[(&'static str, &'static str)]) -> &'static str {
    match mode {
        ProbeMode::TpBtf => "tp_btf",
        ProbeMode::RawTp => "raw_tracepoint",
        ProbeMode::Tracepoint => "tracepoint",
        _ if progs.iter().any(|(n, _)| n.ends_with("_fentry")) => "fentry",
        _ => "kprobe",
    }
}

fn load_program(
    ebpf: &mut Ebpf,
    mode: ProbeMode,
    name: &str,
    target: &str,
    btf: Option<&Btf>,
) -> Result<()> {
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("program {name} missing from the eBPF object"))?;
    match mode {
        ProbeMode::TpBtf => {
            let p: &mut BtfTracePoint = prog.try_into()?;
            p.load(target, btf.ok_or_else(|| anyhow!("kernel BTF needed"))?)?;
        }
        ProbeMode::RawTp => {
            let p: &mut RawTracePoint = prog.try_into()?;
            p.load()?;
        }
        ProbeMode::Tracepoint => {
            let p: &mut TracePoint = prog.try_into()?;
            p.load()?;
        }
        _ => return Err(anyhow!("no loader for {name} in mode {}", mode.name())),
    }
    Ok(())
}

fn attach_program(ebpf: &mut Ebpf, name: &str, target: &str) -> Result<()> {
    let prog = ebpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("program {name} missing"))?;
    match prog {
        aya::programs::Program::BtfTracePoint(p) => {
            p.attach()?;
        }
        aya::programs::Program::RawTracePoint(p) => {
            p.attach(target)?;
        }
        aya::programs::Program::TracePoint(p) => {
            p.attach("sched", target)?;
        }
        aya::programs::Program::FEntry(p) => {
            p.attach()?;
        }
        aya::programs::Program::KProbe(p) => {
            p.attach(target, 0)?;
        }
        _ => return Err(anyhow!("unexpected program type for {name}")),
    }
    Ok(())
}

/// perf-sched mode: perf's switch hooks through fentry, else kprobes, plus the best
/// wakeup tracepoints for run-queue latency.
fn perf_sched_programs(
    ebpf: &mut Ebpf,
    btf: Option<&Btf>,
    with_fork: bool,
    with_wakeup: bool,
    _root: &Root,
) -> Result<Vec<(&'static str, &'static str)>> {
    let btf = btf.ok_or_else(|| anyhow!("kernel BTF needed"))?;
    let mut progs: Vec<(&'static str, &'static str)> = Vec::new();
    // TRACER_PERF_SCHED_ATTACH=kprobe skips fentry, so both attach paths can be tested
    // on kernels that offer both.
    let force_kprobe = std::env::var("TRACER_PERF_SCHED_ATTACH").as_deref() == Ok("kprobe");
    let fentry = (|| -> Result<()> {
        if force_kprobe {
            return Err(anyhow!("skipped (TRACER_PERF_SCHED_ATTACH=kprobe)"));
        }
        for (name, target) in [
            ("perf_sched_out_fentry", compat::PERF_SCHED_OUT),
            ("perf_sched_in_fentry", compat::PERF_SCHED_IN),
        ] {
            let p: &mut FEntry = ebpf
                .program_mut(name)
                .ok_or_else(|| anyhow!("program {name} missing"))?
                .try_into()?;
            p.load(target, btf)?;
        }
        compat::fentry_attachable(|| {
            let p: &mut FEntry = ebpf
                .program_mut("perf_sched_out_fentry")
                .ok_or_else(|| anyhow!("program perf_sched_out_fentry missing"))?
                .try_into()?;
            let link = p.attach()?;
            p.detach(link)?;
            Ok(())
        })
    })();
    match fentry {
        Ok(()) => {
            progs.push(("perf_sched_out_fentry", compat::PERF_SCHED_OUT));
            progs.push(("perf_sched_in_fentry", compat::PERF_SCHED_IN));
        }
        Err(fe) => {
            let kp = (|| -> Result<()> {
                if !Path::new("/sys/kernel/tracing/kprobe_events").exists()
                    && !Path::new("/sys/bus/event_source/devices/kprobe").exists()
                {
                    return Err(anyhow!("kernel has no kprobes (CONFIG_KPROBES off)"));
                }
                for name in ["perf_sched_out_kprobe", "perf_sched_in_kprobe"] {
                    let p: &mut KProbe = ebpf
                        .program_mut(name)
                        .ok_or_else(|| anyhow!("program {name} missing"))?
                        .try_into()?;
                    p.load()?;
                }
                Ok(())
            })();
            if let Err(ke) = kp {
                return Err(anyhow!(
                    "fentry refused ({}); kprobe refused ({})",
                    crate::error::one_line(&fe),
                    crate::error::one_line(&ke)
                ));
            }
            progs.push(("perf_sched_out_kprobe", compat::PERF_SCHED_OUT));
            progs.push(("perf_sched_in_kprobe", compat::PERF_SCHED_IN));
        }
    }
    for (name, target) in programs_of(ProbeMode::TpBtf, with_fork, with_wakeup) {
        if name.starts_with("sched_switch") {
            continue;
        }
        load_program(ebpf, ProbeMode::TpBtf, name, target, Some(btf))?;
        progs.push((name, target));
    }
    Ok(progs)
}

/// A dummy per-task software event on ourselves: while one exists, the kernel's
/// `perf_sched_events` key is on and `__perf_event_task_sched_in/out` run.
fn perf_sched_hook_event() -> Result<std::os::fd::OwnedFd> {
    use crate::perf::sys;
    let dummy = sys::AttrFields {
        type_: sys::PERF_TYPE_SOFTWARE,
        config: sys::PERF_COUNT_SW_DUMMY.into(),
        ..Default::default()
    };
    // Enabled, counting user and kernel, on this process (pid 0) on any CPU.
    sys::open(
        &sys::encode_attr(&dummy, sys::OpenMode::ENABLED),
        sys::Who::Task(0),
        None,
    )
    .context("opening a per-task perf event to switch perf's sched hooks on")
}
