//! Where `tracer record`'s trace goes, end to end as root: an unwritable path, a full
//! disk.
use std::time::{Duration, Instant};

use tracer_tests::{require_root, run_tracer};

mod record_common;
use record_common::*;

#[test]
#[ignore = "needs root"]
fn an_unwritable_output_is_one_line() {
    require_root();
    let out = run_tracer(&["record", "-o", "/nonexistent-dir/t.pftrace", "-d", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot write the trace") && err.contains("/nonexistent-dir"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_full_disk_ends_the_run_with_a_valid_trace() {
    require_root();
    let disk = SmallDisk::new("fulldisk", 64);
    let trace = disk.0.join("t.pftrace");
    let t = Instant::now();
    // System-wide with a busy workload: far more than 64 KiB in 10 s.
    let out = run_tracer(&[
        "record",
        "-o",
        trace.to_str().unwrap(),
        "-d",
        "10",
        "--",
        WORKLOAD,
        "churn",
        "--per-sec",
        "2000",
        "--duration-ms",
        "10000",
        "--out",
        "/dev/null",
    ]);
    assert!(t.elapsed() < Duration::from_secs(30), "it ended");
    assert_eq!(out.status.code(), Some(2), "a failed trace is an error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("No space left") && err.contains("t.pftrace"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // Cut back to the last whole packet: Perfetto's protos read all of it.
    let rb = rebuild(&trace);
    assert!(
        u(&rb["packets"]) >= 2,
        "SystemInfo and stats at least: {rb}"
    );
}
