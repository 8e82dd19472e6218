//! Shipping the tracer: `cargo xtask install`/`uninstall`, `cargo xtask deb` and the
//! static binary (`cargo xtask build --release --static`).
//!
//! Install and the package lay out the same files (one list, [`files`]): the binary,
//! the man pages and the bash, zsh and fish completions, the last two rendered by the
//! binary itself (`tracer __generate`, from its clap definitions), so they describe
//! exactly the binary they ship with and the eBPF object is built once.
//!
//! The package is laid out by hand for `dpkg-deb` rather than by cargo-deb: dpkg-deb is
//! on every Debian machine, works offline, and the layout is the one `install` already
//! writes; cargo-deb would be one more tool to build from crates.io. Its dependencies
//! come from Debian's own `dpkg-shlibdeps` (dpkg-dev, installed when missing).
//!
//! A systemd unit (disabled by default) joins the files once `tracer serve` exists.

mod deb;
mod static_bin;

use std::{
    collections::BTreeSet,
    io::Write as _,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

pub use deb::{deb, prepare_e2e, DebArgs};
pub use static_bin::{build_static, static_target};

use crate::cmd;

/// Where install keeps the list of what it wrote, under the prefix.
const MANIFEST: &str = "share/tracer/install-manifest";

/// One file to install: its absolute path on the target system, contents and mode.
struct File {
    path: PathBuf,
    data: Vec<u8>,
    mode: u32,
}

/// Which layout: `install` into a prefix, or the Debian package (/usr, pages gzipped,
/// zsh's Debian directory, the docs Debian wants).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flavour {
    Install,
    Debian,
}

/// The files for `prefix`: binary, man pages, completions where each shell looks.
fn files(bin: &Path, prefix: &Path, flavour: Flavour) -> Result<Vec<File>> {
    let share = prefix.join("share");
    let mut files = vec![File {
        path: prefix.join("bin/tracer"),
        data: std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?,
        mode: 0o755,
    }];

    let pages = crate::target_dir()?.join("man");
    if pages.exists() {
        std::fs::remove_dir_all(&pages)
            .with_context(|| format!("cannot empty {}", pages.display()))?;
    }
    let listed = cmd::output(Command::new(bin).args(["__generate", "man"]).arg(&pages))?;
    for page in listed.lines() {
        let page = Path::new(page);
        let name = page.file_name().context("a man page without a name")?;
        let text =
            std::fs::read(page).with_context(|| format!("cannot read {}", page.display()))?;
        let (name, data) = match flavour {
            Flavour::Install => (name.to_string_lossy().into_owned(), text),
            Flavour::Debian => (format!("{}.gz", name.to_string_lossy()), gzip(&text)?),
        };
        files.push(File {
            path: share.join("man/man1").join(name),
            data,
            mode: 0o644,
        });
    }

    // bash-completion and fish read these directories under every XDG_DATA_DIRS entry
    // (/usr/local/share and /usr/share by default). zsh's fpath has
    // /usr/local/share/zsh/site-functions, and on Debian /usr/share/zsh/vendor-completions
    // for packages.
    let zsh = match flavour {
        Flavour::Debian => "zsh/vendor-completions/_tracer",
        Flavour::Install => "zsh/site-functions/_tracer",
    };
    for (shell, path) in [
        ("bash", "bash-completion/completions/tracer"),
        ("zsh", zsh),
        ("fish", "fish/vendor_completions.d/tracer.fish"),
    ] {
        let script = cmd::output(Command::new(bin).args(["__generate", "completion", shell]))?;
        files.push(File {
            path: share.join(path),
            data: script.into_bytes(),
            mode: 0o644,
        });
    }
    Ok(files)
}

/// gzip -9n: what Debian wants for man pages and docs (no name or time stamp inside,
/// so the package is reproducible).
fn gzip(data: &[u8]) -> Result<Vec<u8>> {
    let mut child = Command::new("gzip")
        .args(["-9n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start gzip: is it installed?")?;
    let mut stdin = child.stdin.take().context("gzip has no stdin")?;
    let input = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().context("gzip failed")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))?
        .context("cannot feed gzip")?;
    ensure!(out.status.success(), "gzip failed ({})", out.status);
    Ok(out.stdout)
}

/// `path` (absolute, on the target system) under `destdir`.
fn under(destdir: &Path, path: &Path) -> PathBuf {
    destdir.join(path.strip_prefix("/").unwrap_or(path))
}

/// Writes `files` under `destdir`, creating parents; returns the directories it created.
fn write_files(destdir: &Path, files: &[File]) -> Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    for f in files {
        let to = under(destdir, &f.path);
        let parent = to.parent().context("a file without a directory")?;
        let mut missing = Vec::new();
        let mut d = parent;
        while !d.exists() {
            missing.push(d.to_path_buf());
            d = d.parent().context("no existing ancestor")?;
        }
        std::fs::create_dir_all(parent).with_context(|| {
            format!(
                "cannot create {} (installing into a system prefix needs root: \
                 `sudo -E cargo xtask install`)",
                parent.display()
            )
        })?;
        for d in missing.iter().rev() {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
            created.push(d.clone());
        }
        // Write beside, then rename: a running tracer keeps its old file.
        let tmp = to.with_extension("xtask-new");
        std::fs::write(&tmp, &f.data).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(f.mode))?;
        std::fs::rename(&tmp, &to).with_context(|| format!("cannot replace {}", to.display()))?;
    }
    Ok(created)
}

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

    #[test]
    fn write_files_reports_the_directories_it_created() {
        let dest = std::env::temp_dir().join(format!("xtask-write-{}", std::process::id()));
        std::fs::create_dir_all(dest.join("usr")).unwrap();
        let files = [File {
            path: PathBuf::from("/usr/share/x/y"),
            data: b"y".to_vec(),
            mode: 0o644,
        }];
        let created = write_files(&dest, &files).unwrap();
        assert_eq!(created, [dest.join("usr/share"), dest.join("usr/share/x")]);
        assert_eq!(std::fs::read(dest.join("usr/share/x/y")).unwrap(), b"y");
        std::fs::remove_dir_all(&dest).unwrap();
    }
}
