//! `tracer run --runqlen` against the kernel's own figure: three threads spinning on one
//! CPU keep about two waiting there, and the time they wait is what schedstat's
//! `run_delay` adds up. The integral of the number waiting over time is the sum of the
//! waits, so the sampled mean must be the spinners' `run_delay` growth divided by the
//! wall time it grew in (plus what other tasks waited there, a few hundredths here).
//! In every probe mode; and the interval documents' samples add up to the totals'.
use std::{
    collections::BTreeMap,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{json_docs, probe_modes, require_root, run_tracer};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// Each thread's `run_delay` (schedstat's second field), ns.
fn run_delays(pid: u32) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let tid: u32 = e.file_name().to_str().unwrap().parse().unwrap();
        if let Ok(s) = std::fs::read_to_string(e.path().join("schedstat")) {
            if let Some(d) = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
                m.insert(tid, d);
            }
        }
    }
    m
}

fn the_cpu(doc: &Value, cpu: u64) -> Option<&Value> {
    doc["runqlen"]
        .as_array()?
        .iter()
        .find(|c| c["cpu"].as_u64() == Some(cpu))
}

#[test]
#[ignore = "needs root"]
fn three_spinners_on_one_cpu_keep_two_waiting_as_schedstat_says() {
    require_root();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let cpu = (cpus - 1) as u64;
    let mut problems = Vec::new();
    for mode in probe_modes() {
        let mut w = Command::new(WORKLOAD)
            .args(["spin", "--threads", "3", "--cpu", &cpu.to_string()])
            .args(["--duration-ms", "6000", "--out", "/dev/null"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = w.id();
        let t = Instant::now();
        while run_delays(pid).len() < 4 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Let the three settle into sharing the CPU.
        std::thread::sleep(Duration::from_millis(200));
        let (before, t0) = (run_delays(pid), Instant::now());
        let out = run_tracer(&[
            "run",
            "--runqlen",
            "--json",
            "-i",
            "500ms",
            "-d",
            "2s",
            "--probe",
            &mode,
        ]);
        let (after, wall) = (run_delays(pid), t0.elapsed());
        let _ = w.kill();
        let _ = w.wait();
        if !out.status.success() {
            problems.push(format!(
                "{mode}: tracer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
            continue;
        }
        let docs = json_docs(&out);
        let (total, intervals) = docs.split_last().expect("documents");
        let waited: u64 = after
            .iter()
            .map(|(tid, d)| d.saturating_sub(before.get(tid).copied().unwrap_or(0)))
            .sum();
        let want = waited as f64 / wall.as_nanos() as f64;
        let Some(c) = the_cpu(total, cpu) else {
            problems.push(format!(
                "{mode}: no runqlen for CPU {cpu}: {}",
                total["runqlen"]
            ));
            continue;
        };
        let mean = c["mean_waiting"].as_f64().unwrap();
        let samples = c["samples"].as_u64().unwrap();
        let secs = total["duration_ns"].as_u64().unwrap() as f64 / 1e9;
        eprintln!(
            "{mode}: CPU {cpu} mean {mean:.3} waiting over {samples} samples in {secs:.2} s; \
             schedstat: the spinners waited {:.3} s in {:.3} s of wall time ({want:.3})",
            waited as f64 / 1e9,
            wall.as_secs_f64()
        );
        // Three spinners wait two at a time; other tasks add a little. Sampling 99 Hz
        // for ~2 s gives ~200 samples of a nearly constant count.
        if want < 1.5 {
            problems.push(format!(
                "{mode}: the spinners waited only {want:.3} on average: the test's premise \
                 (three of them sharing CPU {cpu}) does not hold"
            ));
        }
        if (mean - want).abs() > 0.15 + 0.05 * want {
            problems.push(format!(
                "{mode}: CPU {cpu} read a mean of {mean:.3} waiting, schedstat says {want:.3}"
            ));
        }
        let expect = 99.0 * secs;
        if (samples as f64 - expect).abs() > 0.2 * expect {
            problems.push(format!(
                "{mode}: {samples} samples on CPU {cpu} in {secs:.2} s (99 Hz: ~{expect:.0})"
            ));
        }
        let slots: u64 = c["histogram"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["samples"].as_u64().unwrap())
            .sum();
        if slots != samples {
            problems.push(format!(
                "{mode}: CPU {cpu}'s histogram holds {slots} samples of {samples}"
            ));
        }
        // Intervals add up to the totals, CPU by CPU.
        for t in total["runqlen"].as_array().unwrap() {
            let n = t["cpu"].as_u64().unwrap();
            let sum: u64 = intervals
                .iter()
                .filter_map(|d| the_cpu(d, n))
                .map(|c| c["samples"].as_u64().unwrap())
                .sum();
            if sum != t["samples"].as_u64().unwrap() {
                problems.push(format!(
                    "{mode}: CPU {n}: the {} intervals hold {sum} samples, the totals {}",
                    intervals.len(),
                    t["samples"]
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
#[ignore = "needs root"]
fn the_text_report_has_a_row_per_cpu() {
    require_root();
    let out = run_tracer(&["run", "--runqlen", "-d", "300ms"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cpus = std::thread::available_parallelism().unwrap().get();
    let header = text
        .lines()
        .position(|l| l.starts_with("Run-queue length"))
        .unwrap_or_else(|| panic!("no run-queue length section:\n{text}"));
    let rows = text
        .lines()
        .skip(header + 2)
        .take_while(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|cpu| cpu.parse::<u32>().is_ok())
        })
        .count();
    assert_eq!(rows, cpus, "one row per CPU:\n{text}");
}

/// `tracer_runqueue_length{cpu}`'s `_sum` and `_count` in one scrape of `/metrics`.
fn scraped(body: &str, cpu: u64) -> (f64, f64) {
    let get = |suffix: &str| {
        let name = format!("tracer_runqueue_length_{suffix}{{cpu=\"{cpu}\"}}");
        body.lines()
            .find_map(|l| l.strip_prefix(&name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in the scrape:\n{body}"))
    };
    (get("sum"), get("count"))
}

/// `tracer serve --runqlen`: between two scrapes, the histogram's `_sum / _count` on the
/// spinners' CPU is the mean waiting, as schedstat's run_delay growth over the same
/// wall time says; and without the flag the family is absent.
#[test]
#[ignore = "needs root"]
fn serve_exports_the_same_mean_as_schedstat() {
    require_root();
    let cpu = (std::thread::available_parallelism().unwrap().get() - 1) as u64;
    let dir = tracer_tests::scratch("serve-runqlen");
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = Command::new(WORKLOAD)
        .args(["spin", "--threads", "3", "--cpu", &cpu.to_string()])
        .args(["--duration-ms", "60000", "--out", "/dev/null"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = w.id();
    let (serve, target) = tracer_tests::prometheus::serve(&dir, &["--runqlen".as_ref()]);
    let url = format!("http://{target}/metrics");
    let scrape = || {
        let (code, body) = tracer_tests::prometheus::curl(&url, &[]);
        assert_eq!(code, 200, "{body}");
        body
    };
    std::thread::sleep(Duration::from_millis(500));
    let (b0, d0, t0) = (scrape(), run_delays(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (b1, d1, wall) = (scrape(), run_delays(pid), t0.elapsed());
    drop(serve);
    let (plain, plain_target) = tracer_tests::prometheus::serve(&dir, &[]);
    let (_, plain_body) =
        tracer_tests::prometheus::curl(&format!("http://{plain_target}/metrics"), &[]);
    drop(plain);
    let _ = w.kill();
    let _ = w.wait();
    let ((s0, c0), (s1, c1)) = (scraped(&b0, cpu), scraped(&b1, cpu));
    let mean = (s1 - s0) / (c1 - c0);
    let waited: u64 = d1
        .iter()
        .map(|(tid, d)| d.saturating_sub(d0.get(tid).copied().unwrap_or(0)))
        .sum();
    let want = waited as f64 / wall.as_nanos() as f64;
    eprintln!(
        "serve: CPU {cpu} mean {mean:.3} over {} samples; schedstat {want:.3}",
        c1 - c0
    );
    assert!(want >= 1.5, "the spinners waited only {want:.3} on average");
    assert!(
        (mean - want).abs() <= 0.15 + 0.05 * want,
        "CPU {cpu}: serve's mean {mean:.3}, schedstat's {want:.3}"
    );
    assert!(
        !plain_body.contains("tracer_runqueue_length"),
        "without --runqlen the family is served"
    );
}
