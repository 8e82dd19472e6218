//! `cargo xtask deb`: the Debian package, laid out by hand for `dpkg-deb` (see the
//! module above for why), its control file, copyright and changelog, checked by lintian.

use std::{
    env,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context, Result};

use super::layout::{files, gzip, under, write_files, File, Flavour};
use crate::{cmd, provision};

/// The package's Debian version: the crate's, Debian revision 1.
fn deb_version() -> String {
    format!("{}-1", env!("CARGO_PKG_VERSION"))
}

#[derive(clap::Args, Debug)]
pub struct DebArgs {
    /// Also run lintian on the package (installed when missing) and fail on its errors
    /// and warnings.
    #[arg(long)]
    pub lintian: bool,
}

/// `cargo xtask deb`: builds the release binary and lays out the package for
/// `dpkg-deb`; returns the .deb's path.
pub fn deb(args: &DebArgs) -> Result<PathBuf> {
    provision::deb(false, args.lintian)?;
    let built = crate::build(true)?;
    let deb = build_deb(&built.bin)?;
    if args.lintian {
        lintian(&deb)?;
    }
    Ok(deb)
}

/// What tests/tests/install.rs needs, on a fresh machine too: man-db (man) and the package, built
/// and checked by lintian; returns the package's path.
pub fn prepare_e2e() -> Result<PathBuf> {
    provision::deb(true, true)?;
    let built = crate::build(true)?;
    let deb = build_deb(&built.bin)?;
    lintian(&deb)?;
    Ok(deb)
}

fn build_deb(bin: &Path) -> Result<PathBuf> {
    let arch = cmd::output(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_string();
    let version = deb_version();
    let work = crate::target_dir()?.join("deb");
    let root = work.join(format!("tracer_{version}_{arch}"));
    if root.exists() {
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("cannot empty {}", root.display()))?;
    }
    std::fs::create_dir_all(&root)?;

    // Debian ships binaries without symbols (lintian: unstripped-binary-or-object).
    let stripped = work.join("tracer.stripped");
    cmd::run(
        Command::new("strip")
            .args([
                "--remove-section=.comment",
                "--remove-section=.note",
                "--strip-unneeded",
                "-o",
            ])
            .arg(&stripped)
            .arg(bin),
    )?;
    let mut files = files(&stripped, Path::new("/usr"), Flavour::Debian)?;
    let doc = Path::new("/usr/share/doc/tracer");
    let readme = crate::workspace_root().join("README.md");
    files.push(File {
        path: doc.join("README.md.gz"),
        data: gzip(
            &std::fs::read(&readme).with_context(|| format!("cannot read {}", readme.display()))?,
        )?,
        mode: 0o644,
    });
    // `tracer serve` as a service, shipped disabled (no maintainer script enables it).
    let unit = crate::workspace_root().join("contrib/tracer.service");
    files.push(File {
        path: PathBuf::from("/usr/lib/systemd/system/tracer.service"),
        data: std::fs::read(&unit).with_context(|| format!("cannot read {}", unit.display()))?,
        mode: 0o644,
    });
    let maintainer = maintainer()?;
    files.push(File {
        path: doc.join("copyright"),
        data: copyright()?.into_bytes(),
        mode: 0o644,
    });
    files.push(File {
        path: doc.join("changelog.Debian.gz"),
        data: gzip(changelog(&version, &maintainer)?.as_bytes())?,
        mode: 0o644,
    });
    // Each override says why (lintian prints the comment with the tag).
    files.push(File {
        path: PathBuf::from("/usr/share/lintian/overrides/tracer"),
        data:
            b"# Built outside Debian's archive: there is no ITP bug for the first entry to close.\n\
                tracer: initial-upload-closes-no-bugs\n\
                # yaml-rust2 (tracer serve's web config) is pure Rust, not libyaml: lintian matches\n\
                # error strings the two parsers share.\n\
                tracer: embedded-library libyaml [usr/bin/tracer]\n"
                .to_vec(),
        mode: 0o644,
    });
    write_files(&root, &files)?;

    let depends = shlib_depends(&work, &under(&root, Path::new("/usr/bin/tracer")))?;
    let installed_kib: u64 = files
        .iter()
        .map(|f| (f.data.len() as u64).div_ceil(1024))
        .sum();
    let control = format!(
        "Package: tracer\n\
         Version: {version}\n\
         Architecture: {arch}\n\
         Maintainer: {maintainer}\n\
         Installed-Size: {installed_kib}\n\
         Depends: {depends}\n\
         Section: utils\n\
         Priority: optional\n\
         Description: Linux scheduling tracer on eBPF\n \
         Per-thread on-CPU time, run-queue latency and off-CPU time, with their\n \
         histograms, computed in the kernel at every context switch by eBPF\n \
         programs, joined with perf counters and, on pseries, the hypervisor's\n \
         dispatch statistics. Run it as root: sudo tracer run.\n"
    );
    let debian = root.join("DEBIAN");
    std::fs::create_dir_all(&debian)?;
    std::fs::write(debian.join("control"), control)?;
    let mut sums = String::new();
    for f in &files {
        let hex = cmd::output(Command::new("md5sum").arg(under(&root, &f.path)))?;
        let hash = hex.split_whitespace().next().unwrap_or_default();
        let rel = f.path.strip_prefix("/").unwrap_or(&f.path);
        sums.push_str(&format!("{hash}  {}\n", rel.display()));
    }
    std::fs::write(debian.join("md5sums"), sums)?;
    std::fs::set_permissions(&debian, std::fs::Permissions::from_mode(0o755))?;
    for f in ["control", "md5sums"] {
        std::fs::set_permissions(debian.join(f), std::fs::Permissions::from_mode(0o644))?;
    }
    let deb = work.join(format!("tracer_{version}_{arch}.deb"));
    cmd::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&root)
            .arg(&deb),
    )?;
    println!("xtask: built {}", deb.display());
    Ok(deb)
}

