//! A process whose main thread starts a worker `--delay-ms` after it starts and then exits
//! alone (`SYS_exit`, what `pthread_exit` from main does underneath: the leader stays a
//! zombie, the process lives on in the worker). The worker spins and sleeps for
//! `--work-ms`, writes its ground truth (one `tracer_truth::Truth` line: schedstat and its
//! own CPU clock) to `--out`, and ends the process.
//!
//! Usage: leader-exits --delay-ms D --work-ms W --out FILE

use std::time::{Duration, Instant};

use tracer_tests::{gettid, thread_cpu_ns};

fn num(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let delay = num(&args, "--delay-ms", 100);
    let work = num(&args, "--work-ms", 1000);
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| {
            eprintln!("usage: leader-exits --delay-ms D --work-ms W --out FILE");
            std::process::exit(2)
        });
    std::thread::sleep(Duration::from_millis(delay));
    std::thread::spawn(move || {
        let end = Instant::now() + Duration::from_millis(work);
        while Instant::now() < end {
            let until = thread_cpu_ns() + 2_000_000;
            while thread_cpu_ns() < until {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let tid = gettid();
        let s =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
        let v: Vec<u64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let truth = tracer_truth::Truth {
            tid: tid.into(),
            pid: std::process::id().into(),
            run_ns: v.first().copied().unwrap_or(0),
            wait_ns: v.get(1).copied().unwrap_or(0),
            slices: v.get(2).copied(),
            cpu_ns: Some(thread_cpu_ns()),
            kind: Some("worker".into()),
            ..Default::default()
        };
        let line = serde_json::to_string(&truth).expect("numbers only") + "\n";
        std::fs::write(&out, line).expect("cannot write the truth");
        std::process::exit(0);
    });
    // SAFETY: ends this thread only (not the group): no Rust frame is unwound, and the
    // worker owns everything it uses.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("SYS_exit returned");
}
