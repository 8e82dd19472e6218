//! Starting `-- COMMAND` held before exec, as perf stat does: the tracer learns the PID,
//! adds it to the traced set and opens inheriting counters on it, then lets it exec, so
//! not one instruction of the command runs untraced.
use std::{
    ffi::CString,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
};

use crate::error::TracerError;

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

/// Reaps the child if it has ended (never blocks); its shell-style exit code.
pub fn try_wait_exit(pid: u32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: valid status pointer.
    let r = unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
    (r == pid as i32).then(|| exit_code(status))
}

fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
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
