//! Runs over `-p`, `-t` and `--cgroup` targets: the run ends when its targets exit, one
//! that exited already is refused at once, an empty cgroup is traced and a late joiner
//! appears with its time from the join.
use std::{
    io::Read as _,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{require_root, run_tracer, scratch, tracer_bin};

use super::{last_doc, stderr_of, wait_loaded, wait_within, WORKLOAD};

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
