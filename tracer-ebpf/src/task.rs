//! A task as the programs see it, and the load-time configuration they read it with.
//!
//! Task field offsets and tracepoint record offsets come from user space in `CONFIG`
//! (resolved from kernel BTF and tracefs at load time).
use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel,
    generated::{self, bpf_get_current_task_btf},
};
use tracer_common::{Config, COMM_LEN};

/// Load-time configuration; user space overwrites it in `.rodata` before load.
#[no_mangle]
static CONFIG: Config = Config::ZERO;

#[inline(always)]
pub fn config() -> &'static Config {
    // SAFETY: read through a volatile pointer so the compiler does not constant-fold the
    // placeholder values; the verifier sees the real, frozen `.rodata`.
    unsafe { core::ptr::read_volatile(&&CONFIG) }
}

/// A task as seen at an attach point: what the accounting needs to know about it.
#[derive(Clone, Copy)]
pub struct Task {
    pub tid: u32,
    /// 0 when not known yet: read from `ptr` only when needed.
    pub tgid: u32,
    /// The `task_struct`, when the attach point gives it (null otherwise: then `current`
    /// is read through `bpf_get_current_task`).
    pub ptr: *const u8,
    /// `ptr` is a BTF pointer the verifier trusts (tp_btf and fentry arguments,
    /// `bpf_get_current_task_btf`): fields are plain loads, not `bpf_probe_read_kernel`
    /// calls (about 12 ns each on the sched_switch path).
    pub trusted: bool,
    /// Where its comm can be read from, if anywhere.
    pub comm: CommSrc,
}

impl Task {
    /// The TGID, read from the task only when needed (new entries, fork), not per event.
    #[inline(always)]
    pub fn tgid(&self) -> u32 {
        if self.tgid != 0 || self.ptr.is_null() {
            self.tgid
        } else {
            self.field::<u32>(config().task.tgid).unwrap_or(0)
        }
    }

    /// A field at a BTF-resolved offset (`off` != 0). A task without a pointer is
    /// `current` (the task leaving the CPU).
    #[inline(always)]
    pub fn field<T: Copy>(&self, off: u32) -> Option<T> {
        if self.trusted {
            // SAFETY: the verifier checks the load against the task_struct BTF at this
            // (load-time constant) offset and makes it fault-safe.
            return Some(unsafe {
                core::ptr::read_volatile(self.ptr.add(off as usize) as *const T)
            });
        }
        let base = if self.ptr.is_null() {
            unsafe { bpf_get_current_task() as *const u8 }
        } else {
            self.ptr
        };
        // SAFETY: bpf_probe_read_kernel validates the address.
        unsafe { bpf_probe_read_kernel(base.add(off as usize) as *const T) }.ok()
    }

    /// The scheduler's runtime `se.sum_exec_runtime`, or 0 when the offset is unknown.
    /// At switch-out `update_curr()` has already run for the task leaving.
    #[inline(always)]
    pub fn sum_exec(&self) -> u64 {
        match config().task.sum_exec {
            0 => 0,
            off => self.field::<u64>(off).unwrap_or(0),
        }
    }

    /// The runtime of the slice running now, from the scheduler (`sum_exec_runtime` less
    /// `prev_sum_exec_runtime`, its value at the switch-in), or None when not known.
    #[inline(always)]
    pub fn running_slice(&self) -> Option<u64> {
        let c = config();
        if c.task.prev_sum_exec == 0 || c.task.sum_exec == 0 {
            return None;
        }
        let prev = self.field::<u64>(c.task.prev_sum_exec)?;
        self.sum_exec().checked_sub(prev)
    }

    /// `sched_info.run_delay`, the task's total run-queue wait, or None when not
    /// configured. At sched_switch the scheduler has not yet added the wait that ends
    /// there (`sched_info_arrive()` runs after the tracepoint).
    #[inline(always)]
    pub fn run_delay(&self) -> Option<u64> {
        match config().task.run_delay {
            0 => None,
            off => self.field::<u64>(off),
        }
    }
}

/// `current`'s comm. aya-ebpf's `bpf_get_current_comm` first zeroes its buffer with a
/// call to its byte-loop `memset`, which the verifier walked 16 times over on every path
/// (2,200 of the switch program's instructions processed); the helper itself writes all
/// of the buffer, zeroes where it fails (`kernel/bpf/helpers.c`).
#[inline(always)]
pub fn current_comm() -> [u8; COMM_LEN] {
    let mut comm = core::mem::MaybeUninit::<[u8; COMM_LEN]>::uninit();
    // SAFETY: the helper fills the buffer (ARG_PTR_TO_UNINIT_MEM), whatever it returns.
    unsafe {
        generated::bpf_get_current_comm(comm.as_mut_ptr().cast(), COMM_LEN as u32);
        comm.assume_init()
    }
}

