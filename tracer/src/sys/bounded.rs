//! Reading a file a user named, whole but bounded: never more than a limit, never a hang
//! on a FIFO nobody writes, never a device that reads forever (`/dev/zero`).
use std::{fs::File, io::Read as _, os::unix::fs::OpenOptionsExt as _, path::Path};

use thiserror::Error;

/// Why a file was not read. Messages leave the path to the caller.
#[derive(Debug, Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(std::io::Error),
    #[error("is a directory")]
    Directory,
    #[error("is not a regular file or a pipe")]
    NotAFile,
    #[error("is {} MiB, more than the {} MiB read at most", .size >> 20, .limit >> 20)]
    TooLarge { size: u64, limit: u64 },
    #[error("holds more than the {} MiB read at most", .limit >> 20)]
    TooLong { limit: u64 },
}

/// The bytes of `path`: a regular file up to `limit` bytes, or a pipe or FIFO
/// (`<(ssh host cat report.json)`) read to its end, up to `limit` too.
///
/// A FIFO is opened without blocking (an open for reading waits for a writer, maybe
/// forever); a FIFO without a writer then reads as empty.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(ReadError::Io)?;
    let md = f.metadata().map_err(ReadError::Io)?;
    let ft = md.file_type();
    use std::os::unix::fs::FileTypeExt as _;
    if ft.is_dir() {
        return Err(ReadError::Directory);
    }
    if ft.is_fifo() {
        // Blocking again, so a writer that is slow to write is waited for.
        rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::empty())
            .map_err(|e| ReadError::Io(e.into()))?;
    } else if !ft.is_file() {
        return Err(ReadError::NotAFile);
    } else if md.len() > limit {
        return Err(ReadError::TooLarge {
            size: md.len(),
            limit,
        });
    }
    let mut buf = Vec::new();
    read_to_limit(f, limit, &mut buf)?;
    Ok(buf)
}

fn read_to_limit(f: File, limit: u64, buf: &mut Vec<u8>) -> Result<(), ReadError> {
    f.take(limit + 1).read_to_end(buf).map_err(ReadError::Io)?;
    if buf.len() as u64 > limit {
        return Err(ReadError::TooLong { limit });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("tracer-bounded-{}-{name}", std::process::id()))
    }

    #[test]
    fn files_pipes_and_what_is_refused() {
        let p = scratch("small");
        std::fs::write(&p, b"{}").unwrap();
        assert_eq!(read_bounded(&p, 10).unwrap(), b"{}");
        assert!(matches!(
            read_bounded(&p, 1),
            Err(ReadError::TooLarge { size: 2, limit: 1 })
        ));
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(
            read_bounded(Path::new("/"), 10),
            Err(ReadError::Directory)
        ));
        assert!(matches!(
            read_bounded(Path::new("/dev/zero"), 10),
            Err(ReadError::NotAFile)
        ));
        assert!(matches!(
            read_bounded(&scratch("missing"), 10),
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound
        ));
    }

    #[test]
    fn a_fifo_without_a_writer_reads_empty_and_a_long_pipe_is_cut() {
        let p = scratch("fifo");
        let _ = std::fs::remove_file(&p);
        rustix::fs::mkfifoat(rustix::fs::CWD, &p, rustix::fs::Mode::from_raw_mode(0o600)).unwrap();
        assert_eq!(read_bounded(&p, 10).unwrap(), b"");
        std::fs::remove_file(&p).unwrap();
        // A pipe with a writer (as `<(cmd)` gives): read to its end, or refused past the
        // limit without reading on.
        for (len, ok) in [(10usize, true), (1 << 16, false)] {
            let (r, w) = rustix::pipe::pipe().unwrap();
            let path = std::path::PathBuf::from(format!("/proc/self/fd/{}", {
                use std::os::fd::AsRawFd as _;
                r.as_raw_fd()
            }));
            let writer = std::thread::spawn(move || {
                use std::io::Write as _;
                // The reader stops after 11 bytes and closes: the rest may meet EPIPE.
                let _ = File::from(w).write_all(&vec![b'x'; len]);
            });
            let got = read_bounded(&path, 10);
            drop(r);
            writer.join().unwrap();
            match got {
                Ok(v) if ok => assert_eq!(v.len(), len),
                Err(ReadError::TooLong { limit: 10 }) if !ok => {}
                other => panic!("{len} bytes: {other:?}"),
            }
        }
    }
}
