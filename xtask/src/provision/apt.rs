//! Debian packages the xtask installs when missing (cross toolchain, qemu, the bench's
//! reference tools), through `sudo -n` when not root. One place, so every task refreshes
//! the lists the same way: only when apt does not know a package, at most once a run.

use std::process::Command;

use anyhow::{Context, Result};

use crate::cmd;

/// A command that changes the system: as it is when root, else through `sudo -n`.
pub fn privileged(program: &str) -> Command {
    if crate::is_root().unwrap_or(false) {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", program]);
        c
    }
}

/// `apt-get -q ARGS`, non-interactive.
pub fn apt_get(args: &[&str]) -> Command {
    let mut c = privileged("apt-get");
    c.arg("-q")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive");
    c
}

/// The package lists, refreshed at most once per run. A failure is not fatal: a mirror
/// often serves one index mid-sync (seen for bookworm-security's ppc64el index) while
/// the packages we need resolve from the others.
pub struct Apt {
    pub(crate) updated: bool,
}

impl Apt {
    pub fn new() -> Apt {
        Apt { updated: false }
    }

    pub fn update(&mut self) {
        if self.updated {
            return;
        }
        self.updated = true;
        if let Err(e) = cmd::run(&mut apt_get(&["update"])) {
            println!("xtask: warning: {e:#}; going on with the lists apt has");
        }
    }

    /// Whether apt has a candidate for `package` in its current lists.
    pub fn knows(package: &str) -> bool {
        cmd::succeeds(Command::new("apt-cache").args(["show", "--no-all-versions", package]))
    }

    /// Installs `missing` (without recommends), refreshing the lists first only when apt
    /// does not know one of them.
    pub fn install(&mut self, missing: &[&str]) -> Result<()> {
        if missing.is_empty() {
            return Ok(());
        }
        if !missing.iter().all(|p| Apt::knows(p)) {
            self.update();
        }
        let mut args = vec!["install", "-y", "--no-install-recommends"];
        args.extend(missing);
        cmd::run(&mut apt_get(&args)).with_context(|| {
            format!(
                "installing {} (needs root or passwordless sudo)",
                missing.join(" ")
            )
        })
    }
}

/// Whether dpkg has `pkg` installed.
pub fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .stderr(std::process::Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// Installs those of `packages` that dpkg does not have; an error names what is still
/// missing after.
pub fn ensure(why: &str, packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("xtask: installing {} ({why})", missing.join(" "));
    Apt::new().install(&missing)?;
    let still: Vec<&str> = missing.into_iter().filter(|p| !installed(p)).collect();
    anyhow::ensure!(still.is_empty(), "still not installed: {}", still.join(" "));
    Ok(())
}
