//! `zombie-of OUT -- CMD ARGS...`: runs CMD and, once it has exited, reads its main
//! thread's final schedstat from the zombie (`waitid(WNOWAIT)`) before reaping it, and
//! appends it to OUT as one truth line (`tracer_truth::Truth`). A process's main thread
//! records its own truth before its exit, and the exit (the process's teardown: 1.2-1.4
//! ms on 2026-12-03) follows it: the zombie's figures are the upper end of that thread.
//! Exits with CMD's status.
use std::{io::Write as _, os::unix::process::ExitStatusExt as _, process::Command};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(out), Some(sep)) = (args.get(1), args.iter().position(|a| a == "--")) else {
        eprintln!("usage: zombie-of OUT -- CMD ARGS...");
        std::process::exit(2);
    };
    let Some(cmd) = args.get(sep + 1) else {
        eprintln!("usage: zombie-of OUT -- CMD ARGS...");
        std::process::exit(2);
    };
    let mut child = Command::new(cmd)
        .args(&args[sep + 2..])
        .spawn()
        .unwrap_or_else(|e| panic!("zombie-of: cannot start {cmd}: {e}"));
    let pid = child.id();
    if let tracer_truth::zombie::Zombie::Exited(Some(f)) = tracer_truth::zombie::zombie(pid, true) {
        let truth = tracer_truth::Truth {
            tid: pid.into(),
            pid: pid.into(),
            run_ns: f.run_ns,
            wait_ns: f.wait_ns,
            slices: Some(f.slices),
            // A thread's clock is its runtime (CLOCK_THREAD_CPUTIME_ID reads it).
            cpu_ns: Some(f.run_ns),
            ..Default::default()
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out)
            .unwrap_or_else(|e| panic!("zombie-of: cannot open {out}: {e}"));
        let _ = writeln!(
            f,
            "{}",
            serde_json::to_string(&truth).expect("numbers only")
        );
    }
    let status = child.wait().expect("zombie-of: reaping the command");
    std::process::exit(status.code().unwrap_or(128 + status.signal().unwrap_or(0)));
}
