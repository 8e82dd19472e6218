//! The `--cgroup` target's quota throttling and CPU pressure, read at the window's open
//! and at each report from the files `sys::cgroups` knows (v2, or the v1 `cpu`
//! hierarchy's same path on hybrid machines).
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use crate::model::{cgroup_cpu::CgroupCpuRead, words};
use crate::sys::{cgroups::CpuFiles, root::Root};

pub(super) struct CgroupCpuSource {
    files: CpuFiles,
    /// Below the mounts.
    path: Vec<u8>,
    /// As reports show it.
    pub name: String,
}

impl CgroupCpuSource {
    /// For a cgroup v2 directory under the v2 mount; None elsewhere.
    pub fn new(root: &Root, dir: &Path) -> Option<Self> {
        let files = CpuFiles::find(root);
        let rel = dir.strip_prefix(files.v2.as_ref()?).ok()?;
        let path = [b"/", rel.as_os_str().as_bytes()].concat();
        Some(Self {
            name: words::escape(&path),
            files,
            path,
        })
    }

    pub fn read(&self) -> CgroupCpuRead {
        CgroupCpuRead {
            bandwidth: self
                .files
                .throttling(&self.path)
                .map(|t| (t.periods, t.throttled_periods, t.throttled_ns)),
            pressure: self
                .files
                .pressure(&self.path)
                .map(|p| (p.some_ns, p.full_ns)),
        }
    }
}
