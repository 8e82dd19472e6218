//! Embeds the eBPF object into the tracer as `$OUT_DIR/tracer.bpf.o`.
//!
//! The object is built by `cargo xtask build` (nightly, build-std, bpf-linker), never
//! from here. It comes from `TRACER_EBPF_OBJ` when set (xtask sets it), else from the
//! default build output in the workspace's target directory. Without one, an empty file
//! is embedded so the crate still builds (e.g. cross-compiled unit tests); the loader
//! reports the empty object as an error at run time.

use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=TRACER_EBPF_OBJ");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("tracer.bpf.o");

    let object = match env::var_os("TRACER_EBPF_OBJ") {
        Some(path) => {
            let path = PathBuf::from(path);
            if !path.is_file() {
                panic!(
                    "TRACER_EBPF_OBJ={} is not a file: build the eBPF object with `cargo xtask build`, \
                     or unset TRACER_EBPF_OBJ",
                    path.display()
                );
            }
            Some(path)
        }
        None => {
            let default = default_object();
            // Also watched while missing, so a later `cargo xtask build` is picked up.
            println!("cargo:rerun-if-changed={}", default.display());
            default.is_file().then_some(default)
        }
    };

    match object {
        Some(path) => {
            println!("cargo:rerun-if-changed={}", path.display());
            fs::copy(&path, &out).unwrap_or_else(|e| {
                panic!("cannot copy {} to {}: {e}", path.display(), out.display())
            });
        }
        None => {
            println!(
                "cargo:warning=the eBPF object is missing ({} not found), so this tracer cannot \
                 load its programs: build with `cargo xtask build`",
                default_object().display()
            );
            fs::write(&out, b"").unwrap_or_else(|e| panic!("cannot write {}: {e}", out.display()));
        }
    }
}

/// Where `cargo xtask build` leaves the object. BPF objects do not depend on the CPU
/// architecture, only on byte order: the kernel loads bpfel objects on little-endian
/// machines (x86_64, aarch64, powerpc64le) and needs bpfeb on big-endian ones
/// (powerpc64, s390x), so pick by the target's endianness.
fn default_object() -> PathBuf {
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
    target_dir.join(bpf_target).join("release/tracer")
}
