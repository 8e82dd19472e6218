//! The one `perf_event_open(2)` of the crate, and the two ioctls and the `read(2)` that go
//! with it. The attribute struct, its constants and the ioctl numbers come from
//! `perf-event-open-sys` (generated from the kernel's uapi headers for each architecture),
//! so no attribute is packed by hand here; what stays ours is the mapping from perf's
//! modifier rules ([`AttrFields`]) to the bits, the descriptor ownership and the errors.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use perf_event_open_sys::bindings as abi;

pub use abi::{
    PERF_COUNT_HW_BRANCH_INSTRUCTIONS, PERF_COUNT_HW_BRANCH_MISSES, PERF_COUNT_HW_BUS_CYCLES,
    PERF_COUNT_HW_CACHE_MISSES, PERF_COUNT_HW_CACHE_REFERENCES, PERF_COUNT_HW_CPU_CYCLES,
    PERF_COUNT_HW_INSTRUCTIONS, PERF_COUNT_HW_REF_CPU_CYCLES, PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, PERF_COUNT_SW_ALIGNMENT_FAULTS,
    PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_CPU_MIGRATIONS,
    PERF_COUNT_SW_DUMMY, PERF_COUNT_SW_EMULATION_FAULTS, PERF_COUNT_SW_PAGE_FAULTS,
    PERF_COUNT_SW_PAGE_FAULTS_MAJ, PERF_COUNT_SW_PAGE_FAULTS_MIN, PERF_COUNT_SW_TASK_CLOCK,
    PERF_TYPE_HARDWARE, PERF_TYPE_RAW, PERF_TYPE_SOFTWARE,
};

/// The perf_event_attr fields an event spec decides; the rest (disabled, inherit,
/// enable_on_exec) depend on the target and come from [`OpenMode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct AttrFields {
    pub type_: u32,
    pub config: u64,
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    pub exclude_hv: bool,
    pub exclude_guest: bool,
    pub exclude_host: bool,
}

/// How a counter is opened besides the spec's own fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenMode {
    /// Opened stopped: counting starts at [`enable`] (or at exec with `enable_on_exec`).
    pub disabled: bool,
    /// Children created after the open are counted into it too.
    pub inherit: bool,
    pub enable_on_exec: bool,
}

impl OpenMode {
    /// Counting from the open on, this task only (the kernel programs' per-CPU counters,
    /// the sched-hook dummy).
    pub const ENABLED: OpenMode = OpenMode {
        disabled: false,
        inherit: false,
        enable_on_exec: false,
    };
}

/// Whose execution a descriptor counts (perf_event_open's `pid` argument).
#[derive(Debug, Clone, Copy)]
pub enum Who<'a> {
    /// A process or thread by ID; 0 is the caller.
    Task(i32),
    /// Every task (pid -1): needs a CPU.
    AnyTask,
    /// The tasks of the cgroup whose directory this is (PERF_FLAG_PID_CGROUP): needs a CPU.
    Cgroup(BorrowedFd<'a>),
}

/// What a counter's `read(2)` returns with our read_format: the value, and the times
/// it was enabled and actually on the PMU (their ratio is the multiplexing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

/// value, time_enabled, time_running: what [`read`] parses.
const READ_FORMAT: u64 =
    (abi::PERF_FORMAT_TOTAL_TIME_ENABLED | abi::PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;

/// The kernel's attribute for a spec opened in `mode`. `size` is the struct's own: a kernel
/// older than the headers accepts it as long as the fields it does not know are zero.
pub fn encode_attr(f: &AttrFields, mode: OpenMode) -> abi::perf_event_attr {
    let mut a = abi::perf_event_attr {
        type_: f.type_,
        size: std::mem::size_of::<abi::perf_event_attr>() as u32,
        config: f.config,
        read_format: READ_FORMAT,
        ..Default::default()
    };
    a.set_disabled(mode.disabled.into());
    a.set_inherit(mode.inherit.into());
    a.set_enable_on_exec(mode.enable_on_exec.into());
    a.set_exclude_user(f.exclude_user.into());
    a.set_exclude_kernel(f.exclude_kernel.into());
    a.set_exclude_hv(f.exclude_hv.into());
    a.set_exclude_host(f.exclude_host.into());
    a.set_exclude_guest(f.exclude_guest.into());
    a
}

/// Opens one counter: `who` on `cpu` (None: any CPU). The descriptor is close-on-exec.
pub fn open(attr: &abi::perf_event_attr, who: Who<'_>, cpu: Option<i32>) -> io::Result<OwnedFd> {
    let (pid, cgroup) = match who {
        Who::Task(pid) => (pid, 0),
        Who::AnyTask => (-1, 0),
        Who::Cgroup(dir) => (dir.as_raw_fd(), abi::PERF_FLAG_PID_CGROUP),
    };
    let flags = abi::PERF_FLAG_FD_CLOEXEC | cgroup;
    // The kernel writes the size it expected into `size` on E2BIG: give it a copy.
    let mut attr = *attr;
    // SAFETY: `attr` is a fully initialised perf_event_attr that lives across the call and
    // whose `size` is its own size; the kernel reads at most that and writes only `size`.
    // Counting (no sampling, no mmap) has no effect on our memory.
    let ret = unsafe {
        perf_event_open_sys::perf_event_open(&mut attr, pid, cpu.unwrap_or(-1), -1, flags.into())
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(ret) })
}

