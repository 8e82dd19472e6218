//! The few procfs, sysfs and cgroupfs readers the tracer needs.
//!
//! Hand parsing keeps `--root` trivial: every path goes through [`Root`], so tests and
//! trees copied off other machines work the same as the live system.
use std::io::ErrorKind;
use std::os::unix::{ffi::OsStrExt as _, fs::MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::TracerError;
use crate::sys::root::Root;

/// statfs magic of a cgroup v2 mount.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
/// Far above any kernel's NR_CPUS (8192), so a corrupt list cannot allocate gigabytes.
const MAX_CPU: u32 = 1 << 16;

/// Per-thread scheduler statistics, from `/proc/<pid>/task/<tid>/schedstat`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Schedstat {
    /// Time spent on a CPU, ns.
    pub run_ns: u64,
    /// Time spent runnable waiting for a CPU (run_delay), ns.
    pub wait_ns: u64,
    /// Number of timeslices run on a CPU.
    pub slices: u64,
}

fn read(path: &Path) -> Result<String, TracerError> {
    std::fs::read_to_string(path).map_err(|source| TracerError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a thread's schedstat. A missing thread is `NoSuchThread`; a thread without the
/// file (kernel without CONFIG_SCHED_INFO) is a read error naming the path.
pub fn schedstat(root: &Root, pid: u32, tid: u32) -> Result<Schedstat, TracerError> {
    let task = root.path(format!("/proc/{pid}/task/{tid}"));
    let path = task.join("schedstat");
    match std::fs::read_to_string(&path) {
        Ok(text) => parse_schedstat(&text, &path),
        Err(e) if e.kind() == ErrorKind::NotFound && !task.is_dir() => {
            Err(TracerError::NoSuchThread(tid))
        }
        Err(source) => Err(TracerError::Read { path, source }),
    }
}

/// Parses `"<run ns> <run_delay ns> <timeslices>\n"`.
pub fn parse_schedstat(text: &str, path: &Path) -> Result<Schedstat, TracerError> {
    let bad = |why: String| TracerError::Malformed {
        path: path.to_path_buf(),
        why,
    };
    let mut it = text.split_ascii_whitespace().map(|w| {
        w.parse::<u64>()
            .map_err(|_| bad(format!("{w:?} is not a number")))
    });
    let mut next = |what: &str| {
        it.next()
            .unwrap_or_else(|| Err(bad(format!("no {what} field in {:?}", text.trim()))))
    };
    Ok(Schedstat {
        run_ns: next("run time")?,
        wait_ns: next("run delay")?,
        slices: next("timeslice")?,
    })
}

/// Numeric entries of a directory, sorted.
fn numeric_entries(dir: &Path) -> std::io::Result<Vec<u32>> {
    let mut ids: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort_unstable();
    Ok(ids)
}

/// Every thread of the machine as (TGID, TID).
pub fn all_threads(root: &Root) -> Vec<(u32, u32)> {
    let Ok(pids) = numeric_entries(&root.path("/proc")) else {
        return Vec::new();
    };
    pids.into_iter()
        .flat_map(|pid| {
            numeric_entries(&root.path(format!("/proc/{pid}/task")))
                .unwrap_or_default()
                .into_iter()
                .map(move |tid| (pid, tid))
        })
        .collect()
}

/// The TIDs of process `pid`, sorted.
pub fn threads_of(root: &Root, pid: u32) -> Result<Vec<u32>, TracerError> {
    let dir = root.path(format!("/proc/{pid}/task"));
    match numeric_entries(&dir) {
        Ok(ids) if !ids.is_empty() => Ok(ids),
        // A zombie's task dir can be empty: it has no threads left to trace.
        Ok(_) => Err(TracerError::NoSuchProcess(pid)),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(TracerError::NoSuchProcess(pid)),
        Err(source) => Err(TracerError::Read { path: dir, source }),
    }
}

/// The value of the `Key:` line of a `status`-style file, as a number. Bytes, not text:
/// the `Name:` line holds whatever bytes the thread named itself with.
fn status_field(text: &[u8], key: &[u8]) -> Option<u32> {
    text.split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The process (thread group) a thread belongs to, from `/proc/<tid>/status`.
pub fn tgid_of(root: &Root, tid: u32) -> Result<u32, TracerError> {
    // /proc/<tid> works for any thread, though only group leaders are listed.
    let path = root.path(format!("/proc/{tid}/status"));
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(TracerError::NoSuchThread(tid)),
        Err(source) => return Err(TracerError::Read { path, source }),
    };
    status_field(&text, b"Tgid:").ok_or_else(|| TracerError::Malformed {
        path,
        why: "no numeric Tgid: line".into(),
    })
}

/// A thread's command name as the kernel keeps it (any bytes but NUL), or None when it
/// is gone.
pub fn comm_bytes(root: &Root, pid: u32, tid: u32) -> Option<Vec<u8>> {
    let mut text = std::fs::read(root.path(format!("/proc/{pid}/task/{tid}/comm"))).ok()?;
    if text.last() == Some(&b'\n') {
        text.pop();
    }
    Some(text)
}

/// [`comm_bytes`] as text ([`text_of`]: bytes that are not UTF-8 as `\xNN`).
pub fn comm(root: &Root, pid: u32, tid: u32) -> Option<String> {
    comm_bytes(root, pid, tid).map(|b| text_of(&b))
}

/// Bytes as text, keeping every valid character (controls included: outputs escape
/// them, JSON in its own way) and writing each byte that is not UTF-8 as `\xNN`, so a
/// name that is not UTF-8 keeps its bytes visible instead of turning into U+FFFD. The
/// one decoding of kernel names (`model::words::from_bytes` is this).
pub fn text_of(raw: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(raw.len());
    for chunk in raw.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// The fields after the comm of a `stat` file: the comm in parentheses may hold any
/// byte (spaces, `)`, bytes that are not UTF-8), so they start after the last `)`.
fn stat_fields(text: &[u8]) -> Option<Vec<&str>> {
    let rest = &text[text.iter().rposition(|&b| b == b')')? + 1..];
    let rest = std::str::from_utf8(rest).ok()?;
    Some(rest.split_ascii_whitespace().collect())
}

/// Whether thread `tid` may be on CPU `cpu` now: `/proc/TID/stat` says it is runnable
/// (`R`) and last ran there (field 39, `processor`). A gone thread, one asleep, or one
/// on another CPU is not.
pub fn may_be_running_on(root: &Root, tid: u32, cpu: u32) -> bool {
    let Ok(text) = std::fs::read(root.path(format!("/proc/{tid}/stat"))) else {
        return false;
    };
    // The first field after the comm is field 3 (state).
    let Some(f) = stat_fields(&text) else {
        return false;
    };
    f.first() == Some(&"R") && f.get(39 - 3).and_then(|c| c.parse::<u32>().ok()) == Some(cpu)
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus(root: &Root) -> Result<Vec<u32>, TracerError> {
    let path = root.path("/sys/devices/system/cpu/online");
    let text = read(&path)?;
    parse_cpu_list(&text).map_err(|why| TracerError::Malformed { path, why })
}

/// Parses a kernel CPU list such as `0-3,5,7-8` into sorted, distinct CPU numbers.
/// An empty list (e.g. the `offline` file of a machine with all CPUs up) is valid.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let num = |w: &str| -> Result<u32, String> {
        let n = w
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("bad CPU number {w:?} in {s:?}"))?;
        if n >= MAX_CPU {
            return Err(format!("CPU number {n} out of range in {s:?}"));
        }
        Ok(n)
    };
    let mut cpus = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("reversed range {part:?} in {s:?}"));
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(num(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The kernel release (`uname -r`) of the system under `root`.
pub fn kernel_release(root: &Root) -> Option<String> {
    let text = std::fs::read_to_string(root.path("/proc/sys/kernel/osrelease")).ok()?;
    Some(text.trim().to_string()).filter(|s| !s.is_empty())
}

fn cgroup_err(path: &Path, why: impl Into<String>) -> TracerError {
    TracerError::Cgroup {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// The id of a cgroup v2 directory: its inode number, which is what
/// `bpf_get_current_cgroup_id()` returns in the kernel.
pub fn cgroup_id(path: &Path) -> Result<u64, TracerError> {
    let meta = std::fs::metadata(path).map_err(|e| cgroup_err(path, e.to_string()))?;
    if !meta.is_dir() {
        return Err(cgroup_err(path, "not a directory"));
    }
    let st = rustix::fs::statfs(path)
        .map_err(|e| cgroup_err(path, std::io::Error::from(e).to_string()))?;
    // f_type's integer type differs between libc targets.
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as i64;
    if magic != CGROUP2_SUPER_MAGIC {
        return Err(cgroup_err(
            path,
            format!(
                "not on a cgroup v2 mount (filesystem magic {magic:#x}); \
                 use a directory under /sys/fs/cgroup on a cgroup2 system"
            ),
        ));
    }
    Ok(meta.ino())
}

/// The first cgroup2 mount point (hybrid setups put it at /sys/fs/cgroup/unified).
pub fn cgroup2_mount(root: &Root) -> Option<PathBuf> {
    let mounts = std::fs::read(root.path("/proc/mounts")).ok()?;
    mounts.split(|&b| b == b'\n').find_map(|l| {
        let mut f = l.split(|&b| b == b' ').filter(|w| !w.is_empty()).skip(1);
        match (f.next(), f.next()) {
            (Some(dir), Some(b"cgroup2")) => Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir))),
            _ => None,
        }
    })
}

/// Whether a thread (or process) with this ID exists now.
pub fn thread_exists(root: &Root, tid: u32) -> bool {
    root.path(format!("/proc/{tid}")).exists()
}

/// A process's cgroup v2 path (the `0::` line of /proc/PID/cgroup), e.g.
/// `/system.slice/ssh.service`: bytes, since whoever may create a cgroup names it with
/// any bytes (a name that is not UTF-8 must not hide its processes' work).
pub fn cgroup_path(root: &Root, pid: u32) -> Option<Vec<u8>> {
    let text = std::fs::read(root.path(format!("/proc/{pid}/cgroup"))).ok()?;
    text.split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"0::"))
        .map(|p| p.to_vec())
}

