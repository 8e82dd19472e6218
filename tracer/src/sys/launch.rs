//! Starting `-- COMMAND` held before exec, as perf stat does: the tracer learns the PID,
//! adds it to the traced set and opens inheriting counters on it, then lets it exec, so
//! not one instruction of the command runs untraced.
use std::{
    os::{
        fd::{AsRawFd as _, OwnedFd},
        unix::process::CommandExt as _,
    },
    path::Path,
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
};

use crate::error::TracerError;

pub use super::child::{signal_name, try_wait_exit, wait_exit, ChildCpu, ChildState, Reaped};

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
    // SAFETY: an all-zero sigset_t is valid plain data.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: querying only (null new set), valid out pointer.
    if unsafe { libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut mask) } == 0 {
        let _ = MASK_AT_START.set(mask);
    }
    let mut ignored = 0u64;
    for sig in 1..=LAST_SIGNAL {
        if sig == libc::SIGPIPE {
            continue;
        }
        // SAFETY: an all-zero sigaction is valid plain data.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: querying only (null new action), valid out pointer.
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
        // SAFETY: SIG_IGN/SIG_DFL are valid dispositions; signal(2) is async-signal-safe.
        unsafe { libc::signal(sig, action) };
    }
    // SAFETY: `mask` is a valid sigset_t; no old set is asked for.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
}

/// Who a command runs as: a user, their primary group and every group they are in,
/// and the environment sudo gives (HOME, USER, LOGNAME), as `sudo -u USER` starts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, as initgroups(3) finds them (the primary included).
    pub groups: Vec<u32>,
    pub name: std::ffi::OsString,
    pub home: std::ffi::OsString,
}

impl RunAs {
    /// The user `uid` of the password database with primary group `gid` and the groups
    /// the group database gives them; None when no user has that uid.
    pub fn lookup(uid: u32, gid: u32) -> Option<RunAs> {
        use std::os::unix::ffi::OsStrExt as _;
        // SAFETY: passwd is plain data (integers and pointers); all-zero is valid.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0u8; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: getpwuid_r writes `pw` and strings into `buf` (its length given), and
        // sets `found` to &pw or null; nothing is kept past the call but copies.
        let r = unsafe {
            libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut found)
        };
        if r != 0 || found.is_null() || pw.pw_name.is_null() {
            return None;
        }
        // SAFETY: both point into `buf`, NUL-terminated, as getpwuid_r succeeded.
        let (name, home) = unsafe {
            (
                std::ffi::CStr::from_ptr(pw.pw_name).to_owned(),
                if pw.pw_dir.is_null() {
                    std::ffi::CString::from(c"/")
                } else {
                    std::ffi::CStr::from_ptr(pw.pw_dir).to_owned()
                },
            )
        };
        let mut groups: Vec<libc::gid_t> = vec![0; 64];
        loop {
            let mut n = groups.len() as libc::c_int;
            // SAFETY: `groups` holds `n` gids; getgrouplist writes at most `n` and sets
            // `n` to the number it found (more than given: -1, and we retry larger).
            let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
            if r >= 0 {
                groups.truncate(n.max(0) as usize);
                break;
            }
            if groups.len() >= 65536 {
                groups = vec![gid];
                break;
            }
            let len = (n.max(0) as usize).max(groups.len() * 2);
            groups.resize(len, 0);
        }
        Some(RunAs {
            uid,
            gid,
            groups,
            name: std::ffi::OsStr::from_bytes(name.as_bytes()).to_os_string(),
            home: std::ffi::OsStr::from_bytes(home.as_bytes()).to_os_string(),
        })
    }
}

