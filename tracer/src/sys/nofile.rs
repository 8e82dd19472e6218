//! The open-file limit. Counting a process's threads (`-p`, as `perf stat -p`) takes
//! one descriptor per event per thread, so a process of thousands of threads passes the
//! usual soft limit. As perf does (`rlimit__increase_nofile()`), on EMFILE the soft
//! limit is raised to the hard one and the open tried again; a command `tracer run`
//! starts was forked before, so it keeps its own limit.
use rustix::process::{getrlimit, setrlimit, Resource};

/// Raises the soft limit on open files to the hard one; false when it was already
/// there (or unlimited) or could not be raised.
pub fn raise_to_hard() -> bool {
    let lim = getrlimit(Resource::Nofile);
    let Some(soft) = lim.current else {
        return false;
    };
    if soft >= lim.maximum.unwrap_or(u64::MAX) {
        return false;
    }
    let mut raised = lim;
    raised.current = lim.maximum;
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => {
            log::debug!("open-file limit raised from {soft} to {:?}", lim.maximum);
            true
        }
        Err(e) => {
            log::debug!("open-file limit {soft} not raised: {e}");
            false
        }
    }
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
