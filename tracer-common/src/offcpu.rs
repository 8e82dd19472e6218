//! Off-CPU stacks (`tracer offcpu`): the kernel takes the stack ids of a traced thread
//! when it leaves a CPU and, when it comes back, adds the time it was away to an entry
//! keyed by (process, thread, user stack, kernel stack, state). Nothing per event goes
//! to user space; it reads the sums and the stack map at the end.

use crate::COMM_LEN;

/// A stack id that was not taken (`--kernel-only` / `--user-only`).
pub const STACK_NOT_TAKEN: i32 = i32::MIN;
/// `bpf_get_stackid` error: the stack was empty (a kernel thread has no user stack).
pub const STACK_EMPTY: i32 = -14; // -EFAULT
/// `bpf_get_stackid` error: another stack hashed to the same bucket (a collision).
pub const STACK_COLLISION: i32 = -17; // -EEXIST
/// `bpf_get_stackid` error: the stack map had no free slot.
pub const STACK_FULL: i32 = -12; // -ENOMEM
/// Set on the ids of stacks kept in the spill map (`OFFCPU_SPILL`), which takes a stack
/// whose bucket in `OFFCPU_STACKS` holds another: without it such a stack is lost on
/// every period, for the whole run (1 run in ~20 at ~40 stacks in 16,384 buckets).
/// Stack map ids stay below `--stack-entries` (at most 2^22), unwound ids start at 2^30.
pub const SPILL_ID: u32 = 1 << 29;

/// Leaving states kept (`OffcpuConfig::states`).
pub const STATE_BLOCKED: u32 = 1;
pub const STATE_PREEMPTED: u32 = 2;

/// Where a traced thread left the CPU: value of `OFFCPU_START`, keyed by TID.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffStart {
    pub ts_ns: u64,
    pub tgid: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
    /// [`STATE_BLOCKED`] or [`STATE_PREEMPTED`].
    pub state: u32,
    pub comm: [u8; COMM_LEN],
    /// The thread's `se.sum_exec_runtime` at the switch-out (0: not known, tracepoint
    /// mode): times a period whose switch-in the kernel did not report
    /// ([`unseen_switch_in`]).
    pub run_ns: u64,
}

/// The period that began at a switch-out (`ts_ns`, with the thread's runtime `run_ns`)
/// whose switch-in no event reported, found at the thread's next switch-out (`now`,
/// runtime `run_now`). The thread ran without a break since that switch-in, since
/// every switch-out of it is seen, so the switch-in was at `now - (run_now - run_ns)`.
/// None when the runtime is not known or the figures do not fit (clock skew).
pub fn unseen_switch_in(ts_ns: u64, run_ns: u64, now: u64, run_now: u64) -> Option<(u64, u64)> {
    if run_ns == 0 || run_now < run_ns {
        return None;
    }
    let back_in = now.checked_sub(run_now - run_ns)?;
    let d = back_in.checked_sub(ts_ns)?;
    Some((d, back_in))
}

/// Key of the `OFFCPU` sums.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OffKey {
    pub tgid: u32,
    pub tid: u32,
    /// Id in `OFFCPU_STACKS`, or one of the `STACK_*` values.
    pub user_stack: i32,
    pub kernel_stack: i32,
    pub state: u32,
    pub _pad: u32,
}

/// Value of the `OFFCPU` sums.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffVal {
    /// Off-CPU time, ns.
    pub total_ns: u64,
    /// Off-CPU periods.
    pub count: u64,
    /// The thread's name when it left the CPU (the latest one seen).
    pub comm: [u8; COMM_LEN],
}

/// Who woke a blocked thread (`--wakers`): value of `WAKERS`, keyed by the wakee's TID,
/// written at `sched_waking` (the waker is `current` there) and taken at its switch-in.
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Waker {
    pub tgid: u32,
    pub tid: u32,
    pub user_stack: i32,
    pub kernel_stack: i32,
    pub comm: [u8; COMM_LEN],
}

/// [`WakeKey::waker_tid`] of a period without a waker.
pub const NO_WAKER: u32 = u32::MAX;

