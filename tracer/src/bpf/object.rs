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
pub fn new_loader<'a>() -> aya::EbpfLoader<'a> {
    let mut l = aya::EbpfLoader::new();
    l.allow_unsupported_maps();
    l
}

#[cfg(test)]
mod tests {
    use super::Family;
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    /// The maps an embedded object declares: the symbols of its `maps` and `.maps`
    /// (BTF-defined, task storage) sections, which aya creates at load.
    fn maps(f: Family) -> Vec<String> {
        let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(f.object())
            .unwrap_or_else(|e| panic!("{}: {e}", f.file_name()));
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
        for f in [
            Family::Sched,
            Family::Record,
            Family::Serve,
            Family::Offcpu,
            Family::Floor,
        ] {
            let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(f.object())
                .unwrap_or_else(|e| panic!("{}: {e}", f.file_name()));
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
