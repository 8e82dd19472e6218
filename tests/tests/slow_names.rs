//! `tracer slow` names each waiting thread by the name the kernel has for it when it
//! waited: a command started through a shell that execs it is named by
//! what it exec'd, not `sh`, and a `-- COMMAND`'s main thread not by `tracer-launch` (but for
//! waits before its exec, when it had that name). The
//! truth is the threads' own `/proc/.../comm`, which the workload never changes.
use std::collections::BTreeSet;

use serde_json::Value;
use tracer_tests::{read_truth, require_root, run_tracer, scratch};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

#[test]
#[ignore = "needs root"]
fn slow_names_the_threads_as_the_kernel_does_after_an_exec() {
    require_root();
    let truth_file = scratch("slow-names");
    // Three threads on one CPU: each waits while the other two run; `sh` execs it.
    let script = format!(
        "exec {WORKLOAD} spin --threads 3 --cpu 0 --duration-ms 1500 --out {}",
        truth_file.display()
    );
    let out = run_tracer(&["slow", "--min", "1ms", "--json", "--", "sh", "-c", &script]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let truth = read_truth(&truth_file);
    let _ = std::fs::remove_file(&truth_file);
    let tids: BTreeSet<u64> = truth.iter().map(|t| t.tid).collect();
    // The name exec gave the program: the executable's file name, cut at 15 bytes.
    let name: String = std::path::Path::new(WORKLOAD)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .chars()
        .take(15)
        .collect();
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["tid"].as_u64().is_some_and(|t| tids.contains(&t)))
        .collect();
    assert!(
        events.len() >= 20,
        "three spinners on one CPU wait often: {} events",
        events.len()
    );
    // The command's main thread waited under its earlier names too, truly, if it waited
    // before its execs (the launcher released, `sh` started): those events come first and
    // are few. Any after its first event under the workload's name, on any other thread,
    // or more than two, would be a stale name.
    let main = truth.iter().map(|t| t.pid).next();
    let mut named = BTreeSet::new();
    let mut before_exec = 0;
    let wrong: Vec<String> = events
        .iter()
        .filter(|e| {
            let tid = e["tid"].as_u64();
            if e["comm"].as_str() == Some(name.as_str()) {
                named.insert(tid);
                return false;
            }
            let earlier = ["tracer-launch", "sh"].contains(&e["comm"].as_str().unwrap_or(""));
            if earlier && tid == main && !named.contains(&tid) && before_exec < 2 {
                before_exec += 1;
                return false;
            }
            true
        })
        .map(|e| format!("tid {} comm {}", e["tid"], e["comm"]))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} events of the workload's threads are not named {name:?}: {}",
        wrong.len(),
        events.len(),
        wrong.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
    );
}
