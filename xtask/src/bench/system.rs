//! Children and signals, the C calls, and BPF run-time statistics: the bench's guards.

use std::{
    fs, io,
    os::{
        fd::{FromRawFd, OwnedFd},
        unix::process::CommandExt,
    },
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicI32, Ordering},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};

// ---------------------------------------------------------------------------------------
// The C library calls xtask needs (it has no libc crate; std links the C library anyway).

pub(super) mod sys {
    extern "C" {
        pub fn signal(sig: i32, handler: usize) -> usize;
        pub fn kill(pid: i32, sig: i32) -> i32;
        pub fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
        pub fn getppid() -> i32;
        pub fn setpgid(pid: i32, pgid: i32) -> i32;
        pub fn sysconf(name: i32) -> i64;
        pub fn syscall(num: i64, ...) -> i64;
        pub fn setpriority(which: i32, who: u32, prio: i32) -> i32;
    }
    pub const PRIO_PROCESS: i32 = 0;
    pub const SIGHUP: i32 = 1;
    pub const SIGINT: i32 = 2;
    pub const SIGKILL: i32 = 9;
    pub const SIGTERM: i32 = 15;
    pub const PR_SET_PDEATHSIG: i32 = 1;
    pub const SC_CLK_TCK: i32 = 2;
    pub const ESRCH: i32 = 3;
    pub const BPF_ENABLE_STATS: i64 = 32;
    pub const BPF_STATS_RUN_TIME: u32 = 0;
    #[cfg(target_arch = "x86_64")]
    pub const SYS_BPF: Option<i64> = Some(321);
    #[cfg(any(target_arch = "aarch64", target_arch = "riscv64"))]
    pub const SYS_BPF: Option<i64> = Some(280);
    #[cfg(target_arch = "powerpc64")]
    pub const SYS_BPF: Option<i64> = Some(361);
    #[cfg(target_arch = "s390x")]
    pub const SYS_BPF: Option<i64> = Some(351);
    #[cfg(not(any(
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "powerpc64",
        target_arch = "s390x"
    )))]
    pub const SYS_BPF: Option<i64> = None;
}

pub(super) static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// SIGINT, SIGTERM and SIGHUP only set a flag: every wait polls it and unwinds through the
/// guards below (children killed and reaped, BPF statistics restored).
pub(super) fn catch_signals() {
    for sig in [sys::SIGINT, sys::SIGTERM, sys::SIGHUP] {
        // SAFETY: the handler only stores to an atomic.
        unsafe { sys::signal(sig, on_signal as extern "C" fn(i32) as usize) };
    }
}

pub(super) fn interrupted() -> Result<()> {
    match SIGNALLED.load(Ordering::SeqCst) {
        0 => Ok(()),
        sig => {
            bail!("interrupted by signal {sig}: stopped every tool and load, restored bpf_stats")
        }
    }
}

// ---------------------------------------------------------------------------------------
// Children: always killed and reaped, whatever way the bench ends.

pub(super) struct Proc {
    pub(super) label: String,
    pub(super) child: Child,
    pub(super) out: PathBuf,
    pub(super) err: PathBuf,
}

