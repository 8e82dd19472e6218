//! What `tracer run` traces, end to end as root: only the `-p` process, only the
//! `--cgroup`'s tasks, many threads system-wide, clear errors for bad targets; and targets
//! the torture harness cannot be: a process whose leader exits while the tracer starts,
//! a process asleep for the whole window, and a window of zero. Expectations come from
//! the kernel (schedstat of the target, the window's own duration), through
//! `tracer_truth`'s bounds.
use std::process::{Command, Stdio};

use tracer_tests::{
    final_report, kernel, read_truth, require_root, run_tracer, scratch, thread, Background,
};
// On-CPU: 1% or 1 ms, as everywhere against schedstat.
use tracer_truth::ON_CPU;

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");
const LEADER_EXITS: &str = env!("CARGO_BIN_EXE_leader-exits");

fn schedstat(pid: u32, tid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .unwrap_or_else(|e| panic!("schedstat of {tid}: {e}"));
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (v[0], v[1])
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// The main thread starts its worker 300 ms after it starts and exits alone, while the
/// tracer (started at once) verifies its programs: `-p` must trace the worker, born after
/// the process was resolved, and open its counters for the threads traced once the
/// programs are attached. Counters opened for the threads read before the programs were
/// verified failed the run: once with "no such thread: TID <pid> does not exist" for a
/// live process (item 2), later naming the thread that exited and the one the process
/// lives on in.
#[test]
#[ignore = "needs root"]
fn a_leader_exiting_during_start_up_leaves_its_worker_traced() {
    require_root();
    // raw-tp verifies longest (~0.8 s here): the exit falls inside the start-up.
    let probe = if kernel::has_btf() {
        "raw-tp"
    } else {
        "tracepoint"
    };
    let truth_file = scratch("leader-exits");
    let mut target = Command::new(LEADER_EXITS)
        .args(["--delay-ms", "300", "--work-ms", "1500", "--out"])
        .arg(&truth_file)
        .spawn()
        .expect("cannot start leader-exits");
    let pid = target.id().to_string();
    let out = run_tracer(&["run", "--json", "--probe", probe, "-p", &pid, "-d", "4s"]);
    let _ = target.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tracer run --probe {probe} -p {pid} on a live process whose leader exited: {err}"
    );
    let doc = final_report(&out);
    let truth = read_truth(&truth_file);
    let _ = std::fs::remove_file(&truth_file);
    let w = &truth[0];
    let row = thread(&doc, w.tid).unwrap_or_else(|| {
        panic!(
            "the worker {} (born during start-up) is missing: {doc}",
            w.tid
        )
    });
    let on = u(row, "on_cpu_ns");
    // Born before the window opened: at most its schedstat, and something of it.
    let tol = ON_CPU.allowed(w.run_ns as f64);
    assert!(
        on > 0 && on as f64 <= w.run_ns as f64 + tol,
        "worker on-CPU {on} ns, schedstat {} ns: {row}",
        w.run_ns
    );
}

/// A chain of threads, each started by the one before about every 250 us and ending
/// after it, while `-p` starts: a link born between the tracer's /proc scan and its
/// parent's entry in the traced set went untraced, and every later link with it (the
/// fork program follows only parents in the set; torture seed 1 once lost a child born
/// 0.2 ms before the window that way). Every link of the chain's last third, born long
/// after the programs attached, must be in the report, with at least the on-CPU time its
/// schedstat had when it recorded it.
#[test]
#[ignore = "needs root"]
fn every_link_of_a_thread_chain_born_while_the_tracer_starts_is_traced() {
    require_root();
    let probes: &[&str] = if kernel::has_btf() {
        &["tp-btf", "raw-tp", "tracepoint"]
    } else {
        &["tracepoint"]
    };
    for probe in probes {
        chain_under(probe);
    }
}