/// Key of the `OFFWAKE` sums (`--wakers`): the period's key and its waker's.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WakeKey {
    pub off: OffKey,
    /// [`NO_WAKER`] with its stacks [`STACK_NOT_TAKEN`]: no waker seen (a preempted
    /// period, or a wakeup before the attach). 0 is the idle task (an interrupt in it).
    pub waker_tgid: u32,
    pub waker_tid: u32,
    pub waker_user_stack: i32,
    pub waker_kernel_stack: i32,
}

/// Value of the `OFFWAKE` sums.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeVal {
    pub total_ns: u64,
    pub count: u64,
    pub comm: [u8; COMM_LEN],
    pub waker_comm: [u8; COMM_LEN],
}

/// Load-time settings of the off-CPU program (`OFFCPU_CONFIG` in `.rodata`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffcpuConfig {
    /// Periods shorter than this are not added.
    pub min_ns: u64,
    /// Bits of [`STATE_BLOCKED`] and [`STATE_PREEMPTED`].
    pub states: u32,
    /// 1: take kernel stacks.
    pub kernel_stacks: u32,
    /// 1: take user stacks.
    pub user_stacks: u32,
    /// 1: join each blocked period with its waker (`OFFWAKE` instead of `OFFCPU`).
    pub wakers: u32,
    /// 1: user stacks as copies for unwinding in user space (`--unwind dwarf`, tp-btf
    /// only), sent per period through `USTACK_EVENTS` instead of summed by stack id.
    pub dwarf: u32,
    /// Bytes of `struct pt_regs` copied (covering the registers below), and the byte
    /// offset of the user stack pointer in it; both from the kernel's BTF.
    pub regs_len: u32,
    pub sp_off: u32,
    pub _pad: u32,
}

/// [`OffKey::user_stack`] of a period whose user stack was copied for unwinding but whose
/// record could not be sent (the ring buffer was full): its time is kept, its user stack
/// shown as lost.
pub const STACK_COPY_LOST: i32 = i32::MIN + 1;
/// [`OffStart::user_stack`] of a switch-out whose user stack was copied into the thread's
/// `USTACK_COPY` (`--unwind dwarf`).
pub const STACK_COPIED: i32 = i32::MIN + 2;

/// Bytes of user stack copied at most (from the stack pointer up; perf's
/// `--call-graph dwarf` default is 8192). Three reads: to the end of the first page, then
/// two whole pages, so a stack that ends sooner still yields what it has.
pub const COPY_STACK: usize = 8192 + 4096;
/// Room for `struct pt_regs` up to the registers unwinding needs (arm64's `pc` ends at 264).
pub const COPY_REGS: usize = 272;

/// A [`StackCopy`] of a waiting thread (its own stack at switch-out).
pub const COPY_WAITER: u32 = 1;
/// A [`StackCopy`] of the thread that woke it (its stack at `sched_waking`).
pub const COPY_WAKER: u32 = 2;

/// What a [`StackCopy`] record says besides its bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyHead {
    /// [`COPY_WAITER`] or [`COPY_WAKER`].
    pub kind: u32,
    /// Bytes of `stack` copied (0: none could be read, or none was taken).
    pub len: u32,
    /// The period, ns (set at the switch-in).
    pub total_ns: u64,
    /// The switch-in's time: a waker's record carries its waiter's.
    pub at_ns: u64,
    /// The waiting thread.
    pub tgid: u32,
    pub tid: u32,
    /// Whose stack this is (the waiter's ids, or the waker's), and its stack ids: the
    /// kernel stack's in `OFFCPU_STACKS`, the user stack [`STACK_COPIED`] when `stack`
    /// holds it, else why not (a `STACK_*` value).
    pub owner_tgid: u32,
    pub owner_tid: u32,
    pub kernel_stack: i32,
    pub user_stack: i32,
    /// [`STATE_BLOCKED`] or [`STATE_PREEMPTED`].
    pub state: u32,
    pub _pad: u32,
    /// The owner's name.
    pub comm: [u8; COMM_LEN],
}

/// A thread's user registers and the top of its user stack, copied by the kernel
/// (`--unwind dwarf`): kept in task storage between the switch-out and the switch-in, then
/// sent as a ring record of [`COPY_HEADER`] + `head.len` bytes when the period passes
/// `--min`.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct StackCopy {
    pub head: CopyHead,
    /// The start of `struct pt_regs` (the user registers saved at kernel entry).
    pub regs: [u8; COPY_REGS],
    pub stack: [u8; COPY_STACK],
}

