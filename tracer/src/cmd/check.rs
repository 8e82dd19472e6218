//! `tracer check`: a doctor for the user's machine. Every probe mode is loaded and
//! attached for real (and must see events), every perf event opened for real; nothing is
//! guessed from version numbers.
use crate::model::targets::{Filter, HistScope};
use std::path::Path;

use anyhow::Result;
use serde::Serialize;

use crate::{
    bpf::collect::Collector,
    bpf::loader::{LoadOptions, Tracer},
    model::options::ProbeMode,
    perf,
    sys::privileges,
    sys::procfs,
    sys::root::Root,
    sys::tracefs,
};

/// What the command was asked to do, as the command line gave it (parsed and checked).
#[derive(Debug, Clone)]
pub struct CheckConfig {
    /// One JSON document.
    pub json: bool,
}

/// One line of the report.
#[derive(Serialize, Debug, Clone)]
pub struct Item {
    pub name: String,
    /// Works here (`status` "ok").
    pub ok: bool,
    /// "ok"; "absent": this machine does not have it (no pseries hypervisor, no hardware
    /// PMU in a VM, an optional probe mode) and nothing is wrong; "fail": it should work
    /// and does not.
    pub status: Status,
    pub detail: String,
}

#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Absent,
    Fail,
}

#[derive(Serialize, Debug, Clone)]
pub struct CheckReport {
    pub kernel: Option<String>,
    pub items: Vec<Item>,
    pub probe_modes: Vec<Item>,
    pub events: Vec<Item>,
    /// Whether `tracer run` can work here.
    pub run_ok: bool,
}

fn item(name: &str, ok: bool, detail: impl Into<String>) -> Item {
    Item {
        name: name.to_string(),
        ok,
        status: if ok { Status::Ok } else { Status::Fail },
        detail: detail.into(),
    }
}

