//! Boots one guest under qemu (software emulation: this machine's KVM does not run
//! nested guests) with a deadline, showing the guest's steps as they end.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::protocol;
use crate::arch::Arch;

/// What a boot left behind.
pub struct Boot {
    /// The results port: the framed step output.
    pub results: String,
    pub console_log: PathBuf,
    pub results_log: PathBuf,
    pub secs: f64,
    pub timed_out: bool,
    /// What was seen inside a guest declared hung by `Options::silence`.
    pub hang: Option<Hang>,
}

/// A look inside a hung guest before it is killed, through qemu's monitor.
#[derive(Clone, Debug, Default)]
pub struct Hang {
    /// Host CPU qemu used over two seconds, in % of one CPU: about 200 with both vCPUs
    /// spinning, near 0 with both halted or qemu itself stuck.
    pub qemu_cpu_pct: f64,
    /// Each vCPU's instruction pointer (`info registers -a`), in vCPU order.
    pub rips: Vec<u64>,
    /// The console's length before the look: what the guest said before the NMI.
    pub console_before: usize,
    /// Where the monitor's output was saved (it also injected an NMI, whose report, if the
    /// guest could still make one, is on the console).
    pub log: PathBuf,
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(") ")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// The `RIP=` of every vCPU in `info registers -a` output.
pub fn rips(monitor: &str) -> Vec<u64> {
    monitor
        .split("RIP=")
        .skip(1)
        .filter_map(|r| u64::from_str_radix(r.get(..16)?, 16).ok())
        .collect()
}

/// Sends monitor commands one by one, collecting what qemu answers.
fn monitor(sock: &Path, commands: &[&str]) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::os::unix::net::UnixStream::connect(sock) else {
        return format!("cannot connect to {}\n", sock.display());
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(1500)));
    let mut out = String::new();
    let mut buf = [0u8; 65536];
    let mut drain = |s: &mut std::os::unix::net::UnixStream, out: &mut String| {
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    drain(&mut s, &mut out);
    for c in commands {
        let _ = s.write_all(format!("{c}\n").as_bytes());
        drain(&mut s, &mut out);
    }
    out
}

/// Looks inside a hung guest: qemu's CPU use, the vCPUs' registers, then an NMI (with
/// `unknown_nmi_panic` on the kernel command line the guest panics with a backtrace, if
/// it still can), waiting a little for the guest to report and end.
fn look_inside(child: &mut std::process::Child, dir: &Path) -> Hang {
    let console_before = std::fs::metadata(dir.join("console.log")).map_or(0, |m| m.len() as usize);
    let pid = child.id();
    let t0 = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(2));
    let t1 = cpu_ticks(pid);
    // Linux's USER_HZ is 100 on every architecture qemu runs here.
    let qemu_cpu_pct = match (t0, t1) {
        (Some(a), Some(b)) => (b.saturating_sub(a)) as f64 / 2.0,
        _ => f64::NAN,
    };
    let sock = dir.join("monitor.sock");
    let text = monitor(&sock, &["info cpus", "info registers -a", "nmi"]);
    let log = dir.join("hang.log");
    let _ = std::fs::write(
        &log,
        format!("qemu used {qemu_cpu_pct:.0}% of a CPU over 2 s\n{text}"),
    );
    for _ in 0..60 {
        if matches!(child.try_wait(), Ok(Some(_))) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Hang {
        console_before,
        qemu_cpu_pct,
        rips: rips(&text),
        log,
    }
}

