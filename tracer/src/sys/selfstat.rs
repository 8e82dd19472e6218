//! The tracer's own resource use, for its self-monitoring series.
use crate::sys::root::Root;

/// (user + system CPU seconds, resident bytes) of this process from `/proc/self/stat`.
pub fn usage(root: &Root) -> Option<(f64, u64)> {
    let text = std::fs::read_to_string(root.path("/proc/self/stat")).ok()?;
    parse_stat(&text)
}

/// Fields after the `(comm)`, which may hold spaces and parentheses: utime and stime are
/// the 14th and 15th fields, rss (pages) the 24th.
fn parse_stat(text: &str) -> Option<(f64, u64)> {
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let rss_pages: u64 = f.get(21)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    Some((
        ticks as f64 / hz.max(1) as f64,
        rss_pages.saturating_mul(page.max(1) as u64),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_a_comm_with_spaces_and_parens() {
        let line = "7 (a b) c) S 1 7 7 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 10 1000 300 0 0";
        let (cpu, rss) = super::parse_stat(line).unwrap();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert!((cpu - 300.0 / hz).abs() < 1e-9);
        assert!(rss >= 300);
        assert!(super::usage(&Default::default()).is_some());
    }
}
