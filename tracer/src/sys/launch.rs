//! Starting `-- COMMAND` held before exec, as perf stat does: the tracer learns the PID,
//! adds it to the traced set and opens inheriting counters on it, then lets it exec, so
//! not one instruction of the command runs untraced.
use std::{
    ffi::CString,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
};

use crate::error::TracerError;

/// Signals (bit n-1 for signal n) that were ignored when the tracer started, as `nohup`
/// leaves SIGHUP: the command inherits them as it would without the tracer. SIGPIPE is
/// never among them, since Rust's runtime ignores it before `main` runs.
static IGNORED_AT_START: AtomicU64 = AtomicU64::new(0);

/// The signal mask the tracer started with (normally empty), for the command.
static MASK_AT_START: OnceLock<libc::sigset_t> = OnceLock::new();

/// Highest signal number on Linux (SIGRTMAX).
const LAST_SIGNAL: i32 = 64;

/// Records the signal dispositions and mask the tracer was started with; call first in
/// `main`, before any handler is installed.
pub fn note_inherited_state() {
    // SAFETY: an all-zero sigset_t is valid; querying only (null new set).
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) } == 0 {
        let _ = MASK_AT_START.set(mask);
    }
    let mut ignored = 0u64;
    for sig in 1..=LAST_SIGNAL {
        if sig == libc::SIGPIPE {
            continue;
        }
        // SAFETY: querying only (null new action), valid out pointer.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0
            && old.sa_sigaction == libc::SIG_IGN
        {
            ignored |= 1 << (sig - 1);
        }
    }
    IGNORED_AT_START.store(ignored, Ordering::Relaxed);
}

/// Whether `sig` was ignored when the tracer started (then the tracer leaves it so).
pub fn ignored_at_start(sig: i32) -> bool {
    (1..=LAST_SIGNAL).contains(&sig)
        && IGNORED_AT_START.load(Ordering::Relaxed) & (1 << (sig - 1)) != 0
}

/// Gives the child the signal state the tracer itself was given, as if the user had
/// started the command directly: every disposition back to default (Rust ignores
/// SIGPIPE, which `exec` would otherwise pass on: `yes | head -1` would print "Broken
/// pipe"), except those ignored when the tracer started (nohup's SIGHUP); the mask the
/// tracer started with (normally empty).
///
/// # Safety
/// Only async-signal-safe calls: meant for the child between fork and exec.
unsafe fn reset_signals(ignored: u64, mask: &libc::sigset_t) {
    for sig in 1..=LAST_SIGNAL {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let action = if ignored & (1 << (sig - 1)) != 0 {
            libc::SIG_IGN
        } else {
            libc::SIG_DFL
        };
        // Signals glibc reserves (32, 33) refuse a change: nothing to restore there.
        libc::signal(sig, action);
    }
    libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
}

/// A forked child blocked before exec.
pub struct Held {
    pub pid: u32,
    go: OwnedFd,
    exec_err: OwnedFd,
}

fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh fds we own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Whether `prog` can be executed: a path, or found in PATH.
fn resolvable(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).is_file();
    }
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        .unwrap_or(false)
}

