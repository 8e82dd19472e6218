//! Interrupt time (`tracer run --irq`): the programs on `irq_handler_entry/exit` and
//! `softirq_entry/exit` time each hardirq and softirq on its CPU and charge it to the
//! CPU, to the vector and to the thread that was on the CPU (the idle task's share kept
//! apart). A softirq's time leaves out the hardirqs that interrupted it, so the two
//! never count the same nanosecond. The accounting is these pure functions; the eBPF
//! entry points only find the entries and call them.

/// Softirq vectors counted apart (the kernel has 10, `NR_SOFTIRQS`, since 2.6.x; the
/// slots past them catch a vector a later kernel adds).
pub const VECS: usize = 16;

/// The kernel's names of its softirq vectors (`softirq_to_name`), by number.
pub const VEC_NAMES: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// One CPU's interrupt time since load (`IRQ_CPU`, a per-CPU array of one).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqCpu {
    /// When the hardirq running now began (0: none).
    pub hard_start: u64,
    /// When the softirq running now began (0: none).
    pub soft_start: u64,
    /// Hardirq time inside the softirq running now.
    pub hard_in_soft: u64,
    /// Hardirq handlers' time and count.
    pub hard_ns: u64,
    pub hard_count: u64,
    /// Of `hard_ns` and the softirqs' time, what ran while the idle task was current.
    pub idle_hard_ns: u64,
    pub idle_soft_ns: u64,
    /// Interrupts whose thread found no room in `IRQ_THREADS` (their time is still the
    /// CPU's and the vector's).
    pub thread_map_full: u64,
    /// Softirq time and count by vector (`slot`).
    pub soft_ns: [u64; VECS],
    pub soft_count: [u64; VECS],
}

impl IrqCpu {
    pub const ZERO: IrqCpu = IrqCpu {
        hard_start: 0,
        soft_start: 0,
        hard_in_soft: 0,
        hard_ns: 0,
        hard_count: 0,
        idle_hard_ns: 0,
        idle_soft_ns: 0,
        thread_map_full: 0,
        soft_ns: [0; VECS],
        soft_count: [0; VECS],
    };

    /// A hardirq handler starts.
    #[inline(always)]
    pub fn hard_entry(&mut self, now: u64) {
        self.hard_start = now;
    }

    /// A hardirq handler returns: its time, or None for an exit whose entry the program
    /// did not see (attached in between).
    #[inline(always)]
    pub fn hard_exit(&mut self, now: u64) -> Option<u64> {
        if self.hard_start == 0 {
            return None;
        }
        let d = now.saturating_sub(self.hard_start);
        self.hard_start = 0;
        self.hard_ns += d;
        self.hard_count += 1;
        if self.soft_start != 0 {
            self.hard_in_soft += d;
        }
        Some(d)
    }

    /// A softirq vector starts.
    #[inline(always)]
    pub fn soft_entry(&mut self, now: u64) {
        self.soft_start = now;
        self.hard_in_soft = 0;
    }

    /// A softirq vector ends: its own time (less the hardirqs inside it), or None
    /// without its entry.
    #[inline(always)]
    pub fn soft_exit(&mut self, vec: u32, now: u64) -> Option<u64> {
        if self.soft_start == 0 {
            return None;
        }
        let d = now
            .saturating_sub(self.soft_start)
            .saturating_sub(self.hard_in_soft);
        // `hard_in_soft` is reset at the next entry (zeroing it here too, LLVM merges
        // the two stores into a memset the verifier walks byte by byte).
        self.soft_start = 0;
        let i = slot(vec);
        // Already below VECS; said again for the verifier, which checks the index here.
        if i < VECS {
            self.soft_ns[i] += d;
            self.soft_count[i] += 1;
        }
        Some(d)
    }
}

impl Default for IrqCpu {
    fn default() -> Self {
        IrqCpu::ZERO
    }
}

/// One thread's interrupt time (`IRQ_THREADS`, by TID): what ran while it was on a CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqThread {
    pub hard_ns: u64,
    pub soft_ns: u64,
}

/// The slot of softirq vector `vec`.
#[inline(always)]
pub fn slot(vec: u32) -> usize {
    (vec as usize).min(VECS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hardirq_inside_a_softirq_counts_once() {
        let mut c = IrqCpu::ZERO;
        c.soft_entry(1_000);
        c.hard_entry(1_200);
        assert_eq!(c.hard_exit(1_500), Some(300));
        // NET_RX ran 1000 ns, of which 300 were the hardirq's.
        assert_eq!(c.soft_exit(3, 2_000), Some(700));
        assert_eq!((c.hard_ns, c.hard_count), (300, 1));
        assert_eq!((c.soft_ns[3], c.soft_count[3]), (700, 1));
        // The next softirq starts without the last one's hardirqs.
        c.soft_entry(3_000);
        assert_eq!(c.soft_exit(1, 3_100), Some(100));
    }

    #[test]
    fn exits_without_their_entry_count_nothing() {
        let mut c = IrqCpu::ZERO;
        assert_eq!(c.hard_exit(5_000), None);
        assert_eq!(c.soft_exit(3, 5_000), None);
        assert_eq!(c, IrqCpu::ZERO);
        // A hardirq outside any softirq is not subtracted from a later one.
        c.hard_entry(10);
        c.hard_exit(20);
        c.soft_entry(30);
        assert_eq!(c.soft_exit(3, 50), Some(20));
    }

    #[test]
    fn a_clock_read_out_of_order_never_wraps() {
        let mut c = IrqCpu::ZERO;
        c.soft_entry(100);
        c.hard_entry(150);
        c.hard_exit(400);
        assert_eq!(c.soft_exit(3, 300), Some(0));
        c.hard_entry(500);
        assert_eq!(c.hard_exit(400), Some(0));
    }

    #[test]
    fn vectors_past_the_known_ones_share_the_last_slot() {
        assert_eq!(slot(3), 3);
        assert_eq!(slot(9), 9);
        assert_eq!(slot(15), VECS - 1);
        assert_eq!(slot(u32::MAX), VECS - 1);
    }
}
