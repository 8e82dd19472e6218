//! The program table: which programs of which object a command loads, how each attaches
//! and where, as typed data. Loading, attaching and detaching are generic over it
//! (`bpf::loader`); nothing is chosen by renaming strings.
use super::compat;

/// How a program attaches (its ELF section's kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// BTF-typed tracepoint (`tp_btf/`), attached by the BTF name in `target`.
    TpBtf,
    /// Raw tracepoint (`raw_tp/`), attached to the tracepoint `target`.
    RawTp,
    /// Classic tracepoint; `target` is `category/name`, as under tracefs' `events/`.
    Tracepoint,
    /// fentry on the kernel function `target`.
    Fentry,
    /// kprobe on the kernel function `target`.
    Kprobe,
    /// BPF iterator over `target` (e.g. `task`): loaded at start, attached per read.
    Iter,
    /// A timer on every online CPU (the software `cpu-clock` event sampling at
    /// `tracer_common::runqlen::FREQ_HZ`); `target` names it for messages.
    PerfTimer,
}

impl Attach {
    /// The report's name for the mechanism.
    pub const fn name(self) -> &'static str {
        match self {
            Attach::TpBtf => "tp_btf",
            Attach::RawTp => "raw_tracepoint",
            Attach::Tracepoint => "tracepoint",
            Attach::Fentry => "fentry",
            Attach::Kprobe => "kprobe",
            Attach::Iter => "iter",
            Attach::PerfTimer => "perf_event",
        }
    }

    /// Whether loading needs the kernel's BTF.
    pub const fn needs_btf(self) -> bool {
        matches!(self, Attach::TpBtf | Attach::Fentry | Attach::Iter)
    }
}

/// What a program does for the session, which decides when it is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Keeps the traced set as tasks are born and exec (fork, exec): attached before
    /// the set is read from /proc, so a thread born meanwhile is in the scan or joins.
    KeepsSet,
    /// Counts (switches, wakeups, events): attached once the window is open.
    Counts,
}

/// One program: its name in the object, how and where it attaches, its role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prog {
    pub name: &'static str,
    pub attach: Attach,
    pub target: &'static str,
    pub role: Role,
}

const fn prog(name: &'static str, attach: Attach, target: &'static str) -> Prog {
    Prog {
        name,
        attach,
        target,
        role: Role::Counts,
    }
}

const fn keeps_set(name: &'static str, attach: Attach, target: &'static str) -> Prog {
    Prog {
        name,
        attach,
        target,
        role: Role::KeepsSet,
    }
}

/// What the scheduling family's table depends on, settled before load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// A target is given: the fork program makes children join the traced set.
    pub fork: bool,
    /// Run-queue waits are timed from wakeups (not the scheduler's `run_delay`).
    pub wakeup: bool,
    /// Classic tracepoints without BTF: slices from `sched_stat_runtime`.
    pub stat_runtime: bool,
    /// `tracer record` / `slow`: the switch programs that also stream events.
    pub record: bool,
    /// `tracer record`: the task events (creation, exit, rename, migration).
    pub record_tasks: bool,
    /// Entries in task-local storage: the live threads are read by the task iterator.
    pub iter: bool,
    /// Per-thread histograms in task storage (`Accounting::hist_in_task`), read by
    /// their own task iterator.
    pub hist_iter: bool,
    /// `--runqlen`: the run-queue length sampler (any mode).
    pub runqlen: bool,
    /// `--irq`: the interrupt-time programs (raw tracepoints, any mode).
    pub irq: bool,
    /// System-wide or `--cgroup` with entries in task storage: the exit program lists
    /// the threads between their exit and their final switch, which the task iterator
    /// no longer sees, for the final read to wait for (`bpf::collect::exiting`).
    pub exits: bool,
}

/// A probe mode as the table sees it: perf-sched with the way its hooks attach (fentry,
/// else kprobe: the loader tries fentry first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    TpBtf,
    RawTp,
    Tracepoint,
    PerfSched(Attach),
}

