//! Debian packages: installed when missing (through `sudo -n` when not root), or only
//! downloaded for a guest of another architecture. One place, so every command refreshes
//! the lists the same way: when apt does not know a package, or when a fetch fails
//! (lists older than the mirror name versions it no longer serves), at most once a run.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
};

use anyhow::{Context, Result};

use crate::cmd;

/// A command that changes the system: as it is when root, else through `sudo -n`.
fn privileged(program: &str) -> Command {
    if crate::is_root().unwrap_or(false) {
        Command::new(program)
    } else {
        let mut c = Command::new("sudo");
        c.args(["-n", program]);
        c
    }
}

/// `apt-get -q ARGS`, non-interactive.
fn apt_get(args: &[&str]) -> Command {
    let mut c = privileged("apt-get");
    c.arg("-q")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive");
    c
}

/// Whether this run refreshed the lists (every `Apt` of the process shares it).
static UPDATED: AtomicBool = AtomicBool::new(false);

/// The package lists, refreshed at most once per run. A failure is not fatal: a mirror
/// often serves one index mid-sync (seen for bookworm-security's ppc64el index) while
/// the packages we need resolve from the others.
pub struct Apt;

impl Apt {
    pub fn new() -> Apt {
        Apt
    }

    /// Refreshes the lists unless this run did.
    fn update(&mut self) {
        if UPDATED.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Err(e) = cmd::run(&mut apt_get(&["update"])) {
            println!("xtask: warning: {e:#}; going on with the lists apt has");
        }
    }

    /// Runs a fetch (`apt-get install` or `download`); where it fails on lists this run
    /// has not refreshed, refreshes them and runs it once more, saying so. A machine's
    /// image can carry lists months old whose versions the mirror has dropped (seen
    /// 2026-12-05: bookworm-security's bpftool 7.1.0+6.1.172-1, 404).
    fn fetch<T>(&mut self, what: &str, mut run: impl FnMut(&mut Apt) -> Result<T>) -> Result<T> {
        match run(self) {
            Ok(v) => Ok(v),
            Err(e) if !UPDATED.load(Ordering::Relaxed) => {
                println!("xtask: {what} failed ({e:#}); refreshing the package lists and trying once more");
                self.update();
                run(self)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether apt has a candidate for `package` in its current lists.
    fn knows(package: &str) -> bool {
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
        let what = format!("installing {}", missing.join(" "));
        self.fetch(&what, |_| cmd::run(&mut apt_get(&args)))
            .with_context(|| format!("{what} (needs root or passwordless sudo)"))
    }

    /// Installs those of `packages` that dpkg does not have; an error names what is still
    /// missing after.
    pub fn ensure(&mut self, why: &str, packages: &[&str]) -> Result<()> {
        let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        println!("xtask: installing {} ({why})", missing.join(" "));
        self.install(&missing)?;
        let still: Vec<&str> = missing.into_iter().filter(|p| !installed(p)).collect();
        anyhow::ensure!(still.is_empty(), "still not installed: {}", still.join(" "));
        Ok(())
    }

    /// Installs the packages still missing, each given with what proves it is there: a
    /// program that runs with `--version`, or an absolute path that exists.
    pub fn install_missing(&mut self, wanted: &[(&str, &str)]) -> Result<()> {
        let mut missing: Vec<&str> = Vec::new();
        for (proof, pkg) in wanted {
            if !present(proof) && !missing.contains(pkg) {
                missing.push(pkg);
            }
        }
        self.install(&missing)
    }

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
        // The new architecture's lists are needed even where this run refreshed once.
        UPDATED.store(false, Ordering::Relaxed);
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
        self.fetch(&format!("downloading {package}:{deb_arch}"), |apt| {
            apt.download_once(package, deb_arch, dir)
        })
    }

    /// `download` on the lists as they are.
    fn download_once(&mut self, package: &str, deb_arch: &str, dir: &Path) -> Result<PathBuf> {
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

/// Whether dpkg has `pkg` installed.
pub fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// A program that runs with `--version` (found on PATH), or an existing file (an
/// absolute path).
pub fn present(proof: &str) -> bool {
    if proof.starts_with('/') {
        Path::new(proof).exists()
    } else {
        cmd::succeeds(Command::new(proof).arg("--version"))
    }
}

/// A program `name` on PATH (or in /usr/sbin, where Debian puts libbpf-tools).
pub fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
        || Path::new("/usr/sbin").join(name).is_file()
}

/// An executable called `name` that `pkg` installed, else `name` on PATH.
pub fn binary(pkg: &str, name: &str) -> Result<PathBuf> {
    let listed = Command::new("dpkg")
        .args(["-L", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let suffix = format!("/{name}");
    if let Some(p) = listed
        .lines()
        .filter(|l| l.ends_with(&suffix))
        .map(PathBuf::from)
        .find(|p| p.is_file())
    {
        return Ok(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("no {name} (package {pkg}) found"))
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A field of an `apt-cache show` stanza.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// The newest `.deb` in `dir` for `deb_arch` whose file name starts with `prefix`
/// (`NAME_` for a package, or a prefix such as `linux-image-`).
pub(super) fn newest_cached(dir: &Path, prefix: &str, deb_arch: &str) -> Option<PathBuf> {
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