/// Bytes of a [`StackCopy`] before its stack.
pub const COPY_HEADER: usize = core::mem::offset_of!(StackCopy, stack);

/// Bytes of a [`CopyHead`].
pub const COPY_HEAD: usize = core::mem::size_of::<CopyHead>();

/// Indices into the per-CPU `OFFCPU_DROPS` array.
pub mod offdrop {
    /// A kernel stack hashed to a bucket holding another stack (-EEXIST).
    pub const KSTACK_COLLISION: u32 = 0;
    /// A user stack hashed to a bucket holding another stack (-EEXIST).
    pub const USTACK_COLLISION: u32 = 1;
    /// The stack map was full (-ENOMEM).
    pub const STACK_MAP_FULL: u32 = 2;
    /// `OFFCPU_START` was full: a switch-out was not recorded, its period not timed.
    pub const START_FULL: u32 = 3;
    /// `OFFCPU` was full: a period was timed but could not be added.
    pub const SUMS_FULL: u32 = 4;
    /// The time of the periods lost to [`SUMS_FULL`], ns.
    pub const SUMS_FULL_NS: u32 = 5;
    /// `WAKERS` was full: a blocked period's waker was not kept.
    pub const WAKERS_FULL: u32 = 6;
    /// `--unwind dwarf`: a period's stack copy could not be sent (the ring was full).
    pub const COPY_LOST: u32 = 7;
    /// `--unwind dwarf`: a thread's copy slot could not be made (task storage).
    pub const COPY_NO_SLOT: u32 = 8;
    /// Periods whose switch-in no event reported, timed from the thread's runtime at
    /// its next switch-out ([`super::unseen_switch_in`]) and kept.
    pub const UNSEEN_TIMED: u32 = 9;
    /// Such periods that could not be timed (no runtime: tracepoint mode): lost.
    pub const UNSEEN_LOST: u32 = 10;
    pub const COUNT: u32 = 11;
}

const _: () = assert!(core::mem::size_of::<OffStart>() == 48);
const _: () = assert!(core::mem::size_of::<OffKey>() == 24);
const _: () = assert!(core::mem::size_of::<OffVal>() == 32);
const _: () = assert!(core::mem::size_of::<OffcpuConfig>() == 40);
const _: () = assert!(COPY_HEAD == 72 && COPY_HEADER == COPY_HEAD + COPY_REGS);
const _: () = assert!(core::mem::size_of::<StackCopy>() == COPY_HEADER + COPY_STACK);
const _: () = assert!(core::mem::size_of::<Waker>() == 32);
const _: () = assert!(core::mem::size_of::<WakeKey>() == 40);
const _: () = assert!(core::mem::size_of::<WakeVal>() == 48);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: #[repr(C)] plain data without implicit padding (sizes asserted above).
    unsafe impl aya::Pod for super::OffStart {}
    unsafe impl aya::Pod for super::OffKey {}
    unsafe impl aya::Pod for super::OffVal {}
    unsafe impl aya::Pod for super::OffcpuConfig {}
    unsafe impl aya::Pod for super::Waker {}
    unsafe impl aya::Pod for super::WakeKey {}
    unsafe impl aya::Pod for super::WakeVal {}
    unsafe impl aya::Pod for super::CopyHead {}
}

#[cfg(test)]
mod tests {
    use super::unseen_switch_in;

    #[test]
    fn an_unseen_switch_in_is_placed_by_the_runtime_since() {
        // Out at 1000 with 5000 ns run, back out at 9000 with 5600: it ran 600 ns, so it
        // came back at 8400 after 7400 ns away.
        assert_eq!(unseen_switch_in(1000, 5000, 9000, 5600), Some((7400, 8400)));
        // It ran from the switch-out on (no time away).
        assert_eq!(unseen_switch_in(1000, 5000, 9000, 13000), Some((0, 1000)));
    }

    #[test]
    fn an_unseen_switch_in_without_runtime_or_with_skew_is_not_timed() {
        assert_eq!(unseen_switch_in(1000, 0, 9000, 5600), None);
        // The runtime went back, or grew by more than the time since the switch-out.
        assert_eq!(unseen_switch_in(1000, 5000, 9000, 4000), None);
        assert_eq!(unseen_switch_in(1000, 5000, 9000, 13001), None);
        assert_eq!(unseen_switch_in(1000, 5000, 900, 5001), None);
    }
}
