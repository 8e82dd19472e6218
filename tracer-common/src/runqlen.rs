//! Run-queue length per CPU (`tracer run --runqlen`): a timer program samples each CPU
//! at 99 Hz (as bcc's runqlen) and counts how many tasks wait on its run queue, not the
//! one running, in a per-CPU histogram. User space reads the sums.

/// Slots of the histogram: 0..=62 tasks waiting, and 63 or more.
pub const SLOTS: usize = 64;

/// The sampling frequency, Hz: off the kernel's tick rates (100, 250, 1000), so samples
/// do not lock to the tick.
pub const FREQ_HZ: u64 = 99;

/// Offsets the program reads, from the kernel's BTF (`RUNQLEN_FIELDS` in `.rodata`);
/// 0: the field is not in this kernel.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// `task_struct.se.cfs_rq`: the task's CFS run queue (`CONFIG_FAIR_GROUP_SCHED`).
    pub task_cfs_rq: u32,
    /// `cfs_rq.rq`: the CPU's run queue that holds it.
    pub cfs_rq_rq: u32,
    /// `rq.nr_running`: tasks on the run queue of every class, the running one included.
    pub rq_nr_running: u32,
    /// `rq.cfs.h_nr_queued` and `rq.cfs.h_nr_runnable` (6.14+): their difference is the
    /// tasks that sleep but stay queued (delayed dequeue, 6.12's 152e11f6df29).
    pub rq_cfs_queued: u32,
    pub rq_cfs_runnable: u32,
    /// `rq.cfs.h_nr_delayed` (6.13 only; 6.14 replaced it by `h_nr_runnable`).
    pub rq_cfs_delayed: u32,
}

impl Fields {
    pub const ZERO: Fields = Fields {
        task_cfs_rq: 0,
        cfs_rq_rq: 0,
        rq_nr_running: 0,
        rq_cfs_queued: 0,
        rq_cfs_runnable: 0,
        rq_cfs_delayed: 0,
    };
}

/// One CPU's samples (`RUNQLEN`, a per-CPU array of one).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hist {
    pub samples: u64,
    /// Sum of the tasks waiting over the samples.
    pub waiting: u64,
    pub slots: [u64; SLOTS],
}

impl Hist {
    pub const ZERO: Hist = Hist {
        samples: 0,
        waiting: 0,
        slots: [0; SLOTS],
    };
}

impl Default for Hist {
    fn default() -> Self {
        Hist::ZERO
    }
}

/// Tasks waiting for the CPU: those on its run queue less the ones that only stay
/// queued while asleep (delayed dequeue) and less the running one (`running`: the
/// task sampled is not the idle task).
#[inline(always)]
pub fn waiting(nr_running: u32, delayed: u32, running: bool) -> u32 {
    nr_running
        .saturating_sub(delayed)
        .saturating_sub(running as u32)
}

/// The histogram slot of `n` waiting.
#[inline(always)]
pub fn slot(n: u32) -> usize {
    (n as usize).min(SLOTS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_running_task_and_delayed_ones_are_not_waiting() {
        // Three spinners on a CPU: one runs, two wait.
        assert_eq!(waiting(3, 0, true), 2);
        // Idle CPU: nothing queued, the idle task is not counted.
        assert_eq!(waiting(0, 0, false), 0);
        // A sleeper kept queued by delayed dequeue beside one running task.
        assert_eq!(waiting(2, 1, true), 0);
        // Racy reads (fields read one after another) never wrap.
        assert_eq!(waiting(1, 3, true), 0);
        assert_eq!(waiting(0, 0, true), 0);
    }

    #[test]
    fn long_queues_share_the_last_slot() {
        assert_eq!(slot(0), 0);
        assert_eq!(slot(62), 62);
        assert_eq!(slot(63), 63);
        assert_eq!(slot(10_000), SLOTS - 1);
    }
}
