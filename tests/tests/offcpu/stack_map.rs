//! A stack map too small for the run's stacks: a stack whose bucket holds another goes
//! to the spill map and keeps its frames; what is still lost is counted and shown.
use serde_json::Value;

use super::{run_json, truth, workload};
use tracer_tests::{require_root, scratch};

/// Whether a stack part (user, kernel, or a waker's) was lost to a collision.
fn collided(part: &Value) -> bool {
    part["missing"] == "collision"
}

/// `--stack-entries 1`: one slot, so every stack after the first collides there (the
/// kernel hashes each stack to a bucket and refuses a second). Before the spill map all
/// but one stack of the run were lost; now most keep their frames, the pipe read's
/// among them or counted.
#[test]
#[ignore = "needs root"]
fn stacks_that_collide_keep_their_frames() {
    require_root();
    let w = workload(true);
    let t = scratch("offcpu-spill-truth");
    let doc = run_json(&[
        "offcpu",
        "--json",
        "--wakers",
        "--stack-entries",
        "1",
        "--",
        w.to_str().unwrap(),
        "--ms",
        "20",
        "--rounds",
        "10",
        "--out",
        t.to_str().unwrap(),
    ]);
    let tr = truth(&t);
    let _ = std::fs::remove_file(&t);
    let stacks = doc["stacks"].as_array().unwrap();
    let parts = |s: &Value| {
        [
            s["user"].clone(),
            s["kernel"].clone(),
            s["waker"]["user"].clone(),
            s["waker"]["kernel"].clone(),
        ]
    };
    let lost = stacks
        .iter()
        .filter(|s| parts(s).iter().any(collided))
        .count();
    let framed = stacks
        .iter()
        .filter(|s| s["user"].is_array() && s["kernel"].is_array())
        .count();
    let d = &doc["drops"];
    let counted = d["kernel_stack_collisions"].as_u64().unwrap()
        + d["user_stack_collisions"].as_u64().unwrap();
    eprintln!(
        "{} stacks: {framed} with both frames, {lost} with a part lost to a collision \
         ({counted} collisions counted)",
        stacks.len()
    );
    // Without the spill map all but the first stack lose their frames (2 of 31 rows
    // framed). With it a stack is lost only if it collides in the spill map too, but
    // one lost kernel stack is a part of many rows: 58% of rows framed at worst in 100
    // runs on 2026-12-06, so a third is the bound.
    assert!(
        framed >= 10 && framed * 3 >= stacks.len(),
        "{framed} stacks framed, {lost} of {} lost to collisions",
        stacks.len()
    );
    // A row shown as lost is counted as lost.
    assert!(lost == 0 || counted > 0, "{lost} rows lost, 0 counted");
    // The pipe read, with its frames or shown as lost: its time is kept either way.
    let pipe = tr["pipe_tid"].as_u64().unwrap();
    let pipe_ns: u64 = stacks
        .iter()
        .filter(|s| s["tid"] == pipe && s["state"] == "blocked")
        .map(|s| s["total_ns"].as_u64().unwrap())
        .sum();
    let want = tr["pipe_ns"].as_u64().unwrap();
    assert!(
        pipe_ns * 100 >= want * 95,
        "the pipe reader's blocked time {pipe_ns} ns against the workload's {want} ns"
    );
}