/// The scheduling family's programs in `mode`. The wakeup programs only time run-queue
/// waits when the scheduler's own `run_delay` cannot be read.
pub fn programs(mode: Mode, needs: &Needs) -> Vec<Prog> {
    use Attach::*;
    let mut v = Vec::new();
    match mode {
        Mode::TpBtf => v.push(if needs.record {
            prog("sched_switch_rec_btf", TpBtf, "sched_switch")
        } else {
            prog("sched_switch_btf", TpBtf, "sched_switch")
        }),
        Mode::RawTp => v.push(if needs.record {
            prog("sched_switch_rec_raw", RawTp, "sched_switch")
        } else {
            prog("sched_switch_raw", RawTp, "sched_switch")
        }),
        Mode::Tracepoint => v.push(prog("sched_switch_tp", Tracepoint, "sched/sched_switch")),
        Mode::PerfSched(hooks) => v.extend(perf_hooks(hooks)),
    }
    // Waits come from run_delay without the wakeup program; a new thread's wakeup still
    // starts its time in the window (and is rare enough to cost nothing).
    let (wakeup, wakeup_new, exec, fork) = match mode {
        Mode::RawTp => (
            prog("sched_wakeup_raw", RawTp, "sched_wakeup"),
            prog("sched_wakeup_new_raw", RawTp, "sched_wakeup_new"),
            keeps_set("sched_exec_raw", RawTp, "sched_process_exec"),
            keeps_set("sched_fork_raw", RawTp, "sched_process_fork"),
        ),
        Mode::Tracepoint => (
            prog("sched_wakeup_tp", Tracepoint, "sched/sched_wakeup"),
            prog("sched_wakeup_new_tp", Tracepoint, "sched/sched_wakeup_new"),
            keeps_set("sched_exec_tp", Tracepoint, "sched/sched_process_exec"),
            keeps_set("sched_fork_tp", Tracepoint, "sched/sched_process_fork"),
        ),
        // perf-sched takes the tp_btf programs for everything but the switch.
        _ => (
            prog("sched_wakeup_btf", TpBtf, "sched_wakeup"),
            prog("sched_wakeup_new_btf", TpBtf, "sched_wakeup_new"),
            keeps_set("sched_exec_btf", TpBtf, "sched_process_exec"),
            keeps_set("sched_fork_btf", TpBtf, "sched_process_fork"),
        ),
    };
    if needs.wakeup {
        v.push(wakeup);
    }
    v.push(wakeup_new);
    // A non-main thread that execs takes its leader's TID: every mode follows it.
    v.push(exec);
    if needs.fork {
        v.push(fork);
    }
    if needs.exits && matches!(mode, Mode::TpBtf | Mode::PerfSched(_)) {
        v.push(prog("sched_exit_btf", TpBtf, "sched_process_exit"));
    }
    if needs.stat_runtime {
        v.push(prog(
            "sched_stat_runtime_tp",
            Tracepoint,
            "sched/sched_stat_runtime",
        ));
    }
    if needs.record_tasks {
        v.extend(record_tasks(mode));
    }
    if needs.iter {
        v.push(prog("dump_threads", Iter, "task"));
    }
    if needs.hist_iter {
        v.push(prog("dump_hists", Iter, "task"));
    }
    if needs.runqlen {
        v.push(prog("runqlen_sample", PerfTimer, "cpu-clock"));
    }
    if needs.irq {
        v.extend(IRQ);
    }
    v
}

/// `--irq`'s programs: raw tracepoints whatever the mode (no BTF needed).
const IRQ: [Prog; 4] = [
    prog("irq_hard_entry", Attach::RawTp, "irq_handler_entry"),
    prog("irq_hard_exit", Attach::RawTp, "irq_handler_exit"),
    prog("irq_soft_entry", Attach::RawTp, "softirq_entry"),
    prog("irq_soft_exit", Attach::RawTp, "softirq_exit"),
];

