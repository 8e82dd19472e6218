//! cgroup v2 ids to paths, and what the kernel says about a cgroup's CPU: CFS bandwidth
//! throttling (`cpu.stat`, v2 or the v1 `cpu` hierarchy) and pressure (`cpu.pressure`,
//! `/proc/pressure/cpu`).
//!
//! A cgroup v2 id is its directory's inode number (kernfs), which `readdir` gives
//! without a `stat`: the tree is walked once at the start and again only when an id
//! nobody named turns up; cgroups made later are learnt from the kernel's
//! `cgroup_mkdir` events (`bpf::cgroups`), which name even those removed before a walk.
use std::{
    collections::HashMap,
    ffi::OsStr,
    os::unix::{ffi::OsStrExt as _, fs::DirEntryExt as _},
    path::{Path, PathBuf},
};

use crate::sys::root::Root;

/// Most ids kept (~150 bytes each): past it the ones unused longest go (a walk finds
/// those that still exist again).
pub const MAX_NAMES: usize = 65536;

struct Name {
    path: Vec<u8>,
    /// When it was last asked for or learnt (the caller's clock).
    used: u64,
}

/// cgroup v2 ids and their paths below the mount (`/a/b`, bytes).
pub struct CgroupNames {
    mount: Option<PathBuf>,
    by_id: HashMap<u64, Name>,
    /// Walks of the tree since the start.
    pub walks: u64,
}

impl CgroupNames {
    pub fn new(mount: Option<PathBuf>) -> Self {
        CgroupNames {
            mount,
            by_id: HashMap::new(),
            walks: 0,
        }
    }

    pub fn mount(&self) -> Option<&Path> {
        self.mount.as_deref()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Learns every directory of the tree as it is now.
    pub fn walk(&mut self, now: u64) {
        let Some(mount) = self.mount.clone() else {
            return;
        };
        self.walks += 1;
        if let Ok(meta) = std::fs::metadata(&mount) {
            use std::os::unix::fs::MetadataExt as _;
            self.learn(meta.ino(), b"/".to_vec(), now);
        }
        let mut stack: Vec<(PathBuf, Vec<u8>)> = vec![(mount, Vec::new())];
        while let Some((dir, rel)) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue; // removed meanwhile
            };
            for e in rd.flatten() {
                if !e.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let mut p = rel.clone();
                p.push(b'/');
                p.extend_from_slice(e.file_name().as_bytes());
                self.learn(e.ino(), p.clone(), now);
                stack.push((e.path(), p));
            }
        }
    }

    /// Names `id` (from a walk or a `cgroup_mkdir` event).
    pub fn learn(&mut self, id: u64, path: Vec<u8>, now: u64) {
        if self.by_id.len() >= MAX_NAMES && !self.by_id.contains_key(&id) {
            self.forget_oldest(MAX_NAMES / 8);
        }
        self.by_id.insert(id, Name { path, used: now });
    }

    /// The path of `id`, if known.
    pub fn get(&mut self, id: u64, now: u64) -> Option<&[u8]> {
        let n = self.by_id.get_mut(&id)?;
        n.used = now;
        Some(&n.path)
    }

    /// Forgets ids not asked for since `before`: a cgroup removed long ago is not asked
    /// for again (its id is never reused), one that exists is found by the next walk.
    pub fn forget_unused(&mut self, before: u64) {
        self.by_id.retain(|_, n| n.used >= before);
    }

    fn forget_oldest(&mut self, n: usize) {
        let mut used: Vec<u64> = self.by_id.values().map(|v| v.used).collect();
        used.sort_unstable();
        if let Some(&cut) = used.get(n) {
            self.by_id.retain(|_, v| v.used > cut);
        }
    }

    /// The directory of a path below the mount.
    pub fn dir(&self, path: &[u8]) -> Option<PathBuf> {
        let rel = path.strip_prefix(b"/").unwrap_or(path);
        Some(self.mount.as_ref()?.join(OsStr::from_bytes(rel)))
    }
}

/// CFS bandwidth control of one cgroup, cumulative since the cgroup was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttling {
    /// Enforcement periods that had runnable tasks (`nr_periods`).
    pub periods: u64,
    /// Periods in which the cgroup ran out of quota (`nr_throttled`).
    pub throttled_periods: u64,
    /// Time its tasks could not run for lack of quota, ns (v2 `throttled_usec`, v1
    /// `throttled_time`).
    pub throttled_ns: u64,
}

