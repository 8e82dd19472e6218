//! What `tracer run --cgroup` traces, end to end as root: only the cgroup's tasks (its
//! subtree included), a sleeper not counted past its move out, pods and containers found
//! by UID or ID prefix, and the cgroup's quota throttling and pressure against its own
//! `cpu.stat`.
use std::process::{Command, Stdio};

use tracer_tests::{final_report, require_root, run_tracer, thread, Background};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

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
