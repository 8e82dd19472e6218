//! The eBPF objects, one per program family, embedded by build.rs (which fails rather
//! than embed an empty one). Each holds only its family's programs and maps, so loading
//! one creates no map of another command.

/// A program family: the object a command loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// run, top: the switch, wakeup, fork and exec programs of every probe mode, the
    /// task iterator.
    Sched,
    /// record, slow: the same, with the switch programs that stream events, record's
    /// task events and the event ring (so `tracer run` creates none of them).
    Record,
    /// serve: `Sched`'s, with the cgroup_mkdir program and its ring (`bpf::cgroups`).
    Serve,
    /// `tracer offcpu`: its switch program and the traced set's fork/exec followers.
    Offcpu,
    /// `tracer floor`: the benchmark's empty switch program.
    Floor,
}

static SCHED: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-sched"));
static RECORD: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-record"));
static SERVE: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-serve"));
static OFFCPU: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-offcpu"));
static FLOOR: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tracer-floor"));

impl Family {
    /// The object's file name in the eBPF build's output (`tracer-ebpf`'s bin).
    pub const fn file_name(self) -> &'static str {
        match self {
            Family::Sched => "tracer-sched",
            Family::Record => "tracer-record",
            Family::Serve => "tracer-serve",
            Family::Offcpu => "tracer-offcpu",
            Family::Floor => "tracer-floor",
        }
    }

    /// The embedded object.
    pub fn object(self) -> &'static [u8] {
        match self {
            Family::Sched => SCHED,
            Family::Record => RECORD,
            Family::Serve => SERVE,
            Family::Offcpu => OFFCPU,
            Family::Floor => FLOOR,
        }
    }
}

/// A loader for an object. aya 0.14 has no user-space type for task-local storage
/// (`TASK_STATS`, which only the programs use) and refuses it unless told to allow it.
///
/// aya 0.14's `EbpfLoader::new()` also parses the kernel's BTF (5.5 MB: ~17 ms of CPU
/// and wall, a quarter of `tracer run`'s start-up) for CO-RE relocations, which our
/// objects have none of (a test below holds that): field offsets come from our own
/// index (`sys::btf`) and attach ids from its stub. It has no constructor without the
/// parse, so the loader is made on a short-lived thread that sees an empty
/// `/sys/kernel/btf/vmlinux` in a mount namespace of its own. Where that is refused (no
/// CAP_SYS_ADMIN, a seccomp or LSM policy, no thread to spare), aya parses as before.
/// The second value says whether aya parsed the kernel's BTF.
pub fn new_loader<'a>() -> (aya::EbpfLoader<'a>, bool) {
    let made = std::thread::Builder::new()
        .name("tracer-loader".into())
        .spawn(|| (rustix::thread::gettid(), loader_without_kernel_btf()))
        .ok()
        .and_then(|h| h.join().ok());
    let (mut l, parsed) = match made {
        Some((tid, Some(l))) => {
            gone(tid);
            (l, false)
        }
        _ => (
            aya::EbpfLoader::new(),
            std::path::Path::new(crate::sys::btf::VMLINUX_BTF).exists(),
        ),
    };
    l.allow_unsupported_maps();
    (l, parsed)
}

/// On its own thread: a private mount namespace for this thread alone (the rest of the
/// process, and the system, keep the real file), `/dev/null` over the kernel's BTF, and
/// aya's loader, whose parse then fails at once and leaves it without kernel BTF.
fn loader_without_kernel_btf() -> Option<aya::EbpfLoader<'static>> {
    use crate::sys::btf::VMLINUX_BTF;
    use rustix::mount::{mount_bind, mount_change, MountPropagationFlags};
    use rustix::thread::{unshare_unsafe, UnshareFlags};
    // SAFETY: only the mount namespace (and with it this thread's cwd and root) is
    // unshared; the file descriptor table stays shared.
    unsafe { unshare_unsafe(UnshareFlags::NEWNS) }.ok()?;
    // Private first, so the bind below cannot propagate back to the parent namespace.
    mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )
    .ok()?;
    mount_bind("/dev/null", VMLINUX_BTF).ok()?;
    // What aya reads here is empty, or it would parse it after all.
    (std::fs::metadata(VMLINUX_BTF).ok()?.len() == 0).then(aya::EbpfLoader::new)
}

