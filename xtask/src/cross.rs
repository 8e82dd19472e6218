//! `cargo xtask cross-test`: the tracer's unit tests (the DTL and procfs parsers above
//! all) built for `powerpc64le-unknown-linux-gnu` and run under qemu-user, so the
//! big-endian decoding is proven on a POWER target without POWER hardware.
//!
//! Provisions what it needs, checking first so a second run changes nothing:
//! the rustup target, Debian's `gcc-powerpc64le-linux-gnu` (the linker),
//! `libc6-dev-ppc64el-cross` (C runtime objects and libc to link against; only recommended
//! by the gcc package, so named explicitly) and `qemu-user-static` (`apt-get update` only
//! when apt does not know a package yet; through `sudo -n` when not root). The tests see `TRACER_UNDER_QEMU=1`, so tests that
//! need the live kernel (BPF, perf events) can skip cleanly: qemu-user emulates neither.
use std::{path::Path, process::Command};

use anyhow::{Context, Result};

/// The Rust target.
pub const TARGET: &str = "powerpc64le-unknown-linux-gnu";
/// Cross linker from `gcc-powerpc64le-linux-gnu`.
pub const LINKER: &str = "powerpc64le-linux-gnu-gcc";
/// The user-mode emulator from `qemu-user-static`.
pub const QEMU: &str = "qemu-ppc64le-static";
/// The target's sysroot (libc, loader) for qemu's `-L`.
pub const SYSROOT: &str = "/usr/powerpc64le-linux-gnu";

fn workspace_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest)
}

/// Whether `cmd args` runs and exits 0 (quietly).
fn succeeds(cmd: &str, args: &[&str]) -> bool {
    crate::cmd::succeeds(Command::new(cmd).args(args))
}

/// The Debian packages still missing, given what is installed.
pub fn missing_packages(
    have_linker: bool,
    have_libc_dev: bool,
    have_qemu: bool,
) -> Vec<&'static str> {
    let mut v = Vec::new();
    if !have_linker {
        v.push("gcc-powerpc64le-linux-gnu");
    }
    if !have_libc_dev {
        v.push("libc6-dev-ppc64el-cross");
    }
    if !have_qemu {
        v.push("qemu-user-static");
    }
    v
}

/// The cargo runner: qemu with the target's sysroot.
pub fn runner() -> String {
    format!("{QEMU} -L {SYSROOT}")
}

fn ensure_rust_target() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(workspace_root())
        .output()
        .context("cannot run rustup (needed to add the powerpc64le target)")?;
    if String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        return Ok(());
    }
    crate::cmd::run(
        Command::new("rustup")
            .args(["target", "add", TARGET])
            .current_dir(workspace_root()),
    )
}

fn ensure_packages() -> Result<()> {
    let missing = missing_packages(
        succeeds(LINKER, &["--version"]),
        Path::new(SYSROOT).join("lib/Scrt1.o").is_file(),
        succeeds(QEMU, &["--version"]),
    );
    if missing.is_empty() {
        return Ok(());
    }
    crate::apt::Apt::new().install(&missing)
}

/// Provisions the toolchain, then runs `cargo test -p tracer --lib` for powerpc64le under
/// qemu-user.
pub fn cross_test() -> Result<()> {
    ensure_rust_target()?;
    ensure_packages()?;
    let env_target = TARGET.to_uppercase().replace('-', "_");
    crate::cmd::run(
        Command::new("cargo")
            .current_dir(workspace_root())
            .args(["test", "-p", "tracer", "--lib", "--target", TARGET])
            .env(format!("CARGO_TARGET_{env_target}_LINKER"), LINKER)
            .env(format!("CARGO_TARGET_{env_target}_RUNNER"), runner())
            .env(format!("CC_{}", TARGET.replace('-', "_")), LINKER)
            .env("TRACER_UNDER_QEMU", "1"),
    )
    .context("the powerpc64le unit tests failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_missing_packages_are_installed() {
        assert!(missing_packages(true, true, true).is_empty());
        assert_eq!(
            missing_packages(true, false, true),
            ["libc6-dev-ppc64el-cross"]
        );
        assert_eq!(
            missing_packages(false, true, false),
            ["gcc-powerpc64le-linux-gnu", "qemu-user-static"]
        );
        assert_eq!(
            runner(),
            "qemu-ppc64le-static -L /usr/powerpc64le-linux-gnu"
        );
    }
}
