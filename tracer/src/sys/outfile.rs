//! The file a binary output (`tracer record -o`) goes to: a regular file, `-` or
//! `/dev/stdout` (standard output: the caller then sends its report to standard error, as
//! `perf record -o -` does), or a FIFO (opened without blocking first: with no reader
//! yet, it says that it waits for one instead of hanging silently). A terminal is
//! refused: a binary trace there is garbage on the screen.
use std::{
    fs::File,
    io::Write as _,
    os::fd::{AsFd as _, AsRawFd as _},
    path::Path,
};

use crate::sys::files;

/// An opened output.
#[derive(Debug)]
pub struct OutFile {
    pub file: File,
    /// It is the file standard output writes to.
    pub on_stdout: bool,
    /// A regular file: it can be cut back (`set_len`) and removed when nothing was
    /// written; a FIFO or a device cannot.
    pub regular: bool,
}

/// Why the output could not be opened, in a form for one line.
#[derive(Debug, thiserror::Error)]
pub enum OutError {
    #[error("cannot write the trace to {path}: {err}")]
    Open { path: String, err: std::io::Error },
    #[error("refusing to write the binary trace to a terminal ({path}): redirect it, e.g. `-o - > trace.pftrace`, or give a file")]
    Terminal { path: String },
    /// Unwritable, or refused by the protected-files rules (`files::create_output`).
    #[error("{why}")]
    Refused { why: String },
}

/// (device, inode) of an open file.
#[allow(clippy::unnecessary_cast)] // `st_dev`'s and `st_ino`'s types differ by architecture
fn identity(fd: std::os::fd::BorrowedFd<'_>) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd)
        .ok()
        .map(|st| (st.st_dev as u64, st.st_ino as u64))
}

/// Opens `path` for writing the trace (see the module's comment). `say` gets the one
/// line shown while waiting for a FIFO's reader.
pub fn open(path: &Path, say: impl Fn(&str)) -> Result<OutFile, OutError> {
    let shown = path.display().to_string();
    let open_err = |err| OutError::Open {
        path: shown.clone(),
        err,
    };
    let file = if path.as_os_str() == "-" {
        let fd = rustix::io::fcntl_dupfd_cloexec(std::io::stdout().as_fd(), 0)
            .map_err(|e| open_err(e.into()))?;
        File::from(fd)
    } else {
        // The protected_symlinks / protected_regular rules (`files::create_output`).
        let enxio = |e: &crate::error::TracerError| {
            matches!(e, crate::error::TracerError::Write { source, .. }
                if source.raw_os_error() == Some(libc::ENXIO))
        };
        let refused = |e: crate::error::TracerError| match e {
            crate::error::TracerError::Write { source, .. } => open_err(source),
            e => OutError::Refused { why: e.to_string() },
        };
        match files::create_output_nonblock(path) {
            Ok(f) => f,
            // A FIFO nobody reads yet (open(2): ENXIO with O_NONBLOCK).
            Err(e) if enxio(&e) => {
                say(&format!(
                    "tracer: record: waiting for a reader on the FIFO {shown} (nothing is traced until one opens it; Ctrl-C gives up)"
                ));
                files::create_output(path).map_err(refused)?
            }
            Err(e) => return Err(refused(e)),
        }
    };
    // Writes block again (a full pipe waits for its reader rather than failing).
    if let Ok(fl) = rustix::fs::fcntl_getfl(&file) {
        let _ = rustix::fs::fcntl_setfl(&file, fl - rustix::fs::OFlags::NONBLOCK);
    }
    // SAFETY: isatty on a descriptor we own.
    if unsafe { libc::isatty(file.as_raw_fd()) } == 1 {
        return Err(OutError::Terminal { path: shown });
    }
    let regular = rustix::fs::fstat(&file)
        .map(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        })
        .unwrap_or(false);
    let mine = identity(file.as_fd());
    let on_stdout = mine.is_some() && mine == identity(std::io::stdout().as_fd());
    Ok(OutFile {
        file,
        on_stdout,
        regular,
    })
}

/// Writes one line to standard error (never panics).
pub fn say_stderr(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_without_a_reader_is_said_then_opened_when_one_comes() {
        let dir = std::env::temp_dir().join(format!("tracer-outfile-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader_path = fifo.clone();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            std::fs::read(reader_path).unwrap()
        });
        let said = std::sync::Mutex::new(Vec::new());
        let mut out = open(&fifo, |l| said.lock().unwrap().push(l.to_string())).unwrap();
        assert!(!out.regular && !out.on_stdout);
        out.file.write_all(b"trace").unwrap();
        drop(out);
        assert_eq!(reader.join().unwrap(), b"trace");
        let said = said.into_inner().unwrap();
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("waiting for a reader"), "{said:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_regular_file_is_regular_and_not_stdout() {
        let p = std::env::temp_dir().join(format!("tracer-outfile-{}.bin", std::process::id()));
        let out = open(&p, |_| panic!("nothing to say")).unwrap();
        assert!(out.regular);
        let _ = std::fs::remove_file(&p);
    }
}
