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
        drop(Scratch {
            truth: PathBuf::new(),
            stdout: PathBuf::new(),
            stderr: PathBuf::new(),
            parent: Some(e.path()),
            cgroups: Some((e.path().join("in"), e.path().join("out"))),
        });
    }
}

/// Temporary files and the scratch cgroups of one scenario, removed when dropped (the
/// processes left in the cgroups are killed first).
pub(super) struct Scratch {
    pub(super) truth: PathBuf,
    pub(super) stdout: PathBuf,
    pub(super) stderr: PathBuf,
    pub(super) parent: Option<PathBuf>,
    pub(super) cgroups: Option<(PathBuf, PathBuf)>,
}

impl Scratch {
    pub(super) fn new(cgroup2: Option<&Path>, seed: u64) -> Result<Scratch> {
        let base =
            std::env::temp_dir().join(format!("tracer-torture-{}-{seed}", std::process::id()));
        let f = |ext: &str| base.with_extension(ext);
        for e in ["truth", "out", "err"] {
            let _ = std::fs::remove_file(f(e));
        }
        let (parent, cgroups) = match cgroup2 {
            Some(root) => {
                let p = root.join(format!("tracer-torture-{}-{seed}", std::process::id()));
                let (cin, cout) = (p.join("in"), p.join("out"));
                std::fs::create_dir_all(&cin)
                    .and_then(|_| std::fs::create_dir_all(&cout))
                    .with_context(|| format!("cannot create scratch cgroups in {}", p.display()))?;
                (Some(p), Some((cin, cout)))
            }
            None => (None, None),
        };
        Ok(Scratch {
            truth: f("truth"),
            stdout: f("out"),
            stderr: f("err"),
            parent,
            cgroups,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in [&self.truth, &self.stdout, &self.stderr] {
            let _ = std::fs::remove_file(p);
        }
        if let (Some(p), Some((cin, cout))) = (&self.parent, &self.cgroups) {
            for cg in [cin, cout] {
                // Only processes this scenario started live here.
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
            let _ = std::fs::remove_dir(p);
        }
    }
}