/// The TIDs in a cgroup v2 directory (`cgroup.threads`), sorted.
pub fn cgroup_threads(path: &Path) -> Result<Vec<u32>, TracerError> {
    let file = path.join("cgroup.threads");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| cgroup_err(path, format!("cannot read {}: {e}", file.display())))?;
    let mut tids = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.trim()
                .parse::<u32>()
                .map_err(|_| cgroup_err(path, format!("bad TID {l:?} in cgroup.threads")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    tids.sort_unstable();
    Ok(tids)
}

/// The file behind a sysctl name: `kernel.pid_max` -> `/proc/sys/kernel/pid_max`
/// (a name with slashes is taken as a path under /proc/sys, as sysctl(8) does).
fn sysctl_path(root: &Root, name: &str) -> Result<PathBuf, TracerError> {
    let rel = if name.contains('/') {
        name.to_string()
    } else {
        name.replace('.', "/")
    };
    let ok = !rel.is_empty()
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if !ok {
        return Err(TracerError::Malformed {
            path: PathBuf::from("/proc/sys"),
            why: format!("bad sysctl name {name:?}"),
        });
    }
    Ok(root.path(format!("/proc/sys/{rel}")))
}

/// Reads a sysctl, without its trailing newline.
pub fn read_sysctl(root: &Root, name: &str) -> Result<String, TracerError> {
    let text = read(&sysctl_path(root, name)?)?;
    Ok(text.trim_end_matches('\n').to_string())
}

/// Writes a sysctl (needs privileges on the live system).
pub fn write_sysctl(root: &Root, name: &str, value: &str) -> Result<(), TracerError> {
    let path = sysctl_path(root, name)?;
    // No create: a sysctl that does not exist must be an error, not a new file.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(|source| TracerError::Write {
            path: path.clone(),
            source,
        })?;
    std::io::Write::write_all(&mut f, value.as_bytes())
        .map_err(|source| TracerError::Write { path, source })
}

