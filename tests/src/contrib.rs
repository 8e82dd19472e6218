//! The queries of contrib/'s Grafana dashboard and Prometheus rules, in the form the
//! tests send a real Prometheus: every panel's expressions, the variables' label_values
//! queries, Grafana's variables substituted, and what an alert's condition compares.
//! Pure, so that a query the tests skip by a parsing slip shows up here.
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The contrib/ directory of the workspace.
pub fn contrib_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../contrib")
}

/// Grafana's variables as the tests fill them in: every choice (`.*`, what "All" sends
/// with allValue `.*`) and intervals that suit a 1 s scrape.
pub const VARIABLES: &[(&str, &str)] = &[
    ("instance", ".*"),
    ("namespace", ".*"),
    ("pod", ".*"),
    ("cgroup", ".*"),
    ("__rate_interval", "20s"),
    ("__interval", "5s"),
    ("__range", "1m"),
];

/// A pod's container as the kubelet's log directories name it.
pub struct KubeletName<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub uid: &'a str,
    pub container: &'a str,
    /// The full container id.
    pub id: &'a str,
}

/// The kubelet's log directories under `dir` that name `pods` (what `tracer serve
/// --kubelet-logs` reads): `pods/<namespace>_<pod>_<uid>/<container>/` and
/// `containers/<pod>_<namespace>_<container>-<id>.log`.
pub fn kubelet_logs(dir: &Path, pods: &[KubeletName]) {
    for p in pods {
        let pod_dir = format!("{}_{}_{}", p.namespace, p.pod, p.uid);
        std::fs::create_dir_all(dir.join("pods").join(pod_dir).join(p.container)).unwrap();
        let log = format!("{}_{}_{}-{}.log", p.pod, p.namespace, p.container, p.id);
        std::fs::create_dir_all(dir.join("containers")).unwrap();
        std::fs::write(dir.join("containers").join(log), "").unwrap();
    }
}

/// The dashboard, parsed (panics with the file's error: the test's subject is broken).
pub fn dashboard() -> Value {
    let path = contrib_dir().join("grafana/tracer.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?} is not JSON: {e}"))
}

/// One query of one panel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PanelQuery {
    pub panel: String,
    pub ref_id: String,
    pub expr: String,
}

/// Every panel, rows' collapsed panels included, depth first.
pub fn panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// Every target expression of every panel. A target without `expr` is returned with an
/// empty one, for the caller to reject.
pub fn panel_queries(dash: &Value) -> Vec<PanelQuery> {
    panels(dash)
        .into_iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or("").to_string();
            p["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| PanelQuery {
                    panel: title.clone(),
                    ref_id: t["refId"].as_str().unwrap_or("").to_string(),
                    expr: t["expr"].as_str().unwrap_or("").to_string(),
                })
        })
        .collect()
}

/// The dashboard's query variables: (name, its query string).
pub fn query_variables(dash: &Value) -> Vec<(String, String)> {
    dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .map(|v| {
            let q = v["query"]["query"]
                .as_str()
                .or_else(|| v["query"].as_str())
                .unwrap_or("");
            (v["name"].as_str().unwrap_or("").to_string(), q.to_string())
        })
        .collect()
}

/// `label_values(SELECTOR, LABEL)` as (selector, label).
pub fn label_values(q: &str) -> Option<(String, String)> {
    let inner = q.trim().strip_prefix("label_values(")?.strip_suffix(')')?;
    let (sel, label) = inner.rsplit_once(',')?;
    let label = label.trim();
    let ok = !label.is_empty()
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_');
    ok.then(|| (sel.trim().to_string(), label.to_string()))
}

