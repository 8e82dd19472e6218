//! The eBPF objects, one per program family, embedded by build.rs (which fails rather
//! than embed an empty one). Each holds only its family's programs and maps, so loading
//! one creates no map of another command.

/// A program family: the object a command loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// run, top, serve, record, slow: the switch, wakeup, fork and exec programs of
    /// every probe mode, record's task events, serve's cgroup names, the task iterator.
    Sched,
    /// `tracer offcpu`: its switch program and the traced set's fork/exec followers.
    Offcpu,
    /// `tracer floor`: the benchmark's empty switch program.
    Floor,
}

static SCHED: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-sched"));
static OFFCPU: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-offcpu"));
static FLOOR: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-floor"));

impl Family {
    /// The object's file name in the eBPF build's output (`tracer-ebpf`'s bin).
    pub const fn file_name(self) -> &'static str {
        match self {
            Family::Sched => "tracer-sched",
            Family::Offcpu => "tracer-offcpu",
            Family::Floor => "tracer-floor",
        }
    }

    /// The embedded object.
    pub fn object(self) -> &'static [u8] {
        match self {
            Family::Sched => SCHED,
            Family::Offcpu => OFFCPU,
            Family::Floor => FLOOR,
        }
    }
}

/// A loader for an object. aya 0.14 has no user-space type for task-local storage
/// (`TASK_STATS`, which only the programs use) and refuses it unless told to allow it.
pub fn new_loader<'a>() -> aya::EbpfLoader<'a> {
    let mut l = aya::EbpfLoader::new();
    l.allow_unsupported_maps();
    l
}
