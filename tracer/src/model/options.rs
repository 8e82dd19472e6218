//! The choices a run is made of: how to attach, where run-queue waits come from, how to
//! sort. Plain enums: the command line maps its words onto them (`cli`), reports name them.

/// How the programs attach to the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeMode {
    /// The best mode that loads and attaches here.
    Auto,
    /// BTF-typed tracepoints (tp_btf): cheapest, needs kernel BTF.
    TpBtf,
    /// Raw tracepoints: no BTF needed for attaching.
    RawTp,
    /// Classic tracepoints, fields at offsets from tracefs format files.
    Tracepoint,
    /// perf's own context-switch hooks (perf_event_task_sched_in/out) via fentry or kprobe.
    PerfSched,
}

impl ProbeMode {
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Auto => "auto",
            ProbeMode::TpBtf => "tp-btf",
            ProbeMode::RawTp => "raw-tp",
            ProbeMode::Tracepoint => "tracepoint",
            ProbeMode::PerfSched => "perf-sched",
        }
    }
}

/// Where run-queue waits come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunqFrom {
    /// Wakeup (or preemption) to switch-in, timed by the tracer, as runqlat and `perf
    /// sched latency` do: includes the wakeup-preemption latency.
    Wakeup,
    /// The scheduler's own `sched_info.run_delay` (schedstat's second field): no wakeup
    /// programs, the cheapest; it leaves out the time between a wakeup that preempts and
    /// the switch, when the kernel skips its clock update, and from Linux 6.12 (delayed
    /// dequeue) counts the sleep of a thread the load balancer moved while it slept (BTF
    /// modes only).
    Schedstat,
}

/// How run-queue waits are measured in the loaded mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunqSource {
    /// Per-thread entries (with the wakeup/preemption time) in task-local storage, the
    /// wait computed at switch-in (`CpuState::wait_ns` while the slice runs); user space
    /// reads the entries through the `dump_threads` task iterator.
    TaskStorage,
    /// Wakeup/preemption time in the thread's `THREADS` entry (`runnable_ns`).
    ThreadEntry,
    /// `sched_info.run_delay` growth (`--runq-from schedstat`).
    RunDelay,
}

impl RunqSource {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            RunqSource::TaskStorage | RunqSource::ThreadEntry => "wakeup",
            RunqSource::RunDelay => "run_delay",
        }
    }
}

/// What the thread list is sorted by, largest first (`--sort`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SortKey {
    /// On-CPU time.
    #[default]
    OnCpu,
    /// Run-queue wait.
    Runq,
    /// Off-CPU time.
    OffCpu,
    /// Number of on-CPU slices.
    Slices,
    /// CPU migrations.
    Migrations,
}

impl ProbeMode {
    /// Every mode, best first after `Auto` (the order `auto` tries them in).
    pub const ALL: [ProbeMode; 5] = [
        ProbeMode::Auto,
        ProbeMode::TpBtf,
        ProbeMode::RawTp,
        ProbeMode::Tracepoint,
        ProbeMode::PerfSched,
    ];
}

impl RunqFrom {
    pub const ALL: [RunqFrom; 2] = [RunqFrom::Wakeup, RunqFrom::Schedstat];

    /// The option's word.
    pub fn name(self) -> &'static str {
        match self {
            RunqFrom::Wakeup => "wakeup",
            RunqFrom::Schedstat => "schedstat",
        }
    }
}

impl SortKey {
    pub const ALL: [SortKey; 5] = [
        SortKey::OnCpu,
        SortKey::Runq,
        SortKey::OffCpu,
        SortKey::Slices,
        SortKey::Migrations,
    ];

    /// The option's word.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::OnCpu => "on-cpu",
            SortKey::Runq => "runq",
            SortKey::OffCpu => "off-cpu",
            SortKey::Slices => "slices",
            SortKey::Migrations => "migrations",
        }
    }
}

/// How `tracer offcpu` walks user stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unwind {
    /// dwarf for a given target (processes, threads, a command), where the kernel
    /// supports it (tp-btf, x86_64 or arm64); fp for every thread or a cgroup.
    Auto,
    /// The kernel walks frame pointers and sums by stack: cheapest, but code without
    /// frame pointers (Debian's libc) hides its caller.
    Fp,
    /// The kernel copies registers and the stack top; user space unwinds them from
    /// `.eh_frame`, one record per period that passes `--min`.
    Dwarf,
}

impl Unwind {
    pub const ALL: [Unwind; 3] = [Unwind::Auto, Unwind::Fp, Unwind::Dwarf];

    pub fn name(self) -> &'static str {
        match self {
            Unwind::Auto => "auto",
            Unwind::Fp => "fp",
            Unwind::Dwarf => "dwarf",
        }
    }
}
