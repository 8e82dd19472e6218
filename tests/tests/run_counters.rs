//! `tracer run`'s perf counters end to end, as root, beside the BPF data: checked against
//! the workload's own CPU time and the BPF switch counts, per thread, per cgroup, with a
//! command, and for a thread that stays asleep.
use serde_json::Value;
use tracer_tests::{
    final_report, kernel, require_root, run_tracer, thread, traced_workload, Background, Spinner,
};

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
#[ignore = "needs root"]
fn task_clock_and_context_switches_agree_with_the_kernel_and_the_bpf_counts() {
    require_root();
    let steal = tracer_truth::Steal::start();
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
    let own: u64 = truth.iter().filter_map(|t| t.cpu_ns).sum();
    // task-clock counts the hypervisor's steal while the threads ran; the threads' own
    // clocks do not.
    let steal_ns = steal.allowance_ns();
    assert!(
        tracer_truth::TASK_CLOCK
            .plus(steal_ns)
            .holds(tc_ns, own as f64),
        "task-clock {tc_ns} ns vs CLOCK_THREAD_CPUTIME_ID sum {own} ns (steal meanwhile up to \
         {steal_ns} ns)"
    );
    // "CPUs utilized" is task-clock / elapsed when task-clock is counted.
    let util = doc["cpus_utilized"].as_f64().unwrap();
    let dur = doc["duration_ns"].as_u64().unwrap() as f64;
    assert!(
        tracer_truth::UTILIZATION_VS_TASK_CLOCK.holds(tc_ns / dur, util),
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

    // cycles:u: counted where the kernel has a CPU PMU; elsewhere not supported, never 0.
    let cy = counter(&doc, "cycles:u");
    if kernel::hardware_pmu() {
        assert_eq!(cy["supported"], true, "{cy}");
        assert!(cy["value"].as_f64().is_some_and(|v| v > 0.0), "{cy}");
    } else {
        assert_eq!(cy["supported"], false, "{cy}");
        assert!(cy["value"].is_null(), "{cy}");
    }

    // Per-slice counter deltas read in the kernel: task-clock per thread equals the
    // thread's on-CPU time within the slice boundaries' noise, plus what was stolen.
    let steal_ns = steal.allowance_ns();
    for t in tracer_tests::workers(&truth, 3) {
        let th = thread(&doc, t.tid).unwrap();
        let sc = th["slice_counters"]["task-clock"].as_u64().unwrap() as f64;
        let on = th["on_cpu_ns"].as_u64().unwrap() as f64;
        assert!(
            tracer_truth::SLICE_TASK_CLOCK.plus(steal_ns).holds(sc, on),
            "tid {}: slice task-clock {sc} vs on-CPU {on} (steal meanwhile up to {steal_ns} ns)",
            t.tid
        );
    }
}

#[test]
#[ignore = "needs root"]
fn text_report_shows_not_supported_and_the_cross_check() {
    require_root();
    let out = run_tracer(&["run", "-e", "task-clock,cycles:u", "--", "sleep", "0.2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cycles:u"), "{text}");
    assert_eq!(
        text.contains("<not supported>"),
        !kernel::hardware_pmu(),
        "<not supported> shown exactly when the kernel has no CPU PMU: {text}"
    );
    assert!(text.contains("CPUs utilized"), "{text}");
    assert!(text.contains("cross-check"), "{text}");
}

#[test]
#[ignore = "needs root"]
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
    // With a CPU PMU, cycles is supported and there is nothing to say about it.
    assert_eq!(
        notices.contains("cycles"),
        !kernel::hardware_pmu(),
        "{notices}"
    );
}

#[test]
#[ignore = "needs root"]
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

/// CPU time of every thread of `pid` so far (schedstat's first field), ns.
fn process_cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn cgroup2_dir(name: &str) -> std::path::PathBuf {
    tracer_tests::cgroup2_mount().join(format!("tracer-test-{}-{name}", std::process::id()))
}

