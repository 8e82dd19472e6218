//! contrib/ against its real consumers, without root: the rules through `promtool check
//! rules` and `promtool test rules`, the DaemonSet through `kubernetes-validate --strict`,
//! the dashboard's shape here and each of its queries through a real (empty) Prometheus.
//! That the queries return data from a real `tracer serve` is tests/tests/serve_contrib.rs.
//!
//! The tools are installed by `cargo xtask test`; a plain `cargo test` skips these as
//! ignored (never silently passed), and a missing tool fails them.
use std::{path::PathBuf, process::Command};

use tracer_tests::{
    contrib::{
        contrib_dir, dashboard, label_values, panel_queries, panels, query_variables, substitute,
        VARIABLES,
    },
    prometheus::Prometheus,
};

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} cannot start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
#[ignore = "needs promtool: cargo xtask test installs it"]
fn promtool_checks_the_rules_and_passes_their_unit_tests() {
    let dir = contrib_dir().join("prometheus");
    let (ok, out) = run(Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(dir.join("rules.yml")));
    assert!(ok, "promtool check rules: {out}");
    let (ok, out) = run(Command::new("promtool")
        .args(["test", "rules", "rules_test.yml"])
        .current_dir(&dir));
    assert!(ok, "promtool test rules: {out}");
    // Every alert has a test of it firing and of it not firing.
    let rules = std::fs::read_to_string(dir.join("rules.yml")).unwrap();
    let tests = std::fs::read_to_string(dir.join("rules_test.yml")).unwrap();
    for alert in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        let cases: Vec<&str> = tests
            .split("- alertname: ")
            .skip(1)
            .filter(|c| c.starts_with(&format!("{alert}\n")))
            .collect();
        let quiet = cases
            .iter()
            .filter(|c| c.contains("exp_alerts: []"))
            .count();
        assert!(
            quiet > 0 && cases.len() > quiet,
            "{alert}: rules_test.yml should test it firing and not firing ({} cases, {quiet} quiet)",
            cases.len()
        );
    }
}

fn kubernetes_validate() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_KUBERNETES_VALIDATE") {
        return PathBuf::from(p);
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/k8s-venv/bin/kubernetes-validate");
    assert!(
        p.exists(),
        "{} is missing: `cargo xtask test` installs it (python3 -m venv; pip install kubernetes-validate)",
        p.display()
    );
    p
}

#[test]
#[ignore = "needs kubernetes-validate: cargo xtask test installs it"]
fn the_daemonset_passes_kubernetes_validate_in_strict_mode() {
    let file = contrib_dir().join("kubernetes/daemonset.yaml");
    let (ok, out) = run(Command::new(kubernetes_validate())
        .arg("--strict")
        .arg(&file));
    assert!(ok, "kubernetes-validate --strict: {out}");
    for kind in ["daemonset/tracer", "service/tracer"] {
        assert!(
            out.contains(&format!("passed for resource {kind}")),
            "kubernetes-validate did not check {kind}: {out}"
        );
    }
    // What the schemas allow but the DaemonSet promises.
    let text = std::fs::read_to_string(&file).unwrap();
    for must in [
        "hostPID: true",
        "privileged: false",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "- operator: Exists",
        "path: /sys/fs/cgroup",
        "path: /sys/kernel/btf",
        "path: /sys/kernel/tracing",
        "prometheus.io/scrape: \"true\"",
    ] {
        assert!(text.contains(must), "daemonset.yaml lacks {must:?}");
    }
}

#[test]
fn the_dashboard_uses_its_datasource_variable_and_defines_what_it_uses() {
    let d = dashboard();
    assert!(
        d["schemaVersion"].as_u64().is_some_and(|v| v >= 39),
        "schemaVersion {}",
        d["schemaVersion"]
    );
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    assert!(
        vars.iter().any(|v| v["type"] == "datasource"
            && v["name"] == "datasource"
            && v["query"] == "prometheus"),
        "no Prometheus datasource variable named datasource"
    );
    let qv = query_variables(&d);
    let names: Vec<&str> = qv.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["instance", "namespace", "pod", "cgroup"]);
    for (name, q) in &qv {
        let (sel, label) =
            label_values(q).unwrap_or_else(|| panic!("${name}: {q:?} is no label_values"));
        assert_eq!(&label, name, "${name} lists {label}");
        substitute(&sel, VARIABLES).unwrap();
    }
    let mut ids = std::collections::BTreeSet::new();
    for p in panels(&d) {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "panel id {} twice",
            p["id"]
        );
        assert!(
            p["gridPos"]["w"].as_u64().is_some(),
            "{}: no gridPos",
            p["title"]
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        for t in p["targets"].as_array().expect("targets") {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{}", p["title"]);
        }
    }
    let queries = panel_queries(&d);
    for q in &queries {
        assert!(
            !q.expr.trim().is_empty(),
            "{} {}: no expr",
            q.panel,
            q.ref_id
        );
        substitute(&q.expr, VARIABLES).unwrap_or_else(|e| panic!("{}: {e}", q.panel));
    }
    // What issue 29 asks the dashboard to show, by the series it reads.
    let all: String = queries
        .iter()
        .map(|q| q.expr.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for family in [
        "tracer_cgroup_runq_latency_seconds_bucket",
        "tracer_cgroup_on_cpu_seconds_total",
        "tracer_cgroup_cpu_throttled_seconds_total",
        "tracer_cgroup_cpu_throttled_periods_total",
        "tracer_cgroup_cpu_periods_total",
        "tracer_cgroup_cpu_pressure_seconds_total",
        "tracer_cpu_pressure_seconds_total",
        "tracer_cpu_steal_seconds_total",
        "tracer_bpf_run_time_seconds_total",
        "process_cpu_seconds_total",
        "tracer_drops_total",
        "histogram_quantile(0.99",
    ] {
        assert!(all.contains(family), "no panel reads {family}");
    }
    assert!(
        panels(&d).iter().any(|p| p["type"] == "heatmap"),
        "no heatmap panel"
    );
}

#[test]
#[ignore = "needs prometheus: cargo xtask test installs it"]
fn every_dashboard_query_parses_in_a_real_prometheus() {
    let dir = tracer_tests::scratch("contrib-parse");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prom = Prometheus::start(&dir, "global:\n  scrape_interval: 1s\nscrape_configs: []\n");
    let d = dashboard();
    let mut exprs: Vec<(String, String)> = panel_queries(&d)
        .into_iter()
        .map(|q| (format!("{} {}", q.panel, q.ref_id), q.expr))
        .collect();
    for (name, q) in query_variables(&d) {
        let (sel, label) = label_values(&q).unwrap();
        exprs.push((format!("${name}"), format!("count by ({label}) ({sel})")));
    }
    let mut bad = Vec::new();
    for (what, e) in &exprs {
        let e = substitute(e, VARIABLES).unwrap();
        if let Err(err) = prom.query(&e) {
            bad.push(format!("{what}: {err}\n  {e}"));
        }
    }
    eprintln!("{} queries sent", exprs.len());
    let _ = std::fs::remove_dir_all(&dir);
    assert!(bad.is_empty(), "Prometheus rejected:\n{}", bad.join("\n"));
}
