use super::{doc::parse, *};

/// A total report with `threads` as (tid, pid, comm, on_cpu_ns, runq_wait_ns, runq
/// bucket bound or 0 for no per-thread histograms).
fn report(probe: &str, schema: u32, threads: &[(u32, u32, &str, u64, u64, u64)]) -> String {
    let hist = |le: u64| {
        let b = if le == 0 {
            String::new()
        } else {
            format!(r#"{{"le_ns":{le},"count":10}}"#)
        };
        format!(r#"{{"sum_ns":{},"buckets":[{b}]}}"#, le * 10)
    };
    let rows: Vec<String> = threads
        .iter()
        .map(|&(tid, pid, comm, on, rq, le)| {
            let h = if le == 0 {
                String::new()
            } else {
                format!(
                    r#","histograms":{{"on_cpu":{0},"runq":{0},"off_cpu":{0}}}"#,
                    hist(le)
                )
            };
            format!(
                r#"{{"tid":{tid},"pid":{pid},"comm":"{comm}","on_cpu_ns":{on},"slices":3,
                "voluntary_switches":1,"involuntary_switches":2,"runq_wait_ns":{rq},
                "runq_waits":3,"off_cpu_ns":5,"blocked_ns":4,"preempted_ns":1,"migrations":1{h}}}"#
            )
        })
        .collect();
    let on: u64 = threads.iter().map(|t| t.3).sum();
    format!(
        r#"{{"schema":{schema},"kind":"total","time":"2026-12-01T18:00:00.000Z","duration_ns":1000000000,
        "target":"all CPUs","probe":"{probe}","probe_attach":"tp_btf","runq_source":"wakeup",
        "cpus_utilized":{cpus},"cpus_utilized_source":"on_cpu","on_cpu_ns":{on},
        "threads":[{rows}],"threads_total":{n},
        "histograms":{{"on_cpu":{h},"runq":{h},"off_cpu":{h}}}}}"#,
        cpus = on as f64 / 1e9,
        rows = rows.join(","),
        n = threads.len(),
        h = hist(1023),
    )
}

fn doc(s: &str) -> RunDoc {
    parse(s.as_bytes()).unwrap().0
}

#[test]
fn threads_are_matched_by_process_and_thread_name_largest_change_first() {
    // PIDs and TIDs differ between runs; two "worker" threads in B sum into one group.
    let a = doc(&report(
        "tp-btf",
        1,
        &[
            (10, 10, "db", 100, 5, 0),
            (11, 10, "worker", 1000, 50, 0),
            (20, 20, "idle-ish", 7, 0, 0),
        ],
    ));
    let b = doc(&report(
        "tp-btf",
        1,
        &[
            (30, 30, "db", 90, 5, 0),
            (31, 30, "worker", 2000, 10, 0),
            (32, 30, "worker", 500, 10, 0),
        ],
    ));
    comparable(&a, &b).unwrap();
    let d = diff("a.json", &a, "b.json", &b);
    let names: Vec<(&str, &str)> = d
        .groups
        .iter()
        .map(|g| (g.process.as_str(), g.thread.as_str()))
        .collect();
    assert_eq!(
        names,
        [("db", "worker"), ("db", "db"), ("idle-ish", "idle-ish")]
    );
    let w = &d.groups[0];
    assert_eq!((w.threads_a, w.threads_b), (1, 2));
    assert_eq!(w.changes[0].metric, "on_cpu_ns");
    assert_eq!(w.changes[0].delta, 1500.0);
    assert_eq!(w.changes[0].pct, Some(150.0));
    let rq = &w.changes[1];
    assert_eq!(
        (rq.metric.as_str(), rq.delta),
        ("runq_wait_ns", -30.0),
        "the sign says which way"
    );
    // Gone in B: its figures are null there and the change is all of A's, negated.
    let gone = &d.groups[2];
    assert_eq!((gone.threads_a, gone.threads_b), (1, 0));
    assert_eq!((gone.changes[0].a, gone.changes[0].b), (Some(7.0), None));
    assert_eq!(gone.changes[0].delta, -7.0);
    // No -L in either report: no per-group percentiles are made up.
    assert!(
        w.changes.iter().all(|c| !c.metric.contains("_p")),
        "{:?}",
        w.changes
    );
}

#[test]
fn totals_are_sorted_by_relative_change_and_percentiles_come_from_the_buckets() {
    let a = doc(&report("tp-btf", 1, &[(1, 1, "x", 100, 0, 0)]));
    let b = doc(&report("tp-btf", 1, &[(1, 1, "x", 400, 0, 0)]));
    let d = diff("a", &a, "b", &b);
    let pcts: Vec<f64> = d.total.iter().filter_map(|c| c.pct.map(f64::abs)).collect();
    assert!(pcts.windows(2).all(|w| w[0] >= w[1]), "{pcts:?}");
    assert_eq!(d.total[0].pct, Some(300.0), "{:?}", d.total[0]);
    let p99 = d.total.iter().find(|c| c.metric == "runq_p99_ns").unwrap();
    assert_eq!(
        (p99.a, p99.b, p99.delta),
        (Some(1015.0), Some(1015.0), 0.0),
        "the bucket's midpoint, as the run reports it"
    );
}

