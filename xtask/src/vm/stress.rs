//! `cargo xtask vm-test --stress LOAD --boots N`: is a guest crash ours? Boots the same
//! guest N times under each load (tests/vm/stress.sh: our tracer, libbpf-tools `runqlat`,
//! or the sched_switch trace event flipped through tracefs), each attaching to sched_switch
//! and detaching again for `--stress-secs` of guest time, and counts how each boot ended,
//! read from the kernel's console (kept whole: no `quiet`). Boots alternate between the
//! loads, so a change in the host's own load falls on all of them alike.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Result};

use super::qemu;
use crate::arch::Arch;
use crate::provision::guest;

/// What the guest attaches and detaches, over and over.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// `tracer run -d 1s`, cycling tp-btf, raw-tp and tracepoint (what the checks do).
    Tracer,
    /// libbpf-tools `runqlat 1 1` (tp_btf, from Debian's libbpf-tools).
    Runqlat,
    /// `echo 1/0 > events/sched/sched_switch/enable` (ftrace's own probe; no BPF).
    Tracefs,
    /// Nothing attaches: the workloads alone.
    Idle,
}

impl Load {
    pub fn name(self) -> &'static str {
        match self {
            Load::Tracer => "tracer",
            Load::Runqlat => "runqlat",
            Load::Tracefs => "tracefs",
            Load::Idle => "idle",
        }
    }
}

/// How a boot ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// The load ran its time and the guest powered off with nothing bad on its console.
    Completed,
    /// The kernel reported a problem (oops, BUG, RCU stall, soft lockup, panic).
    Crashed(Crash),
    /// Nothing more from the guest and nothing on the console: what a look inside found.
    Hung(String),
    /// Powered off early with nothing on the console (the guest's script failed).
    Stopped,
}

/// What the console says about a crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Crash {
    /// `oops` (BUG/Oops/general protection), `stall` (RCU), `lockup` (soft/hard) or
    /// `panic`.
    pub kind: &'static str,
    /// The first error line.
    pub first: String,
    /// The `RIP:` line of the first report, if any.
    pub rip: Option<String>,
    /// The first functions of its call trace (without `?` guesses and offsets).
    pub trace: Vec<String>,
}

impl Crash {
    pub fn describe(&self) -> String {
        let mut s = format!("{}: {}", self.kind, self.first);
        if let Some(rip) = &self.rip {
            let _ = write!(s, "; {rip}");
        }
        if !self.trace.is_empty() {
            let _ = write!(s, "; trace {}", self.trace.join(" < "));
        }
        s
    }
}

/// Strips the `[   12.345678] ` timestamp of a console line.
pub(super) fn message(line: &str) -> &str {
    let line = line.trim_end_matches('\r');
    match line.trim_start().strip_prefix('[') {
        Some(rest) => rest.split_once("] ").map_or(line, |(_, m)| m),
        None => line,
    }
}

/// The first kernel problem on a console, if any.
pub fn read_crash(console: &str) -> Option<Crash> {
    // Lockups and stalls first: "watchdog: BUG: soft lockup" is a stall, not an oops.
    const KINDS: [(&str, &str); 10] = [
        ("detected stall", "stall"),
        ("detected stalls", "stall"),
        ("detected expedited stalls", "stall"),
        ("soft lockup", "lockup"),
        ("hard LOCKUP", "lockup"),
        ("BUG:", "oops"),
        ("Oops", "oops"),
        ("general protection fault", "oops"),
        ("kernel BUG at", "oops"),
        ("Kernel panic", "panic"),
    ];
    let lines: Vec<&str> = console.lines().map(message).collect();
    let (at, kind) = lines.iter().enumerate().find_map(|(i, l)| {
        if l.to_ascii_lowercase().contains("command line") {
            return None;
        }
        KINDS
            .iter()
            .find(|(k, _)| l.contains(k))
            .map(|(_, kind)| (i, *kind))
    })?;
    let rest = &lines[at..];
    let rip = rest
        .iter()
        .take(80)
        .find(|l| l.starts_with("RIP: "))
        .map(|l| l.to_string());
    let mut trace = Vec::new();
    if let Some(start) = rest
        .iter()
        .take(120)
        .position(|l| l.contains("Call Trace:"))
    {
        for l in &rest[start + 1..] {
            let l = l.trim();
            if ["<TASK>", "<IRQ>", "</IRQ>", "<NMI>", "</NMI>"].contains(&l) || l.starts_with("? ")
            {
                continue;
            }
            if l == "</TASK>" || l.starts_with("RIP: ") || l.contains("---[") || l.is_empty() {
                break;
            }
            let f = l.split('+').next().unwrap_or(l).trim();
            if f.contains(' ') || f.contains(':') {
                break;
            }
            trace.push(f.to_string());
            if trace.len() == 6 {
                break;
            }
        }
    }
    Some(Crash {
        kind,
        first: lines[at].trim().to_string(),
        rip,
        trace,
    })
}