/// Whether `dir` is the root cgroup of its hierarchy (kernfs numbers its root 1): it
/// holds every task, the idle tasks too as perf counts them, so a cgroup task-clock there
/// runs through idle, as a per-CPU one does (a hostile test pass, 2026-12-07: `--cgroup
/// /sys/fs/cgroup/unified` said "1.970 CPUs utilized" on an idle 2-CPU machine, and told
/// the user to trust it). A container's own root under a cgroup namespace is not one.
pub fn is_hierarchy_root(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    dir.join("cgroup.procs").exists() && std::fs::metadata(dir).is_ok_and(|m| m.ino() == 1)
}

/// Parses `cpu.stat`: cgroup v2 (`throttled_usec`) or the v1 `cpu` controller's
/// (`throttled_time`, ns). None when it has no bandwidth figures (v2 without the cpu
/// controller enabled for the cgroup shows the usage lines only).
pub fn parse_cpu_stat(text: &[u8]) -> Option<Throttling> {
    let text = std::str::from_utf8(text).ok()?;
    let mut t = Throttling::default();
    let mut any = false;
    for l in text.lines() {
        let mut f = l.split_ascii_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(v) = v.parse::<u64>() else { continue };
        match k {
            "nr_periods" => t.periods = v,
            "nr_throttled" => t.throttled_periods = v,
            "throttled_usec" => t.throttled_ns = v.saturating_mul(1000),
            "throttled_time" => t.throttled_ns = v,
            _ => continue,
        }
        any = true;
    }
    any.then_some(t)
}

/// CPU pressure: time at least one task (`some`) or all non-idle tasks (`full`) waited
/// for a CPU, ns, cumulative (PSI's `total=` in µs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pressure {
    pub some_ns: u64,
    /// None where the kernel shows no `full` line (before 5.13 for CPU).
    pub full_ns: Option<u64>,
}

/// Parses a PSI file (`some avg10=0.00 avg60=0.00 avg300=0.00 total=123`).
pub fn parse_pressure(text: &[u8]) -> Option<Pressure> {
    let text = std::str::from_utf8(text).ok()?;
    let mut some = None;
    let mut full = None;
    for l in text.lines() {
        let mut f = l.split_ascii_whitespace();
        let kind = f.next();
        let total = f
            .find_map(|w| w.strip_prefix("total="))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|us| us.saturating_mul(1000));
        match kind {
            Some("some") => some = total,
            Some("full") => full = total,
            _ => {}
        }
    }
    Some(Pressure {
        some_ns: some?,
        full_ns: full,
    })
}

/// Where a cgroup's CPU figures are: the v2 directory, and on hybrid machines the v1
/// `cpu` controller's mount, where systemd and the kubelet make the same paths.
#[derive(Clone, Debug, Default)]
pub struct CpuFiles {
    pub v2: Option<PathBuf>,
    pub v1_cpu: Option<PathBuf>,
}

impl CpuFiles {
    pub fn find(root: &Root) -> CpuFiles {
        let mounts = std::fs::read(root.path("/proc/mounts")).unwrap_or_default();
        let mut out = CpuFiles::default();
        for l in mounts.split(|&b| b == b'\n') {
            let f: Vec<&[u8]> = l.split(|&b| b == b' ').collect();
            let (Some(dir), Some(fs), Some(opts)) = (f.get(1), f.get(2), f.get(3)) else {
                continue;
            };
            let dir = root.path(OsStr::from_bytes(dir));
            if *fs == b"cgroup2" && out.v2.is_none() {
                out.v2 = Some(dir);
            } else if *fs == b"cgroup"
                && out.v1_cpu.is_none()
                && opts.split(|&b| b == b',').any(|o| o == b"cpu")
            {
                out.v1_cpu = Some(dir);
            }
        }
        out
    }

    fn join(base: &Path, path: &[u8]) -> PathBuf {
        base.join(OsStr::from_bytes(path.strip_prefix(b"/").unwrap_or(path)))
    }

