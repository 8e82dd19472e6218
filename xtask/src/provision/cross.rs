//! A cross toolchain's packages: `cargo xtask cross-test` (unit tests under qemu-user)
//! and `cargo xtask vm-test` (the guest's binaries) both provision it here, so neither
//! depends on the other having run first.
//!
//! Every package is named explicitly: apt installs without recommends, and the C runtime
//! objects (`Scrt1.o`, `crti.o`) and libc the linker needs come from
//! `libc6-dev-*-cross`, which the cross gcc only recommends.

use anyhow::Result;

use super::apt::Apt;
use crate::toolchain::Cross;

/// What a cross toolchain is used for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Use {
    /// Build binaries (linker, libc, strip).
    Build,
    /// Build and run them under qemu-user.
    BuildAndRun,
}

/// `(what proves it is there, package)` for everything `what` needs: a program (found
/// on PATH) or a file (an absolute path).
fn wanted(cross: &Cross, what: Use) -> Vec<(String, String)> {
    let mut v = vec![
        (cross.linker(), format!("gcc-{}", cross.gnu)),
        (
            format!("{}/Scrt1.o", cross.lib_dir()),
            format!("libc6-dev-{}-cross", cross.deb_arch),
        ),
        (
            format!("{}/libc.so.6", cross.lib_dir()),
            format!("libc6-{}-cross", cross.deb_arch),
        ),
        (cross.strip(), format!("binutils-{}", cross.gnu)),
    ];
    if what == Use::BuildAndRun {
        v.push((cross.qemu_user.to_string(), "qemu-user-static".to_string()));
    }
    v
}

/// The rustup target and the Debian packages still missing (checked first, so a second
/// run changes nothing).
pub fn provision(cross: &Cross, apt: &mut Apt, what: Use) -> Result<()> {
    super::rust::target(cross.rust_target)?;
    let wanted = wanted(cross, what);
    let wanted: Vec<(&str, &str)> = wanted
        .iter()
        .map(|(proof, pkg)| (proof.as_str(), pkg.as_str()))
        .collect();
    apt.install_missing(&wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::{AARCH64, PPC64LE};

    #[test]
    fn each_toolchain_names_its_c_runtime_and_emulator() {
        let pkgs =
            |c: &Cross, u| -> Vec<String> { wanted(c, u).into_iter().map(|w| w.1).collect() };
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
    }
}
