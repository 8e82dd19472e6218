//! Process and I/O hygiene of `tracer run`, end to end as root: the traced command
//! inherits what it would without the tracer, output errors end the run cleanly, bad
//! numbers are refused, `-p` ends with its targets, the command's fate is told right,
//! errors say each cause once.
use std::{
    io::Read as _,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{
    probe_modes, read_truth, require_root, run_tracer, scratch, tracer_bin, wait_held, Background,
};

#[path = "run_lifecycle/broken_output.rs"]
mod broken_output;
#[path = "run_lifecycle/inherit.rs"]
mod inherit;
#[path = "run_lifecycle/targets.rs"]
mod targets;

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// Waits up to `limit` for `child`; kills it and fails when it takes longer.
fn wait_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the tracer `pid` holds programs and then 300 ms more, so its signal
/// handlers are in place; false if it never did.
fn wait_loaded(pid: u32) -> bool {
    let held = wait_held(pid);
    std::thread::sleep(Duration::from_millis(300));
    !held.is_empty()
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

#[test]
#[ignore = "needs root"]
fn numeric_options_are_validated_never_a_panic() {
    require_root();
    let cases: &[(&[&str], &str)] = &[
        (&["run", "-i", "0s", "--count", "1"], "at least 10ms"),
        (&["run", "-i", "0", "-d", "1s"], "at least 10ms"),
        (&["run", "-i", "1s", "--count", "0"], "at least 1 interval"),
        (&["run", "--max-threads", "0"], "at least 1 thread"),
        (
            &["run", "--max-threads", "99999999999"],
            "from 1 to 4194304",
        ),
    ];
    for (args, want) in cases {
        let t = Instant::now();
        let out = run_tracer(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }
    // -d 0 was a 4 ms window reported as a trace (issue 24 item 12): refused now.
    let out = run_tracer(&["run", "--json", "-d", "0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a window of 0 traces nothing"), "{err}");
    assert!(out.stdout.is_empty());
}

/// Runs the tracer with stdout into a file (a command that outlives the tracer would
/// hold a pipe open); returns the status and what it wrote.
fn run_to_file(args: &[&str], name: &str, signal: Option<i32>) -> (ExitStatus, String) {
    let path = scratch(name);
    let mut child = Command::new(tracer_bin())
        .args(args)
        .stdout(std::fs::File::create(&path).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(sig) = signal {
        assert!(wait_loaded(child.id()), "tracer never loaded its programs");
        // SAFETY: our own child; only the tracer gets it, not its command.
        unsafe { libc::kill(child.id() as i32, sig) };
    }
    let st = wait_within(&mut child, Duration::from_secs(20), &format!("{args:?}"));
    let err = stderr_of(&mut child);
    assert!(!err.contains("panicked"), "{err}");
    let out = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    (st, out)
}

fn last_doc(out: &str) -> Value {
    serde_json::from_str(out.lines().last().expect("a report")).unwrap()
}

#[test]
#[ignore = "needs root"]
fn the_commands_state_is_told_right() {
    require_root();
    // The window ends first: still running, not "killed".
    let (st, out) = run_to_file(
        &["run", "--json", "-d", "300ms", "--", "sleep", "2"],
        "st-json",
        None,
    );
    assert!(st.success());
    let c = &last_doc(&out)["command"];
    assert_eq!(c["state"], "running", "{c}");
    assert!(c["exit_code"].is_null(), "{c}");
    let (_, out) = run_to_file(&["run", "-d", "300ms", "--", "sleep", "2"], "st-text", None);
    let line = out
        .lines()
        .find(|l| l.contains("command: sleep 2"))
        .unwrap();
    assert!(line.contains("still running"), "{line}");
    assert!(!line.contains("killed"), "{line}");

    // SIGINT to the tracer alone: the command runs on.
    let (st, out) = run_to_file(
        &["run", "--json", "--", "sleep", "3"],
        "st-int",
        Some(libc::SIGINT),
    );
    assert!(st.success(), "{st}");
    assert_eq!(last_doc(&out)["command"]["state"], "running");

    // Killed by a signal.
    let (st, out) = run_to_file(
        &["run", "--json", "--", "sh", "-c", "kill -9 $$"],
        "st-kill",
        None,
    );
    assert_eq!(st.code(), Some(137));
    let c = &last_doc(&out)["command"];
    assert_eq!(
        (c["state"].as_str(), c["exit_code"].as_i64()),
        (Some("killed"), Some(137)),
        "{c}"
    );
    let (_, out) = run_to_file(
        &["run", "--", "sh", "-c", "kill -9 $$"],
        "st-kill-text",
        None,
    );
    assert!(out.contains("(killed by SIGKILL, CPU "), "{out}");

    // Exited.
    let (st, out) = run_to_file(
        &["run", "--json", "--", "sh", "-c", "exit 3"],
        "st-exit",
        None,
    );
    assert_eq!(st.code(), Some(3));
    let c = &last_doc(&out)["command"];
    assert_eq!(
        (c["state"].as_str(), c["exit_code"].as_i64()),
        (Some("exited"), Some(3)),
        "{c}"
    );
}

#[test]
#[ignore = "needs root"]
fn sighup_prints_the_final_report_like_sigterm() {
    require_root();
    let (st, out) = run_to_file(&["run", "--json", "-d", "60s"], "hup", Some(libc::SIGHUP));
    assert!(st.success(), "{st}");
    let doc = last_doc(&out);
    assert!(doc["duration_ns"].as_u64().unwrap() < 30_000_000_000);
}

#[test]
#[ignore = "needs root"]
fn a_huge_command_line_is_cut_in_the_text_header() {
    require_root();
    let big = "x".repeat(60_000);
    let args = ["run", "--", "true", &big, &big, &big];
    let out = run_tracer(&args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("command: true")).unwrap();
    assert!(line.len() < 300, "{} bytes", line.len());
    assert!(
        line.contains("more bytes)") && line.contains("(exit 0, CPU "),
        "{line}"
    );
    let mut json_args = vec!["run", "--json", "--", "true"];
    json_args.extend([big.as_str(), &big, &big]);
    let doc = last_doc(&String::from_utf8_lossy(&run_tracer(&json_args).stdout));
    let argv = doc["command"]["argv"].as_array().unwrap();
    assert_eq!(argv.len(), 4);
    assert_eq!(
        argv[3].as_str().unwrap().len(),
        60_000,
        "JSON keeps argv whole"
    );
}

#[test]
#[ignore = "needs root"]
fn each_cause_of_an_error_is_said_once() {
    require_root();
    // A command that cannot start: a shell's 127 (not found) and 126 (not executable).
    let out = run_tracer(&["run", "--", "/nonexistent/prog"]);
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tracer: error: cannot start \"/nonexistent/prog\": command not found\n"
    );
    let file = scratch("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let out = run_tracer(&["run", "--", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126));
    assert_eq!(err.matches("Permission denied").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
#[ignore = "needs root"]
fn a_small_max_threads_names_the_capacity() {
    require_root();
    let bg = Background::start(WORKLOAD); // 3 threads
    let pid = bg.pid().to_string();
    for probe in ["tp-btf", "raw-tp", "tracepoint"] {
        let out = run_tracer(&[
            "run",
            "--probe",
            probe,
            "-p",
            &pid,
            "--max-threads",
            "2",
            "-d",
            "1s",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{probe}: {err}");
        assert!(
            err.contains("3 threads") && err.contains("hold 2") && err.contains("--max-threads"),
            "{probe}: {err}"
        );
        assert!(!err.contains("no probe mode"), "{probe}: {err}");
    }
    // With room enough it runs.
    let out = run_tracer(&["run", "-p", &pid, "--max-threads", "3", "-d", "200ms"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Opens a pseudo-terminal: (master, slave) fds.
fn pty() -> (std::fs::File, std::fs::File) {
    use std::os::fd::FromRawFd as _;
    // SAFETY: plain libc calls; the fds returned are owned by the Files.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0);
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(s >= 0);
        (std::fs::File::from_raw_fd(m), std::fs::File::from_raw_fd(s))
    }
}

#[test]
#[ignore = "needs root"]
fn an_open_ended_run_on_a_terminal_says_what_it_traces() {
    require_root();
    let (mut master, slave) = pty();
    let bg = Background::start(WORKLOAD);
    let pid = bg.pid().to_string();
    let mut child = Command::new(tracer_bin())
        .args(["run", "-p", &pid, "-d", "300ms"])
        .stdout(Stdio::null())
        .stderr(slave)
        .spawn()
        .unwrap();
    let st = wait_within(&mut child, Duration::from_secs(20), "banner");
    assert!(st.success());
    let mut buf = vec![0u8; 4096];
    let n = master.read(&mut buf).unwrap_or(0);
    let said = String::from_utf8_lossy(&buf[..n]);
    assert!(
        said.contains(&format!(
            "Tracing scheduling of PID {pid} for 300ms... Hit Ctrl-C to end early."
        )),
        "{said:?}"
    );
    // Not on a pipe: scripts and JSON readers see nothing.
    let out = run_tracer(&["run", "-p", &pid, "-d", "200ms"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Tracing"));
}

#[test]
#[ignore = "needs root"]
fn command_exit_status_is_propagated() {
    require_root();
    let out = run_tracer(&["run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs root"]
fn duration_ends_the_run_even_while_the_command_goes_on() {
    require_root();
    let t = std::time::Instant::now();
    let out = std::process::Command::new(tracer_tests::tracer_bin())
        .args(["run", "--json", "-d", "500ms", "--", "sleep", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Read the report from a file-backed pipe: `sleep` inherits stdout, so waiting for EOF
    // would wait for it; the tracer's own exit is what is measured.
    let mut out = out;
    let status = out.wait().unwrap();
    assert!(status.success());
    assert!(
        t.elapsed() < std::time::Duration::from_secs(3),
        "took {:?}",
        t.elapsed()
    );
    let mut text = String::new();
    use std::io::Read as _;
    let mut so = out.stdout.take().unwrap();
    let mut buf = [0u8; 65536];
    let n = so.read(&mut buf).unwrap();
    text.push_str(&String::from_utf8_lossy(&buf[..n]));
    let doc: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert!(
        doc["notices"].to_string().contains("goes on untraced"),
        "{doc}"
    );
    assert!(doc["command"]["exit_code"].is_null());
}

/// `-- COMMAND` is reaped with `wait4`, whose rusage is the kernel's own runtime of the
/// command and of the children it waited for. With the window around the whole command,
/// the report's threads sum to it (less what the held child ran before its release),
/// in every probe mode: threads that exited, child processes, spinners. The workload's
/// own records (schedstat at each thread's end) are below it: the figure is the kernel's.
#[test]
#[ignore = "needs root"]
fn a_commands_threads_sum_to_the_kernels_cpu_time_of_it() {
    require_root();
    for probe in probe_modes() {
        let (a, b) = (
            scratch(&format!("cpu-a-{probe}")),
            scratch(&format!("cpu-b-{probe}")),
        );
        let script = format!(
            "{WORKLOAD} busy-sleep --threads 3 --work-ms 5 --sleep-ms 3 --duration-ms 500 --out {} & \
             {WORKLOAD} churn --per-sec 200 --duration-ms 400 --out {}; wait",
            a.display(),
            b.display()
        );
        let out = run_tracer(&[
            "run", "--json", "--probe", &probe, "--", "sh", "-c", &script,
        ]);
        assert!(
            out.status.success(),
            "{probe}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = last_doc(&String::from_utf8_lossy(&out.stdout));
        let c = &doc["command"];
        let cpu = c["user_ns"]
            .as_u64()
            .unwrap_or_else(|| panic!("{probe}: {c}"))
            + c["system_ns"].as_u64().unwrap();
        let threads = doc["threads"].as_array().unwrap();
        let on: u64 = threads
            .iter()
            .map(|t| t["on_cpu_ns"].as_u64().unwrap())
            .sum();
        let tol = tracer_truth::ON_CPU.allowed(cpu as f64) as u64;
        // What exited threads ran after the kernel folded their runtime into the
        // process's is in the tracer's figure only.
        let exited: u64 = threads
            .iter()
            .filter(|t| t["exited"] == true)
            .map(|t| t["folded_threads"].as_u64().unwrap_or(1))
            .sum();
        let released = exited * tracer_truth::EXIT_AFTER_RELEASE_NS as u64;
        assert!(
            on <= cpu + tol + released && on + tol + 1_000_000 >= cpu,
            "{probe}: the threads' on-CPU {on} ns against the kernel's {cpu} ns ({} rows, {exited} exited threads)",
            threads.len()
        );
        let recorded: u64 = [a, b]
            .iter()
            .flat_map(|f| read_truth(f))
            .map(|t| t.run_ns)
            .sum();
        assert!(
            recorded > 0 && recorded <= cpu,
            "{probe}: the workload's records {recorded} ns against the kernel's {cpu} ns"
        );
    }
}

/// A child the command did not wait for outlives it: the table has its time, the
/// kernel's CPU time of the command (wait4) has not, and the report says so rather
/// than letting the header and the table disagree in silence (a hostile pass).
#[test]
#[ignore = "needs root"]
fn a_child_that_outlives_the_command_is_named_in_a_notice() {
    require_root();
    let out = run_tracer(&["run", "--json", "--", "sh", "-c", "(sleep 2.41 &); true"]);
    let _ = Command::new("pkill").args(["-f", "sleep 2.41"]).status();
    assert!(out.status.success());
    let doc = last_doc(&String::from_utf8_lossy(&out.stdout));
    let notices = doc["notices"].to_string();
    assert!(notices.contains("outlived the command"), "{notices}");
    let out = run_tracer(&["run", "--json", "--", "sh", "-c", "sleep 0.05 & wait"]);
    let doc = last_doc(&String::from_utf8_lossy(&out.stdout));
    let notices = doc["notices"].to_string();
    assert!(
        !notices.contains("outlived"),
        "a waited-for child: {notices}"
    );
}