fn chain_under(probe: &str) {
    let truth_file = scratch("chain");
    let mut target = Command::new(WORKLOAD)
        .args([
            "chain",
            "--step-us",
            "250",
            "--duration-ms",
            "2500",
            "--out",
        ])
        .arg(&truth_file)
        .spawn()
        .expect("cannot start the chain");
    let pid = target.id().to_string();
    // No -d: the run ends when the process does.
    let out = run_tracer(&["run", "--json", "--probe", probe, "-p", &pid]);
    let _ = target.wait();
    assert!(
        out.status.success(),
        "tracer run --probe {probe} -p {pid}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = final_report(&out);
    let truth = read_truth(&truth_file);
    let _ = std::fs::remove_file(&truth_file);
    let links: Vec<_> = truth.iter().filter(|t| t.tid != t.pid).collect();
    assert!(links.len() > 3000, "{probe}: only {} links", links.len());
    let tail = &links[links.len() - links.len() / 3..];
    let missing: Vec<u64> = tail
        .iter()
        .filter(|t| thread(&doc, t.tid).is_none())
        .map(|t| t.tid)
        .collect();
    assert!(
        missing.is_empty(),
        "{probe}: {} of the chain's last {} links are not in the report (the first: {:?}); drops {}",
        missing.len(),
        tail.len(),
        &missing[..missing.len().min(5)],
        doc["drops"]
    );
    let (on, ran): (u64, u64) = tail.iter().fold((0, 0), |(on, ran), t| {
        let row = thread(&doc, t.tid).expect("listed");
        (on + u(row, "on_cpu_ns"), ran + t.run_ns)
    });
    // Each link reads its schedstat before its exit path runs, which the report counts
    // too (about 30 us a link here): the truth is a floor.
    assert!(
        on as f64 >= ran as f64 - ON_CPU.allowed(ran as f64),
        "{probe}: the last {} links: on-CPU {on} ns, below their schedstat {ran} ns read before they exited",
        tail.len()
    );
}

/// A process asleep for the whole window is a thread the window holds: listed, on-CPU as
/// its schedstat says (none), off-CPU the whole window, under -p and -t, and the text
/// report lists it instead of saying that no traced thread ran.
#[test]
#[ignore = "needs root"]
fn a_process_asleep_the_whole_window_is_listed_with_its_off_cpu() {
    require_root();
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()
        .expect("cannot start sleep");
    let pid = sleeper.id();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut problems = Vec::new();
    for flag in ["-p", "-t"] {
        let before = schedstat(pid, pid);
        let out = run_tracer(&["run", "--json", flag, &pid.to_string(), "-d", "500ms"]);
        let after = schedstat(pid, pid);
        let doc = final_report(&out);
        let dur = u(&doc, "duration_ns");
        let Some(row) = thread(&doc, pid.into()) else {
            problems.push(format!(
                "{flag} {pid}: the sleeping thread is not listed: {doc}"
            ));
            continue;
        };
        let ran = after.0 - before.0;
        let (on, off) = (u(row, "on_cpu_ns"), u(row, "off_cpu_ns"));
        if !ON_CPU.holds_ns(on, ran) {
            problems.push(format!("{flag}: on-CPU {on} ns, schedstat {ran} ns: {row}"));
        }
        if !ON_CPU.holds_ns(on + off, dur) {
            problems.push(format!(
                "{flag}: on {on} + off {off} ns, the window {dur} ns (asleep all of it): {row}"
            ));
        }
    }
    let text = run_tracer(&["run", "-p", &pid.to_string(), "-d", "300ms"]);
    let shown = String::from_utf8_lossy(&text.stdout);
    if shown.contains("no traced thread ran") || !shown.contains(&pid.to_string()) {
        problems.push(format!("text report of -p {pid}: {shown}"));
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `-d 0s` asks for no window: refused with one line naming the option, before anything
/// is loaded (it was once taken as a 4 ms window).
#[test]
#[ignore = "needs root"]
fn a_window_of_zero_is_refused() {
    require_root();
    let out = run_tracer(&["run", "-d", "0s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "tracer run -d 0s: {err}");
    // One line, then clap's usual pointer to --help.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    assert!(
        lines.len() == 1 && (err.contains("-d") || err.contains("duration")),
        "{err}"
    );
}

/// A target that exits while the tracer starts (between its resolution and the seeding
/// of the traced set, after the programs verified) is one line about the target: it read
/// "no probe mode works on this kernel" with the same reason once per mode (a hostile
/// test pass, 2026-12-07). Exits 10-80 ms after the tracer starts cover that stretch.
#[test]
#[ignore = "needs root"]
fn a_target_that_exits_during_start_up_is_one_line_about_it() {
    require_root();
    for (ms, opt) in [(10, "-t"), (30, "-p"), (50, "-t"), (80, "-p")] {
        // Ours to reap: a zombie until the tracer is done.
        let mut child = Command::new("sleep")
            .arg(format!("0.0{ms:02}"))
            .spawn()
            .expect("sleep");
        let pid = child.id().to_string();
        let out = run_tracer(&["run", opt, &pid, "-d", "1s"]);
        let _ = child.wait();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            // It outlived the start-up: nothing to check of this one.
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(2),
            "{opt} {pid} after {ms} ms: {err}"
        );
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            lines.len() == 1
                && (err.contains("exited") || err.contains("does not exist"))
                && !err.contains("probe mode"),
            "{opt} {pid} after {ms} ms: {err}"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn pid_target_traces_only_that_process() {
    require_root();
    let target = Background::start(WORKLOAD);
    let pid = target.pid().to_string();
    let out = run_tracer(&["run", "--json", "-p", &pid, "-d", "1s"]);
    drop(target);
    let doc = final_report(&out);
    let threads = doc["threads"].as_array().unwrap();
    assert!(threads.len() >= 2, "{doc}");
    for t in threads {
        assert_eq!(
            t["pid"].as_u64().unwrap().to_string(),
            pid,
            "only the target: {t}"
        );
    }
    let dur = doc["duration_ns"].as_u64().unwrap();
    assert!(
        (900_000_000..1_500_000_000).contains(&dur),
        "duration {dur}"
    );
}

#[test]
#[ignore = "needs root"]
fn system_wide_reports_many_threads() {
    require_root();
    let out = run_tracer(&["run", "--json", "-d", "500ms"]);
    let doc = final_report(&out);
    assert!(!doc["threads"].as_array().unwrap().is_empty());
    assert!(
        doc["threads"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["tid"] != 0),
        "no idle task"
    );
    let util = doc["cpus_utilized"].as_f64().unwrap();
    let ncpu = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(
        util > 0.0 && util <= tracer_truth::AT_MOST_THE_CPUS.ceiling(ncpu),
        "cpus_utilized {util}"
    );
}

#[test]
#[ignore = "needs root"]
fn bad_targets_fail_fast_with_a_clear_error() {
    require_root();
    let t = std::time::Instant::now();
    let out = run_tracer(&["run", "-p", "999999999"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such process"));
    let out = run_tracer(&["run", "--", "/nonexistent/command"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start"));
    let out = run_tracer(&["run", "-d", "5x"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid duration"));
    assert!(t.elapsed().as_secs() < 5, "errors must be fast");
}
