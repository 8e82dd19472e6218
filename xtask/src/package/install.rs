//! `cargo xtask install` and `uninstall`: the files of [`super::layout`] under a prefix,
//! and a manifest of what was written, so uninstall removes exactly that.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use anyhow::{ensure, Context, Result};

use super::layout::{files, under, write_files, File, Flavour};
use super::static_bin::build_static;

/// Where install keeps the list of what it wrote, under the prefix.
const MANIFEST: &str = "share/tracer/install-manifest";

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Installation prefix: the binary goes to PREFIX/bin, pages and completions to
    /// PREFIX/share.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// Stage everything under DIR (as packagers do); the manifest lists the paths
    /// without DIR.
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
    /// Install the static (musl) binary instead of the glibc one.
    #[arg(long = "static")]
    pub static_bin: bool,
}

fn check_prefix(prefix: &Path) -> Result<()> {
    ensure!(
        prefix.is_absolute(),
        "--prefix {} must be an absolute path",
        prefix.display()
    );
    Ok(())
}

/// `cargo xtask install`: builds the release binary and writes the files, then a
/// manifest of every file and directory it created, for `uninstall`.
pub fn install(args: &InstallArgs) -> Result<()> {
    check_prefix(&args.prefix)?;
    let bin = if args.static_bin {
        build_static(true)?
    } else {
        crate::build(true)?.bin
    };
    let destdir = args.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let mut files = files(&bin, &args.prefix, Flavour::Install)?;
    let manifest = args.prefix.join(MANIFEST);
    // Directories an earlier install created stay ours to remove.
    let mut dirs: BTreeSet<PathBuf> = read_manifest(&under(&destdir, &manifest))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(kind, p)| (kind == "dir").then_some(p))
        .collect();
    // The manifest's own directory is created with the other files.
    files.push(File {
        path: manifest.clone(),
        data: Vec::new(),
        mode: 0o644,
    });
    let created = write_files(&destdir, &files)?;
    let strip =
        |d: &Path| -> PathBuf { Path::new("/").join(d.strip_prefix(&destdir).unwrap_or(d)) };
    dirs.extend(created.iter().map(|d| strip(d)));
    let mut text = String::from(
        "# Written by `cargo xtask install`; `cargo xtask uninstall` removes these.\n",
    );
    for f in &files {
        text.push_str(&format!("file {}\n", f.path.display()));
    }
    for d in &dirs {
        text.push_str(&format!("dir {}\n", d.display()));
    }
    let at = under(&destdir, &manifest);
    std::fs::write(&at, text).with_context(|| format!("cannot write {}", at.display()))?;
    for f in &files {
        println!("xtask: installed {}", under(&destdir, &f.path).display());
    }
    Ok(())
}

/// The manifest's entries: ("file" | "dir", path).
fn read_manifest(path: &Path) -> Result<Vec<(String, PathBuf)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (kind, p) = line
            .split_once(' ')
            .filter(|(k, p)| (*k == "file" || *k == "dir") && p.starts_with('/'))
            .with_context(|| {
                format!(
                    "{}:{}: expected `file PATH` or `dir PATH`",
                    path.display(),
                    n + 1
                )
            })?;
        out.push((kind.to_string(), PathBuf::from(p)));
    }
    Ok(out)
}

#[derive(clap::Args, Debug)]
pub struct UninstallArgs {
    /// The prefix given to install.
    #[arg(long, default_value = "/usr/local")]
    pub prefix: PathBuf,
    /// The DESTDIR given to install.
    #[arg(long, value_name = "DIR")]
    pub destdir: Option<PathBuf>,
}

/// `cargo xtask uninstall`: removes the files in install's manifest, then the
/// directories install created, when they are empty.
pub fn uninstall(args: &UninstallArgs) -> Result<()> {
    check_prefix(&args.prefix)?;
    let destdir = args.destdir.clone().unwrap_or_else(|| PathBuf::from("/"));
    let manifest = under(&destdir, &args.prefix.join(MANIFEST));
    let entries = read_manifest(&manifest).with_context(|| {
        format!(
            "nothing to uninstall: no manifest of `cargo xtask install --prefix {}`",
            args.prefix.display()
        )
    })?;
    let mut dirs = Vec::new();
    for (kind, p) in entries {
        let at = under(&destdir, &p);
        if kind == "dir" {
            dirs.push(at);
            continue;
        }
        match std::fs::remove_file(&at) {
            Ok(()) => println!("xtask: removed {}", at.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                println!("xtask: {} was already gone", at.display())
            }
            Err(e) => return Err(e).with_context(|| format!("cannot remove {}", at.display())),
        }
    }
    // Deepest first, so a parent is empty once its children are gone.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in dirs {
        match std::fs::remove_dir(&d) {
            Ok(()) => println!("xtask: removed {}/", d.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Something else lives there now: it stays.
            Err(_) => println!("xtask: kept {}/: not empty", d.display()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_lines_are_checked() {
        let dir = std::env::temp_dir().join(format!("xtask-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m");
        std::fs::write(
            &path,
            "# comment\nfile /usr/bin/tracer\ndir /usr/share/tracer\n",
        )
        .unwrap();
        let entries = read_manifest(&path).unwrap();
        assert_eq!(
            entries,
            [
                ("file".to_string(), PathBuf::from("/usr/bin/tracer")),
                ("dir".to_string(), PathBuf::from("/usr/share/tracer")),
            ]
        );
        // A relative path would be removed relative to wherever uninstall runs.
        for bad in ["file usr/bin/tracer\n", "rm /usr/bin/tracer\n", "file\n"] {
            std::fs::write(&path, bad).unwrap();
            let e = read_manifest(&path).unwrap_err().to_string();
            assert!(e.contains(":1: expected"), "{bad:?}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
