//! The open-file limit. Counting a process's threads (`-p`, as `perf stat -p`) takes
//! one descriptor per event per thread, so a process of thousands of threads passes the
//! usual soft limit. As perf does (`rlimit__increase_nofile()`), on EMFILE the soft
//! limit is raised to the hard one and the open tried again; a command `tracer run`
//! starts was forked before, so it keeps its own limit.
use rustix::process::{getrlimit, setrlimit, Resource};

/// Raises the soft limit on open files to the hard one. Returns the limits before
/// and after, or None when it was already there or could not be raised.
pub fn raise_to_hard() -> Option<(u64, u64)> {
    let lim = getrlimit(Resource::Nofile);
    let (soft, hard) = (lim.current?, lim.maximum);
    let target = hard.unwrap_or(u64::MAX);
    if soft >= target {
        return None;
    }
    let mut raised = lim;
    raised.current = hard;
    setrlimit(Resource::Nofile, raised).ok()?;
    Some((soft, target))
}

/// Whether `e` is a run out of descriptors (EMFILE, or the system's ENFILE).
pub fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

#[cfg(test)]
mod tests {
    #[test]
    fn out_of_descriptors_is_emfile_or_enfile() {
        let e = |n| std::io::Error::from_raw_os_error(n);
        assert!(super::is_out_of_descriptors(&e(libc::EMFILE)));
        assert!(super::is_out_of_descriptors(&e(libc::ENFILE)));
        assert!(!super::is_out_of_descriptors(&e(libc::ENOENT)));
    }
}
