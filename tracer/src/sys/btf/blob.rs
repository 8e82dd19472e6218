//! The bytes of a BTF file: the kernel's own pages where it lets them be mapped, else a
//! copy.
//!
//! `/sys/kernel/btf/vmlinux` can be mapped read-only and private since v6.16 ("btf:
//! Allow mmap of vmlinux btf"). Reading it instead takes one `read` per 4 KiB page (a
//! sysfs binary attribute: ~1,340 calls for 5.5 MB) into freshly zeroed memory, about
//! 3 ms of `tracer run`'s start-up here. Only sysfs files are mapped: a regular file
//! (`--root`, fixtures) could change or shrink under the mapping (SIGBUS); those, and
//! the kernel's BTF before v6.16 or a module's, are read.
use std::fs::File;
use std::ops::Deref;
use std::path::Path;

/// `SYSFS_MAGIC` (linux/magic.h), `statfs::f_type` of sysfs.
const SYSFS_MAGIC: i64 = 0x6265_6572;

/// A BTF blob held in memory.
#[derive(Debug)]
pub(super) enum Blob {
    Copy(Vec<u8>),
    /// A private read-only mapping, unmapped on drop.
    Mapped {
        ptr: *const u8,
        len: usize,
    },
}

// SAFETY: the mapping is read-only and owned by this value alone; nothing writes it.
unsafe impl Send for Blob {}
// SAFETY: as above; shared references only read.
unsafe impl Sync for Blob {}

impl Blob {
    /// Maps the file, or reads it where mapping is refused.
    pub(super) fn open(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        let len = file.metadata()?.len() as usize;
        // f_type's integer type differs between libc targets.
        #[allow(clippy::unnecessary_cast)]
        let sysfs = rustix::fs::fstatfs(&file).is_ok_and(|s| s.f_type as i64 == SYSFS_MAGIC);
        if len > 0 && sysfs {
            // SAFETY: a fresh private read-only mapping of a whole sysfs file, aliased by
            // no other Rust value; the kernel's BTF is fixed at boot (a module's cannot
            // be mapped) and never shrinks.
            let mapped = unsafe {
                rustix::mm::mmap(
                    std::ptr::null_mut(),
                    len,
                    rustix::mm::ProtFlags::READ,
                    rustix::mm::MapFlags::PRIVATE,
                    &file,
                    0,
                )
            };
            if let Ok(ptr) = mapped {
                return Ok(Blob::Mapped {
                    ptr: ptr.cast_const().cast(),
                    len,
                });
            }
        }
        let mut data = Vec::with_capacity(len);
        std::io::Read::read_to_end(&mut &file, &mut data)?;
        Ok(Blob::Copy(data))
    }
}

impl Deref for Blob {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Blob::Copy(v) => v,
            // SAFETY: the mapping lives as long as self and holds len readable bytes.
            Blob::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
        }
    }
}

impl Drop for Blob {
    fn drop(&mut self) {
        if let Blob::Mapped { ptr, len } = *self {
            // SAFETY: the mapping made in open(), unmapped once; no slice of it outlives
            // self (Deref borrows self).
            let _ = unsafe { rustix::mm::munmap(ptr.cast_mut().cast(), len) };
        }
    }
}
