//! Off-CPU stacks as typed values: what `tracer offcpu` reports. Pure: built by the
//! command from the kernel's sums and the symbolizer's frames.
use serde::Serialize;

use crate::model::words;

/// How the thread left the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OffState {
    /// It blocked (slept: a lock, I/O, a futex, a sleep).
    Blocked,
    /// It was preempted and waited, runnable, for a CPU.
    Preempted,
}

impl OffState {
    pub fn name(self) -> &'static str {
        match self {
            OffState::Blocked => "blocked",
            OffState::Preempted => "preempted",
        }
    }
}

/// Which states `--state` keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateFilter {
    Blocked,
    Preempted,
    All,
}

impl StateFilter {
    pub const ALL: [StateFilter; 3] = [
        StateFilter::Blocked,
        StateFilter::Preempted,
        StateFilter::All,
    ];
    pub fn name(self) -> &'static str {
        match self {
            StateFilter::Blocked => "blocked",
            StateFilter::Preempted => "preempted",
            StateFilter::All => "all",
        }
    }
}

/// One frame, named.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Frame {
    pub name: String,
    /// Inlined into the frame below it (it has no frame of its own on the real stack).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub inlined: bool,
}

/// Why a stack has no frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// Not asked for (`--kernel-only` / `--user-only`).
    NotTaken,
    /// None to take: a kernel thread has no user stack.
    Empty,
    /// Another stack had its slot in the stack map (counted in drops).
    Collision,
    /// The stack map was full (counted in drops).
    MapFull,
    /// The kernel could not read it (another error).
    Unreadable,
    /// `--unwind dwarf`: copied, but its record found the ring buffer full (counted).
    CopyLost,
}

impl Missing {
    /// The placeholder frame shown in folded stacks (None: nothing shown).
    pub fn marker(self, side: &str) -> Option<String> {
        match self {
            Missing::NotTaken | Missing::Empty => None,
            Missing::Collision => Some(format!("[{side} stack lost: map collision]")),
            Missing::MapFull => Some(format!("[{side} stack lost: map full]")),
            Missing::Unreadable => Some(format!("[{side} stack unreadable]")),
            Missing::CopyLost => Some(format!("[{side} stack lost: ring buffer full]")),
        }
    }
}

/// A stack: its frames leaf first, or why there are none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum StackPart {
    Frames(Vec<Frame>),
    Missing { missing: Missing },
}

impl StackPart {
    pub fn frames(&self) -> &[Frame] {
        match self {
            StackPart::Frames(f) => f,
            StackPart::Missing { .. } => &[],
        }
    }
}

/// Time off-CPU at one pair of stacks, for one thread, in one state.
#[derive(Clone, Debug, Serialize)]
pub struct OffcpuStack {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub state: OffState,
    pub total_ns: u64,
    /// Off-CPU periods summed.
    pub count: u64,
    pub user: StackPart,
    pub kernel: StackPart,
    /// The user stack is likely cut short: the binary named here (where the walk ended)
    /// has no frame pointers. Never presented as a whole stack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_truncated: Option<String>,
    /// `--wakers`: the thread that woke it, with its stacks at the wakeup (None for a
    /// preempted period, or one woken before the attach).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waker: Option<WakerStack>,
}

/// Who woke a blocked thread, as it was at `sched_waking` (`--wakers`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WakerStack {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub user: StackPart,
    pub kernel: StackPart,
    /// The wakeup ran in an interrupt (a timer's, a device's): `pid`, `tid` and `comm`
    /// are the task it interrupted, not a waker, and its user stack is left out.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupt: bool,
}

/// The placeholder frame of a user stack cut short.
pub fn truncated_marker(binary: &str) -> String {
    format!("[truncated: {binary} has no frame pointers]")
}

