//! The static binary (`cargo xtask build --release --static`): musl, checked to need no
//! shared library and, as root, to run in an empty chroot.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

use crate::{cmd, provision};

/// The Rust target of the static binary: the host's architecture with musl.
pub fn static_target() -> String {
    format!("{}-unknown-linux-musl", env::consts::ARCH)
}

/// Builds the tracer for the musl target, statically linked (musl's default for Rust:
/// `crt-static`), with the eBPF objects embedded. Adds the rustup target and musl-tools
/// when missing (`provision::static_binary`).
pub fn build_static(release: bool) -> Result<PathBuf> {
    let tools = provision::build()?;
    let target_dir = crate::target_dir()?;
    let ebpf_dir = crate::compile::build_ebpf(&tools, &target_dir)?;
    let target = static_target();
    provision::static_binary(&target)?;
    let mut cargo = crate::cargo(None, "build", &target_dir);
    cargo.env(
        format!("CC_{}", target.replace('-', "_")),
        musl_cc().unwrap_or_else(|| "musl-gcc".into()),
    );
    cargo
        .args([
            "--package",
            "tracer",
            "--bin",
            "tracer",
            "--target",
            &target,
        ])
        .env("TRACER_EBPF_DIR", &ebpf_dir)
        // The static binary must not pick up `-C target-feature=-crt-static` from a
        // RUSTFLAGS meant for the host.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if release {
        cargo.arg("--release");
    }
    cmd::run(&mut cargo).context("building the static tracer failed: see the errors above")?;
    let bin = target_dir
        .join(&target)
        .join(if release { "release" } else { "debug" })
        .join("tracer");
    let needed = crate::elf::needed_libraries(&bin)?;
    ensure!(
        needed.is_empty(),
        "{} should be static but needs {}",
        bin.display(),
        needed.join(", ")
    );
    println!(
        "xtask: built {} (static, no shared libraries)",
        bin.display()
    );
    if crate::is_root()? {
        run_in_empty_chroot(&bin)?;
    } else {
        println!(
            "xtask: not root: the check that it runs in an empty chroot did not run \
             (`sudo -E cargo xtask build --static` runs it)"
        );
    }
    Ok(bin)
}

/// The C compiler for the musl target the user set, if any (else musl-gcc from musl-tools).
fn musl_cc() -> Option<String> {
    let var = format!("CC_{}", static_target().replace('-', "_"));
    env::var(var).ok()
}

/// Runs `bin --version` and `bin check` inside a chroot holding nothing but the binary
/// (and /proc, /sys for `check`): no loader, no libc, no host file.
pub fn run_in_empty_chroot(bin: &Path) -> Result<()> {
    let root = crate::target_dir()?.join("static-chroot");
    if root.exists() {
        // Unmounted by the last run; an empty tree otherwise.
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("cannot empty {}", root.display()))?;
    }
    for d in ["proc", "sys"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::copy(bin, root.join("tracer"))
        .with_context(|| format!("cannot copy {}", bin.display()))?;
    // A private mount namespace: /proc and /sys go away with it, whatever happens.
    let script = format!(
        "set -e; mount -t proc proc {r}/proc; mount -t sysfs sysfs {r}/sys; \
         chroot {r} /tracer --version; chroot {r} /tracer check",
        r = root.display()
    );
    let out = cmd::output(Command::new("unshare").args([
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
    ]))
    .context("the static binary does not run in an empty chroot")?;
    let version = out.lines().next().unwrap_or_default();
    ensure!(
        version.starts_with("tracer "),
        "`tracer --version` in the chroot printed {version:?}"
    );
    println!("xtask: the static binary runs in an empty chroot: {version}");
    std::fs::remove_dir_all(&root).ok();
    Ok(())
}
