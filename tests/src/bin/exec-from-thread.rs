//! A process whose second thread execs (de_thread() gives the exec'ing thread the
//! leader's TID and reaps the old leader).
//!
//! Usage: exec-from-thread --out FILE [--before-ms B] [--after-ms A]
//! The main thread spins until exec ends it; a second thread spins B ms, then execs
//! this program again (as `/proc/self/exe`, comm "exe") with `--after`, which spins A ms and writes the task's own
//! schedstat (pre-exec time included: exec keeps the task) as one JSON line to FILE.
use std::time::Duration;
use tracer_tests::thread_cpu_ns;

fn spin_ms(ms: u64) {
    let end = thread_cpu_ns() + ms * 1_000_000;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .expect("--out FILE")
        .clone();
    if args.iter().any(|a| a == "--after") {
        spin_ms(arg(&args, "--after-ms", 300));
        // SAFETY: no arguments.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let ss = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
        let v: Vec<u64> = ss.split_whitespace().map(|x| x.parse().unwrap()).collect();
        std::fs::write(
            &out,
            serde_json::to_string(&tracer_truth::Truth {
                tid: tid as u64,
                pid: std::process::id().into(),
                run_ns: v[0],
                wait_ns: v[1],
                slices: Some(v[2]),
                cpu_ns: Some(thread_cpu_ns()),
                ..Default::default()
            })
            .expect("numbers only")
                + "\n",
        )
        .unwrap();
        return;
    }
    let before = arg(&args, "--before-ms", 200);
    let after = arg(&args, "--after-ms", 300);
    // Through /proc/self/exe, so the program after exec has another comm ("exe") than
    // the threads before it.
    let exe = std::path::PathBuf::from("/proc/self/exe");
    std::thread::spawn(move || {
        spin_ms(before);
        let err = std::os::unix::process::CommandExt::exec(std::process::Command::new(exe).args([
            "--after",
            "--after-ms",
            &after.to_string(),
            "--out",
            &out,
        ]));
        panic!("exec failed: {err}");
    });
    // Spins until the exec ends this thread (bounded, should the exec never come).
    let end = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < end {
        spin_ms(1);
    }
}
