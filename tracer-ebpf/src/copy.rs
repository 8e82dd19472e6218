//! `tracer offcpu --unwind dwarf`: a thread's user registers and the top of its user
//! stack, copied so user space can unwind them from `.eh_frame` where code keeps no frame
//! pointer (Debian's libc: the function that called `read()` is the frame a
//! frame-pointer walk loses). perf's `--call-graph dwarf` copies the same at each sample.
use aya_ebpf::helpers::generated::{bpf_probe_read_kernel, bpf_probe_read_user, bpf_task_pt_regs};
use tracer_common::offcpu::{OffcpuConfig, StackCopy, COPY_REGS};

const PAGE: u64 = 4096;

/// Copies the user registers of `task` (which must be `current`, a trusted BTF pointer)
/// and up to `COPY_STACK` bytes of its user stack into `slot`; returns the stack bytes
/// copied (0 when none could be read: a kernel thread, a stack page not present).
///
/// `bpf_probe_read_user` reads all or nothing, and the stack may end (its mapping) less
/// than `COPY_STACK` above the stack pointer: the first read stops at the end of the
/// stack pointer's page, the next two read whole pages, and the copy keeps what was read.
#[inline(always)]
pub fn copy_user(task: *const u8, slot: *mut StackCopy, oc: &OffcpuConfig) -> u32 {
    // SAFETY: `slot` is a map value of a `StackCopy`; the helpers check the addresses
    // they read, and every write below is bounded to its field (the verifier checks).
    unsafe {
        (*slot).head.len = 0;
        let regs = bpf_task_pt_regs(task as *mut _) as *const core::ffi::c_void;
        let n = if oc.regs_len as usize > COPY_REGS {
            COPY_REGS
        } else {
            oc.regs_len as usize
        };
        let r = (*slot).regs.as_mut_ptr();
        if regs.is_null() || bpf_probe_read_kernel(r as *mut _, n as u32, regs) != 0 {
            return 0;
        }
        // At most 248: the stack pointer's 8 bytes lie inside `regs`.
        let sp_off = (oc.sp_off as usize) & 0xf8;
        let sp = core::ptr::read_unaligned(r.add(sp_off) as *const u64);
        if sp == 0 {
            return 0;
        }
        let dst = (*slot).stack.as_mut_ptr();
        let first = PAGE - (sp & (PAGE - 1));
        if bpf_probe_read_user(dst as *mut _, first as u32, sp as *const _) != 0 {
            return 0;
        }
        let mut len = first;
        // Two whole pages more, each read only if the one before was there.
        for _ in 0..2 {
            let to = dst.add(len as usize) as *mut _;
            if bpf_probe_read_user(to, PAGE as u32, (sp + len) as *const _) != 0 {
                break;
            }
            len += PAGE;
        }
        (*slot).head.len = len as u32;
        len as u32
    }
}
