//! The scenario's temporary files and scratch cgroups, and the cleanup of those that
//! interrupted runs left behind.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result};

/// Scratch cgroups of earlier torture runs that were interrupted (their driver, whose PID
/// is in the name, is gone): their processes are killed and the directories removed.
pub(super) fn remove_stale_scratch(root: &Path) {
    let Ok(dir) = std::fs::read_dir(root) else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("tracer-torture-")
            .and_then(|r| r.split('-').next())
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let mut dirs = Vec::new();
        subdirs(&e.path(), &mut dirs);
        remove_cgroups(&dirs);
    }
}

/// `dir` and every directory below it, parents before children.
fn subdirs(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_path_buf());
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                subdirs(&e.path(), out);
            }
        }
    }
}

/// Kills what lives in the cgroups and removes them, children first.
fn remove_cgroups(dirs: &[PathBuf]) {
    for cg in dirs.iter().rev() {
        // Only processes a torture scenario started live here.
        let _ = std::fs::write(cg.join("cgroup.kill"), "1");
        for _ in 0..200 {
            let empty = std::fs::read_to_string(cg.join("cgroup.procs"))
                .map_or(true, |s| s.trim().is_empty());
            if empty && std::fs::remove_dir(cg).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The scenario's scratch cgroups: `--cgroup TARGET` for the tracer, `--cg-in WORK` where
/// the workload moves itself (TARGET itself, or a cgroup two levels below it that leaves
/// TARGET without a process), `--cg-out OUT` beside TARGET.
pub(super) struct Cgroups {
    pub(super) target: PathBuf,
    pub(super) work: PathBuf,
    pub(super) out: PathBuf,
}

/// Temporary files and the scratch cgroups of one scenario, removed when dropped (the
/// processes left in the cgroups are killed first).
pub(super) struct Scratch {
    pub(super) truth: PathBuf,
    pub(super) stdout: PathBuf,
    pub(super) stderr: PathBuf,
    /// `tracer record -o`.
    pub(super) trace: PathBuf,
    pub(super) cgroups: Option<Cgroups>,
    /// Every scratch cgroup, parents first.
    dirs: Vec<PathBuf>,
}

impl Scratch {
    pub(super) fn new(cgroup2: Option<&Path>, seed: u64, nested: bool) -> Result<Scratch> {
        let base =
            std::env::temp_dir().join(format!("tracer-torture-{}-{seed}", std::process::id()));
        let f = |ext: &str| base.with_extension(ext);
        for e in ["truth", "out", "err", "pftrace"] {
            let _ = std::fs::remove_file(f(e));
        }
        let mut dirs = Vec::new();
        let cgroups = match cgroup2 {
            Some(root) => {
                let p = root.join(format!("tracer-torture-{}-{seed}", std::process::id()));
                let target = p.join("in");
                let work = if nested {
                    target.join("a/b")
                } else {
                    target.clone()
                };
                let out = p.join("out");
                for d in [&work, &out] {
                    std::fs::create_dir_all(d).with_context(|| {
                        format!("cannot create scratch cgroups in {}", p.display())
                    })?;
                }
                subdirs(&p, &mut dirs);
                Some(Cgroups { target, work, out })
            }
            None => None,
        };
        Ok(Scratch {
            truth: f("truth"),
            stdout: f("out"),
            stderr: f("err"),
            trace: f("pftrace"),
            cgroups,
            dirs,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in [&self.truth, &self.stdout, &self.stderr, &self.trace] {
            let _ = std::fs::remove_file(p);
        }
        remove_cgroups(&self.dirs);
    }
}
