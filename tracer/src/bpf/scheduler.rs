//! The scheduler in use, read once when a run starts for its header: what the kernel
//! exposes (BTF, debugfs `sched/features`, `/sys/kernel/sched_ext`), decided by
//! [`crate::model::scheduler::decide`]. debugfs is read where it is mounted, never
//! mounted for it.
use std::path::{Path, PathBuf};

use crate::{
    bpf::compat,
    model::scheduler::{decide, BtfFacts, ExtFacts, Facts, Scheduler},
    sys::btf::VMLINUX_BTF,
    sys::{bounded::read_bounded, btf::KernelBtf, procfs, root::Root},
};

/// The most of a sysfs or debugfs file read (they hold a page at most).
const SMALL_FILE: u64 = 64 << 10;
const DEBUGFS: &str = "/sys/kernel/debug";

/// The header's `scheduler`; what cannot be read is said in `notices`. `btf`: the
/// facts the loader took from the kernel's BTF, if it read it (it is not read twice).
pub fn detect(root: &Root, btf: Option<BtfFacts>, notices: &mut Vec<String>) -> Scheduler {
    let (s, notes) = decide(&read_facts(root, btf));
    notices.extend(notes);
    s
}

/// What the kernel's BTF says of its fair class.
pub fn btf_facts(b: &KernelBtf) -> BtfFacts {
    BtfFacts {
        eevdf: compat::fair_class_is_eevdf(b),
        delayed_dequeue: compat::can_delay_dequeue(b),
    }
}

/// Everything [`decide`] reads, from the system under `root` (the BTF facts from `btf`
/// where given).
pub fn read_facts(root: &Root, btf: Option<BtfFacts>) -> Facts {
    Facts {
        btf: match btf {
            Some(b) => Ok(b),
            None => KernelBtf::from_file(&root.path(VMLINUX_BTF))
                .map(|b| btf_facts(&b))
                .map_err(|e| e.to_string()),
        },
        release: procfs::kernel_release(root),
        features: features(root),
        ext: sched_ext(root),
    }
}

fn small_text(path: &Path) -> Result<String, String> {
    read_bounded(path, SMALL_FILE)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// The first of [`compat::SCHED_FEATURES`] under `dir` (debugfs' mount point, as a path
/// inside `root`).
fn features_in(root: &Root, debugfs: &Path) -> Option<Result<String, String>> {
    compat::SCHED_FEATURES.iter().find_map(|p| {
        let rel = Path::new(p).strip_prefix(DEBUGFS).ok()?;
        let path = root.path(debugfs.join(rel));
        match std::fs::metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => Some(small_text(&path)),
        }
    })
}

/// Where debugfs is mounted, from `/proc/mounts` (paths with escapes skipped: the
/// default mount point has none).
fn debugfs_mounts(root: &Root) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(root.path("/proc/mounts")).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "debugfs" && !dir.contains('\\')).then(|| PathBuf::from(dir))
        })
        .collect()
}

/// The lockdown mode the kernel is in (`integrity`, `confidentiality`), None when it is
/// `none` or there is no lockdown LSM.
fn locked_down(root: &Root) -> Option<String> {
    let text = small_text(&root.path("/sys/kernel/security/lockdown")).ok()?;
    let mode = text.split('[').nth(1)?.split(']').next()?.to_string();
    (mode != "none").then_some(mode)
}

/// The text of debugfs `sched/features` where debugfs is mounted and readable.
fn features(root: &Root) -> Result<String, String> {
    if let Some(mode) = locked_down(root) {
        // Lockdown closes debugfs' writable files (LOCKDOWN_DEBUGFS), and every refused
        // open logs a "Lockdown: ... debugfs access is restricted" line in the kernel
        // log: one per run filled a test machine's log and pushed out its boot banner.
        return Err(format!(
            "the kernel is locked down ({mode}): debugfs, and sched/features in it, is closed"
        ));
    }
    let mut dirs = debugfs_mounts(root);
    dirs.push(PathBuf::from(DEBUGFS));
    for dir in &dirs {
        if let Some(r) = features_in(root, dir) {
            return r;
        }
    }
    let mounted = !debugfs_mounts(root).is_empty();
    if mounted {
        return Err(
            "debugfs is mounted but has no sched/features (a kernel before 6.15 \
                    built without CONFIG_SCHED_DEBUG?)"
                .to_string(),
        );
    }
    // Not mounted: left so. A run does not mount filesystems on the machine it measures
    // for one line of its header (perf mounts debugfs for tracing, which needs it).
    Err(format!(
        "debugfs is not mounted (mount it on {DEBUGFS} to see sched/features)"
    ))
}