/// With --cgroup, task-clock counts a process that joins after the start: counted per CPU
/// with the cgroup as the filter (perf stat -G), not only for the threads present at
/// the start (a process using 0.63 CPUs once showed 0.00015).
#[test]
#[ignore = "needs root"]
fn cgroup_task_clock_counts_a_process_that_joins_later() {
    require_root();
    let cg = cgroup2_dir("late");
    std::fs::create_dir(&cg).expect("create a test cgroup");
    let before = tracer_tests::our_loaded_programs();
    let tracer = std::process::Command::new(tracer_tests::tracer_bin())
        .args(["run", "--json", "-e", "task-clock", "-d", "3s", "--cgroup"])
        .arg(&cg)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        tracer_tests::wait_attached(&before),
        "the tracer never attached"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    let steal = tracer_truth::Steal::start();
    let late = Background::start(WORKLOAD);
    let t0 = process_cpu_ns(late.pid());
    std::fs::write(cg.join("cgroup.procs"), late.pid().to_string()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1200));
    // Out of the cgroup again before the window closes: its time inside is known.
    let root_procs = cg.parent().unwrap().join("cgroup.procs");
    std::fs::write(&root_procs, late.pid().to_string()).unwrap();
    let inside = process_cpu_ns(late.pid()) - t0;
    drop(late);
    let out = tracer.wait_with_output().unwrap();
    let _ = std::fs::remove_dir(&cg);
    let doc = final_report(&out);
    let tc_ns = counter(&doc, "task-clock")["value"].as_f64().unwrap() * 1e6;
    assert!(inside > 300_000_000, "the workload barely ran: {inside} ns");
    let steal_ns = steal.allowance_ns();
    assert!(
        tracer_truth::CGROUP_TASK_CLOCK
            .plus(steal_ns)
            .holds(tc_ns, inside as f64),
        "task-clock {tc_ns} ns vs the process's own CPU time in the cgroup {inside} ns \
         (steal meanwhile up to {steal_ns} ns)"
    );
    let util = doc["cpus_utilized"].as_f64().unwrap();
    let dur = doc["duration_ns"].as_f64().unwrap();
    assert!((util - tc_ns / dur).abs() < 1e-6 * util.max(1.0), "{util}");
}

/// `--per-thread` with `-- COMMAND` says why there is no per-thread breakdown (it once
/// gave `per_thread: null` without a word).
#[test]
#[ignore = "needs root"]
fn per_thread_with_a_command_says_why_there_is_no_breakdown() {
    require_root();
    let out = run_tracer(&[
        "run",
        "--json",
        "-e",
        "task-clock",
        "--per-thread",
        "--",
        "sleep",
        "0.1",
    ]);
    let doc = final_report(&out);
    assert!(doc["counters"]["per_thread"].is_null());
    let notices = doc["notices"].to_string();
    assert!(
        notices.contains("--per-thread")
            && notices.contains("inherited")
            && notices.contains("-p PID"),
        "{notices}"
    );
}

/// With `-p`, a thread that stayed asleep reads the 0 it counted, not `null` (never
/// counted).
#[test]
#[ignore = "needs root"]
fn per_thread_counter_of_an_idle_thread_is_zero() {
    require_root();
    let target = Background::start(WORKLOAD);
    let pid = target.pid();
    let out = run_tracer(&[
        "run",
        "--json",
        "-p",
        &pid.to_string(),
        "-d",
        "500ms",
        "-e",
        "task-clock,context-switches",
        "--per-thread",
    ]);
    drop(target);
    let doc = final_report(&out);
    // The main thread waits in join for the whole run.
    let main = &doc["counters"]["per_thread"][pid.to_string()];
    assert_eq!(main[0][0], "task-clock", "{main}");
    assert_eq!(main[0][1].as_f64(), Some(0.0), "{main}");
    assert_eq!(main[1][1].as_f64(), Some(0.0), "{main}");
    // The busy ones counted something.
    let per = doc["counters"]["per_thread"].as_object().unwrap();
    assert!(
        per.values().any(|v| v[0][1].as_f64().unwrap_or(0.0) > 10.0),
        "{per:?}"
    );
}

/// The spinner's task-clock over its slices agrees with its on-CPU time: both are read
/// at the same switches (they agree to 0.1% on a plain run). It exited inside the
/// window, so no slice was open at the close, where on-CPU time is cut but counters are
/// not read.
fn assert_slice_task_clock_is_on_cpu(doc: &Value, pid: u32) {
    let t = thread(doc, pid.into())
        .unwrap_or_else(|| panic!("the spinner is not in the report: {}", doc["threads"]));
    let on = t["on_cpu_ns"].as_f64().unwrap();
    let tc = t["slice_counters"]["task-clock"]
        .as_f64()
        .unwrap_or_else(|| panic!("no task-clock slice counter: {t}"));
    assert!(on > 300e6, "the spinner barely ran: {t}");
    assert!(
        (tc - on).abs() <= 0.03 * on + 10e6,
        "task-clock over its slices {tc} ns vs on-CPU {on} ns: {t}"
    );
}

