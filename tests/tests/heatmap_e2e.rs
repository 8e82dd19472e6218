//! `tracer run -i --heatmap FILE.svg` end to end: the SVG's cells add up to the
//! histograms of the interval JSON documents of the same run, and headless Chromium
//! (Debian's `chromium`, installed by `cargo xtask test`) parses and renders it.
use std::{collections::BTreeMap, process::Command};

use serde_json::Value;
use tracer_tests::{json_docs, require_root, run_tracer, scratch};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// (kind, interval, row) -> count, from the SVG's `<rect class="cell" ...>` attributes.
fn svg_cells(svg: &str) -> BTreeMap<(String, u64, u64), u64> {
    let attr = |s: &str, name: &str| -> String {
        let key = format!("{name}=\"");
        let i = s
            .find(&key)
            .unwrap_or_else(|| panic!("{name} missing in {s}"))
            + key.len();
        s[i..].split('"').next().unwrap().to_string()
    };
    let mut out = BTreeMap::new();
    for cell in svg.split("<rect class=\"cell\"").skip(1) {
        let cell = cell.split('>').next().unwrap();
        let k = (
            attr(cell, "data-kind"),
            attr(cell, "data-interval").parse().unwrap(),
            attr(cell, "data-row").parse().unwrap(),
        );
        let n: u64 = attr(cell, "data-count").parse().unwrap();
        assert!(out.insert(k, n).is_none(), "a cell drawn twice");
    }
    out
}

/// The same from the JSON: each bucket's count goes to the power-of-two row of its
/// bound (row r: [2^(r-1), 2^r) ns).
fn json_cells(docs: &[Value]) -> BTreeMap<(String, u64, u64), u64> {
    let mut out = BTreeMap::new();
    for d in docs.iter().filter(|d| d["kind"] == "interval") {
        let iv = d["interval"].as_u64().unwrap();
        for kind in ["runq", "on_cpu", "off_cpu"] {
            for b in d["histograms"][kind]["buckets"].as_array().unwrap() {
                let le = b["le_ns"].as_u64().unwrap();
                assert_ne!(le, u64::MAX, "a wait beyond the last bucket");
                let row = u64::from(64 - le.leading_zeros());
                *out.entry((kind.to_string(), iv, row)).or_default() +=
                    b["count"].as_u64().unwrap();
            }
        }
    }
    out
}

#[test]
#[ignore = "needs root"]
fn heatmap_cells_add_up_to_the_interval_histograms_and_chromium_renders_it() {
    require_root();
    let svg_path = scratch("heatmap.svg");
    let out = run_tracer(&[
        "run",
        "-i",
        "200ms",
        "--count",
        "5",
        "--json",
        "--heatmap",
        svg_path.to_str().unwrap(),
        "--",
        WORKLOAD,
        "busy-sleep",
        "--threads",
        "3",
        "--work-ms",
        "3",
        "--sleep-ms",
        "2",
        "--duration-ms",
        "3000",
        "--out",
        "/dev/null",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = json_docs(&out);
    assert_eq!(docs.iter().filter(|d| d["kind"] == "interval").count(), 5);
    let svg = std::fs::read_to_string(&svg_path).expect("the SVG was written");
    let from_svg = svg_cells(&svg);
    let from_json = json_cells(&docs);
    assert!(
        from_json.keys().any(|k| k.0 == "runq") && from_json.keys().any(|k| k.0 == "on_cpu"),
        "the workload waited and ran"
    );
    assert_eq!(
        from_svg, from_json,
        "cells differ from the interval histograms"
    );
    assert_eq!(svg.matches("<title>").count(), from_svg.len());

    // Chromium parses it as XML (a parse error shows as a <parsererror> page) and draws it.
    let chromium = |args: &[&str]| {
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
            ])
            .args(args)
            .output()
            .expect("chromium is missing: `cargo xtask test` installs Debian's chromium")
    };
    let url = format!("file://{}", svg_path.display());
    let dom = chromium(&["--dump-dom", &url]);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(
        !dom.contains("parsererror"),
        "Chromium could not parse the SVG: {dom}"
    );
    assert_eq!(
        dom.matches("class=\"cell\"").count(),
        from_svg.len(),
        "{dom}"
    );
    let png = scratch("heatmap.png");
    let _ = std::fs::remove_file(&png);
    let shot = chromium(&[
        &format!("--screenshot={}", png.display()),
        "--window-size=840,780",
        &url,
    ]);
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 5_000,
        "{} bytes",
        bytes.len()
    );
}

#[test]
#[ignore = "needs root"]
fn a_heatmap_path_that_cannot_be_written_fails_before_the_run() {
    require_root();
    let out = run_tracer(&["run", "-i", "1s", "--heatmap", "/nonexistent-dir/x.svg"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("creating the heatmap file /nonexistent-dir/x.svg"),
        "{err}"
    );
    let out = run_tracer(&["run", "--heatmap", "/tmp/x.svg"]);
    assert_eq!(out.status.code(), Some(2), "--heatmap needs -i");
}
