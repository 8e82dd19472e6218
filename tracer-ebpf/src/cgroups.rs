//! `tracer serve`'s cgroup names: `cgroup:cgroup_mkdir` (a classic tracepoint, attached
//! by serve alone) sends each new cgroup's id and path, so user space can name a cgroup
//! that was made and removed between two of its reads, where the threads' entries keep
//! only its id (`ThreadStats::cgroup_id`).
use aya_ebpf::{
    helpers::bpf_probe_read_kernel_str_bytes,
    macros::map,
    maps::{PerCpuArray, RingBuf},
    programs::TracePointContext,
    EbpfContext as _,
};
use tracer_common::cgroup::{MkdirEvent, MkdirFields};

/// The record's field offsets (tracefs `format`), written by user space before load.
#[no_mangle]
static CGROUP_MKDIR_FIELDS: MkdirFields = MkdirFields {
    root: 0,
    level: 0,
    id: 0,
    path: 0,
};

/// New cgroups, in the order they were made. User space sizes it (one page when unused).
#[map]
pub static CGROUP_EVENTS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// Events `CGROUP_EVENTS` had no room for: cgroups that may stay without a name.
#[map]
pub static CGROUP_EVENTS_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn fields() -> &'static MkdirFields {
    // SAFETY: as `config()`: a volatile read, so the placeholder is not folded.
    unsafe { core::ptr::read_volatile(&&CGROUP_MKDIR_FIELDS) }
}

/// `cgroup_mkdir(root, id, level, path)`.
#[inline(always)]
pub fn mkdir(ctx: &TracePointContext) {
    let f = fields();
    let Some(mut e) = CGROUP_EVENTS.reserve::<MkdirEvent>(0) else {
        if let Some(p) = CGROUP_EVENTS_LOST.get_ptr_mut(0) {
            // SAFETY: per-CPU slot.
            unsafe { *p += 1 };
        }
        return;
    };
    let p = e.as_mut_ptr();
    // SAFETY: offsets from the format file (read_at checks them against the record);
    // the reservation holds one MkdirEvent, written in place.
    unsafe {
        (*p).root = ctx.read_at::<i32>(f.root as usize).unwrap_or(-1);
        (*p).level = ctx.read_at::<i32>(f.level as usize).unwrap_or(0);
        (*p).id = ctx.read_at::<u64>(f.id as usize).unwrap_or(0);
        let loc = ctx.read_at::<u32>(f.path as usize).unwrap_or(0);
        (*p).len = loc >> 16;
        (*p)._pad = 0;
        let src = (ctx.as_ptr() as *const u8).add((loc & 0xffff) as usize);
        if bpf_probe_read_kernel_str_bytes(src, &mut (*p).path).is_err() {
            (*p).path[0] = 0;
        }
    }
    e.submit(0);
}
