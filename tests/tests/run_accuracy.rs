//! `tracer run` end to end, as root: real programs loaded and attached, numbers checked
//! against the kernel's own accounting (schedstat, CLOCK_THREAD_CPUTIME_ID).
use serde_json::Value;
use tracer_tests::{
    final_report, json_docs, require_root, run_tracer, thread, traced_workload, within, Background,
    Truth,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// Runs `tracer run --json [extra] -- tracer-workload ARGS --out F` and returns the
/// documents and the workload's ground truth.
fn traced(extra: &[&str], workload: &[&str], name: &str) -> (Vec<Value>, Vec<Truth>) {
    traced_workload(WORKLOAD, extra, &[], workload, name)
}

#[test]
#[ignore = "needs root"]
fn on_cpu_time_matches_schedstat_per_thread() {
    let (docs, truth) = traced(
        &[],
        &[
            "busy-sleep",
            "--threads",
            "4",
            "--work-ms",
            "3",
            "--sleep-ms",
            "2",
            "--duration-ms",
            "1500",
        ],
        "oncpu",
    );
    let doc = docs.last().expect("a report");
    assert_eq!(doc["kind"], "total");
    assert!(doc["probe"].is_string());
    assert_eq!(truth.len(), 5, "4 workers and the main thread");
    let mut sum_run = 0;
    for t in &truth {
        let th =
            thread(doc, t.tid).unwrap_or_else(|| panic!("thread {} missing from {doc}", t.tid));
        let ours = th["on_cpu_ns"].as_u64().unwrap();
        assert_eq!(th["pid"].as_u64(), Some(t.pid));
        // The thread read its schedstat a moment before it ended: allow 1% or 1 ms.
        assert!(
            within(ours, t.run_ns, 0.01, 1e6),
            "tid {}: ours {ours} ns, schedstat {} ns, thread clock {} ns",
            t.tid,
            t.run_ns,
            t.cpu_ns.unwrap_or_default()
        );
        assert!(th["slices"].as_u64().unwrap() > 0);
        assert!(
            th["voluntary_switches"].as_u64().unwrap() > 0,
            "the workers sleep"
        );
        sum_run += t.run_ns;
    }
    // The kernel also sums the traced slices per CPU, each no longer than its wall time
    // (so no CPU shows more than the window): the threads' total, less what the
    // scheduler credits woken threads with from before they ran (its skipped clock
    // update at a wakeup preemption).
    let per_cpu: u64 = doc["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["on_cpu_ns"].as_u64().unwrap())
        .sum();
    let total = doc["on_cpu_ns"].as_u64().unwrap();
    assert!(
        per_cpu.abs_diff(total) as f64 <= (total as f64 * 0.01).max(2e6),
        "per-CPU split {per_cpu} ns vs threads' total {total} ns"
    );
    let dur = doc["duration_ns"].as_u64().unwrap();
    let util = doc["cpus_utilized"].as_f64().unwrap();
    let expect = sum_run as f64 / dur as f64;
    assert!(
        (util - expect).abs() <= 0.03 * expect,
        "cpus_utilized {util} vs schedstat-based {expect}"
    );
}

#[test]
#[ignore = "needs root"]
fn runq_latency_matches_schedstat_run_delay() {
    runq_against_run_delay(&[], "wakeup", 0.03);
}

/// `--runq-from schedstat` takes the waits from `sched_info.run_delay` itself: the same
/// figure as schedstat, up to the wait of a slice still running when the thread read it.
#[test]
#[ignore = "needs root"]
fn runq_from_schedstat_is_the_kernels_run_delay() {
    runq_against_run_delay(&["--runq-from", "schedstat"], "run_delay", 0.01);
}

fn runq_against_run_delay(extra: &[&str], source: &str, rel: f64) {
    // Three spinners pinned to one CPU wait for each other all the time.
    let (docs, truth) = traced(
        extra,
        &[
            "spin",
            "--threads",
            "3",
            "--cpu",
            "0",
            "--duration-ms",
            "1500",
        ],
        "runq",
    );
    let doc = docs.last().unwrap();
    assert_eq!(doc["runq_source"], source);
    let spinners: Vec<&Truth> = truth.iter().filter(|t| t.tid != t.pid).collect();
    assert_eq!(spinners.len(), 3);
    for t in spinners {
        let th = thread(doc, t.tid).expect("spinner reported");
        let ours = th["runq_wait_ns"].as_u64().unwrap();
        assert!(
            t.wait_ns > 100_000_000,
            "spinners on one CPU must wait: {t:?}"
        );
        assert!(
            within(ours, t.wait_ns, rel, 0.0),
            "tid {}: runq_wait_ns {ours} vs schedstat run_delay {}",
            t.tid,
            t.wait_ns
        );
        assert!(th["runq_waits"].as_u64().unwrap() > 0);
        assert!(th["involuntary_switches"].as_u64().unwrap() > 0);
    }
    let h = &doc["histograms"]["runq"];
    assert!(h["count"].as_u64().unwrap() > 0);
    assert!(h["p50_ns"].as_u64().unwrap() > 0);
}

#[test]
#[ignore = "needs root"]
fn histograms_find_the_work_and_sleep_times() {
    // One worker: 4 ms of CPU, then 10 ms asleep, about 100 times. SCHED_FIFO keeps
    // other work on a busy machine (CI, parallel builds) from cutting the bursts.
    let (docs, truth) = traced_workload(
        WORKLOAD,
        &["-L"],
        &["chrt", "-f", "20"],
        &[
            "busy-sleep",
            "--threads",
            "1",
            "--work-ms",
            "4",
            "--sleep-ms",
            "10",
            "--duration-ms",
            "1500",
        ],
        "hist",
    );
    let doc = docs.last().unwrap();
    let worker = truth.iter().find(|t| t.tid != t.pid).unwrap();
    let th = thread(doc, worker.tid).unwrap();
    let h = &th["histograms"];
    let on_p50 = h["on_cpu"]["p50_ns"].as_u64().unwrap() as f64;
    let off_p50 = h["off_cpu"]["p50_ns"].as_u64().unwrap() as f64;
    assert!(
        (on_p50 - 4e6).abs() <= 0.04 * 4e6,
        "on-CPU p50 {on_p50} ns, expected ~4 ms: {h}"
    );
    // nanosleep overshoots by the timer slack (50 us by default).
    assert!(
        (10e6 * 0.98..=10e6 * 1.04).contains(&off_p50),
        "off-CPU p50 {off_p50} ns, expected ~10 ms: {h}"
    );
    for k in ["on_cpu", "runq", "off_cpu"] {
        let s = &h[k];
        let p50 = s["p50_ns"].as_u64().unwrap_or(0);
        let p99 = s["p99_ns"].as_u64().unwrap_or(0);
        let max = s["max_ns"].as_u64().unwrap_or(0);
        assert!(
            p50 <= p99 && p99 <= max,
            "{k}: percentiles out of order: {s}"
        );
        let n: u64 = s["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["count"].as_u64().unwrap())
            .sum();
        assert_eq!(
            n,
            s["count"].as_u64().unwrap(),
            "{k}: buckets add up to count"
        );
    }
    // The kernel counts a slice and a histogram entry in the same step.
    assert_eq!(h["on_cpu"]["count"], th["slices"]);
    assert_eq!(h["runq"]["count"], th["runq_waits"]);
    assert_eq!(th["exited"], true);
}

#[test]
#[ignore = "needs root"]
fn interval_deltas_add_up_to_the_totals() {
    let (docs, _truth) = traced(
        &["-i", "300ms"],
        &[
            "busy-sleep",
            "--threads",
            "2",
            "--work-ms",
            "2",
            "--sleep-ms",
            "3",
            "--duration-ms",
            "1400",
        ],
        "interval",
    );
    let intervals: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "interval").collect();
    let total = docs
        .iter()
        .find(|d| d["kind"] == "total")
        .expect("totals at the end");
    assert!(
        intervals.len() >= 4,
        "one document per 300 ms interval, got {}",
        intervals.len()
    );
    for (i, d) in intervals.iter().enumerate() {
        assert_eq!(d["interval"].as_u64(), Some(i as u64 + 1));
    }
    let dur: u64 = intervals
        .iter()
        .map(|d| d["duration_ns"].as_u64().unwrap())
        .sum();
    assert!(dur.abs_diff(total["duration_ns"].as_u64().unwrap()) < 1_000_000);
    for t in total["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap();
        for k in [
            "on_cpu_ns",
            "slices",
            "voluntary_switches",
            "runq_wait_ns",
            "off_cpu_ns",
        ] {
            let sum: u64 = intervals
                .iter()
                .filter_map(|d| thread(d, tid))
                .map(|x| x[k].as_u64().unwrap())
                .sum();
            assert_eq!(
                sum,
                t[k].as_u64().unwrap(),
                "tid {tid} {k}: intervals vs total"
            );
        }
    }
    for k in ["on_cpu", "runq", "off_cpu"] {
        let sum: u64 = intervals
            .iter()
            .map(|d| d["histograms"][k]["count"].as_u64().unwrap())
            .sum();
        assert_eq!(
            sum,
            total["histograms"][k]["count"].as_u64().unwrap(),
            "{k} histogram counts"
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
    assert!(util > 0.0 && util <= ncpu * 1.01, "cpus_utilized {util}");
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

#[test]
#[ignore = "needs root"]
fn unprivileged_run_names_the_capabilities() {
    require_root();
    let out = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(tracer_tests::tracer_bin())
        .args(["run", "-d", "1s"])
        .output()
        .expect("setpriv (util-linux) is needed");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_BPF") && err.contains("CAP_PERFMON"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root"]
fn cgroup_filter_traces_only_tasks_in_the_cgroup() {
    require_root();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let base = mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_string())
        })
        .expect("a cgroup2 mount");
    let cg = std::path::PathBuf::from(base).join(format!("tracer-test-{}", std::process::id()));
    std::fs::create_dir(&cg).expect("create a test cgroup");
    let inside = Background::start(WORKLOAD);
    std::fs::write(cg.join("cgroup.procs"), inside.pid().to_string()).unwrap();
    let _outside = Background::start(WORKLOAD);
    let inside_pid = inside.pid() as u64;
    let out = run_tracer(&[
        "run",
        "--json",
        "--cgroup",
        cg.to_str().unwrap(),
        "-d",
        "1s",
    ]);
    drop(inside);
    let _ = std::fs::remove_dir(&cg);
    let doc = final_report(&out);
    let threads = doc["threads"].as_array().unwrap();
    assert!(threads.len() >= 2, "{doc}");
    for t in threads {
        assert_eq!(
            t["pid"].as_u64(),
            Some(inside_pid),
            "only the cgroup's tasks: {t}"
        );
    }
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

/// The benchmark's floor (`tracer floor`) loads the same object and counts real switches.
#[test]
#[ignore = "needs root"]
fn floor_counts_switches() {
    require_root();
    let out = run_tracer(&["floor", "-d", "300ms"]);
    assert!(
        out.status.success(),
        "tracer floor failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = json_docs(&out);
    let n = docs[0]["switches"].as_u64().expect("a switch count");
    // The tracer itself sleeps in 20 ms steps: at least that many switches happen.
    assert!(n >= 10, "only {n} switches in 300 ms");
}