/// A -p process or -t thread the run watches, to end when it exits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// `/proc/<tgid>` for a process, `/proc/<tgid>/task/<tid>` for a thread.
    dir: String,
    /// Process: any of its threads alive keeps it alive (a zombie leader's threads run on).
    process: bool,
    /// starttime (stat field 22): a recycled PID is a different task.
    start: u64,
}

/// State letter and starttime from a `stat` file's bytes.
fn stat_state_start(text: &[u8]) -> Option<(char, u64)> {
    let f = stat_fields(text)?;
    // Field 3 is the state; starttime is field 22.
    let state = f.first()?.chars().next()?;
    let start = f.get(22 - 3)?.parse().ok()?;
    Some((state, start))
}

/// A task counts as alive until it is a zombie (exited, not yet reaped) or dead.
/// Whether thread `tid` of `pid` is alive (not a zombie: a leader that exited while
/// its other threads run stays listed, and perf cannot count it).
pub fn thread_alive(root: &Root, pid: u32, tid: u32) -> bool {
    task_alive(&root.path(format!("/proc/{pid}/task/{tid}/stat")), None).is_some()
}

fn task_alive(stat_path: &Path, start: Option<u64>) -> Option<u64> {
    let text = std::fs::read(stat_path).ok()?;
    let (state, st) = stat_state_start(&text)?;
    (!matches!(state, 'Z' | 'X' | 'x') && start.is_none_or(|s| s == st)).then_some(st)
}

