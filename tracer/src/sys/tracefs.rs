//! tracefs: where it is mounted, and the record layouts of trace events.
//!
//! The classic-tracepoint mode reads event fields at the offsets the kernel publishes in
//! `events/<system>/<event>/format`, because those layouts change between kernels (e.g.
//! PREEMPT_RT and lazy-preemption kernels add common fields that shift every offset).
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::error::TracerError;
use crate::sys::root::Root;

/// Where tracefs is mounted on current kernels (and where perf mounts it).
const TRACEFS_DEFAULT: &str = "/sys/kernel/tracing";

/// The tracefs mount point: from /proc/mounts (tracefs type; also the debugfs `tracing`
/// subdir), else, when `root.is_live()`, mount tracefs at /sys/kernel/tracing (as perf
/// does) and return it. Errors are [`TracerError::NoTracefs`] with what to do.
pub fn tracefs_dir(root: &Root) -> Result<PathBuf, TracerError> {
    let mounts_path = root.path("/proc/mounts");
    let mounts = std::fs::read_to_string(&mounts_path);
    let mut unusable = None;
    if let Ok(text) = &mounts {
        for dir in candidates(text) {
            let dir = root.path(dir);
            match std::fs::metadata(dir.join("events")) {
                Ok(m) if m.is_dir() => return Ok(dir),
                Ok(_) => unusable = Some(format!("{} has no events directory", dir.display())),
                // Mounted but 0700 root: mounting again would not help.
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                    return Err(TracerError::NoTracefs(format!(
                        "{} is readable only by root; run the tracer as root",
                        dir.display()
                    )))
                }
                Err(e) => unusable = Some(format!("{}: {e}", dir.display())),
            }
        }
    }
    if root.is_live() {
        return mount_default(unusable);
    }
    Err(TracerError::NoTracefs(match (mounts, unusable) {
        (Err(e), _) => format!("cannot read {}: {e}", mounts_path.display()),
        (Ok(_), Some(why)) => format!("tracefs is mounted but unusable ({why})"),
        (Ok(_), None) => format!(
            "{} lists no tracefs or debugfs mount",
            mounts_path.display()
        ),
    }))
}

/// Candidate tracefs directories from a /proc/mounts text, tracefs mounts first.
fn candidates(mounts: &str) -> Vec<PathBuf> {
    let mut tracefs = Vec::new();
    let mut debugfs = Vec::new();
    for line in mounts.lines() {
        let mut f = line.split_ascii_whitespace();
        let (Some(_dev), Some(dir), Some(fstype)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        match fstype {
            "tracefs" => tracefs.push(PathBuf::from(unescape_mount(dir))),
            "debugfs" => debugfs.push(PathBuf::from(unescape_mount(dir)).join("tracing")),
            _ => {}
        }
    }
    tracefs.extend(debugfs);
    tracefs
}

/// Undoes the octal escapes (`\040` for a space, ...) the kernel writes in /proc/mounts.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| {
            b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)) && d[0] <= b'3'
        });
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mounts tracefs at its default place on the live system, as perf does.
fn mount_default(unusable: Option<String>) -> Result<PathBuf, TracerError> {
    let dir = PathBuf::from(TRACEFS_DEFAULT);
    let usable = |d: &Path| d.join("events").is_dir();
    let manual = format!("mount it with `sudo mount -t tracefs nodev {TRACEFS_DEFAULT}`");
    let found = unusable.map(|w| format!("found {w}; ")).unwrap_or_default();
    if !dir.is_dir() {
        return Err(TracerError::NoTracefs(format!(
            "{found}{TRACEFS_DEFAULT} does not exist: this kernel was built without tracing \
             (CONFIG_FTRACE); use --probe tp-btf or raw-tp"
        )));
    }
    let res = rustix::mount::mount(
        "nodev",
        &dir,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    );
    let err = match res {
        Err(e) if e != Errno::BUSY || !usable(&dir) => e,
        // Mounted now, or already by someone else meanwhile.
        _ if usable(&dir) => return Ok(dir),
        _ => {
            return Err(TracerError::NoTracefs(format!(
                "{found}mounted tracefs at {TRACEFS_DEFAULT} but it has no events directory \
                 (kernel built without CONFIG_FTRACE events?)"
            )))
        }
    };
    let why = match err {
        Errno::PERM | Errno::ACCESS => format!(
            "it is not mounted and mounting it needs root (CAP_SYS_ADMIN); run as root or {manual}"
        ),
        Errno::NODEV => "this kernel has no tracefs (built without CONFIG_FTRACE / \
             CONFIG_TRACING); use --probe tp-btf or raw-tp"
            .to_string(),
        _ => format!(
            "mounting it at {TRACEFS_DEFAULT} failed ({}); {manual}",
            std::io::Error::from(err)
        ),
    };
    Err(TracerError::NoTracefs(format!("{found}{why}")))
}