/// perf's switch hooks, by fentry or kprobe.
pub fn perf_hooks(attach: Attach) -> [Prog; 2] {
    match attach {
        Attach::Fentry => [
            prog("perf_sched_out_fentry", attach, compat::PERF_SCHED_OUT),
            prog("perf_sched_in_fentry", attach, compat::PERF_SCHED_IN),
        ],
        _ => [
            prog(
                "perf_sched_out_kprobe",
                Attach::Kprobe,
                compat::PERF_SCHED_OUT,
            ),
            prog(
                "perf_sched_in_kprobe",
                Attach::Kprobe,
                compat::PERF_SCHED_IN,
            ),
        ],
    }
}

/// The programs only `tracer record` attaches: a task's creation, exit, comm change and
/// migration (exec rides on the exec program every mode has). `tracer run` and `tracer
/// slow` never attach them, so they cost nothing there. Needs task pointers.
fn record_tasks(mode: Mode) -> Vec<Prog> {
    use Attach::*;
    match mode {
        Mode::TpBtf => vec![
            prog("rec_newtask_btf", TpBtf, "task_newtask"),
            prog("rec_exit_btf", TpBtf, "sched_process_exit"),
            prog("rec_rename_btf", TpBtf, "task_rename"),
            prog("rec_migrate_btf", TpBtf, "sched_migrate_task"),
        ],
        Mode::RawTp => vec![
            prog("rec_newtask_raw", RawTp, "task_newtask"),
            prog("rec_exit_raw", RawTp, "sched_process_exit"),
            prog("rec_rename_raw", RawTp, "task_rename"),
            prog("rec_migrate_raw", RawTp, "sched_migrate_task"),
        ],
        _ => Vec::new(),
    }
}

/// `tracer serve`'s cgroup names (see `bpf::cgroups`).
pub const CGROUP_MKDIR: Prog = prog("cgroup_mkdir_tp", Attach::Tracepoint, "cgroup/cgroup_mkdir");

/// The off-CPU family: its switch program and, with a target, the programs that keep
/// the traced set (children join it, an exec'ing thread keeps its place).
pub fn offcpu_programs(mode: Mode, fork: bool, wakers: bool) -> Vec<Prog> {
    use Attach::*;
    let (switch, waking, fork_exec) = match mode {
        Mode::RawTp => (
            prog("offcpu_switch_raw", RawTp, "sched_switch"),
            prog("offcpu_waking_raw", RawTp, "sched_waking"),
            [
                keeps_set("sched_fork_raw", RawTp, "sched_process_fork"),
                keeps_set("sched_exec_raw", RawTp, "sched_process_exec"),
            ],
        ),
        Mode::Tracepoint => (
            prog("offcpu_switch_tp", Tracepoint, "sched/sched_switch"),
            prog("offcpu_waking_tp", Tracepoint, "sched/sched_waking"),
            [
                keeps_set("sched_fork_tp", Tracepoint, "sched/sched_process_fork"),
                keeps_set("sched_exec_tp", Tracepoint, "sched/sched_process_exec"),
            ],
        ),
        _ => (
            prog("offcpu_switch", TpBtf, "sched_switch"),
            prog("offcpu_waking", TpBtf, "sched_waking"),
            [
                keeps_set("sched_fork_btf", TpBtf, "sched_process_fork"),
                keeps_set("sched_exec_btf", TpBtf, "sched_process_exec"),
            ],
        ),
    };
    let mut v = vec![switch];
    if wakers {
        v.push(waking);
    }
    if fork {
        v.extend(fork_exec);
    }
    v
}

