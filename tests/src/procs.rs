//! Processes the tests run beside the tracer: a workload to trace, and spinners.

use std::process::Command;

/// A workload process that a test traces by PID or cgroup (`busy-sleep`, 2 threads,
/// 2 ms work / 2 ms sleep), running until dropped.
pub struct Background {
    child: std::process::Child,
}

impl Background {
    /// Starts `workload` (the tests' `CARGO_BIN_EXE_tracer-workload`) and waits until its
    /// threads exist.
    pub fn start(workload: &str) -> Background {
        let child = Command::new(workload)
            .args([
                "busy-sleep",
                "--threads",
                "2",
                "--work-ms",
                "2",
                "--sleep-ms",
                "2",
            ])
            .args(["--duration-ms", "60000", "--out", "/dev/null"])
            .spawn()
            .expect("cannot start the workload");
        let task_dir = format!("/proc/{}/task", child.id());
        let t = std::time::Instant::now();
        while std::fs::read_dir(&task_dir).map(|d| d.count()).unwrap_or(0) < 3
            && t.elapsed().as_secs() < 5
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Background { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A shell spinner, killed when dropped (a failed test's too).
pub struct Spinner(std::process::Child);

impl Spinner {
    /// Pinned to the last CPU (`taskset`, and `nice` with `nice`), where its slices are
    /// long and its own.
    pub fn pinned(nice: Option<i32>) -> Spinner {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut c = Command::new("taskset");
        c.args(["-c", &(cpus - 1).to_string()]);
        if let Some(n) = nice {
            c.args(["nice", "-n", &n.to_string()]);
        }
        // `taskset` and `nice` exec: the PID is the shell's.
        let child = c
            .args(["sh", "-c", "while :; do :; done"])
            .spawn()
            .expect("start a spinner with taskset");
        Spinner(child)
    }

    /// Free to run on any CPU.
    pub fn free() -> Spinner {
        let child = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("start a spinner");
        Spinner(child)
    }

    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Ends it now (its exit is its last switch-out).
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A field of `/proc/PID/status` that is a count, e.g. `nonvoluntary_ctxt_switches`:
/// the kernel's own figure.
pub fn status_count(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}
