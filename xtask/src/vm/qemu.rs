//! Boots one guest under qemu (software emulation: this machine's KVM does not run
//! nested guests) with a deadline, showing the guest's steps as they end.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{protocol, Arch};

/// What a boot left behind.
pub struct Boot {
    /// The results port: the framed step output.
    pub results: String,
    pub console_log: PathBuf,
    pub results_log: PathBuf,
    pub secs: f64,
    pub timed_out: bool,
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
    /// qemu's niceness: the checks' boots ask for -10 (root only), the stress boots for
    /// +10 so they do not starve the machine's other work.
    pub nice: i32,
}

impl Options {
    /// The checks' boots.
    pub fn checks(cmdline: &str) -> Options {
        Options {
            cmdline: cmdline.to_string(),
            quiet: true,
            nice: -10,
        }
    }
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
    c.args(arch.qemu_args)
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
            "console={} panic=-1{} vmtest.out={} {} {}",
            arch.console,
            if opts.quiet { " quiet" } else { "" },
            arch.results_port,
            arch.cmdline,
            opts.cmdline
        ))
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-serial")
        .arg(format!("file:{}", results.display()));
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
    })
}