/// Something this machine does not have, which is not a fault.
fn absent(name: &str, detail: impl Into<String>) -> Item {
    Item {
        status: Status::Absent,
        ..item(name, false, detail)
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Loads and attaches one mode system-wide, waits a moment and checks events arrived.
fn try_probe(mode: ProbeMode, root: &Root) -> Item {
    let opts = LoadOptions {
        probe: mode,
        filter: Filter::All,
        cgroup: None,
        hist_scope: HistScope::All,
        n_counters: 0,
        max_threads: 4096,
        runq_from: crate::model::options::RunqFrom::Wakeup,
        record: Default::default(),
        hist_pow2: false,
        thread_cgroups: false,
        thread_hists: false,
        runqlen: false,
        irq: false,
    };
    match Tracer::start(&opts, root, &mut |_| Ok(())) {
        Ok(mut t) => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let seen = Collector::live_entries(&mut t.ebpf, t.runq).unwrap_or(0);
            t.detach();
            if seen > 0 {
                item(
                    mode.name(),
                    true,
                    format!("loads, attaches, saw {seen} threads in 50 ms"),
                )
            } else {
                item(
                    mode.name(),
                    false,
                    "attached but saw no context switch in 50 ms",
                )
            }
        }
        // perf-sched is optional (auto never picks it): without fentry or kprobes the
        // machine does not offer it.
        Err(e) if mode == ProbeMode::PerfSched => absent(mode.name(), crate::error::one_line(&e)),
        Err(e) => item(mode.name(), false, crate::error::one_line(&e)),
    }
}

pub fn gather(root: &Root) -> CheckReport {
    let mut items = Vec::new();
    let kernel = procfs::kernel_release(root);
    let privileged = privileges::check();
    items.push(item(
        "privileges",
        privileged.is_ok(),
        match &privileged {
            Ok(()) => "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) present".to_string(),
            Err(e) => e.to_string(),
        },
    ));
    let btf = root.path(crate::sys::btf::VMLINUX_BTF);
    items.push(if btf.exists() {
        item("kernel BTF", true, format!("{}", btf.display()))
    } else {
        absent(
            "kernel BTF",
            format!(
                "{} missing: tp-btf, raw-tp and perf-sched need it (CONFIG_DEBUG_INFO_BTF); the tracepoint mode does not",
                btf.display()
            ),
        )
    });
    match tracefs::tracefs_dir(root) {
        Ok(d) => items.push(item("tracefs", true, d.display().to_string())),
        Err(e) => items.push(item("tracefs", false, e.to_string())),
    }
    let lockdown = read_trim(&root.path("/sys/kernel/security/lockdown"));
    let locked = lockdown
        .as_deref()
        .is_some_and(|l| l.contains("[confidentiality]"));
    items.push(item(
        "lockdown",
        !locked,
        lockdown.unwrap_or_else(|| "not available (no lockdown LSM)".into()),
    ));
    let stats = read_trim(&root.path("/proc/sys/kernel/bpf_stats_enabled"));
    items.push(match stats.as_deref() {
        Some("1") => item(
            "bpf_stats",
            true,
            "enabled (run_time_ns/run_cnt are being counted)",
        ),
        Some(v) => item(
            "bpf_stats",
            true,
            format!("kernel.bpf_stats_enabled={v} (cargo xtask bench turns it on)"),
        ),
        None => absent("bpf_stats", "kernel.bpf_stats_enabled not available"),
    });
    let cg2 = procfs::cgroup2_mount(root);
    items.push(match &cg2 {
        Some(d) => item("cgroup v2", true, format!("mounted at {}", d.display())),
        None => absent("cgroup v2", "not mounted: --cgroup will not work"),
    });
    let vds = root.path("/proc/powerpc/vcpudispatch_stats");
    let dtl = root.path("/sys/kernel/debug/powerpc/dtl");
    items.push(match (vds.exists(), dtl.exists()) {
        (true, true) => item(
            "pseries DTL",
            true,
            "vcpudispatch_stats and debugfs DTL present",
        ),
        (true, false) => item(
            "pseries DTL",
            true,
            "vcpudispatch_stats present; debugfs DTL absent",
        ),
        _ => absent(
            "pseries DTL",
            "not an IBM POWER pseries partition (no /proc/powerpc/vcpudispatch_stats); \
             `tracer run` shows the hypervisor's steal time per CPU instead",
        ),
    });

    let probe_modes: Vec<Item> = if privileged.is_ok() && root.is_live() {
        [
            ProbeMode::TpBtf,
            ProbeMode::RawTp,
            ProbeMode::Tracepoint,
            ProbeMode::PerfSched,
        ]
        .into_iter()
        .map(|m| try_probe(m, root))
        .collect()
    } else {
        vec![item(
            "probe modes",
            false,
            "not tested: needs privileges and the live system",
        )]
    };

    let mut events = Vec::new();
    let mut all = perf::default_events();
    for extra in ["cpu-clock", "major-faults", "cache-misses"] {
        if let Ok(e) = perf::parse_event(extra) {
            all.push(e);
        }
    }
    // SAFETY: no arguments.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    let me = perf::CounterTarget::Threads(vec![(std::process::id(), tid)]);
    for spec in &all {
        let name = spec.name.clone();
        match perf::Counters::open(std::slice::from_ref(spec), &me, false) {
            Ok(c) => {
                let bad = c.unsupported();
                match bad.first() {
                    Some((_, why)) => {
                        events.push(absent(&name, format!("not supported here: {why}")))
                    }
                    None => events.push(item(&name, true, "can be counted")),
                }
            }
            Err(e) => events.push(item(&name, false, e.to_string())),
        }
    }
    let run_ok = privileged.is_ok() && probe_modes.iter().any(|m| m.ok);
    CheckReport {
        kernel,
        items,
        probe_modes,
        events,
        run_ok,
    }
}

/// Pure text rendering.
pub fn format_text(r: &CheckReport) -> String {
    let mark = |s: Status| match s {
        Status::Ok => "ok  ",
        Status::Absent => "n/a ",
        Status::Fail => "FAIL",
    };
    let mut out = format!("kernel {}\n", r.kernel.as_deref().unwrap_or("(unknown)"));
    for (title, list) in [
        ("system", &r.items),
        ("probe modes (loaded and attached for real)", &r.probe_modes),
        ("perf events", &r.events),
    ] {
        out += &format!("\n{title}:\n");
        for i in list {
            out += &format!("  [{}] {:<18} {}\n", mark(i.status), i.name, i.detail);
        }
    }
    out += "\n[n/a ]: this machine does not have it, which is not a fault.\n";
    out += &format!(
        "`tracer run` {}\n",
        if r.run_ok {
            "can work here"
        } else {
            "cannot work here"
        }
    );
    out
}

pub fn run(args: &CheckConfig, root: &Root) -> Result<i32> {
    let r = gather(root);
    if args.json {
        crate::output::stdout::emit(&crate::output::json::terminal_safe(
            serde_json::to_string_pretty(&r)?,
        ))?;
    } else {
        crate::output::stdout::emit_raw(&format_text(&r))?;
    }
    Ok(if r.run_ok { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_is_not_failed() {
        let r = CheckReport {
            kernel: Some("6.18".into()),
            items: vec![
                item("kernel BTF", true, "/sys/kernel/btf/vmlinux"),
                absent("pseries DTL", "not an IBM POWER pseries partition"),
                item("lockdown", false, "confidentiality"),
            ],
            probe_modes: vec![],
            events: vec![absent("cycles", "not supported here: ENOENT")],
            run_ok: true,
        };
        let t = format_text(&r);
        assert!(t.contains("  [ok  ] kernel BTF "), "{t}");
        assert!(t.contains("  [n/a ] pseries DTL "), "{t}");
        assert!(t.contains("  [n/a ] cycles "), "{t}");
        assert!(t.contains("  [FAIL] lockdown "), "{t}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["items"][1]["status"], "absent");
        assert_eq!(v["items"][1]["ok"], false);
        assert_eq!(v["items"][2]["status"], "fail");
        assert_eq!(v["items"][0]["status"], "ok");
    }

    /// aya's load error with an empty verifier log, as the kernel gives for EPERM.
    #[derive(Debug)]
    struct LoadError(std::io::Error);
    impl std::fmt::Display for LoadError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "the BPF_PROG_LOAD syscall returned {}. Verifier output: ",
                self.0
            )
        }
    }
    impl std::error::Error for LoadError {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn errors_are_said_once_without_an_empty_verifier_log() {
        let e = anyhow::Error::new(LoadError(std::io::Error::from_raw_os_error(libc::EPERM)))
            .context("loading perf_sched_out_fentry");
        assert_eq!(
            format!("{e:#}"),
            "loading perf_sched_out_fentry: the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier output: : Operation not permitted (os error 1)"
        );
        assert_eq!(
            crate::error::one_line(&e),
            "loading perf_sched_out_fentry: the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)"
        );
    }
}
