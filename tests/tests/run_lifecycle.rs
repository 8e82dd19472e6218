//! Process and I/O hygiene of `tracer run`, end to end as root: the traced command
//! inherits what it would without the tracer, output errors end the run cleanly, bad
//! numbers are refused, `-p` ends with its targets, the command's fate is told right,
//! errors say each cause once.
use std::{
    collections::BTreeSet,
    io::{BufRead as _, Read as _},
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{
    held_programs, require_root, run_tracer, scratch, tracer_bin, wait_held, Background,
};

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

/// Like [`wait_within`], and then checks that every program the tracer was seen holding
/// (`seen` before, and while it ran) is gone from the kernel: nothing left attached.
fn wait_detached(
    child: &mut Child,
    limit: Duration,
    what: &str,
    seen: BTreeSet<u32>,
    expect_held: bool,
) -> ExitStatus {
    let t = Instant::now();
    let mut held = seen;
    let st = loop {
        held.extend(held_programs(child.id()));
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        !expect_held || !held.is_empty(),
        "{what}: never seen holding programs"
    );
    let left = tracer_tests::wait_unloaded(&held);
    assert!(left.is_empty(), "{what}: left loaded {left:?}");
    st
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// A shell line writing what a process inherits (its own signal state, umask, CPUs,
/// capabilities, limits, nice, open fds, environment) to `file`: the same for the
/// command under the tracer and started directly. Only builtins, no fork: a shell blocks
/// every signal for a moment around a fork, which a child reading its status would see.
fn inherited_state_script(file: &Path) -> String {
    format!(
        "exec 2>/dev/null >{}; \
         while IFS= read -r l; do case \"$l\" in Sig[BIC]*|Umask*|Cpus_allowed_list*|NoNewPrivs*|Cap*) echo \"$l\";; esac; done </proc/self/status; \
         while IFS= read -r l; do echo \"$l\"; done </proc/self/limits; \
         read -r stat </proc/self/stat; set -- $stat; echo \"nice ${{19}}\"; \
         echo fds /proc/self/fd/*; export -p",
        file.display()
    )
}

/// The state `sh -c SCRIPT` sees, started by `tracer run` (true) or directly (false),
/// both spawned with `setup` applied first (as a parent shell would have set it).
fn observed(under_tracer: bool, setup: fn() -> std::io::Result<()>, name: &str) -> String {
    let file = scratch(name);
    let script = inherited_state_script(&file);
    let mut cmd = if under_tracer {
        let mut c = Command::new(tracer_bin());
        c.args(["run", "--as-root", "--", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    // SAFETY: the closure only makes async-signal-safe calls.
    unsafe { cmd.pre_exec(setup) };
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = std::fs::read_to_string(&file).expect("the script wrote its state");
    let _ = std::fs::remove_file(&file);
    s
}

fn nothing() -> std::io::Result<()> {
    Ok(())
}

/// What a parent may hand down: SIGHUP ignored (nohup), SIGUSR1 blocked, a umask, a
/// lower fd limit, a nice level.
fn handed_down() -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls on this (child) process only.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::umask(0o027);
        let lim = libc::rlimit {
            rlim_cur: 512,
            rlim_max: 4096,
        };
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::setpriority(libc::PRIO_PROCESS, 0, 3);
    }
    Ok(())
}

/// A signal-set line of /proc/PID/status (`SigIgn`, `SigBlk`) as a bit mask.
fn sigset(state: &str, key: &str) -> u64 {
    let v = state
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {state}"));
    u64::from_str_radix(v.trim(), 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

#[test]
#[ignore = "needs root"]
fn the_command_inherits_what_a_plain_spawn_gives() {
    require_root();
    let traced = observed(true, nothing, "inherit-plain-t");
    let plain = observed(false, nothing, "inherit-plain-p");
    assert_eq!(traced, plain, "under the tracer vs started directly");
    // As perf stat gives it: SIGPIPE not ignored (Rust's runtime ignores it in the
    // tracer), nothing blocked.
    assert_eq!(
        sigset(&traced, "SigIgn:") & bit(libc::SIGPIPE),
        0,
        "{traced}"
    );
    assert_eq!(sigset(&traced, "SigBlk:"), 0, "{traced}");
    // What the tracer itself was handed is passed on, not reset.
    let traced = observed(true, handed_down, "inherit-nohup-t");
    let plain = observed(false, handed_down, "inherit-nohup-p");
    assert_eq!(traced, plain, "under the tracer vs started directly");
    let ign = sigset(&traced, "SigIgn:");
    assert_ne!(ign & bit(libc::SIGHUP), 0, "SIGHUP stays ignored: {traced}");
    assert_eq!(ign & bit(libc::SIGPIPE), 0, "SIGPIPE is not: {traced}");
    assert_eq!(sigset(&traced, "SigBlk:"), bit(libc::SIGUSR1), "{traced}");
    assert!(traced.contains("Umask:\t0027"), "{traced}");
}

#[test]
#[ignore = "needs root"]
fn a_pipeline_in_the_command_ends_without_broken_pipe() {
    require_root();
    let out = run_tracer(&["run", "--", "sh", "-c", "yes | head -1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("y\n"));
}

#[test]
#[ignore = "needs root"]
fn a_closed_pipe_ends_the_run_quietly_and_detaches() {
    require_root();
    // Interval mode: the reader takes one line and goes away (`| head -1`).
    let t = Instant::now();
    let mut child = Command::new(tracer_bin())
        .args(["run", "-i", "200ms", "-d", "30s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("tracer interval 1"), "{first}");
    let st = wait_detached(
        &mut child,
        Duration::from_secs(10),
        "-i with a closed pipe",
        BTreeSet::new(),
        true,
    );
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(141), "{err}");
    assert!(err.is_empty(), "quiet: {err}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // No -d and nothing printed yet: the run ends once the reader has gone, rather
    // than running on for nobody.
    let t = Instant::now();
    let mut child = Command::new(tracer_bin())
        .args(["run"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away once the tracer has loaded (so the test sees its programs).
    let seen = wait_held(child.id());
    drop(child.stdout.take());
    let st = wait_detached(
        &mut child,
        Duration::from_secs(10),
        "no -d, a closed pipe",
        seen,
        true,
    );
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(141), "{err}");
    assert!(err.is_empty(), "quiet: {err}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );

    // A short run whose reader has gone (`| true`).
    let mut child = Command::new(tracer_bin())
        .args(["run", "-d", "500ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away once the tracer has loaded (so the test sees its programs).
    let seen = wait_held(child.id());
    drop(child.stdout.take());
    let st = wait_detached(
        &mut child,
        Duration::from_secs(10),
        "-d with a closed pipe",
        seen,
        true,
    );
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(141), "{err}");
    assert!(err.is_empty(), "quiet: {err}");
}

#[test]
#[ignore = "needs root"]
fn a_failed_write_is_a_one_line_error() {
    require_root();
    for args in [
        &["run", "-d", "300ms"][..],
        &["run", "-i", "200ms", "-d", "30s"],
        &["check"],
    ] {
        let t = Instant::now();
        let mut child = Command::new(tracer_bin())
            .args(args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let st = wait_detached(
            &mut child,
            Duration::from_secs(10),
            "writing to /dev/full",
            BTreeSet::new(),
            args[0] == "run",
        );
        let err = stderr_of(&mut child);
        assert_eq!(st.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err,
            "tracer: error: cannot write the report to standard output: No space left on device (os error 28)\n",
            "{args:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{args:?}");
    }
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

/// A workload process that exits by itself after `ms`, and the TID of one of its threads.
fn short_workload(ms: u64) -> (Child, u32) {
    short_workload_to(ms, Path::new("/dev/null"))
}

/// [`short_workload`] writing its threads' ground truth to `out`.
// The child is handed to the caller, which waits for it.
#[allow(clippy::zombie_processes)]
fn short_workload_to(ms: u64, out: &Path) -> (Child, u32) {
    let child = Command::new(WORKLOAD)
        .args([
            "busy-sleep",
            "--threads",
            "2",
            "--work-ms",
            "1",
            "--sleep-ms",
            "2",
        ])
        .args(["--duration-ms", &ms.to_string(), "--out"])
        .arg(out)
        .spawn()
        .unwrap();
    let task_dir = format!("/proc/{}/task", child.id());
    let t = Instant::now();
    loop {
        let tids: Vec<u32> = std::fs::read_dir(&task_dir)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(&tid) = tids.iter().find(|&&t| t != child.id()) {
            return (child, tid);
        }
        if t.elapsed() > Duration::from_secs(5) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            panic!("no workload thread");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
#[ignore = "needs root"]
fn the_run_ends_when_its_targets_exit() {
    require_root();
    for by in ["-p", "-t"] {
        // Long enough for the tracer to attach (a debug build takes about a second).
        let (mut workload, tid) = short_workload(3000);
        let target = if by == "-p" { workload.id() } else { tid };
        let t = Instant::now();
        let mut child = Command::new(tracer_bin())
            .args(["run", "--json", by, &target.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The workload stays a zombie (not reaped) meanwhile: exited all the same.
        let st = wait_within(&mut child, Duration::from_secs(8), by);
        let took = t.elapsed();
        let _ = workload.wait();
        let err = stderr_of(&mut child);
        assert!(st.success(), "{by}: {err}");
        let mut so = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut so)
            .unwrap();
        let doc: Value = serde_json::from_str(so.lines().last().unwrap()).unwrap();
        assert!(
            doc["notices"].to_string().contains("all targets exited"),
            "{by}: {doc}"
        );
        // Ended within 2.5 s of the workload's exit (perf stat -p ends at once).
        assert!(took < Duration::from_millis(5500), "{by}: took {took:?}");
        assert!(
            doc["threads"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["tid"].as_u64() == Some(tid as u64)),
            "{by}: the target's thread is in the report"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_target_already_exited_is_refused_at_once() {
    require_root();
    let mut zombie = Command::new("true").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(300)); // exited, not reaped
    let pid = zombie.id().to_string();
    for by in ["-p", "-t"] {
        let t = Instant::now();
        let out = run_tracer(&["run", by, &pid]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{by}: {err}");
        assert!(err.contains("has already exited"), "{by}: {err}");
        assert!(t.elapsed() < Duration::from_secs(5));
    }
    zombie.wait().unwrap();
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
    assert!(out.contains("(killed by SIGKILL)"), "{out}");

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
        line.contains("more bytes)") && line.contains("(exit 0)"),
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
    let out = run_tracer(&["run", "--", "/nonexistent/prog"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tracer: error: cannot start \"/nonexistent/prog\": command not found\n"
    );
    let file = scratch("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let out = run_tracer(&["run", "--", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
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

fn cgroup2_base() -> String {
    tracer_tests::cgroup2_mount().display().to_string()
}

#[test]
#[ignore = "needs root"]
fn an_empty_cgroup_is_traced_and_a_late_joiner_appears() {
    require_root();
    let cg = Path::new(&cgroup2_base()).join(format!("tracer-hygiene-{}", std::process::id()));
    std::fs::create_dir(&cg).expect("create a test cgroup");
    let path = scratch("empty-cgroup");
    let mut child = Command::new(tracer_bin())
        .args([
            "run",
            "--json",
            "--cgroup",
            cg.to_str().unwrap(),
            "-d",
            "3s",
        ])
        .stdout(std::fs::File::create(&path).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let attached = wait_loaded(child.id());
    let truth_file = scratch("empty-cgroup-truth");
    let (mut joiner, _) = short_workload_to(1000, &truth_file);
    std::fs::write(cg.join("cgroup.procs"), joiner.id().to_string()).unwrap();
    let st = wait_within(&mut child, Duration::from_secs(25), "--cgroup");
    let _ = joiner.wait();
    let _ = std::fs::remove_dir(&cg);
    let err = stderr_of(&mut child);
    assert!(attached, "tracer never attached: {err}");
    assert!(st.success(), "an empty cgroup must be accepted: {err}");
    let doc = last_doc(&std::fs::read_to_string(&path).unwrap());
    let _ = std::fs::remove_file(&path);
    // The joiner's exit does not end a cgroup run: the window is the whole -d.
    assert!(
        doc["duration_ns"].as_u64().unwrap() >= 2_900_000_000,
        "{doc}"
    );
    let rows: Vec<&Value> = doc["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["pid"].as_u64() == Some(joiner.id() as u64))
        .collect();
    assert!(
        !rows.is_empty(),
        "the late joiner's threads are traced: {doc}"
    );
    // Its on-CPU time is its own, from the join on (a join once read as the thread's
    // whole uptime): at most the kernel's figure, and most of it (it joined a few ms
    // after it started).
    let truth = tracer_tests::read_truth(&truth_file);
    let _ = std::fs::remove_file(&truth_file);
    for t in tracer_tests::workers(&truth, 2) {
        let row = rows
            .iter()
            .find(|r| r["tid"].as_u64() == Some(t.tid))
            .unwrap_or_else(|| panic!("joiner thread {} missing: {doc}", t.tid));
        let ours = row["on_cpu_ns"].as_u64().unwrap();
        assert!(
            tracer_truth::after_a_join(ours, t.run_ns),
            "tid {}: ours {ours} ns, schedstat {} ns",
            t.tid,
            t.run_ns
        );
    }
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
