//! What `cargo xtask vm-test`'s guests need from Debian, checked before installed or
//! downloaded, so a second run changes nothing: qemu for each architecture, installed on
//! the host, and, only downloaded into the cache and unpacked there (never installed),
//! the kernel packages of tests/vm/kernels, a static busybox and libbpf-tools for each
//! guest architecture.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use super::apt::{newest_cached, Apt};
use crate::arch::{Arch, ARCHES, X86_64};

/// Extracts the members of `deb` matching `pattern` (tar wildcards, e.g. `./boot/*`)
/// into `dir`, unless `marker` (inside `dir`) already exists.
fn extract(deb: &Path, dir: &Path, pattern: &str, marker: &Path) -> Result<()> {
    if marker.exists() {
        return Ok(());
    }
    let tmp = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    let mut deb_tar = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run dpkg-deb")?;
    let status = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&tmp)
        .args(["--wildcards", pattern])
        .stdin(deb_tar.stdout.take().context("no pipe from dpkg-deb")?)
        .status()
        .context("cannot run tar")?;
    let deb_status = deb_tar.wait()?;
    if !status.success() || !deb_status.success() {
        bail!(
            "extracting {pattern} from {} failed (dpkg-deb {deb_status}, tar {status})",
            deb.display()
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&tmp, dir)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), dir.display()))?;
    if !marker.exists() {
        bail!("{} holds no {}", deb.display(), marker.display());
    }
    Ok(())
}

/// A kernel ready to boot.
pub struct Kernel {
    pub package: String,
    pub version: String,
    /// vmlinuz (x86_64) or vmlinux (ppc64le).
    pub image: PathBuf,
    /// Its `config-*`: what the kernel offers, and so what the checks expect.
    pub config: String,
}

/// Downloads (once) and unpacks (once) a kernel package's /boot.
pub fn kernel(apt: &mut Apt, arch: &Arch, package: &str, cache: &Path) -> Result<Kernel> {
    let debs = cache.join("debs");
    // What a metapackage stood for when apt last said, for when it cannot say.
    let resolved = debs.join(format!("{package}_{}.resolved", arch.deb_arch));
    let (concrete, deb) = match apt.resolve_kernel(package, arch.deb_arch) {
        Some(concrete) => {
            if concrete != package {
                println!("vm-test: {package} is {concrete} now");
            }
            let deb = apt.download(&concrete, arch.deb_arch, &debs)?;
            if concrete != package {
                let _ = std::fs::write(&resolved, &concrete);
            }
            (concrete, deb)
        }
        // apt cannot say (no lists, offline): the newest kernel of the package's name
        // already in the cache, or of the one the metapackage stood for last time (with
        // two metapackages in the matrix, "any linux-image-*" would take one for the other).
        None => {
            let last = std::fs::read_to_string(&resolved).ok();
            let deb = newest_cached(&debs, &format!("{package}_"), arch.deb_arch)
                .or_else(|| {
                    let last = last.as_deref()?.trim();
                    newest_cached(&debs, &format!("{last}_"), arch.deb_arch)
                })
                .or_else(|| newest_cached(&debs, "linux-image-", arch.deb_arch))
                .with_context(|| {
                    format!(
                        "apt knows no {package} and no kernel is cached in {}",
                        debs.display()
                    )
                })?;
            let name = deb
                .file_name()
                .map(|n| {
                    n.to_string_lossy()
                        .split('_')
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default();
            println!("vm-test: apt cannot resolve {package}: using the cached {name}");
            (name, deb)
        }
    };
    let stem = deb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = cache.join("kernels").join(&stem);
    extract(&deb, &dir, "./boot/*", &dir.join("boot"))?;
    let boot = dir.join("boot");
    let mut image = None;
    let mut config = None;
    for e in std::fs::read_dir(&boot)? {
        let p = e?.path();
        let n = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if n.starts_with("vmlinuz-") || n.starts_with("vmlinux-") {
            image = Some(p);
        } else if n.starts_with("config-") {
            config = Some(p);
        }
    }
    let image = image.with_context(|| format!("{} has no /boot/vmlinu[xz]-*", deb.display()))?;
    let config = config.with_context(|| format!("{} has no /boot/config-*", deb.display()))?;
    let version = stem.split('_').nth(1).unwrap_or("?").replace("%3a", ":");
    Ok(Kernel {
        package: concrete,
        version,
        image,
        config: std::fs::read_to_string(&config)
            .with_context(|| format!("cannot read {}", config.display()))?,
    })
}

/// A static busybox for the guest, from Debian's busybox-static of its architecture
/// (downloaded and unpacked, never installed on the host).
pub fn busybox(apt: &mut Apt, arch: &Arch, cache: &Path) -> Result<PathBuf> {
    let deb = apt.download("busybox-static", arch.deb_arch, &cache.join("debs"))?;
    let stem = deb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = cache.join("busybox").join(stem);
    let bin = dir.join("bin/busybox");
    extract(&deb, &dir, "./bin/busybox", &bin)?;
    Ok(bin)
}

/// The directory holding libbpf-tools' programs (`runqlat`, ...) for the guest, from
/// Debian's libbpf-tools of its architecture (downloaded and unpacked, never installed).
/// They link libelf and zlib, taken from the host like the tracer's libraries.
pub fn libbpf_tools(apt: &mut Apt, arch: &Arch, cache: &Path) -> Result<PathBuf> {
    let deb = apt.download("libbpf-tools", arch.deb_arch, &cache.join("debs"))?;
    let stem = deb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = cache.join("libbpf-tools").join(stem);
    extract(&deb, &dir, "./usr/sbin/*", &dir.join("usr/sbin/runqlat"))?;
    if arch.cross.is_none() {
        apt.install_missing(&[("/usr/lib/x86_64-linux-gnu/libelf.so.1", "libelf1")])?;
    }
    Ok(dir.join("usr/sbin"))
}

/// The kernels of tests/vm/kernels (`ARCH PACKAGE` a line, `#` comments), the matrix
/// `cargo xtask vm-test` boots.
pub fn listed_kernels() -> Result<Vec<(&'static Arch, String)>> {
    let path = crate::workspace_root().join("tests/vm/kernels");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let mut list = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (arch, package) = line
            .split_once(char::is_whitespace)
            .with_context(|| format!("{}:{}: expected `ARCH PACKAGE`", path.display(), n + 1))?;
        let arch = ARCHES.iter().find(|a| a.name == arch).with_context(|| {
            format!("{}:{}: unknown architecture {arch}", path.display(), n + 1)
        })?;
        list.push((*arch, package.trim().to_string()));
    }
    Ok(list)
}

/// The host's side of the guests `arches`: their qemu, the dpkg architecture apt
/// downloads their packages for, and the cross toolchain their binaries are built with.
pub fn host(apt: &mut Apt, arches: &[&Arch]) -> Result<()> {
    let mut wanted: Vec<(&str, &str)> = Vec::new();
    for a in arches {
        wanted.push((a.qemu, a.qemu_package));
        if a.deb_arch != X86_64.deb_arch {
            apt.add_architecture(a.deb_arch)?;
        }
        if let Some(cross) = a.cross {
            super::cross::provision(cross, apt, super::cross::Use::Build)?;
        }
    }
    apt.install_missing(&wanted)
}
