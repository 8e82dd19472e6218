//! A child's final schedstat, read from its zombie before it is reaped. A thread records
//! its own truth before its exit path, and a process's main thread before the process's
//! teardown (1.2-1.4 ms on this project's CI machine on 2026-12-03): the zombie's
//! figures include it. One copy for the torture workload (its children), the torture
//! harness (the workload) and `zombie-of` (an end-to-end test's command).

/// `/proc/PID/schedstat` of a task: runtime, run-queue wait (ns) and slices (pcount).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Final {
    pub run_ns: u64,
    pub wait_ns: u64,
    pub slices: u64,
}

/// Where our child stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Zombie {
    /// Still running (asked without blocking).
    Running,
    /// It has exited and is not reaped yet: its final figures, when they could be read.
    /// The caller reaps it.
    Exited(Option<Final>),
    /// `waitid` failed (not our child, already reaped).
    Gone,
}

/// Whether our child `pid` has exited, and then its final schedstat, without reaping it
/// (`waitid(WEXITED | WNOWAIT)`). `block`: wait until it has exited.
pub fn zombie(pid: u32, block: bool) -> Zombie {
    let flags = libc::WEXITED | libc::WNOWAIT | if block { 0 } else { libc::WNOHANG };
    // SAFETY: waitid on our own child into a zeroed siginfo the kernel fills.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
    if r != 0 {
        return Zombie::Gone;
    }
    // SAFETY: the kernel wrote the siginfo; si_pid stays 0 while the child runs.
    if unsafe { info.si_pid() } != pid as i32 {
        return Zombie::Running;
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap_or_default();
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    Zombie::Exited((v.len() >= 3).then(|| Final {
        run_ns: v[0],
        wait_ns: v[1],
        slices: v[2],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_running_then_a_zombie_with_its_final_figures() {
        let mut c = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        assert_eq!(zombie(c.id(), false), Zombie::Running);
        let Zombie::Exited(Some(f)) = zombie(c.id(), true) else {
            panic!("no final figures");
        };
        assert!(f.slices > 0, "{f:?}");
        // Not reaped by the look: the caller does it.
        assert!(std::path::Path::new(&format!("/proc/{}", c.id())).exists());
        c.wait().unwrap();
        assert_eq!(zombie(c.id(), false), Zombie::Gone);
    }
}