/// A started child blocked before exec, in `Command`'s pre-exec hook.
pub struct Held {
    pub pid: u32,
    /// Write end of the go pipe: one byte (or its closing, if the tracer dies) ends
    /// the hold.
    go: OwnedFd,
    /// The thread blocked in `Command::spawn`, which returns once the child has exec'd
    /// (or failed to).
    spawned: std::thread::JoinHandle<std::io::Result<std::process::Child>>,
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

/// Reads exactly `buf.len()` bytes, retrying on EINTR; false on EOF or an error.
/// Async-signal-safe (a raw syscall, no allocation), so usable before exec.
fn read_full(fd: &OwnedFd, buf: &mut [u8]) -> bool {
    let mut got = 0;
    while got < buf.len() {
        match rustix::io::read(fd, &mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Writes all of `buf`, retrying on EINTR. Async-signal-safe, as [`read_full`].
fn write_full(fd: &OwnedFd, buf: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::write(fd, &buf[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Starts `argv` blocked before exec until [`Held::release`]. `as_user`: the user to
/// run it as, with their groups and environment (set in the child before the hold).
/// `output`: where its standard output and error go instead of ours (its input is then
/// /dev/null): a front end that owns the terminal keeps the command off it.
///
/// `Command::spawn` returns only after exec, so it runs on a thread of its own while the
/// child, in its pre-exec hook, sends its PID on one pipe and waits for a byte on another.
pub fn spawn_held(
    argv: &[String],
    as_user: Option<RunAs>,
    output: Option<std::fs::File>,
) -> Result<Held, TracerError> {
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
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(start_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "an argument contains a NUL byte",
        )));
    }
    let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
    let (go_r, go_w) = rustix::pipe::pipe_with(cloexec).map_err(|e| start_err(e.into()))?;
    let (pid_r, pid_w) = rustix::pipe::pipe_with(cloexec).map_err(|e| start_err(e.into()))?;
    let ignored = IGNORED_AT_START.load(Ordering::Relaxed);
    let mask = MASK_AT_START.get().copied().unwrap_or_else(|| {
        // SAFETY: an all-zero sigset_t is valid; sigemptyset makes it the empty set.
        let mut m: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `m` is a valid, writable sigset_t.
        unsafe { libc::sigemptyset(&mut m) };
        m
    });

    let mut cmd = std::process::Command::new(prog);
    cmd.args(&argv[1..]);
    // The user's identity is taken in the hook (groups first, then the group, then the
    // user, as initgroups + setgid + setuid do), so `Command` is not told a uid: it
    // would drop the supplementary groups.
    let ids = as_user.as_ref().map(|u| (u.uid, u.gid, u.groups.clone()));
    if let Some(u) = &as_user {
        cmd.env("HOME", &u.home)
            .env("USER", &u.name)
            .env("LOGNAME", &u.name);
    }
    if let Some(out) = output {
        let err = out.try_clone().map_err(start_err)?;
        cmd.stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err);
    }
    // The child's copies of our pipe ends (CLOEXEC closes them only at its exec): with
    // its copy of `go_w` open, the read below never saw EOF, and a tracer killed during
    // start-up left its held fork behind for good, holding our stdout (a pipeline hung).
    let (go_w_fd, pid_r_fd) = (go_w.as_raw_fd(), pid_r.as_raw_fd());
    let hold = move || -> std::io::Result<()> {
        // SAFETY: close(2) of two descriptors this forked child inherited and never uses.
        unsafe {
            libc::close(go_w_fd);
            libc::close(pid_r_fd);
        }
        // SAFETY: we are in the child between fork and exec; reset_signals makes only
        // async-signal-safe calls.
        unsafe { reset_signals(ignored, &mask) };
        if let Some((uid, gid, groups)) = &ids {
            // SAFETY: setgroups reads `groups.len()` gids from a live Vec; setgid and
            // setuid take plain integers. All three are async-signal-safe.
            unsafe {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        let pid = rustix::process::getpid().as_raw_nonzero().get();
        write_full(&pid_w, &pid.to_ne_bytes())?;
        let mut b = [0u8; 1];
        if !read_full(&go_r, &mut b) {
            // EOF: the tracer died (or gave up) before releasing the command. Nobody is
            // left to hear an error (`Command` would abort on its closed error pipe,
            // printing "fatal runtime error"): end quietly, as `abort` expects.
            // SAFETY: _exit(2) is async-signal-safe and runs no atexit work.
            unsafe { libc::_exit(125) };
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec and makes only
    // async-signal-safe calls (close, signal, sigprocmask, setgroups, setgid, setuid,
    // getpid, read, write); it allocates nothing and takes no lock (the io::Errors it builds are
    // plain OS codes; the groups were copied before the fork).
    unsafe { cmd.pre_exec(hold) };
    let spawned = std::thread::Builder::new()
        .name("tracer-launch".into())
        .spawn(move || cmd.spawn())
        .map_err(start_err)?;

    let mut pid = [0u8; 4];
    if !read_full(&pid_r, &mut pid) {
        // The child ended before its hook ran (setgid/setuid refused): `spawn` says why,
        // and its thread has dropped the hook with its pipe ends, hence the EOF here.
        let source = match spawned.join() {
            Ok(Err(e)) => e,
            Ok(Ok(mut child)) => {
                use std::os::unix::process::ExitStatusExt as _;
                let how = match child.wait() {
                    Ok(st) => match st.signal() {
                        Some(sig) => format!(" ({})", ChildState::Killed(sig).describe()),
                        None => format!(
                            " ({})",
                            ChildState::Exited(st.code().unwrap_or(255)).describe()
                        ),
                    },
                    Err(_) => String::new(),
                };
                std::io::Error::other(format!("the command ended before it could be held{how}"))
            }
            Err(_) => std::io::Error::other("the launch thread panicked"),
        };
        return Err(start_err(source));
    }
    Ok(Held {
        pid: u32::from_ne_bytes(pid),
        go: go_w,
        spawned,
    })
}

impl Held {
    /// Lets the child exec; returns once exec succeeded, or the reason it failed.
    pub fn release(self, argv: &[String]) -> Result<u32, TracerError> {
        let start_err = |source| TracerError::CommandStart {
            command: argv.join(" "),
            source,
        };
        let sent = write_full(&self.go, &[1]);
        drop(self.go);
        let spawned = match self.spawned.join() {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::other("the launch thread panicked")),
        };
        // `Command` reaps a child whose exec failed before it returns the error.
        spawned.map_err(start_err)?;
        // A failed write means the child is already gone: its status tells the rest.
        sent.map_err(start_err)?;
        Ok(self.pid)
    }

    /// Kills a child that will never be released (setup failed). Returns how it ended
    /// when it had ended on its own before (killed from outside while held): that, not
    /// the setup's error, is what the user needs to hear.
    pub fn abort(self) -> Option<ChildState> {
        let ended = try_wait_exit(self.pid).map(|r| r.state);
        if ended.is_none() {
            if let Some(pid) = pid_of(self.pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        drop(self.go);
        let _ = self.spawned.join();
        if ended.is_none() {
            wait_exit(self.pid);
        }
        ended
    }
}

fn pid_of(pid: u32) -> Option<rustix::process::Pid> {
    rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Longest command line the text header shows (JSON keeps argv whole).
pub const COMMAND_SHOWN: usize = 200;

/// An argument as a shell would need it to read it back: as it is when it has only
/// word characters, else in single quotes (`sh -c 'exit 3'`, not the ambiguous
/// `sh -c exit 3`).
fn shell_word(a: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| {
        !c.is_ascii() && !c.is_control() || c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c)
    };
    if !a.is_empty() && a.chars().all(plain) {
        a.into()
    } else {
        format!("'{}'", a.replace('\'', r"'\''")).into()
    }
}

/// The command line as a shell would read it back, cut at about `max` bytes (on a
/// character boundary) with how much was left out: a 180 KB command line must not flood
/// the header.
pub fn short_command(argv: &[String], max: usize) -> String {
    let s = argv
        .iter()
        .map(|a| shell_word(a))
        .collect::<Vec<_>>()
        .join(" ");
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… ({} more bytes)", &s[..cut], s.len() - cut)
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
    fn command_lines_are_quoted_as_a_shell_reads_them() {
        let a = argv(&["sh", "-c", "(sleep 1 &); it's", "", "a=b", "/x/y.z"]);
        assert_eq!(
            short_command(&a, 200),
            r"sh -c '(sleep 1 &); it'\''s' '' a=b /x/y.z"
        );
    }

    fn argv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn comm(pid: u32) -> String {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default()
    }

    #[test]
    fn the_command_execs_only_when_released_and_its_status_comes_back() {
        let a = argv(&["sh", "-c", "exit 7"]);
        let held = spawn_held(&a, None, None).expect("spawn");
        let pid = held.pid;
        // Held: still the fork of the launching thread (it has that thread's name), not sh.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(comm(pid).trim(), "tracer-launch");
        assert_eq!(try_wait_exit(pid), None, "held, not exited");
        assert_eq!(held.release(&a).expect("exec"), pid);
        assert_eq!(wait_exit(pid), 7);
    }

    #[test]
    fn a_signal_ends_the_command_as_a_shell_reports_it() {
        let a = argv(&["sh", "-c", "kill -TERM $$"]);
        let pid = spawn_held(&a, None, None).unwrap().release(&a).unwrap();
        assert_eq!(wait_exit(pid), 128 + libc::SIGTERM);
    }

    #[test]
    fn exec_failures_and_aborts_are_told_and_reaped() {
        let dir = std::env::temp_dir().join(format!("tracer-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-executable");
        std::fs::write(&file, "x").unwrap();
        let a = vec![file.to_string_lossy().into_owned()];
        let e = spawn_held(&a, None, None).unwrap().release(&a).unwrap_err();
        assert!(e.to_string().contains("Permission denied"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);

        let e = spawn_held(&argv(&["no-such-command-here"]), None, None)
            .err()
            .unwrap();
        assert!(e.to_string().contains("command not found"), "{e}");

        let a = argv(&["sleep", "100"]);
        let held = spawn_held(&a, None, None).unwrap();
        let pid = held.pid;
        held.abort();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "aborted child reaped"
        );
    }

    #[test]
    fn users_are_looked_up_with_their_groups() {
        // uid 0 is in every password database; its groups include its primary one.
        let root = RunAs::lookup(0, 0).expect("root");
        assert_eq!(root.name, "root");
        assert!(root.groups.contains(&0), "{root:?}");
        assert!(!root.home.is_empty());
        assert_eq!(RunAs::lookup(4_000_000_000, 1), None, "no such user");
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
