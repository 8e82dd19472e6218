//! The guest's initramfs: an uncompressed cpio archive (newc format) written directly, so
//! it needs no root (the `/dev/console` node) and no staging directory. Binaries go in
//! stripped, with the shared libraries they link found by reading DT_NEEDED.

use std::{
    collections::BTreeSet,
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use crate::elf;

/// A cpio newc archive being written.
pub struct Cpio {
    out: BufWriter<File>,
    ino: u32,
    /// Directories already in the archive.
    dirs: BTreeSet<String>,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Cpio {
    pub fn create(path: &Path) -> Result<Cpio> {
        let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Cpio {
            out: BufWriter::new(f),
            ino: 1,
            dirs: BTreeSet::new(),
        })
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) -> Result<()> {
        let name = name.trim_start_matches('/');
        let size = u32::try_from(data.len()).context("file too large for cpio")?;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            if mode & S_IFDIR != 0 { 2 } else { 1 },
            0,
            size,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(header.len() + name.len() + 1)?;
        self.out.write_all(data)?;
        self.pad(data.len())?;
        Ok(())
    }

    fn pad(&mut self, len: usize) -> Result<()> {
        let n = (4 - len % 4) % 4;
        self.out.write_all(&[0; 3][..n])?;
        Ok(())
    }

    /// A directory and its parents (each once).
    pub fn dir(&mut self, path: &str) -> Result<()> {
        let path = path.trim_matches('/');
        let mut so_far = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            if !so_far.is_empty() {
                so_far.push('/');
            }
            so_far.push_str(part);
            if self.dirs.insert(so_far.clone()) {
                let name = so_far.clone();
                self.entry(&name, S_IFDIR | 0o755, (0, 0), &[])?;
            }
        }
        Ok(())
    }

    fn parent(&mut self, path: &str) -> Result<()> {
        if let Some((dir, _)) = path.trim_start_matches('/').rsplit_once('/') {
            self.dir(dir)?;
        }
        Ok(())
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<()> {
        self.parent(path)?;
        self.entry(path, S_IFREG | mode, (0, 0), data)
    }

    /// A file copied from the host (symlinks followed).
    pub fn copy(&mut self, path: &str, mode: u32, from: &Path) -> Result<()> {
        let data =
            std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
        self.file(path, mode, &data)
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        self.parent(path)?;
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes())
    }

    pub fn char_dev(&mut self, path: &str, mode: u32, major: u32, minor: u32) -> Result<()> {
        self.parent(path)?;
        self.entry(path, S_IFCHR | mode, (major, minor), &[])
    }

    pub fn finish(mut self) -> Result<()> {
        self.entry("TRAILER!!!", 0, (0, 0), &[])?;
        self.out.flush()?;
        Ok(())
    }
}

/// Copies `bin` to `to` without its symbols (`strip_tool`), or as it is when the tool is
/// missing: the debug binaries are ten times smaller stripped.
pub fn stripped(bin: &Path, to: &Path, strip_tool: &str) -> Result<PathBuf> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let ok = Command::new(strip_tool)
        .arg("-o")
        .arg(to)
        .arg(bin)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        println!(
            "vm-test: `{strip_tool}` failed or is missing: packing {} unstripped",
            bin.display()
        );
        std::fs::copy(bin, to).with_context(|| format!("cannot copy {}", bin.display()))?;
    }
    Ok(to.to_path_buf())
}

/// The shared libraries `bins` need, transitively, found in `lib_dirs`: (soname, host path).
pub fn needed_libraries(bins: &[&Path], lib_dirs: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    let mut todo: Vec<String> = Vec::new();
    for bin in bins {
        todo.extend(elf::needed_libraries(bin)?);
    }
    while let Some(lib) = todo.pop() {
        if found.iter().any(|(n, _)| *n == lib) {
            continue;
        }
        let Some(path) = lib_dirs.iter().map(|d| d.join(&lib)).find(|p| p.exists()) else {
            bail!(
                "{lib}, needed by the guest's binaries, is in none of {}",
                lib_dirs
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        todo.extend(elf::needed_libraries(&path)?);
        found.push((lib, path));
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_newc_entries_aligned_with_a_trailer() {
        let dir = std::env::temp_dir().join(format!("vmtest-cpio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.cpio");
        let mut c = Cpio::create(&path).unwrap();
        c.file("/bin/x", 0o755, b"hello").unwrap();
        c.symlink("/lib64", "lib").unwrap();
        c.char_dev("/dev/console", 0o600, 5, 1).unwrap();
        c.finish().unwrap();
        let data = std::fs::read(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(data.len() % 4, 0);
        let text = String::from_utf8_lossy(&data);
        // bin (dir), bin/x, lib64, dev (dir), dev/console, trailer.
        assert_eq!(text.matches("070701").count(), 6);
        assert!(text.contains("bin/x\0"));
        assert!(text.contains("hello"));
        assert!(text.contains("TRAILER!!!\0"));
        // The console: mode 020600, rdev 5:1.
        let at = text.find("dev/console").unwrap();
        let header = &text[at - 110..at];
        assert_eq!(&header[14..22], "00002180");
        assert_eq!(&header[78..86], "00000005");
        assert_eq!(&header[86..94], "00000001");
    }
}
