//! `cargo xtask build` and `cargo xtask run`: the eBPF object (nightly, build-std,
//! bpf-linker) and the tracer binary that embeds it.

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
    pub ebpf_obj: PathBuf,
}

pub fn build(release: bool) -> Result<Built> {
    let tools = provision::build()?;
    let target = target_dir()?;
    let ebpf_obj = build_ebpf(&tools, &target)?;

    let mut tracer = cargo(None, "build", &target);
    tracer
        .args(["--package", "tracer"])
        .env("TRACER_EBPF_OBJ", &ebpf_obj);
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
    Ok(Built { bin, ebpf_obj })
}

/// `cargo +nightly SUBCOMMAND` over the eBPF crate for the BPF target, as it is built
/// (build, clippy), without the host's RUSTFLAGS.
pub fn ebpf_cargo(subcommand: &str, target: &Path) -> Command {
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
        ])
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    c
}

/// Builds the eBPF programs with nightly, `-Z build-std=core` and bpf-linker. The object
/// is little-endian BPF (bpfel) whatever the host; always optimized, since the verifier
/// rejects unoptimized code.
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
    let mut ebpf = ebpf_cargo("build", target);
    ebpf.env("PATH", path).env(
        "CARGO_TARGET_BPFEL_UNKNOWN_NONE_RUSTFLAGS",
        "-C debuginfo=2 -C link-arg=--btf",
    );
    cmd::run(&mut ebpf)
        .context("building the eBPF programs failed: fix the errors above and re-run")?;

    let obj = target.join("bpfel-unknown-none/release/tracer");
    ensure!(
        obj.exists(),
        "cargo reported success but built no {}",
        obj.display()
    );
    println!("xtask: built eBPF object {}", obj.display());
    Ok(obj)
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
