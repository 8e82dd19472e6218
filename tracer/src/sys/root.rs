//! Where the kernel's pseudo-filesystems are found.
//!
//! `--root DIR` makes every procfs/sysfs/debugfs path relative to DIR, so tests can
//! build fixture trees and a tree copied off another machine (e.g. a POWER LPAR) can be
//! analysed here.
use std::path::{Path, PathBuf};

/// The directory that stands for `/`.
#[derive(Clone, Debug)]
pub struct Root(PathBuf);

impl Default for Root {
    fn default() -> Self {
        Root(PathBuf::from("/"))
    }
}

impl Root {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root(dir.into())
    }

    /// True when this is the live system's `/`.
    pub fn is_live(&self) -> bool {
        self.0 == Path::new("/")
    }

    /// Maps an absolute path such as `/proc/stat` into this root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.0.join(abs.strip_prefix("/").unwrap_or(abs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_absolute_paths_under_the_root() {
        assert_eq!(
            Root::default().path("/proc/stat"),
            PathBuf::from("/proc/stat")
        );
        assert_eq!(
            Root::new("/tmp/fx").path("/proc/powerpc/vcpudispatch_stats"),
            PathBuf::from("/tmp/fx/proc/powerpc/vcpudispatch_stats")
        );
        assert!(Root::default().is_live());
        assert!(!Root::new("/tmp/fx").is_live());
    }
}