/// One field of a trace event record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// Byte offset in the record (the common fields included).
    pub offset: u32,
    /// Size in bytes; 4 for a `__data_loc` (offset and length of the data).
    pub size: u32,
    pub signed: bool,
}

/// The layout of one trace event, from its `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    /// The event id (what `perf_event_attr.config` takes for a tracepoint).
    pub id: u32,
    pub fields: Vec<Field>,
}

impl EventFormat {
    /// Parses the text of a `format` file; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, TracerError> {
        let bad = |why: String| TracerError::Malformed {
            path: path.to_path_buf(),
            why,
        };
        let mut name = None;
        let mut id = None;
        let mut fields: Vec<Field> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if let Some(v) = trimmed.strip_prefix("name:") {
                name.get_or_insert_with(|| v.trim().to_string());
            } else if let Some(v) = trimmed.strip_prefix("ID:") {
                let v = v.trim();
                let parsed = v
                    .parse::<u32>()
                    .map_err(|_| bad(format!("line {}: bad ID {v:?}", n + 1)))?;
                id.get_or_insert(parsed);
            } else if trimmed.starts_with("field:") {
                let f =
                    parse_field(trimmed).map_err(|why| bad(format!("line {}: {why}", n + 1)))?;
                if !fields.iter().any(|g| g.name == f.name) {
                    fields.push(f);
                }
            } else if trimmed.starts_with("print fmt:") {
                break;
            }
        }
        let name = name
            .filter(|s| !s.is_empty())
            .ok_or_else(|| bad("no `name:` line (not an event format file)".into()))?;
        let id = id.ok_or_else(|| bad(format!("event {name} has no `ID:` line")))?;
        if fields.is_empty() {
            return Err(bad(format!("event {name} lists no fields")));
        }
        Ok(EventFormat { name, id, fields })
    }

    /// The field called `name`; the error names the event and the field.
    pub fn field(&self, name: &str) -> Result<&Field, TracerError> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| TracerError::NoSuchField {
                event: self.name.clone(),
                field: name.to_string(),
            })
    }
}

/// Parses `field:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;`.
fn parse_field(line: &str) -> Result<Field, String> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';') {
        let Some((key, value)) = part.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let number = || {
            value
                .parse::<u32>()
                .map_err(|_| format!("bad {} {value:?}", key.trim()))
        };
        match key.trim() {
            "field" | "field special" => decl = Some(value),
            "offset" => offset = Some(number()?),
            "size" => size = Some(number()?),
            "signed" => signed = number()? != 0,
            _ => {}
        }
    }
    let decl = decl.ok_or("no field declaration")?;
    let name = field_name(decl).ok_or_else(|| format!("no field name in {decl:?}"))?;
    Ok(Field {
        name: name.to_string(),
        offset: offset.ok_or_else(|| format!("field {name} has no offset"))?,
        size: size.ok_or_else(|| format!("field {name} has no size"))?,
        signed,
    })
}

/// The identifier in a C declaration: `char prev_comm[16]` -> `prev_comm`,
/// `__data_loc char[] name` -> `name`, `void *ptr` -> `ptr`.
fn field_name(decl: &str) -> Option<&str> {
    let mut d = decl.trim();
    while let Some(stripped) = d.strip_suffix(']') {
        d = stripped[..stripped.rfind('[')?].trim_end();
    }
    let last = d.rsplit(|c: char| c.is_whitespace() || c == '*').next()?;
    // A declaration without a type (`field:int;`) names nothing.
    let has_type = !d[..d.len() - last.len()].trim().is_empty();
    let mut chars = last.chars();
    let ok = has_type
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(last)
}

