//! What `tracer run` traces, end to end as root: only the `-p` process, only the
//! `--cgroup`'s tasks, many threads system-wide, clear errors for bad targets; and targets
//! the torture harness cannot be: a process whose leader exits while the tracer starts,
//! a process asleep for the whole window, and a window of zero. Expectations come from
//! the kernel (schedstat of the target, the window's own duration), through
//! `tracer_truth`'s bounds.
use std::process::{Command, Stdio};

use tracer_tests::{
    final_report, kernel, read_truth, require_root, run_tracer, scratch, thread, Background,
};
// On-CPU: 1% or 1 ms, as everywhere against schedstat.
use tracer_truth::ON_CPU;

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");
const LEADER_EXITS: &str = env!("CARGO_BIN_EXE_leader-exits");

fn schedstat(pid: u32, tid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .unwrap_or_else(|e| panic!("schedstat of {tid}: {e}"));
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (v[0], v[1])
}

fn u(v: &serde_json::Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// The main thread starts its worker 300 ms after it starts and exits alone, while the
/// tracer (started at once) verifies its programs: `-p` must trace the worker, born after
/// the process was resolved, and open its counters for the threads traced once the
/// programs are attached. Counters opened for the threads read before the programs were
/// verified failed the run: once with "no such thread: TID <pid> does not exist" for a
/// live process (item 2), later naming the thread that exited and the one the process
/// lives on in.
#[test]
#[ignore = "needs root"]
fn a_leader_exiting_during_start_up_leaves_its_worker_traced() {
    require_root();
    // raw-tp verifies longest (~0.8 s here): the exit falls inside the start-up.
    let probe = if kernel::has_btf() {
        "raw-tp"
    } else {
        "tracepoint"
    };
    let truth_file = scratch("leader-exits");
    let mut target = Command::new(LEADER_EXITS)
        .args(["--delay-ms", "300", "--work-ms", "1500", "--out"])
        .arg(&truth_file)
        .spawn()
        .expect("cannot start leader-exits");
    let pid = target.id().to_string();
    let out = run_tracer(&["run", "--json", "--probe", probe, "-p", &pid, "-d", "4s"]);
    let _ = target.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tracer run --probe {probe} -p {pid} on a live process whose leader exited: {err}"
    );
    let doc = final_report(&out);
    let truth = read_truth(&truth_file);
    let _ = std::fs::remove_file(&truth_file);
    let w = &truth[0];
    let row = thread(&doc, w.tid).unwrap_or_else(|| {
        panic!(
            "the worker {} (born during start-up) is missing: {doc}",
            w.tid
        )
    });
    let on = u(row, "on_cpu_ns");
    // Born before the window opened: at most its schedstat, and something of it.
    let tol = ON_CPU.allowed(w.run_ns as f64);
    assert!(
        on > 0 && on as f64 <= w.run_ns as f64 + tol,
        "worker on-CPU {on} ns, schedstat {} ns: {row}",
        w.run_ns
    );
}

/// A chain of threads, each started by the one before about every 250 us and ending
/// after it, while `-p` starts: a link born between the tracer's /proc scan and its
/// parent's entry in the traced set went untraced, and every later link with it (the
/// fork program follows only parents in the set; torture seed 1 once lost a child born
/// 0.2 ms before the window that way). Every link of the chain's last third, born long
/// after the programs attached, must be in the report, with at least the on-CPU time its
/// schedstat had when it recorded it.
#[test]
#[ignore = "needs root"]
fn every_link_of_a_thread_chain_born_while_the_tracer_starts_is_traced() {
    require_root();
    let probes: &[&str] = if kernel::has_btf() {
        &["tp-btf", "raw-tp", "tracepoint"]
    } else {
        &["tracepoint"]
    };
    for probe in probes {
        chain_under(probe);
    }
}

