//! Workloads compiled by the tests themselves, with codegen flags cargo cannot give one
//! binary (with and without frame pointers).
use std::{path::PathBuf, process::Command};

/// Compiles `src/bin/NAME.rs`, a std-only workload, with plain rustc (cargo cannot give
/// one binary its own codegen flags): with frame pointers, or optimized without them.
/// Rebuilt when the source is newer.
pub fn std_only_workload(name: &str, frame_pointers: bool) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let src = root.join(format!("src/bin/{name}.rs"));
    let dir = root.join("../target").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(if frame_pointers { "fp" } else { "nofp" });
    let m = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let fresh = matches!((m(&out), m(&src)), (Some(a), Some(b)) if a > b);
    if !fresh {
        let fp = if frame_pointers { "yes" } else { "no" };
        let st = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .args(["--edition", "2021", "-g", "-C", "opt-level=1"])
            .arg(format!("-Cforce-frame-pointers={fp}"))
            .arg(&src)
            .arg("-o")
            .arg(&out)
            .status()
            .expect("rustc");
        assert!(st.success(), "compiling {name} failed");
    }
    out
}
