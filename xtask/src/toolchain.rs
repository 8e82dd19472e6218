//! The cross toolchains, one per foreign architecture, and the one way to provision and
//! use each: `cargo xtask cross-test` (unit tests under qemu-user) and `cargo xtask
//! vm-test` (the guest's binaries) both go through `Cross::provision` and `Cross::env`,
//! so neither depends on the other having run first.
//!
//! Every package is named explicitly: the apt helper installs without recommends, and
//! the C runtime objects (`Scrt1.o`, `crti.o`) and libc the linker needs come from
//! `libc6-dev-*-cross`, which the cross gcc only recommends.

use std::{path::Path, process::Command};

use anyhow::Result;

use crate::{apt::Apt, cmd};

/// A Rust target cross-built with Debian's GNU toolchain for it.
pub struct Cross {
    /// The Rust target.
    pub rust_target: &'static str,
    /// The GNU triplet: the tools' prefix and the sysroot's name under /usr.
    pub gnu: &'static str,
    /// Debian's architecture name (dpkg, the `libc6-dev-*-cross` package).
    pub deb_arch: &'static str,
    /// The user-mode emulator from `qemu-user-static`.
    pub qemu_user: &'static str,
}

pub const PPC64LE: Cross = Cross {
    rust_target: "powerpc64le-unknown-linux-gnu",
    gnu: "powerpc64le-linux-gnu",
    deb_arch: "ppc64el",
    qemu_user: "qemu-ppc64le-static",
};

pub const AARCH64: Cross = Cross {
    rust_target: "aarch64-unknown-linux-gnu",
    gnu: "aarch64-linux-gnu",
    deb_arch: "arm64",
    qemu_user: "qemu-aarch64-static",
};

/// What `cross-test` runs its tests under, or only builds for (`vm-test`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Use {
    /// Build binaries (linker, libc, strip).
    Build,
    /// Build and run them under qemu-user.
    BuildAndRun,
}

impl Cross {
    pub fn linker(&self) -> String {
        format!("{}-gcc", self.gnu)
    }

    pub fn strip(&self) -> String {
        format!("{}-strip", self.gnu)
    }

    /// The target's sysroot (libc, loader): qemu-user's `-L`, the guest's libraries.
    pub fn sysroot(&self) -> String {
        format!("/usr/{}", self.gnu)
    }

    /// The guest's shared libraries on the host.
    pub fn lib_dir(&self) -> String {
        format!("{}/lib", self.sysroot())
    }

    /// The cargo runner for `Use::BuildAndRun`: qemu-user with the target's sysroot.
    pub fn runner(&self) -> String {
        format!("{} -L {}", self.qemu_user, self.sysroot())
    }

    /// `(what proves it is there, package)` for everything `what` needs: a program
    /// (found on PATH) or a file (an absolute path).
    pub fn wanted(&self, what: Use) -> Vec<(String, String)> {
        let mut v = vec![
            (self.linker(), format!("gcc-{}", self.gnu)),
            (
                format!("{}/Scrt1.o", self.lib_dir()),
                format!("libc6-dev-{}-cross", self.deb_arch),
            ),
            (
                format!("{}/libc.so.6", self.lib_dir()),
                format!("libc6-{}-cross", self.deb_arch),
            ),
            (self.strip(), format!("binutils-{}", self.gnu)),
        ];
        if what == Use::BuildAndRun {
            v.push((self.qemu_user.to_string(), "qemu-user-static".to_string()));
        }
        v
    }

    /// The rustup target and the Debian packages still missing (checked first, so a
    /// second run changes nothing).
    pub fn provision(&self, apt: &mut Apt, what: Use) -> Result<()> {
        ensure_rust_target(self.rust_target)?;
        let wanted = self.wanted(what);
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|(proof, _)| !present(proof))
            .map(|(_, pkg)| pkg.as_str())
            .collect();
        apt.install(&dedup(missing))
    }

    /// Points cargo (and the `cc` crate) at this toolchain for `--target rust_target`.
    pub fn env(&self, cargo: &mut Command) {
        let env_target = self.rust_target.to_uppercase().replace('-', "_");
        cargo
            .env(format!("CARGO_TARGET_{env_target}_LINKER"), self.linker())
            .env(
                format!("CC_{}", self.rust_target.replace('-', "_")),
                self.linker(),
            );
    }
}

/// A program on PATH that runs, or an existing file.
pub fn present(proof: &str) -> bool {
    if proof.starts_with('/') {
        Path::new(proof).exists()
    } else {
        cmd::succeeds(Command::new(proof).arg("--version"))
    }
}

fn dedup(mut v: Vec<&str>) -> Vec<&str> {
    let mut seen = Vec::new();
    v.retain(|p| {
        let new = !seen.contains(p);
        seen.push(*p);
        new
    });
    v
}

pub(crate) fn ensure_rust_target(target: &str) -> Result<()> {
    let installed = cmd::output(
        Command::new("rustup")
            .args(["target", "list", "--installed"])
            .current_dir(crate::workspace_root()),
    )?;
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    cmd::run(
        Command::new("rustup")
            .args(["target", "add", target])
            .current_dir(crate::workspace_root()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_toolchain_names_its_c_runtime_and_emulator() {
        let pkgs = |c: &Cross, u| -> Vec<String> { c.wanted(u).into_iter().map(|w| w.1).collect() };
        assert_eq!(
            pkgs(&PPC64LE, Use::Build),
            [
                "gcc-powerpc64le-linux-gnu",
                "libc6-dev-ppc64el-cross",
                "libc6-ppc64el-cross",
                "binutils-powerpc64le-linux-gnu"
            ]
        );
        assert!(pkgs(&AARCH64, Use::BuildAndRun).contains(&"libc6-dev-arm64-cross".to_string()));
        assert_eq!(
            pkgs(&AARCH64, Use::BuildAndRun).last().unwrap(),
            "qemu-user-static"
        );
        assert_eq!(
            AARCH64.runner(),
            "qemu-aarch64-static -L /usr/aarch64-linux-gnu"
        );
        assert_eq!(dedup(vec!["a", "b", "a"]), ["a", "b"]);
    }
}
