//! Standard output that never panics: a reader that went away ends the run quietly.
use crate::error::TracerError;

/// Writes one report and a newline to standard output and flushes it. A reader that went
/// away is [`TracerError::OutputClosed`] (the run then ends quietly, as `yes | head -1`
/// does); any other failure (a full disk, /dev/full) is [`TracerError::Output`]. Never
/// println!, which panics on both.
pub fn emit(text: &str) -> Result<(), TracerError> {
    emit_raw(&format!("{text}\n"))
}

/// [`emit`] without the newline.
pub fn emit_raw(text: &str) -> Result<(), TracerError> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => TracerError::OutputClosed,
            _ => TracerError::Output(e),
        })
}

/// Whether standard output is a pipe whose reader has gone (`tracer run | true`): the
/// run can end then rather than at its next report.
pub fn stdout_closed() -> bool {
    // SAFETY: fstat and poll on fd 1 with valid out pointers; a zero timeout.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(1, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            return false;
        }
        let mut p = libc::pollfd {
            fd: 1,
            events: 0,
            revents: 0,
        };
        libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLERR != 0
    }
}

/// Exit code when standard output was closed by its reader: 128+SIGPIPE, what a shell
/// reports for a tool SIGPIPE ended (`yes | head -1` under `set -o pipefail`).
pub const EXIT_OUTPUT_CLOSED: i32 = 128 + libc::SIGPIPE;