/// `/sys/kernel/sched_ext`, None without it (a kernel without sched_ext).
fn sched_ext(root: &Root) -> Option<ExtFacts> {
    let dir = root.path(compat::SCHED_EXT_DIR);
    let state = small_text(&dir.join("state")).ok()?;
    Some(ExtFacts {
        state,
        switch_all: small_text(&dir.join("switch_all"))
            .ok()
            .and_then(|s| match s.as_str() {
                "1" => Some(true),
                "0" => Some(false),
                _ => None,
            }),
        ops: small_text(&dir.join("root/ops"))
            .ok()
            .filter(|s| !s.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture tree: `files` as (path, contents) under a fresh directory.
    fn tree(name: &str, files: &[(&str, &str)]) -> (PathBuf, Root) {
        let dir = std::env::temp_dir().join(format!("tracer-sched-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, text) in files {
            let path = dir.join(p.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        (dir.clone(), Root::new(dir))
    }

    #[test]
    fn a_618_tree_with_debugfs_mounted_and_no_sched_ext() {
        let (dir, root) = tree(
            "618",
            &[
                ("/proc/sys/kernel/osrelease", "6.18.4\n"),
                ("/proc/mounts", "debugfs /sys/kernel/debug debugfs rw 0 0\n"),
                (
                    "/sys/kernel/debug/sched/features",
                    "PLACE_LAG RUN_TO_PARITY NO_DELAY_DEQUEUE DELAY_ZERO\n",
                ),
            ],
        );
        let mut notices = Vec::new();
        let s = detect(&root, None, &mut notices);
        std::fs::remove_dir_all(dir).unwrap();
        // No BTF in the tree: the features decide the class.
        assert_eq!(s.class.as_deref(), Some("EEVDF"));
        assert_eq!(s.delay_dequeue, Some(false));
        assert_eq!((s.ext, s.ext_state), (None, None));
        assert_eq!(s.source, "sched/features");
        assert!(notices.is_empty(), "{notices:?}");
    }

    /// Locked down: debugfs is not tried (a refused open logs a line in the kernel log).
    #[test]
    fn a_locked_down_kernel_is_not_asked_for_debugfs() {
        // sched/features under securityfs's lockdown mode `mode`.
        let read_under = |name: &str, mode: &str| {
            let (dir, root) = tree(
                name,
                &[
                    ("/proc/sys/kernel/osrelease", "6.18.4\n"),
                    ("/proc/mounts", "debugfs /sys/kernel/debug debugfs rw 0 0\n"),
                    ("/sys/kernel/debug/sched/features", "NO_DELAY_DEQUEUE\n"),
                    ("/sys/kernel/security/lockdown", mode),
                ],
            );
            let f = features(&root);
            std::fs::remove_dir_all(dir).unwrap();
            f
        };
        assert_eq!(
            read_under("lockdown", "none [integrity] confidentiality\n"),
            Err("the kernel is locked down (integrity): debugfs, and sched/features in it, is closed".into())
        );
        assert_eq!(
            read_under("nolockdown", "[none] integrity confidentiality\n"),
            Ok("NO_DELAY_DEQUEUE".into())
        );
    }

    /// The loader's BTF facts are taken as they are: no second read of the BTF (the
    /// tree has none: a read there decides from the release instead).
    #[test]
    fn the_loaders_btf_facts_are_used() {
        let (dir, root) = tree("loader", &[("/proc/sys/kernel/osrelease", "6.18.4\n")]);
        let facts = BtfFacts {
            eevdf: true,
            delayed_dequeue: true,
        };
        let mut with = Vec::new();
        let s = detect(&root, Some(facts), &mut with);
        let mut without = Vec::new();
        let t = detect(&root, None, &mut without);
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(s.class.as_deref(), Some("EEVDF"));
        assert_eq!(s.source, "BTF sched_entity");
        assert!(!with.iter().any(|n| n.contains("BTF")), "{with:?}");
        assert_ne!(t.source, "BTF sched_entity", "{without:?}");
    }

    #[test]
    fn debugfs_elsewhere_and_the_old_file_name() {
        let (dir, root) = tree(
            "old",
            &[
                ("/proc/sys/kernel/osrelease", "5.10.0\n"),
                ("/proc/mounts", "none /mnt/dbg debugfs rw 0 0\n"),
                (
                    "/mnt/dbg/sched_features",
                    "GENTLE_FAIR_SLEEPERS START_DEBIT\n",
                ),
            ],
        );
        let s = detect(&root, None, &mut Vec::new());
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(s.class.as_deref(), Some("CFS"));
        assert_eq!(s.delay_dequeue, Some(false));
    }

    #[test]
    fn sched_ext_enabled_and_features_unreadable() {
        let (dir, root) = tree(
            "scx",
            &[
                ("/proc/sys/kernel/osrelease", "6.12.1\n"),
                ("/proc/mounts", "sysfs /sys sysfs rw 0 0\n"),
                ("/sys/kernel/sched_ext/state", "enabled\n"),
                ("/sys/kernel/sched_ext/switch_all", "1\n"),
                ("/sys/kernel/sched_ext/root/ops", "lavd\n"),
            ],
        );
        let mut notices = Vec::new();
        let s = detect(&root, None, &mut notices);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(s.class.as_deref(), Some("EEVDF"), "from the release");
        assert_eq!(s.ext.as_deref(), Some("lavd"));
        assert_eq!(s.ext_state.as_deref(), Some("enabled"));
        assert_eq!(s.ext_switch_all, Some(true));
        assert_eq!(s.delay_dequeue, None);
        assert_eq!(s.source, "kernel release, /sys/kernel/sched_ext");
        // Nothing is mounted for it: it says debugfs is not mounted.
        assert!(notices[0].contains("debugfs is not mounted"), "{notices:?}");
        assert!(notices[1].contains("\"lavd\""), "{notices:?}");
    }
}
