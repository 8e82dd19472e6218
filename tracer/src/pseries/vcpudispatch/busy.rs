//! Who else holds the Dispatch Trace Log, for the EBUSY error.
use std::fs;

use crate::{
    pseries::vcpudispatch::stats::{read_stats, StatsState, DTL_DIR, STATS_PATH},
    sys::root::Root,
};

/// Says which of the three mutually exclusive DTL consumers (debugfs DTL readers, perf's
/// `vpa_dtl` PMU, vcpudispatch_stats) is probably active, and what to do about it.
pub fn busy_hint(root: &Root) -> String {
    let mut found = Vec::new();
    if let Ok(StatsState::On(_)) = read_stats(root) {
        found.push(format!(
            "vcpudispatch_stats is enabled (stop the tool that enabled it, or `echo 0 > {STATS_PATH}`)"
        ));
    }
    let (readers, perfs) = scan_processes(root);
    for (pid, comm, file) in readers {
        found.push(format!(
            "PID {pid} ({comm}) reads the debugfs DTL {file} (stop it)"
        ));
    }
    for (pid, comm) in perfs {
        found.push(format!(
            "PID {pid} ({comm}) may be recording perf's vpa_dtl PMU (stop it)"
        ));
    }
    if found.is_empty() {
        format!(
            "only one of debugfs DTL readers ({DTL_DIR}/cpu-N), perf's vpa_dtl PMU and \
             vcpudispatch_stats can be active; look with `cat {STATS_PATH}`, \
             `fuser {DTL_DIR}/cpu-*` and `pgrep -a perf`, stop it and retry"
        )
    } else {
        format!("likely: {}", found.join("; "))
    }
}

/// (PID, comm, open DTL file) of debugfs DTL readers.
type Readers = Vec<(u32, String, String)>;
/// (PID, comm) of perf processes.
type Perfs = Vec<(u32, String)>;

/// Processes with a debugfs DTL file open, and processes named perf; bounded so a huge
/// /proc cannot stall the error path.
fn scan_processes(root: &Root) -> (Readers, Perfs) {
    let mut readers = Vec::new();
    let mut perfs = Vec::new();
    let Ok(dir) = fs::read_dir(root.path("/proc")) else {
        return (readers, perfs);
    };
    let me = std::process::id();
    for ent in dir.flatten().take(100_000) {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let comm = fs::read_to_string(ent.path().join("comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        if comm == "perf" {
            perfs.push((pid, comm.clone()));
        }
        if let Ok(fds) = fs::read_dir(ent.path().join("fd")) {
            for fd in fds.flatten().take(65_536) {
                if let Ok(target) = fs::read_link(fd.path()) {
                    let t = target.to_string_lossy();
                    if t.starts_with(&format!("{DTL_DIR}/cpu-")) {
                        readers.push((pid, comm.clone(), t.into_owned()));
                        break;
                    }
                }
            }
        }
    }
    (readers, perfs)
}
