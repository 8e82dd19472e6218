//! `tracer serve`'s cgroup names: the kernel's `cgroup:cgroup_mkdir` tracepoint, whose
//! record says a new cgroup's id and path, so a cgroup made and removed between two
//! reads of user space still has a name for the time its threads ran there.

/// Bytes of a path an event carries (NUL included); a longer path is cut and
/// [`MkdirEvent::len`] says so.
pub const PATH_LEN: usize = 512;

/// One `cgroup_mkdir` record, as the program sends it through `CGROUP_EVENTS`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MkdirEvent {
    /// The cgroup id (its directory's inode number on cgroup v2).
    pub id: u64,
    /// The hierarchy: 0 is cgroup v2 (`/proc/PID/cgroup`'s `0::` line); v1 hierarchies
    /// have their own numbers and ids, which `bpf_get_current_cgroup_id` never returns.
    pub root: i32,
    pub level: i32,
    /// The path's length in the record, NUL included (`__data_loc`'s upper half): more
    /// than [`PATH_LEN`] means `path` holds its first bytes only.
    pub len: u32,
    pub _pad: u32,
    /// The path below the hierarchy's mount, NUL-terminated (`/a/b`).
    pub path: [u8; PATH_LEN],
}

/// Offsets of the record's fields, from the tracepoint's tracefs `format` file, written
/// into the program's `.rodata` (`CGROUP_MKDIR_FIELDS`) before load.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MkdirFields {
    pub root: u32,
    pub level: u32,
    pub id: u32,
    /// The `__data_loc char[] path` word: the string's offset (low 16 bits) and length.
    pub path: u32,
}
