//! `cargo xtask build` and `cargo xtask run`: the eBPF objects (nightly, build-std,
//! bpf-linker), one per program family, and the tracer binary that embeds them.

use std::{
    env,
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{ensure, Context, Result};

use crate::{cargo, cmd, provision, target_dir, workspace_root};

pub struct Built {
    pub bin: PathBuf,
    /// The directory of the eBPF objects (`TRACER_EBPF_DIR`).
    pub ebpf_dir: PathBuf,
}

/// The eBPF program families (`tracer-ebpf`'s features and bins `tracer-FAMILY`): each
/// object is built with its own feature alone, since a map the library declares is in
/// every object built with it.
pub const EBPF_FAMILIES: [&str; 5] = ["sched", "record", "serve", "offcpu", "floor"];

pub fn build(release: bool) -> Result<Built> {
    let tools = provision::build()?;
    let target = target_dir()?;
    let ebpf_dir = build_ebpf(&tools, &target)?;

    let mut tracer = cargo(None, "build", &target);
    tracer
        .args(["--package", "tracer"])
        .env("TRACER_EBPF_DIR", &ebpf_dir);
    if release {
        tracer.arg("--release");
    }
    cmd::run(&mut tracer).context("building the tracer failed: fix the errors above and re-run")?;

    let bin = target
        .join(if release { "release" } else { "debug" })
        .join("tracer");
    ensure!(
        bin.exists(),
        "cargo reported success but built no {}",
        bin.display()
    );
    println!("xtask: built {}", bin.display());
    Ok(Built { bin, ebpf_dir })
}

/// `cargo +nightly SUBCOMMAND` over the eBPF crate's `family` (one of [`EBPF_FAMILIES`])
/// for the BPF target, as it is built (build, clippy), without the host's RUSTFLAGS.
pub fn ebpf_cargo(subcommand: &str, target: &Path, family: &str) -> Command {
    let mut c = cargo(Some("nightly"), subcommand, target);
    c.current_dir(workspace_root().join("tracer-ebpf"))
        .args([
            "--package",
            "tracer-ebpf",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--features",
            family,
            "--lib",
            "--bin",
            &format!("tracer-{family}"),
        ])
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    c
}

/// Builds the eBPF objects with nightly, `-Z build-std=core` and bpf-linker, one cargo
/// run per family; returns their directory. The objects are little-endian BPF (bpfel)
/// whatever the host; always optimized, since the verifier rejects unoptimized code.
pub fn build_ebpf(tools: &provision::Tools, target: &Path) -> Result<PathBuf> {
    // bpf-linker goes on PATH (rather than `-C linker`) so the build flags, and with them
    // cargo's cache, match a hand-run `PATH=... cargo +nightly build` of the same object.
    let path = env::var_os("PATH").unwrap_or_default();
    let linker_dir = tools
        .bpf_linker
        .parent()
        .context("bpf-linker has no parent directory")?;
    let path =
        env::join_paths(std::iter::once(linker_dir.to_path_buf()).chain(env::split_paths(&path)))
            .context("the bpf-linker directory cannot go on PATH: its path contains ':'")?;
    let dir = target.join("bpfel-unknown-none/release");
    for family in EBPF_FAMILIES {
        let mut ebpf = ebpf_cargo("build", target, family);
        ebpf.env("PATH", &path).env(
            "CARGO_TARGET_BPFEL_UNKNOWN_NONE_RUSTFLAGS",
            "-C debuginfo=2 -C link-arg=--btf",
        );
        cmd::run(&mut ebpf).with_context(|| {
            format!("building the eBPF programs ({family}) failed: fix the errors above and re-run")
        })?;
        let obj = dir.join(format!("tracer-{family}"));
        ensure!(
            obj.exists(),
            "cargo reported success but built no {}",
            obj.display()
        );
    }
    println!("xtask: built eBPF objects in {}", dir.display());
    Ok(dir)
}

/// `cargo xtask run`: builds, then runs the tracer as root (through sudo when needed).
pub fn run(release: bool, args: &[OsString]) -> Result<ExitCode> {
    let built = build(release)?;
    let mut tracer = if crate::is_root()? {
        Command::new(&built.bin)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg("-E").arg(&built.bin);
        sudo
    };
    let status = cmd::status(tracer.args(args))?;
    Ok(crate::exit_code(status))
}