impl Boot {
    /// The last `n` lines of the kernel console, for a guest that died or hung.
    pub fn console_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.console_log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// How a guest is booted beyond its kernel and initramfs.
#[derive(Clone, Debug)]
pub struct Options {
    /// More kernel command line.
    pub cmdline: String,
    /// `quiet` on the kernel command line (the checks' boots); the stress boots keep the
    /// whole console, to see an oops and what led to it.
    pub quiet: bool,
    /// qemu's niceness: the checks' boots on the host's clock ask for -10 (root only),
    /// the stress boots for +10 so they do not starve the machine's other work.
    pub nice: i32,
    /// Declare the guest hung once its results port has been silent this long, and look
    /// inside before killing it (see `Hang`); None: only the timeout ends a boot.
    pub silence: Option<Duration>,
    /// One host thread for all vCPUs (`-accel tcg,thread=single`) instead of one each:
    /// no vCPU runs while another modifies code, which tells an emulator race from a
    /// guest one.
    pub single_thread_tcg: bool,
    /// More `-M` properties, e.g. `virtualization=on` (arm64: the kernel at EL2).
    pub machine: Option<&'static str>,
    /// qemu's `-icount shift=N`: the guest's clocks advance 2^N ns per instruction it
    /// executes, not with the host's clock (see [`ICOUNT_SHIFT`]). Implies one host thread
    /// for all vCPUs.
    pub icount: Option<u8>,
}

/// The checks' boots count time in instructions (`-icount shift=3,sleep=off`: 8 ns an
/// instruction, idle time skipped). On the host's clock, every time the host preempted a
/// vCPU thread the guest saw the time pass inside whatever scheduler path it was in, and
/// per-thread run-queue time came out 5-47% off schedstat in 2-7 of 57 checks a run
/// (2026-12-01, five runs); counted in instructions, the same checks came within 1.6%
/// (x86_64 6.12, every probe mode). `VMTEST_ICOUNT=off` boots on the host's clock.
pub const ICOUNT_SHIFT: u8 = 3;

/// The shift the checks' boots use: [`ICOUNT_SHIFT`] unless `VMTEST_ICOUNT` says
/// another (`off`: none).
pub fn icount_shift() -> Option<u8> {
    match std::env::var("VMTEST_ICOUNT") {
        Ok(v) if v == "off" => None,
        Ok(v) => v.parse().ok().or(Some(ICOUNT_SHIFT)),
        Err(_) => Some(ICOUNT_SHIFT),
    }
}

impl Options {
    /// The checks' boots. An oops, a soft lockup or an RCU stall panics the guest (and
    /// so ends qemu) at once: a guest caught in qemu 7.2's stale-int3 loop otherwise sat
    /// out the whole timeout (300 s). The console must say what the guest died of, since
    /// only the known stale-int3 death boots it again (`tcg`): a soft lockup prints every
    /// CPU's backtrace, and a guest silent for VMTEST_SILENCE seconds (default 180; whole
    /// boots take 31-81 s, tests/vm/README.md) is looked inside, its NMI panicking it with
    /// the backtraces.
    pub fn checks(cmdline: &str, single_thread_tcg: bool) -> Options {
        let icount = icount_shift();
        Options {
            cmdline: format!(
                "oops=panic softlockup_panic=1 sysctl.kernel.panic_on_rcu_stall=1 \
                 softlockup_all_cpu_backtrace=1 unknown_nmi_panic=1 panic_print=64 {cmdline}"
            ),
            quiet: true,
            // Counted in instructions, the guest's figures do not depend on the host's
            // load: no need to crowd the host's other work out.
            nice: if icount.is_some() { 0 } else { -10 },
            silence: Some(Duration::from_secs(
                std::env::var("VMTEST_SILENCE")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(180),
            )),
            single_thread_tcg,
            machine: None,
            icount,
        }
    }
}

/// `major.minor` of `PROGRAM --version` ("QEMU emulator version 7.2.22 (Debian ...)").
/// Before 8.1 (commit deba78709ae8, "accel/tcg: Always lock pages before translation")
/// multi-threaded TCG can keep a stale translation of code another vCPU just rewrote;
/// tests/vm/README.md says what that does to an x86_64 guest.
pub fn version(program: &str) -> Option<(u32, u32)> {
    let out = Command::new(program).arg("--version").output().ok()?;
    parse_version(&String::from_utf8_lossy(&out.stdout))
}

fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text.split("version ").nth(1)?.split_whitespace().next()?;
    let mut parts = v.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The qemu command line. The checks' boots run qemu at nice -10 when root: the guest's
/// clocks follow the host's, so whenever the host preempts a vCPU thread the guest sees
/// time pass inside whatever kernel path it was emulating; on a busy host that blurs the
/// very slice and wait boundaries the checks compare.
pub fn command(
    arch: &Arch,
    kernel: &Path,
    initrd: &Path,
    console: &Path,
    results: &Path,
    opts: &Options,
) -> Command {
    let mut c = if opts.nice > 0 || (opts.nice < 0 && crate::is_root().unwrap_or(false)) {
        let mut c = Command::new("nice");
        c.args(["-n", &opts.nice.to_string(), arch.qemu]);
        c
    } else {
        Command::new(arch.qemu)
    };
    let mut after_m = false;
    c.args(arch.qemu_args.iter().map(|a| {
        let machine = std::mem::replace(&mut after_m, *a == "-M");
        match (machine, opts.machine) {
            (true, Some(more)) => format!("{a},{more}"),
            _ if (opts.single_thread_tcg || opts.icount.is_some()) && *a == "tcg" => {
                "tcg,thread=single".into()
            }
            _ => a.to_string(),
        }
    }))
    .args(
        opts.icount
            .iter()
            .flat_map(|shift| ["-icount".to_string(), format!("shift={shift},sleep=off")]),
    )
    .args([
        "-smp",
        "2",
        "-m",
        "1024",
        "-nodefaults",
        "-display",
        "none",
        "-no-reboot",
    ])
    .arg("-kernel")
    .arg(kernel)
    .arg("-initrd")
    .arg(initrd)
    .arg("-append")
    .arg(format!(
        "console={} panic=-1{} vmtest.out={} {}{} {}",
        arch.console,
        if opts.quiet { " quiet" } else { "" },
        arch.results_port,
        arch.cmdline,
        match opts.icount {
            Some(_) if !arch.icount_cmdline.is_empty() => format!(" {}", arch.icount_cmdline),
            _ => String::new(),
        },
        opts.cmdline
    ))
    .arg("-serial")
    .arg(format!("file:{}", console.display()));
    match arch.results_device {
        None => c.arg("-serial").arg(format!("file:{}", results.display())),
        Some(device) => c
            .arg("-chardev")
            .arg(format!("file,id=results,path={}", results.display()))
            .arg("-device")
            .arg(format!("{device},chardev=results")),
    };
    if opts.silence.is_some() {
        if let Some(dir) = console.parent() {
            c.arg("-monitor").arg(format!(
                "unix:{},server=on,wait=off",
                dir.join("monitor.sock").display()
            ));
        }
    }
    c
}

/// Boots and waits for the guest to power off, or kills it at `timeout`.
pub fn boot(
    arch: &Arch,
    kernel: &Path,
    initrd: &Path,
    dir: &Path,
    timeout: Duration,
    label: &str,
    opts: &Options,
) -> Result<Boot> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let console_log = dir.join("console.log");
    let results_log = dir.join("results.log");
    let qemu_log = dir.join("qemu.log");
    for f in [&console_log, &results_log] {
        let _ = std::fs::remove_file(f);
    }
    let mut cmd = command(arch, kernel, initrd, &console_log, &results_log, opts);
    println!("vm-test: $ {}", crate::cmd::describe(&cmd));
    let log = std::fs::File::create(&qemu_log)?;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("cannot start {}", arch.qemu))?;
    let mut shown = 0;
    let mut timed_out = false;
    let mut hang = None;
    let mut heard = (0, Instant::now());
    loop {
        let done = child.try_wait()?.is_some();
        // Show the steps that ended since the last look.
        let text = std::fs::read_to_string(&results_log).unwrap_or_default();
        let g = protocol::parse(&text);
        for s in g.steps.iter().filter(|s| s.rc.is_some()).skip(shown) {
            println!(
                "vm-test: [{label}] {:<24} exit {:<3} {:6.1} s  (guest uptime {:.1} s)",
                s.name,
                s.rc.unwrap_or(-1),
                s.secs(),
                s.t1
            );
            shown += 1;
        }
        if done {
            break;
        }
        if text.len() != heard.0 {
            heard = (text.len(), Instant::now());
        }
        if let Some(silence) = opts.silence {
            if heard.1.elapsed() > silence {
                println!(
                    "vm-test: [{label}] nothing from the guest for {} s: looking inside, then killing qemu",
                    silence.as_secs()
                );
                hang = Some(look_inside(&mut child, dir));
                let _ = child.kill();
                let _ = child.wait();
                timed_out = true;
                break;
            }
        }
        if start.elapsed() > timeout {
            println!(
                "vm-test: [{label}] no power-off after {} s: killing qemu",
                timeout.as_secs()
            );
            let _ = child.kill();
            let _ = child.wait();
            timed_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let qemu_out = std::fs::read_to_string(&qemu_log).unwrap_or_default();
    for line in qemu_out
        .lines()
        .filter(|l| !l.contains("TCG doesn't support requested feature"))
    {
        println!("vm-test: [{label}] qemu: {line}");
    }
    Ok(Boot {
        results: std::fs::read_to_string(&results_log).unwrap_or_default(),
        console_log,
        results_log,
        secs: start.elapsed().as_secs_f64(),
        timed_out,
        hang,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checks' boots count time in instructions on one thread; x86_64 boots on one CPU
    /// then (its init onlines the other); the stress boots keep the host's clock.
    #[test]
    fn the_checks_boots_count_time_in_instructions() {
        let p = std::path::Path::new("/x");
        let mut opts = Options::checks("", false);
        opts.icount = Some(ICOUNT_SHIFT);
        let c = command(&crate::arch::X86_64, p, p, p, p, &opts);
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
        let has = |a: &str| args.iter().any(|x| x.contains(a));
        assert!(
            has("tcg,thread=single") && has("shift=3,sleep=off"),
            "{args:?}"
        );
        assert!(has("maxcpus=1 vmtest.online"), "{args:?}");
        let c = command(&crate::arch::AARCH64, p, p, p, p, &opts);
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
        assert!(!args.iter().any(|x| x.contains("maxcpus")), "{args:?}");
        opts.icount = None;
        let c = command(&crate::arch::X86_64, p, p, p, p, &opts);
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into()).collect();
        assert!(!args
            .iter()
            .any(|x| x.contains("icount") || x.contains("maxcpus")));
    }

    #[test]
    fn reads_qemus_version() {
        let v = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\nCopyright";
        assert_eq!(parse_version(v), Some((7, 2)));
        assert_eq!(parse_version("QEMU emulator version 10.0.3"), Some((10, 0)));
        assert_eq!(parse_version("nonsense"), None);
        assert!(Some((7, 2)) < Some((8, 1)) && (8, 2) >= (8, 1));
    }

    #[test]
    fn reads_every_vcpus_rip() {
        let text = "CPU#0\r\nRAX=0000000000000000 RBX=ffffffff82a0e940\r\n\
                    RIP=ffffffff81c3f1a4 RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\r\n\
                    CPU#1\r\nRIP=ffffffff8104d2b0 RFL=00000002 [-------] CPL=0\r\n";
        assert_eq!(rips(text), [0xffffffff81c3f1a4, 0xffffffff8104d2b0]);
        assert!(rips("(qemu) ").is_empty());
    }
}