/// Where each CPU was, from the backtraces the NMI drew out of a hung guest: for every
/// `CPU: N PID: P Comm: C` header, the first `RIP:` after it (the interrupted context).
pub fn cpus_after_nmi(console: &str) -> Vec<String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for l in console.lines().map(message) {
        if let Some(rest) = l.strip_prefix("CPU: ") {
            let cpu = rest.split_whitespace().next().unwrap_or("?").to_string();
            let comm = rest
                .split_once("Comm: ")
                .and_then(|(_, c)| c.split_whitespace().next())
                .unwrap_or("?")
                .to_string();
            cur = Some((cpu, comm));
        } else if let Some(rip) = l.strip_prefix("RIP: ") {
            if let Some((cpu, comm)) = cur.take() {
                if !out.iter().any(|(c, _)| *c == cpu) {
                    let at = rip.split_once(':').map_or(rip, |(_, a)| a);
                    let at = if rip.starts_with("0033") {
                        "user space"
                    } else {
                        at
                    };
                    out.push((cpu.clone(), format!("cpu{cpu} ({comm}) at {at}")));
                }
            }
        }
    }
    out.into_iter().map(|(_, s)| s).collect()
}

fn describe_hang(h: &qemu::Hang, console: &str, nmi: Option<&Crash>) -> String {
    let after = console.get(h.console_before..).unwrap_or("");
    let cpus = cpus_after_nmi(after);
    format!(
        "qemu at {:.0}% CPU (200: both vCPUs busy); an NMI {} ({})",
        h.qemu_cpu_pct,
        match (nmi, cpus.is_empty()) {
            (None, _) => format!(
                "drew no report: the guest could not answer (vCPUs at {})",
                h.rips
                    .iter()
                    .map(|r| format!("{r:#x}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            (Some(_), true) => "panicked the guest, no CPU backtraces".to_string(),
            (Some(_), false) => format!("found {}", cpus.join(", ")),
        },
        h.log.display()
    )
}

/// One boot's outcome.
struct BootResult {
    load: Load,
    ending: Ending,
    /// Attach/detach cycles the guest finished.
    cycles: u32,
    /// Cycles whose command failed, and the first failure's output.
    failed_cycles: u32,
    first_failure: Vec<String>,
    secs: f64,
    console: PathBuf,
}

fn read_results(text: &str) -> (u32, u32, Vec<String>, bool) {
    let mut cycles = 0;
    let mut failed = 0;
    let mut out = Vec::new();
    let mut ended = false;
    for l in text.lines().map(|l| l.trim_end_matches('\r')) {
        if let Some(rest) = l.strip_prefix("@@vmtest cycle ") {
            cycles += 1;
            if !rest.contains(" rc=0 ") {
                failed += 1;
            }
        } else if let Some(rest) = l.strip_prefix("@@vmtest out ") {
            out.push(rest.to_string());
        } else if l.starts_with("@@vmtest stress end") {
            ended = true;
        } else if l.starts_with("@@vmtest stress: ") {
            out.push(l.to_string());
        }
    }
    (cycles, failed, out, ended)
}

#[allow(clippy::too_many_arguments)]
fn boot_once(
    arch: &Arch,
    kernel: &guest::Kernel,
    initrd: &Path,
    dir: &Path,
    load: Load,
    secs: u32,
    timeout: Duration,
    single: bool,
) -> Result<BootResult> {
    // An oops, a soft lockup or an RCU stall panics at once (panic=-1 and -no-reboot then
    // end qemu), so a crashed boot costs no timeout and its first report is the one read.
    // A guest silent for 90 s (VMTEST_SILENCE; a cycle takes under 20 s, the RCU stall detector speaks
    // after 21) is hung: qemu's monitor shows where its vCPUs are (nokaslr, so System.map
    // names them) and an NMI asks the guest for a backtrace (unknown_nmi_panic, with every
    // CPU's backtrace: panic_print=64).
    let opts = qemu::Options {
        cmdline: format!(
            "vmtest.stress={} vmtest.secs={secs} oops=panic softlockup_panic=1 \
             sysctl.kernel.panic_on_rcu_stall=1 nokaslr unknown_nmi_panic=1 panic_print=64",
            load.name()
        ),
        quiet: false,
        nice: 10,
        single_thread_tcg: single,
        machine: None,
        // The stress boots look for emulator races, which need one host thread per vCPU.
        icount: None,
        silence: Some(Duration::from_secs(
            std::env::var("VMTEST_SILENCE")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(90),
        )),
    };
    let boot = qemu::boot(
        arch,
        &kernel.image,
        initrd,
        dir,
        timeout,
        load.name(),
        &opts,
    )?;
    let console = std::fs::read_to_string(&boot.console_log).unwrap_or_default();
    let (cycles, failed_cycles, first_failure, ended) = read_results(&boot.results);
    let crash = read_crash(&console);
    // A crash reported before the guest went silent is a crash (its panic did not end
    // qemu); one reported only after the NMI describes the hang.
    let before = boot
        .hang
        .as_ref()
        .and_then(|h| read_crash(console.get(..h.console_before).unwrap_or("")));
    let ending = match (&boot.hang, before, crash) {
        (_, Some(c), _) => Ending::Crashed(c),
        (Some(h), None, crash) => Ending::Hung(describe_hang(h, &console, crash.as_ref())),
        (None, _, Some(c)) => Ending::Crashed(c),
        (None, _, None) if boot.timed_out => Ending::Hung("no power-off in time".into()),
        (None, _, None) if !ended => Ending::Stopped,
        (None, _, None) => Ending::Completed,
    };
    Ok(BootResult {
        load,
        ending,
        cycles,
        failed_cycles,
        first_failure,
        secs: boot.secs,
        console: boot.console_log,
    })
}

/// Boots `kernel` `boots` times under each load, alternating, and prints the table.
#[allow(clippy::too_many_arguments)]
pub fn run(
    arch: &Arch,
    kernel: &guest::Kernel,
    initrd: &Path,
    work: &Path,
    loads: &[Load],
    boots: u32,
    secs: u32,
    timeout: Duration,
    single: bool,
) -> Result<()> {
    if boots == 0 || loads.is_empty() {
        bail!("--stress needs at least one load and --boots of 1 or more");
    }
    let label = format!(
        "{} {} ({}){}",
        arch.name,
        kernel.package,
        kernel.version,
        if single { ", single-threaded TCG" } else { "" }
    );
    println!(
        "\nvm-test: stress on {label}: {boots} boot(s) per load ({}), {secs} s of load each",
        loads
            .iter()
            .map(|l| l.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let dir = work.join(&kernel.package).join(if single {
        "stress-single-tcg"
    } else {
        "stress"
    });
    let mut results: Vec<BootResult> = Vec::new();
    for i in 1..=boots {
        for &load in loads {
            let r = boot_once(
                arch,
                kernel,
                initrd,
                &dir.join(format!("{}-{i}", load.name())),
                load,
                secs,
                timeout,
                single,
            )?;
            println!(
                "vm-test: stress {} boot {i}/{boots}: {} after {} cycle(s), {:.0} s",
                load.name(),
                match &r.ending {
                    Ending::Completed => "completed".to_string(),
                    Ending::Crashed(c) => format!("CRASHED ({})", c.describe()),
                    Ending::Hung(what) => format!("HUNG ({what})"),
                    Ending::Stopped => "stopped early (nothing on the console)".to_string(),
                },
                r.cycles,
                r.secs
            );
            results.push(r);
        }
    }
    print!("{}", table(&label, secs, loads, &results));
    Ok(())
}

fn table(label: &str, secs: u32, loads: &[Load], results: &[BootResult]) -> String {
    let mut s = format!("\nvm-test: stress results, {label}, {secs} s of load a boot\n");
    let _ = writeln!(
        s,
        "  {:<8} {:>5} {:>9} {:>7} {:>4} {:>7} {:>7} {:>13} {:>10}",
        "load",
        "boots",
        "completed",
        "crashed",
        "hung",
        "stopped",
        "cycles",
        "failed cycles",
        "s a boot"
    );
    for &load in loads {
        let rs: Vec<&BootResult> = results.iter().filter(|r| r.load == load).collect();
        let count = |f: &dyn Fn(&Ending) -> bool| rs.iter().filter(|r| f(&r.ending)).count();
        let _ = writeln!(
            s,
            "  {:<8} {:>5} {:>9} {:>7} {:>4} {:>7} {:>7} {:>13} {:>10.0}",
            load.name(),
            rs.len(),
            count(&|e| *e == Ending::Completed),
            count(&|e| matches!(e, Ending::Crashed(_))),
            count(&|e| matches!(e, Ending::Hung(_))),
            count(&|e| *e == Ending::Stopped),
            rs.iter().map(|r| r.cycles).sum::<u32>(),
            rs.iter().map(|r| r.failed_cycles).sum::<u32>(),
            rs.iter().map(|r| r.secs).sum::<f64>() / rs.len().max(1) as f64
        );
    }
    for r in results {
        if let Ending::Crashed(c) = &r.ending {
            let _ = writeln!(
                s,
                "  {} crash after {} cycle(s): {} ({})",
                r.load.name(),
                r.cycles,
                c.describe(),
                r.console.display()
            );
        } else if let Ending::Hung(what) = &r.ending {
            let _ = writeln!(
                s,
                "  {} hang after {} cycle(s): {what}",
                r.load.name(),
                r.cycles
            );
        } else if r.ending != Ending::Completed {
            let _ = writeln!(
                s,
                "  {} stopped after {} cycle(s) ({})",
                r.load.name(),
                r.cycles,
                r.console.display()
            );
        }
    }
    for &load in loads {
        if let Some(r) = results
            .iter()
            .find(|r| r.load == load && !r.first_failure.is_empty())
        {
            let _ = writeln!(s, "  {}: a cycle failed; its output:", load.name());
            for l in &r.first_failure {
                let _ = writeln!(s, "       | {l}");
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const OOPS: &str = "\
[   41.123456] BUG: kernel NULL pointer dereference, address: 0000000000000000\r
[   41.123999] #PF: supervisor instruction fetch in kernel mode\r
[   41.124000] CPU: 1 PID: 0 Comm: swapper/1 Not tainted 6.1.0-57-amd64 #1  Debian 6.1.192-3\r
[   41.124001] RIP: 0010:0x0\r
[   41.124002] Code: Unable to access opcode bytes at 0xffffffffffffffd6.\r
[   41.124003] Call Trace:\r
[   41.124004]  <TASK>\r
[   41.124005]  ? show_regs+0x6d/0x80\r
[   41.124006]  __schedule+0x3a1/0xb10\r
[   41.124007]  schedule_idle+0x26/0x40\r
[   41.124008]  do_idle+0x17c/0x2a0\r
[   41.124009]  </TASK>\r
[   41.124010] Kernel panic - not syncing: Fatal exception\r
";

    #[test]
    fn reads_an_oops_its_rip_and_its_trace() {
        let c = read_crash(OOPS).unwrap();
        assert_eq!(c.kind, "oops");
        assert_eq!(
            c.first,
            "BUG: kernel NULL pointer dereference, address: 0000000000000000"
        );
        assert_eq!(c.rip.as_deref(), Some("RIP: 0010:0x0"));
        assert_eq!(c.trace, ["__schedule", "schedule_idle", "do_idle"]);
    }

    #[test]
    fn reads_an_rcu_stall_and_ignores_a_clean_console() {
        let stall = "[   60.1] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:\n\
                     [   60.2] rcu: \t1-...!: (0 ticks this GP)\n";
        let c = read_crash(stall).unwrap();
        assert_eq!(c.kind, "stall");
        assert!(c
            .first
            .starts_with("rcu: INFO: rcu_preempt detected stalls"));
        assert_eq!(c.rip, None);
        let clean = "[    0.0] Kernel command line: console=ttyS0 panic=-1 oops=panic\n\
                     [    1.0] Freeing unused kernel image memory\n";
        assert_eq!(read_crash(clean), None);
    }

    #[test]
    fn says_where_each_cpu_was_when_the_nmi_came() {
        let console = "[ 3.1] Kernel panic - not syncing: NMI: Not continuing\n\
                       [ 3.1] CPU: 0 PID: 0 Comm: swapper/0 Not tainted 6.1.0-57-amd64 #1\n\
                       [ 3.1] Call Trace:\n[ 3.1]  <NMI>\n[ 3.1]  panic+0x118/0x2f4\n\
                       [ 3.1] RIP: 0010:native_safe_halt+0xb/0x10\n\
                       [ 3.2] NMI backtrace for cpu 0\n\
                       [ 3.2] CPU: 0 PID: 0 Comm: swapper/0 Not tainted 6.1.0-57-amd64 #1\n\
                       [ 3.2] RIP: 0010:native_safe_halt+0xb/0x10\n\
                       [ 3.2] CPU: 1 PID: 90 Comm: exe Not tainted 6.1.0-57-amd64 #1\n\
                       [ 3.2] RIP: 0010:text_poke_bp_batch+0x1a0/0x250\n\
                       [ 3.2] RIP: 0033:0x496cf7\n";
        assert_eq!(
            cpus_after_nmi(console),
            [
                "cpu0 (swapper/0) at native_safe_halt+0xb/0x10",
                "cpu1 (exe) at text_poke_bp_batch+0x1a0/0x250"
            ]
        );
        let c = read_crash(console).unwrap();
        assert_eq!(c.kind, "panic");
        assert_eq!(c.trace, ["panic"]);
    }

    #[test]
    fn a_soft_lockup_is_a_lockup_not_an_oops() {
        let c = read_crash(
            "[ 90.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [tracer:148]\n\
             [ 90.1] RIP: 0010:smp_call_function_many_cond+0x12e/0x3b0\n",
        )
        .unwrap();
        assert_eq!(c.kind, "lockup");
        assert_eq!(
            c.rip.as_deref(),
            Some("RIP: 0010:smp_call_function_many_cond+0x12e/0x3b0")
        );
    }

    #[test]
    fn counts_cycles_and_failures() {
        let text = "@@vmtest stress tracer 6.1.0 start=3\r\n@@vmtest cycle 1 rc=0 t=4.5\r\n\
                    @@vmtest cycle 2 rc=1 t=5.0\r\n@@vmtest out error: no BTF\r\n\
                    @@vmtest cycle 3 rc=0 t=6.0\r\n@@vmtest stress end cycles=3\r\n";
        let (cycles, failed, out, ended) = read_results(text);
        assert_eq!((cycles, failed, ended), (3, 1, true));
        assert_eq!(out, ["error: no BTF"]);
        assert!(!read_results("@@vmtest cycle 1 rc=0 t=1\n").3);
    }
}