impl Proc {
    /// Starts `argv` with stdout and stderr in `logs/<label>.{out,err}`, as the leader of a
    /// new process group (so whatever it forks, like perf's pipe worker, is killed with it).
    /// The child gets SIGKILL if xtask dies without cleaning up (PR_SET_PDEATHSIG).
    pub(super) fn spawn(label: &str, argv: &[String], logs: &Path) -> Result<Proc> {
        let file: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let out = logs.join(format!("{file}.out"));
        let err = logs.join(format!("{file}.err"));
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?)
            .stderr(fs::File::create(&err).with_context(|| format!("creating {}", err.display()))?);
        let parent = std::process::id() as i32;
        // SAFETY: setpgid, prctl and getppid are async-signal-safe; nothing here allocates.
        unsafe {
            cmd.pre_exec(move || {
                if sys::setpgid(0, 0) != 0
                    || sys::prctl(sys::PR_SET_PDEATHSIG, sys::SIGKILL as u64, 0, 0, 0) != 0
                    || sys::getppid() != parent
                {
                    return Err(io::Error::from_raw_os_error(sys::ESRCH));
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", argv.join(" ")))?;
        Ok(Proc {
            label: label.to_string(),
            child,
            out,
            err,
        })
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own, not yet reaped, child.
        unsafe { sys::kill(self.pid() as i32, sig) };
    }

    /// SIGKILL to the child's whole process group, then reaps the child. Only called while
    /// the child is unreaped, so its pid (the group id) cannot belong to anyone else yet.
    pub(super) fn kill_group(&mut self) -> io::Result<ExitStatus> {
        // SAFETY: kill(2) of the process group our unreaped child leads.
        unsafe { sys::kill(-(self.pid() as i32), sys::SIGKILL) };
        let _ = self.child.kill();
        self.child.wait()
    }

    pub(super) fn stderr_tail(&self) -> String {
        let s = fs::read_to_string(&self.err).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        lines[lines.len().saturating_sub(8)..].join("\n")
    }

    /// Fails, with the tail of its stderr, if the process has already exited.
    pub(super) fn check_alive(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!(
                "{} exited early ({st}); its stderr ({}) ends:\n{}",
                self.label,
                self.err.display(),
                self.stderr_tail()
            );
        }
        Ok(())
    }

    /// Waits for the process to finish on its own; a signal to xtask or the timeout kills it.
    pub(super) fn wait(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st);
            }
            interrupted()?;
            ensure!(
                Instant::now() < end,
                "{} did not finish within {timeout:?}",
                self.label
            );
            sleep(Duration::from_millis(5));
        }
    }

    /// SIGINT (every tool here stops cleanly on it), then SIGKILL after `grace`; reaped.
    pub(super) fn stop(&mut self, grace: Duration) -> Result<ExitStatus> {
        if let Some(st) = self.child.try_wait()? {
            return Ok(st);
        }
        self.signal(sys::SIGINT);
        let end = Instant::now() + grace;
        while Instant::now() < end {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st);
            }
            sleep(Duration::from_millis(5));
        }
        eprintln!(
            "xtask bench: {} ignored SIGINT for {grace:?}: killing it",
            self.label
        );
        Ok(self.kill_group()?)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.kill_group();
        }
    }
}

// ---------------------------------------------------------------------------------------
// BPF run-time statistics.

pub(super) const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

pub(super) fn read_stats_sysctl() -> Result<String> {
    Ok(fs::read_to_string(STATS_SYSCTL)
        .with_context(|| format!("reading {STATS_SYSCTL}"))?
        .trim()
        .to_string())
}

/// Statistics on while this lives. Preferably through BPF_ENABLE_STATS: the kernel counts
/// the fd as one more user of the statistics and drops it however xtask ends, so the
/// sysctl is never touched; otherwise the sysctl is written and restored on drop.
pub(super) enum BpfStats {
    Fd(#[allow(dead_code)] OwnedFd),
    Sysctl { restore: String },
    AlreadyOn,
}

impl BpfStats {
    pub(super) fn on() -> Result<BpfStats> {
        if read_stats_sysctl()? == "1" {
            return Ok(BpfStats::AlreadyOn);
        }
        if let Some(nr) = sys::SYS_BPF {
            let attr: [u64; 1] = [sys::BPF_STATS_RUN_TIME as u64];
            // SAFETY: bpf(BPF_ENABLE_STATS, &attr, 4) reads the 4-byte `type` field only.
            let fd = unsafe { sys::syscall(nr, sys::BPF_ENABLE_STATS, attr.as_ptr(), 4i64) };
            if fd >= 0 {
                // SAFETY: the kernel just returned this fd to us and nothing else owns it.
                return Ok(BpfStats::Fd(unsafe { OwnedFd::from_raw_fd(fd as i32) }));
            }
        }
        let restore = read_stats_sysctl()?;
        fs::write(STATS_SYSCTL, "1").with_context(|| format!("writing 1 to {STATS_SYSCTL}"))?;
        Ok(BpfStats::Sysctl { restore })
    }

    pub(super) fn method(&self) -> &'static str {
        match self {
            BpfStats::Fd(_) => "BPF_ENABLE_STATS fd (kernel.bpf_stats_enabled itself untouched)",
            BpfStats::Sysctl { .. } => "kernel.bpf_stats_enabled=1, restored afterwards",
            BpfStats::AlreadyOn => "kernel.bpf_stats_enabled was already 1 (left alone)",
        }
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let BpfStats::Sysctl { restore } = self {
            if let Err(e) = fs::write(STATS_SYSCTL, restore.as_bytes()) {
                eprintln!("xtask bench: cannot restore {STATS_SYSCTL} to {restore}: {e}");
            }
        }
    }
}