/// `--slice-event` of a thread running through the start: its first slice has its
/// deltas. The counters once went into their map after the switch programs attached,
/// so the switch-in after the CPU visit read a base of 0 and a lone spinner's first
/// 0.7 s had none.
#[test]
#[ignore = "needs root"]
fn slice_events_of_a_spinner_running_through_the_start_count_its_first_slice() {
    require_root();
    let mut spinner = Spinner::pinned(None);
    let pid = spinner.pid();
    let pid_text = pid.to_string();
    let tracer = tracer_tests::spawn_attached(&[
        "run",
        "--json",
        "--slice-event",
        "task-clock",
        "-d",
        "3s",
        "-p",
        &pid_text,
    ]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    spinner.kill();
    let out = tracer.wait_with_output().unwrap();
    assert_slice_task_clock_is_on_cpu(&final_report(&out), pid);
}

/// `--slice-event` with `--cgroup`: a spinner that joins, leaves and comes back gets
/// the counter deltas of its slices inside, as its on-CPU time does. Its first slice
/// after the return once took its base from the CPU's last member's switch-in (its own,
/// before the leave), so task-clock read 1.79 s against 1.22 s on-CPU.
#[test]
#[ignore = "needs root"]
fn slice_events_of_a_cgroup_returner_are_its_slices_inside() {
    require_root();
    let cg = cgroup2_dir("slice-return");
    std::fs::create_dir(&cg).expect("create a test cgroup");
    let root_procs = cg.parent().unwrap().join("cgroup.procs");
    let mut spinner = Spinner::pinned(None);
    let pid = spinner.pid();
    let cg_text = cg.display().to_string();
    let tracer = tracer_tests::spawn_attached(&[
        "run",
        "--json",
        "--slice-event",
        "task-clock",
        "-d",
        "3s",
        "--cgroup",
        &cg_text,
    ]);
    let ms = std::time::Duration::from_millis;
    let pid_text = pid.to_string();
    std::thread::sleep(ms(200));
    std::fs::write(cg.join("cgroup.procs"), &pid_text).unwrap();
    std::thread::sleep(ms(500));
    std::fs::write(&root_procs, &pid_text).unwrap();
    std::thread::sleep(ms(600));
    std::fs::write(cg.join("cgroup.procs"), &pid_text).unwrap();
    std::thread::sleep(ms(500));
    spinner.kill();
    let out = tracer.wait_with_output().unwrap();
    let _ = std::fs::remove_dir(&cg);
    assert_slice_task_clock_is_on_cpu(&final_report(&out), pid);
}

/// `--slice-event` deltas only for slices whose switch-in this CPU saw: after one the
/// programs did not see, the base is another slice's. Three spinners on the CPUs of
/// this machine (with a sleeper, under `-p`) once read context switches 15-21 above
/// their slices and task-clock 92 ms above on-CPU, with 3-12 switch-ins unseen.
#[test]
#[ignore = "needs root"]
fn slice_events_never_span_an_unseen_switch_in() {
    require_root();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut spinners: Vec<Spinner> = (0..cpus + 1).map(|_| Spinner::free()).collect();
    let pids: Vec<String> = spinners.iter().map(|s| s.pid().to_string()).collect();
    let mut args = vec!["run", "--json", "-d", "3s", "--slice-event"];
    args.push("task-clock,context-switches");
    for p in &pids {
        args.extend(["-p", p.as_str()]);
    }
    let tracer = tracer_tests::spawn_attached(&args);
    let out = tracer.wait_with_output().unwrap();
    spinners.iter_mut().for_each(Spinner::kill);
    let doc = final_report(&out);
    for p in &pids {
        let t = thread(&doc, p.parse().unwrap())
            .unwrap_or_else(|| panic!("spinner {p} is not in the report: {}", doc["threads"]));
        let on = t["on_cpu_ns"].as_f64().unwrap();
        let slices = t["slices"].as_f64().unwrap();
        let tc = t["slice_counters"]["task-clock"].as_f64().unwrap();
        let cs = t["slice_counters"]["context-switches"].as_f64().unwrap();
        // One context switch a slice: into it (perf counts it after the tracepoint).
        assert!(
            cs <= slices,
            "{cs} context switches over {slices} slices: {t}; drops {}",
            doc["drops"]
        );
        assert!(
            tc <= on * 1.01 + 1e6,
            "task-clock over its slices {tc} ns above on-CPU {on} ns: {t}; drops {}",
            doc["drops"]
        );
    }
}
