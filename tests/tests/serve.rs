//! `tracer serve` against its real consumers: a Prometheus server scraping it every
//! second (queried through its HTTP API), `promtool check metrics`, and curl for TLS and
//! basic auth. Ground truth: the workload's own schedstat per thread.
use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{read_truth, require_root, tracer_bin};

mod serve_common;
use serve_common::*;

#[path = "serve/churn.rs"]
mod churn;
#[path = "serve/tls.rs"]
mod tls;

/// The p50 of `tracer run`'s run-queue histogram for one process, from its JSON.
fn run_p50_ns(doc: &Value) -> Option<f64> {
    doc["histograms"]["runq"]["p50_ns"].as_f64()
}

#[test]
#[ignore = "needs root"]
fn prometheus_scrapes_cpu_time_and_latency_as_the_kernel_counts_them() {
    require_root();
    let dir = scratch("serve-prom");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _serve = start_serve(
        &["--listen", &listen, "--max-series", "40", "--expiry", "4s"],
        &format!("http://{listen}/metrics"),
        &[],
    );
    let prom = Prometheus::start(&dir, &listen);
    // Two scrapes before the workload, so its first sample is near its start.
    std::thread::sleep(Duration::from_secs(2));
    let truth_file = dir.join("truth");
    // `tracer run` on the same process for its whole life, as serve sees it: the latency
    // reference, from the same waits (a `-p` run would start after the process and time
    // another stretch of it, whose median on a loaded machine can be another mode).
    let run = Command::new(tracer_bin())
        .args(["run", "--json", "-d", "20s", "--"])
        .arg(env!("CARGO_BIN_EXE_tracer-workload"))
        .args([
            "busy-sleep",
            "--threads",
            "2",
            "--work-ms",
            "3",
            "--sleep-ms",
            "2",
            "--duration-ms",
            "5000",
            "--out",
        ])
        .arg(&truth_file)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let doc: Value = serde_json::from_slice(&run.stdout).unwrap();
    let pid = doc["threads"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["comm"] == "tracer-workload"))
        .and_then(|t| t["pid"].as_u64())
        .unwrap_or_else(|| panic!("the workload in tracer run's report: {doc}"));
    // Three more scrapes after it ended.
    std::thread::sleep(Duration::from_secs(3));

    let truth = read_truth(&truth_file);
    assert!(
        truth.len() >= 2,
        "a truth line per worker thread: {}",
        truth.len()
    );
    let truth_ns: u64 = truth.iter().map(|t| t.run_ns).sum();
    let sel = format!("{{job=\"tracer\",pid=\"{pid}\"}}");
    let on_cpu = prom
        .value(&format!(
            "max_over_time(tracer_process_on_cpu_seconds_total{sel}[2m])"
        ))
        .expect("the workload's on-CPU series in Prometheus");
    eprintln!(
        "serve: on-CPU {on_cpu:.4} s in Prometheus vs {:.4} s schedstat",
        truth_ns as f64 / 1e9
    );
    // The main thread's own time (spawning, joining) is not in the truth: 5 ms.
    assert!(
        tracer_truth::SCRAPED_ON_CPU.holds(on_cpu * 1e9, truth_ns as f64),
        "Prometheus {on_cpu:.4} s vs schedstat {:.4} s",
        truth_ns as f64 / 1e9
    );
    // rate() over the run: the same growth per second as the truth over its wall time.
    let rate = prom
        .value(&format!(
            "max_over_time(rate(tracer_process_on_cpu_seconds_total{sel}[3s])[1m:1s])"
        ))
        .expect("a rate");
    assert!(rate > 0.1 && rate < 2.2, "rate {rate} CPUs for 2 threads");

    // Run-queue latency: the median from the exporter's buckets within the same
    // power-of-two bucket as `tracer run`'s p50 (the classic buckets are powers of two).
    let q50 = prom
        .value(&format!(
            "histogram_quantile(0.5, max_over_time(tracer_process_runq_latency_seconds_bucket{sel}[2m]))"
        ))
        .expect("a run-queue median");
    if let Some(p50) = run_p50_ns(&doc) {
        eprintln!("serve: run-queue p50 {q50:e} s from Prometheus, {p50} ns from tracer run");
        let ratio = q50 * 1e9 / p50;
        assert!(
            (0.5..=2.0).contains(&ratio),
            "Prometheus p50 {q50:e} s vs tracer run p50 {p50} ns"
        );
    } else {
        panic!("tracer run's JSON has no run-queue p50: {doc}");
    }

    // Cardinality: at most --max-series process series (plus pid="other").
    let series = prom
        .value("count(tracer_process_on_cpu_seconds_total{job=\"tracer\"})")
        .unwrap();
    assert!(
        series <= 41.0,
        "{series} process series with --max-series 40"
    );

    // Expiry: the workload ended > 4 s ago: its series is gone from the exposition.
    std::thread::sleep(Duration::from_secs(3));
    let (code, body, _) = curl(&[&format!("http://{listen}/metrics")]);
    assert_eq!(code, 200);
    assert!(
        !body.contains(&format!("pid=\"{pid}\"")),
        "the exited workload's series outlived --expiry"
    );
}