fn watch(root: &Root, dir: String, process: bool) -> Option<Watched> {
    let text = std::fs::read(root.path(format!("{dir}/stat"))).ok()?;
    let (_, start) = stat_state_start(&text)?;
    Some(Watched {
        dir,
        process,
        start,
    })
}

/// Watches process `pid` (None when it is already gone).
pub fn watch_process(root: &Root, pid: u32) -> Option<Watched> {
    watch(root, format!("/proc/{pid}"), true)
}

/// Watches thread `tid` (None when it is already gone).
pub fn watch_thread(root: &Root, tid: u32) -> Option<Watched> {
    let tgid = tgid_of(root, tid).ok()?;
    watch(root, format!("/proc/{tgid}/task/{tid}"), false)
}

/// Whether a watched process (any of its threads) or thread still runs.
pub fn still_alive(root: &Root, w: &Watched) -> bool {
    let dir = root.path(&w.dir);
    // The same task, not a recycled PID: the leader's (or thread's) starttime matches.
    let Ok(text) = std::fs::read(dir.join("stat")) else {
        return false;
    };
    match stat_state_start(&text) {
        Some((_, st)) if st == w.start => {}
        _ => return false,
    }
    if !w.process {
        return task_alive(&dir.join("stat"), Some(w.start)).is_some();
    }
    numeric_entries(&dir.join("task"))
        .unwrap_or_default()
        .iter()
        .any(|tid| task_alive(&dir.join(format!("task/{tid}/stat")), None).is_some())
}