/// `expr` with Grafana's `$name`, `${name}` and `${name:format}` replaced from
/// `values`; a variable not in `values` is an error (the dashboard uses one it does not
/// define, or one the caller forgot).
pub fn substitute(expr: &str, values: &[(&str, &str)]) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("unclosed ${{ in {expr:?}"))?;
            let inner = &braced[..end];
            (inner.split(':').next().unwrap_or(""), end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| format!("unknown variable ${name} in {expr:?}"))?;
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What an alert's condition compares: the left side of its last top-level comparison
/// with a number (`X > 0.05` gives `X`), or the argument of `absent(X)`. A shape not
/// known here is an error, so a new alert gets its signal checked, not skipped.
pub fn alert_signal(expr: &str) -> Result<String, String> {
    let e = expr.trim();
    if let Some(inner) = e.strip_prefix("absent(").and_then(|r| r.strip_suffix(')')) {
        return Ok(inner.trim().to_string());
    }
    let b = e.as_bytes();
    let (mut depth, mut quote, mut last) = (0i32, None::<u8>, None);
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match quote {
            Some(_) if c == b'\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                b'"' | b'\'' | b'`' => quote = Some(c),
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => depth -= 1,
                b'>' | b'<' | b'=' | b'!' if depth == 0 => {
                    let two = b.get(i + 1) == Some(&b'=');
                    // `=` and `!` alone are no comparison (`=~`, `!~` are inside braces).
                    if two || c == b'>' || c == b'<' {
                        last = Some((i, if two { 2 } else { 1 }));
                    }
                    if two {
                        i += 1;
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    let (at, len) = last.ok_or_else(|| format!("no comparison in {expr:?}"))?;
    let rhs = e[at + len..].trim();
    let rhs = rhs.strip_prefix("bool").map(str::trim).unwrap_or(rhs);
    rhs.parse::<f64>()
        .map_err(|_| format!("{expr:?} compares with {rhs:?}, not a number"))?;
    Ok(e[..at].trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_every_form_and_rejects_unknown_variables() {
        let v = [("pod", ".*"), ("__rate_interval", "20s")];
        assert_eq!(
            substitute(r#"rate(x{pod=~"$pod"}[$__rate_interval])"#, &v).unwrap(),
            r#"rate(x{pod=~".*"}[20s])"#
        );
        assert_eq!(
            substitute(r#"x{pod=~"${pod:regex}", a="${pod}"}"#, &v).unwrap(),
            r#"x{pod=~".*", a=".*"}"#
        );
        assert_eq!(substitute("up", &v).unwrap(), "up");
        assert!(substitute(r#"x{n=~"$namespace"}"#, &v)
            .unwrap_err()
            .contains("$namespace"));
        assert!(substitute("x{a=\"${pod\"}", &v).is_err());
    }

    #[test]
    fn label_values_splits_at_the_last_comma() {
        assert_eq!(
            label_values(r#"label_values(m{a=~"$x", b="y"}, pod)"#),
            Some((r#"m{a=~"$x", b="y"}"#.into(), "pod".into()))
        );
        assert_eq!(label_values("label_values(pod)"), None);
        assert_eq!(label_values("up"), None);
    }

    #[test]
    fn alert_signals_drop_the_threshold_only() {
        assert_eq!(alert_signal("a:b:c > 0.05").unwrap(), "a:b:c");
        assert_eq!(
            alert_signal(r#"up{job=~"tracer.*"} == 0"#).unwrap(),
            r#"up{job=~"tracer.*"}"#
        );
        assert_eq!(
            alert_signal("rate(x[5m]) / (rate(y[5m]) > 0) >= bool 1").unwrap(),
            "rate(x[5m]) / (rate(y[5m]) > 0)"
        );
        assert_eq!(
            alert_signal(r#"absent(up{job=~"t"})"#).unwrap(),
            r#"up{job=~"t"}"#
        );
        assert_eq!(
            alert_signal(r#"x{a!="b>1"} != 2"#).unwrap(),
            r#"x{a!="b>1"}"#
        );
        assert!(alert_signal("x > y").is_err());
        assert!(alert_signal("x").is_err());
    }

    #[test]
    fn panel_queries_include_rows_collapsed_panels() {
        let d: Value = serde_json::from_str(
            r#"{"panels":[{"title":"a","targets":[{"refId":"A","expr":"x"}]},
                {"type":"row","title":"r","panels":[{"title":"b","targets":[{"refId":"B"}]}]}]}"#,
        )
        .unwrap();
        let q = panel_queries(&d);
        assert_eq!(q.len(), 2);
        assert_eq!(q[1].panel, "b");
        assert_eq!(q[1].expr, "");
    }
}
