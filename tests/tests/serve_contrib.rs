//! contrib/'s dashboard and rules against a real `tracer serve` scraped by a real
//! Prometheus: two pods laid out as the kubelet lays them out (systemd driver with
//! containerd, cgroupfs driver), named through a kubelet log directory, each running
//! load, one under a CFS quota; Prometheus scrapes every second with contrib's rules
//! loaded. Then every panel query (variables at `.*`), every variable's label_values,
//! every recording rule and every alert's compared series must return data, the rules
//! must evaluate without error, the throttling alert must be pending for the throttled
//! pod and the target alerts must stay quiet.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{
    contrib::{
        alert_signal, contrib_dir, dashboard, kubelet_logs, label_values, panel_queries,
        query_variables, substitute, KubeletName, VARIABLES,
    },
    prometheus::{curl, sample_value, serve, Prometheus, Stopped},
    require_root,
};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// The mount points of cgroup v2 and of the v1 hierarchy with the cpu controller.
fn mounts() -> (PathBuf, Option<PathBuf>) {
    (
        tracer_tests::cgroup2_mount(),
        tracer_tests::mount_of("cgroup", Some("cpu")),
    )
}

/// One pod's container: its cgroup path below the mounts and its names.
struct Pod {
    rel: String,
    namespace: &'static str,
    name: String,
    uid: String,
    container: &'static str,
    id: String,
}

/// A busy-sleep process that first moves itself into each cgroup of `procs`.
fn load(procs: &[PathBuf], work_ms: u32, sleep_ms: u32, out: &Path) -> Stopped {
    let mut script = String::new();
    for p in procs {
        script.push_str(&format!("echo $$ > '{}' && ", p.display()));
    }
    script.push_str(&format!(
        "exec '{WORKLOAD}' busy-sleep --threads 1 --work-ms {work_ms} --sleep-ms {sleep_ms} \
         --duration-ms 300000 --out '{}'",
        out.display()
    ));
    Stopped(
        Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::null())
            .spawn()
            .expect("sh"),
    )
}

/// Whether an instant vector has a sample that is a number (not NaN).
fn has_number(r: &[Value]) -> bool {
    r.iter().any(|s| sample_value(s).is_finite())
}

