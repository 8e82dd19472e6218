//! `tracer diff` end to end on files: the golden run report (tests/golden/total.json,
//! itself checked against the code by golden.rs) against a changed copy, its text and
//! JSON as golden files, hostile names escaped, and every kind of bad input refused in
//! one line with exit 2.
use std::{path::PathBuf, process::Command};

use serde_json::{json, Value};

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tracer-diff-{}-{name}", std::process::id()))
}

fn total() -> Value {
    serde_json::from_str(&std::fs::read_to_string(golden("total.json")).unwrap()).unwrap()
}

/// B: the first thread twice as busy, with its waits halved; the second gone; a new
/// thread whose name is hostile; one more migration everywhere.
fn changed() -> Value {
    let mut b = total();
    let on = |t: &Value| t["on_cpu_ns"].as_u64().unwrap();
    let run_on = b["on_cpu_ns"].as_u64().unwrap();
    let threads = b["threads"].as_array_mut().unwrap();
    // The run's on-CPU total follows its rows: + t0's again + the new one's - the gone one's.
    let total_on = run_on + 2 * on(&threads[0]) - on(&threads[1]);
    let t0 = &mut threads[0];
    t0["on_cpu_ns"] = json!(on(t0) * 2);
    t0["runq_wait_ns"] = json!(t0["runq_wait_ns"].as_u64().unwrap() / 2);
    threads.remove(1);
    let mut evil = threads[0].clone();
    evil["tid"] = json!(4242);
    evil["pid"] = json!(4242);
    evil["comm"] = json!("evil\u{1b}]2;OWNED\u{7}\u{202e}");
    threads.push(evil);
    for t in threads.iter_mut() {
        t["migrations"] = json!(t["migrations"].as_u64().unwrap() + 1);
    }
    b["on_cpu_ns"] = json!(total_on);
    b["cpus_utilized"] = json!(b["cpus_utilized"].as_f64().unwrap() * 1.5);
    b
}

fn write(name: &str, v: &Value) -> PathBuf {
    let p = scratch(name);
    std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
    p
}

fn tracer(args: &[&std::ffi::OsStr]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tracer"))
        .arg("diff")
        .args(args)
        .output()
        .unwrap();
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (
        out.status.code().unwrap_or(-1),
        s(&out.stdout),
        s(&out.stderr),
    )
}

/// Compares with tests/golden/NAME, or rewrites it under UPDATE_GOLDEN=1.
fn check(name: &str, got: &str) {
    let path = golden(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(got, want, "{name} differs");
}

#[test]
fn diff_text_and_json_match_the_golden_files_and_escape_names() {
    let a = golden("total.json");
    let b = write("b.json", &changed());
    // The golden file's own name, not this machine's path, in the output.
    let (code, text, err) = tracer(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, 0, "{err}");
    let text = text
        .replace(a.to_str().unwrap(), "A.json")
        .replace(b.to_str().unwrap(), "B.json");
    for c in text.chars() {
        assert!(!c.is_control() || c == '\n', "{c:?} in:\n{text}");
        assert!(!('\u{202a}'..='\u{202e}').contains(&c), "{c:?} in:\n{text}");
    }
    assert!(text.contains("evil\\x1b]2;OWNED\\x07"), "{text}");
    check("diff.txt", &text);
    let (code, json, err) = tracer(&[a.as_os_str(), b.as_os_str(), "--json".as_ref()]);
    assert_eq!(code, 0, "{err}");
    let json = json
        .replace(a.to_str().unwrap(), "A.json")
        .replace(b.to_str().unwrap(), "B.json");
    let v: Value = serde_json::from_str(&json).unwrap();
    // The hostile name keeps its characters in JSON, as the run's JSON does.
    let names: Vec<&str> = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["thread"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"evil\u{1b}]2;OWNED\u{7}\u{202e}"),
        "{names:?}"
    );
    assert!(
        !json.contains('\u{202e}'),
        "raw bidi override in the JSON text"
    );
    check("diff.json", &json);
    std::fs::remove_file(b).unwrap();
}

#[test]
fn bad_input_is_refused_in_one_line_with_exit_2() {
    let a = golden("total.json");
    let mut raw = changed();
    raw["probe"] = json!("raw-tp");
    let other_probe = write("probe.json", &raw);
    let mut old = total();
    old.as_object_mut().unwrap().remove("schema");
    let old = write("old.json", &old);
    let cut = scratch("cut.json");
    let text = std::fs::read_to_string(&a).unwrap();
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    let check_json = write("check.json", &json!({"items": [], "run_ok": true}));
    let not_json = scratch("notjson");
    std::fs::write(&not_json, "tracer: error: no\n").unwrap();
    let missing = scratch("missing.json");
    let dir = std::env::temp_dir();
    let cases: [(&PathBuf, &str); 7] = [
        (&other_probe, "different probe modes (A tp-btf, B raw-tp)"),
        (&old, "different schemas (A is schema 1, B is schema 0)"),
        (&cut, "truncated"),
        (&check_json, "tracer check --json"),
        (&not_json, "not JSON"),
        (&missing, "No such file or directory"),
        (&dir, "is a directory"),
    ];
    for (b, want) in cases {
        let (code, out, err) = tracer(&[a.as_os_str(), b.as_os_str()]);
        assert_eq!(code, 2, "{}: {err}", b.display());
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("tracer: error: ") && err.contains(want),
            "want {want:?}: {err}"
        );
    }
    for p in [other_probe, old, cut, check_json, not_json] {
        std::fs::remove_file(p).unwrap();
    }
}
