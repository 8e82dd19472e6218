//! Loading and attaching the kernel programs in one of the probe modes.
//!
//! Only the programs the chosen mode needs are loaded (verification is the expensive
//! part of start-up). `auto` tries the modes best first and keeps the reason each better
//! one was refused, so the report can say why it runs in the mode it does.
//! The programs come from the typed table (`bpf::table`), are loaded and attached by
//! the one generic path (`bpf::attach`); the window is `bpf::window`.
use crate::model::targets::{Filter, HistScope};
use std::path::Path;

use anyhow::{anyhow, Context as _, Result};
use aya::{programs::FEntry, Btf, Ebpf};
use tracer_common::Config;

use crate::{
    bpf::{
        attach, compat, config,
        object::{new_loader, Family},
        table::{self, Attach, Needs, Prog, Role},
    },
    model::options::{ProbeMode, RunqFrom, RunqSource},
    sys::btf::{KernelBtf, VMLINUX_BTF},
    sys::clock::monotonic_ns,
    sys::root::Root,
    sys::startup,
};

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
        cfg.mode.cgroup_id = self.id;
        cfg.mode.cgroup_node_only = self.node_only as u32;
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

/// What user space decides before load.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub probe: ProbeMode,
    /// One of `tracer_common::filter`.
    pub filter: Filter,
    /// With `Filter::Cgroup`.
    pub cgroup: Option<CgroupTarget>,
    /// One of `tracer_common::scope`.
    pub hist_scope: HistScope,
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
    /// Per-process histograms kept per thread in task storage where the mode has it
    /// (`Accounting::hist_in_task`; serve's object only): needs `hist_pow2` and bounds
    /// of at least `hist::SUB` ns. [`Tracer::hist_in_task`] says whether it took.
    pub thread_hists: bool,
    /// `--runqlen`: sample each CPU's run-queue length.
    pub runqlen: bool,
    /// `--irq`: time hardirqs and softirqs.
    pub irq: bool,
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
    /// Per-process histograms are the threads' own (`LoadOptions::thread_hists` in
    /// task-storage mode): read with the `dump_hists` iterator, not `HIST_SCOPED`.
    pub hist_in_task: bool,
    /// What the kernel's BTF says of the scheduler, where the loader read the BTF.
    pub sched_btf: Option<crate::model::scheduler::BtfFacts>,
    /// `--runqlen`: whether tasks kept queued by delayed dequeue are told apart from
    /// waiting ones (None: not sampling).
    pub runqlen_delayed_told: Option<bool>,
    /// `--irq`: the interrupt-time programs are attached.
    pub irq: bool,
    /// `--irq`: whether threads' on-CPU time includes their interrupt time (None:
    /// unknown, no BTF; see `compat::irq_time_apart`).
    pub on_cpu_includes_irq: Option<bool>,
    /// System-wide: `TRACKED` lists the threads between their exit and their final
    /// switch (`table::Needs::exits`), for the final read's wait.
    pub lists_exits: bool,
    /// The programs loaded (from the table), until detached.
    programs: Vec<Prog>,
    /// perf-sched mode: the per-task perf event that keeps perf's switch hooks on.
    _sched_hook_event: Option<std::os::fd::OwnedFd>,
    /// The window's opening and close (0: open), CLOCK_MONOTONIC ns.
    pub(super) t0: u64,
    pub(super) t1: u64,
    /// A close already in the `WINDOW` map, ahead of time (0: none; see
    /// `Tracer::plan_close`).
    pub(super) planned: u64,
    /// When the last program was attached (CLOCK_MONOTONIC ns): what happened between
    /// the opening and this, no program saw.
    pub(super) attached_at: u64,
}

/// System-wide, `TRACKED` holds only the threads between their exit and their final
/// switch at one moment: a sixteenth of `--max-threads` (4,096 by default, created in
/// 0.1 ms where 65,536 took 1.6), so raising it still raises this.
fn dying_capacity(max_threads: u32) -> u32 {
    (max_threads / 16).max(1024)
}

