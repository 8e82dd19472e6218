//! What the machine says: programs (bpftool, fdinfo), /proc figures, versions.

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{ensure, Context, Result};

use super::system::sys;

// ---------------------------------------------------------------------------------------
// Programs: bpftool for identification and names, fdinfo for ownership and statistics.

#[derive(Clone, Debug)]
pub(super) struct ProgMeta {
    pub(super) name: String,
    pub(super) kind: String,
    pub(super) xlated_bytes: u64,
}

pub(super) fn bpftool_progs(bpftool: &Path) -> Result<BTreeMap<u32, ProgMeta>> {
    let out = Command::new(bpftool)
        .args(["prog", "show", "--json"])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", bpftool.display()))?;
    ensure!(
        out.status.success(),
        "bpftool prog show failed: {}",
        out.status
    );
    let items: Vec<BpftoolProg> =
        serde_json::from_slice(&out.stdout).context("parsing `bpftool prog show --json`")?;
    Ok(items
        .into_iter()
        .map(|p| {
            let meta = ProgMeta {
                name: p.name.unwrap_or_else(|| "?".into()),
                kind: p.kind.unwrap_or_else(|| "?".into()),
                xlated_bytes: p.bytes_xlated,
            };
            (p.id, meta)
        })
        .collect())
}

/// The members of a `bpftool prog show --json` entry that the bench reads.
#[derive(serde::Deserialize)]
struct BpftoolProg {
    id: u32,
    name: Option<String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    bytes_xlated: u64,
}

#[derive(Clone, Debug, Default)]
pub(super) struct FdProg {
    pub(super) tag: String,
    pub(super) run_cnt: u64,
    pub(super) run_time_ns: u64,
    /// The verifier's instructions processed (veristat's count; fdinfo since 5.16).
    pub(super) verified_insns: Option<u64>,
}

/// What one process holds: its BPF programs (by id, with their statistics) and its attach
/// fds (BPF links; perf events, through which classic tracepoints attach).
#[derive(Clone, Debug, Default)]
pub(super) struct FdScan {
    pub(super) progs: BTreeMap<u32, FdProg>,
    pub(super) links: usize,
    pub(super) perf_events: usize,
}

pub(super) fn scan_fds(pid: u32) -> Result<FdScan> {
    let mut scan = FdScan::default();
    let dir = format!("/proc/{pid}/fd");
    for entry in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        // fds come and go while we look: skip the ones that went.
        let Ok(entry) = entry else { continue };
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        match target.to_string_lossy().as_ref() {
            "anon_inode:bpf-prog" => {
                let info = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
                let Ok(info) = fs::read_to_string(info) else {
                    continue;
                };
                let field = |key: &str| {
                    info.lines()
                        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
                        .map(str::trim)
                };
                let number = |key| field(key).and_then(|v| v.parse::<u64>().ok());
                let Some(id) = number("prog_id") else {
                    continue;
                };
                scan.progs.insert(
                    id as u32,
                    FdProg {
                        tag: field("prog_tag").unwrap_or_default().to_string(),
                        run_cnt: number("run_cnt").unwrap_or(0),
                        run_time_ns: number("run_time_ns").unwrap_or(0),
                        verified_insns: number("verified_insns"),
                    },
                );
            }
            "anon_inode:bpf_link" => scan.links += 1,
            "anon_inode:[perf_event]" => scan.perf_events += 1,
            _ => {}
        }
    }
    Ok(scan)
}

pub(super) fn is_switch_prog(name: &str) -> bool {
    name.contains("switch") || name.contains("sched_sw")
}

// ---------------------------------------------------------------------------------------
// /proc figures.

pub(super) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &stat[stat.rfind(')').context("odd /proc/PID/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) of stat; `rest` starts at field 3.
    Ok(f.get(11).context("short stat")?.parse::<u64>()?
        + f.get(12).context("short stat")?.parse::<u64>()?)
}

/// On-CPU ns of all the process's live threads (schedstat is exact where stat has ticks).
pub(super) fn sched_ns(pid: u32) -> u64 {
    sched_by_thread(pid).values().sum()
}

/// On-CPU ns of each of the process's live threads, by TID.
pub(super) fn sched_by_thread(pid: u32) -> std::collections::BTreeMap<u32, u64> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Default::default();
    };
    dir.filter_map(|t| t.ok())
        .filter_map(|t| {
            let tid = t.file_name().to_str()?.parse().ok()?;
            let s = fs::read_to_string(t.path().join("schedstat")).ok()?;
            Some((tid, s.split_whitespace().next()?.parse::<u64>().ok()?))
        })
        .collect()
}

/// The on-CPU time the threads in `b` gained since `a` (a thread new in `b` counts from 0;
/// one gone since `a`, its time after `a` unknown, counts nothing rather than less than 0:
/// the tracer's own short-lived threads, 2026-12-07).
pub(super) fn sched_grown(
    a: &std::collections::BTreeMap<u32, u64>,
    b: &std::collections::BTreeMap<u32, u64>,
) -> u64 {
    b.iter()
        .map(|(tid, &ns)| ns.saturating_sub(a.get(tid).copied().unwrap_or(0)))
        .sum()
}

pub(super) fn vm_hwm_kib(pid: u32) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/PID/status")
}

pub(super) fn context_switches() -> Result<u64> {
    let stat = fs::read_to_string("/proc/stat")?;
    stat.lines()
        .find_map(|l| l.strip_prefix("ctxt "))
        .and_then(|v| v.trim().parse().ok())
        .context("no ctxt line in /proc/stat")
}

/// Busy ticks of all CPUs: user, nice, system, irq, softirq and steal of /proc/stat.
pub(super) fn busy_ticks() -> Result<u64> {
    let stat = fs::read_to_string("/proc/stat")?;
    let cpu = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .context("no cpu line in /proc/stat")?;
    let f: Vec<u64> = cpu
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    ensure!(f.len() >= 8, "short cpu line in /proc/stat");
    Ok(f[0] + f[1] + f[2] + f[5] + f[6] + f[7])
}

/// cutime+cstime of xtask: the CPU time of every child it has reaped.
pub(super) fn children_ticks() -> Result<u64> {
    let stat = fs::read_to_string("/proc/self/stat")?;
    let rest = &stat[stat.rfind(')').context("odd /proc/self/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok(f.get(13).context("short stat")?.parse::<u64>()?
        + f.get(14).context("short stat")?.parse::<u64>()?)
}

pub(super) fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { sys::sysconf(sys::SC_CLK_TCK) }).max(1) as f64
}

pub(super) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Versions.

/// A command's whole stdout, trimmed (empty when it fails).
pub(super) fn command_output(argv: &[&str]) -> String {
    Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub(super) fn first_line(argv: &[&str]) -> String {
    Command::new(argv[0])
        .args(&argv[1..])
        .output()
        .ok()
        .map(|o| {
            let s = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&s)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_program_names() {
        for n in [
            "sched_switch_btf",
            "floor_switch",
            "sched_switch",
            "handle_sched_sw",
        ] {
            assert!(is_switch_prog(n), "{n}");
        }
        assert!(!is_switch_prog("sched_wakeup_btf"));
    }
}

#[cfg(test)]
mod grown_tests {
    #[test]
    fn a_thread_gone_between_the_reads_counts_nothing_and_a_new_one_from_zero() {
        let a = [(1, 100), (2, 50)].into_iter().collect();
        let b = [(1, 160), (3, 7)].into_iter().collect();
        assert_eq!(super::sched_grown(&a, &b), 67);
    }
}
