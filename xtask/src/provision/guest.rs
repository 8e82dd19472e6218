//! What the VMs need from Debian, checked before installed or downloaded, so a second
//! run changes nothing: qemu (installed on the host) and, only downloaded into the cache (never installed), the kernel packages and a static
//! busybox for each guest architecture.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use super::Arch;
pub use crate::apt::Apt;
use crate::{
    apt::{apt_get, privileged},
    cmd,
};

fn have_program(name: &str) -> bool {
    cmd::succeeds(Command::new(name).arg("--version"))
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Apt {
    /// `apt-cache show` of the candidate version, updating the lists once if apt does not
    /// know the package.
    fn show(&mut self, spec: &str) -> Option<String> {
        let show = |spec: &str| {
            output(Command::new("apt-cache").args(["show", "--no-all-versions", spec]))
                .filter(|s| !s.trim().is_empty())
        };
        if let Some(s) = show(spec) {
            return Some(s);
        }
        self.update();
        show(spec)
    }

    /// Installs the host packages still missing (`(program that proves it, package)`).
    pub fn install_missing(&mut self, wanted: &[(&str, &str)]) -> Result<()> {
        let missing: Vec<&str> = wanted
            .iter()
            .filter(|(prog, _)| {
                if prog.starts_with('/') {
                    !Path::new(prog).exists()
                } else {
                    !have_program(prog)
                }
            })
            .map(|(_, pkg)| *pkg)
            .collect();
        self.install(&missing)
    }

    /// Lets apt download packages of a foreign architecture (ppc64el).
    pub fn add_architecture(&mut self, deb_arch: &str) -> Result<()> {
        let native = output(Command::new("dpkg").arg("--print-architecture")).unwrap_or_default();
        if native.trim() == deb_arch {
            return Ok(());
        }
        let foreign =
            output(Command::new("dpkg").arg("--print-foreign-architectures")).unwrap_or_default();
        if foreign.lines().any(|l| l.trim() == deb_arch) {
            return Ok(());
        }
        cmd::run(privileged("dpkg").args(["--add-architecture", deb_arch]))?;
        self.updated = false;
        self.update();
        Ok(())
    }

    /// The kernel package a metapackage (e.g. `linux-image-amd64`) currently stands for: its
    /// `linux-image-*` dependency. A concrete package is returned as it is.
    pub fn resolve_kernel(&mut self, package: &str, deb_arch: &str) -> Option<String> {
        let info = self.show(&format!("{package}:{deb_arch}"))?;
        let concrete = field(&info, "Depends").and_then(|d| {
            d.split([',', '|'])
                .map(|d| d.split_whitespace().next().unwrap_or(""))
                .find(|d| d.starts_with("linux-image-"))
                .map(|d| d.split(':').next().unwrap_or(d).to_string())
        });
        Some(concrete.unwrap_or_else(|| package.to_string()))
    }

    /// The package's .deb in `dir`, downloaded unless the candidate version already is
    /// there. Offline (apt knows no candidate), the newest cached .deb of the package.
    pub fn download(&mut self, package: &str, deb_arch: &str, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let spec = format!("{package}:{deb_arch}");
        let Some(info) = self.show(&spec) else {
            return newest_cached(dir, &format!("{package}_"), deb_arch).with_context(|| {
                format!(
                    "apt knows no package {spec} and none is cached in {}",
                    dir.display()
                )
            });
        };
        let version = field(&info, "Version")
            .with_context(|| format!("apt-cache show {spec} printed no Version"))?;
        // As apt-get download names it: the epoch's ':' escaped.
        let deb = dir.join(format!(
            "{package}_{}_{}.deb",
            version.replace(':', "%3a"),
            field(&info, "Architecture").as_deref().unwrap_or(deb_arch)
        ));
        if deb.exists() {
            return Ok(deb);
        }
        let mut cmd = apt_get(&["download"]);
        if crate::is_root().unwrap_or(false) {
            // The cache is root's: apt's sandbox user could not write it (a harmless warning).
            cmd.args(["-o", "APT::Sandbox::User=root"]);
        }
        crate::cmd::run(cmd.arg(&spec).current_dir(dir))?;
        if !deb.exists() {
            return newest_cached(dir, &format!("{package}_"), deb_arch).with_context(|| {
                format!("apt-get download {spec} left no .deb in {}", dir.display())
            });
        }
        Ok(deb)
    }
}

/// A field of an `apt-cache show` stanza.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// The newest `.deb` in `dir` for `deb_arch` whose file name starts with `prefix`
/// (`NAME_` for a package, or a prefix such as `linux-image-`).
fn newest_cached(dir: &Path, prefix: &str, deb_arch: &str) -> Option<PathBuf> {
    let suffix = format!("_{deb_arch}.deb");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(prefix) && n.ends_with(&suffix)
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

/// Extracts the members of `deb` matching `pattern` (tar wildcards, e.g. `./boot/*`)
/// into `dir`, unless `marker` (inside `dir`) already exists.
pub fn extract(deb: &Path, dir: &Path, pattern: &str, marker: &Path) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_apt_cache_fields() {
        let info = "Package: linux-image-amd64\nVersion: 6.1.192-3\nSection: kernel\n\
                    Depends: linux-image-6.1.0-57-amd64 (= 6.1.192-3)\n\
                    Filename: pool/main/l/linux-signed-amd64/linux-image-amd64_6.1.192-3_amd64.deb\n";
        assert_eq!(field(info, "Version").as_deref(), Some("6.1.192-3"));
        assert_eq!(
            field(info, "Depends").as_deref(),
            Some("linux-image-6.1.0-57-amd64 (= 6.1.192-3)")
        );
        assert_eq!(field(info, "Missing"), None);
    }
}