/// The first of `modes` that loads and attaches, with the reasons of those refused
/// before it; a single mode's failure is its own error. `what` names the command in the
/// error when none works ("" for the scheduling family's).
pub(crate) fn first_working<T>(
    modes: &[ProbeMode],
    what: &str,
    mut try_mode: impl FnMut(ProbeMode) -> Result<T>,
) -> Result<(T, Vec<(ProbeMode, String)>)> {
    let mut refused = Vec::new();
    for &mode in modes {
        match try_mode(mode) {
            Ok(t) => return Ok((t, refused)),
            // The target, not the mode: every other mode would say the same (a hostile
            // test pass, 2026-12-07: a target that exited during the start-up read
            // "no probe mode works on this kernel", three times over).
            Err(e) if crate::error::about_the_target(&e) => return Err(e),
            Err(e) if modes.len() > 1 => {
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
        "no probe mode works{what} on this kernel:\n  {}",
        why.join("\n  ")
    ))
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
        // Whatever the mode: the sampler reaches the run queue through BTF offsets.
        let btf_file = root.path(VMLINUX_BTF);
        if opts.runqlen && !btf_file.exists() {
            return Err(anyhow!(
                "--runqlen needs the kernel's BTF ({} is missing)",
                btf_file.display()
            ));
        }
        let (mut t, refused) = first_working(modes, "", |m| Self::try_mode(m, opts, root, seed))?;
        t.refused = refused;
        Ok(t)
    }

    fn try_mode(
        mode: ProbeMode,
        opts: &LoadOptions,
        root: &Root,
        seed: &mut dyn FnMut(&mut Ebpf) -> Result<()>,
    ) -> Result<Tracer> {
        let mut cfg = Config {
            mode: tracer_common::Accounting {
                filter: crate::bpf::config::filter_abi(opts.filter),
                hist_scope: crate::bpf::config::scope_abi(opts.hist_scope),
                n_counters: opts.n_counters,
                hist_pow2: opts.hist_pow2 as u32,
                thread_cgroup: opts.thread_cgroups as u32,
                ..Default::default()
            },
            ..Config::ZERO
        };
        let mkdir_fields = if opts.thread_cgroups {
            crate::bpf::cgroups::mkdir_fields(root)?
        } else {
            Default::default()
        };
        if let Some(cg) = &opts.cgroup {
            cg.configure(&mut cfg);
        }
        let with_fork = opts.filter != Filter::All;
        let mut sched_hook_event = None;
        let mut storage_ok = false;
        let mut kbtf = None;
        match mode {
            ProbeMode::TpBtf | ProbeMode::RawTp | ProbeMode::PerfSched => {
                let kbtf = kbtf.insert(KernelBtf::from_file(&root.path(VMLINUX_BTF))?);
                config::btf_config(&mut cfg, kbtf)?;
                storage_ok = compat::task_storage_safe_in_scheduler(kbtf);
                if opts.runq_from == RunqFrom::Schedstat {
                    cfg.task.run_delay = compat::run_delay_offset(kbtf).ok_or_else(|| {
                        anyhow!("--runq-from schedstat: task_struct has no sched_info (CONFIG_SCHED_INFO off)")
                    })?;
                } else {
                    cfg.task.wait_base = compat::run_delay_offset(kbtf).unwrap_or(0);
                }
                if mode == ProbeMode::PerfSched {
                    cfg.task.state =
                        kbtf.member_offset("task_struct", compat::task_state_member(kbtf))?;
                }
                startup::stage(format_args!(
                    "{}: kernel BTF indexed, offsets resolved",
                    mode.name()
                ));
            }
            ProbeMode::Tracepoint => config::tracefs_config(&mut cfg, root)?,
            ProbeMode::Auto => unreachable!("auto is expanded by start()"),
        }
        let runq = config::runq_source(mode, opts.runq_from, storage_ok, &mut cfg)?;
        let hist_in_task = opts.thread_hists
            && opts.thread_cgroups
            && opts.hist_pow2
            && opts.hist_scope == HistScope::Process
            && runq == RunqSource::TaskStorage;
        cfg.mode.hist_in_task = hist_in_task as u32;
        if opts.record.on != 0 {
            crate::bpf::record::config(&mut cfg, &opts.record, mode, runq, root)?;
        }
        let runqlen = if opts.runqlen {
            Some(crate::bpf::runqlen::fields(kbtf.as_ref(), root)?)
        } else {
            None
        };
        if mode == ProbeMode::PerfSched {
            sched_hook_event = Some(perf_sched_hook_event()?);
        }
        let family = if opts.record.on != 0 {
            Family::Record
        } else if opts.thread_cgroups {
            Family::Serve
        } else {
            Family::Sched
        };
        // The final read waits for threads between unhashing and their final switch:
        // with a target the traced set lists them, system-wide the exit program (where
        // the task iterator reads the threads; the `THREADS` hash keeps them anyway),
        // which also keeps a `--cgroup` target's there once `cgroup_exit()` moved them
        // out (`TRACK_EXITING`). `tracer serve` has no final read.
        let exits = (!with_fork || opts.filter == Filter::Cgroup)
            && runq == RunqSource::TaskStorage
            && family != Family::Serve;
        let on_cpu_includes_irq = if opts.irq {
            match &kbtf {
                Some(k) => Some(!compat::irq_time_apart(k)),
                None => KernelBtf::from_file(&root.path(crate::sys::btf::VMLINUX_BTF))
                    .ok()
                    .map(|k| !compat::irq_time_apart(&k)),
            }
        } else {
            None
        };
        let runqlen_fields = runqlen.map(|r| r.0).unwrap_or_default();
        let mut ebpf = {
            let (mut loader, parsed) = new_loader();
            startup::stage(format_args!(
                "{}: loader ready ({})",
                mode.name(),
                if parsed {
                    "aya parsed the kernel BTF"
                } else {
                    "without aya's parse of the kernel BTF"
                }
            ));
            loader
                .override_global("CONFIG", &cfg, true)
                .override_global(
                    "CGROUP_MKDIR_FIELDS",
                    &mkdir_fields,
                    family == Family::Serve,
                )
                .override_global("RUNQLEN_FIELDS", &runqlen_fields, false)
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
                .map_max_entries(
                    "TRACKED",
                    if with_fork {
                        opts.max_threads
                    } else if exits {
                        dying_capacity(opts.max_threads)
                    } else {
                        1
                    },
                )
                .map_max_entries("EVENTS", opts.record.buffer_bytes.max(4096))
                .map_max_entries("IRQ_THREADS", if opts.irq { 65536 } else { 1 })
                .map_max_entries(
                    "HIST_SCOPED",
                    if opts.hist_scope == HistScope::All || hist_in_task {
                        1
                    } else {
                        65536
                    },
                )
                .load(family.object())
                .context("loading the eBPF object")?
        };
        startup::stage(format_args!("{}: object parsed, maps created", mode.name()));
        let needs = Needs {
            fork: with_fork,
            wakeup: cfg.task.run_delay == 0,
            stat_runtime: cfg.tp.runtime_val != 0,
            record: opts.record.on != 0,
            record_tasks: opts.record.on & tracer_common::record::on::SCHED != 0,
            // Attached per snapshot; stays loaded after detach() so the final report can
            // still read the threads.
            iter: runq == RunqSource::TaskStorage,
            hist_iter: hist_in_task,
            runqlen: opts.runqlen,
            irq: opts.irq,
            exits,
        };
        // The ids of the attach points, from the index already made (see
        // `sys::btf::stub`), not from a full parse.
        let kernel_btf = match (mode, &kbtf) {
            (ProbeMode::TpBtf, Some(kbtf)) => Some(attach::attach_btf(
                kbtf,
                &table::programs(table::Mode::TpBtf, &needs),
            )?),
            (ProbeMode::PerfSched, Some(kbtf)) => {
                let mut progs = table::perf_hooks(table::Attach::Fentry).to_vec();
                progs.extend(table::programs(
                    table::Mode::PerfSched(table::Attach::Fentry),
                    &needs,
                ));
                Some(attach::attach_btf(kbtf, &progs)?)
            }
            _ => None,
        };
        startup::stage(format_args!("{}: attach ids found", mode.name()));
        let progs = if mode == ProbeMode::PerfSched {
            perf_sched_programs(&mut ebpf, kernel_btf.as_ref(), &needs)?
        } else {
            let mode = match mode {
                ProbeMode::TpBtf => table::Mode::TpBtf,
                ProbeMode::RawTp => table::Mode::RawTp,
                _ => table::Mode::Tracepoint,
            };
            let progs = table::programs(mode, &needs);
            attach::load_all(&mut ebpf, &progs, kernel_btf.as_ref())?;
            progs
        };
        startup::stage(format_args!("{}: programs verified", mode.name()));
        if let Some(cg) = &opts.cgroup {
            cg.store(&mut ebpf)?;
        }
        let (tracking, rest): (Vec<&Prog>, Vec<&Prog>) =
            progs.iter().partition(|p| p.role == Role::KeepsSet);
        attach::attach_all(&mut ebpf, tracking)?;
        seed(&mut ebpf)?;
        // The window opens before the switch programs attach: every slice they see
        // begins inside it (a slice running at attach counts from here).
        let t0 = crate::bpf::window::write(&mut ebpf, monotonic_ns(), 0)?;
        attach::attach_all(&mut ebpf, rest)?;
        let attached_at = monotonic_ns();
        // Every CPU switches once now, so each read knows what runs there (see `kick`).
        if let Ok(cpus) = crate::sys::procfs::online_cpus(root) {
            crate::sys::kick::kick_cpus(cpus);
        }
        startup::stage(format_args!("{}: attached", mode.name()));
        Ok(Tracer {
            ebpf,
            mode,
            refused: Vec::new(),
            // The switch program (or perf's hooks) comes first.
            attach: progs[0].attach.name(),
            runq,
            hist_in_task,
            sched_btf: kbtf.as_ref().map(crate::bpf::scheduler::btf_facts),
            runqlen_delayed_told: runqlen.map(|r| r.1),
            irq: opts.irq,
            on_cpu_includes_irq,
            lists_exits: exits,
            // The iterator stays loaded after detach(): the final report reads it.
            programs: progs
                .into_iter()
                .filter(|p| p.attach != Attach::Iter)
                .collect(),
            _sched_hook_event: sched_hook_event,
            t0,
            t1: 0,
            planned: 0,
            attached_at,
        })
    }

    /// Runs of our programs the kernel skipped because one was already running on the
    /// CPU (`recursion_misses` in the programs' fdinfo, 5.12+): events lost before any
    /// of our code ran.
    pub fn recursion_misses(&self) -> u64 {
        self.programs
            .iter()
            .filter_map(|p| {
                let fd = p.fd(&self.ebpf)?;
                let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
                let n = info
                    .lines()
                    .find_map(|l| l.strip_prefix("recursion_misses:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())?;
                if n > 0 {
                    log::debug!("{}: {n} runs the kernel skipped (recursion_misses)", p.name);
                }
                Some(n)
            })
            .sum()
    }

    /// Detaches and unloads every program; the maps stay readable.
    pub fn detach(&mut self) {
        let progs = std::mem::take(&mut self.programs);
        attach::unload_all(&mut self.ebpf, &progs);
    }
}

/// perf-sched mode: perf's switch hooks through fentry, else kprobes, plus the best
/// wakeup tracepoints for run-queue latency.
fn perf_sched_programs(ebpf: &mut Ebpf, btf: Option<&Btf>, needs: &Needs) -> Result<Vec<Prog>> {
    let btf = btf.ok_or_else(|| anyhow!("kernel BTF needed"))?;
    // TRACER_PERF_SCHED_ATTACH=kprobe skips fentry, so both attach paths can be tested
    // on kernels that offer both.
    let force_kprobe = std::env::var("TRACER_PERF_SCHED_ATTACH").as_deref() == Ok("kprobe");
    let fentry = (|| -> Result<()> {
        if force_kprobe {
            return Err(anyhow!("skipped (TRACER_PERF_SCHED_ATTACH=kprobe)"));
        }
        let hooks = table::perf_hooks(Attach::Fentry);
        for p in &hooks {
            p.load(ebpf, Some(btf))?;
        }
        compat::fentry_attachable(|| {
            let p: &mut FEntry = ebpf
                .program_mut(hooks[0].name)
                .ok_or_else(|| anyhow!("program {} missing", hooks[0].name))?
                .try_into()?;
            let link = p.attach()?;
            p.detach(link)?;
            Ok(())
        })
    })();
    let hooks = match fentry {
        Ok(()) => Attach::Fentry,
        Err(fe) => {
            let kp = (|| -> Result<()> {
                if !Path::new("/sys/kernel/tracing/kprobe_events").exists()
                    && !Path::new("/sys/bus/event_source/devices/kprobe").exists()
                {
                    return Err(anyhow!("kernel has no kprobes (CONFIG_KPROBES off)"));
                }
                for p in &table::perf_hooks(Attach::Kprobe) {
                    p.load(ebpf, None)?;
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
            Attach::Kprobe
        }
    };
    let progs = table::programs(table::Mode::PerfSched(hooks), needs);
    // The hooks (first) are loaded; the rest are tp_btf programs.
    attach::load_all(ebpf, &progs[2..], Some(btf))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TracerError;

    /// A target gone is no probe mode's failure: no other mode is tried, and the error
    /// is the target's alone.
    #[test]
    fn a_target_gone_stops_the_fallback() {
        let mut tried = 0;
        let modes = [ProbeMode::TpBtf, ProbeMode::RawTp];
        let e = first_working(&modes, "", |_| -> Result<()> {
            tried += 1;
            Err(TracerError::AlreadyExited { what: "TID", id: 7 }.into())
        })
        .unwrap_err();
        assert_eq!(tried, 1);
        assert_eq!(
            crate::error::one_line(&e),
            "TID 7 has already exited (a zombie its parent has not reaped): nothing to trace"
        );
    }
}
