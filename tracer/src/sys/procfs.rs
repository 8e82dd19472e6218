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

/// Thread `tid`'s own `stat` (None when it is gone). Not `/proc/TID/stat`: that one
/// sums the whole process's threads, so reading it for every thread of a process is
/// quadratic (5,000 idle threads: 2.5 s of CPU per read of all of them, 2026-12-07).
pub fn thread_stat(root: &Root, tid: u32) -> Option<Vec<u8>> {
    std::fs::read(root.path(format!("/proc/{tid}/task/{tid}/stat"))).ok()
}

/// Whether thread `tid` may be on CPU `cpu` now: its [`thread_stat`] says it is
/// runnable (`R`) and last ran there (field 39, `processor`). A gone thread, one
/// asleep, or one on another CPU is not.
pub fn may_be_running_on(root: &Root, tid: u32, cpu: u32) -> bool {
    let Some(text) = thread_stat(root, tid) else {
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

/// What this module reads of a `stat` file: the state letter (field 3), the flags (9)
/// and the starttime (22), from one parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StatHead {
    state: char,
    flags: u64,
    start: u64,
}

impl StatHead {
    fn parse(text: &[u8]) -> Option<StatHead> {
        let f = stat_fields(text)?;
        // The first field after the comm is field 3.
        Some(StatHead {
            state: f.first()?.chars().next()?,
            flags: f.get(9 - 3)?.parse().ok()?,
            start: f.get(22 - 3)?.parse().ok()?,
        })
    }

    fn read(path: &Path) -> Option<StatHead> {
        StatHead::parse(&std::fs::read(path).ok()?)
    }

    /// Not a zombie (exited, not yet reaped) or dead.
    fn alive(self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// `PF_EXITING` (0x4), set by `do_exit()` before `cgroup_exit()` takes the thread off
    /// its cgroup's lists.
    fn exiting(self) -> bool {
        self.flags & 0x4 != 0
    }
}

/// Whether thread `tid` of `pid` is alive (not a zombie: a leader that exited while
/// its other threads run stays listed, and perf cannot count it).
pub fn thread_alive(root: &Root, pid: u32, tid: u32) -> bool {
    StatHead::read(&root.path(format!("/proc/{pid}/task/{tid}/stat"))).is_some_and(StatHead::alive)
}

/// Whether thread `tid` is alive and not exiting, so a dying thread is not taken for one
/// that moved out of its cgroup.
pub fn thread_alive_not_exiting(root: &Root, tid: u32) -> bool {
    StatHead::read(&root.path(format!("/proc/{tid}/task/{tid}/stat")))
        .is_some_and(|h| h.alive() && !h.exiting())
}

fn watch(root: &Root, dir: String, process: bool) -> Option<Watched> {
    let start = StatHead::read(&root.path(format!("{dir}/stat")))?.start;
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
    let Some(head) = StatHead::read(&dir.join("stat")).filter(|h| h.start == w.start) else {
        return false;
    };
    if !w.process {
        return head.alive();
    }
    numeric_entries(&dir.join("task"))
        .unwrap_or_default()
        .iter()
        .any(|tid| {
            StatHead::read(&dir.join(format!("task/{tid}/stat"))).is_some_and(StatHead::alive)
        })
}

#[cfg(test)]
mod tests;
