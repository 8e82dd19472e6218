//! The module graph has floors, and a module imports only from its own folder or from
//! floors below it: no circles, no upward imports. This reads every `crate::` path in
//! `src/` (tests included: a test that needs an upper floor belongs upstairs).
use std::{collections::BTreeSet, fs, path::Path};

/// Floors, top first. Folders on one floor may not import each other either, except
/// where listed in [`SIDEWAYS`].
const FLOORS: &[&[&str]] = &[
    &["main", "lib"],
    &["cli"],
    &["cmd"],
    &["output"],
    &["bpf", "pseries"],
    &["perf"],
    &["model"],
    &["sys"],
    &["error"],
];

/// Same-floor imports that are allowed: none today.
const SIDEWAYS: &[(&str, &str)] = &[];

fn floor_of(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

/// The top-level modules a source file names through `crate::`.
fn crate_refs(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::b, c, d::{e, f}}`: the top-level names at depth 0.
            let mut depth = 0;
            let mut word = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_start = true,
                    c if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') => {
                        word.push(c)
                    }
                    _ => {
                        if !word.is_empty() {
                            out.insert(std::mem::take(&mut word));
                        }
                        if depth == 0 && !c.is_whitespace() {
                            at_start = false;
                        }
                    }
                }
            }
            if !word.is_empty() {
                out.insert(word);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

fn visit(dir: &Path, found: &mut Vec<(String, String)>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            visit(&p, found);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap();
            let rel = rel.strip_prefix("src").unwrap();
            let top = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            found.push((top, fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn no_module_imports_a_floor_above_or_beside_it() {
    let mut files = Vec::new();
    visit(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut bad = Vec::new();
    for (top, src) in &files {
        let Some(mine) = floor_of(top) else {
            bad.push(format!("src/{top}: not on any floor (add it to FLOORS)"));
            continue;
        };
        for r in crate_refs(src) {
            if r == *top {
                continue;
            }
            match floor_of(&r) {
                None => bad.push(format!("{top} names crate::{r}, which is on no floor")),
                Some(f) if f < mine => bad.push(format!("{top} imports {r}, a floor above it")),
                Some(f) if f == mine && !SIDEWAYS.contains(&(top.as_str(), r.as_str())) => {
                    bad.push(format!("{top} imports {r}, beside it on the same floor"))
                }
                _ => {}
            }
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

/// The model is plain data and arithmetic: what every output reads and what unit tests
/// check without a kernel.
#[test]
fn the_model_knows_no_clap_no_aya_and_does_no_io() {
    let mut files = Vec::new();
    visit(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let model: Vec<_> = files.iter().filter(|(top, _)| top == "model").collect();
    assert!(!model.is_empty());
    for (_, src) in model {
        for banned in [
            "aya::",
            "clap::",
            "std::fs",
            "std::io",
            "std::process",
            "tokio::",
            "libc::",
        ] {
            let code = src.split("#[cfg(test)]").next().unwrap();
            assert!(!code.contains(banned), "model uses {banned}");
        }
    }
}

#[test]
fn the_reference_reader_sees_groups_and_paths() {
    let src = "use crate::{a::b, c, d::{e, f::g}};\nlet x = crate::h::i();";
    let got: Vec<_> = crate_refs(src).into_iter().collect();
    assert_eq!(got, ["a", "c", "d", "h"]);
}
