//! Where the workspace is, how cargo is started in it, and who we run as.

use std::{
    env,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Command, ExitCode, ExitStatus},
};

use anyhow::{Context, Result};

pub fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
}

/// Cargo's target directory, absolute, so every cargo we start agrees on it.
pub fn target_dir() -> Result<PathBuf> {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => std::path::absolute(dir).context("cannot resolve CARGO_TARGET_DIR"),
        None => Ok(workspace_root().join("target")),
    }
}

/// A `cargo` command run from the workspace root. In CI the lock file must already be
/// up to date (`--locked`), so a stale Cargo.lock fails instead of being re-resolved.
pub fn cargo(toolchain: Option<&str>, subcommand: &str, target: &Path) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target);
    cmd.args(toolchain.map(|t| format!("+{t}"))).arg(subcommand);
    if env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        cmd.arg("--locked");
    }
    cmd
}

pub fn is_root() -> Result<bool> {
    // The second field of `Uid:` is the effective uid.
    let status = std::fs::read_to_string("/proc/self/status")
        .context("cannot read /proc/self/status: is /proc mounted?")?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .context("/proc/self/status has no Uid line")?;
    Ok(euid == "0")
}

/// The child's exit code, or 128 + signal number like a shell when it was killed.
pub fn exit_code(status: ExitStatus) -> ExitCode {
    let code = status
        .code()
        .or(status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
