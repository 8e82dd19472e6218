//! The files `install` and the Debian package both lay out (one list, [`files`]): the
//! binary, the man pages and the completions, rendered by the binary itself.

use std::{
    io::Write as _,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

use crate::cmd;

/// One file to install: its absolute path on the target system, contents and mode.
pub(super) struct File {
    pub(super) path: PathBuf,
    pub(super) data: Vec<u8>,
    pub(super) mode: u32,
}

/// Which layout: `install` into a prefix, or the Debian package (/usr, pages gzipped,
/// zsh's Debian directory, the docs Debian wants).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Flavour {
    Install,
    Debian,
}

/// The files for `prefix`: binary, man pages, completions where each shell looks.
pub(super) fn files(bin: &Path, prefix: &Path, flavour: Flavour) -> Result<Vec<File>> {
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
pub(super) fn gzip(data: &[u8]) -> Result<Vec<u8>> {
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
pub(super) fn under(destdir: &Path, path: &Path) -> PathBuf {
    destdir.join(path.strip_prefix("/").unwrap_or(path))
}

/// Writes `files` under `destdir`, creating parents; returns the directories it created.
pub(super) fn write_files(destdir: &Path, files: &[File]) -> Result<Vec<PathBuf>> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
