//! The randomized workload of `cargo xtask torture`. From a seed it plans threads that
//! spin, sleep, yield, block on pipes and futexes, change affinity, exit at random times,
//! fork, exec (from a main and from a non-main thread) and move between cgroups. Every
//! thread writes its own ground truth (schedstat on-CPU, run_delay and slices,
//! CLOCK_THREAD_CPUTIME_ID, wall-clock times) as one JSON line into the `--out` file (a
//! shared mapping: no system call, no blocking) just before it ends, so truth from several
//! processes and from programs that replaced themselves by exec lands in one file.
//!
//! Usage:
//!   tracer-torture run --seed S --out F --ms D [--go] [--cg-in DIR --cg-out DIR] [--edge]
//!       [--startup T,C] [--sleepers] [--pinned] [--short N] [--names] [--leave] [--exec-thread]
//!       [--crowd N]
//!     `--go`: print `ready PID MAIN_TID RESIDENT_TID` and wait for a line on stdin (the
//!     driver sends it once the tracer has attached); the two pre-existing threads record a
//!     baseline then. `--edge`: the last threads end in a spread of ±40 ms around D, so
//!     some exit while the window closes. `--startup T,C`: a thread started T ms and a
//!     child forked C ms after `ready`, while the tracer starts, and from `ready` a chain
//!     of 1 ms threads, each started by the one before, until 20 links after GO.
//!     `--sleepers`: threads and a process asleep across the window's edges; the main
//!     thread then waits, after its work, for the end of stdin (the driver closes it once
//!     the tracer has ended). `--pinned`: ping-pong pairs on one CPU and across two (one
//!     side SCHED_FIFO). `--short N`: N processes of 10-60 ms. `--names`: names that are not UTF-8 or hold control bytes.
//!     `--leave`: one more child that leaves the `--cg-in` cgroup halfway. `--exec-thread`:
//!     one more child whose second thread execs. `--crowd N`: N threads asleep from before
//!     `ready` until the main thread's work ends.
//!   tracer-torture post-exec --out F --grp G --spin-us U     (what the exec'ing threads run)
//!   tracer-torture child --out F --seed S --kind K --cg-out DIR (spawned by `run`)
//!   tracer-torture joiner --out F --seed S --cg-in DIR --ms D (spawned by `run`)
//!   tracer-torture window-open --pid TRACER_PID   (prints the window's opening, ns)
//!   tracer-torture clocks   (prints CLOCK_BOOTTIME - CLOCK_MONOTONIC, ns: the trace's
//!     clock against the window's)
//!
//! Times are CLOCK_MONOTONIC ns, the clock of the tracer's window.

mod edges;
mod plan;
mod roles;
mod truth;
mod window;
mod work;

use plan::run;
use roles::{child, joiner, post_exec};
use truth::truth_map;
use window::window_open;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("window-open") {
        return window_open(&args);
    }
    if args.get(1).map(String::as_str) == Some("clocks") {
        return window::clocks();
    }
    let out = arg(&args, "--out").unwrap_or_else(|| {
        eprintln!("usage: tracer-torture run|post-exec|child|joiner --out FILE ...");
        std::process::exit(2)
    });
    // Mapped before any thread starts: records then never fault the mapping in.
    truth_map(&out, args.get(1).map(String::as_str) == Some("run"));
    match args.get(1).map(String::as_str) {
        Some("run") => run(&args, &out),
        Some("post-exec") => post_exec(&args, &out),
        Some("child") => child(&args, &out),
        Some("joiner") => joiner(&args, &out),
        _ => {
            eprintln!("usage: tracer-torture run|post-exec|child|joiner --out FILE ...");
            std::process::exit(2);
        }
    }
}

/// The value after `name` in the arguments, if any.
pub(crate) fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after `name`, or `default` when absent or unparsable.
pub(crate) fn num(args: &[String], name: &str, default: u64) -> u64 {
    arg(args, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