#[test]
fn per_thread_histograms_give_merged_percentiles() {
    let a = doc(&report(
        "tp-btf",
        1,
        &[(1, 1, "x", 1, 0, 1023), (2, 1, "y", 1, 0, 0)],
    ));
    let b = doc(&report(
        "tp-btf",
        1,
        &[(5, 5, "x", 1, 0, 1023), (6, 5, "x", 1, 0, 1_048_575)],
    ));
    let d = diff("a", &a, "b", &b);
    let x = d.groups.iter().find(|g| g.thread == "x").unwrap();
    let p99 = x
        .changes
        .iter()
        .find(|c| c.metric == "runq_p99_ns")
        .unwrap();
    assert_eq!(p99.a, Some(1015.0));
    // B's group merges 10 waits near 1 us and 10 near 1 ms: the p99 is a slow one, the
    // p50 a fast one.
    assert!(p99.b.unwrap() > 1_000_000.0, "{p99:?}");
    let p50 = x
        .changes
        .iter()
        .find(|c| c.metric == "runq_p50_ns")
        .unwrap();
    assert_eq!(p50.b, Some(1015.0), "{p50:?}");
    let y = d.groups.iter().find(|g| g.thread == "y").unwrap();
    assert!(
        y.changes.iter().all(|c| c.metric != "runq_p50_ns"),
        "no histogram on either side: no percentile made up"
    );
}

#[test]
fn different_probe_modes_schemas_or_sources_are_refused_saying_which() {
    let a = doc(&report("tp-btf", 1, &[]));
    let e = comparable(&a, &doc(&report("raw-tp", 1, &[]))).unwrap_err();
    assert!(
        e.contains("different probe modes (A tp-btf, B raw-tp)"),
        "{e}"
    );
    let e = comparable(&a, &doc(&report("tp-btf", 0, &[]))).unwrap_err();
    assert!(
        e.contains("different schemas (A is schema 1, B is schema 0)"),
        "{e}"
    );
    let mut c = doc(&report("tp-btf", 1, &[]));
    c.runq_source = "run_delay".into();
    let e = comparable(&a, &c).unwrap_err();
    assert!(
        e.contains("run-queue sources (A wakeup, B run_delay)"),
        "{e}"
    );
    assert!(!e.contains('\n'));
}

#[test]
fn what_is_not_a_total_report_is_told_apart() {
    let msg = |s: &str| parse(s.as_bytes()).unwrap_err().to_string();
    assert_eq!(msg(" \n"), "empty, not a tracer report");
    assert!(
        msg("{\"kind\":").starts_with("truncated"),
        "{}",
        msg("{\"kind\":")
    );
    assert!(msg("hello").starts_with("not JSON"));
    assert!(msg("[1]").contains("a JSON array"), "{}", msg("[1]"));
    assert!(msg(r#"{"items":[],"run_ok":true}"#).contains("tracer check --json"));
    let total = report("tp-btf", 1, &[]);
    let interval = total.replace(r#""kind":"total""#, r#""kind":"interval","interval":2"#);
    assert!(
        msg(&interval).contains("interval 2, not a total report"),
        "{}",
        msg(&interval)
    );
    // JSON Lines of an interval run: the last document is the total.
    let lines = format!(
        "{}\n{}\n",
        interval.replace('\n', " "),
        total.replace('\n', " ")
    );
    assert_eq!(parse(lines.as_bytes()).unwrap().1, 2);
    let bad = total.replace("1023", "1000");
    assert!(
        msg(&bad).contains("le_ns 1000 is not a bucket bound"),
        "{}",
        msg(&bad)
    );
    // A field of the wrong type is named, not a panic.
    let wrong = total.replace(r#""duration_ns":1000000000"#, r#""duration_ns":"1s""#);
    assert!(
        msg(&wrong).contains("not a `tracer run --json` report"),
        "{}",
        msg(&wrong)
    );
}

#[test]
fn counters_counted_in_neither_run_and_a_millisecond_of_window_are_not_news() {
    let with = |r: String, dur: u64| {
        r.replacen(
            r#""threads":"#,
            r#""counters":{"counters":[{"event":"cycles","value":null},{"event":"task-clock","value":5.0}]},"threads":"#,
            1,
        )
        .replace("1000000000", &dur.to_string())
    };
    let a = doc(&with(report("tp-btf", 1, &[]), 1_000_000_000));
    let b = doc(&with(report("tp-btf", 1, &[]), 1_001_000_000));
    let d = diff("a", &a, "b", &b);
    let names: Vec<&str> = d.total.iter().map(|c| c.metric.as_str()).collect();
    assert!(
        names.contains(&"task-clock") && !names.contains(&"cycles"),
        "{names:?}"
    );
    assert!(d.notes.is_empty(), "{:?}", d.notes);
    let c = doc(&with(report("tp-btf", 1, &[]), 2_000_000_000));
    let d = diff("a", &a, "c", &c);
    assert!(
        d.notes[0].contains("windows differ in length"),
        "{:?}",
        d.notes
    );
}