/// Forks `argv`, blocked until [`Held::release`]. `as_user` = (uid, gid) to run it as.
pub fn spawn_held(argv: &[String], as_user: Option<(u32, u32)>) -> Result<Held, TracerError> {
    let command = argv.join(" ");
    let start_err = |source| TracerError::CommandStart {
        command: command.clone(),
        source,
    };
    let prog = argv.first().ok_or_else(|| {
        start_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "empty command",
        ))
    })?;
    if !resolvable(prog) {
        return Err(start_err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "command not found",
        )));
    }
    let cargs: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|e| start_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let (go_r, go_w) = pipe_cloexec().map_err(start_err)?;
    let (err_r, err_w) = pipe_cloexec().map_err(start_err)?;
    let ignored = IGNORED_AT_START.load(Ordering::Relaxed);
    let mask = MASK_AT_START.get().copied().unwrap_or_else(|| {
        // SAFETY: an all-zero sigset_t is valid; sigemptyset makes it the empty set.
        let mut m: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe { libc::sigemptyset(&mut m) };
        m
    });

    // SAFETY: the child only calls async-signal-safe functions before exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(start_err(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        unsafe {
            let mut b = 0u8;
            // Wait for the go byte; EOF means the tracer died first.
            if libc::read(go_r.as_raw_fd(), &mut b as *mut u8 as *mut _, 1) != 1 {
                libc::_exit(126);
            }
            reset_signals(ignored, &mask);
            if let Some((uid, gid)) = as_user {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    let e = *libc::__errno_location();
                    libc::write(err_w.as_raw_fd(), &e as *const i32 as *const _, 4);
                    libc::_exit(127);
                }
            }
            libc::execvp(ptrs[0], ptrs.as_ptr());
            let e = *libc::__errno_location();
            libc::write(err_w.as_raw_fd(), &e as *const i32 as *const _, 4);
            libc::_exit(127);
        }
    }
    drop(go_r);
    drop(err_w);
    Ok(Held {
        pid: pid as u32,
        go: go_w,
        exec_err: err_r,
    })
}

impl Held {
    /// Lets the child exec; returns once exec succeeded, or the reason it failed.
    pub fn release(self, argv: &[String]) -> Result<u32, TracerError> {
        let b = 1u8;
        // SAFETY: valid fds and buffers.
        unsafe {
            libc::write(self.go.as_raw_fd(), &b as *const u8 as *const _, 1);
        }
        drop(self.go);
        let mut e = 0i32;
        let n = unsafe { libc::read(self.exec_err.as_raw_fd(), &mut e as *mut i32 as *mut _, 4) };
        if n == 4 {
            wait_exit(self.pid);
            return Err(TracerError::CommandStart {
                command: argv.join(" "),
                source: std::io::Error::from_raw_os_error(e),
            });
        }
        Ok(self.pid)
    }

    /// Kills a child that will never be released (setup failed).
    pub fn abort(self) {
        // SAFETY: our own child.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        drop(self.go);
        wait_exit(self.pid);
    }
}

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

/// Longest command line the text header shows (JSON keeps argv whole).
pub const COMMAND_SHOWN: usize = 200;

/// The command line joined by spaces, cut at about `max` bytes (on a character boundary)
/// with how much was left out: a 180 KB command line must not flood the header.
pub fn short_command(argv: &[String], max: usize) -> String {
    let s = argv.join(" ");
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} more bytes)", &s[..cut], s.len() - cut)
}

/// Reaps the child if it has ended (never blocks).
pub fn try_wait_exit(pid: u32) -> Option<ChildState> {
    let mut status = 0;
    // SAFETY: valid status pointer.
    let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
    (r == pid as i32).then(|| ChildState::from_status(status))
}

fn exit_code(status: i32) -> i32 {
    ChildState::from_status(status).exit_code().unwrap_or(255)
}

/// Waits for the child and turns its end into a shell-style exit code (128+signal).
pub fn wait_exit(pid: u32) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: valid status pointer.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r == pid as i32 {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return 255;
        }
    }
    exit_code(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_command_lines_are_cut_with_the_count() {
        let argv = vec!["prog".to_string(), "é".repeat(200)];
        let s = short_command(&argv, 200);
        assert!(s.len() < 220, "{s}");
        assert!(s.ends_with("… (206 more bytes)"), "{s}");
        assert_eq!(short_command(&argv[..1], 200), "prog");
    }

    #[test]
    fn child_states_read_as_a_shell_would() {
        assert_eq!(ChildState::Killed(9).exit_code(), Some(137));
        assert_eq!(ChildState::Killed(9).describe(), "killed by SIGKILL");
        assert_eq!(ChildState::Exited(3).describe(), "exit 3");
        assert_eq!(ChildState::Running { pid: 7 }.exit_code(), None);
        assert_eq!(ChildState::Running { pid: 7 }.name(), "running");
    }
}