/// Reads and parses `<tracefs>/events/<system>/<event>/format`.
pub fn event_format(tracefs: &Path, system: &str, event: &str) -> Result<EventFormat, TracerError> {
    let plain = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
    if !plain(system) || !plain(event) {
        return Err(TracerError::UnknownEvent(format!("{system}:{event}")));
    }
    let path = tracefs
        .join("events")
        .join(system)
        .join(event)
        .join("format");
    let text = std::fs::read_to_string(&path).map_err(|source| TracerError::Read {
        path: path.clone(),
        source,
    })?;
    EventFormat::parse(&text, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Taken from this project's 6.18 x86_64 development VM.
    const SCHED_SWITCH: &str = "name: sched_switch
ID: 372
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;

print fmt: \"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d\", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), \"|\", { 0x00000001, \"S\" }, { 0x00000002, \"D\" }, { 0x00000004, \"T\" }, { 0x00000008, \"t\" }, { 0x00000010, \"X\" }, { 0x00000020, \"Z\" }, { 0x00000040, \"P\" }, { 0x00000080, \"I\" }) : \"R\", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? \"+\" : \"\", REC->next_comm, REC->next_pid, REC->next_prio
";

    const SCHED_WAKEUP: &str = "name: sched_wakeup
ID: 374
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;
\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;
\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;
\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;

print fmt: \"comm=%s pid=%d prio=%d target_cpu=%03d\", REC->comm, REC->pid, REC->prio, REC->target_cpu
";

    const SCHED_PROCESS_FORK: &str = "name: sched_process_fork
ID: 366
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;
\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;
\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;
\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;

print fmt: \"comm=%s pid=%d child_comm=%s child_pid=%d\", __get_str(parent_comm), REC->parent_pid, __get_str(child_comm), REC->child_pid
";

    /// A PREEMPT_RT / lazy-preemption style kernel: two more common fields move every
    /// sched_switch field.
    const SCHED_SWITCH_LAZY: &str = "name: sched_switch
ID: 318
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;
\tfield:unsigned char common_migrate_disable;\toffset:8;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_lazy_count;\toffset:9;\tsize:1;\tsigned:0;

\tfield:char prev_comm[16];\toffset:12;\tsize:16;\tsigned:0;
\tfield:pid_t prev_pid;\toffset:28;\tsize:4;\tsigned:1;
\tfield:int prev_prio;\toffset:32;\tsize:4;\tsigned:1;
\tfield:long prev_state;\toffset:40;\tsize:8;\tsigned:1;
\tfield:char next_comm[16];\toffset:48;\tsize:16;\tsigned:0;
\tfield:pid_t next_pid;\toffset:64;\tsize:4;\tsigned:1;
\tfield:int next_prio;\toffset:68;\tsize:4;\tsigned:1;

print fmt: \"prev_comm=%s prev_pid=%d\", REC->prev_comm, REC->prev_pid
";

    fn parse(text: &str) -> EventFormat {
        EventFormat::parse(text, Path::new("fixture/format")).expect("parses")
    }

    fn f(name: &str, offset: u32, size: u32, signed: bool) -> Field {
        Field {
            name: name.into(),
            offset,
            size,
            signed,
        }
    }

    #[test]
    fn sched_switch_golden() {
        let e = parse(SCHED_SWITCH);
        assert_eq!(e.name, "sched_switch");
        assert_eq!(e.id, 372);
        assert_eq!(e.fields.len(), 11);
        assert_eq!(
            e.field("common_pid").ok(),
            Some(&f("common_pid", 4, 4, true))
        );
        assert_eq!(
            e.field("prev_comm").ok(),
            Some(&f("prev_comm", 8, 16, false))
        );
        assert_eq!(e.field("prev_pid").ok(), Some(&f("prev_pid", 24, 4, true)));
        assert_eq!(
            e.field("prev_state").ok(),
            Some(&f("prev_state", 32, 8, true))
        );
        assert_eq!(
            e.field("next_comm").ok(),
            Some(&f("next_comm", 40, 16, false))
        );
        assert_eq!(e.field("next_pid").ok(), Some(&f("next_pid", 56, 4, true)));
        assert_eq!(
            e.field("common_type").ok(),
            Some(&f("common_type", 0, 2, false))
        );
    }

    #[test]
    fn lazy_preemption_layout_moves_offsets() {
        let e = parse(SCHED_SWITCH_LAZY);
        assert_eq!(e.id, 318);
        assert_eq!(e.field("prev_pid").map(|f| f.offset).ok(), Some(28));
        assert_eq!(
            e.field("prev_state").map(|f| (f.offset, f.size)).ok(),
            Some((40, 8))
        );
        assert_eq!(e.field("next_comm").map(|f| f.offset).ok(), Some(48));
        assert_eq!(e.field("next_pid").map(|f| f.offset).ok(), Some(64));
        assert!(e.field("common_preempt_lazy_count").is_ok());
    }

    #[test]
    fn sched_wakeup_and_fork_golden() {
        let w = parse(SCHED_WAKEUP);
        assert_eq!((w.name.as_str(), w.id), ("sched_wakeup", 374));
        assert_eq!(w.field("pid").ok(), Some(&f("pid", 24, 4, true)));
        assert_eq!(w.field("target_cpu").map(|f| f.offset).ok(), Some(32));
        let k = parse(SCHED_PROCESS_FORK);
        assert_eq!(
            k.field("parent_comm").ok(),
            Some(&f("parent_comm", 8, 4, false))
        );
        assert_eq!(
            k.field("parent_pid").ok(),
            Some(&f("parent_pid", 12, 4, true))
        );
        assert_eq!(
            k.field("child_pid").ok(),
            Some(&f("child_pid", 20, 4, true))
        );
    }

    #[test]
    fn declarations_yield_their_identifier() {
        assert_eq!(field_name("char prev_comm[16]"), Some("prev_comm"));
        assert_eq!(field_name("char comm[TASK_COMM_LEN]"), Some("comm"));
        assert_eq!(field_name("__data_loc char[] name"), Some("name"));
        assert_eq!(field_name("unsigned int cpu"), Some("cpu"));
        assert_eq!(field_name("void *ptr"), Some("ptr"));
        assert_eq!(field_name("const char * msg"), Some("msg"));
        assert_eq!(field_name("u64 ips[2][4]"), Some("ips"));
        assert_eq!(field_name(""), None);
        assert_eq!(field_name("int [3"), None);
        assert_eq!(field_name("int 3x"), None);
        assert_eq!(field_name("int"), None);
    }

    #[test]
    fn missing_field_names_event_and_field() {
        let e = parse(SCHED_WAKEUP);
        let err = e.field("prev_state").unwrap_err().to_string();
        assert!(
            err.contains("sched_wakeup") && err.contains("prev_state"),
            "{err}"
        );
    }

    #[test]
    fn garbage_is_malformed_with_the_path() {
        let p = Path::new("/x/events/sched/sched_switch/format");
        for text in [
            "",
            "hello world\n",
            "\u{0}\u{1}\u{ff}",
            "name: x\nformat:\n",
            "name: x\nID: 1\nformat:\n",
            "name: x\nID: nope\n",
            "name: x\nID: 1\n\tfield:int a;\toffset:zz;\tsize:4;\tsigned:1;\n",
            "name: x\nID: 1\n\tfield:int a;\tsize:4;\n",
            "name: x\nID: 1\n\tfield:int;\toffset:0;\tsize:4;\n",
        ] {
            match EventFormat::parse(text, p) {
                Err(e @ TracerError::Malformed { .. }) => {
                    assert!(e.to_string().contains("sched_switch/format"), "{e}")
                }
                other => panic!("{text:?} gave {other:?}"),
            }
        }
        // Every prefix of a real file parses or fails cleanly.
        for n in 0..SCHED_SWITCH.len() {
            if SCHED_SWITCH.is_char_boundary(n) {
                let _ = EventFormat::parse(&SCHED_SWITCH[..n], p);
            }
        }
    }

    #[test]
    fn mounts_are_found_and_unescaped() {
        let text = "proc /proc proc rw 0 0\n\
                    nodev /sys/kernel/debug debugfs rw 0 0\n\
                    nodev /mnt/my\\040trace tracefs rw 0 0\n\
                    short line\n";
        assert_eq!(
            candidates(text),
            vec![
                PathBuf::from("/mnt/my trace"),
                PathBuf::from("/sys/kernel/debug/tracing")
            ]
        );
        assert_eq!(unescape_mount("a\\134b\\011c\\9"), "a\\b\tc\\9");
        assert_eq!(unescape_mount("end\\04"), "end\\04");
    }

    /// A fixture tree: `<tmp>/proc/mounts` and a tracefs-like directory.
    fn fixture(name: &str, mounts: &str, tracing: Option<&str>) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("tracer-tracefs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("proc")).expect("mkdir");
        std::fs::write(dir.join("proc/mounts"), mounts).expect("write mounts");
        if let Some(t) = tracing {
            let ev = dir
                .join(t.trim_start_matches('/'))
                .join("events/sched/sched_switch");
            std::fs::create_dir_all(&ev).expect("mkdir events");
            std::fs::write(ev.join("format"), SCHED_SWITCH).expect("write format");
        }
        dir
    }

    #[test]
    fn fixture_tree_tracefs_and_debugfs() {
        let d = fixture(
            "t",
            "nodev /sys/kernel/tracing tracefs rw 0 0\n",
            Some("/sys/kernel/tracing"),
        );
        let root = Root::new(&d);
        let t = tracefs_dir(&root).expect("found");
        assert_eq!(t, d.join("sys/kernel/tracing"));
        let e = event_format(&t, "sched", "sched_switch").expect("format");
        assert_eq!(e.field("next_pid").map(|f| f.offset).ok(), Some(56));
        let err = event_format(&t, "sched", "sched_nope")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sched_nope/format"), "{err}");
        assert!(event_format(&t, "..", "x").is_err());

        let d2 = fixture(
            "d",
            "debugfs /sys/kernel/debug debugfs rw 0 0\n",
            Some("/sys/kernel/debug/tracing"),
        );
        assert_eq!(
            tracefs_dir(&Root::new(&d2)).ok(),
            Some(d2.join("sys/kernel/debug/tracing"))
        );

        let d3 = fixture("n", "proc /proc proc rw 0 0\n", None);
        let err = tracefs_dir(&Root::new(&d3)).unwrap_err();
        assert!(matches!(err, TracerError::NoTracefs(_)), "{err}");

        let d4 = fixture("u", "nodev /sys/kernel/tracing tracefs rw 0 0\n", None);
        let err = tracefs_dir(&Root::new(&d4)).unwrap_err().to_string();
        assert!(err.contains("unusable"), "{err}");
        for d in [d, d2, d3, d4] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    #[ignore = "needs root (tracefs); cargo xtask test runs it as root"]
    fn live_tracefs_sched_events() {
        assert!(rustix::process::geteuid().is_root(), "needs root (tracefs)");
        let dir = tracefs_dir(&Root::default())
            .unwrap_or_else(|e| panic!("as root, tracefs must be usable: {e}"));
        for ev in [
            "sched_switch",
            "sched_wakeup",
            "sched_wakeup_new",
            "sched_process_fork",
        ] {
            let e = event_format(&dir, "sched", ev).expect("live format parses");
            assert_eq!(e.name, ev);
            assert!(e.field("common_pid").is_ok());
        }
        let sw = event_format(&dir, "sched", "sched_switch").expect("sched_switch");
        for name in ["prev_pid", "prev_state", "next_pid", "next_comm"] {
            assert!(sw.field(name).is_ok(), "{name}");
        }
        assert_eq!(sw.field("next_comm").map(|f| f.size).ok(), Some(16));
    }
}
