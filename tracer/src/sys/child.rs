//! The end of `-- COMMAND`: reaping it with `wait4`, which also hands over its CPU time
//! as the kernel counts it, and what to call its end.

/// What became of `-- COMMAND` by the end of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Still running when the window closed: it goes on, untraced.
    Running { pid: u32 },
    /// Exited with this status.
    Exited(i32),
    /// Killed by this signal.
    Killed(i32),
}

impl ChildState {
    fn from_status(status: i32) -> ChildState {
        if libc::WIFSIGNALED(status) {
            ChildState::Killed(libc::WTERMSIG(status))
        } else if libc::WIFEXITED(status) {
            ChildState::Exited(libc::WEXITSTATUS(status))
        } else {
            ChildState::Exited(255)
        }
    }

    /// Shell-style exit code (128+signal when killed); none while it runs.
    pub fn exit_code(self) -> Option<i32> {
        match self {
            ChildState::Running { .. } => None,
            ChildState::Exited(c) => Some(c),
            ChildState::Killed(sig) => Some(128 + sig),
        }
    }

    /// The JSON `state`: "running", "exited" or "killed".
    pub fn name(self) -> &'static str {
        match self {
            ChildState::Running { .. } => "running",
            ChildState::Exited(_) => "exited",
            ChildState::Killed(_) => "killed",
        }
    }

    /// For the text header: "exit 0", "killed by SIGKILL", "still running, PID 42".
    pub fn describe(self) -> String {
        match self {
            ChildState::Running { pid } => format!("still running, PID {pid}"),
            ChildState::Exited(c) => format!("exit {c}"),
            ChildState::Killed(sig) => format!("killed by {}", signal_name(sig)),
        }
    }
}

/// "SIGKILL" for 9; "signal N" for the rest.
pub fn signal_name(sig: i32) -> String {
    const NAMES: &[(i32, &str)] = &[
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGINT, "SIGINT"),
        (libc::SIGQUIT, "SIGQUIT"),
        (libc::SIGILL, "SIGILL"),
        (libc::SIGTRAP, "SIGTRAP"),
        (libc::SIGABRT, "SIGABRT"),
        (libc::SIGBUS, "SIGBUS"),
        (libc::SIGFPE, "SIGFPE"),
        (libc::SIGKILL, "SIGKILL"),
        (libc::SIGUSR1, "SIGUSR1"),
        (libc::SIGSEGV, "SIGSEGV"),
        (libc::SIGUSR2, "SIGUSR2"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGALRM, "SIGALRM"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGXCPU, "SIGXCPU"),
        (libc::SIGXFSZ, "SIGXFSZ"),
        (libc::SIGSYS, "SIGSYS"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| format!("signal {sig}"), |(_, name)| name.to_string())
}

/// The command's CPU time as the kernel counts it, from `wait4`'s rusage when it was
/// reaped: user plus system time of all its threads and of the children it waited for,
/// as `time` prints it. Its sum is the scheduler's runtime to the microsecond (the
/// kernel splits `sum_exec_runtime` into the two), so a report can be checked against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildCpu {
    pub user_ns: u64,
    pub system_ns: u64,
}

impl ChildCpu {
    pub const fn new(user_ns: u64, system_ns: u64) -> ChildCpu {
        ChildCpu { user_ns, system_ns }
    }

    fn of(ru: &libc::rusage) -> ChildCpu {
        let ns = |t: libc::timeval| {
            t.tv_sec.max(0) as u64 * 1_000_000_000 + t.tv_usec.max(0) as u64 * 1_000
        };
        ChildCpu {
            user_ns: ns(ru.ru_utime),
            system_ns: ns(ru.ru_stime),
        }
    }

    pub fn total_ns(self) -> u64 {
        self.user_ns + self.system_ns
    }

    /// For a text line: "CPU 15.456 ms: 12.000 user + 3.456 system".
    pub fn describe(self) -> String {
        let ms = |ns: u64| ns as f64 / 1e6;
        format!(
            "CPU {:.3} ms: {:.3} user + {:.3} system",
            ms(self.total_ns()),
            ms(self.user_ns),
            ms(self.system_ns)
        )
    }
}

/// A reaped command: how it ended and what it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    pub state: ChildState,
    pub cpu: ChildCpu,
}

impl Reaped {
    /// "exit 0, CPU 15.456 ms: 12.000 user + 3.456 system".
    pub fn describe(self) -> String {
        format!("{}, {}", self.state.describe(), self.cpu.describe())
    }
}

/// `wait4` on `pid`: Some once it has ended (and is reaped), None while it runs (with
/// `WNOHANG`) or when it cannot be waited for.
fn wait4(pid: u32, options: i32) -> Option<Reaped> {
    let pid = i32::try_from(pid).ok().filter(|&p| p > 0)?;
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data the kernel fills in.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals for the call's duration.
        let r = unsafe { libc::wait4(pid, &mut status, options, &mut ru) };
        if r == pid {
            return Some(Reaped {
                state: ChildState::from_status(status),
                cpu: ChildCpu::of(&ru),
            });
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// Reaps the child if it has ended (never blocks).
pub fn try_wait_exit(pid: u32) -> Option<Reaped> {
    wait4(pid, libc::WNOHANG)
}

/// Waits for the child and turns its end into a shell-style exit code (128+signal);
/// 255 if it cannot be waited for.
pub fn wait_exit(pid: u32) -> i32 {
    wait4(pid, 0)
        .and_then(|r| r.state.exit_code())
        .unwrap_or(255)
}
