//! The docs drift test, run with the unit tests by `cargo xtask test`: every repository
//! path the docs name must exist, and every top-level key of `tracer run --json` must be
//! in docs/run.md's schema table. The keys are read from the report's `Serialize` types
//! in the source (fields, `rename`, `skip`, `flatten`, the `kind` tag), so a new field
//! fails here until it is documented.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

/// Where the keys come from: the report and the sections flattened into it.
const REPORT: &str = "tracer/src/model/report.rs";
const SECTIONS: &str = "tracer/src/output/report.rs";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/*.md.
fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"]
        .iter()
        .map(|f| root.join(f))
        .collect();
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    out.extend(docs);
    out
}

/// Inline code spans and link targets outside fenced blocks.
fn spans_and_links(md: &str) -> (Vec<String>, Vec<String>) {
    let (mut spans, mut links) = (Vec::new(), Vec::new());
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        let mut text = vec![parts.next().unwrap_or("")];
        while let (Some(code), Some(after)) = (parts.next(), parts.next()) {
            spans.push(code.to_string());
            text.push(after);
        }
        for t in text {
            let mut rest = t;
            while let Some(i) = rest.find("](") {
                rest = &rest[i + 2..];
                if let Some(end) = rest.find(')') {
                    links.push(rest[..end].to_string());
                    rest = &rest[end..];
                }
            }
        }
    }
    (spans, links)
}

/// A code span that names a path in this repository: it starts with a top-level entry
/// that exists (`tracer/src/...`, `docs/...`, `.ci/run`, `Cargo.toml`).
fn repo_path<'a>(span: &'a str, tops: &BTreeSet<String>) -> Option<&'a str> {
    let span = span.trim();
    if span.is_empty() || span.contains(char::is_whitespace) || span.contains("://") {
        return None;
    }
    let first = span.split('/').next().unwrap();
    (span.contains('/') || span.contains('.')).then_some(())?;
    tops.contains(first).then_some(span)
}

/// Paths named in the docs that do not exist, as "FILE: PATH".
fn missing_paths(root: &Path) -> Vec<String> {
    let tops: BTreeSet<String> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect();
    let mut bad = Vec::new();
    for file in doc_files(root) {
        let md = fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root).unwrap().display().to_string();
        let (spans, links) = spans_and_links(&md);
        for s in spans {
            if let Some(p) = repo_path(&s, &tops) {
                // `tracer/src/cmd/` and `cmd::run::run_with` alike: only the path part.
                let p = p
                    .split("::")
                    .next()
                    .unwrap()
                    .trim_end_matches(['.', ',', ':']);
                if !root.join(p).exists() {
                    bad.push(format!("{name}: `{p}`"));
                }
            }
        }
        for l in links {
            let target = l.split('#').next().unwrap().trim();
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let dir = file.parent().unwrap();
            if !dir.join(target).exists() {
                bad.push(format!("{name}: link ({target})"));
            }
        }
    }
    bad
}

/// The serialized fields of `struct NAME` in `src` (whose definition starts at the line
/// `pub struct NAME`), with `flatten`ed fields as ("flatten", TYPE).
fn struct_fields(src: &str, name: &str) -> Vec<(String, String)> {
    let start = src
        .find(&format!("pub struct {name}"))
        .unwrap_or_else(|| panic!("no `pub struct {name}`"));
    let body = &src[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("\n}").unwrap()];
    let mut out = Vec::new();
    let mut attrs = String::new();
    for line in body.lines().map(str::trim) {
        if line.starts_with("#[serde(") {
            attrs.push_str(line);
        } else if let Some(rest) = line.strip_prefix("pub ") {
            let (field, ty) = rest.split_once(':').unwrap();
            let ty = ty.trim().trim_end_matches(',').to_string();
            if attrs.contains("flatten") {
                out.push(("flatten".to_string(), ty));
            } else if !attrs.contains("skip)") && !attrs.contains("skip,") {
                let key = attrs
                    .split("rename = \"")
                    .nth(1)
                    .and_then(|r| r.split('"').next())
                    .unwrap_or(field.trim());
                out.push((key.to_string(), ty));
            }
            attrs.clear();
        } else if !line.starts_with("///") && !line.is_empty() {
            attrs.clear();
        }
    }
    out
}

/// The top-level keys of a report document, from the source.
fn report_keys(root: &Path) -> BTreeSet<String> {
    let model = fs::read_to_string(root.join(REPORT)).unwrap();
    let sections = fs::read_to_string(root.join(SECTIONS)).unwrap();
    let mut keys = BTreeSet::new();
    for (key, ty) in struct_fields(&model, "Report<S>") {
        if key != "flatten" {
            keys.insert(key);
            continue;
        }
        match ty.as_str() {
            // `#[serde(tag = "kind")]` with `Interval { interval }`.
            "ReportKind" => {
                assert!(model.contains("#[serde(tag = \"kind\""), "ReportKind's tag");
                keys.extend(["kind".to_string(), "interval".to_string()]);
            }
            "S" => keys.extend(
                struct_fields(&sections, "Sections")
                    .into_iter()
                    .map(|f| f.0),
            ),
            other => keys.extend(struct_fields(&model, other).into_iter().map(|f| f.0)),
        }
    }
    keys
}

/// The keys named in the first cell of docs/run.md's schema table.
fn documented_keys(run_md: &str) -> BTreeSet<String> {
    let table = run_md
        .split("## JSON schema")
        .nth(1)
        .expect("docs/run.md has a `## JSON schema` section");
    let mut keys = BTreeSet::new();
    for line in table.lines().filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap();
        keys.extend(cell.split('`').skip(1).step_by(2).map(str::to_string));
        // `kind` documents `interval` in its own row.
        if cell.contains("`kind`") && line.contains("`interval`") {
            keys.insert("interval".to_string());
        }
    }
    keys
}

#[test]
fn every_path_the_docs_name_exists() {
    let bad = missing_paths(&root());
    assert!(
        bad.is_empty(),
        "the docs name paths that do not exist:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_top_level_json_key_is_documented_in_run_md() {
    let root = root();
    let keys = report_keys(&root);
    // The reader must see the keys a real report has: the golden documents' keys.
    for golden in ["total.json", "interval_process.json"] {
        let text = fs::read_to_string(root.join("tracer/tests/golden").join(golden)).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        for k in doc.as_object().unwrap().keys() {
            assert!(
                keys.contains(k),
                "{golden} has `{k}`, which the source reader missed"
            );
        }
    }
    let run_md = fs::read_to_string(root.join("docs/run.md")).unwrap();
    let documented = documented_keys(&run_md);
    let missing: Vec<_> = keys.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "JSON keys not in docs/run.md's schema table: {missing:?}"
    );
}

#[test]
fn the_readers_see_spans_links_and_serde_attributes() {
    let (spans, links) = spans_and_links("a `x/y.rs` [t](docs/a.md#b)\n```\n`no`\n```\n");
    assert_eq!(
        (spans, links),
        (vec!["x/y.rs".into()], vec!["docs/a.md#b".into()])
    );
    let src = "pub struct T {\n    /// doc\n    #[serde(skip)]\n    pub a: u8,\n    \
               #[serde(rename = \"bee\")]\n    pub b: u8,\n    pub c: Vec<u8>,\n}\n";
    let got: Vec<_> = struct_fields(src, "T").into_iter().map(|f| f.0).collect();
    assert_eq!(got, ["bee", "c"]);
}