#[derive(Clone, Copy)]
pub enum CommSrc {
    None,
    /// The task is `current`: `bpf_get_current_comm`.
    Current,
    /// `task_struct::comm` at this kernel address.
    Kernel(*const u8),
    /// The tracepoint record at this address.
    Record(*const u8),
}

impl CommSrc {
    #[inline(always)]
    pub fn read(self) -> [u8; COMM_LEN] {
        let p = match self {
            // Zeroes by the helper's failed read of address 0: a literal `[0; 16]` stored
            // to a map value became a `memset` call the verifier walks byte by byte.
            CommSrc::None => core::ptr::null(),
            CommSrc::Current => return current_comm(),
            CommSrc::Kernel(p) | CommSrc::Record(p) => p,
        };
        read_comm(p)
    }
}

/// The comm at kernel address `p`, all zeroes if it cannot be read. Not aya-ebpf's
/// `bpf_probe_read_kernel(..).unwrap_or([0; 16])`: its zeroes became `memset` calls the
/// verifier walks byte by byte; the helper zeroes the buffer itself where it fails.
#[inline(always)]
pub fn read_comm(p: *const u8) -> [u8; COMM_LEN] {
    let mut comm = core::mem::MaybeUninit::<[u8; COMM_LEN]>::uninit();
    // SAFETY: the helper validates `p` and fills the buffer (ARG_PTR_TO_UNINIT_MEM),
    // with zeroes when the read fails (`bpf_probe_read_kernel_common`).
    unsafe {
        generated::bpf_probe_read_kernel(comm.as_mut_ptr().cast(), COMM_LEN as u32, p.cast());
        comm.assume_init()
    }
}

/// Decodes a `task_struct *` with the BTF offsets from `CONFIG`: one field read (the
/// TID) per event; the TGID and comm only when needed.
#[inline(always)]
pub fn task_from_btf(p: *const u8, trusted: bool) -> Task {
    let c = config();
    let mut t = Task {
        tid: 0,
        tgid: 0,
        ptr: p,
        trusted,
        comm: CommSrc::Kernel(unsafe { p.add(c.task.comm as usize) }),
    };
    t.tid = t.field::<u32>(c.task.pid).unwrap_or(0);
    t
}

/// The task leaving the CPU is `current`: its ids come from a helper, not a probe read.
#[inline(always)]
pub fn current_task() -> Task {
    let id = bpf_get_current_pid_tgid();
    Task {
        tid: id as u32,
        tgid: (id >> 32) as u32,
        ptr: core::ptr::null(),
        trusted: false,
        comm: CommSrc::Current,
    }
}

/// `current` as a trusted BTF pointer (tp_btf, fentry): ids from the helper, fields by
/// plain loads.
#[inline(always)]
pub fn current_task_btf() -> Task {
    let mut t = current_task();
    t.ptr = unsafe { bpf_get_current_task_btf() } as *const u8;
    t.trusted = true;
    t
}

/// `current` given as a trusted argument (tp_btf's `prev`): its TID and TGID by plain
/// loads, where `current_task_btf` makes two helper calls.
#[inline(always)]
pub fn current_from_arg(p: *const u8) -> Task {
    let mut t = task_from_btf(p, true);
    t.tgid = t.field::<u32>(config().task.tgid).unwrap_or(0);
    t.comm = CommSrc::Current;
    t
}

/// How the previous task left the CPU.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// Still runnable (preempted).
    Preempted,
    /// Blocked (voluntary switch).
    Blocked,
    /// Final switch-out of a dead task.
    Dead,
}

/// tp_btf / raw_tp: `sched_switch(bool preempt, prev, next, unsigned int prev_state)`.
/// `prev_state` became an argument in 5.18 (see `compat` in user space).
#[inline(always)]
pub fn leave_from_args(preempt: u64, prev_state: u32) -> Leave {
    if prev_state & config().task.dead_mask != 0 {
        Leave::Dead
    } else if preempt != 0 || prev_state == 0 {
        Leave::Preempted
    } else {
        Leave::Blocked
    }
}

/// How the previous task left, from a classic tracepoint's `prev_state` (preempted:
/// `TASK_REPORT_MAX`, no blocked bit).
#[inline(always)]
pub fn leave_from_record(state: u64) -> Leave {
    let c = config();
    if state & c.tp.dead_mask as u64 != 0 {
        Leave::Dead
    } else if state & c.tp.blocked_mask as u64 != 0 {
        Leave::Blocked
    } else {
        Leave::Preempted
    }
}
