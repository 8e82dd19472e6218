//! `tracer floor` (the benchmark's floor: an empty program on the switch) end to end, as
//! root.
use tracer_tests::{json_docs, require_root, run_tracer};

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