fn ioctl_result(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// PERF_EVENT_IOC_ENABLE: start counting.
pub fn enable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: ENABLE takes no pointer (its argument, 0, means "this event only"); the
    // descriptor is open for the borrow's lifetime.
    ioctl_result(unsafe { perf_event_open_sys::ioctls::ENABLE(fd.as_raw_fd(), 0) })
}

/// PERF_EVENT_IOC_DISABLE: stop counting (the value and times stay readable).
pub fn disable(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: as in `enable`: no pointer argument, an open descriptor.
    ioctl_result(unsafe { perf_event_open_sys::ioctls::DISABLE(fd.as_raw_fd(), 0) })
}

/// One `read(2)` of value, time_enabled, time_running. End of file (a pinned event in error
/// state) reads as enabled but never running: "never counted", not an exact 0.
pub fn read(fd: &OwnedFd) -> io::Result<Reading> {
    let mut buf = [0u64; 3];
    // SAFETY: `buf` is 24 writable bytes and the length passed is its size.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(&buf),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Ok(Reading {
            value: 0,
            enabled: 1,
            running: 0,
        });
    }
    if n as usize != std::mem::size_of_val(&buf) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read of {n} bytes from a perf event"),
        ));
    }
    Ok(Reading {
        value: buf[0],
        enabled: buf[1],
        running: buf[2],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(type_: u32, config: u64) -> AttrFields {
        AttrFields {
            type_,
            config,
            ..AttrFields::default()
        }
    }

    /// The flags word as the uapi header numbers its bits (disabled is bit 0, exclude_host
    /// 19, exclude_guest 20): checks the generated bitfield accessors against the header's
    /// documented layout, independently of them. Bit-field order is the ABI's per
    /// endianness; the word is read where the kernel reads it (after read_format).
    #[cfg(target_endian = "little")]
    fn flags_word(a: &abi::perf_event_attr) -> u64 {
        // SAFETY: perf_event_attr is plain old data, at least 48 bytes long.
        let bytes: &[u8] = unsafe {
            std::slice::from_raw_parts(
                (a as *const abi::perf_event_attr).cast(),
                std::mem::size_of::<abi::perf_event_attr>(),
            )
        };
        u64::from_le_bytes(bytes[40..48].try_into().unwrap())
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn flag_bits_are_the_headers() {
        let one = |f: AttrFields, m: OpenMode| flags_word(&encode_attr(&f, m));
        let none = fields(0, 0);
        let mode = |disabled, inherit, enable_on_exec| OpenMode {
            disabled,
            inherit,
            enable_on_exec,
        };
        assert_eq!(one(none, OpenMode::ENABLED), 0);
        assert_eq!(one(none, mode(true, false, false)), 1 << 0);
        assert_eq!(one(none, mode(false, true, false)), 1 << 1);
        assert_eq!(one(none, mode(false, false, true)), 1 << 12);
        let with = |set: fn(&mut AttrFields)| {
            let mut f = none;
            set(&mut f);
            one(f, OpenMode::ENABLED)
        };
        assert_eq!(with(|f| f.exclude_user = true), 1 << 4);
        assert_eq!(with(|f| f.exclude_kernel = true), 1 << 5);
        assert_eq!(with(|f| f.exclude_hv = true), 1 << 6);
        assert_eq!(with(|f| f.exclude_host = true), 1 << 19);
        assert_eq!(with(|f| f.exclude_guest = true), 1 << 20);
    }

    #[test]
    fn attr_layout_and_fields() {
        // 136 bytes up to config3 (PERF_ATTR_SIZE_VER8); newer headers may add more.
        assert!(std::mem::size_of::<abi::perf_event_attr>() >= abi::PERF_ATTR_SIZE_VER8 as usize);
        let f = AttrFields {
            exclude_kernel: true,
            exclude_hv: true,
            ..fields(PERF_TYPE_HARDWARE, 1)
        };
        let a = encode_attr(
            &f,
            OpenMode {
                disabled: true,
                inherit: true,
                enable_on_exec: true,
            },
        );
        assert_eq!((a.type_, a.config, a.read_format), (0, 1, 3));
        assert_eq!(a.size as usize, std::mem::size_of::<abi::perf_event_attr>());
        assert_eq!(
            (a.disabled(), a.inherit(), a.enable_on_exec()),
            (1, 1, 1),
            "mode bits"
        );
        assert_eq!(
            (
                a.exclude_user(),
                a.exclude_kernel(),
                a.exclude_hv(),
                a.exclude_host(),
                a.exclude_guest()
            ),
            (0, 1, 1, 0, 0)
        );
        // Nothing else is asked of the kernel: no sampling, no other bit.
        assert_eq!(
            (a.sample_type, a.pinned(), a.exclusive(), a.freq()),
            (0, 0, 0, 0)
        );
    }
}
