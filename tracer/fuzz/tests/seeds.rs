//! Each fuzz target's function on each of its seeds (`seeds/<target>/`), as an ordinary
//! test: stable Rust, no libFuzzer run, so `cargo xtask test` proves every target still
//! builds against the tracer and that nothing the fuzzer starts from panics.

use std::path::{Path, PathBuf};

/// A target's function: what `fuzz_targets/<name>.rs` feeds the fuzzer's bytes to.
type Target = fn(&[u8]);

/// Every target, with its function.
const TARGETS: &[(&str, Target)] = &[
    ("cli_parsers", tracer_fuzz::cli_parsers),
    ("dtl_entries", tracer_fuzz::dtl_entries),
    ("proc_stat", tracer_fuzz::proc_stat),
    ("vcpudispatch_stats", tracer_fuzz::vcpudispatch_stats),
];

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The file names in `dir`, sorted.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

fn run_seeds(target: &str) {
    let f = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, f)| *f)
        .unwrap();
    let seeds = files(&crate_dir().join("seeds").join(target));
    assert!(!seeds.is_empty(), "{target} has no seeds");
    for seed in seeds {
        let data = std::fs::read(&seed).unwrap();
        // The harness shows this line with the panic of the seed that failed.
        println!("{target}: {}", seed.display());
        f(&data);
    }
}

#[test]
fn cli_parsers_seeds() {
    run_seeds("cli_parsers");
}

#[test]
fn dtl_entries_seeds() {
    run_seeds("dtl_entries");
}

#[test]
fn proc_stat_seeds() {
    run_seeds("proc_stat");
}

#[test]
fn vcpudispatch_stats_seeds() {
    run_seeds("vcpudispatch_stats");
}

/// A target added under fuzz_targets/ gets its seeds and its test here.
#[test]
fn every_target_has_seeds_and_a_test() {
    let names = |dir: &str| -> Vec<String> {
        files(&crate_dir().join(dir))
            .iter()
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    let listed: Vec<String> = TARGETS.iter().map(|(n, _)| n.to_string()).collect();
    assert_eq!(names("fuzz_targets"), listed);
    assert_eq!(names("seeds"), listed);
}
