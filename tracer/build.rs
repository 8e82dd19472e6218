//! Embeds the eBPF objects into the tracer as `$OUT_DIR/tracer-{sched,offcpu,floor}`,
//! one per program family (see `bpf::object`).
//!
//! From the directory `TRACER_EBPF_DIR` when set: `cargo xtask build` builds the objects
//! with the bpf-linker it provisions and sets it, as do every xtask command and test
//! that builds the tracer. Otherwise (a plain `cargo build`) they are built here, the
//! way aya-template does it: `aya-build` runs `cargo +nightly build -Z build-std=core`
//! for the BPF target in a target directory of its own under `OUT_DIR`, once per family
//! (each object is built with its own feature: see `tracer-ebpf/src/lib.rs`). That needs
//! the nightly toolchain with rust-src and bpf-linker on PATH; without them the build
//! fails here, naming `cargo xtask build`, instead of embedding an empty object.
//!
//! It also sets what `tracer --version` prints, so a bug report names exactly what ran:
//! `TRACER_GIT_COMMIT` (git's HEAD at build time; the variable itself when set, e.g. by a
//! build from a tarball; else "unknown") and `TRACER_BPF_SHA256` (the first 12 hex digits
//! of the SHA-256 of the embedded objects one after the other, what `cat tracer-sched
//! tracer-record tracer-serve tracer-offcpu tracer-floor | sha256sum` prints).

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::Command,
};

use sha2::{Digest, Sha256};

/// The program families (`tracer-ebpf`'s features; its bins are `tracer-FAMILY`), in the
/// order the objects are hashed.
const FAMILIES: [&str; 5] = ["sched", "record", "serve", "offcpu", "floor"];

fn main() {
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_DIR");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // Never an object left by an earlier build (e.g. with `AYA_BUILD_SKIP=1`).
    for family in FAMILIES {
        let _ = fs::remove_file(out.join(format!("tracer-{family}")));
    }
    match env::var_os("TRACER_EBPF_DIR") {
        Some(dir) => copy_objects(Path::new(&dir), &out),
        None => build_objects(),
    }

    let mut hash = Sha256::new();
    for family in FAMILIES {
        let path = out.join(format!("tracer-{family}"));
        let object = fs::read(&path).unwrap_or_else(|e| {
            fail(&format!(
                "the eBPF object {} is missing ({e})",
                path.display()
            ))
        });
        if object.is_empty() {
            fail(&format!("the eBPF object {} is empty", path.display()));
        }
        hash.update(&object);
    }
    let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
    println!("cargo:rustc-env=TRACER_BPF_SHA256={}", &hex[..12]);
    println!("cargo:rustc-env=TRACER_GIT_COMMIT={}", git_commit());
}

/// Stops the build with one line that says what to do.
fn fail(why: &str) -> ! {
    eprintln!("error: {why}: build the tracer with `cargo xtask build`");
    std::process::exit(1);
}

/// The objects `cargo xtask build` left in `dir`.
fn copy_objects(dir: &Path, out: &Path) {
    for family in FAMILIES {
        let name = format!("tracer-{family}");
        let path = dir.join(&name);
        println!("cargo:rerun-if-changed={}", path.display());
        if !path.is_file() {
            fail(&format!("TRACER_EBPF_DIR={} has no {name}", dir.display()));
        }
        fs::copy(&path, out.join(&name))
            .unwrap_or_else(|e| fail(&format!("cannot copy {}: {e}", path.display())));
    }
}

/// Builds the objects with aya-build (aya-template's way), one family at a time.
fn build_objects() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest
        .parent()
        .expect("tracer lives inside the workspace");
    let ebpf = workspace.join("tracer-ebpf");
    // aya-build watches the eBPF crate; its shared types live in tracer-common.
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("tracer-common").display()
    );
    let root_dir = ebpf.to_str().unwrap_or_else(|| {
        fail(&format!(
            "the eBPF crate's path {} is not UTF-8",
            ebpf.display()
        ))
    });
    let features: Vec<[&str; 1]> = FAMILIES.iter().map(|f| [*f]).collect();
    let packages = features.iter().map(|f| aya_build::Package {
        name: "tracer-ebpf",
        root_dir,
        features: f,
        ..Default::default()
    });
    if let Err(e) = aya_build::build_ebpf(packages, aya_build::Toolchain::Nightly) {
        // aya-build's own messages are above (as cargo warnings).
        let why = format!("{e:#}");
        let why = why.lines().next().unwrap_or_default();
        fail(&format!(
            "building the eBPF objects needs nightly with rust-src and bpf-linker on PATH ({why})"
        ));
    }
}

/// HEAD's commit (12 hex digits, `-dirty` when tracked files differ from it), or
/// `TRACER_GIT_COMMIT` when set, or "unknown" outside a git checkout.
fn git_commit() -> String {
    println!("cargo:rerun-if-env-changed=TRACER_GIT_COMMIT");
    if let Some(commit) = env::var("TRACER_GIT_COMMIT").ok().filter(|c| !c.is_empty()) {
        return commit;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(env::var_os("CARGO_MANIFEST_DIR")?)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".to_string();
    };
    // Re-run after a commit or checkout: HEAD's reflog changes with both (in a worktree
    // too, whose HEAD lives in its own git dir).
    for path in ["HEAD", "logs/HEAD"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", path]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    // -dirty: tracked files differ from HEAD. Watching the user-space sources re-runs
    // this script at every edit, so the mark does not lag (the eBPF sources change the
    // object, watched above).
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    for dir in ["src", "../tracer-common/src"] {
        println!("cargo:rerun-if-changed={}", manifest.join(dir).display());
    }
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    }
}