#[test]
#[ignore = "needs root"]
fn promtool_accepts_the_exposition_and_bad_requests_get_4xx() {
    require_root();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let url = format!("http://{listen}/metrics");
    let _serve = start_serve(&["--listen", &listen], &url, &[]);
    // The first scrape may come before anything waited in a run queue: histogram series
    // appear with their first observation, so wait for one (the machine always has some).
    let t = Instant::now();
    let body = loop {
        let (code, body, _) = curl(&[&url]);
        assert_eq!(code, 200);
        if body.contains("tracer_cgroup_runq_latency_seconds_bucket")
            || t.elapsed() > Duration::from_secs(20)
        {
            break body;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let dir = scratch("serve-promtool");
    let file = dir.join("metrics.txt");
    std::fs::write(&file, &body).unwrap();
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("promtool");
    assert!(
        check.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    for name in [
        "tracer_cgroup_runq_latency_seconds_bucket",
        "tracer_cpu_busy_seconds_total",
        "tracer_bpf_run_time_seconds_total",
        "process_resident_memory_bytes",
    ] {
        assert!(body.contains(name), "{name} missing");
    }
    // OpenMetrics when asked for it.
    let (code, om, _) = curl(&["-H", "Accept: application/openmetrics-text", &url]);
    assert_eq!(code, 200);
    assert!(om.trim_end().ends_with("# EOF"));
    // Each family declared once (the off-CPU counter and histogram once clashed here).
    let mut families = std::collections::HashSet::new();
    for l in om.lines().filter(|l| l.starts_with("# TYPE ")) {
        assert!(
            families.insert(l.split_whitespace().nth(2).unwrap().to_string()),
            "{l}"
        );
    }
    assert_eq!(curl(&[&format!("http://{listen}/nope")]).0, 404);
    assert_eq!(curl(&["-X", "POST", &url]).0, 405);
    let (code, index, _) = curl(&[&format!("http://{listen}/")]);
    assert_eq!(code, 200);
    assert!(index.contains("/metrics"));
    // A client that sends half a request and stalls does not hold up others.
    let stall = std::net::TcpStream::connect(&listen).unwrap();
    use std::io::Write as _;
    (&stall).write_all(b"GET /metr").unwrap();
    assert_eq!(curl(&[&url]).0, 200);
    drop(stall);
}

/// Under `nohup` (SIGHUP ignored when it starts) the exporter keeps serving through a
/// SIGHUP; started normally, a SIGHUP (the terminal closing) stops it cleanly.
#[test]
#[ignore = "needs root"]
fn an_ignored_sighup_stays_ignored() {
    require_root();
    for ignored in [true, false] {
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}/metrics");
        let listen = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(tracer_bin());
        cmd.args(["serve", "--listen", &listen])
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        if ignored {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: signal(2) between fork and exec, as nohup does.
            unsafe {
                cmd.pre_exec(|| {
                    libc::signal(libc::SIGHUP, libc::SIG_IGN);
                    Ok(())
                });
            }
        }
        let mut k = Killed(cmd.spawn().expect("tracer serve starts"));
        let t = Instant::now();
        while curl(&[&url]).0 != 200 {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "never answered {url}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(k.0.id() as i32, libc::SIGHUP) };
        std::thread::sleep(Duration::from_millis(1500));
        let state = k.0.try_wait().unwrap();
        if ignored {
            assert!(
                state.is_none(),
                "nohup'd tracer serve ended on SIGHUP: {state:?}"
            );
            assert_eq!(curl(&[&url]).0, 200, "still serving after SIGHUP");
        } else {
            let st = state.expect("tracer serve stops on SIGHUP");
            assert_eq!(st.code(), Some(0), "a clean stop: {st}");
        }
    }
}