fn chain_under(probe: &str) {
    let truth_file = scratch("chain");
    let mut target = Command::new(WORKLOAD)
        .args([
            "chain",
            "--step-us",
            "250",
            "--duration-ms",
            "2500",
            "--out",
        ])
        .arg(&truth_file)
        .spawn()
        .expect("cannot start the chain");
    let pid = target.id().to_string();
    // No -d: the run ends when the process does.
    let out = run_tracer(&["run", "--json", "--probe", probe, "-p", &pid]);
    let _ = target.wait();
    assert!(
        out.status.success(),
        "tracer run --probe {probe} -p {pid}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = final_report(&out);
    let truth = read_truth(&truth_file);
    let _ = std::fs::remove_file(&truth_file);
    let links: Vec<_> = truth.iter().filter(|t| t.tid != t.pid).collect();
    assert!(links.len() > 3000, "{probe}: only {} links", links.len());
    let tail = &links[links.len() - links.len() / 3..];
    let missing: Vec<u64> = tail
        .iter()
        .filter(|t| thread(&doc, t.tid).is_none())
        .map(|t| t.tid)
        .collect();
    assert!(
        missing.is_empty(),
        "{probe}: {} of the chain's last {} links are not in the report (the first: {:?}); drops {}",
        missing.len(),
        tail.len(),
        &missing[..missing.len().min(5)],
        doc["drops"]
    );
    let (on, ran): (u64, u64) = tail.iter().fold((0, 0), |(on, ran), t| {
        let row = thread(&doc, t.tid).expect("listed");
        (on + u(row, "on_cpu_ns"), ran + t.run_ns)
    });
    // Each link reads its schedstat before its exit path runs, which the report counts
    // too (about 30 us a link here): the truth is a floor.
    assert!(
        on as f64 >= ran as f64 - ON_CPU.allowed(ran as f64),
        "{probe}: the last {} links: on-CPU {on} ns, below their schedstat {ran} ns read before they exited",
        tail.len()
    );
}

/// A process asleep for the whole window is a thread the window holds: listed, on-CPU as
/// its schedstat says (none), off-CPU the whole window, under -p and -t, and the text
/// report lists it instead of saying that no traced thread ran.
#[test]
#[ignore = "needs root"]
fn a_process_asleep_the_whole_window_is_listed_with_its_off_cpu() {
    require_root();
    let mut sleeper = Command::new("sleep")
        .arg("30")
        .stdout(Stdio::null())
        .spawn()
        .expect("cannot start sleep");
    let pid = sleeper.id();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let mut problems = Vec::new();
    for flag in ["-p", "-t"] {
        let before = schedstat(pid, pid);
        let out = run_tracer(&["run", "--json", flag, &pid.to_string(), "-d", "500ms"]);
        let after = schedstat(pid, pid);
        let doc = final_report(&out);
        let dur = u(&doc, "duration_ns");
        let Some(row) = thread(&doc, pid.into()) else {
            problems.push(format!(
                "{flag} {pid}: the sleeping thread is not listed: {doc}"
            ));
            continue;
        };
        let ran = after.0 - before.0;
        let (on, off) = (u(row, "on_cpu_ns"), u(row, "off_cpu_ns"));
        if !ON_CPU.holds_ns(on, ran) {
            problems.push(format!("{flag}: on-CPU {on} ns, schedstat {ran} ns: {row}"));
        }
        if !ON_CPU.holds_ns(on + off, dur) {
            problems.push(format!(
                "{flag}: on {on} + off {off} ns, the window {dur} ns (asleep all of it): {row}"
            ));
        }
    }
    let text = run_tracer(&["run", "-p", &pid.to_string(), "-d", "300ms"]);
    let shown = String::from_utf8_lossy(&text.stdout);
    if shown.contains("no traced thread ran") || !shown.contains(&pid.to_string()) {
        problems.push(format!("text report of -p {pid}: {shown}"));
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `-d 0s` asks for no window: refused with one line naming the option, before anything
/// is loaded (it was once taken as a 4 ms window).
#[test]
#[ignore = "needs root"]
fn a_window_of_zero_is_refused() {
    require_root();
    let out = run_tracer(&["run", "-d", "0s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "tracer run -d 0s: {err}");
    // One line, then clap's usual pointer to --help.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    assert!(
        lines.len() == 1 && (err.contains("-d") || err.contains("duration")),
        "{err}"
    );
}

/// A target that exits while the tracer starts (between its resolution and the seeding
/// of the traced set, after the programs verified) is one line about the target: it read
/// "no probe mode works on this kernel" with the same reason once per mode (a hostile
/// test pass, 2026-12-07). Exits 10-80 ms after the tracer starts cover that stretch.
#[test]
#[ignore = "needs root"]
fn a_target_that_exits_during_start_up_is_one_line_about_it() {
    require_root();
    for (ms, opt) in [(10, "-t"), (30, "-p"), (50, "-t"), (80, "-p")] {
        // Ours to reap: a zombie until the tracer is done.
        let mut child = Command::new("sleep")
            .arg(format!("0.0{ms:02}"))
            .spawn()
            .expect("sleep");
        let pid = child.id().to_string();
        let out = run_tracer(&["run", opt, &pid, "-d", "1s"]);
        let _ = child.wait();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            // It outlived the start-up: nothing to check of this one.
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(2),
            "{opt} {pid} after {ms} ms: {err}"
        );
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            lines.len() == 1
                && (err.contains("exited") || err.contains("does not exist"))
                && !err.contains("probe mode"),
            "{opt} {pid} after {ms} ms: {err}"
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
    assert!(
        util > 0.0 && util <= tracer_truth::AT_MOST_THE_CPUS.ceiling(ncpu),
        "cpus_utilized {util}"
    );
}

#[test]
#[ignore = "needs root"]
fn cgroup_filter_traces_only_tasks_in_the_cgroup() {
    require_root();
    let cg = tracer_tests::cgroup2_mount().join(format!("tracer-test-{}", std::process::id()));
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

/// A process that leaves the `--cgroup` target asleep is counted up to its last
/// switch-out inside it, never to the close: the move is not timed, and the time after
/// it is not the target's. The report counts it among the threads that left.
#[test]
#[ignore = "needs root"]
fn a_sleeper_that_leaves_the_cgroup_is_not_counted_past_its_move() {
    require_root();
    let base =
        tracer_tests::cgroup2_mount().join(format!("tracer-test-leave-{}", std::process::id()));
    let (inside, outside) = (base.join("in"), base.join("out"));
    std::fs::create_dir_all(&inside).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let sleeper = Killed(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = sleeper.0.id();
    std::fs::write(inside.join("cgroup.procs"), pid.to_string()).unwrap();
    let tracer = Command::new(tracer_tests::tracer_bin())
        .args([
            "run",
            "--json",
            "-d",
            "1s",
            "--cgroup",
            inside.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(600));
    std::fs::write(outside.join("cgroup.procs"), pid.to_string()).unwrap();
    let out = tracer.wait_with_output().unwrap();
    drop(sleeper);
    let _ = [&inside, &outside, &base].map(std::fs::remove_dir);
    let doc = final_report(&out);
    if let Some(t) = thread(&doc, pid as u64) {
        // Off-CPU since its last switch-out inside: before the window, so nothing.
        assert!(
            t["off_cpu_ns"].as_u64().unwrap() < 600_000_000,
            "counted past its move: {t}"
        );
    }
    let notices = doc["notices"].to_string();
    assert!(
        notices.contains("1 thread(s) left the --cgroup target"),
        "the leaver is counted: {notices}"
    );
}

/// `--pod` and `--container` find the workload's cgroup in the kubelet's and docker's
/// layouts (made here in the cgroup v2 tree: no runtime runs on this machine) by UID, by
/// id prefix, and refuse in one line what matches none or two.
#[test]
#[ignore = "needs root"]
fn pods_and_containers_are_found_by_uid_or_id_prefix() {
    require_root();
    let base = tracer_tests::cgroup2_mount();
    let me = format!("{:08x}", std::process::id());
    let uid = format!("{me}-1111-2222-3333-444455556666");
    let (id_a, id_b) = (
        format!("{me}{}", "a".repeat(56)),
        format!("{me}{}", "b".repeat(56)),
    );
    let pod = format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
        uid.replace('-', "_")
    );
    let mut dirs = tracer_tests::MadeDirs::default();
    let in_pod = dirs.dir(&base, &format!("{pod}/cri-containerd-{id_a}.scope"));
    let docker = dirs.dir(
        &base,
        &format!("tracer-test-{me}.slice/docker-{id_b}.scope"),
    );
    let a = Background::start(WORKLOAD);
    let b = Background::start(WORKLOAD);
    std::fs::write(in_pod.join("cgroup.procs"), a.pid().to_string()).unwrap();
    std::fs::write(docker.join("cgroup.procs"), b.pid().to_string()).unwrap();
    let target_of = std::cell::RefCell::new(String::new());
    let pids_of = |args: &[&str]| -> std::collections::BTreeSet<u64> {
        let mut all = vec!["run", "--json", "-d", "500ms"];
        all.extend_from_slice(args);
        let out = run_tracer(&all);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc = final_report(&out);
        *target_of.borrow_mut() = doc["target"].as_str().unwrap_or_default().to_string();
        doc["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["pid"].as_u64())
            .collect()
    };
    let only = |p: u32| std::collections::BTreeSet::from([p as u64]);
    // The target says what the path says of the workload, as serve's labels do.
    let says = |words: &[String]| {
        let t = target_of.borrow();
        for w in words {
            assert!(t.contains(w.as_str()), "target {t:?} does not say {w}");
        }
    };
    assert_eq!(pids_of(&["--container", &id_a[..12]]), only(a.pid()));
    says(&[
        format!("container={}", &id_a[..12]),
        format!("pod_uid={uid}"),
        "runtime=containerd".into(),
    ]);
    assert_eq!(
        pids_of(&["--container", &id_b.to_uppercase()]),
        only(b.pid())
    );
    says(&["runtime=docker".into()]);
    assert_eq!(pids_of(&["--pod", &uid]), only(a.pid()));
    says(&[format!("pod_uid={uid}"), "qos=burstable".into()]);
    for (args, says) in [
        (vec!["--container", &me[..]], "matches 2 workloads"),
        (
            vec!["--container", "ffff0000ffff"],
            "no such workload's cgroup",
        ),
        (vec!["--pod", "no-such-pod"], "no such workload's cgroup"),
        (
            vec!["--cgroup-node-only"],
            "needs --cgroup, --pod or --container",
        ),
    ] {
        let mut all = vec!["run", "-d", "1s"];
        all.extend_from_slice(&args);
        let out = run_tracer(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
    }
    drop((a, b));
}

/// The kernel's bandwidth figures of a cgroup: v1 `cpu` or v2 `cpu.stat`, (nr_periods,
/// nr_throttled, throttled ns).
fn cpu_stat(file: &std::path::Path) -> (u64, u64, u64) {
    let text = std::fs::read_to_string(file).unwrap();
    let get = |k: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let ns = get("throttled_time").or_else(|| get("throttled_usec").map(|us| us * 1000));
    (
        get("nr_periods").unwrap(),
        get("nr_throttled").unwrap(),
        ns.unwrap(),
    )
}

/// A `--cgroup` run under a 10% CPU quota reports the window's throttled periods and
/// time, and its CPU pressure, within what the kernel's own cpu.stat says over the
/// tracer's whole run (the window is inside it).
#[test]
#[ignore = "needs root"]
fn a_cgroup_run_reports_its_quota_throttling_and_pressure() {
    require_root();
    let v2 = tracer_tests::cgroup2_mount();
    let name = format!("tracer-quota-{}", std::process::id());
    let mut dirs = tracer_tests::MadeDirs::default();
    let dir = dirs.dir(&v2, &name);
    // The quota: the v1 cpu controller's same path on hybrid machines, else v2's cpu.max.
    let stat = match tracer_tests::mount_of("cgroup", Some("cpu")) {
        Some(v1) => {
            let q = dirs.dir(&v1, &name);
            std::fs::write(q.join("cpu.cfs_quota_us"), "10000").unwrap();
            q
        }
        None => {
            std::fs::write(v2.join("cgroup.subtree_control"), "+cpu").unwrap();
            std::fs::write(dir.join("cpu.max"), "10000 100000").unwrap();
            dir.clone()
        }
    };
    let spin = Command::new(WORKLOAD)
        .args([
            "spin",
            "--threads",
            "1",
            "--duration-ms",
            "30000",
            "--out",
            "/dev/null",
        ])
        .spawn()
        .unwrap();
    let pid = spin.id().to_string();
    std::fs::write(dir.join("cgroup.procs"), &pid).unwrap();
    if stat != dir {
        std::fs::write(stat.join("cgroup.procs"), &pid).unwrap();
    }
    let _kill = Killed(spin);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let t = std::time::Instant::now();
    let before = cpu_stat(&stat.join("cpu.stat"));
    let out = run_tracer(&[
        "run",
        "--json",
        "--cgroup",
        dir.to_str().unwrap(),
        "-d",
        "2s",
    ]);
    let after = cpu_stat(&stat.join("cpu.stat"));
    let span_ns = t.elapsed().as_nanos() as u64;
    let doc = final_report(&out);
    let c = &doc["cgroup_cpu"];
    let n = |k: &str| {
        c[k].as_u64()
            .unwrap_or_else(|| panic!("cgroup_cpu.{k}: {doc}"))
    };
    let outside = span_ns.saturating_sub(doc["duration_ns"].as_u64().unwrap());
    let (periods, throttled) = (after.0 - before.0, after.1 - before.1);
    // Periods of 100 ms: those outside the window, and one at each edge.
    let slack = outside / 100_000_000 + 2;
    assert!(
        n("periods") <= periods && n("periods") + slack >= periods,
        "periods {} vs the kernel's {periods} (slack {slack}): {c}",
        n("periods")
    );
    assert!(
        n("throttled_periods") <= throttled && n("throttled_periods") + slack >= throttled,
        "throttled periods {} vs {throttled}: {c}",
        n("throttled_periods")
    );
    assert!(
        n("throttled_periods") >= 10,
        "a 10% quota throttles a spinner: {c}"
    );
    let tns = after.2 - before.2;
    assert!(
        n("throttled_ns") <= tns && n("throttled_ns") + outside + 200_000_000 >= tns,
        "throttled {} ns vs {tns}: {c}",
        n("throttled_ns")
    );
    // PSI: a spinner held back by its quota waits, some of the time at least.
    if !c["pressure_some_ns"].is_null() {
        assert!(
            n("pressure_some_ns") > 0 && n("pressure_some_ns") <= span_ns,
            "{c}"
        );
    }
    assert!(c["cgroup"].as_str().unwrap().ends_with(&name), "{c}");
}

/// Kills and reaps the child on drop (before the cgroup dirs are removed).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