/// Waits (up to a second) until the loader's thread is gone from the process: `join`
/// returns before the kernel frees its mount namespace (`exit_mm` comes before
/// `exit_task_namespaces`), and a thread still exiting would hold the copied mounts and
/// not answer `sys::privileges::after_attach`'s signal.
fn gone(tid: rustix::thread::Pid) {
    let path = format!("/proc/self/task/{}", tid.as_raw_nonzero());
    let t = std::time::Instant::now();
    while std::path::Path::new(&path).exists() && t.elapsed() < std::time::Duration::from_secs(1) {
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

#[cfg(test)]
mod tests {
    use super::Family;
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    const ALL: [Family; 5] = [
        Family::Sched,
        Family::Record,
        Family::Serve,
        Family::Offcpu,
        Family::Floor,
    ];

    fn elf(f: Family) -> object::read::elf::ElfFile64<'static, object::Endianness> {
        object::read::elf::ElfFile64::parse(f.object())
            .unwrap_or_else(|e| panic!("{}: {e}", f.file_name()))
    }

    /// The maps an embedded object declares: the symbols of its `maps` and `.maps`
    /// (BTF-defined, task storage) sections, which aya creates at load.
    fn maps(f: Family) -> Vec<String> {
        let elf = elf(f);
        let sections: Vec<_> = ["maps", ".maps"]
            .iter()
            .filter_map(|n| elf.section_by_name(n))
            .map(|s| s.index())
            .collect();
        let mut v: Vec<String> = elf
            .symbols()
            .filter(|s| s.section_index().is_some_and(|i| sections.contains(&i)))
            .map(|s| s.name().unwrap().to_string())
            .collect();
        v.sort();
        v
    }

    /// aya-ebpf's `memset`, `memcpy` and `memmove` are byte loops the verifier walks
    /// once per byte on every path that calls them (35k of the default switch program's
    /// 63.5k instructions processed on 2026-12-04): no program may call them; zero and
    /// copy with `tracer_ebpf::mem`, or leave buffers to the helpers that fill them.
    #[test]
    fn no_program_calls_the_byte_loops() {
        use object::{ObjectSection as _, RelocationTarget};
        for f in ALL {
            let elf = elf(f);
            let mut calls = Vec::new();
            for sec in elf.sections() {
                for (off, r) in sec.relocations() {
                    let RelocationTarget::Symbol(i) = r.target() else {
                        continue;
                    };
                    let name = elf.symbol_by_index(i).and_then(|s| s.name()).unwrap_or("");
                    if ["memset", "memcpy", "memmove"].contains(&name) {
                        calls.push(format!("{} +{off:#x}: {name}", sec.name().unwrap_or("?")));
                    }
                }
            }
            assert!(calls.is_empty(), "{}: {calls:#?}", f.file_name());
        }
    }

    /// A program's body is inlined into its entry (`#[inline(always)]` beside each
    /// program macro): LLVM otherwise chose by code size, and a body out of line is a
    /// BPF-to-BPF call on every run (5b61468's record and serve switch programs had one;
    /// the default switch program, once it did, ran about 10 ns a switch slower). Out of
    /// line (in `.text`) are only the compiler's builtins and what is `#[inline(never)]`
    /// on purpose, off the hot path.
    #[test]
    fn no_program_body_is_a_call_away() {
        let deliberate = ["settle_leaver", "settle_reaped", "set_wake_aside"];
        let builtins = ["memcpy", "memmove", "memset", "memcmp", "bcmp"];
        for f in ALL {
            let elf = elf(f);
            let text = elf.section_by_name(".text").map(|s| s.index());
            let outlined: Vec<&str> = elf
                .symbols()
                .filter(|s| s.kind() == object::SymbolKind::Text && s.section_index() == text)
                .filter_map(|s| s.name().ok())
                .filter(|n| !builtins.contains(n) && !deliberate.iter().any(|d| n.ends_with(d)))
                .collect();
            assert!(outlined.is_empty(), "{}: {outlined:#?}", f.file_name());
        }
    }

    /// `new_loader` leaves aya without the kernel's BTF, which aya needs only for CO-RE
    /// relocations: no object may carry one (`.BTF.ext`'s `core_relo_len`, at byte 28
    /// of its header when the header is at least 32 bytes long).
    #[test]
    fn no_object_has_core_relocations() {
        for f in ALL {
            let elf = elf(f);
            let ext = elf
                .section_by_name(".BTF.ext")
                .and_then(|s| s.data().ok())
                .unwrap_or_else(|| panic!("{}: no .BTF.ext", f.file_name()));
            let word = |at: usize| u32::from_ne_bytes(ext[at..at + 4].try_into().unwrap());
            assert_eq!(
                u16::from_ne_bytes([ext[0], ext[1]]),
                0xeb9f,
                "{}",
                f.file_name()
            );
            let core_relo_len = if word(4) >= 32 { word(28) } else { 0 };
            assert_eq!(core_relo_len, 0, "{}: CO-RE relocations", f.file_name());
        }
    }

    /// `tracer run` once made record's event ring and counters and serve's cgroup ring;
    /// each command's object now holds its own maps and no other command's.
    #[test]
    fn each_command_creates_only_its_own_maps() {
        let record = ["EVENTS", "REC_CPU", "REC_STATS"];
        let serve = ["CGROUP_EVENTS", "CGROUP_EVENTS_LOST"];
        let shared = ["CPU_STATE", "THREADS", "TASK_STATS", "TRACKED", "WINDOW"];
        let has = |f: Family, names: &[&str], want: bool| {
            let m = maps(f);
            for n in names {
                assert_eq!(
                    m.iter().any(|x| x == n),
                    want,
                    "{}: {n} in {m:?}",
                    f.file_name()
                );
            }
        };
        for f in [Family::Sched, Family::Record, Family::Serve] {
            has(f, &shared, true);
        }
        has(Family::Sched, &record, false);
        has(Family::Sched, &serve, false);
        has(Family::Record, &record, true);
        has(Family::Record, &serve, false);
        has(Family::Serve, &serve, true);
        has(Family::Serve, &record, false);
        for f in [Family::Offcpu, Family::Floor] {
            has(f, &record, false);
            has(f, &serve, false);
            has(f, &["THREADS", "CPU_STATE"], false);
        }
    }
}