/// `Depends:` from Debian's own tool, which reads the binary's needed libraries and the
/// symbol versions it uses (the lowest libc6 that has them all). dpkg-shlibdeps wants a
/// debian/control in its working directory: a minimal one.
fn shlib_depends(work: &Path, bin: &Path) -> Result<String> {
    let dir = work.join("shlibdeps");
    std::fs::create_dir_all(dir.join("debian"))?;
    std::fs::write(
        dir.join("debian/control"),
        "Source: tracer\n\nPackage: tracer\nArchitecture: any\n",
    )?;
    let out = cmd::output(
        Command::new("dpkg-shlibdeps")
            .args(["-O", "-e"])
            .arg(bin)
            .current_dir(&dir),
    )?;
    let depends = out
        .lines()
        .find_map(|l| l.strip_prefix("shlibs:Depends="))
        .context("dpkg-shlibdeps printed no shlibs:Depends")?;
    Ok(depends.trim().to_string())
}

/// `Name <email>` from DEBFULLNAME/DEBEMAIL (as dch uses them), else git's user.
fn maintainer() -> Result<String> {
    let git = |key: &str| {
        cmd::output(
            Command::new("git")
                .args(["config", key])
                .current_dir(crate::workspace_root()),
        )
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
    };
    let name = env::var("DEBFULLNAME").ok().or_else(|| git("user.name"));
    let email = env::var("DEBEMAIL").ok().or_else(|| git("user.email"));
    match (name, email) {
        (Some(n), Some(e)) => Ok(format!("{n} <{e}>")),
        _ => bail!(
            "the package needs a maintainer: set DEBFULLNAME and DEBEMAIL (or git's user.name and user.email)"
        ),
    }
}

/// The changelog Debian wants: one entry naming the commit it was built from.
fn changelog(version: &str, maintainer: &str) -> Result<String> {
    let commit = cmd::output(
        Command::new("git")
            .args(["log", "-1", "--format=%h%n%aD", "--abbrev=12"])
            .current_dir(crate::workspace_root()),
    )
    .unwrap_or_default();
    let mut lines = commit.lines();
    let hash = lines.next().unwrap_or("an unknown commit").to_string();
    // The commit's date, not now: the same commit gives the same package.
    let date = lines
        .next()
        .map(str::to_string)
        .unwrap_or_else(|| "Thu, 01 Jan 1970 00:00:00 +0000".into());
    Ok(format!(
        "tracer ({version}) unstable; urgency=medium\n\n  \
         * Built by `cargo xtask deb` from commit {hash}.\n\n \
         -- {maintainer}  {date}\n"
    ))
}

/// debian/copyright in the machine-readable format: the workspace's licence (MIT OR
/// Apache-2.0), MIT in full, Apache-2.0 by reference to Debian's common licences.
fn copyright() -> Result<String> {
    let mit_path = crate::workspace_root().join("LICENSE-MIT");
    let mit = std::fs::read_to_string(&mit_path)
        .with_context(|| format!("cannot read {}", mit_path.display()))?;
    // The holder line of the MIT text, also the package's Copyright field.
    let holder = mit
        .lines()
        .find_map(|l| l.strip_prefix("Copyright (c) "))
        .with_context(|| format!("{} has no `Copyright (c)` line", mit_path.display()))?;
    let body: String = mit
        .lines()
        .map(|l| {
            if l.trim().is_empty() {
                " .\n".to_string()
            } else {
                format!(" {l}\n")
            }
        })
        .collect();
    Ok(format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: tracer\n\n\
         Files: *\n\
         Copyright: {holder}\n\
         License: MIT or Apache-2.0\n\n\
         License: MIT\n{body}\n\
         License: Apache-2.0\n \
         On Debian systems, the full text of the Apache License, Version 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n"
    ))
}

/// Runs lintian (`provision::deb` installs it) on `deb`; errors and warnings fail,
/// except the ones the package's overrides explain.
fn lintian(deb: &Path) -> Result<()> {
    let status = cmd::status(
        Command::new("lintian")
            .args(["--info", "--display-info", "--fail-on", "error,warning"])
            .arg(deb),
    )?;
    ensure!(
        status.success(),
        "lintian found problems in {}: see above",
        deb.display()
    );
    println!("xtask: lintian: no errors or warnings in {}", deb.display());
    Ok(())
}