/// The floor family's one program.
pub const FLOOR: Prog = prog("floor_switch", Attach::TpBtf, "sched_switch");

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[Prog]) -> Vec<&'static str> {
        v.iter().map(|p| p.name).collect()
    }

    #[test]
    fn run_in_tp_btf_without_target_loads_switch_wakeups_and_exec() {
        let needs = Needs {
            wakeup: true,
            ..Default::default()
        };
        assert_eq!(
            names(&programs(Mode::TpBtf, &needs)),
            [
                "sched_switch_btf",
                "sched_wakeup_btf",
                "sched_wakeup_new_btf",
                "sched_exec_btf"
            ]
        );
    }

    #[test]
    fn the_runqlen_sampler_is_loaded_only_when_asked_in_every_mode() {
        let off = Needs {
            wakeup: true,
            ..Default::default()
        };
        let on = Needs {
            runqlen: true,
            ..off
        };
        for mode in [
            Mode::TpBtf,
            Mode::RawTp,
            Mode::Tracepoint,
            Mode::PerfSched(Attach::Kprobe),
        ] {
            assert!(!names(&programs(mode, &off)).contains(&"runqlen_sample"));
            let v = programs(mode, &on);
            let p = v.iter().find(|p| p.name == "runqlen_sample").unwrap();
            assert_eq!((p.attach, p.role), (Attach::PerfTimer, Role::Counts));
        }
    }

    #[test]
    fn the_irq_programs_are_raw_tracepoints_loaded_only_when_asked() {
        let off = Needs {
            wakeup: true,
            ..Default::default()
        };
        let on = Needs { irq: true, ..off };
        for mode in [
            Mode::TpBtf,
            Mode::RawTp,
            Mode::Tracepoint,
            Mode::PerfSched(Attach::Fentry),
        ] {
            assert!(!programs(mode, &off)
                .iter()
                .any(|p| p.name.starts_with("irq_")));
            let irq: Vec<Prog> = programs(mode, &on)
                .into_iter()
                .filter(|p| p.name.starts_with("irq_"))
                .collect();
            assert_eq!(irq.len(), 4);
            assert!(irq
                .iter()
                .all(|p| p.attach == Attach::RawTp && p.role == Role::Counts));
        }
    }

    #[test]
    fn the_exit_program_lists_dying_threads_only_where_storage_hides_them() {
        let off = Needs {
            wakeup: true,
            iter: true,
            ..Default::default()
        };
        let on = Needs { exits: true, ..off };
        for mode in [Mode::TpBtf, Mode::PerfSched(Attach::Fentry)] {
            assert!(!names(&programs(mode, &off)).contains(&"sched_exit_btf"));
            let v = programs(mode, &on);
            let p = v.iter().find(|p| p.name == "sched_exit_btf").unwrap();
            assert_eq!((p.attach, p.target), (Attach::TpBtf, "sched_process_exit"));
        }
        // The THREADS hash keeps a dying thread's entry until its final switch.
        for mode in [Mode::RawTp, Mode::Tracepoint] {
            assert!(!names(&programs(mode, &on)).contains(&"sched_exit_btf"));
        }
    }

    #[test]
    fn record_takes_the_streaming_switch_and_the_task_events() {
        let needs = Needs {
            wakeup: true,
            fork: true,
            record: true,
            record_tasks: true,
            ..Default::default()
        };
        let v = programs(Mode::RawTp, &needs);
        assert_eq!(v[0].name, "sched_switch_rec_raw");
        assert!(v.iter().all(|p| p.attach == Attach::RawTp));
        assert!(names(&v).contains(&"rec_migrate_raw"));
        let keeps: Vec<_> = v.iter().filter(|p| p.role == Role::KeepsSet).collect();
        assert_eq!(keeps.len(), 2, "exec and fork keep the set");
    }

    #[test]
    fn perf_sched_hooks_by_fentry_or_kprobe_and_the_rest_by_tp_btf() {
        let needs = Needs {
            iter: true,
            ..Default::default()
        };
        for hooks in [Attach::Fentry, Attach::Kprobe] {
            let v = programs(Mode::PerfSched(hooks), &needs);
            assert_eq!(v[0].attach, hooks);
            assert_eq!(v[1].attach, hooks);
            assert!(v[2..]
                .iter()
                .all(|p| matches!(p.attach, Attach::TpBtf | Attach::Iter)));
            assert_eq!(v.last().map(|p| p.name), Some("dump_threads"));
        }
    }

    #[test]
    fn schedstat_waits_drop_the_wakeup_program_but_not_wakeup_new() {
        let v = programs(Mode::Tracepoint, &Needs::default());
        assert_eq!(
            names(&v),
            ["sched_switch_tp", "sched_wakeup_new_tp", "sched_exec_tp"]
        );
        assert!(v.iter().all(|p| p.target.starts_with("sched/")));
    }
}
