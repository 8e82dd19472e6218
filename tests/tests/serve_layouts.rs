//! `tracer serve`'s workload labels for every runtime's cgroup layout, read back by a
//! real Prometheus: CRI-O under the kubelet's systemd driver (a Guaranteed pod, named
//! through a kubelet log directory, with its `conmon`), docker under the kubelet (a
//! BestEffort pod nobody names), docker's systemd and cgroupfs drivers, podman as root
//! (with its `conmon`) and rootless, a systemd service, and a path of no known layout.
//! Container runtimes cannot start on these machines (hybrid cgroups, no
//! CAP_SYS_RESOURCE), so the layouts are made as the runtimes make them, under one
//! scratch slice, with load in each.
//!
//! For each: exactly one series, cut at the workload's own cgroup (a process in a
//! sub-cgroup of a container or service counts for it), with exactly the labels the
//! layout says, and its on-CPU seconds equal to the kernel's `usage_usec` of that cgroup
//! over its whole life (it was made after serve started), within
//! `tracer_truth::SCRAPED_CGROUP`. The kubelet layouts with containerd and the
//! cgroupfs driver are in serve_contrib.rs.
use std::{
    collections::BTreeMap,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use tracer_tests::{
    contrib::{dashboard, kubelet_logs, panel_queries, substitute, KubeletName, VARIABLES},
    prometheus::{sample_value, serve, Prometheus, Stopped},
    require_root,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// One layout: where its load runs, the series it must make and that series' labels.
struct Case {
    what: &'static str,
    /// The load's cgroup, below the scratch slice.
    run_in: String,
    /// The series' `cgroup` label, below the scratch slice.
    series: String,
    labels: Vec<(&'static str, String)>,
}

fn cases(pid: u32) -> Vec<Case> {
    let id = |n: u64| format!("{:016x}", (pid as u64) << 8 | n).repeat(4);
    let short = |s: &str| s[..12].to_string();
    let uid = |n: u32| format!("{pid:08x}-{n:04x}-4000-8000-00000000{n:04x}");
    let (crio, dk_pod, dk, dk_fs, pm, pm_user) = (id(1), id(2), id(3), id(4), id(5), id(6));
    let (g_uid, b_uid) = (uid(1), uid(2));
    let g_pod = format!(
        "kubepods.slice/kubepods-pod{}.slice",
        g_uid.replace('-', "_")
    );
    let b_pod = format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        b_uid.replace('-', "_")
    );
    let named = |container: &str, id: &str, runtime: &str| {
        vec![
            ("namespace", "media".to_string()),
            ("pod", format!("encoder-{pid}")),
            ("pod_uid", g_uid.clone()),
            ("qos", "guaranteed".to_string()),
            ("container", container.to_string()),
            ("container_id", short(id)),
            ("runtime", runtime.to_string()),
        ]
    };
    let bare = |id: &str, runtime: &str| {
        vec![
            ("container", short(id)),
            ("container_id", short(id)),
            ("runtime", runtime.to_string()),
        ]
    };
    let conmon = |id: &str, runtime: &str| {
        vec![
            ("container", "conmon".to_string()),
            ("container_id", short(id)),
            ("runtime", runtime.to_string()),
        ]
    };
    let same = |what, path: String, labels| Case {
        what,
        run_in: path.clone(),
        series: path,
        labels,
    };
    let service = format!("tracer-layouts-{pid}.service");
    let rootless =
        format!("user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{pm_user}.scope");
    vec![
        same(
            "CRI-O, kubelet systemd driver, Guaranteed pod named by the kubelet",
            format!("{g_pod}/crio-{crio}.scope"),
            named("ffmpeg", &crio, "crio"),
        ),
        same(
            "CRI-O's conmon beside that container",
            format!("{g_pod}/crio-conmon-{crio}.scope"),
            [&named("", &crio, "crio")[..4], &conmon(&crio, "crio")[..]].concat(),
        ),
        same(
            "docker under the kubelet's systemd driver, a BestEffort pod nobody names",
            format!("{b_pod}/docker-{dk_pod}.scope"),
            [
                vec![
                    ("pod_uid", b_uid.clone()),
                    ("qos", "besteffort".to_string()),
                ],
                bare(&dk_pod, "docker"),
            ]
            .concat(),
        ),
        Case {
            what: "docker, systemd driver, the process in a sub-cgroup of the container",
            run_in: format!("system.slice/docker-{dk}.scope/worker"),
            series: format!("system.slice/docker-{dk}.scope"),
            labels: bare(&dk, "docker"),
        },
        same(
            "docker, cgroupfs driver",
            format!("docker/{dk_fs}"),
            bare(&dk_fs, "docker"),
        ),
        same(
            "podman as root",
            format!("machine.slice/libpod-{pm}.scope"),
            bare(&pm, "podman"),
        ),
        same(
            "podman's conmon",
            format!("machine.slice/libpod-conmon-{pm}.scope"),
            conmon(&pm, "podman"),
        ),
        same(
            "rootless podman (inside the user's systemd, not a service)",
            rootless,
            bare(&pm_user, "podman"),
        ),
        Case {
            what: "a systemd service, the process in a sub-cgroup of it",
            run_in: format!("system.slice/{service}/worker"),
            series: format!("system.slice/{service}"),
            labels: vec![("service", service.clone())],
        },
        Case {
            what: "no known layout: cut at --cgroup-depth 2",
            run_in: "plain/deeper".to_string(),
            series: "plain".to_string(),
            labels: vec![],
        },
    ]
}

/// A busy-sleep process (about 10% of a CPU for 10 s) that first moves itself into `cg`.
fn load(cg: &Path, out: &Path) -> Stopped {
    Stopped(
        Command::new("sh")
            .arg("-c")
            .arg(
                "echo $$ > \"$1/cgroup.procs\" && exec \"$2\" busy-sleep --threads 1 \
                 --work-ms 1 --sleep-ms 9 --duration-ms 10000 --out \"$3\"",
            )
            .arg("sh")
            .arg(cg)
            .arg(WORKLOAD)
            .arg(out)
            .stdout(Stdio::null())
            .spawn()
            .expect("sh"),
    )
}

#[test]
#[ignore = "needs root"]
fn every_runtime_layout_gets_its_workload_labels_and_its_cgroups_cpu_time() {
    require_root();
    let pid = std::process::id();
    let dir = tracer_tests::scratch("serve-layouts");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let top = format!("tracer-layouts-{pid}.slice");
    let v2 = tracer_tests::cgroup2_mount();
    let cases = cases(pid);
    let mut made = tracer_tests::MadeDirs::default();
    let dirs: Vec<_> = cases
        .iter()
        .map(|c| made.dir(&v2, &format!("{top}/{}", c.run_in)))
        .collect();
    let logs = dir.join("logs");
    let crio = &cases[0];
    let label = |c: &Case, k: &str| {
        c.labels
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    let full_id = crio.run_in.rsplit_once("crio-").unwrap().1;
    kubelet_logs(
        &logs,
        &[KubeletName {
            namespace: &label(crio, "namespace"),
            pod: &label(crio, "pod"),
            uid: &label(crio, "pod_uid"),
            container: &label(crio, "container"),
            id: full_id.trim_end_matches(".scope"),
        }],
    );

    let (_serve, target) = serve(
        &dir,
        &[
            "--cgroup-depth".as_ref(),
            "2".as_ref(),
            "--kubelet-logs".as_ref(),
            logs.as_os_str(),
        ],
    );
    let prom = Prometheus::start(
        &dir,
        &format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: tracer\n    \
             static_configs:\n      - targets: ['{target}']\n"
        ),
    );
    let loads: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(i, d)| load(d, &dir.join(format!("{i}.truth"))))
        .collect();
    // While the loads run (their histograms grow from scrape to scrape, as a
    // dashboard's rates need): the dashboard's workload panels.
    std::thread::sleep(Duration::from_secs(7));
    let mut problems = Vec::new();
    // The dashboard's workload panels with the layout's cgroup chosen (throttling and
    // pressure need a quota or the cpu controller, which these cgroups do not have;
    // the per-pod panels apply to pods).
    let d = dashboard();
    let queries: Vec<_> = panel_queries(&d)
        .into_iter()
        .filter(|q| {
            q.expr.contains("$cgroup")
                && !["throttled", "pressure", "cpu_periods"]
                    .iter()
                    .any(|m| q.expr.contains(m))
        })
        .collect();
    let mut asked = 0;
    for c in &cases {
        let path = format!("/{top}/{}", c.series).replace('.', "\\\\.");
        let vars: Vec<(&str, &str)> = VARIABLES
            .iter()
            .map(|&(k, v)| (k, if k == "cgroup" { path.as_str() } else { v }))
            .collect();
        let pod = c.labels.iter().any(|(k, _)| *k == "pod_uid");
        for q in queries
            .iter()
            .filter(|q| pod || !q.expr.contains("pod_uid"))
        {
            let e = substitute(&q.expr, &vars).unwrap();
            asked += 1;
            match prom.query(&e) {
                Ok(r) if r.iter().any(|s| sample_value(s).is_finite()) => {}
                Ok(r) => problems.push(format!(
                    "{}: the dashboard's \"{}\" ({}) has no data: {e} -> {r:?}",
                    c.what, q.panel, q.ref_id
                )),
                Err(err) => problems.push(format!("{}: {e}: {err}", c.what)),
            }
        }
    }
    eprintln!("{asked} dashboard queries asked, one layout's cgroup chosen each");
    for mut l in loads {
        let st = l.0.wait().unwrap();
        assert!(st.success(), "a load exited with {st}");
    }
    // Three scrapes after the last load ended.
    std::thread::sleep(Duration::from_secs(3));

    let q = format!("tracer_cgroup_on_cpu_seconds_total{{cgroup=~\"/{top}/.*\"}}");
    let got = prom.query(&q).unwrap_or_else(|e| panic!("{q}: {e}"));
    // cgroup label -> (the other labels, seconds).
    let mut series: BTreeMap<String, (BTreeMap<String, String>, f64)> = BTreeMap::new();
    for s in &got {
        let mut labels: BTreeMap<String, String> = s["metric"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
            .collect();
        for k in ["__name__", "instance", "job"] {
            labels.remove(k);
        }
        let cg = labels.remove("cgroup").unwrap_or_default();
        series.insert(cg, (labels, sample_value(s)));
    }
    for c in &cases {
        let name = format!("/{top}/{}", c.series);
        let want: BTreeMap<String, String> = c
            .labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let Some((labels, secs)) = series.remove(&name) else {
            problems.push(format!("{}: no series with cgroup=\"{name}\"", c.what));
            continue;
        };
        if labels != want {
            problems.push(format!(
                "{}: cgroup=\"{name}\" has labels {labels:?}, the layout says {want:?}",
                c.what
            ));
        }
        let truth = tracer_tests::cgroup_usage_ns(&v2.join(&top).join(&c.series));
        let tol = tracer_truth::SCRAPED_CGROUP.allowed(truth);
        eprintln!(
            "{}: {name} {:.1} ms, cpu.stat {:.1} ms",
            c.what,
            secs * 1e3,
            truth / 1e6
        );
        if truth <= 0.0 || (secs * 1e9 - truth).abs() > tol {
            problems.push(format!(
                "{}: cgroup=\"{name}\" read {:.1} ms on-CPU, its cpu.stat {:.1} ms (allowed ±{:.1} ms)",
                c.what,
                secs * 1e3,
                truth / 1e6,
                tol / 1e6
            ));
        }
    }
    for (cg, (labels, _)) in &series {
        problems.push(format!(
            "a series no layout makes: cgroup=\"{cg}\" {labels:?}"
        ));
    }
    if !problems.is_empty() {
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        panic!(
            "{} of {} layouts wrong:\n{}\nserve's log:\n{log}",
            problems.len(),
            cases.len(),
            problems.join("\n")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
