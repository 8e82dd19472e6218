//! `--wakers` (offwaketime's question): who ended each blocked wait, in every probe mode,
//! in JSON, folded and the flame graph.
use serde_json::Value;
use tracer_tests::{require_root, run_tracer, scratch};

use super::{run_json, stacks_of, time_in, truth, within_or, workload};

/// Time of `tid`'s blocked stacks in `func` whose waker's user frames name `waker_fn`
/// (None: woken from an interrupt), and of all of them.
fn woken_in(doc: &Value, tid: u64, func: &str, waker_fn: Option<&str>) -> (u64, u64) {
    let (mut by, mut all) = (0, 0);
    for s in doc["stacks"].as_array().unwrap() {
        let named = s["user"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f["name"] == func));
        if s["tid"] != tid || s["state"] != "blocked" || !named {
            continue;
        }
        let ns = s["total_ns"].as_u64().unwrap();
        all += ns;
        let w = &s["waker"];
        let hit = match waker_fn {
            Some(f) => w["user"]
                .as_array()
                .is_some_and(|u| u.iter().any(|x| x["name"] == f)),
            None => w["interrupt"] == true,
        };
        if hit {
            by += ns;
        }
    }
    (by, all)
}

/// `--wakers` (offwaketime's question): the pipe read was woken by the main thread's
/// `offcpu_pipe_write_here`, the nanosleep by the timer interrupt; in every probe mode,
/// in JSON, folded (`waiter;--;waker`) and the flame graph.
#[test]
#[ignore = "needs root"]
fn wakers_name_the_writer_of_the_pipe() {
    require_root();
    let w = workload(true);
    let modes = tracer_tests::probe_modes();
    for mode in modes.iter().filter(|m| *m != "perf-sched") {
        let t = scratch("offcpu-wakers-truth");
        let svg = scratch("offcpu-wakers.svg");
        let doc = run_json(&[
            "offcpu",
            "--json",
            "--wakers",
            "--probe",
            mode,
            "--svg",
            svg.to_str().unwrap(),
            "--",
            w.to_str().unwrap(),
            "--ms",
            "20",
            "--rounds",
            "20",
            "--out",
            t.to_str().unwrap(),
        ]);
        let tr = truth(&t);
        let pid = tr["pid"].as_u64().unwrap();
        let pipe = tr["pipe_tid"].as_u64().unwrap();
        let (by, all) = woken_in(
            &doc,
            pipe,
            "offcpu_pipe_read_here",
            Some("offcpu_pipe_write_here"),
        );
        // Against the workload's clock, with any preemption inside the function (as
        // named_waits_agree counts it).
        let preempted = time_in(&doc, pipe, "preempted", "offcpu_pipe_read_here");
        within_or(
            &format!("{mode}: pipe read, all wakers and preempted"),
            all + preempted,
            tr["pipe_ns"].as_u64().unwrap(),
            || stacks_of(&doc, pipe),
        );
        eprintln!("{mode}: pipe read woken by offcpu_pipe_write_here: {by} of {all} ns");
        assert!(
            by * 10 >= all * 9,
            "{mode}: the writer woke {by} of {all} ns"
        );
        let waker_pid = doc["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["tid"] == pipe && s["waker"]["user"].is_array())
            .map(|s| s["waker"]["pid"].clone());
        assert_eq!(
            waker_pid,
            Some(pid.into()),
            "{mode}: the writer is the main thread"
        );
        let sleep = tr["sleep_tid"].as_u64().unwrap();
        let (irq, all) = woken_in(&doc, sleep, "offcpu_nanosleep_here", None);
        assert!(
            irq * 10 >= all * 9,
            "{mode}: a timer interrupt woke {irq} of {all} ns"
        );
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(
            svg_text.contains("offcpu_pipe_write_here") && svg_text.contains("--"),
            "{mode}: the flame graph has no waker frames"
        );
        let _ = std::fs::remove_file(&svg);
        let _ = std::fs::remove_file(&t);
    }
    // Folded, as offwaketime: the waiter's frames, `--`, the waker's, leaf first.
    let t = scratch("offcpu-wakers-folded");
    let out = run_tracer(&[
        "offcpu",
        "--folded",
        "--wakers",
        "--",
        w.to_str().unwrap(),
        "--ms",
        "20",
        "--rounds",
        "5",
        "--out",
        t.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&t);
    let folded = String::from_utf8_lossy(&out.stdout);
    assert!(
        folded.lines().any(|l| {
            let (waiter, waker) = l.split_once(";--;").unwrap_or_default();
            waiter.contains("offcpu_pipe_read_here") && waker.contains("offcpu_pipe_write_here")
        }),
        "{folded}"
    );
}