impl OffcpuStack {
    /// The folded frames, root first: `comm`, the user stack (outermost call first; a
    /// truncation marker before it), the kernel stack (system call entry first).
    pub fn folded_frames(&self) -> Vec<String> {
        let mut v = vec![if self.comm.is_empty() {
            "[unknown]".to_string()
        } else {
            self.comm.clone()
        }];
        if let Some(b) = &self.user_truncated {
            v.push(truncated_marker(b));
        }
        match &self.user {
            StackPart::Frames(f) => v.extend(f.iter().rev().map(|f| f.name.clone())),
            StackPart::Missing { missing } => v.extend(missing.marker("user")),
        }
        match &self.kernel {
            StackPart::Frames(f) => v.extend(f.iter().rev().map(|f| f.name.clone())),
            StackPart::Missing { missing } => v.extend(missing.marker("kernel")),
        }
        // offwaketime's layout: `--`, then the waker's frames leaf first (kernel, `-`,
        // user), its name last: in a flame graph the waker hangs above the waiter.
        if let Some(w) = &self.waker {
            v.push("--".into());
            match &w.kernel {
                StackPart::Frames(f) => v.extend(f.iter().map(|f| f.name.clone())),
                StackPart::Missing { missing } => v.extend(missing.marker("kernel")),
            }
            v.push("-".into());
            match &w.user {
                StackPart::Frames(f) => v.extend(f.iter().map(|f| f.name.clone())),
                StackPart::Missing { missing } => v.extend(missing.marker("user")),
            }
            v.push(if w.interrupt {
                "[interrupt]".to_string()
            } else if w.comm.is_empty() {
                "[unknown]".to_string()
            } else {
                w.comm.clone()
            });
        }
        v
    }
}

/// What the kernel could not record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OffcpuDrops {
    pub kernel_stack_collisions: u64,
    pub user_stack_collisions: u64,
    pub stack_map_full: u64,
    /// Switch-outs not recorded (the map of threads off-CPU was full).
    pub start_map_full: u64,
    /// Periods timed but not added (the sums map was full), and their time.
    pub sums_map_full: u64,
    pub sums_map_full_ns: u64,
    /// `--wakers`: wakeups whose waker was not kept (its map was full).
    pub wakers_map_full: u64,
    /// `--unwind dwarf`: periods whose stack copies found the ring buffer full (their
    /// time is kept, their user stack shown as lost).
    pub copies_lost: u64,
    /// `--unwind dwarf`: switch-outs whose thread had no copy slot (task storage).
    pub copy_slots_failed: u64,
    /// Periods whose switch-in no event reported (a kernel may leave out the switches
    /// of some tasks: tracing was not on for them), timed from the thread's runtime at
    /// its next switch-out: kept, not lost.
    pub switch_ins_unseen_timed: u64,
    /// Such periods that could not be timed (tracepoint mode reads no runtime): lost.
    pub switch_ins_unseen_lost: u64,
}

impl OffcpuDrops {
    /// Anything lost (the timed unseen switch-ins are kept, so they are not losses).
    pub fn any(&self) -> bool {
        OffcpuDrops {
            switch_ins_unseen_timed: 0,
            ..*self
        } != OffcpuDrops::default()
    }
}

/// The report of `tracer offcpu`.
#[derive(Clone, Debug, Serialize)]
pub struct OffcpuReport {
    /// The window traced, ns.
    pub window_ns: u64,
    /// What was traced ("all threads", "PID 42", "command ./x").
    pub target: String,
    pub states: &'static str,
    pub min_ns: u64,
    /// The probe mode the switch program attached in (`tp-btf`, `raw-tp`, `tracepoint`).
    pub probe: &'static str,
    /// How user stacks were walked: `fp` (the kernel, by frame pointers) or `dwarf`
    /// (copies unwound in user space from `.eh_frame`).
    pub unwind: &'static str,
    pub total_ns: u64,
    pub blocked_ns: u64,
    pub preempted_ns: u64,
    pub drops: OffcpuDrops,
    /// What the reader must know (truncated stacks, unsymbolized processes, losses).
    pub notes: Vec<String>,
    /// Largest first.
    pub stacks: Vec<OffcpuStack>,
}

impl OffcpuReport {
    /// Builds the report: stacks sorted by time, the totals per state.
    pub fn new(
        window_ns: u64,
        target: String,
        states: StateFilter,
        min_ns: u64,
        mut stacks: Vec<OffcpuStack>,
        drops: OffcpuDrops,
        notes: Vec<String>,
    ) -> Self {
        stacks.sort_by(|a, b| {
            b.total_ns
                .cmp(&a.total_ns)
                .then(a.tid.cmp(&b.tid))
                .then(a.state.cmp(&b.state))
        });
        let sum = |s: OffState| {
            stacks
                .iter()
                .filter(|x| x.state == s)
                .map(|x| x.total_ns)
                .sum::<u64>()
        };
        let blocked_ns = sum(OffState::Blocked);
        let preempted_ns = sum(OffState::Preempted);
        OffcpuReport {
            window_ns,
            target,
            states: states.name(),
            min_ns,
            probe: "unknown",
            unwind: "fp",
            total_ns: blocked_ns + preempted_ns,
            blocked_ns,
            preempted_ns,
            drops,
            notes,
            stacks,
        }
    }