    /// The bandwidth figures of the cgroup at `path` (below the mount): from v2 where
    /// the cpu controller is on for it, else from the v1 `cpu` hierarchy's same path.
    pub fn throttling(&self, path: &[u8]) -> Option<Throttling> {
        let read = |base: &Option<PathBuf>| {
            let f = Self::join(base.as_ref()?, path).join("cpu.stat");
            parse_cpu_stat(&std::fs::read(f).ok()?)
        };
        read(&self.v2).or_else(|| read(&self.v1_cpu))
    }

    /// The cgroup's CPU pressure (cgroup v2 only; None where PSI is off for it).
    pub fn pressure(&self, path: &[u8]) -> Option<Pressure> {
        let f = Self::join(self.v2.as_ref()?, path).join("cpu.pressure");
        parse_pressure(&std::fs::read(f).ok()?)
    }
}

/// The machine's CPU pressure (`/proc/pressure/cpu`; None without PSI).
pub fn host_pressure(root: &Root) -> Option<Pressure> {
    parse_pressure(&std::fs::read(root.path("/proc/pressure/cpu")).ok()?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_cgroup_hierarchys_root_is_one() {
        use std::path::Path;
        // Not cgroup directories, whatever their inode.
        assert!(!super::is_hierarchy_root(Path::new("/")));
        assert!(!super::is_hierarchy_root(Path::new("/proc")));
        let d = std::env::temp_dir().join(format!("tracer-cg-root-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("cgroup.procs"), "").unwrap();
        assert!(!super::is_hierarchy_root(&d));
        std::fs::remove_dir_all(&d).unwrap();
        assert!(!super::is_hierarchy_root(&d));
        // The machine's own, where mounted: its root is, a directory below is not.
        for m in ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"] {
            let root = Path::new(m);
            if root.join("cgroup.procs").exists() {
                assert!(super::is_hierarchy_root(root), "{m}");
                let kid = root.join(format!("tracer-cg-root-{}", std::process::id()));
                if std::fs::create_dir(&kid).is_ok() {
                    let below = super::is_hierarchy_root(&kid);
                    let _ = std::fs::remove_dir(&kid);
                    assert!(!below, "{}", kid.display());
                }
                break;
            }
        }
    }

    use super::*;

    #[test]
    fn cpu_stat_of_both_versions() {
        let v2 = b"usage_usec 1200\nuser_usec 1000\nsystem_usec 200\nnr_periods 50\n\
                   nr_throttled 7\nthrottled_usec 35000\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse_cpu_stat(v2),
            Some(Throttling {
                periods: 50,
                throttled_periods: 7,
                throttled_ns: 35_000_000
            })
        );
        let v1 =
            b"nr_periods 12\nnr_throttled 3\nthrottled_time 4500000\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(parse_cpu_stat(v1).unwrap().throttled_ns, 4_500_000);
        // v2 without the cpu controller: usage only.
        assert_eq!(
            parse_cpu_stat(b"usage_usec 5\nuser_usec 4\nsystem_usec 1\n"),
            None
        );
    }

    #[test]
    fn pressure_some_and_full() {
        let p = parse_pressure(
            b"some avg10=5.14 avg60=4.41 avg300=4.14 total=6768443923\n\
              full avg10=0.00 avg60=0.00 avg300=0.00 total=12\n",
        )
        .unwrap();
        assert_eq!(p.some_ns, 6_768_443_923_000);
        assert_eq!(p.full_ns, Some(12_000));
        let old = parse_pressure(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=9\n").unwrap();
        assert_eq!(old.full_ns, None);
        assert_eq!(parse_pressure(b"garbage"), None);
    }

    #[test]
    fn names_are_learnt_walked_and_forgotten() {
        let dir = std::env::temp_dir().join(format!("tracer-cgnames-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b\u{e9}")).unwrap();
        let mut n = CgroupNames::new(Some(dir.clone()));
        n.walk(10);
        use std::os::unix::fs::MetadataExt as _;
        let ino = std::fs::metadata(dir.join("a/b\u{e9}")).unwrap().ino();
        assert_eq!(n.get(ino, 11), Some("/a/b\u{e9}".as_bytes()));
        n.learn(1 << 60, b"/gone\xff".to_vec(), 12);
        assert_eq!(n.get(1 << 60, 12), Some(&b"/gone\xff"[..]));
        n.forget_unused(12);
        assert!(n.get(1 << 60, 13).is_some());
        assert_eq!(n.len(), 1, "only what was asked for at 12 or later stays");
        assert_eq!(n.dir(b"/a"), Some(dir.join("a")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
