//! The cross toolchains, one per foreign architecture, and the one way to use each:
//! `cargo xtask cross-test` (unit tests under qemu-user) and `cargo xtask vm-test` (the
//! guest's binaries) both go through `Cross::env`, and both provision it through
//! `provision::cross`.

use std::process::Command;

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
    /// The dynamic loader in the sysroot's lib directory.
    pub loader: &'static str,
}

pub const PPC64LE: Cross = Cross {
    rust_target: "powerpc64le-unknown-linux-gnu",
    gnu: "powerpc64le-linux-gnu",
    deb_arch: "ppc64el",
    qemu_user: "qemu-ppc64le-static",
    loader: "ld64.so.2",
};

pub const AARCH64: Cross = Cross {
    rust_target: "aarch64-unknown-linux-gnu",
    gnu: "aarch64-linux-gnu",
    deb_arch: "arm64",
    qemu_user: "qemu-aarch64-static",
    loader: "ld-linux-aarch64.so.1",
};

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

    /// The cargo runner for tests run under qemu-user: the sysroot's loader runs the test
    /// binary with the sysroot's libraries. Not qemu's `-L SYSROOT`: that maps every
    /// absolute path the guest opens into the sysroot where it exists there, `/` included,
    /// so a test that walks a path from `/` (the protected-files output rules) walked the
    /// sysroot and found no /tmp.
    pub fn runner(&self) -> String {
        format!(
            "{} {}/{} --library-path {}",
            self.qemu_user,
            self.lib_dir(),
            self.loader,
            self.lib_dir()
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_is_qemu_user_with_the_sysroot() {
        assert_eq!(
            AARCH64.runner(),
            "qemu-aarch64-static /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 \
             --library-path /usr/aarch64-linux-gnu/lib"
        );
    }
}