#[test]
#[ignore = "needs root"]
fn every_dashboard_query_and_rule_returns_data_from_a_real_scrape() {
    require_root();
    let started = Instant::now();
    let pid = std::process::id();
    let dir = tracer_tests::scratch("serve-contrib");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let hex = |n: u64| format!("{n:016x}").repeat(4);
    let uid = |n: u32| format!("{pid:08x}-{n:04x}-4000-8000-00000000{n:04x}");
    let (a_uid, b_uid) = (uid(1), uid(2));
    let (a_id, b_id) = (hex(pid as u64 * 2), hex(pid as u64 * 2 + 1));
    let pods = [
        Pod {
            rel: format!(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{a_id}.scope",
                a_uid.replace('-', "_")
            ),
            namespace: "shop",
            name: format!("cart-{pid}"),
            uid: a_uid,
            container: "cart",
            id: a_id,
        },
        Pod {
            rel: format!("kubepods/besteffort/pod{b_uid}/{b_id}"),
            namespace: "batch",
            name: format!("report-{pid}"),
            uid: b_uid,
            container: "report",
            id: b_id,
        },
    ];
    let (v2, v1_cpu) = mounts();
    let mut made = tracer_tests::MadeDirs::default();
    let mut procs = Vec::new();
    for (i, p) in pods.iter().enumerate() {
        let mut files = vec![made.dir(&v2, &p.rel).join("cgroup.procs")];
        // The first pod's container gets a quota of 10% of a CPU, against ~80% of work.
        match &v1_cpu {
            Some(v1) => {
                let d = made.dir(v1, &p.rel);
                if i == 0 {
                    std::fs::write(d.join("cpu.cfs_quota_us"), "10000").unwrap();
                }
                files.push(d.join("cgroup.procs"));
            }
            None if i == 0 => {
                // cgroup v2 only: the cpu controller down to the container, then cpu.max.
                let mut p2 = v2.clone();
                for c in p.rel.split('/') {
                    std::fs::write(p2.join("cgroup.subtree_control"), "+cpu").unwrap();
                    p2.push(c);
                }
                std::fs::write(p2.join("cpu.max"), "10000 100000").unwrap();
            }
            None => {}
        }
        procs.push(files);
    }
    let logs = dir.join("logs");
    let named: Vec<KubeletName> = pods
        .iter()
        .map(|p| KubeletName {
            namespace: p.namespace,
            pod: &p.name,
            uid: &p.uid,
            container: p.container,
            id: &p.id,
        })
        .collect();
    kubelet_logs(&logs, &named);
    let _loads = [
        load(&procs[0], 5, 1, &dir.join("a.truth")),
        load(&procs[1], 2, 3, &dir.join("b.truth")),
    ];

    let (_serve, target) = serve(&dir, &["--kubelet-logs".as_ref(), logs.as_os_str()]);
    let rules = contrib_dir().join("prometheus/rules.yml");
    let prom = Prometheus::start(
        &dir,
        &format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: tracer\n    static_configs:\n      - targets: ['{target}']\n",
            rules.display()
        ),
    );
    let t = Instant::now();
    while !prom
        .query("up{job=\"tracer\"} == 1")
        .is_ok_and(|r| !r.is_empty())
    {
        let log = std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default();
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "Prometheus never scraped tracer serve at {target}: {:?}; serve: {log}",
            curl(&format!("http://{target}/metrics"), &[]).0
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // 25 s of 1 s scrapes and rule evaluations: the dashboard's 20 s rates and the
    // rules' 5 m rates have many samples each. Everything is then asked once.
    std::thread::sleep(Duration::from_secs(25));

    let mut problems = Vec::new();
    let mut asked = 0;
    let psi = Path::new("/proc/pressure/cpu").exists();
    let d = dashboard();
    for (name, q) in query_variables(&d) {
        let (sel, label) = label_values(&q).unwrap();
        let e = format!(
            "count by ({label}) ({})",
            substitute(&sel, VARIABLES).unwrap()
        );
        asked += 1;
        let values: Vec<String> = match prom.query(&e) {
            Ok(r) => r
                .iter()
                .filter_map(|s| s["metric"][&label].as_str().map(String::from))
                .collect(),
            Err(err) => {
                problems.push(format!("${name}: {err}\n  {e}"));
                continue;
            }
        };
        let want: Vec<String> = match name.as_str() {
            "instance" => vec![target.clone()],
            "namespace" => pods.iter().map(|p| p.namespace.to_string()).collect(),
            "pod" => pods.iter().map(|p| p.name.clone()).collect(),
            _ => Vec::new(),
        };
        for w in &want {
            if !values.contains(w) {
                problems.push(format!("${name} lacks {w:?}: {values:?}"));
            }
        }
        if name == "cgroup" {
            for p in &pods {
                if !values.iter().any(|v| v.ends_with(&p.rel)) {
                    problems.push(format!("$cgroup lacks /{}: {values:?}", p.rel));
                }
            }
        }
    }
    let panels = panel_queries(&d);
    for q in &panels {
        let e = substitute(&q.expr, VARIABLES).unwrap();
        asked += 1;
        match prom.query(&e) {
            Ok(r) if has_number(&r) => {}
            Ok(_) if !psi && e.contains("pressure") => {
                eprintln!("{}: no PSI on this kernel, no data expected", q.panel)
            }
            Ok(r) => problems.push(format!("{} {}: no data ({r:?})\n  {e}", q.panel, q.ref_id)),
            Err(err) => problems.push(format!("{} {}: {err}\n  {e}", q.panel, q.ref_id)),
        }
    }

    let groups = prom.api("/api/v1/rules", &[]).expect("/api/v1/rules");
    let loaded: Vec<&Value> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    let text = std::fs::read_to_string(&rules).unwrap();
    let in_file = text
        .lines()
        .filter(|l| {
            l.trim_start().starts_with("- record:") || l.trim_start().starts_with("- alert:")
        })
        .count();
    assert_eq!(
        loaded.len(),
        in_file,
        "Prometheus loaded {} of the {in_file} rules",
        loaded.len()
    );
    for rule in &loaded {
        let name = rule["name"].as_str().unwrap_or("?");
        let query = rule["query"].as_str().unwrap_or("");
        if rule["health"] != "ok" {
            problems.push(format!(
                "rule {name}: health {} {}",
                rule["health"], rule["lastError"]
            ));
        }
        let e = if rule["type"] == "alerting" {
            alert_signal(query).unwrap_or_else(|e| panic!("alert {name}: {e}"))
        } else {
            query.to_string()
        };
        asked += 1;
        match prom.query(&e) {
            Ok(r) if has_number(&r) => {}
            Ok(r) => problems.push(format!("rule {name}: no data ({r:?})\n  {e}")),
            Err(err) => problems.push(format!("rule {name}: {err}\n  {e}")),
        }
        let alerts = rule["alerts"].as_array().cloned().unwrap_or_default();
        match name {
            "TracerCPUThrottlingHigh" => {
                let throttled = &pods[0].name;
                if !alerts
                    .iter()
                    .any(|a| a["labels"]["pod"] == throttled.as_str())
                {
                    problems.push(format!(
                        "{name} is not pending for {throttled}, whose quota is 10% of a CPU: {alerts:?}"
                    ));
                }
            }
            "TracerTargetDown" | "TracerAbsent" if !alerts.is_empty() => problems.push(format!(
                "{name} fires while the exporter is scraped: {alerts:?}"
            )),
            _ => {}
        }
    }
    eprintln!(
        "{asked} queries ({} panel queries, {} rules) after {:.1} s",
        panels.len(),
        loaded.len(),
        started.elapsed().as_secs_f64()
    );
    // Prometheus's data and the logs stay for a failure to be read.
    if problems.is_empty() {
        drop(prom);
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
