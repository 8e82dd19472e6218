//! `tracer serve`'s per-process histograms through thread churn, in every probe mode:
//! each slice the exporter counts in a process's switches is in its on-CPU histogram
//! too, including those of the threads that died (in task-storage mode they hand
//! their own histograms over as they die; elsewhere the kernel keeps them per process).
use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tracer_tests::{
    probe_modes,
    prometheus::{curl, free_port, Stopped},
    require_root, tracer_bin,
};

/// A sample's value, by metric name and a label text it contains.
fn value(body: &str, name: &str, labels: &str) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
#[ignore = "needs root"]
fn a_process_histograms_count_every_slice_of_its_dead_threads() {
    require_root();
    for mode in probe_modes() {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}/metrics");
        let _serve = Stopped(
            Command::new(tracer_bin())
                .args(["serve", "--probe", &mode, "--listen"])
                .arg(format!("127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .spawn()
                .expect("tracer serve starts"),
        );
        let t = Instant::now();
        while curl(&url, &[]).0 != 200 {
            assert!(t.elapsed() < Duration::from_secs(30), "{mode}: no answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        // 300 short threads a second for 3 s, each ending after a little work.
        let out = tracer_tests::scratch("serve-hists").with_extension("out");
        let mut w = Command::new(env!("CARGO_BIN_EXE_tracer-workload"))
            .args([
                "churn",
                "--per-sec",
                "300",
                "--duration-ms",
                "3000",
                "--out",
            ])
            .arg(&out)
            .spawn()
            .expect("workload starts");
        let pid = w.id();
        assert!(w.wait().unwrap().success());
        // Read after the process is gone: its series stays until it expires.
        std::thread::sleep(Duration::from_millis(1500));
        let (code, body) = curl(&url, &[]);
        assert_eq!(code, 200);
        let sel = format!("pid=\"{pid}\"");
        let switches = value(&body, "tracer_process_context_switches_total", &sel);
        let slices = value(&body, "tracer_process_on_cpu_slice_seconds_count", &sel);
        let waits = value(&body, "tracer_process_runq_latency_seconds_count", &sel);
        let lost = value(&body, "tracer_drops_total", "");
        eprintln!(
            "{mode}: pid {pid}: {switches} switches, {slices} slices and {waits} waits in \
             the histograms, {lost} drops of any kind machine-wide"
        );
        // About 900 threads of about 3 slices each: losing the dead threads' counts
        // would take about two thirds. A slice whose start the kernel did not report
        // is a switch without a slice (counted in the drops).
        assert!(
            switches > 1800.0,
            "{mode}: the churn was not seen: {switches}"
        );
        assert!(
            slices <= switches && slices >= switches * 0.99,
            "{mode}: {slices} slices in the histogram against {switches} switches"
        );
        assert!(
            waits <= switches && waits >= switches * 0.95,
            "{mode}: {waits} run-queue waits in the histogram against {switches} switches"
        );
    }
}
