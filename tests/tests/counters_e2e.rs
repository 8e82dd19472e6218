//! Issue 4, end to end as root: perf counters beside the BPF data, checked against the
//! workload's own CPU time and the BPF switch counts.
use serde_json::Value;
use tracer_tests::{final_report, require_root, run_tracer, thread, traced_workload, Background};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

fn counter<'a>(doc: &'a Value, event: &str) -> &'a Value {
    doc["counters"]["counters"]
        .as_array()
        .expect("counters section")
        .iter()
        .find(|c| c["event"] == event)
        .unwrap_or_else(|| panic!("{event} missing: {}", doc["counters"]))
}

#[test]
fn task_clock_and_context_switches_agree_with_the_kernel_and_the_bpf_counts() {
    require_root();
    let (mut docs, truth) = traced_workload(
        WORKLOAD,
        &[
            "-e",
            "task-clock,context-switches,cycles:u",
            "--slice-event",
            "task-clock",
        ],
        &[],
        &[
            "busy-sleep",
            "--threads",
            "3",
            "--work-ms",
            "2",
            "--sleep-ms",
            "3",
            "--duration-ms",
            "1500",
        ],
        "counters",
    );
    let doc = docs.pop().expect("a report");

    // task-clock (msec, as perf reports it) against the workload's own CPU time.
    let tc = counter(&doc, "task-clock");
    assert_eq!(tc["supported"], true);
    let tc_ns = tc["value"].as_f64().unwrap() * 1e6;
    let own: u64 = truth.iter().map(|t| t.cpu_ns).sum();
    assert!(
        (tc_ns - own as f64).abs() <= 0.03 * own as f64,
        "task-clock {tc_ns} ns vs CLOCK_THREAD_CPUTIME_ID sum {own} ns"
    );
    // "CPUs utilized" is task-clock / elapsed when task-clock is counted.
    let util = doc["cpus_utilized"].as_f64().unwrap();
    let dur = doc["duration_ns"].as_u64().unwrap() as f64;
    assert!(
        (util - tc_ns / dur).abs() <= 0.02 * util,
        "{util} vs {}",
        tc_ns / dur
    );

    // context-switches counts switch-outs of the command's threads, as the BPF side does,
    // except each thread's final switch (perf_event_exit_task() closes the counters in
    // do_exit first) and the held child's switches before exec (enable_on_exec).
    let cs = counter(&doc, "context-switches")["value"].as_f64().unwrap() as u64;
    let threads = doc["threads"].as_array().unwrap();
    let bpf: u64 = threads
        .iter()
        .map(|t| {
            t["voluntary_switches"].as_u64().unwrap() + t["involuntary_switches"].as_u64().unwrap()
        })
        .sum();
    let extra = bpf
        .checked_sub(cs)
        .unwrap_or_else(|| panic!("perf saw more: {cs} vs {bpf}"));
    assert!(
        extra <= threads.len() as u64 + 3,
        "context-switches {cs} vs BPF switches {bpf}"
    );

    // No hardware counters in this VM: not supported, never 0.
    let cy = counter(&doc, "cycles:u");
    assert_eq!(cy["supported"], false);
    assert!(cy["value"].is_null());

    // Per-slice counter deltas read in the kernel: task-clock per thread equals the
    // thread's on-CPU time within the slice boundaries' noise.
    for t in truth.iter().filter(|t| t.tid != t.pid) {
        let th = thread(&doc, t.tid).unwrap();
        let sc = th["slice_counters"]["task-clock"].as_u64().unwrap() as f64;
        let on = th["on_cpu_ns"].as_u64().unwrap() as f64;
        assert!(
            (sc - on).abs() <= 0.02 * on,
            "tid {}: slice task-clock {sc} vs on-CPU {on}",
            t.tid
        );
    }
}

#[test]
fn text_report_shows_not_supported_and_the_cross_check() {
    require_root();
    let out = run_tracer(&["run", "-e", "task-clock,cycles:u", "--", "sleep", "0.2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("<not supported>") && text.contains("cycles:u"),
        "{text}"
    );
    assert!(text.contains("CPUs utilized"), "{text}");
    assert!(text.contains("cross-check"), "{text}");
}

#[test]
fn unsupported_slice_event_is_a_notice_not_a_failure() {
    require_root();
    let out = run_tracer(&[
        "run",
        "--json",
        "--slice-event",
        "cycles",
        "--",
        "sleep",
        "0.1",
    ]);
    let doc = final_report(&out);
    let notices = doc["notices"].to_string();
    assert!(notices.contains("cycles"), "{notices}");
}

#[test]
fn per_thread_counters_for_a_pid_target() {
    require_root();
    let target = Background::start(WORKLOAD);
    let pid = target.pid().to_string();
    let out = run_tracer(&[
        "run",
        "--json",
        "-p",
        &pid,
        "-d",
        "800ms",
        "-e",
        "task-clock",
        "--per-thread",
    ]);
    drop(target);
    let doc = final_report(&out);
    let per = doc["counters"]["per_thread"]
        .as_object()
        .expect("per_thread counters");
    assert!(per.len() >= 3, "{per:?}");
}