    /// The report of a run in probe mode `probe`.
    pub fn with_probe(mut self, probe: &'static str) -> Self {
        self.probe = probe;
        self
    }

    /// The report of a run whose user stacks were walked by `unwind` (`fp`, `dwarf`).
    pub fn with_unwind(mut self, unwind: &'static str) -> Self {
        self.unwind = unwind;
        self
    }

    /// Folded stacks (`frame;frame;... value`), equal lines merged, in microseconds as
    /// offcputime prints them; sorted by line.
    pub fn folded(&self) -> Vec<(String, u64)> {
        let mut m: std::collections::BTreeMap<String, u64> = Default::default();
        for s in &self.stacks {
            let line = s
                .folded_frames()
                .iter()
                // One line per stack and `;` between frames, whatever the names hold.
                .map(|f| words::escape(f).replace(';', ":"))
                .collect::<Vec<_>>()
                .join(";");
            *m.entry(line).or_default() += s.total_ns;
        }
        m.into_iter()
            .map(|(k, ns)| (k, ns / 1000))
            .filter(|(_, us)| *us > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> StackPart {
        StackPart::Frames(
            names
                .iter()
                .map(|n| Frame {
                    name: n.to_string(),
                    inlined: false,
                })
                .collect(),
        )
    }

    fn stack(tid: u32, state: OffState, ns: u64, user: StackPart) -> OffcpuStack {
        OffcpuStack {
            pid: 1,
            tid,
            comm: "w".into(),
            state,
            total_ns: ns,
            count: 1,
            user,
            kernel: frames(&["schedule", "do_nanosleep", "entry_SYSCALL_64"]),
            user_truncated: None,
            waker: None,
        }
    }

    #[test]
    fn a_waker_hangs_above_the_waiter_as_offwaketime_folds_it() {
        let mut s = stack(1, OffState::Blocked, 1_000, frames(&["read_here", "main"]));
        s.waker = Some(WakerStack {
            pid: 1,
            tid: 9,
            comm: "writer".into(),
            user: frames(&["write_here", "main"]),
            kernel: frames(&["try_to_wake_up", "pipe_write", "entry_SYSCALL_64"]),
            interrupt: false,
        });
        assert_eq!(
            s.folded_frames().join(";"),
            "w;main;read_here;entry_SYSCALL_64;do_nanosleep;schedule;--;\
             try_to_wake_up;pipe_write;entry_SYSCALL_64;-;write_here;main;writer"
        );
    }

    #[test]
    fn folded_is_root_first_and_merged() {
        let r = OffcpuReport::new(
            1,
            "t".into(),
            StateFilter::All,
            0,
            vec![
                stack(1, OffState::Blocked, 3_000, frames(&["sleep_here", "main"])),
                stack(2, OffState::Blocked, 2_000, frames(&["sleep_here", "main"])),
                stack(
                    3,
                    OffState::Preempted,
                    4_000,
                    StackPart::Missing {
                        missing: Missing::Collision,
                    },
                ),
            ],
            OffcpuDrops::default(),
            vec![],
        );
        assert_eq!(r.total_ns, 9_000);
        assert_eq!(r.preempted_ns, 4_000);
        assert_eq!(r.stacks[0].tid, 3);
        let f = r.folded();
        assert_eq!(
            f,
            vec![
                (
                    "w;[user stack lost: map collision];entry_SYSCALL_64;do_nanosleep;schedule"
                        .to_string(),
                    4
                ),
                (
                    "w;main;sleep_here;entry_SYSCALL_64;do_nanosleep;schedule".to_string(),
                    5
                ),
            ]
        );
    }

    #[test]
    fn truncated_stacks_say_so() {
        let mut s = stack(1, OffState::Blocked, 1, frames(&["read"]));
        s.user_truncated = Some("server".into());
        assert_eq!(
            s.folded_frames()[1],
            "[truncated: server has no frame pointers]"
        );
    }
}
