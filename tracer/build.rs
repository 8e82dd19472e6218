//! Embeds the eBPF objects into the tracer as `$OUT_DIR/tracer-{sched,offcpu,floor}`,
//! one per program family (see `bpf::object`).
//!
//! The objects are built by `cargo xtask build` (nightly, build-std, bpf-linker), never
//! from here. They come from the directory `TRACER_EBPF_DIR` when set (xtask sets it),
//! else from the default build output in the workspace's target directory. Without
//! them, empty files are embedded so the crate still builds (e.g. cross-compiled unit
//! tests); the loader reports an empty object as an error at run time.
//!
//! It also sets what `tracer --version` prints, so a bug report names exactly what ran:
//! `TRACER_GIT_COMMIT` (git's HEAD at build time; the variable itself when set, e.g. by a
//! build from a tarball; else "unknown") and `TRACER_BPF_SHA256` (the first 12 hex digits
//! of the SHA-256 of the embedded objects one after the other, what `cat tracer-sched
//! tracer-offcpu tracer-floor | sha256sum` prints).

use std::{env, fs, path::PathBuf, process::Command};

use sha2::{Digest, Sha256};

/// The objects, in the order they are hashed.
const OBJECTS: [&str; 3] = ["tracer-sched", "tracer-offcpu", "tracer-floor"];

fn main() {
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_DIR");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    let dir = match env::var_os("TRACER_EBPF_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            for name in OBJECTS {
                if !dir.join(name).is_file() {
                    panic!(
                        "TRACER_EBPF_DIR={} has no {name}: build the eBPF objects with `cargo xtask build`, \
                         or unset TRACER_EBPF_DIR",
                        dir.display()
                    );
                }
            }
            dir
        }
        None => default_dir(),
    };

    let mut hash = Sha256::new();
    let mut missing = Vec::new();
    for name in OBJECTS {
        let path = dir.join(name);
        // Also watched while missing, so a later `cargo xtask build` is picked up.
        println!("cargo:rerun-if-changed={}", path.display());
        let dst = out.join(name);
        if path.is_file() {
            fs::copy(&path, &dst).unwrap_or_else(|e| {
                panic!("cannot copy {} to {}: {e}", path.display(), dst.display())
            });
        } else {
            missing.push(name);
            fs::write(&dst, b"").unwrap_or_else(|e| panic!("cannot write {}: {e}", dst.display()));
        }
        hash.update(
            fs::read(&dst).unwrap_or_else(|e| panic!("cannot read {}: {e}", dst.display())),
        );
    }
    let bpf = if missing.is_empty() {
        let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        hex[..12].to_string()
    } else {
        println!(
            "cargo:warning=eBPF objects missing in {} ({}), so this tracer cannot load its \
             programs: build with `cargo xtask build`",
            dir.display(),
            missing.join(", ")
        );
        "none".to_string()
    };
    println!("cargo:rustc-env=TRACER_BPF_SHA256={bpf}");
    println!("cargo:rustc-env=TRACER_GIT_COMMIT={}", git_commit());
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

/// Where `cargo xtask build` leaves the objects. BPF objects do not depend on the CPU
/// architecture, only on byte order: the kernel loads bpfel objects on little-endian
/// machines (x86_64, aarch64, powerpc64le) and needs bpfeb on big-endian ones
/// (powerpc64, s390x), so pick by the target's endianness.
fn default_dir() -> PathBuf {
    let bpf_target = match env::var("CARGO_CFG_TARGET_ENDIAN").as_deref() {
        Ok("big") => "bpfeb-unknown-none",
        _ => "bpfel-unknown-none",
    };
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let manifest = PathBuf::from(
                env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
            );
            manifest
                .parent()
                .expect("tracer lives inside the workspace")
                .join("target")
        });
    target_dir.join(bpf_target).join("release")
}
