//! A workload for `tracer record`'s task events. The main thread starts a
//! thread that renames itself (`PR_SET_NAME`), moves itself to another CPU
//! (`sched_setaffinity`) and exits; then it forks a child whose second thread execs
//! `/proc/self/exe --execd` (comm "exe"; the thread takes the child's PID), which exits
//! at once. Each step appends what the workload itself saw (`gettid`, `sched_getcpu`,
//! its comm) as one JSON line to the truth file.
//!
//! Usage: task-events --out FILE
use std::io::Write as _;

fn gettid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn getcpu() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::sched_getcpu() as u32 }
}

fn comm() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .unwrap()
        .trim_end()
        .to_string()
}

/// One line, one `write` (O_APPEND): lines from the processes never interleave.
fn truth(out: &str, line: serde_json::Value) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

fn pin(cpu: u32) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays in its bounds.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .expect("--out FILE")
        .clone();
    if args.iter().any(|a| a == "--execd") {
        truth(
            &out,
            serde_json::json!({"ev": "execd", "pid": std::process::id(), "tid": gettid(), "comm": comm()}),
        );
        return;
    }
    let cpus = std::thread::available_parallelism().unwrap().get() as u32;
    assert!(cpus >= 2, "a migration needs two CPUs");
    let main_tid = gettid();
    let o = out.clone();
    std::thread::spawn(move || {
        let old = comm();
        let name = c"renamed-thr";
        // SAFETY: a NUL-terminated name.
        assert_eq!(unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) }, 0);
        let before = getcpu();
        let dest = (before + 1) % cpus;
        pin(dest);
        let after = getcpu();
        truth(
            &o,
            serde_json::json!({"ev": "thread", "parent_tid": main_tid, "tid": gettid(),
                "old_comm": old, "new_comm": comm(), "cpu_before": before, "cpu_after": after}),
        );
    })
    .join()
    .unwrap();
    // SAFETY: single-threaded again; the child only spawns a thread and execs.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork");
    if child == 0 {
        let pid = std::process::id();
        let o = out.clone();
        std::thread::spawn(move || {
            truth(
                &o,
                serde_json::json!({"ev": "exec", "pid": pid, "old_tid": gettid(), "filename": "/proc/self/exe"}),
            );
            let err = std::os::unix::process::CommandExt::exec(
                std::process::Command::new("/proc/self/exe").args(["--execd", "--out", &o]),
            );
            panic!("exec failed: {err}");
        });
        // The exec ends this thread.
        std::thread::sleep(std::time::Duration::from_secs(30));
        std::process::exit(1);
    }
    truth(
        &out,
        serde_json::json!({"ev": "fork", "parent_tid": main_tid, "child": child}),
    );
    let mut status = 0;
    // SAFETY: our child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child {status}"
    );
}