#[cfg(test)]
mod tests {
    #[test]
    fn stat_state_and_starttime() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 98765 1000 10";
        assert_eq!(super::stat_state_start(line.as_bytes()), Some(('S', 98765)));
        assert_eq!(super::stat_state_start(b"1 (x) Z"), None);
        // A name that is not UTF-8 (issue 24 item 11: the run took the process for gone).
        let line = b"42 (w\xff\xfe)) R 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 777 1000 10";
        assert_eq!(super::stat_state_start(line), Some(('R', 777)));
    }

    #[test]
    fn watched_targets_end_with_their_process() {
        let root = crate::sys::root::Root::default();
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let w = super::watch_process(&root, child.id()).unwrap();
        assert!(super::still_alive(&root, &w));
        // Exited but not reaped (a zombie) already counts as gone.
        std::thread::sleep(std::time::Duration::from_millis(600));
        assert!(!super::still_alive(&root, &w));
        child.wait().unwrap();
        assert!(!super::still_alive(&root, &w));
        let me = super::watch_thread(
            &root,
            rustix::thread::gettid().as_raw_nonzero().get() as u32,
        )
        .unwrap();
        assert!(super::still_alive(&root, &me));
    }

    use super::*;

    /// A fresh fixture directory under the system temp dir.
    fn fixture(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tracer-procfs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir fixture");
        dir
    }

    fn put(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(p, text).expect("write fixture");
    }

    #[test]
    fn schedstat_parses() {
        let p = Path::new("/proc/1/task/1/schedstat");
        assert_eq!(
            parse_schedstat("123456 7890 42\n", p).ok(),
            Some(Schedstat {
                run_ns: 123456,
                wait_ns: 7890,
                slices: 42
            })
        );
        for bad in ["", "1 2", "1 x 3", "-1 2 3", "99999999999999999999999 1 1"] {
            let e = parse_schedstat(bad, p).unwrap_err().to_string();
            assert!(e.contains("/proc/1/task/1/schedstat"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,5,7-8\n"), Ok(vec![0, 1, 2, 3, 5, 7, 8]));
        assert_eq!(parse_cpu_list("0"), Ok(vec![0]));
        assert_eq!(parse_cpu_list("\n"), Ok(vec![]));
        assert_eq!(parse_cpu_list("3,1-2,2"), Ok(vec![1, 2, 3]));
        for bad in ["a", "3-1", "0-", "-1", "0-4294967295", "1;2", "0--2"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn fixture_tree() {
        let d = fixture("tree");
        let root = Root::new(&d);
        put(&d, "proc/100/task/100/schedstat", "10 20 3\n");
        put(&d, "proc/100/task/100/comm", "main\n");
        put(&d, "proc/100/task/101/schedstat", "1 2 3\n");
        put(&d, "proc/100/task/101/comm", "worker 1\n");
        std::fs::create_dir_all(d.join("proc/100/task/102")).expect("mkdir");
        put(&d, "proc/100/task/not-a-tid", "");
        put(
            &d,
            "proc/101/status",
            "Name:\tworker\nTgid:\t100\nPid:\t101\n",
        );
        put(&d, "proc/102/status", "Name:\tbroken\n");
        put(&d, "sys/devices/system/cpu/online", "0-1,4\n");
        put(&d, "proc/sys/kernel/osrelease", "6.18.0-test\n");
        put(&d, "proc/sys/kernel/pid_max", "4194304\n");

        assert_eq!(threads_of(&root, 100).ok(), Some(vec![100, 101, 102]));
        assert!(matches!(
            threads_of(&root, 7),
            Err(TracerError::NoSuchProcess(7))
        ));
        assert_eq!(schedstat(&root, 100, 101).ok().map(|s| s.slices), Some(3));
        assert!(matches!(
            schedstat(&root, 100, 999),
            Err(TracerError::NoSuchThread(999))
        ));
        let e = schedstat(&root, 100, 102).unwrap_err().to_string();
        assert!(e.contains("task/102/schedstat"), "{e}");
        assert_eq!(comm(&root, 100, 101).as_deref(), Some("worker 1"));
        assert_eq!(comm(&root, 100, 999), None);
        assert_eq!(tgid_of(&root, 101).ok(), Some(100));
        assert!(matches!(
            tgid_of(&root, 5),
            Err(TracerError::NoSuchThread(5))
        ));
        let e = tgid_of(&root, 102).unwrap_err().to_string();
        assert!(e.contains("102/status"), "{e}");
        assert_eq!(online_cpus(&root).ok(), Some(vec![0, 1, 4]));
        assert_eq!(kernel_release(&root).as_deref(), Some("6.18.0-test"));
        assert_eq!(
            read_sysctl(&root, "kernel.pid_max").ok().as_deref(),
            Some("4194304")
        );
        assert_eq!(
            read_sysctl(&root, "kernel/pid_max").ok().as_deref(),
            Some("4194304")
        );
        write_sysctl(&root, "kernel.pid_max", "32768").expect("write");
        assert_eq!(
            read_sysctl(&root, "kernel.pid_max").ok().as_deref(),
            Some("32768")
        );
        let e = read_sysctl(&root, "kernel.nope").unwrap_err().to_string();
        assert!(e.contains("proc/sys/kernel/nope"), "{e}");
        let e = write_sysctl(&root, "kernel.nope", "1")
            .unwrap_err()
            .to_string();
        assert!(e.contains("proc/sys/kernel/nope"), "{e}");
        assert!(!d.join("proc/sys/kernel/nope").exists());
        for bad in ["", "kernel..x", "../etc/passwd", "a//b", "."] {
            assert!(read_sysctl(&root, bad).is_err(), "{bad:?}");
        }

        let empty = Root::new(d.join("nothing"));
        let e = online_cpus(&empty).unwrap_err().to_string();
        assert!(e.contains("cpu/online"), "{e}");
        assert_eq!(kernel_release(&empty), None);
        let _ = std::fs::remove_dir_all(d);
    }

    /// Issue 24 item 11: a thread that names itself with bytes that are not UTF-8, in a
    /// cgroup named so, is still a thread with a TGID, alive, in its cgroup.
    #[test]
    fn names_that_are_not_utf8_are_read_as_bytes() {
        let d = fixture("bytes");
        let root = Root::new(&d);
        let raw = |rel: &str, bytes: &[u8]| {
            let p = d.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        };
        raw(
            "proc/50/status",
            b"Name:\tw\xff\xfe\nUmask:\t0022\nTgid:\t50\nPid:\t50\n",
        );
        let stat = b"50 (w\xff\xfe) S 1 50 50 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 4242 1000 10";
        raw("proc/50/stat", stat);
        raw("proc/50/task/50/stat", stat);
        raw("proc/50/task/50/comm", b"w\xff\xfe\n");
        raw("proc/50/cgroup", b"0::/hide\xff/inner\n");
        raw(
            "proc/mounts",
            b"cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n",
        );
        assert_eq!(tgid_of(&root, 50).ok(), Some(50));
        let w = watch_process(&root, 50).expect("watched");
        assert!(still_alive(&root, &w));
        assert!(watch_thread(&root, 50).is_some_and(|w| still_alive(&root, &w)));
        assert_eq!(
            comm_bytes(&root, 50, 50).as_deref(),
            Some(&b"w\xff\xfe"[..])
        );
        assert_eq!(
            cgroup_path(&root, 50).as_deref(),
            Some(&b"/hide\xff/inner"[..])
        );
        assert_eq!(
            cgroup2_mount(&root),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn cgroup_on_a_plain_directory_is_refused() {
        let d = fixture("cg");
        put(&d, "cgroup.threads", "12\n\n10\n");
        assert_eq!(cgroup_threads(&d).ok(), Some(vec![10, 12]));
        put(&d, "cgroup.threads", "12\nx\n");
        assert!(matches!(
            cgroup_threads(&d),
            Err(TracerError::Cgroup { .. })
        ));
        let e = cgroup_threads(&d.join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
        // A temp dir is not on cgroup2 (unless /tmp is very unusual).
        if let Err(e) = cgroup_id(&d) {
            assert!(e.to_string().contains("cgroup v2"), "{e}");
        }
        assert!(cgroup_id(&d.join("missing")).is_err());
        assert!(cgroup_id(&d.join("cgroup.threads")).is_err());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    #[ignore = "needs root and a cgroup2 mount; cargo xtask test runs it as root"]
    fn live_cgroup_of_this_process() {
        assert!(
            rustix::process::geteuid().is_root(),
            "needs root (creates a cgroup)"
        );
        let mount = cgroup2_mount(&Root::default())
            .expect("a cgroup2 mount (`tracer run --cgroup` needs one)");
        let text = std::fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
        let rel = text
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup2 line");
        let dir = mount.join(rel.trim_start_matches('/'));
        let id = cgroup_id(&dir).expect("cgroup id of our own cgroup");
        assert!(id > 0);
        let tids = cgroup_threads(&dir).expect("cgroup.threads");
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        assert!(tids.contains(&me), "{me} not in {tids:?}");

        // A new child cgroup has its own id and no threads.
        let child = mount.join(format!("tracer-procfs-test-{}", std::process::id()));
        std::fs::create_dir(&child).unwrap_or_else(|e| panic!("creating {}: {e}", child.display()));
        let cid = cgroup_id(&child);
        let threads = cgroup_threads(&child);
        let _ = std::fs::remove_dir(&child);
        let cid = cid.expect("child cgroup id");
        assert!(cid > 0 && cid != id);
        assert_eq!(threads.ok(), Some(vec![]));
    }

    #[test]
    fn live_this_process() {
        let root = Root::default();
        let pid = std::process::id();
        let handle = std::thread::spawn(|| {
            let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
            std::thread::sleep(std::time::Duration::from_millis(300));
            tid
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        let tids = threads_of(&root, pid).expect("own threads");
        assert!(tids.contains(&pid));
        assert!(tids.len() >= 2, "{tids:?}");
        for &t in &tids {
            // Other tests' threads may end between the listing and this read.
            match tgid_of(&root, t) {
                Ok(g) => assert_eq!(g, pid),
                Err(TracerError::NoSuchThread(gone)) => assert_eq!(gone, t),
                Err(e) => panic!("TID {t}: {e}"),
            }
        }
        assert!(comm(&root, pid, pid).is_some());

        // The harness runs tests on their own threads: measure this one.
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        let before = schedstat(&root, pid, me).expect("schedstat");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let after = schedstat(&root, pid, me).expect("schedstat");
        // Runtime is folded in at ticks and switches, so allow for a tick or two.
        assert!(
            after.run_ns >= before.run_ns + 5_000_000,
            "{before:?} -> {after:?}"
        );
        assert!(after.slices >= before.slices);
        assert!(after.wait_ns >= before.wait_ns);
        let _ = handle.join();

        let cpus = online_cpus(&root).expect("online cpus");
        assert!(!cpus.is_empty());
        assert!(kernel_release(&root).is_some_and(|r| !r.is_empty()));
        let pid_max: u32 = read_sysctl(&root, "kernel.pid_max")
            .expect("pid_max")
            .parse()
            .expect("number");
        assert!(pid_max >= 301);
        assert!(matches!(
            threads_of(&root, u32::MAX),
            Err(TracerError::NoSuchProcess(_))
        ));
    }
}
