//! Reading the log: the debugfs `cpu-N` files (mounting debugfs when missing), whole
//! entries across short reads, and the timebase from /proc/cpuinfo.
use std::{
    fs::{self, File},
    io::{self, Read as _},
    path::PathBuf,
};

use crate::{
    error::TracerError,
    pseries::{
        dtl::{
            analyze::DtlAnalyzer,
            decode::{decode_whole, parse_timebase, ENTRY_SIZE, RING_ENTRIES},
        },
        vcpudispatch,
    },
    sys::root::Root,
};

/// Where the timebase frequency is found.
pub const CPUINFO_PATH: &str = "/proc/cpuinfo";
/// Entries asked for per read(): more than a ring, so a full ring is recognisable.
const READ_ENTRIES: usize = 4 * RING_ENTRIES;

/// Reads the timebase frequency from /proc/cpuinfo.
pub fn read_timebase(root: &Root) -> Result<u64, TracerError> {
    let path = root.path(CPUINFO_PATH);
    let text = vcpudispatch::read_text(&path)?;
    parse_timebase(&text, &path)
}

/// One open `cpu-N` file and its undecoded tail.
#[derive(Debug)]
pub struct DtlFile {
    pub cpu: u32,
    pub path: PathBuf,
    file: File,
    pending: Vec<u8>,
}

/// The `cpu-N` files of the debugfs DTL directory, sorted by CPU.
pub fn list_cpu_files(root: &Root) -> Result<Vec<(u32, PathBuf)>, TracerError> {
    let dir = root.path(vcpudispatch::DTL_DIR);
    let rd = fs::read_dir(&dir).map_err(|source| TracerError::Read {
        path: dir.clone(),
        source: if source.kind() == io::ErrorKind::NotFound {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no debugfs DTL here: is debugfs mounted (mount -t debugfs none /sys/kernel/debug) \
                 and the kernel built with CONFIG_DTL?",
            )
        } else {
            source
        },
    })?;
    let mut out: Vec<(u32, PathBuf)> = rd
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let cpu = name.to_str()?.strip_prefix("cpu-")?.parse().ok()?;
            Some((cpu, e.path()))
        })
        .collect();
    out.sort();
    if out.is_empty() {
        return Err(TracerError::Malformed {
            path: dir,
            why: "no cpu-N files".into(),
        });
    }
    Ok(out)
}

/// Mounts debugfs on the live system when the DTL directory is missing (as perf does).
pub fn ensure_debugfs(root: &Root) {
    if !root.is_live() || root.path(vcpudispatch::DTL_DIR).exists() {
        return;
    }
    let flags = rustix::mount::MountFlags::empty();
    if let Err(e) = rustix::mount::mount("none", "/sys/kernel/debug", "debugfs", flags, None) {
        log::debug!("mounting debugfs: {}", io::Error::from(e));
    }
}

/// Opens every `cpu-N` file; EBUSY says which other DTL consumer is active.
pub fn open_all(root: &Root) -> Result<Vec<DtlFile>, TracerError> {
    list_cpu_files(root)?
        .into_iter()
        .map(|(cpu, path)| match File::open(&path) {
            Ok(file) => Ok(DtlFile {
                cpu,
                path,
                file,
                pending: Vec::new(),
            }),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(TracerError::DtlBusy {
                path,
                hint: vcpudispatch::busy_hint(root),
            }),
            Err(source) => Err(TracerError::Read { path, source }),
        })
        .collect()
}

/// Reads what each file has now and feeds it to `an`. Returns the entries read.
pub fn read_available(
    files: &mut [DtlFile],
    an: &mut DtlAnalyzer,
    live: bool,
) -> Result<u64, TracerError> {
    let mut buf = vec![0u8; READ_ENTRIES * ENTRY_SIZE];
    let mut total = 0u64;
    for f in files.iter_mut() {
        // Bounded so a file that never drains (a fast log) cannot starve the others.
        for _ in 0..64 {
            let n = match f.file.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(TracerError::Read {
                        path: f.path.clone(),
                        source,
                    })
                }
            };
            if n == 0 {
                break;
            }
            f.pending.extend_from_slice(&buf[..n]);
            let whole = f.pending.len() / ENTRY_SIZE * ENTRY_SIZE;
            let entries = decode_whole(&f.pending[..whole]);
            f.pending.drain(..whole);
            an.feed(f.cpu, &entries, live && n / ENTRY_SIZE >= RING_ENTRIES);
            total += entries.len() as u64;
            if n < buf.len() {
                break;
            }
        }
    }
    Ok(total)
}

/// After the last read: a partial entry left over is a short entry.
pub fn check_complete(files: &[DtlFile]) -> Result<(), TracerError> {
    for f in files {
        if !f.pending.is_empty() {
            return Err(TracerError::Malformed {
                path: f.path.clone(),
                why: format!(
                    "ends with a short entry of {} bytes ({ENTRY_SIZE} expected)",
                    f.pending.len()
                ),
            });
        }
    }
    Ok(())
}
